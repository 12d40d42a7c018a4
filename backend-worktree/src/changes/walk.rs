//! Walking a workspace's files as plain data, and reading one of them back.
//!
//! Everything goes through a [`cap_std::fs::Dir`] opened on the workspace root, one
//! path component at a time: an entry is first examined with `symlink_metadata`
//! (never followed), a symlink is recorded as a link (its target text read with
//! `readlink`, never resolved), and a file or directory that is opened afterwards
//! must be the very inode that was examined (device and inode compared), so an
//! entry swapped for a link between the two steps is refused instead of read
//! through. cap-std additionally refuses any resolution that would leave the root.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, Metadata, MetadataExt, PermissionsExt};

use workspace_core::boundary::{ChangeKind, NotInPatch};

use super::filter::PathFilter;
use super::limits::ContentBudget;
use super::uncarried::{Uncarried, shown_path};
use super::{ChangesError, Entry, MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK};

/// Walks `workspace` and returns every regular file and symlink not left out by
/// `filter`, keyed by its `/`-separated path relative to the root, with its git mode
/// and blob id. `.git` directories are never entered; empty directories yield
/// nothing. A name that is not UTF-8 is [`ChangesError::NonUtf8Path`]; use
/// [`walk_workspace_recording`] to have it (and nested repositories) recorded.
///
/// # Ambient authority
/// `workspace` is a host path, opened as given; nothing outside it is reached.
pub fn walk_workspace(
    workspace: &Path,
    filter: &PathFilter,
) -> Result<BTreeMap<String, Entry>, ChangesError> {
    let walked = walk_workspace_recording(workspace, filter)?;
    match walked
        .uncarried
        .iter()
        .find(|u| u.reason == NotInPatch::NotUtf8)
    {
        Some(found) => Err(ChangesError::NonUtf8Path {
            path: workspace.join(&found.path),
        }),
        None => Ok(walked.entries),
    }
}

/// What [`walk_workspace_recording`] found.
#[derive(Debug, Default)]
pub struct Walked {
    /// Every regular file and symlink a patch can name, by path.
    pub entries: BTreeMap<String, Entry>,
    /// What is there but cannot be named in a patch: an entry whose name is not
    /// UTF-8 (a directory is one entry: nothing below it is read), and a `.git`
    /// below the root (a nested repository), each an addition.
    pub uncarried: Vec<Uncarried>,
}

