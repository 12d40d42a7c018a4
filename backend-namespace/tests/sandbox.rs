//! A live sandbox ([`Pid1::HoldSandbox`]) and commands that [`join`] it: one set
//! of namespaces shared by every command, processes that outlive the command that
//! started them, and nothing left once the sandbox's pid 1 is killed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

use backend_namespace::spawn::{JoinRequest, Pid1, Sandbox, SpawnedChild, join, spawn};
use common::{Fixture, HOST_ID, RUN_ID, leftovers_of, pid_ns, sh};
use workspace_core::evidence::ExitStatusRecord;

/// A live sandbox over the fixture's plan.
fn start(fixture: &Fixture) -> (SpawnedChild, Sandbox) {
    let mut request = fixture.request_argv(Vec::new());
    request.pid1 = Pid1::HoldSandbox;
    let holder = spawn(&request).expect("starting the sandbox");
    let sandbox = Sandbox::of(&holder, None).unwrap();
    (holder, sandbox)
}

/// `sh -c script` joined into `sandbox` as uid 1000; its status and output.
fn run_in(sandbox: &Sandbox, script: &str) -> (ExitStatusRecord, String) {
    let mut request = JoinRequest::new(vec![sh(), "-c".into(), script.into()], "/workspace");
    request.uid = 1000;
    request.gid = 1000;
    request.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    let (read, write) = nix::unistd::pipe().unwrap();
    request.stdout = Some(write.try_clone().unwrap());
    request.stderr = Some(write);
    let mut child = join(sandbox, &request).expect("joining");
    drop(request);
    let status = child.wait().unwrap();
    // Read what is there once the command ended: a background process may keep
    // the pipe open, so read without waiting for EOF.
    let mut output = Vec::new();
    let mut file = std::fs::File::from(read);
    set_nonblocking(&file);
    let mut buf = [0u8; 4096];
    while let Ok(n) = file.read(&mut buf) {
        if n == 0 {
            break;
        }
        output.extend_from_slice(&buf[..n]);
    }
    (status, String::from_utf8_lossy(&output).into_owned())
}

fn set_nonblocking(file: &std::fs::File) {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(file, FcntlArg::F_GETFL).unwrap();
    fcntl(
        file,
        FcntlArg::F_SETFL(OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK),
    )
    .unwrap();
}

fn ok(status: ExitStatusRecord, output: &str) {
    assert_eq!(status, ExitStatusRecord::Code(0), "output: {output}");
}

#[test]
fn commands_share_one_sandbox_and_its_background_processes() {
    let fixture = Fixture::new();
    let (mut holder, sandbox) = start(&fixture);
    let ns = pid_ns(holder.pid()).unwrap_or_else(|| panic!("the sandbox has no pid namespace"));

    // Each command joins the same namespaces: the same hostname, pid 1 is the
    // holder, and the workspace is there.
    let (status, out) = run_in(&sandbox, "hostname; cat /workspace/hello.txt; id -u");
    ok(status, &out);
    assert_eq!(out, format!("{RUN_ID}\nhello from the workspace\n1000\n"));

    // A background process outlives the command that started it...
    let (status, out) = run_in(
        &sandbox,
        "sleep 300 </dev/null >/dev/null 2>&1 & echo $! > /tmp/sleeper; echo started",
    );
    ok(status, &out);
    // ...and the next command sees it: same pid namespace, same /tmp.
    let (status, out) = run_in(&sandbox, "kill -0 $(cat /tmp/sleeper) && echo alive");
    ok(status, &out);
    assert_eq!(out, "alive\n");

    // A listener started by one command answers another (one network namespace).
    let (status, out) = run_in(
        &sandbox,
        "python3 -c 'import socket,os\ns=socket.socket();s.bind((\"127.0.0.1\",8000));s.listen()\nif os.fork()==0:\n  os.setsid()\n  while True:\n    c,_=s.accept();c.sendall(b\"from the sandbox\\n\");c.close()\n' </dev/null >/dev/null 2>&1; echo listening",
    );
    ok(status, &out);
    let (status, out) = run_in(
        &sandbox,
        "python3 -c 'import socket;s=socket.create_connection((\"127.0.0.1\",8000));print(s.recv(100).decode(),end=\"\")'",
    );
    ok(status, &out);
    assert_eq!(out, "from the sandbox\n");

    // Killing the sandbox's pid 1 ends everything in it.
    sandbox.kill().unwrap();
    holder.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !leftovers_of(&ns).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        leftovers_of(&ns),
        Vec::<u32>::new(),
        "processes outlived the sandbox"
    );
    assert!(!sandbox.is_alive());
}

