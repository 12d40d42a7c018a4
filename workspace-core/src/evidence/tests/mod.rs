//! Tests of the evidence bundle: writing, sealing, and every kind of tampering.

use std::fs;
use std::io::Write;
use std::path::Path;

use serde_json::json;
use tempfile::TempDir;

use super::*;
use crate::RunId;

mod tamper;

pub(super) fn run_id() -> RunId {
    RunId::new("run-1").unwrap()
}

pub(super) fn start(argv: &[&str]) -> CommandStart {
    CommandStart {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: "/workspace".into(),
        started_unix_ms: 1_000,
        env_names: Vec::new(),
    }
}

pub(super) fn end(exit: ExitStatusRecord) -> CommandEnd {
    CommandEnd {
        exit,
        finished_unix_ms: 2_000,
        cause: None,
        usage: Default::default(),
        killed: None,
        output: None,
    }
}

pub(super) fn read_record(dir: &Path) -> CommandRecord {
    serde_json::from_slice(&fs::read(dir.join(COMMAND_FILE)).unwrap()).unwrap()
}

/// Writes every well-known file and two commands with streamed output, seals, and
/// returns the root (kept alive) and the run directory.
pub(super) fn full_bundle() -> (TempDir, std::path::PathBuf, Manifest) {
    let root = TempDir::new().unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    for file in EvidenceFile::ALL {
        match file {
            EvidenceFile::Diff => writer.write_bytes(file, b"--- a/x\n+++ b/x\n").unwrap(),
            EvidenceFile::Journal => {
                let journal = root.path().join("journal-src.jsonl");
                fs::write(&journal, b"{\"event\":\"created\"}\n").unwrap();
                writer.copy_file(file, &journal).unwrap();
                fs::remove_file(&journal).unwrap();
            }
            _ => writer
                .write_json(file, &json!({ "file": file.file_name() }))
                .unwrap(),
        }
    }

    let mut first = writer.start_command(start(&["cargo", "build"])).unwrap();
    assert_eq!(first.seq(), 1);
    for chunk in ["Compiling a\n", "Compiling b\n", "Finished\n"] {
        first.stdout_writer().write_all(chunk.as_bytes()).unwrap();
    }
    first.stderr_writer().write_all(b"warning: x\n").unwrap();
    let record = first.finish(end(ExitStatusRecord::Code(0))).unwrap();
    assert_eq!(record.stdout_bytes, Some(33));

    let second = writer.start_command(start(&["cargo", "test"])).unwrap();
    assert_eq!(second.seq(), 2);
    // Stream from another thread through an owned handle, in several chunks.
    let mut out = second.stdout_stream().unwrap();
    let mut err = second.stderr_stream().unwrap();
    std::thread::spawn(move || {
        for i in 0..5 {
            writeln!(out, "test t{i} ... ok").unwrap();
        }
        err.write_all(b"failed: none\n").unwrap();
    })
    .join()
    .unwrap();
    second.finish(end(ExitStatusRecord::Signal(9))).unwrap();

    writer
        .write_service_output("db", STDOUT_FILE, b"ready to accept connections\n")
        .unwrap();
    assert!(
        writer
            .write_service_output("../db", STDOUT_FILE, b"x")
            .is_err()
    );
    assert!(
        writer
            .write_service_output("db", "../stdout", b"x")
            .is_err()
    );

    let manifest = writer.seal().unwrap();
    let dir = writer.dir().to_path_buf();
    (root, dir, manifest)
}

