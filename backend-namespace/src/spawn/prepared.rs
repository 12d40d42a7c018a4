//! Everything the child needs, computed and allocated before `clone`.
//!
//! After `clone` the child may not allocate, so every path is a `CString` here,
//! every mount's data string is formatted here, `argv`/`envp` are null-terminated
//! pointer arrays kept alive by this struct, and every descriptor the child keeps
//! is open already.

use std::cell::Cell;
use std::ffi::{CString, c_int};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::libc;
use workspace_core::mount_plan::{MountAction, Reason};

use super::error::SpawnError;
use super::idmapped;
use super::overlay;
use super::rlimits::Rlimit64;
use super::{JoinRequest, Pid1, Sandbox, SpawnRequest};
use crate::seccomp::{SeccompFilter, SeccompPolicy};
use crate::sys::process::ArgArea;
use crate::sys::{CStrArray, OpenHow};

/// At most this many descriptors pid 1 holds open for the sandbox's life.
const MAX_HELD_OPEN: usize = 4;
/// At most this many cgroup files can be joined (descriptors kept in the child).
pub(crate) const MAX_CGROUP_FILES: usize = 16;

/// One mount-plan step, ready for the child.
#[derive(Debug)]
pub(crate) struct PreparedStep {
    /// The absolute target inside the new root, e.g. `/etc/passwd`.
    pub target: CString,
    /// What to do there.
    pub kind: StepKind,
    /// Whether a missing target is skipped rather than an error: the `/proc` parts
    /// the plan hardens exist only with some kernel configurations.
    pub optional: bool,
}

/// A host directory the child opens (`O_PATH`, no symlink on its path) into
/// `Prepared::source_fds[slot]` before its fs ids change, and checks to be the
/// directory `(dev, ino)` inspected before clone.
#[derive(Debug)]
pub(crate) struct HostSource {
    pub source: CString,
    pub slot: usize,
    pub dev: u64,
    pub ino: u64,
}

/// Where an overlay's lower layer comes from.
#[derive(Debug)]
pub(crate) enum LowerLayer {
    /// The detached idmapped mount `Prepared::lowers[slot]` (see `idmapped.rs`).
    Idmapped { slot: usize },
    /// The host directory itself (it is the run's own already).
    Host(HostSource),
}

/// Where the child puts an overlay's layers in its scratch root, which is
/// detached with the old root after `pivot_root` (the overlay keeps its own
/// references to them).
#[derive(Debug)]
pub(crate) struct ScratchLayers {
    /// `/layers-N`.
    pub dir: CString,
    /// `/layers-N/lower`: the lower layer's mount.
    pub lower: CString,
    /// `/layers-N/rw`: a bind of the directory holding upper and work.
    pub rw: CString,
}

/// A [`MountAction`] with its arguments in the form the syscalls take.
#[derive(Debug)]
pub(crate) enum StepKind {
    /// Bind the host path `source`, which the child opens (`O_PATH`, no symlink
    /// anywhere: `openat2` with `RESOLVE_NO_SYMLINKS`) into
    /// `Prepared::source_fds[slot]` while it still has the host root's fs ids, and
    /// checks it is still the file `(dev, ino)` inspected before clone.
    Bind {
        source: CString,
        slot: usize,
        dev: u64,
        ino: u64,
        dir: bool,
        read_only: bool,
        device: bool,
    },
    /// Attach the detached, writable idmapped mount `Prepared::lowers[slot]` of a
    /// read-write host mount at the target (see `idmapped.rs`); its flags
    /// (`nosuid`, `nodev`) were set on it before the clone.
    IdmappedBind { slot: usize },
    /// overlayfs with a prepared option string naming its layers where the
    /// child first puts them, in its scratch root (`layers`): the lower layer
    /// and the directory holding the upper and work directories, each opened
    /// while the child still has the host root's fs ids. No path of the host's
    /// is walked with the run's ids, so the runtime directory may be closed to
    /// every other user (the run's host id among them).
    Overlay {
        data: CString,
        lower: LowerLayer,
        rw: HostSource,
        layers: ScratchLayers,
    },
    /// Bind the target onto itself.
    Rebind { read_only: bool },
    /// Read-only on the target's own mount.
    RemountReadOnly,
    /// A tmpfs with a prepared option string.
    Tmpfs { data: CString },
    /// procfs.
    Proc,
    /// sysfs, read-only.
    Sysfs,
    /// devpts (new instance).
    Devpts,
    /// Hide the target.
    Mask { file: bool },
    /// A symbolic link.
    Symlink { to: CString },
    /// A file with generated contents.
    File { contents: Vec<u8>, mode: u32 },
}

