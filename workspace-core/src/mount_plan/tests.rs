//! Mount plans built from contracts: order, access, masks, identity, scale.

use std::path::PathBuf;

use super::*;
use crate::RunId;
use crate::boundary::{IdentityPlan, LayersRecord, OriginRecord, SourceRecord};
use crate::contract::{
    Contract, HomeDir, HostMount, Materialization, MountMode, SourceSection, TaskShape, UserClass,
};

fn record(layers: Option<LayersRecord>) -> SourceRecord {
    SourceRecord {
        repository: "/srv/repo".into(),
        remote_urls: Vec::new(),
        commit: "a".repeat(40),
        tree: "b".repeat(40),
        origin: OriginRecord::Fresh,
        materialization: if layers.is_some() {
            Materialization::Layered
        } else {
            Materialization::Standalone
        },
        workspace: PathBuf::from("/var/lib/aw/runs/run-1/checkout"),
        layers,
        submodules: Vec::new(),
        inputs: Vec::new(),
        initial_diff: String::new(),
        pinned: Vec::new(),
        objects: None,
    }
}

fn identity(uid: u32) -> IdentityPlan {
    IdentityPlan {
        user: UserClass::Unprivileged,
        uid,
        gid: uid,
        credentials: Vec::new(),
    }
}

fn host() -> HostLayout {
    HostLayout {
        root: "/".into(),
        system: vec![
            SystemEntry::Dir {
                path: "/usr".into(),
            },
            SystemEntry::Symlink {
                path: "/bin".into(),
                to: "usr/bin".into(),
            },
            SystemEntry::Symlink {
                path: "/lib".into(),
                to: "usr/lib".into(),
            },
        ],
        etc: vec!["/etc/resolv.conf".into(), "/etc/ssl/certs".into()],
    }
}

fn contract() -> Contract {
    Contract::preset(
        TaskShape::NarrowFix,
        "t",
        SourceSection::new("/srv/repo", "HEAD"),
    )
}

fn build(
    contract: &Contract,
    source: &SourceRecord,
    excluded: &[(String, bool)],
    pty: bool,
) -> MountPlan {
    let run_id = RunId::new("run-1").unwrap();
    let identity = identity(1000);
    let host = host();
    MountPlan::build(&PlanInputs {
        contract,
        run_id: &run_id,
        source,
        source_objects: Some(std::path::Path::new("/srv/repo/.git/objects")),
        identity: &identity,
        host: &host,
        excluded,
        pty,
        templates: &[],
    })
    .unwrap_or_else(|p| panic!("{p}"))
}

fn targets(plan: &MountPlan, reason: Reason) -> Vec<(&str, &MountAction)> {
    plan.steps_for(reason)
        .map(|s| (s.target.as_str(), &s.action))
        .collect()
}

