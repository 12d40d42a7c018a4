//! What a boundary probe saw, and its comparison with what the contract and the
//! plan ask for: the shared part of every backend's probe.
//!
//! A backend observes one process of its sealed sandbox from the host (its
//! `/proc/<pid>` files, its mount table, what the kernel answers for each mount
//! point) and writes what it read as `@@section` headers, one per fact, each
//! followed by its lines; [`observe`] parses that text and compares it with
//! [`Expected`]. How a backend reads the facts is its own (that code is
//! Linux-only and lives in the backend); what the facts must show is the same
//! for every backend, so a run is held to one standard whichever backend sealed
//! it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::boundary::ObservedBoundary;
use crate::mount_plan::MountPoint;

/// The namespaces a run must have of its own (`/proc/<pid>/ns/KIND`), in the
/// `@@namespaces` section as `KIND RUN HOST` lines.
pub const NAMESPACES: [&str; 7] = ["user", "mnt", "pid", "net", "uts", "ipc", "cgroup"];

/// The keys of `/proc/<pid>/status` the `@@status` section keeps.
pub const STATUS_KEYS: [&str; 7] = [
    "Uid:",
    "Gid:",
    "CapEff:",
    "CapPrm:",
    "CapBnd:",
    "NoNewPrivs:",
    "Seccomp:",
];

/// The line the probe's shell runs for a declared toolchain: the version line of
/// its program (the first word of `environment.runtime.toolchain`, e.g. `rustc
/// 1.95.0` → `rustc --version`) under an `@@toolchain` header, when it is a
/// plain program name.
pub fn toolchain_line(toolchain: Option<&str>) -> Option<String> {
    let program = toolchain
        .and_then(|t| t.split_whitespace().next())
        .filter(|p| {
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b))
        })?;
    Some(format!(
        "echo @@toolchain; command -v {program} >/dev/null && {program} --version 2>&1 | head -n 1 || echo '{program}: not found in the run'\n"
    ))
}

/// Variables a shell may add on its own (they are not inherited from the host).
pub const SHELL_VARS: [&str; 4] = ["PWD", "OLDPWD", "SHLVL", "_"];

/// What the observation must show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// The uid (real, effective, saved, fs) inside.
    pub uid: u32,
    /// The gid inside.
    pub gid: u32,
    /// The hostname (the run id).
    pub hostname: String,
    /// The variable names the run may see: the plan's and the credentials'.
    pub env_names: BTreeSet<String>,
    /// The declared toolchain (`environment.runtime.toolchain`), whose program's
    /// version line the probe records.
    pub toolchain: Option<String>,
    /// Every mount point of the applied plan, with whether it must be read-only
    /// ([`MountPlan::mount_points`](crate::mount_plan::MountPlan::mount_points)).
    pub mount_points: Vec<MountPoint>,
    /// The host uid and gid the run's ids map to: its `uid_map` and `gid_map`
    /// must be exactly that one id each.
    pub host_ids: Option<(u32, u32)>,
    /// The unprivileged host id the run's root (uid and gid 0) maps to, for a
    /// runtime that sets its sandbox up as root inside (an OCI runtime): the
    /// maps then hold that one line beside the run's own, and nothing else.
    pub root_host_id: Option<u32>,
}

