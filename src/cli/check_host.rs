//! `agent-workspace check-host`: can this host run the namespace backend (or,
//! with `--backend container`, the container backend and its OCI runtime)?

use std::process::ExitCode;

use backend_namespace::cgroup::{CgroupLayout, delegate};
use backend_namespace::host_check::{Check, Finding, HostReport, Status, check_host};
use clap::Args;
use serde::Serialize;

use super::backend::Backend;
use super::host::HostArgs;
use super::{BadInput, session::bad_input};

#[derive(Debug, Args)]
pub(crate) struct CheckHostArgs {
    /// Print the findings as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// The backend to check the host for: the container backend needs what a
    /// standalone checkout's run needs, and an OCI runtime that runs here.
    #[arg(long, value_enum, value_name = "BACKEND", default_value = "namespace")]
    backend: Backend,
    /// With `--backend container`: the OCI runtime to check, a name on `PATH` or
    /// a path [default: the first of runc, crun, youki on `PATH`].
    #[arg(long, value_name = "NAME|PATH")]
    runtime: Option<String>,
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

/// What a standalone checkout's run cannot do without: the container
/// backend's (besides its OCI runtime), and the namespace backend's where this
/// caller has no overlayfs.
const REQUIRED_STANDALONE_RUN: [Check; 12] = Check::REQUIRED_STANDALONE;

/// What `--json` prints.
#[derive(Debug, Serialize)]
struct Output<'a> {
    /// Whether every required check is `ok` (and, for the container backend,
    /// its runtime was found and runs here).
    ready: bool,
    /// The backend checked for.
    backend: &'static str,
    /// The checks that backend needs.
    required: &'a [Check],
    findings: &'a [Finding],
    /// For the container backend: its OCI runtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    runtime: Option<&'a RuntimeFinding>,
    elapsed_us: u64,
}

/// What `check-host --backend container` found of its OCI runtime.
#[derive(Debug, Serialize)]
struct RuntimeFinding {
    /// Whether it was found and can run on this host.
    ok: bool,
    /// Its name, version and program, or why it cannot be used.
    detail: String,
    /// What makes it usable, when it is not.
    #[serde(skip_serializing_if = "str::is_empty")]
    remediation: &'static str,
}

impl RuntimeFinding {
    /// Finds `name` (else the first known runtime on `PATH`) as the container
    /// backend would, with its checks of this host's cgroup layout.
    fn of(name: Option<&str>, host: &HostArgs) -> Self {
        use backend_container::ContainerError;
        use backend_container::process::{ContainerOptions, reachable_by};
        use backend_container::runtime::Runtime;
        let runtime_dir = host.dirs().runtime;
        // The container's root sets itself up from the run's bundle, under
        // the runtime directory (or where that will be made).
        let made = runtime_dir
            .ancestors()
            .find(|dir| dir.is_dir())
            .unwrap_or(std::path::Path::new("/"))
            .to_path_buf();
        let found = Runtime::find(name, &runtime_dir.join("containers")).and_then(|runtime| {
            let detail = format!("{} ({})", runtime.version(), runtime.program().display());
            let options = ContainerOptions::probe(runtime, host.cgroup_parent())?;
            reachable_by(&made, options.host_id_base)?;
            Ok(detail)
        });
        match found {
            Ok(detail) => Self {
                ok: true,
                detail,
                remediation: "",
            },
            Err(error) => Self {
                ok: false,
                remediation: match error {
                    ContainerError::NoRuntime { .. } => {
                        "apt-get install runc (Debian), or name another runtime with --runtime"
                    }
                    ContainerError::RuntimeRefuses { .. } => {
                        "name a runtime that runs on this host with --runtime (runc does), or leave --runtime out"
                    }
                    _ => "",
                },
                detail: workspace_core::error_chain(&error),
            },
        }
    }
}

