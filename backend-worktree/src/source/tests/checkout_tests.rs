//! Standalone checkouts: content, isolation of the config, filters, revisions, and the
//! source left untouched.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::fixture::{Repo, digest_tree, git, git_output};
use crate::source::{SourceError, open_source_repo, provision_standalone, resolve_revision};

/// Every entry of `git ls-tree -r commit` is on disk with its content, its executable
/// bit, and symlinks as symlinks; nothing else is (besides `.git`).
fn assert_matches_tree(repo: &Repo, commit: &str, ws: &std::path::Path) {
    let listing = git(&repo.path, &["ls-tree", "-r", commit]);
    let mut expected = std::collections::BTreeSet::new();
    for line in listing.lines() {
        let (meta, path) = line.split_once('\t').unwrap();
        let fields: Vec<&str> = meta.split_whitespace().collect();
        let (mode, id) = (fields[0], fields[2]);
        let blob = std::process::Command::new("git")
            .args(["cat-file", "blob", id])
            .current_dir(&repo.path)
            .output()
            .unwrap()
            .stdout;
        let on_disk = ws.join(path);
        let meta = fs::symlink_metadata(&on_disk).unwrap();
        match mode {
            "120000" => {
                assert!(meta.file_type().is_symlink(), "{path} is not a symlink");
                let target = fs::read_link(&on_disk).unwrap();
                assert_eq!(target.as_os_str().as_encoded_bytes(), blob.as_slice());
            }
            "100755" | "100644" => {
                assert!(meta.is_file(), "{path} is not a file");
                assert_eq!(fs::read(&on_disk).unwrap(), blob, "{path} content");
                let exec = meta.permissions().mode() & 0o111 != 0;
                assert_eq!(exec, mode == "100755", "{path} executable bit");
            }
            other => panic!("unexpected mode {other}"),
        }
        expected.insert(std::path::PathBuf::from(path));
    }
    let on_disk: std::collections::BTreeSet<_> = digest_tree(ws)
        .into_iter()
        .filter(|(p, kind)| !p.starts_with(".git") && kind != "dir")
        .map(|(p, _)| p)
        .collect();
    assert_eq!(on_disk, expected);
}

#[test]
fn source_fresh_checkout_matches_the_commit() {
    let repo = Repo::standard();
    let commit = repo.rev("v1^{commit}");
    let ws = repo.dest("ws");
    let checkout = provision_standalone(&repo.path, "v1", &ws).unwrap();
    assert_eq!(checkout.commit.to_string(), commit);
    assert_eq!(checkout.tree.to_string(), repo.rev("v1^{tree}"));
    assert_matches_tree(&repo, &commit, &ws);

    // Detached HEAD at the commit, clean status, history readable through alternates.
    assert_eq!(
        fs::read_to_string(ws.join(".git/HEAD")).unwrap().trim(),
        commit
    );
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), commit);
    let symbolic = git_output(&ws, &["symbolic-ref", "-q", "HEAD"]);
    assert!(!symbolic.status.success(), "HEAD must be detached");
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    assert!(git(&ws, &["log", "-1", "--format=%s"]).contains("first"));
}

#[test]
fn source_workspace_config_carries_nothing_from_the_source() {
    let repo = Repo::standard();
    let hooks = repo.dest("evil-hooks");
    fs::create_dir(&hooks).unwrap();
    let settings = [
        [
            "remote.origin.url",
            "https://user:secret@example.com/org/repo.git",
        ],
        ["remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"],
        [
            "remote.mirror.pushurl",
            "https://tok3n@mirror.example.com/repo.git",
        ],
        ["credential.helper", "store --file /tmp/creds"],
        ["include.path", "/tmp/evil.gitconfig"],
        ["core.hooksPath", hooks.to_str().unwrap()],
        ["filter.evil.smudge", "touch /tmp/smudged"],
        ["core.fsmonitor", "/tmp/fsmonitor.sh"],
        ["core.sshCommand", "ssh -i /tmp/key"],
        ["diff.evil.textconv", "/tmp/textconv.sh"],
        ["diff.external", "/tmp/external-diff.sh"],
    ];
    for [key, value] in settings {
        git(&repo.path, &["config", key, value]);
    }
    let ws = repo.dest("ws");
    let checkout = provision_standalone(&repo.path, "main", &ws).unwrap();
    let config = fs::read_to_string(ws.join(".git/config")).unwrap();
    for needle in [
        "[remote",
        "credential",
        "include",
        "hooksPath",
        "hookspath",
        "filter",
        "fsmonitor",
        "sshCommand",
        "sshcommand",
        "textconv",
        "external",
        "secret",
        "example.com",
    ] {
        assert!(!config.contains(needle), "{needle:?} leaked into {config}");
    }
    assert_eq!(
        checkout.remote_urls,
        vec![
            "https://example.com/org/repo.git".to_owned(),
            "https://mirror.example.com/repo.git".to_owned()
        ]
    );
    // git agrees: nothing of that is visible from inside the workspace.
    let listed = git(&ws, &["config", "--list", "--local"]);
    assert!(
        !listed.contains("remote.") && !listed.contains("credential."),
        "{listed}"
    );
    let alternates = fs::read_to_string(ws.join(".git/objects/info/alternates")).unwrap();
    let objects = fs::canonicalize(repo.path.join(".git/objects")).unwrap();
    assert_eq!(alternates.trim(), objects.to_str().unwrap());
}

