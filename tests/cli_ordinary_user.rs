//! The README's main job as an ordinary user: the test makes a user of its own
//! (`useradd`, once per host), delegates it a cgroup subtree as root
//! (`check-host --fix --user`), and runs `agent-workspace` as that user:
//! a one-shot `run`, then a live workspace driven from separate processes
//! (`create`, `exec`, `exec`, `suspend`, `resume`, `destroy`), and attacks on
//! what an ordinary user's sandbox adds (its door, its pid 1), each with the
//! host checked unchanged.
//!
//! The attack catalogue (docs/attack-catalogue.md) then runs as that user:
//! each attack on the filesystem, privileges, processes, network and limits
//! fails, and the host objects it aimed at (the test's own files, process,
//! listeners) are unchanged.
//!
//! On a pure cgroup v2 host the user's processes run in a scope inside a
//! subtree delegated to it, as systemd's user manager runs them
//! (`user@UID.service`: v2 moves a process only within a subtree whose
//! `cgroup.procs` the mover may write), and the runner finds that subtree and
//! makes its runs there; on a hybrid host they run where root's do, and the
//! runs go under the subtree `check-host --fix --user` delegated.
//!
//! Needs root (to make the user and delegate its cgroups), user namespaces,
//! cgroups, `useradd` (Debian's `passwd`), `setpriv` (Debian's `util-linux`)
//! and `python3`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::make_repo;

/// The ordinary user the test runs as (`.ci/cgroup-v2` makes it too, before its
/// guest mounts the host's root read-only).
const USER: &str = "aw-ordinary";

/// Whether the host mounts cgroup v2 alone (no v1 hierarchy).
fn pure_v2() -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
        && !mounts
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("cgroup"))
}

/// The tests of this file one at a time: each counts every process of the
/// user, and makes the user first.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `USER`'s uid and gid, made when the host does not have it yet.
fn ordinary_user() -> (u32, u32) {
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, USER]).output().expect("id");
        out.status
            .success()
            .then(|| text(&out.stdout).trim().parse::<u32>().unwrap())
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ])
            .status()
            .expect("useradd (install Debian's passwd: apt-get install passwd)");
        assert!(made.success(), "useradd {USER} failed");
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Everything the user's runs need, owned by the user: a copy of the binary
/// (the build directory may be closed to other users), a repository, a state
/// home.
struct UserWorld {
    dir: tempfile::TempDir,
    uid: u32,
    gid: u32,
    _alone: std::sync::MutexGuard<'static, ()>,
}

