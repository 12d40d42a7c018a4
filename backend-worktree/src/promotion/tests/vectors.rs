//! Planted execution vectors never run: a workspace's `.git/config`, attributes and
//! hooks (and the source repository's hooks) name commands that would each create a
//! marker file; exporting, computing changes and promoting create none. The positive
//! control shows the same plants do run under the git CLI.

use std::fs;
use std::path::Path;

use workspace_core::contract::Approval;

use super::review::{check, contract, edit};
use crate::changes::tests::fixture::{Fixture, git_output, set_executable};
use crate::changes::{ChangeOptions, workspace_changes};
use crate::promotion::{create_review_branch, export_patch, mark_merge_candidate};
use workspace_core::RunId;
use workspace_core::boundary::{ApprovalRecord, PromotionRequest};

const HOOKS: &[&str] = &[
    "pre-commit",
    "post-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
    "fsmonitor-watchman",
];

fn plant(fx: &Fixture, markers: &Path) {
    let m = |name: &str| markers.join(name).display().to_string();
    let hooks_path = fx.dir.path().join("planted-hooks");
    fs::create_dir_all(&hooks_path).unwrap();
    let config = format!(
        "[core]\n\tfsmonitor = \"touch {fsmonitor}\"\n\thooksPath = {hooks}\n\
         [diff]\n\texternal = \"touch {external} #\"\n\
         [filter \"x\"]\n\tclean = \"touch {clean} && cat\"\n\tsmudge = \"touch {smudge} && cat\"\n\
         \tprocess = \"touch {process}\"\n\
         [diff \"x\"]\n\ttextconv = \"touch {textconv} && cat\"\n\tcommand = \"touch {command} #\"\n",
        fsmonitor = m("fsmonitor"),
        hooks = hooks_path.display(),
        external = m("diff-external"),
        clean = m("filter-clean"),
        smudge = m("filter-smudge"),
        process = m("filter-process"),
        textconv = m("textconv"),
        command = m("diff-command"),
    );
    let git_config = fx.ws(".git/config");
    let mut existing = fs::read_to_string(&git_config).unwrap();
    existing.push_str(&config);
    fs::write(&git_config, existing).unwrap();
    fx.write(".gitattributes", b"* filter=x diff=x\n");
    fs::write(fx.ws(".git/info/attributes"), b"* filter=x diff=x\n").unwrap();
    for (dir, prefix) in [
        (fx.ws(".git/hooks"), "ws-hook"),
        (hooks_path.clone(), "ws-hooks-path"),
        (fx.source.join(".git/hooks"), "source-hook"),
    ] {
        fs::create_dir_all(&dir).unwrap();
        for hook in HOOKS {
            let path = dir.join(hook);
            fs::write(
                &path,
                format!("#!/bin/sh\ntouch {}\n", m(&format!("{prefix}-{hook}"))),
            )
            .unwrap();
            set_executable(&path, true);
        }
    }
}

fn markers_in(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found
}

#[test]
fn promotion_planted_vectors_never_run() {
    let fx = Fixture::new();
    let markers = fx.dir.path().join("markers");
    fs::create_dir(&markers).unwrap();
    edit(&fx);
    plant(&fx, &markers);

    let options = ChangeOptions::default();
    let changes = workspace_changes(&fx.source, &fx.base, &fx.workspace, &options).unwrap();
    assert!(!changes.is_empty());
    let export =
        export_patch(&fx.source, &fx.base, &fx.workspace, &[".".into()], &options).unwrap();
    let digest = export.patch_sha256.clone();
    let c = contract(&["test"], Approval::Human);
    let request = PromotionRequest {
        patch_sha256: digest.clone(),
        checks: vec![check("test", true, &digest)],
        approvals: vec![ApprovalRecord {
            approver: "reviewer".into(),
            patch_sha256: digest.clone(),
            at_unix_ms: 1,
            recorded_by: None,
        }],
    };
    let run = RunId::new("run-vectors").unwrap();
    let record = create_review_branch(
        &fx.source,
        &run,
        &fx.base,
        &fx.workspace,
        &export,
        &[".".into()],
        &request,
        &c,
    )
    .unwrap();
    mark_merge_candidate(&fx.source, &run, &record, &request, &c).unwrap();
    assert_eq!(
        markers_in(&markers),
        Vec::<String>::new(),
        "a planted command ran"
    );

    // Positive control: the git CLI in the workspace does run the plants.
    for args in [&["status"][..], &["diff"][..], &["add", "-A"][..]] {
        let _ = git_output(&fx.workspace, args);
    }
    let ran = markers_in(&markers);
    assert!(
        ran.iter()
            .any(|m| m == "filter-clean" || m == "filter-process" || m == "fsmonitor"),
        "the plants are not live, the test proves nothing: {ran:?}"
    );
}
