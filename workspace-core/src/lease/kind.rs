//! What can be leased, and how a set of candidates is described in errors.

use std::fmt;
use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};

/// A kind of named resource leased by exact name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NameKind {
    /// A cache key prefix (`[A-Za-z0-9_-]{1,63}`); unique names use `-` before the
    /// counter (`cache-1`).
    CachePrefix,
    /// A database schema name. Stricter than a cache prefix, because an unquoted SQL
    /// identifier cannot contain `-` and is case-folded (`Run` and `run` are the same
    /// schema): `[a-z_][a-z0-9_]{0,62}`. Unique names use `_` (`run_1`).
    Schema,
}

impl NameKind {
    /// The separator [`super::Leases::lease_unique`] puts between stem and counter.
    pub fn separator(self) -> char {
        match self {
            NameKind::CachePrefix => '-',
            NameKind::Schema => '_',
        }
    }
}

/// Any kind of lease, as listed by [`super::Leases::holders`] and named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LeaseKind {
    /// A TCP port on the host.
    Port,
    /// A cache key prefix.
    CachePrefix,
    /// A database schema name.
    Schema,
}

impl LeaseKind {
    /// Every kind, in listing order.
    pub const ALL: [LeaseKind; 3] = [LeaseKind::Port, LeaseKind::CachePrefix, LeaseKind::Schema];

    /// The directory under `<runtime_dir>/leases/` holding this kind's lock files.
    pub(super) fn dir_name(self) -> &'static str {
        match self {
            LeaseKind::Port => "ports",
            LeaseKind::CachePrefix => "cache",
            LeaseKind::Schema => "schema",
        }
    }
}

impl From<NameKind> for LeaseKind {
    fn from(kind: NameKind) -> Self {
        match kind {
            NameKind::CachePrefix => LeaseKind::CachePrefix,
            NameKind::Schema => LeaseKind::Schema,
        }
    }
}

impl fmt::Display for LeaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseKind::Port => "port",
            LeaseKind::CachePrefix => "cache prefix",
            LeaseKind::Schema => "schema",
        })
    }
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        LeaseKind::from(*self).fmt(f)
    }
}

/// The candidates that were tried when nothing was free.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseRange {
    /// The configured port range.
    Ports(RangeInclusive<u16>),
    /// `stem<sep>1` to `stem<sep>last`.
    Suffixes {
        /// The stem given to `lease_unique`.
        stem: String,
        /// The separator between stem and counter.
        separator: char,
        /// The last counter tried.
        last: u32,
    },
}

impl fmt::Display for LeaseRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseRange::Ports(range) => write!(f, "{}..={}", range.start(), range.end()),
            LeaseRange::Suffixes {
                stem,
                separator,
                last,
            } => write!(f, "{stem}{separator}1..={stem}{separator}{last}"),
        }
    }
}
