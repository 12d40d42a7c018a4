//! The files API of a live workspace, through the library, on real runs:
//! each operation done inside the sandbox as its user (what a command sees
//! next is what it wrote), each typed error, every change in `files.jsonl`,
//! a 150 MiB round trip streamed both ways, operations at once from tasks
//! and a joined run. The attacks on it are `tests/files_attacks.rs`.
//!
//! Needs root, user namespaces and cgroups, as every namespace-backend test.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sha2::{Digest, Sha256};
use support::{Fixture, assert_intact, command};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use workspace_core::boundary::{FileError, FileKind, WriteOptions};
use workspace_core::capacity::HostPool;
use workspace_core::evidence::{ExitStatusRecord, FileOp, FileRecord};
use workspace_core::runner::{CommandIo, CreateOptions, ReadOptions, Runner, Workspace};

/// What `argv` printed in the workspace (it must exit 0).
async fn stdout_of(workspace: &Workspace, argv: &[&str]) -> String {
    let outcome = workspace
        .exec(&command(argv, Some(60_000)), CommandIo::captured())
        .await
        .expect("exec");
    let dir = workspace
        .evidence_dir()
        .join("commands")
        .join(format!("{:04}", outcome.seq));
    let stdout = std::fs::read_to_string(dir.join("stdout")).unwrap();
    assert_eq!(
        outcome.exit.status,
        ExitStatusRecord::Code(0),
        "{argv:?}: {stdout} {}",
        std::fs::read_to_string(dir.join("stderr")).unwrap()
    );
    stdout
}

