//! Reading the git-style patches a promotion boundary exports: their `diff
//! --git` sections by path, and what their `GIT binary patch` literals hold.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

/// Git's base85 alphabet.
const ALPHABET: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// The most bytes one literal is inflated to (a larger one is read up to this).
const MAX_LITERAL: u64 = 64 << 20;

/// A git-style patch cut into its `diff --git` sections, by the path each names.
pub(super) fn sections(patch: &[u8]) -> BTreeMap<String, &[u8]> {
    spans(patch)
        .into_iter()
        .map(|(path, span)| (path, &patch[span]))
        .collect()
}

/// `patch` with the body of each section about one of `paths` replaced by one
/// line saying why (`# withheld: WHY`); the other sections as they were.
pub(super) fn withhold(patch: &[u8], paths: &[&str], why: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(patch.len());
    let mut at = 0;
    for (path, span) in spans(patch) {
        out.extend_from_slice(&patch[at..span.start]);
        let section = &patch[span.clone()];
        if paths.contains(&path.as_str()) {
            let header_end = section
                .iter()
                .position(|b| *b == b'\n')
                .map_or(section.len(), |i| i + 1);
            out.extend_from_slice(&section[..header_end]);
            out.extend_from_slice(format!("# withheld: {why}\n").as_bytes());
        } else {
            out.extend_from_slice(section);
        }
        at = span.end;
    }
    out.extend_from_slice(&patch[at..]);
    out
}

/// `patch` without the sections whose `diff --git` line (it names both paths of
/// the section) `drop` picks; the other sections, and any text before the first,
/// as they were.
pub(super) fn drop_sections(patch: &[u8], drop: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(patch.len());
    let mut at = 0;
    for (_, span) in spans(patch) {
        out.extend_from_slice(&patch[at..span.start]);
        let section = &patch[span.clone()];
        let header_end = section
            .iter()
            .position(|b| *b == b'\n')
            .map_or(section.len(), |i| i + 1);
        if !drop(&section[..header_end]) {
            out.extend_from_slice(section);
        }
        at = span.end;
    }
    out.extend_from_slice(&patch[at..]);
    out
}

/// Each `diff --git` section of `patch` in order: the path it names and where
/// it lies.
fn spans(patch: &[u8]) -> Vec<(String, std::ops::Range<usize>)> {
    const HEADER: &[u8] = b"diff --git ";
    let mut starts: Vec<usize> = Vec::new();
    let mut line_start = 0;
    for (i, byte) in patch.iter().enumerate() {
        if i == line_start && patch[i..].starts_with(HEADER) {
            starts.push(i);
        }
        if *byte == b'\n' {
            line_start = i + 1;
        }
    }
    let mut spans = Vec::with_capacity(starts.len());
    for (n, &start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(patch.len());
        let section = &patch[start..end];
        let header_end = section
            .iter()
            .position(|b| *b == b'\n')
            .unwrap_or(section.len());
        let header = String::from_utf8_lossy(&section[HEADER.len()..header_end]);
        spans.push((section_path(&header), start..end));
    }
    spans
}

/// The paths whose `diff --git` section differs between two patches (added,
/// removed or changed), sorted.
pub(super) fn changed_between(before: &[u8], after: &[u8]) -> Vec<String> {
    let (before, after) = (sections(before), sections(after));
    let mut changed = BTreeSet::new();
    for (path, text) in &before {
        if after.get(path) != Some(text) {
            changed.insert(path.clone());
        }
    }
    changed.extend(
        after
            .keys()
            .filter(|path| !before.contains_key(*path))
            .cloned(),
    );
    changed.into_iter().collect()
}

/// The new path a section header (`a/OLD b/NEW`, either side quoted when it has
/// special characters) names.
fn section_path(header: &str) -> String {
    if let Some(at) = header.rfind(" \"b/") {
        return header[at + 4..].trim_end_matches('"').to_owned();
    }
    match header.rfind(" b/") {
        Some(at) => header[at + 3..].to_owned(),
        None => header.to_owned(),
    }
}

/// The contents of each `literal` block of a section's `GIT binary patch` (a
/// block that does not decode is left out: it cannot hide anything `git apply`
/// would write either).
pub(super) fn binary_literals(section: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(section);
    let mut lines = text.lines();
    let mut contents = Vec::new();
    while let Some(line) = lines.next() {
        if !line.starts_with("literal ") {
            continue;
        }
        let mut deflated = Vec::new();
        let mut intact = true;
        for data in lines.by_ref().take_while(|l| !l.is_empty()) {
            intact &= decode_line(data, &mut deflated);
        }
        let mut inflated = Vec::new();
        let read = flate2::read::ZlibDecoder::new(deflated.as_slice())
            .take(MAX_LITERAL)
            .read_to_end(&mut inflated);
        if intact && read.is_ok() {
            contents.push(inflated);
        }
    }
    contents
}

