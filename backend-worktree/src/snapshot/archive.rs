//! The archive format: a deterministic tar, stored under the sha256 of its bytes.
//!
//! `snapshot.json` comes first, then one entry `tree/<path>` per manifest entry in
//! manifest order: a regular file (mode `0644` or `0755`) or a symlink (mode `0777`)
//! whose link name is the target text byte for byte. Every header is filled here
//! (GNU format, mtime, uid and gid zero, no user or group names), so the same state
//! always gives the same bytes and so the same digest. Nothing is ever read from
//! the host to fill a header (`append_path` is never used).

use std::fs::{self, File};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use tar::{EntryType, Header};
use workspace_core::digest::{sha256_hex, to_hex};

use super::SnapshotError;
use super::manifest::{MANIFEST_NAME, Manifest, TREE_PREFIX, is_hex};
use crate::changes::MODE_EXECUTABLE;

/// The file name of the archive with `digest` in a store.
pub(crate) fn archive_name(digest: &str) -> String {
    format!("{digest}.tar")
}

/// `digest` in lower case, or [`SnapshotError::InvalidDigest`] unless it is 64 hex
/// digits (so it can never name anything but a file directly in the store).
pub(crate) fn normalize_digest(digest: &str) -> Result<String, SnapshotError> {
    let lower = digest.to_ascii_lowercase();
    if is_hex(&lower, 64) {
        Ok(lower)
    } else {
        Err(SnapshotError::InvalidDigest {
            digest: digest.into(),
        })
    }
}

/// Writes the archive of `manifest` into `store` (created if missing): first to
/// `store/tmp-<random>`, then renamed to `store/<sha256>.tar`. `contents` yields the
/// bytes of each manifest entry, in manifest order (one each). Returns the digest and the final path.
pub(crate) fn write_archive(
    store: &Path,
    manifest: &Manifest,
    contents: &mut dyn Iterator<Item = Result<Vec<u8>, SnapshotError>>,
) -> Result<(String, PathBuf), SnapshotError> {
    fs::create_dir_all(store).map_err(|e| SnapshotError::io("create the store", store, e))?;
    let (tmp, file) = create_tmp(store)?;
    let written = (|| {
        let mut builder = tar::Builder::new(HashingWriter {
            inner: BufWriter::new(file),
            hasher: Sha256::new(),
        });
        let json =
            serde_json::to_vec_pretty(manifest).map_err(|source| SnapshotError::Manifest {
                operation: "encode",
                path: tmp.clone(),
                source,
            })?;
        let io = |e| SnapshotError::io("write the archive", &tmp, e);
        let mut header = new_header(EntryType::Regular, 0o644, json.len() as u64);
        builder
            .append_data(&mut header, MANIFEST_NAME, json.as_slice())
            .map_err(io)?;
        for (entry, data) in manifest.entries.iter().zip(contents) {
            let data = data?;
            let name = format!("{TREE_PREFIX}{}", entry.path);
            if entry.mode == "120000" {
                append_symlink(&mut builder, &name, &data).map_err(io)?;
            } else {
                let mode = if entry.mode == format!("{MODE_EXECUTABLE:o}") {
                    0o755
                } else {
                    0o644
                };
                let mut header = new_header(EntryType::Regular, mode, data.len() as u64);
                builder
                    .append_data(&mut header, &name, data.as_slice())
                    .map_err(io)?;
            }
        }
        let mut hashing = builder.into_inner().map_err(io)?;
        hashing.inner.flush().map_err(io)?;
        let file = hashing.inner.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        Ok(to_hex(&hashing.hasher.finalize()))
    })();
    let digest = match written {
        Ok(digest) => digest,
        Err(err) => {
            let _ = fs::remove_file(&tmp);
            return Err(err);
        }
    };
    let path = store.join(archive_name(&digest));
    if let Err(e) = fs::rename(&tmp, &path) {
        let _ = fs::remove_file(&tmp);
        return Err(SnapshotError::io("move the archive into place", &path, e));
    }
    // Best effort: make the rename durable.
    if let Ok(dir) = File::open(store) {
        let _ = dir.sync_all();
    }
    Ok((digest, path))
}

/// A verified archive: its manifest and the content of each manifest entry.
#[derive(Debug)]
pub(crate) struct Opened {
    /// The normalized digest.
    pub digest: String,
    /// The checked manifest.
    pub manifest: Manifest,
    /// The content of each manifest entry, in manifest order.
    pub contents: Vec<Vec<u8>>,
}

