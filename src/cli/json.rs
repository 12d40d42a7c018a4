//! `--json`: where a subcommand's machine-readable answer goes, and the one
//! shape every error takes under it.
//!
//! Every subcommand with `--json` answers with exactly one JSON document on
//! one line. It goes to stdout, except for `run` and `exec` without
//! `--capture`, whose stdout is the command's own: their answer is the last
//! line of stderr, on a line of its own. An error is an answer too:
//! `{"error": {"kind": ..., "message": ..., ...}}` ([`ErrorJson`]) where the
//! answer would have gone, with the exit status the subcommand has without
//! `--json`; the human line on stderr is kept. `docs/cli-json.md` describes
//! every document.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};

use serde::Serialize;
use workspace_core::lifecycle::FailureCause;

/// Where this process's answer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// No `--json`: lines for people.
    Human,
    /// One JSON document on stdout.
    Stdout,
    /// One JSON document as the last line of stderr (`run`, `exec` without
    /// `--capture`: stdout is the command's).
    StderrLine,
}

static ANSWER: AtomicU8 = AtomicU8::new(0);

/// Sets where this process's answer goes (once, from the parsed arguments).
pub(crate) fn set_answer(answer: Answer) {
    let code = match answer {
        Answer::Human => 0,
        Answer::Stdout => 1,
        Answer::StderrLine => 2,
    };
    ANSWER.store(code, Ordering::Relaxed);
}

/// Where this process's answer goes.
pub(crate) fn answer() -> Answer {
    match ANSWER.load(Ordering::Relaxed) {
        1 => Answer::Stdout,
        2 => Answer::StderrLine,
        _ => Answer::Human,
    }
}

/// Whether `--json` was given.
pub(crate) fn enabled() -> bool {
    answer() != Answer::Human
}

/// The answer for command-carrying subcommands (`run`, `exec`): with
/// `--capture` on stdout, else as stderr's last line.
pub(crate) fn answer_of(json: bool, capture: bool) -> Answer {
    match (json, capture) {
        (false, _) => Answer::Human,
        (true, true) => Answer::Stdout,
        (true, false) => Answer::StderrLine,
    }
}

/// Prints `value` as this process's answer: one line of JSON on stdout, or on
/// stderr on a line of its own (after the command's output), as
/// [`set_answer`] chose. Nothing is printed without `--json`. `false` when it
/// could not be written (a closed stdout), which the caller may report.
pub(crate) fn print<T: Serialize>(value: &T) -> bool {
    let line = match serde_json::to_string(value) {
        Ok(line) => line,
        Err(e) => {
            eprintln!("agent-workspace: cannot print the JSON answer: {e}");
            return false;
        }
    };
    match answer() {
        Answer::Human => true,
        Answer::Stdout => {
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "{line}")
                .and_then(|()| stdout.flush())
                .is_ok()
        }
        Answer::StderrLine => {
            super::line_start::eprint_own_line_always(&line);
            true
        }
    }
}

/// What went wrong, by kind: the `kind` of an error answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ErrorKind {
    /// The command line could not be parsed (an unknown flag, a missing
    /// argument). Exit 2.
    Usage,
    /// Input refused before anything was done: a flag, a contract field, a
    /// file. Exit 2.
    BadInput,
    /// No run of that id under the runtime directory. Exit 2.
    NoSuchRun,
    /// The run belongs to another user. Exit 2.
    NotYourRun,
    /// The run has ended (or is not in a state that allows this). Exit 2.
    RunEnded,
    /// Another `agent-workspace` process holds the run. Exit 75.
    RunBusy,
    /// Capacity did not come within `--wait`. Exit 75.
    CapacityTimeout,
    /// The run itself failed (not the command in it). Exit 125.
    RunFailed,
    /// The backend could not be set up on this host. Exit 125.
    BackendUnavailable,
    /// A file could not be read or written (the exit status says how bad).
    Io,
    /// An evidence bundle could not be checked at all. Exit 1.
    Evidence,
    /// A file operation in a workspace (`files`) was refused or failed:
    /// `file_error` says why (`not-found`, `permission-denied`, ...). Exit 1,
    /// or 2 for a path or mode no file can have.
    File,
}

/// One problem of several (a contract's fields).
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ProblemJson {
    /// The field's path (`environment.limits.disk`).
    pub field: String,
    /// The line of the contract file it is on, where the format tells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// What is wrong with it.
    pub message: String,
}

impl ProblemJson {
    /// `problems` as the error answer lists them.
    pub(crate) fn list(problems: &workspace_core::contract::Problems) -> Vec<Self> {
        problems
            .iter()
            .map(|p| Self {
                field: p.path.clone(),
                line: p.line,
                message: p.message.clone(),
            })
            .collect()
    }
}

/// `{"error": {...}}`: the answer of a subcommand that failed under `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorJson {
    /// What went wrong.
    pub error: ErrorBody,
}

