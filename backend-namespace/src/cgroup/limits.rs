//! Writing the limits of a run and the record of what was written.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use workspace_core::boundary::ResolvedLimits;

use super::{CgroupError, Controller, Hierarchy, fsio};

/// The CFS period used for cpu limits, in microseconds.
pub(crate) const CPU_PERIOD_US: u64 = 100_000;
/// The smallest quota the kernel accepts, in microseconds.
const CPU_MIN_QUOTA_US: u64 = 1_000;

/// Which limits were applied, where: the evidence of the Environment boundary.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedLimits {
    /// The memory cap, if one was asked for.
    pub memory: Option<AppliedMemory>,
    /// The pids cap, if one was asked for.
    pub pids: Option<AppliedPids>,
    /// The cpu cap, if one was asked for.
    pub cpu: Option<AppliedCpu>,
}

/// A memory cap as applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedMemory {
    /// The hierarchy.
    pub hierarchy: Hierarchy,
    /// The cgroup directory.
    pub path: PathBuf,
    /// The cap in bytes (`memory.limit_in_bytes` / `memory.max`).
    pub limit_bytes: u64,
    /// Whether swap is capped too (`memory.memsw.limit_in_bytes` to the same value on
    /// v1, `memory.swap.max = 0` on v2); `false` when the kernel has no swap accounting.
    pub swap_capped: bool,
}

/// A pids cap as applied (`pids.max`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedPids {
    /// The hierarchy.
    pub hierarchy: Hierarchy,
    /// The cgroup directory.
    pub path: PathBuf,
    /// The cap.
    pub max: u32,
}

/// A cpu cap as applied (`cpu.cfs_quota_us`/`cpu.cfs_period_us` or `cpu.max`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedCpu {
    /// The hierarchy.
    pub hierarchy: Hierarchy,
    /// The cgroup directory.
    pub path: PathBuf,
    /// The quota per period, in microseconds.
    pub quota_us: u64,
    /// The period, in microseconds.
    pub period_us: u64,
}

/// The cpu quota for `millis` thousandths of a core, checked.
pub(crate) fn cpu_quota(millis: u64) -> Result<u64, CgroupError> {
    let invalid = |reason| CgroupError::InvalidLimit {
        controller: Controller::Cpu,
        value: millis,
        reason,
    };
    let quota = millis
        .checked_mul(CPU_PERIOD_US / 1000)
        .ok_or_else(|| invalid("too large"))?;
    if quota < CPU_MIN_QUOTA_US {
        return Err(invalid(
            "below 10 thousandths of a core (the kernel's 1 ms quota minimum)",
        ));
    }
    Ok(quota)
}

/// Applies the limit of `controller` from `limits` in `dir`, if one was asked for.
pub(crate) fn apply(
    controller: Controller,
    hierarchy: Hierarchy,
    dir: &Path,
    limits: &ResolvedLimits,
    applied: &mut AppliedLimits,
) -> Result<(), CgroupError> {
    match controller {
        Controller::Memory => {
            let Some(bytes) = limits.memory_bytes else {
                return Ok(());
            };
            let value = bytes.to_string();
            let (limit_file, swap_file, swap_value) = match hierarchy {
                Hierarchy::V1 => (
                    "memory.limit_in_bytes",
                    "memory.memsw.limit_in_bytes",
                    value.as_str(),
                ),
                Hierarchy::V2 => ("memory.max", "memory.swap.max", "0"),
            };
            fsio::write(&dir.join(limit_file), &value)?;
            let swap_path = dir.join(swap_file);
            let swap_capped = swap_path.exists();
            if swap_capped {
                fsio::write(&swap_path, swap_value)?;
            } else {
                tracing::warn!(
                    path = %swap_path.display(),
                    "no swap accounting: the memory cap does not cover swap"
                );
            }
            applied.memory = Some(AppliedMemory {
                hierarchy,
                path: dir.to_path_buf(),
                limit_bytes: bytes,
                swap_capped,
            });
        }
        Controller::Pids => {
            let Some(max) = limits.pids else {
                return Ok(());
            };
            fsio::write(&dir.join("pids.max"), &max.to_string())?;
            applied.pids = Some(AppliedPids {
                hierarchy,
                path: dir.to_path_buf(),
                max,
            });
        }
        Controller::Cpu => {
            let Some(millis) = limits.cpu_millis else {
                return Ok(());
            };
            let quota_us = cpu_quota(millis)?;
            match hierarchy {
                Hierarchy::V1 => {
                    fsio::write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                    fsio::write(&dir.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
                }
                Hierarchy::V2 => {
                    fsio::write(&dir.join("cpu.max"), &format!("{quota_us} {CPU_PERIOD_US}"))?;
                }
            }
            applied.cpu = Some(AppliedCpu {
                hierarchy,
                path: dir.to_path_buf(),
                quota_us,
                period_us: CPU_PERIOD_US,
            });
        }
    }
    Ok(())
}

/// Whether `limits` asks for a limit of `controller`.
pub(crate) fn asks_for(limits: &ResolvedLimits, controller: Controller) -> bool {
    match controller {
        Controller::Memory => limits.memory_bytes.is_some(),
        Controller::Pids => limits.pids.is_some(),
        Controller::Cpu => limits.cpu_millis.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_cpu_quota_maps_millis_to_microseconds() {
        assert!(matches!(cpu_quota(1500), Ok(150_000)));
        assert!(matches!(cpu_quota(10), Ok(1_000)));
        assert!(matches!(
            cpu_quota(9),
            Err(CgroupError::InvalidLimit {
                controller: Controller::Cpu,
                value: 9,
                ..
            })
        ));
        assert!(cpu_quota(u64::MAX).is_err());
    }
}
