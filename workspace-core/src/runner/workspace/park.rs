//! A sealed run parked without ending it: detached (its sandbox live) or
//! suspended (its processes frozen), for a later resume.

use super::Workspace;
use crate::boundary::Suspension;
use crate::lifecycle::State;
use crate::runner::error::{RunError, RunErrorKind};
use crate::runner::leases::RunLeases;

impl Workspace {
    /// Lets go of the sealed run without stopping anything: it is parked in
    /// `Detached`, its sandbox stays live (what its commands left running goes
    /// on), the leases are given back and the journal is released. Its capacity
    /// stays held by the sandbox when the process boundary
    /// [`holds_capacity`](crate::boundary::ProcessCapabilities::holds_capacity)
    /// and the admission control is a host-wide pool; otherwise it is given back.
    /// [`Runner::resume`](crate::runner::Runner::resume) (in this process or another) attaches to it again;
    /// crash recovery leaves a detached run alone. This is how a workspace lives
    /// across separate processes (`create`, then `exec`, `exec`, `promote`).
    ///
    /// Only a sealed run (no command running) can be detached; a run the process
    /// boundary cannot detach is failed and concluded instead.
    pub async fn detach(mut self) -> Result<DetachedRun, RunError> {
        self.fail_if_broken();
        if self.life.state() != &State::Sealed {
            let state = self.life.state().name();
            let refused = self.life.detach().map(drop).map_err(RunErrorKind::from);
            return Err(self.error(refused.err().unwrap_or(RunErrorKind::NotSealed {
                step: "detaching",
                state,
            })));
        }
        let stack = self.stack.clone();
        self.services.release();
        if let Err(e) = stack.process.detach(&self.run).await {
            return Err(self.abort(e.into()).await);
        }
        self.journal(|life| life.detach().map(drop))?;
        self.let_go_of_capacity();
        self.leases = RunLeases::default();
        tracing::info!(run_id = %self.run.run_id, "run detached");
        Ok(DetachedRun {
            run_id: self.run.run_id.clone(),
            evidence: self.evidence.dir().to_path_buf(),
        })
    }

    /// Suspends the run and parks it in `Suspended`: its processes are frozen
    /// in place (or, where the process boundary cannot freeze, stopped), the
    /// checkout and the evidence stay, the capacity is kept by the frozen
    /// sandbox as by a detached one (given back when its processes were
    /// stopped), the journal is released. [`Runner::resume`](crate::runner::Runner::resume) (in this process or another) re-verifies
    /// the checkout and thaws the processes; crash recovery leaves a suspended
    /// run alone.
    ///
    /// Only a sealed run (no command running) can be suspended; a run whose
    /// processes can be neither frozen nor proven stopped is failed and
    /// concluded instead.
    pub async fn suspend(mut self) -> Result<SuspendedRun, RunError> {
        self.fail_if_broken();
        if self.life.state() != &State::Sealed {
            let state = self.life.state().name();
            let refused = self.life.suspend().map(drop).map_err(RunErrorKind::from);
            return Err(self.error(refused.err().unwrap_or(RunErrorKind::NotSealed {
                step: "suspending",
                state,
            })));
        }
        let stack = self.stack.clone();
        self.services.release();
        let suspension = match stack.process.suspend(&self.run).await {
            Ok(suspension) => suspension,
            // The boundary's own error (it names the operation), as any
            // boundary's failure.
            Err(e) => return Err(self.abort(e.into()).await),
        };
        self.journal(|life| life.suspend().map(drop))?;
        self.let_go_of_capacity();
        self.leases = RunLeases::default();
        tracing::info!(run_id = %self.run.run_id, ?suspension, "run suspended");
        Ok(SuspendedRun {
            run_id: self.run.run_id.clone(),
            evidence: self.evidence.dir().to_path_buf(),
            suspension,
        })
    }
}

/// A run parked in `Detached` by [`Workspace::detach`], its sandbox live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachedRun {
    /// The run, for [`Runner::resume`](crate::runner::Runner::resume).
    pub run_id: crate::RunId,
    /// Its evidence bundle (unsealed until the run ends).
    pub evidence: std::path::PathBuf,
}

/// A run parked in `Suspended` by [`Workspace::suspend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuspendedRun {
    /// The run, for [`Runner::resume`](crate::runner::Runner::resume).
    pub run_id: crate::RunId,
    /// Its evidence bundle (unsealed until the run ends).
    pub evidence: std::path::PathBuf,
    /// Whether its processes were frozen or stopped.
    pub suspension: Suspension,
}
