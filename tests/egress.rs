//! A workspace whose contract allows a list of destinations, through the CLI:
//! it reaches exactly those, through its egress proxy, and the evidence records
//! every attempt. The destinations are test hosts in a network namespace this
//! test makes (a veth pair, private addresses, HTTP servers on two ports),
//! removed when it ends.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test),
//! `ip` (Debian's `iproute2`), `curl` and `python3`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use support::cli::{CliFixture, text};

/// A network namespace with a veth pair to the host and HTTP servers on two
/// ports, each answering with its own text, and on a third a server that
/// answers with the `Host` headers it received and appends them to a file;
/// all removed on drop.
struct TestHost {
    netns: String,
    host_link: String,
    address: String,
    servers: Vec<Child>,
    _root: tempfile::TempDir,
}

/// The ports the test host serves.
const ALLOWED: u16 = 8081;
const OTHER: u16 = 8082;
/// The port whose server echoes the `Host` headers it received.
const ECHO: u16 = 8083;

/// The echo server: each GET is answered (and appended to the file `argv[3]`)
/// with `host: ` and every `Host` header of the request, joined by ` | `.
const HOST_ECHO: &str = r#"
import http.server, sys
seen = sys.argv[3]
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        line = "host: " + " | ".join(self.headers.get_all("Host") or []) + "\n"
        with open(seen, "a") as f:
            f.write(line)
        body = line.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), Echo).serve_forever()
"#;

