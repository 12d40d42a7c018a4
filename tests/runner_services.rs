//! Services of a live workspace through the library API, over the default stack
//! (real namespaces, cgroups and checkouts): they start in the run's sandbox in
//! declared order, each ready by its own kind of check, the run's commands reach
//! them through their connection variables, they are stopped with `SIGTERM` when
//! the run drains, and their records and logs are in the evidence. A service that
//! exits or is never ready fails the run naming it, with the tail of its log,
//! and still leaves nothing behind. Two runs of the PostgreSQL example at once
//! each have a database of their own.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test),
//! `python3` (Debian's `python3`) and PostgreSQL (Debian's `postgresql`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::path::Path;

use support::{Fixture, marker, read_json, shell};
use workspace_core::contract::{Contract, SourceSection};
use workspace_core::lifecycle::FailureCause;
use workspace_core::runner::{CommandIo, CreateOptions, RunErrorKind, RunReport, prune_templates};

fn with_services(fx: &Fixture, services_toml: &str) -> Contract {
    with_services_at(fx, "HEAD", services_toml)
}

fn with_services_at(fx: &Fixture, revision: &str, services_toml: &str) -> Contract {
    let toml = format!(
        "objective = \"services test\"\nshape = \"narrow-fix\"\n\
         [source]\nrepo = {:?}\nrevision = {revision:?}\n\
         [filesystem]\nwritable = [\".\"]\n{services_toml}",
        fx.repo.to_str().unwrap()
    );
    Contract::from_toml(&toml).unwrap()
}

fn evidence_text(report: &RunReport, rel: &str) -> String {
    String::from_utf8(std::fs::read(report.evidence.join(rel)).unwrap()).unwrap()
}

