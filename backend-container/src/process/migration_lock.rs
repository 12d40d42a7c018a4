//! The cgroup core's migration lock, kept ready while a runtime starts a
//! process.
//!
//! A runtime's `exec` moves the process it starts into the container's
//! cgroups by writing its pid to `cgroup.procs`. Such a write takes the
//! kernel's thread-group lock for writing (`cgroup_threadgroup_rwsem`, one
//! for every hierarchy), and the first writer after a quiet moment switches
//! that lock out of its fast mode, which waits for an RCU grace period: 5-17
//! ms on the hosts measured, the larger part of a bare `runc exec`. The lock
//! goes back to its fast mode one grace period after its last writer, so
//! writers close behind one another do not wait.
//!
//! [`keep_ready`] is such a writer, on a thread of its own, from before the
//! runtime starts until the process runs: every few milliseconds it moves a
//! process of the container into the cgroup it is already in (a move of
//! nothing). The first of those pays the grace period while the runtime
//! starts (its program loads, reads its state and the process file) instead
//! of after; the later ones keep the lock in its slow mode until the
//! runtime's own writes, which then take it at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Less than the shortest grace period measured: the lock never returns to
/// its fast mode in between.
const PERIOD: Duration = Duration::from_millis(1);
/// How long the lock is kept ready at most, should nobody say it is no
/// longer needed.
const AT_MOST: Duration = Duration::from_millis(500);

/// Keeps the lock ready until dropped.
#[derive(Debug)]
pub(crate) struct KeptReady {
    done: Arc<AtomicBool>,
}

impl Drop for KeptReady {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Starts moving nothing in `container_dir` (a directory of the container's
/// own cgroup) every [`PERIOD`], until the returned guard is dropped (or
/// [`AT_MOST`]). Best effort: when anything fails, the runtime's own write
/// waits for the grace period as it would have.
pub(crate) fn keep_ready(container_dir: &Path) -> KeptReady {
    let done = Arc::new(AtomicBool::new(false));
    let procs = container_dir.join("cgroup.procs");
    let flag = Arc::clone(&done);
    let _ = std::thread::Builder::new()
        .name("aw-cgroup-lock".into())
        .spawn(move || {
            let until = Instant::now() + AT_MOST;
            while !flag.load(Ordering::Relaxed) && Instant::now() < until {
                if !move_nothing(&procs) {
                    return;
                }
                std::thread::sleep(PERIOD);
            }
        });
    KeptReady { done }
}

/// Writes the first pid `procs` lists back to it; whether that was done.
/// That process is the container's (its pid 1 or the reaper's sleep, both
/// there for the container's whole life); its pid could only name another
/// process by then if it ended and the kernel went round every pid number in
/// between.
fn move_nothing(procs: &PathBuf) -> bool {
    let Ok(listed) = std::fs::read_to_string(procs) else {
        return false;
    };
    listed
        .lines()
        .next()
        .map(str::trim)
        .filter(|pid| !pid.is_empty())
        .is_some_and(|pid| std::fs::write(procs, pid).is_ok())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The lock's keeper moves nothing: the process it names stays where it
    /// was, alone in its group, and the keeper's thread ends with its guard.
    #[test]
    fn keeping_the_lock_ready_moves_nothing_and_ends_with_its_guard() {
        let hierarchy = Path::new("/sys/fs/cgroup/pids");
        let hierarchy = if hierarchy.join("cgroup.procs").is_file() {
            hierarchy
        } else {
            Path::new("/sys/fs/cgroup")
        };
        let dir = hierarchy.join(format!("aw-test-migration-lock-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (this test runs as root)", dir.display()));
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep (coreutils)");
        std::fs::write(dir.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
        let listed = || std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        let own_cgroup = || std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let before = own_cgroup();

        let ready = keep_ready(&dir);
        std::thread::sleep(PERIOD * 20);
        assert_eq!(listed().trim(), sleeper.id().to_string());
        drop(ready);
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
        let deadline = Instant::now() + Duration::from_secs(2);
        while keepers() > 0 && Instant::now() < deadline {
            std::thread::sleep(PERIOD);
        }
        let left = keepers();

        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        while !listed().trim().is_empty() {
            std::thread::sleep(PERIOD);
        }
        std::fs::remove_dir(&dir).unwrap();
        assert_eq!(left, 0, "the keeper's thread outlived its guard");
        assert_eq!(own_cgroup(), before, "this process was moved");
    }
}
