//! Which changed paths may enter a patch or a review tree.
//!
//! Every path a patch or review commit would carry is checked here, with the rules
//! git itself applies before it writes a path to a working tree (gix's port of
//! `verify_path`, with the NTFS and HFS+ protections on): no `.git` in any spelling
//! a case-insensitive or NTFS/HFS+ file system would resolve to `.git` (`.GIT`,
//! `".git "`, `git~1`, `.g\u{200c}it`, ...), no `.` or `..`, no empty component, and
//! no `.gitmodules` that is a symlink. Symlinked `.gitattributes`, `.gitignore` and
//! `.mailmap` (in the same spellings) are refused as well: git reports them as
//! suspicious and would read a reviewer's file through them.
//!
//! Windows-only rules (reserved device names, `"`, `\`, `:`, control characters,
//! trailing dots) are not applied: git accepts such names on Unix, and refusing them
//! would refuse ordinary names such as `say "hi".txt`.

use gix::bstr::BStr;
use gix::validate::path::component;
use workspace_core::boundary::{ChangeKind, NotInPatch};

use super::{Change, ChangesError, MODE_SYMLINK, Uncarried};

/// Why a path cannot be part of a patch or a review tree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PathRefusal {
    /// A component breaks git's path rules.
    #[error("component {component:?} is refused by git's path rules")]
    Component {
        /// The offending component.
        component: String,
        /// gix's validation error (the rule that was broken).
        #[source]
        source: component::Error,
    },
    /// A file git reads from the tree (`.gitattributes`, `.gitignore`, `.mailmap`)
    /// is a symlink, through which git would read whatever the link points at.
    #[error("{component:?} is a symlink, which git would follow to read its rules")]
    SymlinkedGitFile {
        /// The offending component (the last one of the path).
        component: String,
    },
}

/// The protections: NTFS and HFS+ on, Windows-only name rules off (see the module
/// documentation).
fn options() -> component::Options {
    component::Options {
        protect_windows: false,
        protect_hfs: true,
        protect_ntfs: true,
    }
}

/// Checks `path` (`/`-separated, relative) with git's rules; `mode` is the git mode
/// of the entry that would be written there (`None` for a path only removed).
pub fn check_path(path: &str, mode: Option<u32>) -> Result<(), ChangesError> {
    let refuse = |reason| ChangesError::RefusedPath {
        path: path.to_owned(),
        reason,
    };
    let is_link = mode == Some(MODE_SYMLINK);
    let mut components = path.split('/').peekable();
    while let Some(name) = components.next() {
        let leaf = components.peek().is_none();
        let leaf_mode = (leaf && is_link).then_some(component::Mode::Symlink);
        component(BStr::new(name), leaf_mode, options()).map_err(|source| {
            refuse(PathRefusal::Component {
                component: name.to_owned(),
                source,
            })
        })?;
        if leaf && is_link && is_git_read_file(name) {
            return Err(refuse(PathRefusal::SymlinkedGitFile {
                component: name.to_owned(),
            }));
        }
    }
    Ok(())
}

/// Checks both sides of `change`: the new path with the mode written there, and the
/// old path of a rename (or of a deletion) as a path only removed.
pub fn check_change(change: &Change) -> Result<(), ChangesError> {
    check_path(&change.path, change.new.map(|entry| entry.mode))?;
    if change.old_path() != change.path {
        check_path(change.old_path(), None)?;
    }
    Ok(())
}

/// Checks every change (see [`check_change`]); the first refused path is the error.
pub fn check_changes(changes: &[Change]) -> Result<(), ChangesError> {
    changes.iter().try_for_each(check_change)
}

/// Sets aside the changes a patch must not carry because git would refuse a path
/// of theirs ([`check_change`]): the others, and those as [`Uncarried`] with the
/// rule broken. A rename with one refused side is split into the deletion of its
/// old path and the addition of its new one, each judged on its own, so the side
/// git accepts is still carried.
pub fn split_refused(changes: Vec<Change>) -> (Vec<Change>, Vec<Uncarried>) {
    let mut carried = Vec::with_capacity(changes.len());
    let mut refused = Vec::new();
    let mut judge = |change: Change| match check_change(&change) {
        Ok(()) => carried.push(change),
        Err(err) => refused.push(Uncarried {
            path: change.path,
            kind: change.kind,
            reason: NotInPatch::RefusedByGit {
                rule: refusal_words(&err),
            },
        }),
    };
    for change in changes {
        match &change.kind {
            ChangeKind::Renamed { from } if check_change(&change).is_err() => {
                judge(Change {
                    path: from.clone(),
                    kind: ChangeKind::Deleted,
                    old: change.old,
                    new: None,
                });
                judge(Change {
                    path: change.path,
                    kind: ChangeKind::Added,
                    old: None,
                    new: change.new,
                });
            }
            _ => judge(change),
        }
    }
    carried.sort_by(|a, b| a.path.cmp(&b.path));
    refused.sort_by(|a, b| a.path.cmp(&b.path));
    (carried, refused)
}

/// The rule a refused path breaks, in words: the refusal and its causes, without
/// the path (the record names it).
fn refusal_words(err: &ChangesError) -> String {
    let mut words = Vec::new();
    let mut cause = std::error::Error::source(err);
    while let Some(next) = cause {
        words.push(next.to_string());
        cause = next.source();
    }
    words.join(": ")
}

