//! Process attacks: host processes, the namespace init (a fork of the runner),
//! the exit status, processes that try to outlive the run.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use backend_namespace::spawn::spawn;
use workspace_core::evidence::ExitStatusRecord;

use crate::common::{leftovers_of, members_of, pid_ns, run};
use crate::support::{
    ARG_VAR, Canary, LiveRun, ROLE_VAR, attack_fixture, eventually, probe_argv, with_probe,
};

#[test]
fn kill_a_host_process() {
    let fixture = attack_fixture();
    let mut canary = Canary::start();
    let pid = canary.pid();
    let (status, out) = run(fixture.request(&format!(
        "sleep 100 & kill -9 $! && echo CONTROL-OK; \
         kill -9 {pid} && echo ATTACK-WORKED:kill; \
         kill -0 {pid} && echo ATTACK-WORKED:visible; exit 0"
    )));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains("No such process"), "{out}");
    assert!(canary.alive(), "the host process was killed");
}

/// Attaching to a host process through procfs (environment, memory, command line,
/// root, descriptors): the host's pids do not exist in the run's `/proc`.
#[test]
fn attach_to_a_host_process() {
    let fixture = attack_fixture();
    let mut canary = Canary::start();
    let pid = canary.pid();
    let mut script = "cat /proc/self/environ >/dev/null && echo CONTROL-OK; ".to_owned();
    for file in ["environ", "cmdline", "mem", "maps", "status"] {
        script.push_str(&format!(
            "cat /proc/{pid}/{file} >/dev/null && echo ATTACK-WORKED:{file}; "
        ));
    }
    script.push_str(&format!(
        "ls /proc/{pid}/root/ && echo ATTACK-WORKED:root; exit 0"
    ));
    let (status, out) = run(fixture.request(&script));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(canary.alive(), "the host process was disturbed");
}

#[test]
fn list_host_processes_in_proc() {
    let fixture = attack_fixture();
    let mut canary = Canary::start();
    let (status, out) =
        run(fixture.request("echo self=$$; echo pids=$(ls /proc | grep '^[0-9]' | tr '\\n' ,)"));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    let pids: Vec<u32> = out
        .lines()
        .find_map(|l| l.strip_prefix("pids="))
        .unwrap()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap())
        .collect();
    // Positive control: the run's own processes are there (init, the shell).
    assert!(pids.contains(&1) && pids.contains(&2), "{out}");
    // sh, the $(...) subshell, ls, grep, tr and init: nothing else.
    assert!(
        pids.len() <= 8 && pids.iter().all(|p| *p <= 10),
        "more than the run's processes: {out}"
    );
    assert!(!pids.contains(&canary.pid()), "{out}");
    assert!(canary.alive());
}

/// pid 1 of the run is a fork of the runner (no `exec`): its memory, environment,
/// descriptors (among them the status pipe), root and executable are the host
/// runner's. It changed its uid, so the kernel made it non-dumpable, and nothing of
/// it can be read through `/proc/1`.
#[test]
fn read_the_runner_through_the_namespace_init() {
    let fixture = attack_fixture();
    let mut script = "cat /proc/$$/environ /proc/$$/maps >/dev/null && \
                      ls /proc/$$/fd >/dev/null && echo CONTROL-OK; "
        .to_owned();
    for file in ["environ", "maps", "mem", "auxv", "syscall", "stack"] {
        script.push_str(&format!(
            "cat /proc/1/{file} && echo ATTACK-WORKED:{file}; "
        ));
    }
    for link in ["exe", "cwd", "root", "fd/5"] {
        script.push_str(&format!(
            "readlink /proc/1/{link} && echo ATTACK-WORKED:{link}; "
        ));
    }
    script.push_str("ls /proc/1/fd && echo ATTACK-WORKED:fd; exit 0");
    let (status, out) = run(fixture.request(&script));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    let exe = std::env::current_exe().unwrap();
    assert!(
        !out.contains(&*exe.to_string_lossy()),
        "the runner's executable path leaked: {out}"
    );
    let host_path = std::env::var("PATH").unwrap_or_default();
    assert!(
        host_path.is_empty() || !out.contains(&host_path),
        "the runner's environment leaked: {out}"
    );
}

