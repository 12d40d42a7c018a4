//! Publishing a service template: what a template command left in the run's
//! layer, copied into the host's store.
//!
//! What a template may hold is decided here, once for every backend: a template
//! is a tree of **directories, regular files and symbolic links**, each with
//! its owner and permission bits, and nothing else. Every run of the host
//! starts from it and it lives in a store on the host, so:
//!
//! * **set-uid and set-gid bits are dropped** from every entry (a set-uid
//!   file of the run's ids in a host directory would hand those ids to whoever
//!   runs it); the sticky bit stays;
//! * a **FIFO, socket or device node** refuses the publication with a
//!   [`TemplateError::Unsupported`] naming its path as the command saw it (a
//!   device node would be a door into the host's devices, a FIFO or socket has
//!   no content to keep);
//! * extended attributes (file capabilities among them) are not copied.
//!
//! The copy is made beside its final name and renamed into place; a copy that
//! fails, for any reason, is removed, so a failed publication leaves nothing in
//! the store.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::RunId;
use crate::boundary::TemplateLayer;

/// Permission bits a template keeps: everything but set-uid and set-gid.
const KEPT_MODE: u32 = 0o1777;

/// Why a template could not be published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The template command left an entry a template cannot hold.
    #[error("{path}: a {kind} cannot be part of a service template")]
    Unsupported {
        /// The entry, as the template command saw it (under the template's
        /// `path`).
        path: PathBuf,
        /// What it is.
        kind: SpecialFile,
    },
    /// Copying into the store failed.
    #[error("cannot publish the template at {path}")]
    Io {
        /// The file or directory of the store.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The publication failed and its staging copy could not be removed
    /// either.
    #[error("{failed}; its staging copy {staging} was not removed")]
    StagingLeft {
        /// Why the publication failed.
        failed: Box<TemplateError>,
        /// The staging copy left in the store.
        staging: PathBuf,
        /// Why it could not be removed.
        #[source]
        source: io::Error,
    },
}

/// An entry that is neither a directory, a regular file nor a symbolic link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SpecialFile {
    /// A named pipe.
    Fifo,
    /// A unix socket.
    Socket,
    /// A block device node.
    BlockDevice,
    /// A character device node.
    CharDevice,
}

impl std::fmt::Display for SpecialFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Fifo => "FIFO",
            Self::Socket => "socket",
            Self::BlockDevice => "block device",
            Self::CharDevice => "character device",
        })
    }
}

/// Keeps what the run made in its layer as the template `layer.key` of
/// `store`: copied beside its final name, synced, then renamed into place
/// (the run's layer is mounted without syncs, and every later run of the
/// host starts from the template: it is on disk before it is found). When
/// another run published the same template first, its copy is kept and this
/// one dropped.
pub(super) fn publish(
    store: &Path,
    layer: &TemplateLayer,
    run_id: &RunId,
) -> Result<(), TemplateError> {
    let target = store.join(&layer.key);
    let staging = store.join(format!(".{}.{run_id}", layer.key));
    std::fs::create_dir_all(store).map_err(io_at(store))?;
    let copied = Copy {
        from_root: &layer.upper,
        seen_as: Path::new(&layer.target),
    }
    .tree(&layer.upper, &staging);
    let placed = copied.and_then(|()| match std::fs::rename(&staging, &target) {
        Ok(()) => std::fs::File::open(store)
            .and_then(|dir| dir.sync_all())
            .map_err(io_at(store)),
        Err(_) if target.is_dir() => {
            super::tree_removal::remove_tree(&staging).map_err(io_at(&staging))
        }
        Err(source) => Err(TemplateError::Io {
            path: target.clone(),
            source,
        }),
    });
    placed.map_err(|failed| match super::tree_removal::remove_tree(&staging) {
        Ok(()) => failed,
        Err(e) if e.kind() == io::ErrorKind::NotFound => failed,
        Err(source) => TemplateError::StagingLeft {
            failed: Box::new(failed),
            staging,
            source,
        },
    })
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> TemplateError {
    let path = path.to_path_buf();
    move |source| TemplateError::Io { path, source }
}

/// A copy of a layer: where it is, and where the template command saw it
/// (for naming an entry).
struct Copy<'a> {
    from_root: &'a Path,
    seen_as: &'a Path,
}

