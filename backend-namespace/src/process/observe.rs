//! The probe `seal` runs inside the sealed boundary, its parser, and the comparison
//! of what it saw with what the contract and the plan ask for.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use workspace_core::boundary::ObservedBoundary;

/// The probe: a `/bin/sh -c` script printing one `@@section` header per fact.
pub const PROBE_SCRIPT: &str = "\
echo @@status; grep -E '^(Uid|Gid|CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status
echo @@uid_map; cat /proc/self/uid_map
echo @@hostname; cat /proc/sys/kernel/hostname
echo @@interfaces; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '
echo @@process_count; ls /proc | grep -c '^[0-9][0-9]*$'
echo @@env_names; env | cut -d= -f1
echo @@end
";

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
}

/// Parses the probe's output into facts (`uid`, `gid`, `cap_eff`, `cap_prm`,
/// `cap_bnd`, `no_new_privs`, `seccomp`, `uid_map`, `hostname`, `interfaces`,
/// `process_count`, `env_names`, and `complete` — whether the output ended).
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
    facts.insert(
        "uid_map".into(),
        json!(
            lines("uid_map")
                .iter()
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect::<Vec<_>>()
        ),
    );
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
    match facts.get("cap_eff").and_then(Value::as_str) {
        Some(caps) if u64::from_str_radix(caps, 16) == Ok(0) => {}
        other => mismatches.push(format!(
            "effective capabilities are {}, expected none (0)",
            other.unwrap_or("unknown")
        )),
    }
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
    mismatches
}

/// The observation of `output` against `expected`.
pub fn observe(output: &str, expected: &Expected) -> ObservedBoundary {
    let facts = parse(output);
    let mismatches = compare(&facts, expected);
    ObservedBoundary { facts, mismatches }
}

fn show(value: Option<&Value>) -> String {
    value.map_or_else(|| "unknown".to_owned(), Value::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

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
@@hostname
run-1
@@interfaces
lo
@@process_count
3
@@env_names
PATH
PWD
@@end
";

    fn expected() -> Expected {
        Expected {
            uid: 1000,
            gid: 1000,
            hostname: "run-1".into(),
            env_names: BTreeSet::from(["PATH".to_owned(), "HOME".to_owned()]),
        }
    }

    #[test]
    fn a_sealed_observation_has_no_mismatches() {
        let observed = observe(GOOD, &expected());
        assert_eq!(observed.mismatches, Vec::<String>::new());
        assert_eq!(observed.facts["uid_map"], json!(["1000 101000 1"]));
        assert_eq!(observed.facts["process_count"], json!(3));
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
}
