//! The conformance kit: the design's contract tests as a suite any stack runs.
//!
//! Each case builds a fresh fixture (a real git repository made with `git`, a
//! runner over a stack the caller makes for it, its own scratch directory) and
//! tries to break one promise of the six boundaries: the run gets exactly the
//! pinned revision (`snapshot`); it cannot write or read the host outside its
//! grants (`path-scope`); two runs at once see nothing of each other
//! (`concurrency`); a workspace taken up again is the one left (`resume`); no
//! host variable or credential reaches it (`credential`); its patch applies to
//! the base commit and a check cannot vouch for its own edit (`promotion`); and
//! escape cases of the attack catalogue (`escape-signal`: killing a host
//! process; `escape-symlink`, `escape-proc-root`, `escape-hardlink`: reaching a
//! host file through a planted symbolic link, `/proc/*/root` or a hard link).
//! Each case is a public function ([`snapshot`], [`path_scope`], ...) and a name
//! [`Kit::run`] takes. Each returns [`Verdict::Passed`], [`Verdict::Unsupported`] (the
//! stack's declared capabilities rule the case out, and it says why) or
//! [`Verdict::Failed`] with what was observed; none is skipped in silence.
//!
//! ```no_run
//! # use workspace_core::boundary::Stack;
//! # async fn kit(make_stack: impl Fn(&std::path::Path) -> Result<Stack, String> + Send + Sync + 'static) {
//! use workspace_core::conformance::{Kit, Verdict};
//!
//! let results = Kit::new(make_stack).run_all().await;
//! assert!(results.iter().all(|r| !matches!(r.verdict, Verdict::Failed { .. })));
//! # }
//! ```
//!
//! Everything a case creates on the host (its scratch directory, a host file a
//! breach would write, a host process it offers to be killed) is its own and is
//! removed when the case ends.

mod cases;
mod fixture;

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::boundary::Stack;

/// What one case found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    /// The stack kept the promise.
    Passed,
    /// The stack's declared capabilities rule the case out.
    Unsupported {
        /// Which capability, in one line.
        reason: String,
    },
    /// The promise was broken.
    Failed {
        /// What the case observed, in one line.
        observed: String,
    },
}

/// One case's name and verdict.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CaseResult {
    /// The case (`snapshot`, `path-scope`, ...).
    pub name: &'static str,
    /// What it found.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// Makes the stack under test, once per case, for a case's scratch directory
/// (where a stack keeps caches of its own); or says why it cannot.
pub type MakeStack = Arc<dyn Fn(&Path) -> Result<Stack, String> + Send + Sync>;

/// The kit over one way of making the stack under test.
#[derive(Clone)]
pub struct Kit {
    make_stack: MakeStack,
}

impl std::fmt::Debug for Kit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kit").finish_non_exhaustive()
    }
}

/// The cases: [`CASES`] and one public function per case.
macro_rules! cases {
    ($($(#[doc = $doc:literal])+ $function:ident => $name:literal,)+) => {
        /// Every case, by name, in the order [`Kit::run_all`] runs them.
        pub const CASES: &[&str] = &[$($name),+];

        $(
            $(#[doc = $doc])+
            ///
            /// Runs on a fresh fixture over a stack `make_stack` makes.
            pub async fn $function(make_stack: &MakeStack) -> Verdict {
                Kit { make_stack: Arc::clone(make_stack) }.run($name).await.verdict
            }
        )+
    };
}

cases! {
    /// `snapshot`: the run gets exactly the pinned revision, not the
    /// repository's newer `HEAD`.
    snapshot => "snapshot",
    /// `path-scope`: the run cannot write the host outside its workspace, nor
    /// read a host file outside its grants, by a path, `..` or a symbolic link.
    path_scope => "path-scope",
    /// `concurrency`: two live runs at once see nothing of each other.
    concurrency => "concurrency",
    /// `resume`: a workspace let go and taken up again is the one it was.
    resume => "resume",
    /// `credential`: no host variable reaches a run unless the contract passes it.
    credential => "credential",
    /// `promotion`: the exported patch applies to the base commit; a check
    /// that edits what it verifies fails and its edit stays out.
    promotion => "promotion",
    /// `escape-signal`: the run cannot signal a host process.
    escape_signal => "escape-signal",
    /// `escape-symlink`: a symbolic link the repository plants does not lead
    /// to the host file it names.
    escape_symlink => "escape-symlink",
    /// `escape-proc-root`: no host file is reachable through `/proc/*/root`.
    escape_proc_root => "escape-proc-root",
    /// `escape-hardlink`: a hard link does not bring a host file in.
    escape_hardlink => "escape-hardlink",
}

impl Kit {
    /// The kit for stacks `make_stack` makes.
    pub fn new(
        make_stack: impl Fn(&Path) -> Result<Stack, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            make_stack: Arc::new(make_stack),
        }
    }

    /// Runs every case, one after another, each on a fresh fixture.
    pub async fn run_all(&self) -> Vec<CaseResult> {
        let mut results = Vec::with_capacity(CASES.len());
        for &name in CASES {
            results.push(self.run(name).await);
        }
        results
    }

    /// Runs the case `name` on a fresh fixture (an unknown name fails, saying so).
    pub async fn run(&self, name: &'static str) -> CaseResult {
        let verdict = match fixture::Fixture::new(name, &self.make_stack).await {
            Ok(fixture) => {
                let verdict = cases::run(name, &fixture).await;
                fixture.remove();
                verdict
            }
            Err(why) => Verdict::Failed {
                observed: format!("the fixture could not be made: {why}"),
            },
        };
        CaseResult { name, verdict }
    }
}
