//! Commands with a pseudo-terminal (`CommandSpec.tty = true`), end to end with real
//! namespaces and cgroups (run as root).
//!
//! With a terminal the line discipline is in between: output lines end in `\r\n`
//! (`onlcr`), input is echoed, stderr arrives on stdout and the stderr stream is
//! empty.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod runs;

use std::time::{Duration, Instant};

use backend_namespace::cgroup::{CgroupLayout, leaked_paths};
use backend_namespace::process::{NamespaceProcess, PTY_WINDOW_SIZE, ProcessOptions};
use runs::{ParentGuard, Run, command, standalone_run};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use workspace_core::boundary::{CommandSpec, KillCause, ProcessBoundary, RunContext};
use workspace_core::evidence::ExitStatusRecord;

/// A sealed run over a fresh workspace.
struct Fixture {
    run: RunContext,
    process: NamespaceProcess,
    parent: String,
    _guard: ParentGuard,
    _base: TempDir,
}

async fn sealed(test: &str) -> Fixture {
    let Run { base, run, plan } = standalone_run(&format!("pty-{test}"), |_| {}).await;
    let parent = format!("agent-workspace-test-{}-pty-{test}", std::process::id());
    let process = NamespaceProcess::new(ProcessOptions::probe(parent.clone()).unwrap());
    let observed = process.seal(&run, &plan).await.unwrap();
    assert_eq!(observed.mismatches, Vec::<String>::new());
    Fixture {
        run,
        process,
        _guard: ParentGuard(parent.clone()),
        parent,
        _base: base,
    }
}

impl Fixture {
    async fn teardown_is_clean(&self) {
        let report = self.process.teardown(&self.run).await.unwrap();
        assert!(report.is_clean(), "{report:?}");
    }
}

/// `/bin/sh -c script`, with or without a terminal.
fn sh(script: &str, tty: bool) -> CommandSpec {
    CommandSpec {
        tty,
        output: None,
        ..command(&["/bin/sh", "-c", script], Some(30_000))
    }
}

