//! The seal's proof that the runtime's seccomp filter refuses what the
//! container's profile ([`crate::seccomp`]) refuses and the runtime may not
//! know: `fchmodat2` (syscall 452) with a set-id mode, and `openat2` (437).
//!
//! A runtime hands the profile to the libseccomp it was built with, which
//! resolves each syscall by name. One older than the syscall does not know
//! it, and runc and crun then leave its rule out without a word: the
//! container could `fchmodat2(AT_FDCWD, "f", 04755, 0)` a file of a writable
//! host cache set-user-id. So before the probe, and before any command, the
//! seal runs [`PROGRAM`] in the container as every command runs (the run's
//! ids, its cgroup, no capability, `no_new_privs`, the container's filter):
//! it makes an unnamed file of its own in the container's `/tmp`
//! (`O_TMPFILE`), asks `fchmodat2` to make it set-user-id and `openat2` to
//! make another with a set-id mode in its `open_how`, and writes what the
//! kernel answered. `fchmodat2` must fail with `EPERM` (the filter) or
//! `ENOSYS` (a kernel before 6.6), `openat2` with `ENOSYS`; any other
//! answer fails the seal naming the runtime and the syscall
//! ([`ContainerError::SeccompNotKept`]). Nothing the program makes has a
//! name, so nothing of it outlives it.
//!
//! The program is 456 bytes of x86-64 machine code with its own ELF header
//! (no C library: it runs on any image), assembled from `set_id_check.s`
//! beside this file (a test assembles it again and compares). The runner
//! passes it as the process's standard input, a sealed read-only memory
//! file, and the process runs `/proc/self/fd/0`: nothing is written into the
//! container.

use std::os::fd::{AsFd, OwnedFd};
use std::time::Instant;

use super::cgroups::CommandCgroup;
use super::exec::ProcessTemplate;
use crate::error::ContainerError;
use crate::runtime::Runtime;

