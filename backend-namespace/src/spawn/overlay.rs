//! How a run's layers are stacked: the overlay's options, and what an earlier
//! mount of the same layers left in their work directory.
//!
//! The layers are mounted `volatile`: overlayfs then never syncs the upper
//! layer's file system itself, neither for an `fsync` inside the sandbox nor
//! when the overlay goes away. Without it, the end of every sandbox (the last
//! reference to the overlay dropped with its pid 1's mount namespace) syncs the
//! whole file system the upper directory is on, every dirty file of the host's
//! included, and the teardown waits for it. A run's writable layer is scratch:
//! what was written there is in the page cache, written back as any file is,
//! read from there by the export; the durable record of a run is its evidence
//! bundle, which is synced when it is sealed. What `volatile` gives up is a
//! promise to the sandbox's own programs: after a host crash their synced
//! writes to the checkout may be missing (a clean reboot syncs every file
//! system on its way down).
//!
//! A volatile mount leaves `work/incompat/volatile/dirty` in its work directory, and
//! overlayfs refuses to mount the layers again while it is there. The only
//! second mount of a run's layers is a workspace sealed again after its
//! sandbox was lost, whose checkout the runner has re-verified before; the
//! marker is removed then ([`clear_volatile_marker`]).

use std::io;
use std::path::Path;

/// overlayfs's own subdirectory of the work directory, where a volatile
/// mount leaves its marker: `work/incompat/volatile/dirty`.
const MARKER_DIRS: [&str; 3] = ["work", "incompat", "volatile"];
/// The marker's one file.
const MARKER_FILE: &str = "dirty";

/// The options after the three layer paths: no redirects and no
/// metadata-only copy-ups (so the upper directory is a plain tree of the
/// run's changes), trusted attributes in the `user.` namespace (the mount is
/// made in the run's user namespace), and no syncs of the upper file system.
pub(crate) const OPTIONS: &str = "redirect_dir=nofollow,metacopy=off,userxattr,volatile";

/// Removes the marker an earlier volatile mount of these layers left in
/// `work` (nothing when there is none), so they can be mounted again.
///
/// It is overlayfs's own (the work directory is never visible inside a
/// sandbox): an empty file in two directories of its own. `remove_file` and
/// `remove_dir` follow no link and remove nothing else; anything more there
/// (another feature overlayfs would refuse) is an error.
pub(crate) fn clear_volatile_marker(work: &Path) -> io::Result<()> {
    let [own, incompat, volatile] = MARKER_DIRS;
    let incompat = work.join(own).join(incompat);
    let volatile = incompat.join(volatile);
    let gone = |result: io::Result<()>| match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    gone(std::fs::remove_file(volatile.join(MARKER_FILE)))?;
    gone(std::fs::remove_dir(&volatile))?;
    gone(std::fs::remove_dir(&incompat))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_removed_and_nothing_else() {
        let work = tempfile::tempdir().unwrap();
        let incompat = work.path().join("work/incompat");
        std::fs::create_dir_all(incompat.join("volatile")).unwrap();
        std::fs::write(incompat.join("volatile/dirty"), b"").unwrap();
        std::fs::write(work.path().join("work/kept"), b"").unwrap();

        clear_volatile_marker(work.path()).unwrap();

        assert!(!incompat.exists(), "the marker and its directory are gone");
        assert!(work.path().join("work/kept").exists());
        // Again, with nothing to remove, and on a work directory never mounted.
        clear_volatile_marker(work.path()).unwrap();
        clear_volatile_marker(&work.path().join("never-mounted")).unwrap();
    }

    #[test]
    fn a_marker_that_is_not_an_empty_directory_is_an_error() {
        let work = tempfile::tempdir().unwrap();
        let marker = work.path().join("work/incompat/volatile");
        std::fs::create_dir_all(&marker).unwrap();
        std::fs::write(marker.join("dirty"), b"").unwrap();
        std::fs::write(marker.join("unexpected"), b"").unwrap();

        assert!(clear_volatile_marker(work.path()).is_err());
        assert!(
            marker.join("unexpected").exists(),
            "nothing unknown is removed"
        );
    }
}
