//! Output keepers: what copies a command's stdout and stderr pipes into the
//! files of a [`CommandOutput`](super::CommandOutput), for as long as any
//! process holds the pipes.
//!
//! A command that writes to a file it holds can take back what it wrote
//! (`ftruncate`, or clearing `O_APPEND` and writing at offset 0), and what its
//! background processes write after it ended would then never reach the
//! evidence. A pipe cannot be truncated, sought or written at an offset: so an
//! isolating process boundary hands its commands pipes, and a keeper (a host
//! process out of the sandbox's reach, which outlives the runner as the
//! background processes do) appends what comes through them to the files.
//!
//! The namespace backend's keeper (a fork of the runner) is one
//! implementation; a process boundary that cannot start one itself (the
//! container backend, which has no `unsafe`) takes one from elsewhere, as it
//! takes [`RunDisks`](super::RunDisks).
//!
//! # Held to a bound
//! Files with a [`bound`](KeptFiles::bound) never hold much more than it,
//! however much is written, and the runner still sees every byte:
//! - while the runner follows a file (its command runs), the follower
//!   releases what it has read between the bound's head and the last
//!   `tail_bytes` it read ([`releasable`], in steps of [`RELEASE_STEP`]: a hole,
//!   `fallocate(FALLOC_FL_PUNCH_HOLE)`), and the keeper stops reading the
//!   pipe while the file holds more than the bound and [`KEEP_AHEAD`] (the
//!   writer then waits, as it would on a pipe nobody reads fast enough);
//! - once nobody follows (the command ended, the runner is gone, or the
//!   files are a log), the keeper releases the middle of what it writes
//!   itself and never waits.
//!
//! So the first `head_bytes` of a file and its last `tail_bytes` are always
//! there; what lies between may read as zeros.

use std::fmt::Debug;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::BoundaryError;
use crate::evidence::HeadTail;

/// The step in which a follower releases what it has read.
pub const RELEASE_STEP: u64 = 1 << 20;
/// How far a keeper may get ahead of the runner following a file (beyond
/// the bound) before it waits for it.
pub const KEEP_AHEAD: u64 = 4 << 20;
/// The granularity of a release (a file system block).
const RELEASE_BLOCK: u64 = 4096;

/// The part `[from, to)` of a file (from offset 0) that a file held to
/// `bound` may release, when its part held to the bound begins at `start`,
/// `end` bytes of it are written (or read), and it is released up to
/// `released` already: between `start + head_bytes` and `end - tail_bytes`,
/// in whole blocks. Empty (`from == to`) when there is nothing to release.
pub fn releasable(bound: HeadTail, start: u64, end: u64, released: u64) -> (u64, u64) {
    let from = released
        .max(start.saturating_add(bound.head_bytes))
        .div_ceil(RELEASE_BLOCK)
        .saturating_mul(RELEASE_BLOCK);
    let to = end.saturating_sub(bound.tail_bytes) / RELEASE_BLOCK * RELEASE_BLOCK;
    (from, to.max(from))
}

/// Whether a followed file that has `allocated` bytes on disk is so far ahead
/// of its follower that its keeper waits (see the module docs).
pub fn too_far_ahead(bound: HeadTail, allocated: u64) -> bool {
    allocated > bound.cap().saturating_add(KEEP_AHEAD)
}

/// Starts output keepers.
pub trait OutputKeepers: Send + Sync + Debug {
    /// Starts the keeper of `files` and returns the pipes' write ends for the
    /// command, with the way to ask it to flush once the command ended.
    /// Blocking (it may wait for a process to start).
    fn start(&self, files: KeptFiles<'_>) -> Result<KeptOutput, BoundaryError>;

    /// Reaps the keepers this process started in the cgroup `group` (the
    /// directory of the first `cgroup.procs` file they were given) that
    /// ended; for teardown, once the group is empty, so that none lingers as
    /// a zombie. Blocking and bounded. The default does nothing (keepers that
    /// are not this process's children).
    fn reap(&self, group: &Path) {
        let _ = group;
    }
}

/// What a keeper keeps, and where it lives.
#[derive(Debug)]
pub struct KeptFiles<'a> {
    /// The file of the command's standard output, opened for appending.
    pub stdout: BorrowedFd<'a>,
    /// The file of its standard error, opened for appending.
    pub stderr: BorrowedFd<'a>,
    /// What each file keeps of what it is given (see the module docs);
    /// `None`: all of it.
    pub bound: Option<HeadTail>,
    /// Whether the runner follows the files while the command runs (then
    /// it releases what it read, and the keeper keeps pace with it); `false`
    /// for a log nobody reads as it grows.
    pub followed: bool,
    /// The `cgroup.procs` files (one per hierarchy) the keeper is moved into,
    /// so that the run's teardown finds it.
    pub cgroup_procs: Vec<PathBuf>,
}

/// A started keeper, seen from the process boundary.
#[derive(Debug)]
pub struct KeptOutput {
    /// The write end of the standard output pipe: the command's stdout.
    pub stdout: OwnedFd,
    /// The write end of the standard error pipe: the command's stderr.
    pub stderr: OwnedFd,
    /// Asks the keeper to copy what the pipes hold.
    pub flush: Box<dyn OutputFlush>,
}

/// The question a process boundary asks a keeper once the command ended.
#[async_trait]
pub trait OutputFlush: Send + Debug {
    /// Has the keeper copy everything its pipes hold now (all the ended
    /// command wrote) into the files, and returns once it did; `false` when
    /// it did not answer in time (the streams then end at what reached the
    /// files).
    async fn flushed(self: Box<Self>) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_blocks_between_the_head_and_the_tail_are_released() {
        let bound = HeadTail {
            head_bytes: 5000,
            tail_bytes: 5000,
        };
        // Not yet past head and tail.
        assert_eq!(releasable(bound, 0, 10_000, 0), (8192, 8192));
        assert_eq!(releasable(bound, 0, 30_000, 0), (8192, 24_576));
        // Released before: from there on.
        assert_eq!(releasable(bound, 0, 40_000, 24_576), (24_576, 32_768));
        // A part that begins later (what was written after the command ended).
        assert_eq!(releasable(bound, 100_000, 130_000, 0), (106_496, 122_880));
    }

    #[test]
    fn a_keeper_waits_only_beyond_the_bound_and_its_lead() {
        let bound = HeadTail::of_cap(1 << 20);
        assert!(!too_far_ahead(bound, (1 << 20) + KEEP_AHEAD));
        assert!(too_far_ahead(bound, (1 << 20) + KEEP_AHEAD + 1));
    }
}
