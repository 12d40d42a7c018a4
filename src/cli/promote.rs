//! `agent-workspace promote RUN`: end a created workspace and promote its patch.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::RunId;
use workspace_core::boundary::ApprovalRecord;
use workspace_core::runner::{CreateOptions, FinishOptions, PromotionOutcome, Workspace};

use super::EXIT_RUNNER_FAILED;
use super::check_report::{CheckJson, failed_check_lines};
use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::{print_summary, report_run_error};
use super::text::{escaped, one_line};

#[derive(Debug, Args)]
pub(crate) struct PromoteArgs {
    #[command(flatten)]
    run: TheRun,
    /// Who approves the patch (repeatable); each approval is bound to `--sha256`.
    #[arg(long = "approved-by", value_name = "NAME", requires = "sha256")]
    approved_by: Vec<String>,
    /// The sha256 of the patch being approved, as `export` printed it: an approval
    /// of another patch does not count.
    #[arg(long, value_name = "DIGEST", requires = "approved_by")]
    sha256: Option<String>,
    /// End the workspace even when a required check fails or the promotion is
    /// refused (by default it is kept, so the agent can fix what is wrong and
    /// promote again).
    #[arg(long)]
    end: bool,
    /// Print the run's JSON summary on stdout instead of the summary line
    /// (`promotion` says what came of it); when the workspace is kept,
    /// `{"run_id", "kept": true, "promotion", "checks"}`.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The answer of `promote --json` when the workspace is kept: a required
/// check failed, or the promotion boundary would refuse.
#[derive(Debug, Serialize)]
struct KeptJson {
    /// The run, kept live for its agent to fix.
    run_id: String,
    /// Always `true`: the workspace was not ended.
    kept: bool,
    /// Why it was not promoted (`{"result": "refused", "reason"}`).
    promotion: PromotionOutcome,
    /// The required checks, when they ran (each with its command's record).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    checks: Vec<CheckJson>,
}

/// Resumes the run and finishes it with promotion: its patch is taken, its
/// required checks run against exactly that state (a check that changes it
/// fails), then the promotion boundary applies
/// the contract's target (a patch, or a draft review branch) if the checks and
/// approvals satisfy its rules. Exit 0 when promoted, 1 when refused. When a
/// required check fails, or the promotion boundary would refuse (an approval of
/// another patch, none where the contract asks for one), the workspace is kept
/// (live, as before) unless `--end` says to end it: the agent can fix what is
/// wrong and promote again.
pub(crate) fn run(args: PromoteArgs, host: &HostArgs) -> ExitCode {
    if let Some(digest) = &args.sha256
        && !workspace_core::digest::is_sha256_hex(digest)
    {
        return super::session::bad_input(
            super::BadInput::new(format!(
                "--sha256 {digest:?} is not a sha256 digest (64 hex digits, as `export` prints it)"
            ))
            .with(|f| f.flag("--sha256")),
        );
    }
    let digest = args.sha256.clone().unwrap_or_default();
    let approvals: Vec<ApprovalRecord> = args
        .approved_by
        .iter()
        .map(|approver| ApprovalRecord::new(approver.as_str(), digest.as_str()))
        .collect();
    on_run(host, &args.run, |runner, run_id| async move {
        let mut workspace = match runner.resume(&run_id, CreateOptions::default()).await {
            Ok(workspace) => workspace,
            Err(error) => return report_run_error(&error),
        };
        if !args.end {
            let checks = match workspace.check().await {
                Ok(checks) => checks,
                Err(error) => return report_run_error(&error),
            };
            let evidence = workspace.evidence_dir().to_path_buf();
            let checked: Vec<CheckJson> =
                checks.iter().map(|c| CheckJson::of(c, &evidence)).collect();
            let failed: Vec<_> = checks.iter().filter(|c| !c.passed).collect();
            if !failed.is_empty() {
                if !super::json::enabled() {
                    for check in &failed {
                        // The end of what it printed, escaped, and its record.
                        eprintln!(
                            "agent-workspace: required check {:?} failed: {}",
                            check.name,
                            one_line(check.failure.as_deref().unwrap_or("it did not pass"))
                        );
                        for line in failed_check_lines(check, &evidence).iter().skip(1) {
                            eprintln!("{line}");
                        }
                    }
                }
                let names: Vec<String> = failed.iter().map(|c| format!("{:?}", c.name)).collect();
                let reason = format!("required check(s) failed: {}", names.join(", "));
                return keep(workspace, &run_id, reason, checked).await;
            }
            // What the promotion boundary would refuse (a stale or missing
            // approval, changes out of scope) keeps the workspace too.
            match workspace.promotion_refusal(&approvals).await {
                Ok(None) => {}
                // A refusal names paths the workspace chose.
                Ok(Some(reason)) => {
                    eprintln!("agent-workspace: promotion refused: {}", one_line(&reason));
                    return keep(workspace, &run_id, reason, checked).await;
                }
                Err(error) => return report_run_error(&error),
            }
        }
        let options = FinishOptions {
            promote: Some(approvals),
        };
        let report = match workspace.finish_with(options).await {
            Ok(report) => report,
            Err(error) => return report_run_error(&error),
        };
        print_summary(&report, false);
        match &report.promotion {
            Some(PromotionOutcome::Promoted { record }) => {
                let target = record
                    .review_ref
                    .clone()
                    .unwrap_or_else(|| "the patch in the evidence".to_owned());
                eprintln!(
                    "agent-workspace: promoted {} to {}{}",
                    record.patch_sha256,
                    escaped(&target),
                    if record.merge_candidate {
                        " (merge candidate)"
                    } else {
                        ""
                    }
                );
                ExitCode::SUCCESS
            }
            Some(PromotionOutcome::Refused { reason }) => {
                eprintln!("agent-workspace: promotion refused: {}", one_line(reason));
                ExitCode::FAILURE
            }
            Some(PromotionOutcome::CredentialInPatch { leaks }) => {
                for leak in leaks {
                    eprintln!(
                        "agent-workspace: promotion refused: {}",
                        one_line(&leak.to_string())
                    );
                }
                ExitCode::FAILURE
            }
            None => ExitCode::from(EXIT_RUNNER_FAILED),
        }
    })
}

/// Leaves a workspace that was not promoted (`reason`) live for its agent to
/// fix; under `--json` answers with [`KeptJson`].
async fn keep(
    workspace: Workspace,
    run_id: &RunId,
    reason: String,
    checks: Vec<CheckJson>,
) -> ExitCode {
    match workspace.detach().await {
        Ok(_) => {
            eprintln!(
                "agent-workspace: run {run_id} not promoted and kept: fix it and promote again, or `destroy` it (`promote --end` ends it)"
            );
            super::json::print(&KeptJson {
                run_id: run_id.to_string(),
                kept: true,
                promotion: PromotionOutcome::Refused { reason },
                checks,
            });
            ExitCode::FAILURE
        }
        Err(error) => report_run_error(&error),
    }
}
