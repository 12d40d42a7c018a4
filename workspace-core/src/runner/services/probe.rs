//! One attempt of a service's readiness check.

use std::path::Path;
use std::time::Duration;

use super::super::http::get_status;
use crate::boundary::{CommandSpec, ProcessBoundary, RunContext};
use crate::contract::{HttpCheck, Probe};
use crate::evidence::ExitStatusRecord;

/// How a probe is described in `services.json`.
pub(super) fn describe(probe: Probe<'_>) -> String {
    match probe {
        Probe::Command(argv) => format!("command {}", argv.join(" ")),
        Probe::Tcp(port) => format!("tcp port {port}"),
        Probe::Http(http) => format!("http GET :{}{} -> {}", http.port, http.path, http.status),
        Probe::Log(text) => format!("log line containing {text:?}"),
    }
}

/// Tries `probe` once, within `limit`: `Ok` when it passed, else why not.
pub(super) async fn attempt(
    process: &dyn ProcessBoundary,
    run: &RunContext,
    probe: Probe<'_>,
    logs: [&Path; 2],
    limit: Duration,
) -> Result<(), String> {
    let tried = async {
        match probe {
            Probe::Command(argv) => command(process, run, argv, limit).await,
            Probe::Tcp(port) => process
                .connect(run, port)
                .await
                .map(drop)
                .map_err(|e| crate::error_chain(&e)),
            Probe::Http(http) => http_status(process, run, http).await,
            Probe::Log(text) => log_line(logs, text).await,
        }
    };
    tokio::time::timeout(limit, tried)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {} ms", limit.as_millis())))
}

async fn command(
    process: &dyn ProcessBoundary,
    run: &RunContext,
    argv: &[String],
    limit: Duration,
) -> Result<(), String> {
    let mut spec = CommandSpec::new(argv.to_vec());
    spec.timeout_ms = Some(u64::try_from(limit.as_millis()).unwrap_or(u64::MAX));
    let mut execution = process
        .spawn(run, &spec)
        .await
        .map_err(|e| crate::error_chain(&e))?;
    // The check's output is not kept: only whether it passed.
    drop((execution.take_stdout(), execution.take_stderr()));
    let exit = execution.wait().await.map_err(|e| crate::error_chain(&e))?;
    match exit.status {
        ExitStatusRecord::Code(0) => Ok(()),
        other => Err(format!("the check ended with {other}")),
    }
}

/// `GET path` over HTTP/1.0 on the run's port: `Ok` when the status line
/// carries the expected status.
async fn http_status(
    process: &dyn ProcessBoundary,
    run: &RunContext,
    http: &HttpCheck,
) -> Result<(), String> {
    let stream = process
        .connect(run, http.port)
        .await
        .map_err(|e| crate::error_chain(&e))?;
    let status = get_status(stream, &http.path).await?;
    if status == http.status {
        Ok(())
    } else {
        Err(format!("answered {status}, not {}", http.status))
    }
}

/// Whether either log file holds `text`.
async fn log_line(logs: [&Path; 2], text: &str) -> Result<(), String> {
    for log in logs {
        let bytes = tokio::fs::read(log).await.unwrap_or_default();
        if String::from_utf8_lossy(&bytes).contains(text) {
            return Ok(());
        }
    }
    Err(format!("no output contains {text:?} yet"))
}
