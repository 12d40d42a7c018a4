//! The boundary probe of `seal`: one helper in the sandbox, observed from the
//! host.
//!
//! The probe joins the sandbox as every command does (its own cgroup, the same
//! privilege drop, seccomp filter and environment) and execs `/bin/sh` reading
//! its stdin, which blocks. While it waits, the host reads what that process is
//! from outside: `/proc/<pid>/status` (ids, capabilities, `no_new_privs`,
//! seccomp), `uid_map` and `gid_map`, `mountinfo` (relative to the process's
//! root), `net/dev` (its network namespace), `environ` (what it was exec'd
//! with) and the processes of its pid namespace (`/proc/<pid>/root/proc`); the
//! hostname is read in its UTS namespace by a thread of its own. Nothing in the
//! sandbox formats these, so nothing there can forge them. Only a declared
//! toolchain needs the shell: `<program> --version` is written to its stdin.
//! Then stdin closes and the shell exits: one `execve` per workspace.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::libc;
use workspace_core::boundary::ObservedBoundary;

use super::error::ProcessError;
use super::in_sandbox;
use super::seal::{Sealed, pipe};
use crate::spawn::{SpawnError, SpawnedChild, join};
use workspace_core::observation::{self as observe, Expected};

/// Runs the probe in the run and compares what it saw (blocking). The probe's
/// setup, observation and exit together get `timeout` (the options'
/// [`PROBE_TIMEOUT`](super::PROBE_TIMEOUT) by default); after that it is killed
/// and the seal fails with [`ProcessError::ProbeTimeout`].
pub(crate) fn probe(
    sealed: &Sealed,
    expected: &Expected,
    timeout: Duration,
) -> Result<ObservedBoundary, ProcessError> {
    let deadline = Instant::now() + timeout;
    let after_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    // Pid 1 set the hostname before the sandbox was handed over: it is read
    // while the probe starts, on a thread of its own. A runner that enters
    // through a door (an ordinary user) cannot move a thread into the UTS
    // namespace (that needs `CAP_SYS_ADMIN` in its own user namespace too):
    // the probe's shell prints it instead, before anything of the run exists.
    let hostname = match sealed.sandbox.door() {
        None => Some(in_sandbox::hostname(&sealed.sandbox)?),
        Some(_) => None,
    };
    let (stdin_read, stdin_write) = pipe("the probe's stdin pipe")?;
    let (read, write) = pipe("the probe's stdout pipe")?;
    let cgroup = sealed
        .cgroup
        .create_child("probe")
        .map_err(|source| ProcessError::Cgroup {
            step: "creating the probe's cgroup",
            source,
        })?;
    let mut request = sealed.spec.request(vec!["/bin/sh".into()], &cgroup);
    request.stdin = Some(stdin_read);
    request.stderr = Some(write.try_clone().map_err(|source| ProcessError::Pipe {
        step: "duplicating the probe's stdout",
        source,
    })?);
    request.stdout = Some(write);
    request.setup_timeout = timeout;
    let child = join(&sealed.sandbox, &request);
    drop(request);
    let mut child: SpawnedChild = child.map_err(|source| match source {
        SpawnError::SetupTimeout { .. } => ProcessError::ProbeTimeout { after_ms },
        source => ProcessError::Spawn {
            step: "starting the boundary probe",
            source,
        },
    })?;
    // The cgroup holds the supervisor (`child`) and the shell it forked, which
    // has exec'd by now (join returns once it did).
    let shell = cgroup
        .pids()
        .unwrap_or_default()
        .into_iter()
        .find(|pid| *pid != child.pid());
    let Some(shell) = shell else {
        let _ = child.kill();
        return Err(ProcessError::Lost {
            what: "the probe's shell is not in its cgroup",
        });
    };
    let mut stdin = std::fs::File::from(stdin_write);
    let reading = |read: Result<Option<String>, std::io::Error>, child: SpawnedChild| match read {
        Ok(Some(output)) => Ok((output, child)),
        Ok(None) => Err(kill_probe(child, after_ms)),
        Err(source) => {
            let _ = child.kill();
            Err(ProcessError::Pipe {
                step: "reading the probe's output",
                source,
            })
        }
    };
    let hostname = match hostname {
        Some(thread) => thread.wait()?.unwrap_or_default(),
        None => {
            // A shell that is gone fails the write; the line read is then empty.
            let _ = stdin.write_all(HOSTNAME_LINE.as_bytes());
            let (line, kept) = reading(read_line(read.as_fd(), deadline), child)?;
            child = kept;
            line
        }
    };
    // Read while the shell waits on its stdin: it is there to be looked at.
    let mut text = from_host(shell, hostname);
    text.push_str(&absent_section(shell, &expected.mount_points));
    text.push_str(&readback_sections(shell, &expected.mount_points));
    if let Some(line) = observe::toolchain_line(expected.toolchain.as_deref()) {
        // A shell that is gone fails the write; its output then lacks the line.
        let _ = stdin.write_all(line.as_bytes());
    }
    drop(stdin);
    let (output, mut child) = reading(read_until(read.as_fd(), deadline), child)?;
    text.push_str(&observe::toolchain_section(&output));
    text.push_str("@@end\n");
    if !wait_pidfd(child.pidfd(), deadline) {
        return Err(kill_probe(child, after_ms));
    }
    let status = child.wait().map_err(|source| ProcessError::Spawn {
        step: "waiting for the boundary probe",
        source,
    })?;
    let mut observed = observe::observe(&text, expected);
    observed.facts.insert(
        "probe_status".into(),
        serde_json::json!(format!("{status:?}")),
    );
    // What was applied, as one digest a reviewer can compare across runs.
    observed.facts.insert(
        "mount_plan_sha256".into(),
        serde_json::json!(sealed.mount_plan_sha256),
    );
    Ok(observed)
}