/// `set_id_check.s`, assembled (`as --64`, `objcopy -O binary -j .text`).
#[rustfmt::skip]
pub(crate) const PROGRAM: [u8; 456] = [
    0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x3e, 0x00, 0x01, 0x00, 0x00, 0x00, 0xb0, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x38, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xc8, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc8, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x51, 0xe5, 0x74, 0x64, 0x06, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xbf, 0x9c, 0xff, 0xff, 0xff, 0x48, 0x8d, 0x35, 0xda, 0x00, 0x00, 0x00, 0xba, 0x02, 0x00, 0x41,
    0x00, 0x41, 0xba, 0x80, 0x01, 0x00, 0x00, 0xb8, 0x01, 0x01, 0x00, 0x00, 0x0f, 0x05, 0x48, 0x85,
    0xc0, 0x78, 0x2f, 0x48, 0x89, 0xc7, 0x48, 0x8d, 0x35, 0xbb, 0x00, 0x00, 0x00, 0xba, 0xed, 0x09,
    0x00, 0x00, 0x41, 0xba, 0x00, 0x10, 0x00, 0x00, 0xb8, 0xc4, 0x01, 0x00, 0x00, 0x0f, 0x05, 0x48,
    0x8d, 0x35, 0xa3, 0x00, 0x00, 0x00, 0xba, 0x0a, 0x00, 0x00, 0x00, 0xe8, 0x4d, 0x00, 0x00, 0x00,
    0xeb, 0x11, 0x48, 0x8d, 0x35, 0x9a, 0x00, 0x00, 0x00, 0xba, 0x05, 0x00, 0x00, 0x00, 0xe8, 0x3a,
    0x00, 0x00, 0x00, 0xbf, 0x9c, 0xff, 0xff, 0xff, 0x48, 0x8d, 0x35, 0x77, 0x00, 0x00, 0x00, 0x48,
    0x8d, 0x15, 0x8a, 0x00, 0x00, 0x00, 0x41, 0xba, 0x18, 0x00, 0x00, 0x00, 0xb8, 0xb5, 0x01, 0x00,
    0x00, 0x0f, 0x05, 0x48, 0x8d, 0x35, 0x6e, 0x00, 0x00, 0x00, 0xba, 0x08, 0x00, 0x00, 0x00, 0xe8,
    0x09, 0x00, 0x00, 0x00, 0x31, 0xff, 0xb8, 0xe7, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x50, 0xbf, 0x01,
    0x00, 0x00, 0x00, 0xb8, 0x01, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x58, 0x48, 0xf7, 0xd8, 0x7f, 0x02,
    0x31, 0xc0, 0x48, 0x8d, 0x74, 0x24, 0xf8, 0xc6, 0x06, 0x0a, 0xb9, 0x0a, 0x00, 0x00, 0x00, 0x31,
    0xd2, 0x48, 0xf7, 0xf1, 0x80, 0xc2, 0x30, 0x48, 0xff, 0xce, 0x88, 0x16, 0x48, 0x85, 0xc0, 0x75,
    0xee, 0x48, 0x8d, 0x54, 0x24, 0xf9, 0x48, 0x29, 0xf2, 0xbf, 0x01, 0x00, 0x00, 0x00, 0xb8, 0x01,
    0x00, 0x00, 0x00, 0x0f, 0x05, 0xc3, 0x2e, 0x00, 0x00, 0x66, 0x63, 0x68, 0x6d, 0x6f, 0x64, 0x61,
    0x74, 0x32, 0x20, 0x66, 0x69, 0x6c, 0x65, 0x20, 0x6f, 0x70, 0x65, 0x6e, 0x61, 0x74, 0x32, 0x20,
    0x02, 0x00, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0xed, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// Where the program makes its file: the plan's `/tmp`, a tmpfs of the
/// container's own.
const WORKDIR: &str = "/tmp";
/// `EPERM`, what the filter answers.
const EPERM: i32 = 1;
/// `ENOSYS`, what a kernel without the syscall, or the filter's `openat2`
/// rule, answers.
const ENOSYS: i32 = 38;

/// What the kernel answered the program in the container: an errno, or 0
/// when the call worked; `None` when it did not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Answers {
    /// `fchmodat2(fd, "", 04755, AT_EMPTY_PATH)` on its own file.
    pub(crate) fchmodat2: Option<i32>,
    /// Why it made no file to try `fchmodat2` on.
    pub(crate) file: Option<i32>,
    /// `openat2(AT_FDCWD, ".", {O_TMPFILE | O_RDWR, 04755}, 24)`.
    pub(crate) openat2: Option<i32>,
}

impl Answers {
    /// Reads the program's lines (`NAME ERRNO`).
    pub(crate) fn parse(output: &str) -> Self {
        let mut answers = Self::default();
        for line in output.lines() {
            let Some((name, number)) = line.split_once(' ') else {
                continue;
            };
            let Ok(number) = number.trim().parse::<i32>() else {
                continue;
            };
            match name {
                "fchmodat2" => answers.fchmodat2 = Some(number),
                "file" => answers.file = Some(number),
                "openat2" => answers.openat2 = Some(number),
                _ => {}
            }
        }
        answers
    }

    /// The first syscall the filter did not refuse as the profile says,
    /// with its number and what happened; `None` when both were refused.
    pub(crate) fn not_kept(&self) -> Option<(&'static str, u32, String)> {
        let fchmodat2 = match (self.fchmodat2, self.file) {
            (Some(EPERM | ENOSYS), _) => None,
            (Some(0), _) => Some("set a set-user-id mode on a file of its own".to_owned()),
            (Some(errno), _) => Some(format!(
                "answered {} instead of EPERM: the filter let it through to the kernel",
                errno_name(errno)
            )),
            (None, Some(errno)) => Some(format!(
                "could not be tried: no file of its own could be made in {WORKDIR} ({})",
                errno_name(errno)
            )),
            (None, None) => Some("was not answered: the check ended early".to_owned()),
        };
        if let Some(what) = fchmodat2 {
            return Some(("fchmodat2", 452, what));
        }
        let openat2 = match self.openat2 {
            Some(ENOSYS) => None,
            Some(0) => Some("made a file with a set-user-id mode".to_owned()),
            Some(errno) => Some(format!("answered {} instead of ENOSYS", errno_name(errno))),
            None => Some("was not answered: the check ended early".to_owned()),
        };
        openat2.map(|what| ("openat2", 437, what))
    }

