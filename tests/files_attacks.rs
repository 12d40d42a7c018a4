//! Attacks on a live workspace's files API, each on a real run, each with a
//! positive control (the allowed access works in the same run) and the host
//! checked unchanged afterwards (every file of a host directory the attacks
//! aim at: bytes, mode, owner, mtime, link count). The API acts from the
//! host, with host root's rights in its process: what keeps it inside is
//! that it resolves every path in the sandbox's root (`RESOLVE_IN_ROOT`),
//! refuses `/proc` magic links, and acts as the run's user with no
//! capability (see `backend-namespace/src/files`).
//!
//! Needs root, user namespaces and cgroups, as every namespace-backend test.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::{Fixture, command, marker};
use workspace_core::boundary::{FileError, FileKind, WriteOptions};
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::runner::{CommandIo, CreateOptions, Files, ReadOptions, Workspace};

/// How long an operation may take before it counts as hung.
const NO_HANG: Duration = Duration::from_secs(10);

/// A host directory the attacks aim at: `secret` (0644, readable by anyone on
/// the host) in a 0755 directory, the directory's path.
fn host_target(fx: &Fixture) -> PathBuf {
    let dir = fx.base.path().join("host");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("secret"), "host secret\n").unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("secret"), std::fs::Permissions::from_mode(0o644)).unwrap();
    dir
}

/// What a snapshot keeps of an entry: its bytes (a file's), mode, owner,
/// mtime (seconds, nanoseconds) and link count.
type Entry = (Vec<u8>, u32, u32, i64, i64, u64);

/// Every entry under `dir`.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut out = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let bytes = if meta.is_file() {
            std::fs::read(&path).unwrap()
        } else {
            Vec::new()
        };
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
        out.insert(
            path,
            (
                bytes,
                meta.mode(),
                meta.uid(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.nlink(),
            ),
        );
    }
    out
}

/// Runs `argv` in the workspace; it must exit 0.
async fn run(workspace: &Workspace, argv: &[&str]) {
    let outcome = workspace
        .exec(&command(argv, Some(60_000)), CommandIo::captured())
        .await
        .expect("exec");
    assert_eq!(outcome.exit.status, ExitStatusRecord::Code(0), "{argv:?}");
}

/// The exit status of `script` in the workspace.
async fn status(workspace: &Workspace, script: &str) -> ExitStatusRecord {
    workspace
        .exec(
            &command(&["sh", "-c", script], Some(60_000)),
            CommandIo::captured(),
        )
        .await
        .expect("exec")
        .exit
        .status
}

/// A read of `path` that must not hang.
async fn read(files: &Files<'_>, path: &str) -> Result<Vec<u8>, FileError> {
    tokio::time::timeout(NO_HANG, files.read(path))
        .await
        .unwrap_or_else(|_| panic!("reading {path:?} hung"))
}

