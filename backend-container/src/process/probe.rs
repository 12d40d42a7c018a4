//! The boundary probe of `seal`: one process in the container, observed from
//! the host and held to core's [`observation`] standard.
//!
//! The probe is `/bin/sh` started in the live container as every command is
//! (its own cgroup, the run's ids, no capability, `no_new_privs`, the
//! container's seccomp filter and the run's environment), blocked reading its
//! stdin. Meanwhile the host reads what that process is from outside:
//! `/proc/<pid>/status`, its id maps, namespaces, cgroups, network interfaces,
//! environment names, mount table, the processes of its pid namespace, its
//! hostname (read in its UTS namespace by a thread of its own), and what the
//! kernel answers for each mount point of the plan (a write refused, a masked
//! path empty). Nothing in the container formats these. Only a declared
//! toolchain needs the shell: `<program> --version` goes to its stdin; then
//! stdin closes and the shell exits.
//!
//! Before the shell, in the same cgroup, the set-id check
//! ([`set_id_check`]): what the runtime's filter must refuse and its
//! libseccomp may not know, tried in the container; the seal fails unless
//! it is refused.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sched::{CloneFlags, setns};
use workspace_core::boundary::ObservedBoundary;
use workspace_core::mount_plan::MountPoint;
use workspace_core::observation::{self, Expected};

use super::cgroups::ContainerCgroups;
use super::exec::{ProcessTemplate, Streams};
use super::set_id_check;
use crate::error::ContainerError;
use crate::runtime::Runtime;

/// The probe's sub-cgroup.
pub(crate) const PROBE_CGROUP: &str = "probe";

/// Runs the probe in the live container and compares what it saw (blocking),
/// within `timeout`.
pub(crate) fn probe(
    runtime: &Runtime,
    template: &ProcessTemplate,
    cgroups: &ContainerCgroups,
    workdir: &str,
    expected: &Expected,
    timeout: Duration,
) -> Result<ObservedBoundary, ContainerError> {
    let deadline = Instant::now() + timeout;
    let after_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let cgroup = cgroups.create_child(PROBE_CGROUP)?;
    let ready = super::migration_lock::keep_ready();
    // First what the runtime's libseccomp may have left out of the filter:
    // the seal fails here, before any command, unless it is refused.
    let set_id = set_id_check::check(
        runtime,
        template,
        (PROBE_CGROUP, &cgroup),
        (deadline, after_ms),
    );
    let set_id = match set_id {
        Ok(answers) => answers,
        Err(e) => {
            let _ = cgroup.kill_all();
            return Err(e);
        }
    };
    let started = template.start(
        runtime,
        (PROBE_CGROUP, &cgroup.procs_file()),
        (vec!["/bin/sh".into()], workdir),
        Streams::default(),
        || {},
    )?;
    drop(ready);
    // The shell waits for its input: it cannot have ended already.
    let pid = started.pid.ok_or_else(|| ContainerError::Lost {
        what: "the boundary probe's shell ended as it started".into(),
    })?;
    let mut text = from_host(pid);
    text.push_str(&absent_section(pid, &expected.mount_points));
    text.push_str(&readback_sections(pid, &expected.mount_points));
    if let Some(stdin) = started.stdin {
        let mut stdin = std::fs::File::from(stdin);
        if let Some(line) = observation::toolchain_line(expected.toolchain.as_deref()) {
            // A shell that is gone fails the write; its output then lacks the line.
            let _ = stdin.write_all(line.as_bytes());
        }
    }
    drop(started.stderr);
    let Some(stdout) = started.stdout else {
        return Err(ContainerError::Lost {
            what: "the probe has no stdout pipe".into(),
        });
    };
    let output = super::pipe_read::read_until(stdout, deadline);
    // Whatever the shell did, nothing of the probe outlives it.
    let killed = cgroup.kill_all();
    let output = match output {
        Ok(Some(output)) => output,
        Ok(None) => return Err(ContainerError::ProbeTimeout { after_ms }),
        Err(source) => {
            return Err(ContainerError::Pipe {
                step: "reading the probe's output",
                source,
            });
        }
    };
    killed?;
    text.push_str(&observation::toolchain_section(&output));
    text.push_str("@@end\n");
    let mut observed = observation::observe(&text, expected);
    observed
        .facts
        .insert("set_id_modes".into(), set_id.to_json());
    Ok(observed)
}