/// `/proc/1/cmdline` needs no ptrace access: world-readable. Since pid 1 is a fork
/// of the runner without `exec`, its argument area is the runner's command line.
#[test]
fn read_the_runner_command_line_through_the_namespace_init() {
    let fixture = attack_fixture();
    let (status, out) = run(fixture.request(
        "cat /proc/self/cmdline | tr '\\0' ' ' && echo && echo CONTROL-OK; \
         echo init-cmdline=[$(tr '\\0' ' ' < /proc/1/cmdline)]; \
         echo init-comm=[$(cat /proc/1/comm)]",
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    // Positive control: a process's own command line is readable.
    assert!(out.contains("cat /proc/self/cmdline \nCONTROL-OK"), "{out}");
    let runner_args: Vec<String> = std::env::args().collect();
    let exe = std::env::current_exe().unwrap();
    let exe_name = exe.file_name().unwrap().to_string_lossy().into_owned();
    let line = out
        .lines()
        .find(|l| l.starts_with("init-cmdline="))
        .unwrap();
    assert!(
        !line.contains(&runner_args[0]) && !line.contains(&exe_name),
        "the runner's command line ({runner_args:?}) is readable inside as /proc/1/cmdline: {out}"
    );
}

/// The host learns the command's status from a pipe pid 1 writes; a command that
/// could write it (via `/proc/1/fd/5`) would forge its own result.
#[test]
fn forge_the_exit_status_through_the_status_pipe() {
    let fixture = attack_fixture();
    // Control: the run's own descriptors are reachable through /proc (the pipe
    // itself, created by host root, could not be reopened either).
    let mut script = "readlink /proc/self/fd/1 && echo CONTROL-OK; ".to_owned();
    for fd in 3..10 {
        script.push_str(&format!(
            "printf '\\000\\000\\000\\000' > /proc/1/fd/{fd} && echo ATTACK-WORKED:{fd}; "
        ));
    }
    script.push_str("exit 3");
    let (status, out) = run(fixture.request(&script));
    assert!(
        out.contains("pipe:[") && out.contains("CONTROL-OK"),
        "{out}"
    );
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert_eq!(status, ExitStatusRecord::Code(3), "a forged status: {out}");
}

/// pid 1 ignores every signal from inside: the kernel keeps `SIGKILL`/`SIGSTOP`
/// from a namespace's own processes away from its init, and init forwards only
/// signals sent from outside the namespace (a sender pid of 0), so `SIGTERM` from
/// the run does not bounce back to the command either. The run ends when the
/// command does, with the command's status.
#[test]
fn signal_the_namespace_init() {
    let fixture = attack_fixture();
    let started = Instant::now();
    let (status, out) = run(fixture.request(
        "kill -STOP 1; kill -TERM 1; kill -KILL 1; kill -HUP 1; sleep 0.2; echo alive; exit 5",
    ));
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(out.contains("alive"), "{out}");
    assert_eq!(status, ExitStatusRecord::Code(5), "{out}");
}

/// Background processes in new sessions (`setsid`, `nohup`) are still in the pid
/// namespace: when the command exits, pid 1 kills them, and the namespace ends.
#[test]
fn daemonized_background_process_outlives_the_command() {
    let fixture = attack_fixture();
    let (stdin_read, stdin_write) = nix::unistd::pipe().unwrap();
    let mut request = fixture.request(
        "setsid sleep 300 </dev/null >/dev/null 2>&1 & \
         nohup sleep 301 </dev/null >/dev/null 2>&1 & \
         (sleep 302 &) ; read line; exit 0",
    );
    request.stdin = Some(stdin_read);
    let mut child = spawn(&request).unwrap();
    drop(request);
    let ns = pid_ns(child.pid()).unwrap();
    // Positive control: the background processes run (init, sh, three sleeps).
    assert!(
        eventually(Duration::from_secs(10), || members_of(&ns).len() >= 5),
        "the background processes never started: {:?}",
        members_of(&ns)
    );
    let members = members_of(&ns);
    drop(stdin_write);
    assert_eq!(child.wait().unwrap(), ExitStatusRecord::Code(0));
    assert_eq!(leftovers_of(&ns), Vec::<u32>::new());
    for pid in members {
        assert_ne!(pid_ns(pid).as_deref(), Some(ns.as_path()), "{pid} survived");
    }
}

/// A daemon (`setsid` plus a double fork) holding a port inside, then the run is
/// killed (the timeout path): nothing survives, and the port never was the host's.
#[test]
fn setsid_double_fork_daemon_survives_kill() {
    let mut fixture = attack_fixture();
    with_probe(&mut fixture);
    // The host holds the same port the daemon binds inside.
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    let probe = probe_argv().join(" ");
    let mut request = fixture.request(&format!(
        "setsid sh -c '{probe} & exit 0' </dev/null & wait; echo forked; sleep 300"
    ));
    request
        .env
        .push((ROLE_VAR.into(), "tcp-hold-forever".into()));
    request.env.push((ARG_VAR.into(), port.to_string()));
    let mut live = LiveRun::start(request);
    let ns = pid_ns(live.child.pid()).unwrap();
    live.wait_for("probe: bound=");
    assert!(
        live.output.contains("probe: bound=ok"),
        "positive control: the daemon could not bind inside: {}",
        live.output
    );
    let members = members_of(&ns);
    assert!(members.len() >= 3, "{members:?}");
    live.child.kill().unwrap();
    assert_eq!(live.child.wait().unwrap(), ExitStatusRecord::Signal(9));
    assert_eq!(leftovers_of(&ns), Vec::<u32>::new(), "the daemon survived");
    for pid in members {
        assert_ne!(pid_ns(pid).as_deref(), Some(ns.as_path()), "{pid} survived");
    }
    // The host's listener on the same port never saw a connection.
    assert_eq!(
        host.accept().map(drop).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
}
