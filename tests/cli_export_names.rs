//! Attacks on the export through the names an agent gives its files: a name
//! that would hide the whole patch (one git refuses, one that is not UTF-8, a
//! nested repository), and an export that fails. One case per attack, each with
//! its positive control (an ordinary change beside it is exported and applies
//! with `git apply --check`), checked end to end through the command line: what
//! `changes.json` lists, what the summary line says, the exit status, what
//! `verify` says, and that the host repository is unchanged.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::cli::{CliFixture, text};
use support::{git, git_stdout, list_dir};

/// The ordinary change every attack run makes beside its plant.
const CONTROL: &str = "echo fixed > fix.txt";

/// What the host repository looks like: HEAD, every ref, the status.
fn host_state(repo: &Path) -> (String, String, String) {
    (
        git_stdout(repo, &["rev-parse", "HEAD"]),
        git_stdout(repo, &["for-each-ref"]),
        git_stdout(repo, &["status", "--porcelain", "--ignored"]),
    )
}

/// The one bundle under the fixture's evidence directory.
fn bundle(fixture: &CliFixture) -> PathBuf {
    let runs = list_dir(&fixture.evidence());
    assert_eq!(runs.len(), 1, "{runs:?}");
    fixture.evidence().join(&runs[0])
}

/// `git apply --check` of `patch` on a fresh clone of the host repository.
fn applies(fixture: &CliFixture, patch: &Path) -> Output {
    let clone = fixture.path().join(format!("clone-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&clone);
    git(
        fixture.path(),
        &[
            "clone",
            "-q",
            fixture.repo().to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    Command::new("git")
        .args(["apply", "--check"])
        .arg(patch)
        .current_dir(&clone)
        .output()
        .unwrap()
}

/// Runs `plant` beside the control change and checks everything an export that
/// cannot carry `path` must say: listed with `reason` (and `rule`, when git
/// refuses it) in `changes.json`, left out of `diff.patch` (which carries the
/// control and applies), named in the summary as `shown`, the command's status,
/// `verify` naming it, the host repository unchanged.
fn attack(test: &str, plant: &str, path: &str, shown: &str, reason: &str) {
    let fixture = CliFixture::new(test);
    let before = host_state(&fixture.repo());
    let out = fixture.run(&["--", "sh", "-c", &format!("{CONTROL}; {plant}")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("not in the patch, and not promoted: ") && stderr.contains(shown),
        "the summary does not name {shown}: {stderr}"
    );
    assert!(stderr.contains("2 changed files"), "{stderr}");

    let dir = bundle(&fixture);
    let changes: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("changes.json")).unwrap()).unwrap();
    let listed = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == path)
        .unwrap_or_else(|| panic!("{path:?} not in changes.json: {changes}"));
    assert_eq!(listed["not_in_patch"]["reason"], reason, "{listed}");
    let control = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "fix.txt")
        .unwrap();
    assert!(control.get("not_in_patch").is_none(), "{control}");

    let patch = text(&std::fs::read(dir.join("diff.patch")).unwrap());
    assert!(patch.contains("+++ b/fix.txt"), "{patch}");
    assert_eq!(patch.matches("diff --git").count(), 1, "{patch}");
    let checked = applies(&fixture, &dir.join("diff.patch"));
    assert!(checked.status.success(), "{}", text(&checked.stderr));

    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("outcome.json")).unwrap()).unwrap();
    assert_eq!(outcome["not_in_patch"][0]["path"], path, "{outcome}");
    assert!(outcome.get("export_failed").is_none(), "{outcome}");

    let verified = fixture.assert_verifies(&dir);
    assert!(
        verified.contains("not in diff.patch") && verified.contains(shown),
        "{verified}"
    );
    assert_eq!(
        host_state(&fixture.repo()),
        before,
        "the host repository changed"
    );
}

#[test]
fn a_git_dir_in_upper_case_is_listed_and_the_rest_exported() {
    attack(
        "names-upper",
        "mkdir .GIT; echo '[core]' > .GIT/config",
        ".GIT/config",
        ".GIT/config",
        "refused-by-git",
    );
}

