//! The runner over the default stack (real checkouts, namespaces and cgroups), on
//! every way a run can end: each test checks that the evidence was exported,
//! sealed and verifies, that `outcome.json` tells how the run ended, and that
//! nothing of the run remains (run directory, cgroups, processes).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::time::{Duration, Instant};

use support::{
    Fixture, HELLO, assert_has_files, assert_intact, command, eraser, git, journal_states,
    list_tree, marker, read_json, read_outcome, shell, wait_for_process,
};
use tokio_util::sync::CancellationToken;
use workspace_core::boundary::KillCause;
use workspace_core::contract::{
    Assurance, CleanupOwner, Contract, DurationSpec, Fixture as EnvFixture, RequiredCheck,
};
use workspace_core::digest::sha256_hex;
use workspace_core::evidence::{ExitStatusRecord, Tamper, verify};
use workspace_core::lifecycle::{FailureCause, State, StateName};
use workspace_core::runner::{
    CommandIo, CommandOutcome, CreateOptions, FinishOptions, RunErrorKind, RunReport,
};

/// Checks shared by every run that was concluded: sealed and intact evidence, the
/// outcome equal to the report's, the journal ended in `cleaned`, nothing left.
fn assert_concluded(fx: &Fixture, report: &RunReport, markers: &[&str]) {
    assert!(report.cleaned, "not cleaned: {:?}", report.cleanup_errors);
    assert!(
        report.cleanup_errors.is_empty(),
        "{:?}",
        report.cleanup_errors
    );
    assert!(report.evidence_sealed);
    let paths = fx.paths(&report.run_id);
    assert_eq!(report.evidence, paths.evidence);
    assert_intact(&report.evidence);
    assert_has_files(
        &report.evidence,
        &[
            "contract.json",
            "checks.json",
            "approvals.json",
            "journal.jsonl",
            "outcome.json",
            "manifest.json",
        ],
    );
    assert_eq!(read_outcome(&report.evidence), report.outcome);
    assert_eq!(report.outcome.run_id, report.run_id);
    assert!(
        report.outcome.errors.is_empty(),
        "{:?}",
        report.outcome.errors
    );
    let states = journal_states(&paths.journal);
    assert_eq!(states.last(), Some(&State::Cleaned), "{states:?}");
    fx.assert_nothing_left(&report.run_id, markers);
}

/// The files of a sealed run that got as far as its checkout.
fn assert_sealed_run_files(report: &RunReport) {
    assert_has_files(
        &report.evidence,
        &["source.json", "observed.json", "diff.patch", "changes.json"],
    );
}

