//! A required check's result as the CLI shows it: for one that failed, the
//! end of what it printed and where its record is, read from the evidence.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Serialize;
use workspace_core::boundary::CheckResult;
use workspace_core::evidence::{COMMAND_FILE, EvidenceFile, STDERR_FILE, STDOUT_FILE};

use super::command_json::command_dir;
use super::text::{escaped, one_line};

/// How many lines of a failed check's output are shown, both streams together.
const TAIL_LINES: usize = 20;

/// How much of the end of a stream file is read to find its last lines.
const TAIL_BYTES: u64 = 64 * 1024;

/// One required check (`checks` in the answers of `checks`, `run`, `destroy`
/// and `promote`): its result as `checks.json` records it, and where its
/// command's record and output are.
#[derive(Debug, Serialize)]
pub(crate) struct CheckJson {
    /// The result (`name`, `passed`, `patch_sha256`, `failure`,
    /// `changed_paths`, `command_seq`).
    #[serde(flatten)]
    pub result: CheckResult,
    /// Its command's record (`<evidence>/commands/NNNN/command.json`), when
    /// it ran.
    pub record: Option<PathBuf>,
    /// Its command's standard output in the evidence, when it ran.
    pub stdout_path: Option<PathBuf>,
    /// Its command's standard error in the evidence, when it ran.
    pub stderr_path: Option<PathBuf>,
}

impl CheckJson {
    /// `result` of a run whose evidence bundle is `evidence`.
    pub(crate) fn of(result: &CheckResult, evidence: &Path) -> Self {
        let dir = result.command_seq.map(|seq| command_dir(evidence, seq));
        Self {
            result: result.clone(),
            record: dir.as_ref().map(|d| d.join(COMMAND_FILE)),
            stdout_path: dir.as_ref().map(|d| d.join(STDOUT_FILE)),
            stderr_path: dir.as_ref().map(|d| d.join(STDERR_FILE)),
        }
    }
}

/// The checks `checks.json` of the bundle `evidence` records (none when it
/// holds none, or cannot be read).
pub(crate) fn recorded_checks(evidence: &Path) -> Vec<CheckResult> {
    std::fs::read(evidence.join(EvidenceFile::Checks.file_name()))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// The lines a failed check is shown with, each escaped for the terminal:
/// `NAME: failed: WHY`, its record's path, then the last lines of what it
/// wrote (`  stdout| ...`, `  stderr| ...`).
pub(crate) fn failed_check_lines(check: &CheckResult, evidence: &Path) -> Vec<String> {
    let why = one_line(check.failure.as_deref().unwrap_or("it did not pass"));
    let mut lines = vec![format!("{}: failed: {why}", escaped(&check.name))];
    let Some(seq) = check.command_seq else {
        return lines;
    };
    let dir = command_dir(evidence, seq);
    lines.push(format!(
        "  record: {}",
        escaped(&dir.join(COMMAND_FILE).to_string_lossy())
    ));
    let (stdout, out_cut) = last_lines(&dir.join(STDOUT_FILE));
    let (stderr, err_cut) = last_lines(&dir.join(STDERR_FILE));
    // Both streams share the budget; one that is short leaves the rest to
    // the other.
    let err_take = stderr
        .len()
        .min(TAIL_LINES.saturating_sub(stdout.len()).max(TAIL_LINES / 2));
    let out_take = stdout.len().min(TAIL_LINES - err_take);
    for (name, stream, take, cut) in [
        ("stdout", &stdout, out_take, out_cut),
        ("stderr", &stderr, err_take, err_cut),
    ] {
        if cut || stream.len() > take {
            lines.push(format!(
                "  {name}| ... (all of it: {})",
                escaped(&dir.join(name).to_string_lossy())
            ));
        }
        for line in &stream[stream.len() - take..] {
            lines.push(format!("  {name}| {}", escaped(line)));
        }
    }
    lines
}

/// The last lines of the file at `path` (at most [`TAIL_LINES`] and what
/// its last [`TAIL_BYTES`] hold), invalid UTF-8 replaced, and whether it has
/// more; none when it cannot be read.
fn last_lines(path: &Path) -> (Vec<String>, bool) {
    let Ok(mut file) = std::fs::File::open(path) else {
        return (Vec::new(), false);
    };
    let len = file.metadata().map_or(0, |m| m.len());
    let start = len.saturating_sub(TAIL_BYTES);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return (Vec::new(), false);
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut lines: Vec<&str> = text.lines().collect();
    // A cut first line is not a line.
    if start > 0 && !lines.is_empty() {
        lines.remove(0);
    }
    let keep = lines.len().saturating_sub(TAIL_LINES);
    let tail = lines[keep..].iter().map(|l| (*l).to_owned()).collect();
    (tail, start > 0 || keep > 0)
}

#[cfg(test)]
mod tests {
    use super::failed_check_lines;
    use workspace_core::boundary::CheckResult;

    #[test]
    fn a_failed_check_shows_its_record_and_the_end_of_its_output_escaped() {
        let evidence = tempfile::tempdir().unwrap();
        let dir = evidence.path().join("commands/0002");
        std::fs::create_dir_all(&dir).unwrap();
        let out: String = (1..=30).map(|i| format!("out {i}\n")).collect();
        std::fs::write(dir.join("stdout"), out).unwrap();
        std::fs::write(dir.join("stderr"), "boom \x1b[2J\n").unwrap();
        let mut check = CheckResult::failed("tests", "d", "it ended with exit code 1");
        check.command_seq = Some(2);

        let lines = failed_check_lines(&check, evidence.path());
        assert_eq!(lines[0], "tests: failed: it ended with exit code 1");
        assert!(
            lines[1].ends_with("commands/0002/command.json"),
            "{lines:?}"
        );
        assert!(
            lines[2].starts_with("  stdout| ... (all of it: "),
            "{lines:?}"
        );
        assert_eq!(lines[3], "  stdout| out 12");
        assert_eq!(lines.last().unwrap(), "  stderr| boom \\x1b[2J");
        // 19 lines of stdout and the one of stderr: twenty in all.
        assert_eq!(lines.iter().filter(|l| l.contains("| out ")).count(), 19);
    }
}
