//! The run's services (`environment.services`): started in its live sandbox
//! before it is sealed, each after the ones it depends on (declared order),
//! ready once its health check passes, stopped when the run drains, recorded in
//! `services.json` with their logs.
//!
//! A service writes its stdout and stderr to files of the run
//! (`<run dir>/services/NAME/stdout|stderr`), so it can keep running and logging
//! after the runner that started it detached; the runner that concludes the run
//! copies them, scrubbed of credential values, into the evidence. The records
//! are kept in `<run dir>/services.json` for the same reason.
//!
//! A service that exits before it is ready, or is not ready in time, fails the
//! run with
//! [`FailureCause::Service`](crate::lifecycle::FailureCause::Service), naming it
//! and quoting the tail of its log; the run is concluded as any failed run.

mod probe;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::error::RunErrorKind;
use super::kept_output::read_kept;
use super::paths::RunPaths;
use super::scrub::Scrubber;
use super::state_files::{read_state, remove_if_present, write_state};
use super::templates::{self, TemplateRecord};
use crate::boundary::{
    CommandOutput, CommandSpec, Execution, ProcessBoundary, RunContext, TemplateLayer,
};
use crate::clock::unix_ms_now;
use crate::contract::Service;
use crate::evidence::{
    EvidenceError, EvidenceFile, EvidenceWriter, ExitStatusRecord, HeadTail, OutputTally,
    StreamTally,
};
use crate::lifecycle::FailureCause;
use crate::step::{RunnerStep, StepErrors};

/// The file in the run directory that records the run's services.
pub const SERVICES_STATE_FILE: &str = "services.json";
/// The directory of the run directory that holds the services' logs.
const LOGS_DIR: &str = "services";
/// The name stem of commands started in the background (`exec-1`, ...); no
/// declared service may use it.
pub const BACKGROUND_PREFIX: &str = "exec-";
/// How much of a failed service's log its error quotes.
const LOG_TAIL_BYTES: usize = 2000;

/// One service of the run, as `services.json` records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRecord {
    /// The service's name.
    pub name: String,
    /// Its program and arguments.
    pub argv: Vec<String>,
    /// Its readiness check, in words.
    pub probe: String,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// When its check first passed.
    pub ready_unix_ms: Option<u64>,
    /// How many times the check ran.
    pub attempts: u32,
    /// Why the last failed attempt failed.
    pub last_failure: Option<String>,
    /// How it ended, in words (`None` while it runs).
    pub ended: Option<String>,
    /// Its exit status, when the runner that stopped it saw it.
    pub exit: Option<ExitStatusRecord>,
    /// Its template, when it declares one: which, and whether this run made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<TemplateRecord>,
    /// What its logs came to, in the evidence's copy, when one passed the
    /// output cap (`services/NAME/stdout` then holds its head and tail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs_truncated: Option<crate::evidence::OutputTally>,
}

/// The run's services: their records, and the handles of those this runner
/// started or stopped.
#[derive(Debug, Default)]
pub(super) struct Services {
    records: Vec<ServiceRecord>,
    /// `(index into records, handle)` of services started by this runner.
    /// Each handle in a mutex, only to make the run's workspace shareable
    /// between tasks: it is used only through `&mut self`, never locked.
    running: Vec<(usize, Mutex<Box<dyn Execution>>)>,
}

/// The variables the run's commands get from its services' `connection`
/// tables, `${NAME}` in a value replaced by the leased name `NAME`.
pub(super) fn connection_vars(
    services: &[Service],
    leased: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for service in services {
        for (name, value) in &service.connection {
            let mut value = value.clone();
            for (leased_name, leased_value) in leased {
                value = value.replace(&format!("${{{leased_name}}}"), leased_value);
            }
            vars.insert(name.clone(), value);
        }
    }
    vars
}

impl Services {
    /// The records a runner before this one kept (a detached run attached again).
    pub(super) fn load(run_dir: &Path) -> Result<Self, RunErrorKind> {
        let records = read_state(&run_dir.join(SERVICES_STATE_FILE))?.unwrap_or_default();
        Ok(Self {
            records,
            running: Vec::new(),
        })
    }

    /// Starts `services` in order, each ready before the next starts; a
    /// service's template (one of `templates`) is made first when the run
    /// makes it.
    pub(super) async fn start_all(
        &mut self,
        process: &dyn ProcessBoundary,
        run: &RunContext,
        (services, templates): (&[Service], &[TemplateLayer]),
        cancel: &CancellationToken,
        scrubber: &Scrubber,
    ) -> Result<(), RunErrorKind> {
        for service in services {
            let layer = templates.iter().find(|l| l.service == service.name);
            self.start(process, run, (service, layer), cancel, scrubber)
                .await?;
        }
        Ok(())
    }

