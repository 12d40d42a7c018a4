//! backend-namespace: the Process, Environment and Identity boundaries of
//! agent-workspace with Linux namespaces; the embedded default backend.
//!
//! **Status: in progress.** The boundary implementations (the mount plan applied on
//! a fresh root with `pivot_root`; user, mount, pid, net, uts, ipc and cgroup
//! namespaces set up in the child; a small init as pid 1; `no_new_privs`, emptied
//! capability sets) are not written yet. What is here are the parts they are built
//! from, each usable and tested on its own:
//!
//! * [`cgroup`]: per-run control groups on cgroup v1, v2 or the hybrid layout, with
//!   memory, pids and cpu limits, OOM detection, whole-tree kill and removal;
//! * [`seccomp`]: the seccomp filter for what namespaces do not cover;
//! * [`host_check`]: what this host supports, with a remediation for each gap;
//! * [`environment`] and [`identity`]: the Environment and Identity boundaries'
//!   decisions (a cleared environment with an allowlist, finite default limits, the
//!   run user, issued credentials), which the process boundary applies;
//! * [`spawn`]: one command in fresh user, mount, pid, net, uts, ipc and cgroup
//!   namespaces with the mount plan applied on a new root, a minimal init as pid 1,
//!   emptied capability sets and `no_new_privs`;
//! * [`process`]: [`process::NamespaceProcess`], the Process boundary: seals a run
//!   (cgroups, mount plan, a probe inside), spawns commands in it with tokio
//!   streams, time and memory limits, and tears it down with a leak report.
#![deny(missing_docs)]

pub mod cgroup;
pub mod environment;
pub mod host_check;
pub mod identity;
pub mod process;
pub mod seccomp;
pub mod spawn;
