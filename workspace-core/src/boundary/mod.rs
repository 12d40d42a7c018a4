//! The six boundary traits and the [`Stack`] that composes them.
//!
//! # Why the traits look the way they do
//!
//! All six are decided once, the same way:
//!
//! * **async** (`#[async_trait]`): provisioning, sealing and promotion do I/O and
//!   wait on child processes; hosts drive them from tokio. `async_trait` (rather
//!   than native `async fn` in traits) keeps them object-safe today.
//! * **object-safe, `Send + Sync + Debug + 'static`**: a host holds a [`Stack`] of
//!   `Arc<dyn …>`, picks implementations at run time (one backend for several
//!   boundaries, or a vendor's for one), shares it across tasks, and can print it.
//! * **few required methods**: each trait has `capabilities()` plus the verbs of its
//!   lifecycle; everything else is data (records and plans) defined here, so a
//!   backend never depends on another backend.
//! * **declared capabilities**: each implementation says what it can enforce, and
//!   [`Stack::check`] rejects a contract asking for more, naming the field, before
//!   anything is provisioned.
//!
//! Environment and identity only *decide* (they return plans); the process boundary
//! *applies* both when it seals the run, because an isolating backend sets user,
//! mounts, limits and variables in one place, in the child, before `exec`.

mod capabilities;
mod context;
mod disk;
mod environment;
mod error;
mod files;
mod filesystem;
mod identity;
mod output_keeper;
mod process;
mod promotion;
mod source;
mod stack;

pub use capabilities::{
    EnvironmentCapabilities, FilesystemCapabilities, IdentityCapabilities, LimitKind,
    ProcessCapabilities, PromotionCapabilities, SourceCapabilities,
};
pub use context::RunContext;
pub use disk::{DiskKind, DiskRecord, DiskUsage, RunDisks};
pub use environment::{
    DEFAULT_LIMITS, DEFAULT_PATH, EnvironmentBoundary, EnvironmentPlan, RUN_HOME, ResolvedLimits,
    host_vars,
};
pub use error::{BoundaryError, BoundaryKind, NotRunReason, ProgramNotRun};
pub use files::{
    DEFAULT_LIST_LIMIT, DEFAULT_READ_LIMIT, FileAccess, FileError, FileInfo, FileKind,
    MAX_PATH_LEN, ReadFile, WriteFile, WriteOptions, inside_path, split_parent, valid_mode,
};
pub use filesystem::{Access, FilesystemBoundary, FilesystemRecord, GrantRecord};
pub use identity::{
    CredentialSource, IdentityBoundary, IdentityError, IdentityPlan, IssuedCredential, RUN_USER_ID,
    id_inside,
};
pub use output_keeper::{
    KEEP_AHEAD, KeptFiles, KeptOutput, OutputFlush, OutputKeepers, RELEASE_STEP, releasable,
    too_far_ahead,
};
pub use process::{
    Attachment, CommandOutput, CommandSpec, Execution, ExitRecord, InputStream, InvalidCwd,
    InvalidEnv, KillCause, LeakReport, ObservedBoundary, OutputStream, PreviewEndpoint,
    ProcessBoundary, SealPlan, Suspension, TemplateLayer, TerminateReport,
};
pub use promotion::{
    ApprovalRecord, ChangeKind, ChangedPath, CheckResult, NotInPatch, PatchExport,
    PromotionBoundary, PromotionRecord, PromotionRequest,
};
pub use source::{
    InputRecord, LayersRecord, OriginRecord, PinnedAs, PinnedFile, ResolvedSource, SourceBoundary,
    SourceRecord, SubmoduleRecord,
};
pub use stack::Stack;

/// Compile-time proof that the handles a host shares across tasks are thread-safe.
const _: () = {
    const fn assert_send_sync<T: Send + Sync + ?Sized>() {}
    assert_send_sync::<Stack>();
    assert_send_sync::<dyn SourceBoundary>();
    assert_send_sync::<dyn FilesystemBoundary>();
    assert_send_sync::<dyn ProcessBoundary>();
    assert_send_sync::<dyn EnvironmentBoundary>();
    assert_send_sync::<dyn IdentityBoundary>();
    assert_send_sync::<dyn PromotionBoundary>();
    assert_send_sync::<BoundaryError>();
    assert_send_sync::<dyn OutputKeepers>();
    assert_send_sync::<dyn FileAccess>();
    assert_send_sync::<FileError>();
};
