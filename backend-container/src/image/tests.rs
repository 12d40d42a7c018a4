//! Layers applied to a root: whiteouts, and every way out of the root refused.

#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tar::{EntryType, Header};

use super::ImageError;
use super::unpack::apply;

/// A layer built entry by entry; names are written as given (`..` included),
/// as a hostile image would.
#[derive(Default)]
struct Layer {
    bytes: Vec<u8>,
}

impl Layer {
    fn entry(
        mut self,
        name: &str,
        kind: EntryType,
        mode: u32,
        link: Option<&str>,
        data: &[u8],
    ) -> Self {
        let mut header = Header::new_gnu();
        let gnu = header.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(link) = link {
            gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        header.set_cksum();
        self.bytes.extend_from_slice(header.as_bytes());
        self.bytes.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.bytes.extend(std::iter::repeat_n(0u8, pad));
        self
    }

    fn dir(self, name: &str) -> Self {
        self.entry(name, EntryType::Directory, 0o755, None, b"")
    }

    fn file(self, name: &str, data: &str) -> Self {
        self.entry(name, EntryType::Regular, 0o644, None, data.as_bytes())
    }

    fn symlink(self, name: &str, to: &str) -> Self {
        self.entry(name, EntryType::Symlink, 0o777, Some(to), b"")
    }

    fn hard_link(self, name: &str, to: &str) -> Self {
        self.entry(name, EntryType::Link, 0o644, Some(to), b"")
    }

    fn done(mut self) -> Vec<u8> {
        self.bytes.extend(std::iter::repeat_n(0u8, 1024));
        self.bytes
    }
}

fn root() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rootfs");
    std::fs::create_dir(&root).unwrap();
    (dir, root)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn layers_merge_and_whiteouts_remove_what_lower_layers_made() {
    let (_dir, root) = root();
    let lower = Layer::default()
        .dir("opt/")
        .file("opt/kept.txt", "kept")
        .file("opt/hidden.txt", "hidden")
        .dir("opt/stale/")
        .file("opt/stale/old.txt", "old")
        .entry("bin/tool", EntryType::Regular, 0o4755, None, b"#!/bin/sh\n")
        .entry("dev/null", EntryType::Char, 0o666, None, b"")
        .done();
    assert_eq!(
        apply(&root, &lower[..], "layer 1").unwrap(),
        1,
        "the device is skipped"
    );
    let upper = Layer::default()
        .file("opt/.wh.hidden.txt", "")
        .file("opt/stale/new.txt", "new")
        .file("opt/stale/.wh..wh..opq", "")
        .file("opt/kept.txt", "replaced")
        .done();
    apply(&root, &upper[..], "layer 2").unwrap();
    assert_eq!(read(&root.join("opt/kept.txt")), "replaced");
    assert!(
        !root.join("opt/hidden.txt").exists(),
        "the whiteout removed it"
    );
    assert!(
        !root.join("opt/.wh.hidden.txt").exists(),
        "a whiteout is not a file"
    );
    assert!(
        !root.join("opt/stale/old.txt").exists(),
        "the opaque directory hid it"
    );
    assert_eq!(
        read(&root.join("opt/stale/new.txt")),
        "new",
        "what the opaque directory's own layer made stays, whatever the order"
    );
    let mode = std::fs::metadata(root.join("bin/tool"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "the set-user-id bit is dropped");
    assert!(!root.join("dev/null").exists());
}

/// Applies `layer` and expects it refused, naming the layer and the entry,
/// with nothing written at `outside`.
fn refused(root: &Path, layer: &[u8], entry: &str, says: &str, outside: &Path) {
    let before = std::fs::read_dir(outside).unwrap().count();
    let error = apply(root, layer, "layer 3 (sha256:abc)").expect_err("an escaping layer applied");
    let text = error.to_string();
    assert!(
        matches!(error, ImageError::MalformedLayer { .. }),
        "{error:?}"
    );
    assert!(
        text.starts_with("layer 3 (sha256:abc): entry")
            && text.contains(entry)
            && text.contains(says),
        "{text}"
    );
    assert_eq!(
        std::fs::read_dir(outside).unwrap().count(),
        before,
        "the layer wrote outside its root"
    );
}

#[test]
fn a_layer_cannot_write_out_of_its_root() {
    let (dir, root) = root();
    let outside = dir.path().join("host");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), "host file").unwrap();
    let host = outside.display().to_string();

    // `..` in a path.
    let climbing = Layer::default().file("../host/escaped", "x").done();
    refused(&root, &climbing, "../host/escaped", "'..'", &outside);

    // A link the image made, then a file through it.
    let through_link = Layer::default()
        .symlink("opt", &host)
        .file("opt/planted", "x")
        .done();
    refused(
        &root,
        &through_link,
        "opt/planted",
        "a symbolic link",
        &outside,
    );
    assert!(!outside.join("planted").exists());

    // A whiteout through that link may not delete the host's file.
    let whiteout = Layer::default().file("opt/.wh.secret", "").done();
    refused(
        &root,
        &whiteout,
        "opt/.wh.secret",
        "a symbolic link",
        &outside,
    );
    let opaque = Layer::default().file("opt/.wh..wh..opq", "").done();
    refused(
        &root,
        &opaque,
        "opt/.wh..wh..opq",
        "a symbolic link",
        &outside,
    );
    assert_eq!(read(&outside.join("secret")), "host file");

    // A hard link to a host file, by `..` or by a path that is not in the image.
    let linked_out = Layer::default()
        .hard_link("stolen", "../host/secret")
        .done();
    refused(&root, &linked_out, "stolen", "'..'", &outside);
    let absolute = Layer::default()
        .hard_link("stolen", &format!("{host}/secret"))
        .done();
    refused(
        &root,
        &absolute,
        "stolen",
        "not a regular file of the image",
        &outside,
    );
    assert!(!root.join("stolen").exists());
    assert_eq!(
        std::fs::metadata(outside.join("secret")).unwrap().len(),
        9,
        "the host file is unchanged"
    );
}

#[test]
fn a_symbolic_link_of_the_image_is_made_never_followed() {
    let (dir, root) = root();
    let outside = dir.path().join("host");
    std::fs::create_dir(&outside).unwrap();
    let layer = Layer::default()
        .symlink("etc-link", outside.to_str().unwrap())
        .dir("usr/")
        .dir("usr/bin/")
        .symlink("bin", "usr/bin")
        .done();
    apply(&root, &layer[..], "layer 1").unwrap();
    assert_eq!(std::fs::read_link(root.join("etc-link")).unwrap(), outside);
    // A later layer replacing the link replaces the link, not its target.
    let replace = Layer::default().file("etc-link", "now a file").done();
    apply(&root, &replace[..], "layer 2").unwrap();
    assert_eq!(read(&root.join("etc-link")), "now a file");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}
