//! The output keeper: a process of the host that copies a command's stdout
//! and stderr pipes into the command's output files, for as long as anything
//! in the sandbox holds them.
//!
//! A command's standard output is a pipe, not a file: a process that writes
//! to it can neither truncate nor overwrite what it wrote (`ftruncate`,
//! `lseek`, `pwrite` and clearing `O_APPEND` have no effect on a pipe), so
//! whatever reached the pipe reaches the file. The files themselves are held
//! only here (and by the runner, for reading).
//!
//! The keeper is a fork of the runner, started before the command; it
//! outlives the runner that started it as the command's background processes
//! do (then the host's init reaps it). While the runner lives, the runner
//! reaps it: a task waits for its pidfd, and teardown reaps the run's keepers
//! before it returns, so no ended keeper lingers as a zombie. It lives in the run's
//! `output` cgroup ([`OUTPUT_CGROUP`]), where teardown finds it, in the host's
//! pid namespace, out of reach of everything in the sandbox. In it: only raw,
//! async-signal-safe calls (it is a copy of a multi-threaded process), every
//! signal blocked (so `SIGTERM` or `SIGPIPE` never ends it, only `SIGKILL`),
//! non-dumpable, and nothing of the runner's descriptors but its own six:
//!
//! | fd | what |
//! |---|---|
//! | 0, 1 | the read ends of the stdout and stderr pipes (non-blocking) |
//! | 2, 3 | the stdout and stderr files (appending) |
//! | 4 | the runner's questions (a byte: "the command ended") |
//! | 5 | its answers (a byte: "everything it wrote is in the files") |
//!
//! It ends once both pipes reached end of file, that is when the last process
//! holding their write ends ended.
//!
//! Output is not the run's disk (the files are the runner's, on the host) and
//! never counts against `limits.disk`: a file is held to the command's output
//! cap instead, its bound (`held.rs`; see
//! `workspace_core::boundary::output_keeper`). While the runner follows it,
//! the runner releases what it has read and the keeper stops reading the pipe
//! while the file is more than a few MiB ahead of it (the writer waits, as on
//! any pipe read slowly); once nobody follows (the command ended, or the
//! runner is gone: its question pipe closes), the keeper releases the middle
//! of what it writes itself and never waits.
//!
//! **When the command ended**, its stream must end exactly after what it
//! wrote. Everything it wrote is in the pipes by then (a write to a pipe is
//! complete when it returns), perhaps not yet in the files: the runner asks
//! ([`Flush::wait_flushed`]), the keeper copies as many bytes as each pipe holds at
//! that moment (`FIONREAD`; what a background process adds meanwhile is late
//! output) and answers; the stream then ends at the files' sizes.

use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nix::libc;
use workspace_core::boundary::{BoundaryError, KeptFiles, KeptOutput, OutputFlush, OutputKeepers};
use workspace_core::evidence::HeadTail;

use super::error::ProcessError;
use crate::cgroup::{CgroupError, RunCgroup};
use crate::sys::{self, fd, ids, pidfd, pipe_io, process};
use held::Held;

mod held;

/// The cgroup (below the run's) of the run's output keepers.
pub(crate) const OUTPUT_CGROUP: &str = "output";
/// How long a keeper may take to answer that everything the command wrote is
/// in the files.
const FLUSH_WAIT: Duration = Duration::from_secs(10);
/// How long teardown gives the keepers to copy what is left, once every other
/// process of the run ended.
const SETTLE_WAIT: Duration = Duration::from_secs(5);
/// How long teardown waits for the run's keepers, out of their group, to be
/// reaped.
const REAP_WAIT: Duration = Duration::from_secs(1);
/// Where the keeper parks its descriptors before it places them.
const PARKED_FROM: c_int = 64;
/// The keeper's descriptors (see the module docs).
const PIPES: [c_int; 2] = [0, 1];
const FILES: [c_int; 2] = [2, 3];
const ASKED: c_int = 4;
const ANSWER: c_int = 5;
/// How long a keeper waiting for its follower sleeps between two looks.
const WAIT_MS: c_int = 5;

/// A keeper started for one command: the write ends of its pipes (the
/// command's stdout and stderr) and the way to ask it to flush.
pub(crate) struct Keeper {
    pub(crate) stdout: OwnedFd,
    pub(crate) stderr: OwnedFd,
    pub(crate) flush: Flush,
}

/// The runner's side of a keeper's question and answer.
#[derive(Debug)]
pub(crate) struct Flush {
    ask: OwnedFd,
    answer: OwnedFd,
}

