//! backend-namespace: the Process, Environment and Identity boundaries of
//! agent-workspace with Linux namespaces; the embedded default backend.
//!
//! **Status: not implemented yet.** This crate holds no boundary implementation
//! today; a stack cannot use it. It will hold:
//!
//! * a mount plan applied on a fresh tmpfs root with `pivot_root` (system
//!   directories read-only, the workspace read-write, overlayfs for layered
//!   checkouts, masked exclusions, private `/tmp`, minimal `/dev`, fresh `/proc`);
//! * user, mount, pid, net, uts, ipc and cgroup namespaces set up in the child (never
//!   `unshare` in the host process), a small init as pid 1, `no_new_privs`, every
//!   capability set emptied and a seccomp filter;
//! * a cleared environment with an allowlist and injected short-lived credentials;
//! * cgroup (v1 and v2) and rlimit limits, wall-clock timeouts that kill the whole
//!   tree, and a probe that records the observed boundary and fails closed.
#![deny(missing_docs)]
