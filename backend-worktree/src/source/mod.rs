//! The Source boundary on the host: which code the agent receives, checked out with gix.
//!
//! # Materializations
//!
//! * **Standalone** (the default, also for `auto`): [`provision_standalone`] makes a
//!   repository of its own in `<dest>/.git` — `HEAD` detached at the resolved commit,
//!   its own index and (empty) refs, and a config written from scratch that carries
//!   nothing of the source's (no remotes, credential helpers, includes, hooks paths,
//!   filter drivers, fsmonitor, `core.sshCommand`, textconv or external diff). Objects
//!   are borrowed read-only through `objects/info/alternates` (what `git clone
//!   --shared` does). Whatever the agent does with git inside — commit, branch, tag,
//!   edit `.git/config`, add hooks, `git gc` — stays in the workspace. The source
//!   repository is opened in isolation and only read.
//! * **Linked** ([`provision_linked`]): a git worktree registered in the source. It
//!   shares refs, config, stash and hooks with the source's main checkout: the agent's
//!   `git branch`, `git tag`, `git config` or a new hook there write into the source
//!   repository and reach every other checkout of it (a test in this module shows a
//!   branch made in the worktree appearing in the source). Use it only when that is
//!   wanted; that is why standalone is the default.
//!
//! # Raw checkouts
//!
//! Files are written as the blobs of the tree: no smudge filter or other driver
//! program runs (the gix filter pipeline has no drivers), no end-of-line, `ident` or
//! encoding conversion applies (`.gitattributes` files are kept out of gix's
//! attribute lookup and written raw). Symlinks are created as symlinks. Checkout runs
//! on all cores (gix's parallel checkout), and the index is written by this module.
//!
//! # Resume
//!
//! [`verify_checkout`] re-reads the workspace's `HEAD` as plain data without following
//! any link (never opening the agent-writable repository), refuses a moved `HEAD`
//! unless a rebase is allowed, and reports the files inherited relative to the base
//! tree read from the source, as [`crate::changes`] computes them for the diff.
//!
//! # Ambient authority
//! Every function here that takes a repository path or a destination uses it as a
//! host path, as given; [`WorktreeSource`] treats `source.repo` of the contract as a
//! host path (the caller resolved it against its working directory).

mod boundary;
pub(crate) mod checkout;
pub(crate) mod config;
mod error;
mod head;
mod inherited;
mod inputs;
mod layered;
mod linked;
pub(crate) mod materialize;
mod pinned;
mod release;
mod resolve;
mod resume;
mod submodules;
mod withheld;

#[cfg(test)]
pub(crate) mod tests;

pub use boundary::{CHECKOUT_DIR, WorktreeSource, provision_source};
pub use checkout::{Checkout, provision_standalone};
pub use config::{remote_urls, strip_credentials};
pub use error::SourceError;
pub use inherited::Inherited;
pub use inputs::copy_inputs;
pub use linked::{provision_linked, release_linked};
pub use resolve::{has_uncommitted_changes, open_source_repo, resolve_revision};
pub use resume::{ResumeReport, verify_checkout};
