//! A run's capped disk (`environment.limits.disk`): the file system its
//! writable layer (checkout, template layers) lives on, mounted on the host at
//! the run's [`layer_dir`](workspace_core::boundary::RunContext::layer_dir)
//! before the checkout is provisioned there, so that a write past the cap gets
//! `ENOSPC` inside the run and the host's disk never gives it more.
//!
//! Which kind, chosen when the disk is made ([`kind_for`]):
//!
//! * a cap of at most [`TMPFS_MAX_BYTES`] and at most a quarter of the run's
//!   memory cap: a tmpfs of that size (made in well under a millisecond; its
//!   pages are memory, charged to the memory cgroup of the run process that
//!   writes them, and lost if the host restarts). A tmpfs as large as the
//!   memory cap would make a full disk an out-of-memory kill, where the run
//!   expects "No space left on device";
//! * any other cap: a sparse image file of the cap's size in the run directory,
//!   formatted ext4 (`mkfs.ext4`, no reserved blocks, no discard) and
//!   loop-mounted (`mount -o loop`, which sets the device to detach itself at
//!   unmount). The host pays only for the blocks written.
//!
//! Project quotas, the third way to cap a directory, need a kernel built with
//! quota support and a file system mounted with `prjquota`; neither is assumed,
//! and the two above cap any host.
//!
//! Both are mounted `nosuid,nodev`, their root owned like the run directory.
//! Mounting needs the host's root (`CAP_SYS_ADMIN` in the initial user
//! namespace): [`available`] says whether this process can.

mod disks;
mod error;
mod mounted;

pub use disks::LoopDisks;

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::mount::{MntFlags, umount2};
use workspace_core::boundary::{DiskKind, DiskRecord, DiskUsage};
use workspace_core::contract::ByteSize;

pub use error::DiskError;
use mounted::{MountedDisk, loop_device_backing, mounted_at};

/// The image file of an image disk, in the run directory.
pub const IMAGE_FILE: &str = "disk.img";

/// The largest cap kept by a tmpfs; larger ones get an image.
pub const TMPFS_MAX_BYTES: u64 = 64 << 20;

/// Where the programs a disk needs are looked for (never the caller's `PATH`).
const PROGRAM_DIRS: [&str; 4] = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// Whether this process can make disks: mounting needs the host's root.
pub fn available() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The kind of disk a cap of `cap_bytes` gets in a run whose memory cap is
/// `memory_cap` (see the module docs).
pub fn kind_for(cap_bytes: u64, memory_cap: Option<u64>) -> DiskKind {
    let fits_memory = memory_cap.is_none_or(|memory| cap_bytes <= memory / 4);
    if cap_bytes <= TMPFS_MAX_BYTES && fits_memory {
        DiskKind::Tmpfs
    } else {
        DiskKind::Image
    }
}

/// Makes a disk of `cap_bytes` at `mount_point` for the run whose directory is
/// `run_dir` (the mount point's parent) and whose memory cap is `memory_cap`,
/// and reads it back. A cap the host cannot give (an image larger than the
/// run directory's file system has free, or than a file there can be) fails
/// with [`DiskError::TooLarge`] before anything is made.
///
/// # Ambient authority
/// Creates `mount_point` and the image under `run_dir`, and mounts on the host.
pub fn make(
    run_dir: &Path,
    mount_point: &Path,
    cap_bytes: u64,
    memory_cap: Option<u64>,
) -> Result<DiskRecord, DiskError> {
    let owner = std::fs::metadata(run_dir).map_err(DiskError::io("inspect", run_dir))?;
    let kind = kind_for(cap_bytes, memory_cap);
    if kind == DiskKind::Image {
        check_room(run_dir, cap_bytes)?;
    }
    create_mount_point(mount_point)?;
    let made = if kind == DiskKind::Tmpfs {
        mount_tmpfs(mount_point, cap_bytes, &owner)
    } else {
        let image = run_dir.join(IMAGE_FILE);
        format_image(&image, cap_bytes, &owner)
            .and_then(|()| mount_image(&image, mount_point, &owner))
    };
    if let Err(e) = made {
        // Nothing half-made stays behind.
        if let Err(cleanup) = remove(run_dir, mount_point) {
            tracing::warn!(error = %cleanup, "removing a disk that failed to mount failed");
        }
        return Err(e);
    }
    read_back(run_dir, mount_point, cap_bytes)
}

/// The disk made at `mount_point` before: read back where it is still mounted,
/// mounted again where its image is (the host restarted). A tmpfs that is no
/// longer mounted is gone with what the run wrote on it: that fails.
///
/// # Ambient authority
/// Mounts on the host.
pub fn remount(
    run_dir: &Path,
    mount_point: &Path,
    cap_bytes: u64,
) -> Result<DiskRecord, DiskError> {
    if mounted_at(mount_point)?.is_none() {
        let image = run_dir.join(IMAGE_FILE);
        if !image.is_file() {
            return Err(DiskError::Gone {
                path: mount_point.to_path_buf(),
                reason: "it was a tmpfs, which does not outlive the host's restart: what the run wrote on it is lost".into(),
            });
        }
        let owner = std::fs::metadata(run_dir).map_err(DiskError::io("inspect", run_dir))?;
        mount_image(&image, mount_point, &owner)?;
    }
    read_back(run_dir, mount_point, cap_bytes)
}

