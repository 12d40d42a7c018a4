//! A raw runc container over the host's base system: the baseline the live and
//! container benchmarks compare with, and the timing of one tool call.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)] // benchmark support

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Containers made by this process, for unique ids.
static MADE: AtomicUsize = AtomicUsize::new(0);

/// Runs `command` to its end, panicking with its stderr when it fails.
pub fn succeed(command: &mut Command) {
    let out = command.stdin(Stdio::null()).output().expect("run a tool");
    assert!(
        out.status.success(),
        "{command:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Runs `command` to its end (its streams closed) and times it.
pub fn timed(command: &mut Command) -> Duration {
    let started = Instant::now();
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let took = started.elapsed();
    assert!(status.success(), "{command:?}: {status}");
    took
}

/// Runs `/bin/true` in the running container `id` of the runc state
/// directory `root`, timed.
pub fn exec_true_in(root: &std::path::Path, id: &str) -> Duration {
    timed(
        Command::new("runc")
            .arg("--root")
            .arg(root)
            .args(["exec", id, "/bin/true"]),
    )
}

/// A running runc container over the host's base system, removed when dropped.
pub struct Container {
    id: String,
    _bundle: tempfile::TempDir,
}

impl Container {
    /// Starts a container (`sleep infinity` as its pid 1) over `system`.
    pub fn start(system: &[(&'static str, Option<String>)]) -> Self {
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let bundle = tempfile::tempdir().unwrap();
        let rootfs = bundle.path().join("rootfs");
        std::fs::create_dir_all(&rootfs).unwrap();
        succeed(Command::new("runc").arg("spec").current_dir(bundle.path()));
        let config_path = bundle.path().join("config.json");
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
        config["process"]["terminal"] = false.into();
        config["process"]["args"] = serde_json::json!(["/bin/sleep", "infinity"]);
        config["root"]["path"] = rootfs.to_string_lossy().into_owned().into();
        config["linux"]["cgroupsPath"] =
            format!("/aw-bench-runc-{}-{n}", std::process::id()).into();
        let mounts = config["mounts"].as_array_mut().unwrap();
        let bind = |path: &str| {
            serde_json::json!({"destination": path, "type": "bind", "source": path,
                "options": ["rbind", "ro", "nosuid", "nodev"]})
        };
        mounts.push(bind("/usr"));
        for (path, link) in system {
            match link {
                Some(to) => std::os::unix::fs::symlink(to, rootfs.join(&path[1..])).unwrap(),
                None => mounts.push(bind(path)),
            }
        }
        std::fs::write(&config_path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        let id = format!("aw-bench-runc-{}-{n}", std::process::id());
        // The container keeps what it inherits open: no pipe to wait on.
        let started = Command::new("runc")
            .args(["run", "--detach", "--bundle"])
            .arg(bundle.path())
            .arg(&id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(started.success(), "runc run --detach: {started}");
        Self {
            id,
            _bundle: bundle,
        }
    }

    /// Starts a container, runs `true` in it and deletes it: the whole life of
    /// a one-command container, timed.
    pub fn lifecycle_true(system: &[(&'static str, Option<String>)]) -> Duration {
        let started = Instant::now();
        let container = Self::start(system);
        container.exec_true();
        drop(container);
        started.elapsed()
    }

    /// `runc exec ID /bin/true`, timed.
    pub fn exec_true(&self) -> Duration {
        timed(Command::new("runc").args(["exec", &self.id, "/bin/true"]))
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = Command::new("runc")
            .args(["delete", "--force", &self.id])
            .status();
    }
}
