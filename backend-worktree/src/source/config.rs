//! The standalone workspace's own `.git`, written from scratch, and the remote URLs
//! recorded (credentials stripped) instead of being copied.
//!
//! Nothing of the source repository's configuration is carried over: no remotes, no
//! credential helpers, includes, hooks paths, filter drivers, fsmonitor,
//! `core.sshCommand`, textconv or external diff. The workspace reaches the source's
//! objects through `objects/info/alternates` only (the effect of `git clone --shared`).

use std::fs;
use std::path::{Path, PathBuf};

use gix::ObjectId;
use workspace_core::contract::Materialization;

use super::SourceError;

/// The complete configuration of a standalone workspace.
const WORKSPACE_CONFIG: &str = "[core]\n\
\trepositoryformatversion = 0\n\
\tfilemode = true\n\
\tbare = false\n\
\tlogallrefupdates = true\n";

/// Makes sure `dest` exists and is an empty directory (creating it and its parents).
pub(crate) fn prepare_destination(dest: &Path) -> Result<(), SourceError> {
    match fs::symlink_metadata(dest) {
        Ok(meta) if meta.is_dir() => {
            let mut entries =
                fs::read_dir(dest).map_err(|e| SourceError::io("read destination", dest, e))?;
            if entries.next().is_some() {
                return Err(SourceError::DestinationNotEmpty {
                    path: dest.to_owned(),
                });
            }
            Ok(())
        }
        Ok(_) => Err(SourceError::DestinationNotEmpty {
            path: dest.to_owned(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::create_dir_all(dest).map_err(|e| SourceError::io("create destination", dest, e))
        }
        Err(e) => Err(SourceError::io("inspect destination", dest, e)),
    }
}

/// The directories of a fresh `.git` besides `objects/info`: empty at first, yet
/// git only takes a directory with `refs` and `objects` for a repository.
pub(crate) const EMPTY_GIT_DIRS: [&str; 4] = ["objects/pack", "refs/heads", "refs/tags", "info"];

/// Writes `dest/.git`: a repository of its own (HEAD detached at `commit`, empty refs,
/// a config written from scratch) whose objects come from `source_objects` through
/// `objects/info/alternates`. Returns the `.git` path.
pub(crate) fn write_git_dir(
    dest: &Path,
    source_objects: &Path,
    commit: ObjectId,
) -> Result<PathBuf, SourceError> {
    create_empty_git_dirs(&dest.join(".git"))?;
    write_git_files(dest, source_objects, commit)
}

/// Creates [`EMPTY_GIT_DIRS`] in `git_dir` (those missing).
pub(crate) fn create_empty_git_dirs(git_dir: &Path) -> Result<(), SourceError> {
    for dir in EMPTY_GIT_DIRS {
        let path = git_dir.join(dir);
        fs::create_dir_all(&path).map_err(|e| SourceError::io("create .git directory", path, e))?;
    }
    Ok(())
}

/// The files of [`write_git_dir`] (`config`, `HEAD` and `objects/info/alternates`)
/// and the directories that hold them, without [`EMPTY_GIT_DIRS`]: for a `.git`
/// whose empty directories come from elsewhere (a layered checkout's lower layer).
/// Returns the `.git` path.
pub(crate) fn write_git_files(
    dest: &Path,
    source_objects: &Path,
    commit: ObjectId,
) -> Result<PathBuf, SourceError> {
    let objects = fs::canonicalize(source_objects)
        .map_err(|e| SourceError::io("resolve the source objects directory", source_objects, e))?;
    let objects_line = objects
        .to_str()
        .filter(|s| !s.contains('\n'))
        .ok_or_else(|| SourceError::PathEscape {
            path: objects.clone(),
            reason: "the source objects path cannot be written to an alternates file",
        })?;
    let git_dir = dest.join(".git");
    let info = git_dir.join("objects/info");
    fs::create_dir_all(&info).map_err(|e| SourceError::io("create .git directory", info, e))?;
    write_new(
        &git_dir.join("objects/info/alternates"),
        format!("{objects_line}\n").as_bytes(),
        "write .git/objects/info/alternates",
    )?;
    write_new(
        &git_dir.join("config"),
        WORKSPACE_CONFIG.as_bytes(),
        "write .git/config",
    )?;
    write_new(
        &git_dir.join("HEAD"),
        format!("{}\n", commit.to_hex()).as_bytes(),
        "write .git/HEAD",
    )?;
    Ok(git_dir)
}

/// Creates `path` exclusively (never through an existing file or symlink) with `data`.
pub(crate) fn write_new(
    path: &Path,
    data: &[u8],
    operation: &'static str,
) -> Result<(), SourceError> {
    use std::io::Write;
    let mut file = fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| SourceError::io(operation, path, e))?;
    file.write_all(data)
        .map_err(|e| SourceError::io(operation, path, e))
}

/// The `remote.*.url` and `remote.*.pushurl` values of `repo`'s own configuration,
/// in order, deduplicated, with credentials stripped.
pub fn remote_urls(repo: &gix::Repository) -> Vec<String> {
    let config = repo.config_snapshot();
    let mut urls: Vec<String> = Vec::new();
    if let Some(sections) = config.plumbing().sections_by_name("remote") {
        for section in sections {
            for key in ["url", "pushurl"] {
                for value in section.values(key) {
                    let url = strip_credentials(&value.to_string());
                    if !urls.contains(&url) {
                        urls.push(url);
                    }
                }
            }
        }
    }
    urls
}

/// Removes credentials from a URL: `https://user:pass@host/x` -> `https://host/x`.
///
/// * A `user:password@` part is always dropped, in a URL (`ssh://u:p@host/x`) as in
///   the scp-like form (`user:token@host:path` -> `host:path`).
/// * For http(s) and ftp(s) a bare `user@` is dropped too (it is commonly a token),
///   and so are the query string and the fragment (`?private_token=...`).
/// * An ssh user name (`ssh://git@host/x`, `git@host:x`) is kept: it is not a secret.
pub fn strip_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return strip_scp_credentials(url);
    };
    let token_scheme = matches!(
        scheme.to_ascii_lowercase().as_str(),
        "http" | "https" | "ftp" | "ftps"
    );
    let rest = if token_scheme {
        // Query strings and fragments carry tokens (`?private_token=`, `#access_token=`).
        rest.split(['?', '#']).next().unwrap_or_default()
    } else {
        rest
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') || token_scheme => {
            format!("{scheme}://{host}{path}")
        }
        _ => format!("{scheme}://{rest}"),
    }
}