/// What the disk at `mount_point` holds now, and the most it ever held;
/// `None` when nothing is mounted there (the figures would be the run
/// directory's file system's).
pub fn usage(run_dir: &Path, mount_point: &Path) -> Result<Option<DiskUsage>, DiskError> {
    if mounted_at(mount_point)?.is_none() {
        return Ok(None);
    }
    let stat = nix::sys::statvfs::statvfs(mount_point)
        .map_err(|e| DiskError::io("read the usage of", mount_point)(e.into()))?;
    let fragment = stat.fragment_size();
    let used_bytes = (stat.blocks().saturating_sub(stat.blocks_free())).saturating_mul(fragment);
    let image = run_dir.join(IMAGE_FILE);
    let peak_bytes = match std::fs::metadata(&image) {
        // `st_blocks` counts 512-byte units whatever the block size.
        Ok(meta) => Some(meta.blocks().saturating_mul(512)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(DiskError::io("inspect", &image)(e)),
    };
    Ok(Some(DiskUsage {
        used_bytes,
        peak_bytes,
    }))
}

/// Unmounts and removes whatever of the disk exists, then proves nothing is
/// left: no mount at `mount_point`, no loop device on the image, no image,
/// no mount point.
///
/// # Ambient authority
/// Unmounts on the host and removes under `run_dir`.
pub fn remove(run_dir: &Path, mount_point: &Path) -> Result<(), DiskError> {
    let image = run_dir.join(IMAGE_FILE);
    if let Some(disk) = mounted_at(mount_point)? {
        // A plain unmount: `EBUSY` while anything of the run still uses it.
        umount2(mount_point, MntFlags::empty())
            .map_err(|e| DiskError::io("unmount", mount_point)(e.into()))?;
        if let MountedDisk {
            loop_device: Some(device),
            ..
        } = disk
        {
            wait_detached(&device, &image, mount_point)?;
        }
    }
    if let Some(disk) = mounted_at(mount_point)? {
        return Err(DiskError::Left {
            path: mount_point.to_path_buf(),
            left: format!("{} is still mounted there", disk.source),
        });
    }
    match std::fs::remove_file(&image) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(DiskError::io("remove", &image)(e)),
    }
    match std::fs::remove_dir(mount_point) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(DiskError::io("remove", mount_point)(e)),
    }
}

/// Fails unless `run_dir`'s file system has `cap_bytes` free for the
/// image: a sparse image larger than that would leave the host's disk full
/// before the run's, so the cap would not be what stops the run.
fn check_room(run_dir: &Path, cap_bytes: u64) -> Result<(), DiskError> {
    let stat = nix::sys::statvfs::statvfs(run_dir)
        .map_err(|e| DiskError::io("read the free space of", run_dir)(e.into()))?;
    let free = stat.blocks_available().saturating_mul(stat.fragment_size());
    if cap_bytes <= free {
        return Ok(());
    }
    Err(DiskError::TooLarge {
        cap: ByteSize(cap_bytes),
        path: run_dir.to_path_buf(),
        reason: format!("the {} its file system has free", ByteSize(free).approx()),
    })
}

/// The mount point: a new, empty directory.
fn create_mount_point(mount_point: &Path) -> Result<(), DiskError> {
    std::fs::create_dir(mount_point).map_err(DiskError::io("create", mount_point))
}

fn mount_tmpfs(
    mount_point: &Path,
    cap_bytes: u64,
    owner: &std::fs::Metadata,
) -> Result<(), DiskError> {
    let options = format!(
        "size={cap_bytes},mode={:o},uid={},gid={},nosuid,nodev",
        owner.mode() & 0o7777,
        owner.uid(),
        owner.gid()
    );
    run(
        "mount",
        Command::new(program("mount", "util-linux")?)
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(mount_point),
        mount_point,
    )
}

/// A sparse image of `cap_bytes`, formatted ext4 with no reserved blocks (the
/// cap is all the run's) and no discard (the image never gives a block back,
/// so its allocation is the high-water mark of the disk's use).
fn format_image(image: &Path, cap_bytes: u64, owner: &std::fs::Metadata) -> Result<(), DiskError> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(image)
        .map_err(DiskError::io("create", image))?;
    if let Err(e) = file.set_len(cap_bytes) {
        return Err(match e.raw_os_error() {
            Some(nix::libc::EFBIG) => DiskError::TooLarge {
                cap: ByteSize(cap_bytes),
                path: image.parent().unwrap_or(image).to_path_buf(),
                reason: "the largest file its file system can hold".into(),
            },
            _ => DiskError::io("size", image)(e),
        });
    }
    drop(file);
    let extended = format!(
        "nodiscard,lazy_itable_init=1,lazy_journal_init=1,root_owner={}:{}",
        owner.uid(),
        owner.gid()
    );
    run(
        "mkfs.ext4",
        Command::new(program("mkfs.ext4", "e2fsprogs")?)
            .args(["-q", "-F", "-m", "0", "-E", &extended])
            .arg(image),
        image,
    )
}

