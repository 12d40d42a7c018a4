//! Linked worktrees: provisioned at the commit, and the shared state is real.

use std::fs;

use super::fixture::{Repo, git, git_output};
use crate::source::{provision_linked, release_linked};

#[test]
fn source_linked_worktree_shares_refs_with_the_source() {
    let repo = Repo::standard();
    let commit = repo.rev("v1^{commit}");
    let ws = repo.dest("linked");
    let checkout = provision_linked(&repo.path, "v1", &ws).unwrap();
    assert_eq!(checkout.commit.to_string(), commit);
    assert_eq!(git(&ws, &["rev-parse", "HEAD"]).trim(), commit);
    assert!(
        !git_output(&ws, &["symbolic-ref", "-q", "HEAD"])
            .status
            .success(),
        "HEAD must be detached"
    );
    assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "alpha\n");
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    assert!(git(&repo.path, &["worktree", "list"]).contains("linked"));

    // The trade-off: a branch made in the linked worktree appears in the source.
    git(&ws, &["branch", "made-by-agent"]);
    assert!(git(&repo.path, &["branch", "--list", "made-by-agent"]).contains("made-by-agent"));
    git(&ws, &["config", "agent.wrote", "here"]);
    assert_eq!(git(&repo.path, &["config", "agent.wrote"]).trim(), "here");

    release_linked(&repo.path, &ws).unwrap();
    assert!(!ws.exists());
    // The registration is gone without a `git worktree prune`.
    assert!(!git(&repo.path, &["worktree", "list"]).contains("linked"));
    let registrations = repo.path.join(".git/worktrees");
    assert!(!registrations.exists() || fs::read_dir(registrations).unwrap().next().is_none());
}
