//! Journal tests, including a child process SIGKILLed mid-append.
use super::*;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use tempfile::TempDir;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum Ev {
    Step { n: u32 },
    Note(String),
}

fn run(id: &str) -> RunId {
    RunId::new(id).unwrap()
}

fn journal_with(path: &Path, id: &str, n: u32) -> Journal<Ev> {
    let mut j = Journal::create(path, run(id)).unwrap();
    for i in 0..n {
        assert_eq!(j.append(&Ev::Step { n: i }).unwrap(), u64::from(i));
    }
    j
}

#[test]
fn append_then_read_round_trips_with_contiguous_seq() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("run-1.jsonl");
    let mut j = journal_with(&path, "run-1", 3);
    assert_eq!(j.append(&Ev::Note("done".into())).unwrap(), 3);
    assert_eq!(j.next_seq(), 4);

    let got: JournalRead<Ev> = read(&path).unwrap();
    assert_eq!(got.torn_tail, None);
    assert_eq!(got.run_id(), Some(&run("run-1")));
    let events: Vec<_> = got.records.iter().map(|r| r.event.clone()).collect();
    assert_eq!(
        events,
        [
            Ev::Step { n: 0 },
            Ev::Step { n: 1 },
            Ev::Step { n: 2 },
            Ev::Note("done".into())
        ]
    );
    for (i, r) in got.records.iter().enumerate() {
        assert_eq!(r.seq, i as u64);
        assert_eq!(r.run_id, run("run-1"));
        assert!(r.at_unix_ms > 0);
    }
    // One record per line, each line a complete JSON object.
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(text.ends_with('\n'));
}

#[test]
fn the_lock_marks_a_live_owner() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("run-2.jsonl");
    let j = journal_with(&path, "run-2", 1);

    let again = Journal::<Ev>::create(&path, run("run-2")).unwrap_err();
    match again {
        JournalError::Create { source, .. } => {
            assert_eq!(source.kind(), io::ErrorKind::AlreadyExists)
        }
        other => panic!("expected Create, got {other:?}"),
    }
    assert!(is_held(&path).unwrap());
    match Journal::<Ev>::open_for_recovery(&path, run("run-2")) {
        Err(JournalError::Held { path: p }) => assert_eq!(p, path),
        other => panic!("expected Held, got {other:?}"),
    }
    // The failed attempts did not disturb the owner.
    assert!(is_held(&path).unwrap());

    drop(j);
    assert!(!is_held(&path).unwrap());
    let (_j, got) = Journal::<Ev>::open_for_recovery(&path, run("run-2")).unwrap();
    assert_eq!(got.records.len(), 1);
    assert!(is_held(&path).unwrap());
}

#[test]
fn a_torn_tail_is_reported_then_truncated_by_recovery() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("run-3.jsonl");
    drop(journal_with(&path, "run-3", 3));
    let good_len = std::fs::metadata(&path).unwrap().len();
    let garbage = br#"{"seq":3,"run_id":"run-3","at_unix"#;
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(garbage)
        .unwrap();

    let got: JournalRead<Ev> = read(&path).unwrap();
    assert_eq!(got.records.len(), 3);
    let torn = TornTail {
        offset: good_len,
        bytes: garbage.len() as u64,
    };
    assert_eq!(got.torn_tail, Some(torn));
    // Reading does not modify the file.
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        good_len + garbage.len() as u64
    );

    let (mut j, rec) = Journal::<Ev>::open_for_recovery(&path, run("run-3")).unwrap();
    assert_eq!(rec.torn_tail, Some(torn));
    assert_eq!(rec.records.len(), 3);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
    assert_eq!(j.append(&Ev::Note("recovered".into())).unwrap(), 3);
    drop(j);

    let got: JournalRead<Ev> = read(&path).unwrap();
    assert_eq!(got.torn_tail, None);
    assert_eq!(got.records.len(), 4);
    assert_eq!(got.records[3].seq, 3);
    assert_eq!(got.records[3].event, Ev::Note("recovered".into()));
}

#[test]
fn a_complete_but_unparseable_last_line_is_a_torn_tail() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("run-4.jsonl");
    drop(journal_with(&path, "run-4", 2));
    let good_len = std::fs::metadata(&path).unwrap().len();
    let garbage = b"\0\0\0\0\n";
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(garbage)
        .unwrap();
    let got: JournalRead<Ev> = read(&path).unwrap();
    assert_eq!(got.records.len(), 2);
    assert_eq!(
        got.torn_tail,
        Some(TornTail {
            offset: good_len,
            bytes: garbage.len() as u64
        })
    );
}