    /// Starts `command` to run on in the background (`exec --detach`): recorded
    /// like a service named `exec-N` without a readiness check (its output goes
    /// to its log files and into the evidence, it is stopped when the run
    /// drains). Returns the name.
    pub(super) async fn start_background(
        &mut self,
        process: &dyn ProcessBoundary,
        run: &RunContext,
        command: &CommandSpec,
        scrubber: &Scrubber,
    ) -> Result<String, RunErrorKind> {
        let argv: Vec<String> = command.argv.iter().map(|a| scrubber.redact(a)).collect();
        let taken = self
            .records
            .iter()
            .filter(|r| r.name.starts_with(BACKGROUND_PREFIX))
            .count();
        let name = format!("{BACKGROUND_PREFIX}{}", taken + 1);
        let logs = kept_log_files(run, &name);
        let dir = run.run_dir.join(LOGS_DIR).join(&name);
        std::fs::create_dir_all(&dir).map_err(|source| RunErrorKind::Io {
            path: dir.clone(),
            source,
        })?;
        let mut spec = command.clone();
        spec.output = Some(logs);
        spec.tty = false;
        let mut execution = process.spawn(run, &spec).await?;
        drop((execution.take_stdout(), execution.take_stderr()));
        let now = unix_ms_now();
        self.records.push(ServiceRecord {
            name: name.clone(),
            argv: argv.clone(),
            probe: "none (started with exec --detach)".into(),
            started_unix_ms: now,
            ready_unix_ms: Some(now),
            attempts: 0,
            last_failure: None,
            ended: None,
            exit: None,
            template: None,
            logs_truncated: None,
        });
        self.running
            .push((self.records.len() - 1, Mutex::new(execution)));
        self.save(&run.run_dir)?;
        tracing::info!(run_id = %run.run_id, %name, ?argv, "background command started");
        Ok(name)
    }

    /// Records that the services started before did not survive (`why`): the
    /// run's sandbox was stopped or lost; they are started again with it.
    pub(super) fn lost(&mut self, why: &str) {
        for record in self.records.iter_mut().filter(|r| r.ended.is_none()) {
            record.ended = Some(why.to_owned());
        }
    }

