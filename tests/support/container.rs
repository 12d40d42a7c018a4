//! The container backend's runner for a fixture, and the steps its tests share.

use std::path::Path;

use agent_workspace::container_stack;
use workspace_core::contract::Contract;
use workspace_core::runner::{CommandIo, CommandOutcome, CreateOptions, Runner, Workspace};

use super::{Fixture, command};

/// Where the fixture's runc keeps its containers' state.
pub fn state(fixture: &Fixture) -> std::path::PathBuf {
    fixture.base.path().join("runc-state")
}

/// A runner on the container stack, with runc.
pub fn runner(fixture: &Fixture) -> Runner {
    let stack = container_stack(&fixture.cgroup_parent, Some("runc"), &state(fixture))
        .unwrap_or_else(|e| panic!("{e} (these tests need runc: apt-get install runc)"));
    fixture.runner_with(stack)
}

/// A workspace of `contract`, the whole error chain shown when it fails.
pub async fn create(runner: &Runner, contract: Contract) -> Workspace {
    runner
        .create(contract, CreateOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{}", workspace_core::error_chain(&e)))
}

/// Runs `script` with `sh -c` (30 s at most); its outcome and standard output.
pub async fn sh(
    fixture: &Fixture,
    workspace: &mut Workspace,
    script: &str,
) -> (CommandOutcome, String) {
    let ended = workspace
        .exec(
            &command(&["sh", "-c", script], Some(30_000)),
            CommandIo::captured(),
        )
        .await
        .unwrap();
    let out = fixture
        .paths(workspace.run_id())
        .evidence
        .join(format!("commands/{:04}/stdout", ended.seq));
    let text = std::fs::read_to_string(out).unwrap();
    (ended, text)
}

/// The containers runc knows in `state`.
pub fn runc_knows(state: &Path) -> Vec<String> {
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(state)
        .args(["list", "-q"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}
