//! Provisioning a layered run: hold the commit's base tree from the cache and make
//! the run's own upper, work and merge directories plus its `.git`.
//!
//! Per run this writes only a few small files of `.git` (config, HEAD, alternates)
//! and the three directories holding them, never a file of the repository and not
//! the index either: its cost does not grow with the repository. The tree's index
//! and `.git`'s empty directories (refs, packs, info) live in the cached lower
//! layer, so the merged view's `.git` is the run's upper `.git` over it; git
//! replaces the index through `index.lock` and a rename, so the first write lands in
//! the upper directory and the shared copy is never touched. The isolating backend
//! mounts
//! `overlay lowerdir=<lower>,upperdir=<upper>,workdir=<work>,redirect_dir=nofollow,metacopy=off`
//! on `merged`.

use std::fs;
use std::path::{Path, PathBuf};

use gix::ObjectId;

use super::cache::{BaseTree, CacheError, TreeCache};
use crate::source::config::{EMPTY_GIT_DIRS, create_empty_git_dirs, write_git_files};
use crate::source::{SourceError, open_source_repo, resolve_revision};

/// Inside a cached base tree: the files (the overlay's lower layer), with the index
/// every run of the tree starts from at `.git/index` among them.
const FILES_DIR: &str = "files";
const LOWER_INDEX: &str = ".git/index";

/// Why a layered run could not be provisioned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LayeredError {
    /// The source repository or revision could not be read.
    #[error("layered checkout: cannot read the source")]
    Source(#[from] SourceError),
    /// The base-tree cache failed.
    #[error("layered checkout: the base-tree cache failed")]
    Cache(#[from] CacheError),
    /// A run directory could not be made.
    #[error("layered checkout: cannot {operation} {path}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// A provisioned layered run.
#[derive(Debug)]
pub struct LayeredCheckout {
    /// The held base tree; it cannot be evicted while this value lives.
    pub base: BaseTree,
    /// The resolved commit.
    pub commit: ObjectId,
    /// Its tree.
    pub tree: ObjectId,
    /// The overlay's read-only lower layer (shared by every run of the commit).
    pub lower: PathBuf,
    /// The run's upper directory: its changes, and its `.git`.
    pub upper: PathBuf,
    /// overlayfs's work directory (same file system as `upper`).
    pub work: PathBuf,
    /// The mount point of the merged view: the workspace the agent sees.
    pub merged: PathBuf,
}

/// Provisions a layered run of `rev` from `source_repo` under `run_dir`, populating
/// the commit's base tree in `cache` on first use.
///
/// # Ambient authority
/// `source_repo` and `run_dir` are host paths, used as given.
pub fn provision_layered(
    cache: &TreeCache,
    source_repo: &Path,
    rev: &str,
    run_dir: &Path,
) -> Result<LayeredCheckout, LayeredError> {
    let repo = open_source_repo(source_repo)?;
    provision_layered_from(cache, &repo, rev, run_dir)
}

/// [`provision_layered`] from a source repository already opened (with
/// [`open_source_repo`]), for a caller that reads more of it.
///
/// # Ambient authority
/// `run_dir` is a host path, used as given.
pub fn provision_layered_from(
    cache: &TreeCache,
    repo: &gix::Repository,
    rev: &str,
    run_dir: &Path,
) -> Result<LayeredCheckout, LayeredError> {
    let commit = resolve_revision(repo, rev)?;
    let tree = crate::source::checkout::tree_of(repo, commit)?;
    let base = cache.acquire(&tree.to_hex().to_string(), |dir| {
        let files = dir.join(FILES_DIR);
        let git_dir = files.join(".git");
        fs::create_dir_all(&git_dir)
            .map_err(|e| SourceError::io("create the base tree", &git_dir, e))?;
        crate::source::materialize::materialize_tree(repo, tree, &files, &files.join(LOWER_INDEX))?;
        create_empty_git_dirs(&git_dir)
    })?;
    // A tree cached before the lower layer held them gets them now (creating
    // what exists is a no-op, so runs sharing the tree may race here).
    let lower_git = base.path().join(FILES_DIR).join(".git");
    if !lower_git.join(EMPTY_GIT_DIRS[0]).is_dir() {
        create_empty_git_dirs(&lower_git)?;
    }
    let [upper, work, merged] = ["upper", "work", "merged"].map(|name| run_dir.join(name));
    for dir in [&upper, &work, &merged] {
        fs::create_dir_all(dir).map_err(|source| LayeredError::Io {
            operation: "create",
            path: dir.clone(),
            source,
        })?;
    }
    let objects = repo.common_dir().join("objects");
    write_git_files(&upper, &objects, commit)?;
    Ok(LayeredCheckout {
        lower: base.path().join(FILES_DIR),
        base,
        commit,
        tree,
        upper,
        work,
        merged,
    })
}
