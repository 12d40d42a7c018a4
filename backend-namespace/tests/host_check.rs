//! `check_host` on the real host: everything the reference machine has is reported Ok.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use backend_namespace::host_check::{Check, Status, check_host};

#[test]
fn every_check_is_ok_on_this_host() {
    let report = check_host();
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
    let landlock = report.finding(Check::Landlock).unwrap();
    assert!(landlock.detail.starts_with("Landlock ABI "), "{landlock}");
}
