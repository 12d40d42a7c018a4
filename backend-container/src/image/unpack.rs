//! Applies one layer (a tar stream) to a root directory being built: entries
//! are made only inside the root, whiteouts remove what lower layers made.
//!
//! The root is this process's own staging directory, written by nothing else,
//! so what is checked stays true while the layer is applied. The rules:
//!
//! * a path is taken relative to the root; `..` anywhere is refused;
//! * every directory on the way to an entry must be a real directory: a
//!   symbolic link there (one the image made) is refused, never followed, so
//!   no entry, whiteout or hard link reaches out of the root;
//! * `.wh.NAME` removes `NAME` of the lower layers, `.wh..wh..opq` everything
//!   the lower layers put in its directory (what this layer made stays);
//! * a hard link must name a regular file already in the root;
//! * set-user-id and set-group-id bits are dropped (nothing in a run gains a
//!   privilege by exec: it runs with `no_new_privs` on a `nosuid` root), and
//!   device nodes and FIFOs are skipped (the runtime makes the devices a
//!   container has) and counted.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use tar::EntryType;

use super::ImageError;

/// The name that makes its directory opaque.
const OPAQUE: &str = ".wh..wh..opq";
/// The prefix of a whiteout.
const WHITEOUT: &str = ".wh.";

/// Applies the layer `reader` (an uncompressed tar stream) to `root`. `layer`
/// names it in errors. Returns how many device nodes and FIFOs were skipped.
pub(crate) fn apply(root: &Path, reader: impl Read, layer: &str) -> Result<u64, ImageError> {
    let mut applier = Applier {
        root,
        layer,
        made: HashSet::new(),
        skipped: 0,
    };
    let mut archive = tar::Archive::new(reader);
    let entries = archive
        .entries()
        .map_err(|source| applier.unpack_error("(the archive)", source))?;
    for entry in entries {
        let entry = entry.map_err(|source| applier.unpack_error("(an entry header)", source))?;
        applier.entry(entry)?;
    }
    Ok(applier.skipped)
}

struct Applier<'a> {
    root: &'a Path,
    layer: &'a str,
    /// What this layer made (relative paths): whiteouts spare them.
    made: HashSet<PathBuf>,
    skipped: u64,
}