/// The body of [`ErrorJson`]: `kind` and `message` always, the rest when known.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorBody {
    /// What went wrong, by kind.
    pub kind: ErrorKind,
    /// What went wrong, in words (the line printed on stderr, without its
    /// `agent-workspace: ` prefix).
    pub message: String,
    /// The contract field at fault (`environment.limits.disk`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The command-line flag at fault (`--disk`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
    /// The file or directory at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// Every problem, when there were several (a contract's fields).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<ProblemJson>,
    /// The run the error is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The run's evidence bundle, when it has one (what was exported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<PathBuf>,
    /// Why the run failed, as its outcome records it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureCause>,
    /// Why a file operation was refused (`not-found`, `permission-denied`,
    /// `read-only`, `link-out-of-reach`, ...), with `kind` `file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file_error: Option<&'static str>,
    /// The process exit status that goes with it.
    pub exit_status: u8,
}

/// A failure of a subcommand: printed as a line on stderr and, under
/// `--json`, as an [`ErrorJson`] answer; [`Failure::report`] returns its exit
/// status.
#[derive(Debug)]
pub(crate) struct Failure {
    body: ErrorBody,
}

impl Failure {
    /// A failure of `kind` with exit status `exit` and `message`.
    pub(crate) fn new(kind: ErrorKind, exit: u8, message: impl Into<String>) -> Self {
        Self {
            body: ErrorBody {
                kind,
                message: message.into(),
                field: None,
                flag: None,
                path: None,
                problems: Vec::new(),
                run_id: None,
                evidence: None,
                failure: None,
                file_error: None,
                exit_status: exit,
            },
        }
    }

    /// The contract field at fault.
    pub(crate) fn field(mut self, field: impl Into<String>) -> Self {
        self.body.field = Some(field.into());
        self
    }

    /// The flag at fault.
    pub(crate) fn flag(mut self, flag: impl Into<String>) -> Self {
        self.body.flag = Some(flag.into());
        self
    }

    /// The file at fault.
    pub(crate) fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.body.path = Some(path.into());
        self
    }

    /// Every problem, when there were several.
    pub(crate) fn problems(mut self, problems: Vec<ProblemJson>) -> Self {
        self.body.problems = problems;
        self
    }

    /// The run it is about.
    pub(crate) fn run(mut self, run_id: impl ToString) -> Self {
        self.body.run_id = Some(run_id.to_string());
        self
    }

    /// The run's evidence bundle.
    pub(crate) fn evidence(mut self, evidence: Option<PathBuf>) -> Self {
        self.body.evidence = evidence;
        self
    }

    /// Why the run failed.
    pub(crate) fn failure(mut self, failure: Option<FailureCause>) -> Self {
        self.body.failure = failure;
        self
    }

    /// Why a file operation was refused.
    pub(crate) fn file_error(mut self, kind: &'static str) -> Self {
        self.body.file_error = Some(kind);
        self
    }

    /// Prints the failure (`agent-workspace: MESSAGE` on stderr, each of its
    /// lines escaped for the terminal; and the JSON answer under `--json`)
    /// and returns its exit status.
    pub(crate) fn report(self) -> ExitCode {
        let exit = self.body.exit_status;
        eprintln!(
            "agent-workspace: {}",
            super::text::escaped_lines(&self.body.message)
        );
        if enabled() {
            print(&ErrorJson { error: self.body });
        }
        ExitCode::from(exit)
    }
}

/// The answer mode of a command line clap could not parse: `--json` before
/// `--` asks for JSON, as the subcommand would have answered (`run` and `exec`
/// without `--capture` on stderr).
pub(crate) fn answer_of_raw_args() -> Answer {
    let args: Vec<String> = std::env::args().skip(1).take_while(|a| a != "--").collect();
    let json = args.iter().any(|a| a == "--json");
    // `exec --detach` answers on stdout too: no output of a command passes.
    let capture = args.iter().any(|a| a == "--capture" || a == "--detach");
    let carries_output = args
        .iter()
        .find(|a| !a.starts_with('-') && SUBCOMMANDS.contains(&a.as_str()))
        .is_some_and(|a| a == "run" || a == "exec");
    match (json, carries_output) {
        (false, _) => Answer::Human,
        (true, true) => answer_of(true, capture),
        (true, false) => Answer::Stdout,
    }
}

/// The subcommands' names, to find which one a command line names.
const SUBCOMMANDS: [&str; 21] = [
    "run",
    "create",
    "exec",
    "export",
    "files",
    "destroy",
    "promote",
    "checks",
    "contract",
    "verify",
    "ls",
    "suspend",
    "resume",
    "ports",
    "logs",
    "recover",
    "prune",
    "check-host",
    "probe",
    "conformance",
    "help",
];

#[cfg(test)]
mod tests {
    use super::{ErrorJson, ErrorKind, Failure};

    #[test]
    fn an_error_answer_names_what_is_known_only() {
        let failure = Failure::new(ErrorKind::BadInput, 2, "--disk 0: too small")
            .flag("--disk")
            .field("environment.limits.disk");
        let value = serde_json::to_value(ErrorJson {
            error: failure.body,
        })
        .unwrap();
        assert_eq!(
            value,
            serde_json::json!({"error": {
                "kind": "bad-input",
                "message": "--disk 0: too small",
                "field": "environment.limits.disk",
                "flag": "--disk",
                "exit_status": 2,
            }})
        );
    }
}