/// The records of `files.jsonl` in the bundle at `dir`.
fn file_records(dir: &std::path::Path) -> Vec<FileRecord> {
    std::fs::read_to_string(dir.join("files.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn sha256_hex(bytes: &[u8]) -> String {
    workspace_core::digest::sha256_hex(bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_acts_inside_as_the_workspace_user_and_each_change_is_recorded() {
    let fx = Fixture::new("files-operations");
    let workspace = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .expect("create");
    let files = workspace.files();

    // Write (parents made), then what a command sees, and whose it is.
    let written = files
        .write(
            "notes/a.txt",
            "first\n",
            WriteOptions::default().with_parents(),
        )
        .await
        .unwrap();
    assert_eq!(written.path, "/workspace/notes/a.txt");
    assert!(written.created);
    assert_eq!(written.sha256, sha256_hex(b"first\n"));
    assert_eq!(
        stdout_of(&workspace, &["cat", "notes/a.txt"]).await,
        "first\n"
    );
    assert_eq!(
        stdout_of(&workspace, &["stat", "-c", "%u:%g %a", "notes/a.txt"]).await,
        format!(
            "{}:{} 644\n",
            stdout_of(&workspace, &["id", "-u"]).await.trim(),
            stdout_of(&workspace, &["id", "-g"]).await.trim()
        )
    );
    // Overwritten in place, a mode given; binary-safe.
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let again = files
        .write(
            "notes/a.txt",
            &binary,
            WriteOptions::default().with_mode(0o600),
        )
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(files.read("notes/a.txt").await.unwrap(), binary);
    assert_eq!(
        files
            .read_range("/workspace/notes/a.txt", 256, 3)
            .await
            .unwrap(),
        [0, 1, 2]
    );
    assert_eq!(
        files.read_range("notes/a.txt", 69_999, 10).await.unwrap(),
        [binary[69_999]]
    );
    let mut streamed = Vec::new();
    let copied = files
        .read_to("notes/a.txt", &mut streamed, ReadOptions::default())
        .await
        .unwrap();
    assert_eq!((copied, streamed == binary), (70_000, true));
    // What a command wrote is what the API reads.
    stdout_of(
        &workspace,
        &["sh", "-c", "printf 'from inside' > inside.txt"],
    )
    .await;
    assert_eq!(files.read("inside.txt").await.unwrap(), b"from inside");

    // Stat and list.
    let info = files.stat("notes/a.txt").await.unwrap();
    assert_eq!(
        (info.kind, info.size, info.mode, info.path.as_str()),
        (FileKind::File, 70_000, 0o600, "/workspace/notes/a.txt")
    );
    assert!(info.mtime_unix_ms > 1_700_000_000_000);
    stdout_of(&workspace, &["ln", "-s", "hello.txt", "link"]).await;
    let link = files.stat("link").await.unwrap();
    assert_eq!(
        (link.kind, link.link_target.as_deref()),
        (FileKind::Symlink, Some("hello.txt"))
    );
    let listed = files.list(".", 2).await.unwrap();
    let paths: Vec<&str> = listed.iter().map(|i| i.path.as_str()).collect();
    for expected in [
        "/workspace/hello.txt",
        "/workspace/link",
        "/workspace/notes",
        "/workspace/notes/a.txt",
        "/workspace/src",
        "/workspace/src/lib.txt",
    ] {
        assert!(paths.contains(&expected), "{expected} in {paths:?}");
    }
    let shallow = files.list("/workspace", 1).await.unwrap();
    assert!(
        shallow
            .iter()
            .all(|i| !i.path.starts_with("/workspace/src/")),
        "{shallow:?}"
    );

    // Mkdir, rename, remove.
    files.mkdir("d/e", true).await.unwrap();
    files.mkdir("d/e", true).await.unwrap();
    files.rename("notes/a.txt", "d/e/b.txt").await.unwrap();
    assert_eq!(files.read("d/e/b.txt").await.unwrap(), binary);
    assert_eq!(
        stdout_of(&workspace, &["sh", "-c", "ls d/e; ls notes | wc -l"]).await,
        "b.txt\n0\n"
    );
    assert!(matches!(
        files.remove("d", false).await,
        Err(FileError::NotEmpty { path }) if path == "/workspace/d"
    ));
    assert_eq!(files.remove("d", true).await.unwrap(), 3);
    assert_eq!(files.remove("link", false).await.unwrap(), 1);
    assert_eq!(
        files.read("hello.txt").await.unwrap(),
        support::HELLO.as_bytes()
    );

    // Another mount of the sandbox: its own /tmp, which the host never sees.
    files
        .write("/tmp/scratch", "in tmp", WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        stdout_of(&workspace, &["cat", "/tmp/scratch"]).await,
        "in tmp"
    );
    // A file to keep: it is in the patch.
    files
        .write("kept.txt", "kept\n", WriteOptions::default())
        .await
        .unwrap();

    // Each typed error names the path.
    let error = |result: Result<Vec<u8>, FileError>| result.unwrap_err();
    assert!(
        matches!(error(files.read("missing").await), FileError::NotFound { path } if path == "/workspace/missing")
    );
    assert!(
        matches!(error(files.read("src").await), FileError::IsADirectory { path } if path == "/workspace/src")
    );
    assert!(matches!(
        files.list("hello.txt", 1).await,
        Err(FileError::NotADirectory { path }) if path == "/workspace/hello.txt"
    ));
    assert!(matches!(
        error(files.read("hello.txt/x").await),
        FileError::NotADirectory { .. }
    ));
    assert!(matches!(
        error(files.read("").await),
        FileError::InvalidPath { .. }
    ));
    assert!(matches!(
        error(files.read("a\0b").await),
        FileError::InvalidPath { .. }
    ));
    assert!(matches!(
        files
            .write("x", "y", WriteOptions::default().with_mode(0o4755))
            .await,
        Err(FileError::InvalidMode { mode: 0o4755, .. })
    ));
    assert!(matches!(
        files
            .write("kept.txt", "z", WriteOptions::default().without_overwrite())
            .await,
        Err(FileError::AlreadyExists { .. })
    ));
    assert!(matches!(
        files.mkdir("src", false).await,
        Err(FileError::AlreadyExists { .. })
    ));
    assert!(matches!(
        files.remove("/", true).await,
        Err(FileError::InvalidPath { .. })
    ));
    // The roots of the workspace's mounts (the workspace itself, `/tmp`) are
    // refused before anything in them goes: emptied first, they would lose
    // all they hold and say only that their own removal failed.
    files
        .write("/tmp/keep.txt", "kept", WriteOptions::default())
        .await
        .unwrap();
    for root in [".", "/workspace", "/tmp"] {
        assert!(
            matches!(
                files.remove(root, true).await,
                Err(FileError::InvalidPath { .. })
            ),
            "{root}"
        );
    }
    assert_eq!(files.read("kept.txt").await.unwrap(), b"kept\n");
    assert_eq!(files.read("/tmp/keep.txt").await.unwrap(), b"kept");
    assert!(
        files.stat(".git").await.is_ok(),
        "the checkout's .git is still there"
    );
    assert!(matches!(
        files.rename("/tmp/scratch", "moved").await,
        Err(FileError::CrossesMounts { from, to }) if from == "/tmp/scratch" && to == "/workspace/moved"
    ));
    let small = ReadOptions::default().with_limit(10);
    assert!(matches!(
        files.read_with("hello.txt", small).await,
        Err(FileError::TooLarge {
            size: Some(27),
            limit: 10,
            ..
        })
    ));

    let evidence = workspace.evidence_dir().to_path_buf();
    let records = file_records(&evidence);
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(
        patch.contains("+++ b/kept.txt") && patch.contains("+kept"),
        "{patch}"
    );
    assert!(!patch.contains("/tmp/scratch"), "{patch}");

    // The record: every change, in order, with what it wrote; no read.
    let ops: Vec<(FileOp, &str, bool)> = records
        .iter()
        .map(|r| (r.op, r.path.as_str(), r.error.is_none()))
        .collect();
    assert_eq!(
        &ops[..9],
        [
            (FileOp::Write, "/workspace/notes/a.txt", true),
            (FileOp::Write, "/workspace/notes/a.txt", true),
            (FileOp::Mkdir, "/workspace/d/e", true),
            (FileOp::Mkdir, "/workspace/d/e", true),
            (FileOp::Rename, "/workspace/notes/a.txt", true),
            (FileOp::Remove, "/workspace/d", false),
            (FileOp::Remove, "/workspace/d", true),
            (FileOp::Remove, "/workspace/link", true),
            (FileOp::Write, "/tmp/scratch", true),
        ]
    );
    assert_eq!(
        records[0].sha256.as_deref(),
        Some(sha256_hex(b"first\n").as_str())
    );
    assert_eq!(
        (records[1].bytes, records[1].mode, records[1].created),
        (Some(70_000), Some(0o600), Some(false))
    );
    assert_eq!(
        records[1].sha256.as_deref(),
        Some(sha256_hex(&binary).as_str())
    );
    assert_eq!(records[4].to.as_deref(), Some("/workspace/d/e/b.txt"));
    assert_eq!(records[5].error.as_ref().unwrap().kind, "not-empty");
    assert_eq!(records[6].removed, Some(3));
    // Refusals are recorded too (a reviewer sees the attempt).
    let refused: Vec<&str> = records[10..]
        .iter()
        .map(|r| r.error.as_ref().map(|e| e.kind.as_str()).unwrap_or("ok"))
        .collect();
    assert_eq!(
        refused,
        [
            "invalid-mode",
            "already-exists",
            "already-exists",
            "invalid-path",
            "ok",
            "invalid-path",
            "invalid-path",
            "invalid-path",
            "crosses-mounts"
        ]
    );
    fx.assert_nothing_left(&report.run_id, &[]);
}

/// `len` bytes of a fixed pseudo-random sequence, made as they are read.
struct Generated {
    left: u64,
    state: u64,
}

impl Generated {
    fn new(len: u64) -> Self {
        Self {
            left: len,
            state: 0x9e37_79b9_7f4a_7c15,
        }
    }
}

impl AsyncRead for Generated {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = buf
            .remaining()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX))
            .min(64 * 1024);
        let mut chunk = vec![0u8; n];
        for byte in &mut chunk {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            *byte = self.state as u8;
        }
        self.left -= n as u64;
        buf.put_slice(&chunk);
        Poll::Ready(Ok(()))
    }
}

/// A sink that keeps only the sha256 and the length of what it is given.
#[derive(Default)]
struct Hashing {
    hash: Sha256,
    len: u64,
}

impl AsyncWrite for Hashing {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.hash.update(buf);
        self.len += buf.len() as u64;
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// This process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_150_mib_file_goes_in_and_out_streamed_and_its_digest_is_recorded() {
    const SIZE: u64 = 150 << 20;
    let fx = Fixture::new("files-large");
    let workspace = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .expect("create");
    let files = workspace.files();
    let mut expected = Hashing::default();
    tokio::io::copy(&mut Generated::new(SIZE), &mut expected)
        .await
        .unwrap();
    let expected = workspace_core::digest::to_hex(&expected.hash.finalize());

    let before = peak_rss();
    let written = files
        .write_from(
            "big.bin",
            &mut Generated::new(SIZE),
            WriteOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        (written.bytes, written.sha256.as_str()),
        (SIZE, expected.as_str())
    );
    let mut sink = Hashing::default();
    let read = files
        .read_to(
            "big.bin",
            &mut sink,
            ReadOptions::default().with_limit(SIZE),
        )
        .await
        .unwrap();
    assert_eq!(read, SIZE);
    assert_eq!(
        workspace_core::digest::to_hex(&sink.hash.finalize()),
        expected
    );
    let grew = peak_rss().saturating_sub(before);
    assert!(
        grew < 64 << 20,
        "the peak memory grew by {grew} bytes for a {SIZE}-byte file"
    );
    // The default limit refuses it whole; inside it is the same file.
    assert!(matches!(
        files.read("big.bin").await,
        Err(FileError::TooLarge {
            size: Some(SIZE),
            ..
        })
    ));
    let inside = stdout_of(&workspace, &["sha256sum", "big.bin"]).await;
    assert!(inside.starts_with(&expected), "{inside}");

    let records = file_records(workspace.evidence_dir());
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].bytes, records[0].sha256.as_deref()),
        (Some(SIZE), Some(expected.as_str()))
    );
    files.remove("big.bin", false).await.unwrap();
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned);
    fx.assert_nothing_left(&report.run_id, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_from_many_tasks_and_a_joined_run_at_once_are_each_recorded_whole() {
    const AT_ONCE: usize = 16;
    let fx = Fixture::new("files-at-once");
    // Admitted by the host-wide pool, as the command line's runs are: its
    // sandbox keeps the capacity, so another process may join it.
    let pool = HostPool::open(fx.runtime.join("capacity"), support::ample());
    let runner = Runner::with_admission(fx.stack(), fx.config(), Arc::new(pool));
    let workspace = Arc::new(
        runner
            .create(fx.contract(), CreateOptions::default())
            .await
            .expect("create"),
    );
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..AT_ONCE {
        let workspace = Arc::clone(&workspace);
        tasks.spawn(async move {
            let content = format!("task {i}\n").repeat(1000 + i);
            let outcome = workspace
                .files()
                .write(
                    &format!("out/{i}.txt"),
                    &content,
                    WriteOptions::default().with_parents(),
                )
                .await
                .unwrap();
            (i, outcome, content)
        });
    }
    // A command runs meanwhile.
    let busy_command = command(
        &[
            "sh",
            "-c",
            "for i in 1 2 3 4 5; do ls out >/dev/null 2>&1; sleep 0.05; done",
        ],
        None,
    );
    let busy = workspace.exec(&busy_command, CommandIo::captured());
    let (ran, joined) = tokio::join!(busy, async {
        let mut all = Vec::new();
        while let Some(done) = tasks.join_next().await {
            all.push(done.unwrap());
        }
        all
    });
    assert_eq!(ran.unwrap().exit.status, ExitStatusRecord::Code(0));
    for (i, outcome, content) in &joined {
        assert_eq!(outcome.sha256, sha256_hex(content.as_bytes()), "task {i}");
    }

    // A joined run (what another process does) writes beside it.
    let workspace = Arc::try_unwrap(workspace).expect("the tasks let go");
    let run_id = workspace.run_id().clone();
    workspace.detach().await.expect("detach");
    let joined_run = runner
        .join(&run_id, CreateOptions::default())
        .await
        .expect("join");
    joined_run
        .files()
        .write("joined.txt", "joined\n", WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        joined_run.files().read("out/3.txt").await.unwrap(),
        "task 3\n".repeat(1003).as_bytes()
    );
    joined_run.leave().await.expect("leave");

    let report = runner.end(&run_id).await.expect("end");
    assert!(report.cleaned);
    assert_intact(&report.evidence);
    let records = file_records(&report.evidence);
    assert_eq!(records.len(), AT_ONCE + 1);
    for (i, outcome, _) in &joined {
        let record = records
            .iter()
            .find(|r| r.path == format!("/workspace/out/{i}.txt"))
            .unwrap_or_else(|| panic!("task {i} recorded"));
        assert_eq!(record.sha256.as_deref(), Some(outcome.sha256.as_str()));
    }
    assert!(
        records
            .iter()
            .any(|r| r.path == "/workspace/joined.txt" && r.error.is_none())
    );
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+++ b/joined.txt") && patch.contains("+++ b/out/15.txt"));
    fx.assert_nothing_left(&report.run_id, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_backend_refuses_the_files_api_by_name_and_the_refusal_is_recorded() {
    let fx = Fixture::new("files-container");
    let runner = support::container::runner(&fx);
    let workspace = support::container::create(&runner, fx.contract()).await;
    let files = workspace.files();
    let read = files.read("hello.txt").await;
    assert!(
        matches!(&read, Err(FileError::Unsupported { backend }) if backend.contains("container")),
        "{read:?}"
    );
    let written = files.write("x", "y", WriteOptions::default()).await;
    assert!(
        matches!(written, Err(FileError::Unsupported { .. })),
        "{written:?}"
    );
    let records = file_records(workspace.evidence_dir());
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].error.as_ref().unwrap().kind, "unsupported");
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned);
}
