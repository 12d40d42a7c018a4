//! What a parked run (suspended, or detached with its sandbox live) left on disk,
//! read back to take it over.

use std::path::Path;

use std::sync::Arc;

use super::error::{RunError, RunErrorKind};
use super::options::RunnerConfig;
use super::outcome::CommandOutcome;
use super::paths::{FILESYSTEM_STATE_FILE, RunPaths};
use super::state_files::{read_required, read_state};
use crate::RunId;
use crate::boundary::RunContext;
use crate::boundary::{ExitRecord, FilesystemRecord, SourceRecord};
use crate::contract::Contract;
use crate::evidence::{COMMANDS_DIR, CommandRecord, EvidenceFile, EvidenceWriter};
use crate::lifecycle::{Lifecycle, State};

/// A parked run (suspended or detached) taken over by this process: its journal
/// locked, its records read back. Dropping it releases the journal.
pub(super) struct Parked {
    pub paths: RunPaths,
    pub life: Lifecycle,
    pub stored: Stored,
    pub run: RunContext,
}

impl Parked {
    /// Locks the journal of `run_id` and reads its records; refuses a run that is
    /// neither suspended nor detached (and leaves it as it is).
    pub(super) fn take(config: &RunnerConfig, run_id: &RunId) -> Result<Self, RunError> {
        let refuse = |kind| RunError::refused(run_id, kind);
        let paths = RunPaths::locate(&config.runtime_dir, &config.evidence_root, run_id);
        let (life, _torn) =
            take_journal(&paths.journal, run_id, config.timeouts).map_err(|e| refuse(e.into()))?;
        if !matches!(life.state(), State::Suspended | State::Detached) {
            return Err(refuse(RunErrorKind::NotSuspended {
                state: life.state().name(),
            }));
        }
        let stored = Stored::read(&paths).map_err(refuse)?;
        let run = RunContext {
            run_id: run_id.clone(),
            contract: Arc::new(stored.contract.clone()),
            run_dir: paths.run_dir.clone(),
            runtime_dir: config.runtime_dir.clone(),
        };
        Ok(Self {
            paths,
            life,
            stored,
            run,
        })
    }
}

/// A parked run held shared by this process (see
/// [`SharedHold`](crate::journal::SharedHold)): its records read back, the run
/// neither taken over nor changed. Any number of processes may hold it at once;
/// none takes it over while one does. Dropping it lets go.
pub(super) struct SharedParked {
    pub paths: RunPaths,
    pub state: State,
    pub stored: Stored,
    pub run: RunContext,
    pub hold: crate::journal::SharedHold,
}

impl SharedParked {
    /// Holds the journal of `run_id` shared and reads its records; refuses a
    /// run that is neither suspended nor detached.
    pub(super) async fn hold(config: &RunnerConfig, run_id: &RunId) -> Result<Self, RunError> {
        let refuse = |kind| RunError::refused(run_id, kind);
        let paths = RunPaths::locate(&config.runtime_dir, &config.evidence_root, run_id);
        let hold = share_journal(&paths.journal).await.map_err(|source| {
            refuse(
                crate::lifecycle::LifecycleError::Open {
                    run_id: run_id.clone(),
                    source,
                }
                .into(),
            )
        })?;
        // Read under the hold: no owner moves the run while it is held.
        let read = crate::journal::read::<crate::lifecycle::Transition>(&paths.journal).map_err(
            |source| {
                refuse(
                    crate::lifecycle::LifecycleError::Open {
                        run_id: run_id.clone(),
                        source,
                    }
                    .into(),
                )
            },
        )?;
        let state = read
            .records
            .last()
            .map_or(State::Requested, |record| record.event.to.clone());
        if !matches!(state, State::Suspended | State::Detached) {
            return Err(refuse(RunErrorKind::NotSuspended {
                state: state.name(),
            }));
        }
        let stored = Stored::read_without_commands(&paths).map_err(refuse)?;
        let run = RunContext {
            run_id: run_id.clone(),
            contract: Arc::new(stored.contract.clone()),
            run_dir: paths.run_dir.clone(),
            runtime_dir: config.runtime_dir.clone(),
        };
        Ok(Self {
            paths,
            state,
            stored,
            run,
            hold,
        })
    }
}

/// How long a process that joins a run waits out its owner: one that only
/// moves the run between states (takes it back to start a background command,
/// parks it again) owns it for a moment; one that ends it or runs a command
/// in it itself, for longer.
const JOIN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The run's journal held shared, its owner waited out for [`JOIN_WAIT`].
async fn share_journal(
    journal: &Path,
) -> Result<crate::journal::SharedHold, crate::journal::JournalError> {
    let deadline = std::time::Instant::now() + JOIN_WAIT;
    loop {
        match crate::journal::SharedHold::try_take(journal) {
            Err(crate::journal::JournalError::Held { .. })
                if std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            taken => return taken,
        }
    }
}

