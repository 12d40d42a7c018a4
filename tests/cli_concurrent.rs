//! Commands at once in one live workspace through the command line, as an
//! agent harness issues tool calls: sixteen `exec` processes join the same
//! detached workspace at once (each command waits until all sixteen have
//! started, so one refused or held back behind another makes the others time
//! out), each gets its own output and exit status back and its own record in
//! the evidence; `export` prints the patch while a command runs, and a second
//! `exec` runs beside it.
//!
//! Needs root, user namespaces and cgroups, as every namespace-backend test.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::cli::{CliFixture, text};
use support::read_json;

/// How many `exec`s run at once.
const AT_ONCE: usize = 16;

/// Command `i`'s script: marks itself started in `.barrier/`, then waits (up
/// to a minute, then exit 3) until all [`AT_ONCE`] have, and says who it is
/// on both streams.
fn barrier_script(i: usize) -> String {
    format!(
        "mkdir -p .barrier && : > .barrier/{i} && n=0; \
         while [ $(ls .barrier | wc -l) -lt {AT_ONCE} ]; do \
           n=$((n+1)); [ $n -gt 600 ] && {{ ls .barrier >&2; exit 3; }}; sleep 0.1; \
         done; echo out-{i}; echo err-{i} >&2; exit {i}"
    )
}

#[test]
fn sixteen_execs_from_sixteen_processes_run_at_once_each_recorded() {
    let fixture = CliFixture::new("concurrent-execs");
    let run = fixture.create(None);
    execs_at_once(&fixture, &run);
}

#[test]
fn sixteen_execs_into_one_container_run_at_once_each_recorded() {
    let fixture = CliFixture::new("concurrent-container-execs");
    let run = fixture.create_with(&["--backend", "container"]);
    execs_at_once(&fixture, &run);
}

/// Runs [`AT_ONCE`] `exec`s of [`barrier_script`] into `run` at once; checks
/// that each got its own output and status back and its own record, then
/// destroys the run and verifies its evidence.
fn execs_at_once(fixture: &CliFixture, run: &str) {
    let run = run.to_owned();
    let children: Vec<_> = (1..=AT_ONCE)
        .map(|i| {
            let child = fixture
                .command()
                .args([
                    "exec",
                    "--quiet",
                    &run,
                    "--",
                    "sh",
                    "-c",
                    &barrier_script(i),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start exec");
            (i, child)
        })
        .collect();
    let ended: Vec<_> = children
        .into_iter()
        .map(|(i, child)| (i, child.wait_with_output().unwrap()))
        .collect();
    let report: Vec<String> = ended
        .iter()
        .map(|(i, out)| format!("exec {i}: {:?} {}", out.status.code(), text(&out.stderr)))
        .collect();
    for (i, out) in ended {
        assert!(out.status.code() == i32::try_from(i).ok(), "{report:#?}");
        // Each exits with its own command's status and gets its own output.
        assert_eq!(
            out.status.code(),
            Some(i32::try_from(i).unwrap()),
            "exec {i}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), format!("out-{i}\n"));
        assert_eq!(text(&out.stderr), format!("err-{i}\n"));
    }

    let destroyed = fixture.agent_workspace(&["destroy", "--quiet", &run]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
    let bundle = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&run);
    let outcome = read_json(&bundle, "outcome.json");
    let commands = outcome["commands"].as_array().unwrap();
    let numbers: BTreeSet<u64> = commands
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=AT_ONCE as u64).collect(), "{commands:?}");
    // Each record holds its own command and its output, nothing of another's.
    for command in commands {
        let seq = command["seq"].as_u64().unwrap();
        let dir = bundle.join("commands").join(format!("{seq:04}"));
        let record = read_json(&dir, "command.json");
        let script = record["argv"][2].as_str().unwrap();
        let i: usize = (1..=AT_ONCE)
            .find(|i| script.contains(&format!("echo out-{i};")))
            .expect("the script names its command");
        assert_eq!(record["exit"]["value"], i as u64, "{record}");
        let stdout = std::fs::read_to_string(dir.join("stdout")).unwrap();
        assert_eq!(stdout, format!("out-{i}\n"), "command {seq}");
    }
    fixture.assert_verifies(&bundle);
}

#[test]
fn export_and_another_exec_run_while_a_command_runs_and_destroy_waits_its_turn() {
    let fixture = CliFixture::new("export-while-running");
    let run = fixture.create(None);
    // Changes the checkout, then waits (up to a minute) for `go`, which only
    // a second command running beside it can make.
    let long = fixture
        .command()
        .args([
            "exec",
            "--quiet",
            &run,
            "--",
            "sh",
            "-c",
            "echo changed > changed.txt; n=0; \
             while [ ! -e go ]; do n=$((n+1)); [ $n -gt 600 ] && exit 3; sleep 0.1; done",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the long exec");

    // The patch as it is now, the command still running.
    let deadline = Instant::now() + Duration::from_secs(60);
    let patch = loop {
        let exported = fixture.agent_workspace(&["export", &run]);
        assert_eq!(
            exported.status.code(),
            Some(0),
            "{}",
            text(&exported.stderr)
        );
        let patch = text(&exported.stdout);
        if patch.contains("+changed") || Instant::now() > deadline {
            break patch;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(patch.contains("changed.txt"), "{patch}");

    // Ending the workspace under a running command is refused, and harms
    // nothing: the command goes on.
    let early = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(early.status.code(), Some(75), "{}", text(&early.stderr));
    assert!(
        text(&early.stderr).contains("in use"),
        "{}",
        text(&early.stderr)
    );

    let go = fixture.agent_workspace(&["exec", "--quiet", &run, "--", "touch", "go"]);
    assert_eq!(go.status.code(), Some(0), "{}", text(&go.stderr));
    let long = long.wait_with_output().unwrap();
    assert_eq!(long.status.code(), Some(0), "{}", text(&long.stderr));

    let destroyed = fixture.agent_workspace(&["destroy", "--quiet", &run]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
    let bundle = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&run);
    let diff = std::fs::read_to_string(bundle.join("diff.patch")).unwrap();
    assert!(
        diff.contains("+++ b/changed.txt") && diff.contains("diff --git a/go b/go"),
        "{diff}"
    );
}