/// The descriptors the child keeps (moved to fixed numbers there).
#[derive(Debug)]
pub(crate) struct ChildFds {
    pub stdio: [OwnedFd; 3],
    pub go_read: OwnedFd,
    pub error_write: OwnedFd,
    pub status_write: OwnedFd,
    /// The files the child writes `0` to, to join the run's cgroups: each v1
    /// hierarchy's `tasks`, then the v2 directory's `cgroup.procs`, which the
    /// child writes only when its clone could not place it there
    /// ([`Prepared::cgroup_v2`]).
    pub cgroup_files: Vec<OwnedFd>,
    /// Detached idmapped mounts of overlay lower layers (`idmapped.rs`).
    pub lowers: Vec<OwnedFd>,
    /// The pidfd of the sandbox a joining child enters (`join.rs`).
    pub sandbox: Option<OwnedFd>,
    /// What pid 1 holds open for the sandbox's life ([`super::SpawnRequest::hold_open`]).
    pub held: Vec<OwnedFd>,
    /// The listeners of the published ports (`forward.rs`).
    pub listeners: Vec<OwnedFd>,
    /// The connection broker's listener (`forward.rs`).
    pub broker: Option<OwnedFd>,
}

/// The parent's ends of the pipes.
#[derive(Debug)]
pub(crate) struct ParentFds {
    pub go_write: OwnedFd,
    pub error_read: OwnedFd,
    pub status_read: OwnedFd,
}

/// Everything computed before `clone`.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// Where the program may be, tried in order by the command's `execve` (one
    /// path for an absolute `argv[0]`; see [`program_candidates`]).
    pub programs: Vec<CString>,
    /// The command's arguments.
    pub argv: CStrArray,
    /// The command's environment, `NAME=value` each.
    pub envp: CStrArray,
    pub cwd: CString,
    /// Whether the command makes its stdin its controlling terminal
    /// ([`SpawnRequest::controlling_terminal`]).
    pub controlling_terminal: bool,
    /// What pid 1 does after the setup (a joining child runs the command).
    pub pid1: Pid1,
    /// Whether pid 1 of a live sandbox starts `argv` as its first process.
    pub first_process: bool,
    pub hostname: Vec<u8>,
    pub root_data: CString,
    pub steps: Vec<PreparedStep>,
    pub uid: u32,
    pub gid: u32,
    pub seccomp: Option<Vec<libc::sock_filter>>,
    /// `(resource, limit)` pairs the child sets on itself.
    pub rlimits: Vec<(c_int, Rlimit64)>,
    pub child_fds: ChildFds,
    pub parent_fds: ParentFds,
    /// The run's cgroup v2 directory (`O_PATH`), which the clone places the
    /// child in (`CLONE_INTO_CGROUP`); its `cgroup.procs` is the last of
    /// [`ChildFds::cgroup_files`].
    pub cgroup_v2: Option<OwnedFd>,
    /// The raw numbers of every descriptor the child keeps, in their final order
    /// (stdio, go, error, status, cgroup files, idmapped lower layers or the
    /// sandbox pidfd, what pid 1 holds open, published ports' listeners).
    pub kept: Vec<c_int>,
    /// Scratch space the child fills while moving `kept` (no allocation there).
    pub moved: Vec<Cell<c_int>>,
    /// One slot per bind source, filled by the child (see [`StepKind::Bind`]).
    pub source_fds: Vec<Cell<c_int>>,
    /// The `struct open_how` the child resolves every bind source with.
    pub source_how: OpenHow,
    /// The published ports, with their listeners' numbers in the child.
    pub published: Vec<super::forward::Published>,
    /// The forwarder's connection table, allocated here for pid 1 (which must not
    /// allocate) when ports are published; empty otherwise.
    pub connections: super::forward::ConnectionTable,
    /// The connection broker's listener's number in the child, -1 without one.
    pub broker: c_int,
    /// Where the runner's command line lies in memory (`arg_start..arg_end` of
    /// `/proc/self/stat`): the child's copy is blanked, so the run's pid 1 does not
    /// show the runner's arguments in `/proc/1/cmdline`, which anyone may read.
    pub arg_area: Option<ArgArea>,
}

