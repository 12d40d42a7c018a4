//! Reading a workspace's `HEAD` as plain data, never through a link.
//!
//! A workspace's `.git` is agent-writable: `HEAD` (or a directory on the way, or a
//! linked worktree's `.git` file) may be a planted symlink to a host file, or a
//! `gitdir:` file pointing anywhere. Everything here is opened under a
//! [`cap_std::fs::Dir`], one component at a time: each entry is examined with
//! `symlink_metadata` (never followed), must be of the expected type, and the opened
//! handle must be the very inode examined. `HEAD` must be a regular file of at most
//! [`MAX_HEAD_LEN`] bytes, and its content is only ever reported once it parses as an
//! object id or a `ref: refs/...` line, so no other content read from the host can
//! reach an error message, the journal or the evidence.

use std::fmt;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::{Dir, Metadata, MetadataExt};
use gix::ObjectId;

/// The largest `HEAD` accepted, in bytes (a ref line is far shorter).
pub(crate) const MAX_HEAD_LEN: u64 = 256;

/// The largest `.git` file (`gitdir: <path>`) of a linked worktree accepted, in bytes.
const MAX_GITDIR_FILE_LEN: u64 = 4096;

/// What a `HEAD` file holds, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Head {
    /// Detached at a commit.
    Detached(ObjectId),
    /// A symbolic ref, `refs/...`.
    Symbolic(String),
}

impl Head {
    /// Parses a `HEAD` file's content: a full object id or `ref: refs/...` (printable
    /// ASCII without spaces), surrounding whitespace ignored. Anything else is `None`.
    pub(crate) fn parse(content: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(content).ok()?.trim();
        if let Some(name) = text.strip_prefix("ref: ") {
            let plain = name.starts_with("refs/")
                && name.len() > "refs/".len()
                && name.bytes().all(|b| b.is_ascii_graphic());
            return plain.then(|| Self::Symbolic(name.to_owned()));
        }
        let hex = text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex {
            return None;
        }
        ObjectId::from_hex(text.as_bytes()).ok().map(Self::Detached)
    }

    /// The commit when detached.
    pub(crate) fn commit(&self) -> Option<ObjectId> {
        match self {
            Self::Detached(id) => Some(*id),
            Self::Symbolic(_) => None,
        }
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Detached(id) => write!(f, "commit {id}"),
            Self::Symbolic(name) => write!(f, "ref: {name}"),
        }
    }
}

/// The `HEAD` of the checkout at `workspace`, read without following any link.
///
/// `.git` must be a directory, except when `linked_worktrees` is given (a linked
/// worktree: the source repository's `.git/worktrees`, canonical): then a `.git`
/// file `gitdir: <path>` is accepted if `<path>` resolves to a directory directly
/// inside `linked_worktrees`, and `HEAD` is read there. The error is a reason for
/// [`super::SourceError::RestoreIncomplete`]; it never contains what was read.
pub(crate) fn workspace_head(
    workspace: &Path,
    linked_worktrees: Option<&Path>,
) -> Result<Head, String> {
    let root = open_ambient(workspace)?;
    let dot_git = workspace.join(".git");
    let meta = root
        .symlink_metadata(".git")
        .map_err(|e| format!("{} is missing ({e})", dot_git.display()))?;
    if meta.is_dir() {
        let git_dir = open_dir(&root, ".git", &meta, &dot_git)?;
        return read_head(&git_dir, &dot_git);
    }
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symlink", dot_git.display()));
    }
    if !meta.is_file() {
        return Err(format!("{} is not a directory", dot_git.display()));
    }
    let Some(worktrees) = linked_worktrees else {
        return Err(format!(
            "{} is a file, not a directory (a gitdir file is refused for a standalone checkout)",
            dot_git.display()
        ));
    };
    let content = read_small(&root, ".git", &meta, MAX_GITDIR_FILE_LEN, &dot_git)?;
    let target = std::str::from_utf8(&content)
        .ok()
        .and_then(|text| text.trim_end().strip_prefix("gitdir: "))
        .filter(|target| !target.is_empty() && !target.contains('\n'))
        .ok_or_else(|| format!("{} is not a gitdir file", dot_git.display()))?;
    let outside = || {
        format!(
            "{} does not point at a linked worktree of the source repository ({})",
            dot_git.display(),
            worktrees.display()
        )
    };
    let canonical = std::fs::canonicalize(workspace.join(target)).map_err(|_| outside())?;
    let name = match canonical.strip_prefix(worktrees).map(Path::components) {
        Ok(mut components) => match (components.next(), components.next()) {
            (Some(Component::Normal(name)), None) => name.to_owned(),
            _ => return Err(outside()),
        },
        Err(_) => return Err(outside()),
    };
    let worktrees_dir = open_ambient(worktrees)?;
    let shown = worktrees.join(&name);
    let meta = worktrees_dir
        .symlink_metadata(&name)
        .map_err(|e| format!("cannot inspect {} ({e})", shown.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", shown.display()));
    }
    let git_dir = open_dir(&worktrees_dir, &name, &meta, &shown)?;
    read_head(&git_dir, &shown)
}