impl UserWorld {
    fn new() -> Self {
        let alone = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (uid, gid) = ordinary_user();
        let dir = tempfile::Builder::new()
            .prefix("aw-ordinary-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        make_repo(&dir.path().join("repo"));
        std::fs::copy(env!("CARGO_BIN_EXE_agent-workspace"), dir.path().join("aw")).unwrap();
        std::fs::create_dir(dir.path().join("state")).unwrap();
        std::fs::write(dir.path().join("sentinel"), "the user's own file\n").unwrap();
        let owned = Command::new("chown")
            .args(["-R", &format!("{uid}:{gid}")])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(owned.success());
        // As root: the cgroup subtree the user's runs make their groups in
        // (on pure v2, the one its scope runs in, as systemd makes it).
        let fixed = Command::new(env!("CARGO_BIN_EXE_agent-workspace"))
            .args(["check-host", "--fix", "--user", USER, "--cgroup-parent"])
            .arg(Self::delegated(uid))
            .output()
            .unwrap();
        assert!(fixed.status.success(), "{}", text(&fixed.stderr));
        if pure_v2() {
            // The user's own scope in its delegated subtree, as systemd gives
            // one (`systemd-run --user --scope -p Delegate=yes`).
            let session = Self::session(uid);
            std::fs::create_dir_all(&session).unwrap();
            for path in [session.clone(), session.join("cgroup.procs")] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
            }
        }
        Self {
            dir,
            uid,
            gid,
            _alone: alone,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn repo(&self) -> PathBuf {
        self.path().join("repo")
    }

    /// The cgroup subtree delegated to the user: on pure v2 its "user
    /// manager's" (the runs go under `agent-workspace` in it, found by the
    /// runner), else the default parent of its runs.
    fn delegated(uid: u32) -> String {
        if pure_v2() {
            format!("aw-user-{uid}.service")
        } else {
            format!("agent-workspace-user-{uid}")
        }
    }

    /// The scope the user's processes run in on a pure v2 host.
    fn session(uid: u32) -> PathBuf {
        Path::new("/sys/fs/cgroup")
            .join(Self::delegated(uid))
            .join("session.scope")
    }

    /// `aw ARGS` as the ordinary user, with nothing of root's environment (on
    /// a pure v2 host, started in the user's own scope).
    fn command(&self, args: &[&str]) -> Command {
        let aw = self.path().join("aw");
        let mut command = if pure_v2() {
            let mut command = Command::new("sh");
            command
                .args([
                    "-c",
                    "echo $$ > \"$0/cgroup.procs\" && u=$1 g=$2 && shift 2 && exec setpriv --reuid=\"$u\" --regid=\"$g\" --clear-groups -- \"$@\"",
                ])
                .arg(Self::session(self.uid))
                .arg(self.uid.to_string())
                .arg(self.gid.to_string())
                .arg(&aw);
            command
        } else {
            let mut command = Command::new(&aw);
            command.uid(self.uid).gid(self.gid);
            command
        };
        command
            .args(args)
            .current_dir(self.path())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.path())
            .env("XDG_STATE_HOME", self.path().join("state"));
        command
    }

    /// `aw ARGS` as the ordinary user: what it did.
    fn agent_workspace(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `aw ARGS`, which must exit 0; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.agent_workspace(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `aw run ...`, which must exit 0: its stdout and its evidence.
    fn run_ok(&self, args: &[&str]) -> (String, PathBuf) {
        let out = self.agent_workspace(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        (text(&out.stdout), evidence_of(&stderr))
    }

    /// What the workspace's own 127.0.0.1:8000 answers an `exec` of `run`.
    fn served(&self, run: &str) -> String {
        self.ok(&[
            "exec",
            run,
            "--",
            "python3",
            "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000').status)",
        ])
    }

    /// The runs' directories left in the user's runtime directory.
    fn runs_left(&self) -> Vec<String> {
        let runs = self.path().join("state/agent-workspace/runtime/runs");
        std::fs::read_dir(runs)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The run cgroups left in the user's delegated subtree, in every hierarchy
    /// (on pure v2, in the `agent-workspace` group the runs make inside it).
    fn cgroups_left(&self) -> Vec<PathBuf> {
        let parent = Self::delegated(self.uid);
        let mut left = Vec::new();
        let hierarchies = std::fs::read_dir("/sys/fs/cgroup")
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .chain([PathBuf::from("/sys/fs/cgroup")]);
        for hierarchy in hierarchies {
            let parent = hierarchy.join(&parent);
            for dir in [parent.clone(), parent.join("agent-workspace")] {
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    left.extend(
                        entries
                            .flatten()
                            .filter(|e| e.file_name().to_string_lossy().starts_with("run-"))
                            .map(|e| e.path()),
                    );
                }
            }
        }
        left
    }

    /// The host pids of the user's processes (`/proc/PID/status`, real uid).
    fn processes(&self) -> Vec<u32> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            let uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next())
                .and_then(|id| id.parse::<u32>().ok());
            // A zombie holds nothing; the host's init reaps it when it gets to it.
            let zombie = status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'));
            if uid == Some(self.uid) && !zombie {
                found.push(pid);
            }
        }
        found
    }

    fn assert_nothing_left(&self) {
        assert_eq!(self.runs_left(), Vec::<String>::new(), "runs left");
        assert_eq!(self.cgroups_left(), Vec::<PathBuf>::new(), "cgroups left");
        assert_eq!(self.processes(), Vec::<u32>::new(), "processes left");
        assert_eq!(
            std::fs::read_to_string(self.path().join("sentinel")).unwrap(),
            "the user's own file\n"
        );
    }
}

impl Drop for UserWorld {
    /// A failing test leaves no live workspace behind: `recover`, as the user,
    /// ends whatever of its runs is left.
    fn drop(&mut self) {
        if !self.runs_left().is_empty() {
            let recovered = self.agent_workspace(&["recover"]);
            eprintln!("recover: {}", text(&recovered.stderr));
        }
    }
}

/// The evidence directory a summary line names.
fn evidence_of(stderr: &str) -> PathBuf {
    let line = stderr.lines().last().expect("a summary line");
    let (_, dir) = line
        .rsplit_once("; evidence ")
        .expect("evidence in the summary");
    PathBuf::from(dir.split("; ").next().unwrap())
}

#[test]
fn an_ordinary_user_runs_one_shot_and_live_workspaces_and_its_sandbox_holds() {
    let world = UserWorld::new();
    let repo = world.repo();
    let repo = repo.to_str().unwrap();

    // check-host as the user: ready, nothing missing.
    let check = world.agent_workspace(&["check-host"]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));

