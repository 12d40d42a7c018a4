//! A live workspace's files, as its sandbox sees them: the seam a process
//! boundary hands out ([`FileAccess`], from
//! [`ProcessBoundary::files`](super::ProcessBoundary::files)) and its types.
//!
//! Every operation acts *inside* the run's boundary: as the run's user, with
//! the run's view of the mounts (its overlay, its `/tmp`, its grants, its
//! read-only base system and masked paths), never by writing into a layer on
//! the host. Paths given to a [`FileAccess`] are absolute inside the sandbox
//! and already normalized by [`inside_path`]; a link found on the way is
//! followed as the sandbox would follow it, never out of it. The runner's
//! [`Files`](crate::runner::Files) handle adds the workspace root for
//! relative paths, the size limits, streaming and the evidence record.

mod error;

use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use error::FileError;

use super::{InputStream, OutputStream};

/// The most a whole read returns unless asked otherwise: 100 MiB.
pub const DEFAULT_READ_LIMIT: u64 = 100 << 20;

/// The most entries a listing returns before it is refused.
pub const DEFAULT_LIST_LIMIT: usize = 100_000;

/// The longest path accepted (the kernel's `PATH_MAX`).
pub const MAX_PATH_LEN: usize = 4096;

/// What is at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (never followed by a listing or a stat).
    Symlink,
    /// A named pipe.
    Fifo,
    /// A unix socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::File => "regular file",
            Self::Directory => "directory",
            Self::Symlink => "symbolic link",
            Self::Fifo => "FIFO",
            Self::Socket => "socket",
            Self::CharDevice => "character device",
            Self::BlockDevice => "block device",
        })
    }
}

/// One file as the sandbox sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileInfo {
    /// Its path, absolute inside the sandbox.
    pub path: String,
    /// What it is (a link is a link: not followed).
    pub kind: FileKind,
    /// Its size in bytes (a link's: the length of its target).
    pub size: u64,
    /// Its permission bits (with set-id and sticky bits), `0o7777` at most.
    pub mode: u32,
    /// When its content last changed, in milliseconds since the Unix epoch
    /// (0 before it).
    pub mtime_unix_ms: u64,
    /// Where a symbolic link points, as written in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_target: Option<String>,
}

/// How a file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteOptions {
    /// Make the missing directories above it first (as `mkdir -p`).
    pub create_parents: bool,
    /// Replace an existing file's content (the default); `false`: refuse
    /// with [`FileError::AlreadyExists`].
    pub overwrite: bool,
    /// Its permission bits (`0o777` at most); `None`: `0o644` for a new
    /// file, an existing file's own.
    pub mode: Option<u32>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self {
            create_parents: false,
            overwrite: true,
            mode: None,
        }
    }
}

impl WriteOptions {
    /// With missing parent directories made.
    pub fn with_parents(mut self) -> Self {
        self.create_parents = true;
        self
    }

    /// Refusing to replace an existing file.
    pub fn without_overwrite(mut self) -> Self {
        self.overwrite = false;
        self
    }

    /// With permission bits `mode`.
    pub fn with_mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }
}

/// A regular file opened for reading: what it was when opened, and its
/// content from the offset asked for.
pub struct ReadFile {
    /// The file as opened (after links were followed).
    pub info: FileInfo,
    /// Its bytes from the offset on, to its end.
    pub content: OutputStream,
}

impl Debug for ReadFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadFile")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// A regular file opened for writing, emptied (or made).
pub struct WriteFile {
    /// Whether the file was made by this write.
    pub created: bool,
    /// Where its bytes go; shut down (`AsyncWriteExt::shutdown`) to finish.
    pub content: InputStream,
}

impl Debug for WriteFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteFile")
            .field("created", &self.created)
            .finish_non_exhaustive()
    }
}

/// A run's files, reached as its sandbox sees them: as the run's user,
/// through the sandbox's own mounts, a link followed inside and never out of
/// it; never by writing into a layer on the host. Each path is absolute
/// inside the sandbox, as [`inside_path`] makes it. Any number of operations
/// may run at once.
#[async_trait]
pub trait FileAccess: Send + Sync + Debug {
    /// Opens the regular file at `path` for reading from `offset`, links
    /// followed inside; a directory is [`FileError::IsADirectory`], a FIFO,
    /// socket or device [`FileError::NotRegularFile`] (never opened).
    async fn open_read(&self, path: &str, offset: u64) -> Result<ReadFile, FileError>;

