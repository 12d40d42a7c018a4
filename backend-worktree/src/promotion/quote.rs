//! Git's quoting of path names in patch headers (`core.quotePath`, the default).
//!
//! A name is quoted, as a whole and with its `a/` or `b/` prefix, when it contains a
//! byte below 0x20, `"`, `\`, DEL (0x7f) or any byte of 0x80 and above (so every
//! non-ASCII UTF-8 name): `"caf\303\251"`. Inside the quotes `"` and `\` are
//! backslash-escaped, `\a \b \t \n \v \f \r` are used for those controls and every
//! other such byte is a three-digit octal escape. Spaces alone are not quoted.

/// Whether git quotes `name`.
pub fn needs_quoting(name: &str) -> bool {
    name.bytes()
        .any(|b| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x7f)
}

/// `prefix` followed by `name`, quoted as git does when needed.
pub fn quote_path(prefix: &str, name: &str) -> String {
    let full = format!("{prefix}{name}");
    if !needs_quoting(&full) {
        return full;
    }
    let mut out = String::with_capacity(full.len() + 8);
    out.push('"');
    for byte in full.bytes() {
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b if !(0x20..0x7f).contains(&b) => out.push_str(&format!("\\{b:03o}")),
            b => out.push(char::from(b)),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::quote_path;

    #[test]
    fn promotion_quote_matches_git() {
        assert_eq!(quote_path("a/", "plain name.txt"), "a/plain name.txt");
        assert_eq!(quote_path("a/", "café"), "\"a/caf\\303\\251\"");
        assert_eq!(quote_path("b/", "q\"b\\s"), "\"b/q\\\"b\\\\s\"");
        assert_eq!(quote_path("", "tab\there\n"), "\"tab\\there\\n\"");
        assert_eq!(quote_path("", "del\x7f\x01"), "\"del\\177\\001\"");
    }
}
