//! The content-addressed cache of read-only base trees, shared by every run of a
//! commit.
//!
//! Layout under the cache root:
//!
//! ```text
//! trees/<tree-id>/        the checked-out files of one tree (never written after publication)
//! trees/<tree-id>.lock    its lock file: shared while a run uses the tree, exclusive
//!                         while it is populated or evicted; its mtime is the last use
//! trees/<tree-id>.json    its size, recorded when it was populated
//! staging/                trees being populated, published by an atomic rename
//! ```
//!
//! **Why file locks:** runs of one commit in several processes share one tree, and a
//! tree in use must never be evicted. A shared `flock` per run says "in use" in a way
//! the kernel releases when the run's process dies, so a crashed runner never pins a
//! tree forever. Lock files are never deleted: unlinking a lock file races with a
//! process that has just opened it and would then lock an orphaned inode.
//!
//! **Why a staging rename:** a half-populated tree must never be visible. Population
//! happens in `staging/` and is published with one `rename(2)`; a crash leaves only
//! staging debris, which the next population of that tree removes.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// How long an acquirer that found the tree neither published nor free to
/// populate waits before it looks again.
const CONTENDED_RETRY: std::time::Duration = std::time::Duration::from_millis(2);

/// Errors of the base-tree cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// A tree id is not a hex object id.
    #[error("base-tree cache: {tree:?} is not an object id")]
    InvalidTreeId {
        /// The rejected id.
        tree: String,
    },
    /// A file operation on the cache failed.
    #[error("base-tree cache: cannot {operation} {path}")]
    Io {
        /// What was being done.
        operation: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Populating a tree failed; nothing was published.
    #[error("base-tree cache: populating tree {tree} failed")]
    Populate {
        /// The tree.
        tree: String,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The tree kept disappearing between population and use (eviction racing).
    #[error("base-tree cache: tree {tree} was evicted while being acquired, three times")]
    Contended {
        /// The tree.
        tree: String,
    },
}

fn io_error<'a>(
    operation: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> CacheError + 'a {
    move |source| CacheError::Io {
        operation,
        path: path.to_path_buf(),
        source,
    }
}

/// What the cache records about a populated tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeMeta {
    /// Bytes of file content in the tree.
    pub bytes: u64,
    /// Number of files (including symlinks) in the tree.
    pub files: u64,
}

/// One cached tree, as listed by [`TreeCache::entries`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CacheEntry {
    /// The tree id.
    pub tree: String,
    /// Its recorded size.
    pub meta: TreeMeta,
    /// When a run last acquired it.
    pub last_used: SystemTime,
    /// Whether a run holds it now.
    pub in_use: bool,
}

/// What an eviction pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Eviction {
    /// Trees removed, least recently used first.
    pub removed: Vec<String>,
    /// Trees over the bound that were kept because a run holds them.
    pub kept_in_use: Vec<String>,
    /// Bytes cached after the pass.
    pub bytes_after: u64,
}

/// The cache of base trees, bounded in size with LRU eviction.
#[derive(Clone, Debug)]
pub struct TreeCache {
    root: PathBuf,
    max_bytes: u64,
}

/// A base tree held for one run: the directory stays until this value is dropped.
#[derive(Debug)]
pub struct BaseTree {
    tree: String,
    path: PathBuf,
    meta: TreeMeta,
    /// The shared lock that marks the tree in use; released on drop.
    _in_use: File,
}

impl BaseTree {
    /// The tree id.
    pub fn tree(&self) -> &str {
        &self.tree
    }
    /// The directory holding the tree's files (the overlay's lower layer).
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Its recorded size.
    pub fn meta(&self) -> &TreeMeta {
        &self.meta
    }
}

impl TreeCache {
    /// The cache at `root`, bounded to `max_bytes` of tree content. Its
    /// directories are made when the first tree is acquired: a runner that
    /// never provisions a layered checkout leaves nothing on the host.
    ///
    /// # Ambient authority
    /// `root` is a host path, used as given.
    pub fn open(root: impl Into<PathBuf>, max_bytes: u64) -> Result<Self, CacheError> {
        Ok(Self {
            root: root.into(),
            max_bytes,
        })
    }

