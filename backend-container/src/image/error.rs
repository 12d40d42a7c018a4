//! [`ImageError`]: why an image could not be verified or unpacked.

use std::path::PathBuf;

/// Why an image could not be verified or unpacked. Each names the blob (a
/// layer by its index and digest) and, inside a layer, the entry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// `environment.runtime.image` is not a pinned layout reference.
    #[error("environment.runtime.image: {reason}")]
    Reference {
        /// What is wrong with it.
        reason: String,
    },
    /// The directory is not an OCI image layout.
    #[error("{} is not an OCI image layout: {reason}", path.display())]
    Layout {
        /// The layout directory.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// A file of the layout or the cache could not be read or written.
    #[error("{step} {}", path.display())]
    Io {
        /// What was being done.
        step: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A blob the image names is not in the layout.
    #[error("{blob} ({digest}) is not in the image layout {} (no blobs/sha256/ file of that digest)", layout.display())]
    MissingBlob {
        /// Which blob.
        blob: String,
        /// Its digest.
        digest: String,
        /// The layout directory.
        layout: PathBuf,
    },
    /// A blob's content is not what its digest says.
    #[error("{blob}: its content hashes to sha256:{actual}, not {expected}")]
    DigestMismatch {
        /// Which blob (`the manifest`, `the config`, `layer 2 (sha256:...)`).
        blob: String,
        /// The digest it is named by.
        expected: String,
        /// What its bytes hash to.
        actual: String,
    },
    /// A blob's size is not what its descriptor says.
    #[error("{blob}: {actual} bytes, but its descriptor says {expected}")]
    SizeMismatch {
        /// Which blob.
        blob: String,
        /// The descriptor's size.
        expected: u64,
        /// The blob's size.
        actual: u64,
    },
    /// A manifest or config that does not parse as one.
    #[error("{blob} is not a valid {what}")]
    Document {
        /// Which blob.
        blob: String,
        /// What it should have been (`image manifest`, `image configuration`).
        what: &'static str,
        /// The parser's complaint.
        #[source]
        source: oci_spec::OciSpecError,
    },
    /// A media type, algorithm or platform this backend does not unpack.
    #[error("{blob}: {what} is not supported")]
    Unsupported {
        /// Which blob.
        blob: String,
        /// What is not supported.
        what: String,
    },
    /// A layer holds an entry that cannot be applied inside the root: a path
    /// out of it, a link or whiteout that would reach out, an unknown kind.
    #[error("{layer}: entry {entry:?} {reason}")]
    MalformedLayer {
        /// Which layer.
        layer: String,
        /// The entry's path in the layer.
        entry: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Applying an entry failed on the host's file system.
    #[error("{layer}: applying entry {entry:?}")]
    Unpack {
        /// Which layer.
        layer: String,
        /// The entry's path in the layer.
        entry: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl ImageError {
    /// A host file system error at `path` while doing `step`.
    pub(crate) fn io(
        step: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io { step, path, source }
    }
}
