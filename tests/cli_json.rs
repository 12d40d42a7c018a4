//! The command line as an agent harness scripts it: every `--json` answer is
//! one JSON document with the fields `docs/cli-json.md` names; `run` and
//! `exec` keep the command's streams where they were and answer on stderr's
//! last line, or with `--capture` carry the output inline on stdout; an error
//! is an `{"error": ...}` answer with the exit status it has without
//! `--json`; a failed required check shows the end of its output and its
//! record; and checks read back from the evidence stay checks.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;
use support::cli::{CliFixture, text};

/// A contract whose one required check `tests` runs `script`.
fn contract_with_check(fixture: &CliFixture, script: &str) -> PathBuf {
    let file = fixture.path().join("checked.toml");
    std::fs::write(
        &file,
        format!(
            r#"
objective = "a harness drives it"
shape = "narrow-fix"
[source]
repo = "."
revision = "HEAD"
[filesystem]
writable = ["."]
[promotion]
target = "patch"
[[promotion.required_checks]]
name = "tests"
command = ["sh", "-c", "{script}"]
"#
        ),
    )
    .unwrap();
    file
}

/// The check that fails: 30 lines on stdout, one on stderr (with an escape
/// sequence a terminal would act on), exit 1.
const FAILING_CHECK: &str =
    "for i in $(seq 1 30); do echo line $i; done; printf 'it broke \\\\033[2J\\\\n' >&2; exit 1";

/// stdout as the one JSON document it must be.
fn stdout_json(out: &std::process::Output) -> Value {
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout:?}"))
}

/// The last line of stderr as the JSON document it must be.
fn stderr_json(out: &std::process::Output) -> Value {
    let stderr = text(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stderr:?}"))
}

