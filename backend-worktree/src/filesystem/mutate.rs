//! The writing operations of [`PathGrants`]: each checks the write rules on the
//! requested path and on where it leads before touching anything.

use std::io::{self, Write};
use std::path::Path;

use cap_std::fs::OpenOptions;

use super::PathGrants;
use super::error::{GrantError, Operation, Refusal};
use super::path::{cap_path, parse_link_target};

/// How many entries renaming a directory may check before giving up.
pub(crate) const RENAME_SCAN_LIMIT: usize = 100_000;

impl PathGrants {
    /// Writes `contents` to a regular file, creating it or truncating it. A final
    /// symlink inside the workspace is followed, and where it leads must be
    /// writable too.
    pub fn write(&self, path: &str, contents: &[u8]) -> Result<(), GrantError> {
        let op = Operation::Write;
        let (_, resolved) = self.resolve_write(op, path, true)?;
        let mut options = OpenOptions::new();
        options.write(true);
        match &resolved.meta {
            Some(meta) => self.check_regular_file(op, path, &resolved.path, meta)?,
            // O_EXCL: a symlink planted after the check is not followed.
            None => {
                options.create_new(true);
            }
        }
        let mut file = self
            .root
            .open_with(&resolved.path, &options)
            .map_err(|e| self.io(op, path, e))?;
        let opened = file.metadata().map_err(|e| self.io(op, path, e))?;
        match &resolved.meta {
            Some(meta) => self.check_same_file(op, path, &resolved.path, meta, &opened)?,
            None => self.check_regular_file(op, path, &resolved.path, &opened)?,
        }
        // Truncate only after the checks, on the file actually opened.
        file.set_len(0).map_err(|e| self.io(op, path, e))?;
        file.write_all(contents).map_err(|e| self.io(op, path, e))
    }

    /// Creates a new regular file; fails if anything (even a symlink) exists there.
    pub fn create_new(&self, path: &str, contents: &[u8]) -> Result<(), GrantError> {
        let op = Operation::CreateNew;
        let (_, resolved) = self.resolve_write(op, path, false)?;
        if resolved.meta.is_some() {
            return Err(self.io(op, path, io::ErrorKind::AlreadyExists.into()));
        }
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let mut file = self
            .root
            .open_with(&resolved.path, &options)
            .map_err(|e| self.io(op, path, e))?;
        file.write_all(contents).map_err(|e| self.io(op, path, e))
    }

    /// Removes a file or a symlink (the link itself, never its target). Removing a
    /// hard-linked file only drops this name, so it is allowed.
    pub fn remove_file(&self, path: &str) -> Result<(), GrantError> {
        let op = Operation::RemoveFile;
        let (_, resolved) = self.resolve_write(op, path, false)?;
        self.root
            .remove_file(&resolved.path)
            .map_err(|e| self.io(op, path, e))
    }

    /// Creates a directory and its missing parents; every directory created must
    /// be writable.
    pub fn create_dir_all(&self, path: &str) -> Result<(), GrantError> {
        let op = Operation::CreateDir;
        let (_, resolved) = self.resolve_write(op, path, true)?;
        if let Some(first_missing) = resolved.missing_from {
            let mut prefix = std::path::PathBuf::new();
            for (i, component) in resolved.path.components().enumerate() {
                prefix.push(component);
                if i >= first_missing
                    && let Some(refusal) = self.policy.write_denial(&prefix)
                {
                    return Err(self.refuse(op, path, refusal));
                }
            }
        }
        self.root
            .create_dir_all(&resolved.path)
            .map_err(|e| self.io(op, path, e))
    }

    /// Removes an empty directory (a final symlink is not followed).
    pub fn remove_dir(&self, path: &str) -> Result<(), GrantError> {
        let op = Operation::RemoveDir;
        let (_, resolved) = self.resolve_write(op, path, false)?;
        self.root
            .remove_dir(&resolved.path)
            .map_err(|e| self.io(op, path, e))
    }

    /// Renames a file, symlink or directory; both ends must be writable. Neither
    /// end's final symlink is followed. A directory holding an excluded, protected
    /// or read-only entry is not renamed: that would carry the entry out from
    /// under its rule.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), GrantError> {
        let (_, source) = self.resolve_write(Operation::RenameFrom, from, false)?;
        let meta = self.existing(Operation::RenameFrom, from, &source)?;
        let (_, dest) = self.resolve_write(Operation::RenameTo, to, false)?;
        if meta.is_dir() {
            self.check_subtree(from, &source.path)?;
        }
        self.root
            .rename(&source.path, &self.root, &dest.path)
            .map_err(|e| self.io(Operation::RenameFrom, from, e))
    }

    /// Creates a symlink at `link` pointing to `target`, only when the target,
    /// resolved relative to the link's directory, stays inside the root and
    /// inside what may be read. Absolute targets are refused. (cap-std's
    /// `symlink_contents` would create an escaping link; this is the check it
    /// leaves to us.) The target may not exist yet.
    pub fn symlink(&self, target: &str, link: &str) -> Result<(), GrantError> {
        let target_op = Operation::SymlinkTarget;
        let target_path =
            parse_link_target(target).map_err(|r| self.refuse(target_op, target, r))?;
        let (_, link_at) = self.resolve_write(Operation::SymlinkLink, link, false)?;
        if link_at.meta.is_some() {
            let err = io::ErrorKind::AlreadyExists.into();
            return Err(self.io(Operation::SymlinkLink, link, err));
        }
        let dir = link_at.path.parent().unwrap_or(Path::new(""));
        let leads_to = self.walk(target_op, target, &dir.join(&target_path), true)?;
        if let Some(refusal) = self.policy.read_denial(&leads_to.path) {
            return Err(self.refuse(target_op, target, refusal));
        }
        self.root
            .symlink(&target_path, &link_at.path)
            .map_err(|e| self.io(Operation::SymlinkLink, link, e))
    }

    /// Walks a directory about to be renamed, without following symlinks, and
    /// refuses if anything inside is excluded, protected or read-only.
    fn check_subtree(&self, from: &str, dir: &Path) -> Result<(), GrantError> {
        let op = Operation::RenameFrom;
        if let Some(entry) = self.policy.read_only_below(dir) {
            let reason = Refusal::ContainsProtected {
                entry: entry.to_path_buf(),
            };
            return Err(self.refuse(op, from, reason));
        }
        let mut stack = vec![dir.to_path_buf()];
        let mut seen = 0usize;
        while let Some(current) = stack.pop() {
            let entries = self
                .root
                .read_dir(cap_path(&current))
                .map_err(|e| self.io(op, from, e))?;
            for entry in entries {
                let entry = entry.map_err(|e| self.io(op, from, e))?;
                seen += 1;
                if seen > RENAME_SCAN_LIMIT {
                    let reason = Refusal::TooLargeToCheck {
                        limit: RENAME_SCAN_LIMIT,
                    };
                    return Err(self.refuse(op, from, reason));
                }
                let child = current.join(entry.file_name());
                if self.policy.write_denial(&child).is_some() {
                    return Err(self.refuse(op, from, Refusal::ContainsProtected { entry: child }));
                }
                if entry
                    .file_type()
                    .map_err(|e| self.io(op, from, e))?
                    .is_dir()
                {
                    stack.push(child);
                }
            }
        }
        Ok(())
    }
}
