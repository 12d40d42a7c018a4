//! [`PathGrants`]: construction, the shared checks, and the reading operations.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, Metadata, MetadataExt};
use workspace_core::contract::FilesystemSection;

use super::error::{GrantError, Operation, Refusal};
use super::path::{cap_path, parse_relative};
use super::policy::Policy;
use super::resolve::{Resolved, WalkError, is_escape, resolve};
use super::types::{DirEntryInfo, EntryKind, GrantOptions, MetadataInfo};

/// Capability-safe file access for an agent framework's own file tools, keeping
/// the contract's filesystem section exactly as the sandbox does.
///
/// Every operation takes a workspace-relative path string from the agent, checks
/// it, resolves it under the root capability (following symlinks found inside the
/// workspace, at most 40, never out of it), checks where it really leads, and only
/// then touches the file. Refusals are [`GrantError::Refused`] and are logged with
/// `tracing::warn!`.
///
/// The operations block: call them from `tokio::task::spawn_blocking` (the type is
/// `Send + Sync`, share it in an `Arc`).
#[derive(Debug)]
pub struct PathGrants {
    pub(super) root: Dir,
    root_path: PathBuf,
    pub(super) policy: Policy,
}

impl PathGrants {
    /// Grants over the workspace at `workspace_root` as `section` declares, with the
    /// built-in protections only.
    ///
    /// # Ambient authority
    ///
    /// Opens `workspace_root` with the caller's own rights
    /// (`Dir::open_ambient_dir(root, ambient_authority())`); every later access is
    /// relative to that directory capability.
    pub fn new(workspace_root: &Path, section: &FilesystemSection) -> Result<Self, GrantError> {
        Self::new_opts(workspace_root, section, GrantOptions::default())
    }

    /// Like [`PathGrants::new`], with extra protected globs.
    ///
    /// # Ambient authority
    ///
    /// Opens `workspace_root` with the caller's own rights, as [`PathGrants::new`].
    pub fn new_opts(
        workspace_root: &Path,
        section: &FilesystemSection,
        options: GrantOptions,
    ) -> Result<Self, GrantError> {
        let policy = Policy::new(section, &options)?;
        let root = Dir::open_ambient_dir(workspace_root, cap_std::ambient_authority()).map_err(
            |source| GrantError::OpenRoot {
                root: workspace_root.to_path_buf(),
                source,
            },
        )?;
        Ok(Self {
            root,
            root_path: workspace_root.to_path_buf(),
            policy,
        })
    }