#[test]
fn a_narrow_fix_gets_the_base_system_read_only_and_its_workspace_read_write() {
    let plan = build(&contract(), &record(None), &[], false);
    assert_eq!(plan.workdir, "/workspace");
    assert_eq!(plan.hostname, "run-1");
    assert_eq!(
        targets(&plan, Reason::System)[0],
        (
            "/usr",
            &MountAction::Bind {
                source: "/usr".into(),
                read_only: true
            }
        )
    );
    assert_eq!(
        targets(&plan, Reason::Workspace),
        [(
            "/workspace",
            &MountAction::Bind {
                source: "/var/lib/aw/runs/run-1/checkout".into(),
                read_only: false
            }
        )]
    );
    assert_eq!(
        targets(&plan, Reason::SourceObjects),
        [(
            "/srv/repo/.git/objects",
            &MountAction::Bind {
                source: "/srv/repo/.git/objects".into(),
                read_only: true
            }
        )]
    );
    // The preset caps /tmp at 1 GiB; HOME is an empty private directory.
    assert_eq!(
        targets(&plan, Reason::Tmp),
        [(
            "/tmp",
            &MountAction::Tmpfs {
                size_bytes: 1 << 30,
                mode: 0o1777
            }
        )]
    );
    assert_eq!(targets(&plan, Reason::Home)[0].0, "/home/agent");
    // The run's identity is the only user; no host account leaks in.
    let passwd = plan
        .steps
        .iter()
        .find(|s| s.target == "/etc/passwd")
        .unwrap();
    let MountAction::File { contents, .. } = &passwd.action else {
        panic!("{passwd:?}")
    };
    assert!(contents.starts_with("agent:x:1000:1000:"), "{contents}");
    assert!(!contents.contains("root"), "{contents}");
    // Device binds are the only steps that need device access.
    let devices: Vec<&str> = plan
        .steps
        .iter()
        .filter(|s| matches!(s.action, MountAction::Device { .. }))
        .map(|s| s.target.as_str())
        .collect();
    assert_eq!(
        devices,
        [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
            "/dev/tty"
        ]
    );
    // /proc is fresh, its tunables read-only; /sys is fresh and read-only.
    assert!(plan.steps.iter().any(|s| s.target == "/proc/sys" && s.action == MountAction::Rebind { read_only: true }));
    assert_eq!(
        targets(&plan, Reason::Sys),
        [
            ("/sys", &MountAction::Sysfs),
            ("/sys/firmware", &MountAction::Mask { file: false })
        ]
    );
    assert!(
        !plan.steps.iter().any(|s| s.target == "/dev/pts"),
        "no PTY was asked for"
    );
}

#[test]
fn a_layered_checkout_is_an_overlay() {
    let layers = LayersRecord {
        lower: "/cache/trees/t/files".into(),
        upper: "/runs/r/upper".into(),
        work: "/runs/r/work".into(),
    };
    let plan = build(&contract(), &record(Some(layers.clone())), &[], true);
    assert_eq!(
        targets(&plan, Reason::Workspace),
        [(
            "/workspace",
            &MountAction::Overlay {
                lower: layers.lower,
                upper: layers.upper,
                work: layers.work
            }
        )]
    );
    assert!(
        plan.steps
            .iter()
            .any(|s| s.target == "/dev/pts" && s.action == MountAction::Devpts)
    );
}

#[test]
fn only_writable_paths_stay_writable_and_read_only_paths_win() {
    let mut contract = contract();
    contract.filesystem.writable = vec!["src".into(), "tests".into()];
    contract.filesystem.outputs = vec!["src".into()];
    contract.filesystem.read_only = vec!["src/generated".into()];
    let plan = build(
        &contract,
        &record(None),
        &[(".env".into(), true), ("secrets".into(), false)],
        false,
    );
    let workspace: Vec<(&str, &MountAction)> = plan
        .steps
        .iter()
        .filter(|s| s.target.starts_with("/workspace"))
        .map(|s| (s.target.as_str(), &s.action))
        .collect();
    assert_eq!(
        workspace,
        [
            (
                "/workspace",
                &MountAction::Bind {
                    source: "/var/lib/aw/runs/run-1/checkout".into(),
                    read_only: false
                }
            ),
            ("/workspace/src", &MountAction::Rebind { read_only: false }),
            (
                "/workspace/tests",
                &MountAction::Rebind { read_only: false }
            ),
            ("/workspace", &MountAction::RemountReadOnly),
            (
                "/workspace/src/generated",
                &MountAction::Rebind { read_only: true }
            ),
            ("/workspace/.env", &MountAction::Mask { file: true }),
            ("/workspace/secrets", &MountAction::Mask { file: false }),
        ]
    );
}

#[test]
fn host_mounts_are_read_only_unless_dangerously_declared() {
    let mut contract = contract();
    contract.filesystem.host_mounts = vec![
        HostMount {
            host: "/var/cache/cargo".into(),
            target: "/deps/cargo".into(),
            mode: MountMode::ReadOnly,
        },
        HostMount {
            host: "/srv/scratch".into(),
            target: "/scratch".into(),
            mode: MountMode::DangerReadWrite,
        },
    ];
    let plan = build(&contract, &record(None), &[], false);
    assert_eq!(
        targets(&plan, Reason::HostMount),
        [
            (
                "/deps/cargo",
                &MountAction::Bind {
                    source: "/var/cache/cargo".into(),
                    read_only: true
                }
            ),
            (
                "/scratch",
                &MountAction::Bind {
                    source: "/srv/scratch".into(),
                    read_only: false
                }
            ),
        ]
    );
}

