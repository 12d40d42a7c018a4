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
    Ok(HostLayout {
        root: root.to_path_buf(),
        system,
        etc,
    })
}

/// Top-level names of an image the plan makes itself (or that name the
/// workspace), never taken from the image.
pub const IMAGE_RESERVED: [&str; 9] = [
    "etc",
    "proc",
    "sys",
    "dev",
    "tmp",
    "run",
    "home",
    "root",
    "workspace",
];

/// The base system of an unpacked image whose root filesystem is `root`: what
/// [`probe_under`] finds there, and every other top-level directory or
/// symbolic link of the image (its software may live in `/opt`, `/srv`,
/// `/app`...) but the [`IMAGE_RESERVED`] names, sorted.
///
/// # Ambient authority
/// Reads the directory `root`.
pub fn probe_image(root: &Path) -> Result<HostLayout, HostLayoutError> {
    let mut layout = probe_under(root)?;
    let entries = std::fs::read_dir(root).map_err(|source| HostLayoutError {
        step: "listing the image's root",
        path: root.to_path_buf(),
        source,
    })?;
    let mut extra = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| HostLayoutError {
            step: "listing the image's root",
            path: root.to_path_buf(),
            source,
        })?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let inside = format!("/{name}");
        if IMAGE_RESERVED.contains(&name.as_str()) || SYSTEM_PATHS.contains(&inside.as_str()) {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(|source| HostLayoutError {
            step: "inspecting a top-level entry of the image",
            path: path.clone(),
            source,
        })?;
        if meta.file_type().is_symlink() {
            let to = std::fs::read_link(&path).map_err(|source| HostLayoutError {
                step: "reading a top-level link of the image",
                path: path.clone(),
                source,
            })?;
            extra.push(SystemEntry::Symlink {
                path: PathBuf::from(inside),
                to: to.to_string_lossy().into_owned(),
            });
        } else if meta.is_dir() {
            extra.push(SystemEntry::Dir {
                path: PathBuf::from(inside),
            });
        }
    }
    extra.sort_by(|a, b| entry_path(a).cmp(entry_path(b)));
    layout.system.extend(extra);
    Ok(layout)
}

fn entry_path(entry: &SystemEntry) -> &Path {
    match entry {
        SystemEntry::Dir { path } | SystemEntry::Symlink { path, .. } => path,
    }
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
        assert_eq!(layout.root, r);
    }

    #[test]
    fn an_image_brings_its_other_top_level_directories_but_not_the_plans_own() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let r = root.path();
        for dir in ["bin", "opt", "srv", "tmp", "etc", "proc", "workspace"] {
            std::fs::create_dir(r.join(dir)).unwrap_or_else(|e| panic!("{e}"));
        }
        std::os::unix::fs::symlink("opt/app", r.join("app")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(r.join("README"), "a file at the top").unwrap_or_else(|e| panic!("{e}"));
        let layout = probe_image(r).unwrap_or_else(|e| panic!("{e}"));
        let paths: Vec<&Path> = layout.system.iter().map(entry_path).collect();
        assert_eq!(
            paths,
            [
                Path::new("/bin"),
                Path::new("/app"),
                Path::new("/opt"),
                Path::new("/srv")
            ]
        );
        assert_eq!(layout.source_of(Path::new("/opt")), r.join("opt"));
    }
}
