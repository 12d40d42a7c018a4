//! backend-worktree: the Source, host-side Filesystem and Promotion boundaries of
//! agent-workspace, built on gix and cap-std.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod changes;
pub mod filesystem;
pub mod layered;
pub mod promotion;
pub mod repo;
pub mod source;
