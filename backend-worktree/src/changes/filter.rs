//! Which paths take part in a comparison: `skip` globs and pruned subtrees.

use std::collections::BTreeSet;

use globset::{GlobSet, GlobSetBuilder};
use workspace_core::contract::exclusion_glob;

use super::ChangesError;

/// Decides which workspace-relative paths are left out of a comparison, on both
/// sides (base tree and workspace).
///
/// A path is left out when it, or any directory above it, matches one of the `skip`
/// globs (with the semantics of `filesystem.excluded`: `*` stays within one
/// directory, `**` crosses directories; a trailing `/` is ignored, so `target` and
/// `target/` both leave out the whole `target` directory), when it lies under a
/// pruned path (a gitlink of the base tree), or when one of its components is
/// `.git` (git never records such paths).
#[derive(Clone, Debug)]
pub struct PathFilter {
    skip: GlobSet,
    pruned: BTreeSet<String>,
}

impl PathFilter {
    /// Compiles `skip` patterns.
    pub fn new(skip: &[String]) -> Result<Self, ChangesError> {
        let mut builder = GlobSetBuilder::new();
        for pattern in skip {
            let trimmed = pattern.trim_end_matches('/');
            let glob =
                exclusion_glob(trimmed).map_err(|source| ChangesError::InvalidSkipPattern {
                    pattern: pattern.clone(),
                    source,
                })?;
            builder.add(glob);
        }
        let skip = builder
            .build()
            .map_err(|source| ChangesError::InvalidSkipPattern {
                pattern: skip.join(", "),
                source,
            })?;
        Ok(Self {
            skip,
            pruned: BTreeSet::new(),
        })
    }

    /// Also leaves out `path` and everything under it.
    pub fn prune(&mut self, path: impl Into<String>) {
        self.pruned.insert(path.into());
    }

    /// Whether `path` itself is left out, assuming its parent directories were
    /// already checked (what a walk that descends one level at a time needs).
    pub fn skips_entry(&self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        name == ".git" || self.excludes(path)
    }

    /// Whether `path` itself is left out by a `skip` glob or a pruned path (not
    /// merely for being a `.git`), assuming its parents were already checked.
    pub fn excludes(&self, path: &str) -> bool {
        self.pruned.contains(path) || self.skip.is_match(path)
    }

    /// Whether `path` or any directory above it is left out.
    pub fn skips(&self, path: &str) -> bool {
        let mut end = 0;
        for component in path.split('/') {
            end += component.len();
            if self.skips_entry(&path[..end]) {
                return true;
            }
            end += 1;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::PathFilter;

    #[test]
    fn changes_filter_skips_directories_and_globs() {
        let mut filter =
            PathFilter::new(&["target/".into(), "**/*.o".into(), "gen/*.rs".into()]).unwrap();
        filter.prune("vendor/sub");
        assert!(filter.skips("target"));
        assert!(filter.skips("target/debug/app"));
        assert!(!filter.skips("src/target.rs"));
        assert!(filter.skips("a/b/c.o"));
        assert!(filter.skips("gen/x.rs"));
        assert!(!filter.skips("gen/deep/x.rs"));
        assert!(filter.skips("vendor/sub/file"));
        assert!(!filter.skips("vendor/subway"));
        assert!(filter.skips("deep/.git/config"));
        assert!(!filter.skips("café/naïve file.txt"));
    }
}
