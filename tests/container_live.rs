//! The container backend end to end through the runner, with runc: one live
//! container per workspace, sealed and probed like a namespace run, commands
//! `exec`'d into it, what a command leaves in the background still running for
//! the next one, and nothing left after the workspace ends (no runtime state,
//! cgroup, run directory or process).
//!
//! Needs root, user namespaces, cgroups and runc (Debian package runc).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use support::container::{self, create, runc_knows, runner};
use support::{Fixture, WAIT_FOR_PORT_8000, command, marker, wait_until_gone};
use workspace_core::runner::{CommandIo, CreateOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_by_one_command_answers_the_next_and_nothing_is_left() {
    let fixture = Fixture::new("container-live");
    let runner = runner(&fixture);
    let server = marker("container-server");
    let workspace = create(&runner, fixture.contract()).await;
    let run_id = workspace.run_id().clone();
    let observed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture.paths(&run_id).evidence.join("observed.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        observed["probe"]["mismatches"],
        serde_json::json!([]),
        "{observed:#}"
    );
    assert_eq!(
        observed["probe"]["facts"]["runtime"]["name"], "runc",
        "{observed:#}"
    );

    let start = command(
        &[
            "sh",
            "-c",
            &format!(
                "python3 -c 'import http.server,sys; sys.argv=[\"{server}\"]; http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=8000, bind=\"127.0.0.1\")' >/dev/null 2>&1 & python3 -c \"{WAIT_FOR_PORT_8000}\"; echo started"
            ),
        ],
        Some(20_000),
    );
    let started = workspace.exec(&start, CommandIo::captured()).await.unwrap();
    assert_eq!(started.shell_status(), 0, "{started:?}");
    let fetch = command(
        &[
            "python3",
            "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/hello.txt').read().decode(), end='')",
        ],
        Some(20_000),
    );
    let fetched = workspace.exec(&fetch, CommandIo::captured()).await.unwrap();
    assert_eq!(fetched.shell_status(), 0, "{fetched:?}");
    let evidence = fixture.paths(&run_id).evidence;
    let answer = std::fs::read_to_string(evidence.join("commands/0002/stdout")).unwrap();
    assert_eq!(answer, support::HELLO, "{fetched:?}");

    let write = command(&["sh", "-c", "echo changed > made.txt"], Some(20_000));
    let wrote = workspace.exec(&write, CommandIo::captured()).await.unwrap();
    assert_eq!(wrote.shell_status(), 0, "{wrote:?}");

    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    let patch =
        std::fs::read_to_string(fixture.paths(&run_id).evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("made.txt"), "{patch}");
    fixture.assert_nothing_left(&run_id, &[&server]);
    assert!(
        runc_knows(&container::state(&fixture)).is_empty(),
        "runc still knows containers"
    );
    assert!(wait_until_gone(&server, std::time::Duration::from_secs(5)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_commands_whole_tree_and_the_container_lives_on() {
    let fixture = Fixture::new("container-timeout");
    let runner = runner(&fixture);
    let mark = marker("container-timeout");
    let workspace = create(&runner, fixture.contract()).await;
    let run_id = workspace.run_id().clone();
    // A child in the background and one in the foreground, both past the limit.
    let slow = command(
        &["sh", "-c", "sleep 100 & sleep 100; true", &mark],
        Some(500),
    );
    let ended = workspace.exec(&slow, CommandIo::captured()).await.unwrap();
    assert_eq!(ended.shell_status(), 124, "{ended:?}");
    assert_eq!(
        ended.exit.killed,
        Some(workspace_core::boundary::KillCause::Timeout)
    );
    let cgroups = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .flatten()
        .map(|h| {
            h.path()
                .join(&fixture.cgroup_parent)
                .join(run_id.as_str())
                .join("cmd-1")
        })
        .filter(|dir| dir.is_dir())
        .collect::<Vec<_>>();
    assert!(!cgroups.is_empty(), "the command had cgroups of its own");
    for dir in &cgroups {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(procs.trim().is_empty(), "{}: {procs}", dir.display());
    }
    // The container itself goes on.
    let after = command(&["sh", "-c", "echo alive"], Some(20_000));
    let alive = workspace.exec(&after, CommandIo::captured()).await.unwrap();
    assert_eq!(alive.shell_status(), 0, "{alive:?}");
    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    fixture.assert_nothing_left(&run_id, &[&mark]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_freezes_the_container_and_another_runner_thaws_it_where_it_was() {
    let fixture = Fixture::new("container-suspend");
    let runner = runner(&fixture);
    let mark = marker("container-counter");
    let workspace = create(&runner, fixture.contract()).await;
    let run_id = workspace.run_id().clone();
    let checkout = workspace.source().unwrap().workspace.clone();
    let counter = command(
        &[
            // A counter that never forks (a shell loop's forked child carries
            // the marker too until it execs, so a count of processes would race).
            "sh",
            "-c",
            "python3 -c \"$1\" \"$0\" >/dev/null 2>&1 &",
            &mark,
            "import itertools, time\n\
             for i in itertools.count(1):\n\
             \x20   open(\".count\", \"w\").write(str(i))\n\
             \x20   time.sleep(0.05)",
        ],
        Some(20_000),
    );
    let started = workspace
        .exec(&counter, CommandIo::captured())
        .await
        .unwrap();
    assert_eq!(started.shell_status(), 0, "{started:?}");
    let count = || {
        std::fs::read_to_string(checkout.join(".count"))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while count() < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(count() >= 3, "the counter counts");
    let counting = support::processes_with(&mark);
    assert!(!counting.is_empty(), "the counter runs");

    workspace.suspend().await.unwrap();
    let frozen_at = count();
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert_eq!(count(), frozen_at, "a suspended container does not run");
    assert_eq!(
        support::processes_with(&mark),
        counting,
        "and keeps its processes"
    );

    // Another runner, as another process would: the same processes go on.
    let other = runner_again(&fixture);
    let workspace = other
        .resume(&run_id, CreateOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{}", workspace_core::error_chain(&e)));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while count() <= frozen_at && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(count() > frozen_at, "the counter goes on after the resume");
    assert_eq!(
        support::processes_with(&mark),
        counting,
        "the same processes"
    );
    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    fixture.assert_nothing_left(&run_id, &[&mark]);
}

/// A second runner over the same directories and runtime state (another
/// process would build the same).
fn runner_again(fixture: &Fixture) -> workspace_core::runner::Runner {
    runner(fixture)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_starts_in_the_container_is_ready_by_its_port_and_ends_with_it() {
    let fixture = Fixture::new("container-service");
    let runner = runner(&fixture);
    let mark = marker("container-service");
    let mut contract = workspace_core::contract::Contract::from_toml(&format!(
        r#"
objective = "a service in a container"
shape = "narrow-fix"
[source]
repo = "."
revision = "HEAD"
[filesystem]
writable = ["."]
[[environment.services]]
name = "web"
command = ["python3", "-c", "import http.server,sys; sys.argv=['{mark}']; http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=8000, bind='127.0.0.1')"]
health = {{ tcp = 8000 }}
"#
    ))
    .unwrap();
    contract.source = fixture.contract().source;
    let workspace = create(&runner, contract).await;
    let run_id = workspace.run_id().clone();
    let fetch = command(
        &[
            "python3",
            "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/hello.txt').read().decode(), end='')",
        ],
        Some(20_000),
    );
    let fetched = workspace.exec(&fetch, CommandIo::captured()).await.unwrap();
    assert_eq!(fetched.shell_status(), 0, "{fetched:?}");
    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    let services: serde_json::Value =
        serde_json::from_slice(&std::fs::read(report.evidence.join("services.json")).unwrap())
            .unwrap();
    assert!(services.to_string().contains("\"web\""), "{services:#}");
    let answer = std::fs::read_to_string(report.evidence.join("commands/0001/stdout")).unwrap();
    assert_eq!(answer, support::HELLO);
    fixture.assert_nothing_left(&run_id, &[&mark]);
}

/// `GET /PATH` at `at`, HTTP/1.0: the status line and the body, or what failed.
fn get(at: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&at, std::time::Duration::from_secs(2))?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: preview\r\n\r\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_of_the_container_answers_at_its_preview_endpoint_until_the_workspace_ends() {
    let fixture = Fixture::new("container-preview");
    let runner = runner(&fixture);
    let server = marker("container-preview");
    let mut contract = fixture.contract();
    contract.process.ports = vec![8000];
    let workspace = create(&runner, contract).await;
    let run_id = workspace.run_id().clone();
    let previews = fixture.paths(&run_id).previews().unwrap();
    assert_eq!(previews.len(), 1, "{previews:?}");
    let endpoint = previews[0].host;
    assert_eq!(previews[0].port, 8000);
    assert!(
        endpoint.ip().is_loopback(),
        "{endpoint} is not on the host's loopback"
    );

    let serve = command(
        &[
            "sh",
            "-c",
            "echo preview-content > page.txt; python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &",
            &server,
        ],
        None,
    );
    let ended = workspace.exec(&serve, CommandIo::captured()).await.unwrap();
    assert_eq!(ended.shell_status(), 0, "{ended:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let answer = loop {
        match get(endpoint, "page.txt") {
            Ok(answer) if answer.starts_with("HTTP/1.0 200") => break answer,
            other => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "never served: {other:?}"
                );
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    assert!(answer.ends_with("preview-content\n"), "{answer}");
    // The forwarder holds no privilege of the host's: it runs as the run's
    // unprivileged host user, with no capability.
    let forwarder = forwarder_of(run_id.as_str()).expect("the run's preview forwarder");
    let status = std::fs::read_to_string(format!("/proc/{forwarder}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert!(
        field("Uid:")
            .iter()
            .chain(&field("Gid:"))
            .all(|id| id != "0"),
        "{status}"
    );
    assert_eq!(field("CapEff:"), ["0000000000000000"], "{status}");

    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert!(
        std::net::TcpStream::connect(endpoint).is_err(),
        "the preview endpoint {endpoint} still listens after the workspace ended"
    );
    fixture.assert_nothing_left(&run_id, &[&server]);
    assert!(wait_until_gone(&server, std::time::Duration::from_secs(5)).is_empty());
}

/// The host pid of the preview forwarder of run `run_id` (its configuration
/// lies in the run's bundle, which its command line names).
fn forwarder_of(run_id: &str) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline);
            (cmdline.contains("preview-forward") && cmdline.contains(run_id)).then_some(pid)
        })
}

/// The PostgreSQL example (examples/contracts/postgres.toml) on this
/// fixture's repository.
fn postgres_contract(fixture: &Fixture) -> workspace_core::contract::Contract {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/contracts/postgres.toml"),
    )
    .unwrap();
    let mut contract = workspace_core::contract::Contract::from_toml(&text).unwrap();
    contract.source =
        workspace_core::contract::SourceSection::new(fixture.repo.to_string_lossy(), "HEAD");
    contract
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_example_runs_in_a_container_each_run_on_its_own_copy_of_the_template() {
    assert!(
        std::path::Path::new("/usr/lib/postgresql").is_dir(),
        "this test needs PostgreSQL (apt-get install postgresql)"
    );
    let fixture = Fixture::new("container-postgres");
    let runner = runner(&fixture);
    let run = |script: &str| {
        let spec = support::shell(script, &marker("container-pg"));
        let (runner, contract) = (&runner, postgres_contract(&fixture));
        async move {
            runner
                .run(
                    contract,
                    &spec,
                    CommandIo::captured(),
                    CreateOptions::default(),
                )
                .await
                .unwrap_or_else(|e| panic!("{}", workspace_core::error_chain(&e)))
        }
    };
    let stdout = |report: &workspace_core::runner::RunReport| {
        std::fs::read_to_string(report.evidence.join("commands/0001/stdout")).unwrap()
    };
    let template = |report: &workspace_core::runner::RunReport| {
        let services: serde_json::Value =
            serde_json::from_slice(&std::fs::read(report.evidence.join("services.json")).unwrap())
                .unwrap();
        services[0]["template"].clone()
    };
    // The first run makes the cluster's template, then works on it.
    let first =
        run("psql -qc 'create table made_by_first (x int)' && psql -tAc 'select 40+2'").await;
    assert!(first.outcome.failure.is_none(), "{:?}", first.outcome);
    assert_eq!(stdout(&first), "42\n");
    assert_eq!(template(&first)["made"], true);
    fixture.assert_nothing_left(&first.run_id, &[]);
    // The next starts from a copy of it: none of the first run's tables.
    let second =
        run("psql -tAc \"select count(*) from pg_tables where tablename like 'made_by_%'\"").await;
    assert!(second.outcome.failure.is_none(), "{:?}", second.outcome);
    assert_eq!(stdout(&second), "0\n");
    assert_eq!(template(&second)["made"], false);
    assert_eq!(template(&second)["key"], template(&first)["key"]);
    fixture.assert_nothing_left(&second.run_id, &[]);
    assert!(runc_knows(&container::state(&fixture)).is_empty());
}

/// Whether any file under `dir` holds `needle` (files that go away while they
/// are read are skipped).
fn any_file_holds(dir: &std::path::Path, needle: &[u8]) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| match entry.file_type() {
        Ok(kind) if kind.is_dir() => any_file_holds(&entry.path(), needle),
        Ok(kind) if kind.is_file() => std::fs::read(entry.path())
            .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle)),
        _ => false,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commands_environment_is_never_written_to_the_hosts_disk() {
    // The process file the runtime reads holds the command's environment
    // (credentials among it): watched for while a command starts and runs.
    let fixture = Fixture::new("container-env-memory");
    let runner = runner(&fixture);
    let secret = format!("aw-env-{}-never-on-disk", std::process::id());
    let mut contract = fixture.contract();
    contract
        .environment
        .env
        .insert("AW_TEST_MARK".into(), secret.clone());
    let workspace = create(&runner, contract).await;
    let run_id = workspace.run_id().clone();
    let run_dir = fixture.paths(&run_id).run_dir;
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let watcher = {
        let (watching, run_dir, needle) = (watching.clone(), run_dir.clone(), secret.clone());
        std::thread::spawn(move || {
            let mut seen = false;
            while watching.load(std::sync::atomic::Ordering::Relaxed) {
                seen |= any_file_holds(&run_dir, needle.as_bytes());
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            seen
        })
    };
    let check = command(
        &[
            "sh",
            "-c",
            "test \"$AW_TEST_MARK\" && sleep 0.5 && echo set",
        ],
        Some(20_000),
    );
    let ran = workspace.exec(&check, CommandIo::captured()).await.unwrap();
    watching.store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(ran.shell_status(), 0, "{ran:?}");
    let evidence = fixture.paths(&run_id).evidence;
    let out = std::fs::read_to_string(evidence.join("commands/0001/stdout")).unwrap();
    assert_eq!(out, "set\n", "the variable reached the command");
    assert!(!watcher.join().unwrap(), "the environment was on the disk");
    assert!(!any_file_holds(&run_dir, secret.as_bytes()));
    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    fixture.assert_nothing_left(&run_id, &[]);
}

/// A command that ends before it could be seen running reports its own exit
/// status, and one the runtime cannot start fails naming the runtime's
/// reason (what it logged, held in memory): neither is taken for the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_failure_is_the_commands_and_a_runtime_failure_names_its_reason() {
    let fixture = Fixture::new("container-start-failure");
    let runner = runner(&fixture);
    let workspace = create(&runner, fixture.contract()).await;
    let run_id = workspace.run_id().clone();
    for _ in 0..5 {
        let quick = command(&["sh", "-c", "exit 3"], Some(20_000));
        let ended = workspace.exec(&quick, CommandIo::captured()).await.unwrap();
        assert_eq!(ended.shell_status(), 3, "{ended:?}");
        assert_eq!(ended.error, None, "{ended:?}");
    }
    let mut nowhere = command(&["true"], Some(20_000));
    nowhere.cwd = "no/such/directory".into();
    let refused = workspace
        .exec(&nowhere, CommandIo::captured())
        .await
        .unwrap();
    let error = refused.error.clone().unwrap_or_default();
    assert!(error.contains("runc"), "{refused:?}");
    assert!(
        error.contains("no such file or directory") && error.contains("directory"),
        "the runtime's own reason: {refused:?}"
    );
    let after = workspace
        .exec(&command(&["true"], Some(20_000)), CommandIo::captured())
        .await
        .unwrap();
    assert_eq!(after.shell_status(), 0, "{after:?}");
    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    fixture.assert_nothing_left(&run_id, &[]);
}
