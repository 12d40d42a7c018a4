//! Re-verifying a layered checkout's record against its directories.

use std::fs;
use std::path::Path;

use tempfile::TempDir;
use workspace_core::boundary::{LayersRecord, OriginRecord, SourceRecord};
use workspace_core::contract::Materialization;

use crate::source::SourceError;
use crate::source::layered::verify_layered;

const COMMIT: &str = "1111111111111111111111111111111111111111";
const TREE: &str = "2222222222222222222222222222222222222222";
const SECRET: &str = "ref: refs/heads/TOP-SECRET-host-content-91ac\n";

fn layered_record(dir: &Path) -> SourceRecord {
    let lower = dir.join("cache/trees").join(TREE).join("files");
    let run = dir.join("run");
    for path in [
        &lower,
        &run.join("upper/.git"),
        &run.join("work"),
        &run.join("merged"),
    ] {
        fs::create_dir_all(path).unwrap();
    }
    fs::write(run.join("upper/.git/HEAD"), format!("{COMMIT}\n")).unwrap();
    SourceRecord {
        repository: dir.join("source").display().to_string(),
        remote_urls: Vec::new(),
        commit: COMMIT.into(),
        tree: TREE.into(),
        origin: OriginRecord::Fresh,
        materialization: Materialization::Layered,
        workspace: run.join("merged"),
        layers: Some(LayersRecord {
            lower,
            upper: run.join("upper"),
            work: run.join("work"),
        }),
        submodules: Vec::new(),
        inputs: Vec::new(),
        initial_diff: String::new(),
        pinned: Vec::new(),
        objects: None,
    }
}

#[test]
fn source_layered_verify_refuses_a_planted_head_link_without_echoing_it() {
    let tmp = TempDir::new().unwrap();
    let record = layered_record(tmp.path());
    verify_layered(&record, false).unwrap();

    let sentinel = tmp.path().join("host-secret");
    fs::write(&sentinel, SECRET).unwrap();
    let head = record.layers.as_ref().unwrap().upper.join(".git/HEAD");
    fs::remove_file(&head).unwrap();
    std::os::unix::fs::symlink(&sentinel, &head).unwrap();
    for allow_rebase in [false, true] {
        let err = verify_layered(&record, allow_rebase).unwrap_err();
        assert!(
            matches!(err, SourceError::RestoreIncomplete { .. }),
            "{err:?}"
        );
        let shown = format!("{err} / {err:?}");
        assert!(!shown.contains("TOP-SECRET"), "{shown}");
    }
    // Not even the recorded commit is accepted through a link.
    fs::write(&sentinel, format!("{COMMIT}\n")).unwrap();
    assert!(verify_layered(&record, false).is_err());
    fs::write(&sentinel, SECRET).unwrap();

    // Content that is neither a commit id nor a ref is not repeated either.
    fs::remove_file(&head).unwrap();
    fs::write(&head, "TOP-SECRET garbage\n").unwrap();
    let err = verify_layered(&record, true).unwrap_err();
    assert!(
        !format!("{err} / {err:?}").contains("TOP-SECRET"),
        "{err:?}"
    );

    assert_eq!(fs::read_to_string(&sentinel).unwrap(), SECRET);
}
