//! The lifecycle of a run: a typed state machine whose every transition is
//! journaled before it takes effect.
//!
//! ```text
//! Requested -> Waiting(capacity) -> Provisioning(Fresh | Resumed | Restored)
//!   -> StartingServices -> Sealed (boundaries applied, probe passed, services ready)
//! Sealed -> Suspended -> Provisioning(Resumed) -> ...    Sealed <-> Detached
//! Sealed -> Draining -> Exporting -> Exported -> CleaningUp -> Cleaned
//! any -> Failed{at, cause} -> Exporting (evidence is still exported) -> CleaningUp
//! ```
//!
//! Three rules are enforced by [`next_state`], the single transition table:
//!
//! * **cleanup is unreachable before export was attempted**: `CleanUp` is legal from
//!   `Exported`, or from `Failed` once the run has entered `Exporting`;
//! * **every failure still exports**: `Failed -> Exporting -> Exported -> CleaningUp
//!   -> Cleaned` is always legal;
//! * **no transient state strands resources**: each has a limit in [`Timeouts`], and
//!   [`Lifecycle::check_timeout`] turns an overrun into `Failed`.
//!
//! Commands are not states: a sealed run runs any number at once, each a record
//! of its own in the evidence (`commands/NNNN/`), so no command holds the run.
//!
//! Resuming a suspended run goes back through `Provisioning(Resumed)` so the
//! checkout is re-verified and the boundary re-probed before it is `Sealed` again.

mod machine;
mod state;
mod timeouts;

pub use machine::{
    CleanupPermit, Lifecycle, LifecycleError, Transition, TransitionObserver, WrongPermit,
};
pub use state::{
    FailureCause, Operation, OperationName, Origin, Refusal, State, StateName, next_state,
};
pub use timeouts::Timeouts;

#[cfg(test)]
mod tests;
