//! Host-wide leases of a run: unique cache prefixes and schema names for runs at
//! once, passed into the run, the same ones again after a resume, released at the
//! end.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use support::{Fixture, shell};
use workspace_core::lease::Leases;
use workspace_core::runner::{CommandIo, CreateOptions};

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_runs_get_distinct_names_kept_across_a_resume_and_released_at_the_end() {
    let f = Fixture::new("leases");
    let runner = f.runner();
    let mut contract = f.contract();
    contract.process.cache_prefix = Some("cache".into());
    contract.process.database_schema = Some("orders".into());

    let mut first = runner
        .create(contract.clone(), CreateOptions::default())
        .await
        .unwrap();
    let mut second = runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap();
    let print = shell(
        "echo \"$AGENT_WORKSPACE_CACHE_PREFIX $AGENT_WORKSPACE_DB_SCHEMA\" > names.txt",
        "names",
    );
    let mut names = Vec::new();
    for ws in [&mut first, &mut second] {
        ws.exec(&print, CommandIo::captured()).await.unwrap();
        let file = ws.source().unwrap().workspace.join("names.txt");
        names.push(std::fs::read_to_string(file).unwrap());
    }
    assert_ne!(
        names[0], names[1],
        "two runs at once share a name: {names:?}"
    );
    for line in &names {
        let (cache, schema) = line.trim().split_once(' ').unwrap();
        assert!(cache.starts_with("cache-"), "{line}");
        assert!(schema.starts_with("orders_"), "{line}");
    }

    // Suspended and resumed: the very same names come back.
    let run_id = second.run_id().clone();
    second.suspend().await.unwrap();
    let second = runner
        .resume(&run_id, CreateOptions::default())
        .await
        .unwrap();
    second.exec(&print, CommandIo::captured()).await.unwrap();
    let again = std::fs::read_to_string(second.source().unwrap().workspace.join("names.txt"));
    assert_eq!(again.unwrap(), names[1]);

    let reports = [
        first.finish().await.unwrap(),
        second.finish().await.unwrap(),
    ];
    for report in &reports {
        assert!(report.cleaned, "{:?}", report.cleanup_errors);
        assert_eq!(
            report.outcome.leases.len(),
            2,
            "{:?}",
            report.outcome.leases
        );
    }
    let leases = Leases::open(&f.runtime, 1..=u16::MAX).unwrap();
    assert!(
        leases.holders().unwrap().is_empty(),
        "leases outlive their runs"
    );
}
