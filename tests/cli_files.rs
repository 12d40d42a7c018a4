//! `agent-workspace files RUN ls|cat|write|rm|stat|mkdir|mv`, as a harness
//! calls it: each operation joins the live workspace (here while a command
//! runs in it), each typed error is an answer with its kind and exit
//! status, processes writing at once are each recorded, and a 120 MiB file
//! goes in through stdin and out through stdout.
//!
//! Needs root, user namespaces and cgroups, as every namespace-backend test.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Output, Stdio};

use support::cli::{CliFixture, text};

/// `files RUN ARGS` with `stdin` on its standard input.
fn files(fixture: &CliFixture, run: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = fixture
        .command()
        .arg("files")
        .arg(run)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start files");
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// `files RUN ARGS --json`, which must succeed: its answer.
fn answer(fixture: &CliFixture, run: &str, args: &[&str], stdin: &[u8]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = files(fixture, run, &all, stdin);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out.stdout)))
}

/// `files RUN ARGS --json`, which must fail: its exit status and error.
fn refusal(fixture: &CliFixture, run: &str, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let out = files(fixture, run, &all, b"");
    let value: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out.stdout)));
    (out.status.code(), value["error"].clone())
}

fn evidence_of(fixture: &CliFixture, run: &str) -> PathBuf {
    fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(run)
}