/// Runs `script` (with `mark` as `$0`) as the one command of a run under
/// `contract`, its output captured, and returns the run's report.
async fn run_shell(fx: &Fixture, contract: Contract, script: &str, mark: &str) -> RunReport {
    fx.runner()
        .run(
            contract,
            &shell(script, mark),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap()
}

fn read_evidence(report: &RunReport, rel: &str) -> String {
    String::from_utf8(std::fs::read(report.evidence.join(rel)).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_command_exports_a_patch_that_applies_to_the_base_commit() {
    let fx = Fixture::new("success");
    let mark = marker("success");
    let report = run_shell(
        &fx,
        fx.contract(),
        "echo hi > x; echo to-stdout; echo to-stderr >&2",
        &mark,
    )
    .await;
    assert_concluded(&fx, &report, &[&mark]);
    assert_sealed_run_files(&report);

    let outcome = &report.outcome;
    assert_eq!(outcome.ended_in, StateName::Exported);
    assert_eq!(outcome.failure, None);
    assert_eq!(outcome.commands.len(), 1);
    let first = &outcome.commands[0];
    assert_eq!(first.seq, 1);
    assert_eq!(first.exit.status, ExitStatusRecord::Code(0));
    assert_eq!(first.exit.killed, None);
    assert!(first.succeeded());
    assert_eq!(outcome.leaks.as_ref().map(|l| l.is_clean()), Some(true));

    // The output went to commands/0001, each stream to its own file.
    assert_eq!(
        read_evidence(&report, "commands/0001/stdout"),
        "to-stdout\n"
    );
    assert_eq!(
        read_evidence(&report, "commands/0001/stderr"),
        "to-stderr\n"
    );
    let recorded = read_json(&report.evidence, "commands/0001/command.json");
    assert!(recorded.to_string().contains(&mark), "{recorded}");

    // The source record names the base commit.
    let source = read_json(&report.evidence, "source.json");
    assert_eq!(source["commit"], fx.base_commit.as_str());

    // The patch adds x, its digest is in the outcome, changes.json lists x.
    let patch = std::fs::read(report.evidence.join("diff.patch")).unwrap();
    assert_eq!(
        outcome.patch_sha256.as_deref(),
        Some(sha256_hex(&patch).as_str())
    );
    assert_eq!(outcome.changed_paths, 1);
    let text = String::from_utf8_lossy(&patch);
    assert!(text.contains("+hi"), "{text}");
    let changes = read_json(&report.evidence, "changes.json");
    assert_eq!(changes.as_array().map(Vec::len), Some(1), "{changes}");
    assert_eq!(changes[0]["path"], "x");
    assert_eq!(changes[0]["change"]["kind"], "added");

    // It applies to a clean clone at the base commit and gives the run's result.
    let clone = fx.base.path().join("clone");
    git(
        fx.base.path(),
        &[
            "clone",
            "-q",
            fx.repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    git(&clone, &["checkout", "-q", &fx.base_commit]);
    let patch_path = report.evidence.join("diff.patch");
    git(&clone, &["apply", "--check", patch_path.to_str().unwrap()]);
    git(&clone, &["apply", patch_path.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(clone.join("x")).unwrap(), "hi\n");
    assert_eq!(
        std::fs::read_to_string(clone.join("hello.txt")).unwrap(),
        HELLO
    );
    // The source repository itself was not touched.
    assert!(!fx.repo.join("x").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_zero_exit_is_recorded_and_the_run_still_exported_and_cleaned() {
    let fx = Fixture::new("exit3");
    let mark = marker("exit3");
    let report = run_shell(&fx, fx.contract(), "echo partial > y; exit 3", &mark).await;
    assert_concluded(&fx, &report, &[&mark]);
    assert_sealed_run_files(&report);
    let last = report.last_command().unwrap();
    assert_eq!(last.exit.status, ExitStatusRecord::Code(3));
    assert_eq!(last.exit.killed, None);
    assert_eq!(last.shell_status(), 3);
    assert!(!last.succeeded());
    // A failing command is an outcome, not a failed run.
    assert_eq!(report.outcome.failure, None);
    assert_eq!(report.outcome.ended_in, StateName::Exported);
    // Its changes are exported all the same.
    assert_eq!(report.outcome.changed_paths, 1);
    assert!(read_evidence(&report, "diff.patch").contains("+partial"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_over_the_wall_time_is_killed_with_its_setsid_children() {
    let fx = Fixture::new("timeout");
    let outer = marker("timeout-outer");
    let inner = marker("timeout-setsid-child");
    let mut contract = fx.contract();
    contract.environment.limits.wall_time = Some(DurationSpec::from_secs(1));
    // The background child leaves the command's session and process group.
    let script = format!("setsid /bin/sh -c 'sleep 30; true' {inner} & sleep 30; true");
    let watcher = {
        let inner = inner.clone();
        std::thread::spawn(move || wait_for_process(&inner, Duration::from_secs(20)))
    };
    let started = Instant::now();
    let report = run_shell(&fx, contract, &script, &outer).await;
    let took = started.elapsed();
    assert!(
        watcher.join().unwrap(),
        "the setsid child never ran: the test would prove nothing"
    );
    assert!(took < Duration::from_secs(25), "took {took:?}");
    assert_concluded(&fx, &report, &[&outer, &inner]);
    let last = report.last_command().unwrap();
    assert_eq!(last.exit.killed, Some(KillCause::Timeout), "{last:?}");
    assert_eq!(last.shell_status(), 124);
    assert!(last.duration_ms >= 900, "{last:?}");
    assert!(last.duration_ms < 20_000, "{last:?}");
    let recorded = read_json(&report.evidence, "commands/0001/command.json");
    assert!(recorded.to_string().contains("wall-time"), "{recorded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_background_process_writes_after_its_command_ended_is_kept_as_late_output() {
    let fx = Fixture::new("late-output");
    let mark = marker("late-output");
    let ws = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .unwrap();
    // The background process writes only once the first command has ended and
    // the second one asks it to (a file in the run's own /tmp), then says so.
    let first = shell(
        "( while [ ! -e /tmp/go ]; do sleep 0.02; done; echo late; echo late-err >&2; \
         : > /tmp/done ) >&1 2>&2 & echo early",
        &mark,
    );
    assert!(
        ws.exec(&first, CommandIo::captured())
            .await
            .unwrap()
            .succeeded()
    );
    let second = shell(
        ": > /tmp/go; while [ ! -e /tmp/done ]; do sleep 0.02; done",
        &mark,
    );
    assert!(
        ws.exec(&second, CommandIo::captured())
            .await
            .unwrap()
            .succeeded()
    );
    let report = ws.finish().await.unwrap();
    assert_concluded(&fx, &report, &[&mark]);
    let read = |name: &str| std::fs::read_to_string(report.evidence.join(name)).unwrap();
    assert_eq!(read("commands/0001/stdout"), "early\n");
    assert_eq!(read("commands/0001/late.stdout"), "late\n");
    assert_eq!(read("commands/0001/late.stderr"), "late-err\n");
    assert!(!report.evidence.join("commands/0002/late.stdout").exists());
    let late = &report.outcome.late_output;
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(
        (late[0].seq, late[0].stdout_bytes, late[0].stderr_bytes),
        (1, 5, 9)
    );
}

/// Late output cannot be erased: a background process that writes after its
/// command ended, then truncates its stdout and stderr, seeks and overwrites,
/// writes at offset 0 and clears `O_APPEND`, still has every byte it wrote in
/// `late.stdout` and `late.stderr` (the command's streams are pipes copied by
/// the output keeper: each attempt fails on a pipe or changes nothing). The
/// command itself truncating its stdout in the foreground loses nothing of its
/// stream either. Control: the write before the attempts is kept, the bundle
/// verifies, and nothing of the run is left on the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_output_survives_a_process_that_truncates_or_overwrites_its_descriptor() {
    eraser::require_python();
    let fx = Fixture::new("late-output-erased");
    let mark = marker("late-output-erased");
    let ws = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .unwrap();
    let ran = ws
        .exec(&eraser::first_command(&mark), CommandIo::captured())
        .await
        .unwrap();
    assert!(ran.succeeded(), "{ran:?}");
    let said = ws
        .exec(&eraser::second_command(&mark), CommandIo::captured())
        .await
        .unwrap();
    assert!(said.succeeded(), "{said:?}");
    let report = ws.finish().await.unwrap();
    assert_concluded(&fx, &report, &[&mark]);
    eraser::assert_nothing_erased(&report.evidence);
}

/// Runs `sleep 30` in a run created with a cancel token, cancels the token
/// `delay` after the command is seen running, and concludes the run.
async fn cancel_a_running_command(
    fx: &Fixture,
    mark: &str,
    delay: Duration,
) -> (CommandOutcome, RunReport) {
    let cancel = CancellationToken::new();
    let ws = fx
        .runner()
        .create(
            fx.contract(),
            CreateOptions {
                cancel: Some(cancel.clone()),
                ..CreateOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(ws.state(), &State::Sealed);
    let canceller = {
        let mark = mark.to_owned();
        std::thread::spawn(move || {
            let seen = wait_for_process(&mark, Duration::from_secs(20));
            std::thread::sleep(delay);
            cancel.cancel();
            seen
        })
    };
    let started = Instant::now();
    let outcome = ws
        .exec(&shell("sleep 30; true", mark), CommandIo::captured())
        .await
        .unwrap();
    assert!(canceller.join().unwrap(), "the command never started");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(!outcome.succeeded());

    // No further command starts once cancelled.
    let refused = ws
        .exec(&shell("echo late > late", mark), CommandIo::captured())
        .await;
    assert!(refused.is_err());

    let report = ws.finish().await.unwrap();
    assert_concluded(fx, &report, &[mark]);
    assert_eq!(report.outcome.failure, Some(FailureCause::Cancelled));
    assert_eq!(report.outcome.ended_in, StateName::Failed);
    assert_eq!(report.outcome.commands.len(), 1);
    assert_eq!(report.outcome.changed_paths, 0);
    (outcome, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_while_a_command_runs_stops_it_and_fails_the_run_as_cancelled() {
    let fx = Fixture::new("cancel");
    let mark = marker("cancel");
    cancel_a_running_command(&fx, &mark, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cancelled_while_waited_for_is_recorded_as_killed_cancelled() {
    let fx = Fixture::new("cancel-record");
    let mark = marker("cancel-record");
    // Long enough for the runner to be inside `Execution::wait` when the token fires.
    let (outcome, report) = cancel_a_running_command(&fx, &mark, Duration::from_millis(300)).await;
    assert_eq!(
        outcome.exit.killed,
        Some(KillCause::Cancelled),
        "{outcome:?}"
    );
    assert_ne!(
        outcome.exit.status,
        ExitStatusRecord::Unknown,
        "{outcome:?}"
    );
    assert_eq!(outcome.error, None);
    assert_eq!(report.outcome.commands[0], outcome);
    let recorded = read_json(&report.evidence, "commands/0001/command.json");
    assert!(recorded.to_string().contains("cancelled"), "{recorded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_the_stack_cannot_keep_is_refused_before_anything_is_created() {
    let fx = Fixture::new("unsupported");
    let mut contract = fx.contract();
    contract.environment.runtime.image =
        Some(format!("oci-layout:/images/x@sha256:{}", "0".repeat(64)));
    contract.process.cleanup_owner = CleanupOwner::Caller;
    let error = fx
        .runner()
        .create(contract, CreateOptions::default())
        .await
        .expect_err("a pinned image must be refused by the namespace stack");
    assert!(error.evidence.is_none(), "{error:?}");
    match error.kind.as_ref() {
        RunErrorKind::Unsupported(problems) => {
            let fields: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
            assert_eq!(
                fields,
                ["environment.runtime.image", "process.cleanup_owner"],
                "{problems}"
            );
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    for dir in [&fx.runtime, &fx.evidence] {
        assert!(
            list_tree(dir).is_empty(),
            "{} was written: {:?}",
            dir.display(),
            list_tree(dir)
        );
    }
    fx.assert_nothing_left(&error.run_id, &[]);
}

/// `environment.fixtures` (one, pinned by `fixture_sha256`) and
/// `environment.runtime.lockfiles` over the fixture repository's files.
fn pinning(fx: &Fixture, fixture_sha256: String) -> Contract {
    let mut contract = fx.contract();
    contract.environment.fixtures = vec![EnvFixture {
        name: "greeting".into(),
        path: "hello.txt".into(),
        sha256: Some(fixture_sha256),
    }];
    contract.environment.runtime.lockfiles = vec!["src/lib.txt".into(), "Cargo.lock".into()];
    contract
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_files_are_digested_as_provisioned_and_recorded() {
    let fx = Fixture::new("pinned");
    let hello = std::fs::read(fx.repo.join("hello.txt")).unwrap();
    let lib = std::fs::read(fx.repo.join("src/lib.txt")).unwrap();
    let contract = pinning(&fx, sha256_hex(&hello));
    // The command edits the fixture: the record is of the checkout as made.
    let report = run_shell(&fx, contract, "echo edited > hello.txt", "pinned").await;
    assert_concluded(&fx, &report, &[]);
    assert_eq!(report.outcome.failure, None);
    let source = read_json(&report.evidence, "source.json");
    assert_eq!(
        source["pinned"],
        serde_json::json!([
            {"path": "hello.txt", "pinned_as": "fixture", "name": "greeting",
             "sha256": sha256_hex(&hello)},
            {"path": "src/lib.txt", "pinned_as": "lockfile", "sha256": sha256_hex(&lib)},
            {"path": "Cargo.lock", "pinned_as": "lockfile", "sha256": null},
        ]),
        "{source}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixture_that_is_not_what_the_contract_pins_fails_the_run_before_any_command() {
    let fx = Fixture::new("fixture-mismatch");
    let wrong = sha256_hex(b"another file");
    let contract = pinning(&fx, wrong.clone());
    let error = fx
        .runner()
        .create(contract, CreateOptions::default())
        .await
        .expect_err("a fixture of another digest");
    let cause = error.kind.failure_cause();
    match &cause {
        FailureCause::Fixture {
            name,
            path,
            expected,
            found,
        } => {
            assert_eq!((name.as_str(), path.as_str()), ("greeting", "hello.txt"));
            assert_eq!(expected, &wrong);
            let hello = std::fs::read(fx.repo.join("hello.txt")).unwrap();
            assert_eq!(found.as_deref(), Some(sha256_hex(&hello).as_str()));
        }
        other => panic!("expected a fixture failure, got {other:?}"),
    }
    assert!(
        cause.to_string().contains("fixture greeting (hello.txt)"),
        "{cause}"
    );
    // Its evidence is exported and sealed; no command ran; nothing is left.
    let evidence = error.evidence.clone().expect("evidence of the failed run");
    assert_intact(&evidence);
    let outcome = read_outcome(&evidence);
    assert_eq!(outcome.failure, Some(cause));
    assert!(outcome.commands.is_empty(), "{:?}", outcome.commands);
    fx.assert_nothing_left(&error.run_id, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_reads_back_namespaces_cgroups_read_only_mounts_and_hidden_paths() {
    let fx = Fixture::new("probe-readback");
    let mut contract = fx.contract();
    contract.filesystem.excluded = vec!["src".into()];
    // Nor does the repository's history show it: its object store stays out.
    let report = run_shell(
        &fx,
        contract,
        "ls src | wc -l; git cat-file -p HEAD:src/lib.txt 2>/dev/null && echo HISTORY-SHOWS-IT; true",
        "probe-readback",
    )
    .await;
    assert_concluded(&fx, &report, &[]);
    let observed = read_json(&report.evidence, "observed.json");
    let probe = &observed["probe"];
    assert_eq!(probe["mismatches"], serde_json::json!([]), "{observed}");
    let facts = &probe["facts"];
    // Host root enters pid 1: the probe's shell was pid 1's first process (its
    // ids, privileges and environment the ones compared above), not a join.
    assert_eq!(
        facts["probe_status"], "ended (reaped by the sandbox's pid 1)",
        "{observed}"
    );
    // Each namespace the run's own, beside the runner's.
    let namespaces = facts["namespaces"].as_object().unwrap();
    assert_eq!(namespaces.len(), 7, "{observed}");
    for (kind, ids) in namespaces {
        assert_ne!(ids["run"], ids["host"], "{kind}: {observed}");
    }
    // In pid 1's cgroup in each of the run's hierarchies, born there: no move
    // (moving another process waits for an RCU grace period).
    let runs: Vec<&str> = facts["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|line| line.as_str().filter(|l| l.contains("/run-")))
        .collect();
    assert!(
        !runs.is_empty() && runs.iter().all(|line| line.ends_with("/init")),
        "{observed}"
    );
    // Each read-only mount refused a write; the excluded directory shows nothing.
    assert_eq!(facts["writes"]["/usr"], "refused", "{observed}");
    assert_eq!(facts["masked"]["/workspace/src"], "hidden", "{observed}");
    let listed = std::fs::read_to_string(report.evidence.join("commands/0001/stdout")).unwrap();
    assert_eq!(listed.trim(), "0", "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolchain_the_run_lacks_fails_closed_when_required_and_is_recorded_when_best_effort() {
    let fx = Fixture::new("toolchain");
    let mut contract = fx.contract();
    contract.environment.runtime.toolchain = Some("git 999.1".into());
    contract.environment.assurance = Assurance::Required;
    let error = fx
        .runner()
        .create(contract.clone(), CreateOptions::default())
        .await
        .expect_err("git 999.1 is not what the run has");
    let cause = error.kind.failure_cause().to_string();
    assert!(
        cause.contains("the declared toolchain is \"git 999.1\""),
        "{cause}"
    );
    let evidence = error.evidence.clone().expect("evidence of the failed seal");
    assert_intact(&evidence);
    assert!(read_outcome(&evidence).commands.is_empty());
    fx.assert_nothing_left(&error.run_id, &[]);

    // Best effort: the run goes on and the evidence says what was downgraded.
    contract.environment.assurance = Assurance::BestEffort;
    let report = run_shell(&fx, contract, "true", "toolchain").await;
    assert_concluded(&fx, &report, &[]);
    let observed = read_json(&report.evidence, "observed.json");
    let mismatches = observed["probe"]["mismatches"].to_string();
    assert!(mismatches.contains("git 999.1"), "{observed}");
    // The limits as the kernel enforces them, read back from the cgroup files.
    let limits = &observed["probe"]["facts"]["limits"];
    let planned = &observed["environment"]["limits"];
    assert_eq!(limits["pids_max"], planned["pids"], "{observed}");
    assert!(limits["memory_bytes"].as_u64().unwrap() > 0, "{observed}");
    assert_eq!(limits["cpu_quota_period_us"][1], 100_000, "{observed}");
    assert!(
        observed["probe"]["facts"]["toolchain"]
            .as_str()
            .unwrap()
            .starts_with("git version")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_revision_that_does_not_exist_is_refused_before_anything_is_created() {
    let fx = Fixture::new("badrev");
    let error = fx
        .runner()
        .create(
            fx.contract_at("no-such-branch-anywhere"),
            CreateOptions::default(),
        )
        .await
        .expect_err("a missing revision must be refused");
    // The source boundary resolved the revision before the run existed: no
    // evidence, no journal, no checkout, and the problem names the field.
    assert_eq!(error.evidence, None, "{error:?}");
    match error.kind.as_ref() {
        RunErrorKind::InvalidContract(problems) => {
            let problem = problems.iter().next().expect("one problem");
            assert_eq!(problem.path, "source.revision", "{problems}");
            assert!(
                problem.message.contains("no-such-branch-anywhere"),
                "{problems}"
            );
        }
        other => panic!("expected the contract refused at source.revision, got {other:?}"),
    }
    assert!(!fx.paths(&error.run_id).evidence.exists());
    assert!(!fx.paths(&error.run_id).journal.exists());
    fx.assert_nothing_left(&error.run_id, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_one_byte_of_a_commands_output_is_found_by_verify() {
    let fx = Fixture::new("tamper");
    let mark = marker("tamper");
    let report = run_shell(&fx, fx.contract(), "echo the-original-output", &mark).await;
    assert_concluded(&fx, &report, &[&mark]);
    let stdout = report.evidence.join("commands/0001/stdout");
    let mut bytes = std::fs::read(&stdout).unwrap();
    assert_eq!(bytes, b"the-original-output\n");
    bytes[4] ^= 0x01;
    let mut perms = std::fs::metadata(&stdout).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)] // root can, and the tamperer is root
    perms.set_readonly(false);
    std::fs::set_permissions(&stdout, perms).unwrap();
    std::fs::write(&stdout, &bytes).unwrap();
    let found = verify(&report.evidence).unwrap();
    assert!(!found.is_intact());
    assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
    assert!(
        matches!(&found.problems[0], Tamper::Changed { path, .. } if path == "commands/0001/stdout"),
        "{:?}",
        found.problems
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_checks_run_before_export_and_are_bound_to_the_patch_digest() {
    let fx = Fixture::new("checks");
    let mark = marker("checks");
    let mut contract = fx.contract();
    contract.promotion.required_checks = vec![
        RequiredCheck {
            name: "x exists".into(),
            command: vec!["/bin/sh".into(), "-c".into(), "test -f x".into()],
            timeout: None,
        },
        RequiredCheck {
            name: "y exists".into(),
            command: vec!["/bin/sh".into(), "-c".into(), "test -f y".into()],
            timeout: Some(DurationSpec::from_secs(30)),
        },
    ];
    let report = run_shell(&fx, contract, "echo hi > x", &mark).await;
    assert_concluded(&fx, &report, &[&mark]);
    let digest = report.outcome.patch_sha256.clone().expect("a patch digest");
    let patch = std::fs::read(report.evidence.join("diff.patch")).unwrap();
    assert_eq!(digest, sha256_hex(&patch));
    let checks = read_json(&report.evidence, "checks.json");
    let checks = checks.as_array().expect("checks.json is a list");
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert_eq!(checks[0]["name"], "x exists");
    assert_eq!(checks[0]["passed"], true);
    assert_eq!(checks[0]["patch_sha256"], digest.as_str());
    assert_eq!(checks[1]["name"], "y exists");
    assert_eq!(checks[1]["passed"], false);
    assert_eq!(checks[1]["patch_sha256"], digest.as_str());
    // The checks ran as commands 2 and 3 of the run, in the sealed workspace.
    let commands = &report.outcome.commands;
    assert_eq!(commands.len(), 3, "{commands:?}");
    assert_eq!(commands[1].argv[2], "test -f x");
    assert_eq!(commands[1].exit.status, ExitStatusRecord::Code(0));
    assert_eq!(commands[2].exit.status, ExitStatusRecord::Code(1));
    assert!(report.evidence.join("commands/0003/command.json").is_file());
    // A failed check does not fail the run: it is recorded for promotion to judge.
    assert_eq!(report.outcome.failure, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_edits_what_it_verifies_fails_and_its_edit_is_not_in_the_patch() {
    let fx = Fixture::new("sneaky");
    let mark = marker("sneaky");
    let mut contract = fx.contract();
    let check = |name: &str, script: &str| RequiredCheck {
        name: name.into(),
        command: vec!["/bin/sh".into(), "-c".into(), script.into()],
        timeout: None,
    };
    contract.promotion.required_checks = vec![
        check("sneaky", "echo sneaky >> x; exit 0"),
        check("x exists", "test -f x"),
    ];
    let ws = fx
        .runner()
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    ws.exec(&shell("echo hi > x", &mark), CommandIo::captured())
        .await
        .unwrap();
    let approvals = Some(Vec::new());
    let report = ws
        .finish_with(FinishOptions { promote: approvals })
        .await
        .unwrap();
    assert_concluded(&fx, &report, &[&mark]);

    // The patch is the state the checks were given: the sneaky line is not in it.
    let patch = read_evidence(&report, "diff.patch");
    assert!(patch.contains("+hi"), "{patch}");
    assert!(
        !patch.contains("sneaky"),
        "a check's own edit landed in the patch:\n{patch}"
    );
    let digest = report.outcome.patch_sha256.clone().expect("a patch digest");
    assert_eq!(digest, sha256_hex(patch.as_bytes()));

    let checks = read_json(&report.evidence, "checks.json");
    let checks = checks.as_array().expect("checks.json is a list");
    assert_eq!(checks.len(), 2, "{checks:?}");
    // It exited 0, yet failed: it changed x, and says so.
    assert_eq!(checks[0]["passed"], false, "{checks:?}");
    assert_eq!(checks[0]["patch_sha256"], digest.as_str());
    assert_eq!(checks[0]["changed_paths"], serde_json::json!(["x"]));
    let failure = checks[0]["failure"].as_str().unwrap();
    assert!(
        failure.contains("changed the workspace") && failure.contains('x'),
        "{failure}"
    );
    // The next check saw the edited state, and its record says which: not the
    // patch's digest, so it can vouch for nothing that is promoted.
    assert_eq!(checks[1]["passed"], true);
    assert_ne!(checks[1]["patch_sha256"], digest.as_str());

    assert_eq!(report.outcome.changed_after_checks, ["x"]);
    // The run's exit status is its own command's, not the last check's.
    let commands = &report.outcome.commands;
    assert_eq!(commands[1].check.as_deref(), Some("sneaky"));
    assert_eq!(report.last_command().map(|c| c.seq), Some(1));
    let promotion = read_json(&report.evidence, "promotion.json");
    assert_eq!(promotion["result"], "refused", "{promotion}");
    let reason = promotion["reason"].as_str().unwrap();
    assert!(
        reason
            .contains("required check \"sneaky\" failed: it changed the workspace it verified: x"),
        "{reason}"
    );
    assert_eq!(report.outcome.failure, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_run_exports_an_empty_patch() {
    let fx = Fixture::new("empty");
    let mark = marker("empty");
    let ws = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .unwrap();
    let run_id = ws.run_id().clone();
    let run_dir = fx.paths(&run_id).run_dir;
    assert!(run_dir.is_dir());
    // Nothing leased, no service: no record of either is written.
    for none in ["leases.json", "services.json"] {
        assert!(!run_dir.join(none).exists(), "{none} written for nothing");
    }
    let report = ws.finish().await.unwrap();
    assert_concluded(&fx, &report, &[&mark]);
    assert!(report.outcome.commands.is_empty());
    assert_eq!(report.outcome.changed_paths, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_checkout_leaves_what_gitignore_ignores_out_of_its_patch() {
    let fx = Fixture::new("ignored");
    std::fs::write(fx.repo.join(".gitignore"), "*.log\n").unwrap();
    support::git(&fx.repo, &["add", ".gitignore"]);
    support::git(&fx.repo, &["commit", "-q", "-m", "ignore logs"]);
    let report = run_shell(
        &fx,
        fx.contract(),
        "echo x > a.log; echo y > b.txt",
        "ignored",
    )
    .await;
    assert_concluded(&fx, &report, &[]);
    let patch = read_evidence(&report, "diff.patch");
    assert!(
        patch.contains("b/b.txt") && !patch.contains("a.log"),
        "{patch}"
    );
    assert_eq!(report.outcome.changed_paths, 1);
    let changes = read_json(&report.evidence, "changes.json");
    assert_eq!(support::ignored_paths(&changes), ["a.log"], "{changes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_command_used_is_read_from_its_cgroup_into_the_evidence() {
    let fx = Fixture::new("usage");
    // 32 MiB held at once, and some CPU.
    let script = "b = b'x' * (32 << 20); sum(range(3 * 10**6))";
    let report = fx
        .runner()
        .run(
            fx.contract(),
            &command(&["python3", "-c", script], None),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(report.evidence.join("commands/0001/command.json")).unwrap(),
    )
    .unwrap();
    let usage = &record["usage"];
    let peak = usage["peak_memory_bytes"].as_u64().unwrap_or(0);
    assert!(peak >= 32 << 20, "peak memory {peak}: {record}");
    assert!(peak < 1 << 30, "peak memory {peak}: {record}");
    assert!(usage["cpu_time_us"].as_u64().unwrap_or(0) > 0, "{record}");
    // The outcome carries the same figures, and the whole workspace's: at
    // least what its one command used.
    assert_eq!(
        report.outcome.commands[0].exit.usage.peak_memory_bytes,
        Some(peak)
    );
    let whole = report.outcome.usage;
    assert!(whole.peak_memory_bytes.unwrap_or(0) >= peak, "{whole:?}");
    assert!(
        whole.cpu_time_us.unwrap_or(0) >= usage["cpu_time_us"].as_u64().unwrap_or(0),
        "{whole:?}"
    );
}
