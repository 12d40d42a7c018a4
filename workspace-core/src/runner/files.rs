//! [`Files`]: a live workspace's files, read and written inside its boundary,
//! each change recorded in the evidence (`files.jsonl`).
//!
//! The process boundary does the work ([`ProcessBoundary::files`]): as the
//! run's user, through the sandbox's own mounts, a link never followed out of
//! it. This handle makes relative paths the workspace root's, enforces the
//! size limits of reads, streams both ways (a 1 GiB file never sits in
//! memory), hashes what it writes, and appends one record per change.
//! Reads are not recorded. Several operations run at once, from several
//! tasks and processes, as commands do.

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::scrub::Scrubber;
use crate::boundary::{
    DEFAULT_LIST_LIMIT, DEFAULT_READ_LIMIT, FileAccess, FileError, FileInfo, ProcessBoundary,
    ReadFile, RunContext, WriteOptions, inside_path, valid_mode,
};
use crate::evidence::{EvidenceWriter, FileOp, FileRecord, FileRecordError};
use crate::lifecycle::StateName;

/// How much is copied at a time between a caller's stream and a file.
const CHUNK: usize = 256 * 1024;

/// What a read returns, and how much it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// Where to start, in bytes from the file's start.
    pub offset: u64,
    /// How many bytes at most; `None`: to the end of the file.
    pub length: Option<u64>,
    /// The most the read returns: a larger file (or range) is refused with
    /// [`FileError::TooLarge`] before anything is read when its size says
    /// so, and as soon as it passes the limit when it grows while it is read
    /// (a file whose size says nothing, a file being written).
    pub limit: u64,
}

impl Default for ReadOptions {
    /// The whole file, up to [`DEFAULT_READ_LIMIT`] (100 MiB).
    fn default() -> Self {
        Self {
            offset: 0,
            length: None,
            limit: DEFAULT_READ_LIMIT,
        }
    }
}

impl ReadOptions {
    /// `length` bytes from `offset` (fewer at the file's end).
    pub fn range(offset: u64, length: u64) -> Self {
        Self {
            offset,
            length: Some(length),
            ..Self::default()
        }
    }

    /// With the limit `limit` instead of 100 MiB.
    pub fn with_limit(mut self, limit: u64) -> Self {
        self.limit = limit;
        self
    }
}

/// What a write did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriteOutcome {
    /// The file, absolute inside the sandbox.
    pub path: String,
    /// How many bytes were written.
    pub bytes: u64,
    /// Their sha256 (lowercase hex).
    pub sha256: String,
    /// Whether the write made the file.
    pub created: bool,
}

/// The files of a live workspace (from
/// [`Workspace::files`](super::Workspace::files) or
/// [`JoinedRun::files`](super::JoinedRun::files)): read and written inside
/// the sandbox by the process boundary, reads limited, both ways streamed,
/// each change recorded in `files.jsonl`. Paths are relative to the
/// workspace root, or absolute inside the sandbox.
#[derive(Debug)]
pub struct Files<'a> {
    process: &'a dyn ProcessBoundary,
    run: &'a RunContext,
    evidence: &'a EvidenceWriter,
    scrubber: &'a Scrubber,
    /// The run's state when it is not live.
    not_sealed: Option<StateName>,
}

impl<'a> Files<'a> {
    /// The files of `run`, reached through `process`, each change recorded
    /// in `evidence` with credential values redacted from its paths.
    pub(super) fn new(
        process: &'a dyn ProcessBoundary,
        run: &'a RunContext,
        evidence: &'a EvidenceWriter,
        scrubber: &'a Scrubber,
        not_sealed: Option<StateName>,
    ) -> Self {
        Self {
            process,
            run,
            evidence,
            scrubber,
            not_sealed,
        }
    }

    /// The whole file at `path`, up to 100 MiB ([`DEFAULT_READ_LIMIT`]).
    pub async fn read(&self, path: &str) -> Result<Vec<u8>, FileError> {
        self.read_with(path, ReadOptions::default()).await
    }

