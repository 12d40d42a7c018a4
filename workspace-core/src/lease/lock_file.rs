//! One exclusively locked lock file: the mechanism under every lease.
//!
//! # Why file locks
//! `File::try_lock` is `flock(LOCK_EX | LOCK_NB)` on Unix and `LockFileEx` on Windows.
//! The lock belongs to the open file (the open file description on Unix, the handle on
//! Windows), so it excludes other threads of this process that open the file themselves
//! as well as other processes. The kernel drops it when the last descriptor closes,
//! which includes the death of the holding process by any signal: a dead holder's lease
//! is reclaimed by the next `try_lock`, with no pid checks and no stale-lock heuristics.
//! Rust opens files close-on-exec, so commands spawned by the holder do not inherit it.
//!
//! # Why the file is never deleted
//! Release truncates the record but leaves the file. Unlinking would race: a process
//! that opened the path just before the unlink would lock the orphaned inode while a
//! third one creates and locks a new file at the same path, and both would believe they
//! hold the lease. A file that always stays makes the path and the lock the same thing.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::LeaseError;

/// An exclusively locked lock file. Dropping it clears the record and unlocks.
///
/// Also the mechanism under the host-wide capacity pool
/// ([`crate::capacity::host_pool`]), whose records are its tickets.
#[derive(Debug)]
pub(crate) struct LockFile {
    path: PathBuf,
    /// `None` only after an explicit release.
    file: Option<File>,
    /// A [`share`](Self::share)d lock is another process's too: dropping this
    /// one only closes its descriptor (unlocking would unlock every copy).
    shared: bool,
}

impl LockFile {
    /// Locks `path` without waiting. `Ok(None)` when someone else holds it.
    pub(crate) fn try_acquire(path: &Path) -> Result<Option<LockFile>, LeaseError> {
        // Never truncate on open: the file may hold the current holder's record.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|source| LeaseError::OpenLockFile {
                path: path.to_path_buf(),
                source,
            })?;
        match file.try_lock() {
            Ok(()) => Ok(Some(LockFile {
                path: path.to_path_buf(),
                file: Some(file),
                shared: false,
            })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(source)) => Err(LeaseError::Lock {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// Replaces the file's contents with `info` as JSON, for [`super::Leases::holders`]
    /// (or a capacity ticket).
    pub(crate) fn record<T: Serialize>(&mut self, info: &T) -> Result<(), LeaseError> {
        let written = match &self.file {
            Some(file) => write_record(file, info),
            None => Ok(()),
        };
        written.map_err(|source| LeaseError::WriteHolder {
            path: self.path.clone(),
            source,
        })
    }

    /// Clears the record and unlocks, reporting failures (dropping does the same
    /// silently, logging a warning).
    pub(super) fn release(mut self) -> Result<(), LeaseError> {
        match self.file.take() {
            Some(file) => clear_and_unlock(&file).map_err(|source| LeaseError::Release {
                path: self.path.clone(),
                source,
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Another descriptor of the locked open file: the lock stays held while
    /// any process has one open (it belongs to the open file, not a process).
    pub(crate) fn descriptor(&self) -> io::Result<std::os::fd::OwnedFd> {
        match &self.file {
            Some(file) => file.try_clone().map(Into::into),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    /// A [`descriptor`](Self::descriptor) to hand to a process that keeps the
    /// lock held after this one is dropped (which then only closes its own).
    pub(crate) fn share(&mut self) -> io::Result<std::os::fd::OwnedFd> {
        let descriptor = self.descriptor()?;
        self.shared = true;
        Ok(descriptor)
    }

    /// Closes this process's descriptor without unlocking or clearing the
    /// record: the lock stays held for as long as a [`descriptor`](Self::descriptor)
    /// is open somewhere, and the kernel drops it when the last one closes.
    pub(crate) fn leave(mut self) {
        drop(self.file.take());
    }
}

impl Drop for LockFile {
    fn drop(&mut self) {
        if self.shared {
            drop(self.file.take());
            return;
        }
        if let Some(file) = self.file.take() {
            if let Err(error) = clear_and_unlock(&file) {
                // Closing the file below releases the lock anyway; only the record
                // may stay behind, and a record of an unlocked file is ignored.
                tracing::warn!(path = %self.path.display(), %error, "releasing lease");
            } else {
                tracing::debug!(path = %self.path.display(), "lease released");
            }
        }
    }
}

fn write_record<T: Serialize>(mut file: &File, info: &T) -> io::Result<()> {
    let json = serde_json::to_vec(info).map_err(io::Error::other)?;
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&json)?;
    file.flush()
}

/// Truncate while still holding the lock (so a new holder's record is never wiped),
/// then unlock.
fn clear_and_unlock(file: &File) -> io::Result<()> {
    file.set_len(0)?;
    file.unlock()
}

/// Whether someone holds `path` right now (a shared probe lock that cannot be taken),
/// and if so their record when readable.
///
/// The probe holds a shared lock for an instant, so an exclusive `try_lock` racing
/// with it fails as if the lease were held: listing is a diagnostic, and a lease
/// attempt that collides with it simply moves on (or reports `Taken` for an exact one).
pub(crate) fn probe<T: DeserializeOwned>(path: &Path) -> Result<Option<Option<T>>, LeaseError> {
    let file = File::open(path).map_err(|source| LeaseError::OpenLockFile {
        path: path.to_path_buf(),
        source,
    })?;
    match file.try_lock_shared() {
        // Free; closing `file` on return releases the probe lock.
        Ok(()) => Ok(None),
        Err(TryLockError::WouldBlock) => Ok(Some(read_record(path))),
        Err(TryLockError::Error(source)) => Err(LeaseError::Lock {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The holder record in `path`, if it can be read and parsed. It may be missing for an
/// instant after the holder locked and before it wrote the record; on Windows a locked
/// file cannot be read by others at all.
pub(crate) fn read_record<T: DeserializeOwned>(path: &Path) -> Option<T> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}