#[test]
fn a_joined_command_is_as_unprivileged_as_a_new_sandbox() {
    let fixture = Fixture::new();
    let (_holder, sandbox) = start(&fixture);
    let (status, out) = run_in(
        &sandbox,
        "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp|Uid|Gid|Groups):' /proc/self/status",
    );
    ok(status, &out);
    for line in [
        "CapInh:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "Uid:\t1000\t1000\t1000\t1000",
        "Gid:\t1000\t1000\t1000\t1000",
    ] {
        assert!(out.contains(line), "missing {line:?} in\n{out}");
    }
    let groups = out
        .lines()
        .find(|l| l.starts_with("Groups:"))
        .unwrap_or_else(|| panic!("no Groups line in {out}"));
    assert_eq!(groups.trim(), "Groups:", "host groups were not cleared");
    // The host's processes are out of sight, and so is the joining supervisor.
    let (status, out) = run_in(&sandbox, "ls /proc | grep -c '^[0-9]'");
    ok(status, &out);
    let count: u32 = out.trim().parse().unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(count <= 4, "the command sees {count} processes: {out}");
}

#[test]
fn a_sandbox_outlives_the_handle_that_started_it_when_released() {
    let fixture = Fixture::new();
    let (holder, sandbox) = start(&fixture);
    let pid = holder.pid();
    holder.release();
    drop(sandbox);
    let again = Sandbox::open(pid, None).expect("reopening the sandbox");
    let (status, out) = run_in(&again, "echo still here");
    ok(status, &out);
    assert_eq!(out, "still here\n");
    again.kill().unwrap();
    // Reap it: this process is still its parent.
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    nix::sys::wait::waitpid(pid, None).unwrap();
}

