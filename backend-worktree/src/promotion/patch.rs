//! `diff.patch`: the workspace's changes as a git patch that `git apply` accepts on
//! a clean checkout of the base commit.

use std::path::Path;

use workspace_core::boundary::{ChangeKind, ChangedPath, PatchExport};
use workspace_core::digest::sha256_hex;

use super::binary::write_binary_patch;
use super::hunks::write_hunks;
use super::quote::quote_path;
use super::scope::{in_scope, is_under};
use super::{PromotionError, open_source};
use crate::changes::{
    Change, ChangeOptions, ContentBudget, ContentLimits, Entry, Uncarried, base_tree,
    changes_against_recording, check_changes, read_entry_within, split_refused,
};

/// How many bytes git inspects for a NUL to call content binary.
const BINARY_PROBE: usize = 8000;

/// Exports the changes of `workspace` against `base_commit` (read from
/// `source_repo`) as a patch in git's format, with its sha256 and the list of
/// changed paths (`in_scope` when under one of `outputs`; `"."` covers everything).
///
/// Paths matching `options.skip` (the contract's generated paths) are neither in the
/// patch nor in the list. Text changes become hunks with three lines of context;
/// binary content (a NUL in the first 8000 bytes of either side, or content that is
/// not UTF-8) becomes a `GIT binary patch`; symlinks are diffs of their target text
/// with mode `120000`; a file replaced by a symlink (or back) is a deletion plus an
/// addition; exact renames are `rename from`/`rename to` with `similarity index 100%`.
///
/// A change the patch cannot carry (a path git's rules refuse, a name that is
/// not UTF-8, a nested repository's `.git`) is left out of the patch and listed
/// with why ([`ChangedPath::not_in_patch`]); a rename with one such side is
/// split, so the other side is still carried. Refused when a changed file or all
/// of them together are larger than [`ContentLimits::default`] allows.
///
/// # Ambient authority
/// `source_repo` and `workspace` are host paths used as given. The source repository
/// is opened isolated; the workspace is only read as plain files, never followed
/// through a symlink and never opened as a repository.
pub fn export_patch(
    source_repo: &Path,
    base_commit: &str,
    workspace: &Path,
    outputs: &[String],
    options: &ChangeOptions,
) -> Result<PatchExport, PromotionError> {
    export_patch_within(
        source_repo,
        base_commit,
        workspace,
        outputs,
        options,
        ContentLimits::default(),
    )
}

/// [`export_patch`] with explicit content `limits`.
pub(crate) fn export_patch_within(
    source_repo: &Path,
    base_commit: &str,
    workspace: &Path,
    outputs: &[String],
    options: &ChangeOptions,
    limits: ContentLimits,
) -> Result<PatchExport, PromotionError> {
    let _span = tracing::info_span!("export_patch", base = base_commit).entered();
    let repo = open_source(source_repo)?;
    let base = base_tree(&repo, base_commit).map_err(PromotionError::changes("read base tree"))?;
    let compared = changes_against_recording(&base, workspace, options)
        .map_err(PromotionError::changes("compute changes"))?;
    let (changes, mut uncarried) = (compared.changes, compared.uncarried);
    let (changes, ignored) = super::ignored::split_ignored(&repo, base_commit, changes)?;
    let (changes, refused) = split_refused(changes);
    uncarried.extend(refused);
    let mut budget = ContentBudget::new(limits);
    let mut read_new = |path: &str, entry: &Entry| {
        read_entry_within(workspace, path, entry, &mut budget)
            .map_err(PromotionError::changes("read changed file"))
    };
    let patch = render_patch(&repo, &changes, &mut read_new)?;
    let export = PatchExport {
        patch_sha256: sha256_hex(&patch),
        changes: changed_paths(&changes, &ignored, &uncarried, outputs),
        patch,
    };
    tracing::info!(
        digest = %export.patch_sha256,
        changed = export.changes.len(),
        "patch exported"
    );
    Ok(export)
}

