//! Privileges, mounts and identity: hostname, `/proc/sys`, `/sys`, mount, umount,
//! nested namespaces, device nodes, setuid binaries, capabilities, no_new_privs,
//! seccomp, the environment.

use std::collections::BTreeSet;
use std::os::unix::fs::{PermissionsExt, chown};

use backend_namespace::seccomp::{SeccompFilter, SeccompPolicy};
use backend_namespace::spawn::SpawnRequest;
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::mount_plan::{MountAction, MountStep, Reason};

use crate::common::{Fixture, HOST_ID, RUN_ID, run};
use crate::support::{HostSnapshot, PWNED, attack_fixture, host_hostname, unique};

/// How a test run gets its seccomp filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Filter {
    /// `danger_no_seccomp`: no filter at all.
    Disabled,
    /// Nothing set: `spawn` builds the default policy's filter.
    Implicit,
    /// The default policy's filter passed in the hook.
    Explicit,
}

impl Filter {
    const ALL: [Filter; 3] = [Filter::Disabled, Filter::Implicit, Filter::Explicit];

    fn apply(self, request: &mut SpawnRequest) {
        match self {
            Filter::Disabled => request.danger_no_seccomp = true,
            Filter::Implicit => {}
            Filter::Explicit => {
                request.seccomp = Some(SeccompFilter::new(&SeccompPolicy::default()).unwrap());
            }
        }
    }
}

/// `/workspace/secret.txt` exists on the host but is masked (`filesystem.excluded`).
fn with_masked_secret(fixture: &mut Fixture) {
    let secret = fixture.workspace().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    chown(&secret, Some(HOST_ID), Some(HOST_ID)).unwrap();
    fixture.plan.steps.push(MountStep {
        target: "/workspace/secret.txt".into(),
        action: MountAction::Mask { file: true },
        reason: Reason::Excluded,
    });
}

/// The host's `outside/` bound read-only at `/mnt/outside` (a read-only host mount).
fn with_read_only_host_mount(fixture: &mut Fixture) {
    fixture.plan.steps.push(MountStep {
        target: "/mnt/outside".into(),
        action: MountAction::Bind {
            source: fixture.outside(),
            read_only: true,
        },
        reason: Reason::HostMount,
    });
}

#[test]
fn change_hostname_with_the_hostname_command() {
    let fixture = attack_fixture();
    let host = host_hostname();
    let evil = unique("h");
    let evil = &evil[..evil.len().min(60)];
    let (status, out) = run(fixture.request(&format!(
        "hostname && echo CONTROL-OK; hostname {evil} && echo ATTACK-WORKED; \
         echo now=$(hostname); exit 0"
    )));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains(&format!("{RUN_ID}\nCONTROL-OK")), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains(&format!("now={RUN_ID}\n")), "{out}");
    assert_eq!(host_hostname(), host, "the host hostname changed");
}

#[test]
fn write_proc_sys_kernel_hostname() {
    let fixture = attack_fixture();
    let host = host_hostname();
    let (status, out) = run(fixture.request(&format!(
        "cat /proc/sys/kernel/hostname && echo CONTROL-OK; \
         echo {PWNED} > /proc/sys/kernel/hostname && echo ATTACK-WORKED; \
         echo now=$(cat /proc/sys/kernel/hostname); exit 0"
    )));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains(&format!("{RUN_ID}\nCONTROL-OK")), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(out.contains(&format!("now={RUN_ID}\n")), "{out}");
    assert_eq!(host_hostname(), host, "the host hostname changed");
}

/// `/sys` is the host's, read-only: no attribute write, no new cgroup.
#[test]
fn write_sys() {
    let fixture = attack_fixture();
    let name = unique("sys");
    let cgroup_dirs: Vec<String> = ["unified", "pids", "memory"]
        .iter()
        .map(|h| format!("/sys/fs/cgroup/{h}/{name}"))
        .collect();
    let mut script = "ls /sys/class >/dev/null && echo CONTROL-OK; \
         touch /sys/kernel/aw && echo ATTACK-WORKED; "
        .to_owned();
    for dir in &cgroup_dirs {
        script.push_str(&format!("mkdir {dir} && echo ATTACK-WORKED:{dir}; "));
    }
    script.push_str("exit 0");
    let (status, out) = run(fixture.request(&script));
    // Host side: nothing was created (and a created cgroup would be removed here).
    for dir in &cgroup_dirs {
        if std::path::Path::new(dir).exists() {
            let _ = std::fs::remove_dir(dir);
            panic!("the run created the host cgroup {dir}:\n{out}");
        }
    }
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
}