    /// Opens the regular file at `path` for writing, emptied, or makes it
    /// (links followed inside; a dangling link is not followed to make its
    /// target).
    async fn open_write(&self, path: &str, options: &WriteOptions) -> Result<WriteFile, FileError>;

    /// What is at `path`, a link not followed.
    async fn stat(&self, path: &str) -> Result<FileInfo, FileError>;

    /// The entries of the directory at `path` (a link to one followed), and
    /// of its directories down to `depth` levels (1: its own entries; links
    /// below it are listed, never followed), sorted by path; more than
    /// `limit` entries is [`FileError::TooManyEntries`].
    async fn list(&self, path: &str, depth: u32, limit: usize) -> Result<Vec<FileInfo>, FileError>;

    /// Removes what is at `path` (a link itself, not its target); a
    /// directory with what is in it when `recursive`. Returns how many
    /// entries were removed.
    async fn remove(&self, path: &str, recursive: bool) -> Result<u64, FileError>;

    /// Makes the directory `path` (and the missing ones above it when
    /// `parents`; then one that exists already is no error).
    async fn mkdir(&self, path: &str, parents: bool) -> Result<(), FileError>;

    /// Renames `from` to `to` (each a link itself, not its target), replacing
    /// a file or an empty directory at `to`.
    async fn rename(&self, from: &str, to: &str) -> Result<(), FileError>;
}

/// `path` as an absolute path inside the sandbox: a relative one is under
/// `root` (the workspace root inside); empty and `.` components and a
/// trailing `/` are dropped (`..` is left for the sandbox to resolve, which
/// never leads above its root). Empty, with a NUL byte, or longer than
/// [`MAX_PATH_LEN`] is [`FileError::InvalidPath`].
///
/// ```
/// use workspace_core::boundary::inside_path;
/// assert_eq!(inside_path("/workspace", "src//lib.rs").unwrap(), "/workspace/src/lib.rs");
/// assert_eq!(inside_path("/workspace", "/tmp/./x/").unwrap(), "/tmp/x");
/// assert_eq!(inside_path("/workspace", ".").unwrap(), "/workspace");
/// assert!(inside_path("/workspace", "").is_err());
/// assert!(inside_path("/workspace", "a\0b").is_err());
/// ```
pub fn inside_path(root: &str, path: &str) -> Result<String, FileError> {
    let invalid = |reason| FileError::InvalidPath {
        path: path.to_owned(),
        reason,
    };
    if path.is_empty() {
        return Err(invalid("it is empty"));
    }
    if path.contains('\0') {
        return Err(invalid("it holds a NUL byte"));
    }
    let full = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{}/{path}", root.trim_end_matches('/'))
    };
    let mut out = String::with_capacity(full.len());
    for part in full.split('/').filter(|p| !p.is_empty() && *p != ".") {
        out.push('/');
        out.push_str(part);
    }
    if out.is_empty() {
        out.push('/');
    }
    if out.len() > MAX_PATH_LEN {
        return Err(invalid("it is longer than 4096 bytes"));
    }
    Ok(out)
}

/// The parent directory and last component of `path` (as [`inside_path`]
/// makes it), for an operation on a name: the root itself, or a last
/// component `..`, is [`FileError::InvalidPath`].
///
/// ```
/// use workspace_core::boundary::split_parent;
/// assert_eq!(split_parent("/workspace/a").unwrap(), ("/workspace", "a"));
/// assert_eq!(split_parent("/a").unwrap(), ("/", "a"));
/// assert!(split_parent("/").is_err());
/// assert!(split_parent("/workspace/..").is_err());
/// ```
pub fn split_parent(path: &str) -> Result<(&str, &str), FileError> {
    let invalid = |reason| FileError::InvalidPath {
        path: path.to_owned(),
        reason,
    };
    let (parent, name) = path
        .rsplit_once('/')
        .ok_or_else(|| invalid("it is not absolute"))?;
    if name.is_empty() {
        return Err(invalid("it names the sandbox's root, not an entry"));
    }
    if name == ".." || name == "." {
        return Err(invalid("its last component is `..`"));
    }
    Ok((if parent.is_empty() { "/" } else { parent }, name))
}

/// Whether `mode` may be given to a file: permission bits only.
pub fn valid_mode(mode: u32) -> bool {
    mode & !0o777 == 0
}
