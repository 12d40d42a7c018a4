//! The observation's parser and comparison, on probe outputs written out.

use super::*;

#[test]
fn the_shell_adds_one_toolchain_line_and_no_other_section() {
    assert_eq!(
        toolchain_section("@@toolchain\nrustc 1.95.0\n"),
        "@@toolchain\nrustc 1.95.0\n"
    );
    assert_eq!(
        toolchain_section("@@toolchain\nrustc 1.95.0\n@@status\nCapEff:\t0\n"),
        "@@toolchain\nrustc 1.95.0\n"
    );
    assert_eq!(
        toolchain_section("@@toolchain\n@@status\n"),
        "@@toolchain\n"
    );
    assert_eq!(toolchain_section("@@status\nSeccomp:\t2\n"), "");
    assert_eq!(toolchain_section(""), "");
}

#[test]
fn host_ids_are_shown_as_the_run_sees_them() {
    let map = "      1000     101000          1\n";
    assert_eq!(
        ids_inside("\t101000\t101000\t101000\t101000", map),
        "1000\t1000\t1000\t1000"
    );
    assert_eq!(ids_inside("0 101000", map), "65534\t1000");
    assert_eq!(ids_inside("5", "0 100000 65536\n"), "65534");
    assert_eq!(ids_inside("100005", "0 100000 65536\n"), "5");
}

const GOOD: &str = "@@status
Uid:\t1000\t1000\t1000\t1000
Gid:\t1000\t1000\t1000\t1000
CapPrm:\t0000000000000000
CapEff:\t0000000000000000
CapBnd:\t0000000000000000
NoNewPrivs:\t1
Seccomp:\t2
@@uid_map
      1000     101000          1
@@namespaces
net net:[4026532001] net:[4026531840]
user user:[4026532002] user:[4026531837]
@@hostname
run-1
@@interfaces
lo
@@process_count
3
@@env_names
PATH
PWD
@@mounts
801 800 0:70 / / ro,nosuid,nodev,relatime - tmpfs tmpfs rw,size=65536k
802 801 8:1 /usr /usr ro,nosuid,nodev,relatime - ext4 /dev/sda1 rw
803 801 0:71 / /workspace rw,nosuid,nodev,relatime - overlay overlay rw,lowerdir=/l
804 801 0:6 /null /dev/null rw,nosuid,noexec,relatime - devtmpfs udev rw
805 801 0:72 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
@@toolchain
rustc 1.95.0 (59807616e 2026-11-20)
@@end
";

fn expected() -> Expected {
    Expected {
        uid: 1000,
        gid: 1000,
        hostname: "run-1".into(),
        env_names: BTreeSet::from(["PATH".to_owned(), "HOME".to_owned()]),
        toolchain: None,
        mount_points: Vec::new(),
        host_ids: None,
        root_host_id: None,
    }
}

#[test]
fn a_target_with_a_newline_cannot_forge_another_answer() {
    let target = "/workspace/a\naccepted /usr";
    let output = format!("@@writes\nrefused {}\n@@end\n", line_word(target));
    let facts = parse(&output);
    assert_eq!(
        facts["writes"].as_object().map(|w| w.len()),
        Some(1),
        "{facts:?}"
    );
    let point = MountPoint {
        target: target.into(),
        read_only: true,
        kernel_part: false,
        masked: false,
    };
    let mut facts = facts;
    facts.insert(
        "mounts".into(),
        json!([{"target": target, "options": "ro,nosuid,nodev", "fstype": "tmpfs"}]),
    );
    assert_eq!(plan_mismatches(&facts, &[point]), Vec::<String>::new());
}

#[test]
fn a_capability_in_the_permitted_or_bounding_set_is_a_mismatch() {
    for (line, set) in [
        ("CapPrm:\t0000000000000000", "permitted"),
        ("CapBnd:\t0000000000000000", "bounding"),
    ] {
        let key = line.split(':').next().unwrap_or_default();
        let one = GOOD.replace(line, &format!("{key}:\t0000000000000400"));
        let mismatches = observe(&one, &expected()).mismatches;
        assert_eq!(
            mismatches,
            [format!(
                "{set} capabilities are 0000000000000400, expected none (0)"
            )]
        );
    }
}

