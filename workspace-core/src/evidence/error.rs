//! The one error type of the evidence module.

use std::io;
use std::path::PathBuf;

/// Why writing, sealing or verifying an evidence bundle failed.
///
/// Every variant names the operation and the path it was applied to. Problems found
/// *in* a sealed bundle by [`verify`](super::verify) are not errors but
/// [`Tamper`](super::Tamper) entries of the report; an error means the check itself
/// could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvidenceError {
    /// A directory (the evidence root, a run directory or a command directory) could
    /// not be created.
    #[error("cannot create evidence directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The run directory already exists; evidence directories are never reused or
    /// overwritten.
    #[error("evidence directory {path} already exists; it is never reused")]
    AlreadyExists {
        /// The existing directory.
        path: PathBuf,
    },
    /// A file of the bundle could not be written, flushed or synced.
    #[error("cannot write evidence file {path}")]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A temporary file could not be renamed onto its final name.
    #[error("cannot rename {from} to {to}")]
    Rename {
        /// The temporary file.
        from: PathBuf,
        /// The final name.
        to: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A file or directory could not be read (or its metadata could not be read).
    #[error("cannot read {path}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A path that must be a regular file is a symlink, a directory, a fifo, a socket
    /// or a device. Evidence code never follows links.
    #[error("{path} is not a regular file (symlinks are never followed)")]
    NotRegularFile {
        /// The offending path.
        path: PathBuf,
    },
    /// The file that was opened is not the file that was inspected just before (it
    /// was replaced in between, e.g. by a symlink).
    #[error("{path} was replaced while it was being opened")]
    ReplacedWhileOpening {
        /// The path that changed.
        path: PathBuf,
    },
    /// A file inside the bundle has a name the manifest cannot carry (not UTF-8, or
    /// containing `\`).
    #[error("file {path:?} inside the evidence bundle cannot be named in the manifest: {reason}")]
    UnnameableFile {
        /// The offending path.
        path: PathBuf,
        /// What is wrong with the name.
        reason: &'static str,
    },
    /// A value could not be serialized to JSON.
    #[error("cannot serialize evidence file {path}")]
    Serialize {
        /// The file the JSON was meant for.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// `manifest.json` is not valid JSON of the expected shape.
    #[error("invalid evidence manifest {path}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
    /// `manifest.json` has a version or algorithm this code does not understand.
    #[error(
        "evidence manifest {path} has version {version} and algorithm {algorithm:?}; \
         only version 1 with sha256 is supported"
    )]
    UnsupportedManifest {
        /// The manifest file.
        path: PathBuf,
        /// The version it declares.
        version: u32,
        /// The algorithm it declares.
        algorithm: String,
    },
    /// The bundle is sealed; it can no longer be written.
    #[error("evidence bundle {path} is sealed; no further writes are accepted")]
    Sealed {
        /// The run directory.
        path: PathBuf,
    },
    /// Sealing was refused because command recorders or their output streams are
    /// still alive and could still write into the bundle.
    #[error(
        "cannot seal evidence bundle {path}: {open} command recorder(s) or output \
         stream(s) are still open"
    )]
    CommandsStillOpen {
        /// The run directory.
        path: PathBuf,
        /// How many recorders and streams are alive.
        open: usize,
    },
}