#[test]
fn source_checkout_runs_no_filter_and_converts_nothing() {
    let repo = Repo::init();
    let marker = repo.dest("smudged-marker");
    git(
        &repo.path,
        &[
            "config",
            "filter.evil.smudge",
            &format!("touch {} && cat", marker.display()),
        ],
    );
    git(&repo.path, &["config", "filter.evil.required", "true"]);
    repo.write(
        ".gitattributes",
        "*.secret filter=evil\n*.txt text eol=crlf\n*.id ident\n",
    );
    repo.write("data.secret", "raw secret\n");
    repo.write("notes.txt", "line one\nline two\n");
    repo.write("file.id", "$Id$\n");
    repo.write("sub/.gitattributes", "*.md text eol=crlf\n");
    repo.write("sub/readme.md", "md\n");
    // Commit without running the clean filter either.
    git(&repo.path, &["config", "filter.evil.clean", "cat"]);
    let commit = repo.commit("attributes");
    let _ = fs::remove_file(&marker);

    let ws = repo.dest("ws");
    provision_standalone(&repo.path, &commit, &ws).unwrap();
    assert!(!marker.exists(), "the smudge filter ran");
    assert_matches_tree(&repo, &commit, &ws);
    assert_eq!(
        fs::read(ws.join("notes.txt")).unwrap(),
        b"line one\nline two\n"
    );
    assert_eq!(fs::read(ws.join("file.id")).unwrap(), b"$Id$\n");
    assert_eq!(fs::read(ws.join("sub/readme.md")).unwrap(), b"md\n");
    assert!(!marker.exists(), "the smudge filter ran");
    // The index lists the .gitattributes files too.
    let files = git(&ws, &["ls-files"]);
    assert!(files.contains(".gitattributes\n") && files.contains("sub/.gitattributes\n"));
}

#[test]
fn source_missing_and_malformed_revisions_are_typed_errors() {
    let repo = Repo::standard();
    let source = open_source_repo(&repo.path).unwrap();
    let err = resolve_revision(&source, "no-such-branch").unwrap_err();
    assert!(
        matches!(err, SourceError::RevisionNotFound { ref revision } if revision == "no-such-branch"),
        "{err:?}"
    );
    assert!(err.to_string().contains("no-such-branch"));
    let err = resolve_revision(&source, "deadbeefdeadbeefdeadbeefdeadbeefdeadbeef").unwrap_err();
    assert!(
        matches!(err, SourceError::RevisionNotFound { .. }),
        "{err:?}"
    );
    let err = resolve_revision(&source, "main^^^^^^^^").unwrap_err();
    assert!(
        matches!(
            err,
            SourceError::RevisionNotFound { .. } | SourceError::ResolveRevision { .. }
        ),
        "{err:?}"
    );
    let err = resolve_revision(&source, "main@{").unwrap_err();
    assert!(
        matches!(err, SourceError::ResolveRevision { .. }),
        "{err:?}"
    );
    let tree = repo.rev("main^{tree}");
    let err = resolve_revision(&source, &tree).unwrap_err();
    assert!(matches!(err, SourceError::NotACommit { .. }), "{err:?}");

    let ws = repo.dest("ws");
    let err = provision_standalone(&repo.path, "no-such-branch", &ws).unwrap_err();
    assert!(matches!(err, SourceError::RevisionNotFound { .. }));
    assert!(
        !ws.exists(),
        "nothing is created for an unresolved revision"
    );
}

