//! The progress display: one status line on stderr, only when stderr is a
//! terminal, overwritten at each lifecycle step and cleared before the command's
//! own output and before the summary.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use workspace_core::lifecycle::{State, StateName, TransitionObserver};

/// An observer drawing the status line, or `None` when stderr is not a terminal
/// (scripts and harnesses get the summary line only).
pub(crate) fn on_terminal() -> Option<TransitionObserver> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    Some(Arc::new(|run_id, state: &State| {
        let mut stderr = std::io::stderr().lock();
        // "\r\x1b[K": back to the start of the line and erase it.
        let _ = match step(state.name()) {
            Some(step) => write!(stderr, "\r\x1b[Kagent-workspace: run {run_id}: {step}..."),
            None => write!(stderr, "\r\x1b[K"),
        };
        let _ = stderr.flush();
    }))
}

/// What the status line says in `state`; `None` clears it (the command's output
/// or the summary comes next).
fn step(state: StateName) -> Option<&'static str> {
    Some(match state {
        StateName::Requested => "requested",
        StateName::Waiting => "waiting for capacity",
        StateName::Provisioning => "checking out",
        StateName::StartingServices => "sealing and probing",
        StateName::Sealed => "sealed",
        StateName::Suspended => "suspending",
        StateName::Detached => "detaching (the workspace stays live)",
        StateName::Draining => "stopping",
        StateName::Exporting => "exporting evidence",
        StateName::Exported => "evidence sealed",
        StateName::CleaningUp => "cleaning up",
        StateName::Failed => "failed, exporting evidence",
        StateName::Running | StateName::Cleaned => return None,
    })
}
