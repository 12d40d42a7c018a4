//! An OCI bundle from the core mount plan: `config.json` (built with
//! `oci-spec` types) and its root directory.
//!
//! The plan is the one every backend applies ([`MountPlan`]); here each step
//! becomes what an OCI runtime does for it:
//!
//! | plan step | OCI |
//! |---|---|
//! | `Bind`, `Device` | a `bind` mount (`rbind`, `ro` or `rw`, `nosuid`; `nodev` but for devices); the six devices every runtime makes itself are left to it |
//! | `Rebind` at a path under a bind | a `bind` of the same host path below that bind's source |
//! | read-only `Rebind` in a kernel file system (`/proc/sys`) | `linux.readonlyPaths` |
//! | `Tmpfs`, `Proc`, `Sysfs`, `Devpts` | a fresh mount of that type |
//! | `Mask` | `linux.maskedPaths` in `/proc`; elsewhere, a directory masked by an empty read-only tmpfs |
//! | `RemountReadOnly` | `linux.readonlyPaths` |
//! | `Symlink`, `File` | made in the root directory before the container starts |
//! | `Overlay` of a service's template | a `bind` of its upper directory, which holds the run's own copy of the template (the `template` module) |
//! | other `Overlay` | refused: this runtime has no idmapped mounts, which a layered checkout needs |
//!
//! The root directory is read-only (`root.readonly`). The container gets its own
//! user, mount, pid, network, UTS, IPC and cgroup namespaces; its user namespace
//! maps the run's uid and gid to their host ids and its root to an unprivileged
//! host id (the runtime needs a root inside to set the container up); the
//! process has no capability, `no_new_privs`, the resource limits and a seccomp
//! filter ([`crate::seccomp`]).

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder, LinuxIdMappingBuilder,
    LinuxMemoryBuilder, LinuxNamespaceBuilder, LinuxNamespaceType, LinuxPidsBuilder,
    LinuxResourcesBuilder, Mount, MountBuilder, PosixRlimitBuilder, PosixRlimitType,
    ProcessBuilder, RootBuilder, Spec, SpecBuilder, UserBuilder,
};
use workspace_core::boundary::ResolvedLimits;
use workspace_core::mount_plan::{MountAction, MountPlan, Reason};

use crate::error::ContainerError;

/// The name of the bundle's root directory.
pub const ROOTFS_DIR: &str = "rootfs";
/// The name of the bundle's configuration.
pub const CONFIG_FILE: &str = "config.json";
/// The device nodes every OCI runtime gives a container itself.
const RUNTIME_DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];
/// The cpu period the quota is set against, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// The ids of a container: the run's ids inside and the host ids each maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdMaps {
    /// The run's uid inside.
    pub uid: u32,
    /// The run's gid inside.
    pub gid: u32,
    /// The host uid the run's uid maps to.
    pub host_uid: u32,
    /// The host gid the run's gid maps to.
    pub host_gid: u32,
    /// The unprivileged host id the container's root (uid and gid 0) maps to.
    pub host_root: u32,
}

/// Everything a container's configuration is built from.
#[derive(Clone, Copy, Debug)]
pub struct BundleInputs<'a> {
    /// The applied plan.
    pub plan: &'a MountPlan,
    /// The container's first process.
    pub argv: &'a [String],
    /// Its complete environment.
    pub env: &'a [(String, String)],
    /// Its ids.
    pub ids: IdMaps,
    /// The limits of the whole container.
    pub limits: &'a ResolvedLimits,
    /// Its cgroup, relative to each hierarchy's root (e.g. `agent-workspace/run-1`).
    pub cgroups_path: &'a str,
}

