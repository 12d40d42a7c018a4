//! Leases of host-wide unique resources: TCP ports, cache prefixes and schema names,
//! unique across threads *and* across OS processes on the host.
//!
//! Every lease is an exclusive lock on a file under `<runtime_dir>/leases/`
//! (`ports/<port>.lock`, `cache/<name>.lock`, `schema/<name>.lock`). After locking, the
//! holder writes `{"pid", "holder", "since_unix_ms"}` into the file so
//! [`Leases::holders`] can show who holds what. Dropping a lease clears the record and
//! unlocks; the file stays (deleting it would race, see below).
//!
//! ```
//! use workspace_core::lease::{Leases, NameKind};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let leases = Leases::open(dir.path(), 47_100..=47_199)?;
//! let schema = leases.lease_unique(NameKind::Schema, "run", "run-42")?;
//! assert_eq!(schema.name(), "run_1");
//! assert_eq!(leases.holders()?[0].holder.as_ref().map(|h| h.pid), Some(std::process::id()));
//! drop(schema); // released
//! assert!(leases.holders()?.is_empty());
//! # Ok(()) }
//! ```
//!
//! # Reclaiming leases of dead processes
//! Nothing to do: the lock is the kernel's (`flock` on Unix, `LockFileEx` on Windows)
//! and it is released when the holding process exits, however it dies (even SIGKILL).
//! The next `try_lock` simply succeeds and overwrites the stale record; `holders()`
//! ignores records of unlocked files.
//!
//! # Within one process
//! The lock belongs to the open file, not to the process: every lease opens the file
//! anew, so two leases of the same port in one process conflict just as two processes
//! do.
//!
//! # Why lock files are never deleted
//! Unlinking on release would race: a process that opened the path just before the
//! unlink could lock the orphaned inode while another creates and locks a new file at
//! the same path, and both would hold "the" lease. So release truncates the record
//! (while still holding the lock) and leaves the file in place.

mod error;
mod holders;
mod kind;
pub(crate) mod lock_file;
mod name;
mod port;

#[cfg(test)]
mod tests;

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

pub use error::LeaseError;
pub use holders::{HolderInfo, LeaseInfo};
pub use kind::{LeaseKind, LeaseRange, NameKind};
pub use name::NameLease;
pub use port::PortLease;

/// The lease registry of one host, rooted in a runtime directory shared by every
/// process that must not collide.
#[derive(Debug, Clone)]
pub struct Leases {
    root: PathBuf,
    ports: RangeInclusive<u16>,
}

impl Leases {
    /// Opens (creating if needed) the registry under `runtime_dir/leases/`, leasing
    /// ports from `ports` for [`Leases::lease_port`].
    ///
    /// # Ambient authority
    /// Creates and later locks files under the host path `runtime_dir`; every process
    /// that passes the same directory shares the registry.
    pub fn open(runtime_dir: &Path, ports: RangeInclusive<u16>) -> Result<Self, LeaseError> {
        let (start, end) = (*ports.start(), *ports.end());
        if start > end {
            return Err(LeaseError::InvalidPortRange {
                start,
                end,
                reason: "the range is empty",
            });
        }
        if start == 0 {
            return Err(LeaseError::InvalidPortRange {
                start,
                end,
                reason: "port 0 cannot be leased",
            });
        }
        let leases = Leases {
            root: runtime_dir.join("leases"),
            ports,
        };
        for kind in LeaseKind::ALL {
            let path = leases.kind_dir(kind);
            std::fs::create_dir_all(&path)
                .map_err(|source| LeaseError::CreateDir { path, source })?;
        }
        Ok(leases)
    }

    /// The configured port range.
    pub fn port_range(&self) -> RangeInclusive<u16> {
        self.ports.clone()
    }

    fn kind_dir(&self, kind: LeaseKind) -> PathBuf {
        self.root.join(kind.dir_name())
    }
}

// Compile-time proof that leases can move across threads and tasks.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Leases>();
    send_sync::<PortLease>();
    send_sync::<NameLease>();
};
