//! The cgroup core's migration lock, kept ready while a runtime starts a
//! process.
//!
//! A runtime's `exec` moves the process it starts into the container's
//! cgroups by writing its pid to `cgroup.procs`. Such a write takes the
//! kernel's thread-group lock for writing (`cgroup_threadgroup_rwsem`: one
//! lock for the whole host, every hierarchy), and the first writer after a
//! quiet moment switches that lock out of its fast mode, which waits for an
//! RCU grace period: 5-17 ms on the hosts measured, the larger part of a bare
//! `runc exec`. The lock goes back to its fast mode one grace period after
//! its last writer, so writers close behind one another do not wait.
//!
//! [`keep_ready`] is such a writer, on a thread of its own, from before the
//! runtime starts until the process runs: every millisecond it moves this
//! process into the cgroup it is already in (a move of nothing: no other
//! process is named, so none can be moved by a recycled pid). The first of
//! those pays the grace period while the runtime starts (its program loads,
//! reads its state and the process file) instead of after; the later ones
//! keep the lock in its slow mode until the runtime's own writes, which then
//! take it at once. The cost, for the milliseconds it lasts: every fork and
//! exit on the host takes the lock's slower path (what the kernel's
//! `favordynmods` trades for good), and each write holds the cgroup core's
//! mutex for a moment. One keeper serves every start in flight.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Less than the shortest grace period measured: the lock never returns to
/// its fast mode in between.
const PERIOD: Duration = Duration::from_millis(1);
/// How long the lock is kept ready at most, should a guard never be dropped.
const AT_MOST: Duration = Duration::from_millis(500);
/// Where the cgroup file systems are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// How many starts want the lock ready now; the keeper runs while any does.
static WANTED: Mutex<Option<Arc<AtomicUsize>>> = Mutex::new(None);

/// Keeps the lock ready until dropped.
#[derive(Debug)]
pub(crate) struct KeptReady {
    wanted: Arc<AtomicUsize>,
}

impl Drop for KeptReady {
    fn drop(&mut self) {
        self.wanted.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Keeps the lock ready (a move of nothing every [`PERIOD`]) until the
/// returned guard, and every other one, is dropped (or [`AT_MOST`]). Best
/// effort: when anything fails, the runtime's own write waits for the grace
/// period as it would have.
pub(crate) fn keep_ready() -> KeptReady {
    let mut keeper = WANTED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(wanted) = keeper.as_ref()
        && wanted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n + 1)
            })
            .is_ok()
    {
        // A keeper runs already, and now for this start too.
        return KeptReady {
            wanted: Arc::clone(wanted),
        };
    }
    let wanted = Arc::new(AtomicUsize::new(1));
    *keeper = Some(Arc::clone(&wanted));
    drop(keeper);
    if let Some(procs) = own_procs_file() {
        let flag = Arc::clone(&wanted);
        let _ = std::thread::Builder::new()
            .name("aw-cgroup-lock".into())
            .spawn(move || {
                let until = Instant::now() + AT_MOST;
                let pid = std::process::id().to_string();
                while flag.load(Ordering::Acquire) > 0 && Instant::now() < until {
                    if std::fs::write(&procs, &pid).is_err() {
                        return;
                    }
                    std::thread::sleep(PERIOD);
                }
            });
    }
    KeptReady { wanted }
}

/// The `cgroup.procs` of the cgroup this process is in: in the `pids`
/// hierarchy of a v1 (or hybrid) host, else in the v2 one.
fn own_procs_file() -> Option<PathBuf> {
    let listed = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path_of = |wanted: &dyn Fn(&str, &str) -> bool| {
        listed.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            wanted(id, controllers).then(|| path.trim_start_matches('/').to_owned())
        })
    };
    let root = std::path::Path::new(CGROUP_ROOT);
    let file = match path_of(&|_, controllers| controllers.split(',').any(|c| c == "pids")) {
        Some(path) => root.join("pids").join(path),
        None => root.join(path_of(&|id, controllers| {
            id == "0" && controllers.is_empty()
        })?),
    }
    .join("cgroup.procs");
    file.is_file().then_some(file)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The keeper moves nothing (this process stays in its cgroup) and its
    /// thread ends once no guard is left; two starts share one keeper.
    #[test]
    fn keeping_the_lock_ready_moves_nothing_and_ends_with_its_guards() {
        let procs =
            own_procs_file().expect("this process's cgroup.procs (a cgroup v1 pids or v2 host)");
        std::fs::write(&procs, std::process::id().to_string())
            .unwrap_or_else(|e| panic!("{}: {e} (this test runs as root)", procs.display()));
        let own_cgroup = || std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let keepers = || {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .flatten()
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|comm| comm.trim() == "aw-cgroup-lock")
                })
                .count()
        };
        let before = own_cgroup();

        let first = keep_ready();
        let second = keep_ready();
        std::thread::sleep(PERIOD * 20);
        let running = keepers();
        drop(first);
        std::thread::sleep(PERIOD * 5);
        let with_one_guard = keepers();
        drop(second);
        let deadline = Instant::now() + Duration::from_secs(2);
        while keepers() > 0 && Instant::now() < deadline {
            std::thread::sleep(PERIOD);
        }

        assert_eq!(running, 1, "one keeper for both starts");
        assert_eq!(with_one_guard, 1, "kept while a guard is left");
        assert_eq!(keepers(), 0, "the keeper outlived its guards");
        assert_eq!(own_cgroup(), before, "this process was moved");
    }
}
