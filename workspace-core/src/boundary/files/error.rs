//! [`FileError`]: why a file operation on a live workspace was refused or failed.

use std::io;

/// Why an operation on a workspace's files was refused or failed, naming the
/// path as the sandbox sees it (absolute inside it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The path cannot name a file: empty, a NUL byte, a name too long, the
    /// root itself where a name is needed, a last component `..`.
    #[error("{path:?}: invalid path: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A mode that is not plain permission bits (set-user-id, set-group-id
    /// and sticky bits are refused, as the sandbox refuses them).
    #[error("{path}: mode {mode:#o} is refused: only permission bits (0o777) may be set")]
    InvalidMode {
        /// The file.
        path: String,
        /// The mode asked for.
        mode: u32,
    },
    /// Nothing is at the path (or a directory on the way is missing).
    #[error("{path}: not found")]
    NotFound {
        /// The path.
        path: String,
    },
    /// The workspace's user may not do this (the file's mode, its owner).
    #[error("{path}: permission denied")]
    PermissionDenied {
        /// The path.
        path: String,
    },
    /// The path is on a read-only mount (the base system, a read-only grant,
    /// outside the contract's writable paths).
    #[error("{path}: read-only file system")]
    ReadOnly {
        /// The path.
        path: String,
    },
    /// A file was expected and the path is a directory.
    #[error("{path}: is a directory")]
    IsADirectory {
        /// The path.
        path: String,
    },
    /// A directory was expected (or a component on the way is not one).
    #[error("{path}: not a directory")]
    NotADirectory {
        /// The path.
        path: String,
    },
    /// The path is a FIFO, a socket or a device: its content is not a file's,
    /// and opening it could block or act (it is never opened).
    #[error("{path}: not a regular file but a {kind}")]
    NotRegularFile {
        /// The path.
        path: String,
        /// What it is.
        kind: super::FileKind,
    },
    /// The file (or the range asked for) is larger than the read's limit;
    /// nothing past the limit was returned.
    #[error("{path}: {} than the limit of {limit} bytes", match size { Some(size) => format!("{size} bytes, more"), None => "it grew larger while read".to_owned() })]
    TooLarge {
        /// The path.
        path: String,
        /// Its size (or the range's length) as it was found; `None` when it
        /// grew past the limit while it was read.
        size: Option<u64>,
        /// The limit.
        limit: u64,
    },
    /// A link on the path leads out of what the workspace may reach (a
    /// `/proc` magic link such as `/proc/1/root` or `/proc/N/fd/M`), or links
    /// loop; nothing was opened through it.
    #[error("{path}: a link on the path leads out of what the workspace may reach, or loops")]
    LinkOutOfReach {
        /// The path.
        path: String,
    },
    /// Something is at the path already (a write that may not overwrite, a
    /// directory made without `parents`).
    #[error("{path}: already exists")]
    AlreadyExists {
        /// The path.
        path: String,
    },
    /// The directory is not empty (a removal that is not recursive, a rename
    /// onto it).
    #[error("{path}: directory not empty")]
    NotEmpty {
        /// The path.
        path: String,
    },
    /// The file system is full: the run's disk cap, or a tmpfs's size.
    #[error("{path}: no space left on the workspace's file system")]
    NoSpace {
        /// The path.
        path: String,
    },
    /// A rename from one mount of the sandbox to another (`/tmp` to the
    /// workspace): the file system cannot move it; copy it instead.
    #[error("{from} -> {to}: a rename cannot cross mounts")]
    CrossesMounts {
        /// The source.
        from: String,
        /// The destination.
        to: String,
    },
    /// A listing found more entries than its limit.
    #[error("{path}: more than {limit} entries")]
    TooManyEntries {
        /// The directory listed.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// The process boundary gives no access to a workspace's files.
    #[error("{backend} gives no access to a workspace's files")]
    Unsupported {
        /// The boundary's name.
        backend: String,
    },
    /// The workspace is not sealed (not yet, or no longer): there is no live
    /// sandbox to act in.
    #[error("the workspace is {state}, not sealed: its files are reached only while it is live")]
    NotSealed {
        /// Its state.
        state: crate::lifecycle::StateName,
    },
    /// The run's sandbox could not be reached (it ended, or its entry is
    /// gone).
    #[error("the workspace's sandbox cannot be reached")]
    SandboxGone {
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The caller's reader or writer failed (the bytes to write, the sink of
    /// a read).
    #[error("{path}: the caller's stream failed")]
    Caller {
        /// The file being read or written.
        path: String,
        /// The stream's error.
        #[source]
        source: io::Error,
    },
    /// The operation changed the workspace but its record could not be
    /// appended to the evidence (`files.jsonl`).
    #[error("{path}: the operation could not be recorded in the evidence")]
    Record {
        /// The path.
        path: String,
        /// The evidence's error.
        #[source]
        source: crate::evidence::EvidenceError,
    },
    /// Any other failure of the file system, with the operation and the
    /// system's error.
    #[error("{path}: {op}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
}

impl FileError {
    /// The typed error an `io::Error` of operation `op` on `path` stands for
    /// (`ENOENT` is [`NotFound`](Self::NotFound), `EROFS`
    /// [`ReadOnly`](Self::ReadOnly), ...), else [`Io`](Self::Io) with it as
    /// the cause. (`ELOOP` has no portable kind: a backend says
    /// [`LinkOutOfReach`](Self::LinkOutOfReach) itself.)
    pub fn from_io(op: &'static str, path: impl Into<String>, source: io::Error) -> Self {
        use io::ErrorKind as K;
        let path = path.into();
        match source.kind() {
            K::NotFound => Self::NotFound { path },
            K::PermissionDenied => Self::PermissionDenied { path },
            K::ReadOnlyFilesystem => Self::ReadOnly { path },
            K::IsADirectory => Self::IsADirectory { path },
            K::NotADirectory => Self::NotADirectory { path },
            K::AlreadyExists => Self::AlreadyExists { path },
            K::DirectoryNotEmpty => Self::NotEmpty { path },
            K::StorageFull | K::QuotaExceeded | K::FileTooLarge => Self::NoSpace { path },
            K::InvalidFilename => Self::InvalidPath {
                path,
                reason: "a name or the path is too long",
            },
            _ => Self::Io { op, path, source },
        }
    }

    /// The error's kind in one word, as the command line's JSON answers name
    /// it (`not-found`, `permission-denied`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::InvalidPath { .. } => "invalid-path",
            Self::InvalidMode { .. } => "invalid-mode",
            Self::NotFound { .. } => "not-found",
            Self::PermissionDenied { .. } => "permission-denied",
            Self::ReadOnly { .. } => "read-only",
            Self::IsADirectory { .. } => "is-a-directory",
            Self::NotADirectory { .. } => "not-a-directory",
            Self::NotRegularFile { .. } => "not-a-regular-file",
            Self::TooLarge { .. } => "too-large",
            Self::LinkOutOfReach { .. } => "link-out-of-reach",
            Self::AlreadyExists { .. } => "already-exists",
            Self::NotEmpty { .. } => "not-empty",
            Self::NoSpace { .. } => "no-space",
            Self::CrossesMounts { .. } => "crosses-mounts",
            Self::TooManyEntries { .. } => "too-many-entries",
            Self::Unsupported { .. } => "unsupported",
            Self::NotSealed { .. } => "not-sealed",
            Self::SandboxGone { .. } => "sandbox-gone",
            Self::Caller { .. } => "caller",
            Self::Record { .. } => "record",
            Self::Io { .. } => "io",
        }
    }

    /// The path the error is about, when it names one (the source of a
    /// rename that crosses mounts).
    pub fn path(&self) -> Option<&str> {
        match self {
            Self::InvalidPath { path, .. }
            | Self::InvalidMode { path, .. }
            | Self::NotFound { path }
            | Self::PermissionDenied { path }
            | Self::ReadOnly { path }
            | Self::IsADirectory { path }
            | Self::NotADirectory { path }
            | Self::NotRegularFile { path, .. }
            | Self::TooLarge { path, .. }
            | Self::LinkOutOfReach { path }
            | Self::AlreadyExists { path }
            | Self::NotEmpty { path }
            | Self::NoSpace { path }
            | Self::TooManyEntries { path, .. }
            | Self::Caller { path, .. }
            | Self::Record { path, .. }
            | Self::Io { path, .. } => Some(path),
            Self::CrossesMounts { from, .. } => Some(from),
            Self::Unsupported { .. } | Self::NotSealed { .. } | Self::SandboxGone { .. } => None,
        }
    }

    /// Whether the caller's input was at fault (a path or mode no file can
    /// have), not the workspace's state.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Self::InvalidPath { .. } | Self::InvalidMode { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::FileError;
    use std::io;

    #[test]
    fn system_errors_become_typed_errors_that_name_the_path() {
        let typed = |kind| FileError::from_io("open", "/workspace/a", io::Error::from(kind));
        assert!(
            matches!(typed(io::ErrorKind::NotFound), FileError::NotFound { path } if path == "/workspace/a")
        );
        assert!(matches!(
            typed(io::ErrorKind::ReadOnlyFilesystem),
            FileError::ReadOnly { .. }
        ));
        assert!(matches!(
            typed(io::ErrorKind::StorageFull),
            FileError::NoSpace { .. }
        ));
        let other = typed(io::ErrorKind::Interrupted);
        assert_eq!(other.kind(), "io");
        assert_eq!(other.path(), Some("/workspace/a"));
        assert_eq!(
            FileError::TooLarge {
                path: "/w/big".into(),
                size: Some(10),
                limit: 5
            }
            .to_string(),
            "/w/big: 10 bytes, more than the limit of 5 bytes"
        );
    }
}
