//! Async-signal-safe helpers for the child: raw system calls on prepared data.
//!
//! Nothing here allocates, takes a lock, formats with `core::fmt` or panics: paths
//! are `CStr`s prepared before `clone`, and anything built here (a component name, a
//! `/proc/self/fd/N` path) lives in a fixed-size stack buffer. Errors are plain
//! `errno` values.

use std::ffi::{CStr, c_char, c_int};

use nix::libc;

/// An `errno` value.
pub(crate) type Errno = i32;

/// The calling thread's `errno`.
pub(crate) fn errno() -> Errno {
    nix::errno::Errno::last_raw()
}

/// `Ok(ret)` for a non-negative return value, else `Err(errno)`.
pub(crate) fn check(ret: c_int) -> Result<c_int, Errno> {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

/// `Ok(ret)` for a non-negative `syscall(2)` return value, else `Err(errno)`.
pub(crate) fn check_long(ret: libc::c_long) -> Result<libc::c_long, Errno> {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

/// Where a fork-style child was placed by its own clone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Birth {
    /// `clone3` put it in the cgroup v2 directory it was asked for
    /// (`CLONE_INTO_CGROUP`): it is there already and must not migrate again.
    InCgroup,
    /// It was born in its parent's cgroups: no directory was asked for, or the
    /// kernel (or a seccomp filter around the runner) has no `clone3`.
    WithParent,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7). The `libc` constant of that name is an
/// `int` that overflows; the flag lives in `clone3`'s 64-bit flags.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// A fork-style clone with `flags` (namespaces; `SIGCHLD` is added) whose child
/// runs `entry(arg, birth)` and never returns; the parent gets the child's pid.
/// Every signal is blocked in the calling thread around the clone, so no
/// handler of the host process (tokio's) ever runs in the child, which inherits
/// the full mask and resets what it needs.
///
/// With `into_cgroup` (a descriptor of a cgroup v2 directory) the clone is a
/// `clone3` with `CLONE_INTO_CGROUP`: the child is born in that cgroup, which
/// takes the cgroup core's global lock only for reading. Writing to
/// `cgroup.procs` instead takes it for writing, and on a kernel that does not
/// favour dynamic cgroup changes that write waits for an RCU grace period
/// (milliseconds, the largest part of starting a sandbox). Where `clone3` is
/// missing (`ENOSYS`: an old kernel, or a container runtime's seccomp profile
/// that hides it so that libc falls back), a plain `clone` follows and the
/// child learns it from [`Birth::WithParent`].
///
/// `entry` runs in a copy of a multi-threaded process (see the SAFETY comment
/// inside): it may use only raw, async-signal-safe system calls on data that
/// exists already, and must end with `execve` or `_exit`.
pub(crate) fn fork_like<A>(
    flags: c_int,
    into_cgroup: Option<c_int>,
    arg: &A,
    entry: fn(&A, Birth) -> !,
) -> Result<libc::pid_t, Errno> {
    // SAFETY: `sigset_t` is plain data; sigfillset initialises it.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to local sigsets; the mask is restored right after
    // the clone.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // Without a cgroup to be born in, this reads as "clone3 missing": the plain
    // clone below runs.
    let mut ret = -1;
    let mut error = libc::ENOSYS;
    if let Some(cgroup) = into_cgroup {
        // SAFETY: `clone_args` is plain data; all-zero is "no stack, no tls, no
        // tids", i.e. a fork-style clone.
        let mut args: libc::clone_args = unsafe { std::mem::zeroed() };
        args.flags = (flags as u32 as u64) | CLONE_INTO_CGROUP;
        args.exit_signal = libc::SIGCHLD as u64;
        args.cgroup = cgroup as u64;
        // SAFETY: as for the `clone` below; `args` is a valid `clone_args` of the
        // size passed. A zero stack makes the child continue on a copy of this one.
        ret = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut libc::clone_args,
                std::mem::size_of::<libc::clone_args>(),
            )
        };
        if ret == 0 {
            entry(arg, Birth::InCgroup);
        }
        error = errno();
    }
    if ret < 0 && error == libc::ENOSYS {
        // SAFETY: a fork-style clone (NULL stack, no CLONE_VM): the child gets a
        // private copy of the address space and continues here, as the only thread
        // of a process whose memory says otherwise. glibc's per-thread state is
        // stale there: the TCB still holds the parent thread's tid (clone through
        // `syscall` does not update it, unlike `fork`), the thread list names
        // threads that do not exist, and any lock another thread held (malloc
        // arenas, stdio, the dynamic loader) stays held forever. So the child must
        // not call `abort`, `raise`, any `pthread_*` function, `malloc`/`free`,
        // stdio or anything that formats or panics: `entry` performs only raw,
        // async-signal-safe system calls on `arg` (which exists before the clone)
        // and ends with `execve` or `_exit`. It never returns into the caller's
        // frames, not even by unwinding.
        ret = unsafe {
            libc::syscall(
                libc::SYS_clone,
                (flags | libc::SIGCHLD) as libc::c_ulong,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
                0usize,
            )
        };
        if ret == 0 {
            entry(arg, Birth::WithParent);
        }
        error = errno();
    }
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if ret < 0 {
        return Err(error);
    }
    Ok(ret as libc::pid_t)
}

