//! Paths in a cloned child: stack buffers, and opens that never follow a link
//! the run could have planted.

use std::ffi::{CStr, c_char, c_int};

use nix::libc;

use super::errno::{self, Errno, check, check_long};
use super::fd::Fd;

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

    /// The path as a C string.
    pub fn as_c_str(&self) -> &CStr {
        // The buffer always ends in NUL bytes: the longest path leaves most of
        // its 64 bytes zero.
        CStr::from_bytes_until_nul(&self.buf).unwrap_or(c"")
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
    // SAFETY: `fd.raw()` is open and `st` is a valid out-pointer.
    check(unsafe { libc::fstat(fd.raw(), &mut st) })?;
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
        let next = match open_no_follow(dir.raw(), &name, libc::O_DIRECTORY) {
            Err(libc::ENOENT) if create => {
                // SAFETY: `name` is NUL-terminated; `dir.raw()` is an open directory.
                let made = unsafe { libc::mkdirat(dir.raw(), name.as_ptr(), 0o755) };
                if made < 0 && errno::last() != libc::EEXIST {
                    return Err(errno::last());
                }
                open_no_follow(dir.raw(), &name, libc::O_DIRECTORY)?
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
            open_existing(root.raw(), path)
        }
        Err(e) => Err(e),
    }
}

/// `(st_dev, st_ino)` of an open descriptor.
pub(crate) fn dev_ino(fd: &Fd) -> Result<(u64, u64), Errno> {
    // SAFETY: `stat` is plain data; an all-zero value is valid and fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd.raw()` is open and `st` is a valid out-pointer.
    check(unsafe { libc::fstat(fd.raw(), &mut st) })?;
    Ok((st.st_dev, st.st_ino))
}

/// Opens an existing target (`O_PATH`, no symlink anywhere on the way).
pub(crate) fn open_existing(root: c_int, path: &CStr) -> Result<Fd, Errno> {
    let (parent, name) = walk_parent(root, path, false)?;
    open_no_follow(parent.raw(), &name, 0)
}

/// Creates a directory mount point (parents included) and opens it.
pub(crate) fn create_dir(root: c_int, path: &CStr) -> Result<Fd, Errno> {
    let (parent, name) = walk_parent(root, path, true)?;
    // SAFETY: `name` is NUL-terminated; `parent.raw()` is an open directory.
    let made = unsafe { libc::mkdirat(parent.raw(), name.as_ptr(), 0o755) };
    if made < 0 && errno::last() != libc::EEXIST {
        return Err(errno::last());
    }
    open_no_follow(parent.raw(), &name, libc::O_DIRECTORY)
}

/// Creates an empty-file mount point (parents included) and opens it.
pub(crate) fn create_file(root: c_int, path: &CStr) -> Result<Fd, Errno> {
    let (parent, name) = walk_parent(root, path, true)?;
    match open_no_follow(parent.raw(), &name, 0) {
        Err(libc::ENOENT) => {
            // SAFETY: `name` is NUL-terminated; `parent.raw()` is an open directory.
            let made =
                unsafe { libc::mknodat(parent.raw(), name.as_ptr(), libc::S_IFREG | 0o644, 0) };
            if made < 0 && errno::last() != libc::EEXIST {
                return Err(errno::last());
            }
            open_no_follow(parent.raw(), &name, 0)
        }
        other => other,
    }
}

/// Creates the symbolic link `parent/name` pointing at `to`.
pub(crate) fn symlink_at(to: &CStr, parent: &Fd, name: &Name) -> Result<(), Errno> {
    // SAFETY: both strings are NUL-terminated and outlive the call.
    check(unsafe { libc::symlinkat(to.as_ptr(), parent.raw(), name.as_ptr()) }).map(drop)
}

/// Creates the regular file `parent/name` (which must not exist, and is never
/// a link followed), open for writing, with `mode` exactly (the umask does not
/// narrow it).
pub(crate) fn create_file_with_mode(
    parent: &Fd,
    name: &Name,
    mode: libc::mode_t,
) -> Result<Fd, Errno> {
    // SAFETY: `name` is NUL-terminated; `parent` is an open directory.
    let fd = Fd::from_new(unsafe {
        libc::openat(
            parent.raw(),
            name.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    })?;
    // SAFETY: `fd` is open.
    check(unsafe { libc::fchmod(fd.raw(), mode) })?;
    Ok(fd)
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
