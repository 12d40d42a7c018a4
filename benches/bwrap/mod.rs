//! The bubblewrap side of the benchmarks: the host's base system, bound read-only
//! the way the namespace backend's plans bind it, so the comparison is like for
//! like.
#![allow(dead_code)] // each benchmark uses the part it needs

use std::path::Path;
use std::process::Command;

/// Where the workspace is bound inside bwrap (as in the plans).
pub const WORKSPACE: &str = "/workspace";

/// Base-system paths that may be symlinks (merged `/usr`) or directories.
pub const SYSTEM_PATHS: [&str; 4] = ["/bin", "/lib", "/lib64", "/sbin"];

/// How the host lays out its base system: `(path, Some(link target))` for a
/// symlink, `(path, None)` for a directory.
pub fn host_system() -> Vec<(&'static str, Option<String>)> {
    let mut system = Vec::new();
    for path in SYSTEM_PATHS {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let to = std::fs::read_link(path).expect("read a base-system link");
            system.push((path, Some(to.to_string_lossy().into_owned())));
        } else if meta.is_dir() {
            system.push((path, None));
        }
    }
    system
}

/// `bwrap --unshare-all --die-with-parent` with `/usr` and `system` read-only, a
/// fresh `/proc`, a minimal `/dev`, a tmpfs `/tmp`, and `workspace` bound
/// read-write at [`WORKSPACE`]; the caller adds its own binds, `--chdir` and the
/// command.
pub fn command(system: &[(&str, Option<String>)], workspace: &Path) -> Command {
    let mut command = Command::new("bwrap");
    command.args([
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
    ]);
    for (path, link) in system {
        match link {
            Some(to) => command.arg("--symlink").arg(to).arg(path),
            None => command.arg("--ro-bind").arg(path).arg(path),
        };
    }
    command.args([
        "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind",
    ]);
    command.arg(workspace).arg(WORKSPACE);
    command
}
