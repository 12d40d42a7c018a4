//! An OCI runtime (runc, crun, youki), driven through its command line, with
//! its state read as `oci-spec`'s [`State`].
//!
//! Every container of this backend lives under a state directory of its own
//! (`--root`), so `list` shows only them and nothing of the host's other
//! containers is ever touched. All calls block (from async code, call them
//! in `spawn_blocking`).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use command_fds::{CommandFdExt, FdMapping};
use oci_spec::runtime::State;

use crate::error::ContainerError;

/// The runtimes looked for on `PATH`, in order of preference.
pub const KNOWN_RUNTIMES: [&str; 3] = ["runc", "crun", "youki"];
/// The file of a bundle that holds what the runtime wrote when it started the
/// container.
pub const RUNTIME_LOG: &str = "runtime.log";
/// How much of a failing runtime's standard error an error keeps.
const STDERR_TAIL: usize = 2000;

/// One OCI runtime and the state directory of this backend's containers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    program: PathBuf,
    name: String,
    version: String,
    root: PathBuf,
}

/// What the runtime says of a container: its OCI state, and whether it is
/// paused (runc's own status beside the specification's: a paused container's
/// processes exist, so its OCI status reads `running`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerStatus {
    /// The OCI state.
    pub state: State,
    /// Whether its processes are frozen.
    pub paused: bool,
}

/// A command run in a live container (`exec`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Its complete environment.
    pub env: Vec<(String, String)>,
    /// Its working directory inside (absolute).
    pub cwd: String,
    /// Its uid inside.
    pub uid: u32,
    /// Its gid inside.
    pub gid: u32,
}

impl Runtime {
    /// The runtime `name` (a name on `PATH` or a path), else the first of
    /// [`KNOWN_RUNTIMES`] on `PATH`; its containers' state under `root`.
    /// A runtime that cannot run on this host's cgroup layout (crun on a
    /// hybrid v1 + v2 host) is refused, saying so.
    ///
    /// # Ambient authority
    /// Looks up `PATH` and runs the runtime's `--version`.
    pub fn find(name: Option<&str>, root: &Path) -> Result<Self, ContainerError> {
        let candidates: Vec<&str> = match name {
            Some(name) => vec![name],
            None => KNOWN_RUNTIMES.to_vec(),
        };
        let program = candidates
            .iter()
            .find_map(|name| on_path(name))
            .ok_or_else(|| ContainerError::NoRuntime {
                tried: match name {
                    Some(path) if path.contains('/') => {
                        format!("no executable at {path}")
                    }
                    Some(name) => format!("{name} is not on PATH"),
                    None => format!("none of {} is on PATH", candidates.join(", ")),
                },
            })?;
        let name = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let out = Command::new(&program)
            .arg("--version")
            .output()
            .map_err(|source| ContainerError::Spawn {
                runtime: name.clone(),
                step: "--version",
                source,
            })?;
        let version = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned();
        let runtime = Self {
            program,
            name,
            version,
            root: root.to_path_buf(),
        };
        runtime.check_host()?;
        Ok(runtime)
    }

    /// The runtime's program, as found.
    pub fn program(&self) -> &Path {
        &self.program
    }

    /// The runtime's name (`runc`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The first line of its `--version` (`runc version 1.1.5+ds1`).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The state directory of this backend's containers.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// crun refuses a host whose cgroup controllers are split between v1 and
    /// v2 ("cgroups in hybrid mode not supported"): known before anything is
    /// created.
    fn check_host(&self) -> Result<(), ContainerError> {
        let hybrid = Path::new("/sys/fs/cgroup/unified").is_dir()
            && Path::new("/sys/fs/cgroup/memory").is_dir();
        if self.name == "crun" && hybrid {
            return Err(ContainerError::RuntimeRefuses {
                runtime: self.name.clone(),
                why: "this host mounts cgroup v1 controllers beside v2 (a hybrid layout), which crun does not support; use runc".into(),
            });
        }
        Ok(())
    }

