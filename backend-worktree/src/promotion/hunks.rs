//! Line hunks of a text diff, in git's unified format, computed with gix's blob
//! diff (imara-diff, Myers with git's slider heuristics).

use gix::diff::blob::unified_diff::{ConsumeHunk, ContextSize, DiffLineKind, HunkHeader};
use gix::diff::blob::{Algorithm, InternedInput, UnifiedDiff, diff_with_slider_heuristics};

/// Appends the hunks turning `old` into `new` to `out`, with three lines of context;
/// a last line without a newline is followed by `\ No newline at end of file`.
pub fn write_hunks(out: &mut Vec<u8>, old: &[u8], new: &[u8]) -> std::io::Result<()> {
    let input = InternedInput::new(old, new);
    let diff = diff_with_slider_heuristics(Algorithm::Myers, &input);
    UnifiedDiff::new(&diff, &input, Sink { out }, ContextSize::symmetrical(3)).consume()
}

struct Sink<'a> {
    out: &'a mut Vec<u8>,
}

impl ConsumeHunk for Sink<'_> {
    type Out = ();

    fn consume_hunk(
        &mut self,
        header: HunkHeader,
        lines: &[(DiffLineKind, &[u8])],
    ) -> std::io::Result<()> {
        let old = range(header.before_hunk_start, header.before_hunk_len);
        let new = range(header.after_hunk_start, header.after_hunk_len);
        self.out
            .extend_from_slice(format!("@@ -{old} +{new} @@\n").as_bytes());
        for (kind, line) in lines {
            self.out.push(kind.to_prefix() as u8);
            self.out.extend_from_slice(line);
            if !line.ends_with(b"\n") {
                self.out
                    .extend_from_slice(b"\n\\ No newline at end of file\n");
            }
        }
        Ok(())
    }

    fn finish(self) -> Self::Out {}
}

/// Git's hunk range: `start` alone for one line, `start-1,0` for an empty range
/// (the line before which nothing is), `start,len` otherwise.
fn range(start: u32, len: u32) -> String {
    match len {
        0 => format!("{},0", start.saturating_sub(1)),
        1 => start.to_string(),
        _ => format!("{start},{len}"),
    }
}

#[cfg(test)]
mod tests {
    use super::write_hunks;

    fn hunks(old: &str, new: &str) -> String {
        let mut out = Vec::new();
        write_hunks(&mut out, old.as_bytes(), new.as_bytes()).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn promotion_hunks_like_git() {
        assert_eq!(hunks("", "a\nb\n"), "@@ -0,0 +1,2 @@\n+a\n+b\n");
        assert_eq!(hunks("a\n", ""), "@@ -1 +0,0 @@\n-a\n");
        assert_eq!(
            hunks("a\nb", "a\nb\n"),
            "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
        );
        let old: String = (1..=10).map(|i| format!("{i}\n")).collect();
        let new = old.replace("5\n", "five\n");
        assert_eq!(
            hunks(&old, &new),
            "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }
}
