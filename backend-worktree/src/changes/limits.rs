//! How much changed content one export or promotion may hold in memory.
//!
//! A run can create a file of any apparent size (a sparse file of 100 GB costs no
//! disk), and an export holds the new content of every changed file while it renders
//! the patch. Each file's content is therefore capped (checked from its metadata
//! before it is read, and enforced while reading, so a file that grows during the
//! read cannot exceed it), and so is the total of one export or promotion.

use super::ChangesError;

/// The most bytes of one changed file an export or promotion reads (256 MiB).
pub const MAX_CONTENT_BYTES: u64 = 256 << 20;

/// The most bytes of changed content one export or promotion reads (1 GiB).
pub const MAX_TOTAL_CONTENT_BYTES: u64 = 1 << 30;

/// The content caps of one export or promotion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContentLimits {
    /// The most bytes read from one file.
    pub per_file: u64,
    /// The most bytes read from all files together.
    pub total: u64,
}

impl Default for ContentLimits {
    fn default() -> Self {
        Self {
            per_file: MAX_CONTENT_BYTES,
            total: MAX_TOTAL_CONTENT_BYTES,
        }
    }
}

/// What one export or promotion has read so far, against its [`ContentLimits`].
#[derive(Clone, Debug, Default)]
pub struct ContentBudget {
    limits: ContentLimits,
    used: u64,
}

impl ContentBudget {
    /// An empty budget with `limits`.
    pub fn new(limits: ContentLimits) -> Self {
        Self { limits, used: 0 }
    }

    /// The limits of this budget.
    pub fn limits(&self) -> ContentLimits {
        self.limits
    }

    /// Refuses `size` bytes of `path` when they exceed the per-file limit
    /// ([`ChangesError::TooLarge`]) or would bring the total over its limit
    /// ([`ChangesError::TotalTooLarge`]); charges nothing.
    pub fn check(&self, path: &str, size: u64) -> Result<(), ChangesError> {
        if size > self.limits.per_file {
            return Err(ChangesError::TooLarge {
                path: path.into(),
                size,
                limit: self.limits.per_file,
            });
        }
        let total = self.used.saturating_add(size);
        if total > self.limits.total {
            return Err(ChangesError::TotalTooLarge {
                path: path.into(),
                total,
                limit: self.limits.total,
            });
        }
        Ok(())
    }

    /// Checks `size` bytes of `path` like [`ContentBudget::check`] and adds them to
    /// the total.
    pub fn charge(&mut self, path: &str, size: u64) -> Result<(), ChangesError> {
        self.check(path, size)?;
        self.used = self.used.saturating_add(size);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{ContentBudget, ContentLimits};
    use crate::changes::ChangesError;

    #[test]
    fn changes_budget_caps_each_file_and_the_total() {
        let mut budget = ContentBudget::new(ContentLimits {
            per_file: 10,
            total: 15,
        });
        budget.charge("a", 10).unwrap();
        let err = budget.charge("b", 11).unwrap_err();
        assert!(
            matches!(&err, ChangesError::TooLarge { path, size: 11, limit: 10 } if path == "b"),
            "{err}"
        );
        budget.charge("c", 5).unwrap();
        let err = budget.charge("d", 1).unwrap_err();
        assert!(
            matches!(&err, ChangesError::TotalTooLarge { path, total: 16, limit: 15 } if path == "d"),
            "{err}"
        );
    }
}