/// Whether `name` is, on HFS+ or NTFS, one of the files git reads rules from.
fn is_git_read_file(name: &str) -> bool {
    [
        ("gitattributes", "gi7d29"),
        ("gitignore", "gi250a"),
        ("mailmap", "maba30"),
    ]
    .iter()
    .any(|(file, short)| is_dot_hfs(name, file) || is_dot_ntfs(name, file, short))
}

/// `.{file}` as HFS+ compares names: case-insensitively, ignoring the code points it
/// ignores (git's `is_hfs_dot_generic`).
fn is_dot_hfs(name: &str, file: &str) -> bool {
    let ignorable = |c: &char| {
        matches!(
            u32::from(*c),
            0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff
        )
    };
    let mut chars = name.chars().filter(|c| !ignorable(c));
    if chars.next() != Some('.') {
        return false;
    }
    let rest: String = chars.collect();
    rest.eq_ignore_ascii_case(file)
}

/// `.{file}` as NTFS resolves names: case-insensitively, with trailing spaces and
/// dots or an alternate data stream ignored, and its 8.3 short names (git's
/// `is_ntfs_dot_generic`).
fn is_dot_ntfs(name: &str, file: &str, short_prefix: &str) -> bool {
    let bytes = name.as_bytes();
    let done = |rest: &[u8]| {
        for &b in rest {
            if b == b':' {
                return true;
            }
            if b != b' ' && b != b'.' {
                return false;
            }
        }
        true
    };
    let file = file.as_bytes();
    if bytes.first() == Some(&b'.')
        && bytes
            .get(1..=file.len())
            .is_some_and(|n| n.eq_ignore_ascii_case(file))
    {
        return done(&bytes[file.len() + 1..]);
    }
    if bytes
        .get(..6)
        .zip(file.get(..6))
        .is_some_and(|(n, f)| n.eq_ignore_ascii_case(f))
        && bytes.get(6) == Some(&b'~')
        && bytes.get(7).is_some_and(|d| (b'1'..=b'4').contains(d))
    {
        return done(&bytes[8..]);
    }
    let short = short_prefix.as_bytes();
    let mut saw_tilde = false;
    let mut i = 0;
    while i < 8 {
        let Some(&b) = bytes.get(i) else {
            return false;
        };
        if saw_tilde {
            if !b.is_ascii_digit() {
                return false;
            }
        } else if b == b'~' {
            i += 1;
            if !bytes.get(i).is_some_and(|d| (b'1'..=b'9').contains(d)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || b & 0x80 != 0 || short.get(i) != Some(&b.to_ascii_lowercase()) {
            return false;
        }
        i += 1;
    }
    done(&bytes[8..])
}

#[cfg(test)]
mod tests {
    use workspace_core::boundary::ChangeKind;

    use super::{check_change, check_path};
    use crate::changes::{Change, ChangesError, Entry, MODE_FILE, MODE_SYMLINK};

    #[test]
    fn changes_validate_checks_both_sides_of_a_rename() {
        let entry = Entry::new(MODE_FILE, gix::ObjectId::empty_blob(gix::hash::Kind::Sha1));
        let rename = |from: &str, to: &str| Change {
            path: to.into(),
            kind: ChangeKind::Renamed { from: from.into() },
            old: Some(entry),
            new: Some(entry),
        };
        assert!(check_change(&rename("a.txt", "b.txt")).is_ok());
        for (from, to, at) in [(".GIT/x", "x", ".GIT/x"), ("x", "git~1/x", "git~1/x")] {
            let err = check_change(&rename(from, to)).unwrap_err();
            assert!(
                matches!(&err, ChangesError::RefusedPath { path, .. } if path == at),
                "{err:?}"
            );
        }
    }

    fn refused(path: &str, mode: u32) -> bool {
        matches!(
            check_path(path, Some(mode)),
            Err(ChangesError::RefusedPath { path: p, .. }) if p == path
        )
    }

    #[test]
    fn changes_validate_refuses_git_dirs_in_every_spelling() {
        for path in [
            ".git/config",
            ".GIT/hooks/post-checkout",
            ".git /hooks/x",
            ".git./x",
            "git~1/config",
            "a/.Git/x",
            ".g\u{200c}it/x",
            ".git::$INDEX_ALLOCATION/x",
            "a/../b",
            "./a",
            "a//b",
            "",
        ] {
            assert!(refused(path, MODE_FILE), "{path:?} accepted");
        }
        for path in [
            ".gitmodules",
            ".GITMODULES",
            "gitmod~1",
            ".gitattributes",
            "a/.gitignore",
            ".gitignore ",
            "gi250a~1",
            ".mailmap",
        ] {
            assert!(refused(path, MODE_SYMLINK), "symlinked {path:?} accepted");
            assert!(!refused(path, MODE_FILE), "file {path:?} refused");
        }
        for path in [
            "src/lib.rs",
            ".github/workflows/ci.yml",
            ".gitkeep",
            "say \"hi\".txt",
            "back\\slash.txt",
            "tab\there.txt",
            "aux.rs",
            "café/naïve file.txt",
            "git~10",
        ] {
            assert!(!refused(path, MODE_FILE), "{path:?} refused");
        }
    }
}
