//! [`EvidenceWriter`]: creates a run's bundle, fills it, seals it.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use super::EvidenceError;
use super::atomic::{discard_stale_temps, seal_durably, to_pretty_json, write_atomic};
use super::command::{CommandRecorder, CommandStart, LATE_OUTPUT_PREFIX, WHOLE_OUTPUT_PREFIX};
use super::layout::{self, COMMANDS_DIR, EvidenceFile, MANIFEST_FILE};
use super::manifest::Manifest;
use crate::RunId;

/// Writes the evidence bundle of one run into `<root>/<run-id>/`.
///
/// All methods take `&self` and the writer is `Send + Sync`, so it can be shared
/// (e.g. in an `Arc`) by the tasks of a run. Writes are serialized internally.
/// After [`seal`](Self::seal) every write is refused with
/// [`EvidenceError::Sealed`].
#[derive(Debug)]
pub struct EvidenceWriter {
    dir: PathBuf,
    state: Mutex<State>,
    /// One clone per live [`CommandRecorder`] and output stream; sealing requires
    /// that only this one is left.
    open: Arc<()>,
}

#[derive(Debug)]
struct State {
    sealed: bool,
    next_seq: u32,
}

impl EvidenceWriter {
    /// Creates `root` if needed (its missing directories the caller's alone,
    /// `0700`: bundles hold every command's output), then the run directory
    /// `root/<run-id>/`, which must not exist: an existing run directory is never
    /// reused or overwritten.
    ///
    /// # Ambient authority
    /// Creates directories at a host path chosen by the caller.
    pub fn create(root: &Path, run_id: &RunId) -> Result<Self, EvidenceError> {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(|source| EvidenceError::CreateDir {
                path: root.to_path_buf(),
                source,
            })?;
        let dir = root.join(run_id.as_str());
        // The bundle holds every command's output: the runner's alone.
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|source| match source.kind() {
                io::ErrorKind::AlreadyExists => EvidenceError::AlreadyExists { path: dir.clone() },
                _ => EvidenceError::CreateDir {
                    path: dir.clone(),
                    source,
                },
            })?;
        tracing::debug!(run_id = %run_id, dir = %dir.display(), "evidence bundle created");
        Ok(Self {
            dir,
            state: Mutex::new(State {
                sealed: false,
                next_seq: 1,
            }),
            open: Arc::new(()),
        })
    }

    /// Opens the existing bundle `dir` again, to go on filling it (a later step of
    /// the same run in another process, or crash recovery exporting what a dead
    /// runner left). A sealed bundle (one with a manifest) opens sealed and refuses
    /// writes. New commands are numbered after the highest already present.
    ///
    /// # Ambient authority
    /// Opens a host path chosen by the caller.
    pub fn reopen(dir: &Path) -> Result<Self, EvidenceError> {
        let meta = fs::symlink_metadata(dir).map_err(|source| EvidenceError::Read {
            path: dir.to_path_buf(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(EvidenceError::Read {
                path: dir.to_path_buf(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
            });
        }
        let sealed = fs::symlink_metadata(dir.join(MANIFEST_FILE)).is_ok();
        let next_seq = last_command_seq(&dir.join(COMMANDS_DIR))?.saturating_add(1);
        Ok(Self {
            dir: dir.to_path_buf(),
            state: Mutex::new(State { sealed, next_seq }),
            open: Arc::new(()),
        })
    }

    /// The run directory, `<root>/<run-id>/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The full path of a well-known file of this bundle.
    pub fn path_of(&self, file: EvidenceFile) -> PathBuf {
        self.dir.join(file.file_name())
    }

    /// Whether [`seal`](Self::seal) has succeeded.
    pub fn is_sealed(&self) -> bool {
        self.lock().sealed
    }

    /// Writes `value` as pretty JSON to a well-known file, atomically (a temp
    /// file renamed onto it: a reader never sees a torn file; synced to disk when
    /// the bundle is [sealed](Self::seal)). Writing the same file again replaces it.
    pub fn write_json(
        &self,
        file: EvidenceFile,
        value: &impl Serialize,
    ) -> Result<(), EvidenceError> {
        let bytes = to_pretty_json(value, &self.path_of(file))?;
        self.write_bytes(file, &bytes)
    }

    /// Writes `bytes` to a well-known file, atomically (see
    /// [`write_json`](Self::write_json)).
    pub fn write_bytes(&self, file: EvidenceFile, bytes: &[u8]) -> Result<(), EvidenceError> {
        let _state = self.unsealed()?;
        write_atomic(&self.dir, file.file_name(), bytes)
    }

    /// Writes the output `stream` (`stdout` or `stderr`) of the service `name`
    /// to `services/NAME/STREAM`, atomically. `name` is one path
    /// component (a contract's service names are letters, digits, `-` and `_`).
    pub fn write_service_output(
        &self,
        name: &str,
        stream: &str,
        bytes: &[u8],
    ) -> Result<(), EvidenceError> {
        self.write_nested(layout::SERVICES_DIR, name, stream, bytes)
    }

    /// Writes output of command `seq` known only after it (or its runner)
    /// ended, atomically: `commands/NNNN/late.STREAM` (what its
    /// background processes wrote after it ended) or `whole.STREAM` (all it
    /// wrote, when its runner died while it ran). `stream` is `stdout` or
    /// `stderr`. Never the streamed `stdout` and `stderr` themselves.
    pub fn write_late_output(
        &self,
        seq: u32,
        whole: bool,
        stream: &str,
        bytes: &[u8],
    ) -> Result<(), EvidenceError> {
        let prefix = if whole {
            WHOLE_OUTPUT_PREFIX
        } else {
            LATE_OUTPUT_PREFIX
        };
        let name = format!("{prefix}{stream}");
        self.write_nested(COMMANDS_DIR, &format!("{seq:04}"), &name, bytes)
    }

    /// Writes `TOP/DIR/NAME`, `dir` and `name` each one path component.
    fn write_nested(
        &self,
        top: &str,
        dir: &str,
        name: &str,
        bytes: &[u8],
    ) -> Result<(), EvidenceError> {
        let _state = self.unsealed()?;
        let path = self.dir.join(top).join(dir);
        if let Some(reason) = layout::bad_path_reason(&format!("{top}/{dir}/{name}"))
            .or_else(|| (dir.contains('/') || name.contains('/')).then_some("a name holds '/'"))
        {
            return Err(EvidenceError::CreateDir {
                path,
                source: io::Error::new(io::ErrorKind::InvalidInput, reason),
            });
        }
        fs::create_dir_all(&path).map_err(|source| EvidenceError::CreateDir {
            path: path.clone(),
            source,
        })?;
        write_atomic(&path, name, bytes)
    }

    /// Copies the host file `from` into a well-known file (for the journal).
    ///
    /// `from` must be a regular file: a symlink is refused, not followed (it is
    /// inspected with `symlink_metadata`, and the opened file is checked to be the
    /// one inspected).
    ///
    /// # Ambient authority
    /// Reads a host path chosen by the caller.
    pub fn copy_file(&self, file: EvidenceFile, from: &Path) -> Result<(), EvidenceError> {
        let _state = self.unsealed()?;
        let meta = fs::symlink_metadata(from).map_err(|source| EvidenceError::Read {
            path: from.to_path_buf(),
            source,
        })?;
        let mut source = layout::open_checked(from, &meta)?;
        let name = file.file_name();
        let temp = self.dir.join(format!(".{name}.tmp"));
        let target = self.dir.join(name);
        let result = copy_new(&mut source, from, &temp).and_then(|()| {
            fs::rename(&temp, &target).map_err(|source| EvidenceError::Rename {
                from: temp.clone(),
                to: target.clone(),
                source,
            })
        });
        if result.is_err() {
            let _ = fs::remove_file(&temp);
        }
        result
    }

    /// Copies the host file `from` into a well-known file as
    /// [`copy_file`](Self::copy_file) does, its bytes passed through `map` on
    /// the way (a record redacted of credential values).
    ///
    /// # Ambient authority
    /// Reads a host path chosen by the caller.
    pub fn copy_file_mapped(
        &self,
        file: EvidenceFile,
        from: &Path,
        map: impl FnOnce(Vec<u8>) -> Vec<u8>,
    ) -> Result<(), EvidenceError> {
        let meta = fs::symlink_metadata(from).map_err(|source| EvidenceError::Read {
            path: from.to_path_buf(),
            source,
        })?;
        let mut source = layout::open_checked(from, &meta)?;
        let mut bytes = Vec::new();
        source
            .read_to_end(&mut bytes)
            .map_err(|source| EvidenceError::Read {
                path: from.to_path_buf(),
                source,
            })?;
        self.write_bytes(file, &map(bytes))
    }

    /// Starts recording a command: creates `commands/NNNN/` (a 4-digit sequence
    /// number in start order, from `0001`), writes its `command.json` at once and
    /// opens its `stdout` and `stderr` files for streaming.
    pub fn start_command(&self, start: CommandStart) -> Result<CommandRecorder, EvidenceError> {
        let mut state = self.unsealed()?;
        let commands = self.dir.join(COMMANDS_DIR);
        match fs::create_dir(&commands) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(EvidenceError::CreateDir {
                    path: commands,
                    source,
                });
            }
        }
        // A number is taken by creating its directory: another process
        // recording commands of the same run (one joined to it) may have taken
        // the next one first, and then this one goes on past the highest taken.
        // A number is consumed even if starting fails, so a half-created
        // directory is never retried.
        loop {
            let seq = state.next_seq;
            state.next_seq = seq.saturating_add(1);
            match CommandRecorder::start(&commands, seq, start.clone(), Arc::clone(&self.open)) {
                Err(EvidenceError::AlreadyExists { .. }) if seq < u32::MAX => {
                    state.next_seq = state
                        .next_seq
                        .max(last_command_seq(&commands)?.saturating_add(1));
                }
                started => return started,
            }
        }
    }

    /// Names the required check `check` in the record of command `seq`
    /// (`commands/NNNN/command.json`, which must be finished): it ran for that
    /// check, so a run read back from its evidence does not count it as one of
    /// the caller's commands.
    pub fn mark_check(&self, seq: u32, check: &str) -> Result<(), EvidenceError> {
        let _state = self.unsealed()?;
        super::command::record_check(
            &self.dir.join(COMMANDS_DIR).join(format!("{seq:04}")),
            check,
        )
    }

    /// Seals the bundle: hashes every regular file (never following links; a
    /// symlink or other non-regular file anywhere in the bundle is an error naming
    /// it), syncs every file and directory of the bundle to disk together with
    /// the manifest's temp file, then renames it to `manifest.json`, syncs its
    /// directory, and refuses every later write. Temp files that writes
    /// killed midway left (`.NAME.tmp`) are discarded first.
    ///
    /// Fails with [`EvidenceError::CommandsStillOpen`] while a [`CommandRecorder`]
    /// or an output stream is alive (finish or drop them first). A failed seal
    /// leaves the writer usable.
    pub fn seal(&self) -> Result<Manifest, EvidenceError> {
        let mut state = self.unsealed()?;
        let open = Arc::strong_count(&self.open) - 1;
        if open > 0 {
            return Err(EvidenceError::CommandsStillOpen {
                path: self.dir.clone(),
                open,
            });
        }
        // Not files of the bundle: what writes killed midway left (a seal's
        // own temp manifest among them).
        discard_stale_temps(&self.dir)?;
        let manifest = Manifest::compute(&self.dir)?;
        // What the manifest names is on disk before the manifest is found.
        let bytes = to_pretty_json(&manifest, &self.dir.join(MANIFEST_FILE))?;
        seal_durably(&self.dir, MANIFEST_FILE, &bytes, &manifest)?;
        state.sealed = true;
        tracing::debug!(
            dir = %self.dir.display(),
            files = manifest.files.len(),
            "evidence bundle sealed"
        );
        Ok(manifest)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is two plain fields, consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `write` while the bundle is not sealed and no other write of
    /// this writer runs (for a record appended from a module of its own).
    pub(super) fn while_unsealed<T>(
        &self,
        write: impl FnOnce() -> Result<T, EvidenceError>,
    ) -> Result<T, EvidenceError> {
        let _state = self.unsealed()?;
        write()
    }

    fn unsealed(&self) -> Result<MutexGuard<'_, State>, EvidenceError> {
        let state = self.lock();
        if state.sealed {
            return Err(EvidenceError::Sealed {
                path: self.dir.clone(),
            });
        }
        Ok(state)
    }
}

/// Copies `source` into the new file `temp`.
fn copy_new(source: &mut fs::File, from: &Path, temp: &Path) -> Result<(), EvidenceError> {
    let wrap = |source| EvidenceError::Write {
        path: temp.to_path_buf(),
        source,
    };
    let _ = fs::remove_file(temp);
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)
        .map_err(wrap)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(EvidenceError::Read {
                    path: from.to_path_buf(),
                    source,
                });
            }
        };
        out.write_all(&buf[..n]).map_err(wrap)?;
    }
    Ok(())
}

/// The highest command number under `commands` (0 when there is none).
fn last_command_seq(commands: &Path) -> Result<u32, EvidenceError> {
    let entries = match fs::read_dir(commands) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(source) => {
            return Err(EvidenceError::Read {
                path: commands.to_path_buf(),
                source,
            });
        }
    };
    let mut last = 0;
    for entry in entries {
        let entry = entry.map_err(|source| EvidenceError::Read {
            path: commands.to_path_buf(),
            source,
        })?;
        if let Some(seq) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        {
            last = last.max(seq);
        }
    }
    Ok(last)
}
