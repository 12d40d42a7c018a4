//! The core of agent-workspace: the workspace contract, the six boundary traits,
//! the lifecycle of a run, its journal and crash recovery, the evidence bundle,
//! capacity reservations and host-wide leases.
//!
//! ```
//! use workspace_core::RunId;
//! use workspace_core::contract::{Contract, SourceSection, TaskShape};
//! use workspace_core::evidence::{EvidenceFile, EvidenceWriter, verify};
//! use workspace_core::lifecycle::{Lifecycle, Origin, Timeouts};
//!
//! let dir = tempfile::tempdir().unwrap();
//! // The contract: what the run may do, checked before anything happens.
//! let contract = Contract::preset(
//!     TaskShape::NarrowFix,
//!     "fix the flaky retry test",
//!     SourceSection::new("../service", "HEAD"),
//! );
//! contract.validate().unwrap();
//!
//! // The lifecycle: every transition journaled before it takes effect.
//! let run = RunId::new("run-1").unwrap();
//! let mut life = Lifecycle::create(dir.path().join("run-1.jsonl"), run.clone(), Timeouts::default()).unwrap();
//! life.admit().unwrap();
//! life.provision(Origin::Fresh).unwrap();
//! // ... provisioning fails: evidence is still exported before cleanup.
//! life.fail(workspace_core::lifecycle::FailureCause::Cancelled).unwrap();
//! assert!(life.clean_up().is_err(), "cleanup before export is refused");
//! life.export().unwrap();
//! let evidence = EvidenceWriter::create(&dir.path().join("evidence"), &run).unwrap();
//! evidence.write_json(EvidenceFile::Contract, &contract).unwrap();
//! evidence.seal().unwrap();
//! life.finish_export().unwrap();
//! life.clean_up().unwrap();
//! life.finish_clean_up().unwrap();
//!
//! // The bundle is tamper-evident.
//! assert!(verify(evidence.dir()).unwrap().is_intact());
//! ```
//!
//! The modules, in the order a run uses them: [`contract`] (declared boundaries and
//! their validation), [`boundary`] (the traits backends implement and the
//! [`boundary::Stack`] that composes them), [`capacity`] and [`lease`] (admission and
//! host-wide unique resources), [`lifecycle`] and [`journal`] (the state machine and
//! its durable record), [`evidence`] (the bundle a reviewer trusts), [`recovery`]
//! (finishing runs whose runner died) and [`runner`], which drives a run through
//! all of them over a [`boundary::Stack`].
//!
//! **Plugging in a backend.** A backend is an implementation of one or more of
//! the six boundary traits, swapped into a [`boundary::Stack`] (e.g. the facade's
//! `namespace_stack`, with `stack.environment` replaced by your own). The
//! conformance kit (`conformance`, feature `conformance`) then tells whether the
//! composed stack keeps the promises of the contract: every case `passed`,
//! `unsupported` by a declared capability, or `failed` with what it observed. The
//! facade's `examples/vendor_backend.rs` does exactly that with an Environment
//! boundary written outside this project.
//!
//! This crate has no backend, no Linux-only code and no `unsafe`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod boundary;
pub mod capacity;
pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod contract;
pub mod digest;
pub mod egress;
pub mod evidence;
pub mod journal;
pub mod lease;
pub mod lifecycle;
pub mod mount_plan;
pub mod observation;
#[cfg(target_os = "linux")]
pub mod own_dirs;
pub mod private_dirs;
pub mod recovery;
mod run_id;
pub mod runner;
pub mod step;
pub mod subordinate;

pub use error_chain::error_chain;
mod error_chain;

pub use run_id::{InvalidRunId, RunId};
