//! Sealing a run into a container: the checkout handed over to the run's host
//! ids, the mount plan built (the same core plan the namespace backend
//! applies), the bundle written, the container started with a small reaper as
//! its pid 1, and what every later process of the run starts from.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;

use serde::{Deserialize, Serialize};
use workspace_core::boundary::{PreviewEndpoint, RunContext, SealPlan};
use workspace_core::contract::ImageReference;
use workspace_core::mount_plan::{MountPlan, MountPoint, PlanInputs, probe_image};
use workspace_core::observation::Expected;

use super::ContainerOptions;
use super::cgroups::{CommandCgroup, ContainerCgroups};
use super::exec::ProcessTemplate;
use super::preview::{self, ForwarderConfig};
use crate::bundle::{self, BundleInputs, IdMaps};
use crate::error::ContainerError;
use crate::image::{ImageError, UnpackedImage};

/// The run's bundle directory, under its private directory.
pub(crate) const BUNDLE_DIR: &str = "container";
/// What a later runner needs to attach to the container, in the bundle.
const STATE_FILE: &str = "sealed.json";
/// The container's pid 1: a shell that reaps what the run's commands leave
/// behind (every orphan of the container's pid namespace is its child) and
/// ends on `SIGTERM`.
const INIT: [&str; 3] = [
    "/bin/sh",
    "-c",
    "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done",
];

/// A sealed container, as this process drives it.
#[derive(Debug)]
pub(crate) struct Live {
    /// The container's id (the run id).
    pub(crate) id: String,
    /// The bundle directory.
    pub(crate) bundle: PathBuf,
    /// Its cgroups.
    pub(crate) cgroups: ContainerCgroups,
    /// What its processes start from.
    pub(crate) template: ProcessTemplate,
    /// Where commands start (the workspace root inside).
    pub(crate) workdir: String,
    /// `environment.limits.wall_time` in milliseconds.
    pub(crate) wall_time_ms: Option<u64>,
    /// The number of the next cgroup of a process the runner gave no number
    /// (`bg-<n>`); a numbered command's is `cmd-<its number>`.
    pub(crate) next_background: AtomicU32,
    /// A command's cgroup being made ahead, by a thread of its own while
    /// the command before it runs (tens of `mkdir`s, one per hierarchy), with
    /// the command's number.
    pub(crate) made_ahead: std::sync::Mutex<Option<(u32, MakingAhead)>>,
}

/// The thread making a command's cgroup ahead.
pub(crate) type MakingAhead = std::thread::JoinHandle<Option<CommandCgroup>>;

impl Live {
    /// The cgroup of command `n`: the one made ahead for it, else made now.
    pub(crate) fn command_cgroup(&self, n: u32) -> Result<CommandCgroup, ContainerError> {
        match self.settle() {
            Some((made, Some(cgroup))) if made == n => Ok(cgroup),
            _ => self.cgroups.create_child(&command_cgroup_name(n)),
        }
    }

    /// Starts making command `n`'s cgroup ahead of it (best effort: a
    /// failure is met again, and reported, when the command starts).
    pub(crate) fn make_ahead(&self, n: u32) {
        let cgroups = self.cgroups.clone();
        let making = std::thread::Builder::new()
            .name("aw-cgroup-ahead".into())
            .spawn(move || cgroups.create_child(&command_cgroup_name(n)).ok());
        if let Ok(making) = making {
            let earlier = self
                .made_ahead
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .replace((n, making));
            if let Some((_, earlier)) = earlier {
                let _ = earlier.join();
            }
        }
    }

    /// Waits for the cgroup being made ahead, if one is: nothing makes a
    /// cgroup of the container after this (teardown removes them all).
    pub(crate) fn settle(&self) -> Option<(u32, Option<CommandCgroup>)> {
        let making = self
            .made_ahead
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        Some((making.0, making.1.join().ok().flatten()))
    }
}

/// The name of command `n`'s cgroup.
pub(crate) fn command_cgroup_name(n: u32) -> String {
    format!("cmd-{n}")
}

/// The prefix of the cgroups of processes the runner gave no number
/// (services, background commands), beside the commands' `cmd-N`.
const BACKGROUND_CGROUP_PREFIX: &str = "bg-";

/// The name of the `n`th cgroup of a process the runner gave no number.
pub(crate) fn background_cgroup_name(n: u32) -> String {
    format!("{BACKGROUND_CGROUP_PREFIX}{n}")
}

