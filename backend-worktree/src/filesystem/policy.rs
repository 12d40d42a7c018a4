//! The access rules as data: writable and read-only paths, excluded and protected
//! globs, and the checks that apply them to a workspace-relative path.

use std::path::{Path, PathBuf};

use globset::{GlobSet, GlobSetBuilder};
use workspace_core::contract::{FilesystemSection, exclusion_glob};

use super::error::{GrantError, Refusal};
use super::path::parse_relative;
use super::types::GrantOptions;

/// Protected from reading and writing, whatever the contract says.
pub(crate) const PROTECTED: &[&str] = &[
    "**/.env",
    "**/.env.*",
    "**/.git/config",
    "**/.git/hooks",
    "**/.git/hooks/**",
];

/// Protected from writing (git metadata: a planted hook or config runs on the host).
pub(crate) const PROTECTED_WRITE: &[&str] = &["**/.git", "**/.git/**"];

/// A set of globs that remembers the pattern behind each match.
#[derive(Debug)]
struct Rules {
    set: GlobSet,
    patterns: Vec<String>,
}

impl Rules {
    fn build<'a>(
        field: &str,
        patterns: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, GrantError> {
        let mut builder = GlobSetBuilder::new();
        let mut kept = Vec::new();
        for (i, pattern) in patterns.into_iter().enumerate() {
            let field = format!("{field}[{i}]");
            let bad = |reason| GrantError::InvalidGrant {
                field: field.clone(),
                value: pattern.to_owned(),
                reason,
            };
            if pattern.trim().is_empty() {
                return Err(bad(Refusal::Empty));
            }
            if pattern.starts_with('/') {
                return Err(bad(Refusal::Absolute));
            }
            if pattern.split('/').any(|c| c == "..") {
                return Err(bad(Refusal::ParentComponent));
            }
            let glob = exclusion_glob(pattern).map_err(|source| GrantError::InvalidPattern {
                field: field.clone(),
                pattern: pattern.to_owned(),
                source,
            })?;
            builder.add(glob);
            kept.push(pattern.to_owned());
        }
        let set = builder
            .build()
            .map_err(|source| GrantError::InvalidPattern {
                field: field.to_owned(),
                pattern: kept.join(", "),
                source,
            })?;
        Ok(Self {
            set,
            patterns: kept,
        })
    }

    /// The first pattern matching exactly this path.
    fn matching(&self, path: &Path) -> Option<&str> {
        self.set
            .matches(path)
            .first()
            .and_then(|&i| self.patterns.get(i))
            .map(String::as_str)
    }
}

/// The compiled filesystem section plus the built-in protections.
#[derive(Debug)]
pub(crate) struct Policy {
    writable: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    excluded: Rules,
    protected: Rules,
    protected_write: Rules,
}

impl Policy {
    pub(crate) fn new(
        section: &FilesystemSection,
        options: &GrantOptions,
    ) -> Result<Self, GrantError> {
        let mut writable = paths("filesystem.writable", &section.writable)?;
        // Outputs are writable too (the contract checks outputs ⊂ writable).
        writable.extend(paths("filesystem.outputs", &section.outputs)?);
        let extra = options.protected.iter().map(String::as_str);
        Ok(Self {
            writable,
            read_only: paths("filesystem.read_only", &section.read_only)?,
            excluded: Rules::build(
                "filesystem.excluded",
                section.excluded.iter().map(String::as_str),
            )?,
            protected: Rules::build("protected", PROTECTED.iter().copied().chain(extra))?,
            protected_write: Rules::build("protected_write", PROTECTED_WRITE.iter().copied())?,
        })
    }

    /// Why reading exactly this path (not its ancestors) is refused, if it is.
    pub(crate) fn read_denial_exact(&self, path: &Path) -> Option<Refusal> {
        if path.as_os_str().is_empty() {
            return None;
        }
        if let Some(pattern) = self.excluded.matching(path) {
            return Some(Refusal::Excluded {
                matched: path.to_path_buf(),
                pattern: pattern.to_owned(),
            });
        }
        self.protected
            .matching(path)
            .map(|pattern| Refusal::Protected {
                matched: path.to_path_buf(),
                pattern: pattern.to_owned(),
            })
    }

