//! The file operations themselves, blocking, on the sandbox's root directory:
//! every path resolved from it with `openat2(RESOLVE_IN_ROOT |
//! RESOLVE_NO_MAGICLINKS)`, every name below a resolved directory used
//! relative to its descriptor, and a final component that must not be
//! followed opened `O_NOFOLLOW`. They run on a thread that acts as the run's
//! user (`mod.rs`); here they only need a root.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use workspace_core::boundary::{FileError, FileInfo, FileKind, WriteOptions, split_parent};

/// How many times a resolution the kernel could not prove safe (a `..`
/// racing a rename: `EAGAIN`) is tried again.
const RETRIES: usize = 8;

/// How deep a recursive removal goes.
pub(super) const MAX_REMOVE_DEPTH: usize = 256;

/// The mode of a directory made.
const DIR_MODE: u32 = 0o755;

/// The mode of a file made when none is asked for.
const FILE_MODE: u32 = 0o644;

/// The typed error of `errno` from operation `op` on `path`.
pub(super) fn error(op: &'static str, path: &str, errno: Errno) -> FileError {
    match errno {
        // A magic link refused (`RESOLVE_NO_MAGICLINKS`), a link not followed
        // where it must not be, or links that loop; a `..` the kernel could
        // not keep inside.
        Errno::ELOOP | Errno::EXDEV | Errno::EAGAIN => FileError::LinkOutOfReach {
            path: path.to_owned(),
        },
        errno => FileError::from_io(op, path, io::Error::from(errno)),
    }
}

/// Opens `path` (absolute inside) with `flags`, resolved in `root`'s tree as
/// the sandbox resolves it: `/` and `..` never lead above `root`, a link is
/// followed inside it, a `/proc` magic link is refused (`ELOOP`).
pub(super) fn resolve(root: &OwnedFd, path: &str, flags: OFlag) -> Result<OwnedFd, FileError> {
    let relative = path.trim_start_matches('/');
    let relative = if relative.is_empty() { "." } else { relative };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let mut tries = 0;
    loop {
        match nix::fcntl::openat2(root, relative, how) {
            Err(Errno::EAGAIN) if tries < RETRIES => tries += 1,
            Err(Errno::EINTR) => {}
            Err(errno) => return Err(error("open", path, errno)),
            Ok(fd) => return Ok(fd),
        }
    }
}

/// The directory `path`, as a descriptor for `*at` calls (a link to it
/// followed inside).
fn resolve_dir(root: &OwnedFd, path: &str) -> Result<OwnedFd, FileError> {
    resolve(root, path, OFlag::O_PATH | OFlag::O_DIRECTORY)
}

/// What `mode` (a `st_mode`) is.
fn kind_of(mode: u32) -> FileKind {
    match SFlag::from_bits_truncate(mode) & SFlag::S_IFMT {
        SFlag::S_IFREG => FileKind::File,
        SFlag::S_IFDIR => FileKind::Directory,
        SFlag::S_IFLNK => FileKind::Symlink,
        SFlag::S_IFIFO => FileKind::Fifo,
        SFlag::S_IFSOCK => FileKind::Socket,
        SFlag::S_IFBLK => FileKind::BlockDevice,
        _ => FileKind::CharDevice,
    }
}

/// `st` of `path` as a [`FileInfo`].
fn info(path: String, st: &FileStat, link_target: Option<String>) -> FileInfo {
    let mtime_ms = st
        .st_mtime
        .saturating_mul(1000)
        .saturating_add(st.st_mtime_nsec / 1_000_000);
    FileInfo {
        path,
        kind: kind_of(st.st_mode),
        size: u64::try_from(st.st_size).unwrap_or(0),
        mode: st.st_mode & 0o7777,
        mtime_unix_ms: u64::try_from(mtime_ms).unwrap_or(0),
        link_target,
    }
}

/// Opens again, with `flags`, the file an `O_PATH` descriptor holds, through
/// this thread's `/proc/thread-self/fd`: the same inode, whatever its path
/// names now, with the permission check of an open done as this thread.
fn reopen(fd: &OwnedFd, flags: OFlag) -> nix::Result<OwnedFd> {
    let path = format!("/proc/thread-self/fd/{}", fd.as_raw_fd());
    nix::fcntl::open(
        path.as_str(),
        flags | OFlag::O_CLOEXEC | OFlag::O_NOCTTY,
        Mode::empty(),
    )
}

/// `fd`'s status, or the typed error naming `path`.
fn status(fd: &OwnedFd, path: &str) -> Result<FileStat, FileError> {
    nix::sys::stat::fstat(fd).map_err(|e| error("stat", path, e))
}

