//! The Environment boundary: runtime, dependencies, services, network and limits.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::checks;
use super::problem::{Problems, indexed};
use super::services::Service;
use super::units::{ByteSize, DurationSpec};

/// The runtime a run executes in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentSection {
    /// The pinned toolchain or image.
    #[serde(default)]
    pub runtime: Runtime,
    /// Host environment variables passed through by name. Empty (the default) passes
    /// none: an empty allowlist denies everything.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_allow: Vec<String>,
    /// Variables set for the run. Not for credentials: those go through
    /// `identity.credentials` so that their values stay out of the evidence.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Named test fixtures the run relies on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fixtures: Vec<Fixture>,
    /// Services started in the run's sandbox before it is sealed, in declared
    /// order, each gated by its health check (see [`Service`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
    /// What the run may reach over the network.
    #[serde(default)]
    pub network: Network,
    /// Resource and time caps.
    #[serde(default)]
    pub limits: Limits,
    /// What the run needs, as host capacity admission counts it (the caps are
    /// `limits`); without it, a hundredth of a core and 64 MiB (sized for a
    /// workspace idle most of its life), or the caps when smaller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<Reservation>,
    /// What happens when a declared layer cannot be applied or observed.
    #[serde(default)]
    pub assurance: Assurance,
}

/// The pinned runtime: a toolchain, an image, and the lockfiles that pin dependencies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Runtime {
    /// Toolchain and version the run expects (e.g. `rust 1.95.0`); recorded with the
    /// fingerprint the backend observes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolchain: Option<String>,
    /// The OCI image whose root filesystem the run's base system comes from,
    /// instead of the host's: `oci-layout:PATH@sha256:DIGEST` (see
    /// [`ImageReference`](super::ImageReference)). Kept by the container backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Lockfiles (relative to the workspace root) whose digests are recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lockfiles: Vec<String>,
}

/// A named fixture: a file in the workspace, optionally pinned by digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// The fixture's name.
    pub name: String,
    /// Its path relative to the workspace root.
    pub path: String,
    /// Its expected sha256 (hex); a different file fails the run before it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// What the run may reach over the network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// The network policy.
    #[serde(default)]
    pub mode: NetworkMode,
    /// With `mode = "allowlist"`: the `host:port` destinations that may be
    /// reached. A host is a name (`pypi.org`), every name below a suffix
    /// (`*.pythonhosted.org`), or an address literal (`10.0.0.7`,
    /// `[2001:db8::1]`); a name that resolves to a loopback, private,
    /// link-local or metadata address is refused unless that address is
    /// listed literally.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    /// With `mode = "allowlist"`: destinations that may not be reached even
    /// when `allow` covers them (deny wins).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// The network policy of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// No network at all but a private loopback interface.
    #[default]
    Deny,
    /// A private loopback only (the same as `deny` for outbound traffic; services of
    /// the run talk to each other over it).
    Loopback,
    /// Outbound connections to the listed destinations only.
    Allowlist,
}

/// Resource and time caps. An unset cap means the backend's default, which is
/// finite, except `disk`: unset, the run may fill what the host has free; set, it
/// needs a backend that enforces it (one that cannot rejects the contract).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// CPU share in cores (e.g. `1.5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Memory cap; a run beyond it is killed with cause "memory limit".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
    /// Cap on processes and threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u32>,
    /// Cap on the disk the run may fill (its changes and temporary files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<ByteSize>,
    /// Size of the private `/tmp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<ByteSize>,
    /// Wall-clock time of one command; after it the whole process tree is killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time: Option<DurationSpec>,
    /// Cap on open files per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u32>,
    /// The most of each output stream of one command (its stdout, its stderr)
    /// that is kept: in the evidence, in the output returned to the caller,
    /// and of what its background processes write after it ended (default
    /// 16 MiB each). Past it the first and the last half are kept and the
    /// record says how many bytes the stream carried. Output is never
    /// counted against `disk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<ByteSize>,
    /// What happens to a command whose stream passes `output`: `truncate`
    /// (the default: it runs on, the middle of its output is dropped) or
    /// `kill` (its tree is killed, cause `output-limit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_overflow: Option<OutputOverflow>,
}

