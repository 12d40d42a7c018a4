//! Resolving a workspace-relative path to where it really leads, one component at
//! a time under the root capability, following symlinks found inside the
//! workspace (at most [`MAX_HOPS`]) and never leaving the root.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::fs::{Dir, Metadata};

use super::error::Refusal;
use super::path::cap_path;
use super::policy::Policy;

/// The most symlinks followed while resolving one path (Linux's `MAXSYMLINKS`).
pub const MAX_HOPS: usize = 40;

/// Where a path leads.
#[derive(Debug)]
pub(crate) struct Resolved {
    /// Workspace-relative, without symlinks or `..` (empty for the root).
    pub(crate) path: PathBuf,
    /// Index of the first component that does not exist, if one does not.
    pub(crate) missing_from: Option<usize>,
    /// `symlink_metadata` of the resolved path, when it exists.
    pub(crate) meta: Option<Metadata>,
}

/// Why resolving stopped.
#[derive(Debug)]
pub(crate) enum WalkError {
    /// A rule refuses the path or something on the way.
    Refused(Refusal),
    /// The operating system refused a step.
    Io(io::Error),
}

impl From<io::Error> for WalkError {
    fn from(err: io::Error) -> Self {
        if is_escape(&err) {
            Self::Refused(Refusal::EscapesRoot)
        } else {
            Self::Io(err)
        }
    }
}

/// Whether cap-std refused an operation because it would leave the root
/// (`openat2` reports `EXDEV`, which cap-std turns into this error).
pub(crate) fn is_escape(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::PermissionDenied
        && err.to_string().contains("outside of the filesystem")
}

const PARENT: &str = "..";

/// Resolves `start` (relative; `..` allowed only for symlink targets, whose
/// callers have checked it) under `root`. Every name on the way, including the
/// symlinks followed, is checked with [`Policy::read_denial_exact`], so a link
/// chain cannot pass through an excluded or protected entry. With `follow_final`
/// false a final symlink is returned as itself.
pub(crate) fn resolve(
    root: &Dir,
    policy: &Policy,
    start: &Path,
    follow_final: bool,
) -> Result<Resolved, WalkError> {
    let mut pending = VecDeque::new();
    push_components(&mut pending, start, false)?;
    let mut resolved = PathBuf::new();
    let mut depth = 0usize;
    let mut missing_from = None;
    let mut hops = 0usize;

    while let Some(name) = pending.pop_front() {
        if name == PARENT {
            if missing_from.is_some() {
                // The kernel stops at the missing directory; so do we.
                return Err(WalkError::Io(io::ErrorKind::NotFound.into()));
            }
            if !resolved.pop() {
                return Err(WalkError::Refused(Refusal::EscapesRoot));
            }
            depth -= 1;
            continue;
        }
        let candidate = resolved.join(&name);
        if let Some(refusal) = policy.read_denial_exact(&candidate) {
            return Err(WalkError::Refused(refusal));
        }
        if missing_from.is_some() {
            resolved = candidate;
            depth += 1;
            continue;
        }
        match root.symlink_metadata(&candidate) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                missing_from = Some(depth);
                resolved = candidate;
                depth += 1;
            }
            Err(err) => return Err(err.into()),
            Ok(meta) if meta.file_type().is_symlink() && (follow_final || !pending.is_empty()) => {
                hops += 1;
                if hops > MAX_HOPS {
                    return Err(WalkError::Refused(Refusal::TooManyLinks));
                }
                let target = root.read_link_contents(&candidate)?;
                push_components(&mut pending, &target, true)?;
            }
            Ok(_) => {
                resolved = candidate;
                depth += 1;
            }
        }
    }
    let meta = match missing_from {
        Some(_) => None,
        None => Some(root.symlink_metadata(cap_path(&resolved))?),
    };
    Ok(Resolved {
        path: resolved,
        missing_from,
        meta,
    })
}

/// Queues the components of `path`: at the front (a symlink target, in order)
/// or at the back. Absolute paths are refused: an absolute link target is
/// resolved from the host's root, outside the workspace.
fn push_components(
    pending: &mut VecDeque<OsString>,
    path: &Path,
    front: bool,
) -> Result<(), WalkError> {
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                return Err(WalkError::Refused(Refusal::EscapesRoot));
            }
            Component::CurDir => {}
            Component::ParentDir => names.push(OsStr::new(PARENT).to_owned()),
            Component::Normal(name) => names.push(name.to_owned()),
        }
    }
    if front {
        for name in names.into_iter().rev() {
            pending.push_front(name);
        }
    } else {
        pending.extend(names);
    }
    Ok(())
}
