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

use std::fmt::Debug;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::BoundaryError;

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
    /// The most bytes each file may hold (the run's file size cap); what comes
    /// beyond is read and dropped, so a writer never blocks.
    pub limit_bytes: Option<u64>,
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
