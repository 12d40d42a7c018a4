//! The exclusions found in layered checkouts' lower trees, kept for the life of
//! the process: a lower tree is a commit's cached base tree, never written once
//! it is made, so what `filesystem.excluded` matches in it is the same for
//! every run of the commit, and walking a large tree again for each run would
//! cost every run time in proportion to the repository's size.
//!
//! A tree is known by its directory's identity (device, inode, change time),
//! not its path: a tree made again at the same path is another directory.
//! Where the platform gives no such identity, nothing is kept.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// How many walks are kept (the oldest goes first): one per commit and set
/// of patterns a long-lived runner serves.
const KEPT: usize = 64;

/// A walked tree: its directory's identity and the patterns it was walked for.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    identity: (u64, u64, i64, i64),
    patterns: Vec<String>,
}

static WALKS: Mutex<Vec<(Key, BTreeMap<String, Kind>)>> = Mutex::new(Vec::new());

/// What a walk found at a path: excluded as a file or a directory, or gone
/// (an overlay whiteout in a later tree removed it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    File,
    Dir,
    Gone,
}

/// What `walk` finds in the immutable tree `lower` for `patterns`: kept from
/// an earlier walk of this directory, else walked now and kept.
pub(super) fn walked<E>(
    lower: &Path,
    patterns: &[String],
    walk: impl FnOnce(&mut BTreeMap<String, Kind>) -> Result<(), E>,
) -> Result<BTreeMap<String, Kind>, E> {
    let Some(identity) = identity(lower) else {
        let mut found = BTreeMap::new();
        walk(&mut found)?;
        return Ok(found);
    };
    let key = Key {
        identity,
        patterns: patterns.to_vec(),
    };
    if let Some(found) = kept(&key) {
        return Ok(found);
    }
    let mut found = BTreeMap::new();
    walk(&mut found)?;
    // Every entry is pushed whole: a panic elsewhere while the list was held
    // left it consistent.
    let mut walks = WALKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !walks.iter().any(|(k, _)| *k == key) {
        if walks.len() == KEPT {
            walks.remove(0);
        }
        walks.push((key, found.clone()));
    }
    Ok(found)
}

fn kept(key: &Key) -> Option<BTreeMap<String, Kind>> {
    let walks = WALKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    walks
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, found)| found.clone())
}

#[cfg(unix)]
fn identity(dir: &Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir).ok()?;
    meta.is_dir()
        .then(|| (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec()))
}

#[cfg(not(unix))]
fn identity(_: &Path) -> Option<(u64, u64, i64, i64)> {
    None
}