#[test]
fn a_runtimes_root_may_map_to_its_one_unprivileged_host_id_and_nothing_more() {
    let with_root = GOOD
        .replace(
            "      1000     101000          1\n",
            " 0 100000 1\n 1000 101000 1\n",
        )
        .replace(
            "@@namespaces",
            "@@gid_map\n 1000 101000 1\n 0 100000 1\n@@namespaces",
        );
    let runtime = Expected {
        host_ids: Some((101_000, 101_000)),
        root_host_id: Some(100_000),
        ..expected()
    };
    assert_eq!(
        observe(&with_root, &runtime).mismatches,
        Vec::<String>::new()
    );
    let alone = Expected {
        root_host_id: None,
        ..runtime.clone()
    };
    let mismatches = observe(&with_root, &alone).mismatches;
    assert_eq!(mismatches.len(), 2, "{mismatches:?}");
    assert!(
        mismatches[0].contains("maps 1000 to host 101000 alone"),
        "{mismatches:?}"
    );
    let elsewhere = Expected {
        root_host_id: Some(200_000),
        ..runtime
    };
    assert!(
        observe(&with_root, &elsewhere).mismatches[0].contains("and root to host 200000 alone"),
        "{:?}",
        observe(&with_root, &elsewhere).mismatches
    );
}