/// The `HEAD` in the directory `dir` (shown as `shown` in errors), read without
/// following a link; it must be a regular file of at most [`MAX_HEAD_LEN`] bytes
/// that parses as a [`Head`].
pub(crate) fn read_head(dir: &Dir, shown: &Path) -> Result<Head, String> {
    let path = shown.join("HEAD");
    let meta = dir
        .symlink_metadata("HEAD")
        .map_err(|e| format!("cannot read {} ({e})", path.display()))?;
    let content = read_small(dir, "HEAD", &meta, MAX_HEAD_LEN, &path)?;
    Head::parse(&content).ok_or_else(|| {
        format!(
            "{} is not a commit id (nor a ref: refs/... line)",
            path.display()
        )
    })
}

/// The `HEAD` of `<root>/.git`, where `.git` must be a directory: the `.git` of a
/// layered checkout's upper directory.
pub(crate) fn git_dir_head(root: &Path) -> Result<Head, String> {
    workspace_head(root, None)
}

fn open_ambient(path: &Path) -> Result<Dir, String> {
    Dir::open_ambient_dir(path, ambient_authority())
        .map_err(|e| format!("cannot open {} ({e})", path.display()))
}

/// Opens the directory `name` in `dir`, which was examined as `meta` (a directory),
/// refusing anything else found there by the time it is opened.
fn open_dir(
    dir: &Dir,
    name: impl AsRef<Path>,
    meta: &Metadata,
    shown: &Path,
) -> Result<Dir, String> {
    let sub = dir
        .open_dir(name)
        .map_err(|e| format!("cannot open {} ({e})", shown.display()))?;
    let opened = sub
        .dir_metadata()
        .map_err(|e| format!("cannot inspect {} ({e})", shown.display()))?;
    same_inode(meta, &opened, shown)?;
    Ok(sub)
}

/// Reads the regular file `name` in `dir`, examined as `meta`, if it holds at most
/// `limit` bytes. A symlink, a directory or anything else is refused, and so is an
/// open that does not reach the inode examined.
fn read_small(
    dir: &Dir,
    name: impl AsRef<Path>,
    meta: &Metadata,
    limit: u64,
    shown: &Path,
) -> Result<Vec<u8>, String> {
    if meta.file_type().is_symlink() {
        return Err(format!("{} is a symlink", shown.display()));
    }
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", shown.display()));
    }
    if meta.len() > limit {
        return Err(format!("{} is larger than {limit} bytes", shown.display()));
    }
    let file = dir
        .open(name)
        .map_err(|e| format!("cannot open {} ({e})", shown.display()))?;
    let opened = file
        .metadata()
        .map_err(|e| format!("cannot inspect {} ({e})", shown.display()))?;
    same_inode(meta, &opened, shown)?;
    let mut content = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut content)
        .map_err(|e| format!("cannot read {} ({e})", shown.display()))?;
    if content.len() as u64 > limit {
        return Err(format!("{} is larger than {limit} bytes", shown.display()));
    }
    Ok(content)
}

fn same_inode(examined: &Metadata, opened: &Metadata, shown: &Path) -> Result<(), String> {
    let same = examined.dev() == opened.dev()
        && examined.ino() == opened.ino()
        && examined.file_type() == opened.file_type();
    if same {
        Ok(())
    } else {
        Err(format!("{} was replaced while being read", shown.display()))
    }
}

/// The canonical `<common dir>/worktrees` of the source repository, where the
/// registrations of its linked worktrees live.
pub(crate) fn linked_worktrees_dir(source: &gix::Repository) -> Result<PathBuf, String> {
    let dir = source.common_dir().join("worktrees");
    std::fs::canonicalize(&dir).map_err(|e| {
        format!(
            "the source repository has no linked worktrees at {} ({e})",
            dir.display()
        )
    })
}
