//! The rows that keep a run from making a file the host would honour: a
//! set-user-id or set-group-id file, or a device node.
//!
//! Whatever a run writes to a path the host also reaches (a writable cache
//! granted from the host, a service template published into the host's store,
//! the run's writable layer) is a file on the host's file system. Its owner on
//! disk is a host id: the cache's owner through an idmapped mount (host root
//! for a cache root owns), or the run's own host id. Owning a file is all the
//! kernel asks to set its set-id bits, so a run could leave a copy of a shell,
//! set-user-id to host root, in a cache any local user may execute. Neither
//! the namespaces nor the empty capability sets stop that: the bits are set
//! on a file the run owns. So the filter refuses every syscall that sets them:
//!
//! | syscall | refused (`EPERM`) when |
//! |---|---|
//! | `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `creat` | the mode has `S_ISUID` or `S_ISGID` |
//! | `open`, `openat` | the flags create a file (`O_CREAT`, `O_TMPFILE`) and the mode has `S_ISUID` or `S_ISGID` |
//! | `mknod`, `mknodat` | the mode has `S_ISUID` or `S_ISGID`, or makes a character or block device |
//! | `openat2` (`ENOSYS`) | always: its mode is in a struct seccomp cannot read; libc and every caller that knows `openat2` fall back to `openat` |
//!
//! What else could put the bits on a file is closed elsewhere: `mkdir` never
//! sets them (the kernel keeps only the permission and sticky bits), a
//! write or `chown` clears them, a hard link or rename cannot cross into
//! another mount (`EXDEV`), io_uring is refused, and a file capability
//! (`security.capability`) needs `CAP_SETFCAP`, which no process of a run holds.
//! The sticky bit stays allowed: it grants nothing.

use super::Denial;

/// `S_ISUID | S_ISGID`.
pub(crate) const SET_ID: u32 = 0o6000;
/// `O_CREAT | __O_TMPFILE` (the same on x86_64 and aarch64): a call that makes
/// a file, so its mode argument counts.
pub(crate) const CREATES: u32 = 0o100 | 0o2000_0000;
/// `S_IFMT`.
pub(crate) const FILE_TYPE: u32 = 0o170000;
/// `S_IFCHR`.
pub(crate) const CHAR_DEVICE: u32 = 0o020000;
/// `S_IFBLK`.
pub(crate) const BLOCK_DEVICE: u32 = 0o060000;

/// What the filter checks of a row's arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModeCheck {
    /// `EPERM` when argument `mode` has a set-id bit.
    SetId {
        /// The mode's argument index.
        mode: u8,
    },
    /// `EPERM` when argument `flags` creates a file and argument `mode` has a
    /// set-id bit.
    CreatingSetId {
        /// The flags' argument index.
        flags: u8,
        /// The mode's argument index.
        mode: u8,
    },
    /// `EPERM` when argument `mode` has a set-id bit or is a character or
    /// block device's.
    SetIdOrDevice {
        /// The mode's argument index.
        mode: u8,
    },
    /// `ENOSYS` whatever the arguments (they are behind a pointer).
    Unreadable,
}

impl ModeCheck {
    /// How this row fails, for the evidence.
    pub(crate) fn denial(self) -> Denial {
        match self {
            Self::SetId { .. } => Denial::EpermWithSetIdMode,
            Self::CreatingSetId { .. } => Denial::EpermCreatingSetIdFile,
            Self::SetIdOrDevice { .. } => Denial::EpermSetIdOrDeviceNode,
            Self::Unreadable => Denial::Enosys,
        }
    }
}

/// One row: a syscall that can set a file's mode, and its numbers (`None` where
/// the architecture has no such syscall: aarch64 has only the `*at` forms).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ModeEntry {
    pub(crate) name: &'static str,
    pub(crate) x86_64: Option<u32>,
    pub(crate) aarch64: Option<u32>,
    pub(crate) check: ModeCheck,
}

const fn m(name: &'static str, x86_64: u32, aarch64: Option<u32>, check: ModeCheck) -> ModeEntry {
    ModeEntry {
        name,
        x86_64: Some(x86_64),
        aarch64,
        check,
    }
}

/// The rows, in the order of the module documentation.
pub(crate) const MODE_TABLE: &[ModeEntry] = &[
    m("chmod", 90, None, ModeCheck::SetId { mode: 1 }),
    m("fchmod", 91, Some(52), ModeCheck::SetId { mode: 1 }),
    m("fchmodat", 268, Some(53), ModeCheck::SetId { mode: 2 }),
    m("fchmodat2", 452, Some(452), ModeCheck::SetId { mode: 2 }),
    m("creat", 85, None, ModeCheck::SetId { mode: 1 }),
    m(
        "open",
        2,
        None,
        ModeCheck::CreatingSetId { flags: 1, mode: 2 },
    ),
    m(
        "openat",
        257,
        Some(56),
        ModeCheck::CreatingSetId { flags: 2, mode: 3 },
    ),
    m("mknod", 133, None, ModeCheck::SetIdOrDevice { mode: 1 }),
    m(
        "mknodat",
        259,
        Some(33),
        ModeCheck::SetIdOrDevice { mode: 2 },
    ),
    m("openat2", 437, Some(437), ModeCheck::Unreadable),
];
