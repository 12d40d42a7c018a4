//! `agent-workspace export RUN`: the current patch of a created workspace.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::boundary::ChangedPath;

use super::EXIT_RUNNER_FAILED;
use super::command_json::text_or_base64;
use super::host::HostArgs;
use super::json::{ErrorKind, Failure};
use super::session::{TheRun, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    run: TheRun,
    /// Write the patch to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print `{"run_id", "patch_sha256", "changed_paths", "changes", "patch"}`
    /// on stdout instead of the patch (`patch_base64` when it is not UTF-8,
    /// `patch_file` with `--out`).
    #[arg(long)]
    pub(crate) json: bool,
}

/// The answer of `export --json`: the run's current patch.
#[derive(Debug, Serialize)]
struct ExportJson {
    /// The run.
    run_id: String,
    /// The sha256 of the patch: what checks and approvals are bound to.
    patch_sha256: String,
    /// How many paths changed (ignored new files not counted).
    changed_paths: usize,
    /// Every changed path, as `changes.json` lists them (with why one is
    /// not in the patch).
    changes: Vec<ChangedPath>,
    /// The patch, when it is UTF-8 and not written to `--out`.
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    /// The patch as base64, when it is not UTF-8 (and not written to `--out`).
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_base64: Option<String>,
    /// Where `--out` wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_file: Option<PathBuf>,
}

/// Prints the run's changes against its base commit as a patch `git apply`
/// accepts, and their sha256 (the digest checks and approvals are bound to) on
/// stderr. The run stays as it was (detached and live, or suspended).
pub(crate) fn run(args: ExportArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        let patch = match runner.export_patch(&run_id).await {
            Ok(patch) => patch,
            Err(error) => return report_run_error(&error),
        };
        let written = match &args.out {
            Some(file) => std::fs::write(file, &patch.patch),
            None if args.json => Ok(()),
            None => std::io::stdout().write_all(&patch.patch),
        };
        if let Err(e) = written {
            let failure = Failure::new(
                ErrorKind::Io,
                EXIT_RUNNER_FAILED,
                format!("cannot write the patch: {e}"),
            )
            .run(&run_id);
            return match &args.out {
                Some(file) => failure.flag("--out").path(file),
                None => failure,
            }
            .report();
        }
        let changed_paths = patch.changes.iter().filter(|c| !c.ignored).count();
        if args.json {
            let (text, base64) = match &args.out {
                Some(_) => (None, None),
                None => text_or_base64(patch.patch.clone()),
            };
            super::json::print(&ExportJson {
                run_id: run_id.to_string(),
                patch_sha256: patch.patch_sha256.clone(),
                changed_paths,
                changes: patch.changes.clone(),
                patch: text,
                patch_base64: base64,
                patch_file: args.out.clone(),
            });
            return ExitCode::SUCCESS;
        }
        let not_in_patch: Vec<String> = patch
            .changes
            .iter()
            .filter_map(|c| {
                let why = c.not_in_patch.as_ref()?;
                Some(format!("{} ({why})", super::text::escaped(&c.path)))
            })
            .collect();
        let left_out = match not_in_patch.as_slice() {
            [] => String::new(),
            paths => format!("; not in the patch: {}", paths.join(", ")),
        };
        eprintln!(
            "agent-workspace: run {run_id}: {changed_paths} changed path(s), sha256 {}{left_out}",
            patch.patch_sha256
        );
        ExitCode::SUCCESS
    })
}
