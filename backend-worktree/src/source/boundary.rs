//! [`WorktreeSource`]: the Source boundary made of the functions of this module.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, BoundaryKind, OriginRecord, ResolvedSource, RunContext, SourceBoundary,
    SourceCapabilities, SourceRecord,
};
use workspace_core::contract::{CheckoutOrigin, Materialization, Problems, SourceSection};
use workspace_core::lifecycle::CleanupPermit;

use super::SourceError;
use super::checkout::{Checkout, standalone_at, tree_of};
use super::config::objects_of;
use super::config::{prepare_destination, remote_urls};
use super::inputs::copy_inputs;
use super::linked::{provision_linked, release_linked};
use super::pinned::pinned_files;
use super::release::remove_tree;
use super::resolve::{
    open_source_repo, resolve_revision, resolve_section, section_has_uncommitted_changes,
};
use super::resume::verify_checkout;
use super::submodules::provision_submodules;
use super::withheld::withhold_excluded;
use crate::layered::cache::{BaseTree, TreeCache};

/// The directory under a run's `run_dir` that holds its checkout.
pub const CHECKOUT_DIR: &str = "checkout";

/// The Source boundary with gix checkouts of a local repository.
///
/// * origins: `fresh` (a new checkout), `resumed` (the checkout already under the
///   run directory, re-verified against the revision) and, with a snapshot store
///   ([`WorktreeSource::with_snapshot_store`]), `snapshot` (restored and verified by
///   [`crate::snapshot::restore_opts`]);
/// * materializations: `standalone` (the default for `auto`) and `linked` (shares
///   refs and config with the source: see [`super::provision_linked`]);
/// * declared submodules initialised from the source's `.git/modules/<name>`;
/// * declared untracked inputs copied with their sha256.
///
/// All gix and file-system work runs in `tokio::task::spawn_blocking`.
#[derive(Debug, Clone, Default)]
pub struct WorktreeSource {
    /// The base-tree cache when layered materialization is enabled.
    layered: Option<TreeCache>,
    /// The base trees held by live layered runs, by run id.
    held: Arc<Mutex<HashMap<String, BaseTree>>>,
    /// The snapshot store `origin = "snapshot"` restores from.
    snapshots: Option<PathBuf>,
}

impl WorktreeSource {
    /// The worktree source: standalone and linked checkouts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also layered checkouts, with base trees cached in `cache`; `auto` then means
    /// layered. Only for stacks whose process boundary mounts the layers (the
    /// record's `layers`) on the workspace path with overlayfs.
    pub fn with_layered_cache(cache: TreeCache) -> Self {
        Self {
            layered: Some(cache),
            held: Arc::default(),
            snapshots: None,
        }
    }