/// Reads `store/<digest>.tar` into memory once, refuses it unless its sha256 is
/// `digest`, then parses and checks the manifest and every entry against it.
/// Nothing is written.
pub(crate) fn open_archive(store: &Path, digest: &str) -> Result<Opened, SnapshotError> {
    let digest = normalize_digest(digest)?;
    let path = store.join(archive_name(&digest));
    let bytes = fs::read(&path).map_err(|e| SnapshotError::io("read the archive", &path, e))?;
    let actual = sha256_hex(&bytes);
    if actual != digest {
        return Err(SnapshotError::DigestMismatch {
            path,
            expected: digest,
            actual,
        });
    }
    let io = |e| SnapshotError::io("read the archive", &path, e);
    let mismatch = |entry: &str, reason| SnapshotError::ArchiveMismatch {
        digest: digest.clone(),
        path: entry.into(),
        reason,
    };
    let mut archive = tar::Archive::new(bytes.as_slice());
    let mut entries = archive.entries().map_err(io)?;

    let mut first = match entries.next() {
        Some(entry) => entry.map_err(io)?,
        None => return Err(mismatch(MANIFEST_NAME, "the archive is empty")),
    };
    if first.path_bytes().as_ref() != MANIFEST_NAME.as_bytes()
        || first.header().entry_type() != EntryType::Regular
    {
        return Err(mismatch(
            MANIFEST_NAME,
            "the first entry is not snapshot.json",
        ));
    }
    let mut json = Vec::new();
    first.read_to_end(&mut json).map_err(io)?;
    drop(first);
    let manifest: Manifest =
        serde_json::from_slice(&json).map_err(|source| SnapshotError::Manifest {
            operation: "parse",
            path: path.clone(),
            source,
        })?;
    manifest.validate(&digest)?;

    let mut contents = Vec::with_capacity(manifest.entries.len());
    for listed in &manifest.entries {
        let mut entry = match entries.next() {
            Some(entry) => entry.map_err(io)?,
            None => return Err(mismatch(&listed.path, "the archive has no entry for it")),
        };
        let expected_name = format!("{TREE_PREFIX}{}", listed.path);
        if entry.path_bytes().as_ref() != expected_name.as_bytes() {
            return Err(mismatch(
                &listed.path,
                "the tar entry in its place has another path",
            ));
        }
        let Some(git) = listed.entry() else {
            return Err(mismatch(&listed.path, "mode or blob id is malformed"));
        };
        let kind = entry.header().entry_type();
        let data = if git.is_symlink() {
            if kind != EntryType::Symlink {
                return Err(mismatch(
                    &listed.path,
                    "the manifest says symlink, the tar entry is not one",
                ));
            }
            match entry.link_name_bytes() {
                Some(target) => target.into_owned(),
                None => return Err(mismatch(&listed.path, "the symlink entry has no target")),
            }
        } else {
            if kind != EntryType::Regular {
                return Err(mismatch(
                    &listed.path,
                    "the manifest says file, the tar entry is not a regular file",
                ));
            }
            let mut data = Vec::new();
            entry.read_to_end(&mut data).map_err(io)?;
            data
        };
        let blob = gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, &data)
            .map_err(|source| SnapshotError::Hash {
                digest: digest.clone(),
                path: listed.path.clone(),
                source,
            })?;
        if data.len() as u64 != listed.size || sha256_hex(&data) != listed.sha256 || blob != git.id
        {
            return Err(mismatch(
                &listed.path,
                "its content does not match the manifest's size, sha256 or blob id",
            ));
        }
        contents.push(data);
    }
    if let Some(extra) = entries.next() {
        let extra = extra.map_err(io)?;
        let name = String::from_utf8_lossy(&extra.path_bytes()).into_owned();
        return Err(mismatch(
            &name,
            "the archive has an entry the manifest does not list",
        ));
    }
    Ok(Opened {
        digest,
        manifest,
        contents,
    })
}

/// A GNU header of `kind` with fixed metadata: mtime, uid and gid zero.
fn new_header(kind: EntryType, mode: u32, size: u64) -> Header {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}

/// Appends a symlink entry whose link name is `target` byte for byte: in the
/// header when it fits, else in a GNU long-link entry before it. (The tar crate's
/// `set_link_name` would normalize `a//b` or `a/./b`, changing the blob.)
fn append_symlink<W: Write>(
    builder: &mut tar::Builder<W>,
    name: &str,
    target: &[u8],
) -> std::io::Result<()> {
    let mut header = new_header(EntryType::Symlink, 0o777, 0);
    let slot = &mut header.as_old_mut().linkname;
    if target.len() <= slot.len() && !target.contains(&0) {
        slot[..target.len()].copy_from_slice(target);
    } else {
        let mut long = new_header(EntryType::GNULongLink, 0o644, target.len() as u64 + 1);
        let marker = b"././@LongLink";
        long.as_old_mut().name[..marker.len()].copy_from_slice(marker);
        long.set_cksum();
        builder.append(&long, target.chain(&[0u8][..]))?;
    }
    builder.append_data(&mut header, name, std::io::empty())
}

/// Creates `store/tmp-<random>` exclusively.
fn create_tmp(store: &Path) -> Result<(PathBuf, File), SnapshotError> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    loop {
        let mut hasher = Sha256::new();
        hasher.update(std::process::id().to_le_bytes());
        hasher.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        hasher.update(now.as_nanos().to_le_bytes());
        let random = to_hex(&hasher.finalize()[..8]);
        let path = store.join(format!("tmp-{random}"));
        match File::options().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(SnapshotError::io("create a temporary archive", &path, e)),
        }
    }
}

/// A writer that hashes what goes through it.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}
