//! The egress proxy of an allowlisted run (`environment.network.mode =
//! "allowlist"`): a program of its own ([`ProcessOptions::egress_proxy`]),
//! started at seal once the sandbox's pid 1 holds its network namespace (the
//! proxy makes its listeners there), moved into a cgroup of the run's
//! (`egress`), so that the run's end, and crash recovery, kill it with
//! everything else. Its attempts go to `network.jsonl` in the run directory
//! ([`ATTEMPT_LOG_FILE`]), which the runner exports.
//!
//! [`ProcessOptions::egress_proxy`]: super::ProcessOptions::egress_proxy

use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use workspace_core::boundary::RunContext;
use workspace_core::egress::{ATTEMPT_LOG_FILE, EgressConfig};

use super::error::ProcessError;
use crate::cgroup::{CgroupLayout, RunCgroup};

/// The cgroup (below the run's) the proxy lives in.
pub(crate) const EGRESS_CGROUP: &str = "egress";
/// Its configuration, in the run directory.
const CONFIG_FILE: &str = "egress.json";
/// What it writes on stderr, in the run directory.
const STDERR_FILE: &str = "egress.stderr";
/// How long it may take to say `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A running egress proxy this process started (reaped at teardown).
#[derive(Debug)]
pub(crate) struct EgressProxy {
    child: Child,
}

/// Where the run's proxy is told everything.
pub(crate) struct Start<'a> {
    /// The proxy program.
    pub(crate) program: &'a Path,
    /// The run.
    pub(crate) run: &'a RunContext,
    /// The sandbox's pid 1 (its network namespace is the workspace's).
    pub(crate) sandbox_pid: u32,
    /// The run's cgroups and where they are.
    pub(crate) cgroup: &'a RunCgroup,
    pub(crate) layout: &'a CgroupLayout,
    pub(crate) cgroup_parent: &'a str,
    /// The run's host user and group (the proxy drops to them).
    pub(crate) host_ids: (u32, u32),
}

impl EgressProxy {
    /// Starts the run's proxy and waits until its listeners exist.
    pub(crate) fn start(start: &Start<'_>) -> Result<Self, ProcessError> {
        let run_dir = &start.run.run_dir;
        let network = &start.run.contract.environment.network;
        let config = EgressConfig {
            allow: network.allow.clone(),
            deny: network.deny.clone(),
            netns: PathBuf::from(format!("/proc/{}/ns/net", start.sandbox_pid)),
            log: run_dir.join(ATTEMPT_LOG_FILE),
            cgroup: start.layout.unified().map(|unified| {
                unified
                    .join(start.cgroup_parent.trim_matches('/'))
                    .join(start.run.run_id.as_str())
            }),
            uid: start.host_ids.0,
            gid: start.host_ids.1,
        };
        let io = |step, path: &Path| {
            let path = path.to_path_buf();
            move |source| ProcessError::Io { step, path, source }
        };
        let config_path = run_dir.join(CONFIG_FILE);
        let text = serde_json::to_vec_pretty(&config).unwrap_or_default();
        std::fs::write(&config_path, text)
            .map_err(io("writing the egress proxy's configuration", &config_path))?;
        let stderr_path = run_dir.join(STDERR_FILE);
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&stderr_path)
            .map_err(io("opening the egress proxy's log", &stderr_path))?;
        let group =
            start
                .cgroup
                .create_child(EGRESS_CGROUP)
                .map_err(|source| ProcessError::Cgroup {
                    step: "creating the egress proxy's cgroup",
                    source,
                })?;
        let child = Command::new(start.program)
            .arg("egress-proxy")
            .arg(&config_path)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(io("starting the egress proxy", start.program))?;
        let mut proxy = Self { child };
        // In the run's cgroup before it serves anything: the run's end kills it.
        if let Err(source) = group.add_process(proxy.child.id()) {
            proxy.stop();
            return Err(ProcessError::Cgroup {
                step: "moving the egress proxy into the run's cgroup",
                source,
            });
        }
        let Some(stdout) = proxy.child.stdout.take() else {
            proxy.stop();
            return Err(not_ready("it has no stdout", &stderr_path));
        };
        let (said, heard) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = said.send(line);
        });
        match heard.recv_timeout(READY_TIMEOUT) {
            Ok(line) if line.trim() == "ready" => Ok(proxy),
            Ok(_) => {
                proxy.stop();
                Err(not_ready("it ended before it was ready", &stderr_path))
            }
            Err(_) => {
                proxy.stop();
                Err(not_ready("it was not ready in time", &stderr_path))
            }
        }
    }

    /// Reaps the proxy once the run's cgroup was killed.
    pub(crate) fn reap(mut self) {
        let _ = self.child.wait();
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The proxy did not start: why, and the end of what it wrote.
fn not_ready(why: &'static str, stderr: &Path) -> ProcessError {
    let log = std::fs::read_to_string(stderr).unwrap_or_default();
    let log = log.trim();
    // Its last 2,000 characters.
    let start = log.char_indices().rev().nth(1999).map_or(0, |(at, _)| at);
    ProcessError::Egress {
        why,
        log: log[start..].to_owned(),
    }
}

/// Removes the proxy's files from the run directory (its attempt log stays
/// for the runner to export).
pub(crate) fn remove_files(run_dir: &Path) {
    for name in [CONFIG_FILE, STDERR_FILE] {
        let _ = std::fs::remove_file(run_dir.join(name));
    }
}
