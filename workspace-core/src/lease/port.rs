//! Port leases: a TCP port on the host, unique across threads and processes.

use std::net::{Ipv4Addr, TcpListener};
use std::path::PathBuf;

use super::lock_file::{LockFile, read_record};
use super::{HolderInfo, LeaseError, LeaseKind, LeaseRange, Leases};

/// A leased TCP port. Dropping it releases the lease.
#[derive(Debug)]
pub struct PortLease {
    port: u16,
    lock: LockFile,
}

impl PortLease {
    /// The leased port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Another descriptor of the lease's lock, for a process that holds the
    /// lease from now on (a live sandbox, for its life): the lease stays taken
    /// while that descriptor is open anywhere, and dropping this value then
    /// only closes its own.
    ///
    /// # Errors
    /// Duplicating the descriptor failed.
    pub fn share(&mut self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.lock.share()
    }

    /// Releases the lease now, reporting a failure to clear or unlock the lock file
    /// (dropping releases too, but can only log such a failure).
    pub fn release(self) -> Result<(), LeaseError> {
        self.lock.release()
    }
}

impl Leases {
    /// Leases the first port of the configured range that nobody leases and that can be
    /// bound on 127.0.0.1 right now (a port in use outside the lease system is skipped).
    ///
    /// Fails with [`LeaseError::Exhausted`] when no port is free.
    pub fn lease_port(&self, holder: &str) -> Result<PortLease, LeaseError> {
        for port in self.ports.clone() {
            let Some(lock) = LockFile::try_acquire(&self.port_path(port))? else {
                continue;
            };
            if let Err(error) = probe_bind(port) {
                tracing::debug!(port, %error, "port in use outside the lease system, skipped");
                drop(lock);
                continue;
            }
            return finish(port, lock, holder);
        }
        Err(LeaseError::Exhausted {
            kind: LeaseKind::Port,
            range: LeaseRange::Ports(self.ports.clone()),
        })
    }

    /// Leases exactly `port` (a port the contract declares; it need not lie in the
    /// configured range). Fails with [`LeaseError::Taken`] naming the holder if it is
    /// leased, or [`LeaseError::PortUnavailable`] if something outside the lease system
    /// has it bound.
    pub fn lease_port_exact(&self, port: u16, holder: &str) -> Result<PortLease, LeaseError> {
        if port == 0 {
            return Err(LeaseError::InvalidPort { port });
        }
        let path = self.port_path(port);
        let Some(lock) = LockFile::try_acquire(&path)? else {
            return Err(LeaseError::Taken {
                kind: LeaseKind::Port,
                name: port.to_string(),
                holder: read_record(&path),
            });
        };
        probe_bind(port).map_err(|source| LeaseError::PortUnavailable { port, source })?;
        finish(port, lock, holder)
    }

    fn port_path(&self, port: u16) -> PathBuf {
        self.kind_dir(LeaseKind::Port).join(format!("{port}.lock"))
    }
}

fn finish(port: u16, mut lock: LockFile, holder: &str) -> Result<PortLease, LeaseError> {
    lock.record(&HolderInfo::now(holder))?;
    tracing::debug!(port, holder, path = %lock.path().display(), "port leased");
    Ok(PortLease { port, lock })
}

/// Binds the port on 127.0.0.1 and lets it go at once.
fn probe_bind(port: u16) -> std::io::Result<()> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map(drop)
}
