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

/// A run with the `TOKEN` credential whose command is `script`, through `run`.
const RUN_CONTRACT: &str = r#"
objective = "a credential in names"
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

/// The forms of `value` a bundle must hold in no file: as it is, base64 (the
/// characters only the value decides), hex.
fn forms(value: &str) -> Vec<String> {
    let out = std::process::Command::new("sh")
        .args(["-c", "printf %s \"$V\" | base64 -w0"])
        .env("V", value)
        .output()
        .unwrap();
    let base64 = text(&out.stdout);
    let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
    vec![value.to_owned(), base64[..base64.len() - 4].to_owned(), hex]
}

#[test]
fn a_credential_in_a_name_or_a_link_target_never_reaches_the_bundle_or_the_summary() {
    names_never_show_the_credential("credential-names", &[]);
}

#[test]
fn on_the_container_backend_a_credential_in_a_name_never_reaches_the_bundle_or_the_summary() {
    names_never_show_the_credential("credential-names-container", &["--backend", "container"]);
}

/// Runs the name attacks through `run` (with `backend` arguments) and checks
/// that no form of the value reaches the summary or any file of the bundle.
fn names_never_show_the_credential(test: &str, backend: &[&str]) {
    let fixture = CliFixture::new(test);
    let file = fixture.path().join("names.toml");
    std::fs::write(&file, RUN_CONTRACT).unwrap();
    let token = format!("tok-{}-name-s3cr3t", std::process::id());
    let repo = fixture.repo();
    let head = |repo: &std::path::Path| {
        let out = std::process::Command::new("git")
            .args(["for-each-ref", "--format=%(refname) %(objectname)"])
            .current_dir(repo)
            .output()
            .unwrap();
        (text(&out.stdout), std::fs::read_dir(repo).unwrap().count())
    };
    let before = head(&repo);
    // The positive control (fine.txt) beside a file, a directory, a link
    // target, a rename and an encoded name that each carry the value.
    let script = "echo fine > fine.txt; \
        touch \"f-$TOKEN\"; \
        mkdir \"d-$TOKEN\"; echo in > \"d-$TOKEN/in.txt\"; \
        ln -s \"x-$TOKEN\" lnk; \
        mv src/lib.txt \"src/lib-$TOKEN.txt\"; \
        echo b64 > \"$(printf %s \"$TOKEN\" | base64 -w0)\"; \
        echo hex > \"h-$(printf %s \"$TOKEN\" | od -An -tx1 | tr -d ' \\n')\"";
    let out = fixture
        .command()
        .args(["run", "--contract", file.to_str().unwrap(), "--repo"])
        .arg(&repo)
        .args(["--evidence", fixture.evidence().to_str().unwrap()])
        .args(backend)
        .args(["--", "sh", "-c", script])
        .env("AW_TEST_TOKEN", &token)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for form in forms(&token) {
        assert!(
            !stderr.contains(&form) && !text(&out.stdout).contains(&form),
            "the summary shows the credential ({form}): {stderr}"
        );
    }
    assert!(
        stderr.contains("a credential's value is in ") && stderr.contains("f-[redacted:TOKEN]"),
        "{stderr}"
    );

    let runs: Vec<_> = std::fs::read_dir(fixture.evidence()).unwrap().collect();
    assert_eq!(runs.len(), 1);
    let evidence = runs.into_iter().next().unwrap().unwrap().path();
    fixture.assert_verifies(&evidence);
    for entry in walk(&evidence) {
        let bytes = String::from_utf8_lossy(&std::fs::read(&entry).unwrap()).into_owned();
        for form in forms(&token) {
            assert!(
                !bytes.contains(&form),
                "{} holds the credential ({form})",
                entry.display()
            );
        }
    }
    let changes: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("changes.json")).unwrap()).unwrap();
    let withheld: Vec<&str> = changes
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["not_in_patch"]["reason"] == "credential-in-name")
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    for expected in [
        "f-[redacted:TOKEN]",
        "d-[redacted:TOKEN]/in.txt",
        "src/lib-[redacted:TOKEN].txt",
    ] {
        assert!(withheld.contains(&expected), "{expected}: {changes}");
    }
    // Both encoded names are listed, redacted, as not in the patch.
    assert_eq!(withheld.len(), 5, "{changes}");
    // The link's target is its content: withheld as content is.
    let patch = text(&std::fs::read(evidence.join("diff.patch")).unwrap());
    assert!(patch.contains("+fine"), "{patch}");
    assert!(
        patch.contains("diff --git a/lnk b/lnk\n# withheld: "),
        "{patch}"
    );
    let clone = fixture.path().join("clone");
    let cloned = std::process::Command::new("git")
        .args(["clone", "-q"])
        .arg(&repo)
        .arg(&clone)
        .status()
        .unwrap();
    assert!(cloned.success());
    // What is carried applies (a withheld section is a header git passes over).
    let check = std::process::Command::new("git")
        .args(["apply", "--check"])
        .arg(evidence.join("diff.patch"))
        .current_dir(&clone)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}\n{patch}", text(&check.stderr));
    assert_eq!(head(&repo), before, "the host repository changed");
}