#[test]
fn full_bundle_is_intact_and_manifest_lists_exactly_its_files() {
    let (_root, dir, manifest) = full_bundle();

    let mut expected: Vec<String> = EvidenceFile::ALL
        .iter()
        .map(|f| f.file_name().to_owned())
        .collect();
    for seq in ["0001", "0002"] {
        for name in [COMMAND_FILE, STDOUT_FILE, STDERR_FILE] {
            expected.push(format!("commands/{seq}/{name}"));
        }
    }
    expected.push(format!("services/db/{STDOUT_FILE}"));
    expected.sort();
    let listed: Vec<String> = manifest.files.keys().cloned().collect();
    assert_eq!(listed, expected);

    // The manifest on disk is what seal returned, and digests are real sha256.
    let on_disk: Manifest =
        serde_json::from_slice(&fs::read(dir.join(MANIFEST_FILE)).unwrap()).unwrap();
    assert_eq!(on_disk, manifest);
    assert_eq!((on_disk.version, on_disk.algorithm.as_str()), (1, "sha256"));
    let stdout = &manifest.files["commands/0001/stdout"];
    assert_eq!(stdout.bytes, 33);
    let diff = &manifest.files["diff.patch"];
    assert_eq!(diff.bytes, 16);

    // Output was streamed, in order, and the records carry the end.
    assert_eq!(
        fs::read_to_string(dir.join("commands/0001/stdout")).unwrap(),
        "Compiling a\nCompiling b\nFinished\n"
    );
    assert_eq!(
        fs::read_to_string(dir.join("commands/0002/stdout"))
            .unwrap()
            .lines()
            .count(),
        5
    );
    let first = read_record(&dir.join("commands/0001"));
    assert_eq!(first.argv, ["cargo", "build"]);
    assert_eq!(first.exit, ExitStatusRecord::Code(0));
    assert_eq!(first.finished_unix_ms, Some(2_000));
    assert_eq!(
        read_record(&dir.join("commands/0002")).exit,
        ExitStatusRecord::Signal(9)
    );

    let report = verify(&dir).unwrap();
    assert!(report.is_intact(), "{:?}", report.problems);
    assert_eq!(report.files_checked, expected.len());
    assert_eq!(report.files_checked, 21);
}