impl TestHost {
    /// `n` tells concurrent test hosts of this process apart.
    fn start(n: u8) -> Self {
        for (tool, package) in [("ip", "iproute2"), ("curl", "curl"), ("python3", "python3")] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .unwrap();
            assert!(
                found.status.success(),
                "this test needs {tool}: apt-get install {package}"
            );
        }
        let id = format!("{}-{n}", std::process::id() % 100_000);
        let netns = format!("aw-egress-{id}");
        let host_link = format!("awh{id}");
        let peer_link = format!("awt{id}");
        // A /30 of its own in 10.231.0.0/16 per test host.
        let subnet = u32::from(n) * 4 + (std::process::id() % 4000) * 16;
        let (a, b) = ((subnet >> 8) & 0xff, subnet & 0xff);
        let host_address = format!("10.231.{a}.{}", b + 1);
        let address = format!("10.231.{a}.{}", b + 2);
        let host = Self {
            netns: netns.clone(),
            host_link: host_link.clone(),
            address: address.clone(),
            servers: Vec::new(),
            _root: tempfile::tempdir().unwrap(),
        };
        ip(&["netns", "add", &netns]);
        ip(&[
            "link", "add", &host_link, "type", "veth", "peer", "name", &peer_link, "netns", &netns,
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{host_address}/30"),
            "dev",
            &host_link,
        ]);
        ip(&["link", "set", &host_link, "up"]);
        let with_mask = format!("{address}/30");
        for args in [
            ["addr", "add", with_mask.as_str(), "dev", peer_link.as_str()].as_slice(),
            &["link", "set", peer_link.as_str(), "up"],
            &["link", "set", "lo", "up"],
        ] {
            let mut all = vec!["-n", netns.as_str()];
            all.extend_from_slice(args);
            ip(&all);
        }
        let mut host = host;
        for port in [ALLOWED, OTHER] {
            let dir = host._root.path().join(port.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("index.html"), format!("served on {port}\n")).unwrap();
            let server = Command::new("ip")
                .args(["netns", "exec", &netns, "python3", "-m", "http.server"])
                .arg(port.to_string())
                .args(["--bind", &address, "--directory"])
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            host.servers.push(server);
        }
        let echo = Command::new("ip")
            .args([
                "netns", "exec", &netns, "python3", "-c", HOST_ECHO, &address,
            ])
            .arg(ECHO.to_string())
            .arg(host.seen_file())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        host.servers.push(echo);
        // Up once a connection from the host succeeds.
        for port in [ALLOWED, OTHER, ECHO] {
            let url = format!("http://{address}:{port}/");
            let up = (0..100).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                Command::new("curl")
                    .args(["-sf", "-m", "1", &url])
                    .output()
                    .is_ok_and(|o| o.status.success())
            });
            assert!(up, "the test host's server at {url} did not start");
        }
        host
    }

    fn destination(&self, port: u16) -> String {
        format!("{}:{port}", self.address)
    }

    /// The file the echo server appends each request's `Host` headers to.
    fn seen_file(&self) -> PathBuf {
        self._root.path().join("seen-hosts")
    }

    /// The `Host` lines the echo server received so far (the start-up check's
    /// from the host first).
    fn seen(&self) -> Vec<String> {
        std::fs::read_to_string(self.seen_file())
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The evidence directory the summary line names.
fn evidence_of(out: &Output) -> PathBuf {
    let stderr = text(&out.stderr);
    let line = stderr.lines().last().expect("a summary line");
    let (_, dir) = line.rsplit_once("; evidence ").expect("evidence named");
    PathBuf::from(dir.split("; ").next().unwrap())
}

/// The records of `network.jsonl`.
fn attempts(evidence: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(evidence.join("network.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_allowlisted_run_reaches_its_destinations_only_and_every_attempt_is_recorded() {
    let host = TestHost::start(0);
    let fixture = CliFixture::new("egress");
    let allowed = host.destination(ALLOWED);
    let other = host.destination(OTHER);
    let script = format!(
        r#"
        # Through the proxy variables: curl, and python's urllib.
        curl -sS http://{allowed}/ && echo curl-ok
        python3 -c 'import urllib.request; print(urllib.request.urlopen("http://{allowed}/").read().decode().strip(), "urllib-ok")'
        # Through SOCKS5 with the name resolved by the proxy.
        curl -sS --proxy "$ALL_PROXY" http://{allowed}/ && echo socks-ok
        # Another port of the same host, a CONNECT to it, a CONNECT to an IPv6
        # literal, a name that resolves to loopback, the metadata address.
        curl -sS -o /dev/null -w 'other %{{http_code}}\n' http://{other}/
        curl -sS -p -o /dev/null http://{other}/ || echo connect-refused
        curl -sS -p -o /dev/null 'http://[2001:db8::1]:{ALLOWED}/' || echo v6-refused
        curl -sS -o /dev/null -w 'localhost %{{http_code}}\n' --noproxy '' http://localhost:{ALLOWED}/
        curl -sS -o /dev/null -w 'metadata %{{http_code}}\n' http://169.254.169.254/
        # No route but the proxy: a direct connection, and a DNS query.
        curl -sS -m 5 --noproxy '*' http://{allowed}/ || echo direct-refused
        python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.sendto(b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01", ("8.8.8.8", 53))
    s.recvfrom(512)
    print("dns-answered")
except OSError as e:
    print("dns-refused", e.errno)
'
        "#
    );
    let out = fixture.run(&[
        "--allow",
        &allowed,
        "--allow",
        &format!("localhost:{ALLOWED}"),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    for expected in [
        "served on 8081\ncurl-ok",
        "served on 8081 urllib-ok",
        "socks-ok",
        "other 403",
        "connect-refused",
        "v6-refused",
        "localhost 403",
        "metadata 403",
        "direct-refused",
        "dns-refused",
    ] {
        assert!(stdout.contains(expected), "{expected:?} not in:\n{stdout}");
    }
    assert!(!stdout.contains("served on 8082"), "{stdout}");
    assert!(!stdout.contains("dns-answered"), "{stdout}");

    let evidence = evidence_of(&out);
    let records = attempts(&evidence);
    let decided = |destination: &str, decision: &str| {
        records
            .iter()
            .filter(|r| r["destination"] == destination && r["decision"] == decision)
            .count()
    };
    assert_eq!(decided(&allowed, "allow"), 3, "{records:#?}");
    assert_eq!(decided(&other, "deny"), 2, "{records:#?}");
    assert_eq!(decided("169.254.169.254:80", "deny"), 1, "{records:#?}");
    let localhost = records
        .iter()
        .find(|r| r["destination"] == format!("localhost:{ALLOWED}"))
        .expect("the localhost attempt");
    assert_eq!(localhost["decision"], "deny");
    assert!(
        localhost["reason"]
            .as_str()
            .unwrap()
            .contains("the host's loopback"),
        "{localhost}"
    );
    for record in &records {
        // Each names the command whose process asked, and its bytes.
        assert_eq!(record["command"], 1, "{record}");
        assert!(record["at_unix_ms"].as_u64().unwrap() > 0);
    }
    let allowed_record = records.iter().find(|r| r["decision"] == "allow").unwrap();
    assert!(allowed_record["bytes_down"].as_u64().unwrap() > 0);
    let outcome: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("outcome.json")).unwrap()).unwrap();
    let denied = records.iter().filter(|r| r["decision"] == "deny").count();
    assert_eq!(outcome["network"]["allowed"], 3, "{outcome}");
    assert_eq!(outcome["network"]["denied"], denied, "{outcome}");
    assert!(
        stderr.contains(&format!("network: 3 allowed, {denied} denied")),
        "{stderr}"
    );
    let observed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(evidence.join("observed.json")).unwrap()).unwrap();
    let network = &observed["probe"]["facts"]["network"];
    assert_eq!(network["mode"], "allowlist", "{network}");
    assert_eq!(network["routes_out"], serde_json::json!([]), "{network}");
    assert_eq!(network["egress"]["direct_connected"], false, "{network}");
    assert_eq!(network["egress"]["answered"], true, "{network}");
    fixture.assert_verifies(&evidence);
    // The proxy ended with the run.
    assert!(support::processes_with(evidence.file_name().unwrap().to_str().unwrap()).is_empty());
}

#[test]
fn two_workspaces_at_once_each_reach_only_their_own_destinations() {
    let host = TestHost::start(1);
    let fixture = CliFixture::new("egress-two");
    let (a, b) = (host.destination(ALLOWED), host.destination(OTHER));
    let run = |mine: &str, theirs: &str| {
        let script = format!(
            "sleep 1; curl -sS http://{mine}/; \
             curl -sS -o /dev/null -w 'theirs %{{http_code}}\\n' http://{theirs}/"
        );
        fixture
            .command()
            .args(["run", "--repo"])
            .arg(fixture.repo())
            .args(["--evidence", fixture.evidence().to_str().unwrap()])
            .args(["--allow", mine, "--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (run(&a, &b), run(&b, &a));
    for (child, port) in [(first, ALLOWED), (second, OTHER)] {
        let out = child.wait_with_output().unwrap();
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        assert!(stdout.contains(&format!("served on {port}")), "{stdout}");
        assert!(stdout.contains("theirs 403"), "{stdout}");
    }
}

#[test]
fn pip_downloads_from_its_index_under_an_allowlist_naming_it_and_not_under_deny() {
    // The index pip on this machine uses (PyPI unless configured otherwise).
    let fixture = CliFixture::new("egress-pip");
    let script = "PIP_FIND_LINKS= PIP_NO_INDEX= pip download --no-deps --no-cache-dir \
                  --disable-pip-version-check --timeout 20 -d /tmp/dl six==1.16.0 \
                  && ls /tmp/dl";
    let allowed = fixture.run(&[
        "--allow",
        "pypi.org:443",
        "--allow",
        "files.pythonhosted.org:443",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let stdout = text(&allowed.stdout);
    assert_eq!(
        allowed.status.code(),
        Some(0),
        "{stdout}{}",
        text(&allowed.stderr)
    );
    assert!(
        stdout.contains("six-1.16.0-py2.py3-none-any.whl"),
        "{stdout}"
    );
    let denied = fixture.run(&["--", "sh", "-c", script]);
    assert_ne!(denied.status.code(), Some(0), "{}", text(&denied.stdout));
}

#[test]
fn the_hosts_loopback_is_never_allowed_not_even_literally() {
    // The proxy connects from the host: an allowed 127.0.0.1 would be the
    // host's own services. Refused before anything is created.
    let fixture = CliFixture::new("egress-loopback");
    for literal in ["127.0.0.1:5432", "[::1]:5432", "[::ffff:127.0.0.1]:5432"] {
        let out = fixture.run(&["--allow", literal, "--", "true"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{literal}: {stderr}");
        assert!(stderr.contains("is a loopback address"), "{stderr}");
    }
    fixture.assert_nothing_left();
}

#[test]
fn a_host_header_other_than_the_target_never_reaches_the_destination() {
    // Attack: a plain-HTTP request to an allowed destination whose Host names
    // another site (a name-based server there would serve that site while
    // network.jsonl names the allowed one). The proxy sends the destination
    // the Host of the target it checked and recorded, whatever the client
    // wrote (RFC 9112 §3.2.2); a target naming no destination is refused.
    let host = TestHost::start(2);
    let before = host.seen();
    let fixture = CliFixture::new("egress-host");
    let echo = host.destination(ECHO);
    let other = host.destination(OTHER);
    // Raw requests to the proxy, exactly as written (curl would fix them up).
    let raw = r#"
import os, socket, sys
proxy = os.environ["HTTP_PROXY"].removeprefix("http://").rstrip("/").split(":")
request = sys.argv[2].replace("\\r\\n", "\r\n").encode()
with socket.create_connection((proxy[0], int(proxy[1])), timeout=10) as s:
    s.sendall(request)
    answer = b""
    while chunk := s.recv(65536):
        answer += chunk
head, _, body = answer.partition(b"\r\n\r\n")
print(sys.argv[1], head.split(b"\r\n")[0].decode(), body.decode().strip())
"#;
    let script = format!(
        r#"
        cat > /tmp/raw.py <<'PY'
{raw}
PY
        # Positive control: a Host that matches the target.
        curl -sS http://{echo}/ | sed 's/^/matching /'
        # The attack, with curl and raw: one Host, two, and one with user
        # information naming the other site.
        curl -sS -H 'Host: evil.example' http://{echo}/ | sed 's/^/curl-evil /'
        python3 /tmp/raw.py one 'GET http://{echo}/one HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n'
        python3 /tmp/raw.py two 'GET http://{echo}/two HTTP/1.1\r\nHost: evil.example\r\nHost: {echo}\r\nConnection: close\r\n\r\n'
        python3 /tmp/raw.py userinfo 'GET http://evil.example@{echo}/ HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n'
        # No destination in the target: origin form with the Host of an
        # allowed destination, and an authority alone. Refused, not guessed.
        python3 /tmp/raw.py origin 'GET / HTTP/1.1\r\nHost: {echo}\r\nConnection: close\r\n\r\n'
        python3 /tmp/raw.py authority 'GET {echo} HTTP/1.1\r\nHost: {echo}\r\nConnection: close\r\n\r\n'
        # The target decides, not Host: an unlisted target with an allowed Host.
        python3 /tmp/raw.py unlisted 'GET http://{other}/ HTTP/1.1\r\nHost: {echo}\r\nConnection: close\r\n\r\n'
        "#
    );
    let out = fixture.run(&["--allow", &echo, "--", "sh", "-c", &script]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let sent = format!("host: {echo}");
    // `NAME HTTP/x.y STATUS BODY`: the version is the destination's.
    let answer = |name: &str| {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no answer to {name} in:\n{stdout}"));
        line.split_once(' ')
            .unwrap()
            .1
            .split_once(' ')
            .unwrap()
            .1
            .to_owned()
    };
    assert!(stdout.contains(&format!("matching {sent}\n")), "{stdout}");
    assert!(stdout.contains(&format!("curl-evil {sent}\n")), "{stdout}");
    for name in ["one", "two", "userinfo"] {
        assert_eq!(answer(name), format!("200 OK {sent}"), "{stdout}");
    }
    for (name, status) in [
        ("origin", "400 Bad Request"),
        ("authority", "400 Bad Request"),
        ("unlisted", "403 Forbidden"),
    ] {
        assert!(answer(name).starts_with(status), "{name}: {stdout}");
    }
    assert!(!stdout.contains("evil.example |"), "{stdout}");

    // What the destination received: five requests, each with the one Host
    // of the checked target; no Host the client wrote, and nothing of the
    // refused requests.
    let seen = host.seen();
    let received = &seen[before.len()..];
    assert_eq!(received, vec![sent.clone(); 5], "{seen:?}");

    // The record names what was sent: five allowed attempts at the echo
    // server, one denied at the unlisted port; nothing for the requests that
    // named no destination.
    let records = attempts(&evidence_of(&out));
    let allowed: Vec<_> = records
        .iter()
        .filter(|r| r["decision"] == "allow")
        .collect();
    assert_eq!(allowed.len(), 5, "{records:#?}");
    for record in &allowed {
        assert_eq!(record["destination"], echo.as_str(), "{record}");
        assert_eq!(record["resolved"], echo.as_str(), "{record}");
        assert_eq!(
            format!("host: {}", record["destination"].as_str().unwrap()),
            sent
        );
    }
    let denied: Vec<_> = records.iter().filter(|r| r["decision"] == "deny").collect();
    assert_eq!(denied.len(), 1, "{records:#?}");
    assert_eq!(denied[0]["destination"], other.as_str(), "{records:#?}");
    assert!(
        !records
            .iter()
            .any(|r| r.to_string().contains("evil.example")),
        "{records:#?}"
    );
    fixture.assert_verifies(&evidence_of(&out));
}