/// Appends the bytes of one base85 line (its first character is its length:
/// `A`-`Z` 1-26, `a`-`z` 27-52); `false` if it is malformed.
fn decode_line(line: &str, out: &mut Vec<u8>) -> bool {
    let bytes = line.as_bytes();
    let len = match bytes.first() {
        Some(b @ b'A'..=b'Z') => usize::from(b - b'A' + 1),
        Some(b @ b'a'..=b'z') => usize::from(b - b'a' + 27),
        _ => return false,
    };
    let mut decoded = Vec::with_capacity(len + 3);
    for group in bytes[1..].chunks(5) {
        let mut acc: u64 = 0;
        for &c in group {
            let Some(digit) = ALPHABET.iter().position(|&a| a == c) else {
                return false;
            };
            acc = acc * 85 + digit as u64;
        }
        let Ok(word) = u32::try_from(acc) else {
            return false;
        };
        decoded.extend_from_slice(&word.to_be_bytes());
    }
    if decoded.len() < len {
        return false;
    }
    out.extend_from_slice(&decoded[..len]);
    true
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const ONE: &str = "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n";
    const TWO: &str = "diff --git a/b c/d b/b c/d\nnew file mode 100644\n";

    #[test]
    fn the_same_patch_changes_nothing() {
        let patch = format!("{ONE}{TWO}");
        assert!(changed_between(patch.as_bytes(), patch.as_bytes()).is_empty());
        assert!(changed_between(b"", b"").is_empty());
    }

    #[test]
    fn an_edited_added_or_removed_section_names_its_path() {
        let edited = ONE.replace("+y", "+y\n+sneaky");
        let before = format!("{ONE}{TWO}");
        assert_eq!(
            changed_between(before.as_bytes(), format!("{edited}{TWO}").as_bytes()),
            ["a"]
        );
        assert_eq!(
            changed_between(ONE.as_bytes(), before.as_bytes()),
            ["b c/d"]
        );
        assert_eq!(changed_between(before.as_bytes(), b""), ["a", "b c/d"]);
    }

    #[test]
    fn a_withheld_section_keeps_its_header_and_the_others_stay_as_they_were() {
        let patch = "diff --git a/a b/a\n+secret\ndiff --git a/b b/b\n+fine\n";
        let out = withhold(patch.as_bytes(), &["a"], "it holds a credential");
        assert_eq!(
            String::from_utf8_lossy(&out),
            "diff --git a/a b/a\n# withheld: it holds a credential\ndiff --git a/b b/b\n+fine\n"
        );
        assert_eq!(withhold(patch.as_bytes(), &[], "-"), patch.as_bytes());
    }

    #[test]
    fn dropped_sections_leave_whole_and_the_others_stay_as_they_were() {
        let patch = "diff --git a/a b/a\n+one\ndiff --git a/x-tok b/x-tok\n+two\n";
        let out = drop_sections(patch.as_bytes(), |header| {
            String::from_utf8_lossy(header).contains("tok")
        });
        assert_eq!(String::from_utf8_lossy(&out), "diff --git a/a b/a\n+one\n");
        assert_eq!(drop_sections(patch.as_bytes(), |_| false), patch.as_bytes());
    }

    #[test]
    fn quoted_headers_name_the_new_path() {
        assert_eq!(section_path("\"a/t\\tx\" \"b/t\\tx\""), "t\\tx");
        assert_eq!(section_path("a/old b/new"), "new");
    }

    /// A literal block as backend-worktree writes it.
    fn literal(content: &[u8]) -> String {
        let mut encoder =
            flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(content).unwrap_or_else(|e| panic!("{e}"));
        let deflated = encoder.finish().unwrap_or_else(|e| panic!("{e}"));
        let mut text = format!("literal {}\n", content.len());
        for chunk in deflated.chunks(52) {
            let len = u8::try_from(chunk.len()).unwrap_or(52);
            text.push(char::from(if len <= 26 {
                b'A' + len - 1
            } else {
                b'a' + len - 27
            }));
            for group in chunk.chunks(4) {
                let mut acc: u32 = 0;
                for i in 0..4 {
                    acc = (acc << 8) | u32::from(group.get(i).copied().unwrap_or(0));
                }
                let mut chars = [0u8; 5];
                for slot in chars.iter_mut().rev() {
                    *slot = ALPHABET[(acc % 85) as usize];
                    acc /= 85;
                }
                text.push_str(std::str::from_utf8(&chars).unwrap_or_default());
            }
            text.push('\n');
        }
        text.push('\n');
        text
    }

    #[test]
    fn binary_literals_come_back_as_they_were() {
        let content: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
        let section = format!(
            "diff --git a/b.bin b/b.bin\nGIT binary patch\n{}{}",
            literal(&content),
            literal(b"")
        );
        assert_eq!(binary_literals(section.as_bytes()), [content, Vec::new()]);
        assert!(binary_literals(b"literal 3\n!!!!\n\n").is_empty());
    }
}
