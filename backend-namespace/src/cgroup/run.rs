//! Creating, filling and removing the cgroups of one run.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use workspace_core::RunId;
use workspace_core::boundary::ResolvedLimits;
use workspace_core::evidence::ResourceUsage;

use super::kill_method::KillMethod;
use super::limits::{self, AppliedLimits};
use super::paths::check_parent_name;
use super::{CgroupError, CgroupLayout, Controller, Hierarchy, Placement, fsio};

/// How often `rmdir` is tried on a cgroup that is still busy.
const RMDIR_ATTEMPTS: u32 = 50;
/// The pause between two `rmdir` attempts.
const RMDIR_PAUSE: Duration = Duration::from_millis(10);

/// One directory of a run, in one hierarchy.
#[derive(Clone, Debug)]
pub(crate) struct RunDir {
    pub(crate) hierarchy: Hierarchy,
    pub(crate) path: PathBuf,
    pub(crate) controllers: Vec<Controller>,
    pub(crate) freezer: bool,
}

/// The control groups of one run: one directory per hierarchy used.
///
/// Dropping it kills what is left in it and removes the directories (best effort,
/// with a `tracing` warning on failure); [`RunCgroup::remove`] does the same and
/// reports errors.
#[derive(Debug)]
pub struct RunCgroup {
    run_id: RunId,
    pub(crate) dirs: Vec<RunDir>,
    applied: AppliedLimits,
    pub(crate) kill_method: KillMethod,
    /// Removed already, released, or a child group that its run removes:
    /// dropping it leaves its processes alone.
    removed: AtomicBool,
}

