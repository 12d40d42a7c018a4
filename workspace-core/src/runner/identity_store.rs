//! A run's identity plan, kept for the run's whole life: `identity.json` in its
//! run directory, readable by the host's owner only.
//!
//! Credentials are issued once, when the run is sealed. The processes of a live
//! workspace hold those values; a runner that attaches to it later (another
//! `exec`, `destroy`, crash recovery) must know exactly those values to keep them
//! out of what the run produces, and must not depend on an issuer that may have
//! gone away since (a variable of the environment `create` ran in). So the plan is
//! kept with its values, mode 0600, in the run's private directory (never in the
//! evidence), and removed with the run.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::RunErrorKind;
use super::paths::IDENTITY_STATE_FILE;
use super::state_files::read_state;
use crate::boundary::{IdentityPlan, IssuedCredential};
use crate::contract::UserClass;

#[derive(Serialize, Deserialize)]
struct StoredIdentity {
    user: UserClass,
    uid: u32,
    gid: u32,
    credentials: Vec<StoredCredential>,
}

#[derive(Serialize, Deserialize)]
struct StoredCredential {
    name: String,
    value: String,
    expires_unix_ms: u64,
    fingerprint: Option<String>,
}

/// Writes `identity` (with its credential values) to the run directory, mode
/// 0600, replacing an earlier one.
pub(super) fn store(run_dir: &Path, identity: &IdentityPlan) -> Result<(), RunErrorKind> {
    let path = run_dir.join(IDENTITY_STATE_FILE);
    let io = |source| RunErrorKind::Io {
        path: path.clone(),
        source,
    };
    let stored = StoredIdentity {
        user: identity.user,
        uid: identity.uid,
        gid: identity.gid,
        credentials: identity
            .credentials
            .iter()
            .map(|c| StoredCredential {
                name: c.name.clone(),
                value: c.expose_value().to_owned(),
                expires_unix_ms: c.expires_unix_ms,
                fingerprint: c.fingerprint.clone(),
            })
            .collect(),
    };
    let bytes = serde_json::to_vec(&stored).map_err(|e| io(std::io::Error::other(e)))?;
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    file.write_all(&bytes).map_err(io)
}

/// The run's identity plan as it was sealed, `None` when none was kept.
pub(super) fn load(run_dir: &Path) -> Result<Option<IdentityPlan>, RunErrorKind> {
    let stored: Option<StoredIdentity> = read_state(&run_dir.join(IDENTITY_STATE_FILE))?;
    Ok(stored.map(|stored| IdentityPlan {
        user: stored.user,
        uid: stored.uid,
        gid: stored.gid,
        credentials: stored
            .credentials
            .into_iter()
            .map(|c| {
                let mut credential = IssuedCredential::new(c.name, c.value, c.expires_unix_ms);
                credential.fingerprint = c.fingerprint;
                credential
            })
            .collect(),
    }))
}
