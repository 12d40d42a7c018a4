//! Declared untracked inputs copied into a checkout, each recorded with its digest.

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use workspace_core::boundary::InputRecord;
use workspace_core::contract::UntrackedInput;
use workspace_core::digest::sha256_hex;

use super::SourceError;
use super::config::write_new;
use super::materialize::ensure_parent_dirs;

/// Copies every input into `workspace` and records where from, where to, and the
/// sha256 of what was written.
///
/// A relative `from` is read inside the workspace (e.g. `.env.example`), refusing any
/// symlink on the way (the checkout's content is the repository's, which may plant
/// links). A `from_host` path is read as given, refusing a symlink as its last
/// component. `to` must be a plain relative path outside `.git`; no component of it
/// may be a symlink; an existing regular file there is replaced.
///
/// # Ambient authority
/// `from_host` inputs are read from the host with the caller's rights.
pub fn copy_inputs(
    workspace: &Path,
    inputs: &[UntrackedInput],
) -> Result<Vec<InputRecord>, SourceError> {
    copy_inputs_between(workspace, workspace, inputs)
}

/// [`copy_inputs`] reading workspace-relative `from` paths under `read_root` and
/// writing under `write_root`: for a layered checkout, the base tree and the run's
/// upper directory.
pub(crate) fn copy_inputs_between(
    read_root: &Path,
    write_root: &Path,
    inputs: &[UntrackedInput],
) -> Result<Vec<InputRecord>, SourceError> {
    inputs
        .iter()
        .map(|input| copy_input(read_root, write_root, input))
        .collect()
}

fn copy_input(
    read_root: &Path,
    workspace: &Path,
    input: &UntrackedInput,
) -> Result<InputRecord, SourceError> {
    let from = if input.from_host {
        let from = PathBuf::from(&input.from);
        if !from.is_absolute() {
            return Err(refused(
                &input.from,
                "a host input must be an absolute path",
            ));
        }
        from
    } else {
        let relative = plain_relative(&input.from)
            .ok_or_else(|| refused(&input.from, "not a plain relative path"))?;
        no_symlink_components(read_root, &relative)
            .map_err(|reason| refused(&input.from, reason))?;
        read_root.join(relative)
    };
    let meta =
        fs::symlink_metadata(&from).map_err(|e| SourceError::io("inspect input", &from, e))?;
    if meta.file_type().is_symlink() {
        return Err(refused(&input.from, "the input is a symlink"));
    }
    if !meta.is_file() {
        return Err(refused(&input.from, "the input is not a regular file"));
    }
    let mut data = Vec::new();
    let mut file = fs::File::open(&from).map_err(|e| SourceError::io("open input", &from, e))?;
    let opened = file
        .metadata()
        .map_err(|e| SourceError::io("inspect input", &from, e))?;
    if !opened.is_file() {
        return Err(refused(&input.from, "the input is not a regular file"));
    }
    file.read_to_end(&mut data)
        .map_err(|e| SourceError::io("read input", &from, e))?;

    let to_relative = plain_relative(&input.to)
        .ok_or_else(|| refused(&input.from, "the destination is not a plain relative path"))?;
    if to_relative
        .components()
        .next()
        .is_some_and(|c| c.as_os_str() == ".git")
    {
        return Err(refused(&input.from, "the destination is inside .git"));
    }
    let to = workspace.join(&to_relative);
    ensure_parent_dirs(workspace, &to)?;
    match fs::symlink_metadata(&to) {
        Ok(meta) if meta.is_file() => fs::remove_file(&to)
            .map_err(|e| SourceError::io("replace input destination", &to, e))?,
        Ok(_) => {
            return Err(refused(
                &input.from,
                "the destination exists and is not a regular file",
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(SourceError::io("inspect input destination", &to, e)),
    }
    write_new(&to, &data, "write input")?;
    Ok(InputRecord {
        from: input.from.clone(),
        to: input.to.clone(),
        sha256: sha256_hex(&data),
    })
}

/// `path` as a relative path of plain names only (no `..`, no root, no `.`).
pub(super) fn plain_relative(path: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    let ok = !path.as_os_str().is_empty()
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    ok.then(|| path.to_owned())
}

/// Refuses `relative` if any of its components under `root` is a symlink.
fn no_symlink_components(root: &Path, relative: &Path) -> Result<(), &'static str> {
    let mut current = root.to_owned();
    for component in relative.components() {
        current.push(component);
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err("the input path goes through a symlink");
            }
            Ok(_) => {}
            Err(_) => return Err("the input does not exist in the checkout"),
        }
    }
    Ok(())
}

fn refused(from: &str, reason: &'static str) -> SourceError {
    SourceError::InputRefused {
        from: PathBuf::from(from),
        reason,
    }
}
