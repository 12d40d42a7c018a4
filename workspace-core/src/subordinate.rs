//! The subordinate id ranges the host gives its users (`/etc/subuid`,
//! `/etc/subgid`), which the host ids of a root runner's runs must stay out of.
//!
//! A run of host root is mapped to host ids of a range of its own (from
//! 100000 by default): its checkout and layers belong to them, and the runtime
//! directory lets that range's first group through. A user whose subordinate
//! range holds those ids may become them in a user namespace of its own
//! (`newuidmap`, `newgidmap`, setuid root), keeping the host's mounts, and
//! read or write every run's files. `useradd` gives the first user exactly
//! `100000:65536`. So the runs move above every such range when one holds the
//! default ids ([`host_id_base`]), and a backend refuses to start runs at ids
//! any range holds.

use std::path::{Path, PathBuf};

/// The host id that id 0 inside a root runner's run maps to, unless
/// [`HOST_ID_BASE_VAR`] says otherwise.
pub const DEFAULT_HOST_ID_BASE: u32 = 100_000;

/// The environment variable that moves a root runner's runs to other host ids
/// (`AGENT_WORKSPACE_HOST_ID_BASE=1879048192`): for a host whose users'
/// subordinate ranges hold the default ones.
pub const HOST_ID_BASE_VAR: &str = "AGENT_WORKSPACE_HOST_ID_BASE";

/// Where a root runner's runs go when a user's subordinate range holds
/// [`DEFAULT_HOST_ID_BASE`] (as `useradd` gives the first user): above every
/// range `useradd` gives (its `SUB_UID_MAX` is 600100000) and above systemd's
/// container range (which ends at 1879048191), below 2^31.
pub const FALLBACK_HOST_ID_BASE: u32 = 1_879_048_192;

/// The first host id of a root runner's runs: [`HOST_ID_BASE_VAR`] when it is
/// a number that leaves room for [`RUN_ID_SPAN`] ids; else
/// [`DEFAULT_HOST_ID_BASE`], or [`FALLBACK_HOST_ID_BASE`] when a user's
/// subordinate range holds the default ids and none holds the fallback's (the
/// backends refuse ids a range holds, naming it).
///
/// # Ambient authority
/// Reads this process's environment and the host's subordinate id files.
pub fn host_id_base() -> u32 {
    let declared = std::env::var(HOST_ID_BASE_VAR)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        .filter(|base| *base > 0 && u64::from(*base) + RUN_ID_SPAN <= u64::from(u32::MAX));
    if let Some(base) = declared {
        return base;
    }
    if !claimed_ranges(DEFAULT_HOST_ID_BASE).is_empty()
        && claimed_ranges(FALLBACK_HOST_ID_BASE).is_empty()
    {
        return FALLBACK_HOST_ID_BASE;
    }
    DEFAULT_HOST_ID_BASE
}

/// Where the host keeps its users' subordinate uid and gid ranges.
pub const SUBORDINATE_ID_FILES: [&str; 2] = ["/etc/subuid", "/etc/subgid"];

/// How many ids from a base a runner's runs may map to.
pub const RUN_ID_SPAN: u64 = 65_536;

/// A user's subordinate range that holds ids a runner's runs map to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedRange {
    /// The file that gives it.
    pub file: PathBuf,
    /// The user (name or uid) it is given to.
    pub owner: String,
    /// Its first id.
    pub start: u64,
    /// How many ids it holds.
    pub count: u64,
}

impl std::fmt::Display for ClaimedRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} gives {} the ids {} to {}",
            self.file.display(),
            self.owner,
            self.start,
            self.start.saturating_add(self.count).saturating_sub(1)
        )
    }
}

/// The ranges of [`SUBORDINATE_ID_FILES`] that hold any id of
/// `base..base + RUN_ID_SPAN` (a missing file holds none).
///
/// # Ambient authority
/// Reads the host's `/etc/subuid` and `/etc/subgid`.
pub fn claimed_ranges(base: u32) -> Vec<ClaimedRange> {
    SUBORDINATE_ID_FILES
        .iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(file).ok()?;
            Some(overlapping(Path::new(file), &text, base))
        })
        .flatten()
        .collect()
}

/// The lines of `text` (`owner:start:count`) whose range overlaps the run ids
/// from `base`; lines that do not parse hold nothing.
pub fn overlapping(file: &Path, text: &str, base: u32) -> Vec<ClaimedRange> {
    let (low, high) = (u64::from(base), u64::from(base) + RUN_ID_SPAN);
    text.lines()
        .filter_map(|line| {
            let mut fields = line.trim().split(':');
            let owner = fields.next()?.to_owned();
            let start: u64 = fields.next()?.trim().parse().ok()?;
            let count: u64 = fields.next()?.trim().parse().ok()?;
            (start < high && low < start.saturating_add(count)).then(|| ClaimedRange {
                file: file.to_path_buf(),
                owner,
                start,
                count,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_overlapping_the_run_ids_is_found_and_others_are_not() {
        let text = "alice:100000:65536\nbob:165536:65536\n# comment\nbad line\ncarol:34000:2000\n";
        let found = overlapping(Path::new("/etc/subuid"), text, 100_000);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].owner, "alice");
        assert_eq!(
            found[0].to_string(),
            "/etc/subuid gives alice the ids 100000 to 165535"
        );
        // A range that ends where the run ids begin, or begins where they end.
        assert!(overlapping(Path::new("f"), "a:34464:65536\nb:165536:1\n", 100_000).is_empty());
        // One id inside is enough.
        assert_eq!(
            overlapping(Path::new("f"), "a:165535:1\n", 100_000).len(),
            1
        );
    }
}
