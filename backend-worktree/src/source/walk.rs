//! A small walk of a checkout against its base tree, for resume reports.
//!
//! Files are read as plain data: the walk never follows a symlink (links are hashed
//! as their target string, as git stores them), skips `.git`, and does not descend
//! into submodule directories. The base tree is read from the *source* repository.
//! (The full change walker of this crate lives in `changes/`; this one only answers
//! "what did the resumed workspace inherit".)

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use gix::ObjectId;
use gix::index::entry::Mode;

use super::SourceError;

/// How the workspace differs from its base tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inherited {
    /// Tracked paths whose content, type or executable bit differ.
    pub changed: Vec<String>,
    /// Tracked paths missing from the workspace.
    pub deleted: Vec<String>,
    /// Paths in the workspace that the base tree does not have.
    pub untracked: Vec<String>,
}

/// Compares the files under `workspace` with `tree` (read from `source`).
pub(crate) fn inherited(
    source: &gix::Repository,
    tree: ObjectId,
    workspace: &Path,
) -> Result<Inherited, SourceError> {
    let state = gix::index::State::from_tree(
        &tree,
        &source.objects,
        gix::validate::path::component::Options::default(),
    )
    .map_err(|e| SourceError::git("read the base tree", workspace, e))?;
    let mut base: BTreeMap<Vec<u8>, (Mode, ObjectId)> = BTreeMap::new();
    let mut gitlinks: BTreeSet<Vec<u8>> = BTreeSet::new();
    for entry in state.entries() {
        let path = entry.path(&state).to_vec();
        if entry.mode == Mode::COMMIT {
            gitlinks.insert(path);
        } else {
            base.insert(path, (entry.mode, entry.id));
        }
    }

    let mut found: BTreeMap<Vec<u8>, (Mode, ObjectId)> = BTreeMap::new();
    let mut stack = vec![Vec::<u8>::new()];
    while let Some(dir) = stack.pop() {
        let dir_path = workspace.join(std::ffi::OsStr::from_bytes(&dir));
        let entries = fs::read_dir(&dir_path)
            .map_err(|e| SourceError::io("read a directory", &dir_path, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| SourceError::io("read a directory", &dir_path, e))?;
            let name = entry.file_name();
            if dir.is_empty() && name == ".git" {
                continue;
            }
            let mut rela = dir.clone();
            if !rela.is_empty() {
                rela.push(b'/');
            }
            rela.extend_from_slice(name.as_bytes());
            let path = entry.path();
            // `DirEntry::file_type` does not follow symlinks.
            let file_type = entry
                .file_type()
                .map_err(|e| SourceError::io("inspect a file", &path, e))?;
            if file_type.is_dir() {
                if !gitlinks.contains(&rela) {
                    stack.push(rela);
                }
            } else if file_type.is_symlink() {
                let target = fs::read_link(&path)
                    .map_err(|e| SourceError::io("read a symlink", &path, e))?;
                found.insert(
                    rela,
                    (
                        Mode::SYMLINK,
                        blob_id(source, target.as_os_str().as_bytes(), &path)?,
                    ),
                );
            } else if file_type.is_file() {
                let meta = entry
                    .metadata()
                    .map_err(|e| SourceError::io("inspect a file", &path, e))?;
                let mode = if meta.permissions().mode() & 0o111 != 0 {
                    Mode::FILE_EXECUTABLE
                } else {
                    Mode::FILE
                };
                let data = fs::read(&path).map_err(|e| SourceError::io("read a file", &path, e))?;
                found.insert(rela, (mode, blob_id(source, &data, &path)?));
            }
            // Sockets, fifos and devices are not content; they are not reported.
        }
    }

    let text = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
    let mut report = Inherited::default();
    for (path, expected) in &base {
        match found.get(path) {
            None => report.deleted.push(text(path)),
            Some(actual) if actual != expected => report.changed.push(text(path)),
            Some(_) => {}
        }
    }
    report.untracked = found
        .keys()
        .filter(|p| !base.contains_key(*p))
        .map(|p| text(p))
        .collect();
    Ok(report)
}

/// The git blob id of `data`.
fn blob_id(source: &gix::Repository, data: &[u8], path: &Path) -> Result<ObjectId, SourceError> {
    gix::objs::compute_hash(source.object_hash(), gix::objs::Kind::Blob, data)
        .map_err(|e| SourceError::git("hash a file as a blob", path, e))
}
