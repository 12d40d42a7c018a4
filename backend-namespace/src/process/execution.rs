//! [`NamespaceExecution`]: one command running in a sealed namespace run.

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::io::unix::AsyncFd;
use workspace_core::RunId;
use workspace_core::boundary::{
    BoundaryError, Execution, ExitRecord, InputStream, KillCause, OutputStream,
};

use super::error::ProcessError;
use crate::cgroup::RunCgroup;
use crate::spawn::{ChildKiller, SpawnedChild};

/// A counter of a cgroup's events file and its value when the command
/// started: OOM kills (`oom_kill` in v2 `memory.events` or v1
/// `memory.oom_control`), forks refused at the pids limit (`max` in
/// `pids.events`, counted in the cgroup where the fork was tried: the command's).
#[derive(Clone, Debug)]
pub(crate) struct EventCounter {
    pub(crate) file: PathBuf,
    pub(crate) key: &'static str,
    pub(crate) baseline: u64,
}

impl EventCounter {
    /// The run's OOM kills, from now on.
    pub(crate) fn oom_kills(file: PathBuf) -> Self {
        Self::start(file, "oom_kill")
    }

    /// The forks refused in the command's cgroup, from now on.
    pub(crate) fn forks_refused(file: PathBuf) -> Self {
        Self::start(file, "max")
    }

    fn start(file: PathBuf, key: &'static str) -> Self {
        let baseline = read_event(&file, key).unwrap_or(0);
        Self {
            file,
            key,
            baseline,
        }
    }

    /// How many events since the start.
    pub(crate) fn since_start(&self) -> u64 {
        read_event(&self.file, self.key).map_or(0, |now| now.saturating_sub(self.baseline))
    }
}

fn read_event(file: &std::path::Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok())?
    })
}

/// A command in a sealed run: its streams, its supervisor, its cgroup, its time
/// limit.
///
/// [`wait`](Execution::wait) returns when the command itself ended (what it left
/// running in the background goes on in the sandbox); it waits on a blocking
/// thread, so the host runtime needs tokio's time driver for a timeout. A timeout,
/// a kill, or dropping the execution before it ended kills the command's whole
/// tree: every process in the command's cgroup, background ones included.
pub struct NamespaceExecution {
    run_id: RunId,
    child: Option<SpawnedChild>,
    /// The command's cgroup: its whole tree, and only it.
    tree: Arc<RunCgroup>,
    stdin: Option<InputStream>,
    stdout: Option<OutputStream>,
    stderr: Option<OutputStream>,
    /// When the wall-time limit passes (fixed at spawn, so a wait that is dropped
    /// and called again does not restart it).
    deadline: Option<Instant>,
    /// The supervisor's pidfd, registered with tokio once `wait` started: it is
    /// readable when the supervisor ended (its exit status then waits to be
    /// reaped without blocking). Kept here, so `wait` is cancel-safe.
    ended: Option<AsyncFd<OwnedFd>>,
    killed: Option<KillCause>,
    oom: Option<EventCounter>,
    forks: Option<EventCounter>,
    exit: Option<ExitRecord>,
    /// Signals the command's supervisor, which passes the signal on.
    killer: ChildKiller,
    /// Let go by [`Execution::release`]: dropping it kills nothing.
    released: bool,
    /// The master of the command's terminal, held open until the command is
    /// reaped: closing the last one hangs the terminal up, and the kernel then
    /// sends `SIGHUP` to a command that closed its side but has not exited yet.
    terminal: Option<OwnedFd>,
}

impl fmt::Debug for NamespaceExecution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamespaceExecution")
            .field("run_id", &self.run_id)
            .field("child", &self.child)
            .field("deadline", &self.deadline)
            .field("killed", &self.killed)
            .field("exit", &self.exit)
            .finish_non_exhaustive()
    }
}

/// The parts a [`NamespaceExecution`] is made of.
pub(crate) struct Parts {
    pub(crate) run_id: RunId,
    pub(crate) child: SpawnedChild,
    pub(crate) tree: Arc<RunCgroup>,
    pub(crate) stdin: InputStream,
    pub(crate) stdout: OutputStream,
    pub(crate) stderr: OutputStream,
    pub(crate) timeout: Option<Duration>,
    pub(crate) oom: Option<EventCounter>,
    pub(crate) forks: Option<EventCounter>,
    /// The master of the command's terminal, if it has one.
    pub(crate) terminal: Option<OwnedFd>,
}

