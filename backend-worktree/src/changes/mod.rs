//! What changed in a workspace against its base commit.
//!
//! A workspace's `.git` is agent-writable, so this module never opens the
//! workspace's repository and runs no filter, hook, fsmonitor or diff driver. The
//! base side is the commit's tree read from the **source** repository
//! ([`crate::repo::open_source`], isolated) by commit id; the workspace side is a
//! walk of its files as plain data ([`walk_workspace`]) that never follows a
//! symlink: a link is recorded as a link (mode `120000`, its target text as the
//! blob), so a planted link to a host secret never yields the secret's content.
//!
//! The walk and the comparison are separate steps: [`compare`] takes any two flat
//! listings, so a different source of the workspace side (for example the upper
//! directory of an overlayfs mount merged over its base tree) can be fed in later
//! without touching the comparison.
//!
//! # Limitations
//! * Paths must be UTF-8; spaces and any non-ASCII UTF-8 are fine. A workspace
//!   name that is not UTF-8 is recorded as an [`Uncarried`] change by the
//!   recording functions ([`changes_against_recording`]) and is
//!   [`ChangesError::NonUtf8Path`] for the others; so is one in the base tree.
//! * Fifos, sockets and devices cannot be recorded by git: like git, the walk leaves
//!   them out (a socket a test database left in the workspace does not stop an
//!   export), so one standing where a tracked file was reads as its deletion.
//! * Gitlinks (submodules) of the base tree are left out and left unchanged, and so
//!   is whatever lies at their path in the workspace.
//! * Empty directories are not changes (git records no directories).
//! * Object ids are SHA-1 (the hash the crate's gix build supports).
//! * Reading changed content is capped ([`ContentLimits`]): 256 MiB per file and
//!   1 GiB for one export or promotion.
//! * A path git would refuse to write ([`check_path`]: `.git` in any spelling, a
//!   symlinked `.gitmodules`, ...) is refused when it would enter a patch or a
//!   review tree ([`ChangesError::RefusedPath`]); an export sets such changes
//!   aside as [`Uncarried`] first ([`split_refused`]), so it still lists them.
//! * A `.git` below the root (a nested repository) is recorded as [`Uncarried`],
//!   never walked into.

pub(crate) mod base;
mod diff;
mod error;
mod filter;
mod limits;
pub(crate) mod uncarried;
mod validate;
mod walk;

#[cfg(test)]
pub(crate) mod tests;

use std::path::Path;

use serde::{Deserialize, Serialize};
use workspace_core::boundary::{ChangeKind, NotInPatch};

pub use base::{BaseTree, base_tree, parse_commit_id};
pub use diff::compare;
pub use error::ChangesError;
pub use filter::PathFilter;
pub use limits::{ContentBudget, ContentLimits, MAX_CONTENT_BYTES, MAX_TOTAL_CONTENT_BYTES};
pub use uncarried::{Uncarried, shown_name};
pub use validate::{PathRefusal, check_change, check_changes, check_path, split_refused};
pub use walk::{
    Walked, current_entry, read_current, read_current_within, read_entry, read_entry_within,
    walk_workspace, walk_workspace_recording,
};

/// Git mode of a regular file.
pub const MODE_FILE: u32 = 0o100644;
/// Git mode of an executable file.
pub const MODE_EXECUTABLE: u32 = 0o100755;
/// Git mode of a symbolic link (the blob is the link's target text).
pub const MODE_SYMLINK: u32 = 0o120000;
/// Git mode of a gitlink (a submodule's commit).
pub const MODE_GITLINK: u32 = 0o160000;

/// What takes part in a comparison.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ChangeOptions {
    /// Globs of paths left out on both sides (the contract's `source.generated`, e.g.
    /// `target`): changes there are expected and never reported. A pattern that
    /// matches a directory leaves out everything under it.
    pub skip: Vec<String>,
}

impl ChangeOptions {
    /// Leaves out the paths matching `skip`.
    pub fn skipping(skip: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self {
            skip: skip.into_iter().map(Into::into).collect(),
        }
    }
}

/// One side of a change: a git mode and a blob id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// `100644`, `100755` or `120000` (octal).
    pub mode: u32,
    /// The blob id of the content (a symlink's target text for `120000`).
    pub id: gix::ObjectId,
}

