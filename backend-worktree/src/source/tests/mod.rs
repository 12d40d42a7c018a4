//! Tests of the source module: real repositories built with the git CLI.

mod fixture;

mod boundary_tests;
mod checkout_tests;
mod inputs_tests;
mod linked_tests;
mod resume_tests;