/// Runs every host check and prints one line per finding (with its remediation
/// when it is not `ok`). Exit 0 when the host is ready for the namespace backend,
/// 1 when a required check is not `ok`.
pub(crate) fn run(args: &CheckHostArgs, host: &HostArgs) -> ExitCode {
    if let (true, Some(user)) = (args.fix, &args.user) {
        return fix(user, host);
    }
    if args.runtime.is_some() && args.backend != Backend::Container {
        return bad_input(
            BadInput::new(
                "--runtime names the OCI runtime of --backend container; the namespace backend has none",
            )
            .with(|f| f.flag("--runtime")),
        );
    }
    // Without overlayfs for this caller the command's checkouts are
    // standalone copies, which need neither it nor idmapped mounts.
    let required: &[Check] = match args.backend {
        Backend::Namespace if backend_namespace::host_check::layered_checkouts_here() => &REQUIRED,
        Backend::Namespace | Backend::Container => &REQUIRED_STANDALONE_RUN,
    };
    let report = check_host(&host.cgroup_parent());
    let runtime = (args.backend == Backend::Container)
        .then(|| RuntimeFinding::of(args.runtime.as_deref(), host));
    let mut gaps: Vec<&str> = report
        .is_ready_for(required)
        .err()
        .unwrap_or_default()
        .iter()
        .map(|gap| gap.check.name())
        .collect();
    if runtime.as_ref().is_some_and(|r| !r.ok) {
        gaps.push("oci_runtime");
    }
    // A root runner's runs must map to ids no user's subordinate range holds.
    if nix::unistd::geteuid().is_root() {
        let base = workspace_core::subordinate::host_id_base();
        let claimed = workspace_core::subordinate::claimed_ranges(base);
        if !claimed.is_empty() {
            gaps.push("host_ids");
            for range in &claimed {
                eprintln!(
                    "agent-workspace: runs map to host ids from {base}, and {range}: that user could take them over; set AGENT_WORKSPACE_HOST_ID_BASE=1879048192 (above every range useradd gives) or take that range away"
                );
            }
        }
    }
    if args.json {
        let output = Output {
            ready: gaps.is_empty(),
            backend: args.backend.name(),
            required,
            findings: &report.findings,
            runtime: runtime.as_ref(),
            elapsed_us: report.elapsed_us,
        };
        super::json::print(&output);
    } else {
        print!("{}", table(&report, required, runtime.as_ref()));
        let backend = args.backend.name();
        if gaps.is_empty() {
            println!("ready for the {backend} backend");
        } else {
            println!("NOT ready for the {backend} backend: {}", gaps.join(", "));
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
fn table(report: &HostReport, required: &[Check], runtime: Option<&RuntimeFinding>) -> String {
    let name_width = report
        .findings
        .iter()
        .map(|f| f.check.name().len())
        .chain(runtime.map(|_| "oci_runtime".len()))
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for finding in &report.findings {
        let status = match finding.status {
            Status::Ok => "ok",
            Status::Missing => "missing",
            Status::Restricted => "restricted",
        };
        let optional = if required.contains(&finding.check) {
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
    if let Some(runtime) = runtime {
        let status = if runtime.ok { "ok" } else { "missing" };
        out.push_str(&format!(
            "{:<name_width$}  {status:<10}  {}\n",
            "oci_runtime", runtime.detail
        ));
        if !runtime.remediation.is_empty() {
            out.push_str(&format!(
                "{:<name_width$}  fix: {}\n",
                "", runtime.remediation
            ));
        }
    }
    out
}

/// The answer of `check-host --fix --user NAME --json`.
#[derive(Debug, Serialize)]
struct Delegated {
    /// The user the host was prepared for.
    user: String,
    /// Its uid.
    uid: u32,
    /// The cgroup directory its runs are made in.
    cgroup_parent: String,
    /// Each cgroup directory that now belongs to it.
    delegated: Vec<std::path::PathBuf>,
}

/// `--fix --user NAME`: as root, delegates the cgroup subtree `NAME`'s runs
/// make their groups in (its default parent unless `--cgroup-parent` names
/// another), and prints each directory. Exit 0 when done, 1 otherwise.
fn fix(name: &str, host: &HostArgs) -> ExitCode {
    let refused =
        |message: String| super::json::Failure::new(super::json::ErrorKind::BadInput, 1, message);
    if !nix::unistd::geteuid().is_root() {
        return refused("check-host --fix changes the host's cgroups: run it as root".into())
            .flag("--fix")
            .report();
    }
    let user = match name.parse::<u32>() {
        Ok(uid) => nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)),
        Err(_) => nix::unistd::User::from_name(name),
    };
    let user = match user {
        Ok(Some(user)) if !user.uid.is_root() => user,
        Ok(Some(_)) => {
            return refused(format!("--user {name}: root needs no delegation"))
                .flag("--user")
                .report();
        }
        Ok(None) => {
            return refused(format!("--user {name}: no such user"))
                .flag("--user")
                .report();
        }
        Err(err) => {
            return refused(format!("--user {name}: cannot look it up: {err}"))
                .flag("--user")
                .report();
        }
    };
    let parent = host.cgroup_parent_of(user.uid.as_raw());
    let delegated = CgroupLayout::detect()
        .and_then(|layout| delegate(&layout, &parent, user.uid.as_raw(), user.gid.as_raw()));
    match delegated {
        Ok(dirs) => {
            if super::json::enabled() {
                super::json::print(&Delegated {
                    user: user.name.clone(),
                    uid: user.uid.as_raw(),
                    cgroup_parent: parent,
                    delegated: dirs,
                });
                return ExitCode::SUCCESS;
            }
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
        Err(err) => super::json::Failure::new(
            super::json::ErrorKind::Io,
            1,
            format!("delegating {parent} to {}: {err}", user.name),
        )
        .report(),
    }
}
