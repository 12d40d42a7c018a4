//! A small stand-in for libtest, shared by the test binaries of this package that
//! start themselves again as child processes (`harness = false` in `Cargo.toml`).
//!
//! Such a binary's `main` first checks its own environment variable and, when it
//! is set, runs the child side and exits; otherwise it calls [`run`] with its cases
//! (see [`cases!`]). [`run`] runs them one at a time, in order, catching a panic
//! per case so the others still run, and reports them as libtest does. It accepts
//! libtest's usual arguments: name filters, `--exact`, `--skip`, `--list` and
//! `--ignored` (no case is ignored, so that runs none) are honoured; the rest
//! (`--nocapture`, `--test-threads`, `--format`, ...) are accepted and ignored.
//! This is the harness of the root package's `tests/runner_recovery.rs`, shared.

#[allow(dead_code)] // a binary that starts no child does not use it
mod child;

#[allow(unused_imports)]
pub use child::ReExecChild;

use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::time::Instant;

/// One test case: its name and what runs it (it fails by panicking).
pub type Case = (String, Box<dyn Fn()>);

/// The [`Case`]s for the given test functions, each named after its function.
#[allow(unused_macros)] // a binary that names its cases otherwise does not use it
macro_rules! cases {
    ($($test:ident),+ $(,)?) => {
        vec![$((stringify!($test).to_owned(), Box::new($test) as Box<dyn Fn()>)),+]
    };
}
#[allow(unused_imports)]
pub(crate) use cases;

/// The command line, as far as this harness understands libtest's.
#[derive(Default)]
struct Args {
    list: bool,
    exact: bool,
    ignored_only: bool,
    filters: Vec<String>,
    skip: Vec<String>,
}

impl Args {
    fn parse() -> Self {
        let mut args = Self::default();
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "--list" => args.list = true,
                "--exact" => args.exact = true,
                "--ignored" => args.ignored_only = true,
                "--skip" => args.skip.extend(it.next()),
                "--test-threads" | "--format" | "--color" | "--logfile" | "--shuffle-seed"
                | "-Z" => {
                    it.next();
                }
                // --skip=NAME; the rest (--nocapture, --quiet, ...) are ignored.
                flag if flag.starts_with('-') => {
                    args.skip
                        .extend(flag.strip_prefix("--skip=").map(str::to_owned));
                }
                filter => args.filters.push(filter.to_owned()),
            }
        }
        args
    }

    fn selects(&self, name: &str) -> bool {
        let matches = |f: &String| {
            if self.exact {
                name == f
            } else {
                name.contains(f.as_str())
            }
        };
        // No case of these binaries is ignored.
        !self.ignored_only
            && (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skip.iter().any(matches)
    }
}

/// Runs the `cases` the command line selects, in order, and reports them as
/// libtest does; fails if any of them failed.
pub fn run(cases: Vec<Case>) -> ExitCode {
    let args = Args::parse();
    let selected: Vec<&Case> = cases
        .iter()
        .filter(|(name, _)| args.selects(name))
        .collect();
    if args.list {
        for (name, _) in &selected {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filtered = cases.len() - selected.len();
    println!("\nrunning {} tests", selected.len());
    let started = Instant::now();
    let mut failed = Vec::new();
    for (name, case) in selected.iter().copied() {
        let result = std::panic::catch_unwind(AssertUnwindSafe(case));
        let verdict = if result.is_ok() { "ok" } else { "FAILED" };
        println!("test {name} ... {verdict}");
        let _ = std::io::stdout().flush();
        if result.is_err() {
            failed.push(name.as_str());
        }
    }
    if !failed.is_empty() {
        println!("\nfailures:");
        for name in &failed {
            println!("    {name}");
        }
    }
    println!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; {filtered} filtered out; finished in {:.2}s\n",
        if failed.is_empty() { "ok" } else { "FAILED" },
        selected.len() - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
