//! The blobs of an OCI image layout, each reached only through its digest and
//! checked against it before it is used.

use std::fs::File;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use oci_spec::image::{Digest, DigestAlgorithm, OciLayout};
use sha2::{Digest as _, Sha256};

use super::ImageError;

/// The largest manifest or configuration read (they are small JSON documents;
/// a larger one is not read into memory).
const MAX_DOCUMENT_BYTES: u64 = 4 << 20;

/// An OCI image layout directory (`oci-layout`, `blobs/sha256/...`).
#[derive(Debug)]
pub(crate) struct Layout {
    dir: PathBuf,
}

impl Layout {
    /// Opens the layout at `dir`: its `oci-layout` file must say version 1.0.0.
    pub(crate) fn open(dir: &Path) -> Result<Self, ImageError> {
        let marker = dir.join("oci-layout");
        let layout = OciLayout::from_file(&marker).map_err(|e| ImageError::Layout {
            path: dir.to_path_buf(),
            reason: format!("its oci-layout file cannot be read: {e}"),
        })?;
        if layout.image_layout_version() != "1.0.0" {
            return Err(ImageError::Layout {
                path: dir.to_path_buf(),
                reason: format!(
                    "layout version {} (1.0.0 is understood)",
                    layout.image_layout_version()
                ),
            });
        }
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    /// Opens the blob `digest` and checks its bytes hash to it (and number
    /// `size`, when given); returns it rewound, to be read from the start.
    /// `blob` names it in errors.
    pub(crate) fn verified(
        &self,
        blob: &str,
        digest: &Digest,
        size: Option<u64>,
    ) -> Result<File, ImageError> {
        if *digest.algorithm() != DigestAlgorithm::Sha256 {
            return Err(ImageError::Unsupported {
                blob: blob.to_owned(),
                what: format!("the digest algorithm {}", digest.algorithm()),
            });
        }
        let hex = digest.digest();
        let path = self.dir.join("blobs/sha256").join(hex);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ImageError::MissingBlob {
                    blob: blob.to_owned(),
                    digest: digest.to_string(),
                    layout: self.dir.clone(),
                });
            }
            Err(source) => {
                return Err(ImageError::Io {
                    step: "opening a blob",
                    path,
                    source,
                });
            }
        };
        let (actual, bytes) = sha256_of(&mut file, &path)?;
        if let Some(expected) = size
            && expected != bytes
        {
            return Err(ImageError::SizeMismatch {
                blob: blob.to_owned(),
                expected,
                actual: bytes,
            });
        }
        if actual != hex {
            return Err(ImageError::DigestMismatch {
                blob: blob.to_owned(),
                expected: digest.to_string(),
                actual,
            });
        }
        file.rewind()
            .map_err(ImageError::io("rewinding a blob", &path))?;
        Ok(file)
    }

    /// The verified bytes of a small JSON blob (a manifest or a configuration).
    pub(crate) fn document(
        &self,
        blob: &str,
        digest: &Digest,
        size: Option<u64>,
    ) -> Result<Vec<u8>, ImageError> {
        if size.is_some_and(|size| size > MAX_DOCUMENT_BYTES) {
            return Err(ImageError::Unsupported {
                blob: blob.to_owned(),
                what: format!("a document of more than {MAX_DOCUMENT_BYTES} bytes"),
            });
        }
        let file = self.verified(blob, digest, size)?;
        let mut bytes = Vec::new();
        let path = self.dir.join("blobs/sha256").join(digest.digest());
        file.take(MAX_DOCUMENT_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(ImageError::io("reading a blob", &path))?;
        if bytes.len() as u64 > MAX_DOCUMENT_BYTES {
            return Err(ImageError::Unsupported {
                blob: blob.to_owned(),
                what: format!("a document of more than {MAX_DOCUMENT_BYTES} bytes"),
            });
        }
        Ok(bytes)
    }
}

/// The sha256 (hex) and length of everything `reader` yields.
fn sha256_of(reader: &mut impl Read, path: &Path) -> Result<(String, u64), ImageError> {
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 256 * 1024];
    let mut bytes = 0u64;
    loop {
        let n = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(ImageError::Io {
                    step: "reading a blob",
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok((workspace_core::digest::to_hex(&hasher.finalize()), bytes))
}
