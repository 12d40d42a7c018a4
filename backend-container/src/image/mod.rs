//! Pinned OCI images: `environment.runtime.image = "oci-layout:PATH@sha256:DIGEST"`.
//!
//! [`ImageStore::unpacked`] opens the image layout at `PATH`, reads the
//! manifest `DIGEST` and checks it hashes to that digest, then the
//! configuration and every layer against the digests and sizes the manifest
//! gives (before a byte of a layer is unpacked), and applies the layers in
//! order, whiteouts included, to a staging directory (`unpack.rs` says how no
//! entry reaches out of it). The result is renamed into a cache directory per
//! manifest digest, owner-only, so each image is unpacked once per host and
//! every later run reuses it; a run binds its directories read-only as its
//! base system instead of the host's. The cache is content-addressed: an
//! image found there is used as is, without reading the layout again, since
//! its digest names exactly the content verified when it was unpacked
//! ([`UnpackedImage::reused`]).
//! A layout changed or removed since does not change what the digest runs.
//!
//! Understood: image manifests (not indexes: the digest pins one platform),
//! layers as tar or gzip-compressed tar (OCI and Docker media types). Refused,
//! naming the blob: zstd layers, foreign media types, other digest algorithms.

mod blobs;
mod error;
mod unpack;

#[cfg(test)]
mod tests;

use std::fs;
use std::io::{BufReader, Read};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, ImageConfiguration, ImageManifest, MediaType};
use serde::{Deserialize, Serialize};
use workspace_core::contract::ImageReference;

pub use error::ImageError;

use blobs::Layout;

/// The record written beside an unpacked root, and into the evidence.
pub const RECORD_FILE: &str = "image.json";
/// The unpacked root filesystem's directory name.
pub const ROOTFS_DIR: &str = "rootfs";
/// The cache's format: the directory its entries are under.
const CACHE_FORMAT: &str = "v2";

/// What an unpacked image is: where its root is and what it was made from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// The reference it was unpacked for.
    pub reference: String,
    /// The manifest's digest (`sha256:...`).
    pub manifest: String,
    /// The configuration's digest.
    pub config: String,
    /// The platform the configuration names (`linux/amd64`).
    pub platform: String,
    /// The layers, lowest first.
    pub layers: Vec<LayerRecord>,
    /// Device nodes and FIFOs the layers held, not unpacked.
    pub skipped_devices: u64,
    /// The configuration's `Env` (`NAME=value`): every process of a run
    /// starts with it, under the contract's own variables.
    pub env: Vec<String>,
    /// The configuration's `WorkingDir`, recorded only: a run's commands
    /// start in its checkout.
    pub working_dir: Option<String>,
}

/// An image's `Env` entries as pairs (an entry without `=` is a name with an
/// empty value, as runtimes read it).
pub fn env_pairs(env: &[String]) -> impl Iterator<Item = (&str, &str)> {
    env.iter()
        .map(|entry| entry.split_once('=').unwrap_or((entry.as_str(), "")))
}

/// One layer of an [`ImageRecord`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    /// Its digest (`sha256:...`), checked.
    pub digest: String,
    /// Its media type.
    pub media_type: String,
    /// Its size in bytes, checked.
    pub size: u64,
}

/// An image ready to run on: its root filesystem and its record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpackedImage {
    /// The unpacked root filesystem (read only through read-only binds).
    pub rootfs: PathBuf,
    /// What it is.
    pub record: ImageRecord,
    /// Whether an earlier run had unpacked it (this one reused the cache).
    pub reused: bool,
}

/// The host's cache of unpacked images: `<dir>/v2/sha256/<manifest hex>/`,
/// each holding `rootfs/` and `image.json`, the directory owner-only. (`v2`:
/// a record also holds the configuration's `Env`; entries of the first format
/// are not read.)
#[derive(Clone, Debug)]
pub struct ImageStore {
    dir: PathBuf,
}