    /// The host path the grants were opened on (for messages; never used to access
    /// files).
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// The contents of a regular file.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, GrantError> {
        let op = Operation::Read;
        let (_, resolved) = self.resolve_read(op, path, true)?;
        let meta = self.existing(op, path, &resolved)?;
        self.check_regular_file(op, path, &resolved.path, meta)?;
        let mut file = self
            .root
            .open(cap_path(&resolved.path))
            .map_err(|e| self.io(op, path, e))?;
        let opened = file.metadata().map_err(|e| self.io(op, path, e))?;
        self.check_same_file(op, path, &resolved.path, meta, &opened)?;
        let mut buf = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
        file.read_to_end(&mut buf)
            .map_err(|e| self.io(op, path, e))?;
        Ok(buf)
    }

    /// The contents of a regular file as UTF-8.
    pub fn read_to_string(&self, path: &str) -> Result<String, GrantError> {
        let bytes = self.read(path)?;
        String::from_utf8(bytes).map_err(|source| GrantError::NotUtf8 {
            path: path.to_owned(),
            source,
        })
    }

    /// The entries of a directory, sorted by name. Symlinks are reported as
    /// symlinks and never followed; excluded and protected entries are left out.
    pub fn list(&self, path: &str) -> Result<Vec<DirEntryInfo>, GrantError> {
        let op = Operation::List;
        let (requested, resolved) = self.resolve_read(op, path, true)?;
        let meta = self.existing(op, path, &resolved)?;
        if !meta.is_dir() {
            return Err(self.io(op, path, io::ErrorKind::NotADirectory.into()));
        }
        let entries = self
            .root
            .read_dir(cap_path(&resolved.path))
            .map_err(|e| self.io(op, path, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.io(op, path, e))?;
            let name = entry.file_name();
            let hidden = self
                .policy
                .read_denial_exact(&resolved.path.join(&name))
                .or_else(|| self.policy.read_denial_exact(&requested.join(&name)));
            if hidden.is_some() {
                continue;
            }
            let kind = EntryKind::of(entry.file_type().map_err(|e| self.io(op, path, e))?);
            out.push(DirEntryInfo {
                name: name.to_string_lossy().into_owned(),
                kind,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// What the path itself is (a final symlink is not followed), its size, and
    /// whether it may be written.
    pub fn metadata(&self, path: &str) -> Result<MetadataInfo, GrantError> {
        let op = Operation::Metadata;
        let (requested, resolved) = self.resolve_read(op, path, false)?;
        let meta = self.existing(op, path, &resolved)?;
        let grants_refuse = requested.as_os_str().is_empty()
            || self.policy.write_denial(&requested).is_some()
            || self.policy.write_denial(&resolved.path).is_some();
        Ok(MetadataInfo {
            kind: EntryKind::of(meta.file_type()),
            len: meta.len(),
            readonly: grants_refuse || meta.permissions().readonly(),
        })
    }

    /// Parses `path`, applies the read rules to it and to where it leads.
    pub(super) fn resolve_read(
        &self,
        op: Operation,
        path: &str,
        follow_final: bool,
    ) -> Result<(PathBuf, Resolved), GrantError> {
        let requested = parse_relative(path).map_err(|r| self.refuse(op, path, r))?;
        if let Some(refusal) = self.policy.read_denial(&requested) {
            return Err(self.refuse(op, path, refusal));
        }
        let resolved = self.walk(op, path, &requested, follow_final)?;
        if let Some(refusal) = self.policy.read_denial(&resolved.path) {
            return Err(self.refuse(op, path, refusal));
        }
        Ok((requested, resolved))
    }

    /// Parses `path`, applies the write rules to it and to where it leads. The
    /// root itself is never a write target.
    pub(super) fn resolve_write(
        &self,
        op: Operation,
        path: &str,
        follow_final: bool,
    ) -> Result<(PathBuf, Resolved), GrantError> {
        let requested = parse_relative(path).map_err(|r| self.refuse(op, path, r))?;
        if requested.as_os_str().is_empty() {
            return Err(self.refuse(op, path, Refusal::WorkspaceRoot));
        }
        if let Some(refusal) = self.policy.write_denial(&requested) {
            return Err(self.refuse(op, path, refusal));
        }
        let resolved = self.walk(op, path, &requested, follow_final)?;
        if resolved.path.as_os_str().is_empty() {
            return Err(self.refuse(op, path, Refusal::WorkspaceRoot));
        }
        if let Some(refusal) = self.policy.write_denial(&resolved.path) {
            return Err(self.refuse(op, path, refusal));
        }
        Ok((requested, resolved))
    }

    /// Resolves under the capability, mapping the walk's errors.
    pub(super) fn walk(
        &self,
        op: Operation,
        path: &str,
        start: &Path,
        follow_final: bool,
    ) -> Result<Resolved, GrantError> {
        resolve(&self.root, &self.policy, start, follow_final).map_err(|err| match err {
            WalkError::Refused(reason) => self.refuse(op, path, reason),
            WalkError::Io(source) => self.io(op, path, source),
        })
    }

    /// The metadata of a path that must exist.
    pub(super) fn existing<'r>(
        &self,
        op: Operation,
        path: &str,
        resolved: &'r Resolved,
    ) -> Result<&'r Metadata, GrantError> {
        resolved
            .meta
            .as_ref()
            .ok_or_else(|| self.io(op, path, io::ErrorKind::NotFound.into()))
    }

    /// Refuses anything but a regular file with a single link.
    pub(super) fn check_regular_file(
        &self,
        op: Operation,
        path: &str,
        resolved: &Path,
        meta: &Metadata,
    ) -> Result<(), GrantError> {
        if !meta.is_file() {
            let kind = EntryKind::of(meta.file_type());
            let reason = Refusal::NotRegularFile {
                resolved: resolved.to_path_buf(),
                kind,
            };
            return Err(self.refuse(op, path, reason));
        }
        if meta.nlink() > 1 {
            let reason = Refusal::HardLinked {
                resolved: resolved.to_path_buf(),
                links: meta.nlink(),
            };
            return Err(self.refuse(op, path, reason));
        }
        Ok(())
    }

    /// Refuses when the opened file is not the one checked (a racing swap), or
    /// gained links since.
    pub(super) fn check_same_file(
        &self,
        op: Operation,
        path: &str,
        resolved: &Path,
        checked: &Metadata,
        opened: &Metadata,
    ) -> Result<(), GrantError> {
        if checked.dev() != opened.dev() || checked.ino() != opened.ino() {
            let reason = Refusal::Raced {
                resolved: resolved.to_path_buf(),
            };
            return Err(self.refuse(op, path, reason));
        }
        self.check_regular_file(op, path, resolved, opened)
    }

    /// A refusal, logged.
    pub(super) fn refuse(&self, op: Operation, path: &str, reason: Refusal) -> GrantError {
        tracing::warn!(
            root = %self.root_path.display(),
            %op,
            path,
            %reason,
            "filesystem: access refused"
        );
        GrantError::Refused {
            op,
            path: path.to_owned(),
            reason,
        }
    }

    /// An operating-system error; cap-std's escape error becomes a refusal.
    pub(super) fn io(&self, op: Operation, path: &str, source: io::Error) -> GrantError {
        if is_escape(&source) {
            self.refuse(op, path, Refusal::EscapesRoot)
        } else {
            GrantError::Io {
                op,
                path: path.to_owned(),
                source,
            }
        }
    }
}