#[test]
fn source_ambiguous_short_id_is_reported() {
    let repo = Repo::standard();
    let blobs = repo.dest("blobs");
    fs::create_dir(&blobs).unwrap();
    let mut list = String::new();
    for i in 0..1500 {
        let p = blobs.join(i.to_string());
        fs::write(&p, format!("blob number {i}\n")).unwrap();
        list.push_str(p.to_str().unwrap());
        list.push('\n');
    }
    let list_file = repo.dest("list");
    fs::write(&list_file, list).unwrap();
    let ids = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git hash-object -w --stdin-paths < {}",
            list_file.display()
        ))
        .current_dir(&repo.path)
        .output()
        .unwrap();
    let ids = String::from_utf8(ids.stdout).unwrap();
    let mut seen = std::collections::HashMap::new();
    let prefix = ids
        .lines()
        .find_map(|id| {
            seen.insert(id[..4].to_owned(), ())
                .map(|_| id[..4].to_owned())
        })
        .expect("1,500 objects share a 4-digit prefix");
    let source = open_source_repo(&repo.path).unwrap();
    let err = resolve_revision(&source, &prefix).unwrap_err();
    assert!(
        matches!(err, SourceError::AmbiguousRevision { ref revision, .. } if *revision == prefix),
        "{err:?}"
    );
    assert!(err.to_string().contains("ambiguous"));
}

#[test]
fn source_destination_must_be_empty() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    fs::create_dir(&ws).unwrap();
    provision_standalone(&repo.path, "main", &ws).unwrap();
    let err = provision_standalone(&repo.path, "main", &ws).unwrap_err();
    assert!(
        matches!(err, SourceError::DestinationNotEmpty { .. }),
        "{err:?}"
    );
}

#[test]
fn source_repository_is_untouched_by_the_agent() {
    let repo = Repo::standard();
    git(
        &repo.path,
        &["config", "remote.origin.url", "https://example.com/r.git"],
    );
    fs::write(
        repo.path.join(".git/hooks/pre-commit"),
        "#!/bin/sh\nexit 0\n",
    )
    .unwrap();
    git(&repo.path, &["pack-refs", "--all"]);
    let before = digest_tree(&repo.path.join(".git"));
    let tree_before = digest_tree(&repo.path);

    let ws = repo.dest("ws");
    provision_standalone(&repo.path, "v1", &ws).unwrap();
    // The agent at work, with the git CLI.
    fs::write(ws.join("new.txt"), "agent\n").unwrap();
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "agent commit"]);
    git(&ws, &["branch", "agent-branch"]);
    git(&ws, &["tag", "agent-tag"]);
    git(&ws, &["config", "core.hooksPath", "/tmp/agent-hooks"]);
    git(
        &ws,
        &[
            "config",
            "remote.origin.url",
            "https://agent.example/evil.git",
        ],
    );
    fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    fs::write(ws.join(".git/hooks/post-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    git(&ws, &["gc", "-q"]);
    git(&ws, &["stash", "list"]);

    let after = digest_tree(&repo.path.join(".git"));
    assert_eq!(before, after, "the source's .git changed");
    assert_eq!(
        tree_before,
        digest_tree(&repo.path),
        "the source's files changed"
    );
    assert!(git(&repo.path, &["branch", "--list", "agent-branch"]).is_empty());
}

#[test]
fn source_checkout_of_a_thousand_files_is_timed() {
    let repo = Repo::init();
    for i in 0..1000 {
        repo.write(
            &format!("d{}/f{i}.txt", i % 37),
            &format!("file {i}\n").repeat(20),
        );
    }
    let commit = repo.commit("many");
    let ws = repo.dest("ws");
    let started = std::time::Instant::now();
    provision_standalone(&repo.path, &commit, &ws).unwrap();
    let elapsed = started.elapsed();
    eprintln!("checkout of 1,000 files: {} ms", elapsed.as_millis());
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    assert_eq!(git(&ws, &["ls-files"]).lines().count(), 1000);
}
