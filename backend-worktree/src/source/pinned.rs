//! The files a contract pins (fixtures, lockfiles), digested as the checkout
//! was made: what the runner compares with the contract's digests before any
//! command runs, and what the evidence records.
//!
//! Each file is opened beneath the checkout's root through a
//! [`cap_std::fs::Dir`]: the checkout's content is the repository's, which may
//! plant a symlink leading out of it, and such a file is not the checkout's (it
//! is recorded as absent). In a layered checkout the run's upper layer (where
//! inputs were copied) is looked in first, then the shared base tree.

use std::io::Read;
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use sha2::{Digest, Sha256};
use workspace_core::boundary::{PinnedAs, PinnedFile, SourceRecord};
use workspace_core::contract::EnvironmentSection;

use super::SourceError;

/// The digest of every file `environment` pins, as `record`'s checkout has it.
pub(crate) fn pinned_files(
    record: &SourceRecord,
    environment: &EnvironmentSection,
) -> Result<Vec<PinnedFile>, SourceError> {
    let wanted = PinnedAs::of(environment);
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let roots: Vec<&Path> = match &record.layers {
        Some(layers) => vec![layers.upper.as_path(), layers.lower.as_path()],
        None => vec![record.workspace.as_path()],
    };
    let dirs = roots
        .iter()
        .map(|root| {
            Dir::open_ambient_dir(root, ambient_authority())
                .map_err(|e| SourceError::io("open the checkout", *root, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    wanted
        .into_iter()
        .map(|(path, pinned_as)| {
            let sha256 = digest_in(&dirs, &path, roots[0])?;
            Ok(PinnedFile {
                path,
                pinned_as,
                sha256,
            })
        })
        .collect()
}

/// The sha256 of `path` in the first of `dirs` that has it as a regular file
/// (reached without leaving that directory); `None` if none has.
fn digest_in(dirs: &[Dir], path: &str, shown: &Path) -> Result<Option<String>, SourceError> {
    for dir in dirs {
        let mut file = match dir.open(path) {
            Ok(file) => file,
            // Absent, or only reachable by leaving the checkout: not its file.
            Err(_) => continue,
        };
        let is_file = file
            .metadata()
            .map_err(|e| SourceError::io("inspect a pinned file", shown.join(path), e))?
            .is_file();
        if !is_file {
            continue;
        }
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            let read = file
                .read(&mut buffer)
                .map_err(|e| SourceError::io("read a pinned file", shown.join(path), e))?;
            if read == 0 {
                break;
            }
            hasher.update(&buffer[..read]);
        }
        let digest = hasher.finalize();
        return Ok(Some(workspace_core::digest::to_hex(&digest)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(path: &Path) -> Dir {
        Dir::open_ambient_dir(path, ambient_authority()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_pinned_path_leading_out_of_the_checkout_is_not_its_file() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let outside = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(outside.path().join("secret"), b"host data")
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("abs"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(
            "../../../../../../../../etc/hostname",
            root.path().join("rel"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.path().join("real"), b"fixture").unwrap_or_else(|e| panic!("{e}"));
        let dirs = [dir(root.path())];
        for path in ["abs", "rel", "missing", "../real"] {
            let digest = digest_in(&dirs, path, root.path()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(digest, None, "{path}");
        }
        let digest = digest_in(&dirs, "real", root.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            digest.as_deref(),
            Some(workspace_core::digest::sha256_hex(b"fixture").as_str())
        );
    }

    #[test]
    fn the_upper_layer_is_looked_in_before_the_base_tree() {
        let upper = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let lower = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(upper.path().join("f"), b"input").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(lower.path().join("f"), b"tracked").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(lower.path().join("g"), b"tracked").unwrap_or_else(|e| panic!("{e}"));
        let dirs = [dir(upper.path()), dir(lower.path())];
        let digest = |path| digest_in(&dirs, path, upper.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            digest("f"),
            Some(workspace_core::digest::sha256_hex(b"input"))
        );
        assert_eq!(
            digest("g"),
            Some(workspace_core::digest::sha256_hex(b"tracked"))
        );
    }
}