/// What a later runner reads back to attach.
#[derive(Debug, Serialize, Deserialize)]
struct SealedState {
    workdir: String,
    cgroups_path: String,
    /// The runtime program that made the container (later runners drive it
    /// with the same one).
    #[serde(default)]
    runtime: Option<PathBuf>,
    /// The image's `Env` the run's processes start with (a later runner
    /// builds the same environment without reading the image cache).
    #[serde(default)]
    image_env: Vec<String>,
}

/// What [`prepare`] made, for the probe and the evidence.
pub(crate) struct Prepared {
    pub(crate) live: Live,
    pub(crate) expected: Expected,
    pub(crate) mount_plan_sha256: String,
    pub(crate) handed_over: u64,
    /// The image the base system comes from, when the contract names one.
    pub(crate) image: Option<UnpackedImage>,
    /// The preview endpoints of `process.ports`, as the forwarder bound them.
    pub(crate) previews: Vec<PreviewEndpoint>,
}

/// The cgroup path of run `run_id` (relative to each hierarchy's root).
pub(crate) fn cgroups_path(options: &ContainerOptions, run: &RunContext) -> String {
    format!("{}/{}", options.cgroup_parent, run.run_id)
}

/// The host ids of the run: its uid and gid, and its root's.
fn id_maps(plan: &SealPlan, options: &ContainerOptions) -> Result<IdMaps, ContainerError> {
    let host = |id: u32| {
        options
            .host_id_base
            .checked_add(id)
            .ok_or(ContainerError::HostIdOverflow {
                base: options.host_id_base,
                id,
            })
    };
    Ok(IdMaps {
        uid: plan.identity.uid,
        gid: plan.identity.gid,
        host_uid: host(plan.identity.uid)?,
        host_gid: host(plan.identity.gid)?,
        host_root: options.host_id_base,
    })
}

/// Each read-write host mount whose directory is not host uid `host_uid`'s,
/// as its field (`filesystem.host_mounts[N]`) and why: the runtime has no
/// idmapped mounts, so the container could not write there (it would be
/// `nobody`'s inside). The contract check refuses these before anything of a
/// run is made ([`ContainerProcess::refusals`](super::ContainerProcess));
/// the seal again, should the directory have changed owner since.
///
/// # Ambient authority
/// Looks at the host directories the contract names.
pub(crate) fn unwritable_host_mounts(
    mounts: &[workspace_core::contract::HostMount],
    host_uid: u32,
) -> Vec<(String, String)> {
    use std::os::unix::fs::MetadataExt;
    let mut refused = Vec::new();
    for (i, mount) in mounts.iter().enumerate() {
        if mount.mode != workspace_core::contract::MountMode::DangerReadWrite {
            continue;
        }
        let owner = std::fs::metadata(&mount.host).map(|meta| meta.uid()).ok();
        if let Some(owner) = owner.filter(|owner| *owner != host_uid) {
            refused.push((
                format!("filesystem.host_mounts[{i}]"),
                format!(
                    "{}, a read-write host directory of uid {owner}, which a container (host uid {host_uid}) cannot write without an idmapped mount; give it to uid {host_uid} or use the namespace backend",
                    mount.host
                ),
            ));
        }
    }
    refused
}

/// The first of [`unwritable_host_mounts`], as an error.
fn writable_host_mounts_are_the_runs(
    mounts: &[workspace_core::contract::HostMount],
    host_uid: u32,
) -> Result<(), ContainerError> {
    match unwritable_host_mounts(mounts, host_uid).into_iter().next() {
        Some((field, why)) => Err(ContainerError::Unsupported {
            setting: format!("{field} ({why})"),
        }),
        None => Ok(()),
    }
}