/// Asserts that reading `path` is refused and never returns the host's secret.
async fn refused(files: &Files<'_>, path: &str) -> FileError {
    match read(files, path).await {
        Ok(bytes) => panic!("{path:?} was read: {:?}", String::from_utf8_lossy(&bytes)),
        Err(error) => error,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_magic_links_and_dotdot_never_lead_out_and_the_host_is_unchanged() {
    let fx = Fixture::new("files-links");
    let host = host_target(&fx);
    let before = snapshot(&host);
    let secret = host.join("secret");
    let secret = secret.to_str().unwrap();
    let host_dir = host.to_str().unwrap();
    let workspace = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .expect("create");
    let files = workspace.files();
    // The workspace plants links out, as an agent can.
    run(
        &workspace,
        &[
            "sh",
            "-c",
            &format!(
                "ln -s {secret} abs && ln -s ../../../../../../../../..{secret} rel && \
                 ln -s /etc/shadow shadow && ln -s {host_dir} hostdir && ln -s / top"
            ),
        ],
    )
    .await;
    // The positive control: the workspace's own files.
    assert_eq!(
        read(&files, "hello.txt").await.unwrap(),
        support::HELLO.as_bytes()
    );

    // Links and `..` resolve inside the sandbox, where the host's file is not.
    for path in [
        "abs".to_owned(),
        "rel".to_owned(),
        "shadow".to_owned(),
        "hostdir/secret".to_owned(),
        "top".to_owned() + secret,
        format!("../../../../../../..{secret}"),
        secret.to_owned(),
        "/etc/shadow".to_owned(),
    ] {
        let error = refused(&files, &path).await;
        assert!(
            matches!(error, FileError::NotFound { .. }),
            "{path}: {error:?}"
        );
    }
    // A link to the sandbox's root leads to the sandbox's root.
    assert_eq!(
        read(&files, "top/workspace/hello.txt").await.unwrap(),
        support::HELLO.as_bytes()
    );
    // `/proc` magic links would lead to another root or a host file: pid
    // 1's are closed to the run's user (the ptrace check answers first), a
    // command's own are open to it and refused as magic links.
    for path in [
        format!("/proc/1/root{secret}"),
        "/proc/1/root/etc/hostname".to_owned(),
        "/proc/1/cwd/x".to_owned(),
        format!("/proc/1/root/../../../..{secret}"),
    ] {
        let error = refused(&files, &path).await;
        assert!(
            matches!(
                error,
                FileError::LinkOutOfReach { .. } | FileError::PermissionDenied { .. }
            ),
            "{path}: {error:?}"
        );
    }
    let mark = marker("files-links");
    // A process of the run left in the background, its pid inside written.
    run(
        &workspace,
        &["sh", "-c", "sleep 1000 & echo $! > pid", &mark],
    )
    .await;
    let deadline = Instant::now() + NO_HANG;
    let pid = loop {
        if let Ok(pid) = files.read("pid").await
            && pid.ends_with(b"\n")
        {
            break String::from_utf8(pid).unwrap().trim().to_owned();
        }
        assert!(Instant::now() < deadline, "the command never wrote its pid");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for path in [
        format!("/proc/{pid}/root{secret}"),
        format!("/proc/{pid}/root/workspace/hello.txt"),
        format!("/proc/{pid}/cwd/hello.txt"),
        format!("/proc/{pid}/fd/1"),
        format!("/proc/{pid}/exe"),
    ] {
        let error = refused(&files, &path).await;
        assert!(
            matches!(error, FileError::LinkOutOfReach { .. }),
            "{path}: {error:?}"
        );
    }
    // The command's own files are the run's user's: its status reads.
    let proc_status = read(&files, &format!("/proc/{pid}/status")).await.unwrap();
    assert!(String::from_utf8_lossy(&proc_status).contains("sleep"));
    // `/proc/self` is the caller's: the runner is not in the sandbox.
    let error = refused(&files, &format!("/proc/self/root{secret}")).await;
    assert!(matches!(error, FileError::NotFound { .. }), "{error:?}");
    // Pid 1, a copy of the runner's memory: closed to the run, so to the API.
    for path in [
        "/proc/1/environ",
        "/proc/1/mem",
        "/proc/1/auxv",
        "/proc/1/maps",
        "/proc/1/smaps",
    ] {
        let error = refused(&files, path).await;
        assert!(
            matches!(error, FileError::PermissionDenied { .. }),
            "{path}: {error:?}"
        );
    }
    for n in 0..16 {
        let path = format!("/proc/1/fd/{n}");
        let error = refused(&files, &path).await;
        assert!(
            matches!(
                error,
                FileError::PermissionDenied { .. }
                    | FileError::LinkOutOfReach { .. }
                    | FileError::NotFound { .. }
            ),
            "{path}: {error:?}"
        );
    }
    assert!(matches!(
        files.list("/proc/1/fd", 1).await,
        Err(FileError::PermissionDenied { .. })
    ));

    // Writes, removals, renames and directories the same ways.
    let write = |path: String| {
        let files = &files;
        async move { files.write(&path, "pwned\n", WriteOptions::default()).await }
    };
    assert!(matches!(
        write("abs".into()).await,
        Err(FileError::AlreadyExists { .. })
    ));
    assert!(matches!(
        write("hostdir/secret".into()).await,
        Err(FileError::NotFound { .. })
    ));
    assert!(matches!(
        write(format!("/proc/1/root{secret}")).await,
        Err(FileError::LinkOutOfReach { .. } | FileError::PermissionDenied { .. })
    ));
    assert!(matches!(
        write(format!("../../../..{secret}")).await,
        Err(FileError::NotFound { .. })
    ));
    let deep = files
        .write(
            &format!("../../../..{secret}"),
            "pwned\n",
            WriteOptions::default().with_parents(),
        )
        .await;
    // It lands in the sandbox's own /tmp (the host's path does not exist
    // there: its directories were made inside, the host's file is untouched).
    assert_eq!(
        deep.unwrap().path,
        format!("/workspace/../../../..{secret}")
    );
    assert_eq!(
        status(&workspace, &format!("grep -qx pwned {secret}")).await,
        ExitStatusRecord::Code(0)
    );
    for refused in [
        files
            .rename("hello.txt", &format!("/proc/1/root{host_dir}/moved"))
            .await,
        files
            .remove(&format!("/proc/1/root{secret}"), false)
            .await
            .map(drop),
        files
            .mkdir(&format!("/proc/1/root{host_dir}/made"), true)
            .await,
    ] {
        assert!(
            matches!(
                refused,
                Err(FileError::LinkOutOfReach { .. } | FileError::PermissionDenied { .. })
            ),
            "{refused:?}"
        );
    }
    // A link is removed and renamed as itself, never its target.
    assert_eq!(files.remove("top", true).await.unwrap(), 1);
    files.rename("hostdir", "moved-link").await.unwrap();
    assert_eq!(files.remove("moved-link", true).await.unwrap(), 1);
    assert_eq!(
        read(&files, "hello.txt").await.unwrap(),
        support::HELLO.as_bytes()
    );
    assert!(matches!(
        write(format!("/proc/{pid}/cwd/through-a-magic-link")).await,
        Err(FileError::LinkOutOfReach { .. })
    ));
    let records = std::fs::read_to_string(workspace.evidence_dir().join("files.jsonl")).unwrap();
    assert!(
        records.contains("\"link-out-of-reach\"") && records.contains("\"permission-denied\""),
        "refusals recorded: {records}"
    );

    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned);
    assert_eq!(snapshot(&host), before, "the host directory changed");
    fx.assert_nothing_left(&report.run_id, &[&mark]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_swapped_in_while_operations_run_never_takes_them_out() {
    let fx = Fixture::new("files-race");
    let host = host_target(&fx);
    let before = snapshot(&host);
    let secret = host.join("secret");
    let (secret, host_dir) = (secret.to_str().unwrap(), host.to_str().unwrap());
    let workspace = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .expect("create");
    let files = workspace.files();
    run(
        &workspace,
        &["sh", "-c", "echo good > good && mkdir -p gooddir"],
    )
    .await;
    // A command swaps links as fast as it can while the API works.
    let mark = marker("files-race");
    let script = format!(
        "while :; do ln -sfn good target; ln -sfn {secret} target; \
         ln -sfn ../../../../../../../..{secret} target; \
         ln -sfn gooddir dir; ln -sfn {host_dir} dir; ln -sfn ../../../../../../..{host_dir} dir; done"
    );
    // In the background: it runs until the workspace ends.
    let background = format!("({script}) >/dev/null 2>&1 &");
    run(&workspace, &["sh", "-c", &background, &mark]).await;
    let started = Instant::now();
    while files.stat("dir").await.is_err() {
        assert!(started.elapsed() < NO_HANG, "the links were never swapped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (mut good_reads, mut good_writes) = (0, 0);
    let mut i = 0;
    // Until both sides of the race were seen a few times, at least 400 rounds.
    while i < 400 || good_reads < 5 || good_writes < 5 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{good_reads} reads, {good_writes} writes in {i} rounds"
        );
        i += 1;
        match read(&files, "target").await {
            Ok(bytes) => {
                assert_eq!(bytes, b"good\n", "read {i} reached another file");
                good_reads += 1;
            }
            Err(error) => assert!(
                matches!(error, FileError::NotFound { .. }),
                "read {i}: {error:?}"
            ),
        }
        match files
            .write("dir/f", "inside\n", WriteOptions::default())
            .await
        {
            Ok(_) => good_writes += 1,
            Err(error) => assert!(
                matches!(
                    error,
                    FileError::NotFound { .. } | FileError::AlreadyExists { .. }
                ),
                "write {i}: {error:?}"
            ),
        }
        if let Ok(entries) = files.list("dir", 1).await {
            assert!(
                entries.iter().all(|e| !e.path.ends_with("secret")),
                "list {i}: {entries:?}"
            );
        }
    }
    // Both sides of the race were seen: the test raced.
    assert!(
        good_reads > 0 && good_writes > 0,
        "{good_reads} reads, {good_writes} writes in {:?}",
        started.elapsed()
    );
    assert_eq!(read(&files, "gooddir/f").await.unwrap(), b"inside\n");
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned);
    assert_eq!(snapshot(&host), before, "the host directory changed");
    fx.assert_nothing_left(&report.run_id, &[&mark]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_a_socket_devices_and_a_sparse_file_past_the_limit_are_refused_without_hanging() {
    let fx = Fixture::new("files-special");
    let workspace = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .expect("create");
    let files = workspace.files();
    run(
        &workspace,
        &[
            "sh",
            "-c",
            "mkfifo fifo && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' \
             && truncate -s 4G sparse && echo plain > plain",
        ],
    )
    .await;
    // The positive control.
    assert_eq!(read(&files, "plain").await.unwrap(), b"plain\n");
    for (path, kind) in [
        ("fifo", FileKind::Fifo),
        ("sock", FileKind::Socket),
        ("/dev/null", FileKind::CharDevice),
        ("/dev/zero", FileKind::CharDevice),
        ("/dev/tty", FileKind::CharDevice),
        ("/dev/ptmx", FileKind::CharDevice),
    ] {
        let error = refused(&files, path).await;
        assert!(
            matches!(&error, FileError::NotRegularFile { kind: k, .. } if *k == kind),
            "{path}: {error:?}"
        );
        let written =
            tokio::time::timeout(NO_HANG, files.write(path, "x", WriteOptions::default()))
                .await
                .expect("a write must not hang");
        assert!(
            matches!(written, Err(FileError::NotRegularFile { .. })),
            "{path}: {written:?}"
        );
    }
    // A 4 GiB sparse file: refused by its size at once, its range readable.
    let started = Instant::now();
    let error = refused(&files, "sparse").await;
    assert!(
        matches!(error, FileError::TooLarge { size: Some(s), limit, .. } if s == 4 << 30 && limit == 100 << 20),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        files.read_range("sparse", 1 << 31, 4).await.unwrap(),
        [0; 4]
    );
    let mut sink = Vec::new();
    let limited = files
        .read_to(
            "sparse",
            &mut sink,
            ReadOptions::range(0, 2 << 20).with_limit(1 << 20),
        )
        .await;
    assert!(
        matches!(limited, Err(FileError::TooLarge { .. })),
        "{limited:?}"
    );
    assert!(
        sink.is_empty(),
        "nothing past the limit: {} bytes",
        sink.len()
    );
    // Not 4 GiB for the patch to read.
    files.remove("sparse", false).await.unwrap();
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned);
    fx.assert_nothing_left(&report.run_id, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_are_the_workspace_users_never_the_runners() {
    let fx = Fixture::new("files-permissions");
    let workspace = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .expect("create");
    let files = workspace.files();
    // A file the workspace's user closed to itself.
    run(
        &workspace,
        &["sh", "-c", "echo closed > closed && chmod 000 closed"],
    )
    .await;
    assert_ne!(
        status(&workspace, "cat closed").await,
        ExitStatusRecord::Code(0)
    );
    assert!(matches!(
        refused(&files, "closed").await,
        FileError::PermissionDenied { .. }
    ));
    assert!(matches!(
        files.write("closed", "x", WriteOptions::default()).await,
        Err(FileError::PermissionDenied { .. })
    ));
    // The control: once the user opens it again, it reads.
    files
        .write("other", "x", WriteOptions::default())
        .await
        .unwrap();
    run(&workspace, &["chmod", "600", "closed"]).await;
    assert_eq!(read(&files, "closed").await.unwrap(), b"closed\n");

    // Files of host root in the checkout (the run maps no host root: it is
    // nobody's there), one read-only, one closed.
    let checkout = workspace.source().unwrap().workspace.clone();
    std::fs::write(checkout.join("roots"), "root's\n").unwrap();
    std::fs::set_permissions(
        checkout.join("roots"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(checkout.join("roots-closed"), "root's closed\n").unwrap();
    std::fs::set_permissions(
        checkout.join("roots-closed"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    assert_eq!(read(&files, "roots").await.unwrap(), b"root's\n");
    for options in [
        WriteOptions::default(),
        WriteOptions::default().with_mode(0o666),
    ] {
        let written = files.write("roots", "changed\n", options).await;
        assert!(
            matches!(written, Err(FileError::PermissionDenied { .. })),
            "{written:?}"
        );
    }
    assert!(matches!(
        refused(&files, "roots-closed").await,
        FileError::PermissionDenied { .. }
    ));
    assert_eq!(
        std::fs::read_to_string(checkout.join("roots")).unwrap(),
        "root's\n"
    );

    // The base system: read-only, and root's.
    let env_before = std::fs::read("/usr/bin/env").unwrap();
    assert!(!read(&files, "/usr/bin/env").await.unwrap().is_empty());
    // (Its files are nobody's in the run: the permission check answers
    // before the mount's, as for a command.)
    let base = |result: Result<(), FileError>| match result {
        Err(FileError::ReadOnly { .. } | FileError::PermissionDenied { .. }) => {}
        other => panic!("the base system was changed: {other:?}"),
    };
    for path in ["/usr/bin/env", "/usr/new-file"] {
        base(
            files
                .write(path, "#!/bin/sh\n", WriteOptions::default())
                .await
                .map(drop),
        );
    }
    base(files.remove("/usr/bin/env", false).await.map(drop));
    base(files.mkdir("/usr/made", false).await);
    let passwd = files
        .write(
            "/etc/passwd",
            "root::0:0::/:/bin/sh\n",
            WriteOptions::default(),
        )
        .await;
    assert!(
        matches!(
            passwd,
            Err(FileError::ReadOnly { .. } | FileError::PermissionDenied { .. })
        ),
        "{passwd:?}"
    );
    assert_eq!(std::fs::read("/usr/bin/env").unwrap(), env_before);
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned);
    fx.assert_nothing_left(&report.run_id, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_outside_the_contracts_writable_paths_is_refused() {
    let fx = Fixture::new("files-scope");
    let mut contract = fx.contract();
    contract.filesystem.writable = vec!["src".into()];
    contract.filesystem.outputs = vec!["src".into()];
    let workspace = fx
        .runner()
        .create(contract, CreateOptions::default())
        .await
        .expect("create");
    let files = workspace.files();
    // Inside the writable path: allowed (the positive control), as inside.
    files
        .write("src/new.txt", "new\n", WriteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        status(&workspace, "echo more >> src/new.txt").await,
        ExitStatusRecord::Code(0)
    );
    // Outside it: read-only for the API as for a command.
    assert_ne!(
        status(&workspace, "echo x >> hello.txt").await,
        ExitStatusRecord::Code(0)
    );
    for path in ["hello.txt", "new-at-root.txt"] {
        let written = files.write(path, "x\n", WriteOptions::default()).await;
        assert!(
            matches!(written, Err(FileError::ReadOnly { .. })),
            "{path}: {written:?}"
        );
    }
    assert!(matches!(
        files.remove("hello.txt", false).await,
        Err(FileError::ReadOnly { .. })
    ));
    assert!(matches!(
        files.mkdir("made", false).await,
        Err(FileError::ReadOnly { .. })
    ));
    assert!(matches!(
        files.rename("src/new.txt", "moved.txt").await,
        Err(FileError::ReadOnly { .. } | FileError::CrossesMounts { .. })
    ));
    assert_eq!(
        read(&files, "hello.txt").await.unwrap(),
        support::HELLO.as_bytes()
    );
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned);
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+++ b/src/new.txt"), "{patch}");
    assert!(!patch.contains("hello.txt"), "{patch}");
    fx.assert_nothing_left(&report.run_id, &[]);
}
