//! A credential of a created workspace through the command line: issued once
//! from the environment `create` ran in, held by the workspace's processes for
//! its whole life (a later `exec` or `destroy` from another environment neither
//! needs nor changes it), and withheld wherever the run's changes are shown.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use support::cli::{CliFixture, text};

const CONTRACT: &str = r#"
objective = "a credential across commands"
shape = "narrow-fix"
[source]
repo = "."
revision = "HEAD"
[filesystem]
writable = ["."]
[[identity.credentials]]
name = "TOKEN"
source = "env:AW_TEST_TOKEN"
ttl = "10m"
scope = ["test"]
"#;

#[test]
fn a_credential_is_issued_once_and_never_shown_by_export_or_the_evidence() {
    let fixture = CliFixture::new("credentials");
    let file = fixture.path().join("credential.toml");
    std::fs::write(&file, CONTRACT).unwrap();
    let token = format!("tok-{}-cli-s3cr3t", std::process::id());
    let repo = fixture.repo();
    let out = fixture
        .command()
        .args(["create", "--contract", file.to_str().unwrap(), "--repo"])
        .arg(&repo)
        .env("AW_TEST_TOKEN", &token)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run = text(&out.stdout).trim().to_owned();

    // Later commands run without the variable, and one with another value: the
    // workspace keeps the credential it was created with.
    let exec = |script: &str, env: Option<&str>| {
        let mut command = fixture.command();
        command.args(["exec", &run, "--", "sh", "-c", script]);
        match env {
            Some(value) => command.env("AW_TEST_TOKEN", value),
            None => command.env_remove("AW_TEST_TOKEN"),
        };
        command.output().unwrap()
    };
    let out = exec("echo \"$TOKEN\" > leak.txt; echo fine > fine.txt", None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // The kept credential (host-only, 0600) is out of the run's reach: by its
    // host path, through pid 1's root, by `..` out of the workspace; and a write
    // attempt leaves it as it was.
    let kept = fixture
        .runtime()
        .join("runs")
        .join(&run)
        .join("identity.json");
    let before = std::fs::read(&kept).unwrap();
    let mode = |path: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&kept), 0o600);
    let attack = format!(
        "for p in '{k}' '/proc/1/root{k}' ../identity.json ../../identity.json; do \
           cat \"$p\" 2>/dev/null && echo \"READ $p\"; echo x >> \"$p\" 2>/dev/null && echo \"WROTE $p\"; \
         done; exit 0",
        k = kept.display()
    );
    let out = exec(&attack, None);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !stdout.contains("READ") && !stdout.contains("WROTE"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read(&kept).unwrap(),
        before,
        "the kept credential changed"
    );
    assert_eq!(mode(&kept), 0o600);
    // (The value in the command line is recorded redacted, as output is.)
    let same = format!("test \"$TOKEN\" = '{token}'");
    let out = exec(&same, Some("another-value-123"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "the credential changed between commands"
    );

    let out = fixture.agent_workspace(&["export", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let patch = text(&out.stdout);
    assert!(
        !patch.contains(&token),
        "export shows the credential:\n{patch}"
    );
    assert!(
        patch.contains("# withheld: ") && patch.contains("+fine"),
        "{patch}"
    );
    let exported_digest = text(&out.stderr)
        .split("sha256 ")
        .nth(1)
        .unwrap()
        .trim()
        .to_owned();

    let out = fixture
        .command()
        .args(["destroy", &run, "--json"])
        .env_remove("AW_TEST_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let evidence = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&run);
    fixture.assert_verifies(&evidence);
    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("outcome.json")).unwrap()).unwrap();
    assert_eq!(
        outcome["credential_leaks"][0]["path"], "leak.txt",
        "{outcome}"
    );
    // The digest `export` printed is the evidence's.
    assert_eq!(
        outcome["patch_sha256"],
        exported_digest.as_str(),
        "{outcome}"
    );
    for entry in walk(&evidence) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&token),
            "{} holds the credential",
            entry.display()
        );
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
