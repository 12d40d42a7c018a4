//! The Promotion boundary trait: export the result and promote it under rules.

use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{BoundaryError, PromotionCapabilities, RunContext, SourceRecord};

/// Turns a workspace's changes into a reviewable result.
#[async_trait]
pub trait PromotionBoundary: Send + Sync + Debug + 'static {
    /// What this implementation supports.
    fn capabilities(&self) -> PromotionCapabilities;

    /// The implementation's name, used in messages about unsupported settings.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }

    /// Exports the changes against the base commit: a patch `git apply` accepts on a
    /// clean checkout of that commit, and the list of changed paths. Never follows a
    /// symlink found in the workspace.
    async fn export(
        &self,
        run: &RunContext,
        source: &SourceRecord,
    ) -> Result<PatchExport, BoundaryError>;

    /// Promotes an exported patch to the contract's target, only if the evidence in
    /// `request` satisfies the contract's rules for this exact patch digest.
    async fn promote(
        &self,
        run: &RunContext,
        source: &SourceRecord,
        request: &PromotionRequest,
    ) -> Result<PromotionRecord, BoundaryError>;

    /// Whether [`promote`](Self::promote) would accept `request` for the
    /// workspace as it is now, changing nothing: `Err` says why it would
    /// refuse. A caller that must not end a workspace on a refusal (its agent
    /// may fix what is wrong and try again) asks first. The default refuses
    /// nothing: `promote` still decides.
    async fn preflight(
        &self,
        run: &RunContext,
        source: &SourceRecord,
        request: &PromotionRequest,
    ) -> Result<(), BoundaryError> {
        let _ = (run, source, request);
        Ok(())
    }
}

/// The exported result of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchExport {
    /// The unified diff (`diff.patch`).
    #[serde(skip)]
    pub patch: Vec<u8>,
    /// sha256 of `patch` (hex): what checks and approvals are bound to.
    pub patch_sha256: String,
    /// Every changed path (`changes.json`).
    pub changes: Vec<ChangedPath>,
}

/// One changed path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedPath {
    /// The path relative to the workspace root (the new path of a rename).
    pub path: String,
    /// What happened to it.
    pub change: ChangeKind,
    /// Whether it lies inside the contract's declared outputs.
    pub in_scope: bool,
    /// A new file the repository's ignore rules (the base commit's
    /// `.gitignore` files, the source's `info/exclude`) leave out of the patch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    /// Why the change is not in `diff.patch`, when it is not: the patch cannot
    /// carry it, or must not. Such a change is still listed here (an export never
    /// drops a change without a word), and the run is not promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_in_patch: Option<NotInPatch>,
}

impl ChangedPath {
    /// Whether `diff.patch` carries this change (it is neither ignored nor
    /// left out for a [`NotInPatch`] reason).
    pub fn in_patch(&self) -> bool {
        !self.ignored && self.not_in_patch.is_none()
    }
}

/// Why a changed path is listed in `changes.json` but not carried by
/// `diff.patch`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum NotInPatch {
    /// git refuses to write the path (`.git` in any spelling a case-insensitive,
    /// NTFS or HFS+ file system resolves to `.git`, a symlinked `.gitmodules`,
    /// ...): `git apply` would reject the whole patch.
    RefusedByGit {
        /// The rule the path breaks, in words.
        rule: String,
    },
    /// The name is not UTF-8; the listed path shows each byte that is not as
    /// `\xNN`.
    NotUtf8,
    /// A `.git` below the workspace root: a nested repository, which git does
    /// not record as files.
    NestedRepository,
    /// The name (or the one it was renamed from) holds the value of a credential
    /// the run was given; the listed path shows it redacted.
    CredentialInName {
        /// The credential (its environment variable).
        credential: String,
    },
}

impl std::fmt::Display for NotInPatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RefusedByGit { rule } => write!(f, "git refuses the path: {rule}"),
            Self::NotUtf8 => f.write_str("its name is not UTF-8"),
            Self::NestedRepository => f.write_str("a nested repository's .git"),
            Self::CredentialInName { credential } => {
                write!(f, "its name holds the value of credential {credential}")
            }
        }
    }
}

