//! The Source boundary trait and what it records.

use std::fmt::Debug;
use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{BoundaryError, RunContext, SourceCapabilities};
use crate::contract::{Materialization, Problems, SourceSection};
use crate::lifecycle::CleanupPermit;

/// Provisions the code a run receives and proves what it was.
#[async_trait]
pub trait SourceBoundary: Send + Sync + Debug + 'static {
    /// What this implementation supports; a contract asking for more is rejected
    /// before anything is provisioned.
    fn capabilities(&self) -> SourceCapabilities;

    /// The implementation's name, used in messages about unsupported settings.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }

    /// Resolves `section` before anything of a run is made: its repository
    /// opened, its revision resolved to a commit. What makes it unusable is a
    /// problem naming its field (`source.repo`, `source.revision`), so the
    /// contract is refused before anything is created, like an invalid one.
    /// `None`: this implementation resolves nothing ahead of provisioning
    /// (the default).
    async fn resolve(&self, section: &SourceSection) -> Result<Option<ResolvedSource>, Problems> {
        let _ = section;
        Ok(None)
    }

    /// Whether a run of `section` would go without changes its repository
    /// has: its revision is the repository's `HEAD`, and the work tree or the
    /// index differs from it (untracked files aside). A status of the whole
    /// work tree, so a run never asks it; a front end that tells its user
    /// does. `None`: not known (the default; also when `section` does not
    /// resolve).
    async fn uncommitted_changes(&self, section: &SourceSection) -> Option<bool> {
        let _ = section;
        None
    }

    /// Makes the run's checkout under `run.run_dir` as `run.contract.source` says.
    async fn provision(&self, run: &RunContext) -> Result<SourceRecord, BoundaryError>;

    /// Re-verifies an existing checkout against its record (for resume): the commit,
    /// the location and what was inherited. A mismatch is an error, never a silent
    /// continue.
    async fn verify(&self, run: &RunContext, record: &SourceRecord) -> Result<(), BoundaryError>;

    /// Removes the checkout. Shared read-only data (object stores, cached base
    /// trees) stays. `permit` proves the run's evidence export was attempted; an
    /// implementation refuses a permit of another run.
    async fn release(
        &self,
        run: &RunContext,
        record: &SourceRecord,
        permit: &CleanupPermit,
    ) -> Result<(), BoundaryError>;

    /// Removes whatever an interrupted `provision` left under `run.run_dir` when no
    /// record of it exists (the runner died, or provisioning failed, before the
    /// record was made). Idempotent; finding nothing is success. Like `release`,
    /// never follows a link or crosses a mount.
    async fn release_unrecorded(
        &self,
        run: &RunContext,
        permit: &CleanupPermit,
    ) -> Result<(), BoundaryError>;
}

/// What a contract's source section resolves to on this host, before a run
/// of it is made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedSource {
    /// The repository, as opened.
    pub repository: PathBuf,
    /// The commit the revision names (hex).
    pub commit: String,
}

/// What the agent received: written to `source.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRecord {
    /// The source repository as given.
    pub repository: String,
    /// Its remote URLs, credentials stripped.
    pub remote_urls: Vec<String>,
    /// The resolved commit id.
    pub commit: String,
    /// The commit's tree id.
    pub tree: String,
    /// Where the initial state came from.
    pub origin: OriginRecord,
    /// How it was materialized.
    pub materialization: Materialization,
    /// The checkout on the host: the workspace root (for a layered checkout, the
    /// mount point of its merged view).
    pub workspace: PathBuf,
    /// For a layered checkout, the overlay layers an isolating backend mounts on
    /// `workspace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<LayersRecord>,
    /// Submodules present, and whether each was initialised.
    pub submodules: Vec<SubmoduleRecord>,
    /// Untracked inputs copied in, with their digests.
    pub inputs: Vec<InputRecord>,
    /// The initial diff against the commit: empty for a fresh checkout.
    pub initial_diff: String,
    /// The files the contract pins (`environment.fixtures`,
    /// `environment.runtime.lockfiles`), digested as the checkout was made,
    /// before any command ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pinned: Vec<PinnedFile>,
    /// The source repository's object store the checkout's git reads through
    /// its `alternates` (the backends bind it read-only into the run, unless a
    /// path is excluded), as the Source boundary found it: never read back
    /// from the checkout, whose `.git` the agent may rewrite. `None` for a
    /// linked checkout, or a record from before this was kept (the run then
    /// gets no history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<PathBuf>,
}

