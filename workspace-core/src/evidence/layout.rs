//! The names inside a bundle, and the walk over it that never follows a link.

use std::fs;
use std::path::{Path, PathBuf};

use super::EvidenceError;

/// The name of the manifest at the top of a bundle.
pub const MANIFEST_FILE: &str = "manifest.json";

/// The directory holding one sub-directory per recorded command.
pub const COMMANDS_DIR: &str = "commands";

/// The directory holding one sub-directory per service (`services/NAME/stdout`).
pub const SERVICES_DIR: &str = "services";

/// The well-known top-level files of a bundle, so that no caller passes a free path
/// string into the evidence directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EvidenceFile {
    /// `contract.json`: the contract as declared.
    Contract,
    /// `source.json`: which code and initial state the run received.
    Source,
    /// `observed.json`: what a probe inside the boundary actually saw.
    Observed,
    /// `diff.patch`: the change, applicable with `git apply` on the base revision.
    Diff,
    /// `changes.json`: the changed paths, in or out of scope.
    Changes,
    /// `checks.json`: the checks that ran and their outcome.
    Checks,
    /// `approvals.json`: who approved what.
    Approvals,
    /// `journal.jsonl`: a copy of the run's journal.
    Journal,
    /// `outcome.json`: how the run ended (final state, failure cause, exit of
    /// each command, what teardown left behind).
    Outcome,
    /// `promotion.json`: what promoting the patch did, or why it was refused
    /// (present only when promotion was asked for).
    Promotion,
    /// `services.json`: each service of the run: its command, when it started
    /// and became ready, its readiness attempts, how it ended.
    Services,
    /// `preview.json`: the run's preview endpoints and what the declared preview
    /// check got.
    Preview,
    /// `network.jsonl`: each connection attempt through an allowlisted run's
    /// egress proxy, allowed or denied.
    Network,
    /// `files.jsonl`: each write, removal, directory made and rename done
    /// through the workspace's files API (appended as it happens, by every
    /// process acting on the run).
    Files,
}

impl EvidenceFile {
    /// Every well-known file, in layout order.
    pub const ALL: [EvidenceFile; 14] = [
        Self::Contract,
        Self::Source,
        Self::Observed,
        Self::Diff,
        Self::Changes,
        Self::Checks,
        Self::Approvals,
        Self::Journal,
        Self::Outcome,
        Self::Promotion,
        Self::Services,
        Self::Preview,
        Self::Network,
        Self::Files,
    ];

    /// The file's name inside the run directory.
    pub fn file_name(&self) -> &'static str {
        match self {
            Self::Contract => "contract.json",
            Self::Source => "source.json",
            Self::Observed => "observed.json",
            Self::Diff => "diff.patch",
            Self::Changes => "changes.json",
            Self::Checks => "checks.json",
            Self::Approvals => "approvals.json",
            Self::Journal => "journal.jsonl",
            Self::Outcome => "outcome.json",
            Self::Promotion => "promotion.json",
            Self::Services => "services.json",
            Self::Preview => "preview.json",
            Self::Network => "network.jsonl",
            Self::Files => "files.jsonl",
        }
    }
}

/// Why a manifest path is refused, or `None` if it is a canonical relative path:
/// components separated by single `/`, none of them empty, `.` or `..`, no `\`
/// or NUL, not absolute, and not the manifest itself.
pub(crate) fn bad_path_reason(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        Some("the path is empty")
    } else if path.starts_with('/') {
        Some("the path is absolute")
    } else if path.contains('\\') || path.contains('\0') {
        Some("the path contains '\\' or NUL")
    } else if path.split('/').any(|c| c == "..") {
        Some("the path contains '..'")
    } else if path.split('/').any(|c| c.is_empty() || c == ".") {
        Some("the path has an empty or '.' component")
    } else if path == MANIFEST_FILE {
        Some("the manifest cannot list itself")
    } else {
        None
    }
}

/// What the walk found at one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// A regular file (its metadata was taken without following links).
    Regular,
    /// A symlink, fifo, socket, device or anything else that is neither a regular
    /// file nor a directory.
    NotRegular,
}

/// One non-directory entry found in a bundle.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The path relative to the bundle, `/`-separated (lossy if not UTF-8).
    pub rel: String,
    /// Whether every component of the name is valid UTF-8.
    pub utf8: bool,
    /// The full path.
    pub path: PathBuf,
    /// What it is.
    pub kind: EntryKind,
    /// Its metadata, taken without following links.
    pub meta: fs::Metadata,
}

/// Lists every non-directory entry under `root`, recursing into real directories
/// only; symlinks (to directories or otherwise) are reported, never followed.
/// The top-level `manifest.json` is skipped. Entries come back sorted by `rel`.
pub(crate) fn walk(root: &Path) -> Result<Vec<Entry>, EvidenceError> {
    let mut out = Vec::new();
    let mut pending: Vec<(PathBuf, String, bool)> = vec![(root.to_path_buf(), String::new(), true)];
    while let Some((dir, prefix, prefix_utf8)) = pending.pop() {
        let read = fs::read_dir(&dir).map_err(|source| EvidenceError::Read {
            path: dir.clone(),
            source,
        })?;
        for item in read {
            let item = item.map_err(|source| EvidenceError::Read {
                path: dir.clone(),
                source,
            })?;
            let path = item.path();
            let name = item.file_name();
            let utf8 = prefix_utf8 && name.to_str().is_some();
            let rel = format!("{prefix}{}", name.to_string_lossy());
            if rel == MANIFEST_FILE {
                continue;
            }
            let meta = fs::symlink_metadata(&path).map_err(|source| EvidenceError::Read {
                path: path.clone(),
                source,
            })?;
            let file_type = meta.file_type();
            if file_type.is_dir() {
                pending.push((path, format!("{rel}/"), utf8));
                continue;
            }
            let kind = if file_type.is_file() {
                EntryKind::Regular
            } else {
                EntryKind::NotRegular
            };
            out.push(Entry {
                rel,
                utf8,
                path,
                kind,
                meta,
            });
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Opens `path` for reading and checks that the opened file is the regular file
/// `expected` describes (taken with `symlink_metadata` just before), so a path that
/// was swapped for a symlink in between is refused rather than followed.
pub(crate) fn open_checked(
    path: &Path,
    expected: &fs::Metadata,
) -> Result<fs::File, EvidenceError> {
    if !expected.file_type().is_file() {
        return Err(EvidenceError::NotRegularFile {
            path: path.to_path_buf(),
        });
    }
    let file = fs::File::open(path).map_err(|source| EvidenceError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let opened = file.metadata().map_err(|source| EvidenceError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !opened.file_type().is_file() || !same_file(expected, &opened) {
        return Err(EvidenceError::ReplacedWhileOpening {
            path: path.to_path_buf(),
        });
    }
    Ok(file)
}

#[cfg(unix)]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    // Without inode numbers in std, compare what is portable.
    a.len() == b.len() && a.modified().ok() == b.modified().ok()
}
