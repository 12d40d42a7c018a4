//! Comparing two flat listings (base tree and workspace) into changes.
//!
//! This is pure data in, data out: the listings may come from a tree and a walk of
//! a checkout ([`super::workspace_changes`]), or from anything else that yields
//! path -> (mode, blob id), such as the upper directory of an overlayfs mount
//! merged over its base tree.

use std::collections::BTreeMap;

use workspace_core::boundary::ChangeKind;

use super::{Change, Entry};

/// Compares `base` with `current` and returns the changes sorted by path.
///
/// * a path only in `current` is [`ChangeKind::Added`], only in `base`
///   [`ChangeKind::Deleted`];
/// * same path, different blob: [`ChangeKind::Modified`] (also when the mode
///   changed with it); same blob, different mode: [`ChangeKind::ModeChanged`];
///   a file replaced by a symlink or back is a type change
///   ([`Change::is_type_change`]), reported as `Modified` (or `ModeChanged` if the
///   blob happens to be equal) and exported as a deletion plus an addition;
/// * an exact rename: a deleted and an added path with the same non-empty blob of
///   the same type (file or symlink) become one [`ChangeKind::Renamed`]. When
///   several paths share a blob, deleted and added paths are paired in sorted
///   order, so the result is deterministic. Empty blobs are never paired (as in git).
pub fn compare(base: &BTreeMap<String, Entry>, current: &BTreeMap<String, Entry>) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut deleted: Vec<(&String, &Entry)> = Vec::new();
    let mut added: Vec<(&String, &Entry)> = Vec::new();
    for (path, old) in base {
        match current.get(path) {
            None => deleted.push((path, old)),
            Some(new) if new == old => {}
            Some(new) => {
                let kind = if new.id == old.id {
                    ChangeKind::ModeChanged
                } else {
                    ChangeKind::Modified
                };
                changes.push(Change {
                    path: path.clone(),
                    kind,
                    old: Some(*old),
                    new: Some(*new),
                });
            }
        }
    }
    for (path, new) in current {
        if !base.contains_key(path) {
            added.push((path, new));
        }
    }

    let empty = gix::ObjectId::empty_blob(gix::hash::Kind::Sha1);
    let mut candidates: BTreeMap<(gix::ObjectId, bool), Vec<usize>> = BTreeMap::new();
    for (i, (_, entry)) in deleted.iter().enumerate() {
        if entry.id != empty {
            candidates
                .entry((entry.id, entry.is_symlink()))
                .or_default()
                .push(i);
        }
    }
    let mut paired = vec![false; deleted.len()];
    for (path, new) in &added {
        let source = candidates
            .get_mut(&(new.id, new.is_symlink()))
            .and_then(|list| (!list.is_empty()).then(|| list.remove(0)));
        match source {
            Some(i) => {
                paired[i] = true;
                let (from, old) = deleted[i];
                changes.push(Change {
                    path: (*path).clone(),
                    kind: ChangeKind::Renamed { from: from.clone() },
                    old: Some(*old),
                    new: Some(**new),
                });
            }
            None => changes.push(Change {
                path: (*path).clone(),
                kind: ChangeKind::Added,
                old: None,
                new: Some(**new),
            }),
        }
    }
    for (i, (path, old)) in deleted.iter().enumerate() {
        if !paired[i] {
            changes.push(Change {
                path: (*path).clone(),
                kind: ChangeKind::Deleted,
                old: Some(**old),
                new: None,
            });
        }
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use workspace_core::boundary::ChangeKind;

    use super::compare;
    use crate::changes::{Entry, MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK};

    fn id(content: &[u8]) -> gix::ObjectId {
        gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, content).unwrap()
    }

    fn listing(entries: &[(&str, u32, &[u8])]) -> BTreeMap<String, Entry> {
        entries
            .iter()
            .map(|(p, m, c)| ((*p).to_owned(), Entry::new(*m, id(c))))
            .collect()
    }

    #[test]
    fn changes_compare_classifies_every_kind() {
        let base = listing(&[
            ("same", MODE_FILE, b"s"),
            ("mod", MODE_FILE, b"a"),
            ("exec", MODE_FILE, b"x"),
            ("gone", MODE_FILE, b"g"),
            ("old-name", MODE_FILE, b"moved"),
            ("typed", MODE_FILE, b"t"),
            ("empty-a", MODE_FILE, b""),
        ]);
        let current = listing(&[
            ("same", MODE_FILE, b"s"),
            ("mod", MODE_FILE, b"b"),
            ("exec", MODE_EXECUTABLE, b"x"),
            ("new", MODE_FILE, b"n"),
            ("new-name", MODE_FILE, b"moved"),
            ("typed", MODE_SYMLINK, b"target"),
            ("empty-b", MODE_FILE, b""),
        ]);
        let kinds: Vec<(String, ChangeKind)> = compare(&base, &current)
            .into_iter()
            .map(|c| (c.path, c.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("empty-a".into(), ChangeKind::Deleted),
                ("empty-b".into(), ChangeKind::Added),
                ("exec".into(), ChangeKind::ModeChanged),
                ("gone".into(), ChangeKind::Deleted),
                ("mod".into(), ChangeKind::Modified),
                ("new".into(), ChangeKind::Added),
                (
                    "new-name".into(),
                    ChangeKind::Renamed {
                        from: "old-name".into()
                    }
                ),
                ("typed".into(), ChangeKind::Modified),
            ]
        );
    }

    #[test]
    fn changes_compare_pairs_renames_deterministically() {
        let base = listing(&[("a1", MODE_FILE, b"same"), ("a2", MODE_FILE, b"same")]);
        let current = listing(&[
            ("b1", MODE_FILE, b"same"),
            ("b2", MODE_FILE, b"same"),
            ("b3", MODE_FILE, b"same"),
        ]);
        let kinds: Vec<(String, ChangeKind)> = compare(&base, &current)
            .into_iter()
            .map(|c| (c.path, c.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("b1".into(), ChangeKind::Renamed { from: "a1".into() }),
                ("b2".into(), ChangeKind::Renamed { from: "a2".into() }),
                ("b3".into(), ChangeKind::Added),
            ]
        );
    }
}