    // What only root may give a run: refused before anything is made,
    // naming the flag, and pointing to check-host.
    let out = world.agent_workspace(&["run", "--disk", "100MiB", "--repo", repo, "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--disk (environment.limits.disk)")
            && stderr.contains("`agent-workspace check-host --backend namespace` says what"),
        "{stderr}"
    );

    // Runs in cgroups that are not the user's: refused, saying how root
    // mends it.
    let out = world.agent_workspace(&[
        "run",
        "--cgroup-parent",
        "aw-test-not-delegated",
        "--repo",
        repo,
        "--",
        "true",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("this user has no cgroup subtree of its own")
            && stderr.contains("check-host --fix --user NAME"),
        "{stderr}"
    );

    // The README's main job, as the user.
    let (stdout, evidence) = world.run_ok(&[
        "run",
        "--repo",
        repo,
        "--",
        "sh",
        "-c",
        "id -u; echo hi > x",
    ]);
    assert_eq!(stdout, "1000\n", "the identity's uid inside");
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+++ b/x"), "{patch}");
    let verified = world.agent_workspace(&["verify", evidence.to_str().unwrap()]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        text(&verified.stderr)
    );
    let observed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("observed.json")).unwrap()).unwrap();
    assert_eq!(
        observed["probe"]["mismatches"],
        serde_json::json!([]),
        "{}",
        observed["probe"]
    );
    // The run's id inside is the user's own on the host, and nothing else is mapped.
    let facts = &observed["probe"]["facts"];
    assert_eq!(
        facts["uid_map"],
        serde_json::json!([format!("1000 {} 1", world.uid)]),
        "{facts}"
    );
    assert_eq!(
        facts["gid_map"],
        serde_json::json!([format!("1000 {} 1", world.gid)]),
        "{facts}"
    );
    assert!(
        std::fs::read_to_string(evidence.join("source.json"))
            .unwrap()
            .contains("\"layers\""),
        "the user's checkout is layered where its kernel mounts overlayfs"
    );
    // Its usage is counted as root's is: CPU time too (on a hybrid host, in
    // the v1 cpuacct hierarchy delegated with the others).
    let command: serde_json::Value = serde_json::from_slice(
        &std::fs::read(evidence.join("commands/0001/command.json")).unwrap(),
    )
    .unwrap();
    assert!(
        command["usage"]["cpu_time_us"].is_u64(),
        "no CPU time in the usage: {command}"
    );
    world.assert_nothing_left();

    // The fallback where it does not: a standalone checkout, asked for.
    let standalone = world.path().join("standalone.toml");
    std::fs::write(
        &standalone,
        "objective = \"a copy\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\nmaterialization = \"standalone\"\n[filesystem]\nwritable = [\".\"]\n",
    )
    .unwrap();
    let (stdout, evidence) = world.run_ok(&[
        "run",
        "--repo",
        repo,
        "--contract",
        standalone.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "cat hello.txt && echo more >> hello.txt",
    ]);
    assert_eq!(stdout, support::HELLO);
    let source = std::fs::read_to_string(evidence.join("source.json")).unwrap();
    assert!(!source.contains("\"layers\""), "{source}");
    assert!(
        std::fs::read_to_string(evidence.join("diff.patch"))
            .unwrap()
            .contains("+more"),
    );
    world.assert_nothing_left();

    // A live workspace, each step a process of its own.
    let run = world.ok(&["create", "--repo", repo]).trim().to_owned();
    world.ok(&[
        "exec",
        &run,
        "--",
        "sh",
        "-c",
        "python3 -m http.server 8000 >/dev/null 2>&1 & \
         for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' 2>/dev/null && exit 0; sleep 0.05; done; exit 1",
    ]);
    assert_eq!(
        world.served(&run),
        "200\n",
        "the server of one exec answers the next"
    );
    // The run's groups are in the user's delegated subtree (on pure v2, in
    // `agent-workspace` inside the subtree its scope runs in).
    let groups: Vec<PathBuf> = world
        .cgroups_left()
        .into_iter()
        .filter(|dir| dir.ends_with(&run))
        .collect();
    assert!(
        !groups.is_empty(),
        "no group of {run} in the delegated subtree"
    );
    if pure_v2() {
        assert_eq!(
            groups,
            [Path::new("/sys/fs/cgroup")
                .join(UserWorld::delegated(world.uid))
                .join("agent-workspace")
                .join(&run)]
        );
    }

    // Attacks on what an ordinary user's sandbox adds. Its pid 1 is a copy
    // of the runner's memory: nothing in the run reads it or signals it.
    // The user's own file beside the workspace, at its host path.
    let sentinel = world.path().join("sentinel");
    let attacks = world.ok(&[
        "exec",
        &run,
        "--",
        "sh",
        "-c",
        "cat /proc/1/environ >/dev/null 2>&1 && echo read-environ; \
         head -c 1 /proc/1/mem >/dev/null 2>&1 && echo read-mem; \
         ls /proc/1/fd >/dev/null 2>&1 && echo listed-fds; \
         kill -9 1 2>/dev/null; \
         cat \"$0\" 2>/dev/null && echo read-host-file; \
         echo done",
        sentinel.to_str().unwrap(),
    ]);
    assert_eq!(attacks, "done\n", "an attack went through: {attacks}");
    // The workspace still answers: pid 1 ignored the kill (an init takes no
    // signal from its own namespace).
    assert_eq!(world.ok(&["exec", &run, "--", "true"]), "");

    world.ok(&["suspend", &run]);
    world.ok(&["resume", &run]);
    assert_eq!(
        world.served(&run),
        "200\n",
        "the server lives on after suspend and resume"
    );

    // The door is the run's own: a command that ends it locks its own
    // workspace and nothing else. The next exec says so, and the run is
    // ended as any run that cannot go on: evidence exported, nothing left.
    world.ok(&[
        "exec",
        &run,
        "--",
        "sh",
        "-c",
        "for p in /proc/[0-9]*; do \
           [ \"$(tr '\\0' ' ' < $p/cmdline)\" = 'sleep infinity ' ] && kill -9 ${p#/proc/}; \
         done; true",
    ]);
    let locked = world.agent_workspace(&["exec", &run, "--", "true"]);
    let stderr = text(&locked.stderr);
    assert_ne!(locked.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("door") && stderr.contains("evidence"),
        "{stderr}"
    );
    world.assert_nothing_left();
}

