//! Opening repositories on the host without running anything they configure.
//!
//! A workspace's `.git` is agent-writable: its config, attributes and hooks can name
//! filter drivers, fsmonitor programs, hooks paths or external diff commands. Host-side
//! steps therefore never open a workspace's repository to read content; they read the
//! base commit from the *source* repository, opened in isolation (no environment
//! variables, no system or global configuration), and walk the workspace's files as
//! plain data. gix runs no hooks and, unless asked, no filters.

use std::path::Path;

/// Opens the source repository at `path` in isolation: only its own configuration
/// is read, no `GIT_*` variable, no system or user configuration, no includes.
///
/// # Ambient authority
/// `path` is a host path, used as given.
pub fn open_source(path: &Path) -> gix::Result<gix::Repository> {
    gix::open_opts(path, gix::open::Options::isolated())
}
