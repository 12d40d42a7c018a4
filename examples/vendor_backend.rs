//! A boundary written outside this project's crates, composed into a stack and
//! run through the conformance kit: the way to plug in a backend.
//!
//! ```text
//! cargo run --example vendor_backend
//! ```
//!
//! Runs as root on Linux (the rest of the stack is the namespace backend).
//! `VendorEnvironment` is what a tool vendor would write: an Environment
//! boundary that seeds each run with a fixture from the vendor's store (here a
//! dataset location and its version, as variables), on top of the namespace
//! backend's environment. It is swapped into the default stack, and the kit
//! checks that the composed stack still keeps every promise: one line per case,
//! exit 1 if any failed.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;

use agent_workspace::core::boundary::{
    BoundaryError, EnvironmentBoundary, EnvironmentCapabilities, EnvironmentPlan, RunContext,
};
use agent_workspace::core::conformance::{Kit, Verdict};
use agent_workspace::namespace::cgroup::{CgroupLayout, remove_parent};
use agent_workspace::namespace::environment::NamespaceEnvironment;
use async_trait::async_trait;

/// The vendor's fixture store: what each run is seeded with.
#[derive(Clone, Debug)]
struct FixtureStore {
    entries: BTreeMap<String, String>,
}

/// The vendor's Environment boundary: the namespace backend's environment, plus
/// the store's fixture for every run (its variables, and its version in the
/// environment's fingerprint, so the evidence says which fixture a run had).
#[derive(Debug)]
struct VendorEnvironment {
    inner: NamespaceEnvironment,
    store: FixtureStore,
}

#[async_trait]
impl EnvironmentBoundary for VendorEnvironment {
    fn capabilities(&self) -> EnvironmentCapabilities {
        // Everything the inner boundary keeps, nothing more: a boundary claims
        // only what it enforces.
        self.inner.capabilities()
    }

    fn name(&self) -> &'static str {
        "vendor environment (fixture store)"
    }

    async fn prepare(&self, run: &RunContext) -> Result<EnvironmentPlan, BoundaryError> {
        let mut plan = self.inner.prepare(run).await?;
        plan.vars.extend(self.store.entries.clone());
        if let Some(version) = self.store.entries.get("VENDOR_FIXTURE_VERSION") {
            plan.fingerprint
                .insert("vendor-fixture".into(), version.clone());
        }
        Ok(plan)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let store = FixtureStore {
        entries: BTreeMap::from([
            (
                "VENDOR_FIXTURE_URL".to_owned(),
                "file:///fixtures/payments".to_owned(),
            ),
            ("VENDOR_FIXTURE_VERSION".to_owned(), "2026.11".to_owned()),
        ]),
    };
    let parent = format!("aw-vendor-example-{}", std::process::id());
    let stack_parent = parent.clone();
    let kit = Kit::new(move |scratch| {
        let mut stack =
            agent_workspace::namespace_stack_layered(&stack_parent, scratch.join("trees"), 1 << 30)
                .map_err(|e| e.to_string())?;
        stack.environment = Arc::new(VendorEnvironment {
            inner: NamespaceEnvironment::from_host(),
            store: store.clone(),
        });
        Ok(stack)
    });
    let results = kit.run_all().await;
    if let Ok(layout) = CgroupLayout::detect() {
        let _ = remove_parent(&layout, &parent);
    }
    let mut failed = false;
    for result in &results {
        match &result.verdict {
            Verdict::Passed => println!("{}: passed", result.name),
            Verdict::Unsupported { reason } => println!("{}: unsupported ({reason})", result.name),
            Verdict::Failed { observed } => {
                failed = true;
                println!("{}: failed: {observed}", result.name);
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
