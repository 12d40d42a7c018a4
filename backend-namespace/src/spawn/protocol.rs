//! What the parent and a cloned child agree on: the descriptor numbers the child
//! finds its pipes at, the bytes of the "go" message, and where the host's root
//! is while the mount plan is applied. One file, so every side of the handshake
//! reads the same numbers and no side imports another for them.

use std::ffi::c_int;

/// The go byte when the child should clear its supplementary groups.
pub(crate) const GO_CLEAR_GROUPS: u8 = 1;
/// The go byte when `setgroups` was denied (groups stay as inherited).
pub(crate) const GO_GROUPS_DENIED: u8 = 2;

/// The child reads the parent's go byte here.
pub(crate) const FD_GO: c_int = 3;
/// The child writes an encoded setup failure here.
pub(crate) const FD_ERROR: c_int = 4;
/// The supervisor writes the command's exit status here.
pub(crate) const FD_STATUS: c_int = 5;
/// The first of the files the child writes to join the run's cgroups (`tasks`,
/// or the v2 `cgroup.procs`).
pub(crate) const FD_CGROUP: c_int = 6;