/// Builds the bundle and starts the container (blocking). Nothing is left
/// when it fails after the container started: the caller tears it down.
pub(crate) fn prepare(
    run: &RunContext,
    plan: &SealPlan,
    options: &ContainerOptions,
) -> Result<Prepared, ContainerError> {
    if plan.source.layers.is_some() {
        return Err(ContainerError::Unsupported {
            setting: "a layered checkout (source.materialization): the runtime has no idmapped mounts; use a standalone checkout".into(),
        });
    }
    let ids = id_maps(plan, options)?;
    writable_host_mounts_are_the_runs(&run.contract.filesystem.host_mounts, ids.host_uid)?;
    // The image first: one that fails its digests fails the seal before the
    // checkout is touched or anything runs.
    let image = run_image(run, options)?;
    let host = match &image {
        Some(image) => probe_image(&image.rootfs).map_err(|e| ImageError::Io {
            step: e.step,
            path: e.path,
            source: e.source,
        })?,
        None => options.host.clone(),
    };
    let workspace = plan.source.workspace.as_path();
    let handed_over = hand_over(workspace, ids.host_uid, ids.host_gid)?;
    // Each service's template: the run's own copy, the run's (see `template`).
    for layer in &plan.templates {
        crate::template::materialize(layer, ids.host_uid, ids.host_gid)?;
    }
    // What the run's first seal excluded stays excluded wherever the run
    // moved it in its checkout.
    let excluded = workspace_core::mount_plan::excluded_paths_kept(
        &run.run_dir,
        workspace,
        &run.contract.filesystem.excluded,
    )?;
    // What the Source boundary recorded, never the checkout's own `alternates`
    // (the agent may have pointed it at any host directory).
    let source_objects = plan.source.objects.clone().filter(|dir| dir.is_dir());
    let mount_plan = MountPlan::build(&PlanInputs {
        contract: &run.contract,
        run_id: &run.run_id,
        source: &plan.source,
        source_objects: source_objects.as_deref(),
        identity: &plan.identity,
        host: &host,
        excluded: &excluded,
        pty: false,
        templates: &plan.templates,
    })
    .map_err(|problems| ContainerError::Plan { problems })?;
    let image_env = image
        .as_ref()
        .map(|image| image.record.env.clone())
        .unwrap_or_default();
    let env = run_env(plan, &image_env);
    let cgroups_path = cgroups_path(options, run);
    let bundle_dir = run.run_dir.join(BUNDLE_DIR);
    std::fs::create_dir_all(&bundle_dir).map_err(ContainerError::io(
        "making the bundle directory",
        &bundle_dir,
    ))?;
    reachable_by(&bundle_dir, ids.host_root)?;
    let init: Vec<String> = INIT.iter().map(|s| (*s).to_owned()).collect();
    // The container's pid 1 gets the base variables only: no credential.
    let init_env: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| matches!(k.as_str(), "PATH" | "HOME" | "LANG"))
        .cloned()
        .collect();
    let mut spec = bundle::spec(&BundleInputs {
        plan: &mount_plan,
        argv: &init,
        env: &init_env,
        ids,
        limits: &plan.environment.limits,
        cgroups_path: &cgroups_path,
    })?;
    init_as_root(&mut spec)?;
    bundle::write(&bundle_dir, &mount_plan, &spec, ids.host_root)?;
    seal_root(&bundle_dir)?;
    let state = SealedState {
        workdir: mount_plan.workdir.clone(),
        cgroups_path: cgroups_path.clone(),
        runtime: Some(options.runtime.program().to_path_buf()),
        image_env,
    };
    write_state(&bundle_dir, &state)?;
    // The container's pid 1 keeps the capacity ticket's lock open
    // (`SealPlan::held_open`) for as long as the container lives.
    let hold_open = plan
        .held_open
        .iter()
        .map(|held| held.try_clone())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ContainerError::Pipe {
            step: "duplicating a descriptor the container holds open",
            source,
        })?;
    options
        .runtime
        .run_detached(run.run_id.as_str(), &bundle_dir, hold_open)?;
    let cgroups = ContainerCgroups::of(&cgroups_path);
    if cgroups.is_empty() {
        return Err(ContainerError::Lost {
            what: format!("the runtime made no cgroup at {cgroups_path}"),
        });
    }
    let previews = publish_ports(
        run,
        options,
        &cgroups,
        &bundle_dir,
        (ids.host_uid, ids.host_gid),
    )?;
    let mut env_names: BTreeSet<String> = env.iter().map(|(k, _)| k.clone()).collect();
    env_names.extend(plan.identity.credentials.iter().map(|c| c.name.clone()));
    let mount_points: Vec<MountPoint> = mount_plan.mount_points();
    let expected = Expected {
        uid: plan.identity.uid,
        gid: plan.identity.gid,
        hostname: run.run_id.to_string(),
        env_names,
        toolchain: run.contract.environment.runtime.toolchain.clone(),
        mount_points,
        host_ids: Some((ids.host_uid, ids.host_gid)),
        root_host_id: Some(ids.host_root),
    };
    let mount_plan_sha256 =
        workspace_core::digest::sha256_hex(&serde_json::to_vec(&mount_plan).unwrap_or_default());
    let template = ProcessTemplate {
        container: run.run_id.to_string(),
        env,
        uid: plan.identity.uid,
        gid: plan.identity.gid,
        open_files: plan.environment.limits.open_files,
        file_size_bytes: plan.environment.limits.disk_bytes,
    };
    Ok(Prepared {
        live: Live {
            id: run.run_id.to_string(),
            bundle: bundle_dir,
            cgroups,
            template,
            workdir: mount_plan.workdir,
            wall_time_ms: plan.environment.limits.wall_time_ms,
            next_background: AtomicU32::new(1),
            made_ahead: std::sync::Mutex::new(None),
        },
        expected,
        mount_plan_sha256,
        handed_over,
        image,
        previews,
    })
}

