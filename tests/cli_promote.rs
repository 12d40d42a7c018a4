//! `promote` through the command line: the approval is bound to the digest
//! `export` printed, the required checks run against exactly that patch, and a
//! check that edits what it verifies blocks the promotion instead of landing its
//! edit in it.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use support::cli::{CliFixture, text};

/// A patch-target contract whose one required check is `check`.
fn contract(check: &str) -> String {
    format!(
        r#"
objective = "promote through the CLI"
shape = "narrow-fix"
[source]
repo = "."
revision = "HEAD"
[filesystem]
writable = ["."]
[promotion]
target = "patch"
[[promotion.required_checks]]
name = "check"
command = ["sh", "-c", "{check}"]
"#
    )
}

/// `create`, then `exec` one edit; returns the run and the digest `export` printed.
fn created_with_an_edit(fixture: &CliFixture, check: &str) -> (String, String) {
    let file = fixture.path().join("promote.toml");
    std::fs::write(&file, contract(check)).unwrap();
    let run = fixture.create(Some(&file));
    let out = fixture.agent_workspace(&["exec", &run, "--", "sh", "-c", "echo fixed > fix.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = fixture.agent_workspace(&["export", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let digest = stderr
        .split("sha256 ")
        .nth(1)
        .map(|rest| rest.trim().to_owned())
        .unwrap_or_else(|| panic!("no digest in: {stderr}"));
    (run, digest)
}

/// `promote RUN --approved-by reviewer --sha256 DIGEST`.
fn promote(fixture: &CliFixture, run: &str, digest: &str) -> std::process::Output {
    fixture.agent_workspace(&[
        "promote",
        run,
        "--approved-by",
        "reviewer",
        "--sha256",
        digest,
    ])
}

/// Nothing of a run is left under the runtime directory (the shared tree cache
/// and the journals of finished runs stay, as after every run).
fn assert_cleaned(fixture: &CliFixture) {
    let runs: Vec<_> = std::fs::read_dir(fixture.runtime().join("runs"))
        .unwrap()
        .collect();
    assert!(runs.is_empty(), "{runs:?}");
    let out = fixture.agent_workspace(&["ls", "--json"]);
    assert_eq!(text(&out.stdout).trim(), "[]", "{}", text(&out.stderr));
}

fn evidence_of(fixture: &CliFixture, run: &str) -> std::path::PathBuf {
    fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(run)
}

#[test]
fn an_approved_patch_whose_check_passes_is_promoted_and_records_who_recorded_it() {
    let fixture = CliFixture::new("promote-ok");
    let (run, digest) = created_with_an_edit(&fixture, "test -f fix.txt");

    // Not a digest: one line, exit 2, and the run is still there to promote.
    let out = promote(&fixture, &run, "not-a-digest");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--sha256"), "{stderr}");

    let out = fixture.agent_workspace(&[
        "promote",
        &run,
        "--approved-by",
        "reviewer",
        "--sha256",
        &digest,
        "--json",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("promoted {digest}")), "{stderr}");
    // The summary says where the patch went, as promotion.json does.
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["promotion"]["result"], "promoted", "{summary}");
    assert_eq!(
        summary["promotion"]["record"]["patch_sha256"],
        digest.as_str(),
        "{summary}"
    );

    let evidence = evidence_of(&fixture, &run);
    fixture.assert_verifies(&evidence);
    let checks: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("checks.json")).unwrap()).unwrap();
    assert_eq!(checks[0]["passed"], true, "{checks}");
    assert_eq!(checks[0]["patch_sha256"], digest.as_str());
    let approvals: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("approvals.json")).unwrap()).unwrap();
    assert_eq!(approvals[0]["approver"], "reviewer", "{approvals}");
    assert_eq!(approvals[0]["recorded_by"]["uid"], 0, "{approvals}");
    assert!(approvals[0]["recorded_by"]["pid"].as_u64().unwrap() > 1);
    assert_cleaned(&fixture);
}

#[test]
fn a_check_that_edits_the_workspace_blocks_the_promotion_and_its_edit_is_not_in_the_patch() {
    let fixture = CliFixture::new("promote-sneaky");
    let (run, digest) = created_with_an_edit(&fixture, "echo sneaky >> fix.txt; exit 0");
    // Told to end it: refused, and the evidence says why.
    let out = fixture.agent_workspace(&[
        "promote",
        &run,
        "--end",
        "--approved-by",
        "reviewer",
        "--sha256",
        &digest,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("promotion refused"), "{stderr}");
    assert!(
        stderr.contains("changed after its checks, not in the patch: fix.txt"),
        "{stderr}"
    );

    let evidence = evidence_of(&fixture, &run);
    fixture.assert_verifies(&evidence);
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+fixed"), "{patch}");
    assert!(!patch.contains("sneaky"), "{patch}");
    let checks: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("checks.json")).unwrap()).unwrap();
    assert_eq!(checks[0]["passed"], false, "{checks}");
    assert_eq!(checks[0]["changed_paths"], serde_json::json!(["fix.txt"]));
    assert_cleaned(&fixture);
}

#[test]
fn a_failing_check_keeps_the_workspace_for_the_agent_to_fix_and_says_which_failed() {
    let fixture = CliFixture::new("promote-kept");
    let (run, digest) = created_with_an_edit(&fixture, "echo sneaky >> fix.txt; exit 0");
    // `checks` says which check fails and keeps the workspace.
    let out = fixture.agent_workspace(&["checks", &run]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "check: failed: it changed the workspace it verified: fix.txt"
    );
    // Where its record is (it printed nothing to show the end of).
    assert!(lines[1].starts_with("  record: "), "{stdout}");
    assert!(lines[1].ends_with("/command.json"), "{stdout}");
    assert_eq!(lines.len(), 2, "{stdout}");
    // So does `promote`, which keeps the workspace for the agent to fix...
    let out = promote(&fixture, &run, &digest);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("required check \"check\" failed"),
        "{stderr}"
    );
    assert!(stderr.contains("not promoted and kept"), "{stderr}");
    let out = fixture.agent_workspace(&["exec", &run, "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_cleaned(&fixture);
}

#[test]
fn a_refused_promotion_keeps_the_workspace_and_the_right_approval_then_promotes() {
    let fixture = CliFixture::new("promote-refused-kept");
    let (run, digest) = created_with_an_edit(&fixture, "true");
    // An approval of another patch: refused, and the workspace stays live.
    let stale = "0".repeat(64);
    let out = promote(&fixture, &run, &stale);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("promotion refused: "), "{stderr}");
    assert!(stderr.contains(&stale), "{stderr}");
    assert!(stderr.contains("not promoted and kept"), "{stderr}");
    let out = fixture.agent_workspace(&["exec", &run, "--", "cat", "fix.txt"]);
    assert_eq!(text(&out.stdout), "fixed\n", "{}", text(&out.stderr));
    // The approval of this patch promotes it.
    let out = promote(&fixture, &run, &digest);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("promoted {digest}")),
        "{}",
        text(&out.stderr)
    );
    assert_cleaned(&fixture);
}