/// Refuses anything at `path` but a regular file, before it is opened.
fn regular(st: &FileStat, path: &str) -> Result<(), FileError> {
    match kind_of(st.st_mode) {
        FileKind::File => Ok(()),
        FileKind::Directory => Err(FileError::IsADirectory {
            path: path.to_owned(),
        }),
        kind => Err(FileError::NotRegularFile {
            path: path.to_owned(),
            kind,
        }),
    }
}

/// The regular file at `path` (links followed inside), open for reading at
/// `offset`. A FIFO, socket or device is refused from its `O_PATH`
/// descriptor's status, never opened (an open could block, or act).
pub(super) fn open_read(
    root: &OwnedFd,
    path: &str,
    offset: u64,
) -> Result<(FileInfo, File), FileError> {
    let found = resolve(root, path, OFlag::O_PATH)?;
    let st = status(&found, path)?;
    regular(&st, path)?;
    let opened = reopen(&found, OFlag::O_RDONLY).map_err(|e| error("open", path, e))?;
    let mut file = File::from(opened);
    if offset > 0 {
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| FileError::from_io("seek", path, e))?;
    }
    Ok((info(path.to_owned(), &st, None), file))
}

/// The regular file at `path` (links followed inside), emptied and open for
/// writing, or made (`O_EXCL`, never through a link); whether it was made.
pub(super) fn open_write(
    root: &OwnedFd,
    path: &str,
    options: &WriteOptions,
) -> Result<(bool, File), FileError> {
    let (parent, name) = split_parent(path)?;
    if options.create_parents {
        mkdir_all(root, parent)?;
    }
    for _ in 0..RETRIES {
        match resolve(root, path, OFlag::O_PATH) {
            Ok(found) => {
                let st = status(&found, path)?;
                regular(&st, path)?;
                if !options.overwrite {
                    return Err(FileError::AlreadyExists {
                        path: path.to_owned(),
                    });
                }
                let opened = reopen(&found, OFlag::O_WRONLY).map_err(|e| error("open", path, e))?;
                // The mode first: a file the run may not chmod keeps its content.
                if let Some(mode) = options.mode {
                    nix::sys::stat::fchmod(&opened, Mode::from_bits_truncate(mode))
                        .map_err(|e| error("chmod", path, e))?;
                }
                nix::unistd::ftruncate(&opened, 0).map_err(|e| error("truncate", path, e))?;
                return Ok((false, File::from(opened)));
            }
            Err(FileError::NotFound { .. }) => {
                let dir = resolve_dir(root, parent)?;
                let mode = options.mode.unwrap_or(FILE_MODE);
                let made = nix::fcntl::openat(
                    &dir,
                    name,
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC
                        | OFlag::O_NOCTTY,
                    Mode::from_bits_truncate(mode),
                );
                match made {
                    Ok(file) => {
                        // Exactly `mode`, whatever the runner's umask.
                        nix::sys::stat::fchmod(&file, Mode::from_bits_truncate(mode))
                            .map_err(|e| error("chmod", path, e))?;
                        return Ok((true, File::from(file)));
                    }
                    // Made meanwhile (try again), or a dangling link, whose
                    // target is not made through it.
                    Err(Errno::EEXIST) => {}
                    Err(errno) => return Err(error("create", path, errno)),
                }
            }
            Err(other) => return Err(other),
        }
    }
    Err(FileError::AlreadyExists {
        path: path.to_owned(),
    })
}

/// What is at `path`, the last component not followed.
pub(super) fn stat(root: &OwnedFd, path: &str) -> Result<FileInfo, FileError> {
    let found = resolve(root, path, OFlag::O_PATH | OFlag::O_NOFOLLOW)?;
    let st = status(&found, path)?;
    let target = match kind_of(st.st_mode) {
        FileKind::Symlink => Some(
            nix::fcntl::readlinkat(&found, "")
                .map_err(|e| error("readlink", path, e))?
                .to_string_lossy()
                .into_owned(),
        ),
        _ => None,
    };
    Ok(info(path.to_owned(), &st, target))
}

