//! The states of a run, the operations between them, and the transition table.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::boundary::BoundaryKind;
use crate::step::StepFailure;

/// Where a checkout being provisioned comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    /// A new checkout.
    Fresh,
    /// An existing workspace, re-verified (also the way back from `Suspended`).
    Resumed,
    /// A snapshot, verified against its digest.
    Restored,
}

/// The state of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum State {
    /// Created; nothing reserved yet.
    Requested,
    /// Waiting for capacity.
    Waiting,
    /// Making or re-verifying the checkout.
    Provisioning {
        /// Where the checkout comes from.
        origin: Origin,
    },
    /// Starting services and waiting for their health checks.
    StartingServices,
    /// Boundaries applied, probe passed, services ready: commands may run,
    /// any number at once (each is a record of the evidence, not a state).
    Sealed,
    /// Processes stopped; checkout and leases kept for a later resume.
    Suspended,
    /// Sealed and live, with no runner attached: the workspace's sandbox keeps
    /// running (what commands left in the background, services) while no process
    /// holds the journal, until a runner attaches again or destroys it.
    Detached,
    /// No new commands; in-flight ones finish or are killed.
    Draining,
    /// Writing the evidence bundle.
    Exporting,
    /// Evidence written and sealed.
    Exported,
    /// Tearing down processes, mounts, leases and the checkout.
    CleaningUp,
    /// Nothing of the run remains but its evidence.
    Cleaned,
    /// Something failed; evidence is still exported, then the run is cleaned up.
    Failed {
        /// The state the run was in.
        at: StateName,
        /// Why.
        cause: FailureCause,
    },
}

/// A state without its data, for tables, timeouts and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)] // each mirrors the `State` variant of the same name
pub enum StateName {
    Requested,
    Waiting,
    Provisioning,
    StartingServices,
    Sealed,
    Suspended,
    Detached,
    Draining,
    Exporting,
    Exported,
    CleaningUp,
    Cleaned,
    Failed,
}

impl StateName {
    /// Every state, in lifecycle order.
    pub const ALL: [StateName; 13] = [
        Self::Requested,
        Self::Waiting,
        Self::Provisioning,
        Self::StartingServices,
        Self::Sealed,
        Self::Suspended,
        Self::Detached,
        Self::Draining,
        Self::Exporting,
        Self::Exported,
        Self::CleaningUp,
        Self::Cleaned,
        Self::Failed,
    ];

    /// Whether the run is expected to leave this state by itself (so it has a
    /// timeout) rather than wait for the caller.
    pub fn is_transient(self) -> bool {
        !matches!(
            self,
            Self::Sealed | Self::Suspended | Self::Detached | Self::Cleaned | Self::Failed
        )
    }
}

impl fmt::Display for StateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        f.write_str(&name)
    }
}

impl State {
    /// The state's name.
    pub fn name(&self) -> StateName {
        match self {
            Self::Requested => StateName::Requested,
            Self::Waiting => StateName::Waiting,
            Self::Provisioning { .. } => StateName::Provisioning,
            Self::StartingServices => StateName::StartingServices,
            Self::Sealed => StateName::Sealed,
            Self::Suspended => StateName::Suspended,
            Self::Detached => StateName::Detached,
            Self::Draining => StateName::Draining,
            Self::Exporting => StateName::Exporting,
            Self::Exported => StateName::Exported,
            Self::CleaningUp => StateName::CleaningUp,
            Self::Cleaned => StateName::Cleaned,
            Self::Failed { .. } => StateName::Failed,
        }
    }
}