    /// `length` bytes of the file at `path` from `offset` (fewer at its end).
    pub async fn read_range(
        &self,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, FileError> {
        self.read_with(path, ReadOptions::range(offset, length))
            .await
    }

    /// What `options` ask of the file at `path`, in memory.
    pub async fn read_with(&self, path: &str, options: ReadOptions) -> Result<Vec<u8>, FileError> {
        let mut bytes = Vec::new();
        self.read_to(path, &mut bytes, options).await?;
        Ok(bytes)
    }

    /// Streams what `options` ask of the file at `path` into `sink`
    /// (nothing is held but one chunk); returns how many bytes it wrote.
    /// A sink that fails is [`FileError::Caller`].
    pub async fn read_to<W: AsyncWrite + Unpin + Send + ?Sized>(
        &self,
        path: &str,
        sink: &mut W,
        options: ReadOptions,
    ) -> Result<u64, FileError> {
        let (access, path) = self.reach(path)?;
        let opened = access.open_read(&path, options.offset).await?;
        copy_limited(opened, &path, sink, options).await
    }

    /// Writes `bytes` to the file at `path` (see [`write_from`](Self::write_from)).
    pub async fn write(
        &self,
        path: &str,
        bytes: impl AsRef<[u8]>,
        options: WriteOptions,
    ) -> Result<WriteOutcome, FileError> {
        let mut bytes = bytes.as_ref();
        self.write_from(path, &mut bytes, options).await
    }

    /// Writes everything `source` gives to the file at `path`, as the run's
    /// user: an existing file is emptied first and keeps its inode, owner and
    /// mode (unless `options.mode`), a new one is made (`0o644` unless
    /// `options.mode`). Streamed: nothing is held but one chunk. Recorded in
    /// `files.jsonl` with its size and sha256, also when it failed part way
    /// (then the file holds what was written before).
    pub async fn write_from<R: AsyncRead + Unpin + Send + ?Sized>(
        &self,
        path: &str,
        source: &mut R,
        options: WriteOptions,
    ) -> Result<WriteOutcome, FileError> {
        let mut record = FileRecord::now(FileOp::Write, self.redacted(path));
        record.mode = options.mode;
        let result = match self.write_unrecorded(path, source, &options).await {
            Ok(outcome) => {
                record.bytes = Some(outcome.bytes);
                record.sha256 = Some(outcome.sha256.clone());
                record.created = Some(outcome.created);
                Ok(outcome)
            }
            Err((error, partial)) => {
                // Opened (emptied or made), then failed: the file changed.
                if let Some((bytes, created)) = partial {
                    record.bytes = Some(bytes);
                    record.created = Some(created);
                }
                Err(error)
            }
        };
        self.finish_record(record, result)
    }

    async fn write_unrecorded<R: AsyncRead + Unpin + Send + ?Sized>(
        &self,
        path: &str,
        source: &mut R,
        options: &WriteOptions,
    ) -> Result<WriteOutcome, (FileError, Option<(u64, bool)>)> {
        let (access, path) = self.reach(path).map_err(|e| (e, None))?;
        if let Some(mode) = options.mode
            && !valid_mode(mode)
        {
            return Err((FileError::InvalidMode { path, mode }, None));
        }
        let opened = access
            .open_write(&path, options)
            .await
            .map_err(|e| (e, None))?;
        let created = opened.created;
        let mut sink = opened.content;
        let mut hash = Sha256::new();
        let mut bytes = 0u64;
        let mut buffer = vec![0u8; CHUNK];
        let partial = |bytes| Some((bytes, created));
        loop {
            let read = match source.read(&mut buffer).await {
                Ok(0) => break,
                Ok(read) => read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    let _ = sink.shutdown().await;
                    let error = FileError::Caller {
                        path: path.clone(),
                        source,
                    };
                    return Err((error, partial(bytes)));
                }
            };
            let chunk = &buffer[..read];
            if let Err(e) = sink.write_all(chunk).await {
                let _ = sink.shutdown().await;
                return Err((FileError::from_io("write", &path, e), partial(bytes)));
            }
            hash.update(chunk);
            bytes += read as u64;
        }
        if let Err(e) = sink.shutdown().await {
            return Err((FileError::from_io("write", &path, e), partial(bytes)));
        }
        Ok(WriteOutcome {
            path,
            bytes,
            sha256: crate::digest::to_hex(&hash.finalize()),
            created,
        })
    }

