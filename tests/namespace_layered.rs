//! Layered checkouts under `NamespaceProcess`, on REAL checkouts made by
//! backend-worktree (`WorktreeSource::with_layered_cache`, materialization =
//! layered): the cached base tree is the overlay's lower layer, owned by host root
//! and shared by every run of the commit; each run gets its own upper and work
//! directories. The run sees the lower through an idmapped mount (owner shown as
//! the run's own id), so it edits tracked files by copy-up while the lower stays
//! byte-for-byte as it was. Run as root, with real namespaces and cgroups.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

// The namespace backend's own run helpers: these tests need a real worktree
// checkout too, so they live here, where every backend is a dependency.
#[path = "../backend-namespace/tests/runs/mod.rs"]
mod runs;

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use backend_namespace::environment::NamespaceEnvironment;
use backend_namespace::identity::NamespaceIdentity;
use backend_namespace::process::{DEFAULT_HOST_ID_BASE, NamespaceProcess, ProcessOptions};
use backend_worktree::layered::cache::TreeCache;
use backend_worktree::source::WorktreeSource;
use runs::ParentGuard;
use runs::checkout::{RUN_HOST_ID, base_with_repo, owner, sh, teardown_is_clean};
use tempfile::TempDir;
use workspace_core::RunId;
use workspace_core::boundary::{
    EnvironmentBoundary, FilesystemRecord, IdentityBoundary, LayersRecord, ProcessBoundary,
    RunContext, SealPlan, SourceBoundary,
};
use workspace_core::contract::{Contract, Materialization, SourceSection, TaskShape, UserClass};
use workspace_core::evidence::ExitStatusRecord;

/// One repository, one base-tree cache, one process boundary: the runs of a test.
struct Shared {
    base: TempDir,
    repo: PathBuf,
    source: WorktreeSource,
    process: Arc<NamespaceProcess>,
    _parent: ParentGuard,
}

/// One layered run of [`Shared`]'s repository.
struct Run {
    run: RunContext,
    plan: SealPlan,
    layers: LayersRecord,
}

async fn shared(test: &str) -> Shared {
    let (base, repo) = base_with_repo();
    let cache = TreeCache::open(base.path().join("cache"), u64::MAX).unwrap();
    let parent = format!("agent-workspace-test-{}-layered-{test}", std::process::id());
    Shared {
        source: WorktreeSource::with_layered_cache(cache),
        process: Arc::new(NamespaceProcess::new(
            ProcessOptions::probe(parent.clone()).unwrap(),
        )),
        base,
        repo,
        _parent: ParentGuard(parent),
    }
}

/// Provisions run `name` (a layered checkout by backend-worktree) as `user`.
async fn layered_run(shared: &Shared, name: &str, user: UserClass) -> Run {
    let mut section = SourceSection::new(shared.repo.to_string_lossy(), "HEAD");
    section.materialization = Materialization::Layered;
    let mut contract = Contract::preset(TaskShape::NarrowFix, "layered tests", section);
    contract.identity.user = user;
    let dir = shared.base.path().join(name);
    std::fs::create_dir(&dir).unwrap();
    let run = RunContext {
        run_id: RunId::new(format!("layered-{name}")).unwrap(),
        contract: Arc::new(contract),
        run_dir: dir.join("run"),
        runtime_dir: dir.join("runtime"),
    };
    std::fs::create_dir(&run.run_dir).unwrap();
    let record = shared.source.provision(&run).await.unwrap();
    assert_eq!(record.materialization, Materialization::Layered);
    let layers = record.layers.clone().expect("a layered record has layers");
    let environment = NamespaceEnvironment::with_host_vars(Default::default())
        .prepare(&run)
        .await
        .unwrap();
    let identity = NamespaceIdentity::new().prepare(&run).await.unwrap();
    let plan = SealPlan {
        source: record,
        filesystem: FilesystemRecord::default(),
        environment,
        identity,
        templates: Vec::new(),
        held_open: Vec::new(),
    };
    Run { run, plan, layers }
}