impl NamespaceExecution {
    pub(crate) fn new(parts: Parts) -> Self {
        Self {
            run_id: parts.run_id,
            tree: parts.tree,
            killer: parts.child.killer(),
            released: false,
            child: Some(parts.child),
            stdin: Some(parts.stdin),
            stdout: Some(parts.stdout),
            stderr: Some(parts.stderr),
            deadline: parts.timeout.map(|limit| Instant::now() + limit),
            ended: None,
            killed: None,
            oom: parts.oom,
            forks: parts.forks,
            exit: None,
            terminal: parts.terminal,
        }
    }
}

/// How long a supervisor gets to reap its killed command and end.
const SUPERVISOR_REAP: Duration = Duration::from_secs(1);

/// Kills every process of `tree` but `supervisor`, the group frozen meanwhile
/// (nothing forks between the listing and the kill); whether it could (a group
/// without a freezer is left to [`kill_tree`]). Blocking.
fn kill_all_but(tree: &RunCgroup, supervisor: u32) -> bool {
    if tree.freeze().is_err() {
        return false;
    }
    for pid in tree.pids().unwrap_or_default() {
        if pid != supervisor {
            super::terminate::signal(tree, pid, nix::libc::SIGKILL);
        }
    }
    tree.thaw().is_ok()
}

/// Kills every process of the command's cgroup (on a blocking thread: the kill
/// waits until the group is empty).
async fn kill_tree(tree: &Arc<RunCgroup>) -> Result<(), ProcessError> {
    let tree = Arc::clone(tree);
    tokio::task::spawn_blocking(move || tree.kill_all())
        .await
        .map_err(|source| ProcessError::Task {
            step: "killing the command's tree",
            source,
        })?
        .map_err(|source| ProcessError::Cgroup {
            step: "killing the command's tree",
            source,
        })
}

#[async_trait]
impl Execution for NamespaceExecution {
    fn take_stdin(&mut self) -> Option<InputStream> {
        self.stdin.take()
    }

    fn take_stdout(&mut self) -> Option<OutputStream> {
        self.stdout.take()
    }

    fn take_stderr(&mut self) -> Option<OutputStream> {
        self.stderr.take()
    }

    async fn wait(&mut self) -> Result<ExitRecord, BoundaryError> {
        const OP: &str = "wait for command";
        if let Some(exit) = &self.exit {
            return Ok(exit.clone());
        }
        let Some(child) = self.child.as_mut() else {
            return Err(ProcessError::Lost {
                what: "the command's process handle is gone",
            }
            .into_boundary(OP));
        };
        let supervisor = child.pid();
        if self.ended.is_none() {
            let pidfd = child
                .pidfd()
                .try_clone_to_owned()
                .and_then(|fd| crate::sys::reactor::register(fd, tokio::io::Interest::READABLE))
                .map_err(|source| {
                    ProcessError::Pipe {
                        step: "registering the command's pidfd",
                        source,
                    }
                    .into_boundary(OP)
                })?;
            self.ended = Some(pidfd);
        }
        let Some(ended) = self.ended.as_ref() else {
            unreachable!("the pidfd was just registered");
        };
        // No thread blocks in waitpid: the pidfd says when the supervisor ended,
        // then it is reaped at once. Dropping this future loses nothing.
        let ended_status = async {
            loop {
                let mut ready = ended
                    .readable()
                    .await
                    .map_err(|source| ProcessError::Pipe {
                        step: "waiting for the command",
                        source,
                    })?;
                match child.try_wait() {
                    Ok(Some(status)) => return Ok(status),
                    Ok(None) => ready.clear_ready(),
                    Err(source) => {
                        return Err(ProcessError::Spawn {
                            step: "waiting for the command",
                            source,
                        });
                    }
                }
            }
        };
        let tree = &self.tree;
        let status = match self.deadline {
            Some(deadline) => {
                tokio::pin!(ended_status);
                match tokio::time::timeout_at(deadline.into(), &mut ended_status).await {
                    Ok(status) => status,
                    Err(_elapsed) => {
                        tracing::info!(run_id = %self.run_id, "command timed out; killing its tree");
                        self.killed.get_or_insert(KillCause::Timeout);
                        // The tree first, then the supervisor once it reaped
                        // the command (see `kill_all_but`).
                        let frozen_kill = {
                            let tree = Arc::clone(tree);
                            tokio::task::spawn_blocking(move || kill_all_but(&tree, supervisor))
                                .await
                                .unwrap_or(false)
                        };
                        if frozen_kill
                            && let Ok(status) =
                                tokio::time::timeout(SUPERVISOR_REAP, &mut ended_status).await
                        {
                            kill_tree(tree).await.map_err(|e| e.into_boundary(OP))?;
                            status
                        } else {
                            kill_tree(tree).await.map_err(|e| e.into_boundary(OP))?;
                            ended_status.await
                        }
                    }
                }
            }
            None => ended_status.await,
        }
        .map_err(|e| e.into_boundary(OP))?;
        let mut killed = self.killed.clone();
        if killed.is_none() && self.oom.as_ref().is_some_and(|oom| oom.since_start() > 0) {
            killed = Some(KillCause::MemoryLimit);
        }
        let forks_refused = self.forks.as_ref().map_or(0, EventCounter::since_start);
        let exit = ExitRecord {
            status,
            killed,
            forks_refused,
            // Read while the command's cgroup still exists: its whole tree's.
            usage: self.tree.usage(),
        };
        tracing::debug!(run_id = %self.run_id, ?exit, "command ended");
        // Reaped: a hang-up reaches only what it left in its session.
        self.terminal = None;
        self.exit = Some(exit.clone());
        Ok(exit)
    }