impl ImageStore {
    /// The cache at `dir` (made when first needed).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory holding one entry per manifest digest.
    pub fn entries(&self) -> PathBuf {
        self.dir.join(CACHE_FORMAT).join("sha256")
    }

    /// The image `reference` unpacked: from the cache when an earlier run
    /// unpacked it, else verified and unpacked now (see the [module docs](self)).
    ///
    /// # Ambient authority
    /// Reads the image layout and writes the cache directory.
    pub fn unpacked(&self, reference: &ImageReference) -> Result<UnpackedImage, ImageError> {
        let hex = &reference.manifest_sha256;
        let done = self.entries().join(hex);
        if let Some(record) = read_record(&done)? {
            return Ok(UnpackedImage {
                rootfs: done.join(ROOTFS_DIR),
                record,
                reused: true,
            });
        }
        let layout = Layout::open(&reference.layout)?;
        let staging = self.staging(hex)?;
        let made = unpack_into(&layout, reference, &staging);
        let record = match made {
            Ok(record) => record,
            Err(e) => {
                let _ = fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        // Another run may have unpacked the same image meanwhile: its copy wins.
        if let Err(e) = fs::rename(&staging, &done) {
            let _ = fs::remove_dir_all(&staging);
            return match read_record(&done)? {
                Some(record) => Ok(UnpackedImage {
                    rootfs: done.join(ROOTFS_DIR),
                    record,
                    reused: true,
                }),
                None => Err(ImageError::Io {
                    step: "moving an unpacked image into the cache",
                    path: done,
                    source: e,
                }),
            };
        }
        tracing::info!(image = %reference, layers = record.layers.len(), "image unpacked");
        Ok(UnpackedImage {
            rootfs: done.join(ROOTFS_DIR),
            record,
            reused: false,
        })
    }

    /// A fresh staging directory beside the cache's entries.
    fn staging(&self, hex: &str) -> Result<PathBuf, ImageError> {
        let parent = self.entries();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&parent)
            .map_err(ImageError::io("making the image cache", &parent))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let staging = parent.join(format!(".{hex}.{}.{nanos}", std::process::id()));
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&staging)
            .map_err(ImageError::io(
                "making an image's staging directory",
                &staging,
            ))?;
        Ok(staging)
    }
}

/// Verifies the image and unpacks its layers into `staging/rootfs`; writes the
/// record there last.
fn unpack_into(
    layout: &Layout,
    reference: &ImageReference,
    staging: &Path,
) -> Result<ImageRecord, ImageError> {
    let manifest_digest = format!("sha256:{}", reference.manifest_sha256)
        .parse()
        .map_err(|_| ImageError::Reference {
            reason: format!("{} has no valid digest", reference),
        })?;
    let bytes = layout.document("the manifest", &manifest_digest, None)?;
    let manifest = parse_manifest(&bytes)?;
    let config_descriptor = manifest.config();
    let config_bytes = layout.document(
        "the config",
        config_descriptor.digest(),
        Some(config_descriptor.size()),
    )?;
    let config = ImageConfiguration::from_reader(&config_bytes[..]).map_err(|source| {
        ImageError::Document {
            blob: "the config".into(),
            what: "image configuration",
            source,
        }
    })?;
    if config.os().to_string() != "linux" {
        return Err(ImageError::Unsupported {
            blob: "the config".into(),
            what: format!("an image for {}", config.os()),
        });
    }
    // Every layer is checked before any is unpacked: a bad one fails the image
    // before anything of it is on disk.
    let mut checked = Vec::new();
    for (index, descriptor) in manifest.layers().iter().enumerate() {
        let name = layer_name(index, descriptor);
        let compression = Compression::of(descriptor.media_type(), &name)?;
        let file = layout.verified(&name, descriptor.digest(), Some(descriptor.size()))?;
        checked.push((name, compression, file, descriptor));
    }
    let rootfs = staging.join(ROOTFS_DIR);
    fs::DirBuilder::new()
        .mode(0o755)
        .create(&rootfs)
        .map_err(ImageError::io("making an image's root", &rootfs))?;
    let mut skipped_devices = 0;
    let mut layers = Vec::new();
    for (name, compression, file, descriptor) in checked {
        let reader = BufReader::with_capacity(256 * 1024, file);
        skipped_devices += match compression {
            Compression::None => unpack::apply(&rootfs, reader, &name)?,
            Compression::Gzip => {
                unpack::apply(&rootfs, flate2::read::MultiGzDecoder::new(reader), &name)?
            }
        };
        layers.push(LayerRecord {
            digest: descriptor.digest().to_string(),
            media_type: descriptor.media_type().to_string(),
            size: descriptor.size(),
        });
    }
    let record = ImageRecord {
        reference: reference.to_string(),
        manifest: manifest_digest.to_string(),
        config: config_descriptor.digest().to_string(),
        platform: format!("{}/{}", config.os(), config.architecture()),
        layers,
        skipped_devices,
        env: config
            .config()
            .as_ref()
            .and_then(|c| c.env().clone())
            .unwrap_or_default(),
        working_dir: config
            .config()
            .as_ref()
            .and_then(|c| c.working_dir().clone())
            .filter(|dir| !dir.is_empty()),
    };
    let path = staging.join(RECORD_FILE);
    let json = serde_json::to_vec_pretty(&record).map_err(|e| ImageError::Io {
        step: "writing an image's record",
        path: path.clone(),
        source: e.into(),
    })?;
    fs::write(&path, json).map_err(ImageError::io("writing an image's record", &path))?;
    Ok(record)
}

