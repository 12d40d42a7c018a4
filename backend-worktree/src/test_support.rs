//! Helpers shared by this crate's tests.
#![allow(clippy::expect_used)] // panicking is how a test fails

use workspace_core::RunId;
use workspace_core::lifecycle::{CleanupPermit, FailureCause, Lifecycle, Timeouts};

/// A cleanup permit for `run_id`, obtained the only way there is: a lifecycle
/// (journaled in a scratch directory) that failed, exported and reached cleanup.
pub(crate) fn cleanup_permit(run_id: &RunId) -> CleanupPermit {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut life = Lifecycle::create(
        dir.path().join("journal.jsonl"),
        run_id.clone(),
        Timeouts::default(),
    )
    .expect("lifecycle");
    life.fail(FailureCause::Cancelled).expect("fail");
    life.export().expect("export");
    life.finish_export().expect("exported");
    life.clean_up().expect("clean up")
}
