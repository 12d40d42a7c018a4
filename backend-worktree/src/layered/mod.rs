//! Layered materialization: a read-only base tree per commit, checked out once into
//! a content-addressed cache shared by every run of that commit, plus a per-run
//! upper directory that an isolating backend stacks on it with overlayfs.
//!
//! Provisioning a run then writes no file of the repository (O(1) in its size), the
//! run's changes are a walk of its upper directory (O(changes); whiteouts are
//! deletions), cleanup removes only the upper directory, and a workspace's disk
//! cost is its changes.

pub mod cache;
pub mod diff;
pub mod provision;
pub mod upper;

#[cfg(test)]
mod tests;
