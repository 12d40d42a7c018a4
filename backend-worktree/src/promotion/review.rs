//! Draft review branches and merge-candidate marks in the source repository.
//!
//! Only objects and two ref namespaces are ever written to the source repository:
//! `refs/heads/review/<run-id>` (the draft review branch) and
//! `refs/review-merge-candidates/<run-id>` (the merge-candidate mark, pointing at
//! the review commit). Its HEAD, current branch, index and working tree are never
//! touched, and an existing ref is never moved.

use std::path::Path;

use gix::refs::transaction::{PreviousValue, RefEdit};
use workspace_core::RunId;
use workspace_core::boundary::{PatchExport, PromotionRecord, PromotionRequest};
use workspace_core::contract::PromotionSection;
use workspace_core::digest::sha256_hex;

use super::gate::{require_approval, require_checks, require_complete, require_scope_approval};
use super::patch::render_patch;
use super::scope::out_of_scope;
use super::tree::{rebuild_changes, write_tree};
use super::{PromotionError, open_source};
use crate::changes::{ContentLimits, base_tree, parse_commit_id};

/// The name and email of every review commit and ref-log entry.
pub const IDENTITY: (&str, &str) = ("agent-workspace", "agent-workspace@localhost");

/// `refs/heads/review/<run-id>`.
pub fn review_ref(run_id: &RunId) -> String {
    format!("refs/heads/review/{run_id}")
}

/// `refs/review-merge-candidates/<run-id>`.
pub fn merge_candidate_ref(run_id: &RunId) -> String {
    format!("refs/review-merge-candidates/{run_id}")
}

/// The review commit's message: it names the run and the patch digest.
pub fn review_message(run_id: &RunId, patch_sha256: &str) -> String {
    format!(
        "agent-workspace: review of run {run_id}\n\nRun-Id: {run_id}\nPatch-Sha256: {patch_sha256}\n"
    )
}

/// Writes the workspace's changes as a commit on top of `base_commit` in the source
/// repository and points `refs/heads/review/<run-id>` at it.
///
/// Refused unless every required check passed on `export.patch_sha256`
/// ([`PromotionError::ChecksNotPassed`], [`PromotionError::StaleCheck`]) and the
/// request is for that digest ([`PromotionError::DigestMismatch`]). The changed
/// files are read again from the workspace (never through a symlink) and must still
/// render to exactly the exported patch, so the commit's tree is the base tree plus
/// that patch. The commit has the fixed identity [`IDENTITY`] and the message
/// [`review_message`].
///
/// A change outside `outputs` (the contract's `filesystem.outputs`; `"."` covers
/// everything) is refused unless the request carries an approval bound to the
/// digest ([`PromotionError::OutOfScope`]). A path git would refuse to write is
/// refused ([`PromotionError::Changes`] with
/// [`ChangesError::RefusedPath`](crate::changes::ChangesError::RefusedPath)), and
/// so is content beyond [`ContentLimits::default`]. Nothing is written to the
/// source repository before every check has passed.
///
/// Idempotent: when the ref already points at a commit with the same tree, parent
/// and message, that commit is returned again; when it points elsewhere the call is
/// refused ([`PromotionError::RefExists`]).
///
/// # Ambient authority
/// `source_repo` and `workspace` are host paths used as given. The source repository
/// is opened isolated (none of its hooks or filters run); the workspace is only read.
#[allow(clippy::too_many_arguments)] // each is a distinct input of the promotion
pub fn create_review_branch(
    source_repo: &Path,
    run_id: &RunId,
    base_commit: &str,
    workspace: &Path,
    export: &PatchExport,
    outputs: &[String],
    request: &PromotionRequest,
    contract: &PromotionSection,
) -> Result<PromotionRecord, PromotionError> {
    let target = ReviewTarget {
        source_repo,
        run_id,
        base_commit,
        workspace,
    };
    create_review_branch_within(
        &target,
        export,
        outputs,
        request,
        contract,
        ContentLimits::default(),
    )
}