#[test]
fn a_host_mount_inside_the_workspace_comes_before_the_root_turns_read_only() {
    let mut contract = contract();
    contract.filesystem.writable = vec!["src".into()];
    contract.filesystem.host_mounts = vec![HostMount {
        host: "/var/cache/node_modules".into(),
        target: "/workspace/node_modules".into(),
        mode: MountMode::ReadOnly,
    }];
    let plan = build(&contract, &record(None), &[], false);
    let at = |target: &str, reason: Reason| {
        plan.steps
            .iter()
            .position(|s| s.target == target && s.reason == reason)
            .unwrap_or_else(|| panic!("no {reason:?} step at {target}"))
    };
    let mount = at("/workspace/node_modules", Reason::HostMount);
    assert!(at("/workspace", Reason::Workspace) < mount);
    assert!(mount < at("/workspace/src", Reason::Writable));
    let remount = plan
        .steps
        .iter()
        .position(|s| s.action == MountAction::RemountReadOnly)
        .unwrap();
    assert!(mount < remount);
    assert_eq!(
        contract
            .filesystem
            .host_mounts_in_workspace()
            .map(|(_, relative)| relative)
            .collect::<Vec<_>>(),
        ["node_modules"]
    );
}

#[test]
fn no_home_means_no_home_directory() {
    let mut contract = contract();
    contract.filesystem.home = HomeDir::None;
    let plan = build(&contract, &record(None), &[], false);
    assert_eq!(plan.steps_for(Reason::Home).count(), 0);
}

#[test]
fn two_thousand_excluded_paths_are_planned_and_a_duplicate_is_named() {
    let excluded: Vec<(String, bool)> = (0..2000)
        .map(|i| (format!("data/d{i:04}/secret.txt"), true))
        .collect();
    let plan = build(&contract(), &record(None), &excluded, false);
    assert_eq!(plan.steps_for(Reason::Excluded).count(), 2000);
    for step in &plan.steps {
        assert!(
            step.target.starts_with('/') && !step.target.contains(".."),
            "{step:?}"
        );
    }

    let mut contract = contract();
    contract.filesystem.host_mounts = vec![HostMount {
        host: "/srv/x".into(),
        target: "/tmp".into(),
        mode: MountMode::ReadOnly,
    }];
    let run_id = RunId::new("run-1").unwrap();
    let (identity, host, source) = (identity(1000), host(), record(None));
    let problems = MountPlan::build(&PlanInputs {
        contract: &contract,
        run_id: &run_id,
        source: &source,
        source_objects: None,
        identity: &identity,
        host: &host,
        excluded: &[],
        pty: false,
        templates: &[],
    })
    .unwrap_err();
    assert_eq!(
        problems.to_string(),
        "filesystem.host_mounts[0].target: \"/tmp\" would be mounted twice"
    );
}

#[test]
fn namespace_root_is_root_inside_only() {
    let run_id = RunId::new("run-1").unwrap();
    let (identity, host, source, contract) = (identity(0), host(), record(None), contract());
    let plan = MountPlan::build(&PlanInputs {
        contract: &contract,
        run_id: &run_id,
        source: &source,
        source_objects: None,
        identity: &identity,
        host: &host,
        excluded: &[],
        pty: false,
        templates: &[],
    })
    .unwrap();
    let passwd = plan
        .steps
        .iter()
        .find(|s| s.target == "/etc/passwd")
        .unwrap();
    let MountAction::File { contents, .. } = &passwd.action else {
        panic!()
    };
    assert!(contents.starts_with("root:x:0:0:root:/root:"), "{contents}");
    assert_eq!(plan.steps_for(Reason::Home).count(), 0);
}