/// The parts of a request that every process the backend starts has, whether it
/// sets a sandbox up ([`SpawnRequest`]) or joins one ([`JoinRequest`]).
pub(crate) struct CommandParts<'a> {
    pub argv: &'a [String],
    pub env: &'a [(String, String)],
    pub uid: u32,
    pub gid: u32,
    pub cwd: &'a str,
    pub stdio: [Option<&'a OwnedFd>; 3],
    pub controlling_terminal: bool,
    pub seccomp: Option<&'a SeccompFilter>,
    pub danger_no_seccomp: bool,
    pub cgroups: &'a [std::path::PathBuf],
    pub rlimits: &'a super::ResourceLimits,
    pub pid1: Pid1,
}

impl SpawnRequest {
    fn parts(&self) -> CommandParts<'_> {
        CommandParts {
            argv: &self.argv,
            env: &self.env,
            uid: self.uid,
            gid: self.gid,
            cwd: &self.cwd,
            stdio: [
                self.stdin.as_ref(),
                self.stdout.as_ref(),
                self.stderr.as_ref(),
            ],
            controlling_terminal: self.controlling_terminal,
            seccomp: self.seccomp.as_ref(),
            danger_no_seccomp: self.danger_no_seccomp,
            cgroups: &self.cgroups,
            rlimits: &self.rlimits,
            pid1: self.pid1,
        }
    }
}

impl JoinRequest {
    fn parts(&self) -> CommandParts<'_> {
        CommandParts {
            argv: &self.argv,
            env: &self.env,
            uid: self.uid,
            gid: self.gid,
            cwd: &self.cwd,
            stdio: [
                self.stdin.as_ref(),
                self.stdout.as_ref(),
                self.stderr.as_ref(),
            ],
            controlling_terminal: self.controlling_terminal,
            seccomp: self.seccomp.as_ref(),
            danger_no_seccomp: self.danger_no_seccomp,
            cgroups: &self.cgroups,
            rlimits: &self.rlimits,
            pid1: Pid1::RunCommand,
        }
    }
}

impl Prepared {
    /// Checks a request that sets a sandbox up and prepares everything.
    pub fn new(request: &SpawnRequest) -> Result<Self, SpawnError> {
        check_ids(request)?;
        let hostname = request.plan.hostname.as_bytes().to_vec();
        if hostname.len() > 64 {
            return Err(invalid("plan.hostname", "is longer than 64 bytes"));
        }
        let mut lowers = Vec::new();
        let (steps, binds) = prepare_steps(request, &mut lowers)?;
        let root_data = cstring(
            "plan.root_size_bytes",
            &format!("size={},mode=0755", request.plan.root_size_bytes),
        )?;
        let mut prepared = Self::command(&request.parts())?;
        prepared.hostname = hostname;
        prepared.first_process = request.pid1 == Pid1::HoldSandbox && !request.argv.is_empty();
        prepared.root_data = root_data;
        prepared.steps = steps;
        prepared.source_fds = vec![Cell::new(-1); binds];
        prepared.child_fds.lowers = lowers;
        prepared.publish(&request.publish, request.pid1)?;
        prepared.broker(request.broker.as_ref(), request.pid1)?;
        prepared.hold_open(&request.hold_open, request.pid1)?;
        prepared.keep();
        Ok(prepared)
    }

    /// Keeps what pid 1 holds open for the sandbox's life.
    fn hold_open(&mut self, held: &[OwnedFd], pid1: Pid1) -> Result<(), SpawnError> {
        if held.is_empty() {
            return Ok(());
        }
        if pid1 != Pid1::HoldSandbox {
            return Err(invalid(
                "hold_open",
                "only a sandbox held by pid 1 holds descriptors open",
            ));
        }
        if held.len() > MAX_HELD_OPEN {
            return Err(invalid("hold_open", "more than 4 descriptors"));
        }
        for fd in held {
            let fd = fd.try_clone().map_err(|e| SpawnError::Prepare {
                step: "duplicating a descriptor pid 1 holds open",
                path: format!("descriptor {}", fd.as_raw_fd()).into(),
                source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
            })?;
            self.child_fds.held.push(fd);
        }
        Ok(())
    }

