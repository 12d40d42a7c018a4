//! Linked checkouts: a git worktree registered in the source repository.
//!
//! # The shared-state trade-off
//!
//! A linked worktree is cheaper than a standalone checkout (no `.git` of its own to
//! write) but it is **not isolated from the source repository**: its refs, config,
//! stash, hooks and object store *are the source's*. Inside it, the agent's
//! `git commit` moves no branch of the source, but `git branch`, `git tag`,
//! `git stash`, `git config` and a new hook write straight into the source repository
//! (and into every other worktree of it), and a hook or filter the agent configures
//! there runs in the source's other checkouts too. Registering the worktree itself
//! writes `<source>/.git/worktrees/<id>`. That is why standalone is the default and
//! linked must be asked for by name (`materialization = "linked"`).
//!
//! The files are checked out the same way as a standalone checkout (raw blobs, no
//! filter driver from the source's configuration runs); gix's `add_worktree`
//! registration is used without its checkout for that reason.

use std::fs;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use super::SourceError;
use super::checkout::{Checkout, tree_of};
use super::config::remote_urls;
use super::materialize::materialize_tree;
use super::resolve::{open_source_repo, resolve_revision};

/// Adds a linked worktree of the repository at `source_repo_path` at `dest` (which
/// must not exist or be an empty directory), detached at `rev`.
///
/// **This writes into the source repository** (see the module docs): the
/// registration now, and whatever the agent does to refs, config or hooks later.
///
/// # Ambient authority
/// `source_repo_path` and `dest` are host paths, used as given.
pub fn provision_linked(
    source_repo_path: &Path,
    rev: &str,
    dest: &Path,
) -> Result<Checkout, SourceError> {
    let source = open_with_reflog_identity(source_repo_path)?;
    let commit = resolve_revision(&source, rev)?;
    let tree = tree_of(&source, commit)?;
    if let Some(parent) = dest.parent() {
        fs::create_dir_all(parent)
            .map_err(|e| SourceError::io("create the worktree's parent", parent, e))?;
    }
    let prepared = source
        .prepare_add_worktree(
            dest,
            gix::worktree::add::Head::Detached(commit),
            &AtomicBool::new(false),
        )
        .map_err(|e| SourceError::git("register the linked worktree", dest, e))?;
    let index_path = prepared.repo().index_path();
    if let Err(err) = materialize_tree(&source, tree, dest, &index_path) {
        if let Err(cleanup) = prepared.rollback() {
            tracing::warn!(error = %cleanup, workspace = %dest.display(), "rolling back the linked worktree failed");
        }
        return Err(err);
    }
    prepared
        .persist()
        .map_err(|e| SourceError::git("finish the linked worktree", dest, e))?;
    Ok(Checkout {
        workspace: dest.to_owned(),
        commit,
        tree,
        remote_urls: remote_urls(&source),
    })
}

/// Opens the source in isolation (as [`open_source_repo`]) with a committer identity
/// for the new worktree's `HEAD` reflog: the isolated source has none. The identity
/// is an API override kept in memory, never written to the source's configuration.
fn open_with_reflog_identity(path: &Path) -> Result<gix::Repository, SourceError> {
    let options = gix::open::Options::isolated().config_overrides([
        "committer.name=agent-workspace",
        "committer.email=agent-workspace@localhost",
    ]);
    gix::open_opts(path, options).map_err(|source| SourceError::OpenSource {
        path: path.to_owned(),
        source: Box::new(source),
    })
}

/// Removes the linked worktree at `workspace` (without following symlinks) and its
/// registration in the source repository (`.git/worktrees/<id>`).
///
/// No status is run in the worktree first: its configuration is agent-writable.
///
/// # Ambient authority
/// `source_repo_path` and `workspace` are host paths, used as given.
pub fn release_linked(source_repo_path: &Path, workspace: &Path) -> Result<(), SourceError> {
    let source = open_source_repo(source_repo_path)?;
    let canonical = fs::canonicalize(workspace).ok();
    let mut registration = None;
    for proxy in source
        .worktrees()
        .map_err(|e| SourceError::git("list linked worktrees", source_repo_path, e))?
    {
        let Ok(base) = proxy.base() else { continue };
        if base == workspace || canonical.as_deref() == Some(base.as_path()) {
            registration = Some(proxy.git_dir().to_owned());
        }
    }
    super::release::remove_tree(workspace)?;
    if let Some(git_dir) = registration {
        super::release::remove_tree(&git_dir)?;
    }
    Ok(())
}