/// Where a review branch is written, and from which workspace.
pub(crate) struct ReviewTarget<'a> {
    pub(crate) source_repo: &'a Path,
    pub(crate) run_id: &'a RunId,
    pub(crate) base_commit: &'a str,
    pub(crate) workspace: &'a Path,
}

/// [`create_review_branch`] with explicit content `limits`.
pub(crate) fn create_review_branch_within(
    target: &ReviewTarget<'_>,
    export: &PatchExport,
    outputs: &[String],
    request: &PromotionRequest,
    contract: &PromotionSection,
    limits: ContentLimits,
) -> Result<PromotionRecord, PromotionError> {
    let ReviewTarget {
        source_repo,
        run_id,
        base_commit,
        workspace,
    } = *target;
    let _span = tracing::info_span!("create_review_branch", run_id = %run_id).entered();
    let digest = export.patch_sha256.as_str();
    require_checks(contract, request, digest)?;
    require_complete(export)?;
    let repo = open_source(source_repo)?;
    let reference = review_ref(run_id);
    refuse_current_branch(&repo, &reference)?;

    let base = base_tree(&repo, base_commit).map_err(PromotionError::changes("read base tree"))?;
    let (changes, contents) = rebuild_changes(&base, workspace, export, limits)?;
    let mut read_new = |path: &str, _: &crate::changes::Entry| {
        contents
            .get(path)
            .cloned()
            .ok_or_else(|| PromotionError::ExportOutdated { path: path.into() })
    };
    let current = sha256_hex(&render_patch(&repo, &changes, &mut read_new)?);
    if current != digest {
        return Err(PromotionError::DigestMismatch {
            requested: digest.to_owned(),
            current,
        });
    }
    require_scope_approval(&request.approvals, digest, out_of_scope(&changes, outputs))?;
    let tree = write_tree(&repo, base.tree, &changes, &contents)?;
    let parent =
        parse_commit_id(base_commit).map_err(PromotionError::changes("parse base commit"))?;
    let message = review_message(run_id, digest);

    let commit = match ref_target(&repo, &reference)? {
        Some(existing) if is_same_commit(&repo, existing, tree, parent, &message)? => existing,
        Some(existing) => {
            return Err(PromotionError::RefExists {
                reference,
                existing: existing.to_string(),
            });
        }
        None => {
            let commit = write_commit(&repo, tree, parent, &message)?;
            create_ref(&repo, &reference, commit, "agent-workspace: draft review")?;
            commit
        }
    };
    tracing::info!(%reference, %commit, digest, "review branch written");
    Ok(PromotionRecord {
        patch_sha256: digest.to_owned(),
        review_ref: Some(reference),
        review_commit: Some(commit.to_string()),
        merge_candidate: false,
    })
}

/// Marks a review commit as a merge candidate: `refs/review-merge-candidates/<run-id>`
/// pointing at `record.review_commit`.
///
/// Refused unless the required checks passed on `record.patch_sha256` and the
/// request is for that digest, and, with `merge_approval = human`, an approval bound
/// to that digest is recorded ([`PromotionError::ApprovalMissing`],
/// [`PromotionError::StaleApproval`]); `danger-none` needs only the checks.
/// Idempotent like [`create_review_branch`]. Returns `record` with
/// `merge_candidate` set.
///
/// # Ambient authority
/// `source_repo` is a host path used as given, opened isolated.
pub fn mark_merge_candidate(
    source_repo: &Path,
    run_id: &RunId,
    record: &PromotionRecord,
    request: &PromotionRequest,
    contract: &PromotionSection,
) -> Result<PromotionRecord, PromotionError> {
    let digest = record.patch_sha256.as_str();
    require_checks(contract, request, digest)?;
    require_approval(contract, &request.approvals, digest)?;
    let no_commit = || PromotionError::NoReviewCommit {
        digest: digest.to_owned(),
    };
    let commit = record.review_commit.as_deref().ok_or_else(no_commit)?;
    let commit = parse_commit_id(commit).map_err(PromotionError::changes("parse review commit"))?;
    let repo = open_source(source_repo)?;
    let reference = merge_candidate_ref(run_id);
    match ref_target(&repo, &reference)? {
        Some(existing) if existing == commit => {}
        Some(existing) => {
            return Err(PromotionError::RefExists {
                reference,
                existing: existing.to_string(),
            });
        }
        None => create_ref(
            &repo,
            &reference,
            commit,
            "agent-workspace: merge candidate",
        )?,
    }
    tracing::info!(%reference, %commit, digest, "marked as merge candidate");
    Ok(PromotionRecord {
        merge_candidate: true,
        ..record.clone()
    })
}

