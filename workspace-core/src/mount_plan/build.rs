//! Building a [`MountPlan`] from the contract, the source record and the host layout.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::types::{MountAction, MountPlan, MountStep, Reason};
use crate::RunId;
use crate::boundary::{IdentityPlan, SourceRecord, TemplateLayer};
use crate::contract::{Contract, HomeDir, MountMode, Problems};

/// The size of the fresh root: it holds only mount points and generated `/etc` files.
const ROOT_SIZE: u64 = 16 << 20;
/// The private `/tmp` when the contract sets no `tmp` limit.
const DEFAULT_TMP_SIZE: u64 = 1 << 30;
/// The home directory's tmpfs.
const HOME_SIZE: u64 = 256 << 20;
/// `/dev` holds device nodes bound from the host and a few symlinks.
const DEV_SIZE: u64 = 64 << 10;
/// The home directory inside.
const HOME: &str = crate::boundary::RUN_HOME;
/// Device nodes bound from the host into `/dev`.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];
/// Parts of `/proc` made read-only (kernel tunables, triggers, hardware).
const PROC_READ_ONLY: [&str; 5] = [
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
];
/// Files of `/proc` hidden (kernel memory and keys).
const PROC_MASKED: [&str; 4] = [
    "/proc/kcore",
    "/proc/keys",
    "/proc/timer_list",
    "/proc/sched_debug",
];

/// One entry of the host's base system.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SystemEntry {
    /// A directory bound read-only at the same path (e.g. `/usr`).
    Dir {
        /// The absolute path.
        path: PathBuf,
    },
    /// A symlink recreated as is (e.g. `/bin -> usr/bin` on merged-`/usr` hosts).
    Symlink {
        /// The absolute path of the link.
        path: PathBuf,
        /// Its target text.
        to: String,
    },
}

/// The base system a run gets, as probed by the backend: the host's own, or
/// an unpacked image's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLayout {
    /// The host directory the base system is read from: `/` for the host's
    /// own, an image's root filesystem for an image. Every path below is
    /// inside the run and found at the same path under `root`.
    #[serde(default = "host_root")]
    pub root: PathBuf,
    /// The base system: directories bound read-only and symlinks recreated.
    pub system: Vec<SystemEntry>,
    /// Files or directories under `/etc` passed through read-only at the same
    /// path (e.g. `/etc/resolv.conf`, `/etc/ssl/certs`).
    pub etc: Vec<PathBuf>,
}

impl Default for HostLayout {
    fn default() -> Self {
        Self {
            root: host_root(),
            system: Vec::new(),
            etc: Vec::new(),
        }
    }
}

impl HostLayout {
    /// Where `inside` (absolute) is found on the host.
    pub fn source_of(&self, inside: &Path) -> PathBuf {
        self.root.join(inside.strip_prefix("/").unwrap_or(inside))
    }
}

fn host_root() -> PathBuf {
    PathBuf::from("/")
}

/// Everything a plan is built from.
#[derive(Clone, Copy, Debug)]
pub struct PlanInputs<'a> {
    /// The validated contract.
    pub contract: &'a Contract,
    /// The run (its id is the hostname).
    pub run_id: &'a RunId,
    /// The provisioned checkout.
    pub source: &'a SourceRecord,
    /// The source repository's object store on the host, named by the checkout's
    /// alternates; bound read-only at the same path.
    pub source_objects: Option<&'a Path>,
    /// The identity the run executes as.
    pub identity: &'a IdentityPlan,
    /// What the host offers.
    pub host: &'a HostLayout,
    /// Workspace-relative paths the backend found matching `filesystem.excluded`,
    /// with whether each is a file (masked with `/dev/null`) or a directory.
    pub excluded: &'a [(String, bool)],
    /// Whether commands get a pseudo-terminal (adds `/dev/pts`).
    pub pty: bool,
    /// The services' templates, each an overlay of its own at its target.
    pub templates: &'a [TemplateLayer],
}

impl MountPlan {
    /// Builds the plan, or lists every problem with the field it comes from.
    pub fn build(inputs: &PlanInputs<'_>) -> Result<Self, Problems> {
        let mut builder = Builder::default();
        builder.system(inputs);
        builder.etc(inputs);
        // The scratch tmpfs mounts come before anything that may be mounted below
        // them (a source repository under /tmp, a host mount under the home).
        builder.scratch_dirs(inputs);
        builder.source_objects(inputs);
        builder.workspace(inputs);
        builder.host_mounts(inputs, false);
        builder.templates(inputs);
        builder.runtime_dirs(inputs);
        builder.problems.into_result()?;
        Ok(MountPlan {
            root_size_bytes: ROOT_SIZE,
            steps: builder.steps,
            workdir: inputs.contract.filesystem.root.clone(),
            hostname: inputs.run_id.to_string(),
        })
    }
}

#[derive(Default)]
struct Builder {
    steps: Vec<MountStep>,
    /// Targets that received a mount, file or link (rebinds and remounts reuse one).
    taken: HashSet<String>,
    problems: Problems,
}