/// The scp-like form `[user@]host:path` (and anything else without `://`): a user
/// part holding a `:` (`user:token@host:path`) is dropped. Only what comes before the
/// first `/` can be a user part, so a local path is never changed.
fn strip_scp_credentials(url: &str) -> String {
    let head_end = url.find('/').unwrap_or(url.len());
    match url[..head_end].rfind('@') {
        Some(at) if url[..at].contains(':') => url[at + 1..].to_owned(),
        _ => url.to_owned(),
    }
}

/// The object store a copy's `alternates` name: the source repository's own
/// (what [`write_git_files`] writes there), canonical; none for
/// a linked checkout, whose `.git` is the repository's.
pub(crate) fn objects_of(
    source: &gix::Repository,
    materialization: Materialization,
) -> Option<PathBuf> {
    if materialization == Materialization::Linked {
        return None;
    }
    let objects = source
        .current_dir()
        .join(source.common_dir())
        .join("objects");
    std::fs::canonicalize(objects).ok()
}

#[cfg(test)]
mod tests {
    use super::strip_credentials;

    #[test]
    fn source_strip_credentials_from_urls() {
        assert_eq!(
            strip_credentials("https://user:pass@host/x"),
            "https://host/x"
        );
        assert_eq!(
            strip_credentials("https://ghp_token@github.com/o/r.git"),
            "https://github.com/o/r.git"
        );
        assert_eq!(
            strip_credentials("ssh://git@host/x.git"),
            "ssh://git@host/x.git"
        );
        assert_eq!(
            strip_credentials("ssh://git:secret@host/x.git"),
            "ssh://host/x.git"
        );
        assert_eq!(strip_credentials("git@host:x.git"), "git@host:x.git");
        assert_eq!(strip_credentials("/srv/repo.git"), "/srv/repo.git");
        assert_eq!(
            strip_credentials("https://example.com/a@b"),
            "https://example.com/a@b"
        );
    }

    #[test]
    fn source_strip_credentials_drops_http_queries_and_fragments() {
        assert_eq!(
            strip_credentials("https://host/r.git?private_token=abc"),
            "https://host/r.git"
        );
        assert_eq!(
            strip_credentials("https://u:p@host/r.git?x=1#access_token=abc"),
            "https://host/r.git"
        );
        assert_eq!(strip_credentials("http://host?token=abc"), "http://host");
        assert_eq!(
            strip_credentials("HTTPS://host/r.git#token=abc"),
            "HTTPS://host/r.git"
        );
        for url in [
            "https://host/r.git?private_token=abc",
            "https://host/r.git#abc",
            "https://host?abc",
        ] {
            assert!(!strip_credentials(url).contains("abc"), "{url}");
        }
    }

    #[test]
    fn source_strip_credentials_from_scp_like_forms() {
        assert_eq!(
            strip_credentials("user:token@host:path/r.git"),
            "host:path/r.git"
        );
        assert_eq!(strip_credentials("user:token@host:r.git"), "host:r.git");
        assert_eq!(strip_credentials("git@host:x.git"), "git@host:x.git");
        assert_eq!(strip_credentials("host:x.git"), "host:x.git");
        assert_eq!(strip_credentials("/srv/a:b@c/r.git"), "/srv/a:b@c/r.git");
        assert_eq!(strip_credentials("./a:b@c"), "./a:b@c");
        assert!(!strip_credentials("user:s3cret@host:r.git").contains("s3cret"));
    }
}
