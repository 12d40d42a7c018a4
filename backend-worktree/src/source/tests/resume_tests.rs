//! Resume: a moved HEAD is refused; an unmoved one reports what was inherited.

use std::fs;

use workspace_core::boundary::{OriginRecord, SourceRecord};
use workspace_core::contract::Materialization;

use super::fixture::{Repo, git};
use crate::source::{Checkout, SourceError, provision_standalone, verify_checkout};

fn record_of(repo: &Repo, checkout: &Checkout) -> SourceRecord {
    SourceRecord {
        repository: repo.path.to_str().unwrap().to_owned(),
        remote_urls: checkout.remote_urls.clone(),
        commit: checkout.commit.to_string(),
        tree: checkout.tree.to_string(),
        origin: OriginRecord::Fresh,
        materialization: Materialization::Standalone,
        workspace: checkout.workspace.clone(),
        layers: None,
        submodules: Vec::new(),
        inputs: Vec::new(),
        initial_diff: String::new(),
        pinned: Vec::new(),
        objects: None,
    }
}

#[test]
fn source_resume_refuses_a_moved_head() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    let checkout = provision_standalone(&repo.path, "main", &ws).unwrap();
    let record = record_of(&repo, &checkout);
    let previous = repo.rev("main~1");
    git(&ws, &["reset", "-q", "--hard", "HEAD~1"]);

    let err = verify_checkout(&record, false).unwrap_err();
    let SourceError::RestoreIncomplete { workspace, reason } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(workspace, &ws);
    assert!(reason.contains(&checkout.commit.to_string()), "{reason}");
    assert!(reason.contains(&previous), "{reason}");

    // Allowed to rebase: accepted, and reported as moved.
    let report = verify_checkout(&record, true).unwrap();
    assert!(report.moved);
    assert_eq!(report.found.unwrap().to_string(), previous);
    assert_eq!(report.inherited.changed, vec!["a.txt".to_owned()]);

    // A new commit, then detached at it: refused as well.
    git(
        &ws,
        &["checkout", "-q", "--detach", &checkout.commit.to_string()],
    );
    verify_checkout(&record, false).unwrap();
    fs::write(ws.join("x.txt"), "x\n").unwrap();
    git(&ws, &["add", "x.txt"]);
    git(&ws, &["commit", "-q", "-m", "agent"]);
    let err = verify_checkout(&record, false).unwrap_err();
    assert!(
        matches!(err, SourceError::RestoreIncomplete { .. }),
        "{err:?}"
    );
    // On a branch: HEAD names a ref, which is not the recorded detached commit.
    git(&ws, &["checkout", "-q", "-b", "agent"]);
    let err = verify_checkout(&record, false).unwrap_err();
    assert!(err.to_string().contains("refs/heads/agent"), "{err}");
}

#[test]
fn source_resume_reports_inherited_files() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    let checkout = provision_standalone(&repo.path, "main", &ws).unwrap();
    let record = record_of(&repo, &checkout);

    let clean = verify_checkout(&record, false).unwrap();
    assert!(!clean.moved);
    assert_eq!(clean.inherited, Default::default());

    fs::write(ws.join("a.txt"), "edited\n").unwrap();
    fs::remove_file(ws.join("dir/b.txt")).unwrap();
    fs::write(ws.join("dir/new.txt"), "new\n").unwrap();
    super::fixture::set_mode(&ws.join("dir/deeper/c.txt"), 0o755);
    fs::remove_file(ws.join("link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.join("link")).unwrap();
    std::os::unix::fs::symlink("/", ws.join("escape")).unwrap();

    let report = verify_checkout(&record, false).unwrap();
    assert_eq!(
        report.inherited.changed,
        vec![
            "a.txt".to_owned(),
            "dir/deeper/c.txt".to_owned(),
            "link".to_owned()
        ]
    );
    assert_eq!(report.inherited.deleted, vec!["dir/b.txt".to_owned()]);
    assert_eq!(
        report.inherited.untracked,
        vec!["dir/new.txt".to_owned(), "escape".to_owned()]
    );

    // A missing workspace is not silently accepted.
    fs::remove_dir_all(&ws).unwrap();
    let err = verify_checkout(&record, false).unwrap_err();
    assert!(
        matches!(err, SourceError::RestoreIncomplete { .. }),
        "{err:?}"
    );
}

/// A secret on the host, outside every workspace; its content must never surface.
const SECRET: &str = "ref: refs/heads/TOP-SECRET-host-content-4d1f\n";

fn assert_refused_without_secret(err: &SourceError) {
    assert!(
        matches!(err, SourceError::RestoreIncomplete { .. }),
        "{err:?}"
    );
    let shown = format!("{err} / {err:?}");
    assert!(!shown.contains("TOP-SECRET"), "{shown}");
}

#[test]
fn source_resume_refuses_a_planted_head_link_without_echoing_it() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    let checkout = provision_standalone(&repo.path, "main", &ws).unwrap();
    let record = record_of(&repo, &checkout);
    let sentinel = repo.dest("host-secret");
    fs::write(&sentinel, SECRET).unwrap();

    fs::remove_file(ws.join(".git/HEAD")).unwrap();
    std::os::unix::fs::symlink(&sentinel, ws.join(".git/HEAD")).unwrap();
    for allow_rebase in [false, true] {
        let err = verify_checkout(&record, allow_rebase).unwrap_err();
        assert_refused_without_secret(&err);
    }

    // Not even the recorded commit is accepted through a link.
    fs::write(&sentinel, format!("{}\n", checkout.commit)).unwrap();
    let err = verify_checkout(&record, false).unwrap_err();
    assert!(
        matches!(err, SourceError::RestoreIncomplete { .. }),
        "{err:?}"
    );
    fs::write(&sentinel, SECRET).unwrap();

    // `.git` itself a link to a directory holding the secret as HEAD: refused too.
    let outside = repo.dest("outside-git");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("HEAD"), SECRET).unwrap();
    fs::rename(ws.join(".git"), repo.dest("moved-git")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.join(".git")).unwrap();
    let err = verify_checkout(&record, true).unwrap_err();
    assert_refused_without_secret(&err);

    assert_eq!(fs::read_to_string(&sentinel).unwrap(), SECRET);
    assert_eq!(fs::read_to_string(outside.join("HEAD")).unwrap(), SECRET);
}

