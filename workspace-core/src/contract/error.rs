//! Why a contract could not be read or written.

use std::fmt;

use super::problem::Problems;

/// A contract's text format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// TOML.
    Toml,
    /// JSON.
    Json,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Toml => "TOML",
            Self::Json => "JSON",
        })
    }
}

/// Why a contract could not be read, validated or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The text is not a contract: bad syntax, an unknown field, a wrong type.
    #[error("{}{location}: {message}", if path.is_empty() { "contract" } else { path.as_str() })]
    Parse {
        /// The format being read.
        format: Format,
        /// The field path where reading stopped (empty for a syntax error).
        path: String,
        /// ` (TOML line N)` where the format reports a position, else empty.
        location: String,
        /// What the parser said.
        message: String,
    },
    /// The contract was read but breaks rules; every problem is listed.
    #[error("the contract has {count} problem(s):\n{problems}", count = problems.len())]
    Invalid {
        /// Every problem, in document order.
        problems: Problems,
    },
    /// The contract could not be written.
    #[error("cannot write the contract as {format}")]
    Serialize {
        /// The format being written.
        format: Format,
        /// The serializer's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ContractError {
    pub(crate) fn toml(text: &str, path: String, error: toml::de::Error) -> Self {
        let location = error
            .span()
            .map(|span| {
                let line = text.get(..span.start).unwrap_or(text).matches('\n').count() + 1;
                format!(" (TOML line {line})")
            })
            .unwrap_or_default();
        Self::Parse {
            format: Format::Toml,
            path: normalize_path(path),
            location,
            message: error.message().trim().to_owned(),
        }
    }

    pub(crate) fn json(path: String, error: serde_json::Error) -> Self {
        let location = if error.line() > 0 {
            format!(" (JSON line {})", error.line())
        } else {
            String::new()
        };
        let message = error.to_string();
        // serde_json appends " at line L column C"; the location says it once.
        let message = message
            .rsplit_once(" at line ")
            .map_or(message.as_str(), |(m, _)| m)
            .to_owned();
        Self::Parse {
            format: Format::Json,
            path: normalize_path(path),
            location,
            message,
        }
    }

    /// The problems of an [`Invalid`](Self::Invalid) contract.
    pub fn problems(&self) -> Option<&Problems> {
        match self {
            Self::Invalid { problems } => Some(problems),
            _ => None,
        }
    }
}

/// serde_path_to_error writes the document root as ".".
fn normalize_path(path: String) -> String {
    if path == "." { String::new() } else { path }
}