/// What happens to a command whose output passes `limits.output`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OutputOverflow {
    /// It runs on; the evidence keeps the head and the tail of the stream.
    #[default]
    Truncate,
    /// Its whole tree is killed, cause `output-limit`; what it wrote up to
    /// then is kept as with `truncate`.
    Kill,
}

/// The most of each output stream of a command kept when `limits.output`
/// does not say: 16 MiB.
pub const DEFAULT_OUTPUT_BYTES: u64 = 16 << 20;

/// What a run needs of the host, as admission counts it: runs wait in line until
/// the host has this much free; their caps are [`Limits`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reservation {
    /// Cores the run needs (e.g. `0.5`), at most `limits.cpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Memory the run needs, at most `limits.memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<ByteSize>,
}

/// What happens when a declared layer cannot be applied or observed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Assurance {
    /// Any mismatch between the contract and what the probe observes fails the run
    /// closed, before the agent's command starts.
    #[default]
    Required,
    /// Mismatches are recorded in the evidence and the run goes on.
    BestEffort,
}

/// The largest CPU share accepted, in cores.
const MAX_CPUS: f64 = 4096.0;

impl EnvironmentSection {
    /// Whether the host variable `name` passes into the run. Only names on the
    /// allowlist do: an empty allowlist passes nothing.
    pub fn passes(&self, name: &str) -> bool {
        self.env_allow.iter().any(|allowed| allowed == name)
    }

    pub(crate) fn validate(&self, problems: &mut Problems) {
        for (i, path) in self.runtime.lockfiles.iter().enumerate() {
            checks::relative_path(problems, &indexed("environment.runtime.lockfiles", i), path);
        }
        if let Some(image) = &self.runtime.image
            && let Err(reason) = super::ImageReference::parse(image)
        {
            problems.push("environment.runtime.image", reason);
        }
        let mut allowed = Vec::new();
        for (i, name) in self.env_allow.iter().enumerate() {
            let field = indexed("environment.env_allow", i);
            if checks::env_name(problems, &field, name) {
                checks::unique_name(problems, &field, name, &mut allowed, "variable");
            }
        }
        for name in self.env.keys() {
            let field = format!("environment.env.{name}");
            if checks::env_name(problems, &field, name) && checks::looks_like_secret(name) {
                problems.push(
                    field,
                    "looks like a credential; inject it through identity.credentials so its value stays out of the evidence",
                );
            }
        }
        let mut fixtures = Vec::new();
        for (i, fixture) in self.fixtures.iter().enumerate() {
            let field = indexed("environment.fixtures", i);
            checks::unique_name(
                problems,
                &format!("{field}.name"),
                &fixture.name,
                &mut fixtures,
                "fixture",
            );
            checks::relative_path(problems, &format!("{field}.path"), &fixture.path);
            if fixture
                .sha256
                .as_ref()
                .is_some_and(|d| !crate::digest::is_sha256_hex(d))
            {
                problems.push(
                    format!("{field}.sha256"),
                    "is not a sha256 digest (64 hex digits)",
                );
            }
        }
        self.validate_network(problems);
        self.limits.validate(problems);
        if let Some(reservation) = &self.reservation {
            reservation.validate(&self.limits, problems);
        }
    }