impl Copy<'_> {
    /// Copies the directory tree `from` to `to` (which must not exist),
    /// keeping each entry's owner and permissions but set-uid and set-gid, and
    /// syncs what it made (a symbolic link's entry with its directory).
    fn tree(&self, from: &Path, to: &Path) -> Result<(), TemplateError> {
        let meta = std::fs::symlink_metadata(from).map_err(io_at(from))?;
        let kind = meta.file_type();
        // Held open from before the owner and mode change (which may take this
        // process's own access away), for the sync after them.
        let made = if kind.is_symlink() {
            std::fs::read_link(from)
                .and_then(|target| std::os::unix::fs::symlink(target, to))
                .map_err(io_at(to))?;
            None
        } else if kind.is_dir() {
            std::fs::create_dir(to).map_err(io_at(to))?;
            let dir = std::fs::File::open(to).map_err(io_at(to))?;
            for entry in std::fs::read_dir(from).map_err(io_at(from))? {
                let entry = entry.map_err(io_at(from))?;
                self.tree(&entry.path(), &to.join(entry.file_name()))?;
            }
            Some(dir)
        } else if kind.is_file() {
            let mut file = std::fs::File::create_new(to).map_err(io_at(to))?;
            std::fs::File::open(from)
                .and_then(|mut source| io::copy(&mut source, &mut file))
                .map_err(io_at(from))?;
            Some(file)
        } else {
            return Err(TemplateError::Unsupported {
                path: self.seen(from),
                kind: special(&kind),
            });
        };
        std::os::unix::fs::lchown(to, Some(meta.uid()), Some(meta.gid())).map_err(io_at(to))?;
        match made {
            Some(made) => {
                // After the owner change, which may clear these bits itself.
                std::fs::set_permissions(
                    to,
                    std::fs::Permissions::from_mode(meta.mode() & KEPT_MODE),
                )
                .and_then(|()| made.sync_all())
                .map_err(io_at(to))
            }
            None => Ok(()),
        }
    }

    /// `path` of the layer as the template command saw it.
    fn seen(&self, path: &Path) -> PathBuf {
        match path.strip_prefix(self.from_root) {
            Ok(rel) if rel.as_os_str().is_empty() => self.seen_as.to_path_buf(),
            Ok(rel) => self.seen_as.join(rel),
            Err(_) => path.to_path_buf(),
        }
    }
}

/// What a file type that is neither a directory, a file nor a link is.
fn special(kind: &std::fs::FileType) -> SpecialFile {
    if kind.is_fifo() {
        SpecialFile::Fifo
    } else if kind.is_socket() {
        SpecialFile::Socket
    } else if kind.is_block_device() {
        SpecialFile::BlockDevice
    } else {
        SpecialFile::CharDevice
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;

    fn layer(upper: PathBuf) -> TemplateLayer {
        TemplateLayer {
            service: "db".into(),
            target: "/var/lib/db".into(),
            key: "k".repeat(64),
            lower: upper.clone(),
            upper: upper.clone(),
            work: upper,
            prepared: false,
        }
    }

    fn run_id() -> RunId {
        RunId::new("run-1").unwrap()
    }

    #[test]
    fn a_published_tree_keeps_its_links_modes_and_contents() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("base/1")).unwrap();
        std::fs::write(from.join("base/1/pg_filenode.map"), b"map").unwrap();
        std::fs::set_permissions(&from, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink("base/1", from.join("link")).unwrap();
        let store = dir.path().join("store");
        let layer = layer(from.clone());
        publish(&store, &layer, &run_id()).unwrap();
        let to = store.join(&layer.key);
        assert_eq!(
            std::fs::read(to.join("base/1/pg_filenode.map")).unwrap(),
            b"map"
        );
        assert_eq!(
            std::fs::read_link(to.join("link")).unwrap(),
            Path::new("base/1")
        );
        let mode = std::fs::metadata(&to).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Published again (another run made it too): the first copy stays,
        // the second is dropped.
        std::fs::write(from.join("second"), b"").unwrap();
        publish(&store, &layer, &RunId::new("run-2").unwrap()).unwrap();
        assert!(!to.join("second").exists());
        let names: Vec<_> = std::fs::read_dir(&store)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from(&layer.key)]);
    }

    #[test]
    fn set_id_bits_are_dropped_and_the_sticky_bit_kept() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("shared")).unwrap();
        std::fs::write(from.join("idcopy"), b"\x7fELF").unwrap();
        std::fs::set_permissions(from.join("idcopy"), std::fs::Permissions::from_mode(0o6755))
            .unwrap();
        std::fs::set_permissions(from.join("shared"), std::fs::Permissions::from_mode(0o3777))
            .unwrap();
        let store = dir.path().join("store");
        let layer = layer(from);
        publish(&store, &layer, &run_id()).unwrap();
        let mode = |name: &str| {
            std::fs::metadata(store.join(&layer.key).join(name))
                .unwrap()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("idcopy"), 0o755);
        assert_eq!(mode("shared"), 0o1777);
    }

    /// A FIFO (and any special file) refuses the publication, naming it as
    /// the template command saw it; nothing is left in the store, no staging
    /// copy either.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_fifo_refuses_the_template_naming_it_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("run")).unwrap();
        std::fs::write(from.join("data"), b"rows").unwrap();
        nix::unistd::mkfifo(
            &from.join("run/queue"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let store = dir.path().join("store");
        let error = publish(&store, &layer(from), &run_id()).unwrap_err();
        let TemplateError::Unsupported { path, kind } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(path, Path::new("/var/lib/db/run/queue"));
        assert_eq!(*kind, SpecialFile::Fifo);
        assert_eq!(
            error.to_string(),
            "/var/lib/db/run/queue: a FIFO cannot be part of a service template"
        );
        assert_eq!(std::fs::read_dir(&store).unwrap().count(), 0);
    }

    #[test]
    fn a_socket_is_refused_too() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(&from).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(from.join(".s.PGSQL.5432")).unwrap();
        let store = dir.path().join("store");
        let error = publish(&store, &layer(from), &run_id()).unwrap_err();
        assert!(
            matches!(&error, TemplateError::Unsupported { kind: SpecialFile::Socket, path }
                if path == Path::new("/var/lib/db/.s.PGSQL.5432")),
            "{error:?}"
        );
        assert_eq!(std::fs::read_dir(&store).unwrap().count(), 0);
    }
}