/// [`walk_workspace`], recording instead of refusing what a patch cannot name
/// ([`Walked::uncarried`]). The root's own `.git` is left out without a record
/// (it is the checkout's repository), and so is anything `filter` leaves out.
///
/// # Ambient authority
/// `workspace` is a host path, opened as given; nothing outside it is reached.
pub fn walk_workspace_recording(
    workspace: &Path,
    filter: &PathFilter,
) -> Result<Walked, ChangesError> {
    let root = open_root(workspace)?;
    let mut out = Walked::default();
    let mut stack = vec![(root, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for name in sorted_names(&dir, workspace, &prefix)? {
            let Some(text) = name.to_str() else {
                // The patch names paths as UTF-8 text: record it, read nothing.
                let meta = dir
                    .symlink_metadata(&name)
                    .map_err(|source| io("inspect", workspace, &prefix, source))?;
                let kind = meta.file_type();
                if kind.is_dir() || kind.is_file() || kind.is_symlink() {
                    out.uncarried.push(Uncarried {
                        path: shown_path(&prefix, &name),
                        kind: ChangeKind::Added,
                        reason: NotInPatch::NotUtf8,
                    });
                }
                continue;
            };
            let rel = if prefix.is_empty() {
                text.to_owned()
            } else {
                format!("{prefix}/{text}")
            };
            if text == ".git" && !prefix.is_empty() && !filter.excludes(&rel) {
                // git leaves a nested repository's files out of the parent's
                // tree; the change is still recorded.
                out.uncarried.push(Uncarried {
                    path: rel,
                    kind: ChangeKind::Added,
                    reason: NotInPatch::NestedRepository,
                });
                continue;
            }
            if filter.skips_entry(&rel) {
                continue;
            }
            let meta = dir
                .symlink_metadata(&name)
                .map_err(|source| io("inspect", workspace, &rel, source))?;
            let kind = meta.file_type();
            if kind.is_dir() {
                let sub = dir
                    .open_dir(&name)
                    .map_err(|source| io("open directory", workspace, &rel, source))?;
                let opened = sub
                    .dir_metadata()
                    .map_err(|source| io("inspect", workspace, &rel, source))?;
                same_inode(&meta, &opened, &rel)?;
                stack.push((sub, rel));
            } else if kind.is_symlink() {
                let target = read_link(&dir, &name, workspace, &rel)?;
                let id = blob_id(&mut target.as_slice(), target.len() as u64, &rel)?;
                out.entries.insert(rel, Entry::new(MODE_SYMLINK, id));
            } else if kind.is_file() {
                let mut file = open_file(&dir, &name, &meta, workspace, &rel)?;
                let id = blob_id(&mut file, meta.len(), &rel)?;
                out.entries.insert(rel, Entry::new(file_mode(&meta), id));
            } else {
                // A fifo, socket or device cannot be recorded by git (a test
                // database's unix socket, say): like git, leave it out.
                tracing::debug!(path = %rel, "special file left out of the comparison");
            }
        }
    }
    out.uncarried.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Reads the content git records for `path` in `workspace` (a file's bytes, or a
/// symlink's target text) without following any symlink, and checks that it is
/// still `expected`, the entry the walk recorded. The content is capped at
/// [`MAX_CONTENT_BYTES`](super::MAX_CONTENT_BYTES).
///
/// # Ambient authority
/// `workspace` is a host path, opened as given; nothing outside it is reached.
pub fn read_entry(workspace: &Path, path: &str, expected: &Entry) -> Result<Vec<u8>, ChangesError> {
    read_entry_within(workspace, path, expected, &mut ContentBudget::default())
}

/// [`read_entry`], charging the content to `budget` (its per-file and total limits).
///
/// # Ambient authority
/// `workspace` is a host path, opened as given; nothing outside it is reached.
pub fn read_entry_within(
    workspace: &Path,
    path: &str,
    expected: &Entry,
    budget: &mut ContentBudget,
) -> Result<Vec<u8>, ChangesError> {
    match read_current_within(workspace, path, budget)? {
        Some((entry, content))
            if entry.id == expected.id && entry.is_symlink() == expected.is_symlink() =>
        {
            Ok(content)
        }
        Some((entry, _)) => Err(ChangesError::ChangedDuringRead {
            path: path.into(),
            expected: expected.id,
            actual: entry.id,
        }),
        None => Err(ChangesError::NotAFile { path: path.into() }),
    }
}

/// The entry at `path` in `workspace` now, with its content (a file's bytes or a
/// symlink's target text), or `None` when no file or symlink is there (nothing, or a
/// directory). Directories on the way are entered one component at a time and never
/// through a symlink. The content is capped at
/// [`MAX_CONTENT_BYTES`](super::MAX_CONTENT_BYTES).
///
/// # Ambient authority
/// `workspace` is a host path, opened as given; nothing outside it is reached.
pub fn read_current(
    workspace: &Path,
    path: &str,
) -> Result<Option<(Entry, Vec<u8>)>, ChangesError> {
    read_current_within(workspace, path, &mut ContentBudget::default())
}

/// [`read_current`], charging the content to `budget`: a file larger than its
/// per-file limit (by its metadata, or by what the read finds when it grew) is
/// [`ChangesError::TooLarge`], and one that would bring the total over its limit
/// [`ChangesError::TotalTooLarge`], before more than the limit is read.
///
/// # Ambient authority
/// `workspace` is a host path, opened as given; nothing outside it is reached.
pub fn read_current_within(
    workspace: &Path,
    path: &str,
    budget: &mut ContentBudget,
) -> Result<Option<(Entry, Vec<u8>)>, ChangesError> {
    let (mode, content) = match open_current(workspace, path)? {
        None => return Ok(None),
        Some(Current::Link(target)) => {
            budget.charge(path, target.len() as u64)?;
            (MODE_SYMLINK, target)
        }
        Some(Current::File(file, meta)) => {
            budget.check(path, meta.len())?;
            let limit = budget.limits().per_file;
            let mut content = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
            file.take(limit.saturating_add(1))
                .read_to_end(&mut content)
                .map_err(|source| io("read", workspace, path, source))?;
            budget.charge(path, content.len() as u64)?;
            (file_mode(&meta), content)
        }
    };
    let id = blob_id(&mut content.as_slice(), content.len() as u64, path)?;
    Ok(Some((Entry::new(mode, id), content)))
}

/// The entry at `path` in `workspace` now (its blob id hashed as a stream, without
/// holding the content), or `None` when no file or symlink is there. Like
/// [`read_current`], nothing is followed.
///
/// # Ambient authority
/// `workspace` is a host path, opened as given; nothing outside it is reached.
pub fn current_entry(workspace: &Path, path: &str) -> Result<Option<Entry>, ChangesError> {
    Ok(match open_current(workspace, path)? {
        None => None,
        Some(Current::Link(target)) => {
            let id = blob_id(&mut target.as_slice(), target.len() as u64, path)?;
            Some(Entry::new(MODE_SYMLINK, id))
        }
        Some(Current::File(mut file, meta)) => {
            let id = blob_id(&mut file, meta.len(), path)?;
            Some(Entry::new(file_mode(&meta), id))
        }
    })
}

/// What lies at a path of the workspace: a symlink's target text, or an opened file
/// (checked to be the inode that was examined) with its metadata.
enum Current {
    Link(Vec<u8>),
    File(cap_std::fs::File, Metadata),
}

/// Opens what lies at `path`, entering directories one component at a time and
/// never through a symlink; `None` when no file or symlink is there.
fn open_current(workspace: &Path, path: &str) -> Result<Option<Current>, ChangesError> {
    let mut dir = open_root(workspace)?;
    let mut components = path.split('/').peekable();
    let mut walked = String::new();
    while let Some(component) = components.next() {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(component);
        let meta = match dir.symlink_metadata(component) {
            Ok(meta) => meta,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(io("inspect", workspace, &walked, source)),
        };
        let kind = meta.file_type();
        if components.peek().is_some() {
            if !kind.is_dir() {
                return Ok(None);
            }
            let sub = dir
                .open_dir(component)
                .map_err(|source| io("open directory", workspace, &walked, source))?;
            let opened = sub
                .dir_metadata()
                .map_err(|source| io("inspect", workspace, &walked, source))?;
            same_inode(&meta, &opened, path)?;
            dir = sub;
            continue;
        }
        return if kind.is_symlink() {
            Ok(Some(Current::Link(read_link(
                &dir, component, workspace, path,
            )?)))
        } else if kind.is_file() {
            let file = open_file(&dir, component, &meta, workspace, path)?;
            Ok(Some(Current::File(file, meta)))
        } else {
            // Git records no directories: no entry at this path. An overlayfs
            // whiteout (a 0:0 character device) in an upper directory marks a
            // deleted path, and git records no fifo, socket or device either:
            // no entry for any of them, as in the walk.
            Ok(None)
        };
    }
    Ok(None)
}

/// The git blob id of `len` bytes from `data`.
pub(crate) fn blob_id(
    data: &mut dyn Read,
    len: u64,
    rel: &str,
) -> Result<gix::ObjectId, ChangesError> {
    gix::objs::compute_stream_hash(
        gix::hash::Kind::Sha1,
        gix::objs::Kind::Blob,
        data,
        len,
        &mut gix::utils::progress::Discard,
        &AtomicBool::new(false),
    )
    .map_err(|source| ChangesError::Hash {
        path: rel.into(),
        source,
    })
}

fn open_root(workspace: &Path) -> Result<Dir, ChangesError> {
    Dir::open_ambient_dir(workspace, ambient_authority()).map_err(|source| ChangesError::Io {
        operation: "open workspace root",
        path: workspace.to_path_buf(),
        source,
    })
}

fn sorted_names(dir: &Dir, workspace: &Path, prefix: &str) -> Result<Vec<OsString>, ChangesError> {
    let entries = dir
        .entries()
        .map_err(|source| io("read directory", workspace, prefix, source))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| io("read directory", workspace, prefix, source))?;
        names.push(entry.file_name());
    }
    names.sort();
    Ok(names)
}

fn read_link(
    dir: &Dir,
    name: impl AsRef<Path>,
    workspace: &Path,
    rel: &str,
) -> Result<Vec<u8>, ChangesError> {
    let target = dir
        .read_link_contents(name)
        .map_err(|source| io("read link", workspace, rel, source))?;
    Ok(target.as_os_str().as_bytes().to_vec())
}

fn open_file(
    dir: &Dir,
    name: impl AsRef<Path>,
    meta: &Metadata,
    workspace: &Path,
    rel: &str,
) -> Result<cap_std::fs::File, ChangesError> {
    let file = dir
        .open(name)
        .map_err(|source| io("open", workspace, rel, source))?;
    let opened = file
        .metadata()
        .map_err(|source| io("inspect", workspace, rel, source))?;
    same_inode(meta, &opened, rel)?;
    Ok(file)
}

fn same_inode(examined: &Metadata, opened: &Metadata, rel: &str) -> Result<(), ChangesError> {
    let same = examined.dev() == opened.dev()
        && examined.ino() == opened.ino()
        && examined.file_type() == opened.file_type();
    if same {
        Ok(())
    } else {
        Err(ChangesError::Replaced { path: rel.into() })
    }
}

fn file_mode(meta: &Metadata) -> u32 {
    if meta.permissions().mode() & 0o100 != 0 {
        MODE_EXECUTABLE
    } else {
        MODE_FILE
    }
}

fn io(
    operation: &'static str,
    workspace: &Path,
    rel: &str,
    source: std::io::Error,
) -> ChangesError {
    ChangesError::Io {
        operation,
        path: workspace.join(rel),
        source,
    }
}
