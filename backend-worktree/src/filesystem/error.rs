//! The one error type of the path grants, and the reasons an access is refused.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::types::EntryKind;

/// What went wrong while building [`PathGrants`](super::PathGrants) or using them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GrantError {
    /// The workspace root could not be opened as a directory capability.
    #[error("filesystem: cannot open the workspace root {root:?}")]
    OpenRoot {
        /// The host path given as the root.
        root: PathBuf,
        /// Why opening it failed.
        #[source]
        source: io::Error,
    },
    /// A path in the filesystem section (or the options) is not a clean
    /// workspace-relative path.
    #[error("filesystem: {field} = {value:?} is unusable: {reason}")]
    InvalidGrant {
        /// The field, e.g. `filesystem.writable[2]`.
        field: String,
        /// The value found there.
        value: String,
        /// Why it cannot be used.
        reason: Refusal,
    },
    /// A glob in `filesystem.excluded` (or a protected pattern) does not compile.
    #[error("filesystem: {field} = {pattern:?} is not a valid glob")]
    InvalidPattern {
        /// The field, e.g. `filesystem.excluded[0]` or `options.protected[1]`.
        field: String,
        /// The pattern.
        pattern: String,
        /// The glob compiler's complaint.
        #[source]
        source: globset::Error,
    },
    /// The grants refuse this access; nothing was touched.
    #[error("filesystem: {op} {path:?} refused: {reason}")]
    Refused {
        /// The operation that was asked for.
        op: Operation,
        /// The workspace-relative path as the agent gave it.
        path: String,
        /// Why it is refused.
        reason: Refusal,
    },
    /// The access was allowed but the operating system reported an error
    /// (missing file, not a directory, disk full...).
    #[error("filesystem: {op} {path:?} failed")]
    Io {
        /// The operation.
        op: Operation,
        /// The workspace-relative path as the agent gave it.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// `read_to_string` found bytes that are not UTF-8.
    #[error("filesystem: read {path:?}: the file is not UTF-8")]
    NotUtf8 {
        /// The workspace-relative path as the agent gave it.
        path: String,
        /// The decoding error.
        #[source]
        source: std::string::FromUtf8Error,
    },
}

impl GrantError {
    /// The refusal reason, if this error is a refusal.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Self::Refused { reason, .. } => Some(reason),
            _ => None,
        }
    }
}

/// The operation a [`GrantError`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// `read` / `read_to_string`.
    Read,
    /// `write` (create or truncate).
    Write,
    /// `create_new`.
    CreateNew,
    /// `remove_file`.
    RemoveFile,
    /// `create_dir_all`.
    CreateDir,
    /// `remove_dir`.
    RemoveDir,
    /// `list`.
    List,
    /// `rename`, source side.
    RenameFrom,
    /// `rename`, destination side.
    RenameTo,
    /// `metadata`.
    Metadata,
    /// `symlink`, the link's own path.
    SymlinkLink,
    /// `symlink`, the link's target.
    SymlinkTarget,
}

impl Operation {
    /// Whether the operation modifies the workspace at its path.
    pub fn writes(self) -> bool {
        !matches!(
            self,
            Self::Read | Self::List | Self::Metadata | Self::SymlinkTarget
        )
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::CreateNew => "create",
            Self::RemoveFile => "remove file",
            Self::CreateDir => "create directory",
            Self::RemoveDir => "remove directory",
            Self::List => "list",
            Self::RenameFrom => "rename from",
            Self::RenameTo => "rename to",
            Self::Metadata => "metadata of",
            Self::SymlinkLink => "create symlink at",
            Self::SymlinkTarget => "create symlink to",
        })
    }
}

/// Why an access is refused. Resolved paths are workspace-relative, after
/// following the symlinks found inside the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The path is empty.
    Empty,
    /// The path contains a NUL byte.
    NulByte,
    /// The path (or a symlink target) is absolute; this also covers `/proc/...` aliases.
    Absolute,
    /// The path has a `..` component (refused even when it would stay inside).
    ParentComponent,
    /// A symlink, or `..` inside a symlink target, leads outside the workspace root.
    EscapesRoot,
    /// More than 40 symlinks on the way.
    TooManyLinks,
    /// The path (or where it leads) matches `filesystem.excluded`.
    Excluded {
        /// The path that matched.
        matched: PathBuf,
        /// The pattern it matched.
        pattern: String,
    },
    /// The path (or where it leads) is protected: `.env*`, `.git/config`,
    /// `.git/hooks`, writes to `.git`, or a secret declared in the options.
    Protected {
        /// The path that matched.
        matched: PathBuf,
        /// The protected pattern it matched.
        pattern: String,
    },
    /// Writing: the resolved path is under no writable path.
    NotWritable {
        /// Where the access would land.
        resolved: PathBuf,
    },
    /// Writing: the resolved path is under a read-only path.
    ReadOnly {
        /// Where the access would land.
        resolved: PathBuf,
        /// The read-only grant that covers it.
        read_only: PathBuf,
    },
    /// A regular file with more than one hard link: in a fresh checkout it can only
    /// have been planted, and it may be a file outside the workspace.
    HardLinked {
        /// The file.
        resolved: PathBuf,
        /// Its link count.
        links: u64,
    },
    /// Reading or writing contents of something that is not a regular file
    /// (a FIFO would block, a device would reach the host).
    NotRegularFile {
        /// The file.
        resolved: PathBuf,
        /// What it is.
        kind: EntryKind,
    },
    /// The workspace root itself cannot be removed, renamed or replaced.
    WorkspaceRoot,
    /// Renaming a directory that holds a protected, excluded or read-only entry
    /// would carry it out from under its rule.
    ContainsProtected {
        /// The entry found inside the directory.
        entry: PathBuf,
    },
    /// Renaming a directory too large to check entry by entry.
    TooLargeToCheck {
        /// The number of entries after which the check gave up.
        limit: usize,
    },
    /// The file changed between the check and the open (a racing swap).
    Raced {
        /// The file.
        resolved: PathBuf,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("the path is empty"),
            Self::NulByte => f.write_str("the path contains a NUL byte"),
            Self::Absolute => {
                f.write_str("the path is absolute; paths are relative to the workspace root")
            }
            Self::ParentComponent => f.write_str("the path has a `..` component"),
            Self::EscapesRoot => f.write_str("the path led outside the workspace root"),
            Self::TooManyLinks => f.write_str("too many levels of symbolic links"),
            Self::Excluded { matched, pattern } => {
                write!(f, "{matched:?} is excluded by {pattern:?}")
            }
            Self::Protected { matched, pattern } => {
                write!(f, "{matched:?} is protected by {pattern:?}")
            }
            Self::NotWritable { resolved } => {
                write!(f, "{resolved:?} is under no writable path")
            }
            Self::ReadOnly {
                resolved,
                read_only,
            } => {
                write!(f, "{resolved:?} is under the read-only path {read_only:?}")
            }
            Self::HardLinked { resolved, links } => {
                write!(
                    f,
                    "{resolved:?} has {links} hard links and may alias a file outside"
                )
            }
            Self::NotRegularFile { resolved, kind } => {
                write!(f, "{resolved:?} is not a regular file but a {kind:?}")
            }
            Self::WorkspaceRoot => f.write_str("the workspace root itself cannot be changed"),
            Self::ContainsProtected { entry } => write!(
                f,
                "the directory holds {entry:?}, which would leave its protection"
            ),
            Self::TooLargeToCheck { limit } => {
                write!(f, "the directory has more than {limit} entries to check")
            }
            Self::Raced { resolved } => {
                write!(f, "{resolved:?} changed while it was being opened")
            }
        }
    }
}