#[test]
fn a_git_dir_in_mixed_case_below_the_root_is_listed_and_the_rest_exported() {
    attack(
        "names-mixed",
        "mkdir -p x/.GiT; echo '[core]' > x/.GiT/config",
        "x/.GiT/config",
        "x/.GiT/config",
        "refused-by-git",
    );
}

#[test]
fn a_git_dir_with_a_trailing_dot_is_listed_and_the_rest_exported() {
    attack(
        "names-dot",
        "mkdir .git.; echo '[core]' > .git./config",
        ".git./config",
        ".git./config",
        "refused-by-git",
    );
}

#[test]
fn a_git_dir_by_its_short_name_is_listed_and_the_rest_exported() {
    attack(
        "names-short",
        "mkdir git~1; echo '[core]' > git~1/config",
        "git~1/config",
        "git~1/config",
        "refused-by-git",
    );
}

#[test]
fn a_git_dir_with_a_zero_width_character_is_listed_and_the_rest_exported() {
    attack(
        "names-zero-width",
        "d=\"$(printf '.g\\342\\200\\214it')\"; mkdir \"$d\"; echo '[core]' > \"$d/config\"",
        ".g\u{200c}it/config",
        // Shown escaped: an invisible character never hides in the summary.
        ".g\\u{200c}it/config",
        "refused-by-git",
    );
}

#[test]
fn a_name_that_is_not_utf8_is_listed_and_the_rest_exported() {
    attack(
        "names-not-utf8",
        "echo 'fn hidden() {}' > \"$(printf 'bad-\\377.rs')\"",
        "bad-\\xff.rs",
        "bad-\\xff.rs",
        "not-utf8",
    );
}

#[test]
fn a_symlinked_gitmodules_is_listed_and_the_rest_exported() {
    attack(
        "names-gitmodules",
        "ln -s /etc/passwd .gitmodules",
        ".gitmodules",
        ".gitmodules",
        "refused-by-git",
    );
}

#[test]
fn a_nested_repository_is_listed_and_the_rest_exported() {
    attack(
        "names-nested",
        "mkdir -p sub/.git; echo '[core]' > sub/.git/config",
        "sub/.git",
        "sub/.git",
        "nested-repository",
    );
}

/// A patch-target contract with no required check.
const PATCH_CONTRACT: &str = r#"
objective = "promote a run that planted a name"
shape = "narrow-fix"
[source]
repo = "."
revision = "HEAD"
[filesystem]
writable = ["."]
[promotion]
target = "draft-review"
"#;

