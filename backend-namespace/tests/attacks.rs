//! Escape tests: one case per attack, run as root against real namespaces.
//!
//! Every case has a positive control (the allowed access works inside the same
//! run) and a negative one: the attack fails inside (exit status or output) *and*
//! the host is unchanged (a snapshot of the host directory with every file's bytes,
//! mtime, mode, owner and link count; the host hostname; a host process still
//! alive; a host listener that saw no connection). The catalogue, with the layer
//! that stops each attack, is `docs/attack-catalogue.md`.
//!
//! Containment: an attack only ever targets what the test itself created: files in
//! its own `TempDir` (outside the workspace, owned by the run's host id so that only
//! the isolation keeps the run out), a `sleep` it spawned, a listener it bound on
//! `127.0.0.1` on an ephemeral port, an abstract socket with a random name, cgroups
//! under `agent-workspace-test-<pid>-<n>`. Every run and host process is killed and
//! reaped by a guard on drop.
//!
//! Files: this one holds the filesystem attacks; `attacks/identity.rs` privileges,
//! mounts and identity; `attacks/process.rs` processes; `attacks/network.rs` the
//! network; `attacks/limits.rs` cgroup limits and the overlay workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod common;
#[path = "attacks/identity.rs"]
mod identity;
#[path = "attacks/limits.rs"]
mod limits;
#[path = "attacks/network.rs"]
mod network;
#[path = "attacks/probe.rs"]
mod probe;
#[path = "attacks/process.rs"]
mod process;
#[path = "attacks/support.rs"]
mod support;

use std::os::unix::fs::chown;

use common::{Fixture, run};
use support::{HostSnapshot, PWNED, attack_fixture, plant_symlink, unique};
use workspace_core::evidence::ExitStatusRecord;

/// Not an attack: the body of the probe re-executed inside a run (see `probe.rs`).
#[test]
#[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
fn attack_probe_role() {
    let Ok(role) = std::env::var(support::ROLE_VAR) else {
        panic!(
            "the attack probe runs inside a run, with {} set",
            support::ROLE_VAR
        );
    };
    let arg = std::env::var(support::ARG_VAR).unwrap_or_default();
    probe::play(&role, &arg);
}

/// Reads `control` (must work) and every path of `attacks` (must all fail) in one
/// run; the host's `outside/` must be unchanged.
fn read_attack(attack: &str, fixture: &Fixture, control: &str, attacks: &[String]) {
    let before = HostSnapshot::of(&fixture.outside());
    let mut script = format!("cat {control} && echo CONTROL-OK; ");
    for path in attacks {
        script.push_str(&format!("cat {path} && echo ATTACK-WORKED:{path}; "));
    }
    script.push_str("exit 0");
    let (status, out) = run(fixture.request(&script));
    assert_eq!(status, ExitStatusRecord::Code(0), "{attack}: {out}");
    assert!(
        out.contains("hello from the workspace\nCONTROL-OK"),
        "{attack}: positive control failed:\n{out}"
    );
    assert!(
        !out.contains("ATTACK-WORKED") && !out.contains("host only"),
        "{attack}: the run read the host sentinel:\n{out}"
    );
    before.assert_unchanged(&fixture.outside(), attack);
}

/// Writes a workspace file (must work) and then appends to, truncates and creates
/// each path of `attacks` (must all fail); `outside/` must be unchanged.
fn write_attack(attack: &str, fixture: &Fixture, attacks: &[String]) {
    let before = HostSnapshot::of(&fixture.outside());
    let mut script = "echo ok > /workspace/control.txt && echo CONTROL-OK; ".to_owned();
    for path in attacks {
        script.push_str(&format!(
            "echo {PWNED} >> {path} && echo ATTACK-WORKED:{path}; \
             echo {PWNED} > {path} && echo ATTACK-WORKED:{path}; "
        ));
    }
    script.push_str("exit 0");
    let (status, out) = run(fixture.request(&script));
    assert_eq!(status, ExitStatusRecord::Code(0), "{attack}: {out}");
    assert!(
        out.contains("CONTROL-OK"),
        "{attack}: control failed:\n{out}"
    );
    assert_eq!(
        std::fs::read_to_string(fixture.workspace().join("control.txt")).unwrap(),
        "ok\n",
        "{attack}: the control write did not reach the workspace"
    );
    assert!(
        !out.contains("ATTACK-WORKED"),
        "{attack}: a write outside the workspace succeeded:\n{out}"
    );
    before.assert_unchanged(&fixture.outside(), attack);
}