#[test]
fn mount_a_file_system() {
    let fixture = attack_fixture();
    let (status, out) = run(fixture.request(
        "mkdir /tmp/m && echo CONTROL-OK; \
         mount -t tmpfs none /tmp/m && echo ATTACK-WORKED:tmpfs; \
         mount --bind /workspace /tmp/m && echo ATTACK-WORKED:bind; \
         mount -t proc proc /tmp/m && echo ATTACK-WORKED:proc; \
         echo mounts=$(grep -c ' /tmp/m ' /proc/self/mountinfo); exit 0",
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains("mounts=0\n"), "{out}");
}

/// Unmounting would reveal what the plan hides: the masked excluded file, the
/// host's directory under the read-only `/usr` bind (an empty tmpfs).
#[test]
fn umount_to_reveal_a_masked_file() {
    let mut fixture = attack_fixture();
    with_masked_secret(&mut fixture);
    let (status, out) = run(fixture.request(
        "cat /workspace/hello.txt && echo CONTROL-OK; \
         echo secret=[$(cat /workspace/secret.txt)]; \
         umount /workspace/secret.txt && echo ATTACK-WORKED:mask; \
         umount -l /workspace/secret.txt && echo ATTACK-WORKED:mask-lazy; \
         umount -l /usr && echo ATTACK-WORKED:usr; \
         echo after=[$(cat /workspace/secret.txt)]; exit 0",
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(
        out.contains("secret=[]\n") && out.contains("after=[]\n"),
        "{out}"
    );
    assert!(
        !out.contains("ATTACK-WORKED") && !out.contains("top secret"),
        "{out}"
    );
}

/// A nested user namespace needs no capability: only the seccomp filter refuses
/// it. The filter is on by default (implicit) and with the hook; with
/// `danger_no_seccomp` the nested namespace *can* be created (asserted, so the
/// escape hatch stays visibly dangerous).
#[test]
fn unshare_user_namespace() {
    let fixture = attack_fixture();
    let script = "true && echo CONTROL-OK; \
                  unshare -U true && echo NESTED-USERNS; exit 0";
    for filter in Filter::ALL {
        let mut request = fixture.request(script);
        filter.apply(&mut request);
        let (status, out) = run(request);
        assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
        assert!(out.contains("CONTROL-OK"), "{out}");
        if filter == Filter::Disabled {
            assert!(out.contains("NESTED-USERNS"), "{filter:?}: {out}");
        } else {
            assert!(!out.contains("NESTED-USERNS"), "{filter:?}: {out}");
            assert!(out.contains("Operation not permitted"), "{out}");
        }
    }
}

/// A mount namespace needs `CAP_SYS_ADMIN`, which the run no longer holds.
#[test]
fn unshare_mount_namespace() {
    let fixture = attack_fixture();
    for filter in Filter::ALL {
        let mut request = fixture.request(
            "true && echo CONTROL-OK; \
             unshare -m true && echo ATTACK-WORKED:m; \
             unshare -n true && echo ATTACK-WORKED:n; exit 0",
        );
        filter.apply(&mut request);
        let (status, out) = run(request);
        assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
        assert!(out.contains("CONTROL-OK"), "{out}");
        assert!(!out.contains("ATTACK-WORKED"), "{filter:?}: {out}");
        assert!(out.contains("Operation not permitted"), "{out}");
    }
}

/// Without seccomp (`danger_no_seccomp`) a nested user + mount namespace regains every capability over
/// a *copy* of the mounts, but the kernel locks the copied mounts together with
/// their flags: read-only stays read-only, masks stay on.
#[test]
fn nested_user_namespace_cannot_unlock_mounts() {
    let mut fixture = attack_fixture();
    with_masked_secret(&mut fixture);
    with_read_only_host_mount(&mut fixture);
    let before = HostSnapshot::of(&fixture.outside());
    let name = unique("nested");
    let mut request = fixture.request(&format!(
        "unshare -Urm sh -c 'mount -t tmpfs none /tmp && echo CONTROL-OK; \
         mount -o remount,bind,rw /usr && echo ATTACK-WORKED:remount-usr; \
         touch /usr/{name} && echo ATTACK-WORKED:write-usr; \
         mount -o remount,bind,rw /mnt/outside && echo ATTACK-WORKED:remount-ro-mount; \
         echo {PWNED} > /mnt/outside/sentinel && echo ATTACK-WORKED:write-ro-mount; \
         umount /workspace/secret.txt && echo ATTACK-WORKED:unmask; \
         cat /workspace/secret.txt; true'; exit 0"
    ));
    // Without the filter (it would refuse `unshare -U` already): the kernel alone.
    Filter::Disabled.apply(&mut request);
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(
        out.contains("CONTROL-OK"),
        "the nested namespace did not start: {out}"
    );
    assert!(
        !out.contains("ATTACK-WORKED") && !out.contains("top secret"),
        "{out}"
    );
    assert!(!std::path::Path::new(&format!("/usr/{name}")).exists());
    before.assert_unchanged(&fixture.outside(), "nested userns remount");
}

#[test]
fn write_through_a_read_only_host_mount() {
    let mut fixture = attack_fixture();
    with_read_only_host_mount(&mut fixture);
    let before = HostSnapshot::of(&fixture.outside());
    let (status, out) = run(fixture.request(&format!(
        "cat /mnt/outside/sentinel && echo && echo CONTROL-OK; \
         echo {PWNED} > /mnt/outside/sentinel && echo ATTACK-WORKED; \
         touch /mnt/outside/planted && echo ATTACK-WORKED; \
         mount -o remount,rw /mnt/outside && echo ATTACK-WORKED; exit 0"
    )));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("host only\nCONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    before.assert_unchanged(&fixture.outside(), "write a read-only host mount");
}

#[test]
fn mknod_a_device() {
    let fixture = attack_fixture();
    let (status, out) = run(fixture.request(
        "mkfifo /tmp/fifo && test -p /tmp/fifo && echo CONTROL-OK; \
         mknod /tmp/mem c 1 1 && echo ATTACK-WORKED:tmp; \
         mknod /workspace/mem c 1 1 && echo ATTACK-WORKED:workspace; \
         mknod /tmp/sda b 8 0 && echo ATTACK-WORKED:block; exit 0",
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(!out.contains("ATTACK-WORKED"), "{out}");
    assert!(out.contains("Operation not permitted"), "{out}");
    assert!(!fixture.workspace().join("mem").exists());
}

/// A setuid-root copy of `id` planted in the workspace: the workspace is `nosuid`,
/// `no_new_privs` is set, and host root is not mapped in the run's user namespace.
#[test]
fn setuid_root_binary_planted_in_the_workspace() {
    let fixture = attack_fixture();
    let id = std::fs::canonicalize("/usr/bin/id").unwrap();
    let planted = fixture.workspace().join("id");
    std::fs::copy(&id, &planted).unwrap();
    chown(&planted, Some(0), Some(0)).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let before = std::fs::metadata(&planted).unwrap();
    let (status, out) = run(fixture.request(
        "/usr/bin/id -u && echo CONTROL-OK; echo via-setuid=$(/workspace/id -u):$(/workspace/id -g)",
    ));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("1000\nCONTROL-OK"), "{out}");
    assert!(
        out.contains("via-setuid=1000:1000\n"),
        "euid changed: {out}"
    );
    let after = std::fs::metadata(&planted).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((after.uid(), after.mode()), (before.uid(), before.mode()));
}

/// Every capability set is empty and `no_new_privs` is on, with or without seccomp;
/// `Seccomp: 2` (filter mode) unless `danger_no_seccomp`.
#[test]
fn capabilities_no_new_privs_and_seccomp_mode() {
    let fixture = attack_fixture();
    let script = "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' \
                  /proc/self/status; chown 0 /workspace/hello.txt && echo ATTACK-WORKED; \
                  exit 0";
    for filter in Filter::ALL {
        let mut request = fixture.request(script);
        filter.apply(&mut request);
        let (status, out) = run(request);
        assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
        for expected in [
            "CapInh:\t0000000000000000",
            "CapPrm:\t0000000000000000",
            "CapEff:\t0000000000000000",
            "CapBnd:\t0000000000000000",
            "CapAmb:\t0000000000000000",
            "NoNewPrivs:\t1",
        ] {
            assert!(
                out.lines().any(|l| l == expected),
                "missing {expected:?}: {out}"
            );
        }
        let mode = if filter == Filter::Disabled { "0" } else { "2" };
        assert!(
            out.lines().any(|l| l == format!("Seccomp:\t{mode}")),
            "{filter:?}: {out}"
        );
        assert!(!out.contains("ATTACK-WORKED"), "{out}");
    }
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(fixture.workspace().join("hello.txt")).unwrap();
    assert_eq!(meta.uid(), HOST_ID);
}

/// The environment is exactly the request's: no host variable comes along.
#[test]
fn host_environment_is_not_inherited() {
    let fixture = attack_fixture();
    let request = fixture.request_argv(vec!["/usr/bin/env".into()]);
    let passed: BTreeSet<String> = request.env.iter().map(|(k, _)| k.clone()).collect();
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    let inside: BTreeSet<String> = out
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_owned()))
        .collect();
    // Positive control: what was passed is there, with the passed values.
    assert_eq!(inside, passed, "{out}");
    assert!(out.contains("HOME=/home/agent\n"), "{out}");
    assert!(
        out.contains("PATH=/usr/bin:/bin:/usr/sbin:/sbin\n"),
        "{out}"
    );
    for (key, value) in std::env::vars() {
        if passed.contains(&key) {
            continue;
        }
        assert!(!inside.contains(&key), "host variable {key} leaked in");
        let ours = fixture_values(&out).any(|v| v.contains(&value));
        if value.len() >= 4 && !ours {
            assert!(
                !out.contains(&value),
                "the value of host variable {key} leaked in"
            );
        }
    }
}

/// The values of the `KEY=value` lines of `env` output.
fn fixture_values(out: &str) -> impl Iterator<Item = &str> {
    out.lines()
        .filter_map(|l| l.split_once('=').map(|(_, v)| v))
}
