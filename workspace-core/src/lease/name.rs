//! Name leases: cache prefixes and schema names, unique across threads and processes.

use std::path::PathBuf;

use super::lock_file::{LockFile, read_record};
use super::{HolderInfo, LeaseError, LeaseKind, LeaseRange, Leases, NameKind};

/// Longest name accepted (PostgreSQL's identifier limit).
const MAX_NAME_LEN: usize = 63;

/// Highest counter [`Leases::lease_unique`] tries before reporting exhaustion.
const MAX_UNIQUE_SUFFIX: u32 = 9_999;

/// A leased name. Dropping it releases the lease.
#[derive(Debug)]
pub struct NameLease {
    kind: NameKind,
    name: String,
    lock: LockFile,
}

impl NameLease {
    /// The leased name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its kind.
    pub fn kind(&self) -> NameKind {
        self.kind
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

    /// Releases the lease now, reporting a failure to clear or unlock the lock file.
    pub fn release(self) -> Result<(), LeaseError> {
        self.lock.release()
    }
}

impl Leases {
    /// Leases exactly `name`. Fails with [`LeaseError::InvalidName`] if the name breaks
    /// the rules of `kind` (see [`NameKind`]) and [`LeaseError::Taken`] naming the
    /// holder if someone holds it.
    pub fn lease_name(
        &self,
        kind: NameKind,
        name: &str,
        holder: &str,
    ) -> Result<NameLease, LeaseError> {
        validate(kind, name)?;
        let path = self.name_path(kind, name);
        match LockFile::try_acquire(&path)? {
            Some(lock) => finish(kind, name, lock, holder),
            None => Err(LeaseError::Taken {
                kind: kind.into(),
                name: name.to_string(),
                holder: read_record(&path),
            }),
        }
    }

    /// [`lease_name`](Self::lease_name), except that a name taken by a lock
    /// whose record names `holder` is `Ok(None)`: the holder's lease, kept by
    /// a descriptor it [`share`](NameLease::share)d (its live sandbox). Only for
    /// a caller that then makes sure that holder is alive (a record is written
    /// right after its lock is taken, so an instant after a holder's death a
    /// new holder may still show the old record).
    pub fn lease_name_unless_held_by(
        &self,
        kind: NameKind,
        name: &str,
        holder: &str,
    ) -> Result<Option<NameLease>, LeaseError> {
        match self.lease_name(kind, name, holder) {
            Ok(lease) => Ok(Some(lease)),
            Err(LeaseError::Taken {
                holder: Some(info), ..
            }) if info.holder == holder => Ok(None),
            Err(other) => Err(other),
        }
    }

    /// Leases the first free name among `stem<sep>1`, `stem<sep>2`, ... where the
    /// separator is [`NameKind::separator`] (`-` for cache prefixes, `_` for schemas).
    pub fn lease_unique(
        &self,
        kind: NameKind,
        stem: &str,
        holder: &str,
    ) -> Result<NameLease, LeaseError> {
        validate(kind, stem)?;
        let separator = kind.separator();
        let longest_suffix = 1 + MAX_UNIQUE_SUFFIX.to_string().len();
        if stem.len() + longest_suffix > MAX_NAME_LEN {
            return Err(LeaseError::InvalidName {
                kind,
                name: stem.to_string(),
                reason: "stem leaves no room for the counter within 63 characters",
            });
        }
        for counter in 1..=MAX_UNIQUE_SUFFIX {
            let name = format!("{stem}{separator}{counter}");
            if let Some(lock) = LockFile::try_acquire(&self.name_path(kind, &name))? {
                return finish(kind, &name, lock, holder);
            }
        }
        Err(LeaseError::Exhausted {
            kind: kind.into(),
            range: LeaseRange::Suffixes {
                stem: stem.to_string(),
                separator,
                last: MAX_UNIQUE_SUFFIX,
            },
        })
    }

    fn name_path(&self, kind: NameKind, name: &str) -> PathBuf {
        // Safe as a file name: validation allows only ASCII letters, digits, `_`, `-`.
        self.kind_dir(LeaseKind::from(kind))
            .join(format!("{name}.lock"))
    }
}

fn finish(
    kind: NameKind,
    name: &str,
    mut lock: LockFile,
    holder: &str,
) -> Result<NameLease, LeaseError> {
    lock.record(&HolderInfo::now(holder))?;
    tracing::debug!(%kind, name, holder, "name leased");
    Ok(NameLease {
        kind,
        name: name.to_string(),
        lock,
    })
}

/// Checks `name` against the rules of `kind` (see [`NameKind`]).
fn validate(kind: NameKind, name: &str) -> Result<(), LeaseError> {
    let invalid = |reason| {
        Err(LeaseError::InvalidName {
            kind,
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return invalid("empty");
    }
    if name.len() > MAX_NAME_LEN {
        return invalid("longer than 63 characters");
    }
    match kind {
        NameKind::CachePrefix => {
            if !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return invalid("only ASCII letters, digits, '_' and '-' are allowed");
            }
        }
        NameKind::Schema => {
            if !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return invalid(
                    "only lowercase ASCII letters, digits and '_' are allowed (an unquoted SQL identifier)",
                );
            }
            if name.starts_with(|c: char| c.is_ascii_digit()) {
                return invalid("an unquoted SQL identifier cannot start with a digit");
            }
        }
    }
    Ok(())
}