impl SourceRecord {
    /// The first fixture `environment` pins by digest that the checkout did not
    /// have as pinned when it was made (a different file, or none), as the
    /// failure it is.
    pub fn fixture_mismatch(
        &self,
        environment: &crate::contract::EnvironmentSection,
    ) -> Option<crate::lifecycle::FailureCause> {
        environment.fixtures.iter().find_map(|fixture| {
            let expected = fixture.sha256.as_ref()?;
            let found = self
                .pinned
                .iter()
                .find(|pinned| {
                    pinned.path == fixture.path
                        && matches!(&pinned.pinned_as, PinnedAs::Fixture { name } if *name == fixture.name)
                })
                .and_then(|pinned| pinned.sha256.clone());
            (found.as_ref() != Some(expected)).then(|| crate::lifecycle::FailureCause::Fixture {
                name: fixture.name.clone(),
                path: fixture.path.clone(),
                expected: expected.clone(),
                found,
            })
        })
    }
}

/// A file the contract pins, as the checkout had it when it was made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedFile {
    /// Its path relative to the workspace root.
    pub path: String,
    /// Why it is pinned.
    #[serde(flatten)]
    pub pinned_as: PinnedAs,
    /// sha256 of its content (hex); `None` when the checkout has no such file.
    pub sha256: Option<String>,
}

/// Why a file is pinned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "pinned_as", rename_all = "kebab-case")]
pub enum PinnedAs {
    /// An `environment.fixtures` entry.
    Fixture {
        /// The fixture's name.
        name: String,
    },
    /// An `environment.runtime.lockfiles` entry.
    Lockfile,
}

impl PinnedAs {
    /// What `environment` pins, each path with why, in contract order:
    /// fixtures, then lockfiles.
    pub fn of(environment: &crate::contract::EnvironmentSection) -> Vec<(String, PinnedAs)> {
        let fixtures = environment.fixtures.iter().map(|fixture| {
            let name = fixture.name.clone();
            (fixture.path.clone(), PinnedAs::Fixture { name })
        });
        let lockfiles = environment
            .runtime
            .lockfiles
            .iter()
            .map(|path| (path.clone(), PinnedAs::Lockfile));
        fixtures.chain(lockfiles).collect()
    }
}

/// The overlay layers of a layered checkout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayersRecord {
    /// The read-only base tree shared by every run of the commit.
    pub lower: PathBuf,
    /// The run's changes (and its `.git`).
    pub upper: PathBuf,
    /// overlayfs's work directory, on the same file system as `upper`.
    pub work: PathBuf,
}

/// Where a checkout's initial state came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum OriginRecord {
    /// A new checkout of the commit.
    Fresh,
    /// An earlier run's workspace.
    Resumed {
        /// The run it came from.
        from: String,
    },
    /// A verified snapshot.
    Restored {
        /// The snapshot's sha256.
        snapshot_digest: String,
    },
}

/// A submodule of the checkout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmoduleRecord {
    /// Its path in the repository.
    pub path: String,
    /// Whether it was initialised (only when the contract declares it).
    pub initialized: bool,
}

/// An untracked input copied into the checkout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRecord {
    /// Where it came from.
    pub from: String,
    /// Where it went, relative to the workspace root.
    pub to: String,
    /// The sha256 of its content.
    pub sha256: String,
}
