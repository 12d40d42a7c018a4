//! backend-worktree
#![deny(missing_docs)]
