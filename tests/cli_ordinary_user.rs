//! The README's main job as an ordinary user: the test makes a user of its own
//! (`useradd`, once per host), delegates it a cgroup subtree as root
//! (`check-host --fix --user`), and runs `agent-workspace` as that user:
//! a one-shot `run`, then a live workspace driven from separate processes
//! (`create`, `exec`, `exec`, `suspend`, `resume`, `destroy`), and attacks on
//! what an ordinary user's sandbox adds (its door, its pid 1), each with the
//! host checked unchanged.
//!
//! Needs root (to make the user and delegate its cgroups), user namespaces,
//! cgroups, `useradd` (Debian's `passwd`) and `python3`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::make_repo;

/// The ordinary user the test runs as.
const USER: &str = "aw-ordinary";

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
}

impl UserWorld {
    fn new() -> Self {
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
        // As root: the cgroup subtree the user's runs make their groups in.
        let fixed = Command::new(env!("CARGO_BIN_EXE_agent-workspace"))
            .args(["check-host", "--fix", "--user", USER])
            .output()
            .unwrap();
        assert!(fixed.status.success(), "{}", text(&fixed.stderr));
        Self { dir, uid, gid }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn repo(&self) -> PathBuf {
        self.path().join("repo")
    }

    /// `aw ARGS` as the ordinary user, with nothing of root's environment.
    fn agent_workspace(&self, args: &[&str]) -> Output {
        Command::new(self.path().join("aw"))
            .args(args)
            .current_dir(self.path())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", self.path())
            .env("XDG_STATE_HOME", self.path().join("state"))
            .uid(self.uid)
            .gid(self.gid)
            .output()
            .unwrap()
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

    /// The run cgroups left in the user's delegated subtree, in every hierarchy.
    fn cgroups_left(&self) -> Vec<PathBuf> {
        let parent = format!("agent-workspace-user-{}", self.uid);
        let mut left = Vec::new();
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            for dir in [hierarchy.path().join(&parent)] {
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

    // The README's main job, as the user.
    let out = world.agent_workspace(&[
        "run",
        "--repo",
        repo,
        "--",
        "sh",
        "-c",
        "id -u; echo hi > x",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&out.stdout), "1000\n", "the identity's uid inside");
    let evidence = evidence_of(&stderr);
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