/// The container's configuration, from `inputs`.
pub fn spec(inputs: &BundleInputs<'_>) -> Result<Spec, ContainerError> {
    let plan = inputs.plan;
    let mut mounts = Vec::new();
    let mut masked = Vec::new();
    let mut read_only_paths = Vec::new();
    for (index, step) in plan.steps.iter().enumerate() {
        let target = step.target.as_str();
        let unsupported = |what: &str| ContainerError::Unsupported {
            setting: format!("{what} at {target} (mount plan step {index})"),
        };
        match &step.action {
            MountAction::Bind { source, read_only } => {
                mounts.push(bind(target, source, *read_only, false)?);
            }
            // The runtime makes these itself (bound from the host's in a user
            // namespace); a second bind over them would break its own.
            MountAction::Device { .. } if RUNTIME_DEVICES.contains(&target) => {}
            MountAction::Device { source } => mounts.push(bind(target, source, false, true)?),
            MountAction::Rebind { read_only } => match host_path_of(plan, index) {
                Some(source) => mounts.push(bind(target, &source, *read_only, false)?),
                // A part of a fresh kernel file system (`/proc/sys`): the
                // runtime remounts it read-only in place.
                None if *read_only => read_only_paths.push(target.to_owned()),
                None => return Err(unsupported("a writable rebind outside every bind")),
            },
            MountAction::Tmpfs { size_bytes, mode } => mounts.push(fresh(
                target,
                "tmpfs",
                &[
                    "nosuid",
                    "nodev",
                    &format!("size={size_bytes}"),
                    &format!("mode={mode:o}"),
                ],
            )?),
            MountAction::Proc => {
                mounts.push(fresh(target, "proc", &["nosuid", "nodev", "noexec"])?)
            }
            MountAction::Sysfs => mounts.push(fresh(
                target,
                "sysfs",
                &["nosuid", "nodev", "noexec", "ro"],
            )?),
            MountAction::Devpts => mounts.push(fresh(
                target,
                "devpts",
                &[
                    "nosuid",
                    "noexec",
                    "newinstance",
                    "ptmxmode=0666",
                    "mode=0620",
                ],
            )?),
            // A directory outside `/proc` (where the runtime allows no mount):
            // an empty read-only tmpfs with every flag, rather than the
            // runtime's own mask, which lacks `nosuid` and `nodev`.
            MountAction::Mask { file: false } if !target.starts_with("/proc/") => {
                mounts.push(fresh(
                    target,
                    "tmpfs",
                    &["ro", "nosuid", "nodev", "noexec", "size=4k", "mode=0555"],
                )?)
            }
            MountAction::Mask { .. } => masked.push(target.to_owned()),
            MountAction::RemountReadOnly => read_only_paths.push(target.to_owned()),
            // Made in the root directory by `prepare_rootfs`.
            MountAction::Symlink { .. } | MountAction::File { .. } => {}
            // The run's copy of the template, made before the bundle.
            MountAction::Overlay { upper, .. } if step.reason == Reason::ServiceTemplate => {
                mounts.push(bind(target, upper, false, false)?);
            }
            MountAction::Overlay { .. } => {
                return Err(unsupported(
                    "an overlay (a layered checkout: it needs an idmapped lower layer)",
                ));
            }
        }
    }
    let ids = inputs.ids;
    let map = |container: u32, host: u32| {
        LinuxIdMappingBuilder::default()
            .container_id(container)
            .host_id(host)
            .size(1u32)
            .build()
    };
    let uid_mappings = vec![map(0, ids.host_root)?, map(ids.uid, ids.host_uid)?];
    let gid_mappings = vec![map(0, ids.host_root)?, map(ids.gid, ids.host_gid)?];
    let namespaces = [
        LinuxNamespaceType::User,
        LinuxNamespaceType::Mount,
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Network,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Cgroup,
    ]
    .into_iter()
    .map(|typ| LinuxNamespaceBuilder::default().typ(typ).build())
    .collect::<Result<Vec<_>, _>>()?;
    let linux = LinuxBuilder::default()
        .namespaces(namespaces)
        .uid_mappings(uid_mappings)
        .gid_mappings(gid_mappings)
        .cgroups_path(PathBuf::from(format!("/{}", inputs.cgroups_path)))
        .resources(resources(inputs.limits)?)
        .masked_paths(masked)
        .readonly_paths(read_only_paths)
        .seccomp(crate::seccomp::filter()?)
        .build()?;
    let none: HashSet<Capability> = HashSet::new();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(none.clone())
        .effective(none.clone())
        .inheritable(none.clone())
        .permitted(none.clone())
        .ambient(none)
        .build()?;
    let process = ProcessBuilder::default()
        .terminal(false)
        .user(
            UserBuilder::default()
                .uid(ids.uid)
                .gid(ids.gid)
                .additional_gids(Vec::<u32>::new())
                .build()?,
        )
        .args(inputs.argv.to_vec())
        .env(
            inputs
                .env
                .iter()
                .map(|(name, value)| format!("{name}={value}"))
                .collect::<Vec<_>>(),
        )
        .cwd(PathBuf::from(&plan.workdir))
        .capabilities(capabilities)
        .no_new_privileges(true)
        .rlimits(rlimits(inputs.limits)?)
        .build()?;
    Ok(SpecBuilder::default()
        .version("1.0.2")
        .root(
            RootBuilder::default()
                .path(PathBuf::from(ROOTFS_DIR))
                .readonly(true)
                .build()?,
        )
        .hostname(plan.hostname.clone())
        .mounts(mounts)
        .process(process)
        .linux(linux)
        .build()?)
}