    /// The answers as `observed.json` records them.
    pub(crate) fn to_json(self) -> serde_json::Value {
        let show = |answer: Option<i32>| match answer {
            Some(0) => serde_json::json!("worked"),
            Some(errno) => serde_json::json!(errno_name(errno)),
            None => serde_json::Value::Null,
        };
        serde_json::json!({
            "fchmodat2_set_id": show(self.fchmodat2),
            "openat2": show(self.openat2),
        })
    }
}

/// `EPERM (Operation not permitted)` for errno 1.
fn errno_name(errno: i32) -> String {
    let known = nix::errno::Errno::from_raw(errno);
    format!("{known:?} ({})", known.desc())
}

/// Runs the program in the container, in `cgroup` (its name and the cgroup,
/// made already: the probe's), and fails unless the runtime's filter refused
/// both syscalls (blocking, until `deadline`, the probe's, which ends
/// `after_ms` after it started). Its answers, for the evidence.
pub(crate) fn check(
    runtime: &Runtime,
    template: &ProcessTemplate,
    cgroup: (&str, &CommandCgroup),
    (deadline, after_ms): (Instant, u64),
) -> Result<Answers, ContainerError> {
    if !cfg!(target_arch = "x86_64") {
        // The program is x86-64 code (as the profile's architectures are).
        return Err(ContainerError::Unsupported {
            setting: format!(
                "a seal on {}: its set-id check is x86-64 code",
                std::env::consts::ARCH
            ),
        });
    }
    let program = program_file()?;
    let started = template.start(
        runtime,
        (cgroup.0, &cgroup.1.procs_file()),
        (vec!["/proc/self/fd/0".into()], WORKDIR),
        super::exec::Streams {
            input: Some(program),
            output: None,
        },
        || {},
    )?;
    let mut child = started.runtime;
    drop(started.stdin);
    drop(started.stderr);
    let Some(stdout) = started.stdout else {
        return Err(ContainerError::Lost {
            what: "the set-id check has no stdout pipe".into(),
        });
    };
    let output =
        super::pipe_read::read_until(stdout, deadline).map_err(|source| ContainerError::Pipe {
            step: "reading the set-id check's output",
            source,
        })?;
    // Its end (the runtime reaps it), so that the probe finds its own
    // process alone in the cgroup.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            _ => {
                child.kill();
                break None;
            }
        }
    };
    let Some(output) = output else {
        return Err(ContainerError::ProbeTimeout { after_ms });
    };
    let answers = Answers::parse(&output);
    if let Some((syscall, number, what)) = answers.not_kept() {
        let ended = status.map_or_else(|| "did not end".to_owned(), |s| s.to_string());
        return Err(ContainerError::SeccompNotKept {
            runtime: runtime.name().to_owned(),
            version: runtime.version().to_owned(),
            syscall,
            number,
            answer: format!("{what} (the check {ended})"),
        });
    }
    Ok(answers)
}

