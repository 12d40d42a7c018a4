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

/// The limits of a run as its cgroup files read now: what the kernel enforces,
/// not what was asked for. `None`: that limit was not applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadLimits {
    /// `memory.limit_in_bytes` / `memory.max`, in bytes (`None` when `max`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// `pids.max` (`None` when `max`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pids_max: Option<u64>,
    /// The cpu quota and period, in microseconds (`None` when unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_quota_period_us: Option<(u64, u64)>,
}

impl AppliedLimits {
    /// Reads each applied limit back from its cgroup file.
    pub fn read_back(&self) -> Result<ReadLimits, CgroupError> {
        let number = |path: PathBuf| -> Result<Option<u64>, CgroupError> {
            let text = fsio::read(&path)?;
            let text = text.trim();
            if text == "max" || text == "-1" {
                return Ok(None);
            }
            text.parse().map(Some).map_err(|_| CgroupError::Parse {
                path,
                expected: "a number or max",
                found: text.to_owned(),
            })
        };
        let mut read = ReadLimits::default();
        if let Some(memory) = &self.memory {
            read.memory_bytes = number(memory.path.join(match memory.hierarchy {
                Hierarchy::V1 => "memory.limit_in_bytes",
                Hierarchy::V2 => "memory.max",
            }))?;
        }
        if let Some(pids) = &self.pids {
            read.pids_max = number(pids.path.join("pids.max"))?;
        }
        if let Some(cpu) = &self.cpu {
            read.cpu_quota_period_us = match cpu.hierarchy {
                Hierarchy::V1 => number(cpu.path.join("cpu.cfs_quota_us"))?
                    .zip(number(cpu.path.join("cpu.cfs_period_us"))?),
                Hierarchy::V2 => {
                    let path = cpu.path.join("cpu.max");
                    let text = fsio::read(&path)?;
                    let mut fields = text.split_whitespace();
                    match (fields.next(), fields.next().and_then(|p| p.parse().ok())) {
                        (Some("max"), _) => None,
                        (Some(quota), Some(period)) => Some((
                            quota.parse().map_err(|_| CgroupError::Parse {
                                path: path.clone(),
                                expected: "QUOTA PERIOD",
                                found: text.trim().to_owned(),
                            })?,
                            period,
                        )),
                        _ => {
                            return Err(CgroupError::Parse {
                                path,
                                expected: "QUOTA PERIOD",
                                found: text.trim().to_owned(),
                            });
                        }
                    }
                }
            };
        }
        Ok(read)
    }

    /// Where `read` (read back) differs from what was applied, one sentence
    /// each. The kernel keeps memory caps in whole pages: a cap read back up to
    /// one page lower is the same cap.
    pub fn differences(&self, read: &ReadLimits) -> Vec<String> {
        const PAGE: u64 = 4096;
        let mut differences = Vec::new();
        if let Some(memory) = &self.memory {
            let kept = read
                .memory_bytes
                .is_some_and(|b| b <= memory.limit_bytes && b + PAGE > memory.limit_bytes);
            if !kept {
                differences.push(format!(
                    "the memory cap reads {:?} in {}, {} bytes were applied",
                    read.memory_bytes,
                    memory.path.display(),
                    memory.limit_bytes
                ));
            }
        }
        if let Some(pids) = &self.pids
            && read.pids_max != Some(u64::from(pids.max))
        {
            differences.push(format!(
                "pids.max reads {:?} in {}, {} was applied",
                read.pids_max,
                pids.path.display(),
                pids.max
            ));
        }
        if let Some(cpu) = &self.cpu
            && read.cpu_quota_period_us != Some((cpu.quota_us, cpu.period_us))
        {
            differences.push(format!(
                "the cpu quota reads {:?} in {}, {} us per {} us was applied",
                read.cpu_quota_period_us,
                cpu.path.display(),
                cpu.quota_us,
                cpu.period_us
            ));
        }
        differences
    }
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
    fn a_limit_read_back_other_than_applied_is_named() {
        let applied = AppliedLimits {
            memory: Some(AppliedMemory {
                hierarchy: Hierarchy::V1,
                path: PathBuf::from("/cg/memory/run"),
                limit_bytes: 100_000,
                swap_capped: true,
            }),
            pids: Some(AppliedPids {
                hierarchy: Hierarchy::V1,
                path: PathBuf::from("/cg/pids/run"),
                max: 64,
            }),
            cpu: Some(AppliedCpu {
                hierarchy: Hierarchy::V2,
                path: PathBuf::from("/cg/run"),
                quota_us: 50_000,
                period_us: 100_000,
            }),
        };
        // Rounded down to a page by the kernel: the same cap.
        let kept = ReadLimits {
            memory_bytes: Some(98_304),
            pids_max: Some(64),
            cpu_quota_period_us: Some((50_000, 100_000)),
        };
        assert_eq!(applied.differences(&kept), Vec::<String>::new());
        let lost = ReadLimits {
            memory_bytes: None,
            pids_max: Some(128),
            cpu_quota_period_us: None,
        };
        let differences = applied.differences(&lost);
        assert_eq!(differences.len(), 3, "{differences:?}");
        assert!(differences[0].contains("/cg/memory/run"), "{differences:?}");
    }

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
