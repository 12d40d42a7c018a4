//! Three agents on the same repository at once, each in its own workspace, each
//! result promoted to its own draft review branch.
//!
//! ```text
//! cargo run --example parallel_agents
//! ```
//!
//! Runs as root on Linux. A branch per agent would separate their commits, not
//! their runs: here each agent also gets its own checkout, processes, network,
//! cache prefix and schema name, and its result reaches the repository only as
//! `refs/heads/review/<run-id>`, created by the promotion boundary after the
//! contract's required check passed for that exact patch. The agents cannot write
//! the repository themselves: its object store is mounted read-only in their runs.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use agent_workspace::core::boundary::CommandSpec;
use agent_workspace::core::capacity::{Capacity, Resources};
use agent_workspace::core::contract::{Contract, RequiredCheck, SourceSection, TaskShape};
use agent_workspace::core::runner::{
    CommandIo, CreateOptions, FinishOptions, PromotionOutcome, RunReport, Runner, RunnerConfig,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What each agent does: a file of its own, and a line in a shared one (the
/// review branches then show who changed what, without interfering).
const AGENTS: [(&str, &str); 3] = [
    (
        "docs",
        "echo 'Usage: see README' > USAGE.md; echo docs >> AUTHORS",
    ),
    (
        "fix",
        "sed -i 's/retries = 1/retries = 3/' config.toml; echo fix >> AUTHORS",
    ),
    (
        "test",
        "mkdir -p tests && echo 'check retries' > tests/retries.txt; echo test >> AUTHORS",
    ),
];

#[tokio::main]
async fn main() -> ExitCode {
    match parallel_agents().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "parallel_agents: {}",
                agent_workspace::core::error_chain(e.as_ref())
            );
            ExitCode::FAILURE
        }
    }
}

async fn parallel_agents() -> Result<(), BoxError> {
    // A directory of this user's alone: the runs' checkouts are mounted from
    // descriptors the sandbox opens before it takes the run's ids.
    let scratch = tempfile::tempdir()?;
    let repo = make_repo(scratch.path())?;

    let stack = agent_workspace::namespace_stack(agent_workspace::DEFAULT_CGROUP_PARENT)?;
    // Room for the three at once: each reserves its contract's cpu and memory.
    let capacity = Arc::new(Capacity::new(Resources {
        cpu_millis: 8_000,
        memory_bytes: 16 << 30,
        disk_bytes: u64::MAX,
        slots: 3,
    }));
    let runner = Runner::new(
        stack,
        RunnerConfig::new(
            scratch.path().join("runtime"),
            scratch.path().join("evidence"),
        ),
        capacity,
    );

    let mut agents = Vec::new();
    for (name, script) in AGENTS {
        // The parallel-changes preset promotes to a draft review branch. The
        // required check runs in the sealed workspace after the agent's command;
        // its result is bound to the digest of the patch that is promoted.
        let mut contract = Contract::preset(
            TaskShape::ParallelChanges,
            format!("agent {name}"),
            SourceSection::new(repo.to_string_lossy(), "HEAD"),
        );
        contract.process.cache_prefix = Some("cache".into());
        contract.process.database_schema = Some("app".into());
        contract.promotion.required_checks = vec![RequiredCheck {
            name: "authors-kept".into(),
            command: vec!["/bin/sh".into(), "-c".into(), "grep -q base AUTHORS".into()],
            timeout: None,
        }];
        let runner = runner.clone();
        agents.push(tokio::spawn(async move {
            run_agent(&runner, contract, name, script).await
        }));
    }
    for agent in agents {
        let (name, report) = agent.await??;
        match &report.promotion {
            Some(PromotionOutcome::Promoted { record }) => println!(
                "{name:>5}: {} -> {} ({} changed file(s), leases: {})",
                report.run_id,
                record.review_ref.as_deref().unwrap_or("-"),
                report.outcome.changed_paths,
                report.outcome.leases.join(", "),
            ),
            other => return Err(format!("agent {name} was not promoted: {other:?}").into()),
        }
    }

    // The repository now has one review branch per agent, and nothing else changed.
    let branches = git(
        &repo,
        &["for-each-ref", "--format=%(refname)", "refs/heads/review"],
    )?;
    println!("review branches:\n{branches}");
    let count = branches.lines().count();
    if count != AGENTS.len() {
        return Err(format!("expected {} review branches, found {count}", AGENTS.len()).into());
    }
    let status = git(&repo, &["status", "--porcelain"])?;
    if !status.is_empty() {
        return Err(format!("the source repository's worktree changed:\n{status}").into());
    }
    Ok(())
}

/// One agent: a workspace of its own, its command, then finish with promotion.
async fn run_agent(
    runner: &Runner,
    contract: Contract,
    name: &'static str,
    script: &str,
) -> Result<(&'static str, RunReport), BoxError> {
    let workspace = runner.create(contract, CreateOptions::default()).await?;
    let command = CommandSpec::new(vec!["/bin/sh".into(), "-c".into(), script.into()]);
    let outcome = workspace.exec(&command, CommandIo::captured()).await?;
    if !outcome.succeeded() {
        return Err(format!("agent {name} failed: {:?}", outcome.exit).into());
    }
    // No approvals: a draft review branch needs none while every change is in
    // scope; marking it a merge candidate would need a human's, bound to the digest.
    let options = FinishOptions {
        promote: Some(Vec::new()),
    };
    Ok((name, workspace.finish_with(options).await?))
}

fn make_repo(dir: &Path) -> Result<PathBuf, BoxError> {
    let repo = dir.join("service");
    std::fs::create_dir(&repo)?;
    std::fs::write(repo.join("config.toml"), "retries = 1\n")?;
    std::fs::write(repo.join("AUTHORS"), "base\n")?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    git(&repo, &["add", "."])?;
    git(&repo, &["commit", "-q", "-m", "base"])?;
    Ok(repo)
}

fn git(repo: &Path, args: &[&str]) -> Result<String, BoxError> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=example",
            "-c",
            "user.email=example@example.com",
        ])
        .args(args)
        .current_dir(repo)
        .output()?;
    if !out.status.success() {
        return Err(format!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
