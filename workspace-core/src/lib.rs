//! The core of agent-workspace.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod capacity;
pub mod evidence;
pub mod journal;
pub mod lease;
pub mod recovery;
mod run_id;

pub use run_id::{InvalidRunId, RunId};
