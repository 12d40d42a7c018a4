//! One output stream of a command, pumped: scrubbed, passed whole to the
//! caller's sink, kept to the cap in the evidence (and, when the caller asks,
//! in memory for the caller).
//!
//! The cap (`environment.limits.output`, or the command's own) bounds what is
//! kept, never what is passed on: a caller streaming a command's output gets
//! every byte, while the evidence and the returned output keep the head (as it
//! comes) and the tail (at the end) of a stream that passed it, and say how
//! much it carried ([`CappedStream`]). The evidence of a run is then bounded by
//! its caps however much its commands write.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::command_io::OutputSink;
use super::scrub::Scrubber;
use crate::boundary::OutputStream;
use crate::evidence::{CappedStream, HeadTail, StreamTally};

/// What one output stream of a command came to, returned to the caller
/// (scrubbed of credential values, as the evidence is).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CapturedStream {
    /// The bytes kept, exactly as written (no trimming, no decoding): all of
    /// them, or, when `truncated`, the head followed by the tail.
    pub bytes: Vec<u8>,
    /// How many bytes the stream carried.
    pub total_bytes: u64,
    /// What `bytes` holds of a stream that passed the cap: its first
    /// `head_bytes`, then its last `tail_bytes`. `None`: all of it.
    pub truncated: Option<HeadTail>,
}

impl CapturedStream {
    /// The kept bytes from the start of the stream (all of them when it was
    /// not truncated).
    pub fn head(&self) -> &[u8] {
        match self.truncated {
            Some(kept) => &self.bytes[..clamp(kept.head_bytes, self.bytes.len())],
            None => &self.bytes,
        }
    }

    /// The kept bytes that end the stream (empty when it was not truncated:
    /// [`head`](Self::head) is all of it).
    pub fn tail(&self) -> &[u8] {
        match self.truncated {
            Some(kept) => &self.bytes[clamp(kept.head_bytes, self.bytes.len())..],
            None => &[],
        }
    }
}

/// Megabytes of output would drown a failed assertion's message: the first
/// bytes and the counts say enough.
impl std::fmt::Debug for CapturedStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 64;
        let shown = &self.bytes[..self.bytes.len().min(SHOWN)];
        f.debug_struct("CapturedStream")
            .field("bytes", &String::from_utf8_lossy(shown))
            .field("kept_bytes", &self.bytes.len())
            .field("total_bytes", &self.total_bytes)
            .field("truncated", &self.truncated)
            .finish()
    }
}

fn clamp(n: u64, len: usize) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX).min(len)
}

/// A command's output, returned to the caller that asked for it
/// ([`CommandIo::capturing`](super::CommandIo::capturing)); the evidence
/// stays the place of record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapturedOutput {
    /// Its standard output.
    pub stdout: CapturedStream,
    /// Its standard error.
    pub stderr: CapturedStream,
}

/// What [`pump`] does at the end of a stream with the bytes its scrubber holds
/// back (a strict prefix of a credential's value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StreamEnd {
    /// Passes them on: the stream is all there is.
    Flush,
    /// Keeps them out: the output goes on in a file (what background processes
    /// write later), whose rest is scrubbed from where they begin, so a value
    /// cut at the end of the stream is still found whole.
    Hold,
}

/// How one stream is pumped.
pub(super) struct Pump<'a> {
    /// Redacts credential values (its own state: one per stream).
    pub scrubber: Scrubber,
    /// What happens to the bytes held back at the end.
    pub end: StreamEnd,
    /// What is kept of the stream.
    pub cap: HeadTail,
    /// Where every byte is passed on, while it accepts them.
    pub sink: Option<OutputSink<'a>>,
    /// Whether the kept bytes are returned too.
    pub capture: bool,
    /// Cancelled once the stream passed the cap.
    pub overflowed: CancellationToken,
}

/// What a pumped stream came to.
pub(super) struct Pumped {
    /// Bytes of the raw stream taken into the evidence (all it carried, but
    /// what [`StreamEnd::Hold`] held back): where its late output begins.
    pub carried: u64,
    /// What it carried after scrubbing and what the evidence kept.
    pub tally: StreamTally,
    /// The kept bytes, when they were to be returned.
    pub captured: Option<CapturedStream>,
}