/// The run's `process.ports` published by the forwarder (none without ports).
fn publish_ports(
    run: &RunContext,
    options: &ContainerOptions,
    cgroups: &ContainerCgroups,
    bundle: &Path,
    (uid, gid): (u32, u32),
) -> Result<Vec<PreviewEndpoint>, ContainerError> {
    let ports = &run.contract.process.ports;
    if ports.is_empty() {
        return Ok(Vec::new());
    }
    let Some(program) = &options.preview_forwarder else {
        return Err(ContainerError::Unsupported {
            setting: "process.ports without a preview forwarder program".into(),
        });
    };
    let pid1 = options
        .runtime
        .state(run.run_id.as_str())?
        .and_then(|status| *status.state.pid())
        .and_then(|pid| u32::try_from(pid).ok())
        .ok_or_else(|| ContainerError::Lost {
            what: "the container's pid 1, to publish its ports".into(),
        })?;
    let config = ForwarderConfig {
        ports: ports.clone(),
        uid,
        gid,
    };
    preview::publish(program, &config, pid1, cgroups, bundle)
}

/// Makes the container's pid 1 run as its root (uid 0 inside, an unprivileged
/// host id, no capability): the run's processes, which have another uid, can
/// neither signal it nor open what it holds for the host through
/// `/proc/1/fd` (the capacity ticket). Commands are exec'd as the run's ids.
fn init_as_root(spec: &mut oci_spec::runtime::Spec) -> Result<(), ContainerError> {
    let Some(mut process) = spec.process().clone() else {
        return Ok(());
    };
    let root = oci_spec::runtime::UserBuilder::default()
        .uid(0u32)
        .gid(0u32)
        .additional_gids(Vec::<u32>::new())
        .build()
        .map_err(|source| ContainerError::Spec {
            step: "the container's first process as its root",
            source,
        })?;
    process.set_user(root);
    spec.set_process(Some(process));
    Ok(())
}

/// The run's image, verified and unpacked (or found in the cache), when its
/// contract names one.
fn run_image(
    run: &RunContext,
    options: &ContainerOptions,
) -> Result<Option<UnpackedImage>, ContainerError> {
    let Some(text) = &run.contract.environment.runtime.image else {
        return Ok(None);
    };
    let reference =
        ImageReference::parse(text).map_err(|reason| ImageError::Reference { reason })?;
    Ok(Some(options.images.unpacked(&reference)?))
}

/// The live container of a run sealed earlier (by this process or another),
/// from its bundle's state and `plan` (prepared again by the attaching runner).
pub(crate) fn reopen(
    run: &RunContext,
    plan: &SealPlan,
    options: &ContainerOptions,
) -> Result<Live, ContainerError> {
    let bundle_dir = run.run_dir.join(BUNDLE_DIR);
    let path = bundle_dir.join(STATE_FILE);
    let text =
        std::fs::read(&path).map_err(ContainerError::io("reading the sealed state", &path))?;
    let state: SealedState = serde_json::from_slice(&text).map_err(|e| ContainerError::Lost {
        what: format!("{} does not read: {e}", path.display()),
    })?;
    let env = run_env(plan, &state.image_env);
    let cgroups = ContainerCgroups::of(&state.cgroups_path);
    // Background numbers go on where the last runner left them.
    let next = cgroups
        .children()
        .iter()
        .filter_map(|name| {
            name.strip_prefix(BACKGROUND_CGROUP_PREFIX)?
                .parse::<u32>()
                .ok()
        })
        .max()
        .map_or(1, |n| n + 1);
    let _ = options;
    Ok(Live {
        id: run.run_id.to_string(),
        template: ProcessTemplate {
            container: run.run_id.to_string(),
            env,
            uid: plan.identity.uid,
            gid: plan.identity.gid,
            open_files: plan.environment.limits.open_files,
            file_size_bytes: plan.environment.limits.disk_bytes,
        },
        bundle: bundle_dir,
        cgroups,
        workdir: state.workdir,
        wall_time_ms: plan.environment.limits.wall_time_ms,
        next_background: AtomicU32::new(next),
        made_ahead: std::sync::Mutex::new(None),
    })
}

