//! [`WorktreePromotion`]: the Promotion boundary over a local source repository.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, BoundaryKind, PatchExport, PromotionBoundary, PromotionCapabilities,
    PromotionRecord, PromotionRequest, RunContext, SourceRecord,
};
use workspace_core::contract::{Contract, PromotionTarget};

use super::gate::{require_approval, require_checks, require_complete, require_scope_approval};
use super::review::{create_review_branch, mark_merge_candidate};
use super::{PromotionError, export_patch};
use crate::changes::ChangeOptions;

/// Exports a run's workspace as `diff.patch` + `changes.json` and promotes it to a
/// patch or a draft review branch in the source repository (see
/// [`super::review`]).
///
/// `export` uses the contract's `filesystem.outputs` (or, with none, its
/// writable paths) for `in_scope` and leaves out its `source.generated` paths.
/// `promote` exports again (the digest the request is judged on is always the
/// workspace's current one), then:
/// * target `patch`: requires the checks and returns a record without a ref;
/// * target `draft-review`: writes `refs/heads/review/<run-id>` (a change outside
///   `filesystem.outputs` needs an approval bound to the digest), and also marks it a
///   merge candidate when the approval rule is already met (a missing or stale
///   approval leaves the mark out; it is not an error here).
///
/// The source repository is [`SourceRecord::repository`] read as a local path,
/// unless one is given with [`WorktreePromotion::with_source_repo`] (for a remote
/// source, the local clone the commit was fetched into).
#[derive(Clone, Debug, Default)]
pub struct WorktreePromotion {
    source_repo: Option<PathBuf>,
}

impl WorktreePromotion {
    /// Uses each run's `SourceRecord::repository` as the source repository path.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `path` as the source repository of every run.
    ///
    /// # Ambient authority
    /// `path` is a host path, opened isolated when a run is exported or promoted.
    pub fn with_source_repo(path: impl Into<PathBuf>) -> Self {
        Self {
            source_repo: Some(path.into()),
        }
    }

    fn source_repo(&self, source: &SourceRecord) -> PathBuf {
        self.source_repo
            .clone()
            .unwrap_or_else(|| PathBuf::from(&source.repository))
    }
}

/// What an export leaves out: generated paths, the declared untracked inputs
/// (a copied `.env` is what the run was given, not what it produced, and may hold
/// values that must not reach a review branch), and the mount points of host
/// mounts inside the workspace (what is there is the host's, not the run's).
/// Input destinations and mount points are matched literally, never as globs.
fn options(contract: &Contract) -> ChangeOptions {
    let inputs = contract
        .source
        .inputs
        .iter()
        .map(|input| globset::escape(&input.to));
    let mount_points = contract
        .filesystem
        .host_mounts_in_workspace()
        .flat_map(|(_, relative)| {
            let literal = globset::escape(relative);
            [format!("{literal}/**"), literal]
        });
    ChangeOptions::skipping(
        contract
            .source
            .generated
            .iter()
            .cloned()
            .chain(inputs)
            .chain(mount_points),
    )
}

