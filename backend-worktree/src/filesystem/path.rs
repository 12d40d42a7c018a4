//! Parsing the path strings an agent (or a contract) hands in.

use std::path::{Path, PathBuf};

use super::error::Refusal;

/// Parses a workspace-relative path: refuses an empty path, NUL bytes, absolute
/// paths (which covers `/proc/self/root/...` aliases) and any `..` component, even
/// one that would stay inside. `.` and empty components are dropped; the root
/// itself (`"."`) becomes the empty path.
pub(crate) fn parse_relative(value: &str) -> Result<PathBuf, Refusal> {
    check_common(value)?;
    let mut out = PathBuf::new();
    for component in value.split('/') {
        match component {
            "" | "." => {}
            ".." => return Err(Refusal::ParentComponent),
            name => out.push(name),
        }
    }
    Ok(out)
}

/// Parses the target of a symlink to create: relative, no NUL, not empty. `..` is
/// allowed here (it is resolved against the link's directory and checked later).
pub(crate) fn parse_link_target(value: &str) -> Result<PathBuf, Refusal> {
    check_common(value)?;
    Ok(PathBuf::from(value))
}

fn check_common(value: &str) -> Result<(), Refusal> {
    if value.is_empty() {
        Err(Refusal::Empty)
    } else if value.contains('\0') {
        Err(Refusal::NulByte)
    } else if value.starts_with('/') {
        Err(Refusal::Absolute)
    } else {
        Ok(())
    }
}

/// The path to hand to cap-std: `.` for the root.
pub(crate) fn cap_path(path: &Path) -> &Path {
    if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_normalize_or_refuse() {
        assert_eq!(parse_relative("."), Ok(PathBuf::new()));
        assert_eq!(
            parse_relative("./src//lib.rs/"),
            Ok(PathBuf::from("src/lib.rs"))
        );
        assert_eq!(parse_relative(""), Err(Refusal::Empty));
        assert_eq!(parse_relative("a\0b"), Err(Refusal::NulByte));
        assert_eq!(parse_relative("/etc/passwd"), Err(Refusal::Absolute));
        assert_eq!(parse_relative("a/../b"), Err(Refusal::ParentComponent));
        assert_eq!(parse_link_target("../x"), Ok(PathBuf::from("../x")));
        assert_eq!(parse_link_target("/x"), Err(Refusal::Absolute));
    }
}