/// A descriptor closed on drop (`close` is async-signal-safe).
///
/// The field is private: the only way to get one is [`Fd::from_new`] on the return
/// value of a call that just created the descriptor, so one descriptor number is
/// never wrapped (and closed) twice, and a negative number is never wrapped.
#[derive(Debug)]
pub(crate) struct Fd(c_int);

impl Fd {
    /// Takes ownership of the descriptor a call (`open`, `socket`, ...) just
    /// returned; a negative return value is that call's failure (`errno`).
    pub(crate) fn from_new(ret: c_int) -> Result<Self, Errno> {
        check(ret).map(Self)
    }

    /// The descriptor number, still owned by `self`.
    pub(crate) fn raw(&self) -> c_int {
        self.0
    }

    /// Gives up ownership: the caller closes the returned descriptor.
    pub(crate) fn into_raw(self) -> c_int {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a descriptor this value owns (created by the call
        // whose result `from_new` took); closing it twice is impossible because
        // `Fd` is neither `Clone` nor constructible from an existing number.
        unsafe { libc::close(self.0) };
    }
}

/// Writes all of `bytes` to `fd`, retrying on `EINTR`.
pub(crate) fn write_all(fd: c_int, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Reads one byte; `Ok(None)` at end of file.
pub(crate) fn read_byte(fd: c_int) -> Result<Option<u8>, Errno> {
    let mut byte = 0u8;
    loop {
        // SAFETY: reading at most one byte into a live local.
        let n = unsafe { libc::read(fd, (&raw mut byte).cast(), 1) };
        match n {
            1 => return Ok(Some(byte)),
            0 => return Ok(None),
            _ if errno() == libc::EINTR => continue,
            _ => return Err(errno()),
        }
    }
}

/// A NUL-terminated string in a stack buffer.
pub(crate) struct StackPath {
    buf: [u8; 64],
}

impl StackPath {
    /// `/oldroot/proc/self/fd/<fd>`: a path that names whatever `fd` refers to
    /// (the host's procfs stays reachable under the old root until the final
    /// `pivot_root`). A negative `fd` (an unfilled slot) is `EBADF`: it must never
    /// turn into the path of some other descriptor.
    pub fn proc_fd(fd: c_int) -> Result<Self, Errno> {
        const PREFIX: &[u8] = b"/oldroot/proc/self/fd/";
        let Ok(mut n) = u32::try_from(fd) else {
            return Err(libc::EBADF);
        };
        let mut buf = [0u8; 64];
        buf[..PREFIX.len()].copy_from_slice(PREFIX);
        let mut digits = [0u8; 12];
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for i in 0..len {
            buf[PREFIX.len() + i] = digits[len - 1 - i];
        }
        Ok(Self { buf })
    }

    /// The pointer for a system call.
    pub fn as_ptr(&self) -> *const c_char {
        self.buf.as_ptr().cast()
    }
}

/// One path component, NUL-terminated, in a stack buffer.
pub(crate) struct Name {
    buf: [u8; 256],
}

impl Name {
    fn new(component: &[u8]) -> Result<Self, Errno> {
        if component.is_empty() || component.len() > 255 || component == b"." || component == b".."
        {
            return Err(libc::EINVAL);
        }
        let mut buf = [0u8; 256];
        buf[..component.len()].copy_from_slice(component);
        Ok(Self { buf })
    }

    /// The pointer for a system call.
    pub fn as_ptr(&self) -> *const c_char {
        self.buf.as_ptr().cast()
    }
}

/// Opens `name` in `dir` as an `O_PATH` descriptor without following it; a symlink
/// is refused with `ELOOP`.
pub(crate) fn open_no_follow(dir: c_int, name: &Name, extra: c_int) -> Result<Fd, Errno> {
    // SAFETY: `name` is NUL-terminated and outlives the call.
    let fd = Fd::from_new(unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC | extra,
        )
    })?;
    // SAFETY: `stat` is plain data; an all-zero value is valid and fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd.0` is open and `st` is a valid out-pointer.
    check(unsafe { libc::fstat(fd.0, &mut st) })?;
    if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(libc::ELOOP);
    }
    Ok(fd)
}

