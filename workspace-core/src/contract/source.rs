//! The Source boundary: which code and initial state the agent receives.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::checks;
use super::problem::{Problems, indexed};

/// Which code the agent receives, and how the checkout is made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceSection {
    /// The repository: a local path (resolved by the caller against its working
    /// directory) or a remote URL without credentials; `.` when left out.
    #[serde(default = "current_dir")]
    pub repo: String,
    /// The revision to check out (a commit id, tag or branch); `HEAD` when left
    /// out. It is resolved to an immutable commit id once, at provisioning, and
    /// that id is what the run records.
    #[serde(default = "head")]
    pub revision: String,
    /// Where the initial state comes from.
    #[serde(default)]
    pub origin: CheckoutOrigin,
    /// With `origin = "snapshot"`: the sha256 of the snapshot archive to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// How the checkout is materialized on disk.
    #[serde(default)]
    pub materialization: Materialization,
    /// Whether the workspace HEAD may move away from the resolved commit during the run
    /// (a rebase or reset). `false`: resume and export refuse a moved HEAD.
    #[serde(default)]
    pub allow_rebase: bool,
    /// Submodules to initialise (paths in the repository). Others stay uninitialised.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub submodules: Vec<String>,
    /// Untracked inputs copied into the checkout (a `.env.example` -> `.env` rule, a
    /// fixture file); each copy is recorded with its digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<UntrackedInput>,
    /// Paths the build generates (e.g. `target`); changes there are expected, are not
    /// reported as out of scope, and are not part of the patch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub generated: Vec<String>,
}

/// Where a checkout's initial state comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CheckoutOrigin {
    /// A new checkout of the commit: the initial diff is empty.
    #[default]
    Fresh,
    /// An existing workspace of an earlier run, re-verified before use.
    Resumed,
    /// A content-addressed snapshot, verified against its digest on restore.
    Snapshot,
}

/// How the files of a checkout are put on disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Materialization {
    /// Layered where the backend can mount overlayfs, standalone otherwise.
    #[default]
    Auto,
    /// A read-only base tree shared per commit plus a per-run upper directory.
    Layered,
    /// A standalone clone with its own `.git`, objects shared read-only.
    Standalone,
    /// A linked git worktree: shares refs, config and stash with the source repository.
    Linked,
}

/// One untracked input copied into the checkout before the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UntrackedInput {
    /// What to copy: a path relative to the checkout (e.g. `.env.example`), or an
    /// absolute host path when `from_host` is set.
    pub from: String,
    /// Where to put it, relative to the workspace root.
    pub to: String,
    /// `from` is a host path outside the repository (ambient authority: the runner
    /// reads it with its own rights).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_host: bool,
}

impl SourceSection {
    /// A fresh checkout of `revision` from `repo`, everything else at its default.
    pub fn new(repo: impl Into<String>, revision: impl Into<String>) -> Self {
        Self {
            repo: repo.into(),
            revision: revision.into(),
            origin: CheckoutOrigin::default(),
            snapshot: None,
            materialization: Materialization::default(),
            allow_rebase: false,
            submodules: Vec::new(),
            inputs: Vec::new(),
            generated: Vec::new(),
        }
    }

    pub(crate) fn validate(&self, problems: &mut Problems) {
        if self.repo.trim().is_empty() {
            problems.push("source.repo", "is empty; name a repository path or URL");
        } else if url_carries_credentials(&self.repo) {
            problems.push(
                "source.repo",
                "the URL carries credentials; inject them through identity.credentials",
            );
        }
        check_revision(problems, &self.revision);
        match (&self.origin, &self.snapshot) {
            (CheckoutOrigin::Snapshot, None) => problems.push(
                "source.snapshot",
                "is missing; origin = \"snapshot\" needs the sha256 of the snapshot to restore",
            ),
            (CheckoutOrigin::Snapshot, Some(digest))
                if digest.len() != 64 || !digest.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                problems.push(
                    "source.snapshot",
                    format!("{digest:?} is not a sha256 digest (64 hex digits)"),
                )
            }
            (CheckoutOrigin::Fresh | CheckoutOrigin::Resumed, Some(_)) => problems.push(
                "source.snapshot",
                "is only read with origin = \"snapshot\"; remove it or change the origin",
            ),
            _ => {}
        }
        for (i, path) in self.submodules.iter().enumerate() {
            checks::relative_path(problems, &indexed("source.submodules", i), path);
        }
        for (i, input) in self.inputs.iter().enumerate() {
            let field = indexed("source.inputs", i);
            if input.from_host {
                checks::absolute_path(problems, &format!("{field}.from"), &input.from);
            } else {
                checks::relative_path(problems, &format!("{field}.from"), &input.from);
            }
            checks::relative_path(problems, &format!("{field}.to"), &input.to);
        }
        for (i, path) in self.generated.iter().enumerate() {
            checks::relative_path(problems, &indexed("source.generated", i), path);
        }
    }
}

fn check_revision(problems: &mut Problems, revision: &str) {
    let reason = if revision.trim().is_empty() {
        Some("is empty; name a commit, tag or branch")
    } else if revision.starts_with('-') {
        Some("starts with '-' and would be read as an option")
    } else if revision
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        Some("contains whitespace or control characters")
    } else {
        None
    };
    if let Some(reason) = reason {
        problems.push("source.revision", format!("{revision:?} {reason}"));
    }
}

/// Whether a URL has a `user:password@` part (a bare `user@` as in ssh is fine).
fn url_carries_credentials(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
}

fn current_dir() -> String {
    ".".to_owned()
}

fn head() -> String {
    "HEAD".to_owned()
}

impl Default for SourceSection {
    /// The repository in the current directory at `HEAD`.
    fn default() -> Self {
        Self::new(current_dir(), head())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_in_urls_are_spotted() {
        assert!(url_carries_credentials("https://u:tok@example.com/r.git"));
        assert!(!url_carries_credentials("ssh://git@example.com/r.git"));
        assert!(!url_carries_credentials("../payments-api"));
        assert!(!url_carries_credentials("https://example.com/a@b"));
    }
}
