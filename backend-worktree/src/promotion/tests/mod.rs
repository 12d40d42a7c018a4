//! Tests of export and promotion against real git repositories (fixtures built with
//! the git CLI; `git apply` is the judge of every patch).

mod boundary;
mod guards;
mod review;
mod roundtrip;
mod scope;
mod uncarried;
mod vectors;
