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
//! * [`container`] (`backend-container`): the same through an OCI runtime (not
//!   implemented yet: `--backend container` says so).
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
//!
//! One agent command in an isolated workspace, from a host application (as root
//! on Linux; see `examples/quickstart.rs` for the whole program):
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use agent_workspace::core::boundary::CommandSpec;
//! use agent_workspace::core::capacity::{Capacity, Resources};
//! use agent_workspace::core::contract::{Contract, SourceSection, TaskShape};
//! use agent_workspace::core::runner::{CommandIo, CreateOptions, Runner, RunnerConfig};
//!
//! // The runner closes both to other users before its first run: every
//! // run's files live under the runtime directory.
//! let dirs = agent_workspace::HostDirs::from_env();
//! let runner = Runner::new(
//!     agent_workspace::namespace_stack(agent_workspace::DEFAULT_CGROUP_PARENT)?,
//!     RunnerConfig::new(dirs.runtime, dirs.evidence),
//!     Arc::new(Capacity::new(Resources { cpu_millis: 8_000, memory_bytes: 16 << 30, disk_bytes: u64::MAX, slots: 8 })),
//! );
//! let contract = Contract::preset(TaskShape::NarrowFix, "fix the test", SourceSection::new("/src/service", "HEAD"));
//! let command = CommandSpec::new(vec!["cargo".into(), "test".into()]);
//! let report = runner.run(contract, &command, CommandIo::captured(), CreateOptions::default()).await?;
//! println!("exit {:?}, evidence in {}", report.last_command().map(|c| c.shell_status()), report.evidence.display());
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use backend_container as container;
pub use backend_namespace as namespace;
pub use backend_worktree as worktree;
pub use workspace_core as core;

mod danger_host;
pub mod egress;
mod helper;
mod host_credentials;
pub mod preview;
mod stack;

pub use danger_host::{DangerNoIsolationProcess, danger_no_isolation_stack};
pub use host_credentials::{ENV_SOURCE_PREFIX, HostEnvCredentialError, HostEnvCredentials};
pub use stack::{
    DEFAULT_CGROUP_PARENT, HELPER_PROGRAM_VAR, HostDirs, LayeredStackError, container_stack,
    default_cgroup_parent, default_cgroup_parent_here, helper_program, namespace_stack,
    namespace_stack_layered,
};
pub use workspace_core::private_dirs::PrivateDirError;