/// The sentinel and a new file beside it, by their host paths.
fn host_targets(fixture: &Fixture, prefix: &str) -> Vec<String> {
    vec![
        format!("{prefix}{}", fixture.sentinel().display()),
        format!("{prefix}{}", fixture.outside().join("planted").display()),
    ]
}

#[test]
fn read_host_file_by_absolute_path() {
    let fixture = attack_fixture();
    let targets = host_targets(&fixture, "");
    read_attack(
        "read by absolute path",
        &fixture,
        "/workspace/hello.txt",
        &targets[..1],
    );
}

#[test]
fn read_host_file_via_proc_1_root() {
    let fixture = attack_fixture();
    let targets = host_targets(&fixture, "/proc/1/root");
    read_attack(
        "read via /proc/1/root",
        &fixture,
        "/proc/self/root/workspace/hello.txt",
        &targets[..1],
    );
}

#[test]
fn read_host_file_via_proc_self_root() {
    let fixture = attack_fixture();
    let targets = host_targets(&fixture, "/proc/self/root");
    read_attack(
        "read via /proc/self/root",
        &fixture,
        "/proc/self/root/workspace/hello.txt",
        &targets[..1],
    );
}

#[test]
fn read_host_file_via_planted_symlink() {
    let fixture = attack_fixture();
    plant_symlink(&fixture, "inner", "hello.txt".as_ref());
    plant_symlink(&fixture, "to-sentinel", &fixture.sentinel());
    plant_symlink(&fixture, "to-outside", &fixture.outside());
    plant_symlink(&fixture, "rel-sentinel", "../outside/sentinel".as_ref());
    read_attack(
        "read via a planted symlink",
        &fixture,
        "/workspace/inner",
        &[
            "/workspace/to-sentinel".into(),
            "/workspace/to-outside/sentinel".into(),
            "/workspace/rel-sentinel".into(),
        ],
    );
}

#[test]
fn read_host_file_via_dotdot() {
    let fixture = attack_fixture();
    let deep = format!(
        "/workspace/../../../../../..{}",
        fixture.sentinel().display()
    );
    read_attack(
        "read via ..",
        &fixture,
        "/workspace/../workspace/hello.txt",
        &[
            "/workspace/../outside/sentinel".into(),
            "../outside/sentinel".into(),
            deep,
        ],
    );
}

#[test]
fn write_host_file_by_absolute_path() {
    let fixture = attack_fixture();
    write_attack(
        "write by absolute path",
        &fixture,
        &host_targets(&fixture, ""),
    );
}

#[test]
fn write_host_file_via_proc_1_root() {
    let fixture = attack_fixture();
    write_attack(
        "write via /proc/1/root",
        &fixture,
        &host_targets(&fixture, "/proc/1/root"),
    );
}

#[test]
fn write_host_file_via_proc_self_root() {
    let fixture = attack_fixture();
    write_attack(
        "write via /proc/self/root",
        &fixture,
        &host_targets(&fixture, "/proc/self/root"),
    );
}

#[test]
fn write_host_file_via_planted_symlink() {
    let fixture = attack_fixture();
    plant_symlink(&fixture, "to-sentinel", &fixture.sentinel());
    plant_symlink(&fixture, "to-outside", &fixture.outside());
    plant_symlink(&fixture, "rel-sentinel", "../outside/sentinel".as_ref());
    write_attack(
        "write via a planted symlink",
        &fixture,
        &[
            "/workspace/to-sentinel".into(),
            "/workspace/to-outside/planted".into(),
            "/workspace/rel-sentinel".into(),
        ],
    );
}

#[test]
fn write_host_file_via_dotdot() {
    let fixture = attack_fixture();
    write_attack(
        "write via ..",
        &fixture,
        &[
            "/workspace/../outside/sentinel".into(),
            "/workspace/../outside/planted".into(),
            format!(
                "/workspace/../../../../../..{}",
                fixture.outside().join("planted").display()
            ),
        ],
    );
}