/// [`PROGRAM`] in a sealed memory file, opened read-only (a file open for
/// writing cannot be executed): what the process gets as its stdin.
fn program_file() -> Result<OwnedFd, ContainerError> {
    use nix::fcntl::{FcntlArg, OFlag, SealFlag, fcntl, open};
    use nix::sys::memfd::{MFdFlags, memfd_create};
    use nix::sys::stat::Mode;
    let failed = |step: &'static str| {
        move |errno: nix::errno::Errno| ContainerError::Pipe {
            step,
            source: errno.into(),
        }
    };
    let flags = MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING;
    let exec = MFdFlags::from_bits_retain(nix::libc::MFD_EXEC);
    // A kernel before 6.3 does not know `MFD_EXEC` (its memory files are
    // executable anyway).
    let file = match memfd_create(c"aw-set-id-check", flags | exec) {
        Err(nix::errno::Errno::EINVAL) => memfd_create(c"aw-set-id-check", flags),
        made => made,
    }
    .map_err(failed(
        "making the set-id check's program file in memory (a host with vm.memfd_noexec = 2 refuses an executable one)",
    ))?;
    let mut written = 0;
    while written < PROGRAM.len() {
        match nix::unistd::write(&file, &PROGRAM[written..])
            .map_err(failed("writing the set-id check's program"))?
        {
            0 => {
                return Err(failed("writing the set-id check's program")(
                    nix::errno::Errno::ENOSPC,
                ));
            }
            n => written += n,
        }
    }
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_SEAL;
    fcntl(&file, FcntlArg::F_ADD_SEALS(seals))
        .map_err(failed("sealing the set-id check's program"))?;
    let by_fd = format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&file.as_fd())
    );
    open(
        by_fd.as_str(),
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(failed("opening the set-id check's program read-only"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;

    #[test]
    fn the_answers_are_kept_only_when_both_syscalls_are_refused() {
        let refused = Answers::parse("fchmodat2 1\nopenat2 38\n");
        assert_eq!(refused.not_kept(), None);
        // A kernel before 6.6 has no fchmodat2: nothing to refuse.
        assert_eq!(
            Answers::parse("fchmodat2 38\nopenat2 38\n").not_kept(),
            None
        );
        let (syscall, number, what) = Answers::parse("fchmodat2 0\nopenat2 38\n")
            .not_kept()
            .unwrap();
        assert_eq!((syscall, number), ("fchmodat2", 452));
        assert!(what.contains("set-user-id"), "{what}");
        let (syscall, _, what) = Answers::parse("fchmodat2 2\nopenat2 38\n")
            .not_kept()
            .unwrap();
        assert_eq!(syscall, "fchmodat2");
        assert!(what.contains("ENOENT"), "{what}");
        let (syscall, _, what) = Answers::parse("file 95\nopenat2 38\n").not_kept().unwrap();
        assert_eq!(syscall, "fchmodat2");
        assert!(
            what.contains("/tmp") && what.contains("EOPNOTSUPP"),
            "{what}"
        );
        let (syscall, number, _) = Answers::parse("fchmodat2 1\nopenat2 0\n")
            .not_kept()
            .unwrap();
        assert_eq!((syscall, number), ("openat2", 437));
        let (syscall, _, what) = Answers::parse("fchmodat2 1\nopenat2 1\n")
            .not_kept()
            .unwrap();
        assert_eq!(syscall, "openat2");
        assert!(what.contains("EPERM"), "{what}");
        assert!(Answers::parse("").not_kept().is_some());
        assert_eq!(
            refused.to_json(),
            serde_json::json!({
                "fchmodat2_set_id": "EPERM (Operation not permitted)",
                "openat2": "ENOSYS (Function not implemented)",
            })
        );
    }

    /// Without a filter the program's calls work: it answers `0` for both
    /// (the positive control of what the seal checks).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn without_a_filter_the_program_sets_the_mode_and_opens_the_file() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let program = program_file().unwrap();
        let out = std::process::Command::new(format!("/proc/self/fd/{}", program.as_raw_fd()))
            .current_dir(dir.path())
            .stdin(std::process::Stdio::from(program))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let answers = Answers::parse(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(
            answers,
            Answers {
                fchmodat2: Some(0),
                file: None,
                openat2: Some(0)
            }
        );
        // Nothing it made has a name.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// The bytes are `set_id_check.s` assembled (binutils' `as` and `objcopy`).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_program_is_its_assembly_source() {
        let dir = tempfile::tempdir().unwrap();
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/src/process/set_id_check.s");
        let object = dir.path().join("check.o");
        let binary = dir.path().join("check.bin");
        let assembled = std::process::Command::new("as")
            .args(["--64", "-o"])
            .arg(&object)
            .arg(source)
            .status()
            .expect("binutils' as (Debian package binutils)");
        assert!(assembled.success());
        let copied = std::process::Command::new("objcopy")
            .args(["-O", "binary", "-j", ".text"])
            .arg(&object)
            .arg(&binary)
            .status()
            .expect("binutils' objcopy");
        assert!(copied.success());
        assert_eq!(std::fs::read(&binary).unwrap(), PROGRAM);
    }
}
