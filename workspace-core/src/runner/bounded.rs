//! A step of the run bounded by its state's time limit and the run's cancel.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::error::RunErrorKind;
use super::execute::millis;
use crate::lifecycle::{FailureCause, StateName};

/// Awaits `step` unless the state's time limit passes or the run is cancelled.
pub(super) async fn bounded<T>(
    state: StateName,
    limit: Option<Duration>,
    cancel: &CancellationToken,
    step: impl Future<Output = Result<T, RunErrorKind>>,
) -> Result<T, RunErrorKind> {
    let timed = async {
        match limit {
            Some(limit) => tokio::time::timeout(limit, step).await.unwrap_or_else(|_| {
                Err(RunErrorKind::Failed(FailureCause::Timeout {
                    state,
                    limit_ms: millis(limit),
                }))
            }),
            None => step.await,
        }
    };
    tokio::select! {
        result = timed => result,
        () = cancel.cancelled() => Err(RunErrorKind::Failed(FailureCause::Cancelled)),
    }
}
