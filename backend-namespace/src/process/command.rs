//! Starting one command in a sealed run's sandbox: its cgroup, its stdio (pipes
//! kept into files, or a pseudo-terminal) and the join.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use workspace_core::boundary::{CommandSpec, Execution, InputStream, OutputStream, RunContext};
use workspace_core::evidence::HeadTail;

use super::execution::{EventCounter, NamespaceExecution, Parts};
use super::keeper::{Flush, Holding};
use super::output::{self, OutputFiles};
use super::pty::{Pty, PtyReader, PtyWriter};
use super::spec::RunSpec;
use super::{Live, ProcessError, blocking};
use crate::cgroup::RunCgroup;
use crate::spawn::{Sandbox, SpawnedChild};

/// Starts `command` in the live sandbox `live` of `run`, in a child cgroup of its own.
pub(super) async fn spawn(
    live: Result<Live, ProcessError>,
    run: &RunContext,
    command: &CommandSpec,
) -> Result<Box<dyn Execution>, ProcessError> {
    let Live {
        spec,
        cgroup,
        sandbox,
    } = live?;
    command.argv.first().ok_or(ProcessError::EmptyArgv)?;
    let cwd = command
        .workdir_under(&spec.workdir)
        .map_err(|e| ProcessError::BadCwd { cwd: e.cwd })?;
    // The runner's number, when it gave one (commands of one run start from
    // several processes); a process it did not number (a service, a
    // background command) is of another series, so that the two never meet.
    let name = match command.number {
        Some(n) => format!("cmd-{n}"),
        None => format!(
            "{}{}",
            super::seal::BACKGROUND_CGROUP_PREFIX,
            spec.next_background
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ),
    };
    if command.tty && command.output.is_some() {
        return Err(ProcessError::TtyWithOutputFiles);
    }
    // Checked before anything of the command is made.
    command.apply_env(&mut Vec::new())?;
    // What its files keep: the runner's bound for the files it names; for
    // the backend's own, the contract's output cap.
    let bound = match &command.output {
        Some(output) => output.bound,
        None => Some(HeadTail::of_cap(
            run.contract.environment.limits.output_bytes(),
        )),
    };
    let started = {
        let (spec, name, command) = (Arc::clone(&spec), name.clone(), command.clone());
        // One trip to a blocking thread: the cgroup, the stdio and the join.
        blocking("starting the command", move || {
            start(&spec, &cgroup, &sandbox, (&name, cwd), (&command, bound))
        })
        .await?
    };
    let Started {
        tree,
        child,
        streams,
        followed,
        oom,
        forks,
    } = started;
    let terminal = streams.hold_terminal()?;
    let (stdin, stdout, stderr) = match followed {
        // Files the runner chose are the output: nothing follows them unless
        // it asks.
        Some(_) if command.output.as_ref().is_some_and(|output| !output.follow) => {
            streams.register()?
        }
        Some((stdout, stderr, flush)) => {
            let supervisor =
                child
                    .pidfd()
                    .try_clone_to_owned()
                    .map_err(|source| ProcessError::Pipe {
                        step: "duplicating the command's pidfd",
                        source,
                    })?;
            let ended = output::ended(supervisor, flush)?;
            let stdout = output::follow(stdout, ended.clone(), bound);
            let stderr = output::follow(stderr, ended, bound);
            let (stdin, _, _) = streams.register()?;
            (stdin, stdout, stderr)
        }
        None => streams.register()?,
    };
    let timeout = match (command.timeout_ms, spec.wall_time_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    tracing::info!(run_id = %run.run_id, argv = ?command.argv, tty = command.tty,
        pid = child.pid(), cgroup = %name, "command started");
    Ok(Box::new(NamespaceExecution::new(Parts {
        run_id: run.run_id.clone(),
        child,
        tree: Arc::new(tree),
        stdin,
        stdout,
        stderr,
        timeout: timeout.map(Duration::from_millis),
        oom,
        forks,
        terminal,
    })))
}

/// A command just started: its cgroup, the supervisor, this side's ends of
/// its stdio, the output files its streams follow (and their keeper's
/// flush), its event counters.
struct Started {
    tree: RunCgroup,
    child: SpawnedChild,
    streams: Streams,
    followed: Option<(std::fs::File, std::fs::File, Flush)>,
    oom: Option<EventCounter>,
    forks: Option<EventCounter>,
}

/// Makes the command's cgroup `name` below `cgroup` and its stdio (output
/// files held to `bound`, or a pseudo-terminal with `tty`), and joins `argv`
/// into `sandbox` in `cwd` (blocking).
fn start(
    spec: &RunSpec,
    cgroup: &RunCgroup,
    sandbox: &Sandbox,
    (name, cwd): (&str, String),
    (command, bound): (&CommandSpec, Option<HeadTail>),
) -> Result<Started, ProcessError> {
    let (argv, tty, output) = (command.argv.clone(), command.tty, command.output.clone());
    let tree = cgroup
        .create_child(name)
        .map_err(|source| ProcessError::Cgroup {
            step: "creating the command's cgroup",
            source,
        })?;
    // Output is not the run's disk: its files are held to the output cap,
    // never to `limits.disk`.
    let files = match (tty, output) {
        (true, _) => None,
        (false, Some(output)) => Some(OutputFiles::create_at(
            &output.stdout,
            &output.stderr,
            Holding {
                bound,
                followed: output.follow,
            },
            cgroup,
        )?),
        (false, None) => Some(OutputFiles::create(
            &spec.run_dir,
            name,
            Holding {
                bound,
                followed: true,
            },
            cgroup,
        )?),
    };
    let program = argv.first().cloned().unwrap_or_default();
    let mut request = spec.request(argv, &tree);
    request.cwd = cwd;
    command.apply_env(&mut request.env)?;
    let (streams, followed) = match files {
        None => {
            let pty = Pty::open(sandbox.entry_pid())?;
            let slave = |what| {
                pty.slave
                    .try_clone()
                    .map_err(|source| ProcessError::Pty { step: what, source })
            };
            request.stdin = Some(slave("duplicating the slave for stdin")?);
            request.stdout = Some(slave("duplicating the slave for stdout")?);
            request.stderr = Some(pty.slave);
            request.controlling_terminal = true;
            // What a terminal program asks first (as `docker run -t` sets it),
            // unless the contract declares it.
            if !request.env.iter().any(|(name, _)| name == "TERM") {
                request.env.push(("TERM".into(), "xterm".into()));
            }
            (Streams::Pty(pty.master), None)
        }
        Some(OutputFiles {
            stdout,
            stderr,
            flush,
        }) => {
            let (stdin_read, stdin_write) = super::pipe("the command's stdin pipe")?;
            request.stdin = Some(stdin_read);
            request.stdout = Some(stdout.0);
            request.stderr = Some(stderr.0);
            (
                Streams::Stdin(stdin_write),
                Some((stdout.1, stderr.1, flush)),
            )
        }
    };
    let oom = tree.oom_file().map(EventCounter::oom_kills);
    let forks = tree.pids_events_file().map(EventCounter::forks_refused);
    let child = crate::spawn::join(sandbox, &request);
    // The parent's copies of the child's ends (the stdin pipe, the pty's slave).
    drop(request);
    let child = child.map_err(|source| ProcessError::not_run(program, source))?;
    Ok(Started {
        tree,
        child,
        streams,
        followed,
        oom,
        forks,
    })
}

/// The parent's ends of a command's stdio, before they are registered with tokio.
enum Streams {
    /// The stdin pipe (stdout and stderr are files, followed by `output.rs`).
    Stdin(OwnedFd),
    /// The master of the command's pseudo-terminal: stdout reads it, stdin
    /// writes it, stderr is empty (the command's stderr is the same terminal).
    Pty(OwnedFd),
}

impl Streams {
    /// A descriptor of the terminal's master that the execution keeps until the
    /// command is reaped (`None` without a terminal). The output stream's own
    /// ends at `EIO`, as soon as the command closes its side, which may be
    /// before it exits; and closing the last master hangs the terminal up,
    /// which sends `SIGHUP` to the command's session.
    fn hold_terminal(&self) -> Result<Option<OwnedFd>, ProcessError> {
        match self {
            Self::Stdin(_) => Ok(None),
            Self::Pty(master) => master
                .try_clone()
                .map(Some)
                .map_err(|source| ProcessError::Pty {
                    step: "duplicating the master to hold it",
                    source,
                }),
        }
    }

    fn register(self) -> Result<(InputStream, OutputStream, OutputStream), ProcessError> {
        let pipe_err = |step| move |source| ProcessError::Pipe { step, source };
        match self {
            Self::Stdin(stdin) => {
                let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin)
                    .map_err(pipe_err("registering the command's stdin"))?;
                Ok((
                    Box::pin(stdin),
                    Box::pin(tokio::io::empty()),
                    Box::pin(tokio::io::empty()),
                ))
            }
            Self::Pty(master) => {
                let pty_err = |step| move |source| ProcessError::Pty { step, source };
                let input = master
                    .try_clone()
                    .map_err(pty_err("duplicating the master for stdin"))?;
                let stdin =
                    PtyWriter::new(input).map_err(pty_err("registering the master for stdin"))?;
                let stdout =
                    PtyReader::new(master).map_err(pty_err("registering the master for stdout"))?;
                Ok((
                    Box::pin(stdin),
                    Box::pin(stdout),
                    Box::pin(tokio::io::empty()),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_stays_under_the_root() {
        let at = |cwd: &str| {
            CommandSpec::new(vec!["true".into()])
                .in_dir(cwd)
                .workdir_under("/workspace")
        };
        let ok = |cwd| at(cwd).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok("."), "/workspace");
        assert_eq!(ok(""), "/workspace");
        assert_eq!(ok("./src//lib/"), "/workspace/src/lib");
        assert!(at("../etc").is_err());
        assert!(at("a/../../b").is_err());
        assert!(at("/etc").is_err());
    }
}
