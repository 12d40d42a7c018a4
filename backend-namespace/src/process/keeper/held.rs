//! How the keeper holds one output file to its bound (see the keeper's module
//! docs and `workspace_core::boundary::output_keeper`): it waits for the
//! runner while the runner follows the file and it is too far ahead, and
//! releases the file's middle itself once nobody follows. Runs in the forked
//! keeper: plain data and raw calls, no allocation.

use std::ffi::c_int;

use workspace_core::boundary::{releasable, too_far_ahead};
use workspace_core::evidence::HeadTail;

use super::Holding;
use crate::sys::pipe_io;

/// How many bytes the keeper writes to a file between two looks at how much
/// of it is on disk (to wait for its follower, or to release its middle).
const CHECK_EVERY: u64 = 256 << 10;

/// How one file is held to its bound, in the keeper (plain data: no
/// allocation after the fork).
pub(super) struct Held {
    bound: Option<HeadTail>,
    /// Whether the runner follows the file (and releases what it read).
    followed: bool,
    /// Whether the file system releases (punches holes); without it, what
    /// passes the bound is dropped.
    can_release: bool,
    /// Where the part held to the bound begins.
    start: u64,
    /// How far the keeper released it.
    released: u64,
    /// Bytes written to it (since it started).
    written: u64,
    /// Bytes written since the last look at it.
    unchecked: u64,
    /// Whether reading its pipe waits for the follower.
    pub(super) waiting: bool,
}

impl Held {
    /// How `file`, `size` bytes long when the keeper started, is held.
    pub(super) fn new(file: c_int, size: u64, holding: Holding) -> Self {
        // Released past the end of the file: nothing, but says whether the
        // file system can.
        let can_release =
            holding.bound.is_some() && pipe_io::release(file, size, size + 4096).is_ok();
        Self {
            bound: holding.bound,
            followed: holding.followed,
            can_release,
            start: size,
            released: 0,
            written: 0,
            unchecked: 0,
            waiting: false,
        }
    }

    /// How many of `n` bytes just read go to the file: all, unless the file
    /// system cannot release and the bound is reached.
    pub(super) fn admit(&self, n: usize) -> usize {
        match self.bound {
            Some(bound) if !self.can_release => {
                let room = bound.cap().saturating_sub(self.written);
                n.min(usize::try_from(room).unwrap_or(usize::MAX))
            }
            _ => n,
        }
    }

    /// Counts `n` bytes written to `file`; looks at the file every
    /// [`CHECK_EVERY`] bytes.
    pub(super) fn wrote(&mut self, file: c_int, n: usize) {
        self.written += n as u64;
        self.unchecked += n as u64;
        if self.unchecked >= CHECK_EVERY {
            self.look(file);
        }
    }

    /// Followed: waits while the file is too far ahead of its follower.
    /// Else: releases its middle.
    pub(super) fn look(&mut self, file: c_int) {
        let Some(bound) = self.bound.filter(|_| self.can_release) else {
            return;
        };
        if !self.waiting && self.unchecked < CHECK_EVERY {
            return;
        }
        self.unchecked = 0;
        let Ok((size, allocated)) = pipe_io::file_size_and_allocated(file) else {
            return;
        };
        if self.followed {
            self.waiting = too_far_ahead(bound, allocated);
            return;
        }
        self.waiting = false;
        let (from, to) = releasable(bound, self.start, size, self.released);
        if from < to && pipe_io::release(file, from, to).is_ok() {
            self.released = to;
        }
    }

    /// Nobody follows the file any more: the command ended (`late`: what
    /// comes now is held to the bound from here) or the runner is gone
    /// (held from where it started).
    pub(super) fn unfollowed(&mut self, file: c_int, late: bool) {
        if !self.followed {
            return;
        }
        self.followed = false;
        self.waiting = false;
        if late {
            self.start = pipe_io::file_size(file).unwrap_or(self.start);
            self.written = 0;
        }
        // What the runner released is released.
        self.released = 0;
    }
}
