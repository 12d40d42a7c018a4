//! The network namespace in a cloned child.

use nix::libc;

use super::errno::{Errno, check};
use super::fd::Fd;

/// `ip link set lo up`, with two ioctls (no netlink needed).
pub(crate) fn loopback_up() -> Result<(), Errno> {
    // SAFETY: socket(2) with constant arguments.
    let socket = Fd::from_new(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: `ifreq` is plain data; all-zero is valid.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    request.ifr_name[0] = b'l' as libc::c_char;
    request.ifr_name[1] = b'o' as libc::c_char;
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS take a `struct ifreq *`, which
    // `request` is.
    check(unsafe { libc::ioctl(socket.raw(), libc::SIOCGIFFLAGS, &mut request) })?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    unsafe { request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: as above.
    check(unsafe { libc::ioctl(socket.raw(), libc::SIOCSIFFLAGS, &request) }).map(drop)
}
