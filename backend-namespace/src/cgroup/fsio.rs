//! Reading and writing cgroup files, with errors that name the file.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::CgroupError;

/// Reads a whole cgroup file.
pub(crate) fn read(path: &Path) -> Result<String, CgroupError> {
    std::fs::read_to_string(path).map_err(|source| CgroupError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `value` to an existing cgroup file in one `write(2)`.
pub(crate) fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    write_raw(path, value).map_err(|source| CgroupError::Write {
        path: path.to_path_buf(),
        value: value.to_owned(),
        source,
    })
}

/// Writes `value` to an existing file, returning the bare I/O error.
pub(crate) fn write_raw(path: &Path, value: &str) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).open(path)?;
    file.write_all(value.as_bytes())
}

/// The pids in `cgroup.procs` of `dir` and of every cgroup below it.
///
/// A sub-cgroup that disappears while it is read is skipped; `dir` itself must exist.
pub(crate) fn procs_recursive(dir: &Path, out: &mut Vec<u32>) -> Result<(), CgroupError> {
    let procs = dir.join("cgroup.procs");
    let text = read(&procs)?;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let pid = line.parse::<u32>().map_err(|_| CgroupError::Parse {
            path: procs.clone(),
            expected: "one decimal pid per line",
            found: shorten(line),
        })?;
        out.push(pid);
    }
    for sub in subdirs(dir)? {
        match procs_recursive(&sub, out) {
            Ok(()) => {}
            Err(CgroupError::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The sub-cgroups (directories) directly below `dir`; none if `dir` vanished.
pub(crate) fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CgroupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CgroupError::Read {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| CgroupError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        // `file_type` does not follow links; cgroupfs has none anyway.
        let is_dir = entry
            .file_type()
            .map_err(|source| CgroupError::Read {
                path: entry.path(),
                source,
            })?
            .is_dir();
        if is_dir {
            out.push(entry.path());
        }
    }
    Ok(out)
}

/// Reads a flat-keyed file (`key value` per line) and returns the value of `key`.
pub(crate) fn keyed_value(path: &Path, key: &str) -> Result<u64, CgroupError> {
    let text = read(path)?;
    let parse_error = || CgroupError::Parse {
        path: path.to_path_buf(),
        expected: "a line `<key> <decimal>` with the wanted key",
        found: shorten(&text),
    };
    let value = text
        .lines()
        .filter_map(|line| line.split_once(' '))
        .find(|(k, _)| *k == key)
        .ok_or_else(parse_error)?
        .1;
    value.trim().parse::<u64>().map_err(|_| parse_error())
}

/// At most 200 characters of `text`, for error messages.
pub(crate) fn shorten(text: &str) -> String {
    text.chars().take(200).collect()
}
