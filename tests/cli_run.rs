//! `agent-workspace run`, run as a user would run it: exit statuses, output
//! pass-through, the summary, the evidence, and bad input refused up front.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::path::PathBuf;
use std::process::Output;

use support::cli::{CliFixture, text};
use support::git;

/// The summary line (the last line on stderr) and the evidence directory it names.
fn summary(out: &Output) -> (String, PathBuf) {
    summary_of(&text(&out.stderr))
}

/// [`summary`] of a stderr already read.
fn summary_of(stderr: &str) -> (String, PathBuf) {
    let line = stderr.lines().last().expect("a summary line").to_owned();
    assert!(line.starts_with("agent-workspace: run run-"), "{stderr}");
    let (_, dir) = line
        .rsplit_once("; evidence ")
        .expect("evidence in the summary");
    let dir = dir.split("; ").next().expect("the evidence dir");
    (line.clone(), PathBuf::from(dir))
}

/// Runs `args`, expects `status`, a summary line saying so, and a sealed
/// evidence bundle that `verify` accepts; returns its `outcome.json`.
fn expect_exit(test: &str, args: &[&str], status: i32, says: &str) -> serde_json::Value {
    let fixture = CliFixture::new(test);
    let out = fixture.run(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{stderr}");
    let (line, evidence) = summary(&out);
    assert!(line.contains(says), "{line}");
    assert!(evidence.starts_with(fixture.evidence()), "{line}");
    assert!(evidence.join("manifest.json").is_file(), "{line}");
    fixture.assert_verifies(&evidence);
    serde_json::from_slice(&std::fs::read(evidence.join("outcome.json")).unwrap()).unwrap()
}

#[test]
fn exit_0_for_a_command_that_succeeds() {
    expect_exit(
        "exit0",
        &["--", "/bin/true"],
        0,
        ": exit 0, 0 changed files, ",
    );
}

#[test]
fn exit_3_is_passed_through() {
    expect_exit(
        "exit3",
        &["--", "/bin/sh", "-c", "exit 3"],
        3,
        ": exit 3, 0 changed files, ",
    );
}

#[test]
fn exit_124_after_the_timeout() {
    let started = std::time::Instant::now();
    let outcome = expect_exit(
        "timeout",
        &["--timeout", "1", "--", "/bin/sleep", "30"],
        124,
        ": timed out after ",
    );
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
    // The command was killed for its timeout; the run itself ended normally.
    assert_eq!(
        outcome["commands"][0]["exit"]["killed"], "timeout",
        "{outcome}"
    );
    assert_eq!(outcome["ended_in"], "exported", "{outcome}");
}

#[test]
fn exit_137_after_sigkill() {
    expect_exit(
        "sigkill",
        &["--", "/bin/sh", "-c", "kill -9 $$"],
        137,
        ": exit 137, ",
    );
}

#[test]
fn a_write_past_the_disk_flag_fails_inside_with_no_space_left() {
    let outcome = expect_exit(
        "disk",
        &[
            "--disk",
            "16MiB",
            "--",
            "/bin/sh",
            "-c",
            "head -c 20971520 /dev/zero > big 2>/tmp/err; s=$?; grep -q 'No space left on device' /tmp/err || s=9; rm -f big; exit $s",
        ],
        1,
        ": exit 1, 0 changed files, ",
    );
    assert!(outcome["disk"]["used_bytes"].is_u64(), "{outcome}");
}

#[test]
fn a_disk_flag_with_decimals_is_the_size_it_says() {
    let fixture = CliFixture::new("disk-decimal");
    let out = fixture.run(&["--disk", "1.5GiB", "--", "/bin/true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (line, evidence) = summary(&out);
    assert!(line.contains("; disk: "), "{line}");
    let observed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("observed.json")).unwrap()).unwrap();
    assert_eq!(
        observed["disk"]["cap_bytes"],
        3u64 << 29,
        "{}",
        observed["disk"]
    );
}

#[test]
fn a_command_the_pids_limit_held_back_says_so() {
    // Wider than the limit: the shell cannot fork them all.
    let outcome = expect_exit(
        "pids",
        &[
            "--pids",
            "16",
            "--",
            "/bin/sh",
            "-c",
            "for i in $(seq 40); do sleep 1 & done; wait",
        ],
        2,
        "(the run's pids limit refused ",
    );
    let refused = outcome["commands"][0]["exit"]["forks_refused"].as_u64();
    assert!(refused.is_some_and(|n| n > 0), "{outcome}");
}

#[test]
fn stdout_and_stderr_pass_through_byte_for_byte() {
    let fixture = CliFixture::new("passthrough");
    let out = fixture.run(&[
        "--",
        "/bin/sh",
        "-c",
        r"printf 'out \377\001 line\n'; printf 'no newline'; printf 'err \376\n' >&2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"out \xff\x01 line\nno newline");
    let (line, _) = summary(&out);
    let mut expected = b"err \xfe\n".to_vec();
    expected.extend_from_slice(line.as_bytes());
    expected.push(b'\n');
    assert_eq!(out.stderr, expected, "{}", text(&out.stderr));
}

/// The bytes a terminal acts on rather than shows: ESC, BEL, backspace, CR,
/// DEL, and C1's CSI as UTF-8.
fn terminal_controls(bytes: &[u8]) -> Vec<String> {
    let mut found: Vec<String> = bytes
        .iter()
        .filter(|b| matches!(b, 0x1b | 0x07 | 0x08 | 0x0d | 0x7f))
        .map(|b| format!("{b:#04x}"))
        .collect();
    if bytes.windows(2).any(|w| w == [0xc2, 0x9b]) {
        found.push("U+009B".into());
    }
    found
}

#[test]
fn a_failing_services_log_is_quoted_escaped_and_its_ordinary_lines_stay_readable() {
    // Attack: a service writes terminal escapes (a window title, a clear
    // screen, a clipboard write, a carriage return and a backspace that
    // overwrite the message) and fails, so its log is quoted by the CLI.
    let fixture = CliFixture::new("service-escapes");
    let contract = fixture.path().join("escapes.toml");
    std::fs::write(
        &contract,
        r#"
objective = "a service that fails with escapes in its log"
shape = "narrow-fix"
[source]
repo = "."
revision = "HEAD"
[filesystem]
writable = ["."]
[[environment.services]]
name = "evil"
command = ["sh", "-c", "printf 'listening on 127.0.0.1:8000 (pid 42)\\n\\033]0;pwned\\007title\\n\\033[2Jclear\\n\\033]52;c;ZXZpbA==\\007clip\\nabc\\rXY\\bZ\\302\\233\\n' >&2; exit 3"]
health = { log = "never printed" }
"#,
    )
    .unwrap();
    let out = fixture.run(&["--contract", contract.to_str().unwrap(), "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    // No byte a terminal acts on reaches it; the message is one line.
    assert_eq!(
        terminal_controls(&out.stderr),
        Vec::<String>::new(),
        "{stderr:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // The quote is still there to read: the ordinary line as it was, each
    // escape visible.
    for expected in [
        "service evil: exited before it was ready (exit code 3)",
        "stderr| listening on 127.0.0.1:8000 (pid 42);",
        r"stderr| \x1b]0;pwned\x07title;",
        r"stderr| \x1b[2Jclear;",
        r"stderr| \x1b]52;c;ZXZpbA==\x07clip;",
        r"stderr| abc\rXY\x08Z\u{9b};",
    ] {
        assert!(stderr.contains(expected), "{expected:?} not in {stderr:?}");
    }
    // The evidence keeps the exact bytes.
    let (_, evidence) = stderr.trim_end().rsplit_once("; evidence: ").unwrap();
    let kept = std::fs::read(PathBuf::from(evidence).join("services/evil/stderr")).unwrap();
    assert!(
        kept.windows(7).any(|w| w == b"\x1b]0;pwn") && kept.contains(&b'\r'),
        "{kept:?}"
    );

    // A command's own output passes through, byte for byte: it is not the
    // CLI's text.
    let out = fixture.run(&[
        "--",
        "sh",
        "-c",
        "printf 'own \\033]0;mine\\007 output\\n' >&2; exit 3",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        out.stderr.starts_with(b"own \x1b]0;mine\x07 output\n"),
        "{stderr:?}"
    );
    // A command that cannot start is named escaped in the summary.
    let out = fixture.run(&["--", "x\x1b]0;pwned\x07"]);
    let (line, _) = summary(&out);
    assert_eq!(out.status.code(), Some(127), "{line}");
    assert_eq!(
        terminal_controls(&out.stderr),
        Vec::<String>::new(),
        "{line:?}"
    );
    assert!(
        line.contains(r"did not start: ") && line.contains(r"x\x1b]0;pwned\x07"),
        "{line:?}"
    );
}

#[test]
fn the_summary_names_the_change_and_the_evidence_which_verifies() {
    let fixture = CliFixture::new("summary");
    let out = fixture.run(&["--", "/bin/sh", "-c", "echo hi > x"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let (line, evidence) = summary(&out);
    let run_id = line
        .strip_prefix("agent-workspace: run ")
        .expect("prefix")
        .split(':')
        .next()
        .expect("run id")
        .to_owned();
    assert!(line.contains(": exit 0, 1 changed file, "), "{line}");
    assert!(line.contains(" s; evidence "), "{line}");
    assert_eq!(evidence, fixture.evidence().join(&run_id), "{line}");
    assert!(evidence.is_dir());
    let stdout = fixture.assert_verifies(&evidence);
    assert!(stdout.contains(": intact ("), "{stdout}");
}

#[test]
fn json_gives_a_parseable_summary_as_the_last_line_of_stderr() {
    let fixture = CliFixture::new("json");
    let out = fixture.run(&["--json", "--", "/bin/sh", "-c", "echo out; echo hi > x"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The command's own stdout stays on stdout; the summary is stderr's one line.
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&stderr).expect("stderr is one JSON summary");
    assert_eq!(summary["exit_status"], 0, "{summary}");
    assert_eq!(summary["changed_paths"], 1, "{summary}");
    assert_eq!(summary["cleaned"], true, "{summary}");
    let evidence = PathBuf::from(summary["evidence"].as_str().expect("evidence"));
    assert!(evidence.starts_with(fixture.evidence()), "{summary}");
    assert!(evidence.join("manifest.json").is_file(), "{summary}");
    // With --capture stdout is the summary alone, the output in it.
    let out = fixture.run(&["--json", "--capture", "--", "/bin/sh", "-c", "echo out"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let summary: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON summary");
    assert_eq!(summary["command"]["stdout"], "out\n", "{summary}");
}

#[test]
fn the_readme_example_exports_a_patch_that_applies_to_a_clean_clone() {
    let fixture = CliFixture::new("readme");
    let repo = fixture.repo();
    let out = fixture.agent_workspace(&[
        "run",
        "--repo",
        repo.to_str().unwrap(),
        "--",
        "/bin/sh",
        "-c",
        "echo hi > x",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let (_, evidence) = summary(&out);
    // Without --evidence the bundle goes under $XDG_STATE_HOME.
    assert!(
        evidence.starts_with(fixture.state_home().join("agent-workspace/evidence")),
        "{stderr}"
    );
    let patch = evidence.join("diff.patch");
    let patch_text = std::fs::read_to_string(&patch).expect("diff.patch");
    assert!(patch_text.contains("+hi"), "{patch_text}");
    let clone = fixture.path().join("clone");
    git(
        fixture.path(),
        &[
            "clone",
            "-q",
            repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    git(&clone, &["apply", "--check", patch.to_str().unwrap()]);
    git(&clone, &["apply", patch.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(clone.join("x")).expect("x"), "hi\n");
}

/// Runs `args` and expects exit 2, one line on stderr containing `names`, and
/// nothing created.
fn expect_bad_input(fixture: &CliFixture, args: &[&str], names: &str) {
    let out = fixture.agent_workspace(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    assert!(stderr.starts_with("agent-workspace: "), "{stderr}");
    assert!(
        stderr.contains(names),
        "{args:?}: {names:?} not in {stderr}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    fixture.assert_nothing_left();
}

#[test]
fn bad_input_exits_2_with_one_line_and_leaves_nothing_behind() {
    let fixture = CliFixture::new("badinput");
    let repo = fixture.repo();
    let repo = repo.to_str().unwrap();
    let evidence = fixture.evidence();
    let evidence = evidence.to_str().unwrap();
    let contract = fixture.path().join("bad.toml");
    std::fs::write(&contract, "objective = \"x\"\nshape = \"no-such-shape\"\n").expect("write");
    let contract = contract.to_str().unwrap();
    let missing = fixture.path().join("no-such-repo");
    let missing = missing.to_str().unwrap();
    let cases: [(&[&str], &str); 8] = [
        (
            &[
                "run",
                "--repo",
                missing,
                "--evidence",
                evidence,
                "--",
                "/bin/true",
            ],
            "--repo",
        ),
        (
            &[
                "run",
                "--repo",
                repo,
                "--rev",
                "no-such-rev",
                "--evidence",
                evidence,
                "--",
                "/bin/true",
            ],
            "--rev (source.revision): no-such-rev",
        ),
        (
            &[
                "run",
                "--contract",
                contract,
                "--repo",
                repo,
                "--evidence",
                evidence,
                "--",
                "/bin/true",
            ],
            "--contract",
        ),
        (
            &[
                "run",
                "--repo",
                repo,
                "--backend",
                "podman",
                "--",
                "/bin/true",
            ],
            "podman",
        ),
        (
            &["run", "--repo", repo, "--timeout", "--", "/bin/true"],
            "--timeout",
        ),
        (&["run", "--repo", repo, "--evidence", evidence], "<CMD>"),
        (
            &["run", "--repo", repo, "--disk", "512KiB", "--", "/bin/true"],
            "--disk (environment.limits.disk): 512KiB is less than the smallest disk",
        ),
        (
            &["run", "--repo", repo, "--disk", "1.3B", "--", "/bin/true"],
            "--disk",
        ),
    ];
    for (args, names) in cases {
        expect_bad_input(&fixture, args, names);
    }
}

#[test]
fn the_shipped_payments_contract_runs_as_shipped_on_a_repository_that_has_what_it_names() {
    let fixture = CliFixture::new("payments-example");
    let repo = fixture.repo();
    for (path, content) in [
        (".env.example", "API_URL=http://127.0.0.1:43117\n"),
        (
            "migrations/0001_init.sql",
            "create table refunds (id int);\n",
        ),
        (
            "tests/fixtures/refunds_partial_capture.json",
            "{\"captured\": 1001}\n",
        ),
        ("Cargo.lock", "# a lockfile\n"),
        ("src/refunds/mod.rs", "pub fn round() {}\n"),
    ] {
        let file = repo.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "payments-api layout"]);
    let contract = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/contracts/payments-api-1842.toml"
    );
    let token = format!("sandbox-token-{}-value", std::process::id());
    let out = fixture
        .command()
        .args(["run", "--contract", contract, "--repo"])
        .arg(&repo)
        .args(["--rev", "HEAD", "--evidence"])
        .arg(fixture.evidence())
        .args([
            "--",
            "sh",
            "-c",
            "test -n \"$PAYMENTS_SANDBOX_TOKEN\" && ! echo x > migrations/x \
             && echo fixed >> src/refunds/mod.rs",
        ])
        .env("PAYMENTS_SANDBOX_TOKEN", &token)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let (_, evidence) = summary(&out);
    fixture.assert_verifies(&evidence);
    let source: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("source.json")).unwrap()).unwrap();
    let pinned: Vec<&str> = source["pinned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        pinned,
        ["tests/fixtures/refunds_partial_capture.json", "Cargo.lock"]
    );
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+fixed"), "{patch}");
    // Its checkout lived on a disk of the declared 2 GiB.
    let observed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("observed.json")).unwrap()).unwrap();
    assert_eq!(observed["disk"]["kind"], "image", "{}", observed["disk"]);
    assert_eq!(
        observed["disk"]["cap_bytes"],
        2u64 << 30,
        "{}",
        observed["disk"]
    );
    // Without the token in the environment, the run says which variable is
    // missing, before anything is created (bad input).
    let out = fixture
        .command()
        .args(["run", "--contract", contract, "--repo"])
        .arg(&repo)
        .args(["--rev", "HEAD", "--", "true"])
        .env_remove("PAYMENTS_SANDBOX_TOKEN")
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no variable PAYMENTS_SANDBOX_TOKEN"),
        "{stderr}"
    );
}

/// Starts `run -- sh -c SCRIPT MARK` with its stdout piped, waits until it
/// printed `started`, sends the CLI `signal` and returns its exit status, stdout
/// and stderr.
fn interrupted_run(
    fixture: &CliFixture,
    extra: &[&str],
    script: &str,
    mark: &str,
    signal: &str,
) -> (Option<i32>, String, String) {
    let repo = fixture.repo();
    let evidence = fixture.evidence();
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["run", "--repo", repo.to_str().unwrap()]);
    args.extend(["--evidence", evidence.to_str().unwrap()]);
    interrupted(fixture, &args, script, mark, signal)
}

/// `agent-workspace ARGS -- sh -c SCRIPT MARK`, sent `signal` once it printed
/// `started`: its exit status, stdout and stderr.
fn interrupted(
    fixture: &CliFixture,
    args: &[&str],
    script: &str,
    mark: &str,
    signal: &str,
) -> (Option<i32>, String, String) {
    use std::io::{BufRead, Read};
    let mut child = fixture
        .command()
        .args(args)
        .args(["--", "sh", "-c", script, mark])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains("started") {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "no start: {seen}");
        seen.push_str(&line);
    }
    let pid = child.id().to_string();
    let sent = std::process::Command::new("sh")
        .args(["-c", &format!("kill -{signal} \"$1\""), "kill", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    stdout.read_to_string(&mut seen).unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    (status.code(), seen, stderr)
}

#[test]
fn sigterm_reaches_the_whole_command_tree_so_a_waiting_shell_runs_its_trap() {
    // The shell waits for a long foreground child: its trap runs only once
    // that child ended, so the child must get SIGTERM too (as a terminal's
    // Ctrl-C reaches the whole job), well inside the 60 s grace.
    let fixture = CliFixture::new("sigterm-tree");
    let mark = support::marker("sigterm-tree");
    let script = "trap 'echo trapped; exit 0' TERM; echo started; sleep 300";
    let (status, stdout, stderr) =
        interrupted_run(&fixture, &["--stop-grace", "60"], script, &mark, "TERM");
    assert_eq!(status, Some(143), "{stderr}");
    assert!(stdout.contains("trapped"), "{stdout}");
    let (line, evidence) = summary_of(&stderr);
    assert!(
        line.contains("cancelled (exit 143; the command ended with 0)"),
        "{line}"
    );
    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("outcome.json")).unwrap()).unwrap();
    // It ended by its trap (exit 0), not by the kill after the grace.
    assert_eq!(
        outcome["commands"][0]["exit"]["status"]["value"], 0,
        "{outcome}"
    );
    assert!(support::processes_with(&mark).is_empty());
}

#[test]
fn sigterm_ends_the_run_cleanly_after_the_commands_own_trap_and_exits_143() {
    let fixture = CliFixture::new("sigterm");
    let mark = support::marker("sigterm");
    let script = "trap 'echo trapped; exit 0' TERM; echo started; while :; do sleep 0.1; done";
    let (status, stdout, stderr) = interrupted_run(&fixture, &[], script, &mark, "TERM");
    assert_eq!(status, Some(143), "{stderr}");
    // The command's own handler ran in its grace period.
    assert!(stdout.contains("trapped"), "{stdout}");
    assert!(
        stderr.contains("terminated; stopping the command"),
        "{stderr}"
    );
    let (_, evidence) = summary_of(&stderr);
    fixture.assert_verifies(&evidence);
    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("outcome.json")).unwrap()).unwrap();
    assert_eq!(
        outcome["commands"][0]["exit"]["killed"], "cancelled",
        "{outcome}"
    );
    assert!(
        support::processes_with(&mark).is_empty(),
        "the command outlived its run"
    );
    let runs: Vec<_> = std::fs::read_dir(fixture.runtime().join("runs"))
        .unwrap()
        .collect();
    assert!(runs.is_empty(), "{runs:?}");
}

#[test]
fn a_command_that_ignores_the_signal_is_killed_after_the_grace_and_ctrl_c_exits_130() {
    let fixture = CliFixture::new("sigint");
    let mark = support::marker("sigint");
    let script = "trap '' TERM INT; echo started; while :; do sleep 0.1; done";
    let (status, _, stderr) =
        interrupted_run(&fixture, &["--stop-grace", "1"], script, &mark, "INT");
    assert_eq!(status, Some(130), "{stderr}");
    let (_, evidence) = summary_of(&stderr);
    fixture.assert_verifies(&evidence);
    assert!(
        support::processes_with(&mark).is_empty(),
        "the command outlived its run"
    );
}

#[test]
fn an_interrupted_exec_exits_143_and_the_workspace_lives_on() {
    let fixture = CliFixture::new("exec-sigterm");
    let run = fixture.create(None);
    let mark = support::marker("exec-sigterm");
    let script = "trap 'echo trapped; exit 3' TERM; echo started; while :; do sleep 0.1; done";
    let (status, stdout, stderr) = interrupted(&fixture, &["exec", &run], script, &mark, "TERM");
    assert_eq!(status, Some(143), "{stderr}");
    assert!(stdout.contains("trapped"), "{stdout}");
    assert!(
        stderr.contains("terminated; stopping the command (the workspace is kept)"),
        "{stderr}"
    );
    assert!(
        support::processes_with(&mark).is_empty(),
        "the command outlived its exec"
    );
    // Only the command was stopped: the workspace takes the next one.
    let out = fixture.agent_workspace(&["exec", &run, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_debian_userland_inside_has_its_alternatives_loader_cache_and_certificates() {
    for tool in ["/etc/alternatives/awk", "/etc/alternatives/which"] {
        assert!(
            std::path::Path::new(tool).exists(),
            "this test needs {tool} on the host (Debian packages mawk and debianutils)"
        );
    }
    let fixture = CliFixture::new("userland");
    let out = fixture.run(&[
        "--",
        "sh",
        "-c",
        "awk 'BEGIN { print \"awk works\" }' && which sh && test -s /etc/ld.so.cache \
         && test -d /etc/ssl/certs && test ! -e /etc/ssl/private && test ! -e /etc/shadow",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("awk works") && stdout.contains("/usr/bin/sh"),
        "{stdout}"
    );
}

#[test]
fn files_the_base_commits_ignore_rules_ignore_are_left_out_of_the_patch_and_listed() {
    let fixture = CliFixture::new("gitignore");
    let repo = fixture.repo();
    std::fs::write(repo.join(".gitignore"), "*.pyc\n!keep.pyc\nbuild/\n").unwrap();
    std::fs::create_dir_all(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/.gitignore"), "*.tmp\n").unwrap();
    std::fs::write(repo.join("tracked.pyc"), "tracked\n").unwrap();
    git(&repo, &["add", ".gitignore", "src/.gitignore"]);
    git(&repo, &["add", "-f", "tracked.pyc"]);
    git(&repo, &["commit", "-q", "-m", "ignore rules"]);
    std::fs::write(repo.join(".git/info/exclude"), "local.log\n").unwrap();
    let out = fixture.run(&[
        "--",
        "sh",
        "-c",
        "mkdir -p build && echo o > build/out.o && echo c > a.pyc && echo k > keep.pyc \
         && echo t > src/x.tmp && echo l > local.log && echo changed >> tracked.pyc \
         && echo secret.txt >> .gitignore && echo s > secret.txt && echo n > new.txt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let (line, evidence) = summary(&out);
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    // Kept: the negated file, a tracked file that matches a rule, the agent's own
    // edit of .gitignore (it cannot hide a file with it), new files.
    for kept in [
        "keep.pyc",
        "tracked.pyc",
        ".gitignore",
        "secret.txt",
        "new.txt",
    ] {
        assert!(
            patch.contains(&format!("b/{kept}")),
            "{kept} missing:\n{patch}"
        );
    }
    for left_out in ["a.pyc", "build/out.o", "src/x.tmp", "local.log"] {
        assert!(
            !patch.contains(left_out),
            "{left_out} in the patch:\n{patch}"
        );
    }
    let changes: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("changes.json")).unwrap()).unwrap();
    assert_eq!(
        support::ignored_paths(&changes),
        ["a.pyc", "build/out.o", "local.log", "src/x.tmp"],
        "{changes}"
    );
    assert!(line.contains(", 5 changed files,"), "{line}");
}

#[test]
fn exec_says_how_its_command_ended_a_busy_run_names_its_holder_and_an_ended_one_is_bad_input() {
    let fixture = CliFixture::new("exec-words");
    let run = fixture.create(None);

    let out = fixture.agent_workspace(&["exec", &run, "--", "no-such-program-here"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.contains("not found: no-such-program-here"),
        "{stderr}"
    );
    // A file that is there but not a program: 126, as a shell says.
    let out = fixture.agent_workspace(&["exec", &run, "--", "/etc/passwd"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(stderr.contains("not executable: /etc/passwd"), "{stderr}");
    let out = fixture.agent_workspace(&["exec", &run, "--timeout", "1", "--", "sleep", "30"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{stderr}");
    assert!(stderr.contains("command 3: timed out after 1."), "{stderr}");

    // While one exec runs, another runs beside it, and ending the run is
    // refused, naming who holds it.
    let mut holder = fixture
        .command()
        .args(["exec", &run, "--", "sleep", "3"])
        .spawn()
        .unwrap();
    let bundle = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&run);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(bundle.join("commands/0004/command.json"))
        .is_ok_and(|record| record.contains("\"sleep\""))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the holder never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let beside = fixture.agent_workspace(&["exec", &run, "--", "true"]);
    assert_eq!(beside.status.code(), Some(0), "{}", text(&beside.stderr));
    let out = fixture.agent_workspace(&["destroy", &run]);
    let busy = text(&out.stderr);
    assert!(busy.contains("is in use by process"), "{busy}");
    // Busy is "try again", not a failed run.
    assert_eq!(out.status.code(), Some(75), "{busy}");
    assert_eq!(busy.trim().lines().count(), 1, "{busy}");
    assert!(holder.wait().unwrap().success());

    let out = fixture.agent_workspace(&["destroy", &run]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // The summary gives the workspace's lifetime (more than the 3 s exec above),
    // not the last process's.
    let seconds: f64 = stderr
        .rsplit_once(" s; evidence")
        .and_then(|(head, _)| head.rsplit(", ").next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no duration in {stderr}"));
    assert!(seconds >= 3.0, "{stderr}");
    for again in ["destroy", "promote"] {
        let out = fixture.agent_workspace(&[again, &run]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{again}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("has ended (cleaned)"), "{stderr}");
    }
}

#[test]
fn repositories_as_users_have_them_a_subdirectory_a_dirty_tree_a_url() {
    let fixture = CliFixture::new("repos");
    let repo = fixture.repo();
    // A directory inside the repository names the repository, as git has it.
    let sub = repo.join("src");
    let out = fixture.agent_workspace(&[
        "run",
        "--repo",
        sub.to_str().unwrap(),
        "--",
        "test",
        "-f",
        "hello.txt",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Uncommitted changes are not part of the run, and it says so once.
    std::fs::write(repo.join("hello.txt"), "edited, not committed\n").unwrap();
    let out = fixture.run(&["--", "grep", "-q", "edited", "hello.txt"]);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the run saw the uncommitted edit: {stderr}"
    );
    assert_eq!(
        stderr.matches("has uncommitted changes").count(),
        1,
        "{stderr}"
    );
    // A URL is refused before anything is created, naming the flag.
    let out = fixture.agent_workspace(&[
        "run",
        "--repo",
        "https://example.invalid/r.git",
        "--",
        "true",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--repo https://example.invalid/r.git: only a repository on this host"),
        "{stderr}"
    );
}

#[test]
fn the_flags_users_set_most_override_the_contract() {
    let fixture = CliFixture::new("flags");
    let host_dir = fixture.path().join("host-cache");
    std::fs::create_dir_all(&host_dir).unwrap();
    std::fs::write(host_dir.join("dep.txt"), "a dependency\n").unwrap();
    // A contract without [source]: the current directory at HEAD, here --repo.
    let file = fixture.path().join("flags.toml");
    std::fs::write(
        &file,
        "objective = \"flags\"\nshape = \"narrow-fix\"\n[filesystem]\nwritable = [\".\"]\n",
    )
    .unwrap();
    let ro = format!("{}:/deps/cache", host_dir.display());
    let out = fixture
        .command()
        .args(["run", "--contract", file.to_str().unwrap(), "--repo"])
        .arg(fixture.repo())
        .args(["--evidence", fixture.evidence().to_str().unwrap()])
        .args(["--env", "GREETING=hi there", "--env-allow", "AW_FLAG_TEST"])
        .args(["--ro", &ro, "--generated", "out", "--cpus", "0.5"])
        .args([
            "--",
            "sh",
            "-c",
            "test \"$GREETING\" = 'hi there' && test \"$AW_FLAG_TEST\" = passed \
             && cat /deps/cache/dep.txt && ! touch /deps/cache/x 2>/dev/null \
             && mkdir out && echo o > out/a && echo kept > kept.txt",
        ])
        .env("AW_FLAG_TEST", "passed")
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("a dependency"), "{stdout}");
    let (_, evidence) = summary(&out);
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(
        patch.contains("b/kept.txt") && !patch.contains("out/a"),
        "{patch}"
    );
    let contract: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("contract.json")).unwrap()).unwrap();
    assert_eq!(contract["environment"]["limits"]["cpus"], 0.5, "{contract}");
    let out = fixture.run(&["--env", "NOEQUALS", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--env \"NOEQUALS\": write it as NAME=VALUE"));
    // A variable to pass through that this environment lacks: said, not silent.
    let out = fixture.run(&["--env-allow", "AW_NOT_SET_ANYWHERE", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr)
            .contains("--env-allow AW_NOT_SET_ANYWHERE: this environment has no such variable"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn tty_gives_the_command_a_terminal_of_its_own() {
    let fixture = CliFixture::new("tty");
    let out = fixture.run(&[
        "--tty",
        "--",
        "sh",
        "-c",
        "test -t 0 && test -t 1 && echo on-a-tty; tty; echo \"TERM=$TERM\"",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("on-a-tty"), "{stdout}");
    // The terminal is one of the run's own devpts: `tty` names it.
    assert!(stdout.contains("/dev/pts/"), "{stdout}");
    assert!(!stdout.contains("not a tty"), "{stdout}");
    assert!(stdout.contains("TERM=xterm"), "{stdout}");
    let out = fixture.run(&["--", "sh", "-c", "test -t 1 || echo no-tty"]);
    assert!(
        text(&out.stdout).contains("no-tty"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_command_that_closes_its_terminal_before_it_exits_is_not_hung_up() {
    let fixture = CliFixture::new("tty-closed");
    // The command's side of the terminal is closed well before it exits: the
    // terminal must stay up (no SIGHUP, exit 129) until the command is reaped.
    let out = fixture.run(&[
        "--tty",
        "--",
        "sh",
        "-c",
        "exec 0<&- 1>&- 2>&-; sleep 0.3; exit 7",
    ]);
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
}

#[test]
fn on_a_terminal_the_status_line_shows_how_long_a_quiet_command_has_run() {
    let fixture = CliFixture::new("elapsed");
    // `script` (util-linux, Debian package bsdutils) gives the CLI a terminal.
    let which = std::process::Command::new("sh")
        .args(["-c", "command -v script"])
        .output()
        .unwrap();
    assert!(
        which.status.success(),
        "this test needs `script`: apt-get install bsdutils"
    );
    let aw = fixture.command();
    let line = format!(
        "'{}' run --repo '{}' --evidence '{}' -- sh -c 'sleep 2.5; echo done'",
        env!("CARGO_BIN_EXE_agent-workspace"),
        fixture.repo().display(),
        fixture.evidence().display(),
    );
    let out = std::process::Command::new("script")
        .current_dir(fixture.path())
        .envs(aw.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .output()
        .unwrap();
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{terminal:?}");
    assert!(terminal.contains(": running, 1 s"), "{terminal:?}");
    // The line is erased before the command's own output, which is intact.
    assert!(terminal.contains(" s\r\x1b[Kdone\r\n"), "{terminal:?}");
    assert!(
        terminal.contains(": exit 0, 0 changed files, "),
        "{terminal:?}"
    );
}

#[test]
fn with_i_the_command_reads_this_processs_input_with_and_without_a_terminal() {
    use std::io::Write;
    let fixture = CliFixture::new("interactive");
    let with_input = |args: &[&str], input: &[u8]| {
        let mut child = fixture
            .command()
            .args(["run", "--repo"])
            .arg(fixture.repo())
            .args(["--evidence", fixture.evidence().to_str().unwrap()])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    };
    // Through the terminal: the line arrives, and the end of the input too
    // (also after a line without its newline), so the command ends by itself.
    let out = with_input(
        &["--tty", "-i", "--", "sh", "-c", "read x; echo got=$x"],
        b"hello\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("got=hello"),
        "{}",
        text(&out.stdout)
    );
    let out = with_input(&["--tty", "-i", "--", "cat"], b"no newline");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("no newline"),
        "{}",
        text(&out.stdout)
    );
    // Without a terminal: the bytes as they are.
    let out = with_input(&["-i", "--", "cat"], b"piped \x00 bytes");
    assert_eq!(out.stdout, b"piped \x00 bytes");
    // Without -i the command reads nothing, whatever this process's input.
    let out = with_input(&["--", "cat"], b"not passed");
    assert_eq!(out.stdout, b"");
}

/// A setting the chosen backend cannot keep is refused before anything is
/// made, naming its field and the backend that keeps it.
#[test]
fn a_setting_the_backend_cannot_keep_is_refused_naming_its_field() {
    let fixture = CliFixture::new("unkept");
    let file = fixture.path().join("image.toml");
    std::fs::write(
        &file,
        "objective = \"unkept\"\nshape = \"narrow-fix\"\n[filesystem]\nwritable = [\".\"]\n\
         [environment.runtime]\nimage = \"oci-layout:/nowhere@sha256:\
         0000000000000000000000000000000000000000000000000000000000000000\"\n",
    )
    .unwrap();
    let out = fixture.run(&["--contract", file.to_str().unwrap(), "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "environment.runtime.image: backend-namespace process cannot enforce a pinned image"
        ) && stderr.contains("`--backend container` runs images"),
        "{stderr}"
    );
    assert!(
        !fixture.evidence().exists() || std::fs::read_dir(fixture.evidence()).unwrap().count() == 0,
        "nothing was created"
    );
}

/// Hex of the blob id and of the `secrets` tree id of the fixture's repository
/// once it holds `secrets/pin` (a four-digit secret) and `.env`.
fn commit_secrets(fixture: &CliFixture) -> Vec<String> {
    let repo = fixture.repo();
    std::fs::create_dir_all(repo.join("secrets")).unwrap();
    std::fs::write(repo.join("secrets/pin"), "4711\n").unwrap();
    std::fs::write(repo.join(".env"), "TOKEN=not-for-the-run\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "secrets"]);
    ["HEAD:secrets/pin", "HEAD:secrets", "HEAD:.env"]
        .iter()
        .map(|rev| {
            text(&git(&repo, &["rev-parse", rev]).stdout)
                .trim()
                .to_owned()
        })
        .collect()
}

#[test]
fn an_excluded_file_leaves_no_blob_id_size_or_tree_id_in_the_workspaces_index() {
    for (materialization, backend) in [
        ("layered", "namespace"),
        ("standalone", "namespace"),
        ("standalone", "container"),
    ] {
        let fixture = CliFixture::new("excluded-index");
        let ids = commit_secrets(&fixture);
        let contract = fixture.path().join("excluded.toml");
        std::fs::write(
            &contract,
            format!(
                "objective = \"excluded\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\n\
                 revision = \"HEAD\"\nmaterialization = \"{materialization}\"\n\
                 [filesystem]\nwritable = [\".\"]\nexcluded = [\"secrets/**\"]\n"
            ),
        )
        .unwrap();
        // What git in the run says of the index, and the index's raw bytes.
        let script = "git ls-files -s; echo ==; python3 -c \
                      \"print(open('.git/index','rb').read().hex())\"";
        let out = fixture.run(&[
            "--backend",
            backend,
            "--contract",
            contract.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            script,
        ]);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        let materialization = format!("{materialization} on {backend}");
        let (listed, raw) = stdout.split_once("==\n").unwrap();
        // The positive control: the repository's other file is in the index.
        let readme = text(&git(&fixture.repo(), &["rev-parse", "HEAD:hello.txt"]).stdout);
        assert!(
            listed.contains(readme.trim()) && listed.contains("hello.txt"),
            "{materialization}: {listed}"
        );
        for (id, what) in ids
            .iter()
            .zip(["secrets/pin's blob", "secrets' tree", ".env's blob"])
        {
            assert!(
                !listed.contains(id.as_str()),
                "{materialization}: {what} listed: {listed}"
            );
            assert!(
                !raw.contains(id.as_str()),
                "{materialization}: {what} in the index"
            );
        }
        assert!(
            !listed.contains("secrets/pin"),
            "{materialization}: {listed}"
        );
    }
}

#[test]
fn runs_keep_out_of_every_users_subordinate_ids_and_a_host_with_no_room_is_refused() {
    // A host file of the test's own is bound over /etc/subuid in a private
    // mount namespace: the host's own files are never touched.
    let fixture = CliFixture::new("subuid-overlap");
    assert!(
        std::path::Path::new("/etc/subuid").exists(),
        "this test binds over /etc/subuid, which must exist (Debian package passwd)"
    );
    let repo = fixture.repo();
    let command = fixture.command();
    let program = command.get_program().to_owned();
    // `agent-workspace ARGS` with `ranges` as the host's subordinate uids.
    let with_ranges = |ranges: &str, args: &str, extra: &[(&str, &str)]| {
        let subuid = fixture.path().join("subuid");
        std::fs::write(&subuid, ranges).unwrap();
        let script = format!("mount --bind \"$AW_SUBUID\" /etc/subuid && exec \"$AW_BIN\" {args}");
        let mut unshare = std::process::Command::new("unshare");
        unshare
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .envs(command.get_envs().filter_map(|(k, v)| Some((k, v?))))
            .env("AW_SUBUID", &subuid)
            .env("AW_BIN", &program)
            .current_dir(fixture.path());
        for (key, value) in extra {
            unshare.env(key, value);
        }
        unshare
            .output()
            .expect("unshare (Debian package util-linux)")
    };
    let run = format!("run --repo '{}' -- true", repo.display());
    // The first user holds the default ids (as useradd gives them): the runs
    // go above every range instead, and check-host is content.
    let first_user = "alice:100000:65536\n";
    let out = with_ranges(first_user, &run, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = with_ranges(first_user, "check-host", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let journals = || {
        std::fs::read_dir(fixture.runtime().join("journals"))
            .map(|dir| dir.count())
            .unwrap_or(0)
    };
    let before = journals();
    // No room at either: refused, naming the range and what to do.
    let crowded = "alice:100000:65536\nbob:1879048192:65536\n";
    let out = with_ranges(crowded, &run, &[]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("/etc/subuid gives alice the ids 100000 to 165535")
            && stderr.contains("AGENT_WORKSPACE_HOST_ID_BASE="),
        "{stderr}"
    );
    let out = with_ranges(crowded, "check-host", &[]);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("host_ids"),
        "{}",
        text(&out.stdout)
    );
    // Nothing of a run was made; then moved by hand to free ids, it goes.
    assert_eq!(journals(), before);
    let out = with_ranges(
        crowded,
        &run,
        &[("AGENT_WORKSPACE_HOST_ID_BASE", "1000000000")],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn an_excluded_path_only_in_history_is_not_readable_through_git() {
    let fixture = CliFixture::new("excluded-history");
    let repo = fixture.repo();
    std::fs::create_dir_all(repo.join("secrets")).unwrap();
    std::fs::write(repo.join("secrets/pin"), "4711\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "a secret"]);
    git(&repo, &["rm", "-rq", "secrets"]);
    git(&repo, &["commit", "-qm", "the secret gone"]);
    let contract = |excluded: &str| {
        let path = fixture.path().join("history.toml");
        std::fs::write(
            &path,
            format!(
                "objective = \"history\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\n\
                 revision = \"HEAD\"\n[filesystem]\nwritable = [\".\"]\nexcluded = [{excluded}]\n"
            ),
        )
        .unwrap();
        path
    };
    let read = "git cat-file -p HEAD~1:secrets/pin";
    // The positive control: without the exclusion the history is there.
    let open = contract("");
    let out = fixture.run(&["--contract", open.to_str().unwrap(), "--", "sh", "-c", read]);
    assert_eq!(text(&out.stdout), "4711\n", "{}", text(&out.stderr));
    // Excluded, though not in the checkout: no history at all.
    let closed = contract("\"secrets/**\"");
    let out = fixture.run(&[
        "--contract",
        closed.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        read,
    ]);
    assert!(!text(&out.stdout).contains("4711"), "{}", text(&out.stdout));
    assert_ne!(out.status.code(), Some(0), "the history was read");
}
