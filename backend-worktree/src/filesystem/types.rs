//! Plain data returned by and given to the path grants.

use serde::{Deserialize, Serialize};

/// What kind of entry a path names, never following a final symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (reported as such, never followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl EntryKind {
    pub(crate) fn of(file_type: cap_std::fs::FileType) -> Self {
        if file_type.is_symlink() {
            Self::Symlink
        } else if file_type.is_dir() {
            Self::Dir
        } else if file_type.is_file() {
            Self::File
        } else {
            Self::Other
        }
    }
}

/// One entry of [`PathGrants::list`](super::PathGrants::list).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntryInfo {
    /// The entry's file name (lossily decoded if it is not UTF-8).
    pub name: String,
    /// Its kind, from the directory entry itself (a symlink is a symlink).
    pub kind: EntryKind,
}

/// What [`PathGrants::metadata`](super::PathGrants::metadata) reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataInfo {
    /// The kind of the path itself (a final symlink is not followed).
    pub kind: EntryKind,
    /// Size in bytes (for a symlink: the length of its target).
    pub len: u64,
    /// True when the grants refuse writing this path, or its permission bits
    /// say read-only.
    pub readonly: bool,
}

/// Extra settings for [`PathGrants::new_opts`](super::PathGrants::new_opts).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct GrantOptions {
    /// Additional protected globs (same syntax as `filesystem.excluded`), e.g.
    /// `"**/*.pem"` or `"config/credentials.json"`: neither readable nor writable,
    /// on top of the built-in protections (`.env`, `.env.*`, `.git/config`,
    /// `.git/hooks`, and writes anywhere in `.git`).
    pub protected: Vec<String>,
}

impl GrantOptions {
    /// Options with these extra protected globs.
    pub fn protected<I, S>(patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            protected: patterns.into_iter().map(Into::into).collect(),
        }
    }
}