/// Why a run failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum FailureCause {
    /// A transient state outlived its timeout.
    Timeout {
        /// The state that timed out.
        state: StateName,
        /// Its limit in milliseconds.
        limit_ms: u64,
    },
    /// The runner process died; found and finished by recovery.
    RunnerLost,
    /// The caller cancelled the run.
    Cancelled,
    /// A boundary implementation returned an error.
    Boundary {
        /// Which boundary.
        boundary: BoundaryKind,
        /// The error, as text (the typed error went to the caller).
        message: String,
    },
    /// The probe observed something the contract forbids (fail closed).
    BoundaryViolation {
        /// The mismatches, one sentence each.
        mismatches: Vec<String>,
    },
    /// A service of the run exited, or did not become ready in time.
    Service {
        /// The service's name.
        name: String,
        /// What happened, with the tail of its log.
        message: String,
    },
    /// A fixture the contract pins by digest is not what the checkout has.
    Fixture {
        /// The fixture's name.
        name: String,
        /// Its path relative to the workspace root.
        path: String,
        /// The digest the contract pins.
        expected: String,
        /// The digest of the file the checkout has; `None`: it has none.
        found: Option<String>,
    },
    /// Steps of core's own failed (its journal, its evidence, its files), not
    /// a boundary's.
    Runner {
        /// Each step that failed, in order.
        failed: Vec<StepFailure>,
    },
}

impl fmt::Display for FailureCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout { state, limit_ms } => {
                write!(f, "{state} took longer than {limit_ms} ms")
            }
            Self::RunnerLost => f.write_str("the runner was lost"),
            Self::Cancelled => f.write_str("cancelled"),
            Self::Boundary { boundary, message } => write!(f, "{boundary} boundary: {message}"),
            Self::BoundaryViolation { mismatches } => {
                write!(f, "the boundary probe saw {}", mismatches.join("; "))
            }
            Self::Service { name, message } => write!(f, "service {name}: {message}"),
            Self::Fixture {
                name,
                path,
                expected,
                found,
            } => match found {
                Some(found) => write!(
                    f,
                    "fixture {name} ({path}) has sha256 {found}, the contract pins {expected}"
                ),
                None => write!(f, "fixture {name} ({path}) is not in the checkout"),
            },
            Self::Runner { failed } => f.write_str(&crate::step::describe(failed)),
        }
    }
}

/// An operation on a run: what a verb asks the state machine to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Operation {
    /// Requested -> Waiting.
    Admit,
    /// Waiting -> Provisioning: capacity was granted.
    Provision {
        /// Where the checkout comes from.
        origin: Origin,
    },
    /// Provisioning -> StartingServices.
    StartServices,
    /// StartingServices -> Sealed: boundaries applied, probe passed, services ready.
    Seal,
    /// Sealed -> Suspended.
    Suspend,
    /// Suspended (or Detached, when its sandbox is gone) -> Provisioning(Resumed):
    /// re-verify before sealing again.
    Resume,
    /// Sealed -> Detached: the runner lets go, the sandbox stays live.
    Detach,
    /// Detached -> Sealed: a runner takes the live sandbox over again.
    Attach,
    /// Sealed -> Draining.
    Drain,
    /// Draining or Failed -> Exporting.
    Export,
    /// Exporting -> Exported.
    FinishExport,
    /// Exported, or Failed after an export attempt -> CleaningUp.
    CleanUp,
    /// CleaningUp -> Cleaned.
    FinishCleanUp,
    /// Any state but Cleaned and Failed -> Failed.
    Fail {
        /// Why.
        cause: FailureCause,
    },
}

/// An operation without its data, for tables and messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)] // each mirrors the `Operation` variant of the same name
pub enum OperationName {
    Admit,
    Provision,
    StartServices,
    Seal,
    Suspend,
    Resume,
    Detach,
    Attach,
    Drain,
    Export,
    FinishExport,
    CleanUp,
    FinishCleanUp,
    Fail,
}

impl fmt::Display for OperationName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        f.write_str(&name)
    }
}

impl Operation {
    /// The operation's name.
    pub fn name(&self) -> OperationName {
        match self {
            Self::Admit => OperationName::Admit,
            Self::Provision { .. } => OperationName::Provision,
            Self::StartServices => OperationName::StartServices,
            Self::Seal => OperationName::Seal,
            Self::Suspend => OperationName::Suspend,
            Self::Resume => OperationName::Resume,
            Self::Detach => OperationName::Detach,
            Self::Attach => OperationName::Attach,
            Self::Drain => OperationName::Drain,
            Self::Export => OperationName::Export,
            Self::FinishExport => OperationName::FinishExport,
            Self::CleanUp => OperationName::CleanUp,
            Self::FinishCleanUp => OperationName::FinishCleanUp,
            Self::Fail { .. } => OperationName::Fail,
        }
    }

