//! Field checks shared by the sections: workspace-relative paths, host paths, names.
//!
//! These run on strings from a contract, before any backend touches the file
//! system, so a reviewer sees every problem at once. They are the first line only:
//! backends still resolve every path under a capability at use time, because a
//! string that is clean here can still meet a symlink planted on disk.

use super::problem::Problems;

/// Checks a path relative to the workspace root and returns its normalized form
/// (`"."` for the root, no trailing `/`), or records why it is unusable.
pub(crate) fn relative_path(problems: &mut Problems, field: &str, value: &str) -> Option<String> {
    match normalize_relative(value) {
        Ok(normalized) => Some(normalized),
        Err(reason) => {
            problems.push(field, format!("{value:?} {reason}"));
            None
        }
    }
}

/// The normalized form of a workspace-relative path, or why it has none.
pub(crate) fn normalize_relative(value: &str) -> Result<String, String> {
    if value.is_empty() {
        return Err("is empty; write \".\" for the whole workspace".into());
    }
    if value.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    if value.starts_with('/') {
        return Err("is absolute; paths here are relative to the workspace root".into());
    }
    let trimmed = value.strip_suffix('/').unwrap_or(value);
    if trimmed == "." {
        return Ok(".".into());
    }
    let mut depth: i64 = 0;
    let mut escapes = false;
    let mut unnormalized = false;
    for component in trimmed.split('/') {
        match component {
            ".." => {
                depth -= 1;
                escapes |= depth < 0;
                unnormalized = true;
            }
            "" | "." => unnormalized = true,
            _ => depth += 1,
        }
    }
    if escapes {
        Err("leads outside the workspace root".into())
    } else if unnormalized {
        Err("is not normalized (empty, \".\" or \"..\" components); write the plain path".into())
    } else {
        Ok(trimmed.to_owned())
    }
}

/// Checks an absolute path on the host (or inside the sandbox) for use as a mount.
pub(crate) fn absolute_path(problems: &mut Problems, field: &str, value: &str) -> bool {
    let reason = if value.is_empty() {
        Some("is empty")
    } else if value.contains('\0') {
        Some("contains a NUL byte")
    } else if !value.starts_with('/') {
        Some("is not absolute")
    } else if value
        .split('/')
        .skip(1)
        .any(|c| c == ".." || c == "." || c.is_empty())
        && value != "/"
    {
        Some("is not normalized (empty, \".\" or \"..\" components)")
    } else if value == "/" {
        Some("is the whole file system")
    } else if is_under(value, "/proc") {
        Some("is under /proc, whose entries alias other processes' roots and files")
    } else {
        None
    };
    match reason {
        Some(reason) => {
            problems.push(field, format!("{value:?} {reason}"));
            false
        }
        None => true,
    }
}

/// Whether absolute or relative `path` is `parent` or lies below it.
pub(crate) fn is_under(path: &str, parent: &str) -> bool {
    if parent == "." {
        return true;
    }
    path == parent
        || path
            .strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with('/') || parent.ends_with('/'))
}

/// Checks a lease name (cache prefix): 1 to 63 of `[A-Za-z0-9_-]`.
pub(crate) fn lease_name(problems: &mut Problems, field: &str, value: &str) {
    let ok = (1..=63).contains(&value.len())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        problems.push(
            field,
            format!("{value:?} is not a lease name: use 1 to 63 of A-Z a-z 0-9 _ -"),
        );
    }
}

/// Checks an unquoted SQL identifier: `[a-z_][a-z0-9_]{0,62}`.
pub(crate) fn sql_identifier(problems: &mut Problems, field: &str, value: &str) {
    let mut bytes = value.bytes();
    let ok = value.len() <= 63
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        problems.push(
            field,
            format!(
                "{value:?} is not a schema name: start with a-z or _, then a-z 0-9 _, at most 63"
            ),
        );
    }
}

/// Checks an environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub(crate) fn env_name(problems: &mut Problems, field: &str, value: &str) -> bool {
    let mut bytes = value.bytes();
    let ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        problems.push(
            field,
            format!("{value:?} is not an environment variable name"),
        );
    }
    ok
}

/// Checks that a name is non-empty and unique among `seen`, recording both problems.
pub(crate) fn unique_name<'a>(
    problems: &mut Problems,
    field: &str,
    value: &'a str,
    seen: &mut Vec<&'a str>,
    what: &str,
) {
    if value.trim().is_empty() {
        problems.push(field, format!("{what} name is empty"));
    } else if seen.contains(&value) {
        problems.push(field, format!("duplicate {what} name {value:?}"));
    } else {
        seen.push(value);
    }
}

/// Checks a command line: at least the program, no empty program, no NUL.
pub(crate) fn command(problems: &mut Problems, field: &str, argv: &[String]) {
    match argv.first() {
        None => problems.push(field, "command is empty; give at least the program"),
        Some(program) if program.trim().is_empty() => {
            problems.push(format!("{field}[0]"), "program is empty")
        }
        Some(_) => {}
    }
    for (i, arg) in argv.iter().enumerate() {
        if arg.contains('\0') {
            problems.push(format!("{field}[{i}]"), "contains a NUL byte");
        }
    }
}

/// Names that look like credentials when used as plain environment variables.
pub(crate) fn looks_like_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "PRIVATE_KEY",
        "CREDENTIAL",
    ]
    .iter()
    .any(|marker| upper.contains(marker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_normalize_or_explain() {
        assert_eq!(normalize_relative("."), Ok(".".into()));
        assert_eq!(normalize_relative("./"), Ok(".".into()));
        assert_eq!(normalize_relative("src/"), Ok("src".into()));
        assert_eq!(normalize_relative("a/b"), Ok("a/b".into()));
        assert!(normalize_relative("../x").is_err_and(|e| e.contains("outside")));
        assert!(normalize_relative("a/../../x").is_err_and(|e| e.contains("outside")));
        assert!(normalize_relative("a/../b").is_err_and(|e| e.contains("normalized")));
        assert!(normalize_relative("a//b").is_err_and(|e| e.contains("normalized")));
        assert!(normalize_relative("/etc").is_err_and(|e| e.contains("absolute")));
        assert!(normalize_relative("").is_err());
        assert!(normalize_relative("a\0b").is_err_and(|e| e.contains("NUL")));
    }

    #[test]
    fn under_is_component_wise() {
        assert!(is_under("src/lib.rs", "src"));
        assert!(is_under("src", "src"));
        assert!(!is_under("srcx", "src"));
        assert!(is_under("anything", "."));
        assert!(is_under("/proc/1/root", "/proc"));
        assert!(!is_under("/procfs", "/proc"));
    }

    #[test]
    fn absolute_paths_refuse_proc_root_and_dots() {
        for bad in [
            "",
            "rel",
            "/",
            "/a/../b",
            "/a//b",
            "/proc/self/root",
            "/proc",
        ] {
            let mut p = Problems::new();
            assert!(!absolute_path(&mut p, "f", bad), "{bad:?}");
            assert_eq!(p.len(), 1);
        }
        let mut p = Problems::new();
        assert!(absolute_path(&mut p, "f", "/var/cache/cargo"));
        assert!(p.is_empty());
    }
}
