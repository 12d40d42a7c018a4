//! Which host ids a run's ids map to.
//!
//! A run's user namespace maps exactly one uid and one gid. Host root may map
//! them to any host id, so each run gets an unprivileged id of its own range
//! ([`HostIds::Offset`]): the run is never the user who started it, and the
//! checkout is handed over to that id (`handover.rs`). An ordinary user may map
//! only its own ids without a set-user-id helper, so its runs are that user on
//! the host ([`HostIds::Caller`]), as a `bwrap --unshare-user` sandbox is: what
//! the run writes in its checkout and caches stays the caller's own (no
//! handover, no idmapped mount, cleanup with the caller's rights), and the
//! namespaces, not a distinct uid, keep the run away from the caller's other
//! files and processes (it sees only its mount plan, its pid namespace and its
//! loopback).

use super::error::ProcessError;

/// The host id that id 0 inside a run maps to as root; id `n` maps to base + `n`.
pub use workspace_core::subordinate::DEFAULT_HOST_ID_BASE;

/// Which host ids a run's uid and gid map to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostIds {
    /// Id `n` inside maps to host id `base + n` (needs `CAP_SETUID` and
    /// `CAP_SETGID` on the host: root).
    Offset {
        /// The host id that id 0 inside maps to.
        base: u32,
    },
    /// The run's uid and gid map to these host ids, whatever they are inside:
    /// the calling user's own, which an unprivileged process may map.
    Caller {
        /// The caller's effective uid.
        uid: u32,
        /// The caller's effective gid.
        gid: u32,
    },
}

impl HostIds {
    /// [`HostIds::Offset`] from [`DEFAULT_HOST_ID_BASE`] (or
    /// `AGENT_WORKSPACE_HOST_ID_BASE`) as root, else [`HostIds::Caller`] with
    /// this process's effective ids.
    ///
    /// # Ambient authority
    /// Reads the process's effective uid and gid, and its environment.
    pub fn for_this_process() -> Self {
        let uid = nix::unistd::geteuid();
        if uid.is_root() {
            Self::Offset {
                base: workspace_core::subordinate::host_id_base(),
            }
        } else {
            Self::Caller {
                uid: uid.as_raw(),
                gid: nix::unistd::getegid().as_raw(),
            }
        }
    }

    /// The host uid and gid of a run that is `uid`:`gid` inside.
    pub fn of(self, uid: u32, gid: u32) -> Result<(u32, u32), ProcessError> {
        match self {
            Self::Offset { base } => {
                let host = |id: u32| {
                    base.checked_add(id)
                        .ok_or(ProcessError::HostIdOverflow { base, id })
                };
                Ok((host(uid)?, host(gid)?))
            }
            Self::Caller { uid, gid } => Ok((uid, gid)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_adds_the_id_inside_and_refuses_an_overflow() {
        let ids = HostIds::Offset { base: 100_000 };
        assert_eq!(ids.of(1000, 1000).unwrap(), (101_000, 101_000));
        assert!(matches!(
            HostIds::Offset { base: u32::MAX }.of(1, 0),
            Err(ProcessError::HostIdOverflow { id: 1, .. })
        ));
    }

    #[test]
    fn a_caller_mapping_is_the_same_for_every_id_inside() {
        let ids = HostIds::Caller {
            uid: 1001,
            gid: 1002,
        };
        assert_eq!(ids.of(0, 0).unwrap(), (1001, 1002));
        assert_eq!(ids.of(1000, 1000).unwrap(), (1001, 1002));
    }
}