    /// Also `origin = "snapshot"`: snapshots are restored from `store` (a directory
    /// of `<sha256>.tar` archives written by [`crate::snapshot::capture`]).
    ///
    /// # Ambient authority
    /// `store` is a host path, only read.
    pub fn with_snapshot_store(mut self, store: impl Into<PathBuf>) -> Self {
        self.snapshots = Some(store.into());
        self
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, BaseTree>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl SourceBoundary for WorktreeSource {
    fn capabilities(&self) -> SourceCapabilities {
        SourceCapabilities {
            origins: if self.snapshots.is_some() {
                vec![
                    CheckoutOrigin::Fresh,
                    CheckoutOrigin::Resumed,
                    CheckoutOrigin::Snapshot,
                ]
            } else {
                vec![CheckoutOrigin::Fresh, CheckoutOrigin::Resumed]
            },
            materializations: if self.layered.is_some() {
                vec![
                    Materialization::Standalone,
                    Materialization::Linked,
                    Materialization::Layered,
                ]
            } else {
                vec![Materialization::Standalone, Materialization::Linked]
            },
            submodules: true,
            untracked_inputs: true,
            pinned_files: true,
        }
    }

    fn name(&self) -> &'static str {
        "backend-worktree source"
    }

    async fn resolve(&self, section: &SourceSection) -> Result<Option<ResolvedSource>, Problems> {
        let section = section.clone();
        match tokio::task::spawn_blocking(move || resolve_section(&section)).await {
            Ok(resolved) => resolved.map(Some),
            Err(join) => {
                let mut problems = Problems::new();
                problems.push("source", format!("resolving it did not finish: {join}"));
                Err(problems)
            }
        }
    }

    async fn uncommitted_changes(&self, section: &SourceSection) -> Option<bool> {
        let section = section.clone();
        tokio::task::spawn_blocking(move || section_has_uncommitted_changes(&section))
            .await
            .ok()
            .flatten()
    }

    async fn provision(&self, run: &RunContext) -> Result<SourceRecord, BoundaryError> {
        let section = run.contract.source.clone();
        let dest = run.layer_dir().join(CHECKOUT_DIR);
        let from = run.run_id.to_string();
        let span = tracing::info_span!("source.provision", run_id = %run.run_id);
        let path = dest.clone();
        let layered = match (&self.layered, section.materialization, section.origin) {
            (
                Some(cache),
                Materialization::Auto | Materialization::Layered,
                CheckoutOrigin::Fresh,
            ) => Some(cache.clone()),
            _ => None,
        };
        let environment = run.contract.environment.clone();
        let excluded = run.contract.filesystem.excluded.clone();
        if let Some(cache) = layered {
            let layer_dir = run.layer_dir();
            let (record, base) = blocking("provision layered checkout", path, move || {
                let _entered = span.enter();
                let (mut record, base) =
                    super::layered::provision_layered_source(&section, &cache, &layer_dir)?;
                if let Some(layers) = &record.layers {
                    // The run's own index over the shared one, when it names
                    // an excluded path.
                    withhold_excluded(
                        &layers.lower.join(".git/index"),
                        &layers.upper.join(".git/index"),
                        &excluded,
                    )?;
                }
                record.pinned = pinned_files(&record, &environment)?;
                Ok((record, base))
            })
            .await?;
            self.held().insert(from, base);
            return Ok(record);
        }
        let snapshots = self.snapshots.clone();
        blocking("provision checkout", path, move || {
            let _entered = span.enter();
            let fresh = section.origin == CheckoutOrigin::Fresh;
            let mut record = provision_source_in(&section, &dest, from, snapshots.as_deref())?;
            // A fresh copy's own index (just written here, not the agent's); a
            // linked checkout's git directory is the repository's.
            let git_dir = record.workspace.join(".git");
            if fresh && std::fs::symlink_metadata(&git_dir).is_ok_and(|m| m.is_dir()) {
                let index = git_dir.join("index");
                withhold_excluded(&index, &index, &excluded)?;
            }
            record.pinned = pinned_files(&record, &environment)?;
            Ok(record)
        })
        .await
    }

    async fn verify(&self, run: &RunContext, record: &SourceRecord) -> Result<(), BoundaryError> {
        let record = record.clone();
        let allow_rebase = run.contract.source.allow_rebase;
        let run_id = run.run_id.to_string();
        let path = record.workspace.clone();
        if record.layers.is_some() {
            return blocking("verify layered checkout", path, move || {
                super::layered::verify_layered(&record, allow_rebase)
            })
            .await;
        }
        blocking("verify checkout", path, move || {
            let report = verify_checkout(&record, allow_rebase)?;
            tracing::info!(
                run_id,
                moved = report.moved,
                changed = report.inherited.changed.len(),
                deleted = report.inherited.deleted.len(),
                untracked = report.inherited.untracked.len(),
                "source verified"
            );
            Ok(())
        })
        .await
    }

    async fn release(
        &self,
        run: &RunContext,
        record: &SourceRecord,
        permit: &CleanupPermit,
    ) -> Result<(), BoundaryError> {
        permit.check(&run.run_id).map_err(|e| {
            BoundaryError::new(BoundaryKind::Source, "release checkout", e)
                .with_path(record.workspace.clone())
        })?;
        let record = record.clone();
        let run_dir = run.run_dir.clone();
        let layer_dir = run.layer_dir();
        let path = record.workspace.clone();
        let layered = record.layers.is_some();
        let released = blocking("release checkout", path, move || {
            if !is_under(&record.workspace, &run_dir) {
                return Err(SourceError::PathEscape {
                    path: record.workspace.clone(),
                    reason: "the recorded checkout is not under the run directory",
                });
            }
            match record.materialization {
                Materialization::Linked => {
                    release_linked(Path::new(&record.repository), &record.workspace)
                }
                _ if layered => super::layered::release_layers(&layer_dir),
                _ => remove_tree(&record.workspace),
            }
        })
        .await;
        // The base tree stays cached; the run just stops holding it.
        self.held().remove(run.run_id.as_str());
        released
    }

    async fn release_unrecorded(
        &self,
        run: &RunContext,
        permit: &CleanupPermit,
    ) -> Result<(), BoundaryError> {
        let run_dir = run.run_dir.clone();
        let layer_dir = run.layer_dir();
        let checkout = layer_dir.join(CHECKOUT_DIR);
        permit.check(&run.run_id).map_err(|e| {
            BoundaryError::new(BoundaryKind::Source, "release unrecorded checkout", e)
                .with_path(checkout.clone())
        })?;
        let linked = run.contract.source.materialization == Materialization::Linked;
        let repository = PathBuf::from(&run.contract.source.repo);
        let released = blocking("release unrecorded checkout", checkout.clone(), move || {
            if std::fs::symlink_metadata(&run_dir).is_err() {
                return Ok(()); // provisioning never started
            }
            // Everything provisioning may have made: a linked worktree's
            // registration in the source repository, the layers, the checkout.
            if linked && std::fs::symlink_metadata(&checkout).is_ok() {
                release_linked(&repository, &checkout)?;
            }
            if std::fs::symlink_metadata(&layer_dir).is_err() {
                return Ok(()); // its disk was never made
            }
            super::layered::release_layers(&layer_dir)?;
            remove_tree(&checkout)
        })
        .await;
        self.held().remove(run.run_id.as_str());
        released
    }
}

/// Whether `path` names something strictly below `dir`: `dir` followed by plain
/// names only (no `..`, which `Path::starts_with` lets through).
fn is_under(path: &Path, dir: &Path) -> bool {
    path.strip_prefix(dir).is_ok_and(|rest| {
        rest.components().next().is_some()
            && rest.components().all(|c| matches!(c, Component::Normal(_)))
    })
}

/// Runs `f` on the blocking pool and maps its error to a [`BoundaryError`].
async fn blocking<T: Send + 'static>(
    operation: &'static str,
    path: PathBuf,
    f: impl FnOnce() -> Result<T, SourceError> + Send + 'static,
) -> Result<T, BoundaryError> {
    let result = match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(source) => Err(SourceError::Join { operation, source }),
    };
    result.map_err(|err| BoundaryError::new(BoundaryKind::Source, operation, err).with_path(path))
}