/// What the probe's shell runs first in a sandbox entered through a door: the
/// UTS namespace's node name on a line of its own, with the shell's builtins
/// only (a line even when the file cannot be read, so the probe never waits
/// for one).
const HOSTNAME_LINE: &str = "read -r h </proc/sys/kernel/hostname; echo \"$h\"\n";

/// The parts of the kernel's `/proc` and `/sys` the plan covers that the run's
/// own procfs and sysfs do not have (this kernel lacks them), looked up from the
/// host through `/proc/<pid>/root` (fresh kernel file systems: no link of the
/// run's on the way).
fn absent_section(pid: u32, points: &[workspace_core::mount_plan::MountPoint]) -> String {
    let mut section = String::from("@@absent\n");
    for point in points.iter().filter(|p| p.kernel_part) {
        let inside = format!("/proc/{pid}/root{}", point.target);
        if let Err(e) = std::fs::symlink_metadata(&inside)
            && e.kind() == std::io::ErrorKind::NotFound
        {
            section.push_str(&point.target);
            section.push('\n');
        }
    }
    section
}

/// What the kernel answers for each mount point, asked from the host at the
/// same path inside (resolved in the sandbox's root, never following a link
/// out of it): `@@writes`, whether a write to each read-only point is refused
/// (`access(W_OK)` on it: `EROFS` from a read-only mount; nothing is written),
/// and `@@masked`, whether each hidden point shows nothing (an empty
/// directory, an empty file or the null device). One `RESULT TARGET` line each.
fn readback_sections(pid: u32, points: &[workspace_core::mount_plan::MountPoint]) -> String {
    let root = std::fs::File::open(format!("/proc/{pid}/root"));
    let mut writes = String::from("@@writes\n");
    let mut masked = String::from("@@masked\n");
    let unreadable =
        |errno: nix::errno::Errno| format!("unreadable:{}", errno.desc().replace(' ', "-"));
    for point in points {
        // The target as one word of the line: a name with a newline cannot
        // forge another line.
        let target = observe::line_word(&point.target);
        let opened = match &root {
            Ok(root) => open_inside(root.as_fd(), &point.target),
            Err(e) => Err(nix::errno::Errno::from_raw(
                e.raw_os_error().unwrap_or(libc::EIO),
            )),
        };
        let file = match opened {
            Ok(file) => file,
            // A part of the kernel this kernel lacks (`@@absent` says which),
            // or one of the run's own procfs the host may not look into (the
            // mount table still shows it read-only).
            Err(nix::errno::Errno::ENOENT) if point.kernel_part => continue,
            Err(nix::errno::Errno::EACCES) if point.on_kernel_fs() => continue,
            Err(errno) => {
                let line = format!("{} {target}\n", unreadable(errno));
                writes.push_str(&line);
                if point.masked {
                    masked.push_str(&line);
                }
                continue;
            }
        };
        if point.read_only {
            match write_answer(&file) {
                // Only the run's own root may ask its procfs and sysfs.
                Err(nix::errno::Errno::EACCES) if point.on_kernel_fs() => {}
                Ok(answer) => writes.push_str(&format!("{answer} {target}\n")),
                Err(errno) => writes.push_str(&format!("{} {target}\n", unreadable(errno))),
            }
        }
        if point.masked {
            masked.push_str(&format!("{} {target}\n", shows(&file)));
        }
    }
    writes + &masked
}

