//! The crate's one seam to the operating system's raw calls: the system calls
//! that `nix` does not wrap safely, or that a cloned child must make without
//! glibc (clone, the new mount API, pid file descriptors, id changes).
//!
//! Everything here is async-signal-safe, because most of it runs in a fork-style
//! child of a multi-threaded process (see [`clone::fork_like`]): nothing
//! allocates, takes a lock, formats with `core::fmt` or panics. Paths are
//! `CStr`s prepared before `clone`, and anything built here (a component name,
//! a `/proc/self/fd/N` path) lives in a fixed-size stack buffer. Errors are
//! plain `errno` values. Each `unsafe` block says why it is sound; the callers
//! outside this module need none for these calls.

pub(crate) mod clone;
pub(crate) mod errno;
pub(crate) mod exec;
pub(crate) mod fd;
pub(crate) mod ids;
pub(crate) mod mount;
pub(crate) mod mount_root;
pub(crate) mod net;
pub(crate) mod path;
pub(crate) mod pidfd;
pub(crate) mod pipe_io;
pub(crate) mod process;
pub(crate) mod reactor;
pub(crate) mod signal;
pub(crate) mod socket;
pub(crate) mod thread_creds;
pub(crate) mod tty;

pub(crate) use clone::{Birth, fork_like, vfork_like};
pub(crate) use errno::Errno;
pub(crate) use exec::{CStrArray, execve};
pub(crate) use fd::{Fd, close, read_byte, write_all};
pub(crate) use path::{
    OpenHow, StackPath, create_dir, create_file, create_file_with_mode, dev_ino, open_existing,
    open_no_symlinks, symlink_at, walk_parent,
};
