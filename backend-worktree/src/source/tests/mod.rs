//! Tests of the source module: real repositories built with the git CLI.

pub(crate) mod fixture;

mod boundary_tests;
mod checkout_tests;
mod inputs_tests;
mod layered_tests;
mod linked_tests;
mod release_tests;
mod resume_tests;