/// Rewrites line `index` (0-based) of the journal at `path` to `replacement`.
fn replace_line(path: &Path, index: usize, replacement: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[index] = replacement;
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn corrupt_line(result: Result<JournalRead<Ev>, JournalError>) -> (u64, Corruption) {
    match result {
        Err(JournalError::Corrupt { line, reason, .. }) => (line, reason),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn corruption_in_the_middle_is_an_error_naming_the_line() {
    let dir = TempDir::new().unwrap();

    // A middle line that does not parse; the file also has a torn tail, which must
    // not hide the corruption.
    let path = dir.path().join("garbled.jsonl");
    drop(journal_with(&path, "run-5", 4));
    replace_line(&path, 1, "{not json");
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"{\"seq\"")
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let (line, reason) = corrupt_line(read(&path));
    assert_eq!(line, 2);
    assert!(
        matches!(reason, Corruption::Unparseable { .. }),
        "{reason:?}"
    );
    // Recovery refuses too, and leaves the file as it was.
    let rec = Journal::<Ev>::open_for_recovery(&path, run("run-5")).map(|(_, r)| r);
    assert_eq!(corrupt_line(rec).0, 2);
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // A gap in the sequence.
    let path = dir.path().join("gap.jsonl");
    drop(journal_with(&path, "run-5", 3));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&path, format!("{}\n{}\n", lines[0], lines[2])).unwrap();
    let (line, reason) = corrupt_line(read(&path));
    assert_eq!(line, 2);
    assert!(
        matches!(
            reason,
            Corruption::SeqGap {
                expected: 1,
                found: 2
            }
        ),
        "{reason:?}"
    );

    // A record of another run, with the right seq.
    let path = dir.path().join("mixed.jsonl");
    let other = dir.path().join("other.jsonl");
    drop(journal_with(&path, "run-5", 3));
    drop(journal_with(&other, "run-6", 3));
    let other_text = std::fs::read_to_string(&other).unwrap();
    replace_line(&path, 1, other_text.lines().nth(1).unwrap());
    let (line, reason) = corrupt_line(read(&path));
    assert_eq!(line, 2);
    assert!(
        matches!(&reason, Corruption::ForeignRunId { expected, found }
            if *expected == run("run-5") && *found == run("run-6")),
        "{reason:?}"
    );
    // Recovery checks the run id it was given, from the first record on.
    let rec = Journal::<Ev>::open_for_recovery(&other, run("run-5")).map(|(_, r)| r);
    assert_eq!(corrupt_line(rec).0, 1);
}

#[test]
fn a_poisoned_journal_refuses_appends() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("run-7.jsonl");
    let mut j = journal_with(&path, "run-7", 1);
    j.poisoned = true;
    assert!(matches!(
        j.append(&Ev::Step { n: 1 }),
        Err(JournalError::Poisoned { .. })
    ));
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

/// Not a test on its own: does nothing unless [`CRASH_CHILD_ENV`] is set, in which
/// case it is the child process of the crash test and appends until killed.
#[test]
fn crash_child_appends_until_killed() {
    let Some(path) = std::env::var_os(CRASH_CHILD_ENV) else {
        return;
    };
    let mut journal = Journal::<Ev>::create(&path, run(CRASH_RUN)).unwrap();
    // Large records make it likelier that the kill lands inside a write.
    let payload = "x".repeat(16 * 1024);
    let mut out = io::stdout().lock();
    for n in 0..CHILD_MAX_APPENDS {
        let event = if n % 2 == 0 {
            Ev::Step { n }
        } else {
            Ev::Note(payload.clone())
        };
        let seq = journal.append(&event).unwrap();
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

#[test]
fn records_survive_sigkill_of_the_appender() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("crash-run.jsonl");
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "journal::tests::crash_child_appends_until_killed",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_CHILD_ENV, &path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );

    // A thread forwards every confirmed seq; a line without its '\n' is ignored
    // (it could be a cut-off number). libtest may print its own text on the same
    // line as the first marker, so the marker is searched, not anchored.
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
