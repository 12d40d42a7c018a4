//! Freezing a run's processes in place (suspend) and thawing them (resume).
//!
//! On cgroup v2 the run's group is frozen with `cgroup.freeze` (which covers its
//! children) and is frozen once `cgroup.events` says `frozen 1`; on v1 with the
//! freezer hierarchy's `freezer.state`, frozen once it reads `FROZEN`. A frozen
//! process keeps its memory, descriptors and sockets and runs on from where it
//! was when thawed; a killed frozen group dies (the kill paths thaw v1 groups,
//! cgroup v2's `cgroup.kill` reaches frozen processes).

use std::time::{Duration, Instant};

use super::Hierarchy;
use super::error::CgroupError;
use super::fsio;
use super::run::{RunCgroup, RunDir};

/// How long a freeze may take before it is an error (a task stuck in the kernel
/// can hold a group in `FREEZING`).
const FREEZE_LIMIT: Duration = Duration::from_secs(10);

impl RunCgroup {
    /// Freezes every process of the group and its children; returns once they
    /// are frozen, or [`CgroupError::FreezeIncomplete`] after 10 s (the group is
    /// thawed again then). [`CgroupError::NoFreezer`] when the group has neither
    /// a v2 directory nor a v1 freezer.
    pub fn freeze(&self) -> Result<(), CgroupError> {
        let dir = self.freezer_dir()?;
        let frozen = match dir.hierarchy {
            Hierarchy::V2 => {
                fsio::write(&dir.path.join("cgroup.freeze"), "1")?;
                wait_for(|| {
                    Ok(events_say_frozen(&fsio::read(
                        &dir.path.join("cgroup.events"),
                    )?))
                })
            }
            Hierarchy::V1 => {
                let state = dir.path.join("freezer.state");
                fsio::write(&state, "FROZEN")?;
                wait_for(|| Ok(fsio::read(&state)?.trim() == "FROZEN"))
            }
        };
        match frozen {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.thaw()?;
                Err(CgroupError::FreezeIncomplete {
                    path: dir.path.clone(),
                })
            }
            Err(e) => {
                let _ = self.thaw();
                Err(e)
            }
        }
    }

    /// Thaws the group (a group that is not frozen stays as it is, and so does
    /// one without a freezer, which cannot have been frozen).
    pub fn thaw(&self) -> Result<(), CgroupError> {
        let Ok(dir) = self.freezer_dir() else {
            return Ok(());
        };
        match dir.hierarchy {
            Hierarchy::V2 => fsio::write(&dir.path.join("cgroup.freeze"), "0"),
            Hierarchy::V1 => fsio::write(&dir.path.join("freezer.state"), "THAWED"),
        }
    }

    /// The directory whose freezer covers the run: the v2 one, else the v1
    /// freezer's.
    fn freezer_dir(&self) -> Result<&RunDir, CgroupError> {
        self.dirs
            .iter()
            .find(|d| d.hierarchy == Hierarchy::V2)
            .or_else(|| self.dirs.iter().find(|d| d.freezer))
            .ok_or_else(|| CgroupError::NoFreezer {
                path: self
                    .paths()
                    .first()
                    .map(|p| p.to_path_buf())
                    .unwrap_or_default(),
            })
    }
}

fn events_say_frozen(events: &str) -> bool {
    events.lines().any(|line| line.trim() == "frozen 1")
}

/// Polls `done` until it is true or [`FREEZE_LIMIT`] passed.
fn wait_for(done: impl Fn() -> Result<bool, CgroupError>) -> Result<bool, CgroupError> {
    let deadline = Instant::now() + FREEZE_LIMIT;
    loop {
        if done()? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_events_say_frozen_only_with_frozen_1() {
        assert!(events_say_frozen("populated 1\nfrozen 1\n"));
        assert!(!events_say_frozen("populated 1\nfrozen 0\n"));
        assert!(!events_say_frozen("populated 0\n"));
    }
}
