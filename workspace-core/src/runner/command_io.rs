//! [`CommandIo`]: what a caller gives a command besides its spec (input, sinks
//! for its output, whether its output comes back, a cap of its own).

use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A writable sink for a command's output; it may borrow from the caller
/// (`&mut Vec<u8>`, a buffer of its own) for as long as the command runs.
pub type OutputSink<'a> = Pin<Box<dyn AsyncWrite + Send + 'a>>;

/// Where a command's input comes from, where its output goes besides the
/// evidence (which always records it, to the output cap), and whether it is
/// returned in the [`CommandOutcome`](super::CommandOutcome).
#[derive(Default)]
pub struct CommandIo<'a> {
    /// Bytes fed to the command's standard input; `None` closes it at once.
    pub stdin: Option<Pin<Box<dyn AsyncRead + Send + 'a>>>,
    /// A copy of standard output (e.g. the host's stdout), every byte of it
    /// however much the evidence keeps; `None`: evidence only.
    pub stdout: Option<OutputSink<'a>>,
    /// A copy of standard error; `None`: evidence only.
    pub stderr: Option<OutputSink<'a>>,
    /// Whether the output comes back in
    /// [`CommandOutcome::output`](super::CommandOutcome::output), kept to the
    /// cap as the evidence keeps it.
    pub capture: bool,
    /// The most of each stream kept for this command, in bytes, over the
    /// contract's `environment.limits.output`.
    pub output_limit: Option<u64>,
}

impl std::fmt::Debug for CommandIo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandIo")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("capture", &self.capture)
            .field("output_limit", &self.output_limit)
            .finish()
    }
}

impl<'a> CommandIo<'a> {
    /// Output kept in the evidence only (to the cap), no input.
    pub fn captured() -> Self {
        Self::default()
    }

    /// Output kept in the evidence and returned in
    /// [`CommandOutcome::output`](super::CommandOutcome::output) (stdout and
    /// stderr apart, byte for byte, to the cap), no input.
    pub fn capturing() -> Self {
        Self {
            capture: true,
            ..Self::default()
        }
    }

    /// Output kept in the evidence and also passed, all of it, to `stdout`
    /// and `stderr`, which may be borrowed (`&mut Vec<u8>`).
    pub fn passing_to(
        stdout: impl AsyncWrite + Send + 'a,
        stderr: impl AsyncWrite + Send + 'a,
    ) -> Self {
        Self {
            stdout: Some(Box::pin(stdout)),
            stderr: Some(Box::pin(stderr)),
            ..Self::default()
        }
    }

    /// The same, with the most of each stream kept (in the evidence and
    /// returned) set to `bytes` for this command.
    pub fn with_output_limit(mut self, bytes: u64) -> Self {
        self.output_limit = Some(bytes);
        self
    }
}
