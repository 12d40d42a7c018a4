//! A layered run end to end: the checkout is a shared base tree plus the run's
//! upper directory, mounted as overlayfs in the run; the patch, the evidence and
//! the cleanup are what a standalone run gives, the base tree is never changed,
//! and a suspended layered run resumes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use support::{Fixture, assert_intact, git, read_outcome, shell};
use workspace_core::contract::Materialization;
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::runner::{CommandIo, CreateOptions};

/// Every file under `dir` with its bytes, sorted: the base tree's fingerprint.
fn tree(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            found.extend(tree(&path));
        } else if kind.is_file() {
            found.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn a_layered_run_edits_tracked_files_exports_a_patch_and_resumes() {
    let f = Fixture::new("layered");
    let cache = f.base.path().join("trees");
    let stack =
        agent_workspace::namespace_stack_layered(&f.cgroup_parent, &cache, 1 << 30).unwrap();
    let runner = f.runner_with(stack);
    let mut contract = f.contract();
    contract.source.materialization = Materialization::Layered;
    // A lockfile is digested from the shared base tree, as provisioned.
    contract.environment.runtime.lockfiles = vec!["src/lib.txt".into()];

    let ws = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    let source = ws.source().unwrap().clone();
    let lib = std::fs::read(f.repo.join("src/lib.txt")).unwrap();
    assert_eq!(source.pinned.len(), 1, "{:?}", source.pinned);
    assert_eq!(
        source.pinned[0].sha256.as_deref(),
        Some(workspace_core::digest::sha256_hex(&lib).as_str())
    );
    let layers = source
        .layers
        .clone()
        .expect("a layered checkout records its layers");
    let base_before = tree(&layers.lower);
    let first = ws
        .exec(
            &shell(
                "echo hi > x; echo more >> hello.txt; git status --porcelain",
                "layered",
            ),
            CommandIo::captured(),
        )
        .await
        .unwrap();
    assert_eq!(first.exit.status, ExitStatusRecord::Code(0));

    // Parked and taken back: the upper directory is re-verified, sealed again.
    let run_id = ws.run_id().clone();
    ws.suspend().await.unwrap();
    let ws = runner
        .resume(&run_id, CreateOptions::default())
        .await
        .unwrap();
    let second = ws
        .exec(
            &shell("cat x; rm src/lib.txt", "layered-2"),
            CommandIo::captured(),
        )
        .await
        .unwrap();
    assert_eq!(second.exit.status, ExitStatusRecord::Code(0));
    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);
    assert_eq!(read_outcome(&report.evidence).changed_paths, 3);

    let status = std::fs::read_to_string(report.evidence.join("commands/0001/stdout")).unwrap();
    assert!(
        status.contains(" M hello.txt") && status.contains("?? x"),
        "{status}"
    );
    let patch = report.evidence.join("diff.patch");
    let clone = f.base.path().join("clone");
    let out = git(
        f.base.path(),
        &[
            "clone",
            "-q",
            f.repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let out = git(&clone, &["apply", "--check", patch.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "the layered patch does not apply: {out:?}"
    );

    // The shared base tree is exactly what it was; the run left nothing else.
    assert_eq!(tree(&layers.lower), base_before, "the base tree changed");
    f.assert_nothing_left(&run_id, &[]);
}

/// `sh -c SCRIPT` as an ordinary user (uid and gid 65534, no supplementary
/// group).
fn as_another_user(script: &str) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv (Debian package util-linux)")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runner_over_open_directories_leaves_no_run_file_reachable_by_another_user() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let f = Fixture::new("layered-private-dirs");
    // The embedder's directories, as `mkdir` makes them: open to everyone.
    for dir in [&f.runtime, &f.evidence] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let stack = agent_workspace::namespace_stack_layered(
        &f.cgroup_parent,
        f.runtime.join("trees"),
        1 << 30,
    )
    .unwrap();
    let runner = f.runner_with(stack);
    let mut contract = f.contract();
    contract.source.materialization = Materialization::Layered;
    let ws = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    let ended = ws
        .exec(
            &shell(
                "echo the-runs-secret > secret.txt && chmod 644 secret.txt && echo the-commands-output",
                "private",
            ),
            CommandIo::captured(),
        )
        .await
        .unwrap();
    assert_eq!(ended.exit.status, ExitStatusRecord::Code(0));
    // Root, the positive control, reads the run's file in its upper layer
    // and the command's output in its evidence.
    let upper = ws.source().unwrap().layers.clone().unwrap().upper;
    let secret = upper.join("secret.txt");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "the-runs-secret\n"
    );
    let stdout = ws
        .evidence_dir()
        .join(format!("commands/{:04}/stdout", ended.seq));
    assert_eq!(
        std::fs::read_to_string(&stdout).unwrap(),
        "the-commands-output\n"
    );
    // Another local user reaches none of it.
    for attempt in [
        format!("ls '{}'", upper.display()),
        format!("cat '{}'", secret.display()),
        format!("ls '{}'", f.runtime.display()),
        format!("ls '{}'", f.runtime.join("runs").display()),
        format!("ls '{}'", f.runtime.join("trees").display()),
        format!("ls '{}'", f.evidence.display()),
        format!("ls '{}'", ws.evidence_dir().display()),
        format!("cat '{}'", stdout.display()),
    ] {
        let out = as_another_user(&attempt);
        let seen = String::from_utf8_lossy(&out.stdout);
        assert_ne!(out.status.code(), Some(0), "{attempt} worked: {seen}");
        assert!(!seen.contains("secret"), "{attempt}: {seen}");
        assert!(!seen.contains("the-commands-output"), "{attempt}: {seen}");
    }
    // The runner closed both: the runtime directory its own (and, as root,
    // searchable by the group of the host id a container's root maps to),
    // the evidence root its own alone.
    let runtime = std::fs::metadata(&f.runtime).unwrap();
    assert_eq!(
        (runtime.mode() & 0o7777, runtime.gid()),
        (0o710, workspace_core::subordinate::host_id_base())
    );
    assert_eq!(
        std::fs::metadata(&f.evidence).unwrap().mode() & 0o7777,
        0o700
    );
    ws.finish().await.unwrap();
}
