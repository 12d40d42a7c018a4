//! `agent-workspace contract check FILE` and `agent-workspace contract schema`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use serde::Serialize;
use workspace_core::contract::{Contract, ContractError};
use workspace_core::runner::RunErrorKind;

use super::backend::Backend;
use super::host::HostArgs;
use super::json::{ErrorKind, Failure};
use super::text::{escaped, escaped_lines, one_line};
use super::{BadInput, EXIT_BAD_INPUT};

#[derive(Debug, Subcommand)]
pub(crate) enum ContractCommand {
    /// Validate a contract (TOML, or JSON for a `.json` file); list every problem
    /// with its field path and exit 2 when there is any.
    Check {
        /// The contract file.
        file: PathBuf,
        /// Also check it against this backend's stack: list every setting it
        /// cannot keep (what `run` would refuse before creating anything).
        #[arg(long, value_enum)]
        backend: Option<Backend>,
        /// Print `{"valid": ..., "problems": [{"field", "path", "line",
        /// "message"}]}` on stdout instead of lines on stderr.
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of a contract.
    Schema,
}

impl ContractCommand {
    /// Whether `--json` was given (`schema` is JSON without it).
    pub(crate) fn json(&self) -> bool {
        matches!(self, Self::Check { json: true, .. })
    }
}

/// The answer of `contract check --json`.
#[derive(Debug, Serialize)]
struct CheckedJson {
    /// Whether the contract is valid (and, with `--backend`, kept by it).
    valid: bool,
    /// Every problem, one per field.
    problems: Vec<ContractProblemJson>,
}

/// One problem of a contract.
#[derive(Debug, Serialize)]
struct ContractProblemJson {
    /// The field's path (`environment.limits.disk`; `--backend` for a
    /// backend that cannot be set up; empty when the file is not a contract
    /// at all).
    field: String,
    /// The same as `field` (its name before `field` was added).
    path: String,
    /// The line of the file it is on, where the format tells (TOML).
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<usize>,
    /// What is wrong with it.
    message: String,
}

pub(crate) fn run(command: ContractCommand, host: &HostArgs) -> ExitCode {
    match command {
        ContractCommand::Check {
            file,
            backend,
            json,
        } => check(&file, backend, json, host),
        ContractCommand::Schema => match serde_json::to_string_pretty(&Contract::json_schema()) {
            Ok(schema) => {
                println!("{schema}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("agent-workspace: cannot print the schema: {err}");
                ExitCode::FAILURE
            }
        },
    }
}

fn check(file: &Path, backend: Option<Backend>, json: bool, host: &HostArgs) -> ExitCode {
    let shown = file.display();
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(err) => {
            return Failure::new(
                ErrorKind::BadInput,
                EXIT_BAD_INPUT,
                format!("{shown}: cannot read the contract: {err}"),
            )
            .path(file)
            .report();
        }
    };
    let is_json = file
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    let parsed = if is_json {
        Contract::from_json(&text)
    } else {
        Contract::from_toml(&text)
    };
    let parsed = match (parsed, backend) {
        (Ok(contract), Some(backend)) => kept_by(contract, backend, host),
        (parsed, _) => parsed,
    };
    if json {
        let problem = |field: &str, line, message: String| ContractProblemJson {
            field: field.to_owned(),
            path: field.to_owned(),
            line,
            message,
        };
        let problems = match &parsed {
            Ok(_) => Vec::new(),
            Err(ContractError::Invalid { problems }) => problems
                .iter()
                .map(|p| problem(&p.path, p.line, p.message.clone()))
                .collect(),
            Err(err) => vec![problem("", None, err.to_string())],
        };
        let valid = parsed.is_ok();
        super::json::print(&CheckedJson { valid, problems });
        return if valid {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(EXIT_BAD_INPUT)
        };
    }
    match parsed {
        Ok(contract) => {
            let kept = backend
                .map(|b| format!(", kept by the {} backend", b.name()))
                .unwrap_or_default();
            println!(
                "{shown}: valid {} contract for {} at {}{kept}",
                serde_json::to_value(contract.shape)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                escaped(&contract.source.repo),
                escaped(&contract.source.revision)
            );
            ExitCode::SUCCESS
        }
        Err(ContractError::Invalid { problems }) => {
            // A contract may come with the repository: what it says is
            // quoted escaped.
            for problem in &problems {
                eprintln!("{shown}: {}", one_line(&problem.to_string()));
            }
            eprintln!(
                "{shown}: {} problem(s); the contract is invalid",
                problems.len()
            );
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Err(err) => {
            eprintln!("{shown}: {}", escaped_lines(&err.to_string()));
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// `contract` if `backend`'s stack (and the runner) can keep every setting of
/// it, else every setting it cannot keep, as problems.
fn kept_by(
    contract: Contract,
    backend: Backend,
    host: &HostArgs,
) -> Result<Contract, ContractError> {
    let unsupported = |message: String| {
        let mut problems = workspace_core::contract::Problems::new();
        problems.push("--backend", message);
        ContractError::Invalid { problems }
    };
    let runner = super::session::runner_on(host, None, backend, None).map_err(|_| {
        unsupported(format!(
            "the {} backend cannot be set up on this host",
            backend.name()
        ))
    })?;
    match runner.check(&contract) {
        Ok(()) => Ok(contract),
        Err(RunErrorKind::Unsupported(problems) | RunErrorKind::InvalidContract(problems)) => {
            Err(ContractError::Invalid { problems })
        }
        Err(other) => Err(unsupported(workspace_core::error_chain(&other))),
    }
}

/// Reads and parses the contract `file` (TOML, or JSON for `.json`), without
/// validating it: the caller applies its overrides first. A file that cannot be
/// read as a contract is reported whole: every unreadable field and every rule
/// the rest breaks, one line each.
pub(crate) fn load_contract(file: &Path) -> Result<Contract, BadInput> {
    let shown = file.display();
    let text = std::fs::read_to_string(file).map_err(|err| {
        BadInput::new(format!("--contract {shown}: cannot read it: {err}"))
            .with(|f| f.flag("--contract").path(file))
    })?;
    let is_json = file
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    let parsed = if is_json {
        Contract::parse_json(&text)
    } else {
        Contract::parse_toml(&text)
    };
    parsed.map_err(|err| {
        let whole = if is_json {
            Contract::from_json(&text)
        } else {
            Contract::from_toml(&text)
        };
        let (report, list) = match whole.err().unwrap_or(err) {
            ContractError::Invalid { problems } => (
                problems
                    .iter()
                    .map(|problem| {
                        format!("--contract {shown}: {}", one_line(&problem.to_string()))
                    })
                    .collect::<Vec<_>>()
                    .join("\nagent-workspace: "),
                super::json::ProblemJson::list(&problems),
            ),
            err => (
                format!("--contract {shown}: {}", one_line(&err.to_string())),
                Vec::new(),
            ),
        };
        let field = list.first().map(|p| p.field.clone());
        BadInput::new(report).with(|f| {
            let f = f.flag("--contract").path(file).problems(list);
            match field {
                Some(field) => f.field(field),
                None => f,
            }
        })
    })
}
