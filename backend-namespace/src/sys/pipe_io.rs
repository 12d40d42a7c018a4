//! Raw pipe reads for a fork-style child that copies pipes into files (the
//! output keeper, `process/keeper.rs`): async-signal-safe, no allocation.

use std::ffi::c_int;

use nix::libc;

use super::errno::{self, Errno, check};

/// Reads what is there into `buf`: `Ok(0)` at end of file; `EAGAIN` from a
/// non-blocking descriptor with nothing to read; `EINTR` retried.
pub(crate) fn read_some(fd: c_int, buf: &mut [u8]) -> Result<usize, Errno> {
    loop {
        // SAFETY: the pointer and length describe a live, writable slice.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = errno::last();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// How many bytes a pipe holds unread (`FIONREAD`).
pub(crate) fn bytes_waiting(fd: c_int) -> Result<usize, Errno> {
    let mut n: c_int = 0;
    // SAFETY: FIONREAD writes one int through a valid pointer to a local.
    check(unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) })?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// Makes reads of `fd`'s open file description non-blocking.
pub(crate) fn set_nonblocking(fd: c_int) -> Result<(), Errno> {
    // SAFETY: reads and changes status flags; no memory effect.
    let flags = check(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    // SAFETY: as above.
    check(unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// The size of the file `fd` is open on.
pub(crate) fn file_size(fd: c_int) -> Result<u64, Errno> {
    // SAFETY: `stat` is plain data; fstat fills it.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer to a local.
    check(unsafe { libc::fstat(fd, &mut stat) })?;
    Ok(u64::try_from(stat.st_size).unwrap_or(0))
}

/// The size of the file `fd` is open on and the bytes it has allocated
/// (`st_blocks`, which counts what is written and not yet released).
pub(crate) fn file_size_and_allocated(fd: c_int) -> Result<(u64, u64), Errno> {
    // SAFETY: `stat` is plain data; fstat fills it.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer to a local.
    check(unsafe { libc::fstat(fd, &mut stat) })?;
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    let allocated = u64::try_from(stat.st_blocks)
        .unwrap_or(0)
        .saturating_mul(512);
    Ok((size, allocated))
}

/// Releases the bytes `[from, to)` of the file `fd` is open on for writing
/// (a hole: they read as zeros, the size stays); nothing when the range is
/// empty.
pub(crate) fn release(fd: c_int, from: u64, to: u64) -> Result<(), Errno> {
    if to <= from {
        return Ok(());
    }
    let (Ok(offset), Ok(len)) = (
        libc::off_t::try_from(from),
        libc::off_t::try_from(to - from),
    ) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: no memory is passed; the kernel checks the descriptor.
    check(unsafe {
        libc::fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    })
    .map(drop)
}