/// Copies `stream`, with credential values redacted, to the evidence `file`
/// (kept to the cap) and, while it accepts writes, to the sink (all of it).
/// A sink that fails (a closed pipe) is dropped; the evidence is unaffected.
pub(super) async fn pump(
    mut stream: OutputStream,
    mut file: tokio::fs::File,
    how: Pump<'_>,
) -> std::io::Result<Pumped> {
    let Pump {
        mut scrubber,
        end,
        cap,
        mut sink,
        capture,
        overflowed,
    } = how;
    let mut kept = CappedStream::new(cap);
    let mut head = Vec::new();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut carried = 0u64;
    loop {
        let read = stream.read(&mut buffer).await?;
        carried += read as u64;
        let data = match (read, end) {
            (0, StreamEnd::Flush) => scrubber.finish(),
            (0, StreamEnd::Hold) => {
                carried -= scrubber.finish().len() as u64;
                Vec::new()
            }
            _ => scrubber.feed(&buffer[..read]),
        };
        let to_head = kept.push(&data);
        file.write_all(to_head).await?;
        if capture {
            head.extend_from_slice(to_head);
        }
        if kept.passed() {
            overflowed.cancel();
        }
        if let Some(out) = sink.as_mut()
            && out.write_all(&data).await.is_err()
        {
            sink = None;
        }
        if read == 0 {
            break;
        }
    }
    if let Some(out) = sink.as_mut() {
        let _ = out.flush().await;
    }
    let (tail, tally) = kept.finish();
    file.write_all(&tail).await?;
    // Written through, not synced: the bundle is synced when it is sealed.
    file.flush().await?;
    let captured = capture.then(|| {
        head.extend_from_slice(&tail);
        CapturedStream {
            bytes: head,
            total_bytes: tally.total_bytes,
            truncated: tally.truncated,
        }
    });
    Ok(Pumped {
        carried,
        tally,
        captured,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;
    use crate::boundary::IssuedCredential;

    /// Pumps `input` under `cap`, capturing, into a file and a sink: what the
    /// file, the sink and the capture got.
    async fn pumped(
        input: &'static [u8],
        cap: u64,
        scrubber: Scrubber,
    ) -> (Vec<u8>, Vec<u8>, Pumped) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stdout");
        let file = tokio::fs::File::create(&path).await.unwrap();
        let mut passed = Vec::new();
        let overflowed = CancellationToken::new();
        let result = pump(
            Box::pin(input),
            file,
            Pump {
                scrubber,
                end: StreamEnd::Flush,
                cap: HeadTail::of_cap(cap),
                sink: Some(Box::pin(&mut passed)),
                capture: true,
                overflowed: overflowed.clone(),
            },
        )
        .await
        .unwrap();
        assert_eq!(overflowed.is_cancelled(), result.tally.truncated.is_some());
        (std::fs::read(&path).unwrap(), passed, result)
    }

    #[tokio::test]
    async fn the_sink_gets_everything_the_evidence_and_the_caller_the_head_and_tail() {
        let (file, passed, result) = pumped(b"BEGIN-0123456789-END", 10, Scrubber::default()).await;
        assert_eq!(passed, b"BEGIN-0123456789-END");
        assert_eq!(file, b"BEGIN9-END");
        let captured = result.captured.unwrap();
        assert_eq!(captured.bytes, file);
        assert_eq!(
            (captured.head(), captured.tail()),
            (&b"BEGIN"[..], &b"9-END"[..])
        );
        assert_eq!(captured.total_bytes, 20);
        assert_eq!(result.tally.total_bytes, 20);
        assert_eq!(result.carried, 20);
    }

    #[tokio::test]
    async fn binary_output_without_a_final_newline_comes_back_exactly() {
        let input: &[u8] = b"\x00\xff\x01line one\r\nno newline at the end";
        let (file, _, result) = pumped(input, 1 << 20, Scrubber::default()).await;
        let captured = result.captured.unwrap();
        assert_eq!(captured.bytes, input);
        assert_eq!(captured.head(), input);
        assert!(captured.tail().is_empty());
        assert_eq!(captured.truncated, None);
        assert_eq!(file, input);
    }

    #[tokio::test]
    async fn what_is_kept_and_returned_is_scrubbed() {
        let scrubber = Scrubber::new(&[IssuedCredential::new("TOKEN", "tok-1234567890", 0)]);
        let (file, passed, result) = pumped(b"a tok-1234567890 b", 1 << 20, scrubber).await;
        assert_eq!(file, b"a [redacted:TOKEN] b");
        assert_eq!(passed, file);
        assert_eq!(result.captured.unwrap().bytes, file);
    }
}
