//! The lock that says a live process owns a run (see the module docs of
//! [`journal`](super)).

use std::fs::{File, TryLockError};
use std::path::Path;

use super::JournalError;

/// Whether a live process holds the lock of the journal at `path` (owns the run).
///
/// This briefly takes the lock on a fresh handle and releases it at once. Meanwhile a
/// concurrent [`Journal::open_for_recovery`](super::Journal::open_for_recovery) or [`Journal::create`](super::Journal::create) of the same file
/// may fail with [`JournalError::Held`]; retry it. The answer can be stale as soon as it
/// is returned: to act on a run, take the lock with [`Journal::open_for_recovery`](super::Journal::open_for_recovery).
///
/// # Ambient authority
///
/// `path` is a host path, used as given.
pub fn is_held(path: impl AsRef<Path>) -> Result<bool, JournalError> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| JournalError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    match file.try_lock() {
        Ok(()) => {
            // Closing the handle below also releases the lock; unlock explicitly to
            // make the intent plain.
            file.unlock().map_err(|source| JournalError::Lock {
                path: path.to_path_buf(),
                source,
            })?;
            Ok(false)
        }
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(source)) => Err(JournalError::Lock {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Takes the exclusive lock on `file` without waiting.
pub(super) fn lock(file: &File, path: &Path) -> Result<(), JournalError> {
    file.try_lock().map_err(|err| match err {
        TryLockError::WouldBlock => JournalError::Held {
            path: path.to_path_buf(),
        },
        TryLockError::Error(source) => JournalError::Lock {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// The journal's lock held shared, until dropped: the run is not owned (taken
/// over, ended, recovered) by any process meanwhile, while any number of
/// holders share it. A holder writes nothing to the journal.
#[derive(Debug)]
pub struct SharedHold {
    _file: File,
}

impl SharedHold {
    /// Takes the lock of the journal at `path` shared, without waiting:
    /// [`JournalError::Held`] while a process owns the run.
    ///
    /// # Ambient authority
    ///
    /// `path` is a host path, used as given.
    pub fn try_take(path: impl AsRef<Path>) -> Result<Self, JournalError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|source| JournalError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        match file.try_lock_shared() {
            Ok(()) => Ok(Self { _file: file }),
            Err(TryLockError::WouldBlock) => Err(JournalError::Held {
                path: path.to_path_buf(),
            }),
            Err(TryLockError::Error(source)) => Err(JournalError::Lock {
                path: path.to_path_buf(),
                source,
            }),
        }
    }
}
