//! Text the CLI composes for a terminal: the bottom floor every subcommand's
//! messages use.
//!
//! Much of what a message quotes was written by a workspace: a service's log,
//! a check's failure, a command's error, the name of a file it made, what its
//! probe saw. A terminal acts on some characters instead of showing them:
//! `ESC ] 0 ; … BEL` sets the window title, `ESC [ 2 J` clears the screen,
//! `ESC ] 52 ; c ; …` writes the clipboard, a carriage return or a backspace
//! overwrites what the message said before, a bidirectional override reorders
//! it. So every such piece passes through [`escaped`] (or [`one_line`], which
//! uses it) before it is printed. What is not escaped is a command's own
//! output that `run`, `exec` and `logs` pass through: it is the command's, byte
//! for byte, as a terminal program's output is.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every character a terminal would act on, or that hides or
/// reorders what follows, written as an escape a reader sees: `\n`, `\r`,
/// `\x1b` (C0 controls and DEL), `\u{9b}` (C1 controls), `\u{202e}`
/// (bidirectional controls, zero-width characters, line and paragraph
/// separators). A tab is left as it is (it only moves to the next column),
/// and so is a backslash: the text stays as readable as it was written; the
/// evidence keeps the exact bytes.
pub(crate) fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether a terminal would act on `c`, or `c` would hide or reorder the
/// text around it.
fn needs_escape(c: char) -> bool {
    match c {
        '\t' => false,
        // C0, DEL and C1 (`\u{9b}` is a CSI to some terminals).
        c if c.is_control() => true,
        // Arabic letter mark; zero-width space, non-joiner, joiner; left-to-right
        // and right-to-left marks; line and paragraph separators; embeddings,
        // overrides and isolates; word joiner and invisible operators;
        // zero-width no-break space (BOM).
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' => true,
        '\u{2060}'..='\u{2069}' | '\u{feff}' => true,
        _ => false,
    }
}

/// Text on one line of a terminal: its lines joined with "; " (blank ones
/// dropped, each trimmed), each [`escaped`].
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(escaped)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Text on as many lines as it has (a parser's error pointing into a file),
/// each line [`escaped`].
pub(crate) fn escaped_lines(text: &str) -> String {
    text.lines().map(escaped).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::{escaped, escaped_lines, one_line};

    #[test]
    fn what_a_terminal_would_act_on_is_shown_escaped() {
        let log = "ok\x1b]0;pwned\x07title\x1b[2Jclear\x1b]52;c;ZXZpbA==\x07abc\rXY\x08Z\x7f";
        assert_eq!(
            escaped(log),
            "ok\\x1b]0;pwned\\x07title\\x1b[2Jclear\\x1b]52;c;ZXZpbA==\\x07abc\\rXY\\x08Z\\x7f"
        );
        assert_eq!(escaped("a\u{9b}2Jb"), "a\\u{9b}2Jb");
        assert_eq!(escaped("evil\u{202e}txt.exe"), "evil\\u{202e}txt.exe");
        assert_eq!(
            escaped("zero\u{200b}width\u{feff}"),
            "zero\\u{200b}width\\u{feff}"
        );
        assert_eq!(escaped("two\nlines"), "two\\nlines");
        assert!(
            !escaped(log).chars().any(|c| c.is_control() && c != '\t'),
            "no control character is left"
        );
    }

    #[test]
    fn ordinary_text_is_left_as_it_is() {
        for text in [
            "stderr| listening on 127.0.0.1:8000 (pid 42)",
            "café, naïve, 日本語, emoji 🚀",
            "a\ttab, a \\ backslash, \"quotes\"",
        ] {
            assert!(matches!(escaped(text), std::borrow::Cow::Borrowed(_)));
            assert_eq!(escaped(text), text);
        }
    }

    #[test]
    fn escaped_lines_keeps_the_lines() {
        assert_eq!(
            escaped_lines("line 1\n  | a\x1b[2Jb\r\n  |  ^"),
            "line 1\n  | a\\x1b[2Jb\n  |  ^"
        );
    }

    #[test]
    fn one_line_joins_lines_and_escapes_each() {
        assert_eq!(
            one_line("service s: exited\n\nstderr| \x1b[31mred\x1b[0m\r\nstderr| a\rb\n"),
            "service s: exited; stderr| \\x1b[31mred\\x1b[0m; stderr| a\\rb"
        );
    }
}
