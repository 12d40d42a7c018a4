//! `agent-workspace contract check FILE` and `agent-workspace contract schema`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Subcommand;
use workspace_core::contract::{Contract, ContractError};

use super::{BadInput, EXIT_BAD_INPUT};

#[derive(Debug, Subcommand)]
pub(crate) enum ContractCommand {
    /// Validate a contract (TOML, or JSON for a `.json` file); list every problem
    /// with its field path and exit 2 when there is any.
    Check {
        /// The contract file.
        file: PathBuf,
    },
    /// Print the JSON Schema of a contract.
    Schema,
}

pub(crate) fn run(command: ContractCommand) -> ExitCode {
    match command {
        ContractCommand::Check { file } => check(&file),
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

fn check(file: &Path) -> ExitCode {
    let shown = file.display();
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(err) => {
            eprintln!("{shown}: cannot read the contract: {err}");
            return ExitCode::from(EXIT_BAD_INPUT);
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
    match parsed {
        Ok(contract) => {
            println!(
                "{shown}: valid {} contract for {} at {}",
                serde_json::to_value(contract.shape)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                contract.source.repo,
                contract.source.revision
            );
            ExitCode::SUCCESS
        }
        Err(ContractError::Invalid { problems }) => {
            for problem in &problems {
                eprintln!("{shown}: {problem}");
            }
            eprintln!(
                "{shown}: {} problem(s); the contract is invalid",
                problems.len()
            );
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Err(err) => {
            eprintln!("{shown}: {err}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// Reads and parses the contract `file` (TOML, or JSON for `.json`), without
/// validating it: the caller applies its overrides first. A file that cannot be
/// read as a contract is reported whole: every unreadable field and every rule
/// the rest breaks, one line each.
pub(crate) fn load_contract(file: &Path) -> Result<Contract, BadInput> {
    let shown = file.display();
    let text = std::fs::read_to_string(file)
        .map_err(|err| BadInput(format!("--contract {shown}: cannot read it: {err}")))?;
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
        let report = match whole.err().unwrap_or(err) {
            ContractError::Invalid { problems } => problems
                .iter()
                .map(|problem| format!("--contract {shown}: {problem}"))
                .collect::<Vec<_>>()
                .join("\nagent-workspace: "),
            err => format!(
                "--contract {shown}: {}",
                super::run::one_line(&err.to_string())
            ),
        };
        BadInput(report)
    })
}
