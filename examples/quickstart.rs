//! Quickstart: one agent command in an isolated workspace, from a host application.
//!
//! ```text
//! cargo run --example quickstart              # on a tiny repository made here
//! cargo run --example quickstart -- PATH      # on your own git repository
//! ```
//!
//! Runs as root on Linux (it uses user, mount, pid and network namespaces and
//! cgroups). What it shows, in order:
//!
//! 1. a *contract*: the six boundaries of the run, here the "narrow fix" preset;
//! 2. the default *stack* (git checkouts + Linux namespaces) and a *runner* with a
//!    *capacity* pool that admits runs;
//! 3. one command, its output passed through to this program's terminal;
//! 4. the *report*: run id, exit status, the evidence bundle and the patch a
//!    reviewer would apply.
//!
//! Everything is kept in temporary directories and removed at the end, except
//! when you pass a repository: then only that repository is read.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use agent_workspace::core::boundary::CommandSpec;
use agent_workspace::core::capacity::{Capacity, Resources};
use agent_workspace::core::contract::{Contract, SourceSection, TaskShape};
use agent_workspace::core::evidence::EvidenceFile;
use agent_workspace::core::runner::{CommandIo, CreateOptions, Runner, RunnerConfig};

/// Any error, with its causes, for `main` to print.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    match quickstart().await {
        Ok(code) => code,
        Err(e) => {
            // Every cause, outermost first: "creating the run: ...: permission denied".
            eprintln!(
                "quickstart: {}",
                agent_workspace::core::error_chain(e.as_ref())
            );
            ExitCode::FAILURE
        }
    }
}

async fn quickstart() -> Result<ExitCode, BoxError> {
    // Where runs live. A host application keeps these for good (see
    // `agent_workspace::HostDirs`); the example uses throw-away ones, closed to
    // other users as a host's are (every run's files are under the runtime
    // directory).
    let scratch = tempfile::tempdir()?;
    let dirs = agent_workspace::HostDirs {
        runtime: scratch.path().join("runtime"),
        evidence: scratch.path().join("evidence"),
    };
    dirs.make_private()?;
    let (runtime_dir, evidence_root) = (dirs.runtime, dirs.evidence);

    // The repository the agent works on: the first argument, or a tiny new one.
    let repo = match std::env::args_os().nth(1) {
        Some(path) => std::fs::canonicalize(path)?,
        None => make_tiny_repo(scratch.path())?,
    };

    // 1. The contract. A preset is the least-privilege starting point of a task
    //    shape: no network, no credentials, no host mounts, the whole checkout
    //    writable, the result exported as a patch. Adjust its fields as needed.
    let contract = Contract::preset(
        TaskShape::NarrowFix,
        "say hello",
        SourceSection::new(repo.to_string_lossy(), "HEAD"),
    );

    // 2. The stack and the runner. The cgroup parent groups this application's runs
    //    in every cgroup hierarchy. The capacity pool is shared by every run of the
    //    runner: a run waits (in FIFO order) until its cpu and memory limits fit.
    let stack = agent_workspace::namespace_stack(agent_workspace::DEFAULT_CGROUP_PARENT)?;
    let capacity = Arc::new(Capacity::new(Resources {
        cpu_millis: 4_000,
        memory_bytes: 16 << 30,
        disk_bytes: u64::MAX,
        slots: 4,
    }));
    let runner = Runner::new(
        stack,
        RunnerConfig::new(&runtime_dir, &evidence_root),
        capacity,
    );

    // 3. One command: create the workspace, run it, finish (stop every process,
    //    export the evidence, clean up). `argv[0]` is an absolute path; the
    //    command starts in the checkout's root.
    // No time limit of its own: the contract's wall-time limit applies.
    let command = CommandSpec::new(vec![
        "/bin/sh".into(),
        "-c".into(),
        "echo hello > greeting.txt && echo 'wrote greeting.txt'".into(),
    ]);
    // The evidence always gets the output; this passes a copy to our terminal.
    let io = CommandIo::passing_to(tokio::io::stdout(), tokio::io::stderr());
    let report = runner
        .run(contract, &command, io, CreateOptions::default())
        .await?;

    // 4. The report. `Ok` means the run was concluded, not that it succeeded.
    println!("run id:   {}", report.run_id);
    let status = report.last_command().map(|c| c.shell_status());
    match status {
        Some(status) => println!("exit:     {status}"),
        None => println!("exit:     (no command ran)"),
    }
    if let Some(failure) = &report.outcome.failure {
        println!("failure:  {failure:?}");
    }
    // A real host keeps the evidence root; this example's goes with its tempdir.
    println!(
        "evidence: {} (removed when the example exits)",
        report.evidence.display()
    );
    let patch = std::fs::read_to_string(report.evidence.join(EvidenceFile::Diff.file_name()))
        .unwrap_or_default();
    println!("patch:\n{patch}");

    let verified = agent_workspace::core::evidence::verify(&report.evidence)?;
    let ok = status == Some(0)
        && report.outcome.failure.is_none()
        && report.cleaned
        && verified.is_intact()
        && patch.contains("+hello");
    if !ok {
        eprintln!(
            "quickstart: the run did not end as expected (cleaned: {}, cleanup errors: {:?}, \
             evidence problems: {:?})",
            report.cleaned, report.cleanup_errors, verified.problems
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// A one-commit repository at `<parent>/repo`, made with the git CLI.
fn make_tiny_repo(parent: &Path) -> Result<PathBuf, BoxError> {
    let repo = parent.join("repo");
    std::fs::create_dir(&repo)?;
    std::fs::write(repo.join("README.md"), "# a tiny repository\n")?;
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "README.md"],
        &["commit", "-q", "-m", "initial commit"],
    ] {
        let out = Command::new("git")
            .current_dir(&repo)
            // Neither the host's nor the user's git configuration applies.
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args([
                "-c",
                "user.name=quickstart",
                "-c",
                "user.email=quickstart@localhost",
            ])
            .args(args)
            .output()?;
        if !out.status.success() {
            return Err(format!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
    }
    Ok(repo)
}
