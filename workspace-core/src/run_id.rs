//! The identifier of one run.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The identifier of one run: lowercase ASCII letters, digits and `-`, 1 to 63
/// characters, starting with a letter or digit.
///
/// The same string names the run's journal, its evidence directory, its leases, its
/// review branch and (in the namespace backend) its hostname, so it is restricted to
/// what is safe in all of them: a path component that cannot be `..`, a DNS label,
/// and a git ref component.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RunId(String);

/// Why a string is not a [`RunId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run id {value:?} is invalid: {reason}")]
pub struct InvalidRunId {
    /// The rejected string.
    pub value: String,
    /// What rule it broke.
    pub reason: &'static str,
}

impl RunId {
    /// The longest run id accepted (the limit of a DNS label).
    pub const MAX_LEN: usize = 63;

    /// Checks `value` and wraps it.
    pub fn new(value: impl Into<String>) -> Result<Self, InvalidRunId> {
        let value = value.into();
        let reason = if value.is_empty() {
            Some("it is empty")
        } else if value.len() > Self::MAX_LEN {
            Some("it is longer than 63 characters")
        } else if value.starts_with('-') || value.ends_with('-') {
            Some("it starts or ends with '-'")
        } else if !value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            Some("only lowercase ASCII letters, digits and '-' are allowed")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(InvalidRunId { value, reason }),
            None => Ok(Self(value)),
        }
    }

    /// A new run id unique on this host: `run-` followed by the time in
    /// milliseconds and the process id, plus a per-process counter.
    pub fn generate() -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        Self(format!("run-{millis:x}-{:x}-{n:x}", std::process::id()))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for RunId {
    type Err = InvalidRunId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for RunId {
    type Error = InvalidRunId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> Self {
        id.0
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_dns_labels_and_rejects_the_rest() {
        for good in ["run-742", "a", "0abc", "x-1-2"] {
            assert!(RunId::new(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "..",
            "Run",
            "a/b",
            "-a",
            "a-",
            "a b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(RunId::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn generated_ids_are_valid_and_distinct() {
        let a = RunId::generate();
        let b = RunId::generate();
        assert_ne!(a, b);
        assert_eq!(RunId::new(a.as_str()), Ok(a));
    }

    #[test]
    fn deserializing_checks_the_rules() {
        assert!(serde_json::from_str::<RunId>("\"../etc\"").is_err());
        assert!(serde_json::from_str::<RunId>("\"run-1\"").is_ok());
    }
}