impl Applier<'_> {
    fn entry<R: Read>(&mut self, mut entry: tar::Entry<'_, R>) -> Result<(), ImageError> {
        let raw = entry
            .path()
            .map_err(|source| self.unpack_error("(an entry's path)", source))?
            .into_owned();
        let shown = raw.to_string_lossy().into_owned();
        let rel = relative(&raw).map_err(|reason| self.malformed(&shown, reason))?;
        let Some(name) = rel.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return Ok(()); // the root itself (`./`)
        };
        let parent = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        if name == OPAQUE {
            return self.opaque(&parent, &shown);
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT) {
            return self.whiteout(&parent.join(hidden), &shown);
        }
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().unwrap_or(0o644) & 0o1777;
        let dir = self.make_dirs(&parent, &shown)?;
        let at = dir.join(rel.file_name().unwrap_or_default());
        match kind {
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                self.skipped += 1;
                return Ok(());
            }
            EntryType::Directory
            | EntryType::Regular
            | EntryType::Continuous
            | EntryType::Symlink
            | EntryType::Link => {}
            other => {
                return Err(self.malformed(
                    &shown,
                    format!("is a {other:?} entry, which is not unpacked"),
                ));
            }
        }
        self.clear(&at, kind.is_dir(), &shown)?;
        let wrap = |source| self.unpack_error(&shown, source);
        match kind {
            EntryType::Directory => {
                if !at.is_dir() {
                    fs::create_dir(&at).map_err(wrap)?;
                }
                fs::set_permissions(&at, fs::Permissions::from_mode(mode)).map_err(wrap)?;
            }
            EntryType::Symlink => {
                let target = entry.link_name().map_err(wrap)?.ok_or_else(|| {
                    self.malformed(&shown, "is a symbolic link without a target".into())
                })?;
                // Made, never followed here: it is resolved inside the container.
                std::os::unix::fs::symlink(&target, &at).map_err(wrap)?;
            }
            EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(wrap)?
                    .ok_or_else(|| {
                        self.malformed(&shown, "is a hard link without a target".into())
                    })?
                    .into_owned();
                let source = self.existing_file(&target, &shown)?;
                fs::hard_link(&source, &at).map_err(wrap)?;
            }
            _ => {
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&at)
                    .map_err(wrap)?;
                io::copy(&mut entry, &mut file).map_err(wrap)?;
                file.set_permissions(fs::Permissions::from_mode(mode))
                    .map_err(wrap)?;
            }
        }
        self.made.insert(rel);
        Ok(())
    }

    /// `.wh..wh..opq` in `dir`: removes what lower layers put there.
    fn opaque(&mut self, dir: &Path, shown: &str) -> Result<(), ImageError> {
        let Some(host) = self.existing_dir(dir, shown)? else {
            return Ok(());
        };
        let children = fs::read_dir(&host).map_err(|source| self.unpack_error(shown, source))?;
        for child in children {
            let child = child.map_err(|source| self.unpack_error(shown, source))?;
            let rel = dir.join(child.file_name());
            if !self.made_at_or_below(&rel) {
                remove(&child.path()).map_err(|source| self.unpack_error(shown, source))?;
            }
        }
        Ok(())
    }

    /// `.wh.NAME`: removes `NAME` of the lower layers.
    fn whiteout(&mut self, rel: &Path, shown: &str) -> Result<(), ImageError> {
        let parent = rel.parent().unwrap_or(Path::new(""));
        let Some(host) = self.existing_dir(parent, shown)? else {
            return Ok(());
        };
        if self.made_at_or_below(rel) {
            return Err(self.malformed(shown, "hides an entry of its own layer".into()));
        }
        let at = host.join(rel.file_name().unwrap_or_default());
        match fs::symlink_metadata(&at) {
            Ok(_) => remove(&at).map_err(|source| self.unpack_error(shown, source)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(self.unpack_error(shown, source)),
        }
    }

    fn made_at_or_below(&self, rel: &Path) -> bool {
        self.made.iter().any(|made| made.starts_with(rel))
    }

    /// The host path of directory `rel`, made where missing (mode 0755); a
    /// component that is a symbolic link or not a directory is refused.
    fn make_dirs(&self, rel: &Path, shown: &str) -> Result<PathBuf, ImageError> {
        self.walk(rel, true, shown)?
            .ok_or_else(|| self.malformed(shown, "lies under what is not a directory".into()))
    }

    /// The host path of directory `rel` if it exists (`None` if it does not);
    /// a symbolic link on the way is refused.
    fn existing_dir(&self, rel: &Path, shown: &str) -> Result<Option<PathBuf>, ImageError> {
        self.walk(rel, false, shown)
    }

    /// Walks from the root to directory `rel` one component at a time, never
    /// through a symbolic link (refused); a missing directory is made when
    /// `make`, else the walk ends with `None`, as it does at a component that
    /// is not a directory (refused when `make`).
    fn walk(&self, rel: &Path, make: bool, shown: &str) -> Result<Option<PathBuf>, ImageError> {
        let mut at = self.root.to_path_buf();
        for component in rel.components() {
            at.push(component);
            match fs::symlink_metadata(&at) {
                Ok(meta) if meta.is_dir() => {}
                Ok(meta) if meta.file_type().is_symlink() => {
                    return Err(self.through_link(shown, &at));
                }
                Ok(_) if make => {
                    return Err(self.malformed(
                        shown,
                        format!("lies under {}, which is not a directory", self.inside(&at)),
                    ));
                }
                Ok(_) => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::NotFound && make => {
                    fs::create_dir(&at).map_err(|source| self.unpack_error(shown, source))?;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(source) => return Err(self.unpack_error(shown, source)),
            }
        }
        Ok(Some(at))
    }

    /// The host path of the regular file a hard link names.
    fn existing_file(&self, target: &Path, shown: &str) -> Result<PathBuf, ImageError> {
        let rel = relative(target).map_err(|reason| {
            self.malformed(shown, format!("links to {}: {reason}", target.display()))
        })?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        let dir = self.existing_dir(parent, shown)?;
        let at = dir.map(|dir| dir.join(rel.file_name().unwrap_or_default()));
        match at.as_ref().map(fs::symlink_metadata) {
            Some(Ok(meta)) if meta.is_file() => Ok(at.unwrap_or_default()),
            _ => Err(self.malformed(
                shown,
                format!(
                    "links to {}, which is not a regular file of the image",
                    target.display()
                ),
            )),
        }
    }

    /// Makes room at `at` for a new entry: what is there goes, but for a
    /// directory where a directory comes (its contents stay, as layers merge).
    fn clear(&self, at: &Path, dir_comes: bool, shown: &str) -> Result<(), ImageError> {
        match fs::symlink_metadata(at) {
            Ok(meta) if meta.is_dir() && dir_comes => Ok(()),
            Ok(_) => remove(at).map_err(|source| self.unpack_error(shown, source)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(self.unpack_error(shown, source)),
        }
    }

    fn inside(&self, at: &Path) -> String {
        format!("/{}", at.strip_prefix(self.root).unwrap_or(at).display())
    }

    fn through_link(&self, shown: &str, at: &Path) -> ImageError {
        self.malformed(
            shown,
            format!(
                "lies under {}, a symbolic link (never followed while unpacking)",
                self.inside(at)
            ),
        )
    }

    fn malformed(&self, entry: &str, reason: String) -> ImageError {
        ImageError::MalformedLayer {
            layer: self.layer.to_owned(),
            entry: entry.to_owned(),
            reason,
        }
    }

    fn unpack_error(&self, entry: &str, source: io::Error) -> ImageError {
        ImageError::Unpack {
            layer: self.layer.to_owned(),
            entry: entry.to_owned(),
            source,
        }
    }
}

/// `path` relative to the root: `/` and `.` dropped, `..` refused.
fn relative(path: &Path) -> Result<PathBuf, String> {
    let mut rel = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => return Err("climbs out of the root with '..'".into()),
            Component::Prefix(_) => return Err("has a path prefix".into()),
        }
    }
    Ok(rel)
}

/// Removes `at` without following a link: a directory with its contents.
fn remove(at: &Path) -> io::Result<()> {
    if fs::symlink_metadata(at)?.is_dir() {
        fs::remove_dir_all(at)
    } else {
        fs::remove_file(at)
    }
}
