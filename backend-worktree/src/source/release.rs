//! Removing a checkout from the host.

use std::fs;
use std::path::Path;

use super::SourceError;

/// Removes the directory tree at `path`; a missing path is not an error.
///
/// Symlinks are never followed: `std::fs::remove_dir_all` removes a link found in the
/// tree as a link (on Linux it walks with `openat`/`unlinkat` and `O_NOFOLLOW`), and
/// if `path` itself is a symlink only the link is removed. So a link the agent planted
/// pointing at host files removes the link, never the files.
pub(crate) fn remove_tree(path: &Path) -> Result<(), SourceError> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SourceError::io("inspect the checkout", path, e)),
        Ok(meta) if meta.is_dir() => {
            fs::remove_dir_all(path).map_err(|e| SourceError::io("remove the checkout", path, e))
        }
        Ok(_) => fs::remove_file(path).map_err(|e| SourceError::io("remove the checkout", path, e)),
    }
}
