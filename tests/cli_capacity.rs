//! Host-wide capacity between `agent-workspace` processes: with one slot, a second
//! `run` waits for the first to finish, and `ls` shows who holds and who waits.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::cli::{CliFixture, text};

/// `run --json --capture -- /bin/sh -c SCRIPT` with one capacity slot on the
/// host, started in the background (its stdout is the JSON summary).
fn spawn_run(fixture: &CliFixture, script: &str) -> Child {
    let repo = fixture.repo();
    let evidence = fixture.evidence();
    with_one_slot(fixture.command())
        .args(["run", "--repo", repo.to_str().unwrap()])
        .args([
            "--evidence",
            evidence.to_str().unwrap(),
            "--json",
            "--capture",
        ])
        .args(["--", "/bin/sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agent-workspace run")
}

fn with_one_slot(mut command: Command) -> Command {
    command.env("AGENT_WORKSPACE_CAPACITY_SLOTS", "1");
    command
}

/// `ls --json`.
fn ls_json(fixture: &CliFixture) -> Vec<Value> {
    let out = with_one_slot(fixture.command())
        .args(["ls", "--json"])
        .output()
        .expect("run ls");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows: Value = serde_json::from_slice(&out.stdout).expect("a JSON array");
    rows.as_array().expect("an array").clone()
}

/// The rows whose pool role is `role`.
fn with_role<'a>(rows: &'a [Value], role: &str) -> Vec<&'a Value> {
    rows.iter()
        .filter(|row| row["capacity"]["role"] == role)
        .collect()
}