/// Makes the bundle's root directory a mount of its own with `nosuid` and
/// `nodev`: the runtime binds the root from there, and a bind keeps its
/// source's flags, so the container's `/` carries them (the runtime makes it
/// read-only itself).
fn seal_root(bundle: &Path) -> Result<(), ContainerError> {
    use nix::mount::{MsFlags, mount};
    let root = bundle.join(bundle::ROOTFS_DIR);
    let failed = |errno: nix::errno::Errno| ContainerError::Io {
        step: "mounting the container's root nosuid and nodev",
        path: root.clone(),
        source: errno.into(),
    };
    mount(
        Some(&root),
        &root,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(failed)?;
    mount(
        None::<&str>,
        &root,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(failed)
}

/// Unmounts the bundle's root mount (see [`seal_root`]) if it is there;
/// whether it is gone.
pub(crate) fn release_root(bundle: &Path) -> bool {
    let root = bundle.join(bundle::ROOTFS_DIR);
    if is_mount_point(&root) {
        let _ = nix::mount::umount2(&root, nix::mount::MntFlags::MNT_DETACH);
    }
    !is_mount_point(&root)
}

/// Whether `path` is a mount point of this process's mount namespace.
fn is_mount_point(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.to_string_lossy();
    table
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .any(|target| target == wanted)
}

/// The environment every process of the run starts with: the image's `Env`
/// under the plan's variables (an image's value replaces only a default of
/// the environment boundary, as its `PATH` does), the identity's credentials
/// over both (values never printed).
fn run_env(plan: &SealPlan, image_env: &[String]) -> Vec<(String, String)> {
    let mut vars = plan.environment.vars.clone();
    for (name, value) in crate::image::env_pairs(image_env) {
        if !vars.contains_key(name) || plan.environment.defaults.contains(name) {
            vars.insert(name.to_owned(), value.to_owned());
        }
    }
    let mut env: Vec<(String, String)> = vars.into_iter().collect();
    for credential in &plan.identity.credentials {
        env.retain(|(k, _)| *k != credential.name);
        env.push((
            credential.name.clone(),
            credential.expose_value().to_owned(),
        ));
    }
    env
}

/// Where run `run_dir`'s sealed state is.
/// The runtime program recorded when the run in `run_dir` was sealed.
pub(crate) fn sealed_runtime(run_dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read(state_file(run_dir)).ok()?;
    serde_json::from_slice::<SealedState>(&text).ok()?.runtime
}

pub(crate) fn state_file(run_dir: &Path) -> PathBuf {
    run_dir.join(BUNDLE_DIR).join(STATE_FILE)
}

fn write_state(dir: &Path, state: &SealedState) -> Result<(), ContainerError> {
    let path = dir.join(STATE_FILE);
    std::fs::write(&path, serde_json::to_vec(state).unwrap_or_default())
        .map_err(ContainerError::io("writing the sealed state", &path))
}

/// Makes the checkout the run's own: every entry `lchown`ed to the run's host
/// ids, never following a link. An entry on another file system (a mount
/// under the checkout) is not descended into, and a regular file with more
/// than one link (a hard link to a file that may live outside the checkout)
/// is refused: its owner would change outside too. Returns how many entries
/// changed owner.
fn hand_over(root: &Path, uid: u32, gid: u32) -> Result<u64, ContainerError> {
    let top = std::fs::symlink_metadata(root)
        .map_err(ContainerError::io("inspecting the checkout", root))?;
    let device = top.dev();
    let mut changed = 0;
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path)
            .map_err(ContainerError::io("inspecting the checkout", &path))?;
        if meta.dev() != device {
            continue;
        }
        if meta.is_file() && meta.nlink() > 1 {
            return Err(ContainerError::HardLinkedFile { path });
        }
        if meta.uid() != uid || meta.gid() != gid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))
                .map_err(ContainerError::io("handing the checkout over", &path))?;
            changed += 1;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)
                .map_err(ContainerError::io("listing the checkout", &path))?
            {
                let entry = entry.map_err(ContainerError::io("listing the checkout", &path))?;
                pending.push(entry.path());
            }
        }
    }
    Ok(changed)
}