/// Makes (or, for `resumed`, re-verifies) the checkout at `dest` as `section` says and
/// returns its record: the blocking body of [`WorktreeSource::provision`].
///
/// `fresh`: a new checkout (standalone for `auto`), declared submodules initialised,
/// declared inputs copied, an empty initial diff. `resumed`: the checkout already at
/// `dest` is verified against the resolved revision; its initial diff lists the
/// inherited changes in `--name-status` form. `run_id` is recorded as the origin of a
/// resumed checkout. `snapshot` needs a snapshot store, which only
/// [`WorktreeSource::with_snapshot_store`] configures: here it is
/// [`SourceError::Unsupported`].
///
/// # Ambient authority
/// `section.repo` and `dest` are host paths, used as given.
pub fn provision_source(
    section: &SourceSection,
    dest: &Path,
    run_id: String,
) -> Result<SourceRecord, SourceError> {
    provision_source_in(section, dest, run_id, None)
}

/// [`provision_source`] with the snapshot store `origin = "snapshot"` restores from.
fn provision_source_in(
    section: &SourceSection,
    dest: &Path,
    run_id: String,
    snapshots: Option<&Path>,
) -> Result<SourceRecord, SourceError> {
    if section.repo.contains("://") {
        return Err(SourceError::Unsupported {
            setting: "a remote repository URL (give a local path)".into(),
        });
    }
    let repo_path = PathBuf::from(&section.repo);
    let materialization = match section.materialization {
        Materialization::Auto | Materialization::Standalone => Materialization::Standalone,
        Materialization::Linked => Materialization::Linked,
        Materialization::Layered => {
            return Err(SourceError::Unsupported {
                setting: "materialization layered".into(),
            });
        }
    };
    match section.origin {
        CheckoutOrigin::Fresh => fresh(section, &repo_path, dest, materialization),
        CheckoutOrigin::Resumed => resumed(section, &repo_path, dest, materialization, run_id),
        CheckoutOrigin::Snapshot => match snapshots {
            Some(store) => restored(section, &repo_path, dest, materialization, store),
            None => Err(SourceError::Unsupported {
                setting: "origin snapshot without a snapshot store".into(),
            }),
        },
    }
}

