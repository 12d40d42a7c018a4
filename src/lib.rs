//! agent-workspace facade.
#![deny(missing_docs)]
pub use workspace_core as core;