/// Writes the bundle in `dir` (which must exist and be empty): its root
/// directory with the plan's symbolic links and generated files, and
/// `config.json`. The root's directories belong to `host_root`, the host id of
/// the container's root, which makes the mount points in them as it sets the
/// container up (the root is read-only once it is set up).
pub fn write(
    dir: &Path,
    plan: &MountPlan,
    spec: &Spec,
    host_root: u32,
) -> Result<(), ContainerError> {
    let rootfs = dir.join(ROOTFS_DIR);
    std::fs::create_dir(&rootfs).map_err(ContainerError::io("creating the root", &rootfs))?;
    std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o755))
        .map_err(ContainerError::io("opening the root", &rootfs))?;
    let made_dirs = prepare_rootfs(&rootfs, plan)?;
    for dir in std::iter::once(rootfs.clone()).chain(made_dirs) {
        std::os::unix::fs::lchown(&dir, Some(host_root), Some(host_root)).map_err(
            ContainerError::io("handing a directory of the root over", &dir),
        )?;
    }
    let config = dir.join(CONFIG_FILE);
    spec.save(&config).map_err(|source| ContainerError::Spec {
        step: "writing config.json",
        source,
    })
}

/// The plan's symbolic links and files, made in `rootfs` (a new directory of
/// the runner's, nothing of the run's in it yet: no link on the way can lead
/// out); the directories made for them, in the order made. A link under a
/// fresh mount (`/dev/fd` on `/dev`'s tmpfs) is the runtime's to make there:
/// runc makes `/dev/fd`, `/dev/stdin`, `/dev/stdout` and `/dev/stderr`.
fn prepare_rootfs(rootfs: &Path, plan: &MountPlan) -> Result<Vec<PathBuf>, ContainerError> {
    let mut made = Vec::new();
    for (index, step) in plan.steps.iter().enumerate() {
        let under_a_mount = plan.steps[..index].iter().any(|earlier| {
            !matches!(
                earlier.action,
                MountAction::Symlink { .. } | MountAction::File { .. } | MountAction::Mask { .. }
            ) && Path::new(&step.target).starts_with(&earlier.target)
        });
        let at = rootfs.join(step.target.trim_start_matches('/'));
        match &step.action {
            MountAction::Symlink { to } if !under_a_mount => {
                make_parents(rootfs, &at, &mut made)?;
                std::os::unix::fs::symlink(to, &at).map_err(ContainerError::io(
                    "making a symbolic link of the root",
                    &at,
                ))?;
            }
            MountAction::File { contents, mode } if !under_a_mount => {
                make_parents(rootfs, &at, &mut made)?;
                std::fs::write(&at, contents)
                    .map_err(ContainerError::io("writing a file of the root", &at))?;
                std::fs::set_permissions(&at, std::fs::Permissions::from_mode(*mode))
                    .map_err(ContainerError::io("setting a file's mode", &at))?;
            }
            MountAction::Symlink { .. } if is_runtime_dev_link(&step.target) => {}
            MountAction::Symlink { .. } | MountAction::File { .. } => {
                return Err(ContainerError::Unsupported {
                    setting: format!(
                        "a file or link under a fresh mount at {} (mount plan step {index})",
                        step.target
                    ),
                });
            }
            _ => {}
        }
    }
    Ok(made)
}

