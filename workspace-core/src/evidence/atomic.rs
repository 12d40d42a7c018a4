//! Durable, all-or-nothing file writes: temp file, fsync, rename, fsync the directory.

use std::fs;
use std::io::Write;
use std::path::Path;

use super::EvidenceError;

/// Writes `bytes` to `dir/name` so that a reader sees either the old content or the
/// new one, never a torn file: the bytes go to `dir/.name.tmp` (created fresh), are
/// synced, the temp file is renamed onto `name`, and the directory is synced.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), EvidenceError> {
    let target = dir.join(name);
    let temp = dir.join(format!(".{name}.tmp"));
    // A temp file left by an earlier failed attempt is ours to replace.
    match fs::remove_file(&temp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(EvidenceError::Write { path: temp, source }),
    }
    let result = write_new_synced(&temp, bytes).and_then(|()| {
        fs::rename(&temp, &target).map_err(|source| EvidenceError::Rename {
            from: temp.clone(),
            to: target.clone(),
            source,
        })
    });
    if result.is_err() {
        // Best effort: do not leave a stray temp file in the bundle.
        let _ = fs::remove_file(&temp);
    }
    result?;
    sync_dir(dir)
}

/// Creates `path` (which must not exist), writes `bytes` and syncs it.
fn write_new_synced(path: &Path, bytes: &[u8]) -> Result<(), EvidenceError> {
    let wrap = |source| EvidenceError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(wrap)?;
    file.write_all(bytes).map_err(wrap)?;
    file.sync_all().map_err(wrap)
}

/// Makes the directory entries of `dir` durable (a no-op where directories cannot
/// be opened, i.e. outside Unix).
pub(crate) fn sync_dir(dir: &Path) -> Result<(), EvidenceError> {
    #[cfg(unix)]
    {
        let wrap = |source| EvidenceError::Write {
            path: dir.to_path_buf(),
            source,
        };
        fs::File::open(dir)
            .map_err(wrap)?
            .sync_all()
            .map_err(wrap)?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Serializes `value` as pretty JSON followed by a newline.
pub(crate) fn to_pretty_json(
    value: &impl serde::Serialize,
    path: &Path,
) -> Result<Vec<u8>, EvidenceError> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|source| EvidenceError::Serialize {
            path: path.to_path_buf(),
            source,
        })?;
    bytes.push(b'\n');
    Ok(bytes)
}
