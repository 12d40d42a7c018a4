//! OCI image layouts built in code for the container tests: no registry, no
//! network. The image's userland is Debian's static busybox.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use oci_spec::image::{
    Arch, ConfigBuilder, DescriptorBuilder, Digest, ImageConfigurationBuilder, ImageIndexBuilder,
    ImageManifestBuilder, MediaType, OciLayoutBuilder, Os, RootFsBuilder,
};
use sha2::{Digest as _, Sha256};

/// Where the static busybox comes from (Debian package `busybox-static`).
pub const BUSYBOX: &str = "/bin/busybox";
/// The busybox applets the image links, enough for the container's pid 1, the
/// probe and the tests.
const APPLETS: [&str; 14] = [
    "sh", "sleep", "cat", "ls", "test", "stat", "touch", "id", "true", "false", "echo", "env",
    "grep", "wc",
];
/// What `/opt/image-release` holds in the image.
pub const RELEASE: &str = "agent-workspace test image 1\n";
/// The image configuration's `Env`.
pub const IMAGE_ENV: [&str; 3] = [
    "PATH=/opt/tool/bin:/bin",
    "TOOL_HOME=/opt/tool",
    "SHARED=from the image",
];
/// The image configuration's `WorkingDir`.
pub const IMAGE_WORKING_DIR: &str = "/opt";

/// An image layout on disk: two layers (the second with a whiteout and an
/// opaque directory), a config, a manifest and an index.
pub struct OciImage {
    /// The layout directory.
    pub dir: PathBuf,
    /// The manifest's sha256 (hex).
    pub manifest: String,
    /// The layers' blob files, lowest first.
    pub layers: Vec<PathBuf>,
}

impl OciImage {
    /// Builds the test image under `parent/image`.
    pub fn build(parent: &Path) -> Self {
        let busybox = std::fs::read(BUSYBOX).unwrap_or_else(|e| {
            panic!("{BUSYBOX}: {e} (the image tests need Debian's busybox-static: apt-get install busybox-static)")
        });
        let dir = parent.join("image");
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();

        let mut lower = tar::Builder::new(Vec::new());
        add_dir(&mut lower, "bin");
        add_file(&mut lower, "bin/busybox", &busybox, 0o755);
        for applet in APPLETS {
            add_link(&mut lower, &format!("bin/{applet}"), "busybox");
        }
        add_file(&mut lower, "bin/suid", b"#!/bin/sh\n", 0o4755);
        add_dir(&mut lower, "opt");
        add_file(&mut lower, "opt/image-release", RELEASE.as_bytes(), 0o644);
        add_dir(&mut lower, "opt/tool");
        add_file(
            &mut lower,
            "opt/tool/removed.txt",
            b"whited out above\n",
            0o644,
        );
        add_dir(&mut lower, "opt/stale");
        add_file(
            &mut lower,
            "opt/stale/a.txt",
            b"hidden by the opaque directory\n",
            0o644,
        );
        let lower_tar = lower.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&lower_tar).unwrap();
        let lower_blob = gz.finish().unwrap();

        let mut upper = tar::Builder::new(Vec::new());
        add_file(&mut upper, "opt/tool/.wh.removed.txt", b"", 0o644);
        add_file(
            &mut upper,
            "opt/stale/b.txt",
            b"from the upper layer\n",
            0o644,
        );
        add_file(&mut upper, "opt/stale/.wh..wh..opq", b"", 0o644);
        add_file(&mut upper, "opt/added.txt", b"added above\n", 0o644);
        let upper_blob = upper.into_inner().unwrap();

        let layers = [
            (
                MediaType::ImageLayerGzip,
                write_blob(&dir, &lower_blob),
                sha256(&lower_tar),
            ),
            (
                MediaType::ImageLayer,
                write_blob(&dir, &upper_blob),
                sha256(&upper_blob),
            ),
        ];
        let config = ImageConfigurationBuilder::default()
            .architecture(Arch::Amd64)
            .os(Os::Linux)
            .config(
                ConfigBuilder::default()
                    .env(IMAGE_ENV.map(String::from).to_vec())
                    .working_dir(IMAGE_WORKING_DIR)
                    .build()
                    .unwrap(),
            )
            .rootfs(
                RootFsBuilder::default()
                    .typ("layers")
                    .diff_ids(
                        layers
                            .iter()
                            .map(|(_, _, diff)| format!("sha256:{diff}"))
                            .collect::<Vec<_>>(),
                    )
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap();
        let config_bytes = config.to_string().unwrap().into_bytes();
        let config_blob = write_blob(&dir, &config_bytes);
        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(descriptor(MediaType::ImageConfig, &config_blob))
            .layers(
                layers
                    .iter()
                    .map(|(media, blob, _)| descriptor(media.clone(), blob))
                    .collect::<Vec<_>>(),
            )
            .build()
            .unwrap();
        let manifest_bytes = manifest.to_string().unwrap().into_bytes();
        let manifest_blob = write_blob(&dir, &manifest_bytes);
        let index = ImageIndexBuilder::default()
            .schema_version(2u32)
            .manifests(vec![descriptor(MediaType::ImageManifest, &manifest_blob)])
            .build()
            .unwrap();
        std::fs::write(dir.join("index.json"), index.to_string().unwrap()).unwrap();
        let layout = OciLayoutBuilder::default()
            .image_layout_version("1.0.0")
            .build()
            .unwrap();
        std::fs::write(
            dir.join("oci-layout"),
            serde_json::to_string(&layout).unwrap(),
        )
        .unwrap();
        Self {
            manifest: manifest_blob.hex.clone(),
            layers: layers
                .iter()
                .map(|(_, blob, _)| blob.path.clone())
                .collect(),
            dir,
        }
    }

    /// `oci-layout:DIR@sha256:MANIFEST`.
    pub fn reference(&self) -> String {
        format!("oci-layout:{}@sha256:{}", self.dir.display(), self.manifest)
    }
}

struct Blob {
    hex: String,
    size: u64,
    path: PathBuf,
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn write_blob(dir: &Path, bytes: &[u8]) -> Blob {
    let hex = sha256(bytes);
    let path = dir.join("blobs/sha256").join(&hex);
    std::fs::write(&path, bytes).unwrap();
    Blob {
        hex,
        size: bytes.len() as u64,
        path,
    }
}

fn descriptor(media_type: MediaType, blob: &Blob) -> oci_spec::image::Descriptor {
    DescriptorBuilder::default()
        .media_type(media_type)
        .digest(Digest::from_str(&format!("sha256:{}", blob.hex)).unwrap())
        .size(blob.size)
        .build()
        .unwrap()
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    header
}

fn add_dir(builder: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut header = header(tar::EntryType::Directory, 0o755, 0);
    builder
        .append_data(&mut header, format!("{path}/"), std::io::empty())
        .unwrap();
}

fn add_file(builder: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32) {
    let mut header = header(tar::EntryType::Regular, mode, data.len() as u64);
    builder.append_data(&mut header, path, data).unwrap();
}

fn add_link(builder: &mut tar::Builder<Vec<u8>>, path: &str, to: &str) {
    let mut header = header(tar::EntryType::Symlink, 0o777, 0);
    builder.append_link(&mut header, path, to).unwrap();
}
