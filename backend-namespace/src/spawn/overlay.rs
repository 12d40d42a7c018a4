//! How a run's layers are stacked: the overlay's options, and what an earlier
//! mount of the same layers left in their work directory.
//!
//! The layers (a layered checkout's, a service template's) are mounted
//! `volatile`: overlayfs then never syncs the upper layer's file system
//! itself, neither for an `fsync` inside the sandbox nor when the overlay goes
//! away. Without it, the end of every sandbox (the last reference to the
//! overlay dropped with its pid 1's mount namespace) syncs the whole file
//! system the upper directory is on, every dirty file of the host's included,
//! and the teardown waits for it. A run's writable layer is scratch: what was
//! written there is in the page cache, written back as any file is, read from
//! there by the export; the durable record of a run is its evidence bundle,
//! synced when it is sealed, and a template is synced when it is published.
//! What `volatile` gives up is a promise to the sandbox's own programs: after
//! an unclean restart of the host their synced writes to the layer may be
//! missing (a clean one syncs every file system on its way down).
//!
//! A volatile mount leaves `work/incompat/volatile/dirty` in its work
//! directory, and overlayfs refuses to mount the layers again while it is
//! there. The only second mount of a run's layers is a workspace sealed again
//! after its sandbox was lost (its pid 1 gone, its cgroups emptied by the
//! teardown before); the marker is removed then ([`clear_volatile_marker`]).
//! When the host restarted in between, the loss says so (the sandbox record
//! keeps the boot's id), and the resume records it.

use std::ffi::OsStr;
use std::io;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::AT_FDCWD;
use nix::unistd::{UnlinkatFlags, unlinkat};
use workspace_core::own_dirs::open_dir;

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
/// sandbox): an empty file in directories overlayfs makes with mode 0. Each
/// is opened below the one before without following a link, and one this
/// process may not enter is made enterable first when it is this process's
/// own (an ordinary user has no `CAP_DAC_OVERRIDE`). Only the marker is
/// removed: anything more there (another feature overlayfs would refuse) is
/// an error.
pub(crate) fn clear_volatile_marker(work: &Path) -> io::Result<()> {
    let Some(mut dir) = open_dir(AT_FDCWD, work.as_os_str())? else {
        return Ok(());
    };
    let mut parents = Vec::with_capacity(MARKER_DIRS.len());
    for name in MARKER_DIRS {
        let Some(next) = open_dir(&dir, OsStr::new(name))? else {
            return Ok(());
        };
        parents.push(std::mem::replace(&mut dir, next));
    }
    let gone = |result: nix::Result<()>| match result {
        Err(Errno::ENOENT) | Ok(()) => Ok(()),
        Err(e) => Err(io::Error::from(e)),
    };
    gone(unlinkat(&dir, MARKER_FILE, UnlinkatFlags::NoRemoveDir))?;
    // `volatile` from `incompat`, then `incompat` from overlayfs's `work`.
    for (parent, name) in parents.iter().rev().zip(MARKER_DIRS.iter().rev()).take(2) {
        gone(unlinkat(parent, *name, UnlinkatFlags::RemoveDir))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Marks `work` as a volatile mount does: the marker file in directories
    /// of mode 0.
    fn mark(work: &Path) -> std::path::PathBuf {
        let marker = work.join("work/incompat/volatile");
        std::fs::create_dir_all(&marker).unwrap();
        std::fs::write(marker.join("dirty"), b"").unwrap();
        for dir in ["work/incompat/volatile", "work/incompat", "work"] {
            std::fs::set_permissions(work.join(dir), std::fs::Permissions::from_mode(0o0)).unwrap();
        }
        work.join("work/incompat")
    }

    #[test]
    fn the_marker_is_removed_and_nothing_else() {
        let work = tempfile::tempdir().unwrap();
        let incompat = mark(work.path());
        std::fs::set_permissions(
            work.path().join("work"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        std::fs::write(work.path().join("work/kept"), b"").unwrap();

        clear_volatile_marker(work.path()).unwrap();

        assert!(
            !incompat.exists(),
            "the marker and its directories are gone"
        );
        assert!(work.path().join("work/kept").exists());
        // Again, with nothing to remove, and on a work directory never mounted.
        clear_volatile_marker(work.path()).unwrap();
        clear_volatile_marker(&work.path().join("never-mounted")).unwrap();
    }

    #[test]
    fn a_marker_directory_holding_more_is_an_error() {
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

    #[test]
    fn a_link_on_the_way_is_not_followed() {
        let work = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = elsewhere.path().join("incompat/volatile");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("dirty"), b"").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), work.path().join("work")).unwrap();

        assert!(clear_volatile_marker(work.path()).is_err());
        assert!(
            outside.join("dirty").exists(),
            "nothing behind the link is touched"
        );
    }

    const CHILD_ENV: &str = "AW_OVERLAY_MARKER_CHILD";

    /// Overlayfs makes the marker's directories with mode 0: a runner
    /// without `CAP_DAC_OVERRIDE` clears it all the same (its body runs as
    /// `nobody`, re-executed through `setpriv`).
    #[test]
    fn an_ordinary_user_clears_a_marker_in_directories_of_mode_0() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&exe)
            .args([
                "spawn::overlay::tests::ordinary_user_child",
                "--ignored",
                "--exact",
                "--nocapture",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap_or_else(|e| {
                panic!("{e}: this test needs setpriv (Debian package util-linux) and root")
            });
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The body of [`an_ordinary_user_clears_a_marker_in_directories_of_mode_0`].
    #[test]
    #[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
    fn ordinary_user_child() {
        assert!(
            std::env::var_os(CHILD_ENV).is_some(),
            "runs only in the child of an_ordinary_user_clears_a_marker_in_directories_of_mode_0"
        );
        assert_ne!(nix::unistd::geteuid().as_raw(), 0, "not root");
        let work = tempfile::tempdir().unwrap();
        let incompat = mark(work.path());
        assert_eq!(
            std::fs::remove_file(incompat.join("volatile/dirty"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::PermissionDenied,
            "mode 0 keeps this user out"
        );

        clear_volatile_marker(work.path()).unwrap();

        std::fs::set_permissions(
            work.path().join("work"),
            std::fs::Permissions::from_mode(0o700),
        )
        .unwrap();
        assert!(
            !incompat.exists(),
            "the marker and its directories are gone"
        );
    }
}