fn require(path: &str, package: &str) {
    assert!(
        Path::new(path).exists(),
        "this test needs {path} (install Debian's {package})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_start_in_order_serve_the_commands_and_stop_when_the_run_drains() {
    require("/usr/bin/python3", "python3");
    let fx = Fixture::new("services-order");
    let waiter = marker("svc-waiter");
    let contract = with_services(
        &fx,
        &format!(
            r#"
[[environment.services]]
name = "web"
command = ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace"]
health = {{ http = {{ port = 8000, path = "/hello.txt" }}, interval = "50ms", timeout = "20s" }}
connection = {{ WEB_URL = "http://127.0.0.1:8000/hello.txt" }}

[[environment.services]]
name = "waiter"
depends_on = ["web"]
command = ["sh", "-c", "echo waiting for work; trap 'echo bye; exit 0' TERM; while :; do sleep 0.1; done", "{waiter}"]
health = {{ log = "waiting for work", interval = "50ms" }}
"#
        ),
    );
    let client = "import os, urllib.request\n\
                  print(urllib.request.urlopen(os.environ['WEB_URL']).read().decode(), end='')";
    let command = support::command(&["python3", "-c", client], None);
    let report = fx
        .runner()
        .run(
            contract,
            &command,
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert!(report.outcome.failure.is_none(), "{:?}", report.outcome);
    assert_eq!(report.last_command().unwrap().shell_status(), 0);
    assert_eq!(
        evidence_text(&report, "commands/0001/stdout"),
        support::HELLO
    );

    let services = read_json(&report.evidence, "services.json");
    let services = services.as_array().unwrap();
    assert_eq!(services.len(), 2);
    let (web, waiter_record) = (&services[0], &services[1]);
    assert_eq!(web["name"], "web");
    assert!(web["ready_unix_ms"].as_u64().unwrap() >= web["started_unix_ms"].as_u64().unwrap());
    // The second started only once the first was ready.
    assert!(
        waiter_record["started_unix_ms"].as_u64().unwrap()
            >= web["ready_unix_ms"].as_u64().unwrap()
    );
    for service in services {
        assert_eq!(
            service["ended"], "stopped by SIGTERM when the run drained",
            "{service}"
        );
    }
    assert_eq!(
        waiter_record["exit"]["kind"], "code",
        "the trap ran: {waiter_record}"
    );
    assert_eq!(
        evidence_text(&report, "services/waiter/stdout"),
        "waiting for work\nbye\n"
    );
    assert!(
        evidence_text(&report, "services/web/stderr").contains("GET /hello.txt"),
        "the server logged the check's and the command's requests"
    );
    fx.assert_nothing_left(&report.run_id, &[&waiter]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_never_ready_fails_the_run_naming_it_with_its_log_tail() {
    let fx = Fixture::new("services-never");
    let stuck = marker("svc-stuck");
    let contract = with_services(
        &fx,
        &format!(
            r#"
[[environment.services]]
name = "stuck"
command = ["sh", "-c", "echo starting up; echo cannot bind >&2; while :; do sleep 0.1; done", "{stuck}"]
health = {{ tcp = 9999, interval = "50ms", timeout = "1s" }}
"#
        ),
    );
    let (error, name, message) = failed_by_a_service(&fx, contract, "echo never runs").await;
    assert_eq!(name, "stuck");
    assert!(message.contains("not ready after 1000 ms"), "{message}");
    // Each line says its stream, stdout's first: the files do not say how
    // the two interleaved.
    assert!(
        message.ends_with("the end of its log:\nstdout| starting up\nstderr| cannot bind"),
        "{message}"
    );

    let evidence = error.evidence.clone().unwrap();
    let outcome = support::read_outcome(&evidence);
    assert!(outcome.commands.is_empty(), "the command never ran");
    let services = read_json(&evidence, "services.json");
    assert!(
        services[0]["ended"]
            .as_str()
            .unwrap()
            .starts_with("not ready after"),
        "{services}"
    );
    assert!(services[0]["attempts"].as_u64().unwrap() >= 2);
    let stderr = std::fs::read_to_string(evidence.join("services/stuck/stderr")).unwrap();
    assert_eq!(stderr, "cannot bind\n");
    support::assert_intact(&evidence);
    fx.assert_nothing_left(&outcome.run_id, &[&stuck]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_exits_before_it_is_ready_fails_the_run() {
    let fx = Fixture::new("services-exit");
    let contract = with_services(
        &fx,
        r#"
[[environment.services]]
name = "crashes"
command = ["sh", "-c", "echo config missing >&2; exit 3"]
health = { log = "ready", interval = "50ms", timeout = "30s" }
"#,
    );
    let (error, name, message) = failed_by_a_service(&fx, contract, "true").await;
    assert_eq!(name, "crashes");
    assert!(
        message.contains("exited before it was ready (exit code 3)"),
        "{message}"
    );
    assert!(message.contains("config missing"), "{message}");
    let evidence = error.evidence.clone().unwrap();
    let services = read_json(&evidence, "services.json");
    assert_eq!(services[0]["exit"]["value"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_whose_template_cannot_be_made_fails_the_run_and_no_template_is_kept() {
    let fx = Fixture::new("services-template-fails");
    let contract = with_services(
        &fx,
        r#"
[[environment.services]]
name = "db"
command = ["sleep", "60"]
health = { command = ["true"], interval = "50ms", timeout = "30s" }
[environment.services.template]
path = "/var/lib/db"
command = ["sh", "-c", "echo half > /var/lib/db/made && echo disk quota >&2 && exit 4"]
"#,
    );
    let (error, name, message) = failed_by_a_service(&fx, contract, "true").await;
    assert_eq!(name, "db");
    assert!(
        message.contains("its template command failed (exit code 4)"),
        "{message}"
    );
    assert!(message.contains("disk quota"), "{message}");
    let evidence = error.evidence.clone().unwrap();
    let services = read_json(&evidence, "services.json");
    assert_eq!(
        services[0]["ended"],
        "its template command failed (exit code 4)"
    );
    // Nothing half-made is kept as the template; nothing of the run is left.
    let store = fx.runtime.join("templates");
    let kept = std::fs::read_dir(&store).map_or(0, Iterator::count);
    assert_eq!(kept, 0, "{}", store.display());
    fx.assert_nothing_left(&error.run_id, &[]);
}

/// Runs `script` under `contract`, which must fail because of a service: the
/// error, the service's name and the failure's message.
async fn failed_by_a_service(
    fx: &Fixture,
    contract: Contract,
    script: &str,
) -> (workspace_core::runner::RunError, String, String) {
    let error = fx
        .runner()
        .run(
            contract,
            &shell(script, "cmd"),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap_err();
    let RunErrorKind::Failed(FailureCause::Service { name, message }) = error.kind.as_ref() else {
        panic!("not a service failure: {error:?}");
    };
    let (name, message) = (name.clone(), message.clone());
    (error, name, message)
}

/// The PostgreSQL example on this fixture's repository.
fn postgres_contract(fx: &Fixture) -> Contract {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/contracts/postgres.toml"),
    )
    .unwrap();
    let mut contract = Contract::from_toml(&text).unwrap();
    contract.source = SourceSection::new(fx.repo.to_string_lossy(), "HEAD");
    contract
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_of_the_postgres_example_each_have_a_database_of_their_own() {
    require("/usr/lib/postgresql", "postgresql");
    require("/usr/bin/psql", "postgresql-client");
    let fx = Fixture::new("services-postgres");
    let runner = fx.runner();
    // Each run creates a table named after itself, waits until the other has
    // surely created its own, and lists the tables it can see.
    let script = |me: &str| {
        format!(
            "psql -qc 'create table made_by_{me} (x int)' && sleep 2 && \
             psql -tAc \"select 40+2\" && \
             psql -tAc \"select string_agg(tablename, ',') from pg_tables where tablename like 'made_by_%'\" && \
             psql \"$DATABASE_URL\" -tAc 'select current_database()'"
        )
    };
    let (command_a, command_b) = (shell(&script("a"), "pg-a"), shell(&script("b"), "pg-b"));
    let (a, b) = tokio::join!(
        runner.run(
            postgres_contract(&fx),
            &command_a,
            CommandIo::captured(),
            CreateOptions::default()
        ),
        runner.run(
            postgres_contract(&fx),
            &command_b,
            CommandIo::captured(),
            CreateOptions::default()
        ),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut databases = Vec::new();
    for (report, me) in [(&a, "a"), (&b, "b")] {
        assert!(report.outcome.failure.is_none(), "{:?}", report.outcome);
        let stdout = evidence_text(report, "commands/0001/stdout");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            lines.len(),
            3,
            "{stdout}{}",
            evidence_text(report, "commands/0001/stderr")
        );
        assert_eq!(lines[0], "42");
        assert_eq!(lines[1], format!("made_by_{me}"), "only its own table");
        databases.push(lines[2].to_owned());
        let services = read_json(&report.evidence, "services.json");
        assert_eq!(services[0]["name"], "postgres");
        assert_eq!(
            services[0]["ended"],
            "stopped by SIGTERM when the run drained"
        );
        fx.assert_nothing_left(&report.run_id, &[]);
    }
    assert_ne!(
        databases[0], databases[1],
        "each run its leased schema name"
    );
    assert!(
        databases.iter().all(|d| d.starts_with("app")),
        "{databases:?}"
    );
    // Both made the cluster's template (neither found it); exactly one copy
    // was kept, nothing of the other's.
    let made: Vec<serde_json::Value> = [&a, &b]
        .map(|r| read_json(&r.evidence, "services.json")[0]["template"].clone())
        .into();
    assert!(made.iter().all(|t| t["made"] == true), "{made:?}");
    assert_eq!(made[0]["key"], made[1]["key"]);
    let store: Vec<String> = std::fs::read_dir(fx.runtime.join("templates"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(store, [made[0]["key"].as_str().unwrap()], "{store:?}");

    // A third run starts from that template and sees none of the tables the
    // first two made: what a run changes stays in its own layer.
    let count = "psql -tAc \"select count(*) from pg_tables where tablename like 'made_by_%'\"";
    let c = runner
        .run(
            postgres_contract(&fx),
            &shell(count, "pg-c"),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert!(c.outcome.failure.is_none(), "{:?}", c.outcome);
    assert_eq!(evidence_text(&c, "commands/0001/stdout"), "0\n");
    let template = &read_json(&c.evidence, "services.json")[0]["template"];
    assert_eq!(template["made"], false, "{template}");
    assert_eq!(template["key"], made[0]["key"]);
    fx.assert_nothing_left(&c.run_id, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_template_is_pruned_and_one_a_live_run_uses_is_kept() {
    let fx = Fixture::new("services-template-prune");
    let contract = || {
        with_services(
            &fx,
            r#"
[[environment.services]]
name = "db"
command = ["sh", "-c", "test -f /var/lib/db/made && exec sleep 60"]
health = { command = ["true"], interval = "20ms", timeout = "30s" }
[environment.services.template]
path = "/var/lib/db"
command = ["sh", "-c", "echo made > /var/lib/db/made"]
"#,
        )
    };
    let runner = fx.runner();
    let made = |report: &RunReport| {
        read_json(&report.evidence, "services.json")[0]["template"]["made"].clone()
    };
    let first = runner
        .run(
            contract(),
            &shell("true", "t1"),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(made(&first), true, "{:?}", first.outcome);
    let unused = std::time::Duration::ZERO;
    // Kept while a live run has a layer over it; pruned once none does.
    let live = runner
        .create(contract(), CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(prune_templates(&fx.runtime, unused).unwrap(), 0);
    let report = live.finish().await.unwrap();
    assert_eq!(made(&report), false);
    assert_eq!(prune_templates(&fx.runtime, unused).unwrap(), 1);
    assert_eq!(
        std::fs::read_dir(fx.runtime.join("templates"))
            .unwrap()
            .count(),
        0
    );
    // A later run makes it again; a long unused-for keeps it.
    let again = runner
        .run(
            contract(),
            &shell("true", "t2"),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(made(&again), true);
    let a_day = std::time::Duration::from_secs(24 * 3600);
    assert_eq!(prune_templates(&fx.runtime, a_day).unwrap(), 0);
}

/// A template command that reads the checkout (`cat seed.txt`) makes a
/// template of that checkout only. The attack: a run at revision A makes the
/// template from A's `seed.txt`; a later run at revision B must not start from
/// it (its service sees B's seed, from a template of its own). The control: a
/// second run at A shares A's template. The template keeps no set-id bit, and
/// nothing of the runs is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_reads_the_checkout_is_made_per_revision_and_shared_within_one() {
    let fx = Fixture::new("services-template-revision");
    std::fs::write(fx.repo.join("seed.txt"), "seed of A\n").unwrap();
    support::git(&fx.repo, &["add", "seed.txt"]);
    support::git(&fx.repo, &["commit", "-q", "-m", "seed A"]);
    let commit_a = support::git_stdout(&fx.repo, &["rev-parse", "HEAD"]);
    std::fs::write(fx.repo.join("seed.txt"), "seed of B\n").unwrap();
    support::git(&fx.repo, &["commit", "-q", "-am", "seed B"]);
    let commit_b = support::git_stdout(&fx.repo, &["rev-parse", "HEAD"]);
    let contract = |revision: &str| {
        with_services_at(
            &fx,
            revision,
            r#"
[[environment.services]]
name = "db"
command = ["sleep", "60"]
health = { command = ["true"], interval = "20ms", timeout = "30s" }
[environment.services.template]
path = "/var/lib/db"
# The set-id modes are refused by the seccomp filter; the store would drop
# them anyway (template_store's own tests).
command = ["sh", "-c", "cat seed.txt > /var/lib/db/seed && cp /bin/true /var/lib/db/idcopy && mkdir /var/lib/db/shared && { chmod 4755 /var/lib/db/idcopy; chmod 2777 /var/lib/db/shared; chmod 755 /var/lib/db/idcopy; chmod 777 /var/lib/db/shared; } 2>/dev/null"]
"#,
        )
    };
    let runner = fx.runner();
    let run = |revision: String| {
        let runner = &runner;
        let contract = contract(&revision);
        async move {
            let report = runner
                .run(
                    contract,
                    &shell("cat /var/lib/db/seed", "tpl-rev"),
                    CommandIo::captured(),
                    CreateOptions::default(),
                )
                .await
                .unwrap();
            assert!(report.outcome.failure.is_none(), "{:?}", report.outcome);
            let template = read_json(&report.evidence, "services.json")[0]["template"].clone();
            let seen = evidence_text(&report, "commands/0001/stdout");
            (report, template, seen)
        }
    };
    let (first, made_a, seen_a) = run(commit_a.clone()).await;
    assert_eq!(made_a["made"], true);
    assert_eq!(seen_a, "seed of A\n");
    // The control: the same revision shares the template.
    let (_, again_a, seen_again) = run(commit_a).await;
    assert_eq!(again_a["made"], false, "{again_a}");
    assert_eq!(again_a["key"], made_a["key"]);
    assert_eq!(seen_again, "seed of A\n");
    // The attack: another revision gets a template of its own checkout.
    let (_, made_b, seen_b) = run(commit_b).await;
    assert_eq!(made_b["made"], true, "{made_b}");
    assert_ne!(made_b["key"], made_a["key"]);
    assert_eq!(seen_b, "seed of B\n");
    let store = fx.runtime.join("templates");
    let mut kept: Vec<String> = std::fs::read_dir(&store)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    kept.sort();
    let mut keys = vec![
        made_a["key"].as_str().unwrap().to_owned(),
        made_b["key"].as_str().unwrap().to_owned(),
    ];
    keys.sort();
    assert_eq!(kept, keys, "two templates and no staging copy");
    // No set-id bit reaches the host's store.
    use std::os::unix::fs::MetadataExt;
    for key in &keys {
        let mode = |name: &str| {
            std::fs::metadata(store.join(key).join(name))
                .unwrap()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("idcopy"), 0o755);
        assert_eq!(mode("shared"), 0o777);
    }
    fx.assert_nothing_left(&first.outcome.run_id, &["tpl-rev"]);
}

/// A template command that leaves a FIFO: the run fails naming the service
/// and the FIFO's path; nothing is kept in the store (no staging copy either)
/// and nothing of the run is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_with_a_fifo_fails_the_run_naming_it_and_leaves_no_staging_copy() {
    let fx = Fixture::new("services-template-fifo");
    let contract = with_services(
        &fx,
        r#"
[[environment.services]]
name = "db"
command = ["sleep", "60"]
health = { command = ["true"], interval = "50ms", timeout = "30s" }
[environment.services.template]
path = "/var/lib/db"
command = ["sh", "-c", "echo made > /var/lib/db/made && mkdir /var/lib/db/run && mkfifo /var/lib/db/run/queue"]
"#,
    );
    let (error, name, message) = failed_by_a_service(&fx, contract, "true").await;
    assert_eq!(name, "db");
    assert!(
        message.contains("its template was not kept: /var/lib/db/run/queue: a FIFO cannot be part of a service template"),
        "{message}"
    );
    let store = fx.runtime.join("templates");
    let kept: Vec<_> = std::fs::read_dir(&store)
        .map(|entries| entries.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(kept.is_empty(), "{kept:?}");
    fx.assert_nothing_left(&error.run_id, &[]);
}