/// The manifest, refusing an index (which would leave the platform to choose).
fn parse_manifest(bytes: &[u8]) -> Result<ImageManifest, ImageError> {
    #[derive(Deserialize)]
    struct Kind {
        #[serde(rename = "mediaType")]
        media_type: Option<String>,
    }
    let kind: Option<Kind> = serde_json::from_slice(bytes).ok();
    if kind
        .and_then(|k| k.media_type)
        .is_some_and(|t| t == MediaType::ImageIndex.to_string())
    {
        return Err(ImageError::Unsupported {
            blob: "the manifest".into(),
            what: "an image index (pin the digest of one platform's manifest)".into(),
        });
    }
    ImageManifest::from_reader(bytes).map_err(|source| ImageError::Document {
        blob: "the manifest".into(),
        what: "image manifest",
        source,
    })
}

/// `layer N (sha256:...)`, 1-based, lowest first.
fn layer_name(index: usize, descriptor: &Descriptor) -> String {
    format!("layer {} ({})", index + 1, descriptor.digest())
}

/// How a layer's tar stream is compressed.
#[derive(Clone, Copy, Debug)]
enum Compression {
    None,
    Gzip,
}

impl Compression {
    fn of(media_type: &MediaType, layer: &str) -> Result<Self, ImageError> {
        match media_type {
            MediaType::ImageLayer | MediaType::ImageLayerNonDistributable => Ok(Self::None),
            MediaType::ImageLayerGzip | MediaType::ImageLayerNonDistributableGzip => Ok(Self::Gzip),
            MediaType::Other(docker)
                if docker == "application/vnd.docker.image.rootfs.diff.tar.gzip" =>
            {
                Ok(Self::Gzip)
            }
            other => Err(ImageError::Unsupported {
                blob: layer.to_owned(),
                what: format!("the media type {other}"),
            }),
        }
    }
}

/// The record of a finished cache entry, `None` when there is none.
fn read_record(done: &Path) -> Result<Option<ImageRecord>, ImageError> {
    let path = done.join(RECORD_FILE);
    let mut text = String::new();
    match fs::File::open(&path) {
        Ok(mut file) => file
            .read_to_string(&mut text)
            .map_err(ImageError::io("reading an image's record", &path))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ImageError::Io {
                step: "reading an image's record",
                path,
                source,
            });
        }
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ImageError::Io {
            step: "reading an image's record",
            path,
            source: e.into(),
        })
}
