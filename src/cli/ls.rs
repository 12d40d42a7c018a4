//! `agent-workspace ls`: the runs under the runtime directory and where each is.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::SystemTime;

use workspace_core::clock::{unix_ms, unix_ms_now};

use agent_workspace::namespace::cgroup::{CgroupLayout, run_processes};
use clap::Args;
use serde::Serialize;
use workspace_core::RunId;
use workspace_core::boundary::PreviewEndpoint;
use workspace_core::capacity::{CapacitySnapshot, Resources};
use workspace_core::journal::{self, JournalRead};
use workspace_core::lifecycle::{FailureCause, State, StateName, Transition};
use workspace_core::recovery::JOURNAL_DIR;
use workspace_core::runner::BACKGROUND_PREFIX;
use workspace_core::runner::RunPaths;

use super::backend::Backend;
use super::host::{HostArgs, host_capacity};
use super::text::one_line;

#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    /// Include runs that are cleaned up (by default only the others are listed).
    #[arg(long)]
    all: bool,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// List only the runs of this backend that are not cleaned up (a cleaned
    /// run's backend is gone with its files).
    #[arg(long, value_enum, value_name = "BACKEND")]
    backend: Option<Backend>,
}

/// One run, as listed.
#[derive(Debug, Serialize)]
struct Row {
    run_id: String,
    /// The state name (`waiting`, `running`, `failed`, ...), or `unreadable`.
    state: String,
    /// For a failed run: the state it failed in and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    failure: Option<Failure>,
    /// When the run entered its state (its last journal record), in milliseconds
    /// since the Unix epoch.
    since_unix_ms: u64,
    /// How long ago that was.
    age_ms: u64,
    /// Whether a live runner holds the run's journal; `false` for an unfinished
    /// run means its runner died (`agent-workspace recover` finishes it).
    held: bool,
    /// For a waiting run: its place in the host's capacity queue, 1 first (from
    /// the host pool; by journal `since` when the pool cannot be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_position: Option<usize>,
    /// The run's place in the host's capacity pool, when it holds or waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    capacity: Option<PoolPlace>,
    journal: PathBuf,
    /// For a run that is not cleaned up: how many processes run in its cgroups
    /// (its sandbox's pid 1, its services, what its commands left running).
    #[serde(skip_serializing_if = "Option::is_none")]
    processes: Option<usize>,
    /// For a run that is not cleaned up: the backend that sealed it
    /// (`namespace` or `container`).
    #[serde(skip_serializing_if = "Option::is_none")]
    backend: Option<&'static str>,
    /// For a run that is not cleaned up with a capped disk: the disk, and how
    /// much of it is used now.
    #[serde(skip_serializing_if = "Option::is_none")]
    disk: Option<DiskLine>,
    /// For a run that is not cleaned up: where its `process.ports` are published.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<PreviewEndpoint>,
    /// Its services, by name, and whether each is ready (or how it ended).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    services: Vec<ServiceLine>,
    /// Why the journal could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// The capped disk of a listed run.
#[derive(Debug, Serialize)]
struct DiskLine {
    /// `image` or `tmpfs`.
    kind: workspace_core::boundary::DiskKind,
    /// The cap, in bytes.
    cap_bytes: u64,
    /// What its file system holds now (none when it is not mounted, as after
    /// a host restart).
    #[serde(skip_serializing_if = "Option::is_none")]
    used_bytes: Option<u64>,
}

/// A service of a listed run.
#[derive(Debug, Serialize)]
struct ServiceLine {
    name: String,
    /// `ready`, `starting`, or how it ended.
    status: String,
}

/// A run's ticket in the host capacity pool.
#[derive(Debug, Serialize)]
struct PoolPlace {
    /// `holding` or `waiting`.
    role: &'static str,
    /// Since when it holds (granted) or waits (queued), in milliseconds since the
    /// Unix epoch.
    since_unix_ms: u64,
    /// What it holds or asks for.
    resources: Resources,
}

#[derive(Debug, Serialize)]
struct Failure {
    at: StateName,
    cause: FailureCause,
}

/// Lists the runs and who holds or waits for host capacity; exit 0, or 1 when
/// the journal directory, a journal or the capacity pool could not be read (what
/// could be read is still listed).
pub(crate) fn run(args: &LsArgs, host: &HostArgs) -> ExitCode {
    let dir = host.dirs().runtime.join(JOURNAL_DIR);
    let paths = match journal_files(&dir) {
        Ok(paths) => paths,
        Err(err) => {
            return super::json::Failure::new(
                super::json::ErrorKind::Io,
                1,
                format!("cannot list the journals in {}: {err}", dir.display()),
            )
            .path(&dir)
            .report();
        }
    };
    let now = unix_ms_now();
    let dirs = host.dirs();
    let mut rows: Vec<Row> = paths
        .iter()
        .map(|path| row(path, now))
        .filter(|row| args.all || row.state != StateName::Cleaned.to_string())
        .collect();
    let cgroups = CgroupLayout::detect().ok();
    for row in &mut rows {
        live_parts(row, &dirs.runtime, &dirs.evidence);
        if let Some(layout) = &cgroups
            && row.state != StateName::Cleaned.to_string()
            && let Ok(run_id) = RunId::new(row.run_id.as_str())
        {
            row.processes = run_processes(layout, &host.cgroup_parent(), &run_id)
                .ok()
                .filter(|pids| !pids.is_empty())
                .map(|pids| pids.len());
        }
    }
    if let Some(backend) = args.backend {
        rows.retain(|row| row.backend == Some(backend.name()));
    }
    rows.sort_by(|a, b| (a.since_unix_ms, &a.run_id).cmp(&(b.since_unix_ms, &b.run_id)));
    let pool = match host_capacity(host).snapshot() {
        Ok(pool) => Some(pool),
        Err(err) => {
            eprintln!(
                "agent-workspace: cannot read the host capacity pool: {}",
                one_line(&workspace_core::error_chain(&err))
            );
            None
        }
    };
    match &pool {
        Some(pool) => merge_pool(&mut rows, pool),
        None => {
            let waiting = StateName::Waiting.to_string();
            for (position, row) in rows.iter_mut().filter(|r| r.state == waiting).enumerate() {
                row.queue_position = Some(position + 1);
            }
        }
    }
    let unreadable = rows.iter().any(|r| r.error.is_some());
    if args.json {
        super::json::print(&rows);
    } else {
        if rows.is_empty() {
            let listed = if args.all {
                "runs"
            } else {
                "runs that are not cleaned up"
            };
            println!("no {listed} under {}", host.dirs().runtime.display());
        } else {
            print!("{}", table(&rows));
        }
        if let Some(pool) = pool
            .as_ref()
            .filter(|p| !p.holders.is_empty() || !p.waiters.is_empty())
        {
            if !rows.is_empty() {
                println!();
            }
            // The pool is the host's: a filtered list still shows all of it.
            if args.backend.is_some() {
                println!("the host's capacity, shared by every backend:");
            }
            print!("{}", pool_table(pool, now));
        }
    }
    if unreadable || pool.is_none() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Fills in the published ports and services of a run that is not cleaned up.
fn live_parts(row: &mut Row, runtime: &Path, evidence: &Path) {
    if row.state == StateName::Cleaned.to_string() {
        return;
    }
    let Ok(run_id) = RunId::new(row.run_id.as_str()) else {
        return;
    };
    let paths = RunPaths::locate(runtime, evidence, &run_id);
    row.backend = Some(Backend::that_sealed(&paths.run_dir).name());
    row.ports = paths.previews().unwrap_or_default();
    row.disk = paths.disk().ok().flatten().map(|disk| DiskLine {
        kind: disk.kind,
        cap_bytes: disk.cap_bytes,
        used_bytes: used_bytes(&disk.mount_point),
    });
    row.services = paths
        .services()
        .unwrap_or_default()
        .into_iter()
        .map(|s| ServiceLine {
            status: match (&s.ended, s.ready_unix_ms) {
                (Some(ended), _) => ended.clone(),
                // A detached command's end is seen only by the runner that
                // started it: it is said started, not that it still runs.
                (None, Some(_)) if s.name.starts_with(BACKGROUND_PREFIX) => "started".into(),
                (None, Some(_)) => "ready".into(),
                (None, None) => "starting".into(),
            },
            name: s.name,
        })
        .collect();
}

/// What the file system mounted at `mount_point` holds, when one is mounted
/// there (not the file system below it).
fn used_bytes(mount_point: &Path) -> Option<u64> {
    let here = std::fs::metadata(mount_point).ok()?;
    let below = std::fs::metadata(mount_point.parent()?).ok()?;
    use std::os::unix::fs::MetadataExt;
    if here.dev() == below.dev() {
        return None;
    }
    let stat = nix::sys::statvfs::statvfs(mount_point).ok()?;
    Some((stat.blocks() - stat.blocks_free()) * stat.fragment_size())
}

/// Marks each row the pool knows (by label = run id) as holding or waiting; a
/// waiting run's queue position is the pool's.
fn merge_pool(rows: &mut [Row], pool: &CapacitySnapshot) {
    for row in rows.iter_mut() {
        if let Some(holder) = pool.holders.iter().find(|h| h.label == row.run_id) {
            row.capacity = Some(PoolPlace {
                role: "holding",
                since_unix_ms: unix_ms(holder.since),
                resources: holder.resources,
            });
        } else if let Some(waiter) = pool.waiters.iter().find(|w| w.label == row.run_id) {
            row.queue_position = Some(waiter.position + 1);
            row.capacity = Some(PoolPlace {
                role: "waiting",
                since_unix_ms: unix_ms(waiter.since),
                resources: waiter.resources,
            });
        }
    }
}

/// Who holds host capacity and who waits, in queue order.
fn pool_table(pool: &CapacitySnapshot, now: u64) -> String {
    let header = [
        "CAPACITY".to_owned(),
        "RUN".to_owned(),
        "SINCE (UTC)".to_owned(),
        "AGE".to_owned(),
        "CPU".to_owned(),
        "MEMORY".to_owned(),
    ];
    let line = |role: String, label: &str, since: SystemTime, resources: &Resources| {
        let since = unix_ms(since);
        [
            role,
            label.to_owned(),
            utc(since),
            age(now.saturating_sub(since)),
            super::waiting::cores(resources.cpu_millis),
            format!("{}M", resources.memory_bytes >> 20),
        ]
    };
    let mut lines = vec![header];
    for holder in &pool.holders {
        lines.push(line(
            "holds".into(),
            &holder.label,
            holder.since,
            &holder.resources,
        ));
    }
    for waiter in &pool.waiters {
        let role = format!("waits #{}", waiter.position + 1);
        lines.push(line(role, &waiter.label, waiter.since, &waiter.resources));
    }
    let mut widths = [0; 6];
    for line in &lines {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let mut text = String::new();
        for (cell, width) in line.iter().zip(widths) {
            text.push_str(&format!("{cell:<width$}  "));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// The `*.jsonl` files of the journal directory, sorted; none if it does not exist.
/// The journals of `dir` whose runs are cleaned up, with when each last
/// changed (Unix milliseconds), newest first.
pub(crate) fn cleaned_runs(dir: &Path) -> std::io::Result<Vec<(PathBuf, u64)>> {
    let now = unix_ms_now();
    let mut cleaned: Vec<(PathBuf, u64)> = journal_files(dir)?
        .iter()
        .map(|path| row(path, now))
        .filter(|row| row.state == StateName::Cleaned.to_string())
        .map(|row| (row.journal, row.since_unix_ms))
        .collect();
    cleaned.sort_by_key(|(_, since)| std::cmp::Reverse(*since));
    Ok(cleaned)
}

fn journal_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "jsonl") {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

fn row(path: &Path, now: u64) -> Row {
    let run_id = path
        .file_stem()
        .map(|stem| stem.to_string_lossy().into_owned())
        .unwrap_or_default();
    let modified = std::fs::metadata(path)
        .and_then(|meta| meta.modified())
        .map_or(0, unix_ms);
    let mut row = Row {
        run_id,
        state: "unreadable".into(),
        failure: None,
        since_unix_ms: modified,
        age_ms: now.saturating_sub(modified),
        held: false,
        queue_position: None,
        capacity: None,
        journal: path.to_path_buf(),
        processes: None,
        backend: None,
        disk: None,
        ports: Vec::new(),
        services: Vec::new(),
        error: None,
    };
    match journal::is_held(path) {
        Ok(held) => row.held = held,
        Err(err) => {
            row.error = Some(one_line(&workspace_core::error_chain(&err)));
            return row;
        }
    }
    let read: JournalRead<Transition> = match journal::read(path) {
        Ok(read) => read,
        Err(err) => {
            row.error = Some(one_line(&workspace_core::error_chain(&err)));
            return row;
        }
    };
    // A journal without a record belongs to a run created but not yet admitted.
    let state = match read.records.last() {
        Some(record) => {
            row.since_unix_ms = record.at_unix_ms;
            row.age_ms = now.saturating_sub(record.at_unix_ms);
            record.event.to.clone()
        }
        None => State::Requested,
    };
    if let State::Failed { at, cause } = &state {
        row.failure = Some(Failure {
            at: *at,
            cause: cause.clone(),
        });
    }
    row.state = state.name().to_string();
    row
}

/// The rows as an aligned table with a header.
fn table(rows: &[Row]) -> String {
    let header = ["RUN", "STATE", "SINCE (UTC)", "AGE", "RUNNER"];
    let cells: Vec<[String; 5]> = rows
        .iter()
        .map(|row| {
            let mut state = row.state.clone();
            if let Some(position) = row.queue_position {
                state.push_str(&format!(" #{position}"));
            }
            if let Some(failure) = &row.failure {
                state.push_str(&format!(" (in {})", failure.at));
            }
            let runner = match (&row.error, row.held, row.state.as_str()) {
                (Some(_), _, _) => "?",
                (None, true, _) => "live",
                (None, false, "cleaned") => "-",
                (None, false, "suspended" | "detached") => "parked",
                (None, false, _) => "lost",
            };
            [
                row.run_id.clone(),
                state,
                utc(row.since_unix_ms),
                age(row.age_ms),
                runner.to_owned(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut push_line = |line: &[&str]| {
        let mut text = String::new();
        for (i, (cell, width)) in line.iter().zip(widths).enumerate() {
            if i + 1 == line.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    push_line(&header);
    for (line, row) in cells.iter().zip(rows) {
        push_line(&line.each_ref().map(String::as_str));
        if let Some(processes) = row.processes {
            push_line(&["", &format!("processes: {processes}")]);
        }
        let ports: Vec<String> = row
            .ports
            .iter()
            .map(|p| format!("{} -> {}", p.host, p.port))
            .collect();
        if !ports.is_empty() {
            push_line(&["", &format!("ports: {}", ports.join(", "))]);
        }
        let services: Vec<String> = row
            .services
            .iter()
            .map(|s| format!("{} ({})", s.name, s.status))
            .collect();
        if !services.is_empty() {
            let services = format!("services: {}", services.join(", "));
            push_line(&["", &super::text::escaped(&services)]);
        }
        if let Some(error) = &row.error {
            push_line(&["", &format!("error: {error}")]);
        }
    }
    if rows.iter().any(|r| {
        !r.held
            && r.error.is_none()
            && !matches!(r.state.as_str(), "cleaned" | "suspended" | "detached")
    }) {
        out.push_str(
            "(runs marked lost have no live runner: `agent-workspace recover` finishes them)\n",
        );
    }
    out
}

/// `2026-01-31 12:34:56` for a time in milliseconds since the Unix epoch (UTC).
fn utc(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let rest = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(0),
        u32::try_from(day).unwrap_or(0),
    )
}

/// `42s`, `3m05s`, `2h07m`, `4d03h`.
fn age(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h{:02}m", secs / 3600, secs / 60 % 60),
        _ => format!("{}d{:02}h", secs / 86_400, secs / 3600 % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::{age, utc};

    #[test]
    fn times_are_formatted_in_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_767_225_599_000), "2025-12-31 23:59:59");
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(999), "0s");
        assert_eq!(age(65_000), "1m05s");
        assert_eq!(age(7_260_000), "2h01m");
        assert_eq!(age(97_200_000), "1d03h");
    }
}