    /// Keeps the published ports' listeners for pid 1.
    fn publish(&mut self, published: &[super::Published], pid1: Pid1) -> Result<(), SpawnError> {
        if published.is_empty() {
            return Ok(());
        }
        if pid1 != Pid1::HoldSandbox {
            return Err(invalid(
                "publish",
                "only a sandbox held by pid 1 forwards ports",
            ));
        }
        if published.len() > super::forward::MAX_PUBLISHED {
            return Err(invalid("publish", "more than 16 ports"));
        }
        self.connections = super::forward::ConnectionTable::new();
        for p in published {
            let listener = p.listener.try_clone().map_err(|e| SpawnError::Prepare {
                step: "duplicating a published port's listener",
                path: format!("port {}", p.port).into(),
                source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
            })?;
            self.child_fds.listeners.push(listener);
            self.published.push(super::forward::Published {
                listener: -1,
                port: p.port,
            });
        }
        Ok(())
    }

    /// Keeps the connection broker's listener for pid 1.
    fn broker(&mut self, broker: Option<&OwnedFd>, pid1: Pid1) -> Result<(), SpawnError> {
        let Some(broker) = broker else {
            return Ok(());
        };
        if pid1 != Pid1::HoldSandbox {
            return Err(invalid(
                "broker",
                "only a sandbox held by pid 1 brokers connections",
            ));
        }
        let listener = broker.try_clone().map_err(|e| SpawnError::Prepare {
            step: "duplicating the connection broker's listener",
            path: format!("descriptor {}", broker.as_raw_fd()).into(),
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
        })?;
        if self.connections.is_empty() {
            self.connections = super::forward::ConnectionTable::new();
        }
        self.child_fds.broker = Some(listener);
        Ok(())
    }

    /// Checks a request that joins `sandbox` and prepares everything: no mount
    /// plan, the pidfd the sandbox is entered through kept for `setns`.
    pub fn for_join(request: &JoinRequest, sandbox: &Sandbox) -> Result<Self, SpawnError> {
        let mut prepared = Self::command(&request.parts())?;
        let pidfd =
            sandbox
                .entry_pidfd()
                .try_clone_to_owned()
                .map_err(|e| SpawnError::Prepare {
                    step: "duplicating the sandbox's pidfd",
                    path: format!("/proc/{}", sandbox.entry_pid()).into(),
                    source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
                })?;
        prepared.child_fds.sandbox = Some(pidfd);
        prepared.keep();
        Ok(prepared)
    }