/// `changes.json`: every change with whether it lies inside the declared
/// outputs, then the added files the repository's ignore rules leave out of
/// the patch (marked `ignored`), then the changes the patch cannot carry (with
/// why), sorted by path.
pub(crate) fn changed_paths(
    changes: &[Change],
    ignored: &[Change],
    uncarried: &[Uncarried],
    outputs: &[String],
) -> Vec<ChangedPath> {
    let entry = |change: &Change, ignored: bool| ChangedPath {
        path: change.path.clone(),
        change: change.kind.clone(),
        in_scope: in_scope(change, outputs),
        ignored,
        not_in_patch: None,
    };
    let mut uncarried: Vec<ChangedPath> = uncarried
        .iter()
        .map(|u| {
            let covered = |path: &str| outputs.iter().any(|output| is_under(path, output));
            let from = match &u.kind {
                ChangeKind::Renamed { from } => from.as_str(),
                _ => u.path.as_str(),
            };
            ChangedPath {
                path: u.path.clone(),
                change: u.kind.clone(),
                in_scope: covered(&u.path) && covered(from),
                ignored: false,
                not_in_patch: Some(u.reason.clone()),
            }
        })
        .collect();
    uncarried.sort_by(|a, b| a.path.cmp(&b.path));
    changes
        .iter()
        .map(|change| entry(change, false))
        .chain(ignored.iter().map(|change| entry(change, true)))
        .chain(uncarried)
        .collect()
}

/// Supplies the new content of a changed path (checked against its entry).
pub(crate) type ReadNew<'a> = dyn FnMut(&str, &Entry) -> Result<Vec<u8>, PromotionError> + 'a;