    async fn kill(&mut self, cause: KillCause) -> Result<(), BoundaryError> {
        if self.exit.is_some() {
            return Ok(());
        }
        self.killed.get_or_insert(cause);
        // The command's tree first, its supervisor after it has reaped the
        // command: a supervisor killed with its child would leave that child a
        // zombie for the host's init (its parent is outside the sandbox's pid
        // namespace), and the sandbox's end would wait for init to reap it.
        let supervisor = self.child.as_ref().map(SpawnedChild::pid);
        if let Some(supervisor) = supervisor {
            let tree = Arc::clone(&self.tree);
            let killed = tokio::task::spawn_blocking(move || kill_all_but(&tree, supervisor))
                .await
                .unwrap_or(false);
            if killed {
                let _ = tokio::time::timeout(SUPERVISOR_REAP, self.wait()).await;
            }
        }
        kill_tree(&self.tree)
            .await
            .map_err(|e| e.into_boundary("kill command"))
    }

    async fn terminate(&mut self, grace: Duration) -> Result<ExitRecord, BoundaryError> {
        const OP: &str = "terminate command";
        if self.exit.is_none() {
            // SIGTERM to every process of the command's tree, as a terminal's
            // Ctrl-C reaches a whole foreground job: a shell waiting for its
            // child runs its trap only once that child has ended. The command's
            // supervisor is left out (it would pass the signal on a second time).
            let supervisor = self.child.as_ref().map(SpawnedChild::pid);
            let signalled = self
                .tree
                .pids()
                .unwrap_or_default()
                .into_iter()
                .filter(|pid| Some(*pid) != supervisor)
                .filter(|pid| super::terminate::signal(&self.tree, *pid, nix::libc::SIGTERM))
                .count();
            if signalled == 0 {
                self.killer.signal(nix::libc::SIGTERM).map_err(|source| {
                    ProcessError::Spawn {
                        step: "asking the command to stop",
                        source,
                    }
                    .into_boundary(OP)
                })?;
            }
            if tokio::time::timeout(grace, self.wait()).await.is_err() {
                tracing::info!(run_id = %self.run_id, grace_ms = grace.as_millis() as u64,
                    "command did not stop in its grace period; killing its tree");
                self.kill(KillCause::Teardown).await?;
            }
        }
        let exit = self.wait().await?;
        // What the command started and left behind ends with it.
        kill_tree(&self.tree)
            .await
            .map_err(|e| e.into_boundary(OP))?;
        Ok(exit)
    }

    fn release(mut self: Box<Self>) {
        self.released = true;
        if let Some(child) = self.child.take() {
            child.release();
        }
        tracing::debug!(run_id = %self.run_id, "command released; it runs on in the sandbox");
    }
}

impl Drop for NamespaceExecution {
    fn drop(&mut self) {
        if self.exit.is_none() && !self.released {
            // Unfinished: end the command's whole tree (an unfinished wait's
            // blocking thread then returns).
            if let Err(e) = self.tree.kill_all() {
                tracing::warn!(run_id = %self.run_id, error = %e,
                    "killing the tree of a dropped command failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kills_and_refused_forks_are_counted_from_the_start() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let v2 = tmp.path().join("memory.events");
        std::fs::write(&v2, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_event(&v2, "oom_kill"), Some(1));
        let v1 = tmp.path().join("memory.oom_control");
        std::fs::write(&v1, "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let counter = EventCounter::oom_kills(v1.clone());
        assert_eq!(counter.since_start(), 0);
        std::fs::write(&v1, "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(counter.since_start(), 2);
        let pids = tmp.path().join("pids.events");
        std::fs::write(&pids, "max 4\n").unwrap_or_else(|e| panic!("{e}"));
        let forks = EventCounter::forks_refused(pids.clone());
        std::fs::write(&pids, "max 7\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(forks.since_start(), 3);
    }
}
