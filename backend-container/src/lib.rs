//! backend-container: the Process, Environment and Identity boundaries of
//! agent-workspace through an OCI runtime (crun, runc or youki, driven by their CLI).
//!
//! **Status: not implemented yet.** This crate holds no boundary implementation
//! today; a stack cannot use it. It will generate an OCI bundle (with `oci-spec`
//! types) from the same mount plan and limits the namespace backend applies, run the
//! agent's commands with the runtime, and record the observed boundary the same way.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
