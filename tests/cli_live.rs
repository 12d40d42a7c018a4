//! A live workspace through the command line, as the user tried it: a
//! server started by one `exec` (a process of its own, which exits) answers the
//! next `exec`, and nothing of it outlives `destroy`.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test), and
//! `python3` on the host (Debian's `python3`).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::time::Duration;

use support::cli::{CliFixture, text};
use support::{marker, processes_with, wait_until_gone};

fn create(fixture: &CliFixture) -> String {
    let repo = fixture.repo();
    let out = fixture.agent_workspace(&["create", "--repo", repo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_owned()
}

fn exec(fixture: &CliFixture, run: &str, argv: &[&str]) -> std::process::Output {
    let mut args = vec!["exec", run, "--"];
    args.extend_from_slice(argv);
    fixture.agent_workspace(&args)
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
    // which has exited by the time the next one asks: it must still work.
    let script = format!(
        "python3 -m http.server 8000 --bind 127.0.0.1 --directory /workspace/{server} & \
         setsid sh -c 'sleep 1000; :' {sleeper} & \
         sleep 1"
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

    let out = fixture.agent_workspace(&["destroy", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("not cleaned up"),
        "{}",
        text(&out.stderr)
    );
    for marker in [&server, &sleeper] {
        assert_eq!(
            wait_until_gone(marker, Duration::from_secs(5)),
            Vec::<u32>::new(),
            "a process of the workspace outlived destroy"
        );
    }
    let ls = fixture.agent_workspace(&["ls"]);
    assert!(!text(&ls.stdout).contains(&run), "{}", text(&ls.stdout));
}
