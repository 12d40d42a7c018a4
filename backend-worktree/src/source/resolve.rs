//! Opening the source repository and resolving a revision to a commit id.

use std::error::Error as _;
use std::path::Path;

use gix::ObjectId;
use workspace_core::boundary::ResolvedSource;
use workspace_core::contract::{Problems, SourceSection};
use workspace_core::error_chain;

use super::SourceError;

/// `section`'s repository opened and its revision resolved to a commit, or
/// the problem, naming `source.repo` or `source.revision`: the blocking body
/// of [`WorktreeSource::resolve`](crate::source::WorktreeSource).
///
/// # Ambient authority
/// `section.repo` is a host path, used as given.
pub fn resolve_section(section: &SourceSection) -> Result<ResolvedSource, Problems> {
    let mut problems = Problems::new();
    let path = Path::new(&section.repo);
    let repo = match open_source_repo(path) {
        Ok(repo) => repo,
        Err(e) => {
            let reason = e.source().map_or_else(|| e.to_string(), error_chain);
            let message = format!("{}: not a git repository ({reason})", path.display());
            problems.push("source.repo", message);
            return Err(problems);
        }
    };
    let commit = match resolve_revision(&repo, &section.revision) {
        Ok(commit) => commit,
        Err(e) => {
            let message = format!(
                "{} is not a commit of {} ({})",
                section.revision,
                path.display(),
                error_chain(&e)
            );
            problems.push("source.revision", message);
            return Err(problems);
        }
    };
    Ok(ResolvedSource {
        repository: path.to_owned(),
        commit: commit.to_string(),
    })
}

/// Whether a run of `section` would go without changes of its repository
/// (see [`SourceBoundary::uncommitted_changes`]); `None` when it does not
/// resolve: the blocking body of
/// [`WorktreeSource`](crate::source::WorktreeSource)'s answer.
///
/// [`SourceBoundary::uncommitted_changes`]: workspace_core::boundary::SourceBoundary::uncommitted_changes
///
/// # Ambient authority
/// `section.repo` is a host path, used as given.
pub fn section_has_uncommitted_changes(section: &SourceSection) -> Option<bool> {
    let repo = open_source_repo(Path::new(&section.repo)).ok()?;
    let commit = resolve_revision(&repo, &section.revision).ok()?;
    let head = repo.head_id().ok().map(|id| id.detach());
    Some(head == Some(commit) && has_uncommitted_changes(&repo))
}

/// Opens the source repository at `path` in isolation (see [`crate::repo::open_source`]):
/// only read, never written by standalone provisioning.
///
/// # Ambient authority
/// `path` is a host path, used as given.
pub fn open_source_repo(path: &Path) -> Result<gix::Repository, SourceError> {
    crate::repo::open_source(path).map_err(|source| SourceError::OpenSource {
        path: path.to_owned(),
        source: Box::new(source),
    })
}

/// Whether the source's working tree or index differs from its `HEAD` (untracked
/// files aside): what a run of `HEAD` does not get.
pub fn has_uncommitted_changes(repo: &gix::Repository) -> bool {
    repo.is_dirty().unwrap_or(false)
}

/// Resolves `rev` (a commit id, a unique prefix of one, a tag or a branch) in `repo`
/// to a commit id, peeling annotated tags.
///
/// Errors: [`SourceError::RevisionNotFound`] when nothing of that name exists,
/// [`SourceError::AmbiguousRevision`] when a short id matches several objects,
/// [`SourceError::NotACommit`] when it names a tree or blob, and
/// [`SourceError::ResolveRevision`] for anything else (a malformed spec).
pub fn resolve_revision(repo: &gix::Repository, rev: &str) -> Result<ObjectId, SourceError> {
    let id = repo
        .rev_parse_single(rev)
        .map_err(|err| classify(rev, err))?;
    let object = id.object().map_err(|err| classify(rev, err))?;
    let commit = object
        .peel_to_commit()
        .map_err(|source| SourceError::NotACommit {
            revision: rev.to_owned(),
            source: Box::new(source),
        })?;
    Ok(commit.id)
}

/// Maps gix's revision error to the typed variant a caller can act on.
fn classify(rev: &str, err: gix::Error) -> SourceError {
    use gix::revision::spec::parse::Error as ParseError;
    let revision = rev.to_owned();
    match err.downcast_any_ref::<ParseError>() {
        Some(ParseError::AmbiguousPrefix { .. } | ParseError::AmbiguousRefAndObject { .. }) => {
            SourceError::AmbiguousRevision {
                revision,
                source: Box::new(err),
            }
        }
        Some(ParseError::MissingReference { .. }) => SourceError::RevisionNotFound { revision },
        _ if err.is_not_found() => SourceError::RevisionNotFound { revision },
        _ => SourceError::ResolveRevision {
            revision,
            source: Box::new(err),
        },
    }
}
