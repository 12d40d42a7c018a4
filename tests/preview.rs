//! Preview endpoints of live workspaces, over the default stack: each port of
//! `process.ports` is a port inside the workspace's own network namespace that
//! the host reaches at a loopback address of its own. Eight workspaces serve
//! port 8000 at once, each at its own endpoint with its own content; a command
//! in one cannot reach another's endpoint or server; bytes pass through the
//! forwarder unchanged; the endpoints close with their workspaces.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test) and
//! `python3` on the host (Debian's `python3`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use support::{Fixture, command};
use workspace_core::contract::Contract;
use workspace_core::runner::{CommandIo, CreateOptions, Runner, Workspace};

const WORKSPACES: usize = 8;

fn contract(fx: &Fixture) -> Contract {
    let mut contract = fx.contract();
    contract.process.ports = vec![8000];
    contract
}

/// Runs `script` in `workspace`; returns its stdout, asserting it succeeded.
async fn sh(workspace: &mut Workspace, script: &str) -> String {
    let outcome = workspace
        .exec(
            &command(&["sh", "-c", script], Some(60_000)),
            CommandIo::captured(),
        )
        .await
        .unwrap();
    let dir = workspace
        .evidence_dir()
        .join(format!("commands/{:04}", outcome.seq));
    let stdout = std::fs::read_to_string(dir.join("stdout")).unwrap();
    let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap();
    assert_eq!(outcome.shell_status(), 0, "{script}: {stdout}{stderr}");
    stdout
}

/// Starts a web server on port 8000 inside serving `/tmp/www`, and waits
/// until it answers inside.
async fn serve(workspace: &mut Workspace, content: &str) {
    let script = format!(
        "mkdir -p /tmp/www && printf %s '{content}' > /tmp/www/index.html && \
         (python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www >/dev/null 2>&1 &) && \
         for i in $(seq 100); do \
           python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/')\" 2>/dev/null && exit 0; \
           sleep 0.1; done; exit 1"
    );
    sh(workspace, &script).await;
}

/// The body of `GET path` at `address` from the host, `None` when nothing
/// answers.
fn get(address: SocketAddr, path: &str) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(5)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    Some(answer.split_off(head_end))
}

fn endpoint(runner: &Runner, workspace: &Workspace) -> SocketAddr {
    let previews = runner.previews(workspace.run_id()).unwrap();
    assert_eq!(previews.len(), 1, "{previews:?}");
    assert_eq!(previews[0].port, 8000);
    previews[0].host
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_workspaces_serve_port_8000_each_at_its_own_endpoint() {
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "this test needs python3 (Debian package python3)"
    );
    let fx = Fixture::new("preview-eight");
    let runner = fx.runner();
    let mut workspaces = Vec::new();
    for i in 0..WORKSPACES {
        let mut workspace = runner
            .create(contract(&fx), CreateOptions::default())
            .await
            .unwrap();
        serve(&mut workspace, &format!("workspace {i}")).await;
        workspaces.push(workspace);
    }
    let endpoints: Vec<SocketAddr> = workspaces.iter().map(|w| endpoint(&runner, w)).collect();
    for (i, host) in endpoints.iter().enumerate() {
        assert!(
            host.ip().is_loopback(),
            "bound beyond the host's loopback: {host}"
        );
        assert_eq!(
            get(*host, "/").as_deref(),
            Some(format!("workspace {i}").as_bytes()),
            "endpoint {host} answers with its own workspace's content"
        );
    }

    // A command of workspace 0 reaches its own server at 127.0.0.1:8000, and
    // neither workspace 1's endpoint (a host port: not in its network) nor any
    // server but its own.
    let other = endpoints[1].port();
    let probe = format!(
        "python3 -c \"\nimport socket, urllib.request\n\
         print(urllib.request.urlopen('http://127.0.0.1:8000/').read().decode())\n\
         s = socket.socket()\n\
         try:\n  s.connect(('127.0.0.1', {other})); print('reached')\n\
         except OSError as e: print('refused', e.errno)\n\""
    );
    let seen = sh(&mut workspaces[0], &probe).await;
    assert_eq!(seen, "workspace 0\nrefused 111\n");

    let mut reports = Vec::new();
    for workspace in workspaces {
        reports.push(workspace.finish().await.unwrap());
    }
    for (report, host) in reports.iter().zip(&endpoints) {
        assert!(report.cleaned, "{:?}", report.cleanup_errors);
        assert_eq!(
            get(*host, "/"),
            None,
            "endpoint {host} outlived its workspace"
        );
        let preview = support::read_json(&report.evidence, "preview.json");
        assert_eq!(preview["endpoints"][0]["port"], 8000);
        fx.assert_nothing_left(&report.run_id, &[]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_pass_through_the_forwarder_unchanged_and_the_preview_check_is_recorded() {
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "this test needs python3 (Debian package python3)"
    );
    let fx = Fixture::new("preview-bytes");
    let runner = fx.runner();
    let mut contract = contract(&fx);
    contract.process.preview_check = Some(workspace_core::contract::HttpCheck {
        port: 8000,
        path: "/missing".into(),
        status: 404,
    });
    let mut workspace = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    serve(&mut workspace, "index").await;
    // 24 MiB of random bytes: many times every buffer on the way.
    let digest = sh(
        &mut workspace,
        "head -c 25165824 /dev/urandom > /tmp/www/blob && sha256sum /tmp/www/blob | cut -d' ' -f1",
    )
    .await;
    let host = endpoint(&runner, &workspace);
    let (a, b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| get(host, "/blob"));
        let b = scope.spawn(|| get(host, "/blob"));
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    for body in [a, b] {
        assert_eq!(body.len(), 25_165_824);
        assert_eq!(workspace_core::digest::sha256_hex(&body), digest.trim());
    }
    let report = workspace.finish().await.unwrap();
    let preview = support::read_json(&report.evidence, "preview.json");
    assert_eq!(preview["check"]["status"], 404, "{preview}");
    assert_eq!(preview["check"]["passed"], true, "{preview}");
    fx.assert_nothing_left(&report.run_id, &[]);
}
