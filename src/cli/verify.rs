//! `agent-workspace verify DIR`: check an evidence bundle against its manifest.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use workspace_core::evidence;

use super::EXIT_BAD_INPUT;
use super::text::{self, one_line};

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The evidence bundle (`<evidence>/<run-id>/`).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Print the report as JSON on stdout (`dir`, `intact`, `files_checked`,
    /// `problems`, or `error` when the bundle cannot be checked at all).
    #[arg(long)]
    json: bool,
}

/// Re-hashes every file of the bundle and compares it with `manifest.json`.
///
/// Exit 0 and `DIR: intact (N files)` when everything matches (after a line
/// naming the changes `diff.patch` does not carry, if any); exit 1 with one
/// line per problem (changed, missing, extra or irregular files) when anything
/// does not, when the bundle's outcome says the run's export failed (the
/// bundle then does not record the run's changes), or when the bundle cannot
/// be checked at all (no manifest, an unreadable file); exit 2 when `DIR` is
/// not a directory.
pub(crate) fn run(args: &VerifyArgs) -> ExitCode {
    let dir = &args.dir;
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            eprintln!("agent-workspace: {shown}: not a directory");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        Err(err) => {
            let reason = match err.kind() {
                std::io::ErrorKind::NotFound => "no such directory".to_owned(),
                _ => err.to_string(),
            };
            eprintln!("agent-workspace: {shown}: {reason}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    let verified = evidence::verify(dir);
    if args.json {
        let value = match &verified {
            Ok(report) => serde_json::json!({
                "dir": dir,
                "intact": report.is_intact(),
                "complete": report.is_complete(),
                "files_checked": report.files_checked,
                "problems": report.problems,
                "export_failed": report.completeness.export_failed,
                "not_in_patch": report.completeness.not_in_patch,
            }),
            Err(err) => serde_json::json!({
                "dir": dir,
                "intact": false,
                "error": one_line(&workspace_core::error_chain(err)),
            }),
        };
        println!("{value}");
        return match verified {
            Ok(report) if report.is_complete() => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        };
    }
    match verified {
        Ok(report) if report.is_intact() => {
            let files = match report.files_checked {
                1 => "1 file".to_owned(),
                n => format!("{n} files"),
            };
            let not_in_patch = &report.completeness.not_in_patch;
            if !not_in_patch.is_empty() {
                let paths: Vec<String> = not_in_patch
                    .iter()
                    .map(|p| text::escaped(p).into_owned())
                    .collect();
                println!(
                    "{shown}: not in diff.patch (changes.json says why): {}",
                    paths.join(", ")
                );
            }
            match &report.completeness.export_failed {
                None => {
                    println!("{shown}: intact ({files})");
                    ExitCode::SUCCESS
                }
                Some(failed) => {
                    println!(
                        "{shown}: intact ({files}), but the run's export failed ({}): {}",
                        failed.step,
                        text::escaped(&failed.cause)
                    );
                    eprintln!(
                        "agent-workspace: {shown}: the bundle does not record the run's changes \
                         (no complete diff.patch and changes.json)"
                    );
                    ExitCode::FAILURE
                }
            }
        }
        Ok(report) => {
            // A problem names a file of the bundle, which a workspace may
            // have named (its outputs).
            for problem in &report.problems {
                println!("{shown}: {}", one_line(&problem.to_string()));
            }
            eprintln!(
                "agent-workspace: {shown}: {} problem(s); the bundle does not match its manifest",
                report.problems.len()
            );
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!(
                "agent-workspace: {shown}: cannot verify the bundle: {}",
                one_line(&workspace_core::error_chain(&err))
            );
            ExitCode::FAILURE
        }
    }
}
