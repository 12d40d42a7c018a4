//! The boundary probe of `seal`: one shell in the sandbox, observed from the
//! host.
//!
//! The shell ([`ProbeShell`]) has a command's privileges, seccomp filter,
//! environment and working directory, in pid 1's cgroup (as its first
//! process) or a cgroup of its own (joined through a door), and reads its
//! stdin, which blocks. While it waits, the host reads what that process is
//! from outside: `/proc/<pid>/status` (ids, capabilities, `no_new_privs`, seccomp), `uid_map`
//! and `gid_map`, `mountinfo` (relative to the process's root), `net/dev` (its
//! network namespace), `environ` (what it was exec'd with) and the processes of
//! its pid namespace (`/proc/<pid>/root/proc`); the hostname is read in its UTS
//! namespace by a thread of its own. Nothing in the sandbox formats these, so
//! nothing there can forge them. Only a declared toolchain needs the shell:
//! `<program> --version` is written to its stdin. Then stdin closes and the
//! shell exits: one `execve` per workspace.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::libc;
use workspace_core::boundary::ObservedBoundary;

use super::error::ProcessError;
use super::in_sandbox;
use super::probe_shell::ProbeShell;
use super::seal::Sealed;
use workspace_core::observation::{self as observe, Expected};

/// Runs the probe in the run and compares what it saw (blocking): in `shell`,
/// pid 1's first process, or else in a shell joined now. The probe's setup,
/// observation and exit together get `timeout` (the options'
/// [`PROBE_TIMEOUT`](super::PROBE_TIMEOUT) by default); after that it is killed
/// and the seal fails with [`ProcessError::ProbeTimeout`]. A first-process
/// shell started with the sandbox, under the spawn's own setup timeout: one
/// that could not start (no `/bin/sh`) failed the sandbox's start, naming its
/// first process.
pub(crate) fn probe(
    sealed: &Sealed,
    shell: Option<ProbeShell>,
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
    let mut shell = match shell {
        Some(shell) => shell,
        None => ProbeShell::join(
            (&sealed.spec, &sealed.cgroup, &sealed.sandbox),
            timeout,
            after_ms,
        )?,
    };
    let hostname = match hostname {
        Some(thread) => {
            shell.tell(READY_LINE);
            shell.read(true, deadline, after_ms)?;
            thread.wait()?.unwrap_or_default()
        }
        None => {
            shell.tell(HOSTNAME_LINE);
            shell.read(true, deadline, after_ms)?
        }
    };
    // Read while the shell waits on its stdin: it is there to be looked at.
    let mut text = from_host(shell.pid, hostname);
    text.push_str(&absent_section(shell.pid, &expected.mount_points));
    text.push_str(&readback_sections(shell.pid, &expected.mount_points));
    if let Some(line) = observe::toolchain_line(expected.toolchain.as_deref()) {
        shell.tell(&line);
    }
    let output = shell.read(false, deadline, after_ms)?;
    text.push_str(&observe::toolchain_section(&output));
    text.push_str("@@end\n");
    let status = shell.end(deadline, after_ms)?;
    let mut observed = observe::observe(&text, expected);
    observed
        .facts
        .insert("probe_status".into(), serde_json::json!(status));
    // What was applied, as one digest a reviewer can compare across runs.
    observed.facts.insert(
        "mount_plan_sha256".into(),
        serde_json::json!(sealed.mount_plan_sha256),
    );
    Ok(observed)
}

/// What the probe's shell runs first where the host reads the hostname itself:
/// an empty line, whose arrival says the shell's `execve` is complete. The
/// parent learns of an exec once it cannot fail, before the kernel has set
/// what `/proc/<pid>/environ` and `cmdline` show, so the observation below
/// waits for the shell's first answer. (Through a door, the hostname line
/// says it.)
const READY_LINE: &str = "echo\n";

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
