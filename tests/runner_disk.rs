//! The disk cap (`environment.limits.disk`): the run's writable layer on a file
//! system of the cap's size, where a write past it fails inside with ENOSPC and
//! the host's disk gives no more; read back into `observed.json`, measured into
//! `outcome.json`, removed by cleanup and by recovery with nothing left (no
//! mount, no loop device, no image). Runs as root: the disk is mounted on the
//! host.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::{Fixture, assert_intact, end_processes_under, read_json, read_outcome, shell};
use workspace_core::contract::{ByteSize, Contract};
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::lifecycle::State;
use workspace_core::runner::{CommandIo, CreateOptions, RunReport, Workspace};

const MIB: u64 = 1 << 20;

/// Unmounts (lazily) whatever a failed test left mounted under its fixture,
/// so that a bug here never leaves a disk mounted on the machine.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        for point in mounts_under(&self.0).into_iter().rev() {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&point)
                .status();
        }
    }
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_string_lossy().into_owned();
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&dir))
        .map(str::to_owned)
        .collect()
}

/// The loop devices bound to a file under `dir`.
fn loop_devices_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let backing = std::fs::read_to_string(entry.path().join("loop/backing_file")).ok()?;
            backing.starts_with(&dir).then(|| {
                format!(
                    "{}: {}",
                    entry.file_name().to_string_lossy(),
                    backing.trim()
                )
            })
        })
        .collect()
}

fn capped(fx: &Fixture, bytes: u64) -> Contract {
    let mut contract = fx.contract();
    contract.environment.limits.disk = Some(ByteSize(bytes));
    contract
}

/// Free bytes of the file system the fixture's runtime directory is on.
fn host_free(fx: &Fixture) -> u64 {
    let stat = nix::sys::statvfs::statvfs(fx.base.path()).unwrap();
    stat.blocks_available() * stat.fragment_size()
}

/// Runs `script` (marked `marker`) in `ws` and expects it to exit 0.
async fn exec_ok(ws: &mut Workspace, script: &str, marker: &str) {
    let outcome = ws
        .exec(&shell(script, marker), CommandIo::captured())
        .await
        .unwrap();
    assert_eq!(outcome.exit.status, ExitStatusRecord::Code(0), "{script}");
}

fn stdout(report: &RunReport, seq: u32) -> String {
    std::fs::read_to_string(report.evidence.join(format!("commands/{seq:04}/stdout"))).unwrap()
}

fn assert_disk_gone(fx: &Fixture) {
    assert!(
        mounts_under(fx.base.path()).is_empty(),
        "{:?}",
        mounts_under(fx.base.path())
    );
    assert!(
        loop_devices_under(fx.base.path()).is_empty(),
        "{:?}",
        loop_devices_under(fx.base.path())
    );
}