/// What the forked processes get: raw descriptor numbers of the parent's, the
/// files' sizes when it started, and how they are held.
struct Args {
    wanted: [c_int; 6],
    sizes: [u64; 2],
    holding: Holding,
    /// The runner's command line, blanked in the keeper (as in a sandbox's
    /// pid 1): nothing looking for a process by its arguments finds it.
    arg_area: Option<process::ArgArea>,
}

/// How a keeper holds its files: to a bound (or not), followed by the runner
/// (or not).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Holding {
    pub(crate) bound: Option<HeadTail>,
    pub(crate) followed: bool,
}

/// Starts the keeper of `files` (stdout, stderr: the output files, opened for
/// appending), held as `holding` says, in the run's `output` group below
/// `run`. Blocking (the fork, the cgroup write).
pub(crate) fn start(
    files: [&OwnedFd; 2],
    holding: Holding,
    run: &RunCgroup,
) -> Result<Keeper, ProcessError> {
    let group = output_group(run)?;
    let key = group_key(&group);
    start_placed([files[0].as_fd(), files[1].as_fd()], holding, key, |pid| {
        group
            .add_process(pid)
            .map_err(|source| ProcessError::Cgroup {
                step: "moving the output keeper into the run's output group",
                source,
            })
    })
}

/// Starts the keeper of `files` and has `place` move it (its host pid) into
/// its cgroup, `group` (a directory of it, naming it among the keepers this
/// process reaps).
fn start_placed(
    files: [BorrowedFd<'_>; 2],
    holding: Holding,
    group: PathBuf,
    place: impl FnOnce(u32) -> Result<(), ProcessError>,
) -> Result<Keeper, ProcessError> {
    let (stdout_read, stdout_write) = super::pipe("the command's stdout pipe")?;
    let (stderr_read, stderr_write) = super::pipe("the command's stderr pipe")?;
    let (ask_read, ask_write) = super::pipe("the output keeper's question pipe")?;
    let (answer_read, answer_write) = super::pipe("the output keeper's answer pipe")?;
    for read in [&stdout_read, &stderr_read] {
        pipe_io::set_nonblocking(read.as_raw_fd()).map_err(|errno| ProcessError::Pipe {
            step: "making the keeper's pipe ends non-blocking",
            source: std::io::Error::from_raw_os_error(errno),
        })?;
    }
    let sizes = files.map(|file| pipe_io::file_size(file.as_raw_fd()).unwrap_or(0));
    let args = Args {
        wanted: [
            stdout_read.as_raw_fd(),
            stderr_read.as_raw_fd(),
            files[0].as_raw_fd(),
            files[1].as_raw_fd(),
            ask_read.as_raw_fd(),
            answer_write.as_raw_fd(),
        ],
        sizes,
        holding,
        arg_area: process::ArgArea::of_this_process(),
    };
    let failed = |step| {
        move |errno: sys::Errno| ProcessError::Pipe {
            step,
            source: std::io::Error::from_raw_os_error(errno),
        }
    };
    let pid = sys::fork_like(0, None, &args, keep).map_err(failed("forking the output keeper"))?;
    // This side's copies of the keeper's ends go now: its pipes' read ends
    // must have no other reader, the answer's write end no other writer.
    drop((stdout_read, stderr_read, ask_read, answer_write));
    reap_when_ended(group, pid);
    place(u32::try_from(pid).unwrap_or_default())?;
    Ok(Keeper {
        stdout: stdout_write,
        stderr: stderr_write,
        flush: Flush {
            ask: ask_write,
            answer: answer_read,
        },
    })
}

/// The namespace backend's output keepers for another process boundary's
/// commands (the container backend's, whose crate has no `unsafe` to fork
/// with): the same keeper, moved into the `cgroup.procs` files it is given.
///
/// # Ambient authority
/// Forks this process and writes the given `cgroup.procs` files.
#[derive(Clone, Copy, Debug, Default)]
pub struct ForkedOutputKeepers;

impl OutputKeepers for ForkedOutputKeepers {
    fn start(&self, files: KeptFiles<'_>) -> Result<KeptOutput, BoundaryError> {
        let procs = files.cgroup_procs.clone();
        let place = |pid: u32| {
            for file in &procs {
                std::fs::write(file, pid.to_string()).map_err(|source| ProcessError::Io {
                    step: "moving the output keeper into its cgroup",
                    path: file.clone(),
                    source,
                })?;
            }
            Ok(())
        };
        let group = procs
            .first()
            .and_then(|file| file.parent())
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let holding = Holding {
            bound: files.bound,
            followed: files.followed,
        };
        let keeper = start_placed([files.stdout, files.stderr], holding, group, place)
            .map_err(|e| e.into_boundary("start an output keeper"))?;
        Ok(KeptOutput {
            stdout: keeper.stdout,
            stderr: keeper.stderr,
            flush: Box::new(keeper.flush),
        })
    }

    fn reap(&self, group: &Path) {
        reap_group(group, Instant::now() + REAP_WAIT);
    }
}

#[async_trait]
impl OutputFlush for Flush {
    async fn flushed(self: Box<Self>) -> bool {
        (*self).wait_flushed().await
    }
}

/// The run's `output` group, made by the first command that needs it.
fn output_group(run: &RunCgroup) -> Result<RunCgroup, ProcessError> {
    let made = match run.create_child(OUTPUT_CGROUP) {
        Err(CgroupError::AlreadyExists { .. }) => run.child(OUTPUT_CGROUP),
        made => Some(made.map_err(|source| ProcessError::Cgroup {
            step: "creating the run's output group",
            source,
        })?),
    };
    made.ok_or_else(|| ProcessError::Pipe {
        step: "finding the run's output group",
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })
}

impl Flush {
    /// Asks the keeper, once the command ended, to copy everything its pipes
    /// hold into the files, and waits (on a blocking thread) until it says it
    /// did; `false` when it did not answer within [`FLUSH_WAIT`].
    pub(crate) async fn wait_flushed(self) -> bool {
        tokio::task::spawn_blocking(move || self.ask_and_wait())
            .await
            .unwrap_or(false)
    }

    fn ask_and_wait(&self) -> bool {
        if fd::write_all(self.ask.as_raw_fd(), b"?").is_err() {
            return false;
        }
        let deadline = Instant::now() + FLUSH_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut ready = [libc::pollfd {
                fd: self.answer.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            }];
            let timeout = c_int::try_from(left.as_millis()).unwrap_or(c_int::MAX);
            match fd::poll(&mut ready, timeout) {
                Err(libc::EINTR) => continue,
                Ok(1) => return matches!(fd::read_byte(self.answer.as_raw_fd()), Ok(Some(_))),
                _ => return false,
            }
        }
    }
}

