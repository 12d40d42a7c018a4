//! [`verify`]: re-hash a sealed bundle and report every difference from its manifest.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Serialize;

use super::EvidenceError;
use super::completeness::Completeness;
use super::layout::{self, EntryKind, EvidenceFile};
use super::manifest::{self, Manifest};

/// One problem found in a sealed bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Tamper {
    /// The file's content differs from the manifest.
    Changed {
        /// The file, relative to the bundle.
        path: String,
        /// The sha256 in the manifest.
        expected: String,
        /// The sha256 of the file now.
        actual: String,
    },
    /// A file listed in the manifest is not in the bundle (as a regular file
    /// reached through real directories).
    Missing {
        /// The file, relative to the bundle.
        path: String,
    },
    /// A regular file in the bundle is not listed in the manifest.
    Extra {
        /// The file, relative to the bundle.
        path: String,
    },
    /// A symlink, fifo, socket or device sits in the bundle; it was not followed.
    NotRegular {
        /// The entry, relative to the bundle.
        path: String,
    },
    /// A manifest entry is not a canonical relative path (absolute, `..`, ...); it
    /// was not looked up.
    BadPath {
        /// The path as written in the manifest.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl Tamper {
    /// The path the problem is about, as in the manifest or relative to the bundle.
    pub fn path(&self) -> &str {
        match self {
            Self::Changed { path, .. }
            | Self::Missing { path }
            | Self::Extra { path }
            | Self::NotRegular { path }
            | Self::BadPath { path, .. } => path,
        }
    }
}

impl fmt::Display for Tamper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Changed {
                path,
                expected,
                actual,
            } => write!(
                f,
                "{path}: changed (sha256 {actual}, manifest says {expected})"
            ),
            Self::Missing { path } => write!(f, "{path}: missing (listed in the manifest)"),
            Self::Extra { path } => write!(f, "{path}: extra file (not in the manifest)"),
            Self::NotRegular { path } => {
                write!(
                    f,
                    "{path}: not a regular file (symlink or special file, not followed)"
                )
            }
            Self::BadPath { path, reason } => {
                write!(
                    f,
                    "{path:?}: invalid manifest path ({reason}), not looked up"
                )
            }
        }
    }
}

/// The outcome of [`verify`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// How many files were hashed and compared with the manifest.
    pub files_checked: usize,
    /// Every problem found, sorted by path; empty if the bundle is intact.
    pub problems: Vec<Tamper>,
    /// What the bundle's `outcome.json` says it does not record (read only when
    /// the manifest vouches for that file).
    pub completeness: Completeness,
}

impl VerifyReport {
    /// Whether the bundle matches its manifest exactly.
    pub fn is_intact(&self) -> bool {
        self.problems.is_empty()
    }

    /// Whether the bundle records the run's changes: it is intact and its
    /// export did not fail. (Changes its patch does not carry are listed, in
    /// `changes.json`: the record is complete, the patch is not promoted.)
    pub fn is_complete(&self) -> bool {
        self.is_intact() && self.completeness.export_failed.is_none()
    }
}

/// Checks the sealed bundle in `dir` against its `manifest.json` and reports every
/// problem, not just the first.
///
/// The directory is walked without following links. Only regular files found by
/// that walk are ever opened, so neither a planted symlink nor a manifest entry
/// such as `../outside` can make verification read outside the bundle.
///
/// Errors (rather than problems in the report) mean the check could not be done:
/// `manifest.json` is missing, not a regular file, not valid, or a file could not
/// be read.
///
/// # Ambient authority
/// Reads a host directory chosen by the caller.
pub fn verify(dir: &Path) -> Result<VerifyReport, EvidenceError> {
    let manifest = Manifest::read(dir)?;
    let mut problems = Vec::new();
    let mut expected = BTreeMap::new();
    for (path, entry) in &manifest.files {
        match layout::bad_path_reason(path) {
            Some(reason) => problems.push(Tamper::BadPath {
                path: path.clone(),
                reason,
            }),
            None => {
                expected.insert(path.as_str(), entry);
            }
        }
    }
    let mut files_checked = 0;
    let mut completeness = Completeness::default();
    let outcome_file = EvidenceFile::Outcome.file_name();
    for found in layout::walk(dir)? {
        let listed = if found.utf8 {
            expected.remove(found.rel.as_str())
        } else {
            None
        };
        if found.kind == EntryKind::NotRegular {
            problems.push(Tamper::NotRegular { path: found.rel });
            continue;
        }
        let Some(listed) = listed else {
            problems.push(Tamper::Extra { path: found.rel });
            continue;
        };
        let file = layout::open_checked(&found.path, &found.meta)?;
        let actual = manifest::hash_reader(file, &found.path)?;
        files_checked += 1;
        if found.rel == outcome_file && actual == *listed {
            // Read again, now that its digest matched (a swap in between is a
            // bundle someone is rewriting as it is checked: not defended).
            let bytes = std::fs::read(&found.path).map_err(|source| EvidenceError::Read {
                path: found.path.clone(),
                source,
            })?;
            completeness = super::completeness::read(&bytes).unwrap_or_default();
        }
        if actual != *listed {
            problems.push(Tamper::Changed {
                path: found.rel,
                expected: listed.sha256.clone(),
                actual: actual.sha256,
            });
        }
    }
    problems.extend(expected.into_keys().map(|path| Tamper::Missing {
        path: path.to_owned(),
    }));
    problems.sort_by(|a, b| a.path().cmp(b.path()));
    Ok(VerifyReport {
        files_checked,
        problems,
        completeness,
    })
}
