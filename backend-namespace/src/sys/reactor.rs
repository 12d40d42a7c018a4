//! Descriptors handed to tokio's reactor.

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// Registers `fd` with the current tokio reactor for `interest`. Must be called
/// within a runtime.
pub(crate) fn register(fd: OwnedFd, interest: Interest) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` always returns the same open descriptor, which stays
    // open until the `OwnedFd` (owned by the `AsyncFd`) is dropped.
    unsafe { AsyncFd::register_with_interest(fd, interest) }.map_err(io::Error::from)
}
