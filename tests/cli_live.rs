//! A live workspace through the command line, as the issue's user tried it: a
//! server started by one `exec` (a process of its own, which exits) answers the
//! next `exec` and the host at its preview endpoint (`ports`), and nothing of
//! it outlives `destroy`: no process, no listener. A service's log is what
//! `logs` prints.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test), and
//! `python3` on the host (Debian's `python3`).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::time::Duration;

use support::cli::{CliFixture, text};
use support::{WAIT_FOR_PORT_8000, marker, processes_with, read_json, wait_until_gone};

/// A contract that publishes port 8000 and runs one service that logs a line.
const CONTRACT: &str = r#"
objective = "a live workspace"
shape = "narrow-fix"
[source]
repo = "."
revision = "HEAD"
[filesystem]
writable = ["."]
[process]
ports = [8000]
[[environment.services]]
name = "ticker"
command = ["sh", "-c", "echo tick; echo tock >&2; exec sleep 1000"]
health = { log = "tick" }
"#;

fn create(fixture: &CliFixture) -> String {
    let contract = fixture.path().join("live.toml");
    std::fs::write(&contract, CONTRACT).unwrap();
    fixture.create(Some(&contract))
}

fn exec(fixture: &CliFixture, run: &str, argv: &[&str]) -> std::process::Output {
    let mut args = vec!["exec", run, "--"];
    args.extend_from_slice(argv);
    fixture.agent_workspace(&args)
}

