//! The plan's data types.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The file system of one isolated run, in the order it is made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountPlan {
    /// Size cap of the fresh tmpfs that becomes the root.
    pub root_size_bytes: u64,
    /// The steps, in order.
    pub steps: Vec<MountStep>,
    /// Where commands start: the workspace root inside.
    pub workdir: String,
    /// The hostname inside (the run id).
    pub hostname: String,
}

/// One step of the plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountStep {
    /// The absolute, normalized path inside the new root.
    pub target: String,
    /// What is done there.
    pub action: MountAction,
    /// Why: which part of the contract or the base system it comes from.
    pub reason: Reason,
}

/// What a step does at its target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum MountAction {
    /// Bind a host directory or file (recursively for directories).
    Bind {
        /// The host path.
        source: PathBuf,
        /// Read-only unless false.
        read_only: bool,
    },
    /// Stack a read-only layer (a layered checkout's base tree, a service's
    /// template) under the run's own with overlayfs
    /// (no redirects, no metadata-only copy-ups:
    /// `redirect_dir=nofollow,metacopy=off`).
    Overlay {
        /// The read-only base tree.
        lower: PathBuf,
        /// The run's changes.
        upper: PathBuf,
        /// overlayfs's work directory.
        work: PathBuf,
    },
    /// Bind the target onto itself, so it can get access flags of its own.
    Rebind {
        /// Read-only unless false.
        read_only: bool,
    },
    /// Make the mount at the target read-only (its own mount point only).
    RemountReadOnly,
    /// A fresh tmpfs.
    Tmpfs {
        /// Its size cap.
        size_bytes: u64,
        /// The mode of its root directory.
        mode: u32,
    },
    /// A fresh procfs for the run's pid namespace.
    Proc,
    /// A fresh sysfs (read-only) for the run's network namespace: it shows the run's
    /// own network devices and no host cgroup tree, where a bind of the host's `/sys`
    /// would show both.
    Sysfs,
    /// A fresh devpts instance (for a PTY).
    Devpts,
    /// Bind a host device node (the one kind of step without `nodev`).
    Device {
        /// The host device, e.g. `/dev/null`.
        source: PathBuf,
    },
    /// Hide the target: an empty read-only directory, or `/dev/null` over a file.
    Mask {
        /// Whether the target is a file.
        file: bool,
    },
    /// Create a symbolic link.
    Symlink {
        /// What it points to.
        to: String,
    },
    /// Create a file with generated contents (e.g. `/etc/passwd`).
    File {
        /// The contents.
        contents: String,
        /// The file mode.
        mode: u32,
    },
}

/// Where a step comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The host's system directories (read-only).
    System,
    /// The minimal `/etc`.
    Etc,
    /// The source repository's object store, shared read-only.
    SourceObjects,
    /// The workspace root.
    Workspace,
    /// `filesystem.writable`.
    Writable,
    /// `filesystem.read_only`.
    ReadOnly,
    /// `filesystem.excluded` (and the protected defaults).
    Excluded,
    /// `filesystem.host_mounts`.
    HostMount,
    /// The private `/tmp`.
    Tmp,
    /// A service's template (`environment.services[].template`), under the
    /// run's own layer.
    ServiceTemplate,
    /// The home directory.
    Home,
    /// The minimal `/dev`.
    Dev,
    /// `/proc` and its read-only parts.
    Proc,
    /// A fresh `/sys`, read-only, with firmware tables hidden.
    Sys,
}

impl MountPlan {
    /// The steps with a given reason, in order.
    pub fn steps_for(&self, reason: Reason) -> impl Iterator<Item = &MountStep> {
        self.steps.iter().filter(move |step| step.reason == reason)
    }

    /// Every target the plan mounts something at, once, with whether the last
    /// step there leaves it read-only: what a probe reads back from the run's
    /// mount table (a target must be a mount point; one left read-only must be
    /// mounted `ro`).
    pub fn mount_points(&self) -> Vec<MountPoint> {
        let mut points: Vec<MountPoint> = Vec::new();
        for step in &self.steps {
            let read_only = match &step.action {
                MountAction::Bind { read_only, .. } | MountAction::Rebind { read_only } => {
                    *read_only
                }
                MountAction::Mask { .. } | MountAction::RemountReadOnly | MountAction::Sysfs => {
                    true
                }
                MountAction::Overlay { .. }
                | MountAction::Tmpfs { .. }
                | MountAction::Proc
                | MountAction::Devpts
                | MountAction::Device { .. } => false,
                MountAction::Symlink { .. } | MountAction::File { .. } => continue,
            };
            // A part of the kernel's /proc or /sys that this kernel does not
            // have is not there to be covered.
            let kernel_part = matches!(step.reason, Reason::Proc | Reason::Sys)
                && !matches!(step.action, MountAction::Proc | MountAction::Sysfs);
            let masked = matches!(step.action, MountAction::Mask { .. });
            match points.iter_mut().find(|p| p.target == step.target) {
                Some(point) => {
                    point.read_only = read_only;
                    point.masked = masked;
                }
                None => points.push(MountPoint {
                    target: step.target.clone(),
                    read_only,
                    kernel_part,
                    masked,
                }),
            }
        }
        points
    }
}

impl MountPoint {
    /// Whether it lies in the run's own `/proc` or `/sys` (kernel file
    /// systems, which another user namespace's root may not look into).
    pub fn on_kernel_fs(&self) -> bool {
        ["/proc", "/sys"].iter().any(|fs| {
            self.target
                .strip_prefix(fs)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
    }
}

/// A target the plan mounts something at ([`MountPlan::mount_points`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountPoint {
    /// The absolute path inside.
    pub target: String,
    /// Whether the last step there leaves it read-only.
    pub read_only: bool,
    /// A part of the kernel's `/proc` or `/sys` (a kernel may not have it; then
    /// there is nothing to mount over).
    pub kernel_part: bool,
    /// Whether the last step there hides it (an excluded path, a part of the
    /// kernel's `/proc`): it shows nothing inside.
    #[serde(default)]
    pub masked: bool,
}
