//! `--backend container` through the command line: a workspace created on the
//! container backend keeps a server between two `exec`s run by separate
//! processes, `destroy` leaves no container, and a CLI killed in the middle of
//! a command leaves a run `recover` ends with the container backend (no
//! container, process or run directory left).
//!
//! Needs root, user namespaces, cgroups and runc (Debian package runc).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::time::{Duration, Instant};

use support::cli::{CliFixture, text};
use support::{WAIT_FOR_PORT_8000, marker, wait_until_gone};

/// `GET /PATH` at `at` (HTTP/1.0): the whole answer.
fn http_get(at: std::net::SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(at).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET /{path} HTTP/1.0\r\nHost: preview\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// The containers runc knows in the CLI's state directory.
fn containers(fixture: &CliFixture) -> Vec<String> {
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(fixture.runtime().join("containers"))
        .args(["list", "-q"])
        .output()
        .expect("runc (apt-get install runc)");
    text(&out.stdout).lines().map(str::to_owned).collect()
}

/// `destroy RUN`, which must succeed.
fn destroy(fixture: &CliFixture, run: &str) {
    let destroyed = fixture.agent_workspace(&["destroy", run]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
}

fn create(fixture: &CliFixture) -> String {
    create_with(fixture, &[])
}

fn create_with(fixture: &CliFixture, more: &[&str]) -> String {
    let repo = fixture.repo();
    let mut args = vec![
        "create",
        "--backend",
        "container",
        "--repo",
        repo.to_str().unwrap(),
    ];
    args.extend_from_slice(more);
    let out = fixture.agent_workspace(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

#[test]
fn a_container_workspace_keeps_a_server_between_execs_and_destroy_leaves_nothing() {
    let fixture = CliFixture::new("container-live");
    let server = marker("cli-container-server");
    let contract = fixture.path().join("preview.toml");
    std::fs::write(
        &contract,
        "objective = \"a preview\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\n[filesystem]\nwritable = [\".\"]\n[process]\nports = [8000]\n",
    )
    .unwrap();
    let run = create_with(&fixture, &["--contract", contract.to_str().unwrap()]);
    assert_eq!(containers(&fixture), std::slice::from_ref(&run));
    let start = fixture.agent_workspace(&[
        "exec",
        &run,
        "--",
        "sh",
        "-c",
        &format!(
            "python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & python3 -c \"{WAIT_FOR_PORT_8000}\""
        ),
        &server,
    ]);
    assert_eq!(start.status.code(), Some(0), "{}", text(&start.stderr));
    let fetch = fixture.agent_workspace(&[
        "exec",
        &run,
        "--",
        "python3",
        "-c",
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/hello.txt').read().decode(), end='')",
    ]);
    assert_eq!(fetch.status.code(), Some(0), "{}", text(&fetch.stderr));
    assert_eq!(text(&fetch.stdout), support::HELLO);
    // The same server from the host, at the preview endpoint `ports` names: its
    // forwarder outlived the process that created the workspace.
    let ports = fixture.agent_workspace(&["ports", &run, "--json"]);
    assert_eq!(ports.status.code(), Some(0), "{}", text(&ports.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&ports.stdout).unwrap();
    assert_eq!(answer["run_id"], run.as_str(), "{answer}");
    let endpoints = &answer["ports"];
    assert_eq!(endpoints[0]["port"], 8000, "{endpoints}");
    let endpoint: std::net::SocketAddr = endpoints[0]["host"].as_str().unwrap().parse().unwrap();
    assert!(endpoint.ip().is_loopback(), "{endpoint}");
    let answer = http_get(endpoint, "hello.txt");
    assert!(
        answer.starts_with("HTTP/1.0 200") && answer.ends_with(support::HELLO),
        "{answer}"
    );
    destroy(&fixture, &run);
    assert!(
        containers(&fixture).is_empty(),
        "{:?}",
        containers(&fixture)
    );
    assert!(wait_until_gone(&server, Duration::from_secs(5)).is_empty());
    assert!(
        std::net::TcpStream::connect(endpoint).is_err(),
        "the preview endpoint {endpoint} still listens after destroy"
    );
    // And `ports` no longer names it.
    let ports = fixture.agent_workspace(&["ports", &run]);
    assert_eq!(ports.status.code(), Some(2), "{}", text(&ports.stdout));
    assert!(
        text(&ports.stderr).contains("has ended"),
        "{}",
        text(&ports.stderr)
    );
    assert!(!fixture.runtime().join("runs").join(&run).exists());
}

#[test]
fn recover_ends_a_container_run_whose_cli_was_killed_mid_command() {
    let fixture = CliFixture::new("container-recover");
    let sleeper = marker("cli-container-sleeper");
    let repo = fixture.repo();
    // A one-shot run is owned by its CLI for its whole life.
    let mut cli = fixture
        .command()
        .args(["run", "--backend", "container", "--repo"])
        .arg(&repo)
        .args(["--", "sh", "-c", "sleep 100", &sleeper])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The CLI's own command line holds the marker too: wait for the
    // command in the container's cgroup.
    let deadline = Instant::now() + Duration::from_secs(10);
    let run = loop {
        let found = containers(&fixture)
            .into_iter()
            .find(|run| support::runs_in(&sleeper, run));
        match found {
            Some(run) => break run,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            None => panic!("the command never ran in a container"),
        }
    };
    cli.kill().unwrap();
    cli.wait().unwrap();
    // The dead CLI held the run: now nobody does, and it is still running.
    assert_eq!(containers(&fixture), std::slice::from_ref(&run));
    // Recovering another backend's runs leaves it alone.
    let out = fixture.agent_workspace(&["recover", "--json", "--backend", "namespace"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["left_out"], serde_json::json!([run]), "{report:#}");
    assert_eq!(containers(&fixture), std::slice::from_ref(&run));
    let deadline = Instant::now() + Duration::from_secs(10);
    let recovered = loop {
        let out = fixture.agent_workspace(&["recover", "--json", "--backend", "container"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if report["recovered"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
            || Instant::now() > deadline
        {
            break (out, report);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, report) = recovered;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{report:#}\n{}",
        text(&out.stderr)
    );
    assert!(report["recovered"].to_string().contains(&run), "{report:#}");
    assert!(
        containers(&fixture).is_empty(),
        "{:?}",
        containers(&fixture)
    );
    assert!(wait_until_gone(&sleeper, Duration::from_secs(5)).is_empty());
    assert!(!fixture.runtime().join("runs").join(&run).exists());
}

#[test]
fn an_exec_killed_mid_command_leaves_its_workspace_live_until_destroy() {
    let fixture = CliFixture::new("container-exec-killed");
    let sleeper = marker("cli-container-exec-killed");
    let run = create(&fixture);
    let mut exec = fixture
        .command()
        .args(["exec", &run, "--", "sh", "-c", "sleep 100", &sleeper])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !support::runs_in(&sleeper, &run) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        support::runs_in(&sleeper, &run),
        "the command runs in the container"
    );
    exec.kill().unwrap();
    exec.wait().unwrap();
    // An exec joins the workspace, it does not own it: the workspace is
    // still detached and live, and recovery leaves it alone.
    let out = fixture.agent_workspace(&["recover", "--json", "--backend", "container"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !report["recovered"].to_string().contains(&run),
        "{report:#}"
    );
    assert_eq!(containers(&fixture), std::slice::from_ref(&run));
    let again = fixture.agent_workspace(&["exec", &run, "--", "true"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    // `destroy` ends it with what the killed exec left running.
    destroy(&fixture, &run);
    assert!(
        containers(&fixture).is_empty(),
        "{:?}",
        containers(&fixture)
    );
    assert!(wait_until_gone(&sleeper, Duration::from_secs(5)).is_empty());
}

#[test]
fn conformance_passes_on_the_container_backend_and_contract_check_names_what_it_cannot_keep() {
    let fixture = CliFixture::new("container-kit");
    let out =
        fixture.agent_workspace(&["conformance", "--backend", "container", "--runtime", "runc"]);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{stderr}",
        text(&out.stdout)
    );
    assert!(
        stderr.contains("conformance of the container backend: 10 passed, 0 failed, 0 unsupported"),
        "{stderr}"
    );

    // A runtime for a stack without one is bad input.
    let out = fixture.agent_workspace(&["conformance", "--runtime", "runc"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--runtime"),
        "{}",
        text(&out.stderr)
    );

    // Preview ports are kept (a forwarder publishes them).
    let ports = fixture.path().join("ports.toml");
    std::fs::write(
        &ports,
        "objective = \"a preview\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\n[filesystem]\nwritable = [\".\"]\n[process]\nports = [8000]\n",
    )
    .unwrap();
    let kept = fixture.agent_workspace(&[
        "contract",
        "check",
        ports.to_str().unwrap(),
        "--backend",
        "container",
    ]);
    assert_eq!(kept.status.code(), Some(0), "{}", text(&kept.stderr));
    // A service template and a disk cap are kept by both (a per-run copy of
    // the template on this one); a layered checkout is not (the runtime has no
    // idmapped mounts), and `contract check` says so naming the field.
    let template = fixture.path().join("template.toml");
    std::fs::write(
        &template,
        "objective = \"a database\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\n[filesystem]\nwritable = [\".\"]\n\
         [[environment.services]]\nname = \"db\"\ncommand = [\"sleep\", \"60\"]\nhealth = { tcp = 5432 }\n\
         [environment.services.template]\npath = \"/tmp/pgdata\"\ncommand = [\"true\"]\n",
    )
    .unwrap();
    let path = template.to_str().unwrap();
    for backend in ["namespace", "container"] {
        let kept = fixture.agent_workspace(&["contract", "check", path, "--backend", backend]);
        assert_eq!(
            kept.status.code(),
            Some(0),
            "{backend}: {}",
            text(&kept.stderr)
        );
    }
    let disk = fixture.path().join("disk.toml");
    std::fs::write(
        &disk,
        "objective = \"a capped disk\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\n[filesystem]\nwritable = [\".\"]\n[environment.limits]\ndisk = \"1GiB\"\n",
    )
    .unwrap();
    for backend in ["namespace", "container"] {
        let kept = fixture.agent_workspace(&[
            "contract",
            "check",
            disk.to_str().unwrap(),
            "--backend",
            backend,
        ]);
        assert_eq!(
            kept.status.code(),
            Some(0),
            "{backend}: {}",
            text(&kept.stderr)
        );
    }
    let layered = fixture.path().join("layered.toml");
    std::fs::write(
        &layered,
        "objective = \"a layered checkout\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\nmaterialization = \"layered\"\n[filesystem]\nwritable = [\".\"]\n",
    )
    .unwrap();
    let path = layered.to_str().unwrap();
    let refused = fixture.agent_workspace(&["contract", "check", path, "--backend", "container"]);
    let said = format!("{}{}", text(&refused.stdout), text(&refused.stderr));
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("source.materialization"), "{said}");

    // An allowlist needs an egress proxy, which only the namespace backend
    // starts: a container run asking for one is refused before anything is
    // made, naming the field.
    let refused = fixture.agent_workspace(&[
        "run",
        "--backend",
        "container",
        "--allow",
        "example.com:443",
        "--repo",
        ".",
        "--",
        "true",
    ]);
    let said = format!("{}{}", text(&refused.stdout), text(&refused.stderr));
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("environment.network"), "{said}");
    assert!(containers(&fixture).is_empty(), "{said}");
}

#[test]
fn the_runtime_is_chosen_by_flag_recorded_and_refused_where_it_cannot_run() {
    let fixture = CliFixture::new("container-runtime");
    let repo = fixture.repo();
    let repo = repo.to_str().unwrap();
    let evidence = fixture.evidence();
    let run = create_with(
        &fixture,
        &[
            "--runtime",
            "/usr/sbin/runc",
            "--evidence",
            evidence.to_str().unwrap(),
        ],
    );
    let ran = fixture.agent_workspace(&["exec", &run, "--", "true"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let observed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join(&run).join("observed.json")).unwrap())
            .unwrap();
    assert_eq!(
        observed["probe"]["facts"]["runtime"]["name"], "runc",
        "{observed}"
    );
    assert!(
        observed["probe"]["facts"]["runtime"]["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("runc version")),
        "{observed}"
    );
    destroy(&fixture, &run);

    // A runtime for the namespace backend is bad input, named.
    let out = fixture.agent_workspace(&["run", "--repo", repo, "--runtime", "runc", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--runtime"),
        "{}",
        text(&out.stderr)
    );
    // One that is not there, and crun on this hybrid cgroup layout, say why.
    for (runtime, says) in [("no-such-runtime", "no-such-runtime"), ("crun", "hybrid")] {
        let out = fixture.agent_workspace(&[
            "run",
            "--backend",
            "container",
            "--runtime",
            runtime,
            "--repo",
            repo,
            "--",
            "true",
        ]);
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{runtime}: {said}");
        assert!(said.contains(says), "{runtime}: {said}");
    }
    assert!(
        containers(&fixture).is_empty(),
        "{:?}",
        containers(&fixture)
    );
}

#[test]
fn every_subcommand_on_a_run_takes_its_backend_and_refuses_another() {
    let fixture = CliFixture::new("container-backend-flag");
    let run = create(&fixture);
    let ran = fixture.agent_workspace(&["exec", "--backend", "container", &run, "--", "true"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    // Each per-run subcommand names the backend that sealed the run when
    // another is asked for, and changes nothing.
    for subcommand in [
        vec!["exec", &run, "--", "true"],
        vec!["export", &run],
        vec!["ports", &run],
        vec!["logs", &run],
        vec!["checks", &run],
        vec!["suspend", &run],
        vec!["resume", &run],
        vec!["promote", &run],
        vec!["destroy", &run],
    ] {
        let mut args = subcommand.clone();
        args.splice(1..1, ["--backend", "namespace"]);
        let out = fixture.agent_workspace(&args);
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{subcommand:?}: {said}");
        assert!(
            said.contains("--backend namespace")
                && said.contains("sealed by the container backend"),
            "{subcommand:?}: {said}"
        );
    }
    assert_eq!(containers(&fixture), std::slice::from_ref(&run));
    // `ls` says which backend sealed each live run, and lists by backend.
    let listed = |backend: &str| -> Vec<serde_json::Value> {
        let out = fixture.agent_workspace(&["ls", "--json", "--backend", backend]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let containers_listed = listed("container");
    assert_eq!(containers_listed.len(), 1, "{containers_listed:?}");
    assert_eq!(containers_listed[0]["run_id"], run.as_str());
    assert_eq!(containers_listed[0]["backend"], "container");
    assert!(listed("namespace").is_empty());
    // `check-host` checks this host for the container backend and its runtime.
    let checked = fixture.agent_workspace(&["check-host", "--backend", "container", "--json"]);
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked.stdout));
    let report: serde_json::Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(report["backend"], "container");
    assert_eq!(report["runtime"]["ok"], true, "{report}");
    assert!(
        report["runtime"]["detail"]
            .as_str()
            .is_some_and(|d| d.contains("runc")),
        "{report}"
    );
    let out = fixture.agent_workspace(&["destroy", "--backend", "container", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(containers(&fixture).is_empty());
}
