//! What the workspace's git may not tell about an excluded path.
//!
//! An excluded path (`filesystem.excluded`, and the protected `.env` files) is
//! masked in the workspace, and a checkout with one gets no object store; but
//! the index git reads in the workspace would still name each excluded file
//! with its blob id and size (`git ls-files -s`), and its tree cache the id of
//! each directory holding one. A blob id is a hash of the content: a short
//! secret (a PIN, a token's tail) is found by hashing candidates. So the index
//! the workspace starts from leaves those entries out, and drops the tree cache
//! (the directories' ids); git shows an excluded file as untracked then, as it
//! shows any file it was not told of. A symbolic link is not masked, so its
//! entry stays.

use std::path::Path;

use workspace_core::mount_plan::exclusion_matcher;

use super::SourceError;

/// The index at `from` without the entries `patterns` exclude (a path matched
/// itself or through a directory above it), written to `to` when any was left
/// out; how many were. `from` and `to` may be the same file.
///
/// # Ambient authority
/// `from` and `to` are host paths, used as given.
pub(crate) fn withhold_excluded(
    from: &Path,
    to: &Path,
    patterns: &[String],
) -> Result<usize, SourceError> {
    let excluded =
        exclusion_matcher(patterns).map_err(|source| SourceError::Excluded { source })?;
    let mut index = gix::index::File::at(
        from,
        gix::hash::Kind::Sha1,
        false,
        gix::index::decode::Options::default(),
    )
    .map_err(|e| SourceError::git("read the index", from, e))?;
    let mut withheld = 0;
    index.remove_entries(|_, path, entry| {
        let link = entry.mode == gix::index::entry::Mode::SYMLINK;
        let text = String::from_utf8_lossy(path);
        let matched = !link && prefixes(&text).any(&excluded);
        withheld += usize::from(matched);
        matched
    });
    if withheld == 0 {
        return Ok(0);
    }
    index.remove_tree();
    let mut index = gix::index::File::from_state(index.into(), to);
    index
        .write(gix::index::write::Options::default())
        .map_err(|e| SourceError::git("write the index", to, e))?;
    Ok(withheld)
}

/// `a`, `a/b`, `a/b/c` for `a/b/c`: the path and every directory above it.
fn prefixes(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .map(|(at, _)| &path[..at])
        .chain(std::iter::once(path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;

    #[test]
    fn every_directory_above_a_path_and_the_path_are_its_prefixes() {
        assert_eq!(prefixes("a/b/c").collect::<Vec<_>>(), ["a", "a/b", "a/b/c"]);
        assert_eq!(prefixes("f").collect::<Vec<_>>(), ["f"]);
    }
}