/// One `diff --git` section.
enum Section<'a> {
    Delete(&'a str, Entry),
    Add(&'a str, Entry),
    Modify(&'a str, Entry, Entry),
    Rename(&'a str, &'a str, Entry, Entry),
}

/// Renders `changes` as a patch: deletions first (so a path freed by one can be
/// reused by a later addition), then everything else, each group in path order.
/// Old content is read from `repo`; new content comes from `read_new`.
///
/// Every patch and every review tree goes through here: before anything is read,
/// each path (both sides of a rename) is checked with git's path rules
/// ([`check_changes`]), so a path git would refuse to write, or one that would act
/// on a reviewer's checkout, is refused.
pub(crate) fn render_patch(
    repo: &gix::Repository,
    changes: &[Change],
    read_new: &mut ReadNew<'_>,
) -> Result<Vec<u8>, PromotionError> {
    check_changes(changes).map_err(PromotionError::changes("check changed paths"))?;
    let mut deletions = Vec::new();
    let mut others = Vec::new();
    for change in changes {
        match (change.old, change.new) {
            (Some(old), None) => deletions.push(Section::Delete(&change.path, old)),
            (None, Some(new)) => others.push(Section::Add(&change.path, new)),
            (Some(old), Some(new)) if change.is_type_change() => {
                deletions.push(Section::Delete(&change.path, old));
                others.push(Section::Add(&change.path, new));
            }
            (Some(old), Some(new)) if change.old_path() != change.path => {
                others.push(Section::Rename(change.old_path(), &change.path, old, new));
            }
            (Some(old), Some(new)) => others.push(Section::Modify(&change.path, old, new)),
            (None, None) => {}
        }
    }
    let mut out = Vec::new();
    for section in deletions.iter().chain(others.iter()) {
        write_section(&mut out, repo, section, read_new)?;
    }
    Ok(out)
}

fn write_section(
    out: &mut Vec<u8>,
    repo: &gix::Repository,
    section: &Section<'_>,
    read_new: &mut ReadNew<'_>,
) -> Result<(), PromotionError> {
    let (old_path, new_path) = match section {
        Section::Delete(p, _) | Section::Add(p, _) | Section::Modify(p, _, _) => (*p, *p),
        Section::Rename(from, to, _, _) => (*from, *to),
    };
    let a = quote_path("a/", old_path);
    let b = quote_path("b/", new_path);
    push(out, format!("diff --git {a} {b}\n"));
    let null = gix::ObjectId::null(gix::hash::Kind::Sha1);
    match *section {
        Section::Delete(path, old) => {
            push(out, format!("deleted file mode {:o}\n", old.mode));
            let old_content = read_old(repo, path, &old)?;
            write_content(
                out,
                path,
                (&a, old.id, &old_content),
                ("/dev/null", null, &[]),
                None,
            )
        }
        Section::Add(path, new) => {
            push(out, format!("new file mode {:o}\n", new.mode));
            let new_content = read_new(path, &new)?;
            write_content(
                out,
                path,
                ("/dev/null", null, &[]),
                (&b, new.id, &new_content),
                None,
            )
        }
        Section::Modify(path, old, new) => {
            let same_mode = old.mode == new.mode;
            if !same_mode {
                push(
                    out,
                    format!("old mode {:o}\nnew mode {:o}\n", old.mode, new.mode),
                );
            }
            if old.id == new.id {
                return Ok(());
            }
            let old_content = read_old(repo, path, &old)?;
            let new_content = read_new(path, &new)?;
            let mode = same_mode.then_some(new.mode);
            write_content(
                out,
                path,
                (&a, old.id, &old_content),
                (&b, new.id, &new_content),
                mode,
            )
        }
        Section::Rename(from, to, old, new) => {
            if old.mode != new.mode {
                push(
                    out,
                    format!("old mode {:o}\nnew mode {:o}\n", old.mode, new.mode),
                );
            }
            push(out, "similarity index 100%\n".to_owned());
            push(out, format!("rename from {}\n", quote_path("", from)));
            push(out, format!("rename to {}\n", quote_path("", to)));
            Ok(())
        }
    }
}

/// The `index` line and the content diff: nothing more when both sides are empty,
/// a binary patch (with full ids) or `---`/`+++` and hunks.
fn write_content(
    out: &mut Vec<u8>,
    path: &str,
    (old_label, old_id, old): (&str, gix::ObjectId, &[u8]),
    (new_label, new_id, new): (&str, gix::ObjectId, &[u8]),
    mode: Option<u32>,
) -> Result<(), PromotionError> {
    let mode = mode.map(|m| format!(" {m:o}")).unwrap_or_default();
    if is_binary(old) || is_binary(new) {
        push(out, format!("index {old_id}..{new_id}{mode}\n"));
        return write_binary_patch(out, path, old, new);
    }
    let abbrev = |id: gix::ObjectId| id.to_hex_with_len(7).to_string();
    push(
        out,
        format!("index {}..{}{mode}\n", abbrev(old_id), abbrev(new_id)),
    );
    if old.is_empty() && new.is_empty() {
        return Ok(());
    }
    let tab = |label: &str| if label.contains(' ') { "\t" } else { "" };
    push(out, format!("--- {old_label}{}\n", tab(old_label)));
    push(out, format!("+++ {new_label}{}\n", tab(new_label)));
    write_hunks(out, old, new).map_err(|source| PromotionError::Encode {
        operation: "render hunks",
        path: path.into(),
        source,
    })
}

fn read_old(repo: &gix::Repository, path: &str, entry: &Entry) -> Result<Vec<u8>, PromotionError> {
    Ok(repo
        .find_blob(entry.id)
        .map_err(PromotionError::objects(
            "read blob",
            format!("{} ({path})", entry.id),
        ))?
        .detach()
        .data)
}

/// Binary as git sees it (a NUL in the first 8000 bytes), or not UTF-8.
fn is_binary(content: &[u8]) -> bool {
    content[..content.len().min(BINARY_PROBE)].contains(&0) || std::str::from_utf8(content).is_err()
}

fn push(out: &mut Vec<u8>, text: String) {
    out.extend_from_slice(text.as_bytes());
}