fn fresh(
    section: &SourceSection,
    repo_path: &Path,
    dest: &Path,
    materialization: Materialization,
) -> Result<SourceRecord, SourceError> {
    let source = open_source_repo(repo_path)?;
    let commit = resolve_revision(&source, &section.revision)?;
    // Refuse a non-empty destination before anything is made: the cleanup below
    // removes `dest` and must only ever remove what this call created.
    prepare_destination(dest)?;
    let finish = || -> Result<SourceRecord, SourceError> {
        let checkout = match materialization {
            Materialization::Linked => provision_linked(repo_path, &commit.to_string(), dest)?,
            _ => standalone_at(&source, commit, dest)?,
        };
        let submodules = provision_submodules(
            &source,
            checkout.commit,
            checkout.tree,
            &checkout.workspace,
            &section.submodules,
        )?;
        let inputs = copy_inputs(&checkout.workspace, &section.inputs)?;
        let mut record = record(
            section,
            &checkout,
            OriginRecord::Fresh,
            materialization,
            submodules,
            inputs,
            String::new(),
        );
        record.objects = objects_of(&source, materialization);
        Ok(record)
    };
    finish().inspect_err(|_| {
        let cleanup = match materialization {
            Materialization::Linked => release_linked(repo_path, dest),
            _ => remove_tree(dest),
        };
        if let Err(cleanup) = cleanup {
            tracing::warn!(error = %cleanup, workspace = %dest.display(), "removing the failed checkout failed");
        }
    })
}

fn resumed(
    section: &SourceSection,
    repo_path: &Path,
    dest: &Path,
    materialization: Materialization,
    run_id: String,
) -> Result<SourceRecord, SourceError> {
    let source = open_source_repo(repo_path)?;
    let commit = resolve_revision(&source, &section.revision)?;
    let checkout = Checkout {
        workspace: dest.to_owned(),
        commit,
        tree: tree_of(&source, commit)?,
        remote_urls: remote_urls(&source),
    };
    // Submodules are recorded as found; inputs were copied by the earlier run.
    let submodules = provision_submodules_record_only(&source, &checkout, section)?;
    let mut record = record(
        section,
        &checkout,
        OriginRecord::Resumed { from: run_id },
        materialization,
        submodules,
        Vec::new(),
        String::new(),
    );
    record.objects = objects_of(&source, materialization);
    let report = verify_checkout(&record, section.allow_rebase)?;
    record.initial_diff = name_status(&report.inherited);
    Ok(record)
}