/// Like [`sh`] in run `r`, asserting exit 0; stdout.
async fn sh_ok(process: &NamespaceProcess, r: &Run, script: &str) -> String {
    let (status, out, err) = sh(process, &r.run, script).await;
    assert_eq!(
        status,
        ExitStatusRecord::Code(0),
        "{script}: stdout {out:?} stderr {err:?}"
    );
    out
}

/// Everything about every entry under `root` that a write could change: type,
/// mode, owner, size, mtime, ctime, and the full contents (or link target).
/// (`atime` is left out: reading a file may update it.)
fn fingerprint(root: &Path) -> BTreeMap<PathBuf, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let facts = format!(
            "mode {:o} owner {}:{} size {} nlink {} mtime {}.{} ctime {}.{}",
            meta.mode(),
            meta.uid(),
            meta.gid(),
            meta.size(),
            meta.nlink(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        );
        let contents = if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
            Vec::new()
        } else if meta.file_type().is_symlink() {
            std::fs::read_link(&path)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else {
            std::fs::read(&path).unwrap()
        };
        out.insert(
            path.strip_prefix(root).unwrap().to_path_buf(),
            (facts, contents),
        );
    }
    out
}

/// The mount points of the host's (this test's) mount namespace.
fn host_mount_points() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(str::to_owned))
        .collect()
}