#[test]
fn a_sandbox_with_a_door_is_entered_through_it_and_nothing_else_stands_in_for_it() {
    let fixture = Fixture::new();
    let mut request = fixture.request_argv(vec!["/usr/bin/sleep".into(), "infinity".into()]);
    request.pid1 = Pid1::HoldSandbox;
    let holder = spawn(&request).expect("starting the sandbox with a door");
    let pid = holder.pid();
    // The door is pid 1's only child, past its exec's point of no return by
    // the time spawn returns (what /proc shows of its arguments comes a
    // moment later, at the end of that exec).
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let door: u32 = children.trim().parse().expect("one child of pid 1");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let cmdline = loop {
        let cmdline = std::fs::read(format!("/proc/{door}/cmdline")).unwrap();
        if !cmdline.is_empty() || std::time::Instant::now() > deadline {
            break cmdline;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    assert_eq!(cmdline, b"/usr/bin/sleep\0infinity\0");
    assert_eq!(pid_ns(door), pid_ns(pid), "the door is in the sandbox");

    let through_door = Sandbox::of(&holder, Some(door)).unwrap();
    assert_eq!(through_door.entry_pid(), door);
    let (status, via_door) = run_in(
        &through_door,
        "readlink /proc/self/ns/pid /proc/self/ns/mnt",
    );
    ok(status, &via_door);
    let direct = Sandbox::open(pid, None).unwrap();
    let (status, via_pid1) = run_in(&direct, "readlink /proc/self/ns/pid /proc/self/ns/mnt");
    ok(status, &via_pid1);
    assert_eq!(via_door, via_pid1, "the same sandbox either way");

    // A process that is not pid 1's child is no door (this test process, say).
    let err = Sandbox::open(pid, Some(std::process::id())).unwrap_err();
    assert!(err.to_string().contains("door"), "{err}");
    // Once the door is gone the sandbox cannot be entered through it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(door as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Sandbox::open(pid, Some(door)).is_ok() {
        assert!(Instant::now() < deadline, "the killed door still opens");
        std::thread::sleep(Duration::from_millis(10));
    }
    direct.kill().unwrap();
    holder.release();
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    nix::sys::wait::waitpid(pid, None).unwrap();
}

/// Asks the connection broker at `path` for `port` (two bytes, big-endian),
/// as the host user `euid` (a thread of its own changes only its own
/// credentials, with the raw system call): the socket it sends back, if any.
fn ask_broker(path: &std::path::Path, request: &[u8], euid: u32) -> Option<std::net::TcpStream> {
    let (path, request) = (path.to_path_buf(), request.to_vec());
    std::thread::spawn(move || {
        use nix::sys::socket::{
            AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType, UnixAddr, connect,
            recvmsg, send, socket,
        };
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
        // SAFETY: setresuid on this thread alone; it ends with the thread.
        #[allow(unsafe_code)]
        let changed = unsafe { nix::libc::syscall(nix::libc::SYS_setresuid, -1, euid, -1) };
        assert_eq!(changed, 0, "setresuid");
        let asker = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        connect(asker.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
        // A peer pid 1 does not answer may already have been hung up on.
        let _ = send(asker.as_raw_fd(), &request, MsgFlags::empty());
        let mut byte = [0u8; 1];
        let mut iov = [std::io::IoSliceMut::new(&mut byte)];
        let mut space = nix::cmsg_space!(RawFd);
        let message = recvmsg::<()>(
            asker.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::empty(),
        )
        .ok()?;
        let fd = message.cmsgs().ok()?.find_map(|c| match c {
            ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
            _ => None,
        })?;
        // SAFETY: just received, owned by nothing else.
        #[allow(unsafe_code)]
        let socket = unsafe { OwnedFd::from_raw_fd(fd) };
        Some(std::net::TcpStream::from(socket))
    })
    .join()
    .unwrap()
}

/// Waits until the non-blocking connect of `stream` completed; its error, if
/// it failed.
fn connect_outcome(stream: &std::net::TcpStream) -> Option<std::io::Error> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(error) = stream.take_error().unwrap() {
            return Some(error);
        }
        if stream.peer_addr().is_ok() {
            return None;
        }
        assert!(Instant::now() < deadline, "the connect never completed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_sandboxs_pid_1_brokers_connections_into_its_network_namespace() {
    use std::io::Write;
    use std::os::fd::OwnedFd;
    const PORT: u16 = 48213;
    let fixture = Fixture::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("connect.sock");
    let listener: OwnedFd = {
        use nix::sys::socket::{
            AddressFamily, Backlog, SockFlag, SockType, UnixAddr, bind, listen, socket,
        };
        let listener = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .unwrap();
        use std::os::fd::AsRawFd;
        bind(listener.as_raw_fd(), &UnixAddr::new(&path).unwrap()).unwrap();
        listen(&listener, Backlog::new(4).unwrap()).unwrap();
        listener
    };
    let mut request = fixture.request_argv(Vec::new());
    request.pid1 = Pid1::HoldSandbox;
    request.broker = Some(listener);
    let holder = spawn(&request).expect("starting the sandbox with a broker");
    drop(request);
    let sandbox = Sandbox::of(&holder, None).unwrap();
    let ns = pid_ns(holder.pid()).expect("the sandbox has a pid namespace");
    let (status, output) = run_in(
        &sandbox,
        &format!(
            "python3 -m http.server {PORT} --bind 127.0.0.1 >/dev/null 2>&1 & \
             for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {PORT}))' 2>/dev/null && exit 0; sleep 0.05; done; exit 1"
        ),
    );
    ok(status, &output);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", PORT)).is_err(),
        "the host listens on {PORT} itself: the test cannot tell the two apart"
    );

    // Only the sandbox's own host user is answered (the socket file is open
    // to all here, so that pid 1's own check is what is tested).
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    assert!(
        ask_broker(&path, &PORT.to_be_bytes(), 0).is_none(),
        "host root (unmapped in the sandbox) got a socket"
    );
    assert!(ask_broker(&path, &PORT.to_be_bytes(), HOST_ID + 1).is_none());

    // The port the sandbox serves: a socket connected inside, which answers.
    let mut stream = ask_broker(&path, &PORT.to_be_bytes(), HOST_ID).expect("a socket");
    assert!(connect_outcome(&stream).is_none());
    stream.set_nonblocking(false).unwrap();
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");

    // A port nothing inside listens on: refused, as from inside.
    let refused = ask_broker(&path, &(PORT + 1).to_be_bytes(), HOST_ID).expect("a socket");
    let error = connect_outcome(&refused).expect("nothing listens there");
    assert_eq!(
        error.kind(),
        std::io::ErrorKind::ConnectionRefused,
        "{error}"
    );

    // A request that is not a port gets no socket, and the broker lives on.
    assert!(ask_broker(&path, b"x", HOST_ID).is_none());
    assert!(ask_broker(&path, b"xyz", HOST_ID).is_none());
    assert!(ask_broker(&path, &PORT.to_be_bytes(), HOST_ID).is_some());

    // Killing pid 1 ends the server and the broker with it.
    sandbox.kill().unwrap();
    let mut holder = holder;
    holder.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !leftovers_of(&ns).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(leftovers_of(&ns), Vec::<u32>::new());
    assert!(
        std::os::unix::net::UnixStream::connect(&path).is_err(),
        "the broker answers after its sandbox ended"
    );
}
