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