    fn validate_network(&self, problems: &mut Problems) {
        match self.network.mode {
            NetworkMode::Allowlist if self.network.allow.is_empty() => problems.push(
                "environment.network.allow",
                "is empty, and an empty allowlist allows nothing; write mode = \"deny\" if that is meant",
            ),
            NetworkMode::Allowlist => {
                for (field, list) in [
                    ("environment.network.allow", &self.network.allow),
                    ("environment.network.deny", &self.network.deny),
                ] {
                    for (i, destination) in list.iter().enumerate() {
                        match crate::egress::Destination::parse(destination) {
                            Err(e) => problems.push(indexed(field, i), e.to_string()),
                            Ok(parsed) if field.ends_with("allow") && parsed.is_loopback() => {
                                problems.push(
                                    indexed(field, i),
                                    format!(
                                        "{destination:?} is a loopback address: inside a workspace it is the workspace's own, reached directly, and the host's is never reachable"
                                    ),
                                );
                            }
                            Ok(_) => {}
                        }
                    }
                }
            }
            NetworkMode::Deny | NetworkMode::Loopback
                if !self.network.allow.is_empty() || !self.network.deny.is_empty() =>
            {
                problems.push(
                    if self.network.allow.is_empty() {
                        "environment.network.deny"
                    } else {
                        "environment.network.allow"
                    },
                    "is only read with mode = \"allowlist\"; remove it or change the mode",
                )
            }
            NetworkMode::Deny | NetworkMode::Loopback => {}
        }
    }
}

impl Limits {
    fn validate(&self, problems: &mut Problems) {
        if let Some(cpus) = self.cpus
            && !(cpus.is_finite() && cpus > 0.0 && cpus <= MAX_CPUS)
        {
            problems.push(
                "environment.limits.cpus",
                format!("{cpus} is not a CPU share in (0, {MAX_CPUS}]"),
            );
        }
        if let Some(disk) = self.disk
            && disk.bytes() > 0
            && disk.bytes() < MIN_DISK_BYTES
        {
            problems.push(
                "environment.limits.disk",
                format!("{disk} is less than the smallest disk, 1 MiB (a checkout's own files need that much)"),
            );
        }
        let zero_checks = [
            ("memory", self.memory.map(ByteSize::bytes)),
            ("pids", self.pids.map(u64::from)),
            ("disk", self.disk.map(ByteSize::bytes)),
            ("tmp", self.tmp.map(ByteSize::bytes)),
            ("wall_time", self.wall_time.map(DurationSpec::as_millis)),
            ("open_files", self.open_files.map(u64::from)),
        ];
        for (name, value) in zero_checks {
            if value == Some(0) {
                problems.push(
                    format!("environment.limits.{name}"),
                    "is zero; nothing could run under it",
                );
            }
        }
        if self.output.is_some_and(|output| output.bytes() == 0) {
            problems.push(
                "environment.limits.output",
                "is zero; no output would be kept (write a small size to keep little)",
            );
        }
    }

    /// The most of each output stream of a command that is kept, in bytes:
    /// `output`, else [`DEFAULT_OUTPUT_BYTES`].
    pub fn output_bytes(&self) -> u64 {
        self.output.map_or(DEFAULT_OUTPUT_BYTES, ByteSize::bytes)
    }

    /// The CPU share in thousandths of a core, if set.
    pub fn cpu_millis(&self) -> Option<u64> {
        // Validation bounds `cpus` to (0, 4096], so the product fits.
        self.cpus.map(|c| (c * 1000.0).round() as u64)
    }
}

/// The smallest `environment.limits.disk`: a checkout's own files (its `.git`
/// at least) must fit.
pub const MIN_DISK_BYTES: u64 = 1 << 20;

/// What a run reserves without `environment.reservation`: a hundredth of a
/// core. An agent's workspace waits for a model most of its life; its CPU is
/// a share of the host's (its `limits.cpus` caps it), not a core set aside,
/// so a 2-core host admits 200 of them.
pub const DEFAULT_RESERVED_CPU_MILLIS: u64 = 10;
/// What a run reserves without `environment.reservation`: 64 MiB (an idle
/// live workspace uses about 2 MiB; a workspace that needs more for long says
/// so in `environment.reservation.memory`). Memory is admitted honestly: the
/// reservations of the runs on a host never add up to more than it has.
pub const DEFAULT_RESERVED_MEMORY: u64 = 64 << 20;

