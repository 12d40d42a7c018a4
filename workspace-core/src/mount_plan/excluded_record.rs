//! The excluded paths of a checkout the run writes in place (a standalone
//! copy), kept by inode from the run's first seal on.
//!
//! A mask is a mount on the excluded path; in a checkout that is a plain
//! directory the run may rename a directory above it (`mv secrets s2`): the
//! mount moves along inside the sandbox, but on the host the file is now at
//! `s2/pin`, which no pattern matches, and a sandbox sealed again later (after
//! its pid 1 died, a restart, a resume that could not freeze) would show it.
//! So the first seal records each excluded path's inode, and every seal masks
//! an inode so recorded wherever it is found. (A layered checkout cannot move
//! them: overlayfs refuses to rename a directory of the lower layer.)

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::checkout::{CheckoutError, excluded_paths};

/// The record's file in the run directory.
pub const EXCLUDED_RECORD_FILE: &str = "excluded.json";

/// One excluded path as the first seal found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Recorded {
    path: String,
    /// A file (else a directory), as [`excluded_paths`] says.
    file: bool,
    ino: u64,
}

/// [`excluded_paths`] of the checkout `workspace`, plus every path at which an
/// inode excluded at an earlier seal of the run is found now; records the
/// inodes of what is excluded in `run_dir` for the next seal.
///
/// # Ambient authority
/// Reads and writes host paths: `workspace` (walked without following links)
/// and `run_dir`.
pub fn excluded_paths_kept(
    run_dir: &Path,
    workspace: &Path,
    patterns: &[String],
) -> Result<Vec<(String, bool)>, CheckoutError> {
    let io = |step: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckoutError::Io { step, path, source }
    };
    let record_path = run_dir.join(EXCLUDED_RECORD_FILE);
    let mut found: BTreeMap<String, bool> = excluded_paths(&[workspace], patterns)?
        .into_iter()
        .collect();
    let mut recorded: Vec<Recorded> = match std::fs::read(&record_path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            io("reading the excluded paths' record", &record_path)(std::io::Error::other(e))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io("reading the excluded paths' record", &record_path)(e)),
    };
    if !recorded.is_empty() {
        // By inode alone: a capped disk mounted again may show another
        // device number, and the checkout is one file system.
        let wanted: HashMap<u64, bool> = recorded.iter().map(|r| (r.ino, r.file)).collect();
        let mut moved = Vec::new();
        walk(workspace, "", &wanted, &mut moved).map_err(io("walking the checkout", workspace))?;
        found.extend(moved);
    }
    // What is excluded now is kept for the next seal too.
    let mut changed = false;
    for (path, file) in &found {
        let Ok(meta) = std::fs::symlink_metadata(workspace.join(path)) else {
            continue;
        };
        use std::os::unix::fs::MetadataExt;
        let entry = Recorded {
            path: path.clone(),
            file: *file,
            ino: meta.ino(),
        };
        if !recorded.iter().any(|r| r.ino == entry.ino) {
            recorded.push(entry);
            changed = true;
        }
    }
    if changed {
        let text = serde_json::to_vec(&recorded).map_err(|e| {
            io("writing the excluded paths' record", &record_path)(std::io::Error::other(e))
        })?;
        std::fs::create_dir_all(run_dir)
            .and_then(|()| std::fs::write(&record_path, text))
            .map_err(io("writing the excluded paths' record", &record_path))?;
    }
    Ok(found.into_iter().collect())
}

/// Adds to `moved` every path under `dir` (prefix `prefix`) whose inode is in
/// `wanted`, not descending into a match nor following a link.
fn walk(
    dir: &Path,
    prefix: &str,
    wanted: &HashMap<u64, bool>,
    moved: &mut Vec<(String, bool)>,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?; // not following a link
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let rel = if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        };
        if let Some(file) = wanted.get(&meta.ino()) {
            moved.push((rel, *file));
        } else if meta.is_dir() && rel != ".git" {
            walk(&entry.path(), &rel, wanted, moved)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;

    #[test]
    fn an_excluded_directory_renamed_in_the_checkout_is_still_excluded() {
        let tmp = tempfile::tempdir().unwrap();
        let (run_dir, checkout) = (tmp.path().join("run"), tmp.path().join("checkout"));
        std::fs::create_dir_all(&run_dir).unwrap();
        std::fs::create_dir_all(checkout.join("secrets")).unwrap();
        std::fs::create_dir_all(checkout.join("src")).unwrap();
        std::fs::write(checkout.join("secrets/pin"), "4711").unwrap();
        std::fs::write(checkout.join("src/main.rs"), "fn main() {}").unwrap();
        let patterns = vec!["secrets/**".to_owned()];
        let first = excluded_paths_kept(&run_dir, &checkout, &patterns).unwrap();
        assert_eq!(first, vec![("secrets/pin".to_owned(), true)]);
        // The run moves the directory away from its pattern.
        std::fs::rename(checkout.join("secrets"), checkout.join("s2")).unwrap();
        let again = excluded_paths_kept(&run_dir, &checkout, &patterns).unwrap();
        assert_eq!(again, vec![("s2/pin".to_owned(), true)]);
        // An ordinary file is never taken for one.
        assert!(!again.iter().any(|(p, _)| p.starts_with("src")));
    }
}
