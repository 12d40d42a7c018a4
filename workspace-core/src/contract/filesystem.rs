//! The Filesystem boundary: which paths the agent may read or modify.

use globset::{Glob, GlobBuilder};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::checks;
use super::problem::{Problems, indexed};

/// Which paths the agent may read or modify. Everything not granted here is denied:
/// the defaults grant reading the workspace and nothing else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FilesystemSection {
    /// Where the workspace appears inside the isolated environment (absolute).
    #[serde(default = "default_root")]
    pub root: String,
    /// Paths under the root the agent may modify (`"."` for the whole workspace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable: Vec<String>,
    /// Paths under the root that stay read-only even inside a writable path.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    /// Where the task's results are expected. A changed path outside every output is
    /// reported as out of scope in `changes.json` (and needs an approval to be
    /// promoted). None declared: the writable paths are the outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// Glob patterns (relative to the root, `*` stays within one directory, `**`
    /// crosses directories) the agent may neither read nor write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
    /// Host directories made visible inside, read-only unless stated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_mounts: Vec<HostMount>,
    /// What the agent's home directory is.
    #[serde(default)]
    pub home: HomeDir,
}

fn default_root() -> String {
    "/workspace".into()
}

impl Default for FilesystemSection {
    fn default() -> Self {
        Self {
            root: default_root(),
            writable: Vec::new(),
            read_only: Vec::new(),
            outputs: Vec::new(),
            excluded: Vec::new(),
            host_mounts: Vec::new(),
            home: HomeDir::default(),
        }
    }
}

/// A host directory made visible inside the workspace's environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostMount {
    /// The host path (absolute). Ambient authority: the runner opens it with its own
    /// rights.
    pub host: String,
    /// Where it appears inside (absolute). Inside the workspace root (a
    /// `node_modules` from a host cache, say) it covers what the checkout has
    /// there and is never part of the patch; it may not be the root itself nor
    /// above it.
    pub target: String,
    /// Read-only (the default) or read-write.
    #[serde(default)]
    pub mode: MountMode,
}

/// Whether a mount may be written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MountMode {
    /// Reads only.
    #[default]
    ReadOnly,
    /// Reads and writes reach the host directory: whatever the agent writes there
    /// outlives the run and escapes the review of the patch.
    DangerReadWrite,
}

/// The agent's home directory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HomeDir {
    /// A fresh empty directory, discarded with the run: no host dotfiles, no
    /// credentials, no caches.
    #[default]
    Empty,
    /// `HOME` is unset and no home directory exists.
    None,
}

impl FilesystemSection {
    pub(crate) fn validate(&self, problems: &mut Problems) {
        checks::absolute_path(problems, "filesystem.root", &self.root);

        let writable = normalized_list(problems, "filesystem.writable", &self.writable);
        let read_only = normalized_list(problems, "filesystem.read_only", &self.read_only);
        let outputs = normalized_list(problems, "filesystem.outputs", &self.outputs);
        let excluded = self.compile_excluded(problems);

        for (i, path) in &writable {
            for (k, pattern, glob) in &excluded {
                if glob.is_match(path) {
                    problems.push(
                        indexed("filesystem.writable", *i),
                        format!(
                            "{path:?} is both writable and excluded by filesystem.excluded[{k}] ({pattern:?})"
                        ),
                    );
                }
            }
        }
        for (i, path) in &read_only {
            if let Some((j, _)) = writable.iter().find(|(_, w)| w == path) {
                problems.push(
                    indexed("filesystem.read_only", *i),
                    format!("{path:?} is also listed in filesystem.writable[{j}]"),
                );
            }
        }
        for (i, path) in &outputs {
            if !writable.iter().any(|(_, w)| checks::is_under(path, w)) {
                problems.push(
                    indexed("filesystem.outputs", *i),
                    format!(
                        "{path:?} is not under any writable path, so nothing could be written there"
                    ),
                );
            }
            if let Some((k, pattern, _)) = excluded.iter().find(|(_, _, g)| g.is_match(path)) {
                problems.push(
                    indexed("filesystem.outputs", *i),
                    format!("{path:?} is excluded by filesystem.excluded[{k}] ({pattern:?})"),
                );
            }
        }
        self.validate_host_mounts(problems);
    }

    fn compile_excluded(
        &self,
        problems: &mut Problems,
    ) -> Vec<(usize, String, globset::GlobMatcher)> {
        let mut compiled = Vec::new();
        for (i, pattern) in self.excluded.iter().enumerate() {
            let field = indexed("filesystem.excluded", i);
            if pattern.trim().is_empty() {
                problems.push(field, "pattern is empty");
                continue;
            }
            if pattern.starts_with('/') {
                problems.push(
                    field,
                    format!("{pattern:?} is absolute; patterns are relative to the workspace root"),
                );
                continue;
            }
            if pattern.split('/').any(|c| c == "..") {
                problems.push(
                    field,
                    format!("{pattern:?} leads outside the workspace root"),
                );
                continue;
            }
            match exclusion_glob(pattern) {
                Ok(glob) => compiled.push((i, pattern.clone(), glob.compile_matcher())),
                Err(err) => problems.push(field, format!("{pattern:?} is not a valid glob: {err}")),
            }
        }
        compiled
    }

    /// Where a change counts as in scope: `outputs`, or, when none is
    /// declared, the writable paths.
    pub fn scope(&self) -> &[String] {
        if self.outputs.is_empty() {
            &self.writable
        } else {
            &self.outputs
        }
    }

    /// The host mounts whose target is inside the workspace root, with that
    /// target relative to the root (`node_modules`).
    pub fn host_mounts_in_workspace(&self) -> impl Iterator<Item = (&HostMount, &str)> {
        self.host_mounts.iter().filter_map(|mount| {
            let rest = mount.target.strip_prefix(self.root.trim_end_matches('/'))?;
            let relative = rest.strip_prefix('/')?.trim_end_matches('/');
            (!relative.is_empty()).then_some((mount, relative))
        })
    }

    fn validate_host_mounts(&self, problems: &mut Problems) {
        let mut targets: Vec<&str> = Vec::new();
        for (i, mount) in self.host_mounts.iter().enumerate() {
            let field = indexed("filesystem.host_mounts", i);
            checks::absolute_path(problems, &format!("{field}.host"), &mount.host);
            let target_field = format!("{field}.target");
            if checks::absolute_path(problems, &target_field, &mount.target) {
                if checks::is_under(&self.root, &mount.target) {
                    problems.push(
                        &target_field,
                        format!(
                            "{:?} would shadow the workspace root {:?}",
                            mount.target, self.root
                        ),
                    );
                } else if targets.contains(&mount.target.as_str()) {
                    problems.push(
                        &target_field,
                        format!("{:?} is mounted twice", mount.target),
                    );
                }
                targets.push(&mount.target);
            }
        }
    }
}

/// The glob semantics of `filesystem.excluded`: `*` does not cross `/`.
pub fn exclusion_glob(pattern: &str) -> Result<Glob, globset::Error> {
    GlobBuilder::new(pattern).literal_separator(true).build()
}

fn normalized_list(
    problems: &mut Problems,
    field: &str,
    values: &[String],
) -> Vec<(usize, String)> {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| checks::relative_path(problems, &indexed(field, i), v).map(|p| (i, p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_declared_outputs_the_writable_paths_are_the_scope() {
        let mut section = FilesystemSection {
            writable: vec!["src".into()],
            ..FilesystemSection::default()
        };
        assert_eq!(section.scope(), ["src"]);
        section.outputs = vec!["src/lib".into()];
        assert_eq!(section.scope(), ["src/lib"]);
    }
}
