//! `agent-workspace check-host`: can this host run the namespace backend?

use std::process::ExitCode;

use backend_namespace::cgroup::{CgroupLayout, delegate};
use backend_namespace::host_check::{Check, Finding, HostReport, Status, check_host};
use clap::Args;
use serde::Serialize;

use super::host::HostArgs;

#[derive(Debug, Args)]
pub(crate) struct CheckHostArgs {
    /// Print the findings as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// As root: make this host ready for `--user`'s runs (a cgroup subtree
    /// delegated to that user, where its runs make their groups), then exit.
    #[arg(long, requires = "user")]
    fix: bool,
    /// The ordinary user `--fix` prepares the host for (a name or a uid).
    #[arg(long, value_name = "NAME", requires = "fix")]
    user: Option<String>,
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
pub(crate) fn run(args: &CheckHostArgs, host: &HostArgs) -> ExitCode {
    if let (true, Some(user)) = (args.fix, &args.user) {
        return fix(user, host);
    }
    let report = check_host(&host.cgroup_parent());
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

/// `--fix --user NAME`: as root, delegates the cgroup subtree `NAME`'s runs
/// make their groups in (its default parent unless `--cgroup-parent` names
/// another), and prints each directory. Exit 0 when done, 1 otherwise.
fn fix(name: &str, host: &HostArgs) -> ExitCode {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("agent-workspace: check-host --fix changes the host's cgroups: run it as root");
        return ExitCode::FAILURE;
    }
    let user = match name.parse::<u32>() {
        Ok(uid) => nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)),
        Err(_) => nix::unistd::User::from_name(name),
    };
    let user = match user {
        Ok(Some(user)) if !user.uid.is_root() => user,
        Ok(Some(_)) => {
            eprintln!("agent-workspace: --user {name}: root needs no delegation");
            return ExitCode::FAILURE;
        }
        Ok(None) => {
            eprintln!("agent-workspace: --user {name}: no such user");
            return ExitCode::FAILURE;
        }
        Err(err) => {
            eprintln!("agent-workspace: --user {name}: cannot look it up: {err}");
            return ExitCode::FAILURE;
        }
    };
    let parent = host.cgroup_parent_of(user.uid.as_raw());
    let delegated = CgroupLayout::detect()
        .and_then(|layout| delegate(&layout, &parent, user.uid.as_raw(), user.gid.as_raw()));
    match delegated {
        Ok(dirs) => {
            for dir in dirs {
                println!(
                    "cgroup_delegation  {} now belongs to {} ({})",
                    dir.display(),
                    user.name,
                    user.uid
                );
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!(
                "agent-workspace: delegating {parent} to {}: {err}",
                user.name
            );
            ExitCode::FAILURE
        }
    }
}