/// Fails, naming the directory, unless host id `uid` (its uid and its gid:
/// the container's root is both) may search every directory from `/` down to
/// `dir` (the runtime mounts the container's root from there as that id).
///
/// # Ambient authority
/// Looks at the host's directories on the way.
pub fn reachable_by(dir: &Path, uid: u32) -> Result<(), ContainerError> {
    use std::os::unix::fs::MetadataExt;
    for closed in dir.ancestors() {
        let meta = std::fs::metadata(closed).map_err(ContainerError::io(
            "looking at the bundle's directories",
            closed,
        ))?;
        let mode = meta.mode() & 0o7777;
        let searchable = if meta.uid() == uid {
            mode & 0o100 != 0
        } else if meta.gid() == uid {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        };
        if !searchable {
            return Err(ContainerError::Unreachable {
                uid,
                bundle: dir.to_path_buf(),
                closed: closed.to_path_buf(),
                mode,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use std::os::unix::fs::MetadataExt;

    use super::{hand_over, reachable_by};
    use crate::error::ContainerError;

    #[test]
    fn a_bundle_behind_a_directory_closed_to_others_is_refused_naming_it() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bundle = base.path().join("private/runs/run-1/bundle");
        std::fs::create_dir_all(&bundle).unwrap();
        reachable_by(&bundle, 100_000).unwrap();
        let private = base.path().join("private");
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        match reachable_by(&bundle, 100_000) {
            Err(ContainerError::Unreachable { closed, mode, .. }) => {
                assert_eq!((closed, &mode), (private.clone(), &0o700));
            }
            other => panic!("{other:?}"),
        }
        // Closed to others, searchable by the container root's group: reachable.
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::lchown(&private, None, Some(100_000)).unwrap();
            std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o710)).unwrap();
            reachable_by(&bundle, 100_000).unwrap();
        }
    }

    #[test]
    fn a_hard_link_to_a_file_outside_is_refused_and_that_file_keeps_its_owner() {
        let base = tempfile::tempdir().unwrap();
        let outside = base.path().join("host-file");
        std::fs::write(&outside, "the host's").unwrap();
        let before = std::fs::metadata(&outside).unwrap();
        let checkout = base.path().join("checkout");
        std::fs::create_dir(&checkout).unwrap();
        std::fs::write(checkout.join("own.txt"), "the run's").unwrap();
        std::fs::hard_link(&outside, checkout.join("linked")).unwrap();
        let refused = hand_over(&checkout, 101_000, 101_000).unwrap_err();
        assert!(
            matches!(&refused, ContainerError::HardLinkedFile { path } if path.ends_with("linked")),
            "{refused}"
        );
        let after = std::fs::metadata(&outside).unwrap();
        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "the host's");
    }

    #[test]
    fn the_checkout_becomes_the_runs_without_following_a_link_out() {
        let base = tempfile::tempdir().unwrap();
        let outside = base.path().join("host-file");
        std::fs::write(&outside, "the host's").unwrap();
        let before = std::fs::metadata(&outside).unwrap();
        let checkout = base.path().join("checkout");
        std::fs::create_dir_all(checkout.join("src")).unwrap();
        std::fs::write(checkout.join("src/main.rs"), "fn main() {}").unwrap();
        std::os::unix::fs::symlink(&outside, checkout.join("escape")).unwrap();
        let changed = hand_over(&checkout, 101_000, 101_000).unwrap();
        assert_eq!(changed, 4, "the root, src, src/main.rs and the link itself");
        for path in ["src", "src/main.rs"] {
            let meta = std::fs::metadata(checkout.join(path)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (101_000, 101_000), "{path}");
        }
        let after = std::fs::metadata(&outside).unwrap();
        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    }
}
