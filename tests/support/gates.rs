//! Gates: the real boundaries of a stack, wrapped so that a run stops forever at
//! one chosen point (a boundary call that signals readiness and never returns).
//! A process holding a run there is what the crash-recovery tests SIGKILL.
//!
//! The facade does not depend on `async-trait`, so the boundary traits are
//! implemented with the signatures that macro expands to.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use workspace_core::boundary::{
    BoundaryError, CommandSpec, Execution, LeakReport, ObservedBoundary, PatchExport,
    ProcessBoundary, ProcessCapabilities, PromotionBoundary, PromotionCapabilities,
    PromotionRecord, PromotionRequest, RunContext, SealPlan, SourceBoundary, SourceCapabilities,
    SourceRecord, Stack,
};
use workspace_core::lifecycle::CleanupPermit;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A point of a run where a gate can hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// In `SourceBoundary::provision`, before the real provision starts.
    BeforeProvision,
    /// In `SourceBoundary::provision`, after the real provision returned (the
    /// checkout exists, its record is not written yet).
    AfterProvision,
    /// In `ProcessBoundary::seal`, after the real seal applied the boundary.
    AfterSeal,
    /// In `ProcessBoundary::teardown`, before the real teardown.
    Teardown,
    /// In `PromotionBoundary::export`, before the real export.
    Export,
    /// In `SourceBoundary::release`, before the real release.
    Release,
}

/// Holds a run at one point: writes the ready file, then never returns.
#[derive(Debug)]
pub struct Gate {
    /// Where to hold (`None`: never).
    pub at: Option<Hold>,
    /// The file written once the run is held.
    pub ready: PathBuf,
}

impl Gate {
    /// Holds forever if `point` is this gate's point; returns at once otherwise.
    pub async fn hold(&self, point: Hold) {
        if self.at == Some(point) {
            signal_ready(&self.ready);
            std::future::pending::<()>().await;
        }
    }
}

/// Writes the ready file `path`.
pub fn signal_ready(path: &Path) {
    std::fs::write(path, b"ready\n").unwrap();
}

/// `plain` with its source, process and promotion boundaries behind `gate`.
pub fn gated(plain: Stack, gate: Arc<Gate>) -> Stack {
    Stack {
        source: Arc::new(GatedSource {
            inner: plain.source.clone(),
            gate: gate.clone(),
        }),
        process: Arc::new(GatedProcess {
            inner: plain.process.clone(),
            gate: gate.clone(),
        }),
        promotion: Arc::new(GatedPromotion {
            inner: plain.promotion.clone(),
            gate,
        }),
        ..plain
    }
}

/// A source boundary that holds at [`Hold::BeforeProvision`],
/// [`Hold::AfterProvision`] and [`Hold::Release`].
#[derive(Debug)]
pub struct GatedSource {
    inner: Arc<dyn SourceBoundary>,
    gate: Arc<Gate>,
}

impl SourceBoundary for GatedSource {
    fn capabilities(&self) -> SourceCapabilities {
        self.inner.capabilities()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn provision<'life0, 'life1, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
    ) -> BoxFuture<'async_trait, Result<SourceRecord, BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.gate.hold(Hold::BeforeProvision).await;
            let record = self.inner.provision(run).await?;
            self.gate.hold(Hold::AfterProvision).await;
            Ok(record)
        })
    }

    fn verify<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        record: &'life2 SourceRecord,
    ) -> BoxFuture<'async_trait, Result<(), BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.verify(run, record)
    }

    fn release<'life0, 'life1, 'life2, 'life3, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        record: &'life2 SourceRecord,
        permit: &'life3 CleanupPermit,
    ) -> BoxFuture<'async_trait, Result<(), BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.gate.hold(Hold::Release).await;
            self.inner.release(run, record, permit).await
        })
    }

    fn release_unrecorded<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        permit: &'life2 CleanupPermit,
    ) -> BoxFuture<'async_trait, Result<(), BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.release_unrecorded(run, permit)
    }
}

/// A process boundary that holds at [`Hold::AfterSeal`] and [`Hold::Teardown`].
#[derive(Debug)]
pub struct GatedProcess {
    inner: Arc<dyn ProcessBoundary>,
    gate: Arc<Gate>,
}

impl ProcessBoundary for GatedProcess {
    fn capabilities(&self) -> ProcessCapabilities {
        self.inner.capabilities()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn seal<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        plan: &'life2 SealPlan,
    ) -> BoxFuture<'async_trait, Result<ObservedBoundary, BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            let observed = self.inner.seal(run, plan).await?;
            self.gate.hold(Hold::AfterSeal).await;
            Ok(observed)
        })
    }

    fn spawn<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        command: &'life2 CommandSpec,
    ) -> BoxFuture<'async_trait, Result<Box<dyn Execution>, BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.spawn(run, command)
    }

    fn teardown<'life0, 'life1, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
    ) -> BoxFuture<'async_trait, Result<LeakReport, BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.gate.hold(Hold::Teardown).await;
            self.inner.teardown(run).await
        })
    }
}

/// A promotion boundary that holds at [`Hold::Export`].
#[derive(Debug)]
pub struct GatedPromotion {
    inner: Arc<dyn PromotionBoundary>,
    gate: Arc<Gate>,
}

impl PromotionBoundary for GatedPromotion {
    fn capabilities(&self) -> PromotionCapabilities {
        self.inner.capabilities()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn export<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        source: &'life2 SourceRecord,
    ) -> BoxFuture<'async_trait, Result<PatchExport, BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            self.gate.hold(Hold::Export).await;
            self.inner.export(run, source).await
        })
    }

    fn promote<'life0, 'life1, 'life2, 'life3, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        source: &'life2 SourceRecord,
        request: &'life3 PromotionRequest,
    ) -> BoxFuture<'async_trait, Result<PromotionRecord, BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        'life3: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.promote(run, source, request)
    }
}