/// The links runc makes in a fresh `/dev` itself.
fn is_runtime_dev_link(target: &str) -> bool {
    matches!(
        target,
        "/dev/fd" | "/dev/stdin" | "/dev/stdout" | "/dev/stderr"
    )
}

/// Makes the directories between `rootfs` and `at`'s parent, recording each.
fn make_parents(rootfs: &Path, at: &Path, made: &mut Vec<PathBuf>) -> Result<(), ContainerError> {
    let Some(parent) = at.parent() else {
        return Ok(());
    };
    let mut missing = Vec::new();
    let mut dir = parent;
    while dir != rootfs && !dir.exists() {
        missing.push(dir.to_path_buf());
        dir = dir.parent().unwrap_or(rootfs);
    }
    for dir in missing.into_iter().rev() {
        std::fs::create_dir(&dir)
            .map_err(ContainerError::io("creating a directory of the root", &dir))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(ContainerError::io("opening a directory of the root", &dir))?;
        made.push(dir);
    }
    Ok(())
}

/// The host path under the nearest earlier bind whose target contains step
/// `index`'s target (what a rebind binds onto itself).
fn host_path_of(plan: &MountPlan, index: usize) -> Option<PathBuf> {
    let target = Path::new(&plan.steps[index].target);
    plan.steps[..index].iter().rev().find_map(|step| {
        let MountAction::Bind { source, .. } = &step.action else {
            return None;
        };
        let below = target.strip_prefix(&step.target).ok()?;
        Some(source.join(below))
    })
}

fn bind(
    target: &str,
    source: &Path,
    read_only: bool,
    device: bool,
) -> Result<Mount, ContainerError> {
    let mut options = vec!["rbind", if read_only { "ro" } else { "rw" }, "nosuid"];
    if !device {
        options.push("nodev");
    }
    Ok(MountBuilder::default()
        .destination(PathBuf::from(target))
        .typ("bind")
        .source(source.to_path_buf())
        .options(options.into_iter().map(str::to_owned).collect::<Vec<_>>())
        .build()?)
}

fn fresh(target: &str, typ: &str, options: &[&str]) -> Result<Mount, ContainerError> {
    Ok(MountBuilder::default()
        .destination(PathBuf::from(target))
        .typ(typ)
        .source(PathBuf::from(typ))
        .options(options.iter().map(|o| (*o).to_owned()).collect::<Vec<_>>())
        .build()?)
}

fn resources(limits: &ResolvedLimits) -> Result<oci_spec::runtime::LinuxResources, ContainerError> {
    let mut resources = LinuxResourcesBuilder::default();
    if let Some(bytes) = limits.memory_bytes {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        resources = resources.memory(
            LinuxMemoryBuilder::default()
                .limit(bytes)
                // No swap beyond the limit.
                .swap(bytes)
                .build()?,
        );
    }
    if let Some(pids) = limits.pids {
        resources = resources.pids(LinuxPidsBuilder::default().limit(i64::from(pids)).build()?);
    }
    if let Some(millis) = limits.cpu_millis {
        let quota = i64::try_from(millis.saturating_mul(CPU_PERIOD_US) / 1000).unwrap_or(i64::MAX);
        resources = resources.cpu(
            LinuxCpuBuilder::default()
                .quota(quota)
                .period(CPU_PERIOD_US)
                .build()?,
        );
    }
    Ok(resources.build()?)
}