#[test]
fn sha256_hex_matches_a_known_vector() {
    let entry = manifest::hash_reader(&b"abc"[..], Path::new("abc")).unwrap();
    assert_eq!(
        entry.sha256,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(entry.bytes, 3);
}

#[test]
fn an_existing_run_dir_is_never_reused() {
    let root = TempDir::new().unwrap();
    let first = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    first.write_json(EvidenceFile::Contract, &json!(1)).unwrap();

    let err = EvidenceWriter::create(root.path(), &run_id()).unwrap_err();
    assert!(
        matches!(err, EvidenceError::AlreadyExists { .. }),
        "{err:?}"
    );
    assert_eq!(
        fs::read_to_string(first.path_of(EvidenceFile::Contract)).unwrap(),
        "1\n"
    );
}

#[test]
fn writes_after_seal_are_refused() {
    let root = TempDir::new().unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    writer.write_json(EvidenceFile::Checks, &json!([])).unwrap();
    writer.seal().unwrap();
    assert!(writer.is_sealed());

    let sealed = |r: Result<(), EvidenceError>| matches!(r, Err(EvidenceError::Sealed { .. }));
    assert!(sealed(writer.write_json(EvidenceFile::Checks, &json!([1]))));
    assert!(sealed(writer.write_bytes(EvidenceFile::Diff, b"x")));
    let journal = root.path().join("j");
    fs::write(&journal, b"x").unwrap();
    assert!(sealed(writer.copy_file(EvidenceFile::Journal, &journal)));
    assert!(sealed(writer.start_command(start(&["x"])).map(drop)));
    assert!(sealed(writer.seal().map(drop)));
    assert!(verify(writer.dir()).unwrap().is_intact());
}

/// A runner killed while it wrote or sealed leaves temp files: the next seal
/// (recovery's) neither describes them nor leaves them.
#[test]
fn a_seal_after_one_killed_midway_describes_only_the_bundle() {
    let root = TempDir::new().unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    writer.write_json(EvidenceFile::Checks, &json!([])).unwrap();
    let recorder = writer.start_command(start(&["true"])).unwrap();
    drop(recorder);
    let stale = [
        writer.dir().join(".manifest.json.tmp"),
        writer.dir().join(".outcome.json.tmp"),
        writer.dir().join("commands/0001/.command.json.tmp"),
    ];
    for path in &stale {
        fs::write(path, b"{\"torn").unwrap();
    }

    let manifest = writer.seal().unwrap();

    assert!(
        manifest.files.keys().all(|name| !name.ends_with(".tmp")),
        "{:?}",
        manifest.files.keys()
    );
    assert!(stale.iter().all(|path| !path.exists()));
    assert!(verify(writer.dir()).unwrap().is_intact());
}

#[test]
fn seal_waits_for_open_recorders_and_streams() {
    let root = TempDir::new().unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    let recorder = writer.start_command(start(&["sleep"])).unwrap();
    let stream = recorder.stdout_stream().unwrap();
    let open = |r| matches!(r, Err(EvidenceError::CommandsStillOpen { open: n, .. }) if n > 0);
    assert!(open(writer.seal()));
    recorder.finish(end(ExitStatusRecord::Code(0))).unwrap();
    assert!(open(writer.seal()));
    drop(stream);
    writer.seal().unwrap();
}

#[cfg(unix)]
#[test]
fn copy_file_refuses_a_symlink_source() {
    let root = TempDir::new().unwrap();
    let real = root.path().join("journal.jsonl");
    fs::write(&real, b"{}\n").unwrap();
    let link = root.path().join("link.jsonl");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();

    let err = writer.copy_file(EvidenceFile::Journal, &link).unwrap_err();
    assert!(
        matches!(&err, EvidenceError::NotRegularFile { path } if path == &link),
        "{err:?}"
    );
    assert!(!writer.path_of(EvidenceFile::Journal).exists());
    // Positive control: the real file is copied.
    writer.copy_file(EvidenceFile::Journal, &real).unwrap();
    assert_eq!(
        fs::read(writer.path_of(EvidenceFile::Journal)).unwrap(),
        b"{}\n"
    );
}

#[cfg(unix)]
#[test]
fn seal_refuses_a_symlink_inside_the_bundle() {
    let root = TempDir::new().unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", writer.dir().join("planted")).unwrap();
    let err = writer.seal().unwrap_err();
    assert!(
        matches!(&err, EvidenceError::NotRegularFile { path } if path.ends_with("planted")),
        "{err:?}"
    );
    assert!(!writer.is_sealed());
}

#[test]
fn a_recorder_dropped_without_finish_leaves_exit_unknown() {
    let root = TempDir::new().unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    let mut recorder = writer.start_command(start(&["make"])).unwrap();
    let dir = recorder.dir().to_path_buf();
    // command.json exists from the start.
    assert_eq!(read_record(&dir).argv, ["make"]);
    recorder.stdout_writer().write_all(b"partial").unwrap();
    drop(recorder);

    let record = read_record(&dir);
    assert_eq!(record.exit, ExitStatusRecord::Unknown);
    assert_eq!(record.finished_unix_ms, None);
    assert!(record.cause.is_some());
    assert_eq!(record.stdout_bytes, Some(7));
    writer.seal().unwrap();
    assert!(verify(writer.dir()).unwrap().is_intact());
}

#[test]
fn a_check_is_named_in_its_record_and_an_old_record_reads_without_one() {
    let root = TempDir::new().unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    let mut recorder = writer.start_command(start(&["make", "test"])).unwrap();
    let dir = recorder.dir().to_path_buf();
    recorder.stdout_writer().write_all(b"ok\n").unwrap();
    recorder.finish(end(ExitStatusRecord::Code(0))).unwrap();
    assert_eq!(read_record(&dir).check, None);

    writer.mark_check(1, "tests").unwrap();
    let record = read_record(&dir);
    assert_eq!(record.check.as_deref(), Some("tests"));
    // The rest of the record is as the recorder left it.
    assert_eq!(record.exit, ExitStatusRecord::Code(0));
    assert_eq!(record.stdout_bytes, Some(3));
    writer.seal().unwrap();
    assert!(verify(writer.dir()).unwrap().is_intact());
    assert!(matches!(
        writer.mark_check(1, "tests"),
        Err(EvidenceError::Sealed { .. })
    ));

    // A record written before checks were named reads as the caller's command.
    let mut old = serde_json::to_value(&record).unwrap();
    old.as_object_mut().unwrap().remove("check");
    let old: CommandRecord = serde_json::from_value(old).unwrap();
    assert_eq!(old.check, None);
}

#[test]
fn a_truncated_stream_is_recorded_with_its_total_and_what_was_kept() {
    let root = TempDir::new().unwrap();
    let writer = EvidenceWriter::create(root.path(), &run_id()).unwrap();
    let mut recorder = writer.start_command(start(&["yes"])).unwrap();
    let dir = recorder.dir().to_path_buf();
    recorder.stdout_writer().write_all(b"y\ny\n").unwrap();
    let kept = HeadTail {
        head_bytes: 2,
        tail_bytes: 2,
    };
    let output = OutputTally {
        stdout: StreamTally {
            total_bytes: 1 << 30,
            truncated: Some(kept),
        },
        stderr: StreamTally::default(),
    };
    recorder
        .finish(CommandEnd {
            output: Some(output),
            ..end(ExitStatusRecord::Code(0))
        })
        .unwrap();

    let record = read_record(&dir);
    assert_eq!(record.stdout_bytes, Some(1 << 30));
    assert_eq!(record.stdout_truncated, Some(kept));
    assert_eq!(
        (record.stderr_bytes, record.stderr_truncated),
        (Some(0), None)
    );
    let json: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join(COMMAND_FILE)).unwrap()).unwrap();
    assert_eq!(
        json["stdout_truncated"],
        json!({"head_bytes": 2, "tail_bytes": 2})
    );
    assert!(json.get("stderr_truncated").is_none(), "{json}");
}