#[test]
fn a_change_the_patch_cannot_carry_refuses_promotion() {
    let fixture = CliFixture::new("names-promote");
    let file = fixture.path().join("promote.toml");
    std::fs::write(&file, PATCH_CONTRACT).unwrap();
    let before = host_state(&fixture.repo());
    let run = fixture.create(Some(&file));
    let script = format!("{CONTROL}; mkdir .GIT; echo '[core]' > .GIT/config");
    let out = fixture.agent_workspace(&["exec", &run, "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = fixture.agent_workspace(&["export", &run]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("not in the patch: .GIT/config"), "{stderr}");
    let digest = stderr.split("sha256 ").nth(1).unwrap()[..64].to_owned();
    // Asked first, the promotion boundary refuses and the workspace is kept.
    let out = fixture.agent_workspace(&[
        "promote",
        &run,
        "--approved-by",
        "reviewer",
        "--sha256",
        &digest,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("promotion refused: ")
            && stderr.contains(".GIT/config")
            && stderr.contains("not in the patch")
            && stderr.contains("kept"),
        "{stderr}"
    );
    // Ended with it, the run's own export refuses it too.
    let out = fixture.agent_workspace(&[
        "promote",
        &run,
        "--approved-by",
        "reviewer",
        "--sha256",
        &digest,
        "--end",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("promotion refused: the patch does not carry every change: .GIT/config"),
        "{stderr}"
    );
    let dir = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&run);
    let promotion: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("promotion.json")).unwrap()).unwrap();
    assert_eq!(promotion["result"], "refused", "{promotion}");
    fixture.assert_verifies(&dir);
    // No review branch, nothing else: the host repository is as it was.
    assert_eq!(
        host_state(&fixture.repo()),
        before,
        "the host repository changed"
    );
}

#[test]
fn an_export_that_fails_says_so_in_its_summary_its_status_and_verify() {
    let fixture = CliFixture::new("names-export-fails");
    let repo = fixture.repo();
    // A base path that is not UTF-8: the run deleting its directory makes the
    // export read it, which it cannot.
    std::fs::create_dir(repo.join("weird")).unwrap();
    let name = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"bad-\xff.txt");
    std::fs::write(repo.join("weird").join(name), "x\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "weird"]);
    let before = host_state(&repo);

    // The positive control: the same run without the deletion exports.
    let out = fixture.run(&["--", "sh", "-c", CONTROL]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let control = bundle(&fixture);
    let checked = applies(&fixture, &control.join("diff.patch"));
    assert!(checked.status.success(), "{}", text(&checked.stderr));
    fixture.assert_verifies(&control);
    std::fs::remove_dir_all(&control).unwrap();

    let out = fixture.run(&["--", "sh", "-c", &format!("{CONTROL}; rm -rf weird")]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("changes not exported")
            && stderr.contains("the export failed, its changes are not recorded")
            && stderr.contains("is not UTF-8"),
        "{stderr}"
    );
    let dir = bundle(&fixture);
    assert!(!dir.join("diff.patch").exists() && !dir.join("changes.json").exists());
    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("outcome.json")).unwrap()).unwrap();
    assert_eq!(
        outcome["export_failed"]["step"], "export-patch",
        "{outcome}"
    );

    let verified = fixture.agent_workspace(&["verify", dir.to_str().unwrap()]);
    let said = format!("{}{}", text(&verified.stdout), text(&verified.stderr));
    assert_eq!(verified.status.code(), Some(1), "{said}");
    assert!(
        said.contains("the run's export failed")
            && said.contains("does not record the run's changes"),
        "{said}"
    );
    let json = fixture.agent_workspace(&["verify", "--json", dir.to_str().unwrap()]);
    assert_eq!(json.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        (report["intact"].as_bool(), report["complete"].as_bool()),
        (Some(true), Some(false)),
        "{report}"
    );
    assert_eq!(host_state(&repo), before, "the host repository changed");
}

#[test]
fn on_the_container_backend_every_such_name_is_listed_and_the_rest_exported() {
    let fixture = CliFixture::new("names-container");
    let before = host_state(&fixture.repo());
    let script = format!(
        "{CONTROL}; mkdir .GIT; echo '[core]' > .GIT/config; \
         echo y > \"$(printf 'bad-\\377')\"; \
         mkdir -p sub/.git; echo '[core]' > sub/.git/config"
    );
    let out = fixture.run(&["--backend", "container", "--", "sh", "-c", &script]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let dir = bundle(&fixture);
    let changes: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("changes.json")).unwrap()).unwrap();
    let listed: Vec<(&str, &str)> = changes
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| Some((c["path"].as_str()?, c["not_in_patch"]["reason"].as_str()?)))
        .collect();
    assert_eq!(
        listed,
        [
            (".GIT/config", "refused-by-git"),
            ("bad-\\xff", "not-utf8"),
            ("sub/.git", "nested-repository"),
        ],
        "{changes}"
    );
    for (path, _) in &listed {
        assert!(stderr.contains(path), "{path} not in the summary: {stderr}");
    }
    let checked = applies(&fixture, &dir.join("diff.patch"));
    assert!(checked.status.success(), "{}", text(&checked.stderr));
    let verified = fixture.assert_verifies(&dir);
    assert!(verified.contains("not in diff.patch"), "{verified}");
    assert_eq!(
        host_state(&fixture.repo()),
        before,
        "the host repository changed"
    );
}