fn rlimits(limits: &ResolvedLimits) -> Result<Vec<oci_spec::runtime::PosixRlimit>, ContainerError> {
    let limit = |typ, value: u64| {
        PosixRlimitBuilder::default()
            .typ(typ)
            .hard(value)
            .soft(value)
            .build()
    };
    let mut all = vec![limit(PosixRlimitType::RlimitCore, 0)?];
    if let Some(files) = limits.open_files {
        all.push(limit(PosixRlimitType::RlimitNofile, u64::from(files))?);
    }
    if let Some(bytes) = limits.disk_bytes {
        all.push(limit(PosixRlimitType::RlimitFsize, bytes)?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;
    use workspace_core::mount_plan::{MountStep, Reason};

    fn step(target: &str, action: MountAction) -> MountStep {
        MountStep {
            target: target.into(),
            action,
            reason: Reason::System,
        }
    }

    #[test]
    fn each_plan_step_becomes_what_the_runtime_does_for_it() {
        let plan = MountPlan {
            root_size_bytes: 1 << 20,
            steps: vec![
                step(
                    "/usr",
                    MountAction::Bind {
                        source: "/usr".into(),
                        read_only: true,
                    },
                ),
                step(
                    "/workspace",
                    MountAction::Bind {
                        source: "/host/checkout".into(),
                        read_only: false,
                    },
                ),
                step("/workspace/docs", MountAction::Rebind { read_only: true }),
                step(
                    "/tmp",
                    MountAction::Tmpfs {
                        size_bytes: 4096,
                        mode: 0o1777,
                    },
                ),
                step(
                    "/dev/null",
                    MountAction::Device {
                        source: "/dev/null".into(),
                    },
                ),
                step("/proc", MountAction::Proc),
                step("/proc/sys", MountAction::Rebind { read_only: true }),
                step("/proc/kcore", MountAction::Mask { file: true }),
            ],
            workdir: "/workspace".into(),
            hostname: "run-1".into(),
        };
        let limits = ResolvedLimits {
            memory_bytes: Some(1 << 30),
            pids: Some(10),
            cpu_millis: Some(500),
            ..ResolvedLimits::default()
        };
        let spec = spec(&BundleInputs {
            plan: &plan,
            argv: &["/usr/bin/sleep".into(), "infinity".into()],
            env: &[("PATH".into(), "/usr/bin".into())],
            ids: IdMaps {
                uid: 1000,
                gid: 1000,
                host_uid: 101_000,
                host_gid: 101_000,
                host_root: 100_000,
            },
            limits: &limits,
            cgroups_path: "aw/run-1",
        })
        .unwrap();
        let mounts = spec.mounts().as_ref().unwrap();
        let at = |target: &str| {
            mounts
                .iter()
                .find(|m| m.destination() == Path::new(target))
                .unwrap_or_else(|| panic!("no mount at {target}"))
        };
        let options = |target: &str| at(target).options().clone().unwrap_or_default();
        assert_eq!(options("/usr"), ["rbind", "ro", "nosuid", "nodev"]);
        assert_eq!(options("/workspace"), ["rbind", "rw", "nosuid", "nodev"]);
        // A rebind binds the same host path again, read-only.
        assert_eq!(
            at("/workspace/docs").source().as_deref(),
            Some(Path::new("/host/checkout/docs"))
        );
        assert_eq!(options("/workspace/docs")[1], "ro");
        assert!(options("/tmp").contains(&"size=4096".to_owned()));
        assert!(options("/tmp").contains(&"mode=1777".to_owned()));
        // The runtime's own devices are left to it.
        assert!(
            mounts
                .iter()
                .all(|m| m.destination() != Path::new("/dev/null"))
        );
        let linux = spec.linux().as_ref().unwrap();
        assert_eq!(
            linux.masked_paths().as_deref(),
            Some(&["/proc/kcore".to_owned()][..])
        );
        assert_eq!(
            linux.readonly_paths().as_deref(),
            Some(&["/proc/sys".to_owned()][..])
        );
        assert_eq!(linux.uid_mappings().as_ref().map(Vec::len), Some(2));
        let resources = linux.resources().as_ref().unwrap();
        assert_eq!(resources.pids().as_ref().unwrap().limit(), 10);
        assert_eq!(resources.cpu().as_ref().unwrap().quota(), Some(50_000));
        let process = spec.process().as_ref().unwrap();
        assert_eq!(process.no_new_privileges(), Some(true));
        let caps = process.capabilities().as_ref().unwrap();
        assert!(caps.bounding().as_ref().unwrap().is_empty());
        assert!(caps.permitted().as_ref().unwrap().is_empty());
        assert_eq!(spec.root().as_ref().unwrap().readonly(), Some(true));
        assert_eq!(spec.hostname().as_deref(), Some("run-1"));
    }
}
