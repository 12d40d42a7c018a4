//! backend-worktree: the Source, host-side Filesystem and Promotion boundaries of
//! agent-workspace, built on gix and cap-std.
//!
//! A run receives a fresh checkout of a pinned commit that shares nothing writable
//! with the source repository; its result leaves as a patch bound to a digest, and
//! reaches the repository only as a draft review branch once the required checks
//! passed for that digest.
//!
//! ```
//! # use std::process::Command;
//! # fn git(dir: &std::path::Path, args: &[&str]) {
//! #     let ok = Command::new("git").current_dir(dir)
//! #         .env("GIT_CONFIG_GLOBAL", "/dev/null").env("GIT_CONFIG_NOSYSTEM", "1")
//! #         .args(["-c", "user.name=t", "-c", "user.email=t@localhost"]).args(args)
//! #         .status().unwrap().success();
//! #     assert!(ok);
//! # }
//! use backend_worktree::changes::ChangeOptions;
//! use backend_worktree::promotion::export_patch;
//! use backend_worktree::source::provision_standalone;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let repo = dir.path().join("service");
//! # std::fs::create_dir(&repo).unwrap();
//! # git(&repo, &["init", "-q", "-b", "main"]);
//! # std::fs::write(repo.join("retry.rs"), "const ATTEMPTS: u32 = 3;\n").unwrap();
//! # git(&repo, &["add", "-A"]);
//! # git(&repo, &["commit", "-q", "-m", "base"]);
//! // A fresh, standalone checkout of `main` for one run.
//! let workspace = dir.path().join("run-1/checkout");
//! let checkout = provision_standalone(&repo, "main", &workspace).unwrap();
//!
//! // The agent works in it...
//! std::fs::write(workspace.join("retry.rs"), "const ATTEMPTS: u32 = 5;\n").unwrap();
//!
//! // ...and its result is a patch `git apply` accepts on the base commit.
//! let commit = checkout.commit.to_string();
//! let export = export_patch(&repo, &commit, &workspace, &[".".into()], &ChangeOptions::default()).unwrap();
//! let patch = String::from_utf8(export.patch).unwrap();
//! assert!(patch.contains("-const ATTEMPTS: u32 = 3;\n+const ATTEMPTS: u32 = 5;"));
//! assert!(export.changes[0].in_scope);
//! ```
//!
//! The modules:
//!
//! * [`source`]: fresh standalone checkouts (own `.git`, objects shared read-only),
//!   linked worktrees, resume with re-verification, and [`source::WorktreeSource`],
//!   the Source boundary;
//! * [`layered`]: a read-only base tree per commit in a content-addressed, bounded
//!   cache plus a per-run overlayfs upper directory, so provisioning is O(1) and a
//!   diff is O(changes);
//! * [`filesystem`]: [`filesystem::PathGrants`], capability-safe file access for an
//!   agent framework's own file tools;
//! * [`changes`] and [`promotion`]: what changed (never following a symlink, never
//!   running anything a repository configures), `diff.patch`, `changes.json`, draft
//!   review branches and [`promotion::WorktreePromotion`], the Promotion boundary;
//! * [`repo`]: opening the source repository in isolation.
//!
//! Host-side steps never open a workspace's repository: its `.git` is agent-writable
//! and could name filter drivers, fsmonitor, hooks or external diff programs. The
//! base is read from the source repository by commit id; the workspace is read as
//! plain files. See `docs/source-and-promotion.md`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod changes;
pub mod filesystem;
pub mod layered;
pub mod promotion;
pub mod repo;
pub mod snapshot;
pub mod source;

#[cfg(test)]
mod test_support;
