//! Opening repositories on the host without running anything they configure.
//!
//! A workspace's `.git` is agent-writable: its config, attributes and hooks can name
//! filter drivers, fsmonitor programs, hooks paths or external diff commands. Host-side
//! steps therefore never open a workspace's repository to read content; they read the
//! base commit from the *source* repository, opened in isolation (no environment
//! variables, no system or global configuration), and walk the workspace's files as
//! plain data. gix runs no hooks and, unless asked, no filters.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// How many source repositories stay open (the oldest goes first): one per
/// repository a long-lived runner serves.
const KEPT: usize = 16;

/// Source repositories opened before, by path and the identity of their
/// configuration file.
static OPENED: Mutex<Vec<(Key, gix::ThreadSafeRepository)>> = Mutex::new(Vec::new());

/// A repository as opened: its path, and the identity (inode, size, times)
/// of what gix reads once and keeps: its configuration, index and packed
/// references (git replaces each through a lock file and a rename: a new
/// inode) and its pack directory (sized for the packs there at open). A
/// repository made again at the path, or any of these changed, is opened
/// again.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    path: PathBuf,
    files: Vec<Option<Identity>>,
}

/// Device, inode, size, modification and change times.
type Identity = (u64, u64, u64, i64, i64, i64, i64);

/// Opens the source repository at `path` in isolation: only its own configuration
/// is read, no `GIT_*` variable, no system or user configuration, no includes.
///
/// A run opens its source several times (checkout, export, promotion): the
/// repository is opened once per process and handed out again while what
/// gix keeps of it is unchanged (its configuration, index, packed references
/// and pack directory are the same files; loose references and objects are
/// read from disk at each use).
///
/// # Ambient authority
/// `path` is a host path, used as given.
pub fn open_source(path: &Path) -> gix::Result<gix::Repository> {
    let Some(key) = key(path) else {
        return gix::open_opts(path, gix::open::Options::isolated());
    };
    let kept = OPENED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, repo)| repo.to_thread_local());
    if let Some(repo) = kept {
        return Ok(repo);
    }
    let opened = gix::ThreadSafeRepository::open_opts(path, gix::open::Options::isolated())?;
    let repo = opened.to_thread_local();
    let mut kept = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
    kept.retain(|(k, _)| k.path != key.path);
    if kept.len() == KEPT {
        kept.remove(0);
    }
    kept.push((key, opened));
    Ok(repo)
}

/// What `path`'s repository is known by (see [`Key`]); `None` without a
/// configuration file of its own (`.git/config` of a work tree, `config` of
/// a bare repository; a `.git` file naming a directory elsewhere is not
/// kept).
fn key(path: &Path) -> Option<Key> {
    use std::os::unix::fs::MetadataExt;
    let dot_git = path.join(".git");
    let git_dir = match std::fs::symlink_metadata(&dot_git) {
        Ok(meta) if meta.is_dir() => dot_git,
        Ok(_) => return None,
        Err(_) => path.to_path_buf(),
    };
    let identity = |file: &Path| {
        std::fs::symlink_metadata(file).ok().map(|meta| {
            (
                meta.dev(),
                meta.ino(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec(),
            )
        })
    };
    let config = git_dir.join("config");
    if !std::fs::symlink_metadata(&config).is_ok_and(|meta| meta.is_file()) {
        return None;
    }
    Some(Key {
        path: path.to_path_buf(),
        files: [
            config,
            git_dir.join("index"),
            git_dir.join("packed-refs"),
            git_dir.join("objects").join("pack"),
        ]
        .iter()
        .map(|file| identity(file))
        .collect(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::source::tests::fixture::git;

    fn head(path: &Path) -> String {
        open_source(path)
            .unwrap()
            .head_id()
            .unwrap()
            .detach()
            .to_string()
    }

    /// A repository opened again sees what was committed since, and one made
    /// again at the same path is not the one opened before.
    #[test]
    fn a_kept_repository_sees_new_commits_and_a_new_repository_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repo");
        let commit = |message: &str| {
            std::fs::write(path.join("file"), message).unwrap();
            git(&path, &["add", "file"]);
            git(&path, &["commit", "-q", "-m", message]);
            git(&path, &["rev-parse", "HEAD"]).trim().to_owned()
        };
        std::fs::create_dir(&path).unwrap();
        git(&path, &["init", "-q"]);
        let first = commit("first");
        assert_eq!(head(&path), first);
        let second = commit("second");
        assert_eq!(head(&path), second, "a commit made after the first open");
        let repo = open_source(&path).unwrap();
        let id = gix::ObjectId::from_hex(second.as_bytes()).unwrap();
        assert!(repo.find_object(id).is_ok());
        git(&path, &["config", "aw.kept", "changed"]);
        let config = open_source(&path)
            .unwrap()
            .config_snapshot()
            .string("aw.kept");
        assert_eq!(
            config.map(|v| v.to_string()).as_deref(),
            Some("changed"),
            "a configuration changed after the first open"
        );
        git(&path, &["pack-refs", "--all"]);
        git(&path, &["gc", "-q"]);
        assert_eq!(head(&path), second, "references packed, objects repacked");

        std::fs::remove_dir_all(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        git(&path, &["init", "-q"]);
        let other = commit("another repository");
        assert_ne!(other, second);
        assert_eq!(head(&path), other, "a repository made again at the path");
        let id = gix::ObjectId::from_hex(second.as_bytes()).unwrap();
        assert!(
            open_source(&path).unwrap().find_object(id).is_err(),
            "an object of the removed repository"
        );
    }
}
