//! Standalone checkouts: a repository of its own that borrows the source's objects.

use std::path::{Path, PathBuf};
use std::time::Instant;

use gix::ObjectId;

use super::SourceError;
use super::config::{prepare_destination, remote_urls, write_git_dir};
use super::materialize::materialize_tree;
use super::resolve::{open_source_repo, resolve_revision};

/// A checkout made by [`provision_standalone`] or [`super::provision_linked`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// The workspace directory (the checkout's root).
    pub workspace: PathBuf,
    /// The resolved commit, `HEAD` of the workspace (detached).
    pub commit: ObjectId,
    /// The commit's tree.
    pub tree: ObjectId,
    /// The source's remote URLs, credentials stripped (recorded, never configured).
    pub remote_urls: Vec<String>,
}

/// Makes a standalone checkout of `rev` from the repository at `source_repo_path` in
/// `dest` (which must not exist or be an empty directory).
///
/// `dest/.git` is a fresh repository (HEAD detached at the commit, its own index, refs
/// and a config written from scratch) whose objects come from the source through
/// `objects/info/alternates`, as with `git clone --shared`. Files are checked out
/// raw with gix's parallel checkout; no filter or driver program runs. The source
/// repository is opened in isolation and only read.
///
/// Note the `--shared` caveat: the workspace depends on the source's objects; a
/// `git gc --prune` in the source that drops the commit would break it.
///
/// # Ambient authority
/// `source_repo_path` and `dest` are host paths, used as given.
pub fn provision_standalone(
    source_repo_path: &Path,
    rev: &str,
    dest: &Path,
) -> Result<Checkout, SourceError> {
    let source = open_source_repo(source_repo_path)?;
    let commit = resolve_revision(&source, rev)?;
    standalone_at(&source, commit, dest)
}

/// [`provision_standalone`] for an already opened source and resolved commit.
pub(crate) fn standalone_at(
    source: &gix::Repository,
    commit: ObjectId,
    dest: &Path,
) -> Result<Checkout, SourceError> {
    let started = Instant::now();
    let tree = tree_of(source, commit)?;
    prepare_destination(dest)?;
    let git_dir = write_git_dir(
        dest,
        &source
            .current_dir()
            .join(source.common_dir())
            .join("objects"),
        commit,
    )?;
    let written = materialize_tree(source, tree, dest, &git_dir.join("index"))?;
    tracing::debug!(
        workspace = %dest.display(),
        %commit,
        entries = written.entries,
        files = written.files,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "standalone checkout"
    );
    Ok(Checkout {
        workspace: dest.to_owned(),
        commit,
        tree,
        remote_urls: remote_urls(source),
    })
}

/// The tree id of `commit` in `source`.
pub(crate) fn tree_of(source: &gix::Repository, commit: ObjectId) -> Result<ObjectId, SourceError> {
    let path = || source.git_dir().to_owned();
    source
        .find_commit(commit)
        .and_then(|c| c.tree_id())
        .map(|id| id.detach())
        .map_err(|e| SourceError::git("read the commit's tree", path(), e))
}
