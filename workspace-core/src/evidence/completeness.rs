//! What a sealed bundle says it does not record: an export that failed (no or
//! part of `diff.patch` and `changes.json`), and changes its patch does not carry.
//!
//! A bundle can match its manifest and still not hold the run's changes: the
//! manifest seals what was written, not what should have been. `outcome.json`
//! says which, and is read here only once the manifest vouches for it.

use serde::{Deserialize, Serialize};

use super::layout::EvidenceFile;
use crate::boundary::ChangedPath;
use crate::step::{RunnerStep, StepFailure};

/// What `outcome.json` says the bundle does not record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Completeness {
    /// Why the run's changes could not be exported, when they could not (the
    /// bundle does not record what the run changed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_failed: Option<StepFailure>,
    /// The changes `diff.patch` does not carry (`changes.json` lists them with
    /// why), by path.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_in_patch: Vec<String>,
}

/// The fields of `outcome.json` this reads (an older outcome has only `errors`).
#[derive(Deserialize)]
struct Recorded {
    #[serde(default)]
    export_failed: Option<StepFailure>,
    #[serde(default)]
    not_in_patch: Vec<ChangedPath>,
    #[serde(default)]
    errors: Vec<StepFailure>,
}

/// Whether `step` failing leaves the run's changes unrecorded.
fn loses_changes(step: &RunnerStep) -> bool {
    match step {
        RunnerStep::ExportPatch => true,
        RunnerStep::WriteEvidence { file } => {
            file == EvidenceFile::Diff.file_name() || file == EvidenceFile::Changes.file_name()
        }
        _ => false,
    }
}

/// What the outcome `bytes` say the bundle does not record; `None` when they are
/// not an outcome (the manifest check reports a bundle that is not whole).
pub(super) fn read(bytes: &[u8]) -> Option<Completeness> {
    let recorded: Recorded = serde_json::from_slice(bytes).ok()?;
    let export_failed = recorded
        .export_failed
        .or_else(|| recorded.errors.into_iter().find(|e| loses_changes(&e.step)));
    Some(Completeness {
        export_failed,
        not_in_patch: recorded.not_in_patch.into_iter().map(|c| c.path).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::read;

    #[test]
    fn an_outcome_says_its_export_failed_in_its_own_field_or_among_its_errors() {
        let now = br#"{"export_failed":{"step":"export-patch","cause":"too large"},
            "not_in_patch":[{"path":".GIT/x","change":{"kind":"added"},"in_scope":true,
            "not_in_patch":{"reason":"not-utf8"}}]}"#;
        let found = read(now).unwrap();
        assert_eq!(found.export_failed.unwrap().cause, "too large");
        assert_eq!(found.not_in_patch, [".GIT/x"]);
        let older = br#"{"errors":[{"step":"preview","cause":"x"},
            {"step":"export-patch","cause":"refused"}]}"#;
        assert_eq!(read(older).unwrap().export_failed.unwrap().cause, "refused");
        let fine = br#"{"errors":[{"step":"write-evidence","file":"checks.json","cause":"x"}]}"#;
        assert_eq!(read(fine).unwrap().export_failed, None);
        assert!(read(b"not json").is_none());
    }
}
