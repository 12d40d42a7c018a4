//! Host directories granted to a run through the CLI (`--ro`, `--rw-cache`):
//! inside the workspace, through a symbolic link, writable as a cache, and
//! attacked through a link the repository plants where the grant goes.
//!
//! Needs root, user namespaces and cgroups (as every namespace-backend test).
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use support::cli::{CliFixture, text};
use support::git;

/// The evidence directory the summary line (the last line on stderr) names.
fn evidence_of(out: &Output) -> PathBuf {
    let stderr = text(&out.stderr);
    let line = stderr.lines().last().expect("a summary line");
    let (_, dir) = line.rsplit_once("; evidence ").expect("evidence named");
    PathBuf::from(dir.split("; ").next().unwrap())
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn a_writable_cache_inside_the_workspace_is_kept_on_the_host_and_left_out_of_the_patch() {
    let fixture = CliFixture::new("rw-cache");
    let cache = fixture.path().join("node-cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("left-pad.js"), "module.exports = 1;\n").unwrap();
    let grant = format!("{}:/workspace/node_modules", cache.display());
    let script = "cat node_modules/left-pad.js && echo built > node_modules/built.js \
                  && ls -ln node_modules/built.js && echo change > app.js";
    let out = fixture.run(&["--rw-cache", &grant, "--", "sh", "-c", script]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("module.exports = 1;"), "{stdout}");
    // Inside, the cache is the run's own (uid 1000) ...
    assert!(stdout.contains(" 1000 1000 "), "{stdout}");
    // ... and on disk what the run wrote is the cache owner's, kept for the next run.
    let built = cache.join("built.js");
    assert_eq!(std::fs::read_to_string(&built).unwrap(), "built\n");
    let owner = std::fs::metadata(&cache).unwrap();
    let made = std::fs::metadata(&built).unwrap();
    assert_eq!((made.uid(), made.gid()), (owner.uid(), owner.gid()));
    // The patch holds the run's change, nothing of the cache nor its mount point.
    let evidence = evidence_of(&out);
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("b/app.js"), "{patch}");
    assert!(!patch.contains("node_modules"), "{patch}");
    let out = fixture.run(&["--rw-cache", &grant, "--", "cat", "node_modules/built.js"]);
    assert_eq!(text(&out.stdout), "built\n", "{}", text(&out.stderr));
    // Half a grant is bad input, named.
    let out = fixture.run(&["--rw-cache", "/tmp", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--rw-cache \"/tmp\": write it as HOST:TARGET"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_grant_through_a_symbolic_link_binds_what_it_named_and_records_both_paths() {
    let fixture = CliFixture::new("grant-link");
    let release = fixture.path().join("toolchain-1.2");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::write(release.join("VERSION"), "1.2\n").unwrap();
    let link = fixture.path().join("toolchain-current");
    std::os::unix::fs::symlink(&release, &link).unwrap();
    let grant = format!("{}:/opt/toolchain", link.display());
    let out = fixture.run(&["--ro", &grant, "--", "cat", "/opt/toolchain/VERSION"]);
    assert_eq!(text(&out.stdout), "1.2\n", "{}", text(&out.stderr));
    let observed = json(&evidence_of(&out).join("observed.json"));
    let mounts = &observed["probe"]["facts"]["host_mounts"];
    assert_eq!(mounts[0]["target"], "/opt/toolchain", "{observed}");
    assert_eq!(mounts[0]["host"], link.to_str().unwrap(), "{observed}");
    assert_eq!(
        mounts[0]["resolved"],
        release.to_str().unwrap(),
        "{observed}"
    );
    // The read-only grant refused a write, asked of the kernel at its target.
    assert_eq!(
        observed["probe"]["facts"]["writes"]["/opt/toolchain"], "refused",
        "{observed}"
    );

    // A grant of a path that is not there is bad input, said once, before
    // anything is created.
    let missing = format!("{}:/opt/missing", fixture.path().join("nothing").display());
    let out = fixture.run(&["--ro", &missing, "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.starts_with("agent-workspace: --ro "), "{stderr}");
}

#[test]
fn a_link_the_repository_plants_where_a_grant_goes_cannot_redirect_it() {
    let fixture = CliFixture::new("grant-planted-link");
    // The repository commits `node_modules` as a link to a directory of the
    // test's own outside the workspace, hoping the grant is mounted there.
    let victim = fixture.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep"), "untouched\n").unwrap();
    let repo = fixture.repo();
    std::os::unix::fs::symlink(&victim, repo.join("node_modules")).unwrap();
    git(&repo, &["add", "node_modules"]);
    git(&repo, &["commit", "-q", "-m", "plant a link"]);
    let cache = fixture.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let grant = format!("{}:/workspace/node_modules", cache.display());
    let out = fixture.run(&[
        "--rw-cache",
        &grant,
        "--",
        "sh",
        "-c",
        "echo owned > node_modules/keep",
    ]);
    // The seal refuses to mount through the link: the run fails before the command.
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(victim.join("keep")).unwrap(),
        "untouched\n"
    );
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0);
}

/// Every file under `dir` (links not followed) whose mode the host would honour
/// beyond its permissions: a set-id bit, or a device node.
fn honoured_modes(dir: &Path) -> Vec<String> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = std::fs::symlink_metadata(entry.path()).unwrap();
        let kind = meta.file_type();
        if meta.mode() & 0o6000 != 0 || kind.is_char_device() || kind.is_block_device() {
            found.push(format!("{} {:o}", entry.path().display(), meta.mode()));
        }
        if kind.is_dir() {
            found.extend(honoured_modes(&entry.path()));
        }
    }
    found
}

#[test]
fn a_workspace_cannot_leave_a_set_id_file_or_a_device_in_a_writable_cache() {
    // Root's cache: through the idmapped mount, what the run writes there is
    // root's on the host.
    set_id_attack_on_a_cache("rw-cache-setid", &[], 0);
}

#[test]
fn a_container_cannot_leave_a_set_id_file_or_a_device_in_a_writable_cache() {
    // The container writes a cache as its own host id (uid 1000 inside, at the
    // host id base 100000), which the cache must belong to.
    set_id_attack_on_a_cache(
        "rw-cache-setid-container",
        &["--backend", "container"],
        101_000,
    );
}

/// A runtime as one built with a libseccomp that does not know `syscall`
/// would run the container: the real runc, after the rules of the bundle's
/// seccomp profile that name `syscall` are left out (as runc and crun leave
/// out a rule whose syscall their libseccomp cannot resolve). Named `runc`,
/// in a directory of `fixture`'s.
fn runtime_without_rules_for(fixture: &CliFixture, syscall: &str) -> PathBuf {
    let runc = std::process::Command::new("sh")
        .args(["-c", "command -v runc"])
        .output()
        .unwrap();
    let runc = text(&runc.stdout).trim().to_owned();
    assert!(
        !runc.is_empty(),
        "these tests need runc: apt-get install runc"
    );
    let dir = fixture.path().join(format!("libseccomp-without-{syscall}"));
    std::fs::create_dir_all(&dir).unwrap();
    let wrapper = dir.join("runc");
    let script = format!(
        r#"#!/bin/sh
bundle=
prev=
for arg in "$@"; do
    [ "$prev" = --bundle ] && bundle=$arg
    prev=$arg
done
if [ -n "$bundle" ]; then
    python3 - "$bundle/config.json" <<'PY'
import json, sys
path = sys.argv[1]
spec = json.load(open(path))
seccomp = spec["linux"]["seccomp"]
seccomp["syscalls"] = [r for r in seccomp["syscalls"] if "{syscall}" not in r["names"]]
json.dump(spec, open(path, "w"))
PY
fi
exec {runc} "$@"
"#
    );
    std::fs::write(&wrapper, script).unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    wrapper
}

#[test]
fn a_runtime_whose_filter_lets_a_set_id_syscall_through_is_refused_at_the_seal() {
    let fixture = CliFixture::new("seccomp-not-kept");
    let cache = fixture.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(101_000), Some(101_000)).unwrap();
    let grant = format!("{}:/cache", cache.display());
    // The command would mark that it ran, then make a set-user-id file of the
    // host's cache through the raw syscall.
    let attack = r#"
import ctypes, os
open("/cache/ran", "w").close()
libc = ctypes.CDLL(None, use_errno=True)
os.close(os.open("/cache/p", os.O_CREAT | os.O_WRONLY, 0o644))
print("fchmodat2", libc.syscall(452, -100, b"/cache/p", 0o4755, 0), ctypes.get_errno())
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
print("openat2", libc.syscall(437, -100, b"/cache/q", ctypes.byref(how), 24), ctypes.get_errno())
"#;
    // The positive control: runc as installed refuses both; the run goes on,
    // and the seal recorded what the kernel answered its check.
    let out = fixture.run(&[
        "--backend",
        "container",
        "--rw-cache",
        &grant,
        "--",
        "python3",
        "-c",
        attack,
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("fchmodat2 -1 1\n"), "{stdout}");
    assert!(stdout.contains("openat2 -1 38\n"), "{stdout}");
    let observed = json(&evidence_of(&out).join("observed.json"));
    assert_eq!(
        observed["probe"]["facts"]["set_id_modes"],
        serde_json::json!({
            "fchmodat2_set_id": "EPERM (Operation not permitted)",
            "openat2": "ENOSYS (Function not implemented)",
        }),
        "{observed}"
    );
    assert_eq!(honoured_modes(&cache), Vec::<String>::new());
    for name in ["ran", "p"] {
        std::fs::remove_file(cache.join(name)).unwrap();
    }
    // Each rule left out: the seal fails naming the runtime and the syscall,
    // before the command runs; the cache is as it was.
    for syscall in ["fchmodat2", "openat2"] {
        let runtime = runtime_without_rules_for(&fixture, syscall);
        let out = fixture.run(&[
            "--backend",
            "container",
            "--runtime",
            runtime.to_str().unwrap(),
            "--rw-cache",
            &grant,
            "--",
            "python3",
            "-c",
            attack,
        ]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{syscall}: {stderr}");
        assert!(
            stderr.contains("runc (runc version")
                && stderr.contains(&format!(
                    "does not keep the container's seccomp profile: {syscall}"
                )),
            "{syscall}: {stderr}"
        );
        assert_eq!(text(&out.stdout), "", "{syscall}: the command ran");
        let left: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
        assert!(left.is_empty(), "{syscall}: {left:?}");
        // No container of the failed seal is left.
        let containers = fixture.runtime().join("containers");
        let listed = std::process::Command::new("runc")
            .arg("--root")
            .arg(&containers)
            .args(["list", "-q"])
            .output()
            .unwrap();
        assert_eq!(text(&listed.stdout), "", "{syscall}");
    }
}

/// Every way to make a set-id file or a device node in a writable cache, tried
/// by a run on `backend` (run's arguments), with the plain modes as positive
/// controls; then the cache (owned by `owner`) on the host.
fn set_id_attack_on_a_cache(name: &str, backend: &[&str], owner: u32) {
    let fixture = CliFixture::new(name);
    let cache = fixture.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(owner), Some(owner)).unwrap();
    let grant = format!("{}:/cache", cache.display());
    // Each attempt prints its name and whether it worked; the plain modes are the
    // positive controls (the run can write and chmod its cache).
    let script = r#"
try() { name=$1; shift; if "$@" 2>/dev/null; then echo "$name ok"; else echo "$name refused"; fi; }
cp /usr/bin/id /cache/idcopy
try chmod-4755 chmod 4755 /cache/idcopy
try chmod-2755 chmod 2755 /cache/idcopy
try chmod-u+s chmod u+s /cache/idcopy
try chmod-755 chmod 755 /cache/idcopy
mkdir /cache/dir
try chmod-dir-2777 chmod 2777 /cache/dir
try chmod-dir-1777 chmod 1777 /cache/dir
python3 - <<'PY'
import os, stat
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError:
        print(name, "refused")
attempt("open-creat-4755", lambda: os.close(os.open("/cache/o", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("open-creat-644", lambda: os.close(os.open("/cache/p", os.O_CREAT | os.O_WRONLY, 0o644)))
attempt("mknod-reg-4755", lambda: os.mknod("/cache/n", stat.S_IFREG | 0o4755))
attempt("mknod-chr", lambda: os.mknod("/cache/null", stat.S_IFCHR | 0o666, os.makedev(1, 3)))
attempt("mknod-blk", lambda: os.mknod("/cache/blk", stat.S_IFBLK | 0o660, os.makedev(7, 0)))
attempt("mknod-fifo", lambda: os.mknod("/cache/fifo", stat.S_IFIFO | 0o600))
attempt("fchmod-6755", lambda: os.chmod(os.open("/cache/p", os.O_RDONLY), 0o6755))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def raw(*args):
    if libc.syscall(*args) != 0:
        raise OSError(ctypes.get_errno(), "refused")
AT_FDCWD = -100
attempt("fchmodat2-4755", lambda: raw(452, AT_FDCWD, b"/cache/p", 0o4755, 0))
attempt("fchmodat2-700", lambda: raw(452, AT_FDCWD, b"/cache/p", 0o700, 0))
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
def openat2():
    fd = libc.syscall(437, AT_FDCWD, b"/cache/q", ctypes.byref(how), 24)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "refused")
attempt("openat2-4755", openat2)
cap = bytes([0, 0, 0, 2]) + bytes(16)
attempt("setcap", lambda: os.setxattr("/cache/idcopy", "security.capability", cap))
PY
"#;
    let mut args = backend.to_vec();
    args.extend(["--rw-cache", &grant, "--", "sh", "-c", script]);
    let out = fixture.run(&args);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    for (attempt, answer) in [
        ("chmod-4755", "refused"),
        ("chmod-2755", "refused"),
        ("chmod-u+s", "refused"),
        ("chmod-755", "ok"),
        ("chmod-dir-2777", "refused"),
        ("chmod-dir-1777", "ok"),
        ("open-creat-4755", "refused"),
        ("open-creat-644", "ok"),
        ("mknod-reg-4755", "refused"),
        ("mknod-chr", "refused"),
        ("mknod-blk", "refused"),
        ("mknod-fifo", "ok"),
        ("fchmod-6755", "refused"),
        ("fchmodat2-4755", "refused"),
        ("fchmodat2-700", "ok"),
        ("openat2-4755", "refused"),
        ("setcap", "refused"),
    ] {
        assert!(
            stdout
                .lines()
                .any(|line| line == format!("{attempt} {answer}")),
            "{attempt} should be {answer}:\n{stdout}"
        );
    }
    // On the host: the copy is there, root's, and nothing in the cache carries a
    // set-id bit, is a device, or has a file capability.
    let copy = std::fs::symlink_metadata(cache.join("idcopy")).unwrap();
    assert_eq!((copy.uid(), copy.mode() & 0o7777), (owner, 0o755));
    assert_eq!(honoured_modes(&cache), Vec::<String>::new());
    let xattrs = std::process::Command::new("python3")
        .args(["-c", "import os, sys; print(os.listxattr(sys.argv[1]))"])
        .arg(cache.join("idcopy"))
        .output()
        .unwrap();
    assert_eq!(text(&xattrs.stdout), "[]\n", "{}", text(&xattrs.stderr));
}

/// `cat PATH` and `ls DIR` as an ordinary user (uid and gid 65534, no
/// supplementary group), each one's exit status.
fn as_another_user(script: &str) -> Output {
    std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv (Debian package util-linux)")
}

#[test]
fn another_local_user_can_reach_no_workspace_file_layer_or_store() {
    for backend in [&[][..], &["--backend", "container"][..]] {
        let fixture = CliFixture::new("private-runtime");
        let run = fixture.create_with(backend);
        let out = fixture.agent_workspace(&[
            "exec",
            &run,
            "--",
            "sh",
            "-c",
            "echo the-runs-secret > secret.txt && chmod 644 secret.txt",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        // Where the run's file is on the host (the writable layer, or the
        // container's checkout): root, the positive control, finds and reads it.
        let runtime = fixture.runtime();
        let found = std::process::Command::new("find")
            .arg(&runtime)
            .args(["-name", "secret.txt", "-type", "f"])
            .output()
            .unwrap();
        let path = text(&found.stdout).lines().next().map(str::to_owned);
        let path =
            path.unwrap_or_else(|| panic!("{backend:?}: secret.txt not under the runtime dir"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "the-runs-secret\n");
        // Another user reaches nothing under the runtime directory: not the
        // file, not a listing of runs, trees or templates.
        let runs = runtime.join("runs");
        for attempt in [
            format!("cat '{path}'"),
            format!("ls '{}'", runtime.display()),
            format!("ls '{}'", runs.display()),
            format!("ls '{}/{run}'", runs.display()),
            format!("ls '{}'", runtime.join("trees").display()),
            format!("ls '{}'", runtime.join("journals").display()),
        ] {
            let out = as_another_user(&attempt);
            assert_ne!(
                out.status.code(),
                Some(0),
                "{backend:?}: {attempt} worked: {}",
                text(&out.stdout)
            );
            assert!(
                !text(&out.stdout).contains("the-runs-secret"),
                "{backend:?}: {attempt}"
            );
        }
        let out = fixture.agent_workspace(&["destroy", &run]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

/// The entries of `dir` (none when it is missing).
fn entries(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(read) => read.flatten().map(|e| e.path()).collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn a_container_refuses_a_writable_cache_it_could_not_write_naming_it() {
    let fixture = CliFixture::new("rw-cache-container-owner");
    // Root's directory: no idmapped mount makes it the container's.
    let cache = fixture.path().join("roots-cache");
    std::fs::create_dir_all(&cache).unwrap();
    let grant = format!("{}:/cache", cache.display());
    // `contract check` refuses it for the container backend, naming the
    // field; the namespace backend keeps it (through an idmapped mount).
    let contract = fixture.path().join("rw-cache.toml");
    std::fs::write(
        &contract,
        format!(
            "objective = \"a cache\"\nshape = \"narrow-fix\"\n[source]\nrepo = \".\"\nrevision = \"HEAD\"\n[filesystem]\nwritable = [\".\"]\n\
             [[filesystem.host_mounts]]\nhost = \"{}\"\ntarget = \"/cache\"\nmode = \"danger-read-write\"\n",
            cache.display()
        ),
    )
    .unwrap();
    let path = contract.to_str().unwrap();
    let kept = fixture.agent_workspace(&["contract", "check", path, "--backend", "namespace"]);
    assert_eq!(kept.status.code(), Some(0), "{}", text(&kept.stderr));
    let refused = fixture.agent_workspace(&["contract", "check", path, "--backend", "container"]);
    let said = format!("{}{}", text(&refused.stdout), text(&refused.stderr));
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(
        said.contains("filesystem.host_mounts[0]")
            && said.contains("of uid 0")
            && said.contains("use the namespace backend"),
        "{said}"
    );
    // `run` refuses it the same way before anything of the run is made: no
    // run directory, no checkout, no evidence, no container.
    let out = fixture.run(&[
        "--backend",
        "container",
        "--rw-cache",
        &grant,
        "--",
        "touch",
        "/cache/x",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("filesystem.host_mounts[0]")
            && stderr.contains("use the namespace backend"),
        "{stderr}"
    );
    assert!(!cache.join("x").exists());
    assert_eq!(
        entries(&fixture.runtime().join("runs")),
        Vec::<PathBuf>::new()
    );
    assert_eq!(
        entries(&fixture.runtime().join("journals")),
        Vec::<PathBuf>::new()
    );
    assert_eq!(entries(&fixture.evidence()), Vec::<PathBuf>::new());
    assert_eq!(
        entries(&fixture.runtime().join("containers")),
        Vec::<PathBuf>::new()
    );
    // Given to the container's host uid, the same grant works.
    std::os::unix::fs::chown(&cache, Some(101_000), Some(101_000)).unwrap();
    let kept = fixture.agent_workspace(&["contract", "check", path, "--backend", "container"]);
    assert_eq!(kept.status.code(), Some(0), "{}", text(&kept.stderr));
    let out = fixture.run(&[
        "--backend",
        "container",
        "--rw-cache",
        &grant,
        "--",
        "touch",
        "/cache/x",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(cache.join("x").exists());
}