/// What the host reads of process `pid`, as the sections
/// [`observation::parse`] reads.
fn from_host(pid: u32) -> String {
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
    observation::proc_sections(&observation::ProcFacts {
        status: text("status"),
        uid_map: text("uid_map"),
        gid_map: text("gid_map"),
        cgroup: text("cgroup"),
        net_dev: text("net/dev"),
        environ: read("environ"),
        mountinfo: text("mountinfo"),
        namespaces: observation::NAMESPACES
            .iter()
            .map(|kind| {
                (
                    link(format!("{proc}/ns/{kind}")),
                    link(format!("/proc/self/ns/{kind}")),
                )
            })
            .collect(),
        hostname: hostname(pid).unwrap_or_default(),
        process_count,
    })
}

/// The hostname of `pid`'s UTS namespace, read by a thread that enters it (a
/// UTS namespace is per thread; no other thread of the host changes).
fn hostname(pid: u32) -> std::io::Result<String> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/uts"))?;
    std::thread::Builder::new()
        .name("aw-container-uts".into())
        .spawn(move || {
            setns(ns.as_fd(), CloneFlags::CLONE_NEWUTS)?;
            let name = nix::unistd::gethostname()?;
            Ok(name.to_string_lossy().into_owned())
        })?
        .join()
        .map_err(|_| std::io::Error::other("the hostname thread panicked"))?
        .map_err(|e: Errno| std::io::Error::from(e))
}

/// The parts of the kernel's `/proc` and `/sys` the plan covers that the
/// container's own procfs and sysfs do not have (this kernel lacks them).
fn absent_section(pid: u32, points: &[MountPoint]) -> String {
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

/// `@@writes` (whether a write to each read-only point is refused: `access(W_OK)`,
/// nothing written) and `@@masked` (whether each hidden point shows nothing),
/// asked from the host at each point inside, resolved in the container's root
/// and never through a link.
fn readback_sections(pid: u32, points: &[MountPoint]) -> String {
    let root = std::fs::File::open(format!("/proc/{pid}/root"));
    let mut writes = String::from("@@writes\n");
    let mut masked = String::from("@@masked\n");
    let unreadable = |errno: Errno| format!("unreadable:{}", errno.desc().replace(' ', "-"));
    for point in points {
        let target = observation::line_word(&point.target);
        let opened = match &root {
            Ok(root) => open_inside(root.as_fd(), &point.target),
            Err(e) => Err(Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO))),
        };
        let file = match opened {
            Ok(file) => file,
            Err(Errno::ENOENT) if point.kernel_part => continue,
            Err(Errno::EACCES) if point.on_kernel_fs() => continue,
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
                Err(Errno::EACCES) if point.on_kernel_fs() => {}
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

fn open_inside(root: BorrowedFd<'_>, target: &str) -> nix::Result<OwnedFd> {
    use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_SYMLINKS);
    openat2(root, target.trim_start_matches('/'), how)
}

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
        Err(Errno::EROFS) => Ok("refused"),
        Ok(()) => Ok("accepted"),
        Err(errno) => Err(errno),
    }
}

fn shows(file: &OwnedFd) -> String {
    use nix::fcntl::OFlag;
    use nix::sys::stat::{Mode, SFlag, fstat};
    let Ok(st) = fstat(file) else {
        return "unreadable".into();
    };
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFCHR {
        return if st.st_rdev == nix::sys::stat::makedev(1, 3) {
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
        Mode::empty(),
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