/// Parses the probe's output into facts (`uid`, `gid`, `cap_eff`, `cap_prm`,
/// `cap_bnd`, `no_new_privs`, `seccomp`, `uid_map`, `gid_map`, `hostname`,
/// `interfaces`, `process_count`, `env_names`, `mounts`, `toolchain` when one was
/// asked for, and `complete` — whether the output ended).
pub fn parse(output: &str) -> BTreeMap<String, Value> {
    let mut sections: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut current = None;
    for line in output.lines() {
        if let Some(name) = line.strip_prefix("@@") {
            current = Some(name);
            sections.entry(name).or_default();
        } else if let Some(name) = current {
            sections.entry(name).or_default().push(line);
        }
    }
    let lines = |name: &str| sections.get(name).cloned().unwrap_or_default();
    let mut facts = BTreeMap::new();
    for line in lines("status") {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let fact = match key {
            "Uid" | "Gid" => json!(
                value
                    .split_whitespace()
                    .filter_map(|v| v.parse::<u32>().ok())
                    .collect::<Vec<_>>()
            ),
            "NoNewPrivs" | "Seccomp" => value.parse::<u64>().map_or(json!(value), |v| json!(v)),
            _ => json!(value),
        };
        let name = match key {
            "Uid" => "uid",
            "Gid" => "gid",
            "CapEff" => "cap_eff",
            "CapPrm" => "cap_prm",
            "CapBnd" => "cap_bnd",
            "NoNewPrivs" => "no_new_privs",
            "Seccomp" => "seccomp",
            _ => continue,
        };
        facts.insert(name.to_owned(), fact);
    }
    for map in ["uid_map", "gid_map"] {
        facts.insert(
            map.into(),
            json!(
                lines(map)
                    .iter()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect::<Vec<_>>()
            ),
        );
    }
    facts.insert("mounts".into(), json!(mounts(&lines("mounts"))));
    if let Some(version) = lines("toolchain").first() {
        facts.insert("toolchain".into(), json!(version.trim()));
    }
    if let Some(hostname) = lines("hostname").first() {
        facts.insert("hostname".into(), json!(hostname.trim()));
    }
    let words = |name: &str| -> Vec<String> {
        lines(name)
            .iter()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect()
    };
    facts.insert("interfaces".into(), json!(words("interfaces")));
    facts.insert("absent".into(), json!(words("absent")));
    // `RESULT TARGET` lines: what the kernel answered for each point.
    for section in ["writes", "masked"] {
        let answers: BTreeMap<&str, &str> = lines(section)
            .iter()
            .filter_map(|line| line.split_once(' '))
            .map(|(result, target)| (target, result))
            .collect();
        facts.insert(section.into(), json!(answers));
    }
    let namespaces: BTreeMap<String, Value> = lines("namespaces")
        .iter()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (kind, run, host) = (fields.next()?, fields.next()?, fields.next()?);
            Some((kind.to_owned(), json!({ "run": run, "host": host })))
        })
        .collect();
    facts.insert("namespaces".into(), json!(namespaces));
    facts.insert("cgroups".into(), json!(words("cgroups")));
    if let Some(count) = lines("process_count")
        .first()
        .and_then(|c| c.trim().parse::<u64>().ok())
    {
        facts.insert("process_count".into(), json!(count));
    }
    let env: BTreeSet<String> = words("env_names").into_iter().collect();
    facts.insert("env_names".into(), json!(env));
    facts.insert("complete".into(), json!(sections.contains_key("end")));
    facts
}

/// One mount of the run, from `/proc/self/mountinfo`: where, what, its options.
fn mounts(lines: &[&str]) -> Vec<Value> {
    lines
        .iter()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let separator = fields.iter().position(|f| *f == "-")?;
            Some(json!({
                "root": fields.get(3)?,
                "target": fields.get(4)?,
                "options": fields.get(5)?,
                "fstype": fields.get(separator + 1)?,
            }))
        })
        .collect()
}

/// The device nodes a runtime binds one by one from the host's `/dev` (the
/// mount's root in `/proc/<pid>/mountinfo`): a character device cannot be
/// executed, so `nosuid` changes nothing on such a mount.
const DEVICE_NODES: [&str; 6] = ["/null", "/zero", "/full", "/random", "/urandom", "/tty"];

