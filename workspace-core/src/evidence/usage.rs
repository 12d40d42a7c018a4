//! [`ResourceUsage`]: what a command's tree (or a whole workspace) used, as its
//! cgroup counted it.

use serde::{Deserialize, Serialize};

/// What a process tree used, read from its cgroup when it ended. A figure the
/// host's cgroups do not keep is `None`, never a guess.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUsage {
    /// The most memory the tree held at once, in bytes (v2 `memory.peak`, v1
    /// `memory.max_usage_in_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    /// The CPU time the tree used, in microseconds (v2 `cpu.stat`
    /// `usage_usec`, v1 `cpuacct.usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_time_us: Option<u64>,
    /// The most processes the tree had at once (`pids.peak`, where the
    /// kernel keeps it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_pids: Option<u64>,
}

impl ResourceUsage {
    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The usage a cgroup's counter files show; `read` gives the text of one
    /// by name (`memory.peak`, `cpu.stat`, ...) from whichever of the group's
    /// directories (one per hierarchy) has it, `None` where none does. Each
    /// layout's file is tried: v2's first, then v1's.
    pub fn from_cgroup_files(read: impl Fn(&str) -> Option<String>) -> Self {
        let number = |name: &str| read(name).and_then(|text| text.trim().parse::<u64>().ok());
        let cpu_v2 = read("cpu.stat").and_then(|stat| {
            stat.lines().find_map(|line| {
                let value = line.strip_prefix("usage_usec ")?;
                value.trim().parse::<u64>().ok()
            })
        });
        Self {
            peak_memory_bytes: number("memory.peak")
                .or_else(|| number("memory.max_usage_in_bytes")),
            cpu_time_us: cpu_v2.or_else(|| number("cpuacct.usage").map(|ns| ns / 1_000)),
            peak_pids: number("pids.peak"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ResourceUsage;

    #[test]
    fn each_layouts_counters_are_read_and_what_is_not_kept_is_none() {
        let v2 = |name: &str| match name {
            "memory.peak" => Some("1048576\n".to_owned()),
            "cpu.stat" => Some("usage_usec 2500\nuser_usec 2000\n".to_owned()),
            "pids.peak" => Some("7\n".to_owned()),
            _ => None,
        };
        assert_eq!(
            ResourceUsage::from_cgroup_files(v2),
            ResourceUsage {
                peak_memory_bytes: Some(1 << 20),
                cpu_time_us: Some(2500),
                peak_pids: Some(7),
            }
        );
        // v1: cpu.stat has no usage_usec; cpuacct counts nanoseconds; an older
        // kernel keeps no pids peak.
        let v1 = |name: &str| match name {
            "memory.max_usage_in_bytes" => Some("4096\n".to_owned()),
            "cpu.stat" => Some("nr_periods 0\nnr_throttled 0\n".to_owned()),
            "cpuacct.usage" => Some("3000000\n".to_owned()),
            _ => None,
        };
        assert_eq!(
            ResourceUsage::from_cgroup_files(v1),
            ResourceUsage {
                peak_memory_bytes: Some(4096),
                cpu_time_us: Some(3000),
                peak_pids: None,
            }
        );
        assert!(ResourceUsage::from_cgroup_files(|_| None).is_empty());
    }
}