    /// Creates and starts container `id` from the bundle in `bundle`, its
    /// first process detached. The container inherits the runtime's standard
    /// streams, so they are `/dev/null` and a file of the bundle
    /// (`runtime.log`, what the runtime says when it fails): a pipe would stay
    /// open for the container's whole life. The container's first process also
    /// gets `hold_open` (at descriptors 3 and up, `--preserve-fds`), which it
    /// and what it forks keep open as long as the container lives.
    pub fn run_detached(
        &self,
        id: &str,
        bundle: &Path,
        hold_open: Vec<OwnedFd>,
    ) -> Result<(), ContainerError> {
        let log = bundle.join(RUNTIME_LOG);
        let stderr = std::fs::File::create(&log)
            .map_err(ContainerError::io("creating the runtime's log", &log))?;
        let mut command = self.command();
        command
            .args(["run", "--detach", "--preserve-fds"])
            .arg(hold_open.len().to_string())
            .arg("--bundle")
            .arg(bundle)
            .arg(id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let mappings = hold_open
            .into_iter()
            .zip(3..)
            .map(|(parent_fd, child_fd)| FdMapping {
                parent_fd,
                child_fd,
            })
            .collect();
        command
            .fd_mappings(mappings)
            .map_err(|e| ContainerError::Lost {
                what: format!("passing the descriptors the container holds open: {e}"),
            })?;
        let status = command.status().map_err(|source| ContainerError::Spawn {
            runtime: self.name.clone(),
            step: "run",
            source,
        })?;
        if status.success() {
            return Ok(());
        }
        let said = std::fs::read(&log).unwrap_or_default();
        Err(self.failed(
            "run",
            &Output {
                status,
                stdout: Vec::new(),
                stderr: said,
            },
        ))
    }

    /// The command that runs `spec` in container `id` (its standard streams
    /// are the caller's to set; the runtime passes them to the process). The
    /// process gets the container's capabilities (none), seccomp filter and
    /// `no_new_privs`.
    pub fn exec_command(&self, id: &str, spec: &ExecSpec) -> Command {
        let mut command = self.command();
        command
            .arg("exec")
            .arg("--no-new-privs")
            .args(["--user", &format!("{}:{}", spec.uid, spec.gid)])
            .args(["--cwd", &spec.cwd]);
        for (name, value) in &spec.env {
            command.args(["--env", &format!("{name}={value}")]);
        }
        // Everything after the id is the command (the runtime parses no flag
        // there, and a `--` would be taken as the program).
        command.arg(id).args(&spec.argv);
        command
    }

    /// The state of container `id`; `None` when the runtime knows no such
    /// container.
    pub fn state(&self, id: &str) -> Result<Option<ContainerStatus>, ContainerError> {
        let mut command = self.command();
        command.args(["state", id]);
        let out = self.output("state", &mut command)?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            if stderr.contains("does not exist") || stderr.contains("not found") {
                return Ok(None);
            }
            return Err(self.failed("state", &out));
        }
        let unreadable = |e: serde_json::Error| ContainerError::Spec {
            step: "reading the runtime's state",
            source: oci_spec::OciSpecError::Other(e.to_string()),
        };
        let mut value: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(unreadable)?;
        let paused = value.get("status").and_then(serde_json::Value::as_str) == Some("paused");
        if paused && let Some(status) = value.get_mut("status") {
            *status = serde_json::Value::from("running");
        }
        let state = serde_json::from_value(value).map_err(unreadable)?;
        Ok(Some(ContainerStatus { state, paused }))
    }

    /// Sends `signal` (e.g. `KILL`) to every process of container `id`.
    pub fn kill_all(&self, id: &str, signal: &str) -> Result<(), ContainerError> {
        let mut command = self.command();
        command.args(["kill", "--all", id, signal]);
        self.checked("kill", &mut command).map(drop)
    }

    /// Deletes container `id`, killing what still runs (`--force`).
    pub fn delete(&self, id: &str) -> Result<(), ContainerError> {
        let mut command = self.command();
        command.args(["delete", "--force", id]);
        self.checked("delete", &mut command).map(drop)
    }

    /// Freezes every process of container `id`.
    pub fn pause(&self, id: &str) -> Result<(), ContainerError> {
        let mut command = self.command();
        command.args(["pause", id]);
        self.checked("pause", &mut command).map(drop)
    }

    /// Thaws container `id`.
    pub fn resume(&self, id: &str) -> Result<(), ContainerError> {
        let mut command = self.command();
        command.args(["resume", id]);
        self.checked("resume", &mut command).map(drop)
    }

    /// The runtime's command line with this backend's state directory.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.arg("--root").arg(&self.root);
        command
    }

    fn output(&self, step: &'static str, command: &mut Command) -> Result<Output, ContainerError> {
        command.output().map_err(|source| ContainerError::Spawn {
            runtime: self.name.clone(),
            step,
            source,
        })
    }

    fn checked(&self, step: &'static str, command: &mut Command) -> Result<Output, ContainerError> {
        let out = self.output(step, command)?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(self.failed(step, &out))
        }
    }

    fn failed(&self, step: &'static str, out: &Output) -> ContainerError {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let start = stderr.len().saturating_sub(STDERR_TAIL);
        let start = (start..stderr.len())
            .find(|i| stderr.is_char_boundary(*i))
            .unwrap_or(stderr.len());
        ContainerError::Runtime {
            runtime: self.name.clone(),
            step,
            status: out.status.to_string(),
            stderr: stderr[start..].trim().to_owned(),
        }
    }
}

/// `name` as an executable: a path as given, else the first match on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let executable = |path: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let path = PathBuf::from(name);
        return executable(&path).then_some(path);
    }
    let dirs = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&dirs)
        .map(|dir| dir.join(name))
        .find(|path| executable(path))
}
