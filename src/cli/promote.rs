//! `agent-workspace promote RUN`: end a created workspace and promote its patch.

use std::process::ExitCode;

use clap::Args;
use workspace_core::RunId;
use workspace_core::boundary::ApprovalRecord;
use workspace_core::runner::{CreateOptions, FinishOptions, PromotionOutcome, Workspace};

use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::{print_summary, report_run_error};
use super::text::{escaped, one_line};
use super::{EXIT_BAD_INPUT, EXIT_RUNNER_FAILED};

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
    /// Print a JSON summary on stdout instead of the summary line.
    #[arg(long)]
    json: bool,
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
        eprintln!(
            "agent-workspace: --sha256 {digest:?} is not a sha256 digest (64 hex digits, as `export` prints it)"
        );
        return ExitCode::from(EXIT_BAD_INPUT);
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
            let failed: Vec<_> = checks.iter().filter(|c| !c.passed).collect();
            if !failed.is_empty() {
                for check in &failed {
                    eprintln!(
                        "agent-workspace: required check {:?} failed: {}",
                        check.name,
                        one_line(check.failure.as_deref().unwrap_or("it did not pass"))
                    );
                }
                return keep(workspace, &run_id).await;
            }
            // What the promotion boundary would refuse (a stale or missing
            // approval, changes out of scope) keeps the workspace too.
            match workspace.promotion_refusal(&approvals).await {
                Ok(None) => {}
                // A refusal names paths the workspace chose.
                Ok(Some(reason)) => {
                    eprintln!("agent-workspace: promotion refused: {}", one_line(&reason));
                    return keep(workspace, &run_id).await;
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
        print_summary(&report, args.json);
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

/// Leaves a workspace that was not promoted live for its agent to fix.
async fn keep(workspace: Workspace, run_id: &RunId) -> ExitCode {
    match workspace.detach().await {
        Ok(_) => {
            eprintln!(
                "agent-workspace: run {run_id} not promoted and kept: fix it and promote again, or `destroy` it (`promote --end` ends it)"
            );
            ExitCode::FAILURE
        }
        Err(error) => report_run_error(&error),
    }
}