/// How long a journal that reads as held is tried again before it counts as
/// owned: a fork anywhere in this process shares every open file with the child
/// until it execs or closes them, the journal's lock with them, for a moment.
const HELD_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// The run's journal, taken over; a moment's `Held` is waited out, a live owner
/// (which holds it for longer than [`HELD_WAIT`]) is not.
fn take_journal(
    journal: &std::path::Path,
    run_id: &RunId,
    timeouts: crate::lifecycle::Timeouts,
) -> Result<(Lifecycle, Option<crate::journal::TornTail>), crate::lifecycle::LifecycleError> {
    let deadline = std::time::Instant::now() + HELD_WAIT;
    loop {
        match Lifecycle::recover(journal, run_id.clone(), timeouts) {
            Err(crate::lifecycle::LifecycleError::Open {
                source: crate::journal::JournalError::Held { .. },
                ..
            }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            taken => return taken,
        }
    }
}

/// A suspended run's records: the contract and source from its evidence, its
/// filesystem grants from its private state, the commands it ran so far.
pub(super) struct Stored {
    pub contract: Contract,
    pub source: SourceRecord,
    pub filesystem: FilesystemRecord,
    pub evidence: EvidenceWriter,
    pub commands: Vec<CommandOutcome>,
    pub started_unix_ms: u64,
}

impl Stored {
    /// The run's records, the commands it ran among them: for a process that
    /// takes the run over (no other runs commands in it meanwhile).
    pub(super) fn read(paths: &RunPaths) -> Result<Self, RunErrorKind> {
        let mut stored = Self::read_without_commands(paths)?;
        let commands = previous_commands(&paths.evidence.join(COMMANDS_DIR))?;
        if let Some((first, _)) = commands.first() {
            stored.started_unix_ms = stored.started_unix_ms.min(first.started_unix_ms);
        }
        stored.commands = commands.into_iter().map(|(_, outcome)| outcome).collect();
        Ok(stored)
    }

    /// The run's records but its commands: for a process that joins it, where
    /// other processes start commands meanwhile (a command's directory is
    /// made before its record is written in it).
    pub(super) fn read_without_commands(paths: &RunPaths) -> Result<Self, RunErrorKind> {
        let evidence = EvidenceWriter::reopen(&paths.evidence)?;
        let contract = read_required(&evidence.path_of(EvidenceFile::Contract))?;
        let source = read_required(&evidence.path_of(EvidenceFile::Source))?;
        let filesystem = read_required(&paths.run_dir.join(FILESYSTEM_STATE_FILE))?;
        // The run began when its journal did (a run may have run no command).
        let started_unix_ms =
            crate::journal::begun_unix_ms(&paths.journal).unwrap_or_else(crate::clock::unix_ms_now);
        Ok(Self {
            contract,
            source,
            filesystem,
            evidence,
            commands: Vec::new(),
            started_unix_ms,
        })
    }
}

/// The commands recorded so far, in order.
pub(super) fn previous_commands(
    dir: &Path,
) -> Result<Vec<(CommandRecord, CommandOutcome)>, RunErrorKind> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(RunErrorKind::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut commands = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| RunErrorKind::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path().join(crate::evidence::COMMAND_FILE);
        // A number taken by a command that never started: its directory is
        // made before its record, and a process may die in between.
        let Some(record) = read_state::<CommandRecord>(&path)? else {
            tracing::warn!(path = %path.display(), "a command's directory has no record");
            continue;
        };
        let outcome = CommandOutcome {
            seq: record.seq,
            argv: record.argv.clone(),
            exit: ExitRecord {
                killed: record.killed.clone(),
                ..ExitRecord::ended(record.exit)
            },
            duration_ms: record
                .finished_unix_ms
                .map_or(0, |end| end.saturating_sub(record.started_unix_ms)),
            error: record.cause.clone(),
            check: record.check.clone(),
            not_run: None,
            stdout_bytes: record.stdout_bytes.unwrap_or_default(),
            stdout_truncated: record.stdout_truncated,
            stderr_bytes: record.stderr_bytes.unwrap_or_default(),
            stderr_truncated: record.stderr_truncated,
            output: None,
        };
        commands.push((record, outcome));
    }
    commands.sort_by_key(|(record, _)| record.seq);
    Ok(commands)
}
