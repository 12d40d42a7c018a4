//! The `contract` subcommands, run as a user would run them.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

use std::path::Path;
use std::process::{Command, Output};

/// `agent-workspace ARGS` in the project directory, its runtime directory (what
/// `--backend` sets up) a temporary one.
fn agent_workspace(args: &[&str]) -> Output {
    let runtime = tempfile::tempdir().expect("a runtime directory");
    Command::new(env!("CARGO_BIN_EXE_agent-workspace"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("AGENT_WORKSPACE_RUNTIME_DIR", runtime.path())
        .output()
        .expect("run agent-workspace")
}

const EXAMPLE: &str = "examples/contracts/payments-api-1842.toml";

#[test]
fn the_example_contract_is_valid() {
    let out = agent_workspace(&["contract", "check", EXAMPLE]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("valid narrow-fix contract for ../payments-api at 8f3c2d1"),
        "{stdout}"
    );
}

#[test]
fn three_planted_mistakes_are_listed_with_their_paths_and_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(EXAMPLE))
        .expect("example");
    let planted = text
        .replace("ports = [43117]", "ports = [0]")
        .replace("revision = \"8f3c2d1\"", "revision = \"\"")
        .replace("wall_time = \"30m\"", "wall_time = \"0s\"");
    assert_ne!(planted, text);
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, planted).expect("write");
    let out = agent_workspace(&["contract", "check", file.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.ends_with("the contract is invalid"))
        .collect();
    assert_eq!(problems.len(), 3, "{stderr}");
    for path in [
        "source.revision",
        "process.ports[0]",
        "environment.limits.wall_time",
    ] {
        assert!(
            problems
                .iter()
                .any(|l| l.contains(&format!(": {path} (line "))),
            "{path} missing in {stderr}"
        );
    }
}

#[test]
fn unreadable_and_unparsable_contracts_exit_2_with_one_line() {
    let out = agent_workspace(&["contract", "check", "no/such/contract.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no/such/contract.toml: cannot read the contract"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("c.json");
    std::fs::write(&file, r#"{"objective": "x", "shape": "narrow-fix", "source": {"repo": ".", "revision": "HEAD", "extra": 1}}"#)
        .expect("write");
    let out = agent_workspace(&["contract", "check", file.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("source") && stderr.contains("unknown field `extra`"),
        "{stderr}"
    );
}

#[test]
fn a_file_with_three_kinds_of_mistake_gets_three_lines_from_check_and_from_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("three.toml");
    std::fs::write(
        &file,
        "objective = \"x\"\nshape = \"narrow-fix\"\ncolour = \"red\"\n[source]\nrepo = \".\"\n\
         revision = \"HEAD\"\n[filesystem]\nwritable = [\"../a\"]\n[process]\nports = \"8000\"\n",
    )
    .expect("write");
    let file = file.to_str().expect("utf-8 path");
    let expected = [
        "colour (line 3): unknown field `colour`",
        "filesystem.writable[0] (line 8): \"../a\" leads outside the workspace root",
        "process.ports (line 10): invalid type: string \"8000\", expected a sequence",
    ];
    let out = agent_workspace(&["contract", "check", file]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{stderr}");
    for (line, want) in lines.iter().zip(expected) {
        assert!(
            line.starts_with(&format!("{file}: {want}")),
            "{line:?} is not {want:?}"
        );
    }
    // `run` reads the file before anything is created: the same three, one each.
    let out = agent_workspace(&["run", "--contract", file, "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    for (line, want) in lines.iter().zip(expected) {
        let prefix = format!("agent-workspace: --contract {file}: {want}");
        assert!(line.starts_with(&prefix), "{line:?} is not {want:?}");
    }
}

#[test]
fn check_against_a_backend_lists_what_it_cannot_keep() {
    // The shipped PostgreSQL example runs on the namespace backend as shipped.
    let out = agent_workspace(&[
        "contract",
        "check",
        "examples/contracts/postgres.toml",
        "--backend",
        "namespace",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("kept by the namespace backend"), "{stdout}");
    // The design's example is kept too; a setting the backend cannot keep is named.
    let out = agent_workspace(&["contract", "check", EXAMPLE, "--backend", "namespace"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its disk cap is kept by the container backend too (as root).
    let out = agent_workspace(&["contract", "check", EXAMPLE, "--backend", "container"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A layered checkout is not (the runtime has no idmapped mounts): named.
    let dir = tempfile::tempdir().expect("tempdir");
    let layered = dir.path().join("layered.toml");
    std::fs::write(
        &layered,
        "objective = \"a layered checkout\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\nmaterialization = \"layered\"\n[filesystem]\nwritable = [\".\"]\n",
    )
    .expect("write");
    let out = agent_workspace(&[
        "contract",
        "check",
        layered.to_str().unwrap(),
        "--backend",
        "container",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("source.materialization"), "{stderr}");
}

#[test]
fn check_json_lists_each_problem_with_its_path_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("two.toml");
    std::fs::write(&file, "objective = \"x\"\nshape = \"narrow-fix\"\ncolour = 1\n[filesystem]\nwritable = [\"../a\"]\n")
        .expect("write");
    let out = agent_workspace(&["contract", "check", file.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["valid"], false, "{report}");
    assert_eq!(report["problems"][0]["path"], "colour", "{report}");
    assert_eq!(report["problems"][0]["line"], 3, "{report}");
    assert_eq!(
        report["problems"][1]["path"], "filesystem.writable[0]",
        "{report}"
    );
    let out = agent_workspace(&[
        "contract",
        "check",
        "examples/contracts/postgres.toml",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report, serde_json::json!({ "valid": true, "problems": [] }));
}

#[test]
fn the_schema_is_json_with_every_section() {
    let out = agent_workspace(&["contract", "schema"]);
    assert_eq!(out.status.code(), Some(0));
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).expect("schema is JSON");
    for section in [
        "source",
        "filesystem",
        "process",
        "environment",
        "identity",
        "promotion",
    ] {
        assert!(schema["properties"].get(section).is_some(), "{section}");
    }
}

#[test]
fn a_missing_argument_exits_2() {
    let out = agent_workspace(&["contract", "check"]);
    assert_eq!(out.status.code(), Some(2));
}
