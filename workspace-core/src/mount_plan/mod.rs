//! The mount plan: what the file system of an isolated run is made of, as data.
//!
//! It is built here, from the contract, the source record and the run's identity,
//! and applied by an isolating backend (namespaces, or an OCI bundle), so both
//! backends keep the same filesystem boundary and the evidence can record exactly
//! the plan that was applied. Building the plan touches no file system: what the host
//! offers (which system directories exist, which are symlinks, which `/etc` files
//! to pass through, which workspace paths the `excluded` globs matched) comes in as
//! [`HostLayout`] and [`PlanInputs`], probed by the backend.
//!
//! The plan, in the order applied on a fresh tmpfs root:
//!
//! 1. host system directories read-only (`/usr`, `/bin`, `/lib*`, `/sbin`), or the
//!    symlinks a merged-`/usr` host has instead;
//! 2. a minimal `/etc`: `passwd` and `group` with the run's identity, `hostname`,
//!    `hosts`, and the host files the backend passes through read-only
//!    (`resolv.conf`, the certificate store);
//! 3. the source repository's object store read-only, at its host path (the
//!    checkout's alternates name it);
//! 4. the workspace at `filesystem.root`: a bind of the checkout, or the overlay of a
//!    layered one; read-only except the writable paths; read-only paths and
//!    excluded paths on top;
//! 5. declared host mounts (read-only unless `danger-read-write`);
//! 6. a private `/tmp` (tmpfs with a size cap), the home directory, a minimal `/dev`
//!    (null, zero, full, random, urandom, tty; pts when a PTY is asked for), a fresh
//!    `/proc` with `/proc/sys` and friends read-only, a fresh read-only `/sys` (the
//!    run's own network devices, no host cgroup tree) with `/sys/firmware` hidden.
//!
//! Every mount is `nosuid` and `nodev` except the device binds of `/dev` (which need
//! device access and are still `nosuid`); the backend applies these flags, the plan
//! marks which steps are device binds. Building the plan is linear in the number of
//! steps (duplicate targets are found with a hash set), so thousands of grants cost
//! what they must.

mod build;
mod checkout;
mod excluded_record;
mod host;
mod lower_walks;
mod types;

pub use build::{HostLayout, PlanInputs, SystemEntry};
pub use checkout::{
    CheckoutError, PROTECTED_EXCLUSIONS, excluded_paths, excluded_paths_layered, exclusion_matcher,
};
pub use excluded_record::{EXCLUDED_RECORD_FILE, excluded_paths_kept};
pub use host::{
    ETC_PATHS, HostLayoutError, IMAGE_RESERVED, SYSTEM_PATHS, probe_host_layout, probe_image,
    probe_under,
};
pub use types::{MountAction, MountPlan, MountPoint, MountStep, Reason};

#[cfg(test)]
mod tests;
