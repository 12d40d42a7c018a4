//! Probing the host's base system into a [`HostLayout`]: what every backend's
//! plan binds read-only of the host (the same facts for each).

use std::path::{Path, PathBuf};

use super::{HostLayout, SystemEntry};

/// Why the host's base system could not be looked at.
#[derive(Debug, thiserror::Error)]
#[error("{step} {}", path.display())]
pub struct HostLayoutError {
    /// What was being done.
    pub step: &'static str,
    /// The host path.
    pub path: PathBuf,
    /// Why it failed.
    #[source]
    pub source: std::io::Error,
}

/// The base-system paths looked at, in the order they are mounted.
pub const SYSTEM_PATHS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32",
];
/// Host files under `/etc` passed through read-only when present (and not
/// symlinks): what a toolchain needs of a Debian userland. `alternatives` is
/// where `cc`, `awk`, `which`, `editor` and friends point; the dynamic loader's
/// cache and configuration find multiarch libraries; the CA certificates and
/// OpenSSL's configuration; the resolver's file. Never `/etc/ssl/private`.
pub const ETC_PATHS: [&str; 8] = [
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/ca-certificates",
    "/etc/resolv.conf",
];

/// What this host offers: each of [`SYSTEM_PATHS`] that exists, as a directory to
/// bind or a symlink to recreate (looked at with `symlink_metadata`, never
/// followed), and each of [`ETC_PATHS`] that exists.
///
/// # Ambient authority
/// Looks at the host's root directory.
pub fn probe_host_layout() -> Result<HostLayout, HostLayoutError> {
    probe_under(Path::new("/"))
}

/// [`probe_host_layout`] with the host root at `root` (the paths recorded are still
/// the absolute ones inside, e.g. `/usr`).
pub fn probe_under(root: &Path) -> Result<HostLayout, HostLayoutError> {
    let mut system = Vec::new();
    for path in SYSTEM_PATHS {
        let host = root.join(&path[1..]);
        let meta = match std::fs::symlink_metadata(&host) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(HostLayoutError {
                    step: "inspecting a system directory",
                    path: host,
                    source,
                });
            }
        };
        if meta.file_type().is_symlink() {
            let to = std::fs::read_link(&host).map_err(|source| HostLayoutError {
                step: "reading a system symlink",
                path: host.clone(),
                source,
            })?;
            system.push(SystemEntry::Symlink {
                path: PathBuf::from(path),
                to: to.to_string_lossy().into_owned(),
            });
        } else if meta.is_dir() {
            system.push(SystemEntry::Dir {
                path: PathBuf::from(path),
            });
        }
    }
    let etc = ETC_PATHS
        .into_iter()
        // A symlink would be followed by the bind to wherever it points: only
        // real files and directories are passed through.
        .filter(|path| {
            std::fs::symlink_metadata(root.join(&path[1..]))
                .is_ok_and(|meta| meta.is_file() || meta.is_dir())
        })
        .map(PathBuf::from)
        .collect();
    Ok(HostLayout { system, etc })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;

    #[test]
    fn symlinks_are_recreated_and_directories_bound() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let r = root.path();
        std::fs::create_dir(r.join("usr")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("usr/bin", r.join("bin")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(r.join("etc/ssl/certs")).unwrap_or_else(|e| panic!("{e}"));
        let layout = probe_under(r).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            layout.system,
            vec![
                SystemEntry::Dir {
                    path: "/usr".into()
                },
                SystemEntry::Symlink {
                    path: "/bin".into(),
                    to: "usr/bin".into()
                },
            ]
        );
        assert_eq!(layout.etc, vec![PathBuf::from("/etc/ssl/certs")]);
    }
}