impl Builder {
    /// Adds a step that creates something new at `target`; a second one at the same
    /// target is a problem reported at `field`.
    fn add(&mut self, field: &str, target: String, action: MountAction, reason: Reason) {
        if !is_clean_absolute(&target) {
            self.problems.push(
                field,
                format!("{target:?} is not a normalized absolute path"),
            );
            return;
        }
        let reuses_mount = matches!(
            action,
            MountAction::Rebind { .. } | MountAction::RemountReadOnly
        );
        if !reuses_mount && !self.taken.insert(target.clone()) {
            self.problems
                .push(field, format!("{target:?} would be mounted twice"));
            return;
        }
        self.steps.push(MountStep {
            target,
            action,
            reason,
        });
    }

    fn system(&mut self, inputs: &PlanInputs<'_>) {
        for entry in &inputs.host.system {
            match entry {
                SystemEntry::Dir { path } => self.add(
                    "host.system",
                    display(path),
                    MountAction::Bind {
                        source: inputs.host.source_of(path),
                        read_only: true,
                    },
                    Reason::System,
                ),
                SystemEntry::Symlink { path, to } => self.add(
                    "host.system",
                    display(path),
                    MountAction::Symlink { to: to.clone() },
                    Reason::System,
                ),
            }
        }
    }

    fn etc(&mut self, inputs: &PlanInputs<'_>) {
        let identity = inputs.identity;
        let (user, home) = if identity.uid == 0 {
            ("root", "/root")
        } else {
            ("agent", HOME)
        };
        let passwd = format!(
            "{user}:x:{uid}:{gid}:{user}:{home}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
            uid = identity.uid,
            gid = identity.gid,
        );
        let group = format!("{user}:x:{gid}:\nnogroup:x:65534:\n", gid = identity.gid);
        let hostname = inputs.run_id.to_string();
        let hosts = format!("127.0.0.1 localhost {hostname}\n::1 localhost\n");
        for (name, contents) in [
            ("passwd", passwd),
            ("group", group),
            ("hostname", format!("{hostname}\n")),
            ("hosts", hosts),
        ] {
            self.add(
                "etc",
                format!("/etc/{name}"),
                MountAction::File {
                    contents,
                    mode: 0o644,
                },
                Reason::Etc,
            );
        }
        for path in &inputs.host.etc {
            if !path.starts_with("/etc") {
                self.problems
                    .push("host.etc", format!("{} is not under /etc", path.display()));
                continue;
            }
            self.add(
                "host.etc",
                display(path),
                MountAction::Bind {
                    source: inputs.host.source_of(path),
                    read_only: true,
                },
                Reason::Etc,
            );
        }
    }

    /// The source's object store, which the checkout's git reads its history
    /// from. Not when the checkout holds an excluded path: every committed file
    /// is in that store, so it would show what the exclusion hides (git in the
    /// run then has no history; the exclusion wins).
    fn source_objects(&mut self, inputs: &PlanInputs<'_>) {
        // The history holds every version of an excluded path, including
        // those no longer in the checkout (or moved out of its place): a
        // contract that excludes anything beyond the protected `.env` files
        // (which every run masks, and whose history is left readable unless
        // one is in the checkout) gets no history at all.
        let declared = inputs
            .contract
            .filesystem
            .excluded
            .iter()
            .any(|pattern| !super::PROTECTED_EXCLUSIONS.contains(&pattern.as_str()));
        if !inputs.excluded.is_empty() || declared {
            return;
        }
        if let Some(objects) = inputs.source_objects {
            self.add(
                "source.repo",
                display(objects),
                MountAction::Bind {
                    source: objects.to_path_buf(),
                    read_only: true,
                },
                Reason::SourceObjects,
            );
        }
    }

    fn workspace(&mut self, inputs: &PlanInputs<'_>) {
        let fs = &inputs.contract.filesystem;
        let root = fs.root.clone();
        let action = match &inputs.source.layers {
            Some(layers) => MountAction::Overlay {
                lower: layers.lower.clone(),
                upper: layers.upper.clone(),
                work: layers.work.clone(),
            },
            None => MountAction::Bind {
                source: inputs.source.workspace.clone(),
                read_only: false,
            },
        };
        self.add("filesystem.root", root.clone(), action, Reason::Workspace);
        // Host mounts inside the workspace come before the root may turn
        // read-only (their mount points are made in the checkout) and before the
        // rebinds, which carry them along.
        self.host_mounts(inputs, true);
        let whole = fs.writable.iter().any(|w| w == "." || w == "./");
        if !whole {
            // Each writable path becomes a mount of its own, then the root mount
            // alone turns read-only.
            for (i, path) in fs.writable.iter().enumerate() {
                self.add(
                    &format!("filesystem.writable[{i}]"),
                    under(&root, path),
                    MountAction::Rebind { read_only: false },
                    Reason::Writable,
                );
            }
            self.add(
                "filesystem.root",
                root.clone(),
                MountAction::RemountReadOnly,
                Reason::Workspace,
            );
        }
        for (i, path) in fs.read_only.iter().enumerate() {
            self.add(
                &format!("filesystem.read_only[{i}]"),
                under(&root, path),
                MountAction::Rebind { read_only: true },
                Reason::ReadOnly,
            );
        }
        for (path, file) in inputs.excluded {
            self.add(
                "filesystem.excluded",
                under(&root, path),
                MountAction::Mask { file: *file },
                Reason::Excluded,
            );
        }
    }

