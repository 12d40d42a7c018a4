//! `agent-workspace recover`: finish the runs whose runner died.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use workspace_core::recovery::RecoveryReport;

use super::host::HostArgs;
use super::session::{block_on, runner};
use super::text::one_line;

#[derive(Debug, Args)]
pub(crate) struct RecoverArgs {
    /// Where to look for the evidence of a run that recorded no location of its
    /// own (every run made by this version records it beside its journal)
    /// [default: `$XDG_STATE_HOME/agent-workspace/evidence`].
    #[arg(long, value_name = "DIR")]
    evidence: Option<PathBuf>,
    /// Print the recovery report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Recovers every unfinished run under the runtime directory that no live runner
/// holds: kills what it left running, exports its evidence (cause `runner-lost`)
/// and cleans it up, with the default namespace stack and `--cgroup-parent`
/// (give the one the runs were made with).
///
/// Exit 0 when every lost run was cleaned up (runs a live runner holds are left
/// alone and do not count); 1 when a run is left for the next recovery, a
/// journal could not be used, or the journal directory could not be listed;
/// 125 when the backend could not be set up.
pub(crate) fn run(args: &RecoverArgs, host: &HostArgs) -> ExitCode {
    let runner = match runner(host, args.evidence.clone()) {
        Ok(runner) => runner,
        Err(code) => return code,
    };
    let json = args.json;
    block_on(async move {
        match runner.recover().await {
            Ok(report) => print_report(&report, json),
            Err(err) => {
                eprintln!(
                    "agent-workspace: recovery could not start: {}",
                    one_line(&workspace_core::error_chain(&err))
                );
                ExitCode::FAILURE
            }
        }
    })
}

/// Prints the report (lines, or JSON) and returns the exit status.
fn print_report(report: &RecoveryReport, json: bool) -> ExitCode {
    if json {
        match serde_json::to_string_pretty(report) {
            Ok(text) => println!("{text}"),
            Err(err) => {
                eprintln!("agent-workspace: cannot print the report: {err}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        for line in lines(report) {
            println!("{line}");
        }
    }
    let all_cleaned =
        report.recovered.iter().all(|run| run.cleaned) && report.unreadable.is_empty();
    if all_cleaned {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One line per run the report mentions.
fn lines(report: &RecoveryReport) -> Vec<String> {
    let mut lines = Vec::new();
    for run in &report.recovered {
        let id = &run.run.run_id;
        let found = run.run.found_in.name();
        let exported = match (run.exported_now, run.errors.is_empty()) {
            (true, _) => "evidence exported",
            (false, true) => "evidence already exported",
            (false, false) => "no new export",
        };
        let mut line = if run.cleaned {
            format!("{id}: recovered (found in {found}): {exported}, cleaned up")
        } else {
            format!("{id}: NOT cleaned up (found in {found}); left for the next recovery")
        };
        if !run.errors.is_empty() {
            line.push_str(": ");
            line.push_str(&one_line(&run.errors.join("\n")));
        }
        lines.push(line);
    }
    for id in &report.live {
        lines.push(format!("{id}: live (a runner holds it); left alone"));
    }
    // Runs that were already cleaned up are counted, not listed one by one.
    let acted = report.recovered.len();
    lines.push(format!(
        "{acted} run(s) recovered, {} live left alone, {} already cleaned up",
        report.live.len(),
        report.finished.len()
    ));
    for (path, reason) in &report.unreadable {
        lines.push(format!(
            "{}: unreadable journal: {}",
            path.display(),
            one_line(reason)
        ));
    }
    lines
}
