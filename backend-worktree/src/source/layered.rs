//! The Source boundary's side of layered materialization: the record of a layered
//! checkout, its re-verification and its release. The cache and the overlay reading
//! live in [`crate::layered`].

use std::fs;
use std::path::Path;

use workspace_core::boundary::{LayersRecord, OriginRecord, SourceRecord};
use workspace_core::contract::{Materialization, SourceSection};

use super::SourceError;
use super::config::remote_urls;
use super::head::git_dir_head;
use super::inputs::copy_inputs_between;
use super::release::{remove_empty_dir, remove_tree};
use super::resolve::open_source_repo;
use super::submodules::provision_submodules;
use crate::layered::cache::{BaseTree, TreeCache};
use crate::layered::provision::{LayeredCheckout, provision_layered_from};

/// Provisions a fresh layered checkout under `run_dir` and records it; the returned
/// [`BaseTree`] must be held for as long as the run uses its lower layer.
pub(crate) fn provision_layered_source(
    section: &SourceSection,
    cache: &TreeCache,
    run_dir: &Path,
) -> Result<(SourceRecord, BaseTree), SourceError> {
    if !section.submodules.is_empty() {
        return Err(SourceError::Unsupported {
            setting: "submodules in a layered checkout".into(),
        });
    }
    let repo_path = Path::new(&section.repo);
    // Opened once: the checkout and its record read the same repository.
    let source = open_source_repo(repo_path)?;
    let checkout = provision_layered_from(cache, &source, &section.revision, run_dir)
        .map_err(|e| SourceError::Layered(Box::new(e)))?;
    let LayeredCheckout {
        base,
        commit,
        tree,
        lower,
        upper,
        work,
        merged,
    } = checkout;
    let record = (|| {
        // Submodules are recorded (none is initialised: none was declared).
        let submodules = provision_submodules(&source, commit, tree, &merged, &[])?;
        let inputs = copy_inputs_between(&lower, &upper, &section.inputs)?;
        Ok(SourceRecord {
            repository: section.repo.clone(),
            remote_urls: remote_urls(&source),
            commit: commit.to_string(),
            tree: tree.to_string(),
            origin: OriginRecord::Fresh,
            materialization: Materialization::Layered,
            workspace: merged,
            layers: Some(LayersRecord { lower, upper, work }),
            submodules,
            inputs,
            initial_diff: String::new(),
            pinned: Vec::new(),
            objects: super::config::objects_of(&source, Materialization::Layered),
        })
    })();
    match record {
        Ok(record) => Ok((record, base)),
        Err(err) => {
            if let Err(cleanup) = release_layers(run_dir) {
                tracing::warn!(error = %cleanup, "removing the failed layered checkout failed");
            }
            Err(err)
        }
    }
}

/// Re-verifies a layered checkout: its lower layer is still the recorded tree and
/// its `.git/HEAD` (read as plain data from the upper directory, never through a
/// link) still the recorded commit unless a rebase is allowed.
pub(crate) fn verify_layered(record: &SourceRecord, allow_rebase: bool) -> Result<(), SourceError> {
    let incomplete = |reason: String| SourceError::RestoreIncomplete {
        workspace: record.workspace.clone(),
        reason,
    };
    let layers = record
        .layers
        .as_ref()
        .ok_or_else(|| incomplete("the record names no layers".into()))?;
    // The cache stores a tree at `trees/<tree-id>/files`.
    let lower_tree = layers
        .lower
        .parent()
        .and_then(Path::file_name)
        .and_then(|name| name.to_str());
    if lower_tree != Some(record.tree.as_str()) || !layers.lower.is_dir() {
        return Err(incomplete(format!(
            "the lower layer {} is not the base tree {}",
            layers.lower.display(),
            record.tree
        )));
    }
    for dir in [&layers.upper, &layers.work] {
        if !fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            return Err(incomplete(format!("{} is missing", dir.display())));
        }
    }
    // The upper directory is agent-written: `HEAD` is read without following links
    // and only ever reported once it parses.
    let head = git_dir_head(&layers.upper).map_err(incomplete)?;
    if !allow_rebase && head.commit().map(|id| id.to_string()) != Some(record.commit.clone()) {
        return Err(incomplete(format!(
            "HEAD moved: expected commit {}, found {head}",
            record.commit
        )));
    }
    Ok(())
}

/// Removes a layered run's own directories (never the shared base tree): `merged`
/// first, which must be an empty directory on the run directory's file system (the
/// overlay unmounted), else nothing is removed; then `upper` and `work`.
pub(crate) fn release_layers(run_dir: &Path) -> Result<(), SourceError> {
    remove_empty_dir(&run_dir.join("merged"))?;
    for name in ["upper", "work"] {
        remove_tree(&run_dir.join(name))?;
    }
    Ok(())
}
