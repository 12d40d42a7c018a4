//! `environment.runtime.image`: a pinned OCI image on disk.

use std::fmt;
use std::path::PathBuf;

/// The scheme of an image reference: an OCI image layout directory.
pub const OCI_LAYOUT_SCHEME: &str = "oci-layout:";

/// `oci-layout:PATH@sha256:DIGEST`: the image manifest `DIGEST` (64 lowercase
/// hex digits) in the OCI image layout at `PATH` (absolute). The digest names
/// the manifest, not an index, so the image is pinned to one platform's
/// content: nothing about it is chosen at run time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageReference {
    /// The image layout directory (holding `oci-layout`, `index.json` and
    /// `blobs/`).
    pub layout: PathBuf,
    /// The manifest's sha256, in hex.
    pub manifest_sha256: String,
}

impl ImageReference {
    /// Parses `text`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(rest) = text.strip_prefix(OCI_LAYOUT_SCHEME) else {
            return Err(format!(
                "{text:?} is not an image layout reference: write {OCI_LAYOUT_SCHEME}PATH@sha256:DIGEST \
                 (registries are not reached: export the image to a layout first)"
            ));
        };
        let Some((layout, digest)) = rest.rsplit_once('@') else {
            return Err(format!("{text:?} is not pinned: append @sha256:DIGEST"));
        };
        let Some(hex) = digest.strip_prefix("sha256:") else {
            return Err(format!("{text:?}: only sha256 digests are understood"));
        };
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format!(
                "{text:?}: the digest must be 64 lowercase hex digits"
            ));
        }
        let layout = PathBuf::from(layout);
        if !layout.is_absolute() {
            return Err(format!("{text:?}: the layout path must be absolute"));
        }
        Ok(Self {
            layout,
            manifest_sha256: hex.to_owned(),
        })
    }
}

impl fmt::Display for ImageReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{OCI_LAYOUT_SCHEME}{}@sha256:{}",
            self.layout.display(),
            self.manifest_sha256
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn a_pinned_layout_reference_parses_and_prints_back() {
        let text = format!("oci-layout:/var/images/busybox@sha256:{HEX}");
        let parsed = ImageReference::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.layout, PathBuf::from("/var/images/busybox"));
        assert_eq!(parsed.manifest_sha256, HEX);
        assert_eq!(parsed.to_string(), text);
    }

    #[test]
    fn what_is_not_a_pinned_layout_reference_says_why() {
        for (text, says) in [
            (
                "docker.io/library/busybox:latest",
                "not an image layout reference",
            ),
            ("oci-layout:/images/busybox", "not pinned"),
            (
                &*format!("oci-layout:/images/b@sha512:{HEX}"),
                "only sha256",
            ),
            ("oci-layout:/images/b@sha256:ABC", "64 lowercase hex"),
            (
                &*format!("oci-layout:images/b@sha256:{HEX}"),
                "must be absolute",
            ),
        ] {
            let error = ImageReference::parse(text).err().unwrap_or_default();
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