/// Host objects an attack aims at, the test's own: a root file the user may
/// read on the host, a file of the user's, a process of the user's, a TCP
/// listener on the host's loopback, an abstract and a path unix socket.
struct Targets {
    dir: tempfile::TempDir,
    sleeper: std::process::Child,
    tcp: std::net::TcpListener,
    abstract_name: String,
    _abstract: std::os::unix::net::UnixListener,
    _path_socket: std::os::unix::net::UnixListener,
}

impl Targets {
    fn new(world: &UserWorld) -> Self {
        use std::os::linux::net::SocketAddrExt;
        let dir = tempfile::Builder::new()
            .prefix("aw-ordinary-targets-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("secret"), "host secret\n").unwrap();
        std::fs::set_permissions(
            dir.path().join("secret"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        std::fs::write(dir.path().join("writable"), "unchanged\n").unwrap();
        std::os::unix::fs::chown(
            dir.path().join("writable"),
            Some(world.uid),
            Some(world.gid),
        )
        .unwrap();
        let sleeper = Command::new("sleep")
            .arg("300")
            .uid(world.uid)
            .gid(world.gid)
            .spawn()
            .unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let abstract_name = format!("aw-ordinary-attack-{}", std::process::id());
        let address =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let abstract_listener = std::os::unix::net::UnixListener::bind_addr(&address).unwrap();
        let path_socket =
            std::os::unix::net::UnixListener::bind(dir.path().join("socket")).unwrap();
        std::fs::set_permissions(
            dir.path().join("socket"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        Self {
            dir,
            sleeper,
            tcp,
            abstract_name,
            _abstract: abstract_listener,
            _path_socket: path_socket,
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Targets {
    fn drop(&mut self) {
        let _ = self.sleeper.kill();
        let _ = self.sleeper.wait();
    }
}

/// Every attack of the catalogue's filesystem, privilege, process and network
/// rows that a command can try, as a shell script: it prints `BROKE NAME` for
/// each that went through, then `done`. Its arguments: the root file, the
/// user's file, the user's host process, the host's TCP port, the abstract
/// socket's name, the path socket.
const CATALOGUE: &str = r#"
S="$0"; W="$1"; P="$2"; PORT="$3"; ABS="$4"; SOCK="$5"
b() { echo "BROKE $1"; }
cat "$S" >/dev/null 2>&1 && b read-by-absolute-path
cat "/proc/1/root$S" >/dev/null 2>&1 && b read-via-proc-1-root
cat "/proc/self/root$S" >/dev/null 2>&1 && b read-via-proc-self-root
ln -s "$S" link-to-file && cat link-to-file >/dev/null 2>&1 && b read-via-planted-symlink
ln -s "${S%/*}" link-to-dir && cat "link-to-dir/${S##*/}" >/dev/null 2>&1 && b read-via-symlinked-dir
cat "../../../../../../..$S" >/dev/null 2>&1 && b read-via-dotdot
echo x 2>/dev/null > "$W" && b write-by-absolute-path
echo x 2>/dev/null > "/proc/1/root$W" && b write-via-proc-1-root
echo x 2>/dev/null > "/proc/self/root$W" && b write-via-proc-self-root
ln -s "$W" link-to-writable && { echo x 2>/dev/null > link-to-writable && [ "$(cat "$W" 2>/dev/null)" = x ] && b write-via-planted-symlink; }
touch /usr/aw-attack 2>/dev/null && b write-usr
mkdir /usr/bin/aw-attack 2>/dev/null && b mkdir-usr
[ -n "$(ls -A /root 2>/dev/null)" ] && b see-root-home
[ -e /root/.ssh ] && b see-root-ssh
hostname aw-attack 2>/dev/null && b hostname
echo aw-attack 2>/dev/null > /proc/sys/kernel/hostname && b write-proc-sys-hostname
touch /sys/kernel/aw-attack 2>/dev/null && b write-sys
mkdir /sys/fs/cgroup/aw-attack 2>/dev/null && b make-a-cgroup
mkdir m && mount -t tmpfs none m 2>/dev/null && b mount-tmpfs
mount --bind /usr m 2>/dev/null && b mount-bind
unshare -U true 2>/dev/null && b unshare-user
unshare -m true 2>/dev/null && b unshare-mount
unshare -n true 2>/dev/null && b unshare-net
mknod char-device c 1 3 2>/dev/null && b mknod
chown 0:0 "$(pwd)" 2>/dev/null && b chown-to-root
grep -Eq '^CapEff:[[:space:]]+0+$' /proc/self/status || b capabilities
grep -Eq '^CapBnd:[[:space:]]+0+$' /proc/self/status || b bounding-set
grep -Eq '^NoNewPrivs:[[:space:]]+1$' /proc/self/status || b no-new-privs-off
grep -Eq '^Seccomp:[[:space:]]+2$' /proc/self/status || b no-seccomp
env | grep -q AW_HOST_MARKER && b host-environment
kill -9 "$P" 2>/dev/null && b kill-a-host-process
cat "/proc/$P/environ" >/dev/null 2>&1 && b read-a-host-process
[ -e "/proc/$P" ] && b see-a-host-process
set -- /proc/[0-9]*; [ $# -gt 10 ] && b list-host-processes
python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2)" "$PORT" 2>/dev/null && b host-loopback
python3 -c "import socket,sys; socket.socket(socket.AF_UNIX).connect('\0' + sys.argv[1])" "$ABS" 2>/dev/null && b abstract-socket
python3 -c "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])" "$SOCK" 2>/dev/null && b path-socket
[ "$(ls /sys/class/net)" = lo ] || b see-host-interfaces
for procs in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do
  [ -e "$procs" ] && echo $$ 2>/dev/null > "$procs" && b "leave-the-cgroup $procs"
done
(ulimit -Hn 1048576) 2>/dev/null && b raise-hard-nofile
(ulimit -Hc unlimited) 2>/dev/null && b raise-hard-core
setsid sleep 300 >/dev/null 2>&1 &
echo done
"#;

#[test]
fn the_attack_catalogue_fails_as_an_ordinary_user_and_the_host_is_unchanged() {
    let world = UserWorld::new();
    let repo = world.repo();
    let repo = repo.to_str().unwrap();
    let targets = Targets::new(&world);
    let hostname = nix::unistd::gethostname().unwrap();
    let port = targets.tcp.local_addr().unwrap().port().to_string();
    let sleeper = targets.sleeper.id().to_string();
    let mut args = vec!["run", "--repo", repo, "--", "sh", "-c", CATALOGUE];
    let (secret, writable, socket) = (
        targets.path("secret"),
        targets.path("writable"),
        targets.path("socket"),
    );
    args.extend([
        secret.as_str(),
        writable.as_str(),
        sleeper.as_str(),
        port.as_str(),
        targets.abstract_name.as_str(),
        socket.as_str(),
    ]);
    let out = world
        .command(&args)
        .env("AW_HOST_MARKER", "the runner's environment")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "done\n",
        "attacks went through as an ordinary user"
    );
    // The host is unchanged: its files, its process, its listeners, its name.
    assert_eq!(
        std::fs::read_to_string(targets.path("writable")).unwrap(),
        "unchanged\n"
    );
    assert!(
        Path::new(&format!("/proc/{sleeper}")).exists(),
        "the user's host process was killed"
    );
    assert!(
        targets.tcp.accept().is_err(),
        "the host's loopback listener was reached"
    );
    assert_eq!(nix::unistd::gethostname().unwrap(), hostname);
    assert!(!Path::new("/usr/aw-attack").exists());
    drop(targets);
    // What the run left in the background (`setsid sleep`) ended with it.
    world.assert_nothing_left();

    // Limits: a fork bomb stays under its cap, a memory bomb is killed for
    // its cap, and the host can still fork.
    let forked = world.agent_workspace(&[
        "run",
        "--repo",
        repo,
        "--pids",
        "16",
        "--",
        "sh",
        "-c",
        "for i in $(seq 200); do sleep 30 & done",
    ]);
    // The shell dies of its first refused fork; the summary counts the
    // refusals, and what was left running stayed under the cap.
    let stderr = text(&forked.stderr);
    assert!(stderr.contains("the run's pids limit refused"), "{stderr}");
    let left: usize = stderr
        .split("; ")
        .find_map(|part| {
            part.strip_suffix(" process(es) still running were stopped with the workspace")
        })
        .map_or(0, |n| n.trim().parse().unwrap());
    assert!(left <= 16, "{left} processes under pids = 16: {stderr}");
    assert!(Command::new("true").status().unwrap().success());
    let bombed = world.agent_workspace(&[
        "run",
        "--repo",
        repo,
        "--memory",
        "64MiB",
        "--",
        "python3",
        "-c",
        "b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096])",
    ]);
    let stderr = text(&bombed.stderr);
    assert_ne!(bombed.status.code(), Some(0), "{stderr}");
    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence_of(&stderr).join("outcome.json")).unwrap())
            .unwrap();
    assert_eq!(
        outcome["commands"][0]["exit"]["killed"], "memory-limit",
        "{outcome}"
    );
    world.assert_nothing_left();
}

#[test]
fn an_ordinary_users_services_are_ready_by_their_tcp_and_http_checks() {
    let world = UserWorld::new();
    let repo = world.repo();
    let repo = repo.to_str().unwrap();
    let contract = |services: &str| {
        let path = world.path().join("services.toml");
        std::fs::write(
            &path,
            format!(
                "objective = \"services\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\n\
                 [filesystem]\nwritable = [\".\"]\n{services}"
            ),
        )
        .unwrap();
        std::os::unix::fs::chown(&path, Some(world.uid), Some(world.gid)).unwrap();
        path.to_str().unwrap().to_owned()
    };
    // A web server ready by its HTTP status, a TCP echo ready by its port:
    // the runner (the ordinary user) connects into the sandbox through pid 1.
    let ready = contract(
        r#"
[[environment.services]]
name = "web"
command = ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"]
health = { http = { port = 8000, path = "/hello.txt" }, interval = "50ms", timeout = "20s" }

[[environment.services]]
name = "tcp"
command = ["python3", "-c", "import socket; s = socket.create_server(('127.0.0.1', 9000)); [s.accept() for _ in iter(int, 1)]"]
health = { tcp = 9000, interval = "50ms", timeout = "20s" }
"#,
    );
    let run = world
        .ok(&["create", "--repo", repo, "--contract", &ready])
        .trim()
        .to_owned();
    assert_eq!(world.served(&run), "200\n");
    // Its logs are the user's to read (positive control); root asking for
    // them is refused by name, not answered with nothing, and leaves nothing
    // of root's in the user's run (its destroy below cleans up everything).
    let logs = world.agent_workspace(&["logs", &run]);
    assert_eq!(logs.status.code(), Some(0), "{}", text(&logs.stderr));
    let runtime = world.path().join("state/agent-workspace/runtime");
    for args in [
        vec!["logs", run.as_str()],
        vec!["logs", run.as_str(), "web"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_agent-workspace"))
            .args(&args)
            .env("AGENT_WORKSPACE_RUNTIME_DIR", &runtime)
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            stderr.contains(&format!(
                "run {run} belongs to {USER} (uid {}), not to root (uid 0)",
                world.uid
            )),
            "{args:?}: {stderr}"
        );
    }
    // The broker the runner connected through is the user's alone.
    let broker = world
        .path()
        .join("state/agent-workspace/runtime/runs")
        .join(&run)
        .join("connect.sock");
    let meta = std::fs::metadata(&broker).unwrap();
    assert_eq!(
        (
            meta.permissions().mode() & 0o777,
            std::os::unix::fs::MetadataExt::uid(&meta)
        ),
        (0o600, world.uid),
        "{}",
        broker.display()
    );
    let ls: serde_json::Value = serde_json::from_str(&world.ok(&["ls", "--json"])).unwrap();
    let services = &ls[0]["services"];
    assert_eq!(
        services,
        &serde_json::json!([{"name": "web", "status": "ready"}, {"name": "tcp", "status": "ready"}]),
        "{ls}"
    );
    world.ok(&["destroy", &run]);
    world.assert_nothing_left();

    // A port nothing listens on is not ready: the check is a real connection
    // into the sandbox, not the broker's own socket.
    let never = contract(
        r#"
[[environment.services]]
name = "deaf"
command = ["sleep", "60"]
health = { tcp = 9999, interval = "50ms", timeout = "1s" }
"#,
    );
    let out = world.agent_workspace(&["create", "--repo", repo, "--contract", &never]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("deaf") && stderr.contains("not ready after 1000 ms"),
        "{stderr}"
    );
    world.assert_nothing_left();
}
