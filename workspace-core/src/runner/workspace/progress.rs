//! How far a run was brought up: what its conclusion has to undo.

use crate::boundary::{FilesystemRecord, SourceRecord};

/// A run's checkout and the grants prepared on it: what sealing takes.
#[derive(Clone, Debug)]
pub(in crate::runner) struct Provisioned {
    /// What the source boundary provisioned.
    pub(in crate::runner) source: SourceRecord,
    /// The filesystem boundary's grants on that checkout.
    pub(in crate::runner) filesystem: FilesystemRecord,
}

/// Each stage a run reaches holds the record of the one before, so that a
/// sandbox without a checkout, or grants without a source, cannot be written.
#[derive(Clone, Debug)]
pub(in crate::runner) enum Progress {
    /// Nothing provisioned: the run failed before the source boundary made a
    /// record (its cleanup removes whatever that boundary left unrecorded).
    Opened,
    /// The checkout is made; its grants are not prepared.
    Checkout(SourceRecord),
    /// The checkout and its grants; no sandbox was started.
    Provisioned(Provisioned),
    /// A sandbox was started on the checkout, or may still be live (a parked
    /// run being taken back): the conclusion tears it down first.
    Sandboxed(Provisioned),
}

impl Progress {
    /// The provisioned checkout's record, once there is one.
    pub(in crate::runner) fn source(&self) -> Option<&SourceRecord> {
        match self {
            Self::Opened => None,
            Self::Checkout(source) => Some(source),
            Self::Provisioned(provisioned) | Self::Sandboxed(provisioned) => {
                Some(&provisioned.source)
            }
        }
    }

    /// The grants prepared on the checkout, once there are.
    pub(in crate::runner) fn filesystem(&self) -> Option<&FilesystemRecord> {
        match self {
            Self::Opened | Self::Checkout(_) => None,
            Self::Provisioned(provisioned) | Self::Sandboxed(provisioned) => {
                Some(&provisioned.filesystem)
            }
        }
    }

    /// Whether the process boundary may hold a sandbox of the run.
    pub(in crate::runner) fn sandboxed(&self) -> bool {
        matches!(self, Self::Sandboxed(_))
    }
}