impl Entry {
    /// An entry of `mode` with blob `id`.
    pub fn new(mode: u32, id: gix::ObjectId) -> Self {
        Self { mode, id }
    }

    /// Whether this is a symlink.
    pub fn is_symlink(&self) -> bool {
        self.mode == MODE_SYMLINK
    }
}

/// One changed path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The path relative to the workspace root (the new path of a rename).
    pub path: String,
    /// What happened to it.
    pub kind: ChangeKind,
    /// The base entry (at the old path for a rename); `None` when added.
    pub old: Option<Entry>,
    /// The workspace entry; `None` when deleted.
    pub new: Option<Entry>,
}

impl Change {
    /// The path in the base tree: the rename source, or [`Change::path`].
    pub fn old_path(&self) -> &str {
        match &self.kind {
            ChangeKind::Renamed { from } => from,
            _ => &self.path,
        }
    }

    /// Whether a file became a symlink or a symlink a file.
    pub fn is_type_change(&self) -> bool {
        matches!((self.old, self.new), (Some(o), Some(n)) if o.is_symlink() != n.is_symlink())
    }
}

/// The changes of `workspace` against `base_commit`, whose tree is read from
/// `source_repo`, sorted by path.
///
/// `.git` directories, paths matching `options.skip` and the base tree's gitlinks are
/// left out on both sides.
///
/// # Ambient authority
/// `source_repo` and `workspace` are host paths used as given. The source repository
/// is opened isolated; the workspace is only walked, never opened as a repository.
pub fn workspace_changes(
    source_repo: &Path,
    base_commit: &str,
    workspace: &Path,
    options: &ChangeOptions,
) -> Result<Vec<Change>, ChangesError> {
    let repo =
        crate::repo::open_source(source_repo).map_err(|source| ChangesError::OpenSource {
            path: source_repo.to_path_buf(),
            source,
        })?;
    let base = base_tree(&repo, base_commit)?;
    Ok(changes_against(&base, workspace, options)?.0)
}

/// The changes of `workspace` against an already-read base tree, and the walked
/// workspace listing they were computed from (to read contents back with
/// [`read_entry`]). A workspace name that is not UTF-8 is
/// [`ChangesError::NonUtf8Path`], and a nested repository is left out; see
/// [`changes_against_recording`] for an export, which must record both.
pub fn changes_against(
    base: &BaseTree,
    workspace: &Path,
    options: &ChangeOptions,
) -> Result<(Vec<Change>, std::collections::BTreeMap<String, Entry>), ChangesError> {
    let compared = changes_against_recording(base, workspace, options)?;
    match compared
        .uncarried
        .iter()
        .find(|u| u.reason == NotInPatch::NotUtf8)
    {
        Some(found) => Err(ChangesError::NonUtf8Path {
            path: workspace.join(&found.path),
        }),
        None => Ok((compared.changes, compared.current)),
    }
}

/// What [`changes_against_recording`] found.
#[derive(Debug)]
pub struct Compared {
    /// The changes a patch can name, sorted by path.
    pub changes: Vec<Change>,
    /// The walked workspace listing they were computed from.
    pub current: std::collections::BTreeMap<String, Entry>,
    /// What a patch cannot name, sorted by path.
    pub uncarried: Vec<Uncarried>,
}

/// [`changes_against`], with what a patch cannot name recorded as [`Uncarried`]
/// changes (sorted by path) instead of refused or left out.
pub fn changes_against_recording(
    base: &BaseTree,
    workspace: &Path,
    options: &ChangeOptions,
) -> Result<Compared, ChangesError> {
    let mut filter = PathFilter::new(&options.skip)?;
    for gitlink in &base.gitlinks {
        filter.prune(gitlink.clone());
    }
    let mut base_entries = base.entries.clone();
    base_entries.retain(|path, _| !filter.skips(path));
    let walked = walk_workspace_recording(workspace, &filter)?;
    let _span = tracing::debug_span!("compare", workspace = %workspace.display()).entered();
    let changes = compare(&base_entries, &walked.entries);
    tracing::debug!(
        changed = changes.len(),
        uncarried = walked.uncarried.len(),
        "workspace compared with base tree"
    );
    Ok(Compared {
        changes,
        current: walked.entries,
        uncarried: walked.uncarried,
    })
}
