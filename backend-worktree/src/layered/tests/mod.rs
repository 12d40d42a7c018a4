//! Tests of layered materialization.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod boundaries;
mod cache;
mod equivalence;
mod upper;
mod walk;
