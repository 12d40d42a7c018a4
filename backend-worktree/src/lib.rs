//! backend-worktree: the Source, host-side Filesystem and Promotion boundaries of
//! agent-workspace, built on gix and cap-std.
//!
//! **Status: not implemented yet.** This crate holds no boundary implementation
//! today; a stack cannot use it. It will hold:
//!
//! * **Source**: fresh standalone checkouts (own `.git`, objects shared read-only
//!   through alternates, detached HEAD at the resolved commit), layered
//!   materialization (a read-only base tree per commit plus a per-run upper
//!   directory), a `linked` worktree mode, resume with re-verification, and
//!   content-addressed snapshots;
//! * **Filesystem (host side)**: `PathGrants` for agent frameworks' own file tools,
//!   confined with cap-std (no `..`, absolute paths, escaping symlinks, hard links or
//!   `/proc` aliases);
//! * **Promotion**: a `diff.patch` that `git apply` accepts on the base commit,
//!   `changes.json` with the scope of each path, and draft review branches created
//!   only when the required checks passed for the exact patch digest.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
