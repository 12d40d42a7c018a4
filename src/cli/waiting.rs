//! One line on stderr when a run waits for capacity, whatever the terminal: for
//! what it waits and behind whom, so a queue is never silent.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use workspace_core::capacity::{CapacitySnapshot, Resources};
use workspace_core::lifecycle::{State, StateName, TransitionObserver};

use super::host::{HostArgs, host_capacity};

/// How long a run may wait before the line is printed (an admission that is
/// only a moment says nothing).
const NOTICE_AFTER: Duration = Duration::from_millis(250);

/// `progress` (the terminal's status line, if any), and the waiting line.
pub(crate) fn observer(
    host: &HostArgs,
    progress: Option<TransitionObserver>,
) -> TransitionObserver {
    let host = host.clone();
    let latest: Arc<Mutex<Option<StateName>>> = Arc::new(Mutex::new(None));
    Arc::new(move |run_id, state: &State| {
        if let Some(progress) = &progress {
            progress(run_id, state);
        }
        *latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(state.name());
        if state.name() != StateName::Waiting {
            return;
        }
        let (latest, host, run) = (latest.clone(), host.clone(), run_id.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(NOTICE_AFTER).await;
            let still = *latest.lock().unwrap_or_else(PoisonError::into_inner);
            if still == Some(StateName::Waiting)
                && let Ok(snapshot) = host_capacity(&host).snapshot()
            {
                eprintln!("agent-workspace: {}", line(&run, &snapshot));
            }
        });
    })
}

/// `run R waits for capacity: needs 0.01 cpu, 64 MiB, 1 run; N in use of M; behind A, B`.
fn line(run: &str, snapshot: &CapacitySnapshot) -> String {
    let needs = snapshot
        .waiters
        .iter()
        .find(|w| w.label == run)
        .map(|w| format!("needs {}", amounts(&w.resources)))
        .unwrap_or_else(|| "needs its reservation".to_owned());
    let mut ahead: Vec<&str> = snapshot.holders.iter().map(|h| h.label.as_str()).collect();
    ahead.extend(
        snapshot
            .waiters
            .iter()
            .take_while(|w| w.label != run)
            .map(|w| w.label.as_str()),
    );
    format!(
        "run {run} waits for capacity: {needs}; {} in use of {}; behind {}",
        amounts(&snapshot.in_use),
        amounts(&snapshot.total),
        if ahead.is_empty() {
            "nobody (the host is too small for it)".to_owned()
        } else {
            ahead.join(", ")
        }
    )
}

/// `1.5 cpu, 512 MiB, 1 run`: each dimension a run can wait for (the runs at
/// once, `AGENT_WORKSPACE_CAPACITY_SLOTS`, too).
fn amounts(r: &Resources) -> String {
    let runs = match r.slots {
        // No limit on the number of runs: nothing to wait for there.
        u32::MAX => String::new(),
        1 => ", 1 run".to_owned(),
        n => format!(", {n} runs"),
    };
    format!(
        "{} cpu, {} MiB{runs}",
        cores(r.cpu_millis),
        r.memory_bytes >> 20
    )
}

/// Cores of `millis` thousandths: `0.5`, `1.5`, `0.01` (a share as small as
/// the default reservation still shows).
pub(crate) fn cores(millis: u64) -> String {
    if millis.is_multiple_of(100) {
        format!("{:.1}", millis as f64 / 1000.0)
    } else {
        format!("{:.2}", millis as f64 / 1000.0)
    }
}
