//! The conformance kit on this project's stacks: the namespace backend keeps
//! every promise it declares; the reference stack with no isolation breaks
//! exactly the ones isolation keeps (which is what shows the kit can fail).
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test), and
//! git.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::sync::Arc;

use agent_workspace::core::conformance::{self, CASES, Kit, MakeStack, Verdict};
use support::Fixture;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_namespace_backend_passes_every_case() {
    let fixture = Fixture::new("conformance");
    let parent = fixture.cgroup_parent.clone();
    let kit = Kit::new(move |scratch| {
        agent_workspace::namespace_stack_layered(&parent, scratch.join("trees"), 1 << 30)
            .map_err(|e| e.to_string())
    });
    let results = kit.run_all().await;
    let names: Vec<&str> = results.iter().map(|r| r.name).collect();
    assert_eq!(names, CASES);
    for result in &results {
        assert_eq!(result.verdict, Verdict::Passed, "{}", result.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_backend_passes_every_case() {
    let fixture = Fixture::new("conformance-container");
    let parent = fixture.cgroup_parent.clone();
    let kit = Kit::new(move |scratch| {
        agent_workspace::container_stack(&parent, Some("runc"), &scratch.join("runc-state"))
            .map_err(|e| format!("{e} (install runc: apt-get install runc)"))
    });
    let results = kit.run_all().await;
    let names: Vec<&str> = results.iter().map(|r| r.name).collect();
    assert_eq!(names, CASES);
    let not_passed: Vec<_> = results
        .iter()
        .filter(|r| r.verdict != Verdict::Passed)
        .collect();
    assert!(not_passed.is_empty(), "{not_passed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_without_isolation_fails_what_isolation_keeps() {
    let kit = Kit::new(|_| Ok(agent_workspace::danger_no_isolation_stack()));
    let results = kit.run_all().await;
    let failed: Vec<&str> = results
        .iter()
        .filter(|r| matches!(r.verdict, Verdict::Failed { .. }))
        .map(|r| r.name)
        .collect();
    assert_eq!(
        failed,
        [
            "path-scope",
            "concurrency",
            "credential",
            "escape-signal",
            "escape-symlink",
            "escape-proc-root",
            "escape-hardlink"
        ],
        "{results:#?}"
    );
    // What does not need isolation it keeps: the checkout, resume, the patch.
    for name in ["snapshot", "resume", "promotion"] {
        let result = results.iter().find(|r| r.name == name).unwrap();
        assert_eq!(result.verdict, Verdict::Passed, "{name}: {results:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_case_the_stacks_capabilities_rule_out_is_unsupported_and_says_why() {
    let make: MakeStack = Arc::new(|_| {
        Ok(support::gates::without_promotion_targets(
            agent_workspace::danger_no_isolation_stack(),
        ))
    });
    match conformance::promotion(&make).await {
        Verdict::Unsupported { reason } => assert!(reason.contains("patch"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // A public function is the case the kit runs by name.
    let plain: MakeStack = Arc::new(|_| Ok(agent_workspace::danger_no_isolation_stack()));
    assert_eq!(conformance::snapshot(&plain).await, Verdict::Passed);
}

#[test]
fn an_unknown_case_fails_saying_so() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let kit = Kit::new(|_| Ok(agent_workspace::danger_no_isolation_stack()));
    let result = runtime.block_on(kit.run("no-such-case"));
    match result.verdict {
        Verdict::Failed { observed } => assert!(observed.contains("no-such-case"), "{observed}"),
        other => panic!("{other:?}"),
    }
}
