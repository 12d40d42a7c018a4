//! What a run's patch must not show: a credential's value in a changed file's
//! content, or in a changed path's name.
//!
//! A value in a file's content withholds that file's section body (its header
//! stays: the name is fine). A value in a name withholds more: the section's
//! header names the path, so the whole section leaves `diff.patch`, and
//! `changes.json` lists the change with the name redacted, as not in the patch
//! ([`NotInPatch::CredentialInName`]). Either way the leak is reported (with the
//! path as shown, redacted) and the run is not promoted.

use crate::boundary::{ChangeKind, ChangedPath, NotInPatch, PatchExport};

use super::credential_leaks::CredentialLeak;
use super::patch_reading::{changed_between, drop_sections, withhold};
use super::scrub::Scrubber;

/// Withholds from `patch` every change whose name, and every file whose content,
/// holds a value of `scrubber`'s credentials (the digest follows); returns what
/// was found, names first.
pub(super) fn withhold_leaks(patch: &mut PatchExport, scrubber: &Scrubber) -> Vec<CredentialLeak> {
    if scrubber.is_empty() {
        return Vec::new();
    }
    let mut leaks = withhold_names(patch, scrubber);
    let in_content = scrubber.leaks_in(&patch.patch);
    if !in_content.is_empty() {
        let paths: Vec<&str> = in_content.iter().map(|leak| leak.path.as_str()).collect();
        patch.patch = withhold(
            &patch.patch,
            &paths,
            "it holds the value of a credential the run was given",
        );
    }
    leaks.extend(in_content);
    patch.patch_sha256 = crate::digest::sha256_hex(&patch.patch);
    leaks
}

/// Takes every change whose path (or the path it was renamed from) holds a
/// credential's value out of `patch.patch`, whole, and marks it in
/// `patch.changes` as not in the patch, its names redacted.
fn withhold_names(patch: &mut PatchExport, scrubber: &Scrubber) -> Vec<CredentialLeak> {
    let mut leaks = Vec::new();
    for change in &mut patch.changes {
        let from = match &change.change {
            ChangeKind::Renamed { from } => Some(from.as_str()),
            _ => None,
        };
        let Some((credential, form)) = scrubber
            .credential_in(change.path.as_bytes())
            .or_else(|| from.and_then(|from| scrubber.credential_in(from.as_bytes())))
        else {
            continue;
        };
        change.path = scrubber.redact(&change.path);
        if let ChangeKind::Renamed { from } = &mut change.change {
            *from = scrubber.redact(from);
        }
        change.not_in_patch = Some(NotInPatch::CredentialInName {
            credential: credential.clone(),
        });
        leaks.push(CredentialLeak {
            credential,
            path: change.path.clone(),
            form,
        });
    }
    if !leaks.is_empty() {
        // A section's first line names its paths (both sides of a rename), in
        // the patch's quoting: one that holds a value in any form goes whole.
        patch.patch = drop_sections(&patch.patch, |header| {
            scrubber.credential_in(header).is_some()
        });
    }
    leaks
}

/// The paths whose part of the export differs between `before` and `after`: a
/// section of the patch added, removed or changed, or a change the patch does
/// not carry listed in one and not the other (such a change's content is not
/// compared: the run is not promoted with one anyway). Sorted, without
/// repetition.
pub(super) fn changed_between_exports(before: &PatchExport, after: &PatchExport) -> Vec<String> {
    let mut changed = changed_between(&before.patch, &after.patch);
    let uncarried = |export: &PatchExport| -> Vec<ChangedPath> {
        export
            .changes
            .iter()
            .filter(|c| c.not_in_patch.is_some())
            .cloned()
            .collect()
    };
    let (was, now) = (uncarried(before), uncarried(after));
    changed.extend(
        was.iter()
            .filter(|c| !now.contains(c))
            .chain(now.iter().filter(|c| !was.contains(c)))
            .map(|c| c.path.clone()),
    );
    changed.sort();
    changed.dedup();
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boundary::IssuedCredential;

    const TOKEN: &str = "tok-1234567890";

    fn change(path: &str, kind: ChangeKind) -> ChangedPath {
        ChangedPath {
            path: path.into(),
            change: kind,
            in_scope: true,
            ignored: false,
            not_in_patch: None,
        }
    }

    #[test]
    fn a_name_holding_a_value_leaves_the_patch_whole_and_is_listed_redacted() {
        let scrubber = Scrubber::new(&[IssuedCredential::new("TOKEN", TOKEN, 0)]);
        let hex: String = TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
        let text = format!(
            "diff --git a/fine b/fine\n+ok\n\
             diff --git a/f-{TOKEN} b/f-{TOKEN}\nnew file mode 100644\n+x\n\
             diff --git a/old b/d-{hex}/moved\nrename from old\nrename to d-{hex}/moved\n"
        );
        let mut patch = PatchExport {
            patch: text.into_bytes(),
            patch_sha256: String::new(),
            changes: vec![
                change("fine", ChangeKind::Modified),
                change(&format!("f-{TOKEN}"), ChangeKind::Added),
                change(
                    &format!("d-{hex}/moved"),
                    ChangeKind::Renamed { from: "old".into() },
                ),
            ],
        };
        let leaks = withhold_leaks(&mut patch, &scrubber);
        let shown = String::from_utf8_lossy(&patch.patch);
        assert_eq!(shown, "diff --git a/fine b/fine\n+ok\n");
        assert_eq!(patch.patch_sha256, crate::digest::sha256_hex(&patch.patch));
        let paths: Vec<(&str, Option<&NotInPatch>)> = patch
            .changes
            .iter()
            .map(|c| (c.path.as_str(), c.not_in_patch.as_ref()))
            .collect();
        let withheld = NotInPatch::CredentialInName {
            credential: "TOKEN".into(),
        };
        assert_eq!(
            paths,
            [
                ("fine", None),
                ("f-[redacted:TOKEN]", Some(&withheld)),
                ("d-[redacted:TOKEN]/moved", Some(&withheld)),
            ]
        );
        assert_eq!(leaks.len(), 2, "{leaks:?}");
        assert!(
            leaks
                .iter()
                .all(|l| !l.path.contains(TOKEN) && !l.path.contains(&hex))
        );
    }

    #[test]
    fn a_change_the_patch_does_not_carry_counts_as_a_difference_between_exports() {
        let mut refused = change(".GIT/x", ChangeKind::Added);
        refused.not_in_patch = Some(NotInPatch::NotUtf8);
        let before = PatchExport {
            patch: b"diff --git a/a b/a\n+1\n".to_vec(),
            patch_sha256: String::new(),
            changes: vec![change("a", ChangeKind::Added)],
        };
        let mut after = before.clone();
        assert!(changed_between_exports(&before, &after).is_empty());
        after.changes.push(refused);
        assert_eq!(changed_between_exports(&before, &after), [".GIT/x"]);
    }
}
