//! Reading what a process in the container wrote to a pipe, bounded in time.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use nix::errno::Errno;

/// Everything `read` gives until EOF (at most 1 MiB kept), or `None` when
/// `deadline` passes first.
pub(super) fn read_until(read: OwnedFd, deadline: Instant) -> std::io::Result<Option<String>> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut output = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let ms = u16::try_from(left.as_millis().max(1)).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(read.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        match nix::unistd::read(read.as_fd(), &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let keep = n.min((1usize << 20).saturating_sub(output.len()));
                output.extend_from_slice(&buf[..keep]);
            }
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(String::from_utf8_lossy(&output).into_owned()))
}