/// What happened to a path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ChangeKind {
    /// Created.
    Added,
    /// Content changed.
    Modified,
    /// Removed.
    Deleted,
    /// Moved from another path.
    Renamed {
        /// The old path.
        from: String,
    },
    /// Only the mode (executable bit, file type) changed.
    ModeChanged,
}

/// The evidence a promotion is judged on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotionRequest {
    /// The digest of the patch being promoted.
    pub patch_sha256: String,
    /// Results of the contract's required checks.
    pub checks: Vec<CheckResult>,
    /// Recorded approvals.
    pub approvals: Vec<ApprovalRecord>,
}

/// The result of one required check (`checks.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The check's name in the contract.
    pub name: String,
    /// Whether it passed: it exited 0 and left the workspace as it found it.
    pub passed: bool,
    /// The digest of the patch taken just before it ran: exactly the state it
    /// verified.
    pub patch_sha256: String,
    /// Why it did not pass (its exit status, or the paths it changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The paths whose part of the patch the check changed (a check that
    /// changes what it verifies fails; its changes are not part of the patch).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_paths: Vec<String>,
    /// The sequence number of the command that ran it: its record, output and
    /// end are `commands/NNNN/` in the evidence (none when it did not run,
    /// as when the patch could not be taken first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_seq: Option<u32>,
}

impl CheckResult {
    /// A check `name` that passed against the patch `patch_sha256`.
    pub fn passed(name: impl Into<String>, patch_sha256: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            passed: true,
            patch_sha256: patch_sha256.into(),
            failure: None,
            changed_paths: Vec::new(),
            command_seq: None,
        }
    }

    /// A check `name` that failed against `patch_sha256`, and why.
    pub fn failed(
        name: impl Into<String>,
        patch_sha256: impl Into<String>,
        failure: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            passed: false,
            patch_sha256: patch_sha256.into(),
            failure: Some(failure.into()),
            changed_paths: Vec::new(),
            command_seq: None,
        }
    }
}

/// A recorded approval (`approvals.json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// Who approved, as given (a name, not verified).
    pub approver: String,
    /// The patch digest approved.
    pub patch_sha256: String,
    /// When (Unix milliseconds).
    pub at_unix_ms: u64,
    /// The process identity that recorded the approval: what vouches for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_by: Option<RecordedBy>,
}

impl ApprovalRecord {
    /// `approver`'s approval of the patch `patch_sha256`, recorded now by this
    /// process.
    pub fn new(approver: impl Into<String>, patch_sha256: impl Into<String>) -> Self {
        Self {
            approver: approver.into(),
            patch_sha256: patch_sha256.into(),
            at_unix_ms: crate::clock::unix_ms_now(),
            recorded_by: RecordedBy::this_process(),
        }
    }
}

/// The identity of a process that recorded something, read from the kernel.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedBy {
    /// Its effective user id (the owner of its `/proc/self`).
    pub uid: u32,
    /// Its process id.
    pub pid: u32,
}

impl RecordedBy {
    /// This process (its effective uid read from the owner of `/proc/self`;
    /// `None` where there is none).
    pub fn this_process() -> Option<Self> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let uid = std::fs::metadata("/proc/self").ok()?.uid();
            Some(Self {
                uid,
                pid: std::process::id(),
            })
        }
        #[cfg(not(unix))]
        None
    }
}

/// What a promotion did (the promotion record in the evidence).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotionRecord {
    /// The patch digest promoted.
    pub patch_sha256: String,
    /// The ref written, if any (`refs/heads/review/<run-id>`).
    pub review_ref: Option<String>,
    /// The commit created for the review, if any.
    pub review_commit: Option<String>,
    /// Whether it was marked a merge candidate (needs an approval bound to the digest).
    pub merge_candidate: bool,
}