/// `target` inside the root `root`, as a path descriptor.
fn open_inside(root: BorrowedFd<'_>, target: &str) -> nix::Result<OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        // No symbolic link on the way: the probe asks about the mount target
        // itself (a link there is a mismatch), never where a link leads.
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_SYMLINKS);
    openat2(root, target.trim_start_matches('/'), how)
}

/// `refused` when a write to `file` is refused for its mount (`EROFS`),
/// `accepted` when it would be allowed; `discarded` for the null device (a
/// masked file: a write succeeds and nothing is kept), `device` for another
/// device or special file (whose writes no mount flag refuses).
fn write_answer(file: &OwnedFd) -> nix::Result<&'static str> {
    use nix::sys::stat::{SFlag, fstat};
    use nix::unistd::{AccessFlags, faccessat};
    let st = fstat(file)?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFCHR && st.st_rdev == nix::sys::stat::makedev(1, 3) {
        return Ok("discarded");
    }
    if !(kind == SFlag::S_IFREG || kind == SFlag::S_IFDIR) {
        return Ok("device");
    }
    match faccessat(
        file,
        "",
        AccessFlags::W_OK,
        nix::fcntl::AtFlags::AT_EMPTY_PATH,
    ) {
        Err(nix::errno::Errno::EROFS) => Ok("refused"),
        Ok(()) => Ok("accepted"),
        // Not this runner's to write (an ordinary user and a file of root's):
        // the kernel checks the file's permission before its mount's, so the
        // mount's own flag answers.
        Err(nix::errno::Errno::EACCES) => {
            let flags = nix::sys::statvfs::fstatvfs(file)?.flags();
            if flags.contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
                Ok("refused")
            } else {
                Err(nix::errno::Errno::EACCES)
            }
        }
        Err(errno) => Err(errno),
    }
}

/// `hidden` when `file` shows nothing (an empty directory, an empty regular
/// file, the null device), else what it shows.
fn shows(file: &OwnedFd) -> String {
    use nix::sys::stat::{SFlag, fstat};
    let Ok(st) = fstat(file) else {
        return "unreadable".into();
    };
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFCHR {
        let null = nix::sys::stat::makedev(1, 3);
        return if st.st_rdev == null {
            "hidden".into()
        } else {
            "a-device".into()
        };
    }
    if kind == SFlag::S_IFREG {
        return if st.st_size == 0 {
            "hidden".into()
        } else {
            format!("{}-bytes", st.st_size)
        };
    }
    if kind != SFlag::S_IFDIR {
        return "not-a-directory".into();
    }
    let entries = nix::dir::Dir::openat(
        file,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        nix::sys::stat::Mode::empty(),
    )
    .map(|mut dir| {
        dir.iter()
            .flatten()
            .filter(|e| !matches!(e.file_name().to_bytes(), b"." | b".."))
            .count()
    });
    match entries {
        Ok(0) => "hidden".into(),
        Ok(n) => format!("{n}-entries"),
        Err(errno) => format!("unreadable:{}", errno.desc().replace(' ', "-")),
    }
}