/// Known limit, asserted so that it stays visible: the workspace is a bind mount of
/// a host directory, so a hard link planted in it *before* the run (by anything on
/// the host) is the host file itself, and the run writes it wherever its host id
/// may. Nothing inside the namespace can tell. Fresh checkouts contain no hard
/// links to outside files, and host-side tools go through `PathGrants`, which
/// refuse any regular file with more than one link
/// (`backend_worktree::filesystem` `planted_hard_link_to_outside`).
#[test]
fn planted_hard_link_to_a_run_writable_host_file_is_the_host_file_known_limit() {
    let fixture = attack_fixture();
    std::fs::hard_link(fixture.sentinel(), fixture.workspace().join("hl")).unwrap();
    let (status, out) = run(fixture.request(&format!(
        "cat /workspace/hl; echo; echo {PWNED} > /workspace/hl && echo WROTE"
    )));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("host only") && out.contains("WROTE"), "{out}");
    // The limit: the host file changed. If this ever fails, the limit is gone:
    // update docs/attack-catalogue.md.
    assert_eq!(
        std::fs::read_to_string(fixture.sentinel()).unwrap(),
        format!("{PWNED}\n"),
        "known limit no longer holds"
    );
}

/// The same planted hard link to a host file the run's host id may not write (as
/// any root-owned host file): reading follows the file's mode (0644, readable: part
/// of the known limit above), writing and chmod fail, the host is unchanged.
#[test]
fn planted_hard_link_to_a_root_owned_host_file_cannot_be_written() {
    let fixture = attack_fixture();
    let root_file = fixture.outside().join("root-owned");
    std::fs::write(&root_file, "root only").unwrap();
    chown(&root_file, Some(0), Some(0)).unwrap();
    std::fs::hard_link(&root_file, fixture.workspace().join("hl")).unwrap();
    let before = HostSnapshot::of(&fixture.outside());
    let (status, out) = run(fixture.request(&format!(
        "echo ok > /workspace/control.txt && echo CONTROL-OK; \
         echo {PWNED} > /workspace/hl && echo ATTACK-WORKED; \
         echo {PWNED} >> /workspace/hl && echo ATTACK-WORKED; \
         chmod 666 /workspace/hl && echo ATTACK-WORKED; exit 0"
    )));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    before.assert_unchanged(&fixture.outside(), "hard link to a root-owned file");
}

#[test]
fn write_to_usr_is_read_only() {
    let fixture = attack_fixture();
    let name = unique("usr");
    let (status, out) = run(fixture.request(&format!(
        "echo ok > /tmp/x && cat /tmp/x && echo CONTROL-OK; \
         touch /usr/{name} && echo ATTACK-WORKED; \
         mkdir /usr/{name}.d && echo ATTACK-WORKED; \
         echo {PWNED} > /usr/bin/{name} && echo ATTACK-WORKED; \
         exit 0"
    )));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("ok\nCONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    for path in [
        format!("/usr/{name}"),
        format!("/usr/{name}.d"),
        format!("/usr/bin/{name}"),
    ] {
        assert!(!std::path::Path::new(&path).exists(), "{path} on the host");
    }
}

#[test]
fn host_home_root_and_ssh_are_not_visible() {
    let fixture = attack_fixture();
    let (status, out) = run(fixture.request(
        "touch /home/agent/x && ls -A /home/agent && echo CONTROL-OK; \
         echo home=$(ls -A /home | tr '\\n' ,); \
         ls /root && echo ATTACK-WORKED:root; \
         ls /root/.ssh && echo ATTACK-WORKED:ssh; \
         cat /root/.ssh/authorized_keys && echo ATTACK-WORKED:keys; \
         ls /home/*/.ssh && echo ATTACK-WORKED:home-ssh; exit 0",
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("x\nCONTROL-OK"), "{out}");
    assert!(out.contains("home=agent,\n"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    // The run's home is a tmpfs of its own: nothing of it reached the host.
    assert!(!std::path::Path::new("/home/agent/x").exists());
}
