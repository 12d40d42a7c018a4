//! `snapshot.json`: what a snapshot archive holds, and the checks a restore makes on
//! it before anything is written.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use workspace_core::boundary::ChangeKind;

use super::SnapshotError;
use crate::changes::{Change, Entry, MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK};

/// The manifest version this code writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// The name of the manifest, the archive's first entry.
pub const MANIFEST_NAME: &str = "snapshot.json";

/// The prefix of every content entry's tar path (`tree/<path>`).
pub const TREE_PREFIX: &str = "tree/";

/// The content of `snapshot.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_VERSION`].
    pub version: u32,
    /// The full id of the commit the changes are against.
    pub base_commit: String,
    /// That commit's tree id.
    pub base_tree: String,
    /// The `skip` globs the changes were computed with (restore verifies with them).
    pub skip: Vec<String>,
    /// Every added, modified, mode-changed or renamed file and symlink, sorted by
    /// path; the archive holds one content entry for each, in this order.
    pub entries: Vec<ManifestEntry>,
    /// Paths of the base tree deleted in the workspace, sorted.
    pub deleted: Vec<String>,
}

/// One file or symlink of the snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    /// The path relative to the workspace root (`/`-separated).
    pub path: String,
    /// How it differs from the base tree.
    pub kind: EntryKind,
    /// For [`EntryKind::Renamed`], the path in the base tree it came from (deleted
    /// on restore).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The git mode in octal: `100644`, `100755` or `120000`.
    pub mode: String,
    /// The git blob id of the content.
    pub blob: String,
    /// The sha256 of the content (a symlink's target text).
    pub sha256: String,
    /// The content's length in bytes.
    pub size: u64,
}

/// How an entry differs from the base tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// Not in the base tree (an untracked file).
    Added,
    /// Other content (possibly another mode or type too).
    Modified,
    /// Same content, other mode.
    ModeChanged,
    /// Moved from [`ManifestEntry::from`], same content.
    Renamed,
}

impl Manifest {
    /// The manifest rows of `changes`, without the content digests (the `sha256` and
    /// `size` fields are left empty): what a restore compares a recomputed tree with.
    pub(crate) fn shape(changes: &[Change]) -> (Vec<ManifestEntry>, Vec<String>) {
        let mut entries = Vec::new();
        let mut deleted = Vec::new();
        for change in changes {
            let Some(new) = change.new else {
                deleted.push(change.path.clone());
                continue;
            };
            let (kind, from) = match &change.kind {
                ChangeKind::Added => (EntryKind::Added, None),
                ChangeKind::ModeChanged => (EntryKind::ModeChanged, None),
                ChangeKind::Renamed { from } => (EntryKind::Renamed, Some(from.clone())),
                _ => (EntryKind::Modified, None),
            };
            entries.push(ManifestEntry {
                path: change.path.clone(),
                kind,
                from,
                mode: format!("{:o}", new.mode),
                blob: new.id.to_string(),
                sha256: String::new(),
                size: 0,
            });
        }
        (entries, deleted)
    }

    /// The changes in `git diff --name-status` form (`A`, `M`, `T` for a type
    /// change, `D`, `R100` with both paths), one line each, sorted by path.
    pub fn name_status(&self) -> String {
        let mut lines: Vec<(&str, String)> = Vec::new();
        for entry in &self.entries {
            let line = match (&entry.kind, &entry.from) {
                (EntryKind::Renamed, Some(from)) => format!("R100\t{from}\t{}", entry.path),
                (EntryKind::Added, _) => format!("A\t{}", entry.path),
                _ => format!("M\t{}", entry.path),
            };
            lines.push((&entry.path, line));
        }
        lines.extend(self.deleted.iter().map(|p| (p.as_str(), format!("D\t{p}"))));
        lines.sort();
        lines.into_iter().map(|(_, l)| l + "\n").collect()
    }

    /// Checks every path and field before anything is written: paths must be
    /// relative, plain (no `..`, `.` or empty components, no `.git` component, no
    /// NUL) and listed once across entries, rename sources and deletions; modes,
    /// ids and digests must be well formed.
    pub(crate) fn validate(&self, digest: &str) -> Result<(), SnapshotError> {
        if self.version != MANIFEST_VERSION {
            return Err(SnapshotError::UnsupportedVersion {
                digest: digest.into(),
                version: self.version,
            });
        }
        let malformed = |path: &str, reason| SnapshotError::ArchiveMismatch {
            digest: digest.into(),
            path: path.into(),
            reason,
        };
        for (field, id) in [
            ("base_commit", &self.base_commit),
            ("base_tree", &self.base_tree),
        ] {
            if !is_hex(id, 40) {
                return Err(malformed(field, "not a full SHA-1 object id"));
            }
        }
        let mut seen = BTreeSet::new();
        let mut claim = |path: &str| -> Result<(), SnapshotError> {
            safe_path(path).map_err(|reason| SnapshotError::UnsafeEntry {
                digest: digest.into(),
                path: path.into(),
                reason,
            })?;
            if !seen.insert(path.to_owned()) {
                return Err(SnapshotError::UnsafeEntry {
                    digest: digest.into(),
                    path: path.into(),
                    reason: "the path is listed more than once",
                });
            }
            Ok(())
        };
        for entry in &self.entries {
            claim(&entry.path)?;
            match (&entry.kind, &entry.from) {
                (EntryKind::Renamed, Some(from)) => claim(from)?,
                (EntryKind::Renamed, None) => {
                    return Err(malformed(&entry.path, "a rename without `from`"));
                }
                (_, Some(_)) => {
                    return Err(malformed(
                        &entry.path,
                        "`from` on an entry that is not a rename",
                    ));
                }
                _ => {}
            }
            entry
                .entry()
                .ok_or_else(|| malformed(&entry.path, "mode or blob id is malformed"))?;
            if !is_hex(&entry.sha256, 64) {
                return Err(malformed(&entry.path, "sha256 is malformed"));
            }
        }
        for path in &self.deleted {
            claim(path)?;
        }
        Ok(())
    }
}

impl ManifestEntry {
    /// The git mode and blob id, or `None` when either is malformed.
    pub fn entry(&self) -> Option<Entry> {
        let mode = u32::from_str_radix(&self.mode, 8).ok()?;
        if ![MODE_FILE, MODE_EXECUTABLE, MODE_SYMLINK].contains(&mode) || !is_hex(&self.blob, 40) {
            return None;
        }
        let id = gix::ObjectId::from_hex(self.blob.as_bytes()).ok()?;
        Some(Entry::new(mode, id))
    }
}

/// Why `path` is not a plain relative path that may be written under a root.
pub(crate) fn safe_path(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("the path is empty");
    }
    if path.contains('\0') {
        return Err("the path contains a NUL byte");
    }
    if path.starts_with('/') {
        return Err("the path is absolute");
    }
    for component in path.split('/') {
        match component {
            "" => return Err("the path has an empty component"),
            "." => return Err("the path has a `.` component"),
            ".." => return Err("the path has a `..` component"),
            _ if component.eq_ignore_ascii_case(".git") => {
                return Err("the path has a `.git` component");
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether `text` is `len` lower-case hexadecimal digits.
pub(crate) fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