/// `parent/name`, inside.
fn child(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// The names in the open directory `dir` but `.` and `..`.
fn names(dir: &OwnedFd, path: &str) -> Result<Vec<Vec<u8>>, FileError> {
    let dup = dir
        .try_clone()
        .map_err(|e| FileError::from_io("list", path, e))?;
    let mut listing = nix::dir::Dir::from_fd(dup).map_err(|e| error("list", path, e))?;
    let mut names = Vec::new();
    for entry in listing.iter() {
        let entry = entry.map_err(|e| error("list", path, e))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    }
    Ok(names)
}

/// The entries of the directory at `path` down to `depth` levels, links not
/// followed below it, sorted by path; a directory below that cannot be read
/// is listed and not entered.
pub(super) fn list(
    root: &OwnedFd,
    path: &str,
    depth: u32,
    limit: usize,
) -> Result<Vec<FileInfo>, FileError> {
    let top = resolve(root, path, OFlag::O_RDONLY | OFlag::O_DIRECTORY)?;
    let mut found = Vec::new();
    // Directories below `top` by their path relative to it, opened when
    // their turn comes (no descriptor per pending directory).
    let mut pending: VecDeque<(String, String, u32)> = VecDeque::new();
    pending.push_back((".".to_owned(), path.to_owned(), 1));
    while let Some((relative, inside, level)) = pending.pop_front() {
        let dir = if relative == "." {
            top.try_clone()
                .map_err(|e| FileError::from_io("list", path, e))?
        } else {
            let how = OpenHow::new()
                .flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
                .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
            match nix::fcntl::openat2(&top, relative.as_str(), how) {
                Ok(dir) => dir,
                // Unreadable, or changed meanwhile: listed, not entered.
                Err(_) => continue,
            }
        };
        let names = match names(&dir, &inside) {
            Ok(names) => names,
            Err(e) if relative == "." => return Err(e),
            Err(_) => continue,
        };
        for name in names {
            let os = OsStr::from_bytes(&name);
            let st = match nix::sys::stat::fstatat(&dir, os, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::ENOENT) => continue, // removed meanwhile
                Err(e) => return Err(error("stat", &inside, e)),
            };
            let text = String::from_utf8_lossy(&name).into_owned();
            let kind = kind_of(st.st_mode);
            let target = match kind {
                FileKind::Symlink => nix::fcntl::readlinkat(&dir, os)
                    .ok()
                    .map(|t| t.to_string_lossy().into_owned()),
                _ => None,
            };
            let at = child(&inside, &text);
            if kind == FileKind::Directory && level < depth {
                let below = if relative == "." {
                    text.clone()
                } else {
                    format!("{relative}/{text}")
                };
                pending.push_back((below, at.clone(), level + 1));
            }
            found.push(info(at, &st, target));
            if found.len() > limit {
                return Err(FileError::TooManyEntries {
                    path: path.to_owned(),
                    limit,
                });
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// Removes what is at `path` (a link itself); a directory with all it holds
/// when `recursive`. How many entries were removed.
pub(super) fn remove(root: &OwnedFd, path: &str, recursive: bool) -> Result<u64, FileError> {
    let (parent, name) = split_parent(path)?;
    let dir = resolve_dir(root, parent)?;
    let st = nix::sys::stat::fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|e| error("stat", path, e))?;
    let kind = kind_of(st.st_mode);
    // A mount's root (the workspace itself, `/tmp`, a cache, a path the
    // filesystem boundary bound) cannot be removed: emptying it first and
    // failing at its own `rmdir` would lose all it held, the caller told only
    // of the failure.
    if kind == FileKind::Directory && is_mount_root(&dir, name, path)? {
        return Err(FileError::InvalidPath {
            path: path.to_owned(),
            reason: "it is where a file system is mounted in the workspace: remove what is in it instead",
        });
    }
    match (kind, recursive) {
        (FileKind::Directory, true) => remove_tree(&dir, OsStr::new(name), path, 0),
        (FileKind::Directory, false) => nix::unistd::unlinkat(&dir, name, UnlinkatFlags::RemoveDir)
            .map(|()| 1)
            .map_err(|e| error("remove", path, e)),
        _ => nix::unistd::unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir)
            .map(|()| 1)
            .map_err(|e| error("remove", path, e)),
    }
}

/// Removes the directory `name` in `parent` and everything in it, never
/// following a link (each directory is opened `O_NOFOLLOW` relative to its
/// parent's descriptor; one swapped for a link meanwhile is removed as the
/// link it now is).
fn remove_tree(parent: &OwnedFd, name: &OsStr, path: &str, depth: usize) -> Result<u64, FileError> {
    if depth > MAX_REMOVE_DEPTH {
        return Err(FileError::Io {
            op: "remove",
            path: path.to_owned(),
            source: io::Error::other(format!("more than {MAX_REMOVE_DEPTH} directories deep")),
        });
    }
    let dir = match nix::fcntl::openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(dir) => dir,
        Err(Errno::ELOOP | Errno::ENOTDIR) => {
            return nix::unistd::unlinkat(parent, name, UnlinkatFlags::NoRemoveDir)
                .map(|()| 1)
                .map_err(|e| error("remove", path, e));
        }
        Err(e) => return Err(error("remove", path, e)),
    };
    let mut removed = 0;
    for entry in names(&dir, path)? {
        let entry = OsStr::from_bytes(&entry);
        let inside = child(path, &entry.to_string_lossy());
        let st = match nix::sys::stat::fstatat(&dir, entry, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(error("stat", &inside, e)),
        };
        if kind_of(st.st_mode) == FileKind::Directory {
            removed += remove_tree(&dir, entry, &inside, depth + 1)?;
        } else {
            match nix::unistd::unlinkat(&dir, entry, UnlinkatFlags::NoRemoveDir) {
                Ok(()) => removed += 1,
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(error("remove", &inside, e)),
            }
        }
    }
    nix::unistd::unlinkat(parent, name, UnlinkatFlags::RemoveDir)
        .map_err(|e| error("remove", path, e))?;
    Ok(removed + 1)
}

/// Makes the directory `path`; with `parents`, the missing ones above it
/// too, and one that exists is no error.
pub(super) fn mkdir(root: &OwnedFd, path: &str, parents: bool) -> Result<(), FileError> {
    if parents {
        return mkdir_all(root, path);
    }
    let (parent, name) = split_parent(path)?;
    let dir = resolve_dir(root, parent)?;
    nix::sys::stat::mkdirat(&dir, name, Mode::from_bits_truncate(DIR_MODE))
        .map_err(|e| error("mkdir", path, e))
}

/// Makes `path` and every missing directory above it, each resolved inside
/// as the sandbox resolves it.
fn mkdir_all(root: &OwnedFd, path: &str) -> Result<(), FileError> {
    if resolve_dir(root, path).is_ok() {
        return Ok(());
    }
    let mut made = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        let parent = if made.is_empty() {
            "/".to_owned()
        } else {
            made.clone()
        };
        made.push('/');
        made.push_str(part);
        match resolve_dir(root, &made) {
            Ok(_) => continue,
            Err(FileError::NotFound { .. }) => {}
            Err(other) => return Err(other),
        }
        let dir = resolve_dir(root, &parent)?;
        match nix::sys::stat::mkdirat(&dir, part, Mode::from_bits_truncate(DIR_MODE)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(error("mkdir", &made, e)),
        }
        // What is there now must be a directory (a file made meanwhile, a
        // dangling link, is not).
        resolve_dir(root, &made)?;
    }
    Ok(())
}

