//! `agent-workspace prune`: forget cleaned runs beyond a count or an age.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::evidence::MANIFEST_FILE;
use workspace_core::recovery::JOURNAL_DIR;
use workspace_core::runner::EVIDENCE_POINTER_EXTENSION;

use super::host::HostArgs;
use super::json::{ErrorKind, Failure};
use super::ls::cleaned_runs;

#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    /// How many of the newest cleaned runs to keep, whatever their age.
    #[arg(long, value_name = "N", default_value_t = 100)]
    keep: usize,
    /// Keep every cleaned run younger than this many days.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    older_than: u64,
    /// Remove the evidence bundles of the pruned runs too (by default only their
    /// journals go; the evidence is the runs' result).
    #[arg(long)]
    evidence: bool,
    /// Remove the host's service templates (a database cluster made once per
    /// host) not used for `--older-than` days too; one a live run uses stays.
    #[arg(long)]
    templates: bool,
    /// Print `{"pruned", "bundles_removed", "templates_removed", "failures"}`
    /// on stdout instead of the line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The answer of `prune --json`.
#[derive(Debug, Default, Serialize)]
struct PrunedJson {
    /// The runs whose journals were removed.
    pruned: Vec<PrunedRun>,
    /// How many evidence bundles were removed (`--evidence`).
    bundles_removed: usize,
    /// How many service templates were removed (`--templates`; absent
    /// without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    templates_removed: Option<usize>,
    /// What could not be removed, and why (the exit status is then 1).
    failures: Vec<PruneFailure>,
}

/// One pruned run.
#[derive(Debug, Serialize)]
struct PrunedRun {
    /// The run.
    run_id: String,
    /// Its evidence bundle, when `--evidence` removed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence_removed: Option<PathBuf>,
}

/// What `prune` could not remove.
#[derive(Debug, Serialize)]
struct PruneFailure {
    /// The file or directory kept.
    path: PathBuf,
    /// Why.
    message: String,
}

/// Removes the journals (and, with `--evidence`, the evidence bundles) of
/// cleaned runs beyond the newest `--keep` that are older than
/// `--older-than` days. Runs that are not cleaned up are never touched. Prints
/// one line with what it removed.
pub(crate) fn run(args: &PruneArgs, host: &HostArgs) -> ExitCode {
    let dir = host.dirs().runtime.join(JOURNAL_DIR);
    let cleaned = match cleaned_runs(&dir) {
        Ok(cleaned) => cleaned,
        Err(e) => {
            return Failure::new(
                ErrorKind::Io,
                1,
                format!("cannot list the journals in {}: {e}", dir.display()),
            )
            .path(&dir)
            .report();
        }
    };
    let mut answer = PrunedJson::default();
    let now = workspace_core::clock::unix_ms_now();
    let cutoff = now.saturating_sub(args.older_than.saturating_mul(24 * 3600 * 1000));
    let (mut journals, mut bundles, mut failed) = (0, 0, 0);
    for (journal, since) in cleaned.into_iter().skip(args.keep) {
        if since >= cutoff {
            continue;
        }
        let pointer = journal.with_extension(EVIDENCE_POINTER_EXTENSION);
        let mut removed_bundle = None;
        if args.evidence
            && let Some(bundle) = std::fs::read_to_string(&pointer)
                .ok()
                .map(|p| p.trim().to_owned())
        {
            match remove_bundle(Path::new(&bundle), &journal) {
                Ok(true) => {
                    bundles += 1;
                    removed_bundle = Some(PathBuf::from(&bundle));
                }
                Ok(false) => {}
                Err(e) => {
                    failed += 1;
                    eprintln!("agent-workspace: keeping {bundle}: {e}");
                    answer.failures.push(PruneFailure {
                        path: PathBuf::from(&bundle),
                        message: e.to_string(),
                    });
                    continue;
                }
            }
        }
        let removed =
            std::fs::remove_file(&journal).and_then(|()| match std::fs::remove_file(&pointer) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            });
        match removed {
            Ok(()) => {
                journals += 1;
                let run_id = journal
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned());
                answer.pruned.push(PrunedRun {
                    run_id: run_id.unwrap_or_default(),
                    evidence_removed: removed_bundle,
                });
            }
            Err(e) => {
                failed += 1;
                eprintln!("agent-workspace: cannot remove {}: {e}", journal.display());
                answer.failures.push(PruneFailure {
                    path: journal.clone(),
                    message: e.to_string(),
                });
            }
        }
    }
    let mut templates = 0;
    if args.templates {
        let unused_for = std::time::Duration::from_secs(args.older_than.saturating_mul(24 * 3600));
        match workspace_core::runner::prune_templates(&host.dirs().runtime, unused_for) {
            Ok(n) => templates = n,
            Err(e) => {
                failed += 1;
                let message = workspace_core::error_chain(&e);
                eprintln!("agent-workspace: pruning the service templates: {message}");
                answer.failures.push(PruneFailure {
                    path: host.dirs().runtime,
                    message,
                });
            }
        }
        answer.templates_removed = Some(templates);
    }
    answer.bundles_removed = bundles;
    if args.json {
        super::json::print(&answer);
    } else if args.templates {
        println!(
            "pruned {journals} cleaned run(s) ({bundles} evidence bundle(s)), {templates} service template(s)"
        );
    } else {
        println!("pruned {journals} cleaned run(s) ({bundles} evidence bundle(s))");
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Removes the evidence bundle `dir` of the run of `journal`, if it is one: a
/// directory named after the run holding a manifest (never anything else a
/// pointer might name). `Ok(false)`: there was none.
fn remove_bundle(dir: &Path, journal: &Path) -> std::io::Result<bool> {
    let named_after_run = dir.file_name() == journal.file_stem();
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    if !named_after_run || !meta.is_dir() || !dir.join(MANIFEST_FILE).is_file() {
        return Err(std::io::Error::other("not an evidence bundle of this run"));
    }
    std::fs::remove_dir_all(dir)?;
    Ok(true)
}
