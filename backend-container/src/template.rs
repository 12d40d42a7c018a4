//! Service templates (`environment.services[].template`) on the container
//! backend: each run works on a copy of its own.
//!
//! The namespace backend shows a template to a run through overlayfs over an
//! idmapped lower layer. This runtime has no idmapped mounts (runc 1.1), and a
//! template's files belong to the host ids of the run that made it, so a run
//! here gets a copy instead: at its first seal the template's tree is copied
//! into the run's layer ([`TemplateLayer::upper`]), every entry owned by the
//! run's host ids, and that directory is bound at the template's path. Nothing
//! the run changes reaches the template or another run, as with the overlay; the
//! price is the template's size, copied once per run. A run sealed again (its
//! container lost) keeps its copy and what it changed there. A run that makes
//! the template gets an empty directory of its own, which the core then stores.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use workspace_core::boundary::TemplateLayer;

use crate::error::ContainerError;

/// The permission bits a copied entry keeps: set-user-id and set-group-id are
/// dropped, as from an image.
const KEPT_MODE: u32 = 0o1777;

/// Makes `layer.upper` the run's copy of the template (when the template was
/// there and the run has no copy yet), owned by `uid`:`gid` on the host.
///
/// # Ambient authority
/// Reads the host's template store and writes the run's layer.
pub(crate) fn materialize(layer: &TemplateLayer, uid: u32, gid: u32) -> Result<(), ContainerError> {
    let upper = &layer.upper;
    let empty = fs::read_dir(upper)
        .map_err(ContainerError::io("reading a template's layer", upper))?
        .next()
        .is_none();
    if layer.prepared && empty {
        // Copied beside it and renamed into place: a seal that stops midway
        // leaves no half copy where the next one would take it as the run's.
        let staging = upper.with_file_name("copy");
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(ContainerError::io(
                "removing a half-made template copy",
                &staging,
            ))?;
        }
        copy_tree(&layer.lower, &staging, uid, gid)?;
        fs::remove_dir(upper).map_err(ContainerError::io("replacing a template's layer", upper))?;
        fs::rename(&staging, upper).map_err(ContainerError::io(
            "moving a template copy into place",
            upper,
        ))?;
    }
    own(upper, uid, gid)
}

/// Copies the directory `from` to the new directory `to` (modes kept but for
/// set-id bits, links copied as links, anything but files, directories and
/// links left out), every entry owned by `uid`:`gid`.
fn copy_tree(from: &Path, to: &Path, uid: u32, gid: u32) -> Result<(), ContainerError> {
    let meta =
        fs::symlink_metadata(from).map_err(ContainerError::io("reading a template", from))?;
    fs::create_dir(to).map_err(ContainerError::io("copying a template", to))?;
    for entry in fs::read_dir(from).map_err(ContainerError::io("reading a template", from))? {
        let entry = entry.map_err(ContainerError::io("reading a template", from))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry
            .file_type()
            .map_err(ContainerError::io("reading a template", &source))?;
        if kind.is_dir() {
            copy_tree(&source, &target, uid, gid)?;
        } else if kind.is_file() {
            fs::copy(&source, &target)
                .map_err(ContainerError::io("copying a template", &target))?;
            keep_mode(&source, &target)?;
            own(&target, uid, gid)?;
        } else if kind.is_symlink() {
            let link = fs::read_link(&source)
                .map_err(ContainerError::io("reading a template's link", &source))?;
            std::os::unix::fs::symlink(&link, &target)
                .map_err(ContainerError::io("copying a template's link", &target))?;
            own(&target, uid, gid)?;
        }
    }
    fs::set_permissions(to, fs::Permissions::from_mode(meta.mode() & KEPT_MODE))
        .map_err(ContainerError::io("copying a template", to))?;
    own(to, uid, gid)
}

/// Gives `target` the permission bits of `source` but its set-id bits.
fn keep_mode(source: &Path, target: &Path) -> Result<(), ContainerError> {
    let mode = fs::symlink_metadata(source)
        .map_err(ContainerError::io("reading a template", source))?
        .mode();
    fs::set_permissions(target, fs::Permissions::from_mode(mode & KEPT_MODE))
        .map_err(ContainerError::io("copying a template", target))
}

/// `lchown`: never through a link.
fn own(path: &Path, uid: u32, gid: u32) -> Result<(), ContainerError> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .map_err(ContainerError::io("giving a template to the run", path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::materialize;
    use workspace_core::boundary::TemplateLayer;

    /// A template a run made may hold anything that run planted: a link to a
    /// host file, a set-user-id file. Its copy for the next run follows no
    /// link, keeps no set-id bit, and leaves the host file as it was.
    #[test]
    fn a_planted_link_is_copied_as_a_link_and_set_id_bits_are_dropped() {
        let base = tempfile::tempdir().unwrap();
        let host_file = base.path().join("host-secret");
        std::fs::write(&host_file, "the host's").unwrap();
        let lower = base.path().join("store");
        std::fs::create_dir_all(lower.join("data")).unwrap();
        std::os::unix::fs::symlink(&host_file, lower.join("data/link")).unwrap();
        std::fs::write(lower.join("data/tool"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(lower.join("data/tool"), PermissionsExt::from_mode(0o4755))
            .unwrap();
        let run = base.path().join("run");
        let upper = run.join("upper");
        std::fs::create_dir_all(&upper).unwrap();
        let layer = TemplateLayer {
            service: "db".into(),
            target: "/tmp/data".into(),
            key: "k".into(),
            lower,
            upper: upper.clone(),
            work: run.join("work"),
            prepared: true,
        };
        materialize(&layer, 4242, 4242).unwrap();
        let link = std::fs::symlink_metadata(upper.join("data/link")).unwrap();
        assert!(link.file_type().is_symlink());
        assert_eq!(link.uid(), 4242);
        assert_eq!(
            std::fs::read_link(upper.join("data/link")).unwrap(),
            host_file
        );
        let tool = std::fs::metadata(upper.join("data/tool")).unwrap();
        assert_eq!((tool.mode() & 0o7777, tool.uid()), (0o755, 4242));
        // The host file: its content and owner as before.
        assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "the host's");
        assert_eq!(std::fs::metadata(&host_file).unwrap().uid(), 0);
        assert!(!run.join("copy").exists(), "a staging copy was left");
        // Sealed again, the run keeps its copy and what it changed there.
        std::fs::write(upper.join("data/changed"), "the run's").unwrap();
        materialize(&layer, 4242, 4242).unwrap();
        assert!(upper.join("data/changed").exists());
    }
}
