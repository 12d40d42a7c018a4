//! `agent-workspace probe`: seal a workspace, print what the boundary probe saw
//! from inside it, and finish the run.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::contract::Contract;
use workspace_core::evidence::EvidenceFile;
use workspace_core::runner::{CreateOptions, ObservedRecord, Runner};
use workspace_core::step::describe;

use super::contract_args::ContractArgs;
use super::host::HostArgs;
use super::session::{bad_input, block_on, cancel_on_signals, runner_on};
use super::text::{escaped, one_line};

#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
    /// The contract and its overrides, as for `run` (its required checks are not
    /// run: a probe runs no command).
    #[command(flatten)]
    contract: ContractArgs,
    /// Where evidence goes (`DIR/<run-id>/`)
    /// [default: `$XDG_STATE_HOME/agent-workspace/evidence`].
    #[arg(long, value_name = "DIR")]
    evidence: Option<PathBuf>,
    /// Print the facts and mismatches as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct ProbeSummary {
    run_id: String,
    /// Whether the run was sealed (the probe ran and passed the contract's
    /// assurance level).
    sealed: bool,
    /// What the probe observed inside the boundary, by name.
    facts: std::collections::BTreeMap<String, serde_json::Value>,
    /// Where the observation differs from the contract, one sentence each.
    mismatches: Vec<String>,
    evidence: Option<PathBuf>,
    /// Whether the run was cleaned up afterwards.
    cleaned: bool,
    /// Why the run failed (or was not cleaned up, or its observation could
    /// not be read), if it did: the probe then exits 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

/// Creates and seals a run (the process boundary probes it from inside), prints
/// the probe's facts and mismatches from `observed.json`, then finishes the run
/// (export, cleanup) without running a command.
///
/// Exit 0 when the run was sealed with no mismatch and cleaned up; 1 when the
/// probe found mismatches, the run failed or was not cleaned up; 2 for bad input.
pub(crate) fn run(args: ProbeArgs, host: &HostArgs) -> ExitCode {
    let mut contract = match args.contract.resolve("agent-workspace probe") {
        Ok(contract) => contract,
        Err(bad) => return bad_input(bad),
    };
    // A probe runs no command, so there is nothing for the checks to check.
    contract.promotion.required_checks.clear();
    let runner = match runner_on(
        host,
        args.evidence,
        args.contract.backend(),
        args.contract.runtime(),
    ) {
        Ok(runner) => runner,
        Err(code) => return code,
    };
    block_on(async move {
        if let Err(bad) = args.contract.check_on(&runner, &contract).await {
            return bad_input(bad);
        }
        execute(runner, contract, args.json).await
    })
}

async fn execute(runner: Runner, contract: Contract, json: bool) -> ExitCode {
    let cancel = cancel_on_signals("ending the run and exporting its evidence");
    let options = CreateOptions {
        run_id: None,
        cancel: Some(cancel),
        // The probe runs no command of its own.
        cancel_grace: None,
        observer: None,
    };
    let summary = match runner.create(contract, options).await {
        Ok(workspace) => {
            let evidence = workspace.evidence_dir().to_path_buf();
            let observed = read_observed(&evidence);
            let mut summary = ProbeSummary {
                run_id: workspace.run_id().to_string(),
                sealed: true,
                facts: Default::default(),
                mismatches: Vec::new(),
                evidence: Some(evidence),
                cleaned: false,
                problem: None,
            };
            match observed {
                Ok(observed) => {
                    summary.facts = observed.probe.facts;
                    summary.mismatches = observed.probe.mismatches;
                }
                Err(message) => summary.problem = Some(message),
            }
            match workspace.finish().await {
                Ok(report) => {
                    summary.cleaned = report.cleaned;
                    if let Some(failure) = &report.outcome.failure {
                        summary.problem.get_or_insert_with(|| {
                            format!(
                                "the run failed: {}",
                                serde_json::to_string(failure).unwrap_or_default()
                            )
                        });
                    } else if !report.cleaned {
                        summary.problem.get_or_insert_with(|| {
                            format!(
                                "not cleaned up (run `agent-workspace recover`): {}",
                                one_line(&describe(&report.cleanup_errors))
                            )
                        });
                    }
                }
                Err(err) => {
                    summary.problem = Some(one_line(&workspace_core::error_chain(&err)));
                }
            }
            summary
        }
        Err(err) => {
            // The run was concluded already; what the probe saw may still be in
            // the evidence.
            let observed = err.evidence.as_deref().map(read_observed);
            let (facts, mismatches) = match observed {
                Some(Ok(observed)) => (observed.probe.facts, observed.probe.mismatches),
                _ => Default::default(),
            };
            ProbeSummary {
                run_id: err.run_id.to_string(),
                sealed: false,
                facts,
                mismatches,
                evidence: err.evidence.clone(),
                cleaned: false,
                problem: Some(one_line(&workspace_core::error_chain(&err))),
            }
        }
    };
    print_summary(&summary, json);
    if summary.sealed
        && summary.cleaned
        && summary.mismatches.is_empty()
        && summary.problem.is_none()
    {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn read_observed(evidence: &Path) -> Result<ObservedRecord, String> {
    let path = evidence.join(EvidenceFile::Observed.file_name());
    let text = std::fs::read_to_string(&path)
        .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    serde_json::from_str(&text).map_err(|err| format!("cannot parse {}: {err}", path.display()))
}

fn print_summary(summary: &ProbeSummary, json: bool) {
    if json {
        super::json::print(summary);
        return;
    }
    let width = summary.facts.keys().map(String::len).max().unwrap_or(0);
    for (name, value) in &summary.facts {
        let value = match value {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        // What the probe saw inside the workspace.
        println!("{name:<width$}  {}", escaped(&value));
    }
    for mismatch in &summary.mismatches {
        println!("mismatch: {}", one_line(&mismatch.to_string()));
    }
    let state = if summary.sealed {
        "sealed"
    } else {
        "not sealed"
    };
    let mut line = format!(
        "agent-workspace: probe {}: {state}, {} facts, {} mismatches",
        summary.run_id,
        summary.facts.len(),
        summary.mismatches.len()
    );
    if let Some(evidence) = &summary.evidence {
        line.push_str(&format!("; evidence {}", evidence.display()));
    }
    if let Some(error) = &summary.problem {
        line.push_str(&format!("; {}", one_line(error)));
    }
    eprintln!("{line}");
}
