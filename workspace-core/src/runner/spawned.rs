//! A command started to be watched as it runs: its output as a stream of
//! events (a chunk of stdout, a chunk of stderr, ..., how it ended), its input
//! written while it runs, and a kill of its whole tree
//! ([`Workspace::spawn`](super::Workspace::spawn),
//! [`JoinedRun::spawn`](super::JoinedRun::spawn)).
//!
//! It is [`exec`](super::Workspace::exec) with sinks that turn each write into
//! an event: the evidence records the command exactly as for any other, and a
//! consumer that reads slowly holds the command's output back (the channel is
//! bounded) rather than filling memory.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncWrite, DuplexStream};
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, PollSender};

use super::command_io::{CommandIo, OutputSink};
use super::error::RunError;
use super::outcome::CommandOutcome;

/// How many chunks wait for the consumer before the command's output is held
/// back.
const EVENTS_IN_FLIGHT: usize = 64;

/// How much of the command's input is buffered before a write waits for it to
/// read.
const STDIN_BUFFER: usize = 64 * 1024;

/// One thing a spawned command did, in the order it happened on each stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandEvent {
    /// Bytes it wrote to standard output (credential values redacted, as in
    /// the evidence).
    Stdout(Vec<u8>),
    /// Bytes it wrote to standard error (redacted likewise).
    Stderr(Vec<u8>),
    /// How it ended: the last event.
    Exit(Box<CommandOutcome>),
}

/// The command's run, as a future that records it into the evidence.
type Running<'a> = Pin<Box<dyn Future<Output = Result<CommandOutcome, RunError>> + Send + 'a>>;

/// A command running in a workspace, watched as it runs: read its
/// [`next`](Self::next) events until [`CommandEvent::Exit`], write its input
/// with [`stdin`](Self::stdin), end its whole tree with [`kill`](Self::kill).
/// The command runs only while its events are read (as a future runs while
/// awaited); dropping this kills it.
pub struct SpawnedCommand<'a> {
    running: Option<Running<'a>>,
    events: mpsc::Receiver<CommandEvent>,
    stdin: Option<DuplexStream>,
    kill: CancellationToken,
    /// The end, once the run's future gave it, until its output is drained.
    ended: Option<Result<CommandOutcome, RunError>>,
}

impl std::fmt::Debug for SpawnedCommand<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnedCommand")
            .field("running", &self.running.is_some())
            .field("stdin", &self.stdin.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> SpawnedCommand<'a> {
    /// Starts `exec`, given the command's input and output and the token that
    /// kills it, as a command watched by its events.
    pub(super) fn start<F, Fut>(kill: CancellationToken, exec: F) -> Self
    where
        F: FnOnce(CommandIo<'static>) -> Fut,
        Fut: Future<Output = Result<CommandOutcome, RunError>> + Send + 'a,
    {
        let (sender, events) = mpsc::channel(EVENTS_IN_FLIGHT);
        let (stdin, command_stdin) = tokio::io::duplex(STDIN_BUFFER);
        let io = CommandIo {
            stdin: Some(Box::pin(command_stdin)),
            stdout: Some(events_sink(&sender, CommandEvent::Stdout)),
            stderr: Some(events_sink(&sender, CommandEvent::Stderr)),
            ..CommandIo::captured()
        };
        drop(sender);
        Self {
            running: Some(Box::pin(exec(io))),
            events,
            stdin: Some(stdin),
            kill,
            ended: None,
        }
    }

    /// The next event: a chunk of output, or how the command ended (then
    /// `None` after it). An error means the run itself broke (its evidence),
    /// as for [`exec`](super::Workspace::exec).
    pub async fn next(&mut self) -> Option<Result<CommandEvent, RunError>> {
        loop {
            match self.running.as_mut() {
                Some(running) => tokio::select! {
                    // Output first: what the command wrote comes before its end.
                    biased;
                    Some(event) = self.events.recv() => return Some(Ok(event)),
                    ended = running => {
                        self.running = None;
                        self.stdin = None;
                        self.ended = Some(ended);
                    }
                },
                None => {
                    // The sinks are gone with the run's future: what is left
                    // in the channel, then the end.
                    if let Some(event) = self.events.recv().await {
                        return Some(Ok(event));
                    }
                    return self
                        .ended
                        .take()
                        .map(|ended| ended.map(|outcome| CommandEvent::Exit(Box::new(outcome))));
                }
            }
        }
    }

    /// The command's standard input, while it runs and until
    /// [`close_stdin`](Self::close_stdin): writes wait while the command has
    /// not read what is buffered.
    pub fn stdin(&mut self) -> Option<&mut (dyn AsyncWrite + Send + Unpin)> {
        self.stdin
            .as_mut()
            .map(|stdin| stdin as &mut (dyn AsyncWrite + Send + Unpin))
    }

    /// Closes the command's standard input: it reads the end of it.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Kills the command's whole tree (cause `cancelled`); its end is still
    /// the last event.
    pub fn kill(&self) {
        self.kill.cancel();
    }

    /// Reads every event to the end and returns how the command ended, the
    /// output dropped (the evidence keeps it).
    pub async fn wait(mut self) -> Result<CommandOutcome, RunError> {
        self.close_stdin();
        while let Some(event) = self.next().await {
            if let CommandEvent::Exit(outcome) = event? {
                return Ok(*outcome);
            }
        }
        unreachable!("a spawned command's events end with its exit")
    }
}

impl Drop for SpawnedCommand<'_> {
    fn drop(&mut self) {
        // The run's future ends with this: its command must not outlive it
        // unrecorded.
        if self.running.is_some() {
            self.kill.cancel();
        }
    }
}

/// A sink that sends each write as an event `wrap` makes.
fn events_sink(
    sender: &mpsc::Sender<CommandEvent>,
    wrap: fn(Vec<u8>) -> CommandEvent,
) -> OutputSink<'static> {
    Box::pin(EventSink {
        sender: PollSender::new(sender.clone()),
        wrap,
    })
}

/// An [`AsyncWrite`] over the events channel: a write waits for room in it.
struct EventSink {
    sender: PollSender<CommandEvent>,
    wrap: fn(Vec<u8>) -> CommandEvent,
}

impl AsyncWrite for EventSink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let closed = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        match self.sender.poll_reserve(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => Poll::Ready(Err(closed())),
            Poll::Ready(Ok(())) => {
                let event = (self.wrap)(buf.to_vec());
                match self.sender.send_item(event) {
                    Ok(()) => Poll::Ready(Ok(buf.len())),
                    Err(_) => Poll::Ready(Err(closed())),
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.sender.close();
        Poll::Ready(Ok(()))
    }
}
