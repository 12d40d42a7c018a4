//! [`ResourceLimits`]: the `setrlimit` baseline every command starts with.
//!
//! Each limit is set with soft = hard, so the command cannot raise it again: raising
//! a hard limit needs `CAP_SYS_RESOURCE` in the host's user namespace, which nothing
//! in the run has. The values are prepared before `clone`; the child only calls
//! `prlimit64` on itself (a raw system call, no allocation).

use nix::libc;

/// The resource limits of a command (soft = hard for each one set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceLimits {
    /// `RLIMIT_NOFILE`: open descriptors per process. `None` keeps the runner's.
    pub open_files: Option<u64>,
    /// `RLIMIT_CORE`: the largest core dump. `Some(0)` (the default): none, so a
    /// crashing command never writes its memory (with the injected credentials in
    /// it) into the workspace, where the diff and evidence would pick it up.
    pub core_bytes: Option<u64>,
    /// `RLIMIT_FSIZE`: the largest file a process may write (`SIGXFSZ`/`EFBIG`
    /// beyond). `None` keeps the runner's (usually unlimited).
    pub file_size_bytes: Option<u64>,
}

impl Default for ResourceLimits {
    /// No core dumps; open files and file size as the runner has them.
    fn default() -> Self {
        Self {
            open_files: None,
            core_bytes: Some(0),
            file_size_bytes: None,
        }
    }
}

/// The kernel's `struct rlimit64` (two `__u64` on every architecture).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rlimit64 {
    pub(crate) cur: u64,
    pub(crate) max: u64,
}

impl ResourceLimits {
    /// `(resource, limit)` for each limit set, in the order the child applies them.
    pub(crate) fn prepared(&self) -> Vec<(libc::c_int, Rlimit64)> {
        [
            (libc::RLIMIT_NOFILE, self.open_files),
            (libc::RLIMIT_CORE, self.core_bytes),
            (libc::RLIMIT_FSIZE, self.file_size_bytes),
        ]
        .into_iter()
        .filter_map(|(resource, value)| {
            value.map(|v| (resource as libc::c_int, Rlimit64 { cur: v, max: v }))
        })
        .collect()
    }
}
