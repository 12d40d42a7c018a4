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
//!
//! # Performance
//!
//! Reproduce with `cargo bench --bench provision` in the workspace root (about four
//! minutes, up to 6 GB of temporary files under `$TMPDIR`). It generates a repository of
//! 5,000 files (50 MB in 200 directories) and one ten times larger (50,000 files,
//! 500 MB in 2,000 directories), provisions fresh workspaces side by side with git in
//! the same run (every iteration on a fresh path, `sync` before each sample, nothing
//! deleted until the end) and prints medians and ratios of that run.
//!
//! Measured 2026-11-29: release build, 2-core VM (Debian 12, kernel 6.18, 23 GiB),
//! temporary files on ext4 on a virtio disk (`/dev/vda`, not tmpfs). Absolute times
//! move by up to 1.8x between runs on this machine (disk writeback, other builds);
//! ratios within one run much less. Medians of one run:
//!
//! | fresh workspace of the 5,000-file repository     | median ms |
//! |--------------------------------------------------|----------:|
//! | `git worktree add --detach`                      |       867 |
//! | `git clone --shared` + `git checkout`            |       781 |
//! | [`source::provision_standalone`]                 |       670 |
//! | [`layered::provision::provision_layered`], warm  |      0.62 |
//! | the same, 10x repository (50,000 files, 500 MB)  |      0.38 |
//! | diff of one changed file: layered upper, 5k      |      0.23 |
//! | the same, 10x repository                         |      0.41 |
//! | the same, [`promotion::export_patch`] of a standalone checkout, 5k | 78.7 |
//!
//! | ratio of medians                         | this run | goal        |
//! |------------------------------------------|---------:|-------------|
//! | standalone / `git worktree add`          |    0.77  | < 1: met    |
//! | clone `--shared` / `git worktree add`    |    0.90  |             |
//! | layered warm / `git worktree add`        |   0.001  | <= 0.1: met |
//! | layered warm 10x / layered warm 5k       |    0.62  | <= 2: met   |
//! | diff layered 10x / diff layered 5k       |    1.79  |             |
//! | diff layered 5k / diff standalone 5k     |   0.003  |             |
//!
//! Earlier runs beside concurrent builds gave standalone / `git worktree add` between
//! 0.37 and 0.70, and once 1.30 under a load of 2.9 on 2 cores: the standalone
//! checkout's lead comes from gix's parallel checkout on both cores, while git checks
//! out on one thread (`checkout.workers` defaults to 1), so CPU contention takes it
//! away. Populating the cache (the cold layered run, once per commit) took 0.9 s for
//! 5,000 files and 7.4 s for 50,000.
//!
//! A warm layered run writes three small files of `.git` and nothing that grows with
//! the repository: the tree's index (about 80 bytes a file, 4 MB at 50,000 files)
//! stays in the cached lower layer, where an earlier version copied it per run (12 of
//! 13.5 ms at 50,000 files, the one step that broke the 2x goal). The diff of a
//! layered run grows with the width of the trees on the changed path (a root tree of
//! 200 entries against 2,000, decoded per lookup), not with the number of files; the
//! standalone diff reads and hashes every file.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

/// The git library this crate's API speaks ([`source::open_source_repo`]
/// returns its `Repository`), so a caller names the same version.
pub use gix;

pub mod changes;
pub mod filesystem;
pub mod layered;
pub mod promotion;
pub mod repo;
pub mod snapshot;
pub mod source;

#[cfg(test)]
mod test_support;