/// What every mount of a run must carry: `nosuid` everywhere but a bind of one
/// device node ([`DEVICE_NODES`]); `nodev` everywhere but the device nodes and
/// the terminal instance; read-only `/`, `/sys` and `/proc/sys`. One sentence
/// per mount that breaks it.
fn mount_mismatches(facts: &BTreeMap<String, Value>) -> Vec<String> {
    let Some(mounts) = facts
        .get("mounts")
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
    else {
        return vec!["the probe saw no mount table".to_owned()];
    };
    let mut mismatches = Vec::new();
    for mount in mounts {
        let field = |name: &str| mount.get(name).and_then(Value::as_str).unwrap_or("");
        let (target, fstype) = (field("target"), field("fstype"));
        let options: Vec<&str> = field("options").split(',').collect();
        let device_node = fstype == "devtmpfs" && DEVICE_NODES.contains(&field("root"));
        if !options.contains(&"nosuid") && !device_node {
            mismatches.push(format!("{target} ({fstype}) is mounted without nosuid"));
        }
        let devices = matches!(fstype, "devtmpfs" | "devpts");
        if !devices && !options.contains(&"nodev") {
            mismatches.push(format!("{target} ({fstype}) is mounted without nodev"));
        }
        if matches!(target, "/" | "/sys" | "/proc/sys") && !options.contains(&"ro") {
            mismatches.push(format!(
                "{target} is mounted read-write, expected read-only"
            ));
        }
    }
    mismatches
}

/// Compares `facts` with `expected`; one sentence per difference.
pub fn compare(facts: &BTreeMap<String, Value>, expected: &Expected) -> Vec<String> {
    let mut mismatches = Vec::new();
    if facts.get("complete") != Some(&json!(true)) {
        mismatches.push("the probe's output ended early".to_owned());
    }
    for (name, id) in [("uid", expected.uid), ("gid", expected.gid)] {
        let ids = facts.get(name).and_then(Value::as_array);
        let all = ids.is_some_and(|ids| !ids.is_empty() && ids.iter().all(|v| v == &json!(id)));
        if !all {
            mismatches.push(format!(
                "{name} inside is {}, the identity plan says {id}",
                show(facts.get(name))
            ));
        }
    }
    for (name, set) in [
        ("cap_eff", "effective"),
        ("cap_prm", "permitted"),
        ("cap_bnd", "bounding"),
    ] {
        match facts.get(name).and_then(Value::as_str) {
            Some(caps) if u64::from_str_radix(caps, 16) == Ok(0) => {}
            other => mismatches.push(format!(
                "{set} capabilities are {}, expected none (0)",
                other.unwrap_or("unknown")
            )),
        }
    }
    for map in ["uid_map", "gid_map"] {
        mismatches.extend(host_root_mapped(facts, map));
    }
    if let Some((host_uid, host_gid)) = expected.host_ids {
        for (map, inside, host) in [
            ("uid_map", expected.uid, host_uid),
            ("gid_map", expected.gid, host_gid),
        ] {
            mismatches.extend(map_mismatch(
                facts,
                map,
                (inside, host),
                expected.root_host_id,
            ));
        }
    }
    mismatches.extend(shared_namespaces(facts));
    for (name, want, what) in [
        ("no_new_privs", 1, "no_new_privs"),
        ("seccomp", 2, "seccomp mode (2 = filter)"),
    ] {
        if facts.get(name) != Some(&json!(want)) {
            mismatches.push(format!(
                "{what} is {}, expected {want}",
                show(facts.get(name))
            ));
        }
    }
    let interfaces: Vec<&str> = facts
        .get("interfaces")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if interfaces != ["lo"] {
        mismatches.push(format!(
            "network interfaces are {interfaces:?}, expected only \"lo\""
        ));
    }
    let hostname = facts.get("hostname").and_then(Value::as_str);
    if hostname != Some(expected.hostname.as_str()) {
        mismatches.push(format!(
            "hostname is {}, expected the run id {:?}",
            show(facts.get("hostname")),
            expected.hostname
        ));
    }
    let extra: Vec<&str> = facts
        .get("env_names")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|name| !expected.env_names.contains(*name) && !SHELL_VARS.contains(name))
        .collect();
    if !extra.is_empty() {
        mismatches.push(format!(
            "environment variables {extra:?} are visible but not in the plan"
        ));
    }
    mismatches.extend(toolchain_mismatch(facts, expected.toolchain.as_deref()));
    mismatches.extend(mount_mismatches(facts));
    mismatches.extend(plan_mismatches(facts, &expected.mount_points));
    mismatches
}