    /// The entries of the directory at `path` (a link to one followed), down
    /// to `depth` levels (1: its own entries; 0 is taken as 1), links listed
    /// and never followed, sorted by path. More than [`DEFAULT_LIST_LIMIT`]
    /// entries is [`FileError::TooManyEntries`].
    pub async fn list(&self, path: &str, depth: u32) -> Result<Vec<FileInfo>, FileError> {
        let (access, path) = self.reach(path)?;
        access.list(&path, depth.max(1), DEFAULT_LIST_LIMIT).await
    }

    /// What is at `path`, a link not followed (its target in
    /// [`FileInfo::link_target`]).
    pub async fn stat(&self, path: &str) -> Result<FileInfo, FileError> {
        let (access, path) = self.reach(path)?;
        access.stat(&path).await
    }

    /// Removes what is at `path` (a link itself, never its target); a
    /// directory and everything in it when `recursive`, else only an empty
    /// one. Returns how many entries were removed. Recorded.
    pub async fn remove(&self, path: &str, recursive: bool) -> Result<u64, FileError> {
        let mut record = FileRecord::now(FileOp::Remove, self.redacted(path));
        record.recursive = Some(recursive);
        let result = match self.reach(path) {
            Ok((access, path)) => access.remove(&path, recursive).await,
            Err(error) => Err(error),
        };
        if let Ok(removed) = &result {
            record.removed = Some(*removed);
        }
        self.finish_record(record, result)
    }

    /// Makes the directory `path`, and the missing ones above it when
    /// `parents` (then one that exists is no error, as `mkdir -p`).
    /// Recorded.
    pub async fn mkdir(&self, path: &str, parents: bool) -> Result<(), FileError> {
        let mut record = FileRecord::now(FileOp::Mkdir, self.redacted(path));
        record.recursive = Some(parents);
        let result = match self.reach(path) {
            Ok((access, path)) => access.mkdir(&path, parents).await,
            Err(error) => Err(error),
        };
        self.finish_record(record, result)
    }

    /// Renames `from` to `to` (a link itself, not its target), replacing a
    /// file or an empty directory at `to`, as `rename(2)`; across mounts of
    /// the sandbox it is [`FileError::CrossesMounts`]. Recorded.
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), FileError> {
        let mut record = FileRecord::now(FileOp::Rename, self.redacted(from));
        record.to = Some(self.redacted(to));
        let result = match (self.reach(from), self.inside(to)) {
            (Ok((access, from)), Ok(to)) => access.rename(&from, &to).await,
            (Err(error), _) | (_, Err(error)) => Err(error),
        };
        self.finish_record(record, result)
    }

    /// The boundary's access to the run's files and `path` absolute inside.
    fn reach(&self, path: &str) -> Result<(Box<dyn FileAccess>, String), FileError> {
        let path = self.inside(path)?;
        if let Some(state) = self.not_sealed {
            return Err(FileError::NotSealed { state });
        }
        Ok((self.process.files(self.run)?, path))
    }

    /// `path` absolute inside the sandbox, as the operations name it (a
    /// relative one under the workspace root; see
    /// [`inside_path`](crate::boundary::inside_path)).
    pub fn inside(&self, path: &str) -> Result<String, FileError> {
        inside_path(&self.run.contract.filesystem.root, path)
    }

    /// `path` as recorded: absolute where it can be, redacted of the run's
    /// credential values (a name may spell one).
    fn redacted(&self, path: &str) -> String {
        let path = self.inside(path).unwrap_or_else(|_| path.to_owned());
        self.scrubber.redact(&path)
    }

    /// Appends `record` (with `result`'s error, when it failed) and returns
    /// `result`; a change the evidence refused is [`FileError::Record`].
    /// A refusal is recorded too, though it changed nothing: a reviewer sees
    /// what was attempted (a write to `/usr`, through `/proc/1/root`).
    fn finish_record<T>(
        &self,
        mut record: FileRecord,
        result: Result<T, FileError>,
    ) -> Result<T, FileError> {
        record.time_unix_ms = crate::clock::unix_ms_now();
        if let Err(error) = &result {
            record.error = Some(FileRecordError {
                kind: error.kind().to_owned(),
                message: self.scrubber.redact(&crate::error_chain(error)),
            });
        }
        let path = record.path.clone();
        match (self.evidence.append_file_record(&record), result) {
            (Ok(()), result) => result,
            // The operation's own error says more than its record's.
            (Err(_), Err(error)) => Err(error),
            (Err(source), Ok(_)) => Err(FileError::Record { path, source }),
        }
    }
}