fn boundary_error(
    operation: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(PromotionError) -> BoundaryError {
    let path = path.to_path_buf();
    move |err| BoundaryError::new(BoundaryKind::Promotion, operation, err).with_path(path)
}

fn join_error(operation: &'static str) -> impl FnOnce(tokio::task::JoinError) -> BoundaryError {
    move |source| {
        BoundaryError::new(
            BoundaryKind::Promotion,
            operation,
            PromotionError::Task { operation, source },
        )
    }
}

#[async_trait]
impl PromotionBoundary for WorktreePromotion {
    fn capabilities(&self) -> PromotionCapabilities {
        PromotionCapabilities {
            targets: vec![PromotionTarget::Patch, PromotionTarget::DraftReview],
        }
    }

    async fn export(
        &self,
        run: &RunContext,
        source: &SourceRecord,
    ) -> Result<PatchExport, BoundaryError> {
        let repo = self.source_repo(source);
        let contract = Arc::clone(&run.contract);
        let source = source.clone();
        tokio::task::spawn_blocking(move || export_run(&repo, &source, &contract))
            .await
            .map_err(join_error("export patch"))?
    }

    async fn promote(
        &self,
        run: &RunContext,
        source: &SourceRecord,
        request: &PromotionRequest,
    ) -> Result<PromotionRecord, BoundaryError> {
        let repo = self.source_repo(source);
        let contract = Arc::clone(&run.contract);
        let source = source.clone();
        let request = request.clone();
        let run_id = run.run_id.clone();
        tokio::task::spawn_blocking(move || {
            let promotion = &contract.promotion;
            let export = export_run(&repo, &source, &contract)?;
            match promotion.target {
                PromotionTarget::Patch => {
                    // A promoted patch is what a person applies: the checks and the
                    // approval the contract asks for are both bound to its digest.
                    require_checks(promotion, &request, &export.patch_sha256)
                        .and_then(|()| require_complete(&export))
                        .and_then(|()| {
                            require_approval(promotion, &request.approvals, &export.patch_sha256)
                        })
                        .map_err(boundary_error("promote patch", changed_files_root(&source)))?;
                    Ok(PromotionRecord {
                        patch_sha256: export.patch_sha256,
                        review_ref: None,
                        review_commit: None,
                        merge_candidate: false,
                    })
                }
                PromotionTarget::DraftReview => {
                    let record = create_review_branch(
                        &repo,
                        &run_id,
                        &source.commit,
                        changed_files_root(&source),
                        &export,
                        contract.filesystem.scope(),
                        &request,
                        promotion,
                    )
                    .map_err(boundary_error("create review branch", &repo))?;
                    match require_approval(promotion, &request.approvals, &record.patch_sha256) {
                        Ok(()) => mark_merge_candidate(&repo, &run_id, &record, &request, promotion)
                            .map_err(boundary_error("mark merge candidate", &repo)),
                        Err(reason) => {
                            tracing::info!(%reason, run_id = %run_id, "not marked as merge candidate");
                            Ok(record)
                        }
                    }
                }
            }
        })
        .await
        .map_err(join_error("promote"))?
    }

    async fn preflight(
        &self,
        run: &RunContext,
        source: &SourceRecord,
        request: &PromotionRequest,
    ) -> Result<(), BoundaryError> {
        let repo = self.source_repo(source);
        let contract = Arc::clone(&run.contract);
        let source = source.clone();
        let request = request.clone();
        tokio::task::spawn_blocking(move || gate(&repo, &source, &contract, &request))
            .await
            .map_err(join_error("preflight"))?
    }
}

/// The gates `promote` applies to `request`, on a fresh export, without
/// promoting: the checks bound to the current digest and the approvals the
/// target needs (a draft review's merge approval only decides whether it is a
/// merge candidate, never whether it is made).
fn gate(
    repo: &Path,
    source: &SourceRecord,
    contract: &Contract,
    request: &PromotionRequest,
) -> Result<(), BoundaryError> {
    let promotion = &contract.promotion;
    let export = export_run(repo, source, contract)?;
    let digest = export.patch_sha256.as_str();
    let out_of_scope: Vec<String> = export
        .changes
        .iter()
        .filter(|c| !c.in_scope && !c.ignored)
        .map(|c| c.path.clone())
        .collect();
    require_checks(promotion, request, digest)
        .and_then(|()| require_complete(&export))
        .and_then(|()| match promotion.target {
            PromotionTarget::Patch => require_approval(promotion, &request.approvals, digest),
            PromotionTarget::DraftReview => {
                require_scope_approval(&request.approvals, digest, out_of_scope)
            }
        })
        .map_err(boundary_error("preflight", changed_files_root(source)))
}

/// Where a run's changed files are read on the host: the workspace of a checkout,
/// or the upper directory of a layered run (whose merged view is mounted only
/// inside its isolation; a whiteout there reads as absent).
fn changed_files_root(source: &SourceRecord) -> &Path {
    source
        .layers
        .as_ref()
        .map_or(source.workspace.as_path(), |layers| layers.upper.as_path())
}

/// `diff.patch` and `changes.json` of a run, from its checkout or its layers.
fn export_run(
    repo: &Path,
    source: &SourceRecord,
    contract: &Contract,
) -> Result<PatchExport, BoundaryError> {
    let outputs = contract.filesystem.scope();
    match &source.layers {
        Some(layers) => crate::layered::diff::export_layered_patch(
            repo,
            &source.commit,
            &layers.upper,
            outputs,
            &options(contract),
        )
        .map_err(|err| {
            BoundaryError::new(BoundaryKind::Promotion, "export layered patch", err)
                .with_path(layers.upper.clone())
        }),
        None => export_patch(
            repo,
            &source.commit,
            &source.workspace,
            outputs,
            &options(contract),
        )
        .map_err(boundary_error("export patch", &source.workspace)),
    }
}