    /// Makes the cache's directories, where they are not yet.
    fn make_dirs(&self) -> Result<(), CacheError> {
        for dir in [self.root.join("trees"), self.root.join("staging")] {
            fs::create_dir_all(&dir).map_err(io_error("create", &dir))?;
        }
        Ok(())
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Holds the base tree `tree` for a run, populating it first if it is not cached:
    /// `populate` receives an empty directory and must fill it with the tree's files.
    /// Concurrent acquirers of one tree populate it once.
    pub fn acquire<E>(
        &self,
        tree: &str,
        populate: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<BaseTree, CacheError>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        if tree.is_empty() || tree.len() > 64 || !tree.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CacheError::InvalidTreeId { tree: tree.into() });
        }
        self.make_dirs()?;
        let mut populate = Some(populate);
        // Rounds in which this acquirer held the tree alone and found it not
        // published even though it had populated it (evicted in between).
        let mut evicted = 0;
        loop {
            // Opened each round: an eviction removes the lock file.
            let lock = self.open_lock(tree)?;
            lock.lock_shared()
                .map_err(io_error("lock", &self.lock_path(tree)))?;
            if let Some(meta) = self.published_meta(tree)? {
                // Last use, for LRU; a failure here only affects eviction order.
                let _ = lock.set_modified(SystemTime::now());
                return Ok(BaseTree {
                    tree: tree.into(),
                    path: self.tree_path(tree),
                    meta,
                    _in_use: lock,
                });
            }
            lock.unlock()
                .map_err(io_error("unlock", &self.lock_path(tree)))?;
            // Never waits for the tree alone: a run that holds it (shared, for
            // its whole life; in this process or another) would keep that wait
            // going though the tree is published by then. One acquirer at a
            // time populates it; the others go back to the shared lock, which
            // waits while a population runs.
            match lock.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    std::thread::sleep(CONTENDED_RETRY);
                    continue;
                }
                Err(fs::TryLockError::Error(source)) => {
                    return Err(io_error("lock", &self.lock_path(tree))(source));
                }
            }
            if self.published_meta(tree)?.is_none() {
                match populate.take() {
                    Some(populate) => self.populate(tree, populate)?,
                    None => {
                        evicted += 1;
                        if evicted == 3 {
                            return Err(CacheError::Contended { tree: tree.into() });
                        }
                    }
                }
            }
            // Downgrade: another process may evict between unlock and lock_shared,
            // which the next round notices.
            lock.unlock()
                .map_err(io_error("unlock", &self.lock_path(tree)))?;
        }
    }

    /// Every cached tree with its size, last use and whether a run holds it.
    pub fn entries(&self) -> Result<Vec<CacheEntry>, CacheError> {
        let trees = self.root.join("trees");
        let mut entries = Vec::new();
        let listed = match fs::read_dir(&trees) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(entries),
            listed => listed.map_err(io_error("list", &trees))?,
        };
        for entry in listed {
            let entry = entry.map_err(io_error("list", &trees))?;
            let name = entry.file_name();
            let Some(tree) = name.to_str().and_then(|n| n.strip_suffix(".lock")) else {
                continue;
            };
            let Some(meta) = self.published_meta(tree)? else {
                continue;
            };
            let lock = self.open_lock(tree)?;
            let last_used = lock
                .metadata()
                .and_then(|m| m.modified())
                .map_err(io_error("stat", &self.lock_path(tree)))?;
            let in_use = match lock.try_lock() {
                Ok(()) => false,
                Err(fs::TryLockError::WouldBlock) => true,
                Err(fs::TryLockError::Error(source)) => {
                    return Err(io_error("lock", &self.lock_path(tree))(source));
                }
            };
            entries.push(CacheEntry {
                tree: tree.into(),
                meta,
                last_used,
                in_use,
            });
        }
        entries.sort_by(|a, b| a.last_used.cmp(&b.last_used).then(a.tree.cmp(&b.tree)));
        Ok(entries)
    }

    /// Removes least recently used trees until the cache is within its bound, never
    /// a tree a run holds.
    pub fn evict(&self) -> Result<Eviction, CacheError> {
        let entries = self.entries()?;
        let mut total: u64 = entries.iter().map(|e| e.meta.bytes).sum();
        let mut eviction = Eviction::default();
        for entry in entries {
            if total <= self.max_bytes {
                break;
            }
            let lock = self.open_lock(&entry.tree)?;
            match lock.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    eviction.kept_in_use.push(entry.tree);
                    continue;
                }
                Err(fs::TryLockError::Error(source)) => {
                    return Err(io_error("lock", &self.lock_path(&entry.tree))(source));
                }
            }
            // Unpublish first (the meta file says "present"), then remove the files.
            let meta_path = self.meta_path(&entry.tree);
            fs::remove_file(&meta_path).map_err(io_error("remove", &meta_path))?;
            let dir = self.tree_path(&entry.tree);
            // remove_dir_all does not follow symlinks found inside the tree.
            fs::remove_dir_all(&dir).map_err(io_error("remove", &dir))?;
            total = total.saturating_sub(entry.meta.bytes);
            tracing::info!(tree = %entry.tree, bytes = entry.meta.bytes, "evicted base tree");
            eviction.removed.push(entry.tree);
        }
        eviction.bytes_after = total;
        Ok(eviction)
    }

    /// Populates `tree` in staging and publishes it. Caller holds the exclusive lock.
    fn populate<E>(
        &self,
        tree: &str,
        populate: impl FnOnce(&Path) -> Result<(), E>,
    ) -> Result<(), CacheError>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let staging = self.root.join("staging").join(tree);
        if staging.exists() {
            // Debris of a crashed population of this tree (we hold its lock).
            fs::remove_dir_all(&staging).map_err(io_error("remove", &staging))?;
        }
        fs::create_dir(&staging).map_err(io_error("create", &staging))?;
        if let Err(source) = populate(&staging) {
            let _ = fs::remove_dir_all(&staging);
            return Err(CacheError::Populate {
                tree: tree.into(),
                source: Box::new(source),
            });
        }
        let meta = measure(&staging)?;
        let target = self.tree_path(tree);
        if target.exists() {
            // Files without a meta file: an eviction or population that crashed midway.
            fs::remove_dir_all(&target).map_err(io_error("remove", &target))?;
        }
        fs::rename(&staging, &target).map_err(io_error("publish", &target))?;
        let meta_path = self.meta_path(tree);
        let json = serde_json::to_vec(&meta)
            .map_err(|e| io_error("write", &meta_path)(io::Error::other(e)))?;
        fs::write(&meta_path, json).map_err(io_error("write", &meta_path))?;
        tracing::info!(
            tree,
            bytes = meta.bytes,
            files = meta.files,
            "populated base tree"
        );
        Ok(())
    }

    fn open_lock(&self, tree: &str) -> Result<File, CacheError> {
        let path = self.lock_path(tree);
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error("open", &path))
    }

    /// The meta of a published tree, or `None` when it is not (fully) published.
    fn published_meta(&self, tree: &str) -> Result<Option<TreeMeta>, CacheError> {
        let path = self.meta_path(tree);
        match fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice(&bytes) {
                Ok(meta) if self.tree_path(tree).is_dir() => Ok(Some(meta)),
                // A torn or orphaned meta file: treat the tree as absent.
                _ => Ok(None),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(io_error("read", &path)(source)),
        }
    }

    fn tree_path(&self, tree: &str) -> PathBuf {
        self.root.join("trees").join(tree)
    }
    fn lock_path(&self, tree: &str) -> PathBuf {
        self.root.join("trees").join(format!("{tree}.lock"))
    }
    fn meta_path(&self, tree: &str) -> PathBuf {
        self.root.join("trees").join(format!("{tree}.json"))
    }
}