/// Files of `count` x 40 MiB written one after the other into the workspace;
/// prints `full N` for the first that did not fit, and `fallocate refused`
/// when reserving past the cap fails too.
const FILL: &str = "for i in 1 2 3 4; do head -c 41943040 /dev/zero > fill$i 2>/dev/null || { echo full $i; break; }; done; \
    fallocate -l 200M reserve 2>/dev/null || echo fallocate refused; ls fill* | wc -l";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_past_the_disk_cap_fails_inside_and_the_host_gives_no_more() {
    let fx = Fixture::new("disk-image");
    let _unmount = Unmount(fx.base.path().to_path_buf());
    let cap = 96 * MIB;
    let runner = fx.runner();
    let mut ws = runner
        .create(capped(&fx, cap), CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(ws.state(), &State::Sealed);
    let free_before = host_free(&fx);
    exec_ok(&mut ws, FILL, "disk-fill").await;
    // While the run lives: the host lost at most the cap (a little slack for
    // the evidence and whatever else the host writes meanwhile).
    let spent = free_before.saturating_sub(host_free(&fx));
    assert!(
        spent <= cap + 8 * MIB,
        "the host gave the run {} MiB, its cap is 96 MiB",
        spent / MIB
    );
    // What was written is deleted again: the peak stays recorded.
    exec_ok(&mut ws, "rm -f fill* reserve; echo emptied", "disk-empty").await;
    let run_id = ws.run_id().clone();
    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);

    // Two 40 MiB files fit in 96 MiB, the third did not, nor a 200 MiB reservation.
    assert_eq!(stdout(&report, 1), "full 3\nfallocate refused\n3\n");
    let observed = read_json(&report.evidence, "observed.json");
    let disk = &observed["disk"];
    assert_eq!(disk["kind"], "image", "{disk}");
    assert_eq!(disk["fs_type"], "ext4", "{disk}");
    assert_eq!(disk["cap_bytes"], cap, "{disk}");
    let size = disk["size_bytes"].as_u64().unwrap();
    assert!(size <= cap && size > cap / 2, "{disk}");
    assert!(
        disk["device"].as_str().unwrap().starts_with("/dev/loop"),
        "{disk}"
    );
    let usage = read_outcome(&report.evidence)
        .disk
        .expect("the disk's usage");
    assert!(
        usage.used_bytes < 8 * MIB,
        "emptied before the end: {usage:?}"
    );
    let peak = usage.peak_bytes.expect("an image's peak");
    assert!(peak >= 80 * MIB && peak <= cap, "{usage:?}");
    assert_eq!(report.outcome.changed_paths, 0, "{:?}", report.outcome);

    fx.assert_nothing_left(&run_id, &["disk-fill"]);
    assert_disk_gone(&fx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_disk_cap_is_a_tmpfs_of_that_size() {
    let fx = Fixture::new("disk-tmpfs");
    let _unmount = Unmount(fx.base.path().to_path_buf());
    let cap = 16 * MIB;
    let script = "head -c 10485760 /dev/zero > a && echo first; head -c 10485760 /dev/zero > b 2>/dev/null || echo second refused; rm -f a b; echo kept > kept.txt";
    let report = fx
        .runner()
        .run(
            capped(&fx, cap),
            &shell(script, "disk-small"),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_eq!(stdout(&report, 1), "first\nsecond refused\n");
    let disk = &read_json(&report.evidence, "observed.json")["disk"];
    assert_eq!(disk["kind"], "tmpfs", "{disk}");
    assert_eq!(disk["fs_type"], "tmpfs", "{disk}");
    assert_eq!(disk["size_bytes"], cap, "{disk}");
    // What the run changed on it is in its patch like any other change.
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+kept"), "{patch}");
    let usage = read_outcome(&report.evidence)
        .disk
        .expect("the disk's usage");
    assert_eq!(usage.peak_bytes, None, "a tmpfs keeps no high-water mark");
    assert_disk_gone(&fx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_removes_the_disk_of_a_run_whose_runner_was_lost() {
    let fx = Fixture::new("disk-recover");
    let _unmount = Unmount(fx.base.path().to_path_buf());
    let mut ws = fx
        .runner()
        .create(capped(&fx, 80 * MIB), CreateOptions::default())
        .await
        .unwrap();
    let run_id = ws.run_id().clone();
    exec_ok(
        &mut ws,
        "echo lost > lost.txt; (setsid sleep 1000 &); true",
        "disk-lost",
    )
    .await;
    assert!(
        !mounts_under(fx.base.path()).is_empty(),
        "no disk mounted: the test would prove nothing"
    );
    // The runner is gone without finishing: its journal is no longer held.
    drop(ws);
    let report = fx.runner().recover().await.unwrap();
    assert_eq!(report.recovered.len(), 1, "{report:?}");
    let recovered = &report.recovered[0];
    assert!(
        recovered.cleaned && recovered.errors.is_empty(),
        "{recovered:?}"
    );
    let evidence = fx.paths(&run_id).evidence;
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(
        patch.contains("+lost"),
        "the evidence is exported from the disk: {patch}"
    );
    // Read from the disk before recovery removed it.
    let usage = read_outcome(&evidence)
        .disk
        .expect("the lost run's disk usage");
    assert!(
        usage.used_bytes > 0 && usage.peak_bytes.is_some(),
        "{usage:?}"
    );
    fx.assert_nothing_left(&run_id, &["disk-lost"]);
    assert_disk_gone(&fx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_disk_outlives_a_host_restart_while_its_run_is_suspended() {
    let fx = Fixture::new("disk-restart");
    let _unmount = Unmount(fx.base.path().to_path_buf());
    let runner = fx.runner();
    let mut ws = runner
        .create(capped(&fx, 80 * MIB), CreateOptions::default())
        .await
        .unwrap();
    let run_id = ws.run_id().clone();
    exec_ok(&mut ws, "echo before > note.txt", "disk-before").await;
    ws.suspend().await.unwrap();
    // The host restarts: every process of the run is gone, nothing is mounted.
    end_processes_under(&fx.cgroup_parent);
    let disk = fx.paths(&run_id).run_dir.join("disk");
    let mut unmounted = false;
    for _ in 0..100 {
        // The frozen sandbox's mount namespace goes with its last process.
        if std::process::Command::new("umount")
            .arg(&disk)
            .status()
            .unwrap()
            .success()
        {
            unmounted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        unmounted,
        "the disk could not be unmounted: {:?}",
        mounts_under(fx.base.path())
    );
    assert!(mounts_under(fx.base.path()).is_empty());

    let mut ws = fx
        .runner()
        .resume(&run_id, CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(ws.state(), &State::Sealed);
    exec_ok(
        &mut ws,
        "cat note.txt; echo after >> note.txt",
        "disk-after",
    )
    .await;
    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_eq!(stdout(&report, 2), "before\n");
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(
        patch.contains("+before") && patch.contains("+after"),
        "{patch}"
    );
    fx.assert_nothing_left(&run_id, &[]);
    assert_disk_gone(&fx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_cap_over_a_small_memory_cap_is_an_image_so_a_full_disk_is_no_oom_kill() {
    let fx = Fixture::new("disk-memory");
    let _unmount = Unmount(fx.base.path().to_path_buf());
    let mut contract = capped(&fx, 16 * MIB);
    // A tmpfs's pages would count against the command's memory: 20 MiB
    // written to a 16 MiB tmpfs under 48 MiB would come close to the cap.
    contract.environment.limits.memory = Some(ByteSize(48 * MIB));
    let script = "head -c 20971520 /dev/zero > big 2>err; s=$?; \
        grep -q 'No space left on device' err && echo no space; rm -f big err; exit $s";
    let report = fx
        .runner()
        .run(
            contract,
            &shell(script, "disk-memory"),
            CommandIo::captured(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_eq!(stdout(&report, 1), "no space\n");
    let outcome = read_outcome(&report.evidence);
    assert_eq!(outcome.commands[0].exit.status, ExitStatusRecord::Code(1));
    assert_eq!(
        outcome.commands[0].exit.killed, None,
        "not killed: {outcome:?}"
    );
    let disk = &read_json(&report.evidence, "observed.json")["disk"];
    assert_eq!(disk["kind"], "image", "{disk}");
    assert!(
        disk["chosen_because"]
            .as_str()
            .unwrap()
            .contains("memory cap"),
        "{disk}"
    );
    assert_disk_gone(&fx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_larger_than_the_free_space_fails_naming_the_field_and_leaves_nothing() {
    let fx = Fixture::new("disk-too-large");
    let _unmount = Unmount(fx.base.path().to_path_buf());
    let free = host_free(&fx);
    // Twice what is free, rounded up to whole GiB.
    let cap = (free * 2).div_ceil(1 << 30) << 30;
    let runner = fx.runner();
    let err = runner
        .create(capped(&fx, cap), CreateOptions::default())
        .await
        .unwrap_err();
    let text = workspace_core::error_chain(&err);
    assert!(
        text.contains("environment.limits.disk") && text.contains("free"),
        "{text}"
    );
    // Nothing was made, and the failure is on record.
    let evidence = err
        .evidence
        .clone()
        .expect("the evidence of the failed run");
    assert_intact(&evidence);
    assert!(!evidence.join("commands").exists());
    assert_disk_gone(&fx);
    fx.assert_nothing_left(&err.run_id, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_workspace_writes_on_its_capped_disk_and_no_further() {
    let fx = Fixture::new("disk-container");
    let _unmount = Unmount(fx.base.path().to_path_buf());
    let cap = 96 * MIB;
    let runner = support::container::runner(&fx);
    let mut ws = support::container::create(&runner, capped(&fx, cap)).await;
    exec_ok(&mut ws, FILL, "disk-container-fill").await;
    // The checkout the container writes is the one on the disk.
    exec_ok(
        &mut ws,
        "rm -f fill* reserve; echo kept > kept.txt",
        "disk-container-keep",
    )
    .await;
    let run_id = ws.run_id().clone();
    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_eq!(stdout(&report, 1), "full 3\nfallocate refused\n3\n");
    let disk = &read_json(&report.evidence, "observed.json")["disk"];
    assert_eq!(
        (disk["kind"].as_str(), disk["fs_type"].as_str()),
        (Some("image"), Some("ext4")),
        "{disk}"
    );
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+++ b/kept.txt"), "{patch}");
    fx.assert_nothing_left(&run_id, &["disk-container-fill"]);
    assert_disk_gone(&fx);
    assert!(support::container::runc_knows(&support::container::state(&fx)).is_empty());
}