#[test]
fn a_record_written_before_streams_were_capped_still_reads() {
    let old = json!({
        "seq": 1, "argv": ["true"], "cwd": ".", "started_unix_ms": 1,
        "finished_unix_ms": 2, "exit": {"kind": "code", "value": 0},
        "cause": null, "stdout_bytes": 3, "stderr_bytes": 0
    });
    let record: CommandRecord = serde_json::from_value(old).unwrap();
    assert_eq!(record.stdout_bytes, Some(3));
    assert_eq!(record.stdout_truncated, None);
}

#[test]
fn exit_status_is_tagged_in_json() {
    assert_eq!(
        serde_json::to_value(ExitStatusRecord::Code(3)).unwrap(),
        json!({ "kind": "code", "value": 3 })
    );
    assert_eq!(
        serde_json::to_value(ExitStatusRecord::NotStarted).unwrap(),
        json!({ "kind": "not_started" })
    );
}

#[cfg(target_os = "linux")]
/// The file system type `/proc/self/mountinfo` names for the mount holding
/// `dir` (the longest mount point that is an ancestor of it).
fn mount_type_of(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap();
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = Path::new(fields.get(4)?);
            let separator = fields.iter().position(|f| *f == "-")?;
            let kind = fields.get(separator + 1)?.to_string();
            dir.starts_with(point)
                .then_some((point.as_os_str().len(), kind))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, kind)| kind)
        .unwrap()
}

/// A bundle on a memory file system is sealed without syncing (nothing there
/// outlives the host) and verifies as one on a disk does; the file system is
/// told apart as the mount table says.
#[cfg(target_os = "linux")]
#[test]
fn a_bundle_on_a_memory_file_system_seals_and_verifies() {
    let shm = Path::new("/dev/shm");
    assert_eq!(
        mount_type_of(shm),
        "tmpfs",
        "this test needs /dev/shm to be a tmpfs (as every Linux host mounts it)"
    );
    let on_disk = TempDir::new().unwrap();
    let in_memory = TempDir::new_in(shm).unwrap();
    for root in [on_disk.path(), in_memory.path()] {
        assert_eq!(
            atomic::in_memory(root),
            mount_type_of(root) == "tmpfs",
            "{}",
            root.display()
        );
        let writer = EvidenceWriter::create(root, &run_id()).unwrap();
        writer
            .write_json(EvidenceFile::Outcome, &json!({"ok": true}))
            .unwrap();
        let manifest = writer.seal().unwrap();
        assert!(manifest.files.contains_key("outcome.json"));
        let report = verify(&root.join("run-1")).unwrap();
        assert!(report.problems.is_empty(), "{report:?}");
    }
}
