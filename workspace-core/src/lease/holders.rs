//! Who holds what: the record written into each lock file and the listing of held
//! leases.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::lock_file::probe;
use super::{LeaseError, LeaseKind, Leases};

/// The record a holder writes into its lock file after locking it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderInfo {
    /// Process id of the holder.
    pub pid: u32,
    /// The holder label given when leasing (a run id, a test name...).
    pub holder: String,
    /// When the lease was taken, in milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
}

impl HolderInfo {
    /// A record for this process, now.
    pub(super) fn now(holder: &str) -> Self {
        let since_unix_ms = crate::clock::unix_ms_now();
        HolderInfo {
            pid: std::process::id(),
            holder: holder.to_string(),
            since_unix_ms,
        }
    }
}

/// A lease currently held by someone (this process or another).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// What kind of lease.
    pub kind: LeaseKind,
    /// The port number (as decimal text) or the name.
    pub name: String,
    /// The holder's record; `None` if it could not be read (written an instant after
    /// locking; unreadable while locked on Windows).
    pub holder: Option<HolderInfo>,
}

impl Leases {
    /// Every lease held right now, by any process, sorted by kind then port or name.
    ///
    /// A lease whose holder died is not listed: the kernel released its lock, and the
    /// record it left in the file is ignored. Probing takes a shared lock on each file
    /// for an instant; a lease attempt racing with the probe sees that file as taken.
    pub fn holders(&self) -> Result<Vec<LeaseInfo>, LeaseError> {
        let mut held = Vec::new();
        for kind in LeaseKind::ALL {
            let dir = self.kind_dir(kind);
            list_kind(&dir, kind, &mut held)?;
        }
        held.sort_by(|a, b| {
            (a.kind, a.name.parse::<u32>().ok(), &a.name).cmp(&(
                b.kind,
                b.name.parse::<u32>().ok(),
                &b.name,
            ))
        });
        Ok(held)
    }
}

fn list_kind(dir: &Path, kind: LeaseKind, held: &mut Vec<LeaseInfo>) -> Result<(), LeaseError> {
    let list_error = |source| LeaseError::ListDir {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(list_error)? {
        let path = entry.map_err(list_error)?.path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".lock"))
        else {
            continue;
        };
        if let Some(holder) = probe(&path)? {
            held.push(LeaseInfo {
                kind,
                name: name.to_string(),
                holder,
            });
        }
    }
    Ok(())
}