/// Runs `spec` with `input` written to its stdin; (exit, stdout, stderr).
async fn run(f: &Fixture, spec: &CommandSpec, input: &[u8]) -> (ExitStatusRecord, String, String) {
    let mut exec = f.process.spawn(&f.run, spec).await.unwrap();
    let mut stdin = exec.take_stdin().unwrap();
    stdin.write_all(input).await.unwrap();
    let mut stdout = exec.take_stdout().unwrap();
    let mut stderr = exec.take_stderr().unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    let (a, b) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    a.unwrap();
    b.unwrap();
    drop(stdin);
    (exec.wait().await.unwrap().status, out, err)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tty_command_has_a_terminal_and_a_piped_one_has_none() {
    let f = sealed("is-a-tty").await;
    let script = "test -t 0 && test -t 1 && test -t 2 && echo tty";
    let (status, out, err) = run(&f, &sh(script, true), b"").await;
    assert_eq!(
        (status, out.as_str(), err.as_str()),
        (ExitStatusRecord::Code(0), "tty\r\n", "")
    );
    // Positive control: the same command without a terminal prints nothing.
    let (status, out, err) = run(&f, &sh(script, false), b"").await;
    assert_eq!(
        (status, out.as_str(), err.as_str()),
        (ExitStatusRecord::Code(1), "", "")
    );
    f.teardown_is_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_terminal_is_80_by_24_and_stderr_arrives_on_stdout() {
    let f = sealed("size").await;
    assert_eq!(PTY_WINDOW_SIZE, (24, 80));
    let (status, out, err) = run(&f, &sh("stty size; echo to-stderr >&2", true), b"").await;
    assert_eq!(status, ExitStatusRecord::Code(0));
    assert_eq!(out, "24 80\r\nto-stderr\r\n");
    assert_eq!(err, "", "with a terminal the stderr stream is empty");
    f.teardown_is_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn input_reaches_the_command_and_ctrl_d_ends_it() {
    let f = sealed("input").await;
    let (status, out, _) = run(&f, &sh("read line; echo got $line", true), b"hello\n").await;
    assert_eq!(status, ExitStatusRecord::Code(0));
    // The terminal echoes the input, then the command answers.
    assert_eq!(out, "hello\r\ngot hello\r\n");
    // Closing stdin does not end a terminal's input; ^D at the start of a line does.
    let (status, out, _) = run(&f, &sh("cat; echo cat-ended", true), b"one\n\x04").await;
    assert_eq!(status, ExitStatusRecord::Code(0));
    assert_eq!(out, "one\r\none\r\ncat-ended\r\n");
    f.teardown_is_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_output_ends_cleanly_without_losing_data_when_the_command_ends() {
    let f = sealed("hangup").await;
    // The master reads EIO once the command's tree closed the terminal: the stream
    // must end there (EOF), after everything written before the hangup.
    let (status, out, _) = run(
        &f,
        &sh("head -c 200000 /dev/zero | tr '\\0' a; exit 7", true),
        b"",
    )
    .await;
    assert_eq!(status, ExitStatusRecord::Code(7));
    assert_eq!(out.len(), 200_000);
    assert!(out.bytes().all(|b| b == b'a'));
    f.teardown_is_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_kills_the_whole_tree_of_a_tty_command() {
    let f = sealed("timeout").await;
    let started = Instant::now();
    let mut exec = f
        .process
        .spawn(
            &f.run,
            &CommandSpec {
                tty: true,
                output: None,
                ..command(
                    &[
                        "/bin/sh",
                        "-c",
                        "setsid sleep 30 & sleep 30 & echo started; wait",
                    ],
                    Some(500),
                )
            },
        )
        .await
        .unwrap();
    let mut stdout = exec.take_stdout().unwrap();
    let mut out = String::new();
    let (read, exit) = tokio::join!(stdout.read_to_string(&mut out), exec.wait());
    read.unwrap();
    let exit = exit.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(exit.killed, Some(KillCause::Timeout));
    assert_eq!(exit.status, ExitStatusRecord::Signal(9));
    assert_eq!(out, "started\r\n");
    // Nothing of the tree survived the kill: the run's cgroups are empty before
    // the teardown.
    let layout = CgroupLayout::detect().unwrap();
    for dir in leaked_paths(&layout, &f.parent, &f.run.run_id).unwrap() {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        assert_eq!(procs.trim(), "", "{} still has processes", dir.display());
    }
    f.teardown_is_clean().await;
}

/// `tty_nr` (field 7) of a `/proc/<pid>/stat` text.
fn tty_nr(stat: &str) -> u64 {
    let after = stat.rsplit_once(") ").unwrap().1;
    after.split_whitespace().nth(4).unwrap().parse().unwrap()
}

/// The kernel's `tty_nr` encoding of a device number.
fn encode(major: u64, minor: u64) -> u64 {
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// Attack: a run with a terminal tries to reach the *runner's* terminal: its stdio,
/// `/dev/tty` and `TIOCSTI` all lead to the run's own pseudo-terminal, whose other
/// end is the execution's streams, never the runner's controlling terminal.
#[tokio::test(flavor = "multi_thread")]
async fn a_tty_run_cannot_reach_the_runners_terminal() {
    let f = sealed("attack").await;
    let script = "\
        set -- $(stat -L -c '%t %T %d' /proc/self/fd/0); echo stdin=$1:$2:$3; \
        echo ctty=$(cut -d' ' -f7 /proc/self/stat); \
        echo devpts=$(stat -c %d /dev/pts/ptmx); \
        echo pts=$(ls /dev/pts | tr '\\n' ' '); \
        echo via-dev-tty > /dev/tty; \
        for fd in /proc/self/fd/*; do test -t ${fd##*/} && echo terminal-fd=${fd##*/}; done; \
        if command -v perl >/dev/null; then \
          if perl -e 'for (split //, \"echo injected\\n\") { ioctl(STDIN, 0x5412, $_) or die \"$!\\n\" }'; \
          then read line; echo \"read back: $line\"; else echo tiocsti-refused; fi; \
        else echo no-perl; fi";
    let (status, out, err) = run(&f, &sh(script, true), b"").await;
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert_eq!(err, "");
    let value = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {out:?}"))
            .trim()
            .to_owned()
    };
    let stdin = value("stdin");
    let parts: Vec<&str> = stdin.split(':').collect();
    let (major, minor) = (
        u64::from_str_radix(parts[0], 16).unwrap(),
        u64::from_str_radix(parts[1], 16).unwrap(),
    );
    assert_eq!(major, 136, "stdin is a pts slave: {out}");
    // The command's controlling terminal is its stdin, its own pseudo-terminal...
    let ctty: u64 = value("ctty").parse().unwrap();
    assert_eq!(ctty, encode(major, minor), "{out}");
    // ... not the terminal of the runner (the test process), nor any of its stdio.
    let own = tty_nr(&std::fs::read_to_string("/proc/self/stat").unwrap());
    assert_ne!(ctty, own, "the run's controlling terminal is the runner's");
    for fd in 0..3 {
        if let Ok(meta) = std::fs::metadata(format!("/proc/self/fd/{fd}")) {
            use std::os::unix::fs::MetadataExt;
            let rdev = meta.rdev();
            let (maj, min) = (nix::libc::major(rdev) as u64, nix::libc::minor(rdev) as u64);
            assert!(
                (maj, min) != (major, minor),
                "the runner's fd {fd} is the run's terminal"
            );
        }
    }
    // The slave was opened on the run's own, fresh devpts instance: the only
    // terminals in it are the run's (its own slave), no host terminal.
    assert_eq!(
        value("stdin").split(':').nth(2),
        Some(value("devpts").as_str())
    );
    assert_eq!(value("pts"), format!("{minor} ptmx"), "{out}");
    // A write to /dev/tty arrives on the execution's stdout (the master), so it
    // cannot reach the runner's stdout or terminal.
    assert!(out.contains("via-dev-tty\r\n"), "{out}");
    // Only stdio is a terminal.
    let terminal_fds: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("terminal-fd="))
        .collect();
    assert_eq!(terminal_fds, ["0", "1", "2"], "{out}");
    // TIOCSTI works only on the caller's controlling terminal (or with
    // CAP_SYS_ADMIN, which the run lacks): injected input lands in the run's own
    // input, where the run reads it back, echoed on the execution's stdout.
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map(|v| v.trim() == "1")
        .unwrap_or(true);
    assert!(
        !out.contains("no-perl"),
        "this test needs perl inside the run (Debian package perl-base, from the host's /usr): {out}"
    );
    if legacy {
        assert!(out.contains("read back: echo injected\r\n"), "{out}");
    } else {
        assert!(out.contains("tiocsti-refused"), "{out}");
    }
    f.teardown_is_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_without_a_terminal_has_no_controlling_terminal() {
    let f = sealed("no-ctty").await;
    let (status, out, err) = run(
        &f,
        &sh(
            "echo x > /dev/tty || echo no-tty; cut -d' ' -f7 /proc/self/stat",
            false,
        ),
        b"",
    )
    .await;
    assert_eq!(status, ExitStatusRecord::Code(0));
    assert_eq!(out, "no-tty\n0\n");
    assert!(err.contains("No such device or address"), "{err}");
    f.teardown_is_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_interrupts_the_foreground_command() {
    let f = sealed("ctrl-c").await;
    let mut exec = f
        .process
        .spawn(
            &f.run,
            &CommandSpec {
                tty: true,
                output: None,
                ..command(&["sleep", "30"], Some(30_000))
            },
        )
        .await
        .unwrap();
    let mut stdin = exec.take_stdin().unwrap();
    // The terminal's foreground process group is the command's (it acquired the
    // terminal); ^C is SIGINT for it. Retry until the command is running.
    let started = Instant::now();
    let exit = loop {
        stdin.write_all(b"\x03").await.unwrap();
        match tokio::time::timeout(Duration::from_millis(200), exec.wait()).await {
            Ok(exit) => break exit.unwrap(),
            Err(_) => assert!(started.elapsed() < Duration::from_secs(10)),
        }
    };
    assert_eq!(exit.status, ExitStatusRecord::Signal(2));
    assert_eq!(exit.killed, None);
    f.teardown_is_clean().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_opens_terminals_of_its_own_in_its_devpts() {
    let f = sealed("own-devpts").await;
    let script = "if command -v script >/dev/null; then \
        script -qec 'tty; test -t 0 && echo inner-tty' /dev/null; else echo no-script; fi";
    let (status, out, _) = run(&f, &sh(script, false), b"").await;
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(
        !out.contains("no-script"),
        "this test needs script(1) inside the run (Debian package bsdutils, from the host's /usr): {out}"
    );
    // A terminal the run opens itself is in its own devpts, so it has a name.
    assert!(out.contains("/dev/pts/0"), "{out}");
    assert!(out.contains("inner-tty"), "{out}");
    f.teardown_is_clean().await;
}