fn refuse_current_branch(repo: &gix::Repository, reference: &str) -> Result<(), PromotionError> {
    let head = repo
        .head_name()
        .map_err(PromotionError::objects("read", "HEAD"))?;
    if head.is_some_and(|name| name.as_bstr() == reference) {
        return Err(PromotionError::RefIsCurrentBranch {
            reference: reference.to_owned(),
        });
    }
    Ok(())
}

fn ref_target(
    repo: &gix::Repository,
    reference: &str,
) -> Result<Option<gix::ObjectId>, PromotionError> {
    let found = repo
        .try_find_reference(reference)
        .map_err(PromotionError::objects("find ref", reference))?;
    match found {
        None => Ok(None),
        Some(mut found) => Ok(Some(
            found
                .peel_to_id()
                .map_err(PromotionError::objects("peel ref", reference))?
                .detach(),
        )),
    }
}

fn is_same_commit(
    repo: &gix::Repository,
    id: gix::ObjectId,
    tree: gix::ObjectId,
    parent: gix::ObjectId,
    message: &str,
) -> Result<bool, PromotionError> {
    let commit = repo
        .find_commit(id)
        .map_err(PromotionError::objects("read commit", id))?;
    let same_tree = commit
        .tree_id()
        .map_err(PromotionError::objects("read tree of commit", id))?
        == tree;
    let parents: Vec<gix::ObjectId> = commit.parent_ids().map(|p| p.detach()).collect();
    let same_message = commit
        .message_raw()
        .map_err(PromotionError::objects("read message of commit", id))?
        == message.as_bytes();
    Ok(same_tree && parents == [parent] && same_message)
}

fn signature() -> gix::actor::Signature {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    gix::actor::Signature {
        name: IDENTITY.0.into(),
        email: IDENTITY.1.into(),
        time: gix::date::Time::new(now, 0),
    }
}

fn write_commit(
    repo: &gix::Repository,
    tree: gix::ObjectId,
    parent: gix::ObjectId,
    message: &str,
) -> Result<gix::ObjectId, PromotionError> {
    let commit = gix::objs::Commit {
        tree,
        parents: std::iter::once(parent).collect(),
        author: signature(),
        committer: signature(),
        encoding: None,
        message: message.into(),
        extra_headers: Vec::new(),
    };
    Ok(repo
        .write_object(&commit)
        .map_err(PromotionError::objects("write commit", "for the review"))?
        .detach())
}

/// Creates `reference` at `target`; it must not exist (a concurrent creation makes
/// this fail rather than overwrite).
fn create_ref(
    repo: &gix::Repository,
    reference: &str,
    target: gix::ObjectId,
    log_message: &str,
) -> Result<(), PromotionError> {
    let name = reference
        .try_into()
        .map_err(|source| PromotionError::InvalidRefName {
            reference: reference.to_owned(),
            source,
        })?;
    let edit = RefEdit::update(name, target, PreviousValue::MustNotExist, log_message);
    let committer = signature();
    let mut time = gix::date::parse::TimeBuf::default();
    repo.edit_references_as([edit], Some(committer.to_ref(&mut time)))
        .map_err(PromotionError::objects("create ref", reference))?;
    Ok(())
}
