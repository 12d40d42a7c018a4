//! `agent-workspace check-host`: can this host run the namespace backend?

use std::process::ExitCode;

use backend_namespace::host_check::{Check, Finding, HostReport, Status, check_host};
use clap::Args;
use serde::Serialize;

#[derive(Debug, Args)]
pub(crate) struct CheckHostArgs {
    /// Print the findings as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// What the command's runs cannot do without: they make layered checkouts, so
/// besides every namespace, the cgroup controllers, seccomp and (for a non-root
/// caller) subordinate ids, overlayfs and idmapped mounts too. Landlock is
/// reported but not needed.
const REQUIRED: [Check; 14] = Check::REQUIRED_LAYERED;

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Output<'a> {
    /// Whether every required check is `ok`.
    ready: bool,
    /// The checks the namespace backend needs.
    required: &'a [Check],
    findings: &'a [Finding],
    elapsed_us: u64,
}

/// Runs every host check and prints one line per finding (with its remediation
/// when it is not `ok`). Exit 0 when the host is ready for the namespace backend,
/// 1 when a required check is not `ok`.
pub(crate) fn run(args: &CheckHostArgs) -> ExitCode {
    let report = check_host();
    let gaps = report.is_ready_for(&REQUIRED).err().unwrap_or_default();
    if args.json {
        let output = Output {
            ready: gaps.is_empty(),
            required: &REQUIRED,
            findings: &report.findings,
            elapsed_us: report.elapsed_us,
        };
        match serde_json::to_string_pretty(&output) {
            Ok(text) => println!("{text}"),
            Err(err) => {
                eprintln!("agent-workspace: cannot print the findings: {err}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table(&report));
        if gaps.is_empty() {
            println!("ready for the namespace backend");
        } else {
            let names: Vec<&str> = gaps.iter().map(|gap| gap.check.name()).collect();
            println!("NOT ready for the namespace backend: {}", names.join(", "));
        }
    }
    if gaps.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `check  status  detail`, aligned, with `fix: ...` under each finding that has
/// a remediation.
fn table(report: &HostReport) -> String {
    let name_width = report
        .findings
        .iter()
        .map(|f| f.check.name().len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for finding in &report.findings {
        let status = match finding.status {
            Status::Ok => "ok",
            Status::Missing => "missing",
            Status::Restricted => "restricted",
        };
        let optional = if REQUIRED.contains(&finding.check) {
            ""
        } else {
            " (optional)"
        };
        out.push_str(&format!(
            "{:<name_width$}  {status:<10}  {}{optional}\n",
            finding.check.name(),
            finding.detail
        ));
        if !finding.remediation.is_empty() {
            out.push_str(&format!(
                "{:<name_width$}  fix: {}\n",
                "", finding.remediation
            ));
        }
    }
    out
}