    /// What every process needs: program, arguments, environment, ids, stdio,
    /// pipes, cgroup files, seccomp program and rlimits.
    fn command(request: &CommandParts<'_>) -> Result<Self, SpawnError> {
        if !request.cwd.starts_with('/') {
            return Err(invalid("cwd", format!("{:?} is not absolute", request.cwd)));
        }
        let programs = match (request.argv.first(), request.pid1) {
            (None, Pid1::HoldSandbox) => Vec::new(),
            (None, Pid1::RunCommand) => return Err(invalid("argv", "is empty")),
            (Some(program), _) => {
                let programs = program_candidates(program, request.cwd, request.env)
                    .iter()
                    .map(|path| cstring("argv[0]", path))
                    .collect::<Result<Vec<_>, _>>()?;
                if programs.is_empty() {
                    return Err(invalid(
                        "argv[0]",
                        format!(
                            "{program:?} has no '/' and the run has no absolute PATH entry to look it up in"
                        ),
                    ));
                }
                programs
            }
        };
        let argv_owned = request
            .argv
            .iter()
            .map(|a| cstring("argv", a))
            .collect::<Result<Vec<_>, _>>()?;
        let envp_owned = request
            .env
            .iter()
            .map(|(k, v)| {
                if k.is_empty() || k.contains('=') {
                    return Err(invalid("env", format!("{k:?} is not a variable name")));
                }
                cstring("env", &format!("{k}={v}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let cwd = cstring("cwd", request.cwd)?;
        if request.cgroups.len() > MAX_CGROUP_FILES {
            return Err(invalid("cgroups", "more than 16 directories"));
        }
        let seccomp = seccomp_program(request.seccomp, request.danger_no_seccomp)?;
        let (go_read, go_write) = pipe()?;
        let (error_read, error_write) = pipe()?;
        let (status_read, status_write) = pipe()?;
        let [stdin, stdout, stderr] = request.stdio;
        let mut prepared = Self {
            programs,
            argv: CStrArray::new(argv_owned),
            envp: CStrArray::new(envp_owned),
            cwd,
            controlling_terminal: request.controlling_terminal,
            pid1: request.pid1,
            first_process: false,
            hostname: Vec::new(),
            root_data: CString::default(),
            steps: Vec::new(),
            uid: request.uid,
            gid: request.gid,
            seccomp,
            rlimits: request.rlimits.prepared(),
            child_fds: ChildFds {
                stdio: [
                    stdio_fd(stdin, "stdin")?,
                    stdio_fd(stdout, "stdout")?,
                    stdio_fd(stderr, "stderr")?,
                ],
                go_read,
                error_write,
                status_write,
                cgroup_files: Vec::new(),
                lowers: Vec::new(),
                sandbox: None,
                held: Vec::new(),
                listeners: Vec::new(),
                broker: None,
            },
            parent_fds: ParentFds {
                go_write,
                error_read,
                status_read,
            },
            cgroup_v2: None,
            kept: Vec::new(),
            moved: Vec::new(),
            source_fds: Vec::new(),
            source_how: OpenHow::no_symlinks(),
            published: Vec::new(),
            connections: super::forward::ConnectionTable::default(),
            broker: -1,
            arg_area: ArgArea::of_this_process(),
        };
        let mut v2_procs = None;
        for dir in request.cgroups {
            let (file, v2) = open_cgroup(dir)?;
            match v2 {
                None => prepared.child_fds.cgroup_files.push(file),
                Some(_) if prepared.cgroup_v2.is_some() => {
                    return Err(invalid("cgroups", "names two cgroup v2 directories"));
                }
                v2 => {
                    prepared.cgroup_v2 = v2;
                    v2_procs = Some(file);
                }
            }
        }
        prepared.child_fds.cgroup_files.extend(v2_procs);
        Ok(prepared)
    }

    /// Fixes the order of the descriptors the child keeps: stdio, go, error,
    /// status, cgroup files, then the idmapped lower layers or the sandbox
    /// pidfd, what pid 1 holds open, the listeners.
    fn keep(&mut self) {
        let fds = &self.child_fds;
        self.kept = fds
            .stdio
            .iter()
            .chain([&fds.go_read, &fds.error_write, &fds.status_write])
            .chain(&fds.cgroup_files)
            .chain(&fds.lowers)
            .chain(&fds.sandbox)
            .chain(&fds.held)
            .chain(&fds.listeners)
            .chain(&fds.broker)
            .map(|fd| fd.as_raw_fd())
            .collect();
        self.moved = vec![Cell::new(-1); self.kept.len()];
        // The listeners and the broker come last: their numbers in the child
        // follow from that.
        let first = self.kept.len() - fds.listeners.len() - usize::from(fds.broker.is_some());
        for (i, published) in self.published.iter_mut().enumerate() {
            published.listener = (first + i) as c_int;
        }
        if fds.broker.is_some() {
            self.broker = (self.kept.len() - 1) as c_int;
        }
    }
}

/// The BPF program the child installs: the request's filter, else the default
/// policy's (built here, before clone), else none when explicitly opted out.
fn seccomp_program(
    seccomp: Option<&SeccompFilter>,
    danger_no_seccomp: bool,
) -> Result<Option<Vec<libc::sock_filter>>, SpawnError> {
    let default;
    let filter = match (seccomp, danger_no_seccomp) {
        (Some(_), true) => {
            return Err(invalid(
                "danger_no_seccomp",
                "is set together with a seccomp filter",
            ));
        }
        (None, true) => return Ok(None),
        (Some(filter), false) => filter,
        (None, false) => {
            default = SeccompFilter::new(&SeccompPolicy::default())
                .map_err(|source| SpawnError::Seccomp { source })?;
            &default
        }
    };
    Ok(Some(
        filter
            .program()
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect(),
    ))
}

fn check_ids(request: &SpawnRequest) -> Result<(), SpawnError> {
    if request.host_uid == 0 && !(request.uid == 0 && request.danger_map_root_to_host_root) {
        return Err(invalid(
            "host_uid",
            "mapping to host root needs uid 0 inside and danger_map_root_to_host_root",
        ));
    }
    if request.host_gid == 0 && !(request.gid == 0 && request.danger_map_root_to_host_root) {
        return Err(invalid(
            "host_gid",
            "mapping to host group 0 needs gid 0 inside and danger_map_root_to_host_root",
        ));
    }
    Ok(())
}

/// The steps of `request.plan`; the idmapped mounts of overlay lower layers are
/// made here and pushed to `lowers`.
fn prepare_steps(
    request: &SpawnRequest,
    lowers: &mut Vec<OwnedFd>,
) -> Result<(Vec<PreparedStep>, usize), SpawnError> {
    let (plan, uid, gid) = (&request.plan, request.uid, request.gid);
    let mut out = Vec::with_capacity(plan.steps.len());
    let mut binds = 0;
    for (index, step) in plan.steps.iter().enumerate() {
        let field = "plan.steps[].target";
        if !step.target.starts_with('/') || step.target.split('/').any(|c| c == "..") {
            return Err(invalid(
                field,
                format!("{:?} is not a clean absolute path", step.target),
            ));
        }
        let kind = match &step.action {
            MountAction::Bind { source, read_only } => {
                let probed = probe_source(index, &step.target, source)?;
                // A read-write host directory not owned by the run's host ids is
                // shown through an idmapped mount in which its owner is the run's:
                // the run can write its cache, and on disk it stays the owner's.
                if !*read_only
                    && probed.dir
                    && step.reason == Reason::HostMount
                    && let Some(slot) = idmapped::prepare_writable(
                        source,
                        (probed.dev, probed.ino),
                        (request.host_uid, request.host_gid),
                        lowers,
                    )?
                {
                    out.push(PreparedStep {
                        target: cstring(field, &step.target)?,
                        kind: StepKind::IdmappedBind { slot },
                        optional: false,
                    });
                    continue;
                }
                binds += 1;
                StepKind::Bind {
                    source: cstring("plan.steps[].action.source", &source.to_string_lossy())?,
                    slot: binds - 1,
                    dev: probed.dev,
                    ino: probed.ino,
                    dir: probed.dir,
                    read_only: *read_only,
                    device: false,
                }
            }
            MountAction::Device { source } => {
                let probed = probe_source(index, &step.target, source)?;
                binds += 1;
                StepKind::Bind {
                    source: cstring("plan.steps[].action.source", &source.to_string_lossy())?,
                    slot: binds - 1,
                    dev: probed.dev,
                    ino: probed.ino,
                    dir: false,
                    read_only: false,
                    device: true,
                }
            }
            MountAction::Overlay { lower, upper, work } => {
                let layer = "plan.steps[].action.overlay";
                let probed = probe_source(index, &step.target, lower)?;
                // The upper and work directories are reached through one bind of
                // the directory holding both (overlayfs wants them on one mount).
                let rw = match (upper.parent(), work.parent()) {
                    (Some(a), Some(b)) if a == b => a,
                    _ => {
                        return Err(invalid(
                            layer,
                            format!("{upper:?} and {work:?} are not in one directory"),
                        ));
                    }
                };
                let name = |path: &Path| {
                    let text = path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if text.is_empty() || text.contains([',', ':', '\\']) {
                        Err(invalid(
                            layer,
                            format!("{path:?} cannot be an overlay layer"),
                        ))
                    } else {
                        Ok(text)
                    }
                };
                let (upper_name, work_name) = (name(upper)?, name(work)?);
                // A symlink anywhere on a layer's path is refused (the kernel
                // would follow it).
                probe_source(index, &step.target, upper)?;
                probe_source(index, &step.target, work)?;
                let rw_probed = probe_source(index, &step.target, rw)?;
                let dir = format!("/layers-{index}");
                let data = format!(
                    "lowerdir={dir}/lower,upperdir={dir}/rw/{upper_name},workdir={dir}/rw/{work_name},{}",
                    overlay::OPTIONS
                );
                // A workspace sealed again mounts the layers a second time.
                overlay::clear_volatile_marker(work).map_err(|e| SpawnError::OverlayMarker {
                    step: index,
                    target: step.target.clone(),
                    path: work.clone(),
                    source: e,
                })?;
                let mut host_source = |path: &Path, probed: Probed| {
                    binds += 1;
                    Ok::<_, SpawnError>(HostSource {
                        source: cstring(layer, &path.to_string_lossy())?,
                        slot: binds - 1,
                        dev: probed.dev,
                        ino: probed.ino,
                    })
                };
                let lower = match idmapped::prepare(
                    lower,
                    (probed.dev, probed.ino),
                    (request.host_uid, request.host_gid),
                    lowers,
                )? {
                    Some(slot) => LowerLayer::Idmapped { slot },
                    None => LowerLayer::Host(host_source(lower, probed)?),
                };
                let rw = host_source(rw, rw_probed)?;
                StepKind::Overlay {
                    data: cstring(layer, &data)?,
                    lower,
                    rw,
                    layers: ScratchLayers {
                        lower: cstring(layer, &format!("{dir}/lower"))?,
                        rw: cstring(layer, &format!("{dir}/rw"))?,
                        dir: cstring(layer, &dir)?,
                    },
                }
            }
            MountAction::Rebind { read_only } => StepKind::Rebind {
                read_only: *read_only,
            },
            MountAction::RemountReadOnly => StepKind::RemountReadOnly,
            MountAction::Tmpfs { size_bytes, mode } => {
                let mut data = format!("size={size_bytes},mode={mode:o}");
                if step.reason == Reason::Home {
                    data.push_str(&format!(",uid={uid},gid={gid}"));
                }
                StepKind::Tmpfs {
                    data: cstring("plan.steps[].action.tmpfs", &data)?,
                }
            }
            MountAction::Proc => StepKind::Proc,
            MountAction::Sysfs => StepKind::Sysfs,
            MountAction::Devpts => StepKind::Devpts,
            MountAction::Mask { file } => StepKind::Mask { file: *file },
            MountAction::Symlink { to } => StepKind::Symlink {
                to: cstring("plan.steps[].action.symlink", to)?,
            },
            MountAction::File { contents, mode } => StepKind::File {
                contents: contents.as_bytes().to_vec(),
                mode: *mode,
            },
        };
        out.push(PreparedStep {
            target: cstring(field, &step.target)?,
            kind,
            optional: step.reason == Reason::Proc && step.target != "/proc",
        });
    }
    Ok((out, binds))
}

/// What [`probe_source`] found: the file the child must open again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Probed {
    dir: bool,
    dev: u64,
    ino: u64,
}

/// Checks a bind source (or an overlay layer) before clone, so a missing path is
/// reported with its name: it must be absolute, without `.` or `..`, and no
/// component may be a symlink (each one is inspected with `symlink_metadata`, so
/// a link planted anywhere on the path, not only at its end, is refused with
/// `ELOOP`). Returns whether it is a directory (the mount point must match its
/// type) and its `(dev, ino)`, which the child compares with what it opened.
fn probe_source(index: usize, target: &str, source: &Path) -> Result<Probed, SpawnError> {
    let error = |e: std::io::Error| SpawnError::Source {
        step: index,
        target: target.to_owned(),
        path: source.to_path_buf(),
        source: e,
    };
    probe_no_symlinks(source).map_err(error)
}

fn probe_no_symlinks(source: &Path) -> std::io::Result<Probed> {
    use std::os::unix::fs::MetadataExt;
    use std::path::Component;
    let invalid = || std::io::Error::from(std::io::ErrorKind::InvalidInput);
    if !source.is_absolute() {
        return Err(invalid());
    }
    let text = source.as_os_str().as_encoded_bytes();
    if text.split(|b| *b == b'/').any(|c| c == b"." || c == b"..") {
        return Err(invalid());
    }
    let mut at = std::path::PathBuf::from("/");
    let mut last = std::fs::symlink_metadata(&at)?;
    for component in source.components() {
        match component {
            Component::RootDir => continue,
            Component::Normal(name) => at.push(name),
            _ => return Err(invalid()),
        }
        last = std::fs::symlink_metadata(&at)?;
        if last.file_type().is_symlink() {
            return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
        }
    }
    Ok(Probed {
        dir: last.is_dir(),
        dev: last.dev(),
        ino: last.ino(),
    })
}

fn stdio_fd(fd: Option<&OwnedFd>, name: &'static str) -> Result<OwnedFd, SpawnError> {
    match fd {
        Some(fd) => fd.try_clone().map_err(|e| SpawnError::Prepare {
            step: name,
            path: format!("fd {}", fd.as_raw_fd()).into(),
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
        }),
        None => nix::fcntl::open(
            "/dev/null",
            OFlag::O_RDWR | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|source| SpawnError::Prepare {
            step: "opening /dev/null for stdio",
            path: "/dev/null".into(),
            source,
        }),
    }
}

fn cstring(field: &'static str, value: &str) -> Result<CString, SpawnError> {
    CString::new(value).map_err(|_| invalid(field, format!("{value:?} contains a NUL byte")))
}

fn invalid(field: &'static str, reason: impl Into<String>) -> SpawnError {
    SpawnError::InvalidRequest {
        field,
        reason: reason.into(),
    }
}

/// A pipe whose both ends are close-on-exec.
fn pipe() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|source| SpawnError::Prepare {
        step: "creating a pipe",
        path: "-".into(),
        source,
    })
}

/// The paths the command's `execve` tries, in order, as `execvp` would inside the
/// run: an absolute `argv[0]` as it is; one with a `/` relative to `cwd`; a bare
/// name in each absolute directory of the run's `PATH` (relative entries are
/// skipped: they would depend on the working directory). The lookup happens in the
/// child after `pivot_root`, so it sees the run's file system, not the host's.
pub(crate) fn program_candidates(
    program: &str,
    cwd: &str,
    env: &[(String, String)],
) -> Vec<String> {
    if program.starts_with('/') {
        return vec![program.to_owned()];
    }
    if program.contains('/') {
        return vec![format!("{}/{program}", cwd.trim_end_matches('/'))];
    }
    let path = env
        .iter()
        .rev()
        .find(|(key, _)| key == "PATH")
        .map_or("", |(_, value)| value.as_str());
    path.split(':')
        .filter(|dir| dir.starts_with('/'))
        .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
        .collect()
}

/// Opens what a child needs to join the cgroup directory `dir`, and the
/// directory itself when it is cgroup v2 (the clone places the child there).
///
/// A v1 hierarchy is joined through `tasks`, not `cgroup.procs`: the child
/// writes `0`, which moves the calling thread only, and that is the whole
/// process, because a fork-style child is single-threaded. Moving one thread of
/// the caller skips the cgroup core's global thread-group lock (Linux 5.19),
/// whose write side otherwise waits for an RCU grace period. v2 has no such
/// path between domain cgroups (`cgroup.threads` refuses it); there the clone
/// does the placing, and `cgroup.procs` is the fallback for a child cloned
/// without `clone3`.
fn open_cgroup(dir: &Path) -> Result<(OwnedFd, Option<OwnedFd>), SpawnError> {
    let failed = |step, path: &Path| {
        let path = path.to_path_buf();
        move |source| SpawnError::Prepare { step, path, source }
    };
    let dir_fd = nix::fcntl::open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(failed("opening a cgroup directory", dir))?;
    let v2 = nix::sys::statfs::fstatfs(&dir_fd)
        .map_err(failed("reading a cgroup directory's filesystem", dir))?
        .filesystem_type()
        == nix::sys::statfs::CGROUP2_SUPER_MAGIC;
    let name = if v2 { "cgroup.procs" } else { "tasks" };
    let file = nix::fcntl::openat(
        &dir_fd,
        name,
        OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(failed("opening a cgroup's process list", &dir.join(name)))?;
    Ok((file, v2.then_some(dir_fd)))
}

#[cfg(test)]
mod candidate_tests {
    use super::program_candidates;

    #[test]
    fn programs_are_looked_up_like_execvp_inside_the_run() {
        let env = vec![("PATH".to_owned(), "/usr/local/bin:bin:/usr/bin/".to_owned())];
        assert_eq!(
            program_candidates("/bin/sh", "/workspace", &env),
            ["/bin/sh"]
        );
        assert_eq!(
            program_candidates("./build.sh", "/workspace/", &env),
            ["/workspace/./build.sh"]
        );
        assert_eq!(
            program_candidates("sh", "/workspace", &env),
            ["/usr/local/bin/sh", "/usr/bin/sh"]
        );
        assert!(program_candidates("sh", "/workspace", &[]).is_empty());
    }
}
