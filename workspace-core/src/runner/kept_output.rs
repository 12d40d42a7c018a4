//! Reading an output file of the run that its keeper holds to a bound
//! ([`CommandOutput::bound`](crate::boundary::CommandOutput::bound)): only the
//! parts it keeps.
//!
//! A keeper releases what lies between the head and the tail of what it was
//! given once it has been passed (the file keeps its size, the middle reads as
//! zeros), so the file never holds more than the bound however much a process
//! writes. Its first `head_bytes` from where its part begins and its last
//! `tail_bytes` are always there; nothing else is read.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::evidence::HeadTail;

/// The kept parts of one output file from an offset on.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct KeptRead {
    /// From the offset on: all of it, or the first `head_bytes` of it.
    pub head: Vec<u8>,
    /// Its last `tail_bytes`, when it passed the bound (else empty).
    pub tail: Vec<u8>,
    /// How many bytes there are from the offset to the end.
    pub total: u64,
    /// What was kept, when it passed the bound.
    pub truncated: Option<HeadTail>,
}

/// The kept parts of `path` after `offset`, held to `bound`. A file that is
/// missing (a backend that keeps none) or shorter than `offset` (the command
/// cut its own output) has none.
pub(super) fn read_kept(path: &Path, offset: u64, bound: HeadTail) -> std::io::Result<KeptRead> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(KeptRead::default()),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    let total = size.saturating_sub(offset);
    if total == 0 {
        return Ok(KeptRead::default());
    }
    let passed = total > bound.cap();
    let head_len = if passed { bound.head_bytes } else { total };
    let head = read_at(&mut file, offset, head_len)?;
    let tail = if passed {
        read_at(&mut file, size - bound.tail_bytes, bound.tail_bytes)?
    } else {
        Vec::new()
    };
    Ok(KeptRead {
        head,
        tail,
        total,
        truncated: passed.then_some(bound),
    })
}

/// Up to `len` bytes of `file` from `offset`.
fn read_at(file: &mut std::fs::File, offset: u64, len: u64) -> std::io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 20));
    file.take(len).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;

    #[test]
    fn a_part_within_the_bound_is_read_whole_from_the_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, b"streamed|late part").unwrap();
        let read = read_kept(&path, 9, HeadTail::of_cap(100)).unwrap();
        assert_eq!(read.head, b"late part");
        assert!(read.tail.is_empty());
        assert_eq!((read.total, read.truncated), (9, None));
    }

    #[test]
    fn past_the_bound_only_the_head_and_the_tail_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        // What a keeper leaves: head, a released middle (zeros), tail.
        std::fs::write(&path, b"xxHEAD\0\0\0\0\0\0TAIL").unwrap();
        let bound = HeadTail {
            head_bytes: 4,
            tail_bytes: 4,
        };
        let read = read_kept(&path, 2, bound).unwrap();
        assert_eq!(
            (&read.head[..], &read.tail[..]),
            (&b"HEAD"[..], &b"TAIL"[..])
        );
        assert_eq!((read.total, read.truncated), (14, Some(bound)));
    }

    #[test]
    fn a_missing_or_short_file_has_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let bound = HeadTail::of_cap(10);
        assert_eq!(
            read_kept(&dir.path().join("none"), 0, bound).unwrap(),
            KeptRead::default()
        );
        let path = dir.path().join("short");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(read_kept(&path, 5, bound).unwrap(), KeptRead::default());
    }
}