/// `origin = "snapshot"`: the snapshot `section.snapshot` from `store`, restored and
/// verified into `dest` by [`crate::snapshot::restore_opts`]; its base commit must be
/// the resolved revision. The initial diff lists the restored changes in
/// `--name-status` form; declared submodules and inputs are added as for `fresh`.
fn restored(
    section: &SourceSection,
    repo_path: &Path,
    dest: &Path,
    materialization: Materialization,
    store: &Path,
) -> Result<SourceRecord, SourceError> {
    if materialization != Materialization::Standalone {
        return Err(SourceError::Unsupported {
            setting: "origin snapshot with materialization linked".into(),
        });
    }
    let Some(digest) = &section.snapshot else {
        return Err(SourceError::Unsupported {
            setting: "origin snapshot without source.snapshot".into(),
        });
    };
    let source = open_source_repo(repo_path)?;
    let commit = resolve_revision(&source, &section.revision)?;
    let options = crate::snapshot::RestoreOptions::expecting_base(commit.to_string());
    let report = crate::snapshot::restore_opts(repo_path, store, digest, dest, &options)
        .map_err(|e| SourceError::Snapshot(Box::new(e)))?;
    let finish = || -> Result<SourceRecord, SourceError> {
        let checkout = Checkout {
            workspace: dest.to_owned(),
            commit,
            tree: tree_of(&source, commit)?,
            remote_urls: remote_urls(&source),
        };
        let submodules =
            provision_submodules(&source, commit, checkout.tree, dest, &section.submodules)?;
        let inputs = copy_inputs(dest, &section.inputs)?;
        let origin = OriginRecord::Restored {
            snapshot_digest: report.digest.clone(),
        };
        let mut record = record(
            section,
            &checkout,
            origin,
            materialization,
            submodules,
            inputs,
            report.name_status.clone(),
        );
        record.objects = objects_of(&source, materialization);
        Ok(record)
    };
    finish().inspect_err(|_| {
        if let Err(cleanup) = remove_tree(dest) {
            tracing::warn!(error = %cleanup, workspace = %dest.display(), "removing the failed restore failed");
        }
    })
}

/// The submodules of a resumed checkout: declared ones are taken as initialised if
/// their directory has a `.git`.
fn provision_submodules_record_only(
    source: &gix::Repository,
    checkout: &Checkout,
    section: &SourceSection,
) -> Result<Vec<workspace_core::boundary::SubmoduleRecord>, SourceError> {
    let mut records = provision_submodules(
        source,
        checkout.commit,
        checkout.tree,
        &checkout.workspace,
        &[],
    )?;
    for record in &mut records {
        if section.submodules.contains(&record.path) {
            let dot_git = checkout.workspace.join(&record.path).join(".git");
            if std::fs::symlink_metadata(&dot_git).is_err() {
                return Err(SourceError::SubmoduleUnavailable {
                    path: record.path.clone(),
                    reason: "the resumed checkout does not have it initialised".into(),
                });
            }
            record.initialized = true;
        }
    }
    Ok(records)
}

/// A resumed checkout's inherited changes, in `git diff --name-status` form (the
/// unified patch is the changes module's job).
fn name_status(inherited: &super::inherited::Inherited) -> String {
    let mut lines: Vec<String> = Vec::new();
    lines.extend(inherited.changed.iter().map(|p| format!("M\t{p}")));
    lines.extend(inherited.deleted.iter().map(|p| format!("D\t{p}")));
    lines.extend(inherited.untracked.iter().map(|p| format!("A\t{p}")));
    lines.sort_by(|a, b| a[2..].cmp(&b[2..]));
    lines.into_iter().map(|l| l + "\n").collect()
}

#[allow(clippy::too_many_arguments)]
fn record(
    section: &SourceSection,
    checkout: &Checkout,
    origin: OriginRecord,
    materialization: Materialization,
    submodules: Vec<workspace_core::boundary::SubmoduleRecord>,
    inputs: Vec<workspace_core::boundary::InputRecord>,
    initial_diff: String,
) -> SourceRecord {
    SourceRecord {
        repository: section.repo.clone(),
        remote_urls: checkout.remote_urls.clone(),
        commit: checkout.commit.to_string(),
        tree: checkout.tree.to_string(),
        origin,
        materialization,
        workspace: checkout.workspace.clone(),
        layers: None,
        submodules,
        inputs,
        initial_diff,
        pinned: Vec::new(),
        objects: None,
    }
}