    /// The host mounts inside the workspace root, or the others.
    fn host_mounts(&mut self, inputs: &PlanInputs<'_>, in_workspace: bool) {
        let fs = &inputs.contract.filesystem;
        for (i, mount) in fs.host_mounts.iter().enumerate() {
            let inside = fs
                .host_mounts_in_workspace()
                .any(|(other, _)| std::ptr::eq(other, mount));
            if inside != in_workspace {
                continue;
            }
            self.add(
                &format!("filesystem.host_mounts[{i}].target"),
                mount.target.clone(),
                MountAction::Bind {
                    source: PathBuf::from(&mount.host),
                    read_only: mount.mode == MountMode::ReadOnly,
                },
                Reason::HostMount,
            );
        }
    }

    fn scratch_dirs(&mut self, inputs: &PlanInputs<'_>) {
        let limits = &inputs.contract.environment.limits;
        let tmp = limits.tmp.map_or(DEFAULT_TMP_SIZE, |size| size.bytes());
        self.add(
            "environment.limits.tmp",
            "/tmp".into(),
            MountAction::Tmpfs {
                size_bytes: tmp,
                mode: 0o1777,
            },
            Reason::Tmp,
        );
        if inputs.contract.filesystem.home == HomeDir::Empty && inputs.identity.uid != 0 {
            self.add(
                "filesystem.home",
                HOME.into(),
                MountAction::Tmpfs {
                    size_bytes: HOME_SIZE,
                    mode: 0o700,
                },
                Reason::Home,
            );
        }
    }

    fn templates(&mut self, inputs: &PlanInputs<'_>) {
        let services = &inputs.contract.environment.services;
        for layer in inputs.templates {
            let index = services.iter().position(|s| s.name == layer.service);
            self.add(
                &format!(
                    "environment.services[{}].template.path",
                    index.map_or_else(|| layer.service.clone(), |i| i.to_string())
                ),
                layer.target.clone(),
                MountAction::Overlay {
                    lower: layer.lower.clone(),
                    upper: layer.upper.clone(),
                    work: layer.work.clone(),
                },
                Reason::ServiceTemplate,
            );
        }
    }

    fn runtime_dirs(&mut self, inputs: &PlanInputs<'_>) {
        let tmp = inputs
            .contract
            .environment
            .limits
            .tmp
            .map_or(DEFAULT_TMP_SIZE, |size| size.bytes());
        self.add(
            "dev",
            "/dev".into(),
            MountAction::Tmpfs {
                size_bytes: DEV_SIZE,
                mode: 0o755,
            },
            Reason::Dev,
        );
        for device in DEVICES {
            self.add(
                "dev",
                format!("/dev/{device}"),
                MountAction::Device {
                    source: PathBuf::from(format!("/dev/{device}")),
                },
                Reason::Dev,
            );
        }
        for (link, to) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            self.add(
                "dev",
                format!("/dev/{link}"),
                MountAction::Symlink { to: to.into() },
                Reason::Dev,
            );
        }
        self.add(
            "dev",
            "/dev/shm".into(),
            MountAction::Tmpfs {
                size_bytes: tmp.min(DEFAULT_TMP_SIZE),
                mode: 0o1777,
            },
            Reason::Dev,
        );
        if inputs.pty {
            self.add("dev", "/dev/pts".into(), MountAction::Devpts, Reason::Dev);
            self.add(
                "dev",
                "/dev/ptmx".into(),
                MountAction::Symlink {
                    to: "pts/ptmx".into(),
                },
                Reason::Dev,
            );
        }
        self.add("proc", "/proc".into(), MountAction::Proc, Reason::Proc);
        for path in PROC_READ_ONLY {
            self.add(
                "proc",
                path.into(),
                MountAction::Rebind { read_only: true },
                Reason::Proc,
            );
        }
        for path in PROC_MASKED {
            self.add(
                "proc",
                path.into(),
                MountAction::Mask { file: true },
                Reason::Proc,
            );
        }
        self.add("sys", "/sys".into(), MountAction::Sysfs, Reason::Sys);
        self.add(
            "sys",
            "/sys/firmware".into(),
            MountAction::Mask { file: false },
            Reason::Sys,
        );
    }
}

/// `root/path` for a validated workspace-relative path (`"."` is the root).
fn under(root: &str, path: &str) -> String {
    let path = path.trim_end_matches('/');
    if path == "." || path.is_empty() {
        root.to_owned()
    } else {
        format!("{}/{path}", root.trim_end_matches('/'))
    }
}

fn display(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Absolute, no empty, `.` or `..` components, no NUL.
fn is_clean_absolute(path: &str) -> bool {
    path.starts_with('/')
        && !path.contains('\0')
        && (path == "/"
            || path
                .split('/')
                .skip(1)
                .all(|c| !c.is_empty() && c != "." && c != ".."))
}
