//! Escape tests: one per attack in the module's catalogue, each with a positive
//! control and a negative case that checks the typed refusal and that the
//! sentinel outside the workspace is unchanged.

mod controls;
mod links;
mod rules;
mod traversal;

use std::fmt::Debug;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tempfile::TempDir;
use workspace_core::contract::FilesystemSection;

use super::{GrantError, GrantOptions, PathGrants, Refusal};

pub(super) type TestResult = Result<(), Box<dyn std::error::Error>>;

pub(super) const SECRET: &[u8] = b"TOP SECRET: outside the workspace\n";
pub(super) const LIB: &[u8] = b"pub fn lib() {}\n";

/// A fresh `outside/secret.txt` sentinel beside a `ws/` workspace.
pub(super) struct Fixture {
    _tmp: TempDir,
    pub(super) ws: PathBuf,
    pub(super) outside: PathBuf,
    pub(super) sentinel: PathBuf,
    before: Snapshot,
    pub(super) grants: PathGrants,
}

#[derive(Debug, PartialEq)]
struct Snapshot {
    entries: Vec<String>,
    bytes: Vec<u8>,
    mtime: SystemTime,
}

fn snapshot(outside: &Path, sentinel: &Path) -> std::io::Result<Snapshot> {
    let mut entries = fs::read_dir(outside)?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<Vec<_>, _>>()?;
    entries.sort();
    Ok(Snapshot {
        entries,
        bytes: fs::read(sentinel)?,
        mtime: fs::symlink_metadata(sentinel)?.modified()?,
    })
}

/// The section every fixture uses: the whole workspace writable, `vendor`
/// read-only, `out` an output, `secrets` and `*.pem` excluded.
pub(super) fn section() -> FilesystemSection {
    FilesystemSection {
        writable: vec![".".into()],
        read_only: vec!["vendor".into()],
        outputs: vec!["out".into()],
        excluded: vec!["secrets".into(), "**/*.pem".into()],
        ..FilesystemSection::default()
    }
}

impl Fixture {
    pub(super) fn new() -> Result<Self, Box<dyn std::error::Error>> {
        Self::with_section(section())
    }

    pub(super) fn with_section(
        section: FilesystemSection,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let tmp = TempDir::new()?;
        let outside = tmp.path().join("outside");
        let sentinel = outside.join("secret.txt");
        fs::create_dir(&outside)?;
        fs::write(&sentinel, SECRET)?;
        let ws = tmp.path().join("ws");
        for dir in ["src", "vendor", "secrets", ".git/hooks", "sub", "out"] {
            fs::create_dir_all(ws.join(dir))?;
        }
        for (file, contents) in [
            ("src/lib.rs", LIB),
            ("src/main.rs", b"fn main() {}\n".as_slice()),
            ("vendor/dep.rs", b"// vendored\n"),
            ("secrets/key.txt", b"key\n"),
            (".git/config", b"[core]\n"),
            (".git/HEAD", b"ref: refs/heads/main\n"),
            (".git/hooks/pre-commit", b"#!/bin/sh\n"),
            (".env", b"TOKEN=1\n"),
            ("sub/.env.local", b"TOKEN=2\n"),
            ("sub/readme.md", b"# sub\n"),
            ("sub/cert.pem", b"-----BEGIN\n"),
        ] {
            fs::write(ws.join(file), contents)?;
        }
        let before = snapshot(&outside, &sentinel)?;
        let grants = PathGrants::new_opts(&ws, &section, GrantOptions::default())?;
        Ok(Self {
            _tmp: tmp,
            ws,
            outside,
            sentinel,
            before,
            grants,
        })
    }

    /// Plants a symlink in the workspace as an agent would, with std.
    pub(super) fn plant_symlink(&self, target: impl AsRef<Path>, link: &str) -> TestResult {
        std::os::unix::fs::symlink(target, self.ws.join(link))?;
        Ok(())
    }

    /// The sentinel's bytes and mtime, and the outside directory's entries, are as
    /// the fixture left them.
    #[track_caller]
    pub(super) fn assert_outside_unchanged(&self) {
        match snapshot(&self.outside, &self.sentinel) {
            Ok(now) => assert_eq!(now, self.before, "the outside directory changed"),
            Err(err) => panic!("the sentinel is gone: {err}"),
        }
    }

    /// Whether anything (even a dangling symlink) exists at `rel` in the workspace.
    pub(super) fn exists(&self, rel: &str) -> bool {
        fs::symlink_metadata(self.ws.join(rel)).is_ok()
    }
}

/// The refusal reason, or a panic naming what happened instead.
#[track_caller]
pub(super) fn refused<T: Debug>(result: Result<T, GrantError>) -> Refusal {
    match result {
        Err(GrantError::Refused { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}
