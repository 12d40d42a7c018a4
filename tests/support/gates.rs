//! Gates: the real boundaries of a stack, wrapped so that a run stops forever at
//! one chosen point (a boundary call that signals readiness and never returns).
//! A process holding a run there is what the crash-recovery tests SIGKILL.
//!
//! The facade does not depend on `async-trait`, so the boundary traits are
//! implemented with the signatures that macro expands to (`boundary_method!`).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use workspace_core::boundary::{
    Attachment, BoundaryError, CommandSpec, Execution, LeakReport, ObservedBoundary, PatchExport,
    ProcessBoundary, ProcessCapabilities, PromotionBoundary, PromotionCapabilities,
    PromotionRecord, PromotionRequest, ResolvedSource, RunContext, SealPlan, SourceBoundary,
    SourceCapabilities, SourceRecord, Stack, Suspension, TerminateReport,
};
use workspace_core::contract::{Problems, SourceSection};
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

    /// The future of the real boundary call `call`, held at `before` before the
    /// call is even made and at `after` once it succeeded (each, as in
    /// [`Self::hold`], only if it is this gate's point).
    pub fn around<'a, T, F>(
        &'a self,
        before: Option<Hold>,
        call: F,
        after: Option<Hold>,
    ) -> BoxFuture<'a, Result<T, BoundaryError>>
    where
        F: FnOnce() -> BoxFuture<'a, Result<T, BoundaryError>> + Send + 'a,
        T: Send + 'a,
    {
        Box::pin(async move {
            if let Some(point) = before {
                self.hold(point).await;
            }
            let value = call().await?;
            if let Some(point) = after {
                self.hold(point).await;
            }
            Ok(value)
        })
    }
}

/// One async method of a boundary trait, with the signature `#[async_trait]`
/// expands it to: a lifetime for `self` and one per reference argument (named
/// by the caller, as in the trait), each outliving the returned future's. The
/// body returns that future.
macro_rules! boundary_method {
    (
        fn $name:ident(&$self:ident $(, $arg:ident: &$life:lifetime $ty:ty)+ $(,)?)
            -> $out:ty $body:block
    ) => {
        fn $name<'life0, $($life,)+ 'async_trait>(
            &'life0 $self,
            $($arg: &$life $ty,)+
        ) -> BoxFuture<'async_trait, Result<$out, BoundaryError>>
        where
            'life0: 'async_trait,
            $($life: 'async_trait,)+
            Self: 'async_trait,
        $body
    };
}

/// Writes the ready file `path`.
pub fn signal_ready(path: &Path) {
    std::fs::write(path, b"ready\n").unwrap();
}

/// `plain` with its source, process and promotion boundaries behind `gate`.
pub fn gated(plain: Stack, gate: Arc<Gate>) -> Stack {
    Stack {
        source: Arc::new(Gated {
            inner: plain.source.clone(),
            gate: gate.clone(),
        }),
        process: Arc::new(Gated {
            inner: plain.process.clone(),
            gate: gate.clone(),
        }),
        promotion: Arc::new(Gated {
            inner: plain.promotion.clone(),
            gate,
        }),
        ..plain
    }
}

/// A real boundary behind a gate: it delegates every call, holding at the gate's
/// points.
#[derive(Debug)]
pub struct Gated<B: ?Sized> {
    inner: Arc<B>,
    gate: Arc<Gate>,
}

/// Holds at [`Hold::BeforeProvision`], [`Hold::AfterProvision`] and
/// [`Hold::Release`].
impl SourceBoundary for Gated<dyn SourceBoundary> {
    fn capabilities(&self) -> SourceCapabilities {
        self.inner.capabilities()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn resolve<'life0, 'life1, 'async_trait>(
        &'life0 self,
        section: &'life1 SourceSection,
    ) -> BoxFuture<'async_trait, Result<Option<ResolvedSource>, Problems>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.resolve(section)
    }

    boundary_method! {
        fn provision(&self, run: &'life1 RunContext) -> SourceRecord {
            self.gate.around(
                Some(Hold::BeforeProvision),
                || self.inner.provision(run),
                Some(Hold::AfterProvision),
            )
        }
    }

    boundary_method! {
        fn verify(&self, run: &'life1 RunContext, record: &'life2 SourceRecord) -> () {
            self.inner.verify(run, record)
        }
    }

    boundary_method! {
        fn release(
            &self,
            run: &'life1 RunContext,
            record: &'life2 SourceRecord,
            permit: &'life3 CleanupPermit,
        ) -> () {
            self.gate.around(
                Some(Hold::Release),
                || self.inner.release(run, record, permit),
                None,
            )
        }
    }

    boundary_method! {
        fn release_unrecorded(
            &self,
            run: &'life1 RunContext,
            permit: &'life2 CleanupPermit,
        ) -> () {
            self.inner.release_unrecorded(run, permit)
        }
    }
}