/// Copies what `options` ask of `opened` into `sink`, refusing more than
/// `options.limit` bytes: by the size it had when opened, before anything is
/// read, and by what is read.
async fn copy_limited<W: AsyncWrite + Unpin + Send + ?Sized>(
    opened: ReadFile,
    path: &str,
    sink: &mut W,
    options: ReadOptions,
) -> Result<u64, FileError> {
    let ReadFile { info, mut content } = opened;
    let remaining = info.size.saturating_sub(options.offset);
    let wanted = options
        .length
        .map_or(remaining, |length| length.min(remaining));
    if wanted > options.limit {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            size: Some(wanted),
            limit: options.limit,
        });
    }
    // What may still be read: the range's end, and one byte past the limit
    // (to tell a file that grew).
    let mut left = options
        .length
        .unwrap_or(u64::MAX)
        .min(options.limit.saturating_add(1));
    let mut buffer = vec![0u8; CHUNK];
    let mut copied = 0u64;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(CHUNK);
        let read = match content.read(&mut buffer[..want]).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(FileError::from_io("read", path, e)),
        };
        if copied + read as u64 > options.limit {
            return Err(FileError::TooLarge {
                path: path.to_owned(),
                size: None,
                limit: options.limit,
            });
        }
        sink.write_all(&buffer[..read])
            .await
            .map_err(|source| FileError::Caller {
                path: path.to_owned(),
                source,
            })?;
        copied += read as u64;
        left -= read as u64;
    }
    sink.flush().await.map_err(|source| FileError::Caller {
        path: path.to_owned(),
        source,
    })?;
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boundary::{FileInfo, FileKind};

    /// How long a test waits for a read that must not block.
    const NO_HANG: std::time::Duration = std::time::Duration::from_secs(5);

    fn opened(size: u64, content: Vec<u8>) -> ReadFile {
        ReadFile {
            info: FileInfo {
                path: "/w/f".into(),
                kind: FileKind::File,
                size,
                mode: 0o644,
                mtime_unix_ms: 0,
                link_target: None,
            },
            content: Box::pin(std::io::Cursor::new(content)),
        }
    }

    async fn copy(file: ReadFile, options: ReadOptions) -> Result<Vec<u8>, FileError> {
        let mut out = Vec::new();
        tokio::time::timeout(NO_HANG, copy_limited(file, "/w/f", &mut out, options))
            .await
            .expect("the copy does not hang")?;
        Ok(out)
    }

    #[tokio::test]
    async fn a_file_larger_than_the_limit_is_refused_by_its_size_before_it_is_read() {
        // A sparse file: its size says 1 TiB, nothing is read.
        let refused = copy(opened(1 << 40, Vec::new()), ReadOptions::default()).await;
        assert!(
            matches!(refused, Err(FileError::TooLarge { size: Some(s), limit, .. }) if s == 1 << 40 && limit == DEFAULT_READ_LIMIT),
            "{refused:?}"
        );
        // A range inside it is within the limit.
        let range = copy(opened(1 << 40, b"abc".to_vec()), ReadOptions::range(0, 3)).await;
        assert_eq!(range.unwrap(), b"abc");
    }

    #[tokio::test]
    async fn a_file_that_grows_past_the_limit_while_read_is_refused_as_soon_as_it_passes() {
        // A size of 0 that says nothing (procfs), and 10 bytes behind it.
        let options = ReadOptions::default().with_limit(4);
        let refused = copy(opened(0, b"0123456789".to_vec()), options).await;
        assert!(
            matches!(
                refused,
                Err(FileError::TooLarge {
                    size: None,
                    limit: 4,
                    ..
                })
            ),
            "{refused:?}"
        );
        let exact = copy(opened(0, b"0123".to_vec()), options).await;
        assert_eq!(exact.unwrap(), b"0123");
    }

    #[tokio::test]
    async fn a_range_reads_its_bytes_only_and_stops_at_the_end() {
        let mut file = opened(10, b"3456789".to_vec());
        file.info.size = 10;
        let got = copy(
            file,
            ReadOptions {
                offset: 3,
                length: Some(4),
                limit: 4,
            },
        )
        .await;
        assert_eq!(got.unwrap(), b"3456");
        let past = copy(opened(10, Vec::new()), ReadOptions::range(20, 5)).await;
        assert_eq!(past.unwrap(), b"");
    }
}
