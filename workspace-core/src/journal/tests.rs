//! Journal tests. The crash test (a writer SIGKILLed mid-stream) is in `tests/journal_crash.rs`.
use std::io;

use serde::Deserialize;

use super::*;
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
fn shared_holders_coexist_and_keep_owners_out_until_the_last_lets_go() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("run-s.jsonl");
    drop(journal_with(&path, "run-s", 2));
    let first = SharedHold::try_take(&path).unwrap();
    let second = SharedHold::try_take(&path).unwrap();
    assert!(is_held(&path).unwrap());
    match Journal::<Ev>::open_for_recovery(&path, run("run-s")) {
        Err(JournalError::Held { path: p }) => assert_eq!(p, path),
        other => panic!("expected Held, got {other:?}"),
    }
    drop(first);
    assert!(is_held(&path).unwrap(), "one holder is still there");
    drop(second);
    let (owner, got) = Journal::<Ev>::open_for_recovery(&path, run("run-s")).unwrap();
    assert_eq!(got.records.len(), 2);
    // An owner keeps every shared holder out in turn.
    match SharedHold::try_take(&path) {
        Err(JournalError::Held { path: p }) => assert_eq!(p, path),
        other => panic!("expected Held, got {other:?}"),
    }
    drop(owner);
    SharedHold::try_take(&path).unwrap();
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