/// Destroys `run` (which must succeed); its evidence bundle.
fn destroy(fixture: &CliFixture, run: &str) -> std::path::PathBuf {
    let out = fixture.agent_workspace(&["destroy", run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(run)
}

/// Kills the sandbox of `run` (its pid 1, checked by its name: the kernel
/// ends its pid namespace with it) as if the host had, and waits until it is
/// dead; its pid.
fn kill_sandbox(fixture: &CliFixture, run: &str) -> u64 {
    let sandbox = read_json(&fixture.runtime().join("runs").join(run), "sandbox.json");
    let pid1 = sandbox["pid"].as_u64().unwrap();
    let comm = std::fs::read_to_string(format!("/proc/{pid1}/comm")).unwrap();
    assert_eq!(
        comm.trim(),
        "agent-init",
        "pid {pid1} is not the run's pid 1"
    );
    // The shell's own `kill`: no procps on a bare machine.
    let killed = std::process::Command::new("sh")
        .args(["-c", "kill -KILL \"$1\"", "kill", &pid1.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_until_dead(pid1, "the killed pid 1");
    pid1
}

/// Waits (at most 10 s, else fails with `what`) until `pid` is dead or a
/// zombie: a pid 1 ends the rest of its pid namespace before it is.
fn wait_until_dead(pid: u64, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if matches!(state, None | Some("Z" | "X")) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: {stat}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_server_started_by_one_exec_answers_the_next_and_ends_with_destroy() {
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "this test needs python3 (Debian package python3)"
    );
    let fixture = CliFixture::new("live-server");
    let run = create(&fixture);
    let server = marker("live-server");
    let sleeper = marker("live-setsid");
    // The server logs every request to the stderr it inherited from this exec,
    // which has exited by the time the next one asks: it must still work. The
    // exec ends once the server listens (a loaded host may take seconds).
    let script = format!(
        "python3 -m http.server 8000 --bind 127.0.0.1 --directory /workspace/{server} & \
         setsid sh -c 'sleep 1000; :' {sleeper} & \
         python3 -c \"{WAIT_FOR_PORT_8000}\""
    );
    let out = exec(&fixture, &run, &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(processes_with(&server).len(), 1, "the server runs on");
    assert_eq!(
        processes_with(&sleeper).len(),
        1,
        "the setsid process runs on"
    );

    let client = "import urllib.request, urllib.error\n\
                  try:\n  urllib.request.urlopen('http://127.0.0.1:8000/')\n\
                  except urllib.error.HTTPError as e:\n  print(e.code)\n";
    let out = exec(&fixture, &run, &["python3", "-c", client]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The server's directory does not exist, so it answers 404: an answer from
    // the server the first exec started, in the same network namespace.
    assert_eq!(text(&out.stdout), "404\n", "{}", text(&out.stderr));

    // The host reaches the same server at the preview endpoint of port 8000.
    let ports = fixture.agent_workspace(&["ports", &run]);
    assert_eq!(ports.status.code(), Some(0), "{}", text(&ports.stderr));
    let line = text(&ports.stdout);
    let (host, inside) = line.trim().split_once(" -> ").expect("HOST -> PORT");
    assert_eq!(inside, "8000");
    let host: std::net::SocketAddr = host.parse().unwrap();
    assert!(
        host.ip().is_loopback(),
        "the endpoint binds the host's loopback only: {host}"
    );
    assert_eq!(
        http_status(host),
        Some(404),
        "the preview reaches the server"
    );

    let logs = fixture.agent_workspace(&["logs", &run, "ticker"]);
    assert_eq!(logs.status.code(), Some(0), "{}", text(&logs.stderr));
    assert_eq!(
        (text(&logs.stdout), text(&logs.stderr)),
        ("tick\n".into(), "tock\n".into())
    );
    // A command started on purpose in the background: its output is in `logs`
    // while it runs and in the evidence after destroy.
    let background = marker("live-background");
    let out = fixture.agent_workspace(&[
        "exec",
        "--detach",
        &run,
        "--",
        // One process that never forks: a shell's loop would, and its child
        // shows the marker too until it execs.
        "python3",
        "-c",
        "import time; print('from the background', flush=True); time.sleep(1000)",
        &background,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "exec-1\n");
    assert_eq!(processes_with(&background).len(), 1, "it runs on");
    let mut printed = String::new();
    for _ in 0..50 {
        printed = text(&fixture.agent_workspace(&["logs", &run, "exec-1"]).stdout);
        if !printed.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(printed, "from the background\n");
    let logs = fixture.agent_workspace(&["logs", &run, "nothing"]);
    assert_eq!(
        logs.status.code(),
        Some(2),
        "an unknown service is bad input"
    );

    let ls = fixture.agent_workspace(&["ls"]);
    let listing = text(&ls.stdout);
    assert!(
        listing.contains(&run) && listing.contains("detached"),
        "{listing}"
    );
    assert!(
        !listing.contains("lost"),
        "a live workspace is not lost: {listing}"
    );
    assert!(
        listing.contains(&format!("ports: {host} -> 8000")) && listing.contains("ticker (ready)"),
        "ls shows the workspace's ports and services: {listing}"
    );
    assert!(
        listing.contains("processes: "),
        "ls counts the workspace's processes: {listing}"
    );

    let out = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("not cleaned up"),
        "{}",
        text(&out.stderr)
    );
    // What the commands left running (the server, the setsid sleeper) is
    // recorded as stopped with the workspace.
    assert!(
        text(&out.stderr).contains("process(es) still running were stopped with the workspace"),
        "{}",
        text(&out.stderr)
    );
    for marker in [&server, &sleeper, &background] {
        assert_eq!(
            wait_until_gone(marker, Duration::from_secs(5)),
            Vec::<u32>::new(),
            "a process of the workspace outlived destroy"
        );
    }
    assert_eq!(
        http_status(host),
        None,
        "the preview endpoint closed with the workspace"
    );
    let ls = fixture.agent_workspace(&["ls"]);
    assert!(!text(&ls.stdout).contains(&run), "{}", text(&ls.stdout));
    let evidence = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&run);
    let services = std::fs::read_to_string(evidence.join("services.json")).unwrap();
    assert!(services.contains("\"ticker\""), "{services}");
    assert_eq!(
        std::fs::read_to_string(evidence.join("services/exec-1/stdout")).unwrap(),
        "from the background\n"
    );
}

/// The status of `GET /` at `address`, `None` when nothing answers.
fn http_status(address: std::net::SocketAddr) -> Option<u16> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// The counter a background process of the workspace keeps in its checkout,
/// read from the host.
/// A counter that writes 1, 2, 3... to `/workspace/count` (by rename, so a read
/// never sees it half written), 20 times a second. One process that never
/// forks: a shell's loop would, and until its child execs, that child shows the
/// marker too.
const COUNTER: &str = "import itertools, os, time\n\
    for i in itertools.count(1):\n\
    \x20   open(\"/workspace/.count\", \"w\").write(str(i))\n\
    \x20   os.rename(\"/workspace/.count\", \"/workspace/count\")\n\
    \x20   time.sleep(0.05)";

fn count(checkout: &std::path::Path) -> u64 {
    std::fs::read_to_string(checkout.join("count"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0)
}

#[test]
fn suspend_freezes_a_counter_in_place_and_resume_from_another_process_thaws_it() {
    let fixture = CliFixture::new("live-suspend");
    let run = create(&fixture);
    let counter = marker("live-counter");
    let script = format!("python3 -c '{COUNTER}' {counter} >/dev/null 2>&1 & sleep 0.5");
    let out = exec(&fixture, &run, &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let evidence = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&run);
    let source: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("source.json")).unwrap()).unwrap();
    // What the run writes lands in the upper layer of a layered checkout.
    let written = source["layers"]["upper"].as_str();
    let checkout = std::path::PathBuf::from(written.or(source["workspace"].as_str()).unwrap());
    // Written by rename, so a read never sees it half written.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while count(&checkout) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the counter never counted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let out = fixture.agent_workspace(&["suspend", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("processes frozen"),
        "{}",
        text(&out.stderr)
    );
    let frozen = count(&checkout);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(count(&checkout), frozen, "a frozen counter does not count");
    assert_eq!(processes_with(&counter).len(), 1, "frozen, not killed");
    let listing = text(&fixture.agent_workspace(&["ls"]).stdout);
    assert!(listing.contains("suspended"), "{listing}");
    // Suspended twice: said so, and never thawed in between.
    let out = fixture.agent_workspace(&["suspend", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is suspended already"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(
        count(&checkout),
        frozen,
        "a second suspend does not thaw it"
    );

    let out = fixture.agent_workspace(&["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = fixture.agent_workspace(&["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("was not suspended; it is live"),
        "a resume of a live run says so: {}",
        text(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(500));
    let after = count(&checkout);
    assert!(
        after > frozen && after < frozen + 40,
        "the counter went on from {frozen} (now {after}), it did not start again"
    );
    let source: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("source.json")).unwrap()).unwrap();
    let resumes = source["resumes"].as_array().unwrap();
    assert_eq!(resumes.len(), 1, "{source}");
    assert!(
        resumes[0]["note"]
            .as_str()
            .unwrap()
            .starts_with("resumed with "),
        "{source}"
    );

    let out = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        wait_until_gone(&counter, Duration::from_secs(5)),
        Vec::<u32>::new(),
        "the counter outlived destroy"
    );
}

#[test]
fn a_workspace_whose_sandbox_died_is_sealed_again_and_its_services_start_again() {
    let fixture = CliFixture::new("live-lost");
    let run = create(&fixture);
    let sandbox = read_json(&fixture.runtime().join("runs").join(&run), "sandbox.json");
    let pid1 = i32::try_from(sandbox["pid"].as_u64().unwrap()).unwrap();
    // The test's own sandbox: its pid 1 (checked by its name) dies as if the
    // host had killed it; everything in its pid namespace dies with it.
    let comm = std::fs::read_to_string(format!("/proc/{pid1}/comm")).unwrap();
    assert_eq!(comm.trim(), "agent-init");
    // The shell's own `kill`: no procps on a bare machine.
    let killed = std::process::Command::new("sh")
        .args(["-c", "kill -KILL \"$1\"", "kill", &pid1.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // Dead, not dying: the kernel ends the rest of its pid namespace first.
    wait_until_dead(u64::try_from(pid1).unwrap(), "pid 1 did not die");

    let out = exec(&fixture, &run, &["sh", "-c", "echo alive"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "alive\n");
    let logs = fixture.agent_workspace(&["logs", &run, "ticker"]);
    assert_eq!(
        text(&logs.stdout),
        "tick\ntick\n",
        "the service started again, in the same log"
    );
    let services = read_json(&destroy(&fixture, &run), "services.json");
    let ended: Vec<&str> = services
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["ended"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(ended.len(), 2, "{services}");
    assert_eq!(
        ended[0],
        "its sandbox was gone when the run was attached again"
    );
    // Started again by the `exec` (a runner that then let go of it), stopped by
    // the `destroy` with the rest of the run.
    assert!(
        ended[1].starts_with("stopped with the run's other processes"),
        "{services}"
    );
}

/// A sandbox recorded in another boot of the host is not taken for live (its
/// pid may be anyone's now): the run is sealed again, and the evidence says
/// the host restarted, since the run's writable layer is mounted without
/// syncs.
#[test]
fn a_workspace_from_before_a_restart_of_the_host_is_sealed_again_and_says_so() {
    let fixture = CliFixture::new("live-reboot");
    let run = create(&fixture);
    let run_dir = fixture.runtime().join("runs").join(&run);
    let record = run_dir.join("sandbox.json");
    let mut sandbox = read_json(&run_dir, "sandbox.json");
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    assert_eq!(sandbox["boot_id"].as_str(), Some(boot.trim()));
    // As if the host had restarted since (and, here, the old pid 1 lived on:
    // the teardown before the new seal ends it).
    sandbox["boot_id"] = serde_json::json!("00000000-0000-0000-0000-000000000000");
    std::fs::write(&record, serde_json::to_vec(&sandbox).unwrap()).unwrap();

    let out = exec(&fixture, &run, &["sh", "-c", "echo alive"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "alive\n");
    let resealed = read_json(&run_dir, "sandbox.json");
    assert_ne!(resealed["pid"], sandbox["pid"], "a new sandbox");
    // The old pid 1 was ended before the new seal: dead, or dying (a pid 1
    // waits for the rest of its pid namespace), never left running.
    wait_until_dead(sandbox["pid"].as_u64().unwrap(), "the old pid 1 lives on");
    let source = read_json(&destroy(&fixture, &run), "source.json");
    let notes: Vec<&str> = source["resumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["note"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(notes.len(), 1, "{source}");
    assert!(notes[0].contains("the host restarted"), "{}", notes[0]);
}

#[test]
fn ls_shows_a_live_workspaces_capped_disk_and_what_it_holds() {
    let fixture = CliFixture::new("live-disk");
    let repo = fixture.repo();
    let out = fixture.agent_workspace(&[
        "create",
        "--repo",
        repo.to_str().unwrap(),
        "--disk",
        "16MiB",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run = text(&out.stdout).trim().to_owned();
    let wrote = exec(
        &fixture,
        &run,
        &["sh", "-c", "head -c 4194304 /dev/zero > four-mib"],
    );
    assert_eq!(wrote.status.code(), Some(0), "{}", text(&wrote.stderr));
    let listed = fixture.agent_workspace(&["ls", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let disk = &rows[0]["disk"];
    assert_eq!(disk["kind"], "tmpfs", "{rows}");
    assert_eq!(disk["cap_bytes"], 16 << 20, "{rows}");
    let used = disk["used_bytes"].as_u64().unwrap();
    assert!((4 << 20..16 << 20).contains(&used), "{rows}");
    let destroyed = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
}

/// A command started with `exec --detach` that ends on its own is never said
/// to be running, nor to have been stopped: its end is seen only by the
/// runner that started it, which let it go.
#[test]
fn a_detached_command_that_ended_by_itself_is_not_said_stopped() {
    let fixture = CliFixture::new("live-detached-ended");
    let run = fixture.create(None);
    let out = fixture.agent_workspace(&["exec", "--detach", &run, "--", "sh", "-c", "exit 5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "exec-1\n");
    let listing = text(&fixture.agent_workspace(&["ls"]).stdout);
    assert!(listing.contains("exec-1 (started)"), "{listing}");

    let services = read_json(&destroy(&fixture, &run), "services.json");
    // Its logs went to the evidence with the run: asking the run is refused.
    let logs = fixture.agent_workspace(&["logs", &run]);
    assert_eq!(logs.status.code(), Some(2), "{}", text(&logs.stderr));
    assert!(
        text(&logs.stderr).contains("has ended"),
        "{}",
        text(&logs.stderr)
    );
    let ended = services[0]["ended"].as_str().unwrap_or_default();
    assert!(
        ended.starts_with("had ended before the run drained"),
        "nothing of the run was left to stop: {services}"
    );
}

/// `agent-workspace ARGS` as `nobody` (uid 65534), through `setpriv`, on the
/// fixture's runtime directory: another local user asking for root's run. The
/// binary is copied into the fixture's directory, which any user may
/// traverse (the build directory may be closed to other users).
fn as_nobody(fixture: &CliFixture, args: &[&str]) -> std::process::Output {
    let aw = fixture.path().join("aw-as-nobody");
    if !aw.exists() {
        std::fs::copy(env!("CARGO_BIN_EXE_agent-workspace"), &aw).unwrap();
    }
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&aw)
        .args(args)
        .current_dir("/")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("AGENT_WORKSPACE_RUNTIME_DIR", fixture.runtime())
        .env("XDG_STATE_HOME", fixture.path().join("nobody-state"))
        .output()
        .expect("setpriv (Debian's util-linux)")
}

#[test]
fn another_users_run_is_refused_by_name_not_answered_with_nothing() {
    let fixture = CliFixture::new("live-other-user");
    let run = create(&fixture);
    // Positive control: its own user (root) reads the service's log.
    let logs = fixture.agent_workspace(&["logs", &run, "ticker"]);
    assert_eq!(logs.status.code(), Some(0), "{}", text(&logs.stderr));
    assert_eq!(text(&logs.stdout), "tick\n");
    let before = support::list_tree(&fixture.runtime());

    // Another user: every service, one service, and a command are refused,
    // naming whose run it is; nothing is printed as if it were the log.
    for args in [
        vec!["logs", run.as_str()],
        vec!["logs", run.as_str(), "ticker"],
        vec!["exec", run.as_str(), "--", "true"],
    ] {
        let out = as_nobody(&fixture, &args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
        assert!(
            stderr.contains(&format!("run {run} belongs to root (uid 0), not to "))
                && stderr.contains("(uid 65534)"),
            "{args:?}: {stderr}"
        );
    }
    // The run is as it was: nothing of the other user's attempt in it.
    assert_eq!(support::list_tree(&fixture.runtime()), before);
    assert!(!fixture.path().join("nobody-state").exists());
    let logs = fixture.agent_workspace(&["logs", &run, "ticker"]);
    assert_eq!(text(&logs.stdout), "tick\n", "{}", text(&logs.stderr));
    destroy(&fixture, &run);
}

/// `AGENT_WORKSPACE_DB_SCHEMA` and `AGENT_WORKSPACE_CACHE_PREFIX` in `run`,
/// after holding the exec for `hold` seconds.
fn names_in(fixture: &CliFixture, run: &str, hold: &str) -> std::process::Output {
    let script =
        format!("sleep {hold}; echo \"$AGENT_WORKSPACE_DB_SCHEMA $AGENT_WORKSPACE_CACHE_PREFIX\"");
    exec(fixture, run, &["sh", "-c", &script])
}

#[test]
fn two_live_workspaces_never_share_a_leased_name_while_either_lives() {
    let fixture = CliFixture::new("live-leases");
    let contract = fixture.path().join("leases.toml");
    std::fs::write(
        &contract,
        "objective = \"leases for life\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\n\
         revision = \"HEAD\"\n[filesystem]\nwritable = [\".\"]\n\
         [process]\ndatabase_schema = \"orders\"\ncache_prefix = \"cache\"\n",
    )
    .unwrap();
    let a = fixture.create(Some(&contract));
    let b = fixture.create(Some(&contract));
    // Both left detached; their execs overlap (a's holds while b's runs), and
    // neither is refused or ended for its names.
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| names_in(&fixture, &a, "1"));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let second = scope.spawn(|| names_in(&fixture, &b, "0"));
        (first.join().unwrap(), second.join().unwrap())
    });
    for out in [&first, &second] {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let (names_a, names_b) = (text(&first.stdout), text(&second.stdout));
    assert_eq!(names_a.trim(), "orders_1 cache-1", "{names_a}");
    assert_eq!(names_b.trim(), "orders_2 cache-2", "{names_b}");
    // Again, detached between: each keeps its own names.
    assert_eq!(text(&names_in(&fixture, &a, "0").stdout), names_a);
    assert_eq!(text(&names_in(&fixture, &b, "0").stdout), names_b);
    // Once a is destroyed its names are free: a third workspace gets them.
    destroy(&fixture, &a);
    let c = fixture.create(Some(&contract));
    assert_eq!(
        text(&names_in(&fixture, &c, "0").stdout).trim(),
        "orders_1 cache-1"
    );
    assert_eq!(text(&names_in(&fixture, &b, "0").stdout), names_b);
    destroy(&fixture, &b);
    destroy(&fixture, &c);
}

#[test]
fn two_workspaces_of_the_postgres_example_with_overlapping_execs_keep_their_own_databases() {
    assert!(
        std::path::Path::new("/usr/bin/psql").exists(),
        "this test needs PostgreSQL (Debian packages postgresql, postgresql-client)"
    );
    let fixture = CliFixture::new("live-postgres-leases");
    let contract =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/contracts/postgres.toml");
    let a = fixture.create(Some(&contract));
    let b = fixture.create(Some(&contract));
    let query = |run: &str, hold: &str| {
        let script = format!(
            "sleep {hold}; psql -h /tmp/postgres -U agent -d \"$AGENT_WORKSPACE_DB_SCHEMA\" -tAc 'select current_database()'"
        );
        exec(&fixture, run, &["sh", "-c", &script])
    };
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| query(&a, "1"));
        std::thread::sleep(std::time::Duration::from_millis(300));
        let second = scope.spawn(|| query(&b, "0"));
        (first.join().unwrap(), second.join().unwrap())
    });
    for out in [&first, &second] {
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let (db_a, db_b) = (text(&first.stdout), text(&second.stdout));
    assert_eq!((db_a.trim(), db_b.trim()), ("app_1", "app_2"));
    // Both still live, each with its own database.
    assert_eq!(text(&query(&a, "0").stdout), db_a);
    assert_eq!(text(&query(&b, "0").stdout), db_b);
    destroy(&fixture, &a);
    destroy(&fixture, &b);
}

#[test]
fn a_live_sandbox_is_found_by_another_process_with_another_cgroup_parent() {
    use agent_workspace::namespace::cgroup::{CgroupLayout, remove_parent};
    /// The other parent, this test's own: whatever fails, nothing of it is
    /// left running.
    struct Elsewhere(String);
    impl Drop for Elsewhere {
        fn drop(&mut self) {
            if std::thread::panicking() {
                support::end_processes_under(&self.0);
                if let Ok(layout) = CgroupLayout::detect() {
                    let _ = remove_parent(&layout, &self.0);
                }
            }
        }
    }
    let fixture = CliFixture::new("live-other-parent");
    // Created (and a process left running) under one cgroup parent ...
    let guard = Elsewhere(support::cgroup_parent_name("live-elsewhere"));
    let elsewhere = guard.0.clone();
    let contract = fixture.path().join("live.toml");
    std::fs::write(&contract, CONTRACT).unwrap();
    let repo = fixture.repo();
    let out = fixture
        .command()
        .env("AGENT_WORKSPACE_CGROUP_PARENT", &elsewhere)
        .args(["create", "--repo", repo.to_str().unwrap()])
        .args(["--contract", contract.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run = text(&out.stdout).trim().to_owned();
    let held = marker("other-parent");
    let out = fixture
        .command()
        .env("AGENT_WORKSPACE_CGROUP_PARENT", &elsewhere)
        .args(["exec", &run, "--", "sh", "-c"])
        .arg(format!(
            "(python3 -c 'import time; time.sleep(1000)' {held} &) ; true"
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // ... then driven by processes whose default is another parent: the same
    // live sandbox (the process is still there), never one sealed again.
    let count = format!("ps -eo args | grep -v grep | grep -c -- '{held}'");
    let out = exec(&fixture, &run, &["sh", "-c", &count]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        "1",
        "the sandbox was not the one made"
    );
    let sandbox: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            fixture
                .runtime()
                .join("runs")
                .join(&run)
                .join("sandbox.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let pid1 = sandbox["pid"].as_u64().unwrap();
    destroy(&fixture, &run);
    // Ended with everything it ran, and nothing left under either parent.
    wait_until_dead(pid1, "the sandbox's pid 1");
    assert!(wait_until_gone(&held, Duration::from_secs(10)).is_empty());
    let layout = CgroupLayout::detect().unwrap();
    remove_parent(&layout, &elsewhere)
        .unwrap_or_else(|e| panic!("{elsewhere} left behind, not empty: {e}"));
}

#[test]
fn destroy_of_a_run_whose_sandbox_is_gone_neither_seals_it_again_nor_waits_on_a_full_host() {
    let fixture = CliFixture::new("live-end-gone");
    let a = create(&fixture);
    // Its sandbox dies ...
    kill_sandbox(&fixture, &a);
    // ... and another workspace takes every core of the host.
    let full = fixture.path().join("full.toml");
    std::fs::write(
        &full,
        "objective = \"the whole host\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\n\
         revision = \"HEAD\"\n[filesystem]\nwritable = [\".\"]\n\
         [environment.limits]\ncpus = 2.0\n[environment.reservation]\ncpus = 2.0\n",
    )
    .unwrap();
    let b = fixture.create(Some(&full));
    // Ending the first asks for nothing: it returns at once, says why it
    // failed, and leaves nothing of the run.
    let mut ending = fixture
        .command()
        .args(["destroy", &a])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = ending.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = ending.kill();
            panic!("destroy of a run whose sandbox is gone waited (for capacity?)");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(ending.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    // The runner's failure (125), not the agent's.
    assert_eq!(status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("its sandbox was gone when the run was ended"),
        "{stderr}"
    );
    let evidence = fixture
        .state_home()
        .join("agent-workspace/evidence")
        .join(&a);
    fixture.assert_verifies(&evidence);
    let journal = std::fs::read_to_string(evidence.join("journal.jsonl")).unwrap();
    let seals = journal.matches("\"op\":\"seal\"").count();
    assert_eq!(seals, 1, "sealed again to be ended: {journal}");
    assert!(!fixture.runtime().join("runs").join(&a).exists());
    destroy(&fixture, &b);
}

/// Late output cannot be erased when the runner that started the command is
/// gone either: each `exec` is a process of its own that exits, the eraser
/// (see `support::eraser`) lets its output keeper outlive it, truncates,
/// seeks and writes at offset 0, and after `destroy` every byte it wrote is in
/// the bundle; nothing of the run is left.
#[test]
fn late_output_written_after_the_exec_exited_survives_truncation() {
    support::eraser::require_python();
    let fixture = CliFixture::new("live-late-erased");
    let run = fixture.create(None);
    let mark = marker("live-late-erased");
    for spec in [
        support::eraser::first_command(&mark),
        support::eraser::second_command(&mark),
    ] {
        let argv: Vec<&str> = spec.argv.iter().map(String::as_str).collect();
        let out = exec(&fixture, &run, &argv);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let evidence = destroy(&fixture, &run);
    support::eraser::assert_nothing_erased(&evidence);
    fixture.assert_verifies(&evidence);
    // Nothing of the run is left: no process, no run directory.
    assert!(wait_until_gone(&mark, Duration::from_secs(5)).is_empty());
    assert!(!fixture.runtime().join("runs").join(&run).exists());
}

#[test]
fn a_rewritten_alternates_file_binds_no_host_directory_into_a_sandbox_sealed_again() {
    let fixture = CliFixture::new("live-alternates");
    // A host directory the run must never see (the test's own).
    let secret = fixture.path().join("host-secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("key"), "the host's key\n").unwrap();
    let run = create(&fixture);
    // The positive control: git in the run reads the source's history.
    let out = exec(&fixture, &run, &["git", "cat-file", "-t", "HEAD"]);
    assert_eq!(text(&out.stdout), "commit\n", "{}", text(&out.stderr));
    // The agent points the checkout's alternates at the host directory ...
    let script = format!("echo '{}' > .git/objects/info/alternates", secret.display());
    let out = exec(&fixture, &run, &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // ... and its sandbox is sealed again (its pid 1 died).
    kill_sandbox(&fixture, &run);
    let probe = format!(
        "cat '{0}/key' 2>/dev/null; ls '{0}' 2>/dev/null; grep -c host-secret /proc/self/mountinfo",
        secret.display()
    );
    let out = exec(&fixture, &run, &["sh", "-c", &probe]);
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("the host's key"), "{stdout}");
    assert_eq!(
        stdout.trim(),
        "0",
        "the host directory was mounted: {stdout}"
    );
    destroy(&fixture, &run);
}

#[test]
fn exec_sets_variables_and_a_directory_for_one_command_and_records_only_the_names() {
    for backend in [&[][..], &["--backend", "container"][..]] {
        let fixture = CliFixture::new("live-exec-env");
        let run = fixture.create_with(backend);
        let out = exec(&fixture, &run, &["mkdir", "-p", "sub/dir"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let value = "a value only this command sees";
        let setting = format!("GREETING={value}");
        let out = fixture.agent_workspace(&[
            "exec",
            &run,
            "--env",
            &setting,
            "-e",
            "HOME=/tmp/elsewhere",
            "--workdir",
            "sub/dir",
            "--",
            "sh",
            "-c",
            "echo \"$GREETING\"; echo \"$HOME\"; pwd",
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{backend:?}: {}",
            text(&out.stderr)
        );
        let stdout = text(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines[..2],
            [value, "/tmp/elsewhere"],
            "{backend:?}: {stdout}"
        );
        assert!(lines[2].ends_with("/sub/dir"), "{backend:?}: {stdout}");
        // The next command has neither.
        let out = exec(&fixture, &run, &["sh", "-c", "echo \"[$GREETING]\""]);
        assert_eq!(text(&out.stdout), "[]\n", "{backend:?}");
        // Bad input is named, and nothing runs.
        let out = fixture.agent_workspace(&["exec", &run, "--env", "NOVALUE", "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("NAME=VALUE"),
            "{}",
            text(&out.stderr)
        );
        let out = fixture.agent_workspace(&["exec", &run, "--workdir", "../..", "--", "true"]);
        assert_ne!(out.status.code(), Some(0), "{backend:?}: .. was taken");
        let evidence = destroy(&fixture, &run);
        // The evidence names the variables, never their values.
        let record = read_json(&evidence.join("commands/0002"), "command.json");
        assert_eq!(
            record["env_names"],
            serde_json::json!(["GREETING", "HOME"]),
            "{record}"
        );
        // (but for the output of the command that printed it).
        let all = std::process::Command::new("grep")
            .args(["-rl", value])
            .arg(&evidence)
            .output()
            .unwrap();
        let holding = text(&all.stdout);
        let printed = evidence.join("commands/0002/stdout");
        assert_eq!(holding.trim(), printed.to_str().unwrap(), "{backend:?}");
    }
}

#[test]
fn an_excluded_file_moved_by_the_run_stays_masked_when_its_sandbox_is_sealed_again() {
    let fixture = CliFixture::new("live-excluded-moved");
    let repo = fixture.repo();
    std::fs::create_dir_all(repo.join("secrets")).unwrap();
    std::fs::write(repo.join("secrets/pin"), "4711\n").unwrap();
    support::git(&repo, &["add", "-A"]);
    support::git(&repo, &["commit", "-qm", "a secret"]);
    let contract = fixture.path().join("excluded.toml");
    std::fs::write(
        &contract,
        "objective = \"excluded\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\n\
         revision = \"HEAD\"\nmaterialization = \"standalone\"\n\
         [filesystem]\nwritable = [\".\"]\nexcluded = [\"secrets/**\"]\n",
    )
    .unwrap();
    let run = fixture.create(Some(&contract));
    // Masked; the run moves its directory away from the pattern.
    let out = exec(
        &fixture,
        &run,
        &["sh", "-c", "cat secrets/pin; mv secrets s2 && echo moved"],
    );
    assert_eq!(text(&out.stdout), "moved\n", "{}", text(&out.stderr));
    // Its sandbox dies and is sealed again by the next exec.
    kill_sandbox(&fixture, &run);
    let out = exec(&fixture, &run, &["sh", "-c", "ls s2; cat s2/pin; echo end"]);
    let stdout = text(&out.stdout);
    assert!(stdout.ends_with("end\n"), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.starts_with("pin\n"),
        "the moved file is listed: {stdout}"
    );
    assert!(
        !stdout.contains("4711"),
        "the moved excluded file was read: {stdout}"
    );
    destroy(&fixture, &run);
}

#[test]
fn the_summary_line_never_glues_onto_a_commands_last_line_and_quiet_drops_it() {
    let fixture = CliFixture::new("live-summary-line");
    let run = create(&fixture);
    // A last line on stderr without a newline: the summary starts on its own.
    let out = exec(&fixture, &run, &["sh", "-c", "printf 'no newline' >&2"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.starts_with("no newline\nagent-workspace: run "),
        "{stderr:?}"
    );
    // --quiet: the command's own stderr, byte for byte, and nothing else.
    let out = fixture.agent_workspace(&[
        "exec",
        "--quiet",
        &run,
        "--",
        "sh",
        "-c",
        "printf 'no newline' >&2; printf out",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stderr), "no newline");
    assert_eq!(text(&out.stdout), "out");
    // What went wrong is still said.
    let out = fixture.agent_workspace(&["exec", "-q", "run-nonexistent-1", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!out.stderr.is_empty());
    destroy(&fixture, &run);
}

#[test]
fn a_timeout_and_a_missing_program_are_told_apart_in_the_outcome_and_the_json() {
    let fixture = CliFixture::new("live-exit-causes");
    let run = create(&fixture);
    let out = fixture.agent_workspace(&["exec", "--timeout", "1", &run, "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let evidence = destroy(&fixture, &run);
    // Read back by the destroying process, the kill keeps its cause.
    let outcome = read_json(&evidence, "outcome.json");
    assert_eq!(
        outcome["commands"][0]["exit"]["killed"], "timeout",
        "{outcome}"
    );
    let record = read_json(&evidence.join("commands/0001"), "command.json");
    assert_eq!(record["killed"], "timeout", "{record}");
    // A program that is not there: 127, and the JSON says why.
    let out = fixture.run(&["--json", "--capture", "--", "no-such-program-here"]);
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["exit_status"], 127, "{summary}");
    assert!(
        summary["cause"]
            .as_str()
            .is_some_and(|c| c.contains("not found: no-such-program-here")),
        "{summary}"
    );
}
