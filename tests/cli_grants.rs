//! Host directories granted to a run through the CLI (`--ro`, `--rw-cache`):
//! inside the workspace, through a symbolic link, writable as a cache, and
//! attacked through a link the repository plants where the grant goes.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use support::cli::{CliFixture, text};
use support::git;

/// The evidence directory the summary line (the last line on stderr) names.
fn evidence_of(out: &Output) -> PathBuf {
    let stderr = text(&out.stderr);
    let line = stderr.lines().last().expect("a summary line");
    let (_, dir) = line.rsplit_once("; evidence ").expect("evidence named");
    PathBuf::from(dir.split("; ").next().unwrap())
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_writable_cache_inside_the_workspace_is_kept_on_the_host_and_left_out_of_the_patch() {
    let fixture = CliFixture::new("rw-cache");
    let cache = fixture.path().join("node-cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("left-pad.js"), "module.exports = 1;\n").unwrap();
    let grant = format!("{}:/workspace/node_modules", cache.display());
    let script = "cat node_modules/left-pad.js && echo built > node_modules/built.js \
                  && ls -ln node_modules/built.js && echo change > app.js";
    let out = fixture.run(&["--rw-cache", &grant, "--", "sh", "-c", script]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("module.exports = 1;"), "{stdout}");
    // Inside, the cache is the run's own (uid 1000) ...
    assert!(stdout.contains(" 1000 1000 "), "{stdout}");
    // ... and on disk what the run wrote is the cache owner's, kept for the next run.
    let built = cache.join("built.js");
    assert_eq!(std::fs::read_to_string(&built).unwrap(), "built\n");
    let owner = std::fs::metadata(&cache).unwrap();
    let made = std::fs::metadata(&built).unwrap();
    assert_eq!((made.uid(), made.gid()), (owner.uid(), owner.gid()));
    // The patch holds the run's change, nothing of the cache nor its mount point.
    let evidence = evidence_of(&out);
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("b/app.js"), "{patch}");
    assert!(!patch.contains("node_modules"), "{patch}");
    let out = fixture.run(&["--rw-cache", &grant, "--", "cat", "node_modules/built.js"]);
    assert_eq!(text(&out.stdout), "built\n", "{}", text(&out.stderr));
    // Half a grant is bad input, named.
    let out = fixture.run(&["--rw-cache", "/tmp", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--rw-cache \"/tmp\": write it as HOST:TARGET"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_grant_through_a_symbolic_link_binds_what_it_named_and_records_both_paths() {
    let fixture = CliFixture::new("grant-link");
    let release = fixture.path().join("toolchain-1.2");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::write(release.join("VERSION"), "1.2\n").unwrap();
    let link = fixture.path().join("toolchain-current");
    std::os::unix::fs::symlink(&release, &link).unwrap();
    let grant = format!("{}:/opt/toolchain", link.display());
    let out = fixture.run(&["--ro", &grant, "--", "cat", "/opt/toolchain/VERSION"]);
    assert_eq!(text(&out.stdout), "1.2\n", "{}", text(&out.stderr));
    let observed = json(&evidence_of(&out).join("observed.json"));
    let mounts = &observed["probe"]["facts"]["host_mounts"];
    assert_eq!(mounts[0]["target"], "/opt/toolchain", "{observed}");
    assert_eq!(mounts[0]["host"], link.to_str().unwrap(), "{observed}");
    assert_eq!(
        mounts[0]["resolved"],
        release.to_str().unwrap(),
        "{observed}"
    );
    // The read-only grant refused a write, asked of the kernel at its target.
    assert_eq!(
        observed["probe"]["facts"]["writes"]["/opt/toolchain"], "refused",
        "{observed}"
    );

    // A grant of a path that is not there is bad input, said once, before
    // anything is created.
    let missing = format!("{}:/opt/missing", fixture.path().join("nothing").display());
    let out = fixture.run(&["--ro", &missing, "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.starts_with("agent-workspace: --ro "), "{stderr}");
}

#[test]
fn a_link_the_repository_plants_where_a_grant_goes_cannot_redirect_it() {
    let fixture = CliFixture::new("grant-planted-link");
    // The repository commits `node_modules` as a link to a directory of the
    // test's own outside the workspace, hoping the grant is mounted there.
    let victim = fixture.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep"), "untouched\n").unwrap();
    let repo = fixture.repo();
    std::os::unix::fs::symlink(&victim, repo.join("node_modules")).unwrap();
    git(&repo, &["add", "node_modules"]);
    git(&repo, &["commit", "-q", "-m", "plant a link"]);
    let cache = fixture.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let grant = format!("{}:/workspace/node_modules", cache.display());
    let out = fixture.run(&[
        "--rw-cache",
        &grant,
        "--",
        "sh",
        "-c",
        "echo owned > node_modules/keep",
    ]);
    // The seal refuses to mount through the link: the run fails before the command.
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(victim.join("keep")).unwrap(),
        "untouched\n"
    );
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0);
}