#[test]
fn each_operation_joins_the_live_workspace_while_a_command_runs() {
    let fixture = CliFixture::new("files-ops");
    let run = fixture.create(None);
    // A command that runs all along, and sees what the operations did.
    let busy = fixture
        .command()
        .args([
            "exec",
            "--quiet",
            &run,
            "--",
            "sh",
            "-c",
            "n=0; while [ ! -e done ] && [ $n -lt 600 ]; do n=$((n+1)); sleep 0.1; done; cat d/e/moved.txt",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start exec");

    let written = answer(
        &fixture,
        &run,
        &["write", "-p", "notes/a.txt"],
        b"hello\xffworld\n",
    );
    assert_eq!(written["path"], "/workspace/notes/a.txt");
    assert_eq!(written["bytes"], 12);
    assert_eq!(written["created"], true);
    let cat = files(&fixture, &run, &["cat", "notes/a.txt"], b"");
    assert_eq!(
        (cat.status.code(), cat.stdout.as_slice()),
        (Some(0), b"hello\xffworld\n".as_slice())
    );
    let range = files(
        &fixture,
        &run,
        &["cat", "notes/a.txt", "--offset", "6", "--length", "5"],
        b"",
    );
    assert_eq!(range.stdout, b"world");
    let inline = answer(&fixture, &run, &["cat", "hello.txt"], b"");
    assert_eq!(inline["content"], support::HELLO);
    let binary = answer(&fixture, &run, &["cat", "notes/a.txt"], b"");
    assert!(
        binary["content"].is_null() && binary["content_base64"].is_string(),
        "{binary}"
    );

    let listed = answer(&fixture, &run, &["ls", ".", "--depth", "2"], b"");
    let paths: Vec<&str> = listed["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"/workspace/notes/a.txt") && paths.contains(&"/workspace/src/lib.txt"),
        "{paths:?}"
    );
    let plain = files(&fixture, &run, &["ls"], b"");
    assert!(
        text(&plain.stdout).contains("file   0644           27 /workspace/hello.txt"),
        "{}",
        text(&plain.stdout)
    );
    let stat = answer(&fixture, &run, &["stat", "notes/a.txt"], b"");
    assert_eq!(
        (
            stat["kind"].as_str(),
            stat["size"].as_u64(),
            stat["mode"].as_u64()
        ),
        (Some("file"), Some(12), Some(0o644))
    );

    answer(&fixture, &run, &["mkdir", "-p", "d/e"], b"");
    let moved = answer(&fixture, &run, &["mv", "notes/a.txt", "d/e/moved.txt"], b"");
    assert_eq!(moved["to"], "/workspace/d/e/moved.txt");
    let removed = answer(&fixture, &run, &["rm", "-r", "notes"], b"");
    assert_eq!(removed["removed"], 1);

    // Typed errors: an answer with the kind, the path and the exit status.
    for (args, code, kind) in [
        (&["cat", "missing"][..], 1, "not-found"),
        (&["cat", "src"][..], 1, "is-a-directory"),
        (&["ls", "hello.txt"][..], 1, "not-a-directory"),
        (&["rm", "d"][..], 1, "not-empty"),
        (&["write", "/usr/bin/env"][..], 1, "permission-denied"),
        (&["cat", "/dev/zero"][..], 1, "not-a-regular-file"),
        (&["cat", "/proc/1/environ"][..], 1, "permission-denied"),
        (&["cat", "hello.txt", "--limit", "5"][..], 1, "too-large"),
        (&["cat", ""][..], 2, "invalid-path"),
        (&["write", "x", "--mode", "4755"][..], 2, "invalid-mode"),
    ] {
        let (status, error) = refusal(&fixture, &run, args);
        assert_eq!(status, Some(code), "{args:?}: {error}");
        assert_eq!(
            (error["kind"].as_str(), error["file_error"].as_str()),
            (Some("file"), Some(kind)),
            "{args:?}: {error}"
        );
        assert_eq!(error["run_id"], run.as_str());
    }
    let (_, error) = refusal(&fixture, &run, &["cat", "missing"]);
    assert_eq!(error["path"], "/workspace/missing");

    // The command saw the file the API moved; it ran all along.
    answer(&fixture, &run, &["write", "done"], b"");
    let busy = busy.wait_with_output().unwrap();
    assert_eq!(busy.status.code(), Some(0), "{}", text(&busy.stderr));
    assert_eq!(busy.stdout, b"hello\xffworld\n");

    let destroyed = fixture.agent_workspace(&["destroy", "--quiet", &run]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
    let evidence = evidence_of(&fixture, &run);
    fixture.assert_verifies(&evidence);
    let records = std::fs::read_to_string(evidence.join("files.jsonl")).unwrap();
    let ops: Vec<String> = records
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            format!(
                "{} {} {}",
                r["op"].as_str().unwrap(),
                r["path"].as_str().unwrap(),
                r["error"]["kind"].as_str().unwrap_or("ok")
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            "write /workspace/notes/a.txt ok",
            "mkdir /workspace/d/e ok",
            "rename /workspace/notes/a.txt ok",
            "remove /workspace/notes ok",
            "remove /workspace/d not-empty",
            "write /usr/bin/env permission-denied",
            "write /workspace/x invalid-mode",
            "write /workspace/done ok",
        ]
    );
}

#[test]
fn processes_writing_at_once_are_each_recorded_and_a_large_file_streams_both_ways() {
    const AT_ONCE: usize = 8;
    let fixture = CliFixture::new("files-at-once");
    let run = fixture.create(None);
    let children: Vec<_> = (0..AT_ONCE)
        .map(|i| {
            let mut child = fixture
                .command()
                .args([
                    "files",
                    &run,
                    "write",
                    "-p",
                    &format!("out/{i}.txt"),
                    "--json",
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let content = format!("process {i}\n").repeat(5000);
            child
                .stdin
                .take()
                .unwrap()
                .write_all(content.as_bytes())
                .unwrap();
            (i, content, child)
        })
        .collect();
    for (i, content, child) in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{i}: {}", text(&out.stderr));
        let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            value["sha256"],
            workspace_core::digest::sha256_hex(content.as_bytes())
        );
    }

    // 120 MiB in through stdin and out through stdout.
    let big: Vec<u8> = (0..120u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let digest = workspace_core::digest::sha256_hex(&big);
    let written = answer(&fixture, &run, &["write", "big.bin"], &big);
    assert_eq!(written["sha256"], digest.as_str());
    let refused = files(&fixture, &run, &["cat", "big.bin"], b"");
    assert_eq!(
        refused.status.code(),
        Some(1),
        "over the default 100 MiB limit"
    );
    let out = files(
        &fixture,
        &run,
        &["cat", "big.bin", "--limit", "200000000"],
        b"",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout.len(), big.len());
    assert_eq!(workspace_core::digest::sha256_hex(&out.stdout), digest);
    drop(big);
    answer(&fixture, &run, &["rm", "big.bin"], b"");

    let destroyed = fixture.agent_workspace(&["destroy", "--quiet", &run]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
    let evidence = evidence_of(&fixture, &run);
    fixture.assert_verifies(&evidence);
    let records: Vec<serde_json::Value> = std::fs::read_to_string(evidence.join("files.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), AT_ONCE + 2);
    let pids: std::collections::BTreeSet<u64> =
        records.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), AT_ONCE + 2, "one process each");
    for i in 0..AT_ONCE {
        let content = format!("process {i}\n").repeat(5000);
        assert!(
            records
                .iter()
                .any(|r| r["path"] == format!("/workspace/out/{i}.txt")
                    && r["sha256"] == workspace_core::digest::sha256_hex(content.as_bytes())),
            "process {i} recorded"
        );
    }
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+++ b/out/7.txt"));
}
