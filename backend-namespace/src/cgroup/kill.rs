//! Listing, killing and OOM detection for the processes of a run's cgroups.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::sys::pidfd;

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::libc;

use super::kill_method::KillMethod;
use super::run::RunCgroup;
use super::{CgroupError, Controller, Hierarchy, fsio};

/// The most kill rounds before [`CgroupError::KillIncomplete`].
const KILL_ROUNDS: u32 = 100;
/// The longest pause after a round, for the killed processes to exit.
const ROUND_PAUSE: Duration = Duration::from_millis(20);

/// The pause after kill round `round`: 1 ms, doubling up to [`ROUND_PAUSE`]. Most
/// processes are gone within a millisecond of `SIGKILL`; a fixed long pause
/// would be most of a short run's teardown.
fn pause(round: u32) -> Duration {
    Duration::from_millis(1u64 << round.min(5)).min(ROUND_PAUSE)
}
/// How long to wait for the v1 freezer to report `FROZEN`.
const FREEZE_WAIT: Duration = Duration::from_secs(1);

impl RunCgroup {
    /// Every pid in the run's groups and their sub-cgroups (all hierarchies),
    /// sorted and without duplicates.
    pub fn pids(&self) -> Result<Vec<u32>, CgroupError> {
        let mut pids = Vec::new();
        for dir in &self.dirs {
            fsio::procs_recursive(&dir.path, &mut pids)?;
        }
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    /// The pids of the run's processes as its first hierarchy lists them (its
    /// child groups included): one read per group where [`pids`](Self::pids)
    /// reads every hierarchy. Every process the backend starts joins all of
    /// them, so this counts the same processes; the proof that none is left
    /// reads them all.
    pub fn pids_in_one_hierarchy(&self) -> Result<Vec<u32>, CgroupError> {
        let mut pids = Vec::new();
        if let Some(dir) = self.dirs.first() {
            fsio::procs_recursive(&dir.path, &mut pids)?;
        }
        pids.sort_unstable();
        Ok(pids)
    }

    /// Whether the kernel OOM-killed a process of the run because of its memory cap
    /// (v1 `memory.oom_control` / v2 `memory.events`: `oom_kill` > 0).
    ///
    /// [`CgroupError::ControllerMissing`] if the run has no memory group.
    pub fn oom_killed(&self) -> Result<bool, CgroupError> {
        let dir = self
            .dirs
            .iter()
            .find(|d| d.controllers.contains(&Controller::Memory))
            .ok_or_else(|| CgroupError::ControllerMissing {
                controller: Controller::Memory,
                reason: "the run has no memory cgroup".to_owned(),
            })?;
        let file = match dir.hierarchy {
            Hierarchy::V1 => "memory.oom_control",
            Hierarchy::V2 => "memory.events",
        };
        Ok(fsio::keyed_value(&dir.path.join(file), "oom_kill")? > 0)
    }

    /// Kills every process of the run and waits until the groups are empty.
    ///
    /// Only pids read from the run's groups are signalled (never pid 0, 1 or this
    /// process). Bounded: [`CgroupError::KillIncomplete`] if processes remain.
    pub fn kill_all(&self) -> Result<(), CgroupError> {
        match self.kill_method {
            KillMethod::CgroupKill => self.kill_with_cgroup_kill(),
            KillMethod::V1Freezer | KillMethod::Signals => self.kill_with_signals(),
        }
    }

    fn kill_with_cgroup_kill(&self) -> Result<(), CgroupError> {
        let Some(dir) = self.dirs.iter().find(|d| d.hierarchy == Hierarchy::V2) else {
            return self.kill_with_signals();
        };
        let file = dir.path.join("cgroup.kill");
        for round in 0..KILL_ROUNDS / 2 {
            if self.pids()?.is_empty() {
                return Ok(());
            }
            if round % 10 == 0 {
                fsio::write(&file, "1")?;
            }
            std::thread::sleep(pause(round));
        }
        // A process left in a v1 group only (moved out of the v2 one) is not reached
        // by `cgroup.kill`: signal what is still listed.
        self.kill_with_signals()
    }

    fn kill_with_signals(&self) -> Result<(), CgroupError> {
        let freezer = self.dirs.iter().find(|d| d.freezer);
        let Some(main) = freezer.or_else(|| self.dirs.first()) else {
            return Ok(());
        };
        for round in 0..KILL_ROUNDS {
            if self.pids()?.is_empty() {
                return Ok(());
            }
            if let Some(dir) = freezer {
                freeze(&dir.path)?;
            }
            let signalled = self
                .pids()
                .and_then(|pids| signal_all(&pids, &main.path, || self.pids()));
            if let Some(dir) = freezer {
                // Thaw even when signalling failed, so nothing stays frozen.
                fsio::write(&dir.path.join("freezer.state"), "THAWED")?;
            }
            signalled?;
            std::thread::sleep(pause(round));
        }
        self.incomplete(&main.path)
    }

    fn incomplete(&self, path: &Path) -> Result<(), CgroupError> {
        Err(CgroupError::KillIncomplete {
            path: path.to_path_buf(),
            rounds: KILL_ROUNDS,
            remaining: self.pids()?,
        })
    }
}

/// Writes `FROZEN` and waits (bounded) until the state reads `FROZEN`.
fn freeze(dir: &Path) -> Result<(), CgroupError> {
    let state = dir.join("freezer.state");
    fsio::write(&state, "FROZEN")?;
    let deadline = Instant::now() + FREEZE_WAIT;
    loop {
        if fsio::read(&state)?.trim() == "FROZEN" {
            return Ok(());
        }
        if Instant::now() >= deadline {
            // A task stuck in the kernel can keep the group FREEZING; signal anyway,
            // the next round catches what this one misses.
            tracing::debug!(path = %state.display(), "freezer did not reach FROZEN in time");
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// SIGKILLs each pid, skipping pid 0, 1 and this process; a pid already gone is fine.
///
/// A pid read from `cgroup.procs` may exit and be reused by an unrelated host
/// process before the signal; `kill(pid)` as host root would then hit that one. So
/// each pid is pinned first with `pidfd_open` (the descriptor names that process,
/// never a later one with the same number), then `listed` re-reads the group's
/// `cgroup.procs`, and only pids still listed are signalled, through their pidfd
/// (`pidfd_send_signal`). A pid listed after its pidfd was opened is the pinned
/// process (a number cannot be reused while the process holding it exists; if it
/// has exited since, the pidfd signal is `ESRCH`, harmless).
fn signal_all(
    pids: &[u32],
    dir: &Path,
    listed: impl Fn() -> Result<Vec<u32>, CgroupError>,
) -> Result<(), CgroupError> {
    let own = std::process::id();
    let error = |pid: u32, source: Errno| CgroupError::Signal {
        pid,
        path: dir.to_path_buf(),
        source,
    };
    let mut pinned = Vec::with_capacity(pids.len());
    for &pid in pids {
        if !may_signal(pid, own) {
            continue;
        }
        match pidfd_open(pid) {
            Ok(pidfd) => pinned.push((pid, pidfd)),
            Err(Errno::ESRCH) => {}
            Err(source) => return Err(error(pid, source)),
        }
    }
    if pinned.is_empty() {
        return Ok(());
    }
    let still = listed()?;
    for (pid, pidfd) in &pinned {
        if !still_listed(*pid, &still) {
            continue;
        }
        match pidfd_kill(pidfd) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(source) => return Err(error(*pid, source)),
        }
    }
    Ok(())
}

/// Never pid 0, 1, a pid beyond `pid_t`, or this process.
fn may_signal(pid: u32, own: u32) -> bool {
    pid > 1 && pid != own && i32::try_from(pid).is_ok()
}

/// Whether a pinned pid is still in the group (listed after its pidfd was opened).
fn still_listed(pid: u32, listed: &[u32]) -> bool {
    listed.contains(&pid)
}

/// `pidfd_open(pid, 0)`.
fn pidfd_open(pid: u32) -> Result<OwnedFd, Errno> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| Errno::ESRCH)?;
    pidfd::open(pid).map_err(Errno::from_raw)
}

/// `pidfd_send_signal(pidfd, SIGKILL, NULL, 0)`.
fn pidfd_kill(pidfd: &OwnedFd) -> Result<(), Errno> {
    pidfd::send_signal(pidfd, libc::SIGKILL).map_err(Errno::from_raw)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn only_pinned_pids_still_in_the_group_are_signalled() {
        let own = std::process::id();
        for pid in [0, 1, own, u32::MAX] {
            assert!(!may_signal(pid, own), "{pid}");
        }
        assert!(may_signal(4242, own));
        // Left the group (or exited and its number went elsewhere) between the
        // listing and the pidfd: not signalled.
        assert!(!still_listed(4242, &[17, 99]));
        assert!(still_listed(4242, &[17, 4242]));
    }

    #[test]
    fn a_pid_that_left_the_group_is_not_signalled() {
        // A real process of ours, pinned but not listed: it must survive.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let pid = child.id();
        let result = signal_all(&[pid], Path::new("/test"), || Ok(Vec::new()));
        assert!(result.is_ok(), "{result:?}");
        assert!(
            child.try_wait().unwrap_or_else(|e| panic!("{e}")).is_none(),
            "signalled a pid that was no longer listed"
        );
        // Listed after the pidfd: signalled through it.
        let result = signal_all(&[pid], Path::new("/test"), || Ok(vec![pid]));
        assert!(result.is_ok(), "{result:?}");
        let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }
}
