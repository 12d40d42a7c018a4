//! A stream kept to a cap: its first and its last bytes, and how many it
//! carried.
//!
//! A command may write gigabytes (a test suite in a loop, `yes`); what a
//! reviewer (and a model reading a tool call's result) needs is how it began
//! and how it ended. So a stream is kept whole up to its cap, and past it the
//! first half of the cap (the head, written as it comes) and the last half
//! (the tail, held in memory until the stream ends), with the count of every
//! byte it carried. The head and the tail are then one file, head first:
//! what was dropped lay between them, at offset `head_bytes`.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// The first `head_bytes` and the last `tail_bytes` of a stream: what a cap
/// keeps, and what was kept of a stream that passed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadTail {
    /// Bytes from the start of the stream.
    pub head_bytes: u64,
    /// Bytes from its end.
    pub tail_bytes: u64,
}

impl HeadTail {
    /// A cap of `cap` bytes split in two: the head gets the larger half.
    pub fn of_cap(cap: u64) -> Self {
        let tail_bytes = cap / 2;
        Self {
            head_bytes: cap - tail_bytes,
            tail_bytes,
        }
    }

    /// The cap: both parts together.
    pub fn cap(&self) -> u64 {
        self.head_bytes.saturating_add(self.tail_bytes)
    }

    /// How many bytes a stream of `total` bytes lost between head and tail.
    pub fn dropped_of(&self, total: u64) -> u64 {
        total.saturating_sub(self.cap())
    }
}

/// What one output stream carried and what of it was kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamTally {
    /// Every byte it carried.
    pub total_bytes: u64,
    /// What was kept, when it passed its cap; `None`: all of it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<HeadTail>,
}

/// What a command's two streams carried: the runner's count, recorded in
/// `command.json` (see [`CommandEnd::output`](super::CommandEnd::output)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputTally {
    /// Standard output.
    pub stdout: StreamTally,
    /// Standard error.
    pub stderr: StreamTally,
}

/// Splits a stream into the part kept as it comes (the head) and the part
/// held until it ends (the tail, at most the cap's tail, dropping from its
/// front). Does no I/O: the caller writes the head where it goes and the
/// tail after it.
#[derive(Debug)]
pub struct CappedStream {
    cap: HeadTail,
    total: u64,
    tail: VecDeque<u8>,
}

impl CappedStream {
    /// A stream kept to `cap`.
    pub fn new(cap: HeadTail) -> Self {
        Self {
            cap,
            total: 0,
            tail: VecDeque::new(),
        }
    }

    /// Takes the next `chunk`; returns the part of it that belongs to the
    /// head (to be kept at once, in order). The rest goes to the tail.
    pub fn push<'c>(&mut self, chunk: &'c [u8]) -> &'c [u8] {
        let room = self.cap.head_bytes.saturating_sub(self.total);
        let split = usize::try_from(room).unwrap_or(usize::MAX).min(chunk.len());
        self.total = self.total.saturating_add(chunk.len() as u64);
        let (head, rest) = chunk.split_at(split);
        let limit = usize::try_from(self.cap.tail_bytes).unwrap_or(usize::MAX);
        // Only the chunk's last `limit` bytes can stay.
        let rest = &rest[rest.len().saturating_sub(limit)..];
        let over = (self.tail.len() + rest.len()).saturating_sub(limit);
        self.tail.drain(..over.min(self.tail.len()));
        self.tail.extend(rest);
        head
    }

    /// Every byte pushed so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether more than the cap was pushed (something is dropped).
    pub fn passed(&self) -> bool {
        self.total > self.cap.cap()
    }

    /// The tail (to be kept after the head) and the tally.
    pub fn finish(self) -> (Vec<u8>, StreamTally) {
        let truncated = (self.total > self.cap.cap()).then_some(self.cap);
        let tally = StreamTally {
            total_bytes: self.total,
            truncated,
        };
        (Vec::from(self.tail), tally)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a stream of `chunks` keeps under `cap`: head, then tail.
    fn kept(cap: u64, chunks: &[&[u8]]) -> (Vec<u8>, StreamTally) {
        let mut stream = CappedStream::new(HeadTail::of_cap(cap));
        let mut kept = Vec::new();
        for chunk in chunks {
            kept.extend_from_slice(stream.push(chunk));
        }
        let (tail, tally) = stream.finish();
        kept.extend(tail);
        (kept, tally)
    }

    #[test]
    fn up_to_the_cap_everything_is_kept_in_order() {
        let (bytes, tally) = kept(10, &[b"abc", b"defg", b"hij"]);
        assert_eq!(bytes, b"abcdefghij");
        assert_eq!(
            tally,
            StreamTally {
                total_bytes: 10,
                truncated: None
            }
        );
    }

    #[test]
    fn past_the_cap_the_head_and_the_tail_are_kept_and_everything_counted() {
        let (bytes, tally) = kept(6, &[b"abcd", b"efghij", b"k", b"lmno"]);
        assert_eq!(bytes, b"abcmno");
        assert_eq!(tally.total_bytes, 15);
        let kept = tally.truncated.unwrap_or_default();
        assert_eq!((kept.head_bytes, kept.tail_bytes), (3, 3));
        assert_eq!(kept.dropped_of(tally.total_bytes), 9);
    }

    #[test]
    fn a_chunk_larger_than_the_whole_cap_keeps_its_own_end() {
        let (bytes, tally) = kept(5, &[b"0123456789abcdef"]);
        assert_eq!(bytes, b"012ef");
        assert_eq!(tally.total_bytes, 16);
    }

    #[test]
    fn an_odd_cap_gives_the_head_the_larger_half() {
        assert_eq!(
            HeadTail::of_cap(7),
            HeadTail {
                head_bytes: 4,
                tail_bytes: 3
            }
        );
        let (bytes, _) = kept(1, &[b"xy"]);
        assert_eq!(bytes, b"x");
    }
}
