//! What a backend reads from the checkout before it builds the plan: the paths
//! `filesystem.excluded` matches. Nothing here follows a symlink found in the
//! workspace. (The source object store it binds is the Source boundary's
//! record, `SourceRecord::objects`, never the checkout's own `alternates`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::lower_walks::{self, Kind};
use crate::contract::exclusion_glob;

/// Why the checkout could not be read for the plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckoutError {
    /// A pattern of `filesystem.excluded` is not a valid glob.
    #[error("filesystem.excluded: {pattern:?} is not a valid glob")]
    Glob {
        /// The pattern.
        pattern: String,
        /// The glob error.
        source: globset::Error,
    },
    /// A workspace path matched an exclusion but is not UTF-8, so it cannot be masked.
    #[error("filesystem.excluded: {} matches but is not valid UTF-8", path.display())]
    NonUtf8Excluded {
        /// The host path.
        path: PathBuf,
    },
    /// A directory of the checkout could not be read.
    #[error("{step}: {}", path.display())]
    Io {
        /// What was being done.
        step: &'static str,
        /// The host path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Exclusions every run gets, whatever the contract says.
pub const PROTECTED_EXCLUSIONS: [&str; 2] = ["**/.env", "**/.env.*"];

/// The workspace-relative paths matched by `patterns` (plus
/// [`PROTECTED_EXCLUSIONS`]) in the union of `trees` (one tree for a standalone
/// checkout; lower then upper for a layered one), each with whether it is a file.
///
/// The walk never follows symlinks: a matching symlink is not masked (what it
/// points to is masked only if it matches itself); a matching directory is masked
/// whole and not descended into. An overlay whiteout (a 0/0 character device) in a
/// later tree removes the path. Sorted by path.
pub fn excluded_paths(
    trees: &[&Path],
    patterns: &[String],
) -> Result<Vec<(String, bool)>, CheckoutError> {
    let matches = matcher(patterns)?;
    let mut found = BTreeMap::new();
    for tree in trees {
        walk(tree, "", &matches, &mut found)?;
    }
    Ok(listed(found))
}

/// [`excluded_paths`] of a layered checkout, `lower` then `upper`, where
/// `lower` is a base tree that is never written once made (a commit's cached
/// tree, shared by every run of it): its walk is done once per process for
/// each set of patterns and kept, so a run walks only its own `upper` layer.
/// A lower tree made again at the same path is a new directory (another
/// inode or change time) and is walked again.
pub fn excluded_paths_layered(
    lower: &Path,
    upper: &Path,
    patterns: &[String],
) -> Result<Vec<(String, bool)>, CheckoutError> {
    let matches = matcher(patterns)?;
    let mut found = lower_walks::walked(lower, patterns, |found| walk(lower, "", &matches, found))?;
    walk(upper, "", &matches, &mut found)?;
    Ok(listed(found))
}

/// One matcher for `patterns` and [`PROTECTED_EXCLUSIONS`], each pattern once:
/// a glob set, which matches the common shapes (`**/.env`, `*.pem`) without
/// a regular expression and compiles the rest into one.
/// Whether a workspace-relative path is matched by `patterns` or
/// [`PROTECTED_EXCLUSIONS`] (the paths a run's mount plan masks).
pub fn exclusion_matcher(patterns: &[String]) -> Result<impl Fn(&str) -> bool, CheckoutError> {
    matcher(patterns)
}

fn matcher(patterns: &[String]) -> Result<impl Fn(&str) -> bool, CheckoutError> {
    let mut set = globset::GlobSetBuilder::new();
    let mut added = std::collections::BTreeSet::new();
    for pattern in patterns
        .iter()
        .map(String::as_str)
        .chain(PROTECTED_EXCLUSIONS)
    {
        if !added.insert(pattern) {
            continue;
        }
        let glob = exclusion_glob(pattern).map_err(|source| CheckoutError::Glob {
            pattern: pattern.to_owned(),
            source,
        })?;
        set.add(glob);
    }
    let set = set.build().map_err(|source| CheckoutError::Glob {
        pattern: added.into_iter().collect::<Vec<_>>().join(", "),
        source,
    })?;
    Ok(move |rel: &str| set.is_match(rel))
}

/// The paths still excluded once every tree was walked, sorted.
fn listed(found: BTreeMap<String, Kind>) -> Vec<(String, bool)> {
    found
        .into_iter()
        .filter_map(|(path, kind)| match kind {
            Kind::File => Some((path, true)),
            Kind::Dir => Some((path, false)),
            Kind::Gone => None,
        })
        .collect()
}

fn walk(
    dir: &Path,
    prefix: &str,
    matches: &dyn Fn(&str) -> bool,
    found: &mut BTreeMap<String, Kind>,
) -> Result<(), CheckoutError> {
    let io = |step, path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckoutError::Io { step, path, source }
    };
    let entries = std::fs::read_dir(dir).map_err(io("listing a workspace directory", dir))?;
    for entry in entries {
        let entry = entry.map_err(io("listing a workspace directory", dir))?;
        let path = entry.path();
        let file_type = entry
            .file_type()
            .map_err(io("inspecting a workspace path", &path))?;
        let name = entry.file_name();
        let lossy = name.to_string_lossy();
        let rel = if prefix.is_empty() {
            lossy.into_owned()
        } else {
            format!("{prefix}/{lossy}")
        };
        if is_whiteout(&file_type, &path) {
            if found.contains_key(&rel) {
                found.insert(rel, Kind::Gone);
            }
            continue;
        }
        let matched = matches(&rel);
        if matched && !file_type.is_symlink() {
            if name.to_str().is_none() {
                return Err(CheckoutError::NonUtf8Excluded { path });
            }
            let kind = if file_type.is_dir() {
                Kind::Dir
            } else {
                Kind::File
            };
            found.insert(rel, kind);
            continue;
        }
        if file_type.is_dir() {
            walk(&path, &rel, matches, found)?;
        }
    }
    Ok(())
}