fn mount_image(
    image: &Path,
    mount_point: &Path,
    owner: &std::fs::Metadata,
) -> Result<(), DiskError> {
    run(
        "mount",
        Command::new(program("mount", "util-linux")?)
            .args(["-t", "ext4", "-o", "loop,nosuid,nodev,noatime"])
            .arg(image)
            .arg(mount_point),
        mount_point,
    )?;
    let mode = std::fs::Permissions::from_mode(owner.mode() & 0o7777);
    std::fs::set_permissions(mount_point, mode)
        .map_err(DiskError::io("set the mode of", mount_point))
}

/// The mounted disk as the kernel shows it.
fn read_back(run_dir: &Path, mount_point: &Path, cap_bytes: u64) -> Result<DiskRecord, DiskError> {
    let disk = mounted_at(mount_point)?.ok_or_else(|| DiskError::Gone {
        path: mount_point.to_path_buf(),
        reason: "nothing is mounted there".into(),
    })?;
    let stat = nix::sys::statvfs::statvfs(mount_point)
        .map_err(|e| DiskError::io("read the size of", mount_point)(e.into()))?;
    let (kind, image, chosen_because) = match disk.fs_type.as_str() {
        "tmpfs" => (
            DiskKind::Tmpfs,
            None,
            format!(
                "a cap of at most {} MiB and a quarter of the memory cap is kept in memory (a tmpfs of the cap's size)",
                TMPFS_MAX_BYTES >> 20
            ),
        ),
        _ => (
            DiskKind::Image,
            Some(run_dir.join(IMAGE_FILE)),
            format!(
                "a cap above {} MiB or a quarter of the memory cap (a tmpfs's pages would count against it) is a sparse ext4 image, loop-mounted (this host's file systems are not assumed to have project quotas)",
                TMPFS_MAX_BYTES >> 20
            ),
        ),
    };
    Ok(DiskRecord {
        kind,
        cap_bytes,
        mount_point: mount_point.to_path_buf(),
        fs_type: disk.fs_type,
        device: disk.source,
        image,
        size_bytes: stat.blocks().saturating_mul(stat.fragment_size()),
        chosen_because,
    })
}

/// Waits (briefly: the kernel detaches an auto-clearing loop device as its
/// last user closes it) until `device` no longer backs onto `image`.
fn wait_detached(device: &str, image: &Path, mount_point: &Path) -> Result<(), DiskError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match loop_device_backing(device) {
            Some(backing) if Path::new(&backing) == image => {}
            _ => return Ok(()),
        }
        if std::time::Instant::now() >= deadline {
            return Err(DiskError::Left {
                path: mount_point.to_path_buf(),
                left: format!(
                    "{device} still backs onto {} (something else holds the file system)",
                    image.display()
                ),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Where `mkfs.ext4` is, if it is installed.
pub fn mkfs_path() -> Option<PathBuf> {
    program("mkfs.ext4", "e2fsprogs").ok()
}

/// `name`'s path in [`PROGRAM_DIRS`].
fn program(name: &'static str, package: &'static str) -> Result<PathBuf, DiskError> {
    PROGRAM_DIRS
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| DiskError::Missing {
            program: name,
            searched: PROGRAM_DIRS.join(":"),
            package,
        })
}

/// Runs `command` (with an empty environment) and fails unless it succeeds.
fn run(program: &'static str, command: &mut Command, path: &Path) -> Result<(), DiskError> {
    let output = command
        .env_clear()
        .env("LANG", "C")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(DiskError::io("run a program on", path))?;
    if output.status.success() {
        return Ok(());
    }
    Err(DiskError::Program {
        program,
        path: path.to_path_buf(),
        status: output.status,
        stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tmpfs_only_for_a_small_cap_well_under_the_memory_cap() {
        const MIB: u64 = 1 << 20;
        assert_eq!(kind_for(16 * MIB, None), DiskKind::Tmpfs);
        assert_eq!(kind_for(16 * MIB, Some(4 << 30)), DiskKind::Tmpfs);
        assert_eq!(kind_for(16 * MIB, Some(64 * MIB)), DiskKind::Tmpfs);
        assert_eq!(kind_for(16 * MIB, Some(48 * MIB)), DiskKind::Image);
        assert_eq!(kind_for(TMPFS_MAX_BYTES + 1, None), DiskKind::Image);
    }
}