/// Renames `from` to `to`, each the entry itself (a link is moved, not its
/// target).
pub(super) fn rename(root: &OwnedFd, from: &str, to: &str) -> Result<(), FileError> {
    let (from_parent, from_name) = split_parent(from)?;
    let (to_parent, to_name) = split_parent(to)?;
    let source = resolve_dir(root, from_parent)?;
    let target = resolve_dir(root, to_parent)?;
    nix::fcntl::renameat(&source, from_name, &target, to_name).map_err(|errno| match errno {
        Errno::EXDEV => FileError::CrossesMounts {
            from: from.to_owned(),
            to: to.to_owned(),
        },
        Errno::ENOTEMPTY | Errno::EEXIST | Errno::EISDIR => error("rename", to, errno),
        errno => error("rename", from, errno),
    })
}

/// Whether the directory `name` in `dir` is a mount's root: `statx` says so,
/// or, where it cannot, its device differs from its parent's.
fn is_mount_root(dir: &OwnedFd, name: &str, path: &str) -> Result<bool, FileError> {
    use std::os::fd::AsFd;
    let c_name = std::ffi::CString::new(name).map_err(|_| FileError::InvalidPath {
        path: path.to_owned(),
        reason: "it holds a NUL byte",
    })?;
    match crate::sys::mount_root::is_mount_root(dir.as_fd(), &c_name) {
        Ok(Some(root)) => Ok(root),
        Ok(None) => {
            let parent = nix::sys::stat::fstat(dir).map_err(|e| error("stat", path, e))?;
            let entry = nix::sys::stat::fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(|e| error("stat", path, e))?;
            Ok(entry.st_dev != parent.st_dev)
        }
        Err(source) => Err(FileError::Io {
            op: "stat",
            path: path.to_owned(),
            source,
        }),
    }
}
