//! `manifest.json`: the sha256 and size of every other file of a bundle.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::EvidenceError;
use super::layout::{self, EntryKind, MANIFEST_FILE};

/// The contents of `manifest.json`.
///
/// ```json
/// { "version": 1, "algorithm": "sha256",
///   "files": { "commands/0001/stdout": { "sha256": "<hex>", "bytes": 12 } } }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The manifest format version; [`Manifest::VERSION`].
    pub version: u32,
    /// The digest algorithm; [`Manifest::ALGORITHM`].
    pub algorithm: String,
    /// Every file of the bundle except the manifest, by `/`-separated relative path,
    /// sorted.
    pub files: BTreeMap<String, ManifestEntry>,
}

/// The digest and size of one file of a bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    /// The lowercase hex sha256 of the file's bytes.
    pub sha256: String,
    /// The file's size in bytes.
    pub bytes: u64,
}

impl Manifest {
    /// The only format version written and understood.
    pub const VERSION: u32 = 1;
    /// The only digest algorithm written and understood.
    pub const ALGORITHM: &'static str = "sha256";

    /// Hashes every regular file under `dir` (except `manifest.json`) without
    /// following links; any symlink or other non-regular file is an error naming it.
    pub(crate) fn compute(dir: &Path) -> Result<Self, EvidenceError> {
        let mut files = BTreeMap::new();
        for entry in layout::walk(dir)? {
            if entry.kind != EntryKind::Regular {
                return Err(EvidenceError::NotRegularFile { path: entry.path });
            }
            if !entry.utf8 {
                return Err(EvidenceError::UnnameableFile {
                    path: entry.path,
                    reason: "the name is not valid UTF-8",
                });
            }
            if let Some(reason) = layout::bad_path_reason(&entry.rel) {
                return Err(EvidenceError::UnnameableFile {
                    path: entry.path,
                    reason,
                });
            }
            let file = layout::open_checked(&entry.path, &entry.meta)?;
            let digest = hash_reader(file, &entry.path)?;
            files.insert(entry.rel, digest);
        }
        Ok(Self {
            version: Self::VERSION,
            algorithm: Self::ALGORITHM.to_owned(),
            files,
        })
    }

    /// Reads and checks `dir/manifest.json` (which must be a regular file, not a link).
    pub(crate) fn read(dir: &Path) -> Result<Self, EvidenceError> {
        let path = dir.join(MANIFEST_FILE);
        let meta = std::fs::symlink_metadata(&path).map_err(|source| EvidenceError::Read {
            path: path.clone(),
            source,
        })?;
        let mut file = layout::open_checked(&path, &meta)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|source| EvidenceError::Read {
                path: path.clone(),
                source,
            })?;
        let manifest: Self =
            serde_json::from_slice(&bytes).map_err(|source| EvidenceError::Manifest {
                path: path.clone(),
                source,
            })?;
        if manifest.version != Self::VERSION || manifest.algorithm != Self::ALGORITHM {
            return Err(EvidenceError::UnsupportedManifest {
                path,
                version: manifest.version,
                algorithm: manifest.algorithm,
            });
        }
        Ok(manifest)
    }
}

/// Streams `reader` through sha256, returning the digest and the byte count.
pub(crate) fn hash_reader(
    mut reader: impl Read,
    path: &Path,
) -> Result<ManifestEntry, EvidenceError> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut bytes = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(EvidenceError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        hasher.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(ManifestEntry {
        sha256: crate::digest::to_hex(hasher.finalize().as_slice()),
        bytes,
    })
}