/// `create --json` (with `extra`), which must succeed; its answer.
fn create_json(fixture: &CliFixture, extra: &[&str]) -> Value {
    let repo = fixture.repo();
    let mut args = vec!["create", "--repo", repo.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = fixture.agent_workspace(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let created = stdout_json(&out);
    assert!(created["run_id"].is_string(), "{created}");
    assert_eq!(created["backend"], "namespace", "{created}");
    assert_eq!(created["state"], "detached", "{created}");
    assert!(
        Path::new(created["evidence"].as_str().unwrap()).is_dir(),
        "{created}"
    );
    created
}

fn path_of(value: &Value) -> PathBuf {
    PathBuf::from(
        value
            .as_str()
            .unwrap_or_else(|| panic!("not a path: {value}")),
    )
}

#[test]
fn run_json_keeps_the_streams_and_answers_on_the_last_line_of_stderr() {
    let fixture = CliFixture::new("json-run");
    let out = fixture.run(&[
        "--json",
        "--",
        "sh",
        "-c",
        "echo out; echo hi > x; printf 'no newline' >&2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The command's stdout is on stdout, its stderr on stderr, as without --json.
    assert_eq!(text(&out.stdout), "out\n");
    let stderr = text(&out.stderr);
    assert!(stderr.starts_with("no newline\n{"), "{stderr:?}");
    let summary = stderr_json(&out);
    let run_id = summary["run_id"].as_str().unwrap();
    assert_eq!(summary["exit_status"], 0, "{summary}");
    assert_eq!(summary["changed_paths"], 1, "{summary}");
    assert_eq!(summary["cleaned"], true, "{summary}");
    let command = &summary["command"];
    assert_eq!(command["run_id"], run_id, "{summary}");
    assert_eq!(command["exit_code"], 0, "{summary}");
    assert_eq!(command["stdout_bytes"], 4, "{summary}");
    assert_eq!(command["stderr_bytes"], 10, "{summary}");
    assert_eq!(
        std::fs::read(path_of(&command["stdout_path"])).unwrap(),
        b"out\n"
    );
    // Without --capture the output is not inline.
    assert!(command.get("stdout").is_none(), "{summary}");

    // --quiet drops the summary line, not the answer asked for.
    let out = fixture.run(&["--quiet", "--json", "--", "true"]);
    assert_eq!(stderr_json(&out)["exit_status"], 0);
}

#[test]
fn run_json_capture_carries_the_output_inline_on_stdout() {
    let fixture = CliFixture::new("json-run-capture");
    let out = fixture.run(&[
        "--json",
        "--capture",
        "--",
        "sh",
        "-c",
        "echo text; printf '\\377\\000\\376' >&2; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let summary = stdout_json(&out);
    assert_eq!(summary["exit_status"], 3, "{summary}");
    let command = &summary["command"];
    assert_eq!(command["stdout"], "text\n", "{summary}");
    assert!(command.get("stdout_base64").is_none(), "{summary}");
    assert!(command.get("stderr").is_none(), "{summary}");
    let stderr = base64::engine::general_purpose::STANDARD
        .decode(command["stderr_base64"].as_str().unwrap())
        .unwrap();
    assert_eq!(stderr, b"\xff\x00\xfe");
    // Nothing of the command's passed through.
    assert!(!text(&out.stderr).contains("text"), "{}", text(&out.stderr));
}

#[test]
fn exec_json_says_how_the_command_ended_and_where_its_output_is() {
    let fixture = CliFixture::new("json-exec");
    let created = create_json(&fixture, &[]);
    let run = created["run_id"].as_str().unwrap();
    let evidence = path_of(&created["evidence"]);

    // Passed through, the answer on stderr's last line.
    let out = fixture.agent_workspace(&[
        "exec",
        run,
        "--json",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; kill -9 $$",
    ]);
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "out\n");
    assert!(
        text(&out.stderr).starts_with("err\n"),
        "{}",
        text(&out.stderr)
    );
    let ended = stderr_json(&out);
    assert_eq!(ended["run_id"], run, "{ended}");
    assert_eq!(ended["seq"], 1, "{ended}");
    // A signal is told from an exit code.
    assert_eq!(ended["exit_status"], 137, "{ended}");
    assert_eq!(ended["signal"], 9, "{ended}");
    assert_eq!(ended["exit_code"], Value::Null, "{ended}");
    assert_eq!(ended["killed"], Value::Null, "{ended}");
    assert_eq!(ended["timed_out"], false, "{ended}");
    assert_eq!(ended["started"], true, "{ended}");
    assert!(ended["duration_ms"].is_u64(), "{ended}");
    assert_eq!(
        (&ended["stdout_bytes"], &ended["stderr_bytes"]),
        (&4.into(), &4.into())
    );
    let record = path_of(&ended["record"]);
    assert_eq!(record, evidence.join("commands/0001/command.json"));
    assert!(record.is_file());
    assert_eq!(
        std::fs::read(path_of(&ended["stderr_path"])).unwrap(),
        b"err\n"
    );

    // Binary output, captured: base64, nothing passed through.
    let out = fixture.agent_workspace(&[
        "exec",
        run,
        "--json",
        "--capture",
        "--",
        "sh",
        "-c",
        "printf '\\200\\201'; echo fine >&2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ended = stdout_json(&out);
    assert_eq!(ended["exit_code"], 0, "{ended}");
    assert_eq!(ended["stdout_base64"], "gIE=", "{ended}");
    assert_eq!(ended["stderr"], "fine\n", "{ended}");
    assert_eq!(ended["stdout_bytes"], 2, "{ended}");
    assert!(!text(&out.stderr).contains("fine"), "{}", text(&out.stderr));

    // A program that is not there: 127, and the answer says why.
    let out = fixture.agent_workspace(&[
        "exec",
        run,
        "--json",
        "--capture",
        "--",
        "no-such-program-here",
    ]);
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    let ended = stdout_json(&out);
    assert_eq!(ended["exit_status"], 127, "{ended}");
    assert_eq!(ended["started"], false, "{ended}");
    assert_eq!(ended["not_run"], "not-found", "{ended}");
    assert!(
        ended["cause"]
            .as_str()
            .is_some_and(|c| c.contains("not found: no-such-program-here")),
        "{ended}"
    );
    assert_eq!(
        (&ended["stdout"], &ended["stderr"]),
        (&"".into(), &"".into())
    );

    // Its time ran out: 124, and the cause.
    let out = fixture.agent_workspace(&[
        "exec",
        run,
        "--json",
        "--capture",
        "--timeout",
        "1",
        "--",
        "sleep",
        "30",
    ]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let ended = stdout_json(&out);
    assert_eq!(
        (&ended["killed"], &ended["timed_out"]),
        (&"timeout".into(), &true.into()),
        "{ended}"
    );
    assert!(ended["cause"].is_string(), "{ended}");

    // A detached command's name.
    let out = fixture.agent_workspace(&["exec", run, "--detach", "--json", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let detached = stdout_json(&out);
    assert_eq!(detached["run_id"], run);
    assert_eq!(detached["name"], "exec-1");

    let out = fixture.agent_workspace(&["destroy", run, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary = stdout_json(&out);
    assert_eq!(summary["command"]["seq"], 4, "{summary}");
    assert_eq!(summary["exit_status"], 124, "{summary}");
}

#[test]
fn every_subcommand_answers_with_one_json_document() {
    let fixture = CliFixture::new("json-all");
    let contract = contract_with_check(&fixture, "true");
    let created = create_json(&fixture, &["--contract", contract.to_str().unwrap()]);
    let run = created["run_id"].as_str().unwrap();
    let ok = |args: &[&str]| {
        let out = fixture.agent_workspace(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        stdout_json(&out)
    };

    let out = fixture.agent_workspace(&["exec", run, "--", "sh", "-c", "echo new > new.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exported = ok(&["export", run, "--json"]);
    assert_eq!(exported["run_id"], run);
    assert_eq!(exported["changed_paths"], 1, "{exported}");
    assert_eq!(exported["changes"][0]["path"], "new.txt", "{exported}");
    assert!(
        exported["patch"].as_str().unwrap().contains("+new"),
        "{exported}"
    );
    assert_eq!(exported["patch_sha256"].as_str().unwrap().len(), 64);

    let ports = ok(&["ports", run, "--json"]);
    assert_eq!(ports["run_id"], run);
    assert_eq!(ports["ports"], serde_json::json!([]));

    let out = fixture.agent_workspace(&[
        "exec",
        run,
        "--detach",
        "--",
        "sh",
        "-c",
        "echo bg; sleep 30",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let logs = ok(&["logs", run, "--json"]);
    assert_eq!(logs["run_id"], run);
    assert_eq!(logs["logs"][0]["name"], "exec-1", "{logs}");
    assert!(
        path_of(&logs["logs"][0]["stdout_path"]).is_absolute(),
        "{logs}"
    );

    let checks = ok(&["checks", run, "--json"]);
    assert_eq!(checks["run_id"], run);
    assert_eq!(checks["passed"], true, "{checks}");
    assert_eq!(checks["checks"][0]["name"], "tests", "{checks}");
    assert!(
        path_of(&checks["checks"][0]["record"]).is_file(),
        "{checks}"
    );

    let suspended = ok(&["suspend", run, "--json"]);
    assert_eq!(
        (
            &suspended["run_id"],
            &suspended["state"],
            &suspended["changed"]
        ),
        (&run.into(), &"suspended".into(), &true.into()),
        "{suspended}"
    );
    assert_eq!(suspended["suspension"], "frozen", "{suspended}");
    let again = ok(&["suspend", run, "--json"]);
    assert_eq!(again["changed"], false, "{again}");
    let resumed = ok(&["resume", run, "--json"]);
    assert_eq!(
        (&resumed["state"], &resumed["changed"]),
        (&"detached".into(), &true.into()),
        "{resumed}"
    );

    let listed = ok(&["ls", "--json"]);
    assert_eq!(listed[0]["run_id"], run, "{listed}");

    let destroyed = ok(&["destroy", run, "--json"]);
    assert_eq!(destroyed["run_id"], run);
    assert_eq!(destroyed["cleaned"], true, "{destroyed}");
    assert_eq!(destroyed["checks"][0]["passed"], true, "{destroyed}");
    let evidence = path_of(&destroyed["evidence"]);
    let verified = ok(&["verify", "--json", evidence.to_str().unwrap()]);
    assert_eq!(
        (&verified["intact"], &verified["complete"]),
        (&true.into(), &true.into()),
        "{verified}"
    );

    let recovered = ok(&["recover", "--json"]);
    assert!(
        recovered["recovered"].as_array().unwrap().is_empty(),
        "{recovered}"
    );
    let pruned = ok(&["prune", "--json", "--keep", "0", "--older-than", "0"]);
    assert_eq!(pruned["pruned"][0]["run_id"], run, "{pruned}");
    assert!(
        pruned["failures"].as_array().unwrap().is_empty(),
        "{pruned}"
    );
    let checked = ok(&["contract", "check", "--json", contract.to_str().unwrap()]);
    assert_eq!(checked["valid"], true, "{checked}");
}

#[test]
fn an_error_under_json_is_an_answer_with_the_same_exit_status() {
    let fixture = CliFixture::new("json-errors");
    // No such run: on stdout for a subcommand whose stdout is its answer.
    let out = fixture.agent_workspace(&["destroy", "run-nope", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let error = &stdout_json(&out)["error"];
    assert_eq!(error["kind"], "no-such-run", "{error}");
    assert_eq!(error["run_id"], "run-nope", "{error}");
    assert_eq!(error["exit_status"], 2, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no run run-nope")
    );
    // The line for people is still on stderr.
    assert!(text(&out.stderr).contains("no run run-nope"));

    // A flag's field named apart; `run --json` answers on stderr's last line.
    let out = fixture.run(&["--json", "--disk", "1KiB", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let error = &stderr_json(&out)["error"];
    assert_eq!(error["kind"], "bad-input", "{error}");
    assert_eq!(error["flag"], "--disk", "{error}");
    assert_eq!(error["field"], "environment.limits.disk", "{error}");
    // With --capture, on stdout.
    let missing = fixture.path().join("no-such-repo");
    let out = fixture.agent_workspace(&[
        "run",
        "--json",
        "--capture",
        "--repo",
        missing.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let error = &stdout_json(&out)["error"];
    assert_eq!(error["flag"], "--repo", "{error}");
    assert_eq!(path_of(&error["path"]), missing, "{error}");
    // A command line that does not parse.
    let out =
        fixture.agent_workspace(&["exec", "--json", "--capture", "--bogus", "r", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(stdout_json(&out)["error"]["kind"], "usage");
    // A bundle that is not there.
    let out = fixture.agent_workspace(&["verify", "--json", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert_eq!(stdout_json(&out)["error"]["kind"], "bad-input");
}

#[test]
fn a_failed_check_shows_the_end_of_its_output_and_its_record() {
    let fixture = CliFixture::new("json-check-tail");
    let contract = contract_with_check(&fixture, FAILING_CHECK);
    let run = fixture.create(Some(&contract));
    let out = fixture.agent_workspace(&["checks", &run]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0], "tests: failed: it ended with exit code 1",
        "{stdout}"
    );
    let record = lines[1]
        .strip_prefix("  record: ")
        .expect("the record's path");
    assert!(record.ends_with("/commands/0001/command.json"), "{stdout}");
    let recorded: Value = serde_json::from_slice(&std::fs::read(record).unwrap()).unwrap();
    assert_eq!(recorded["check"], "tests", "{recorded}");
    // The end of its output: the last lines of stdout, then stderr's, escaped.
    assert!(stdout.contains("  stdout| line 30\n"), "{stdout}");
    assert!(!stdout.contains("| line 1\n"), "{stdout}");
    assert!(stdout.contains("  stderr| it broke \\x1b[2J\n"), "{stdout}");
    assert!(!stdout.contains('\x1b'), "{stdout}");
    assert!(lines.len() <= 2 + 2 + 20, "{stdout}");

    // `destroy` says the same on stderr, before its summary line.
    let out = fixture.agent_workspace(&["destroy", &run]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "agent-workspace: required check tests: failed: it ended with exit code 1\n  record: "
        ),
        "{stderr}"
    );
    assert!(stderr.contains("/commands/0002/command.json\n"), "{stderr}");
    assert!(stderr.contains("  stderr| it broke \\x1b[2J\n"), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .contains(": no command ran, "),
        "{stderr}"
    );
}

#[test]
fn checks_read_back_after_a_suspend_or_an_exec_are_not_the_agents_commands() {
    let fixture = CliFixture::new("json-checks-stay-checks");
    let contract = contract_with_check(&fixture, FAILING_CHECK);
    let ok = |args: &[&str]| {
        let out = fixture.agent_workspace(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    };

    // The agent ran nothing; its checks ran (and failed) before a suspend.
    let run = fixture.create(Some(&contract));
    let out = fixture.agent_workspace(&["checks", &run]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    ok(&["suspend", &run]);
    ok(&["resume", &run]);
    let out = fixture.agent_workspace(&["destroy", &run, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary = stdout_json(&out);
    assert_eq!(summary["exit_status"], Value::Null, "{summary}");
    assert!(summary.get("command").is_none(), "{summary}");
    assert_eq!(summary["checks"][0]["passed"], false, "{summary}");
    let outcome = support::read_json(&path_of(&summary["evidence"]), "outcome.json");
    let checks: Vec<&Value> = outcome["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["check"])
        .collect();
    assert_eq!(
        checks,
        [&Value::from("tests"), &Value::from("tests")],
        "{outcome}"
    );

    // The agent's command ran, then the checks, from other processes.
    let run = fixture.create(Some(&contract));
    ok(&["exec", &run, "--", "true"]);
    let out = fixture.agent_workspace(&["checks", &run]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let out = fixture.agent_workspace(&["destroy", &run, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary = stdout_json(&out);
    assert_eq!(summary["exit_status"], 0, "{summary}");
    assert_eq!(summary["command"]["seq"], 1, "{summary}");
    assert_eq!(
        summary["command"]["argv"],
        serde_json::json!(["true"]),
        "{summary}"
    );
}
