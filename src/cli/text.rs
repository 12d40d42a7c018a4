//! Text for one line of stderr: the bottom floor every subcommand's messages use.

/// Text on one line: newlines become "; ".
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
