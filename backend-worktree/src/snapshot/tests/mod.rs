//! Tests of the snapshot module: real repositories built with the git CLI.

// panicking is how a test fails
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fixture;

mod boundary;
mod crafted;
mod roundtrip;
mod tamper;
