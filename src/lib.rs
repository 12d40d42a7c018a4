//! agent-workspace: every coding-agent run gets its own isolated, reviewable
//! workspace, described by a contract of six boundaries (source, filesystem,
//! process, environment, identity, promotion) and kept by the operating system.
//!
//! This facade re-exports the member crates:
//!
//! * [`core`] (`workspace-core`): the contract, the six boundary traits, the
//!   lifecycle, the journal, the evidence bundle, capacity and leases;
//! * [`worktree`] (`backend-worktree`): source, host-side filesystem and promotion;
//! * [`namespace`] (`backend-namespace`): process, environment and identity with
//!   Linux namespaces;
//! * [`container`] (`backend-container`): the same through an OCI runtime.
//!
//! ```
//! use agent_workspace::core::contract::{Contract, SourceSection, TaskShape};
//!
//! let contract = Contract::preset(
//!     TaskShape::NarrowFix,
//!     "fix the flaky retry test",
//!     SourceSection::new(".", "HEAD"),
//! );
//! assert!(contract.validate().is_ok());
//! // What a reviewer reads, and what a backend must enforce or reject:
//! let toml = contract.to_toml().unwrap();
//! assert!(toml.contains("mode = \"deny\""));
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use backend_container as container;
pub use backend_namespace as namespace;
pub use backend_worktree as worktree;
pub use workspace_core as core;

mod stack;

pub use stack::{DEFAULT_CGROUP_PARENT, HostDirs, namespace_stack};