#[test]
fn the_id_maps_must_map_the_plans_ids_alone() {
    let with_gid = GOOD.replace("@@namespaces", "@@gid_map\n 1000 101000 1\n@@namespaces");
    let planned = Expected {
        host_ids: Some((101_000, 101_000)),
        ..expected()
    };
    assert_eq!(
        observe(&with_gid, &planned).mismatches,
        Vec::<String>::new()
    );
    let other_host = Expected {
        host_ids: Some((102_000, 101_000)),
        ..expected()
    };
    assert_eq!(
        observe(&with_gid, &other_host).mismatches,
        [r#"uid_map is ["1000 101000 1"], the identity plan maps 1000 to host 102000 alone"#]
    );
    let wider = with_gid.replace(
        " 1000 101000 1\n@@namespaces",
        " 1000 101000 1\n 0 200000 1\n@@namespaces",
    );
    let mismatches = observe(&wider, &planned).mismatches;
    assert_eq!(mismatches.len(), 1, "{mismatches:#?}");
    assert!(mismatches[0].starts_with("gid_map is"), "{mismatches:#?}");
}

#[test]
fn a_bound_device_node_needs_no_nosuid_but_a_whole_dev_does() {
    let node = GOOD.replace(
        "804 801 0:6 /null /dev/null rw,nosuid,noexec,relatime - devtmpfs udev rw",
        "804 801 0:6 /null /dev/null rw,relatime - devtmpfs udev rw",
    );
    assert_eq!(observe(&node, &expected()).mismatches, Vec::<String>::new());
    let whole = GOOD.replace(
        "804 801 0:6 /null /dev/null rw,nosuid,noexec,relatime - devtmpfs udev rw",
        "804 801 0:6 / /dev rw,relatime - devtmpfs udev rw",
    );
    assert_eq!(
        observe(&whole, &expected()).mismatches,
        ["/dev (devtmpfs) is mounted without nosuid"]
    );
}

#[test]
fn a_sealed_observation_has_no_mismatches() {
    let observed = observe(GOOD, &expected());
    assert_eq!(observed.mismatches, Vec::<String>::new());
    assert_eq!(observed.facts["uid_map"], json!(["1000 101000 1"]));
    assert_eq!(observed.facts["process_count"], json!(3));
    assert_eq!(observed.facts["mounts"].as_array().map(Vec::len), Some(5));
    assert_eq!(
        observed.facts["mounts"][2],
        json!({"root": "/", "target": "/workspace", "options": "rw,nosuid,nodev,relatime", "fstype": "overlay"})
    );
    assert_eq!(
        observed.facts["toolchain"],
        json!("rustc 1.95.0 (59807616e 2026-11-20)")
    );
}

#[test]
fn a_mount_without_nosuid_or_nodev_or_a_writable_root_is_a_mismatch() {
    let bad = GOOD
        .replace(
            "/ / ro,nosuid,nodev,relatime",
            "/ / rw,nosuid,nodev,relatime",
        )
        .replace(
            "/usr /usr ro,nosuid,nodev,relatime",
            "/usr /usr ro,nodev,relatime",
        )
        .replace(
            "/workspace rw,nosuid,nodev,relatime",
            "/workspace rw,nosuid,relatime",
        );
    let mismatches = observe(&bad, &expected()).mismatches;
    assert_eq!(mismatches.len(), 3, "{mismatches:#?}");
    assert!(
        mismatches
            .iter()
            .any(|m| m.contains("/ is mounted read-write"))
    );
    assert!(
        mismatches
            .iter()
            .any(|m| m.contains("/usr (ext4) is mounted without nosuid"))
    );
    assert!(
        mismatches
            .iter()
            .any(|m| m.contains("/workspace (overlay) is mounted without nodev"))
    );
    // Device nodes need no `nodev`; an empty table is itself a mismatch.
    let none = observe(&GOOD.replace("@@mounts", "@@gone"), &expected()).mismatches;
    assert!(
        none.iter().any(|m| m.contains("no mount table")),
        "{none:#?}"
    );
}

#[test]
fn a_namespace_shared_with_the_host_is_a_mismatch() {
    let shared = GOOD.replace("net net:[4026532001]", "net net:[4026531840]");
    let mismatches = observe(&shared, &expected()).mismatches;
    assert_eq!(
        mismatches,
        ["the run shares the host's net namespace (net:[4026531840])"]
    );
    let unread = GOOD.replace("net net:[4026532001]", "net unknown");
    let mismatches = observe(&unread, &expected()).mismatches;
    assert_eq!(mismatches, ["the run's net namespace could not be read"]);
}

#[test]
fn a_map_to_host_root_is_a_mismatch() {
    let facts = |line: &str| BTreeMap::from([("uid_map".to_owned(), json!([line]))]);
    assert_eq!(host_root_mapped(&facts("1000 101000 1"), "uid_map"), None);
    let root = host_root_mapped(&facts("0 0 1"), "uid_map").unwrap_or_default();
    assert!(root.contains("host root"), "{root}");
    assert!(host_root_mapped(&facts("0 0 4294967295"), "uid_map").is_some());
    assert!(host_root_mapped(&facts("garbage"), "uid_map").is_some());
}

#[test]
fn the_plan_is_read_back_from_the_mount_table() {
    let point = |target: &str, read_only, kernel_part| MountPoint {
        target: target.into(),
        read_only,
        kernel_part,
        masked: false,
    };
    let masked = |target: &str| MountPoint {
        masked: true,
        ..point(target, true, false)
    };
    let facts = BTreeMap::from([
        (
            "mounts".to_owned(),
            json!([
                {"target": "/workspace", "options": "rw,nosuid", "fstype": "overlay"},
                {"target": "/workspace/migrations", "options": "rw,nosuid", "fstype": "overlay"},
                {"target": "/workspace/migrations", "options": "ro,nosuid", "fstype": "overlay"},
                {"target": "/usr", "options": "rw,nosuid", "fstype": "ext4"},
            ]),
        ),
        ("absent".to_owned(), json!(["/proc/kcore"])),
        (
            "writes".to_owned(),
            json!({"/workspace/migrations": "refused", "/usr": "accepted",
                   "/workspace/.env": "refused", "/workspace/keys": "refused",
                   "/dev/null": "discarded"}),
        ),
        (
            "masked".to_owned(),
            json!({"/workspace/.env": "hidden", "/workspace/keys": "2-entries"}),
        ),
    ]);
    let points = [
        point("/workspace", false, false),
        point("/workspace/migrations", true, false),
        point("/proc/kcore", true, true),
    ];
    assert_eq!(plan_mismatches(&facts, &points), Vec::<String>::new());
    let broken = [
        point("/usr", true, false),
        point("/workspace/secrets", true, false),
        point("/proc/keys", true, true),
    ];
    assert_eq!(
        plan_mismatches(&facts, &broken),
        [
            "/usr is writable, the plan makes it read-only",
            "/usr accepts a write, the plan makes it read-only",
            "/workspace/secrets is not mounted, the plan mounts it",
            "/workspace/secrets: no write was tried",
            "/proc/keys is not mounted, the plan mounts it",
        ]
    );
    // An excluded path shows nothing; one that shows its entries is named.
    let mut with_masks = facts.clone();
    if let Some(Value::Array(mounts)) = with_masks.get_mut("mounts") {
        for target in ["/workspace/.env", "/workspace/keys"] {
            mounts.push(json!({"target": target, "options": "ro,nosuid,nodev", "fstype": "tmpfs"}));
        }
    }
    assert_eq!(
        plan_mismatches(
            &with_masks,
            &[masked("/workspace/.env"), masked("/workspace/keys")]
        ),
        ["/workspace/keys shows 2-entries, the plan hides it"]
    );
}

#[test]
fn a_toolchain_is_kept_when_its_program_shows_the_declared_version() {
    let facts = |line: &str| BTreeMap::from([("toolchain".to_owned(), json!(line))]);
    let seen = facts("rustc 1.95.0 (59807616e 2026-01-01)");
    assert_eq!(toolchain_mismatch(&seen, Some("rustc 1.95.0")), None);
    assert_eq!(toolchain_mismatch(&seen, Some("rustc")), None);
    assert_eq!(toolchain_mismatch(&seen, Some("rustc 1.95")), None);
    assert_eq!(toolchain_mismatch(&seen, None), None);
    let other = toolchain_mismatch(&seen, Some("rustc 1.80.0")).unwrap_or_default();
    assert!(
        other.contains("1.80.0") && other.contains("1.95.0"),
        "{other}"
    );
    let missing = facts("cargo: not found in the run");
    let missing = toolchain_mismatch(&missing, Some("cargo 1.95.0")).unwrap_or_default();
    assert!(missing.contains("not in the run"), "{missing}");
    assert!(toolchain_mismatch(&BTreeMap::new(), Some("go")).is_some());
}

#[test]
fn the_probe_asks_for_a_plain_toolchain_program_only() {
    let line = toolchain_line(Some("rustc 1.95.0")).unwrap_or_default();
    assert!(line.starts_with("echo @@toolchain;") && line.contains("rustc --version"));
    assert_eq!(toolchain_line(Some("$(reboot) 1")), None);
    assert_eq!(toolchain_line(None), None);
}

#[test]
fn root_an_extra_interface_and_a_leaked_variable_are_mismatches() {
    let bad = GOOD
        .replace("Uid:\t1000\t1000\t1000\t1000", "Uid:\t0\t0\t0\t0")
        .replace("CapEff:\t0000000000000000", "CapEff:\t000001ffffffffff")
        .replace("lo\n", "lo\neth0\n")
        .replace("PWD\n", "PWD\nAWS_SECRET_ACCESS_KEY\n");
    let mismatches = observe(&bad, &expected()).mismatches;
    assert_eq!(mismatches.len(), 4, "{mismatches:#?}");
    assert!(
        mismatches[0].contains("uid inside is [0,0,0,0]"),
        "{mismatches:#?}"
    );
    assert!(
        mismatches
            .iter()
            .any(|m| m.contains("effective capabilities"))
    );
    assert!(mismatches.iter().any(|m| m.contains("eth0")));
    assert!(
        mismatches
            .iter()
            .any(|m| m.contains("AWS_SECRET_ACCESS_KEY"))
    );
}

#[test]
fn a_truncated_probe_is_a_mismatch() {
    let mismatches = observe("@@status\nUid:\t1000\n", &expected()).mismatches;
    assert!(mismatches.iter().any(|m| m.contains("ended early")));
    assert!(mismatches.iter().any(|m| m.contains("hostname")));
}
