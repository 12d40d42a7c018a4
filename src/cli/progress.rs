//! The progress display: one status line on stderr, only when stderr is a
//! terminal. It names each lifecycle step and, while a command runs and has
//! been quiet for a moment, the time it has been running; it is cleared before
//! any of the command's own output and before the summary.

use std::convert::Infallible;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::AsyncWrite;

use super::line_start::LineTracking;
use workspace_core::lifecycle::{State, StateName, TransitionObserver};
use workspace_core::runner::CommandIo;

/// How long a running command must be quiet before the line shows its time,
/// and how often the time is redrawn.
const TICK: Duration = Duration::from_secs(1);

/// The status line of one terminal, shared by the lifecycle observer, the
/// command's output sinks and the ticker.
#[derive(Clone)]
pub(crate) struct Progress {
    line: Arc<Mutex<Line>>,
}

struct Line {
    /// Whether something is drawn that the next output must erase first.
    drawn: bool,
    /// The run and when its current command started, while one runs.
    running: Option<(String, Instant)>,
    /// When the command last wrote, and whether that ended a line (a partial
    /// line is never drawn over).
    last_output: Instant,
    at_line_start: bool,
}

impl Progress {
    /// The display, or `None` when stderr is not a terminal (scripts and
    /// harnesses get the summary line only).
    pub(crate) fn on_terminal() -> Option<Self> {
        std::io::stderr().is_terminal().then(|| Self {
            line: Arc::new(Mutex::new(Line {
                drawn: false,
                running: None,
                last_output: Instant::now(),
                at_line_start: true,
            })),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Line> {
        self.line.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lifecycle observer that names each step.
    pub(crate) fn observer(&self) -> TransitionObserver {
        let progress = self.clone();
        Arc::new(move |run_id, state: &State| {
            let mut line = progress.lock();
            // Sealed is where commands run: the next thing is the command.
            line.running =
                (state.name() == StateName::Sealed).then(|| (run_id.to_string(), Instant::now()));
            match step(state.name()) {
                Some(step) => line.draw(&format!("run {run_id}: {step}...")),
                None => line.clear(),
            }
        })
    }

    /// A command of `run_id` runs from now on (in a run already sealed, whose
    /// lifecycle says nothing more).
    pub(crate) fn command_started(&self, run_id: &str) {
        self.lock().running = Some((run_id.to_owned(), Instant::now()));
    }

    /// `sink`, erasing the status line before each write of the command's.
    pub(crate) fn clearing<W>(&self, sink: W) -> Clearing<W> {
        Clearing {
            progress: self.clone(),
            sink,
        }
    }

    /// Redraws `running, N s` every second while a command runs and is quiet;
    /// never returns ([`while_ticking`] drops it when the work ends).
    async fn tick(self) -> Infallible {
        let mut ticks = tokio::time::interval(TICK);
        loop {
            ticks.tick().await;
            let mut line = self.lock();
            let Some((run_id, started)) = line.running.clone() else {
                continue;
            };
            if line.at_line_start && line.last_output.elapsed() >= TICK {
                let secs = started.elapsed().as_secs();
                line.draw(&format!("run {run_id}: running, {secs} s"));
            }
        }
    }
}

/// The command's output passed to this process's stdout and stderr, through
/// the status line when there is one.
pub(crate) fn passing_through(progress: Option<&Progress>) -> CommandIo<'static> {
    let stderr = || LineTracking(tokio::io::stderr());
    match progress {
        Some(p) => CommandIo::passing_to(p.clearing(tokio::io::stdout()), p.clearing(stderr())),
        None => CommandIo::passing_to(tokio::io::stdout(), stderr()),
    }
}

/// Runs `work` with the running time redrawn on the status line, if any.
pub(crate) async fn while_ticking<F: Future>(progress: Option<Progress>, work: F) -> F::Output {
    match progress {
        None => work.await,
        Some(progress) => tokio::select! {
            output = work => output,
            never = progress.tick() => match never {},
        },
    }
}

impl Line {
    fn draw(&mut self, text: &str) {
        // "\r\x1b[K": back to the start of the line and erase it.
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[Kagent-workspace: {text}");
        let _ = stderr.flush();
        self.drawn = true;
    }

    fn clear(&mut self) {
        if std::mem::take(&mut self.drawn) {
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[K");
            let _ = stderr.flush();
        }
    }
}

/// An output sink of the command's that erases the status line first
/// ([`Progress::clearing`]).
pub(crate) struct Clearing<W> {
    progress: Progress,
    sink: W,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Clearing<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        let mut line = this.progress.lock();
        line.clear();
        let written = Pin::new(&mut this.sink).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &written
            && *n > 0
        {
            line.last_output = Instant::now();
            line.at_line_start = buf[..*n].ends_with(b"\n");
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.sink).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.sink).poll_shutdown(cx)
    }
}

/// What the status line says in `state`; `None` clears it (the command's output
/// or the summary comes next).
fn step(state: StateName) -> Option<&'static str> {
    Some(match state {
        StateName::Requested => "requested",
        StateName::Waiting => "waiting for capacity",
        StateName::Provisioning => "checking out",
        StateName::StartingServices => "sealing and probing",
        StateName::Suspended => "suspending",
        StateName::Detached => "detaching (the workspace stays live)",
        StateName::Draining => "stopping",
        StateName::Exporting => "exporting evidence",
        StateName::Exported => "evidence sealed",
        StateName::CleaningUp => "cleaning up",
        StateName::Failed => "failed, exporting evidence",
        StateName::Sealed | StateName::Cleaned => return None,
    })
}
