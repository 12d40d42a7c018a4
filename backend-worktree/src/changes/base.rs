//! The base side of a comparison: a commit's tree, read from the source repository.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStringExt;

use super::{ChangesError, Entry, MODE_GITLINK};

/// A commit's tree flattened to its files, symlinks and gitlinks.
#[derive(Clone, Debug)]
pub struct BaseTree {
    /// The commit's tree id.
    pub tree: gix::ObjectId,
    /// Every blob and symlink, keyed by its `/`-separated path.
    pub entries: BTreeMap<String, Entry>,
    /// Paths of gitlinks (submodules): left out of comparisons and left unchanged.
    pub gitlinks: Vec<String>,
}

/// Parses a full hexadecimal commit id.
pub fn parse_commit_id(commit: &str) -> Result<gix::ObjectId, ChangesError> {
    gix::ObjectId::from_hex(commit.as_bytes()).map_err(|source| ChangesError::InvalidCommitId {
        commit: commit.into(),
        source,
    })
}

/// Reads and flattens the tree of `commit` from `repo` (the source repository,
/// opened isolated). Nothing configured in the repository runs: only objects are read.
pub fn base_tree(repo: &gix::Repository, commit: &str) -> Result<BaseTree, ChangesError> {
    let id = parse_commit_id(commit)?;
    let read = |operation: &'static str| {
        move |source: gix::Error| ChangesError::ReadBase {
            operation,
            commit: commit.into(),
            source,
        }
    };
    let tree_id = repo
        .find_commit(id)
        .map_err(read("find commit"))?
        .tree_id()
        .map_err(read("read tree id"))?
        .detach();
    let tree = repo.find_tree(tree_id).map_err(read("find tree"))?;
    let mut recorder = gix::traverse::tree::Recorder::default();
    tree.traverse()
        .breadthfirst(&mut recorder)
        .map_err(read("traverse tree"))?;
    let mut out = BaseTree {
        tree: tree_id,
        entries: BTreeMap::new(),
        gitlinks: Vec::new(),
    };
    for entry in recorder.records {
        let mode = u32::from(entry.mode.value());
        if entry.mode.is_tree() {
            continue;
        }
        let bytes: Vec<u8> = entry.filepath.into();
        let path = String::from_utf8(bytes).map_err(|err| ChangesError::NonUtf8Path {
            path: std::path::PathBuf::from(std::ffi::OsString::from_vec(err.into_bytes())),
        })?;
        if mode == MODE_GITLINK {
            out.gitlinks.push(path);
        } else {
            out.entries
                .insert(path, Entry::new(normalize(mode), entry.oid));
        }
    }
    Ok(out)
}

/// Old git versions wrote `100664` and friends; git reads any non-executable blob
/// mode as `100644`.
pub(crate) fn normalize(mode: u32) -> u32 {
    match mode {
        super::MODE_SYMLINK | super::MODE_EXECUTABLE => mode,
        _ if mode & 0o111 != 0 => super::MODE_EXECUTABLE,
        _ => super::MODE_FILE,
    }
}