/// Polls `ls --json` until `done` holds for its rows (a 60 s hang guard).
fn wait_for_ls(fixture: &CliFixture, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rows = ls_json(fixture);
        if done(&rows) {
            return rows;
        }
        assert!(Instant::now() < deadline, "never saw {what}: {rows:#?}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for a run to end, asserts it succeeded, and returns its evidence dir.
fn finish(child: Child) -> PathBuf {
    let out = child.wait_with_output().expect("wait for the run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    PathBuf::from(summary["evidence"].as_str().expect("evidence"))
}

/// `(started, finished)` of the run's first command, from its evidence.
fn command_times(evidence: &Path) -> (u64, u64) {
    let path = evidence.join("commands/0001/command.json");
    let record: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("command.json")).expect("JSON");
    (
        record["started_unix_ms"].as_u64().expect("started"),
        record["finished_unix_ms"].as_u64().expect("finished"),
    )
}

#[test]
fn a_second_run_waits_for_the_first_and_ls_shows_both() {
    let fixture = CliFixture::new("capacity");
    let first = spawn_run(&fixture, "sleep 4");
    let rows = wait_for_ls(&fixture, "the first run holding", |rows| {
        with_role(rows, "holding").len() == 1
    });
    let first_id = with_role(&rows, "holding")[0]["run_id"].clone();

    let second = spawn_run(&fixture, "echo second");
    let rows = wait_for_ls(&fixture, "the second run waiting", |rows| {
        with_role(rows, "waiting").len() == 1
    });
    let holders = with_role(&rows, "holding");
    let waiters = with_role(&rows, "waiting");
    assert_eq!(holders.len(), 1, "{rows:#?}");
    assert_eq!(holders[0]["run_id"], first_id);
    assert_ne!(waiters[0]["run_id"], first_id);
    assert_eq!(waiters[0]["state"], "waiting", "{rows:#?}");
    assert_eq!(waiters[0]["queue_position"], 1, "{rows:#?}");
    assert_eq!(waiters[0]["capacity"]["resources"]["slots"], 1);

    // The table says the same.
    let out = with_one_slot(fixture.command())
        .arg("ls")
        .output()
        .expect("run ls");
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}{}", text(&out.stderr));
    let holds: Vec<_> = table.lines().filter(|l| l.starts_with("holds ")).collect();
    let waits: Vec<_> = table
        .lines()
        .filter(|l| l.starts_with("waits #1 "))
        .collect();
    assert_eq!(holds.len(), 1, "{table}");
    assert_eq!(waits.len(), 1, "{table}");
    assert!(holds[0].contains(first_id.as_str().unwrap()), "{table}");

    let first = finish(first);
    let out = second.wait_with_output().expect("wait for the second run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // It said, whatever the terminal, for what it waited and behind whom.
    let waited: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("waits for capacity"))
        .collect();
    assert_eq!(waited.len(), 1, "{stderr}");
    assert!(waited[0].contains(first_id.as_str().unwrap()), "{stderr}");
    assert!(
        waited[0].contains("needs 0.01 cpu, 64 MiB, 1 run"),
        "{stderr}"
    );
    // The slot it waits for is named: one run at once, held by the first.
    assert!(waited[0].contains(", 1 run in use of "), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    let second = PathBuf::from(summary["evidence"].as_str().expect("evidence"));
    let (first_started, first_finished) = command_times(&first);
    let (second_started, _) = command_times(&second);
    assert!(first_started <= first_finished);
    assert!(
        first_finished <= second_started,
        "the runs overlapped: first {first_started}..{first_finished}, second started {second_started}"
    );
    // Both released: the pool is empty again.
    let rows = ls_json(&fixture);
    assert!(with_role(&rows, "holding").is_empty(), "{rows:#?}");
    assert!(with_role(&rows, "waiting").is_empty(), "{rows:#?}");
}

/// `agent-workspace ARGS` with one capacity slot, which must succeed; its stdout.
fn one_slot_ok(fixture: &CliFixture, args: &[&str]) -> String {
    let out = with_one_slot(fixture.command())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run agent-workspace");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn a_detached_or_suspended_workspace_keeps_its_capacity_until_it_is_destroyed() {
    parked_workspace_keeps_its_capacity("capacity-detached", "namespace");
}

#[test]
fn a_parked_container_keeps_its_capacity_until_it_is_destroyed() {
    parked_workspace_keeps_its_capacity("capacity-container", "container");
}

/// A workspace created on `backend` holds its slot while no CLI process runs
/// (detached, then suspended) and gives it up only when destroyed.
fn parked_workspace_keeps_its_capacity(name: &str, backend: &str) {
    let fixture = CliFixture::new(name);
    let repo = fixture.repo();
    let create = [
        "create",
        "--backend",
        backend,
        "--repo",
        repo.to_str().unwrap(),
    ];
    let run = one_slot_ok(&fixture, &create).trim().to_owned();
    // No agent-workspace process runs now; the live sandbox holds the slot.
    let holding = |rows: &[Value]| {
        with_role(rows, "holding")
            .iter()
            .map(|row| row["run_id"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(holding(&ls_json(&fixture)), vec![run.clone()]);
    // Attaching again does not wait behind its own slot; what holds it (pid 1's
    // descriptor of the ticket) is out of the commands' reach.
    let reach = "for fd in /proc/1/fd/*; do [ -e \"$fd\" ] && exit 9; done; \
                 ls /proc/1/fd 2>/dev/null && exit 9; exit 0";
    one_slot_ok(&fixture, &["exec", &run, "--", "sh", "-c", reach]);
    one_slot_ok(&fixture, &["suspend", &run]);
    assert_eq!(holding(&ls_json(&fixture)), vec![run.clone()]);

    let second = spawn_run(&fixture, "echo second");
    let rows = wait_for_ls(&fixture, "the second run waiting", |rows| {
        with_role(rows, "waiting").len() == 1
    });
    assert_eq!(holding(&rows), vec![run.clone()], "{rows:#?}");
    // It still waits a moment later: the slot is not given up meanwhile.
    thread::sleep(Duration::from_millis(500));
    assert_eq!(with_role(&ls_json(&fixture), "waiting").len(), 1);

    one_slot_ok(&fixture, &["destroy", &run]);
    let evidence = finish(second);
    assert_eq!(
        std::fs::read_to_string(evidence.join("commands/0001/stdout")).unwrap(),
        "second\n"
    );
    assert!(holding(&ls_json(&fixture)).is_empty());
}

#[test]
fn a_run_given_a_wait_limit_gives_up_with_75_naming_what_it_waited_for() {
    let fixture = CliFixture::new("capacity-wait");
    // A live workspace holds the only slot.
    let held = one_slot_ok(
        &fixture,
        &["create", "--repo", fixture.repo().to_str().unwrap()],
    );
    let held = held.trim();
    let repo = fixture.repo();
    let started = std::time::Instant::now();
    let out = with_one_slot(fixture.command())
        .args(["run", "--wait", "1", "--repo", repo.to_str().unwrap()])
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
        .expect("run agent-workspace");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{stderr}"
    );
    // It said for what it waited and behind whom, then that it gave up.
    assert!(
        stderr.contains("waits for capacity: needs 0.01 cpu, 64 MiB, 1 run")
            && stderr.contains(held),
        "{stderr}"
    );
    assert!(
        stderr.contains("gave up waiting for capacity after 1 s (--wait)"),
        "{stderr}"
    );
    one_slot_ok(&fixture, &["destroy", held]);
}