/// What the host reads of process `pid`, as the sections
/// [`observe::parse`] reads.
fn from_host(pid: u32, hostname: String) -> String {
    let proc = format!("/proc/{pid}");
    let read = |name: &str| std::fs::read(format!("{proc}/{name}")).unwrap_or_default();
    let text = |name: &str| String::from_utf8_lossy(&read(name)).into_owned();
    let link = |path: String| {
        std::fs::read_link(path)
            .map(|l| l.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "unknown".into())
    };
    let process_count = std::fs::read_dir(format!("{proc}/root/proc"))
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.parse::<u32>().is_ok())
                })
                .count()
        })
        .ok();
    observe::proc_sections(&observe::ProcFacts {
        status: text("status"),
        uid_map: text("uid_map"),
        gid_map: text("gid_map"),
        cgroup: text("cgroup"),
        net_dev: text("net/dev"),
        environ: read("environ"),
        mountinfo: text("mountinfo"),
        namespaces: observe::NAMESPACES
            .iter()
            .map(|kind| {
                (
                    link(format!("{proc}/ns/{kind}")),
                    link(format!("/proc/self/ns/{kind}")),
                )
            })
            .collect(),
        hostname,
        process_count,
    })
}

/// Kills the probe's pid namespace and reaps it; the timeout error.
fn kill_probe(mut child: SpawnedChild, after_ms: u64) -> ProcessError {
    tracing::warn!(
        pid = child.pid(),
        after_ms,
        "the boundary probe timed out; killing it"
    );
    if let Err(e) = child.kill() {
        tracing::warn!(error = %e, "killing the boundary probe failed");
    }
    if let Err(e) = child.wait() {
        tracing::warn!(error = %e, "reaping the boundary probe failed");
    }
    ProcessError::ProbeTimeout { after_ms }
}

/// Everything `read` gives until EOF (at most 1 MiB kept), or `None` when
/// `deadline` passes first.
fn read_until(read: BorrowedFd<'_>, deadline: Instant) -> std::io::Result<Option<String>> {
    read_up_to(read, deadline, false)
}

/// One line of what `read` gives (without its newline; what comes before EOF
/// when no newline does), or `None` when `deadline` passes first.
fn read_line(read: BorrowedFd<'_>, deadline: Instant) -> std::io::Result<Option<String>> {
    Ok(read_up_to(read, deadline, true)?.map(|line| line.trim_end_matches('\n').to_owned()))
}

/// What `read` gives until EOF, or until the first newline when `line`.
fn read_up_to(
    read: BorrowedFd<'_>,
    deadline: Instant,
    line: bool,
) -> std::io::Result<Option<String>> {
    let mut output = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if line && output.contains(&b'\n') {
            break;
        }
        if !poll_in(read, deadline)? {
            return Ok(None);
        }
        match nix::unistd::read(read, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let keep = n.min((1usize << 20).saturating_sub(output.len()));
                output.extend_from_slice(&buf[..keep]);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(String::from_utf8_lossy(&output).into_owned()))
}

/// Whether the pidfd says the process ended before `deadline`.
fn wait_pidfd(pidfd: BorrowedFd<'_>, deadline: Instant) -> bool {
    poll_in(pidfd, deadline).unwrap_or(false)
}

/// Waits until `fd` is readable (or hung up); `false` when `deadline` passed.
fn poll_in(fd: BorrowedFd<'_>, deadline: Instant) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        let mut fds = [libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        match crate::sys::fd::poll(&mut fds, ms) {
            Ok(ready) if ready > 0 => return Ok(true),
            Ok(_) | Err(libc::EINTR) => {}
            Err(errno) => return Err(std::io::Error::from_raw_os_error(errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_that_never_ends_times_out() {
        let (read, write) = pipe("a test pipe").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::write(&write, b"partial").unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        let got = read_until(read.as_fd(), started + Duration::from_millis(200))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, None, "a writer still open: no EOF, so a timeout");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(write);

        let (read, write) = pipe("a test pipe").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::write(&write, b"all of it").unwrap_or_else(|e| panic!("{e}"));
        drop(write);
        let got = read_until(read.as_fd(), Instant::now() + Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_deref(), Some("all of it"));
    }

    #[test]
    fn a_line_is_read_while_its_writer_stays_open() {
        let (read, write) = pipe("a test pipe").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::write(&write, b"run-1\n").unwrap_or_else(|e| panic!("{e}"));
        let got = read_line(read.as_fd(), Instant::now() + Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_deref(), Some("run-1"));
        drop(write);
    }
}