#[test]
fn source_resume_refuses_a_gitdir_file_in_a_standalone_checkout() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    let checkout = provision_standalone(&repo.path, "main", &ws).unwrap();
    let record = record_of(&repo, &checkout);
    let outside = repo.dest("elsewhere");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("HEAD"), SECRET).unwrap();

    fs::remove_dir_all(ws.join(".git")).unwrap();
    fs::write(ws.join(".git"), format!("gitdir: {}\n", outside.display())).unwrap();
    let err = verify_checkout(&record, true).unwrap_err();
    assert_refused_without_secret(&err);
    assert!(err.to_string().contains("standalone"), "{err}");
    assert_eq!(fs::read_to_string(outside.join("HEAD")).unwrap(), SECRET);
}

#[test]
fn source_resume_of_a_linked_worktree_only_follows_its_registration() {
    let repo = Repo::standard();
    let ws = repo.dest("linked");
    let checkout = crate::source::provision_linked(&repo.path, "main", &ws).unwrap();
    let mut record = record_of(&repo, &checkout);
    record.materialization = Materialization::Linked;
    let report = verify_checkout(&record, false).unwrap();
    assert!(!report.moved);
    assert_eq!(report.inherited, Default::default());

    // A `.git` file pointing outside the source's `.git/worktrees`: refused, unread.
    let genuine = fs::read_to_string(ws.join(".git")).unwrap();
    let outside = repo.dest("elsewhere");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("HEAD"), SECRET).unwrap();
    for target in [
        outside.display().to_string(),
        // `..` out of the registrations, and the source's own `.git`.
        format!(
            "{}/../../../../elsewhere",
            genuine.trim_end().trim_start_matches("gitdir: ")
        ),
        repo.path.join(".git").display().to_string(),
    ] {
        fs::write(ws.join(".git"), format!("gitdir: {target}\n")).unwrap();
        let err = verify_checkout(&record, true).unwrap_err();
        assert_refused_without_secret(&err);
    }

    // The registration's HEAD planted as a link: not followed.
    fs::write(ws.join(".git"), &genuine).unwrap();
    let registration = std::path::PathBuf::from(genuine.trim_end().trim_start_matches("gitdir: "));
    let registration = if registration.is_absolute() {
        registration
    } else {
        ws.join(registration)
    };
    let head = registration.join("HEAD");
    let saved = fs::read(&head).unwrap();
    fs::remove_file(&head).unwrap();
    std::os::unix::fs::symlink(outside.join("HEAD"), &head).unwrap();
    let err = verify_checkout(&record, true).unwrap_err();
    assert_refused_without_secret(&err);
    fs::remove_file(&head).unwrap();
    fs::write(&head, saved).unwrap();
    verify_checkout(&record, false).unwrap();
    assert_eq!(fs::read_to_string(outside.join("HEAD")).unwrap(), SECRET);
    crate::source::release_linked(&repo.path, &ws).unwrap();
}

#[test]
fn source_resume_never_echoes_a_head_that_is_not_a_commit_or_ref() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    let checkout = provision_standalone(&repo.path, "main", &ws).unwrap();
    let record = record_of(&repo, &checkout);
    for content in [
        "TOP-SECRET not a head\n".to_owned(),
        "ref: TOP-SECRET\n".to_owned(),
        "ref: refs/heads/TOP SECRET\n".to_owned(),
        format!("{}TOP-SECRET", "a".repeat(300)),
    ] {
        fs::write(ws.join(".git/HEAD"), &content).unwrap();
        let err = verify_checkout(&record, true).unwrap_err();
        assert_refused_without_secret(&err);
    }
}

#[test]
fn source_resume_reports_what_the_diff_reports() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    let checkout = provision_standalone(&repo.path, "main", &ws).unwrap();
    let record = record_of(&repo, &checkout);

    // Group/other execute bits only: git (and the diff) see no mode change.
    super::fixture::set_mode(&ws.join("a.txt"), 0o654);
    // A nested repository's `.git` is never content.
    fs::create_dir_all(ws.join("dir/nested/.git")).unwrap();
    fs::write(ws.join("dir/nested/.git/config"), "[core]\n").unwrap();
    // A rename: the old path deleted, the new one changed.
    fs::rename(ws.join("dir/b.txt"), ws.join("dir/b2.txt")).unwrap();

    let report = verify_checkout(&record, false).unwrap();
    let changes = crate::changes::workspace_changes(
        &repo.path,
        &checkout.commit.to_string(),
        &ws,
        &crate::changes::ChangeOptions::default(),
    )
    .unwrap();
    assert_eq!(
        report.inherited,
        crate::source::Inherited::from_changes(&changes)
    );
    assert_eq!(report.inherited.changed, vec!["dir/b2.txt".to_owned()]);
    assert_eq!(report.inherited.deleted, vec!["dir/b.txt".to_owned()]);
    assert_eq!(report.inherited.untracked, Vec::<String>::new());
}
