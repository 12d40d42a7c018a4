//! `check_host` on the real host: everything the reference machine has is reported Ok.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use std::time::Instant;

use backend_namespace::host_check::{Check, Status, check_host, check_idmapped_mounts};

#[test]
fn every_check_is_ok_on_this_host() {
    let report = check_host("agent-workspace");
    // The duration is logged, not asserted (see the module docs for the measurement).
    println!("check_host took {} us", report.elapsed_us);
    assert_eq!(report.findings.len(), Check::ALL.len());
    for (finding, check) in report.findings.iter().zip(Check::ALL) {
        assert_eq!(finding.check, check);
        println!("{finding}");
    }
    let gaps: Vec<String> = report
        .findings
        .iter()
        .filter(|f| f.status != Status::Ok)
        .map(ToString::to_string)
        .collect();
    assert!(
        gaps.is_empty(),
        "findings not Ok on this host:\n{}",
        gaps.join("\n")
    );
    assert_eq!(report.is_ready_for(&Check::ALL), Ok(()));
    assert_eq!(report.is_ready_for(&Check::REQUIRED_LAYERED), Ok(()));
    let landlock = report.finding(Check::Landlock).unwrap();
    assert!(landlock.detail.starts_with("Landlock ABI "), "{landlock}");
}

/// The reference host (root, kernel 6.18, ext4 root) makes the idmapped mount for
/// real; a directory on another file system is probed the same way.
#[test]
fn idmapped_mounts_are_probed_for_real() {
    let report = check_host("agent-workspace");
    let finding = report.finding(Check::IdmappedMounts).unwrap();
    assert_eq!(finding.status, Status::Ok, "{finding}");
    assert!(
        finding
            .detail
            .contains("made a detached idmapped mount of / in a probe"),
        "{finding}"
    );

    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let start = Instant::now();
    let at = check_idmapped_mounts(dir.path());
    println!("{at} ({} us)", start.elapsed().as_micros());
    assert_eq!(at.status, Status::Ok, "{at}");

    // Not there: open_tree fails, and the finding says which step and why.
    let gone = check_idmapped_mounts(&dir.path().join("absent"));
    assert_eq!(gone.status, Status::Missing, "{gone}");
    assert!(gone.detail.contains("open_tree(OPEN_TREE_CLONE)"), "{gone}");
    assert!(gone.detail.contains("ENOENT"), "{gone}");
    assert!(!gone.remediation.is_empty(), "{gone}");
}
