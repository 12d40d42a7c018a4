//! The amounts a run reserves: cpu, memory, disk and concurrency slots.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An amount of host resources in every dimension the capacity pool tracks.
///
/// Used both for a pool's total and for one request. Arithmetic saturates rather than
/// wrapping, so a bookkeeping mistake can never turn into a huge free amount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resources {
    /// CPU time share in thousandths of a core (1000 = one full core).
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Disk space in bytes.
    pub disk_bytes: u64,
    /// Concurrency slots (how many runs may hold at once, when each asks for one).
    pub slots: u32,
}

impl Resources {
    /// Nothing in every dimension.
    pub const ZERO: Resources = Resources {
        cpu_millis: 0,
        memory_bytes: 0,
        disk_bytes: 0,
        slots: 0,
    };

    /// True when `self` is at most `available` in every dimension.
    pub fn fits(&self, available: &Resources) -> bool {
        self.first_exceeding(available).is_none()
    }

    /// The first dimension (in [`Dimension::ALL`] order) in which `self` is larger than
    /// `limit`, with both amounts; `None` when `self` fits within `limit`.
    pub fn first_exceeding(&self, limit: &Resources) -> Option<(Dimension, u64, u64)> {
        Dimension::ALL.into_iter().find_map(|dimension| {
            let (wanted, allowed) = (self.get(dimension), limit.get(dimension));
            (wanted > allowed).then_some((dimension, wanted, allowed))
        })
    }

    /// The sum in every dimension, saturating at the type's maximum.
    #[must_use]
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
            disk_bytes: self.disk_bytes.saturating_add(other.disk_bytes),
            slots: self.slots.saturating_add(other.slots),
        }
    }

    /// The difference in every dimension, saturating at zero.
    #[must_use]
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            disk_bytes: self.disk_bytes.saturating_sub(other.disk_bytes),
            slots: self.slots.saturating_sub(other.slots),
        }
    }

    /// The amount in one dimension, widened to `u64`.
    pub fn get(&self, dimension: Dimension) -> u64 {
        match dimension {
            Dimension::Cpu => self.cpu_millis,
            Dimension::Memory => self.memory_bytes,
            Dimension::Disk => self.disk_bytes,
            Dimension::Slots => u64::from(self.slots),
        }
    }
}

/// One dimension of [`Resources`], used to say which one a request exceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Dimension {
    /// [`Resources::cpu_millis`].
    Cpu,
    /// [`Resources::memory_bytes`].
    Memory,
    /// [`Resources::disk_bytes`].
    Disk,
    /// [`Resources::slots`].
    Slots,
}

impl Dimension {
    /// Every dimension, in the order checks report them.
    pub const ALL: [Dimension; 4] = [
        Dimension::Cpu,
        Dimension::Memory,
        Dimension::Disk,
        Dimension::Slots,
    ];

    /// The field name in [`Resources`] (`cpu_millis`, `memory_bytes`, ...).
    pub fn field_name(self) -> &'static str {
        match self {
            Dimension::Cpu => "cpu_millis",
            Dimension::Memory => "memory_bytes",
            Dimension::Disk => "disk_bytes",
            Dimension::Slots => "slots",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(cpu: u64, mem: u64, disk: u64, slots: u32) -> Resources {
        Resources {
            cpu_millis: cpu,
            memory_bytes: mem,
            disk_bytes: disk,
            slots,
        }
    }

    #[test]
    fn fits_and_first_exceeding_name_the_dimension() {
        let total = r(1000, 100, 50, 2);
        assert!(r(1000, 100, 50, 2).fits(&total));
        assert!(Resources::ZERO.fits(&total));
        assert_eq!(
            r(1, 101, 51, 3).first_exceeding(&total),
            Some((Dimension::Memory, 101, 100))
        );
        assert_eq!(
            r(1, 1, 1, 3).first_exceeding(&total),
            Some((Dimension::Slots, 3, 2))
        );
        assert!(!r(0, 0, 51, 0).fits(&total));
    }

    #[test]
    fn arithmetic_saturates() {
        let a = r(5, 5, 5, 5);
        let b = r(7, 1, u64::MAX, 1);
        assert_eq!(a.saturating_sub(&b), r(0, 4, 0, 4));
        assert_eq!(a.saturating_add(&b), r(12, 6, u64::MAX, 6));
    }
}