/// Walks the absolute `path` beneath `root` to its parent directory without
/// following any symlink (each component is opened with `O_NOFOLLOW`, so a link
/// planted in a bound tree cannot redirect a mount), creating missing directories
/// (mode 0755) when `create` is set. Returns the parent and the last component.
pub(crate) fn walk_parent(root: c_int, path: &CStr, create: bool) -> Result<(Fd, Name), Errno> {
    let bytes = path.to_bytes();
    let rel = bytes.strip_prefix(b"/").ok_or(libc::EINVAL)?;
    let (dirs, last) = match rel.iter().rposition(|b| *b == b'/') {
        Some(i) => (Some(&rel[..i]), &rel[i + 1..]),
        None => (None, rel),
    };
    // SAFETY: a literal NUL-terminated path relative to an open directory.
    let mut dir = Fd::from_new(unsafe {
        libc::openat(
            root,
            c".".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })?;
    for component in dirs.into_iter().flat_map(|d| d.split(|b| *b == b'/')) {
        let name = Name::new(component)?;
        let next = match open_no_follow(dir.0, &name, libc::O_DIRECTORY) {
            Err(libc::ENOENT) if create => {
                // SAFETY: `name` is NUL-terminated; `dir.0` is an open directory.
                let made = unsafe { libc::mkdirat(dir.0, name.as_ptr(), 0o755) };
                if made < 0 && errno() != libc::EEXIST {
                    return Err(errno());
                }
                open_no_follow(dir.0, &name, libc::O_DIRECTORY)?
            }
            other => other?,
        };
        dir = next;
    }
    Ok((dir, Name::new(last)?))
}

/// `struct open_how` of `openat2(2)` (`linux/openat2.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;

impl OpenHow {
    /// `O_PATH | O_CLOEXEC` with `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`:
    /// resolution fails with `ELOOP` at the first symlink on the path.
    pub(crate) const fn no_symlinks() -> Self {
        Self {
            flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        }
    }
}

/// Opens the absolute `path` (`O_PATH`) from this process's root without following
/// any symlink on the way: `openat2(AT_FDCWD, path, how)`, or, where the kernel has
/// no `openat2` (`ENOSYS`, before 5.6), a walk from `/` one component at a time
/// with `O_NOFOLLOW` ([`open_existing`]). A symlink anywhere is `ELOOP`.
pub(crate) fn open_no_symlinks(path: &CStr, how: &OpenHow) -> Result<Fd, Errno> {
    // SAFETY: `path` is NUL-terminated and `how` a valid `struct open_how` of the
    // size passed; both outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            std::ptr::from_ref(how),
            std::mem::size_of::<OpenHow>(),
        )
    };
    match check_long(ret) {
        Ok(fd) => Fd::from_new(fd as c_int),
        Err(libc::ENOSYS) => {
            // SAFETY: a literal NUL-terminated path.
            let root = Fd::from_new(unsafe {
                libc::open(
                    c"/".as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            })?;
            open_existing(root.0, path)
        }
        Err(e) => Err(e),
    }
}

