//! Whether this process's standard error stands at the start of a line, so
//! that a line of the CLI's own (a command's summary) never glues onto the end
//! of a command's last line written without a newline.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// `false` once a command's stderr ended a write without a newline.
static AT_LINE_START: AtomicBool = AtomicBool::new(true);

/// A writer that notes whether what it last wrote ended a line.
pub(crate) struct LineTracking<W>(pub(crate) W);

impl<W: AsyncWrite + Unpin> AsyncWrite for LineTracking<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let written = Pin::new(&mut self.0).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written
            && let Some(last) = buf[..n].last()
        {
            AT_LINE_START.store(*last == b'\n', Ordering::Relaxed);
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// Prints `line` on stderr on a line of its own: after a newline when the
/// command's output left stderr in the middle of one.
pub(crate) fn eprint_own_line(line: &str) {
    if QUIET.load(Ordering::Relaxed) {
        return;
    }
    eprint_own_line_always(line);
}

/// [`eprint_own_line`] even under `--quiet`: a JSON answer asked for with
/// `--json`.
pub(crate) fn eprint_own_line_always(line: &str) {
    if AT_LINE_START.swap(true, Ordering::Relaxed) {
        eprintln!("{line}");
    } else {
        eprintln!("\n{line}");
    }
}

/// `--quiet`: no summary lines (what went wrong is still said).
static QUIET: AtomicBool = AtomicBool::new(false);

/// Turns the summary lines off for this process.
pub(crate) fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}