/// The case: a root-owned cached base tree as lower layer. The run edits
/// two tracked files and makes a new one; the changes land in its upper layer, git
/// inside sees them, and the lower is unchanged to the byte (and still host root's).
#[tokio::test(flavor = "multi_thread")]
async fn a_layered_run_edits_tracked_files_and_only_its_upper_layer_changes() {
    let s = shared("edit").await;
    let r = layered_run(&s, "edit", UserClass::Unprivileged).await;
    let lower = r.layers.lower.clone();
    assert_eq!(owner(&lower), (0, 0), "the cache is host root's");
    assert_eq!(owner(&lower.join("README.md")), (0, 0));
    let before = fingerprint(&lower);

    let observed = s.process.seal(&r.run, &r.plan).await.unwrap();
    assert_eq!(observed.mismatches, Vec::<String>::new());
    // Only the run's own directories were handed over.
    let handover = &observed.facts["handover"];
    let dirs: Vec<_> = handover
        .as_array()
        .unwrap()
        .iter()
        .map(|h| PathBuf::from(h["dir"].as_str().unwrap()))
        .collect();
    assert_eq!(dirs, vec![r.layers.upper.clone(), r.layers.work.clone()]);
    assert_eq!(owner(&r.layers.upper), (RUN_HOST_ID, RUN_HOST_ID));
    assert_eq!(owner(&r.layers.work), (RUN_HOST_ID, RUN_HOST_ID));

    let out = sh_ok(
        &s.process,
        &r,
        "stat -c '%u:%g %n' README.md src/lib.txt . \
         && ./bin/hello.sh \
         && echo new > new.txt && echo more >> README.md && echo deep >> src/lib.txt \
         && git status --porcelain \
         && awk '$9 == \"overlay\" { print \"options\", $NF }' /proc/self/mountinfo",
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    // The layers are mounted volatile: the end of the sandbox syncs nothing
    // (newer kernels show the option as `fsync=volatile`).
    let options: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("options "))
        .collect();
    assert_eq!(options.len(), 1, "{out:?}");
    assert!(
        options[0]
            .split(',')
            .any(|o| o == "volatile" || o == "fsync=volatile"),
        "{out:?}"
    );
    // Inside, the tracked files are the run's own (the idmapped lower) ...
    for line in [
        "1000:1000 README.md",
        "1000:1000 src/lib.txt",
        "1000:1000 .",
    ] {
        assert!(lines.contains(&line), "{line}: {out:?}");
    }
    // ... executable as checked out ...
    assert!(lines.contains(&"hello from bin"), "{out:?}");
    // ... and git sees exactly the run's changes.
    for line in ["?? new.txt", " M README.md", " M src/lib.txt"] {
        assert!(lines.contains(&line), "{line}: {out:?}");
    }

    // The changes are in the run's upper layer on the host, owned by the run ...
    let upper = &r.layers.upper;
    assert_eq!(
        std::fs::read_to_string(upper.join("new.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(
        std::fs::read_to_string(upper.join("README.md")).unwrap(),
        "readme\nmore\n"
    );
    assert_eq!(
        std::fs::read_to_string(upper.join("src/lib.txt")).unwrap(),
        "lib\ndeep\n"
    );
    for path in ["new.txt", "README.md", "src", "src/lib.txt"] {
        assert_eq!(
            owner(&upper.join(path)),
            (RUN_HOST_ID, RUN_HOST_ID),
            "{path}"
        );
    }
    // ... and the shared lower layer is byte-for-byte what it was.
    assert_eq!(fingerprint(&lower), before);
    teardown_is_clean(&s.process, &r.run).await;
    assert_eq!(fingerprint(&lower), before);
}

/// Two runs of one commit at once share one cached base tree: an unprivileged run
/// (uid 1000 → host 101000) and a namespace-root run (uid 0 → host 100000), i.e.
/// two different mapped ids over the same lower. Each sees only its own changes;
/// the lower is unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn two_concurrent_runs_on_one_base_tree_see_only_their_own_changes() {
    let s = shared("concurrent").await;
    let a = layered_run(&s, "a", UserClass::Unprivileged).await;
    let b = layered_run(&s, "b", UserClass::NamespaceRoot).await;
    assert_eq!(a.layers.lower, b.layers.lower, "one shared base tree");
    assert_ne!(a.layers.upper, b.layers.upper);
    let lower = a.layers.lower.clone();
    let before = fingerprint(&lower);

    let (sa, sb) = tokio::join!(
        s.process.seal(&a.run, &a.plan),
        s.process.seal(&b.run, &b.plan)
    );
    assert_eq!(sa.unwrap().mismatches, Vec::<String>::new());
    assert_eq!(sb.unwrap().mismatches, Vec::<String>::new());

    // Both commands live at the same time: each writes, waits, then looks.
    let script = |me: &str| {
        format!(
            "echo {me} >> README.md && echo {me} > only-{me}.txt && rm src/lib.txt \
             && sleep 1 && echo ---readme && cat README.md && echo ---ls && ls \
             && echo ---status && git status --porcelain && echo ---id && id -u"
        )
    };
    let (script_a, script_b) = (script("a"), script("b"));
    let (out_a, out_b) = tokio::join!(
        sh_ok(&s.process, &a, &script_a),
        sh_ok(&s.process, &b, &script_b)
    );
    for (out, me, other, uid) in [(&out_a, "a", "b", "1000"), (&out_b, "b", "a", "0")] {
        let readme = section(out, "readme");
        assert_eq!(readme, ["readme", me], "{me}: {out:?}");
        let ls = section(out, "ls");
        assert!(ls.contains(&format!("only-{me}.txt").as_str()), "{out:?}");
        assert!(
            !ls.iter().any(|l| l.contains(&format!("only-{other}"))),
            "{out:?}"
        );
        let status = section(out, "status");
        let mut status: Vec<&str> = status.to_vec();
        status.sort_unstable();
        assert_eq!(
            status,
            [
                " D src/lib.txt",
                " M README.md",
                &format!("?? only-{me}.txt")
            ],
            "{me}: {out:?}"
        );
        assert_eq!(section(out, "id"), [uid], "{out:?}");
    }
    assert_eq!(owner(&a.layers.upper), (RUN_HOST_ID, RUN_HOST_ID));
    assert_eq!(
        owner(&b.layers.upper),
        (DEFAULT_HOST_ID_BASE, DEFAULT_HOST_ID_BASE)
    );
    assert_eq!(
        std::fs::read_to_string(a.layers.upper.join("README.md")).unwrap(),
        "readme\na\n"
    );
    assert_eq!(
        std::fs::read_to_string(b.layers.upper.join("README.md")).unwrap(),
        "readme\nb\n"
    );
    assert_eq!(fingerprint(&lower), before);
    teardown_is_clean(&s.process, &a.run).await;
    teardown_is_clean(&s.process, &b.run).await;
    assert_eq!(fingerprint(&lower), before);
}

/// The lines of `out` after `---name` up to the next `---` line.
fn section<'a>(out: &'a str, name: &str) -> Vec<&'a str> {
    out.lines()
        .skip_while(|l| *l != format!("---{name}"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .collect()
}

/// Attack: a run tries to change the shared lower layer by every path it has.
/// It cannot name the lower at all (its host path, the cache, the old root are not
/// in its file system, and the idmapped mount never appears in the host's mount
/// table), and whatever it does through the overlay (rewrite, truncate, chmod,
/// touch, rename, delete, hard-link, extended attributes, unmounting the overlay)
/// never changes a byte or an attribute of the lower.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_can_neither_reach_nor_change_the_shared_lower_layer() {
    let s = shared("attack").await;
    let r = layered_run(&s, "attack", UserClass::NamespaceRoot).await;
    let lower = r.layers.lower.clone();
    let cache = s.base.path().join("cache");
    let before = fingerprint(&lower);
    s.process.seal(&r.run, &r.plan).await.unwrap();
    let lower_text = lower.to_string_lossy().into_owned();
    assert!(
        !host_mount_points()
            .iter()
            .any(|m| m.starts_with(&lower_text)),
        "the idmapped lower is never mounted in the host's namespace"
    );

    // 1. The lower cannot be named: each probe prints what it found.
    let probe = format!(
        "for p in '{lower}' '{lower}/README.md' '{cache}' /oldroot /proc/1/root/oldroot \
                  '/proc/1/root{lower}'; do \
           if [ -e \"$p\" ]; then echo \"VISIBLE $p\"; else echo \"hidden $p\"; fi; \
         done; \
         touch '{lower}/planted' 2>/dev/null && echo WROTE-BY-PATH; \
         umount -l \"$PWD\" 2>/dev/null && echo UNMOUNTED; \
         umount -l '{lower}' 2>/dev/null && echo UNMOUNTED-LOWER; \
         true",
        lower = lower_text,
        cache = cache.display()
    );
    let out = sh_ok(&s.process, &r, &probe).await;
    assert!(!out.contains("VISIBLE"), "{out}");
    assert!(!out.contains("WROTE"), "{out}");
    assert!(!out.contains("UNMOUNTED"), "{out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("hidden")).count(), 6);

    // 2. Everything a process may do to tracked files through the overlay, as
    //    namespace root (with every capability it could hold in its namespace
    //    dropped anyway). Each step may fail; none may reach the lower.
    let (status, out, err) = sh(
        &s.process,
        &r.run,
        "echo overwritten > README.md; : > src/lib.txt; chmod 777 bin/hello.sh; \
         touch -d '2000-01-01' bin/hello.sh; chown 0:0 src; \
         ln README.md hard-link; mv src moved-src; rm -rf bin; \
         mkdir -p .git/hooks && echo x > .git/index; \
         setfattr -n user.overlay.redirect -v /etc bin 2>/dev/null; \
         setfattr -n trusted.overlay.opaque -v y moved-src 2>/dev/null; \
         git status --porcelain; ls -la",
    )
    .await;
    assert_eq!(
        status,
        ExitStatusRecord::Code(0),
        "stdout {out:?} stderr {err:?}"
    );
    // Positive control: the changes are real, in the run's upper layer.
    let upper = &r.layers.upper;
    assert_eq!(
        std::fs::read_to_string(upper.join("README.md")).unwrap(),
        "overwritten\n"
    );
    assert!(upper.join("moved-src/lib.txt").exists(), "{out}");
    assert_eq!(
        std::fs::metadata(upper.join("bin"))
            .map(|m| m.file_type().is_char_device())
            .ok(),
        Some(true),
        "bin is a whiteout in the upper layer"
    );

    // Negative: the lower is exactly as it was.
    assert_eq!(fingerprint(&lower), before);
    assert_eq!(
        std::fs::read_to_string(lower.join("README.md")).unwrap(),
        "readme\n"
    );
    teardown_is_clean(&s.process, &r.run).await;
    assert_eq!(fingerprint(&lower), before);
}