impl RunCgroup {
    /// Creates `<mount>/<parent_name>/<run_id>` in every hierarchy used and applies
    /// the cgroup limits of `limits` (memory, pids, cpu; the others are ignored here).
    ///
    /// The v2 directory is made whenever the layout has a v2 hierarchy (for
    /// `cgroup.kill`, even without controllers); a v1 directory for each v1 hierarchy
    /// carrying memory, pids or cpu; a v1 freezer directory when `cgroup.kill` is
    /// unavailable. A limit whose controller is [`Placement::Missing`] is
    /// [`CgroupError::ControllerMissing`]; an existing run directory is
    /// [`CgroupError::AlreadyExists`]. On error, the directories made so far are removed.
    ///
    /// # Ambient authority
    /// Creates directories in and writes files of the host's cgroup hierarchies.
    pub fn create(
        layout: &CgroupLayout,
        parent_name: &str,
        run_id: &RunId,
        limits: &ResolvedLimits,
    ) -> Result<Self, CgroupError> {
        let parent = check_parent_name(parent_name)?;
        for controller in Controller::ALL {
            if !limits::asks_for(limits, controller) {
                continue;
            }
            match layout.placement(controller) {
                Placement::Missing { reason } => {
                    return Err(CgroupError::ControllerMissing {
                        controller,
                        reason: reason.clone(),
                    });
                }
                Placement::V2 if layout.unified().is_none() => {
                    return Err(CgroupError::ControllerMissing {
                        controller,
                        reason: "placed on v2, but the layout has no v2 hierarchy".to_owned(),
                    });
                }
                _ => {}
            }
        }
        if let Some(millis) = limits.cpu_millis {
            limits::cpu_quota(millis)?;
        }

        let plan = plan_dirs(layout, &parent, run_id);
        if plan.is_empty() {
            return Err(CgroupError::NoHierarchy);
        }
        let mut run = RunCgroup {
            run_id: run_id.clone(),
            dirs: Vec::new(),
            applied: AppliedLimits::default(),
            kill_method: KillMethod::Signals,
            removed: AtomicBool::new(false),
        };
        match run.populate(layout, &parent, plan, limits) {
            Ok(()) => Ok(run),
            Err(e) => {
                if let Err(cleanup) = run.remove_dirs() {
                    tracing::warn!(run_id = %run_id, error = %cleanup,
                        "removing the cgroups of a failed setup failed");
                }
                run.removed.store(true, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The run's cgroups as [`RunCgroup::create`] named them, found again by a
    /// process that did not create them (crash recovery after the runner died):
    /// every existing `<mount>/<parent_name>/<run_id>` of `layout`. `None` when no
    /// hierarchy has one. The kill method is chosen from what exists (`cgroup.kill`
    /// in the v2 directory, else the v1 freezer directory, else signals); no
    /// directory is made and no limit is read back ([`RunCgroup::applied`] is
    /// empty). Dropping the result kills and removes, like [`RunCgroup::remove`].
    ///
    /// # Ambient authority
    /// Looks at the host's cgroup hierarchies.
    pub fn adopt(
        layout: &CgroupLayout,
        parent_name: &str,
        run_id: &RunId,
    ) -> Result<Option<Self>, CgroupError> {
        let parent = check_parent_name(parent_name)?;
        let mut dirs: Vec<RunDir> = plan_dirs(layout, &parent, run_id)
            .into_iter()
            .filter(|d| d.path.is_dir())
            .collect();
        let freezer = layout
            .freezer_v1()
            .map(|mount| mount.join(&parent).join(run_id.as_str()))
            .filter(|path| path.is_dir());
        if let Some(path) = freezer {
            match dirs.iter_mut().find(|d| d.path == path) {
                Some(dir) => dir.freezer = true,
                None => dirs.push(RunDir {
                    hierarchy: Hierarchy::V1,
                    path,
                    controllers: Vec::new(),
                    freezer: true,
                }),
            }
        }
        if dirs.is_empty() {
            return Ok(None);
        }
        let kill_method = if dirs
            .iter()
            .any(|d| d.hierarchy == Hierarchy::V2 && d.path.join("cgroup.kill").exists())
        {
            KillMethod::CgroupKill
        } else if dirs.iter().any(|d| d.freezer) {
            KillMethod::V1Freezer
        } else {
            KillMethod::Signals
        };
        Ok(Some(RunCgroup {
            run_id: run_id.clone(),
            dirs,
            applied: AppliedLimits::default(),
            kill_method,
            removed: AtomicBool::new(false),
        }))
    }

    fn populate(
        &mut self,
        layout: &CgroupLayout,
        parent: &Path,
        plan: Vec<RunDir>,
        limits: &ResolvedLimits,
    ) -> Result<(), CgroupError> {
        for dir in plan {
            if dir.hierarchy == Hierarchy::V2
                && let Some(root) = layout.unified()
            {
                enable_v2_controllers(root, parent, &dir.controllers)?;
            }
            make_dir(&dir.path)?;
            self.dirs.push(dir.clone());
            for controller in &dir.controllers {
                limits::apply(
                    *controller,
                    dir.hierarchy,
                    &dir.path,
                    limits,
                    &mut self.applied,
                )?;
            }
        }
        self.kill_method = self.choose_kill_method(layout, parent)?;
        tracing::debug!(run_id = %self.run_id, dirs = ?self.paths(), kill = ?self.kill_method,
            "run cgroups created");
        Ok(())
    }

    /// `cgroup.kill` if the v2 directory has it; else a v1 freezer directory (made
    /// now); else signals alone.
    fn choose_kill_method(
        &mut self,
        layout: &CgroupLayout,
        parent: &Path,
    ) -> Result<KillMethod, CgroupError> {
        let v2_kill = self
            .dirs
            .iter()
            .any(|d| d.hierarchy == Hierarchy::V2 && d.path.join("cgroup.kill").exists());
        if v2_kill {
            return Ok(KillMethod::CgroupKill);
        }
        let Some(freezer) = layout.freezer_v1() else {
            return Ok(KillMethod::Signals);
        };
        let path = freezer.join(parent).join(self.run_id.as_str());
        match self.dirs.iter_mut().find(|d| d.path == path) {
            Some(dir) => dir.freezer = true,
            None => {
                make_dir(&path)?;
                self.dirs.push(RunDir {
                    hierarchy: Hierarchy::V1,
                    path,
                    controllers: Vec::new(),
                    freezer: true,
                });
            }
        }
        Ok(KillMethod::V1Freezer)
    }

    /// Makes the child group `name` below every directory of the run, for one
    /// process tree of it (the sandbox's pid 1, one command): limits stay on the
    /// run, so they cover all its children together, while the child's own
    /// `cgroup.kill`, freezer and OOM counter cover only its tree. On v2 the run's
    /// controllers are enabled for its children first, so their OOM counters
    /// exist; the run's processes therefore all live in children (v2 allows no
    /// process in a group that hands controllers down).
    ///
    /// Dropping the returned group kills nothing: the run's removal removes it.
    /// An existing child is [`CgroupError::AlreadyExists`].
    ///
    /// # Ambient authority
    /// Creates directories in and writes files of the host's cgroup hierarchies.
    pub fn create_child(&self, name: &str) -> Result<RunCgroup, CgroupError> {
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(CgroupError::InvalidName {
                name: name.to_owned(),
            });
        }
        let mut dirs = Vec::with_capacity(self.dirs.len());
        for dir in &self.dirs {
            if dir.hierarchy == Hierarchy::V2 {
                hand_down(&dir.path, &dir.controllers)?;
            }
            let path = dir.path.join(name);
            make_dir(&path)?;
            dirs.push(RunDir {
                path,
                ..dir.clone()
            });
        }
        Ok(RunCgroup {
            run_id: self.run_id.clone(),
            dirs,
            applied: AppliedLimits::default(),
            kill_method: self.kill_method,
            removed: AtomicBool::new(true),
        })
    }

    /// The child group `name` of the run as [`RunCgroup::create_child`] made it,
    /// where it exists (another process made it); `None` when no hierarchy has it.
    pub fn child(&self, name: &str) -> Option<RunCgroup> {
        let dirs: Vec<RunDir> = self
            .dirs
            .iter()
            .map(|dir| RunDir {
                path: dir.path.join(name),
                ..dir.clone()
            })
            .filter(|dir| dir.path.is_dir())
            .collect();
        (!dirs.is_empty()).then(|| RunCgroup {
            run_id: self.run_id.clone(),
            dirs,
            applied: AppliedLimits::default(),
            kill_method: self.kill_method,
            removed: AtomicBool::new(true),
        })
    }

    /// The names of the run's child groups (in its first hierarchy), sorted.
    pub fn children(&self) -> Result<Vec<String>, CgroupError> {
        let Some(dir) = self.dirs.first() else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = fsio::subdirs(&dir.path)?
            .iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The OOM-kill counter file of the group, when it has a memory controller
    /// (`memory.oom_control` on v1, `memory.events` on v2).
    pub fn oom_file(&self) -> Option<PathBuf> {
        self.dirs
            .iter()
            .find(|d| d.controllers.contains(&Controller::Memory))
            .map(|d| {
                d.path.join(match d.hierarchy {
                    Hierarchy::V1 => "memory.oom_control",
                    Hierarchy::V2 => "memory.events",
                })
            })
    }

    /// What the group's processes used so far (its peak memory, CPU time and
    /// peak process count, as far as this host's cgroups keep them), read from
    /// whichever of its directories has each counter.
    pub fn usage(&self) -> ResourceUsage {
        ResourceUsage::from_cgroup_files(|name| {
            self.dirs
                .iter()
                .find_map(|d| std::fs::read_to_string(d.path.join(name)).ok())
        })
    }

    /// The pids controller's events file (`pids.events`, both layouts): how
    /// many forks the limit refused in this group.
    pub fn pids_events_file(&self) -> Option<PathBuf> {
        self.dirs
            .iter()
            .find(|d| d.controllers.contains(&Controller::Pids))
            .map(|d| d.path.join("pids.events"))
    }

    /// Moves process `pid` (and the threads of it) into every directory of the run.
    ///
    /// The namespace backend calls this for the run's init before it execs.
    pub fn add_process(&self, pid: u32) -> Result<(), CgroupError> {
        let value = pid.to_string();
        for dir in &self.dirs {
            fsio::write(&dir.path.join("cgroup.procs"), &value)?;
        }
        Ok(())
    }

    /// The run id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// What limits were applied, where.
    pub fn applied(&self) -> &AppliedLimits {
        &self.applied
    }

    /// How [`RunCgroup::kill_all`] ends the run's processes.
    pub fn kill_method(&self) -> KillMethod {
        self.kill_method
    }

    /// The run's cgroup directories, one per hierarchy.
    pub fn paths(&self) -> Vec<&Path> {
        self.dirs.iter().map(|d| d.path.as_path()).collect()
    }

    /// Whether any of the run's directories still exists.
    pub fn exists(&self) -> bool {
        self.dirs.iter().any(|d| d.path.exists())
    }

    /// Kills every process of the run, then removes its directories (sub-cgroups
    /// first; a busy directory is retried a few times).
    pub fn remove(&self) -> Result<(), CgroupError> {
        self.removed.store(true, Ordering::Relaxed);
        self.kill_all()?;
        self.remove_dirs()
    }

    /// Lets go of the groups without killing or removing anything: a live
    /// sandbox outlives the handle; [`RunCgroup::adopt`] finds the groups again.
    pub fn release(&self) {
        self.removed.store(true, Ordering::Relaxed);
    }

    /// Removes every directory of the run; tries all and returns the first error.
    fn remove_dirs(&self) -> Result<(), CgroupError> {
        let mut first = None;
        for dir in self.dirs.iter().rev() {
            if let Err(e) = remove_tree(&dir.path) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if self.removed.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = self.kill_all().and_then(|()| self.remove_dirs()) {
            tracing::warn!(run_id = %self.run_id, error = %e,
                "best-effort removal of the run cgroups failed");
        }
    }
}

/// Which directories a run gets: v2 (if mounted), one per v1 hierarchy used.
fn plan_dirs(layout: &CgroupLayout, parent: &Path, run_id: &RunId) -> Vec<RunDir> {
    let mut dirs: Vec<RunDir> = Vec::new();
    if let Some(root) = layout.unified() {
        dirs.push(RunDir {
            hierarchy: Hierarchy::V2,
            path: root.join(parent).join(run_id.as_str()),
            controllers: Controller::ALL
                .into_iter()
                .filter(|c| *layout.placement(*c) == Placement::V2)
                .collect(),
            freezer: false,
        });
    }
    for controller in Controller::ALL {
        if let Placement::V1 { mount } = layout.placement(controller) {
            let path = mount.join(parent).join(run_id.as_str());
            match dirs.iter_mut().find(|d| d.path == path) {
                Some(dir) => dir.controllers.push(controller),
                None => dirs.push(RunDir {
                    hierarchy: Hierarchy::V1,
                    path,
                    controllers: vec![controller],
                    freezer: false,
                }),
            }
        }
    }
    // Without a v2 group to count it, the CPU time is counted in v1's cpuacct
    // (often mounted with cpu, in which case the cpu directory counts it).
    if let Some(mount) = layout.cpuacct_v1() {
        let path = mount.join(parent).join(run_id.as_str());
        if !dirs.iter().any(|d| d.path == path) {
            dirs.push(RunDir {
                hierarchy: Hierarchy::V1,
                path,
                controllers: Vec::new(),
                freezer: false,
            });
        }
    }
    dirs
}

/// Enables `controllers` in `cgroup.subtree_control` from the v2 root down to `parent`.
pub(crate) fn enable_v2_controllers(
    root: &Path,
    parent: &Path,
    controllers: &[Controller],
) -> Result<(), CgroupError> {
    if controllers.is_empty() {
        return Ok(());
    }
    let mut level = root.to_path_buf();
    let mut levels = vec![level.clone()];
    for component in parent.components() {
        level.push(component);
        levels.push(level.clone());
    }
    for dir in levels {
        create_dir_all(&dir)?;
        hand_down(&dir, controllers)?;
    }
    Ok(())
}

/// Enables `controllers` for the children of the v2 group `dir`
/// (`cgroup.subtree_control`).
///
/// Controllers already enabled are not written again: an ordinary user's runs
/// go through ancestors it may read but not write (a delegated subtree's
/// parents, enabled once by root: see `delegate.rs`).
fn hand_down(dir: &Path, controllers: &[Controller]) -> Result<(), CgroupError> {
    let file = dir.join("cgroup.subtree_control");
    let enabled = fsio::read(&file)?;
    let enabled: Vec<&str> = enabled.split_whitespace().collect();
    for controller in controllers.iter().filter(|c| !enabled.contains(&c.name())) {
        fsio::write_raw(&file, &format!("+{controller}")).map_err(|source| {
            CgroupError::EnableController {
                controller: *controller,
                path: file.clone(),
                source,
            }
        })?;
    }
    Ok(())
}

/// Makes the run directory (and its parents); the run directory must be new.
fn make_dir(path: &Path) -> Result<(), CgroupError> {
    if let Some(parent) = path.parent() {
        create_dir_all(parent)?;
    }
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(CgroupError::AlreadyExists {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(not_made(path, source)),
    }
}

fn create_dir_all(path: &Path) -> Result<(), CgroupError> {
    std::fs::create_dir_all(path).map_err(|source| not_made(path, source))
}

/// Why `path` could not be made: refused permission, for an ordinary user,
/// is a subtree that is not its own, which `check-host --fix` mends.
fn not_made(path: &Path, source: io::Error) -> CgroupError {
    match source.kind() {
        io::ErrorKind::PermissionDenied if !nix::unistd::geteuid().is_root() => {
            CgroupError::NotDelegated {
                path: path.to_path_buf(),
                source,
            }
        }
        _ => CgroupError::CreateDir {
            path: path.to_path_buf(),
            source,
        },
    }
}

/// Removes a cgroup directory and every sub-cgroup below it, deepest first.
fn remove_tree(path: &Path) -> Result<(), CgroupError> {
    for sub in fsio::subdirs(path)? {
        remove_tree(&sub)?;
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) && attempt < RMDIR_ATTEMPTS => {
                std::thread::sleep(RMDIR_PAUSE);
            }
            Err(source) => {
                return Err(CgroupError::RemoveDir {
                    path: path.to_path_buf(),
                    attempts: attempt,
                    source,
                });
            }
        }
    }
}