    async fn start(
        &mut self,
        process: &dyn ProcessBoundary,
        run: &RunContext,
        (service, layer): (&Service, Option<&TemplateLayer>),
        cancel: &CancellationToken,
        scrubber: &Scrubber,
    ) -> Result<(), RunErrorKind> {
        let Some(check) = service.health.probe() else {
            return Err(failed(
                service,
                "declares no single health check".into(),
                "",
            ));
        };
        let logs = kept_log_files(run, &service.name);
        let dir = run.run_dir.join(LOGS_DIR).join(&service.name);
        std::fs::create_dir_all(&dir).map_err(|source| RunErrorKind::Io {
            path: dir.clone(),
            source,
        })?;
        let mut spec = CommandSpec::new(service.command.clone());
        spec.output = Some(logs.clone());
        let index = self.records.len();
        self.records.push(ServiceRecord {
            name: service.name.clone(),
            argv: service.command.clone(),
            probe: probe::describe(check),
            started_unix_ms: unix_ms_now(),
            ready_unix_ms: None,
            attempts: 0,
            last_failure: None,
            ended: None,
            exit: None,
            template: None,
            logs_truncated: None,
        });
        if let (Some(template), Some(layer)) = (&service.template, layer) {
            let made = if layer.prepared {
                Ok(TemplateRecord {
                    key: layer.key.clone(),
                    made: false,
                    took_ms: None,
                })
            } else {
                templates::make(process, run, (template, layer), &logs, cancel).await?
            };
            match made {
                Ok(record) => self.records[index].template = Some(record),
                Err(why) => {
                    self.records[index].ended = Some(why.clone());
                    self.save(&run.run_dir)?;
                    return Err(failed(service, why, &log_tail(&logs, scrubber)));
                }
            }
        }
        let mut execution = match process.spawn(run, &spec).await {
            Ok(execution) => execution,
            Err(e) => {
                self.records[index].ended =
                    Some(format!("did not start: {}", crate::error_chain(&e)));
                self.save(&run.run_dir)?;
                return Err(failed(
                    service,
                    format!("did not start: {}", crate::error_chain(&e)),
                    "",
                ));
            }
        };
        drop((execution.take_stdout(), execution.take_stderr()));
        tracing::info!(run_id = %run.run_id, service = %service.name, "service started");
        self.save(&run.run_dir)?;

        let interval = service.health.interval.as_duration();
        let deadline = Instant::now() + service.health.timeout.as_duration();
        let files = [logs.stdout.as_path(), logs.stderr.as_path()];
        let outcome = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let attempt = probe::attempt(process, run, check, files, left.max(interval)).await;
            let record = &mut self.records[index];
            record.attempts += 1;
            match attempt {
                Ok(()) => break Ok(()),
                Err(why) => record.last_failure = Some(why),
            }
            if Instant::now() >= deadline {
                break Err(format!(
                    "not ready after {} ms ({} attempts; last: {})",
                    service.health.timeout.as_millis(),
                    record.attempts,
                    record.last_failure.as_deref().unwrap_or("-"),
                ));
            }
            tokio::select! {
                exit = execution.wait() => {
                    let status = exit.map(|e| e.status).unwrap_or(ExitStatusRecord::Unknown);
                    record.exit = Some(status);
                    break Err(format!("exited before it was ready ({status})"));
                }
                () = tokio::time::sleep(interval) => {}
                () = cancel.cancelled() => break Err("cancelled before it was ready".into()),
            }
        };
        match outcome {
            Ok(()) => {
                self.records[index].ready_unix_ms = Some(unix_ms_now());
                self.running.push((index, Mutex::new(execution)));
                self.save(&run.run_dir)?;
                tracing::info!(run_id = %run.run_id, service = %service.name, "service ready");
                Ok(())
            }
            Err(why) => {
                let exit = execution.kill(crate::boundary::KillCause::Teardown).await;
                let record = &mut self.records[index];
                record.ended = Some(why.clone());
                if let Err(e) = exit {
                    record.ended = Some(format!("{why}; killing it: {}", crate::error_chain(&e)));
                }
                self.save(&run.run_dir)?;
                Err(failed(service, why, &log_tail(&logs, scrubber)))
            }
        }
    }

    /// Stops the services: each one this runner holds with `SIGTERM` and its
    /// grace period (the last started first), then everything else the run left
    /// running, through the process boundary. Returns how many processes that
    /// stopped besides the services this runner holds (0 when it held them all).
    pub(super) async fn stop_all(
        &mut self,
        process: &dyn ProcessBoundary,
        run: &RunContext,
        services: &[Service],
        errors: &mut StepErrors,
    ) -> u32 {
        let grace_of = |name: &str| {
            services
                .iter()
                .find(|s| s.name == name)
                .map_or(Duration::from_secs(5), |s| s.stop_grace.as_duration())
        };
        while let Some((index, execution)) = self.running.pop() {
            let mut execution = execution
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner);
            let record = &mut self.records[index];
            let grace = grace_of(&record.name);
            match execution.terminate(grace).await {
                Ok(exit) => {
                    record.ended = Some(match exit.killed {
                        Some(_) => {
                            format!("killed after a grace period of {} ms", grace.as_millis())
                        }
                        None => "stopped by SIGTERM when the run drained".into(),
                    });
                    record.exit = Some(exit.status);
                }
                Err(e) => {
                    record.ended = Some(format!("stopping it failed: {}", crate::error_chain(&e)));
                    let name = record.name.clone();
                    errors.push(RunnerStep::StopService { name }, e);
                }
            }
        }
        let longest = services.iter().map(|s| s.stop_grace.as_duration()).max();
        let unstopped = self.records.iter().any(|r| r.ended.is_none());
        let mut signalled = 0;
        if unstopped {
            // Started by another runner (the run was detached and attached again):
            // stopped with everything else the run left running.
            let grace = longest.unwrap_or(Duration::from_secs(5));
            let ended = match process.terminate(run, grace).await {
                Ok(report) => {
                    signalled = report.signalled;
                    let killed = match report.killed {
                        0 => format!("all ended within the {} ms grace", grace.as_millis()),
                        n => format!(
                            "{n} killed at the end of the {} ms grace",
                            grace.as_millis()
                        ),
                    };
                    if report.signalled == 0 {
                        // Nothing of the run was left to stop: it had ended,
                        // and only the runner that started it saw how.
                        "had ended before the run drained (its exit status went to the \
                         runner that started it)"
                            .to_owned()
                    } else {
                        format!(
                            "stopped with the run's other processes, unless it had ended \
                             before (SIGTERM to {}; {killed})",
                            report.signalled
                        )
                    }
                }
                Err(e) => {
                    let ended = format!("left to teardown: {}", crate::error_chain(&e));
                    errors.push(RunnerStep::Teardown, e);
                    ended
                }
            };
            for record in self.records.iter_mut().filter(|r| r.ended.is_none()) {
                record.ended = Some(ended.clone());
            }
        }
        if let Err(e) = self.save(&run.run_dir) {
            errors.push(RunnerStep::ExportServices, e);
        }
        signalled
    }

    /// Lets the services run on without this runner (the run is detached).
    pub(super) fn release(&mut self) {
        for (_, execution) in self.running.drain(..) {
            execution
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner)
                .release();
        }
    }

    /// `services.json` and each service's scrubbed logs into the evidence,
    /// each stream's head and tail when it passed the output cap (`cap`, what
    /// the logs' keeper held them to).
    pub(super) fn export(
        &self,
        evidence: &EvidenceWriter,
        run_dir: &Path,
        (scrubber, cap): (&Scrubber, HeadTail),
    ) -> Result<(), EvidenceError> {
        if self.records.is_empty() {
            return Ok(());
        }
        // services.json is written even when a log cannot be: the first
        // such error is returned after it.
        let mut records = self.records.clone();
        let mut failed = Ok(());
        for record in &mut records {
            let logs = log_files(run_dir, &record.name);
            let mut tally = OutputTally::default();
            for (stream, path, tallied) in [
                ("stdout", &logs.stdout, &mut tally.stdout),
                ("stderr", &logs.stderr, &mut tally.stderr),
            ] {
                let kept = read_kept(path, 0, cap).unwrap_or_default();
                *tallied = StreamTally {
                    total_bytes: kept.total,
                    truncated: kept.truncated,
                };
                let mut bytes = match kept.truncated {
                    Some(_) => scrubber.redact_cut(&kept.head),
                    None => scrubber.redact_bytes(&kept.head),
                };
                bytes.extend(scrubber.redact_bytes(&kept.tail));
                let written = evidence.write_service_output(&record.name, stream, &bytes);
                failed = failed.and(written);
            }
            let truncated = tally.stdout.truncated.is_some() || tally.stderr.truncated.is_some();
            record.logs_truncated = truncated.then_some(tally);
        }
        evidence.write_json(EvidenceFile::Services, &records)?;
        failed
    }

    /// Removes the services' logs and records from the run directory.
    pub(super) fn remove_files(run_dir: &Path, errors: &mut StepErrors) {
        remove_if_present(&run_dir.join(LOGS_DIR), errors);
        remove_if_present(&run_dir.join(SERVICES_STATE_FILE), errors);
    }

    /// Writes `services.json`; a run without services has none (records are
    /// only ever added, and a missing file reads as no services).
    fn save(&self, run_dir: &Path) -> Result<(), RunErrorKind> {
        if self.records.is_empty() {
            return Ok(());
        }
        write_state(&run_dir.join(SERVICES_STATE_FILE), &self.records)
    }
}