impl Reservation {
    fn validate(&self, limits: &Limits, problems: &mut Problems) {
        if let Some(cpus) = self.cpus {
            if !(cpus.is_finite() && cpus > 0.0 && cpus <= MAX_CPUS) {
                problems.push(
                    "environment.reservation.cpus",
                    format!("{cpus} is not a CPU share in (0, {MAX_CPUS}]"),
                );
            } else if limits.cpus.is_some_and(|cap| cpus > cap) {
                problems.push(
                    "environment.reservation.cpus",
                    "is more than environment.limits.cpus: a run cannot need more than its cap",
                );
            }
        }
        if let Some(memory) = self.memory {
            if memory.bytes() == 0 {
                problems.push("environment.reservation.memory", "is zero");
            } else if limits
                .memory
                .is_some_and(|cap| memory.bytes() > cap.bytes())
            {
                problems.push(
                    "environment.reservation.memory",
                    "is more than environment.limits.memory: a run cannot need more than its cap",
                );
            }
        }
    }

    /// The cores reserved, in thousandths: the declared need, else the default
    /// or `cap_millis` when that is smaller.
    pub fn cpu_millis(reservation: Option<&Self>, cap_millis: Option<u64>) -> u64 {
        // Validation bounds `cpus` to (0, 4096], so the product fits.
        match reservation.and_then(|r| r.cpus) {
            Some(cpus) => (cpus * 1000.0).round() as u64,
            None => cap_millis.map_or(DEFAULT_RESERVED_CPU_MILLIS, |cap| {
                cap.min(DEFAULT_RESERVED_CPU_MILLIS)
            }),
        }
    }

    /// The memory reserved, in bytes: the declared need, else the default or
    /// `cap_bytes` when that is smaller.
    pub fn memory_bytes(reservation: Option<&Self>, cap_bytes: Option<u64>) -> u64 {
        match reservation.and_then(|r| r.memory) {
            Some(memory) => memory.bytes(),
            None => cap_bytes.map_or(DEFAULT_RESERVED_MEMORY, |cap| {
                cap.min(DEFAULT_RESERVED_MEMORY)
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_reserves_what_it_needs_not_its_caps() {
        // The default preset's caps (2 cores, 4 GiB): a hundredth of a core, 64 MiB.
        assert_eq!(Reservation::cpu_millis(None, Some(2000)), 10);
        assert_eq!(Reservation::memory_bytes(None, Some(4 << 30)), 64 << 20);
        // Caps smaller than the default need are the need.
        assert_eq!(Reservation::cpu_millis(None, Some(5)), 5);
        assert_eq!(Reservation::memory_bytes(None, Some(32 << 20)), 32 << 20);
        // A declared need is what is reserved.
        let declared = Reservation {
            cpus: Some(1.5),
            memory: Some(ByteSize(1 << 30)),
        };
        assert_eq!(Reservation::cpu_millis(Some(&declared), Some(2000)), 1500);
        assert_eq!(Reservation::memory_bytes(Some(&declared), None), 1 << 30);
    }

    #[test]
    fn the_output_cap_reads_as_sizes_do_and_defaults_to_16_mib() {
        let limits: Limits =
            toml::from_str("output = \"2MiB\"\noutput_overflow = \"kill\"").unwrap();
        assert_eq!(limits.output_bytes(), 2 << 20);
        assert_eq!(limits.output_overflow, Some(OutputOverflow::Kill));
        assert_eq!(Limits::default().output_bytes(), DEFAULT_OUTPUT_BYTES);
        assert!(toml::from_str::<Limits>("output_overflow = \"stop\"").is_err());

        let zero = Limits {
            output: Some(ByteSize(0)),
            ..Limits::default()
        };
        let mut problems = Problems::new();
        zero.validate(&mut problems);
        let fields: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(fields, ["environment.limits.output"]);
    }

    #[test]
    fn a_need_above_its_cap_is_refused_naming_the_field() {
        let limits = Limits {
            cpus: Some(1.0),
            memory: Some(ByteSize(1 << 30)),
            ..Limits::default()
        };
        let reservation = Reservation {
            cpus: Some(2.0),
            memory: Some(ByteSize(2 << 30)),
        };
        let mut problems = Problems::new();
        reservation.validate(&limits, &mut problems);
        let fields: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            fields,
            [
                "environment.reservation.cpus",
                "environment.reservation.memory"
            ]
        );
    }
}