/// A range of `map` (`inside outside count`, as the host reads it) that maps an
/// id of the run to host root.
fn host_root_mapped(facts: &BTreeMap<String, Value>, map: &str) -> Option<String> {
    let lines = facts.get(map).and_then(Value::as_array)?;
    lines.iter().filter_map(Value::as_str).find_map(|line| {
        let fields: Vec<u64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let [inside, outside, count] = fields[..] else {
            return Some(format!(
                "{map} has a line that does not read as a range: {line:?}"
            ));
        };
        (outside == 0 && count > 0)
            .then(|| format!("{map} maps id {inside} of the run to host root ({line:?})"))
    })
}

/// `map` unless it maps exactly `inside` to `host`, one id, and nothing else.
fn map_mismatch(
    facts: &BTreeMap<String, Value>,
    map: &str,
    (inside, host): (u32, u32),
    root: Option<u32>,
) -> Option<String> {
    let mut want = vec![format!("{inside} {host} 1")];
    want.extend(root.map(|root| format!("0 {root} 1")));
    want.sort();
    let mut lines: Vec<&str> = facts
        .get(map)
        .and_then(Value::as_array)
        .map(|lines| lines.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    lines.sort_unstable();
    (lines != want).then(|| match root {
        None => format!("{map} is {lines:?}, the identity plan maps {inside} to host {host} alone"),
        Some(root) => format!(
            "{map} is {lines:?}, the identity plan maps {inside} to host {host} and root to host {root} alone"
        ),
    })
}

/// Each namespace the run shares with the runner (or that could not be read).
fn shared_namespaces(facts: &BTreeMap<String, Value>) -> Vec<String> {
    let Some(namespaces) = facts.get("namespaces").and_then(Value::as_object) else {
        return vec!["the probe saw no namespaces".to_owned()];
    };
    if namespaces.is_empty() {
        return vec!["the probe saw no namespaces".to_owned()];
    }
    namespaces
        .iter()
        .filter_map(|(kind, ids)| {
            let run = ids.get("run").and_then(Value::as_str).unwrap_or("unknown");
            let host = ids.get("host").and_then(Value::as_str).unwrap_or("unknown");
            if run == "unknown" {
                Some(format!("the run's {kind} namespace could not be read"))
            } else {
                (run == host).then(|| format!("the run shares the host's {kind} namespace ({run})"))
            }
        })
        .collect()
}

/// Each mount point of the applied plan read back from the run's mount table:
/// there (or, for a part of the kernel's `/proc` or `/sys`, absent from this
/// kernel), and mounted `ro` where the plan leaves it read-only (the last mount
/// at a target is the one the run sees).
fn plan_mismatches(facts: &BTreeMap<String, Value>, points: &[MountPoint]) -> Vec<String> {
    let mounts: Vec<(&str, Vec<&str>)> = facts
        .get("mounts")
        .and_then(Value::as_array)
        .map(|mounts| {
            mounts
                .iter()
                .map(|m| {
                    let field = |name: &str| m.get(name).and_then(Value::as_str).unwrap_or("");
                    (field("target"), field("options").split(',').collect())
                })
                .collect()
        })
        .unwrap_or_default();
    let absent: Vec<&str> = facts
        .get("absent")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let answer = |section: &str, target: &str| {
        facts
            .get(section)
            .and_then(|answers| answers.get(line_word(target).as_ref()))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut mismatches = Vec::new();
    for point in points {
        let target = point.target.as_str();
        match mounts.iter().rev().find(|(at, _)| *at == target) {
            None if point.kernel_part && absent.contains(&target) => continue,
            None => mismatches.push(format!("{target} is not mounted, the plan mounts it")),
            // A masked file shown as the null device keeps nothing written
            // to it, whatever its mount's flags: the write answer says so.
            Some((_, options))
                if point.read_only
                    && !options.contains(&"ro")
                    && !(point.masked
                        && answer("writes", target).as_deref() == Some("discarded")) =>
            {
                mismatches.push(format!("{target} is writable, the plan makes it read-only"));
            }
            Some(_) => {}
        }
        if point.read_only {
            match answer("writes", target).as_deref() {
                Some("refused" | "discarded" | "device") => {}
                Some("accepted") => mismatches.push(format!(
                    "{target} accepts a write, the plan makes it read-only"
                )),
                Some(other) => {
                    mismatches.push(format!("{target}: a write could not be tried ({other})"))
                }
                // The run's own procfs or sysfs, which the host may not ask.
                None if point.on_kernel_fs() => {}
                None => mismatches.push(format!("{target}: no write was tried")),
            }
        }
        if point.masked {
            match answer("masked", target).as_deref() {
                Some("hidden") => {}
                Some(shown) => {
                    mismatches.push(format!("{target} shows {shown}, the plan hides it"))
                }
                None if point.on_kernel_fs() => {}
                None => mismatches.push(format!("{target}: what it shows was not read")),
            }
        }
    }
    mismatches
}

/// Whether the declared toolchain (`PROGRAM [VERSION]`) is what the run has: its
/// program found, and its version line showing the declared version.
fn toolchain_mismatch(facts: &BTreeMap<String, Value>, declared: Option<&str>) -> Option<String> {
    let declared = declared?;
    let mut words = declared.split_whitespace();
    let program = words.next()?;
    let version: Vec<&str> = words.collect();
    let seen = facts.get("toolchain").and_then(Value::as_str);
    let Some(seen) = seen.filter(|line| !line.ends_with("not found in the run")) else {
        return Some(format!(
            "the declared toolchain {declared:?} is not in the run ({program} not found)"
        ));
    };
    // `1.95` is kept by `1.95.0`: each declared word begins a word of the line.
    let shown: Vec<&str> = seen.split_whitespace().collect();
    let has_version = version
        .iter()
        .all(|word| shown.iter().any(|seen| seen.starts_with(word)));
    (!has_version).then(|| format!("the declared toolchain is {declared:?}, the run has {seen:?}"))
}

/// `text` as one word of a line of the probe's output: a backslash and a
/// newline escaped, so a path cannot end its line and forge the next.
pub fn line_word(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains(['\\', '\n']) {
        text.replace('\\', "\\\\").replace('\n', "\\n").into()
    } else {
        text.into()
    }
}

/// The observation of `output` against `expected`.
pub fn observe(output: &str, expected: &Expected) -> ObservedBoundary {
    let facts = parse(output);
    let mismatches = compare(&facts, expected);
    ObservedBoundary {
        facts,
        mismatches,
        previews: Vec::new(),
    }
}

/// What a backend read of the probed process from the host, the raw material
/// of [`proc_sections`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcFacts {
    /// `/proc/<pid>/status`.
    pub status: String,
    /// `/proc/<pid>/uid_map`.
    pub uid_map: String,
    /// `/proc/<pid>/gid_map`.
    pub gid_map: String,
    /// `/proc/<pid>/cgroup`.
    pub cgroup: String,
    /// `/proc/<pid>/net/dev`.
    pub net_dev: String,
    /// `/proc/<pid>/environ` (NUL-separated `NAME=VALUE` entries).
    pub environ: Vec<u8>,
    /// `/proc/<pid>/mountinfo`.
    pub mountinfo: String,
    /// Each of [`NAMESPACES`] as `(the run's link, the runner's link)`, e.g.
    /// `("net:[4026532001]", "net:[4026531840]")`; `unknown` where unreadable.
    pub namespaces: Vec<(String, String)>,
    /// The hostname in the process's UTS namespace.
    pub hostname: String,
    /// How many processes its pid namespace has, when it could be read.
    pub process_count: Option<usize>,
}

/// The sections [`parse`] reads, from what the host read of the probed process
/// (a fact that could not be read stays empty, which the comparison reports).
pub fn proc_sections(facts: &ProcFacts) -> String {
    let mut sections: BTreeMap<&str, String> = BTreeMap::new();
    sections.insert(
        "status",
        status_section(&facts.status, &facts.uid_map, &facts.gid_map),
    );
    sections.insert("uid_map", facts.uid_map.clone());
    sections.insert("gid_map", facts.gid_map.clone());
    sections.insert("hostname", format!("{}\n", facts.hostname));
    sections.insert(
        "namespaces",
        NAMESPACES
            .iter()
            .zip(&facts.namespaces)
            .map(|(kind, (run, host))| format!("{kind} {run} {host}\n"))
            .collect(),
    );
    sections.insert("cgroups", facts.cgroup.clone());
    sections.insert(
        "interfaces",
        facts
            .net_dev
            .lines()
            .skip(2)
            .filter_map(|line| line.split_once(':'))
            .map(|(name, _)| format!("{}\n", name.trim()))
            .collect(),
    );
    sections.insert(
        "process_count",
        facts
            .process_count
            .map(|n| format!("{n}\n"))
            .unwrap_or_default(),
    );
    sections.insert(
        "env_names",
        facts
            .environ
            .split(|b| *b == 0)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                let name = entry.split(|b| *b == b'=').next().unwrap_or_default();
                format!("{}\n", String::from_utf8_lossy(name))
            })
            .collect(),
    );
    sections.insert("mounts", facts.mountinfo.clone());
    let mut out = String::new();
    for (name, body) in sections {
        out.push_str(&format!("@@{name}\n{body}"));
        if !body.is_empty() && !body.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// The toolchain section of the probe shell's output: its header and the first
/// line after it, nothing else. A program of the run could write more to the
/// shell's stdout (it is the same user), but never another section: the facts
/// read from the host stay as read.
pub fn toolchain_section(output: &str) -> String {
    let mut lines = output.lines();
    match (lines.next(), lines.next()) {
        (Some("@@toolchain"), Some(version)) if !version.starts_with("@@") => {
            format!("@@toolchain\n{version}\n")
        }
        (Some("@@toolchain"), _) => "@@toolchain\n".into(),
        _ => String::new(),
    }
}

/// Host ids (as `/proc/<pid>/status` shows them to the host) as the process
/// sees them in its user namespace, through its `map` (`inside outside count`
/// lines, `outside` in the host's terms): an id the map lacks is the overflow
/// id 65534, as the kernel shows it inside.
pub fn ids_inside(ids: &str, map: &str) -> String {
    let ranges: Vec<(u64, u64, u64)> = map
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(|f| f.parse::<u64>().ok());
            Some((fields.next()??, fields.next()??, fields.next()??))
        })
        .collect();
    ids.split_whitespace()
        .map(|id| {
            let Ok(id) = id.parse::<u64>() else {
                return id.to_owned();
            };
            ranges
                .iter()
                .find(|(_, outside, count)| (*outside..outside + count).contains(&id))
                .map_or(65534, |(inside, outside, _)| inside + (id - outside))
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\t")
}

/// The `@@status` section from the text of `/proc/<pid>/status` as the host
/// reads it: the [`STATUS_KEYS`] lines, the ids shown as the process sees them
/// through its `uid_map` and `gid_map`.
pub fn status_section(status: &str, uid_map: &str, gid_map: &str) -> String {
    status
        .lines()
        .filter(|line| STATUS_KEYS.iter().any(|key| line.starts_with(key)))
        .map(|line| match line.split_once(':') {
            // The host sees the ids as mapped; the run sees its own.
            Some(("Uid", ids)) => format!("Uid:\t{}\n", ids_inside(ids, uid_map)),
            Some(("Gid", ids)) => format!("Gid:\t{}\n", ids_inside(ids, gid_map)),
            _ => format!("{line}\n"),
        })
        .collect()
}

fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "unknown".to_owned(), Value::to_string)
}

#[cfg(test)]
mod tests;
