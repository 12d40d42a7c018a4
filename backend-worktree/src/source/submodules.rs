//! Submodules of the commit: recorded from `.gitmodules`, initialised only when the
//! contract declares them.
//!
//! A declared submodule is initialised from the source's own copy of it,
//! `<source common dir>/modules/<name>`, as a standalone checkout of the commit the
//! superproject's tree links to (its own `.git` inside the submodule directory, objects
//! through alternates). Nothing is fetched. A declared submodule that cannot be
//! initialised is an error ([`SourceError::SubmoduleUnavailable`]), never skipped.

use std::path::Path;

use gix::ObjectId;
use gix::bstr::ByteSlice;
use workspace_core::boundary::SubmoduleRecord;

use super::SourceError;
use super::checkout::standalone_at;
use super::inputs::plain_relative;
use super::resolve::open_source_repo;

/// One submodule found in `.gitmodules`.
struct Found {
    name: String,
    path: String,
    /// The commit the superproject's tree links to, if the tree has a gitlink there.
    commit: Option<ObjectId>,
}

/// Records the submodules of `commit` (whose tree is `tree`) and initialises the
/// `declared` ones in `workspace`.
pub(crate) fn provision_submodules(
    source: &gix::Repository,
    commit: ObjectId,
    tree: ObjectId,
    workspace: &Path,
    declared: &[String],
) -> Result<Vec<SubmoduleRecord>, SourceError> {
    let found = read_gitmodules(source, commit, tree)?;
    if let Some(missing) = declared
        .iter()
        .find(|d| !found.iter().any(|f| &f.path == *d))
    {
        return Err(unavailable(
            missing,
            "not a submodule of the commit's .gitmodules",
        ));
    }
    let mut records = Vec::with_capacity(found.len());
    for submodule in found {
        let initialized = declared.contains(&submodule.path);
        if initialized {
            initialise(source, &submodule, workspace)?;
        }
        records.push(SubmoduleRecord {
            path: submodule.path,
            initialized,
        });
    }
    Ok(records)
}

fn read_gitmodules(
    source: &gix::Repository,
    commit: ObjectId,
    tree: ObjectId,
) -> Result<Vec<Found>, SourceError> {
    let err = |source| SourceError::Gitmodules {
        commit: commit.to_string(),
        source: Box::new(source),
    };
    let tree = source.find_tree(tree).map_err(err)?;
    let Some(entry) = tree.lookup_entry_by_path(".gitmodules").map_err(err)? else {
        return Ok(Vec::new());
    };
    let blob = source.find_blob(entry.object_id()).map_err(err)?;
    let file = gix::submodule::File::from_bytes(&blob.data, None, &gix::config::File::default())
        .map_err(err)?;
    let mut found = Vec::new();
    for name in file.names() {
        let path = file.path(name).map_err(err)?;
        let path = path.to_str_lossy().into_owned();
        let commit = tree
            .lookup_entry_by_path(&path)
            .map_err(err)?
            .filter(|e| e.mode().is_commit())
            .map(|e| e.object_id());
        found.push(Found {
            name: name.to_str_lossy().into_owned(),
            path,
            commit,
        });
    }
    Ok(found)
}

fn initialise(
    source: &gix::Repository,
    submodule: &Found,
    workspace: &Path,
) -> Result<(), SourceError> {
    let Some(commit) = submodule.commit else {
        return Err(unavailable(
            &submodule.path,
            "the commit's tree has no gitlink at that path",
        ));
    };
    let Some(name) = plain_relative(&submodule.name) else {
        return Err(unavailable(
            &submodule.path,
            "its name or path is not a plain relative path",
        ));
    };
    if plain_relative(&submodule.path).is_none() {
        return Err(unavailable(
            &submodule.path,
            "its name or path is not a plain relative path",
        ));
    }
    let modules = source.common_dir().join("modules").join(&name);
    if !modules.is_dir() {
        return Err(unavailable(
            &submodule.path,
            &format!(
                "the source has no copy of it at {} (run `git submodule update --init` there)",
                modules.display()
            ),
        ));
    }
    let repo = open_source_repo(&modules)?;
    if repo.find_commit(commit).is_err() {
        return Err(unavailable(
            &submodule.path,
            &format!("commit {commit} is not in {}", modules.display()),
        ));
    }
    standalone_at(&repo, commit, &workspace.join(&submodule.path))?;
    Ok(())
}

fn unavailable(path: &str, reason: &str) -> SourceError {
    SourceError::SubmoduleUnavailable {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}