/// `(st_dev, st_ino)` of an open descriptor.
pub(crate) fn dev_ino(fd: &Fd) -> Result<(u64, u64), Errno> {
    // SAFETY: `stat` is plain data; an all-zero value is valid and fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd.0` is open and `st` is a valid out-pointer.
    check(unsafe { libc::fstat(fd.0, &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

/// Opens an existing target (`O_PATH`, no symlink anywhere on the way).
pub(crate) fn open_existing(root: c_int, path: &CStr) -> Result<Fd, Errno> {
    let (parent, name) = walk_parent(root, path, false)?;
    open_no_follow(parent.0, &name, 0)
}

/// Creates a directory mount point (parents included) and opens it.
pub(crate) fn create_dir(root: c_int, path: &CStr) -> Result<Fd, Errno> {
    let (parent, name) = walk_parent(root, path, true)?;
    // SAFETY: `name` is NUL-terminated; `parent.0` is an open directory.
    let made = unsafe { libc::mkdirat(parent.0, name.as_ptr(), 0o755) };
    if made < 0 && errno() != libc::EEXIST {
        return Err(errno());
    }
    open_no_follow(parent.0, &name, libc::O_DIRECTORY)
}

/// Creates an empty-file mount point (parents included) and opens it.
pub(crate) fn create_file(root: c_int, path: &CStr) -> Result<Fd, Errno> {
    let (parent, name) = walk_parent(root, path, true)?;
    match open_no_follow(parent.0, &name, 0) {
        Err(libc::ENOENT) => {
            // SAFETY: `name` is NUL-terminated; `parent.0` is an open directory.
            let made = unsafe { libc::mknodat(parent.0, name.as_ptr(), libc::S_IFREG | 0o644, 0) };
            if made < 0 && errno() != libc::EEXIST {
                return Err(errno());
            }
            open_no_follow(parent.0, &name, 0)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(path: &StackPath) -> &str {
        let end = path
            .buf
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(path.buf.len());
        std::str::from_utf8(&path.buf[..end]).unwrap_or("")
    }

    #[test]
    fn proc_fd_names_the_descriptor_and_refuses_negative_ones() {
        assert_eq!(
            text(&StackPath::proc_fd(0).unwrap()),
            "/oldroot/proc/self/fd/0"
        );
        assert_eq!(
            text(&StackPath::proc_fd(1234).unwrap()),
            "/oldroot/proc/self/fd/1234"
        );
        assert_eq!(
            text(&StackPath::proc_fd(c_int::MAX).unwrap()),
            "/oldroot/proc/self/fd/2147483647"
        );
        // An unfilled slot (-1) used to become fd 1 (stdout) through unsigned_abs.
        for fd in [-1, -2, c_int::MIN] {
            assert_eq!(StackPath::proc_fd(fd).err(), Some(libc::EBADF), "{fd}");
        }
    }

    #[test]
    fn sources_are_opened_without_following_any_symlink() {
        use std::os::unix::fs::MetadataExt;
        let base = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let real = base.path().join("real");
        std::fs::create_dir(&real).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&real, base.path().join("link"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(base.path(), base.path().join("via"))
            .unwrap_or_else(|e| panic!("{e}"));
        let c = |p: std::path::PathBuf| {
            std::ffi::CString::new(p.into_os_string().into_encoded_bytes())
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let how = OpenHow::no_symlinks();
        let root = Fd::from_new(unsafe_open_root()).unwrap_or_else(|e| panic!("{e}"));
        for path in [base.path().join("link"), base.path().join("via/real")] {
            let path = c(path);
            assert_eq!(open_no_symlinks(&path, &how).err(), Some(libc::ELOOP));
            // The fallback walk (kernels without openat2) refuses them too (a link
            // in the middle is not a directory when it is not followed).
            let refused = open_existing(root.raw(), &path).err();
            assert!(
                matches!(refused, Some(libc::ELOOP | libc::ENOTDIR)),
                "{refused:?}"
            );
        }
        let meta = std::fs::metadata(&real).unwrap_or_else(|e| panic!("{e}"));
        let fd = open_no_symlinks(&c(real.clone()), &how).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dev_ino(&fd), Ok((meta.dev(), meta.ino())));
        let fd = open_existing(root.raw(), &c(real)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dev_ino(&fd), Ok((meta.dev(), meta.ino())));
    }

    fn unsafe_open_root() -> c_int {
        // SAFETY: a literal NUL-terminated path.
        unsafe {
            libc::open(
                c"/".as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        }
    }

    #[test]
    fn fd_from_new_refuses_a_failed_call() {
        assert!(Fd::from_new(-1).is_err());
    }
}