impl RunPaths {
    /// The run's services as recorded so far (`services.json` of the run
    /// directory); none once the run is cleaned up.
    pub fn services(&self) -> Result<Vec<ServiceRecord>, RunErrorKind> {
        read_state(&self.run_dir.join(SERVICES_STATE_FILE)).map(Option::unwrap_or_default)
    }
}

/// The log files of the service `name` in `run_dir`.
pub fn log_files(run_dir: &Path, name: &str) -> CommandOutput {
    let dir: PathBuf = run_dir.join(LOGS_DIR).join(name);
    CommandOutput {
        stdout: dir.join("stdout"),
        stderr: dir.join("stderr"),
        follow: false,
        bound: None,
    }
}

/// The log files of the service (or background command) `name` of `run`, held
/// by their keeper to the run's output cap.
fn kept_log_files(run: &RunContext, name: &str) -> CommandOutput {
    let cap = run.contract.environment.limits.output_bytes();
    CommandOutput {
        bound: Some(HeadTail::of_cap(cap)),
        ..log_files(&run.run_dir, name)
    }
}

fn failed(service: &Service, why: String, tail: &str) -> RunErrorKind {
    let message = if tail.is_empty() {
        why
    } else {
        format!("{why}; the end of its log:\n{tail}")
    };
    RunErrorKind::Failed(FailureCause::Service {
        name: service.name.clone(),
        message,
    })
}

/// The last [`LOG_TAIL_BYTES`] of the service's stdout, then of its stderr,
/// each line after the name of its stream (`stdout| `), so that the tail
/// still says which stream each line came from when it is printed on one
/// line (the two files do not say how their lines interleaved).
fn log_tail(logs: &CommandOutput, scrubber: &Scrubber) -> String {
    let mut tail = Vec::new();
    let bound = logs.bound.unwrap_or(HeadTail::of_cap(u64::MAX));
    for (stream, path) in [("stdout", &logs.stdout), ("stderr", &logs.stderr)] {
        let kept = read_kept(path, 0, bound).unwrap_or_default();
        let end = if kept.tail.is_empty() {
            kept.head
        } else {
            kept.tail
        };
        let bytes = scrubber.redact_bytes(&end);
        let start = bytes.len().saturating_sub(LOG_TAIL_BYTES);
        let text = String::from_utf8_lossy(&bytes[start..]);
        tail.extend(
            text.lines()
                .filter(|line| !line.trim().is_empty())
                .map(|line| format!("{stream}| {}", line.trim_end())),
        );
    }
    tail.join("\n")
}
