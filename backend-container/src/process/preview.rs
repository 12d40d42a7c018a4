//! Preview ports: each `process.ports` entry of a container, published on a
//! port of the host's loopback that forwards every connection into the
//! container's network namespace.
//!
//! The forwarder is a program of its own (the facade's
//! `agent-workspace preview-forward CONFIG`, [`ContainerOptions::preview_forwarder`](super::ContainerOptions::preview_forwarder)),
//! started at seal with the container's network namespace at descriptor
//! [`NETNS_FD`]. It binds one listener per port on `127.0.0.1`, each on a port
//! the kernel chooses, makes its outgoing sockets from a thread that entered
//! the container's namespace, drops to the run's host ids, prints
//! [`READY`] and the endpoints it bound (read back from its sockets), and
//! serves until it is killed. It lives in the container's `preview` cgroup, so
//! it is frozen with the container, ended with it (teardown and recovery kill
//! the whole cgroup) and outlives the process that sealed it, as the container
//! does.

use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use command_fds::{CommandFdExt, FdMapping};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use serde::{Deserialize, Serialize};
use workspace_core::boundary::PreviewEndpoint;

use super::cgroups::ContainerCgroups;
use crate::error::ContainerError;

/// The container sub-cgroup the forwarder runs in.
pub const PREVIEW_CGROUP: &str = "preview";
/// The forwarder program's subcommand.
pub const FORWARDER_SUBCOMMAND: &str = "preview-forward";
/// The descriptor the forwarder finds the container's network namespace at.
pub const NETNS_FD: i32 = 3;
/// What the forwarder prints, followed by its endpoints as JSON, once it
/// listens.
pub const READY: &str = "ready ";
/// How long the seal waits for the forwarder to listen.
const READY_WAIT: Duration = Duration::from_secs(10);

/// The forwarder's configuration, written into the bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwarderConfig {
    /// The ports inside the container, one endpoint each.
    pub ports: Vec<u16>,
    /// The run's host uid, which the forwarder drops to once it holds its
    /// sockets.
    pub uid: u32,
    /// The run's host gid.
    pub gid: u32,
}

/// Starts the forwarder `program` for `ports` of the container whose pid 1 is
/// host pid `pid1` (blocking); the endpoints it bound.
pub(crate) fn publish(
    program: &Path,
    config: &ForwarderConfig,
    pid1: u32,
    cgroups: &ContainerCgroups,
    bundle: &Path,
) -> Result<Vec<PreviewEndpoint>, ContainerError> {
    let netns_path = format!("/proc/{pid1}/ns/net");
    let netns = std::fs::File::open(&netns_path).map_err(ContainerError::io(
        "opening the container's network namespace",
        Path::new(&netns_path),
    ))?;
    let config_path = bundle.join("preview.json");
    let json = serde_json::to_vec(config).map_err(|e| ContainerError::Io {
        step: "writing the preview forwarder's configuration",
        path: config_path.clone(),
        source: e.into(),
    })?;
    std::fs::write(&config_path, json).map_err(ContainerError::io(
        "writing the preview forwarder's configuration",
        &config_path,
    ))?;
    let log_path = bundle.join("preview.log");
    let log = std::fs::File::create(&log_path).map_err(ContainerError::io(
        "creating the preview forwarder's log",
        &log_path,
    ))?;
    let group = cgroups.create_child(PREVIEW_CGROUP)?;
    let mut command = Command::new(program);
    command
        .arg(FORWARDER_SUBCOMMAND)
        .arg(&config_path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        // Out of the caller's process group: a terminal's signals to the
        // command that sealed the run do not reach it.
        .process_group(0);
    command
        .fd_mappings(vec![FdMapping {
            parent_fd: netns.into(),
            child_fd: NETNS_FD,
        }])
        .map_err(|e| ContainerError::Lost {
            what: format!("passing the container's network namespace to the forwarder: {e}"),
        })?;
    let mut child = command.spawn().map_err(ContainerError::io(
        "starting the preview forwarder",
        program,
    ))?;
    group.add(child.id())?;
    let stdout = child.stdout.take();
    // Reaped by a thread of its own, whenever it ends (killed with the
    // container); a process that outlives this one is reaped by the host's init.
    std::thread::spawn(move || child.wait());
    let Some(stdout) = stdout else {
        return Err(ContainerError::Lost {
            what: "the preview forwarder's output".into(),
        });
    };
    let said = |what: &str| ContainerError::Lost {
        what: format!(
            "the preview forwarder {what}: {}",
            std::fs::read_to_string(&log_path)
                .unwrap_or_default()
                .trim()
        ),
    };
    let mut ready = [PollFd::new(stdout.as_fd(), PollFlags::POLLIN)];
    let waited = PollTimeout::try_from(READY_WAIT).unwrap_or(PollTimeout::MAX);
    if !matches!(poll(&mut ready, waited), Ok(n) if n > 0) {
        return Err(said("did not listen in time"));
    }
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(ContainerError::io(
            "reading the preview forwarder's answer",
            program,
        ))?;
    let Some(endpoints) = line.trim_end().strip_prefix(READY) else {
        return Err(said("ended before it listened"));
    };
    serde_json::from_str(endpoints).map_err(|_| said("answered what is not its endpoints"))
}
