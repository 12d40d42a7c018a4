//! The tool subcommands (`verify`, `ls`, `recover`, `check-host`, `probe`), run
//! as a user would run them, on real runs.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::cli::{CliFixture, text};

/// Runs `echo hi > x` and returns its evidence directory.
fn one_run(fixture: &CliFixture) -> PathBuf {
    let out = fixture.run(&["--json", "--capture", "--", "/bin/sh", "-c", "echo hi > x"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
    PathBuf::from(summary["evidence"].as_str().expect("evidence"))
}

fn ls_json(fixture: &CliFixture, all: bool) -> Vec<serde_json::Value> {
    let mut args = vec!["ls", "--json"];
    if all {
        args.push("--all");
    }
    let out = fixture.agent_workspace(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON array");
    rows.as_array().expect("an array").clone()
}

#[test]
fn verify_accepts_a_real_bundle_and_names_every_tampered_file() {
    let fixture = CliFixture::new("verify");
    let evidence = one_run(&fixture);
    let dir = evidence.to_str().unwrap();
    let out = fixture.agent_workspace(&["verify", dir]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(stdout.starts_with(&format!("{dir}: intact (")), "{stdout}");
    assert!(stdout.trim_end().ends_with(" files)"), "{stdout}");
    let out = fixture.agent_workspace(&["verify", "--json", dir]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["intact"], true, "{report}");
    assert!(report["files_checked"].as_u64().unwrap() > 5, "{report}");

    // Change one file, remove another, add a third.
    let mut patch = std::fs::read(evidence.join("diff.patch")).expect("diff.patch");
    patch.extend_from_slice(b"+smuggled\n");
    std::fs::write(evidence.join("diff.patch"), patch).expect("tamper");
    std::fs::remove_file(evidence.join("outcome.json")).expect("remove");
    std::fs::write(evidence.join("planted.txt"), "x").expect("plant");
    let out = fixture.agent_workspace(&["verify", dir]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let problems: Vec<&str> = stdout.lines().collect();
    assert_eq!(problems.len(), 3, "{stdout}");
    for (file, says) in [
        ("diff.patch", "changed"),
        ("outcome.json", "missing"),
        ("planted.txt", "extra"),
    ] {
        assert!(
            problems
                .iter()
                .any(|l| l.starts_with(&format!("{dir}: {file}: {says}"))),
            "{file} not reported as {says}: {stdout}"
        );
    }
    let out = fixture.agent_workspace(&["verify", "--json", dir]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["intact"], false, "{report}");
    assert_eq!(
        report["problems"].as_array().map(Vec::len),
        Some(3),
        "{report}"
    );

    let missing = fixture.path().join("no-such-bundle");
    let out = fixture.agent_workspace(&["verify", missing.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no-such-bundle: no such directory"),
        "{stderr}"
    );
}

#[test]
fn ls_shows_nothing_after_runs_finished_and_all_lists_them() {
    let fixture = CliFixture::new("ls");
    let first = one_run(&fixture);
    let second = one_run(&fixture);
    let ids: Vec<String> = [&first, &second]
        .iter()
        .map(|dir| dir.file_name().unwrap().to_string_lossy().into_owned())
        .collect();

    let out = fixture.agent_workspace(&["ls"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Nothing to list says so.
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("no runs that are not cleaned up under "),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(ls_json(&fixture, false).is_empty());

    let out = fixture.agent_workspace(&["ls", "--all"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(lines[0].starts_with("RUN "), "{stdout}");
    // Oldest first, columns aligned.
    assert!(lines[1].starts_with(&ids[0]), "{stdout}");
    assert!(lines[2].starts_with(&ids[1]), "{stdout}");
    let state_column = lines[0].find("STATE").expect("STATE column");
    for line in &lines[1..] {
        assert_eq!(line.find("cleaned"), Some(state_column), "{stdout}");
    }

    let rows = ls_json(&fixture, true);
    assert_eq!(rows.len(), 2, "{rows:?}");
    for (row, id) in rows.iter().zip(&ids) {
        assert_eq!(row["run_id"], id.as_str(), "{row}");
        assert_eq!(row["state"], "cleaned", "{row}");
        assert_eq!(row["held"], false, "{row}");
        assert!(row["since_unix_ms"].as_u64().unwrap() > 0, "{row}");
    }
}

#[test]
fn recover_on_an_empty_runtime_dir_exits_0() {
    let fixture = CliFixture::new("recover-empty");
    let out = fixture.agent_workspace(&["recover"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "0 run(s) recovered, 0 live left alone, 0 already cleaned up"
    );
    let out = fixture.agent_workspace(&["recover", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(report["recovered"], serde_json::json!([]), "{report}");
}

#[test]
fn a_run_whose_runner_was_killed_is_listed_as_lost_and_recovered() {
    let fixture = CliFixture::new("recover-lost");
    let mark = support::marker("recover-lost");
    let repo = fixture.repo();
    let evidence = fixture.evidence();
    let mut runner = fixture
        .command()
        .args(["run", "--repo", repo.to_str().unwrap()])
        .args(["--evidence", evidence.to_str().unwrap()])
        .args(["--", "/bin/sh", "-c", "sleep 300", &mark])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a run");
    let deadline = Instant::now() + Duration::from_secs(30);
    let running = loop {
        let rows = ls_json(&fixture, false);
        // A command is a record, not a state: the run is sealed, and its
        // command runs in a cgroup of it.
        if let Some(row) = rows.iter().find(|r| {
            r["state"] == "sealed"
                && r["run_id"]
                    .as_str()
                    .is_some_and(|run| support::runs_in(&mark, run))
        }) {
            break row.clone();
        }
        assert!(Instant::now() < deadline, "the run never ran: {rows:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(running["held"], true, "{running}");
    let run_id = running["run_id"].as_str().unwrap().to_owned();
    let out = fixture.agent_workspace(&["ls"]);
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&run_id) && l.contains(" sealed ") && l.ends_with("live")),
        "{stdout}"
    );

    runner.kill().expect("kill the runner");
    runner.wait().expect("reap the runner");
    let rows = ls_json(&fixture, false);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["held"], false, "{rows:?}");
    let out = fixture.agent_workspace(&["ls"]);
    assert!(text(&out.stdout).contains(" lost"), "{}", text(&out.stdout));

    let out = fixture.agent_workspace(&["recover", "--evidence", evidence.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("{run_id}: recovered (found in sealed)")),
        "{stdout}"
    );
    assert!(ls_json(&fixture, false).is_empty());
    fixture.assert_verifies(&evidence.join(&run_id));
    // Recovering again finds nothing to do.
    let out = fixture.agent_workspace(&["recover", "--evidence", evidence.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    // One line: a count, not a line per past run.
    assert_eq!(
        text(&out.stdout).trim(),
        "0 run(s) recovered, 0 live left alone, 1 already cleaned up"
    );
}

#[test]
fn check_host_lists_every_finding_and_exits_0_here() {
    let fixture = CliFixture::new("check-host");
    let out = fixture.agent_workspace(&["check-host"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    for check in [
        "user_namespaces",
        "mount_namespace",
        "pid_namespace",
        "net_namespace",
        "cgroup_memory",
        "cgroup_pids",
        "seccomp",
        "overlayfs",
        "idmapped_mounts",
        "cgroup_delegation",
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(check) && l.contains(" ok ")),
            "{check} not ok in {stdout}"
        );
    }
    assert_eq!(
        stdout.lines().last(),
        Some("ready for the namespace backend"),
        "{stdout}"
    );

    let out = fixture.agent_workspace(&["check-host", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["ready"], true, "{report}");
    assert_eq!(
        report["findings"].as_array().unwrap().len(),
        agent_workspace::namespace::host_check::Check::ALL.len(),
        "one finding per check: {report}"
    );
    assert_eq!(report["required"].as_array().unwrap().len(), 14, "{report}");
}

#[test]
fn probe_prints_the_observed_facts_and_finishes_the_run() {
    let fixture = CliFixture::new("probe");
    let repo = fixture.repo();
    let evidence = fixture.evidence();
    let out = fixture.agent_workspace(&[
        "probe",
        "--repo",
        repo.to_str().unwrap(),
        "--evidence",
        evidence.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let uid_map = stdout
        .lines()
        .find(|l| l.starts_with("uid_map "))
        .unwrap_or_else(|| panic!("no uid_map in {stdout}"));
    assert!(uid_map.contains('['), "{uid_map}");
    assert!(!stdout.contains("mismatch:"), "{stdout}");
    assert!(stderr.contains(": sealed, "), "{stderr}");
    assert!(stderr.contains(" 0 mismatches; evidence "), "{stderr}");
    // The run was exported and cleaned up.
    assert!(ls_json(&fixture, false).is_empty());
    let rows = ls_json(&fixture, true);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let bundle = evidence.join(rows[0]["run_id"].as_str().unwrap());
    fixture.assert_verifies(&bundle);

    let out = fixture.agent_workspace(&[
        "probe",
        "--json",
        "--repo",
        repo.to_str().unwrap(),
        "--evidence",
        evidence.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(summary["facts"]["uid_map"].is_array(), "{summary}");
    assert_eq!(summary["mismatches"], serde_json::json!([]), "{summary}");
    assert_eq!(summary["cleaned"], true, "{summary}");

    let out =
        fixture.agent_workspace(&["probe", "--repo", repo.to_str().unwrap(), "--rev", "nope"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--rev (source.revision): nope"), "{stderr}");
}

#[test]
fn conformance_prints_one_line_per_case_and_fails_the_stack_without_isolation() {
    let fixture = CliFixture::new("conformance");
    let out = fixture.agent_workspace(&["conformance", "--json"]);
    // Which case failed, and why, is in the JSON on stdout.
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    let results: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results.len(), 10, "{results:?}");
    assert!(
        results.iter().all(|r| r["verdict"] == "passed"),
        "{results:?}"
    );

    let out = fixture.agent_workspace(&["conformance", "--backend", "host"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("conformance of the reference stack without isolation: 3 passed, 7 failed, 0 unsupported (its failures are expected"),
        "{}",
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 10, "{stdout}");
    for case in [
        "path-scope",
        "concurrency",
        "credential",
        "escape-signal",
        "escape-symlink",
        "escape-proc-root",
        "escape-hardlink",
    ] {
        assert!(stdout.contains(&format!("{case}: failed: ")), "{stdout}");
    }
    assert!(stdout.contains("snapshot: passed"), "{stdout}");
}

#[test]
fn prune_forgets_cleaned_runs_beyond_the_newest_and_keeps_the_rest() {
    let fixture = CliFixture::new("prune");
    let mut bundles = Vec::new();
    for _ in 0..3 {
        bundles.push(one_run(&fixture));
        // Journals are ordered by when they last changed.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Young runs are kept whatever their number.
    let out = fixture.agent_workspace(&["prune", "--keep", "1"]);
    assert_eq!(
        text(&out.stdout).trim(),
        "pruned 0 cleaned run(s) (0 evidence bundle(s))"
    );
    let out = fixture.agent_workspace(&["prune", "--keep", "1", "--older-than", "0", "--evidence"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "pruned 2 cleaned run(s) (2 evidence bundle(s))"
    );
    assert_eq!(ls_json(&fixture, true).len(), 1);
    assert!(!bundles[0].exists() && !bundles[1].exists());
    fixture.assert_verifies(&bundles[2]);
}