/// Ends every process of `run` but its output keepers, then gives the keepers
/// [`SETTLE_WAIT`] to copy what the pipes still hold and end (they end at the
/// pipes' end of file, once no process holds a write end). Blocking; for
/// teardown, before the run's cgroups are removed (which kills what is left).
pub(crate) fn settle(run: &RunCgroup) {
    let Some(keepers) = run.child(OUTPUT_CGROUP) else {
        return;
    };
    // A frozen run (suspended) would keep its keepers from reading.
    let _ = run.thaw();
    for name in run.children().unwrap_or_default() {
        if name != OUTPUT_CGROUP
            && let Some(group) = run.child(&name)
            && let Err(e) = group.kill_all()
        {
            tracing::warn!(run_id = %run.run_id(), group = %name, error = %e,
                "ending a group of the run before its output is kept failed");
        }
    }
    let deadline = Instant::now() + SETTLE_WAIT;
    while keepers.pids().is_ok_and(|pids| !pids.is_empty()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    reap_group(&group_key(&keepers), Instant::now() + REAP_WAIT);
}

/// Reaps the keepers of `group` this process started as they end, until none
/// is left or `deadline`: out of their cgroup, they may still be exiting.
fn reap_group(group: &Path, deadline: Instant) {
    while reap_ended(Some(group)) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The keepers this process started and has not reaped yet: the group each
/// lives in (a directory of it) and its pid. Only [`reap_ended`] reaps them,
/// under this lock, so a pid is never waited for after it was reaped (and
/// perhaps reused); nothing else in the runner waits for any child.
static UNREAPED: Mutex<Vec<(PathBuf, libc::pid_t)>> = Mutex::new(Vec::new());

/// Reaps every keeper of this process that ended; how many of `group`'s are
/// left (of every group's with `None`).
fn reap_ended(group: Option<&Path>) -> usize {
    let mut unreaped = UNREAPED.lock().unwrap_or_else(PoisonError::into_inner);
    unreaped.retain(|(_, pid)| matches!(process::wait_for_child(*pid, libc::WNOHANG), Ok(None)));
    unreaped
        .iter()
        .filter(|(kept_in, _)| group.is_none_or(|group| kept_in == group))
        .count()
}

/// Records keeper `pid` (of `group`) as this process's to reap, and reaps it
/// from a task of the current tokio runtime once it ended (its pidfd is
/// readable). Without a runtime, teardown reaps it; should this process end
/// first, the host's init does.
fn reap_when_ended(group: PathBuf, pid: libc::pid_t) {
    UNREAPED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((group, pid));
    let (Ok(runtime), Ok(pidfd)) = (tokio::runtime::Handle::try_current(), pidfd::open(pid)) else {
        return;
    };
    runtime.spawn(async move {
        if let Ok(ended) = sys::reactor::register(pidfd, tokio::io::Interest::READABLE) {
            let _ = ended.readable().await;
        }
        reap_ended(None);
    });
}

/// How a group is named among the keepers to reap: its first directory.
fn group_key(group: &RunCgroup) -> PathBuf {
    group
        .paths()
        .first()
        .map(|dir| dir.to_path_buf())
        .unwrap_or_default()
}

/// The keeper (see the module docs).
fn keep(args: &Args, _: sys::Birth) -> ! {
    // Parked above every number they go to, then placed, then the rest closed.
    let mut parked = [0; 6];
    for (slot, wanted) in parked.iter_mut().zip(args.wanted) {
        match fd::dup_from(wanted, PARKED_FROM) {
            Ok(fd) => *slot = fd,
            Err(_) => process::exit(2),
        }
    }
    for (target, fd) in (0..).zip(parked) {
        if fd::dup_onto(fd, target, 0).is_err() {
            process::exit(2);
        }
    }
    if fd::close_from(6, PARKED_FROM + 6).is_err() {
        process::exit(2);
    }
    ids::set_undumpable();
    if let Some(area) = args.arg_area {
        area.blank();
    }
    ids::set_thread_name(c"aw-output-keep");
    let holding = args.holding;
    let mut held = [0, 1].map(|stream| Held::new(FILES[stream], args.sizes[stream], holding));
    let mut buffer = [0u8; 16 << 10];
    let mut open = [true, true];
    let mut asked = true;
    loop {
        if !open[0] && !open[1] {
            process::exit(0);
        }
        let entry = |fd: c_int, on: bool| libc::pollfd {
            fd: if on { fd } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        };
        for (stream, held) in held.iter_mut().enumerate() {
            held.look(FILES[stream]);
        }
        let waiting = held.iter().any(|h| h.waiting);
        let mut ready = [
            entry(PIPES[0], open[0] && !held[0].waiting),
            entry(PIPES[1], open[1] && !held[1].waiting),
            entry(ASKED, asked),
        ];
        match fd::poll(&mut ready, if waiting { WAIT_MS } else { -1 }) {
            Ok(_) => {}
            Err(libc::EINTR) => continue,
            Err(_) => process::exit(3),
        }
        for stream in 0..2 {
            if ready[stream].revents != 0
                && !copy(stream, usize::MAX, &mut buffer, &mut held[stream])
            {
                open[stream] = false;
                sys::close(PIPES[stream]);
            }
        }
        if ready[2].revents != 0 {
            if let Ok(Some(_)) = fd::read_byte(ASKED) {
                // The command ended: all it wrote goes to the files, then
                // what comes is late, and nobody follows it.
                for stream in 0..2 {
                    if open[stream] {
                        let waiting = pipe_io::bytes_waiting(PIPES[stream]).unwrap_or(0);
                        copy(stream, waiting, &mut buffer, &mut held[stream]);
                    }
                    held[stream].unfollowed(FILES[stream], true);
                }
                let _ = fd::write_all(ANSWER, b".");
            } else {
                // The runner that started the command is gone: nobody asks,
                // nobody follows (what it had not read is all kept to the
                // bound, from the start).
                asked = false;
                sys::close(ASKED);
                sys::close(ANSWER);
                for (stream, held) in held.iter_mut().enumerate() {
                    held.unfollowed(FILES[stream], false);
                }
            }
        }
    }
}

/// Copies up to `most` bytes (what is there, without blocking) from pipe
/// `stream` to its file, as `held` admits them (the rest is dropped);
/// `false` at the pipe's end of file (or a read error).
fn copy(stream: usize, most: usize, buffer: &mut [u8], held: &mut Held) -> bool {
    let mut left = most;
    while left > 0 {
        let want = buffer.len().min(left);
        match pipe_io::read_some(PIPES[stream], &mut buffer[..want]) {
            Ok(0) => return false,
            Ok(n) => {
                left -= n;
                let kept = held.admit(n);
                // A full disk loses what it cannot hold; the writer goes on.
                if kept > 0 && fd::write_all(FILES[stream], &buffer[..kept]).is_ok() {
                    held.wrote(FILES[stream], kept);
                }
            }
            Err(libc::EAGAIN) => return true,
            Err(_) => return false,
        }
        if most == usize::MAX {
            // One read per readiness: the other pipe and the questions get
            // their turn.
            return true;
        }
    }
    true
}
