//! `agent-workspace verify DIR`: check an evidence bundle against its manifest.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::evidence::{self, Tamper};
use workspace_core::step::StepFailure;

use super::BadInput;
use super::json::{ErrorKind, Failure};
use super::session::bad_input;
use super::text::{self, one_line};

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The evidence bundle (`<evidence>/<run-id>/`).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Print the report as JSON on stdout (`dir`, `intact`, `complete`,
    /// `files_checked`, `problems`, ...; an `error` answer when the bundle
    /// cannot be checked at all).
    #[arg(long)]
    pub(crate) json: bool,
}

/// The answer of `verify --json`.
#[derive(Debug, Serialize)]
struct VerifiedJson<'a> {
    /// The bundle checked.
    dir: &'a Path,
    /// Whether every file matches the manifest.
    intact: bool,
    /// Whether it is intact and records the run's changes (its export did
    /// not fail).
    complete: bool,
    /// How many files were hashed and compared.
    files_checked: usize,
    /// Each file that is changed, missing, extra or irregular.
    problems: &'a [Tamper],
    /// Why the run's export failed, when the bundle's outcome says it did.
    export_failed: &'a Option<StepFailure>,
    /// The changed paths `diff.patch` does not carry (`changes.json` says why).
    not_in_patch: &'a [String],
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
            return bad_input(
                BadInput::new(format!("{shown}: not a directory")).with(|f| f.path(dir)),
            );
        }
        Err(err) => {
            let reason = match err.kind() {
                std::io::ErrorKind::NotFound => "no such directory".to_owned(),
                _ => err.to_string(),
            };
            return bad_input(BadInput::new(format!("{shown}: {reason}")).with(|f| f.path(dir)));
        }
    }
    let verified = evidence::verify(dir);
    if args.json {
        return match &verified {
            Ok(report) => {
                super::json::print(&VerifiedJson {
                    dir,
                    intact: report.is_intact(),
                    complete: report.is_complete(),
                    files_checked: report.files_checked,
                    problems: &report.problems,
                    export_failed: &report.completeness.export_failed,
                    not_in_patch: &report.completeness.not_in_patch,
                });
                if report.is_complete() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(err) => cannot_verify(dir, err),
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
        Err(err) => cannot_verify(dir, &err),
    }
}

/// A bundle that cannot be checked at all (no manifest, an unreadable
/// file): exit 1.
fn cannot_verify(dir: &Path, err: &evidence::EvidenceError) -> ExitCode {
    Failure::new(
        ErrorKind::Evidence,
        1,
        format!(
            "{}: cannot verify the bundle: {}",
            dir.display(),
            one_line(&workspace_core::error_chain(err))
        ),
    )
    .path(dir)
    .report()
}
