//! A command's output, returned and capped: the library caller gets each
//! stream back byte for byte (binary, a last line without a newline), kept to
//! the output cap as the evidence keeps it (head and tail, with the count of
//! every byte); a borrowed sink gets all of it; the contract may ask for a
//! kill instead; and what a background process writes after its command
//! ended is held to the cap too, on the host as in the evidence.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::os::unix::fs::MetadataExt;

use support::{Fixture, assert_intact, marker, read_json, shell};
use workspace_core::boundary::KillCause;
use workspace_core::contract::{ByteSize, OutputOverflow};
use workspace_core::evidence::HeadTail;
use workspace_core::runner::{CommandIo, CreateOptions};

/// What a stream that passed a cap of `cap` bytes keeps.
fn kept(cap: u64) -> Option<HeadTail> {
    Some(HeadTail::of_cap(cap))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_output_comes_back_byte_for_byte_and_each_stream_apart() {
    let fx = Fixture::new("output-returned");
    let ws = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .unwrap();
    // Binary bytes, a CRLF, and a last line without a newline on stdout; a
    // NUL and trailing spaces on stderr.
    let script = "printf '\\000\\377\\001bin\\r\\nline\\n  last line, no newline  '; \
                  printf 'err\\000or  ' >&2";
    let ran = ws
        .exec(&shell(script, &marker("returned")), CommandIo::capturing())
        .await
        .unwrap();
    assert!(ran.succeeded(), "{ran:?}");
    let output = ran.output.clone().expect("the output, as asked");
    let stdout: &[u8] = b"\x00\xff\x01bin\r\nline\n  last line, no newline  ";
    assert_eq!(output.stdout.bytes, stdout);
    assert_eq!(output.stderr.bytes, b"err\x00or  ");
    assert_eq!(
        (output.stdout.total_bytes, output.stdout.truncated),
        (stdout.len() as u64, None)
    );
    assert_eq!(
        (ran.stdout_bytes, ran.stderr_bytes),
        (stdout.len() as u64, 8)
    );
    assert!(!ran.truncated());

    // Evidence only: nothing comes back, the record is the same.
    let quiet = ws
        .exec(&shell("echo quiet", "quiet"), CommandIo::captured())
        .await
        .unwrap();
    assert_eq!(quiet.output, None);
    assert_eq!(quiet.stdout_bytes, 6);

    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);
    let evidence = |name: &str| std::fs::read(report.evidence.join(name)).unwrap();
    assert_eq!(evidence("commands/0001/stdout"), stdout);
    assert_eq!(evidence("commands/0001/stderr"), b"err\x00or  ");
    // The run's record of the command does not carry the output itself.
    assert_eq!(report.outcome.commands[0].output, None);
    assert_eq!(report.outcome.commands[0].stdout_bytes, stdout.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_the_head_and_tail_come_back_and_a_borrowed_sink_gets_every_byte() {
    let fx = Fixture::new("output-capped");
    let ws = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .unwrap();
    // 3 MiB between two markers on stdout, 100 KiB on stderr.
    let script = "printf BEGIN; head -c 3145728 /dev/zero | tr '\\0' x; printf END; \
                  head -c 102400 /dev/zero >&2";
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let cap = 64 << 10;
    let ran = ws
        .exec(
            &shell(script, &marker("capped")),
            CommandIo {
                capture: true,
                ..CommandIo::passing_to(&mut out, &mut err).with_output_limit(cap)
            },
        )
        .await
        .unwrap();
    assert!(ran.succeeded(), "{ran:?}");
    assert!(ran.truncated());
    // The sinks, borrowed for the command, got all of it.
    assert_eq!(out.len(), 3 * 1024 * 1024 + 8);
    assert!(out.starts_with(b"BEGINxxx") && out.ends_with(b"xxxEND"));
    assert_eq!(err.len(), 102_400);

    let output = ran.output.clone().unwrap();
    let stdout = &output.stdout;
    assert_eq!(stdout.total_bytes, 3 * 1024 * 1024 + 8);
    assert_eq!(stdout.truncated, kept(cap));
    assert_eq!(stdout.bytes.len() as u64, cap);
    assert!(stdout.head().starts_with(b"BEGINxxx"), "{stdout:?}");
    assert!(stdout.tail().ends_with(b"xxxEND"), "{stdout:?}");
    assert_eq!(
        (stdout.head().len(), stdout.tail().len()),
        (32 << 10, 32 << 10)
    );
    assert_eq!(output.stderr.total_bytes, 102_400);
    assert_eq!(output.stderr.truncated, kept(cap));
    assert_eq!(
        (ran.stdout_truncated, ran.stderr_truncated),
        (kept(cap), kept(cap))
    );

    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);
    // The evidence keeps what came back, and says what it dropped.
    let kept_stdout = std::fs::read(report.evidence.join("commands/0001/stdout")).unwrap();
    assert_eq!(kept_stdout, stdout.bytes);
    let record = read_json(&report.evidence, "commands/0001/command.json");
    assert_eq!(record["stdout_bytes"], 3 * 1024 * 1024 + 8, "{record}");
    assert_eq!(
        record["stdout_truncated"],
        serde_json::json!({"head_bytes": 32768, "tail_bytes": 32768}),
        "{record}"
    );
    assert_eq!(record["stderr_bytes"], 102_400, "{record}");
    assert!(record["killed"].is_null(), "not killed for it: {record}");
    let outcome = &report.outcome.commands[0];
    assert_eq!(outcome.stdout_truncated, kept(cap));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_that_asks_for_a_kill_has_the_command_killed_at_the_cap_and_says_why() {
    let fx = Fixture::new("output-kill");
    let mut contract = fx.contract();
    contract.environment.limits.output = Some(ByteSize(1 << 20));
    contract.environment.limits.output_overflow = Some(OutputOverflow::Kill);
    // `yes` never ends by itself: only the kill for its output ends it.
    let report = fx
        .runner()
        .run(
            contract,
            &shell("yes output", &marker("kill")),
            CommandIo::capturing(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    let last = report.last_command().unwrap();
    assert_eq!(last.exit.killed, Some(KillCause::OutputLimit), "{last:?}");
    assert!(!last.succeeded());
    assert!(last.duration_ms < 60_000, "{last:?}");
    assert_eq!(last.stdout_truncated, kept(1 << 20));
    // `Runner::run` returns the output with the command's outcome.
    let output = last.output.as_ref().expect("the output, as asked");
    assert!(output.stdout.head().starts_with(b"output\noutput\n"));
    let record = read_json(&report.evidence, "commands/0001/command.json");
    assert_eq!(record["killed"], "output-limit", "{record}");
    let cause = record["cause"].as_str().unwrap_or_default();
    assert!(cause.contains("output cap"), "{record}");
    assert_intact(&report.evidence);
}

/// A background process that writes far past the cap after its command ended:
/// the run's file of it holds no more than the cap and a few MiB while it
/// writes, `late.stdout` keeps its head and tail, and `outcome.json` says how
/// much it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_output_past_the_cap_is_held_to_it_on_the_host_and_in_the_evidence() {
    let fx = Fixture::new("output-late");
    let mut contract = fx.contract();
    let cap = 1 << 20;
    contract.environment.limits.output = Some(ByteSize(cap));
    let ws = fx
        .runner()
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    let mark = marker("output-late");
    let total: u64 = 64 << 20;
    let first = shell(
        &format!(
            "( while [ ! -e /tmp/go ]; do sleep 0.02; done; printf LATE-BEGIN; \
               head -c {total} /dev/zero; printf LATE-END; : > /tmp/done ) & echo early"
        ),
        &mark,
    );
    assert!(
        ws.exec(&first, CommandIo::captured())
            .await
            .unwrap()
            .succeeded()
    );
    let second = shell(
        ": > /tmp/go; while [ ! -e /tmp/done ]; do sleep 0.02; done",
        &mark,
    );
    assert!(
        ws.exec(&second, CommandIo::captured())
            .await
            .unwrap()
            .succeeded()
    );
    // All of it is written: the run's file of it is its size, not on disk.
    let kept_file = fx
        .paths(ws.run_id())
        .run_dir
        .join("command-output/0001.stdout");
    let meta = std::fs::metadata(&kept_file).unwrap();
    assert_eq!(meta.len(), 6 + total + 18);
    let on_disk = meta.blocks() * 512;
    assert!(on_disk <= cap + (6 << 20), "{on_disk} bytes on disk");

    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);
    let late = &report.outcome.late_output;
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(late[0].stdout_bytes, total + 18, "{late:?}");
    assert_eq!(late[0].stdout_truncated, kept(cap), "{late:?}");
    assert_eq!(late[0].not_kept_bytes, total + 18 - cap, "{late:?}");
    let bytes = std::fs::read(report.evidence.join("commands/0001/late.stdout")).unwrap();
    assert_eq!(bytes.len() as u64, cap);
    assert!(bytes.starts_with(b"LATE-BEGIN\0"), "{:?}", &bytes[..16]);
    assert!(bytes.ends_with(b"\0LATE-END"));
}

/// A background command (`exec --detach`) that logs far past the cap: its log
/// on the host is held to it as it is written, the evidence keeps its head
/// and tail, and `services.json` says how much it logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_commands_log_is_held_to_the_cap() {
    let fx = Fixture::new("output-log");
    let mut contract = fx.contract();
    let cap = 1 << 20;
    contract.environment.limits.output = Some(ByteSize(cap));
    let mut ws = fx
        .runner()
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    let total: u64 = 32 << 20;
    let script = format!("printf LOG-BEGIN; head -c {total} /dev/zero; printf LOG-END");
    let name = ws
        .start_background(&shell(&script, &marker("output-log")))
        .await
        .unwrap();
    let log = fx
        .paths(ws.run_id())
        .run_dir
        .join("services")
        .join(&name)
        .join("stdout");
    let logged = 9 + total + 7;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::metadata(&log).map_or(0, |m| m.len()) < logged {
        assert!(std::time::Instant::now() < deadline, "never logged it all");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let on_disk = std::fs::metadata(&log).unwrap().blocks() * 512;
    assert!(on_disk <= cap + (1 << 20), "{on_disk} bytes on disk");

    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);
    let kept = std::fs::read(report.evidence.join("services").join(&name).join("stdout")).unwrap();
    assert_eq!(kept.len() as u64, cap);
    assert!(kept.starts_with(b"LOG-BEGIN\0") && kept.ends_with(b"\0LOG-END"));
    let services = read_json(&report.evidence, "services.json");
    assert_eq!(
        services[0]["logs_truncated"]["stdout"],
        serde_json::json!({
            "total_bytes": logged,
            "truncated": {"head_bytes": cap / 2, "tail_bytes": cap / 2}
        }),
        "{services}"
    );
}