    /// Whether the journal syncs this operation's record before it takes effect
    /// (the rule is in [`crate::journal`]'s docs): whether what follows it
    /// outlives a power cut, or the state it enters must be known after one.
    pub fn must_survive_power_loss(&self) -> bool {
        match self {
            // The checkout, the run directory and the leases are made on disk
            // (again, for a resume, where the host rebooted).
            Self::Provision { .. } | Self::Resume => true,
            // A parked run must still be found parked after a reboot, to be
            // resumed (or said lost) rather than cleaned up.
            Self::Suspend | Self::Detach => true,
            // Cleanup deletes the checkout; until its record is durable, a
            // reboot must find the run before cleanup, with its checkout.
            Self::CleanUp => true,
            // Why a run failed is part of its record, not left to be guessed.
            Self::Fail { .. } => true,
            // Processes, namespaces, mounts, cgroups and listeners, which a power
            // cut ends by itself, or files that recovery writes again: the
            // evidence (durable once sealed, at `FinishExport`) and the
            // idempotent steps of cleanup.
            Self::Admit
            | Self::StartServices
            | Self::Seal
            | Self::Attach
            | Self::Drain
            | Self::Export
            | Self::FinishExport
            | Self::FinishCleanUp => false,
        }
    }
}

/// Why an operation is not allowed in a state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The operation does not leave this state.
    NotFromHere,
    /// Cleanup was asked for before evidence export was attempted.
    EvidenceNotExported,
    /// The run already failed; the first cause is kept.
    AlreadyFailed,
    /// The run is cleaned; nothing more can happen to it.
    Finished,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotFromHere => "the lifecycle does not allow it from this state",
            Self::EvidenceNotExported => {
                "evidence has not been exported yet; cleanup comes only after export was attempted"
            }
            Self::AlreadyFailed => "the run has already failed; its first cause is kept",
            Self::Finished => "the run is cleaned up; nothing more can happen to it",
        })
    }
}

/// The transition table: the state `op` leads to from `state`, or why it may not.
///
/// `export_attempted` is whether the run has ever entered `Exporting`; it is what
/// makes cleanup unreachable before export.
pub fn next_state(state: &State, export_attempted: bool, op: &Operation) -> Result<State, Refusal> {
    use Operation as Op;
    use State as S;
    let next = match (state, op) {
        (S::Cleaned, _) => return Err(Refusal::Finished),
        (S::Failed { .. }, Op::Fail { .. }) => return Err(Refusal::AlreadyFailed),
        (current, Op::Fail { cause }) => S::Failed {
            at: current.name(),
            cause: cause.clone(),
        },
        (S::Requested, Op::Admit) => S::Waiting,
        (S::Waiting, Op::Provision { origin }) => S::Provisioning { origin: *origin },
        (S::Provisioning { .. }, Op::StartServices) => S::StartingServices,
        (S::StartingServices, Op::Seal) => S::Sealed,
        (S::Sealed, Op::Suspend) => S::Suspended,
        (S::Suspended | S::Detached, Op::Resume) => S::Provisioning {
            origin: Origin::Resumed,
        },
        (S::Sealed, Op::Detach) => S::Detached,
        (S::Detached, Op::Attach) => S::Sealed,
        (S::Sealed, Op::Drain) => S::Draining,
        (S::Draining | S::Failed { .. }, Op::Export) => S::Exporting,
        (S::Exporting, Op::FinishExport) => S::Exported,
        (S::Exported, Op::CleanUp) => S::CleaningUp,
        (S::Failed { .. }, Op::CleanUp) if export_attempted => S::CleaningUp,
        (_, Op::CleanUp) if !export_attempted => return Err(Refusal::EvidenceNotExported),
        (S::CleaningUp, Op::FinishCleanUp) => S::Cleaned,
        _ => return Err(Refusal::NotFromHere),
    };
    Ok(next)
}