/// Holds at [`Hold::AfterSeal`] and [`Hold::Teardown`].
impl ProcessBoundary for Gated<dyn ProcessBoundary> {
    fn capabilities(&self) -> ProcessCapabilities {
        self.inner.capabilities()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    boundary_method! {
        fn seal(&self, run: &'life1 RunContext, plan: &'life2 SealPlan) -> ObservedBoundary {
            self.gate.around(None, || self.inner.seal(run, plan), Some(Hold::AfterSeal))
        }
    }

    boundary_method! {
        fn spawn(
            &self,
            run: &'life1 RunContext,
            command: &'life2 CommandSpec,
        ) -> Box<dyn Execution> {
            self.inner.spawn(run, command)
        }
    }

    boundary_method! {
        fn teardown(&self, run: &'life1 RunContext) -> LeakReport {
            self.gate.around(Some(Hold::Teardown), || self.inner.teardown(run), None)
        }
    }

    boundary_method! {
        fn detach(&self, run: &'life1 RunContext) -> () {
            self.inner.detach(run)
        }
    }

    fn terminate<'life0, 'life1, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        grace: std::time::Duration,
    ) -> BoxFuture<'async_trait, Result<TerminateReport, BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.terminate(run, grace)
    }

    fn connect<'life0, 'life1, 'async_trait>(
        &'life0 self,
        run: &'life1 RunContext,
        port: u16,
    ) -> BoxFuture<'async_trait, Result<tokio::net::TcpStream, BoundaryError>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.connect(run, port)
    }

    boundary_method! {
        fn suspend(&self, run: &'life1 RunContext) -> Suspension {
            self.inner.suspend(run)
        }
    }

    boundary_method! {
        fn attach(&self, run: &'life1 RunContext, plan: &'life2 SealPlan) -> Attachment {
            self.inner.attach(run, plan)
        }
    }
}

/// Holds at [`Hold::Export`].
impl PromotionBoundary for Gated<dyn PromotionBoundary> {
    fn capabilities(&self) -> PromotionCapabilities {
        self.inner.capabilities()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    boundary_method! {
        fn export(&self, run: &'life1 RunContext, source: &'life2 SourceRecord) -> PatchExport {
            self.gate.around(Some(Hold::Export), || self.inner.export(run, source), None)
        }
    }

    boundary_method! {
        fn promote(
            &self,
            run: &'life1 RunContext,
            source: &'life2 SourceRecord,
            request: &'life3 PromotionRequest,
        ) -> PromotionRecord {
            self.inner.promote(run, source, request)
        }
    }
}

/// `plain` with a promotion boundary that declares no target (and refuses
/// every promotion): a stack for which the kit's promotion case does not apply.
pub fn without_promotion_targets(plain: Stack) -> Stack {
    Stack {
        promotion: Arc::new(NoTargets {
            inner: plain.promotion.clone(),
        }),
        ..plain
    }
}

/// A real promotion boundary that declares no target.
#[derive(Debug)]
struct NoTargets {
    inner: Arc<dyn PromotionBoundary>,
}

impl PromotionBoundary for NoTargets {
    fn capabilities(&self) -> PromotionCapabilities {
        PromotionCapabilities::default()
    }

    fn name(&self) -> &'static str {
        "no promotion targets"
    }

    boundary_method! {
        fn export(&self, run: &'life1 RunContext, source: &'life2 SourceRecord) -> PatchExport {
            self.inner.export(run, source)
        }
    }

    boundary_method! {
        fn promote(
            &self,
            run: &'life1 RunContext,
            source: &'life2 SourceRecord,
            request: &'life3 PromotionRequest,
        ) -> PromotionRecord {
            self.inner.promote(run, source, request)
        }
    }
}