/// An overlay whiteout: a character device numbered 0/0 (only on Unix).
#[cfg(unix)]
fn is_whiteout(file_type: &std::fs::FileType, path: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    file_type.is_char_device() && std::fs::symlink_metadata(path).is_ok_and(|m| m.rdev() == 0)
}

#[cfg(not(unix))]
fn is_whiteout(_: &std::fs::FileType, _: &Path) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn exclusions_match_without_following_links() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let w = tmp.path();
        write(&w.join(".env"), "A=1");
        write(&w.join("app/.env.local"), "B=2");
        write(&w.join("secrets/key"), "k");
        write(&w.join("src/main.rs"), "fn main() {}");
        std::os::unix::fs::symlink("/etc", w.join("secrets-link"))
            .unwrap_or_else(|e| panic!("{e}"));
        let found = excluded_paths(&[w], &["secrets".into(), "secrets-link".into()])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            found,
            vec![
                (".env".to_owned(), true),
                ("app/.env.local".to_owned(), true),
                ("secrets".to_owned(), false),
            ]
        );
    }

    #[test]
    fn a_layered_checkout_walks_its_lower_tree_once_and_its_upper_layer_each_time() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let lower = tmp.path().join("lower");
        let upper = tmp.path().join("upper");
        write(&lower.join(".env"), "A=1");
        write(&lower.join("app/.env.local"), "B=2");
        write(&lower.join("src/lib.rs"), "");
        std::fs::create_dir(&upper).unwrap_or_else(|e| panic!("{e}"));
        let patterns = vec!["secrets".to_owned()];
        let layered = |upper: &Path| {
            excluded_paths_layered(&lower, upper, &patterns).unwrap_or_else(|e| panic!("{e}"))
        };
        let first = layered(&upper);
        assert_eq!(
            first,
            excluded_paths(&[&lower, &upper], &patterns).unwrap_or_else(|e| panic!("{e}"))
        );
        assert_eq!(
            first,
            vec![
                (".env".to_owned(), true),
                ("app/.env.local".to_owned(), true)
            ]
        );

        // The run's own layer is read every time: what it adds, and a whiteout
        // that removes a path of the lower tree.
        write(&upper.join("secrets/key"), "k");
        let whiteout = std::process::Command::new("mknod")
            .arg(upper.join(".env"))
            .args(["c", "0", "0"])
            .status()
            .unwrap_or_else(|e| panic!("mknod (coreutils): {e}"));
        assert!(whiteout.success(), "mknod of a whiteout needs root");
        assert_eq!(
            layered(&upper),
            vec![
                ("app/.env.local".to_owned(), true),
                ("secrets".to_owned(), false)
            ]
        );

        // The lower tree is never written once made, so it is not walked
        // again: a file put deep inside it by hand is not seen...
        write(&lower.join("src/.env"), "C=3");
        let other = tmp.path().join("other-upper");
        std::fs::create_dir(&other).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(layered(&other), first);
        // ...but a tree made again at the same path is another directory.
        let moved = tmp.path().join("old-lower");
        std::fs::rename(&lower, &moved).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(&lower).unwrap_or_else(|e| panic!("{e}"));
        write(&lower.join("src/.env"), "C=3");
        assert_eq!(layered(&other), vec![("src/.env".to_owned(), true)]);
    }
}
