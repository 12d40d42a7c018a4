//! A journal whose writer is SIGKILLed mid-stream keeps every confirmed record,
//! synced or only written (a dead process's writes are the kernel's).
//!
//! This test lives in its own test binary: it spawns a child process, and a child
//! forked while another test of the same binary drops a file lock would share that
//! lock's open file description until it calls `exec`, so lock-release assertions
//! elsewhere could see it for a moment. The child is this very binary, re-executed
//! with [`CRASH_CHILD_ENV`] set: [`main`] then runs [`crash_child_appends_until_killed`]
//! only. Otherwise (`harness = false`, see [`harness`]) [`main`] runs the test case
//! and reports it as libtest does.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod harness;

use std::io::{self, BufRead, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tempfile::TempDir;
use workspace_core::RunId;
use workspace_core::journal::{Journal, JournalRead, is_held, read};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Ev {
    Step { n: u32 },
    Note(String),
}

fn run(id: &str) -> RunId {
    RunId::new(id).unwrap()
}

/// The environment variable that turns [`crash_child_appends_until_killed`] into
/// the child of [`records_survive_sigkill_of_the_appender`].
const CRASH_CHILD_ENV: &str = "WORKSPACE_CORE_JOURNAL_CRASH_CHILD_PATH";
/// What the child prints before each confirmed seq.
const SEQ_MARKER: &str = "journal-crash-child-appended=";
const CRASH_RUN: &str = "crash-run";
/// Bounds the child's loop in case nobody kills it.
const CHILD_MAX_APPENDS: u32 = 1_000_000;
/// How many confirmed seqs the parent waits for before killing the child.
const SEQS_BEFORE_KILL: usize = 50;
/// Only a guard against a hung child, never a performance assertion.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn main() -> ExitCode {
    if let Some(path) = std::env::var_os(CRASH_CHILD_ENV) {
        crash_child_appends_until_killed(Path::new(&path));
        return ExitCode::SUCCESS;
    }
    harness::run(harness::cases![records_survive_sigkill_of_the_appender])
}

/// The child process of the crash test: appends to the journal at `path` until
/// killed.
fn crash_child_appends_until_killed(path: &Path) {
    let mut journal = Journal::<Ev>::create(path, run(CRASH_RUN)).unwrap();
    // Large records make it likelier that the kill lands inside a write.
    let payload = "x".repeat(16 * 1024);
    let mut out = io::stdout().lock();
    for n in 0..CHILD_MAX_APPENDS {
        let event = if n % 2 == 0 {
            Ev::Step { n }
        } else {
            Ev::Note(payload.clone())
        };
        // Two of three records unsynced, as most lifecycle transitions are.
        let seq = if n % 3 == 0 {
            journal.append(&event)
        } else {
            journal.append_unsynced(&event)
        }
        .unwrap();
        writeln!(out, "{SEQ_MARKER}{seq}").unwrap();
        out.flush().unwrap();
    }
}

/// Kills and reaps the child when dropped, so a failed assertion leaves no orphan.
struct KillOnDrop(Child);

impl KillOnDrop {
    fn kill_and_wait(&mut self) {
        // Fails only if the child already exited; either way it is gone after wait.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill_and_wait();
    }
}

fn records_survive_sigkill_of_the_appender() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("crash-run.jsonl");
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .env(CRASH_CHILD_ENV, &path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );

    // A thread forwards every confirmed seq; a line without its '\n' is ignored
    // (it could be a cut-off number). The marker is searched, not anchored, so
    // nothing else printed on its line hides it.
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<u64>();
    let reader = std::thread::spawn(move || {
        let mut stdout = io::BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            match stdout.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if !line.ends_with('\n') => return,
                Ok(_) => {}
            }
            if let Some((_, seq)) = line.trim_end().split_once(SEQ_MARKER) {
                let seq = seq.parse().expect("the child prints a number");
                if tx.send(seq).is_err() {
                    return;
                }
            }
        }
    });

    let mut reported = Vec::new();
    while reported.len() < SEQS_BEFORE_KILL {
        match rx.recv_timeout(HANG_GUARD) {
            Ok(seq) => reported.push(seq),
            Err(e) => {
                child.kill_and_wait();
                let mut stderr = String::new();
                if let Some(mut err) = child.0.stderr.take() {
                    let _ = err.read_to_string(&mut stderr);
                }
                panic!(
                    "child stopped after {} seqs ({e:?}); stderr:\n{stderr}",
                    reported.len()
                );
            }
        }
    }
    // Positive control: the live child owns the run.
    assert!(is_held(&path).unwrap(), "the live child holds the lock");
    child.kill_and_wait();
    // The child is dead, so its stdout reaches EOF and the channel disconnects;
    // collect what it printed between our last read and the kill.
    for _ in 0..CHILD_MAX_APPENDS {
        match rx.recv_timeout(HANG_GUARD) {
            Ok(seq) => reported.push(seq),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(e) => panic!("the dead child's stdout did not close: {e:?}"),
        }
    }
    reader.join().unwrap();
    let expected: Vec<u64> = (0..reported.len() as u64).collect();
    assert_eq!(reported, expected, "the child reports every seq in order");

    // The kernel dropped the dead child's lock.
    assert!(!is_held(&path).unwrap());

    // Every confirmed record is there; at most one more (appended, not yet
    // reported) and at most a torn last line.
    let got: JournalRead<Ev> = read(&path).unwrap();
    let n = got.records.len();
    assert!(
        n == reported.len() || n == reported.len() + 1,
        "{n} records, {} reported",
        reported.len()
    );
    for (i, r) in got.records.iter().enumerate() {
        assert_eq!(r.seq, i as u64);
        assert_eq!(r.run_id, run(CRASH_RUN));
    }
    let file_len = std::fs::metadata(&path).unwrap().len();
    if let Some(torn) = got.torn_tail {
        assert_eq!(
            torn.offset + torn.bytes,
            file_len,
            "the torn line is the last"
        );
    }

    // Recovery takes over and the sequence continues.
    let (mut j, rec) = Journal::<Ev>::open_for_recovery(&path, run(CRASH_RUN)).unwrap();
    assert_eq!(rec, got);
    let next = j.append(&Ev::Note("recovered".into())).unwrap();
    assert_eq!(next, n as u64);
    drop(j);
    let after: JournalRead<Ev> = read(&path).unwrap();
    assert_eq!(after.torn_tail, None);
    assert_eq!(after.records.len(), n + 1);
    assert_eq!(after.records[n].event, Ev::Note("recovered".into()));
}
