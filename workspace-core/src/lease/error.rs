//! Errors of the lease registry.

use std::io;
use std::path::PathBuf;

use super::{HolderInfo, LeaseKind, LeaseRange, NameKind};

/// Why a lease could not be taken, released or listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The port range given to [`super::Leases::open`] is unusable.
    #[error("opening leases: invalid port range {start}..={end}: {reason}")]
    InvalidPortRange {
        /// First port of the range.
        start: u16,
        /// Last port of the range.
        end: u16,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Port 0 ("any port") cannot be leased.
    #[error("leasing port {port}: port 0 cannot be leased")]
    InvalidPort {
        /// The port asked for.
        port: u16,
    },
    /// A name does not follow the rules of its kind (see [`NameKind`]).
    #[error("leasing {kind} {name:?}: invalid name: {reason}")]
    InvalidName {
        /// Kind of the name.
        kind: NameKind,
        /// The rejected name.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// Creating a lease directory failed.
    #[error("creating lease directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Opening (or creating) a lock file failed.
    #[error("opening lock file {path}")]
    OpenLockFile {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Trying to lock a lock file failed for a reason other than "someone holds it".
    #[error("locking {path}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Writing the holder record into a freshly locked file failed (the lock was
    /// released again).
    #[error("writing the holder record to {path}")]
    WriteHolder {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Clearing or unlocking a lock file on explicit release failed.
    #[error("releasing lease {path}")]
    Release {
        /// The lock file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Listing a lease directory failed.
    #[error("listing lease directory {path}")]
    ListDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Every candidate is leased (or, for ports, in use outside the lease system).
    #[error("leasing a {kind}: none free in {range}")]
    Exhausted {
        /// What was asked for.
        kind: LeaseKind,
        /// The candidates tried.
        range: LeaseRange,
    },
    /// The exact port or name is leased by someone else.
    #[error("leasing {kind} {name}: already leased{}", describe_holder(.holder.as_ref()))]
    Taken {
        /// Kind of the lease.
        kind: LeaseKind,
        /// The port number or name.
        name: String,
        /// Who holds it, if its record could be read.
        holder: Option<HolderInfo>,
    },
    /// The port is free in the lease system but cannot be bound on 127.0.0.1: something
    /// outside the lease system uses it.
    #[error("leasing port {port}: cannot bind 127.0.0.1:{port}")]
    PortUnavailable {
        /// The port.
        port: u16,
        /// The bind error.
        #[source]
        source: io::Error,
    },
}

fn describe_holder(holder: Option<&HolderInfo>) -> String {
    match holder {
        Some(h) => format!(" by {:?} (pid {})", h.holder, h.pid),
        None => " (holder record not readable yet)".to_string(),
    }
}
