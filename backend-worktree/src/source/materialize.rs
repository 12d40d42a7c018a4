//! Writing a tree's files into a directory as raw blobs, and the index beside them.
//!
//! No filter of any kind runs: the pipeline has no drivers (so no `filter=` smudge
//! program is ever started, whatever the configuration says) and `.gitattributes`
//! files are taken out of the index gix checks out, so no `text`/`eol`/`ident`/
//! `working-tree-encoding` attribute applies either. Those `.gitattributes` files are
//! then written here, raw, and put back into the index. What is on disk is therefore
//! byte-for-byte the blobs of the tree, which is also what the resume walk hashes.

use std::fs;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::AtomicBool;

use gix::ObjectId;
use gix::bstr::{BString, ByteSlice};
use gix::index::entry::{Flags, Mode, Stat};

use super::SourceError;
use super::config::write_new;

/// What [`materialize_tree`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Materialized {
    /// Index entries (files, symlinks, submodule links).
    pub entries: usize,
    /// Files written (gix's count plus the raw `.gitattributes`).
    pub files: usize,
}

/// Checks out `tree` (read from `source`) into the existing, empty directory `workdir`
/// with gix's parallel checkout, then writes the index to `index_path`.
pub(crate) fn materialize_tree(
    source: &gix::Repository,
    tree: ObjectId,
    workdir: &Path,
    index_path: &Path,
) -> Result<Materialized, SourceError> {
    let git = |operation, err| SourceError::git(operation, workdir, err);
    let mut state = gix::index::State::from_tree(
        &tree,
        &source.objects,
        gix::validate::path::component::Options::default(),
    )
    .map_err(|e| git("build the index from the tree", e))?;

    // `.gitattributes` files gix would read attributes from: checked out raw, below.
    let mut attribute_files: Vec<(BString, ObjectId, Flags)> = Vec::new();
    let mut gitlinks: Vec<BString> = Vec::new();
    state.remove_entries(|_, path, entry| {
        if entry.mode == Mode::COMMIT {
            gitlinks.push(path.to_owned());
        }
        let is_attributes =
            path.rsplit(|b| *b == b'/').next() == Some(b".gitattributes".as_slice());
        if is_attributes && entry.mode == Mode::FILE {
            attribute_files.push((path.to_owned(), entry.id, entry.flags));
            true
        } else {
            false
        }
    });

    let mut options =
        gix::worktree::state::checkout::Options::new(gix::filter::plumbing::Pipeline::new(
            Default::default(),
            source.object_hash(),
            gix::filter::plumbing::pipeline::Options::default(),
        ));
    options.fs = gix::fs::Capabilities::probe_dir(workdir);
    options.destination_is_initially_empty = true;
    options.filter_process_delay = gix::filter::plumbing::driver::apply::Delay::Forbid;
    let objects = source
        .objects
        .clone()
        .into_arc()
        .map_err(|e| SourceError::io("share the object database", workdir, e))?;
    let outcome = gix::worktree::state::checkout(
        &mut state,
        workdir,
        objects,
        &gix::progress::Discard,
        &gix::progress::Discard,
        &AtomicBool::new(false),
        options,
    )
    .map_err(|e| git("check out the tree", e))?;
    if !outcome.collisions.is_empty() || !outcome.errors.is_empty() {
        let paths = outcome
            .collisions
            .iter()
            .map(|c| c.path.to_string())
            .chain(outcome.errors.iter().map(|e| e.path.to_string()))
            .collect();
        return Err(SourceError::CheckoutIncomplete {
            workspace: workdir.to_owned(),
            paths,
        });
    }

    for (path, id, flags) in &attribute_files {
        let dest = workdir.join(relative_path(path.as_bstr(), workdir)?);
        ensure_parent_dirs(workdir, &dest)?;
        let blob = source
            .find_blob(*id)
            .map_err(|e| git("read a .gitattributes blob", e))?;
        write_new(&dest, &blob.data, "write a .gitattributes file")?;
        let stat = stat_of(&dest)?;
        state.dangerously_push_entry(stat, *id, *flags, Mode::FILE, path.as_bstr());
    }
    state.sort_entries();
    for path in &gitlinks {
        // As git does: an empty directory for an uninitialised submodule.
        let dest = workdir.join(relative_path(path.as_bstr(), workdir)?);
        ensure_parent_dirs(workdir, &dest)?;
        if fs::symlink_metadata(&dest).is_err() {
            fs::create_dir(&dest)
                .map_err(|e| SourceError::io("create a submodule directory", &dest, e))?;
        }
    }

    let entries = state.entries().len();
    let mut index = gix::index::File::from_state(state, index_path);
    index
        .write(gix::index::write::Options::default())
        .map_err(|e| SourceError::git("write the index", index_path, e))?;
    Ok(Materialized {
        entries,
        files: outcome.files_updated + attribute_files.len(),
    })
}

/// An index path as a relative file-system path.
fn relative_path<'a>(
    path: &'a gix::bstr::BStr,
    workdir: &Path,
) -> Result<std::borrow::Cow<'a, Path>, SourceError> {
    gix::path::from_bstr(path).map_err(|e| SourceError::git("convert an index path", workdir, e))
}

/// The index stat of `path` (not following a symlink).
fn stat_of(path: &Path) -> Result<Stat, SourceError> {
    let meta = gix::index::fs::Metadata::from_path_no_follow(path)
        .map_err(|e| SourceError::io("stat a checked-out file", path, e))?;
    Stat::from_fs(&meta)
        .map_err(|e| SourceError::io("stat a checked-out file", path, std::io::Error::other(e)))
}

/// Creates the directories between `root` and `path`'s parent, refusing any component
/// that is a symlink or not a directory (never writes through a link).
pub(crate) fn ensure_parent_dirs(root: &Path, path: &Path) -> Result<(), SourceError> {
    let relative = path
        .strip_prefix(root)
        .map_err(|_| SourceError::PathEscape {
            path: path.to_owned(),
            reason: "it is not under the workspace root",
        })?;
    let Some(parent) = relative.parent() else {
        return Ok(());
    };
    let mut current = PathBuf::from(root);
    for component in parent.components() {
        let Component::Normal(name) = component else {
            return Err(SourceError::PathEscape {
                path: path.to_owned(),
                reason: "it has a component other than a plain name",
            });
        };
        current.push(name);
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(SourceError::PathEscape {
                    path: path.to_owned(),
                    reason: "a leading component is a symlink",
                });
            }
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(SourceError::PathEscape {
                    path: path.to_owned(),
                    reason: "a leading component is not a directory",
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir(&current)
                    .map_err(|e| SourceError::io("create a directory", &current, e))?;
            }
            Err(e) => return Err(SourceError::io("inspect a directory", &current, e)),
        }
    }
    Ok(())
}