/// Sums the file sizes under `dir` without following symlinks.
fn measure(dir: &Path) -> Result<TreeMeta, CacheError> {
    let mut meta = TreeMeta { bytes: 0, files: 0 };
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in fs::read_dir(&current).map_err(io_error("list", &current))? {
            let entry = entry.map_err(io_error("list", &current))?;
            let file_type = entry.file_type().map_err(io_error("stat", &entry.path()))?;
            if file_type.is_dir() {
                stack.push(entry.path());
            } else {
                let len = entry
                    .metadata()
                    .map_err(io_error("stat", &entry.path()))?
                    .len();
                meta.bytes += len;
                meta.files += 1;
            }
        }
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interleaving two runs of one tree once deadlocked on: an acquirer
    /// found the tree not yet published and went for the exclusive lock while
    /// the other published it and kept holding it (shared) for its run.
    #[test]
    fn an_acquirer_is_not_kept_waiting_by_a_run_holding_the_tree_it_published() {
        let dir = tempfile::tempdir().unwrap();
        let cache = TreeCache::open(dir.path(), 1 << 30).unwrap();
        cache.make_dirs().unwrap();
        let tree = "ab".repeat(20);
        // The other run, between its check and its population: it holds the
        // tree's lock shared.
        let holder = cache.open_lock(&tree).unwrap();
        holder.lock_shared().unwrap();
        let (done, acquired) = std::sync::mpsc::channel();
        let (waiter_cache, waiter_tree) = (cache.clone(), tree.clone());
        std::thread::spawn(move || {
            let base = waiter_cache.acquire(&waiter_tree, |_| -> Result<(), std::io::Error> {
                panic!("the tree was published already")
            });
            let _ = done.send(base.map(|b| b.path().to_path_buf()));
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        // It publishes the tree and goes on holding it.
        cache
            .populate(&tree, |files: &Path| std::fs::write(files.join("a"), "a"))
            .unwrap();
        let path = acquired
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the acquirer waited on a tree published and held by a run")
            .unwrap();
        assert_eq!(std::fs::read_to_string(path.join("a")).unwrap(), "a");
        drop(holder);
    }
}
