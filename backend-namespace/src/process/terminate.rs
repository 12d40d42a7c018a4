//! Stopping what runs in a live sandbox, gently, without ending the sandbox.
//!
//! Every process of the run lives in a child cgroup of the run's: `init` holds
//! the sandbox's pid 1, `output` the output keepers, each command (and
//! service) has its own. Terminating signals every process of every other group with `SIGTERM` through a pidfd
//! (never by pid number: a pid reused since the group was read is never hit),
//! waits until the groups are empty or the grace period ends, then kills
//! what is left, group by group.

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use workspace_core::boundary::TerminateReport;

use super::error::ProcessError;
use super::keeper::OUTPUT_CGROUP;
use super::seal::INIT_CGROUP;
use crate::cgroup::RunCgroup;
use crate::sys::pidfd;

/// How often the groups are looked at while they stop.
const POLL: Duration = Duration::from_millis(20);

/// `SIGTERM` to every process of `run`'s command groups, `grace` to end, then
/// `SIGKILL` to what is left. Blocking.
pub(super) fn terminate(run: &RunCgroup, grace: Duration) -> Result<TerminateReport, ProcessError> {
    let cgroup_error = |step| move |source| ProcessError::Cgroup { step, source };
    let groups: Vec<RunCgroup> = run
        .children()
        .map_err(cgroup_error("listing the run's command groups"))?
        .iter()
        // Pid 1 holds the sandbox; the output keepers end on their own once
        // the processes whose output they keep are gone.
        .filter(|name| name.as_str() != INIT_CGROUP && name.as_str() != OUTPUT_CGROUP)
        .filter_map(|name| run.child(name))
        .collect();
    let mut report = TerminateReport::default();
    for group in &groups {
        for pid in group.pids().unwrap_or_default() {
            if signal(group, pid, libc::SIGTERM) {
                report.signalled += 1;
            }
        }
    }
    let deadline = Instant::now() + grace;
    let running = |groups: &[RunCgroup]| -> usize {
        groups.iter().map(|g| g.pids().map_or(0, |p| p.len())).sum()
    };
    while running(&groups) > 0 && Instant::now() < deadline {
        std::thread::sleep(POLL);
    }
    for group in &groups {
        let left = group.pids().map_or(0, |p| p.len());
        if left > 0 {
            report.killed += u32::try_from(left).unwrap_or(u32::MAX);
            group
                .kill_all()
                .map_err(cgroup_error("killing what did not stop"))?;
        }
    }
    Ok(report)
}

/// Sends `signal` to `pid`, read from `group`, through a pidfd taken while
/// `group` still lists it (a pid freed and reused since the listing is never
/// hit); `false` when it is gone.
pub(super) fn signal(group: &RunCgroup, pid: u32, signal: libc::c_int) -> bool {
    let Ok(raw) = libc::pid_t::try_from(pid) else {
        return false;
    };
    let Ok(fd) = pidfd::open(raw) else {
        return false;
    };
    if !group.pids().unwrap_or_default().contains(&pid) {
        return false;
    }
    match pidfd::send_signal(&fd, signal) {
        Ok(()) => true,
        Err(libc::ESRCH) => false,
        Err(errno) => {
            tracing::debug!(pid, error = %Errno::from_raw(errno), "signalling a process of the run failed");
            false
        }
    }
}
