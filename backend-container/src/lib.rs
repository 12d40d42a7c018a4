//! backend-container: the Process, Environment and Identity boundaries of
//! agent-workspace through an OCI runtime (runc, crun or youki, driven by
//! their command line).
//!
//! * [`process`]: [`ContainerProcess`](process::ContainerProcess), the
//!   Process boundary — one live container per workspace, sealed from the
//!   core mount plan and probed to core's
//!   [`observation`](workspace_core::observation) standard, commands
//!   `exec`'d detached into cgroups of their own, detach and attach, pause as
//!   suspend, teardown with proof that no runtime state, cgroup, mount or
//!   process is left;
//! * [`bundle`]: an OCI bundle (`config.json` built with `oci-spec` types, and
//!   its root directory) from the same core [`MountPlan`] the namespace
//!   backend applies, with the run's limits, ids (a user namespace mapping
//!   them to unprivileged host ids), environment, no capability,
//!   `no_new_privs` and a seccomp filter ([`seccomp`]);
//! * [`image`]: pinned OCI images (`environment.runtime.image =
//!   "oci-layout:PATH@sha256:DIGEST"`): manifest, config and layers verified
//!   against their digests, the layers applied once per host (whiteouts
//!   included, nothing escaping the root) into a cache the run's base system
//!   is bound from, read-only, instead of the host's;
//! * [`runtime`]: the runtime found by name or on `PATH` and recorded with its
//!   version (crun on this hybrid cgroup layout is refused, saying so), its
//!   containers created, `exec`'d into, paused, resumed, killed and deleted,
//!   their state read as `oci-spec`'s `State`;
//! * [`environment`] and [`identity`]: the Environment and Identity
//!   boundaries, which plan a run's variables, limits, ids and credentials
//!   as core does for every backend, and declare what a container keeps (its
//!   private loopback; no allowlist, which needs an egress proxy).
//!
//! The facade's `container_stack` puts it beside backend-worktree's source,
//! filesystem and promotion (and the helper program as the preview forwarder
//! of `process.ports`, [`process::preview`]); `agent-workspace run --backend
//! container` drives it. Service templates are a per-run copy (no idmapped
//! mounts in the runtimes it drives). Not yet: terminals (a command asking
//! for one is refused).
//!
//! ```
//! use backend_container::bundle::{self, BundleInputs, IdMaps};
//! use workspace_core::boundary::ResolvedLimits;
//! use workspace_core::mount_plan::{MountAction, MountPlan, MountStep, Reason};
//!
//! let plan = MountPlan {
//!     root_size_bytes: 1 << 20,
//!     steps: vec![MountStep {
//!         target: "/usr".into(),
//!         action: MountAction::Bind { source: "/usr".into(), read_only: true },
//!         reason: Reason::System,
//!     }],
//!     workdir: "/".into(),
//!     hostname: "run-1".into(),
//! };
//! let spec = bundle::spec(&BundleInputs {
//!     plan: &plan,
//!     argv: &["/usr/bin/true".into()],
//!     env: &[],
//!     ids: IdMaps { uid: 1000, gid: 1000, host_uid: 101_000, host_gid: 101_000, host_root: 100_000 },
//!     limits: &ResolvedLimits::default(),
//!     cgroups_path: "agent-workspace/run-1",
//! })?;
//! assert_eq!(spec.hostname().as_deref(), Some("run-1"));
//! # Ok::<(), backend_container::ContainerError>(())
//! ```
//!
//! [`MountPlan`]: workspace_core::mount_plan::MountPlan
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod bundle;
pub mod environment;
pub mod error;
pub mod identity;
pub mod image;
pub mod process;
pub mod runtime;
pub mod seccomp;
mod template;

pub use error::ContainerError;
