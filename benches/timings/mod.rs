//! Per-iteration timings shared by the benchmarks: criterion's `iter_custom`
//! routines record every iteration here, and the summary prints medians and ratios
//! measured in the same run.

#![allow(clippy::unwrap_used, dead_code)] // benchmark support

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use criterion::Criterion;

/// Criterion samples per benchmark; the batches before them are warm-up.
pub const SAMPLES: usize = 10;

/// Per-iteration durations, one batch per call of an `iter_custom` routine.
static TIMINGS: Mutex<BTreeMap<&'static str, Vec<Vec<Duration>>>> = Mutex::new(BTreeMap::new());

/// Records one routine call's iterations and returns their sum for criterion.
pub fn record(name: &'static str, batch: Vec<Duration>) -> Duration {
    let total = batch.iter().sum();
    TIMINGS.lock().unwrap().entry(name).or_default().push(batch);
    total
}

/// The iterations of the measured samples, sorted (criterion's warm-up calls left out).
pub fn measured(name: &str) -> Option<Vec<Duration>> {
    let timings = TIMINGS.lock().unwrap();
    let batches = timings.get(name)?;
    let skip = batches.len().saturating_sub(SAMPLES);
    let mut all: Vec<Duration> = batches[skip..].iter().flatten().copied().collect();
    all.sort();
    (!all.is_empty()).then_some(all)
}

/// The median of sorted durations.
pub fn median(sorted: &[Duration]) -> Duration {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2
    }
}

/// Milliseconds as a float, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints one row per `(name, label)` — iterations, median, min and max in
/// milliseconds, labels padded to `width` — under a header, and returns the
/// medians by name. A name with no measurement is printed with `missing(name)`.
pub fn print_medians(
    rows: &[(&'static str, String)],
    width: usize,
    missing: impl Fn(&str) -> &'static str,
) -> std::collections::BTreeMap<&'static str, Duration> {
    println!(
        "{:<width$} {:>6} {:>11} {:>11} {:>11}",
        "", "iters", "median ms", "min ms", "max ms"
    );
    let mut medians = std::collections::BTreeMap::new();
    for (name, label) in rows {
        let Some(sorted) = measured(name) else {
            println!("{label:<width$} ({})", missing(name));
            continue;
        };
        let m = median(&sorted);
        println!(
            "{label:<width$} {:>6} {:>11.2} {:>11.2} {:>11.2}",
            sorted.len(),
            ms(m),
            ms(sorted[0]),
            ms(sorted[sorted.len() - 1])
        );
        medians.insert(*name, m);
    }
    medians
}

/// How this bench binary was asked to run: `Some(true)` to measure
/// (`cargo bench`), `Some(false)` to run each routine once (`cargo test
/// --benches`), `None` when only asked to list its benchmarks (answered here).
pub fn full_run(criterion: &mut Criterion) -> Option<bool> {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        criterion.final_summary();
        return None;
    }
    Some(args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test"))
}
