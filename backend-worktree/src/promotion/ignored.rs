//! New files the repository's own ignore rules leave out of a patch, as git
//! would: the `.gitignore` files of the **base commit** (never the workspace's,
//! which the agent may edit to hide a file) and the source repository's
//! `info/exclude`. Only a path the base commit does not track can be ignored
//! (git never ignores a tracked file), and only an added one: a rename or a mode
//! change of a tracked file is always part of the patch. A file under an ignored
//! directory is ignored whatever a negation says, as in git.

use std::path::Path;

use gix::bstr::{BStr, ByteSlice};
use gix::ignore::Search;
use gix::ignore::search::Ignore;
use workspace_core::boundary::ChangeKind;

use super::PromotionError;
use crate::changes::{Change, ChangesError};

/// The ignore rules of a base commit.
pub(crate) struct Ignores {
    search: Search,
}

impl Ignores {
    /// The rules of `commit` in `repo`: its `info/exclude` first (the weakest),
    /// then each `.gitignore` of the commit's tree, outer directories before
    /// inner ones (an inner file's rules win).
    pub(crate) fn of(repo: &gix::Repository, commit: &str) -> Result<Self, PromotionError> {
        let read = |operation: &'static str| {
            move |source: gix::Error| {
                PromotionError::changes(operation)(ChangesError::ReadBase {
                    operation,
                    commit: commit.into(),
                    source,
                })
            }
        };
        let mut search = Search::default();
        let parse = Ignore::default();
        let exclude = repo.git_dir().join("info/exclude");
        if let Ok(bytes) = std::fs::read(&exclude) {
            let _ = search.add_patterns_buffer(&bytes, &exclude, None, parse);
        }
        let id = crate::changes::base::parse_commit_id(commit)
            .map_err(PromotionError::changes("parse the base commit"))?;
        let tree = repo
            .find_commit(id)
            .map_err(read("find the base commit"))?
            .tree()
            .map_err(read("read the base tree"))?;
        let mut recorder = gix::traverse::tree::Recorder::default();
        tree.traverse()
            .breadthfirst(&mut recorder)
            .map_err(read("traverse the base tree"))?;
        let mut files: Vec<(String, gix::ObjectId)> = recorder
            .records
            .into_iter()
            .filter(|e| {
                e.mode.is_blob()
                    && e.filepath.rsplit_str("/").next() == Some(b".gitignore".as_slice())
            })
            .map(|e| (e.filepath.to_str_lossy().into_owned(), e.oid))
            .collect();
        files.sort_by_key(|(path, _)| path.matches('/').count());
        for (path, oid) in files {
            let blob = repo
                .find_object(oid)
                .map_err(read("read a .gitignore of the base tree"))?;
            let _ = search.add_patterns_buffer(&blob.data, &path, Some(Path::new("")), parse);
        }
        Ok(Self { search })
    }

    /// Whether the untracked `path` is ignored: a directory above it, or it.
    pub(crate) fn ignores(&self, path: &str) -> bool {
        let case = gix::glob::pattern::Case::Sensitive;
        let matched = |relative: &str, is_dir: bool| {
            self.search
                .pattern_matching_relative_path(BStr::new(relative), Some(is_dir), case)
                .is_some_and(|m| !m.pattern.is_negative())
        };
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            end += slash;
            if matched(&path[..end], true) {
                return true;
            }
            end += 1;
        }
        matched(path, false)
    }
}

/// `changes` split into what the patch holds and the added files the base
/// commit's ignore rules leave out. The rules are read only when a file was
/// added.
pub(crate) fn split_ignored(
    repo: &gix::Repository,
    commit: &str,
    changes: Vec<Change>,
) -> Result<(Vec<Change>, Vec<Change>), PromotionError> {
    if !changes.iter().any(|c| c.kind == ChangeKind::Added) {
        return Ok((changes, Vec::new()));
    }
    let ignores = Ignores::of(repo, commit)?;
    Ok(changes
        .into_iter()
        .partition(|c| !(c.kind == ChangeKind::Added && ignores.ignores(&c.path))))
}
