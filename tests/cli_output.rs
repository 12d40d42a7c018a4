//! A command's output through `agent-workspace run`: however much it writes,
//! the command runs to its end, every byte passes through to the caller, and
//! what the run keeps (the evidence, and the run's files on the host while it
//! runs) stays within a few times the output cap. Output never counts against
//! `--disk`.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use support::cli::{CliFixture, text};

/// What `run ARGS` came to: its exit status, every byte of its stdout
/// counted (with the first and last bytes kept), its stderr, and the most the
/// run's own files of command output held on disk while it ran.
struct Streamed {
    status: Option<i32>,
    stdout_bytes: u64,
    first: Vec<u8>,
    last: Vec<u8>,
    stderr: String,
    peak_on_disk: u64,
}

/// Runs `run ARGS` with stdout read as it comes (never held whole).
fn run_streamed(fixture: &CliFixture, args: &[&str]) -> Streamed {
    let repo = fixture.repo();
    let evidence = fixture.evidence();
    let mut child = fixture
        .command()
        .args(["run", "--repo", repo.to_str().unwrap()])
        .args(["--evidence", evidence.to_str().unwrap()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak, runs) = (done.clone(), peak.clone(), fixture.runtime().join("runs"));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(command_output_on_disk(&runs), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let mut stdout = child.stdout.take().unwrap();
    let (mut count, mut first, mut last) = (0u64, Vec::new(), Vec::new());
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = stdout.read(&mut buffer).unwrap();
        if n == 0 {
            break;
        }
        count += n as u64;
        if first.len() < 64 {
            first.extend_from_slice(&buffer[..n.min(64)]);
        }
        last.extend_from_slice(&buffer[n.saturating_sub(64)..n]);
        let excess = last.len().saturating_sub(64);
        last.drain(..excess);
    }
    let status = child.wait().unwrap().code();
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    Streamed {
        status,
        stdout_bytes: count,
        first,
        last,
        stderr: stderr.join().unwrap(),
        peak_on_disk: peak.load(Ordering::Relaxed),
    }
}

/// The bytes on disk (allocated, not apparent) of every run's command output
/// files under `runs`.
fn command_output_on_disk(runs: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(runs) else {
        return 0;
    };
    entries
        .flatten()
        .flat_map(|run| std::fs::read_dir(run.path().join("command-output")).into_iter())
        .flatten()
        .flatten()
        .filter_map(|file| file.metadata().ok())
        .map(|meta| meta.blocks() * 512)
        .sum()
}

/// The evidence directory the summary line names.
fn evidence_of(stderr: &str) -> PathBuf {
    let line = stderr.lines().last().expect("a summary line");
    let (_, dir) = line.rsplit_once("; evidence ").expect("evidence named");
    PathBuf::from(dir.split("; ").next().unwrap())
}

/// The sizes of every file under `dir`, added up.
fn size_of_tree(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|entry| {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                size_of_tree(&entry.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

fn command_record(evidence: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(evidence.join("commands/0001/command.json")).unwrap())
        .unwrap()
}

/// A GiB of zeros between two markers, under the default cap (16 MiB): the
/// command ends with 0, the caller gets every byte, the bundle keeps the
/// first and last 8 MiB and says how much there was, and neither the bundle
/// nor the run's files on the host grow past a few times the cap.
#[test]
fn a_gib_of_output_passes_through_whole_and_the_evidence_keeps_its_head_and_tail() {
    let fixture = CliFixture::new("output-gib");
    let gib: u64 = 1 << 30;
    let script = format!("printf BEGIN-MARK; head -c {gib} /dev/zero; printf END-MARK");
    let ran = run_streamed(&fixture, &["--", "sh", "-c", &script]);
    assert_eq!(ran.status, Some(0), "{}", ran.stderr);
    let total = gib + 18;
    assert_eq!(ran.stdout_bytes, total, "{}", ran.stderr);
    assert!(ran.first.starts_with(b"BEGIN-MARK\0"));
    assert!(ran.last.ends_with(b"\0END-MARK"));
    let line = ran.stderr.lines().last().unwrap();
    assert!(line.contains(": exit 0, stdout truncated at the output cap (1.0 GiB written; its first 8.0 MiB and last 8.0 MiB kept)"), "{line}");

    let evidence = evidence_of(&ran.stderr);
    fixture.assert_verifies(&evidence);
    let record = command_record(&evidence);
    assert_eq!(record["exit"]["value"], 0, "{record}");
    assert_eq!(record["stdout_bytes"], total, "{record}");
    assert_eq!(
        record["stdout_truncated"],
        serde_json::json!({"head_bytes": 8 << 20, "tail_bytes": 8 << 20}),
        "{record}"
    );
    let kept = std::fs::read(evidence.join("commands/0001/stdout")).unwrap();
    assert_eq!(kept.len(), 16 << 20);
    assert!(kept.starts_with(b"BEGIN-MARK\0"));
    assert!(kept.ends_with(b"\0END-MARK"));
    assert!(kept[10..kept.len() - 8].iter().all(|b| *b == 0));
    let cap: u64 = 16 << 20;
    let bundle = size_of_tree(&evidence);
    eprintln!(
        "1 GiB of stdout: a bundle of {bundle} bytes, at most {} bytes of the run's output files on disk",
        ran.peak_on_disk
    );
    assert!(bundle < 2 * cap, "the bundle holds {bundle} bytes");
    assert!(
        ran.peak_on_disk <= cap + (8 << 20),
        "{} bytes",
        ran.peak_on_disk
    );
}

/// 64 MiB of stdout under a 32 MiB disk cap: output is not the run's disk,
/// so the command is neither killed (`SIGXFSZ`, exit 153) nor cut short, and
/// the caller gets all of it. The lower `--output-limit` sets what is kept.
#[test]
fn output_past_the_disk_cap_is_neither_killed_nor_cut_short() {
    for backend in ["namespace", "container"] {
        let fixture = CliFixture::new(&format!("output-disk-{backend}"));
        let ran = run_streamed(
            &fixture,
            &[
                "--backend",
                backend,
                "--disk",
                "32MiB",
                "--output-limit",
                "2MiB",
                "--",
                "sh",
                "-c",
                "head -c 67108864 /dev/zero",
            ],
        );
        assert_eq!(ran.status, Some(0), "{backend}: {}", ran.stderr);
        assert_eq!(ran.stdout_bytes, 64 << 20, "{backend}: {}", ran.stderr);
        let evidence = evidence_of(&ran.stderr);
        let record = command_record(&evidence);
        assert_eq!(
            record["exit"],
            serde_json::json!({"kind": "code", "value": 0})
        );
        assert_eq!(record["stdout_bytes"], 64 << 20, "{backend}: {record}");
        assert_eq!(
            record["stdout_truncated"],
            serde_json::json!({"head_bytes": 1 << 20, "tail_bytes": 1 << 20}),
            "{backend}: {record}"
        );
        let kept = std::fs::metadata(evidence.join("commands/0001/stdout")).unwrap();
        assert_eq!(kept.len(), 2 << 20, "{backend}");
    }
}

/// `--json` says which stream was truncated and how much it carried.
#[test]
fn the_json_summary_names_a_truncated_stream() {
    let fixture = CliFixture::new("output-json");
    let out = fixture.run(&[
        "--json",
        "--capture",
        "--output-limit",
        "1KiB",
        "--",
        "sh",
        "-c",
        "head -c 5000 /dev/zero >&2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let command = &summary["command"];
    assert_eq!(
        command["stderr_truncated"],
        serde_json::json!({"total_bytes": 5000, "head_bytes": 512, "tail_bytes": 512}),
        "{summary}"
    );
    assert!(command.get("stdout_truncated").is_none(), "{summary}");
    // What was kept is what `--capture` carries: its head and its tail.
    assert_eq!(command["stderr"].as_str().unwrap().len(), 1024, "{summary}");
}

/// `exec --output-limit` is that command's cap alone: the next command of
/// the same workspace keeps the workspace's (here `create --output-limit`).
#[test]
fn an_execs_output_limit_is_its_own_and_creates_is_the_workspaces() {
    let fixture = CliFixture::new("output-exec");
    let run = fixture.create_with(&["--output-limit", "4KiB"]);
    let exec = |more: &[&str]| {
        let mut args = vec!["exec", run.as_str()];
        args.extend_from_slice(more);
        args.extend(["--", "sh", "-c", "head -c 3000 /dev/zero"]);
        let out = fixture.agent_workspace(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(out.stdout.len(), 3000, "passed through whole");
        text(&out.stderr)
    };
    let own = exec(&["--output-limit", "1KiB"]);
    assert!(own.contains("stdout truncated at the output cap (2.9 KiB written; its first 512 B and last 512 B kept)"), "{own}");
    let workspaces = exec(&[]);
    assert!(!workspaces.contains("truncated"), "{workspaces}");
    let destroyed = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
    let evidence = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&run);
    let first = serde_json::from_slice::<serde_json::Value>(
        &std::fs::read(evidence.join("commands/0001/command.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(first["stdout_bytes"], 3000, "{first}");
    assert_eq!(
        first["stdout_truncated"],
        serde_json::json!({"head_bytes": 512, "tail_bytes": 512})
    );
    let second = std::fs::metadata(evidence.join("commands/0002/stdout")).unwrap();
    assert_eq!(second.len(), 3000);
}
