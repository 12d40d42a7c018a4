//! What the helper programs the backends start (the egress proxy, the preview
//! forwarder) share.

use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};

/// What a helper says while it drops its privileges.
pub(crate) const BECOMING_RUN_USER: &str = "dropping to the run's host user";

/// Makes this process the run's host user `uid`/`gid`, with no supplementary
/// group, in every thread (glibc changes the ids of all of them), once it holds
/// what it needed its privileges for.
pub(crate) fn become_run_user(uid: u32, gid: u32) -> nix::Result<()> {
    setgroups(&[])?;
    setgid(Gid::from_raw(gid))?;
    setuid(Uid::from_raw(uid))
}
