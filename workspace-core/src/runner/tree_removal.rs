//! Removing a tree of the runner's own, whatever modes a run left in it.

use std::path::Path;

/// Removes the directory tree `path`, links as links, making directories of
/// the runner's own it may not read or change its owner's first
/// ([`crate::own_dirs`]: overlayfs's `work/work` is mode 0).
pub(super) fn remove_tree(path: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    return crate::own_dirs::remove_tree(path);
    #[cfg(not(target_os = "linux"))]
    return std::fs::remove_dir_all(path);
}