    /// Why reading this path is refused: it, or a directory above it, is excluded
    /// or protected.
    pub(crate) fn read_denial(&self, path: &Path) -> Option<Refusal> {
        path.ancestors().find_map(|p| self.read_denial_exact(p))
    }

    /// Why writing this path is refused: reading is, it is in git metadata, it is
    /// under a read-only path, or under no writable path. Read-only wins over
    /// writable.
    pub(crate) fn write_denial(&self, path: &Path) -> Option<Refusal> {
        if let Some(refusal) = self.read_denial(path) {
            return Some(refusal);
        }
        let git = path.ancestors().find_map(|p| {
            let pattern = self.protected_write.matching(p)?;
            Some(Refusal::Protected {
                matched: p.to_path_buf(),
                pattern: pattern.to_owned(),
            })
        });
        if git.is_some() {
            return git;
        }
        if let Some(read_only) = self.read_only.iter().find(|r| path.starts_with(r)) {
            return Some(Refusal::ReadOnly {
                resolved: path.to_path_buf(),
                read_only: read_only.clone(),
            });
        }
        if !self.writable.iter().any(|w| path.starts_with(w)) {
            return Some(Refusal::NotWritable {
                resolved: path.to_path_buf(),
            });
        }
        None
    }

    /// A read-only path strictly below `dir`, which renaming `dir` would carry away.
    pub(crate) fn read_only_below(&self, dir: &Path) -> Option<&Path> {
        self.read_only
            .iter()
            .find(|r| r.starts_with(dir) && r.as_path() != dir)
            .map(PathBuf::as_path)
    }
}

fn paths(field: &str, values: &[String]) -> Result<Vec<PathBuf>, GrantError> {
    values
        .iter()
        .enumerate()
        .map(|(i, value)| {
            parse_relative(value).map_err(|reason| GrantError::InvalidGrant {
                field: format!("{field}[{i}]"),
                value: value.clone(),
                reason,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Result<Policy, GrantError> {
        let section = FilesystemSection {
            writable: vec![".".into()],
            read_only: vec!["vendor".into()],
            excluded: vec!["secrets".into(), "**/*.pem".into()],
            ..FilesystemSection::default()
        };
        Policy::new(&section, &GrantOptions::protected(["config/creds.json"]))
    }

    #[test]
    fn rules_apply_to_ancestors_and_any_depth() -> Result<(), GrantError> {
        let p = policy()?;
        let denied = |s: &str| p.read_denial(Path::new(s)).is_some();
        assert!(denied(".env") && denied("a/b/.env") && denied("sub/.env.local"));
        assert!(denied(".git/config") && denied(".git/hooks/pre-commit"));
        assert!(denied("secrets/key") && denied("x/y.pem") && denied("config/creds.json"));
        assert!(!denied("src/lib.rs") && !denied(".git/HEAD") && !denied("secretsx"));
        assert!(p.write_denial(Path::new(".git/HEAD")).is_some());
        assert!(p.write_denial(Path::new(".git")).is_some());
        assert!(matches!(
            p.write_denial(Path::new("vendor/x")),
            Some(Refusal::ReadOnly { .. })
        ));
        assert_eq!(p.write_denial(Path::new("src/new.rs")), None);
        Ok(())
    }

    #[test]
    fn bad_grants_are_named() {
        let section = FilesystemSection {
            writable: vec!["../x".into()],
            ..FilesystemSection::default()
        };
        let err = Policy::new(&section, &GrantOptions::default());
        assert!(
            matches!(err, Err(GrantError::InvalidGrant { ref field, .. }) if field == "filesystem.writable[0]")
        );
    }
}
