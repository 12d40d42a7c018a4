//! Keyed fingerprints of credential values: what the evidence records instead
//! of a value or its bare digest.
//!
//! A bare sha256 of a short or guessable token lets anyone holding the evidence
//! test guesses against it. The fingerprint is HMAC-SHA256 under a key of the
//! host (32 random bytes in the runtime directory, readable by its owner only,
//! made once): runs on one host that got the same credential show the same
//! fingerprint, and without the key nothing can be tested against it.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// The key file's name in the runtime directory.
pub const FINGERPRINT_KEY_FILE: &str = "fingerprint.key";
/// The key's length in bytes.
const KEY_LEN: usize = 32;

/// The host's fingerprint key.
#[derive(Clone)]
pub struct FingerprintKey([u8; KEY_LEN]);

impl std::fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FingerprintKey(..)")
    }
}

/// Why the fingerprint key could not be read or made.
#[derive(Debug, thiserror::Error)]
#[error("fingerprint key {}", path.display())]
pub struct FingerprintKeyError {
    /// The key file (or its temporary file).
    pub path: PathBuf,
    /// What failed.
    #[source]
    pub source: std::io::Error,
}

impl FingerprintKey {
    /// The key in `runtime_dir`, made (from the kernel's random source) when
    /// there is none yet. Two runners making it at once agree on one: the key
    /// file appears whole or not at all (a hard link of a complete temporary
    /// file), and the loser reads the winner's.
    pub fn load_or_create(runtime_dir: &Path) -> Result<Self, FingerprintKeyError> {
        let path = runtime_dir.join(FINGERPRINT_KEY_FILE);
        match Self::read(&path) {
            Err(e) if e.source.kind() == ErrorKind::NotFound => {}
            read => return read,
        }
        let error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| FingerprintKeyError { path, source }
        };
        fs::create_dir_all(runtime_dir).map_err(error(runtime_dir))?;
        let mut key = [0u8; KEY_LEN];
        fs::File::open("/dev/urandom")
            .and_then(|mut random| random.read_exact(&mut key))
            .map_err(error(Path::new("/dev/urandom")))?;
        let temp = runtime_dir.join(format!(
            ".{FINGERPRINT_KEY_FILE}.{}.tmp",
            std::process::id()
        ));
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut file| file.write_all(&key).and_then(|()| file.sync_all()));
        let linked = written.and_then(|()| match fs::hard_link(&temp, &path) {
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
            linked => linked,
        });
        let _ = fs::remove_file(&temp);
        linked.map_err(error(&temp))?;
        Self::read(&path)
    }

    fn read(path: &Path) -> Result<Self, FingerprintKeyError> {
        let error = |source| FingerprintKeyError {
            path: path.to_path_buf(),
            source,
        };
        let bytes = fs::read(path).map_err(error)?;
        let key: [u8; KEY_LEN] = bytes.try_into().map_err(|_| {
            error(std::io::Error::new(
                ErrorKind::InvalidData,
                format!("not {KEY_LEN} bytes"),
            ))
        })?;
        Ok(Self(key))
    }

    /// `hmac-sha256:<hex>` of `value` under this key.
    pub fn fingerprint(&self, value: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(value);
        let tag = mac.finalize().into_bytes();
        format!("hmac-sha256:{}", crate::digest::to_hex(&tag))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_key_is_made_once_private_and_fingerprints_are_stable_and_keyed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let key = FingerprintKey::load_or_create(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let again = FingerprintKey::load_or_create(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(key.fingerprint(b"tok"), again.fingerprint(b"tok"));
        assert_ne!(key.fingerprint(b"tok"), key.fingerprint(b"tok2"));
        let mode = fs::metadata(dir.path().join(FINGERPRINT_KEY_FILE))
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mode, 0o600);
        // Another host's key gives another fingerprint: nothing to test a guess on.
        let other = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let other = FingerprintKey::load_or_create(other.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(key.fingerprint(b"tok"), other.fingerprint(b"tok"));
        assert!(key.fingerprint(b"tok").starts_with("hmac-sha256:"));
        assert_ne!(
            key.fingerprint(b"tok"),
            format!("hmac-sha256:{}", crate::digest::sha256_hex(b"tok"))
        );
    }

    #[test]
    fn a_key_of_the_wrong_length_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::write(dir.path().join(FINGERPRINT_KEY_FILE), b"short")
            .unwrap_or_else(|e| panic!("{e}"));
        let err = FingerprintKey::load_or_create(dir.path()).expect_err("a short key");
        assert!(err.to_string().contains(FINGERPRINT_KEY_FILE), "{err}");
    }
}
