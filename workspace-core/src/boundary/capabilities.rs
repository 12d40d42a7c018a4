//! What each boundary implementation declares it can enforce.
//!
//! A backend either enforces a declared setting or the contract is rejected before
//! the run starts; nothing is silently ignored. Every capability defaults to
//! "unsupported", so a backend claims only what it has written code for.

use serde::{Deserialize, Serialize};

use crate::contract::{
    CheckoutOrigin, EnvironmentSection, FilesystemSection, IdentitySection, IsolationLevel,
    Materialization, MountMode, NetworkMode, Problems, ProcessSection, PromotionSection,
    PromotionTarget, SourceSection, UserClass,
};

/// What a source boundary supports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCapabilities {
    /// Checkout origins it can provision.
    pub origins: Vec<CheckoutOrigin>,
    /// Materializations it can make (`auto` is always accepted: the backend picks).
    pub materializations: Vec<Materialization>,
    /// Whether it initialises declared submodules.
    pub submodules: bool,
    /// Whether it copies declared untracked inputs.
    pub untracked_inputs: bool,
    /// Whether it digests the files the contract pins (fixtures, lockfiles)
    /// into [`SourceRecord::pinned`](super::SourceRecord::pinned).
    pub pinned_files: bool,
}

/// What a filesystem boundary supports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesystemCapabilities {
    /// Read-only paths inside writable ones.
    pub read_only_paths: bool,
    /// Excluded (masked) paths.
    pub excluded_paths: bool,
    /// Read-only host mounts.
    pub host_mounts: bool,
    /// Read-write host mounts.
    pub writable_host_mounts: bool,
}

/// What a process boundary supports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCapabilities {
    /// Isolation levels it provides.
    pub isolation: Vec<IsolationLevel>,
    /// Whether every run gets a network namespace of its own, so the ports it
    /// declares cannot collide with another run's. Without one, the runner leases
    /// each declared port on the host. (Cache prefixes and schema names are always
    /// leased by the runner.)
    pub private_network: bool,
    /// Whether it shows a service's template (`environment.services[].template`)
    /// to the run through a copy-on-write layer of the run's own.
    pub service_templates: bool,
    /// Whether a sealed run's sandbox keeps [`SealPlan::held_open`](super::SealPlan::held_open)
    /// open for its whole life, so the run's capacity stays held while no
    /// runner holds it (detached, suspended).
    #[serde(default)]
    pub holds_capacity: bool,
    /// Whether a command writes to the files [`CommandSpec::output`](super::CommandSpec::output)
    /// names (its streams following them when asked), so the runner can keep
    /// what its background processes write after it ended.
    #[serde(default)]
    pub output_files: bool,
    /// Whether it publishes each `process.ports` entry of a run with a network
    /// of its own as a preview endpoint on the host's loopback (forwarding into
    /// the run). Without it, a private network's ports cannot be reached from
    /// the host, and a contract that declares any is refused.
    #[serde(default)]
    pub preview_ports: bool,
    /// Whether it keeps `environment.limits.disk`: the run's writable layer on a
    /// disk of that size of its own ([`ProcessBoundary::make_disk`](super::ProcessBoundary::make_disk)).
    #[serde(default)]
    pub disk_caps: bool,
    /// Whether it runs a run on the root filesystem of the pinned OCI image
    /// `environment.runtime.image` names, instead of the host's base system.
    pub images: bool,
}

/// A kind of resource or time cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitKind {
    /// `environment.limits.cpus`.
    Cpu,
    /// `environment.limits.memory`.
    Memory,
    /// `environment.limits.pids`.
    Pids,
    /// `environment.limits.disk`.
    Disk,
    /// `environment.limits.tmp`.
    Tmp,
    /// `environment.limits.wall_time`.
    WallTime,
    /// `environment.limits.open_files`.
    OpenFiles,
}

/// What an environment boundary supports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvironmentCapabilities {
    /// Network modes it enforces.
    pub network: Vec<NetworkMode>,
    /// Limits it enforces.
    pub limits: Vec<LimitKind>,
    /// Whether it starts services with health checks.
    pub services: bool,
}

/// What an identity boundary supports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityCapabilities {
    /// User classes it can run as.
    pub users: Vec<UserClass>,
    /// Whether it injects credentials from a credential source.
    pub credentials: bool,
}

/// What a promotion boundary supports.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotionCapabilities {
    /// Targets it can promote to.
    pub targets: Vec<PromotionTarget>,
}

fn unsupported(problems: &mut Problems, field: &str, backend: &str, what: impl std::fmt::Display) {
    problems.push(field, format!("{backend} cannot enforce {what}"));
}

impl SourceCapabilities {
    /// Records every setting of `section` this implementation cannot provide.
    pub fn check(&self, backend: &str, section: &SourceSection, problems: &mut Problems) {
        if !self.origins.contains(&section.origin) {
            unsupported(
                problems,
                "source.origin",
                backend,
                format!("origin {:?}", section.origin),
            );
        }
        if section.materialization != Materialization::Auto
            && !self.materializations.contains(&section.materialization)
        {
            unsupported(
                problems,
                "source.materialization",
                backend,
                format!("materialization {:?}", section.materialization),
            );
        }
        if !section.submodules.is_empty() && !self.submodules {
            unsupported(problems, "source.submodules", backend, "submodules");
        }
        if !section.inputs.is_empty() && !self.untracked_inputs {
            unsupported(problems, "source.inputs", backend, "untracked inputs");
        }
    }

    /// Records the files `environment` pins that this implementation cannot
    /// digest.
    pub fn check_pinned(
        &self,
        backend: &str,
        environment: &EnvironmentSection,
        problems: &mut Problems,
    ) {
        if self.pinned_files {
            return;
        }
        if !environment.fixtures.is_empty() {
            unsupported(problems, "environment.fixtures", backend, "pinned fixtures");
        }
        if !environment.runtime.lockfiles.is_empty() {
            unsupported(
                problems,
                "environment.runtime.lockfiles",
                backend,
                "lockfile digests",
            );
        }
    }
}

impl FilesystemCapabilities {
    /// Records every setting of `section` this implementation cannot enforce.
    pub fn check(&self, backend: &str, section: &FilesystemSection, problems: &mut Problems) {
        if !section.read_only.is_empty() && !self.read_only_paths {
            unsupported(problems, "filesystem.read_only", backend, "read-only paths");
        }
        if !section.excluded.is_empty() && !self.excluded_paths {
            unsupported(problems, "filesystem.excluded", backend, "excluded paths");
        }
        for (i, mount) in section.host_mounts.iter().enumerate() {
            let (supported, what) = match mount.mode {
                MountMode::ReadOnly => (self.host_mounts, "host mounts"),
                MountMode::DangerReadWrite => (self.writable_host_mounts, "read-write host mounts"),
            };
            if !supported {
                unsupported(
                    problems,
                    &format!("filesystem.host_mounts[{i}]"),
                    backend,
                    what,
                );
            }
        }
    }
}

impl ProcessCapabilities {
    /// Records every setting of `section` this implementation cannot enforce.
    pub fn check(&self, backend: &str, section: &ProcessSection, problems: &mut Problems) {
        if !self.isolation.contains(&section.isolation) {
            unsupported(
                problems,
                "process.isolation",
                backend,
                format!("isolation {:?}", section.isolation),
            );
        }
        if section.preview_check.is_some() && !(self.private_network && self.preview_ports) {
            // Without a network of its own a run publishes no preview endpoint
            // the check could go through.
            unsupported(
                problems,
                "process.preview_check",
                backend,
                "a preview check (it publishes no preview endpoints)",
            );
        }
        if !section.ports.is_empty() && self.private_network && !self.preview_ports {
            // The ports live in the run's own network, which nothing on the
            // host could reach.
            unsupported(
                problems,
                "process.ports",
                backend,
                "ports of a private network (it publishes no preview endpoints)",
            );
        }
    }
}

impl ProcessCapabilities {
    /// Records every setting of the environment `section` this implementation
    /// applies and cannot keep: a pinned image, service templates.
    pub fn check_environment(
        &self,
        backend: &str,
        section: &EnvironmentSection,
        problems: &mut Problems,
    ) {
        if section.runtime.image.is_some() && !self.images {
            unsupported(
                problems,
                "environment.runtime.image",
                backend,
                "a pinned image (it runs the host's base system; `--backend container` runs images)",
            );
        }
        if section.limits.disk.is_some() && !self.disk_caps {
            unsupported(
                problems,
                "environment.limits.disk",
                backend,
                "a disk cap (a file system of the cap's size for the run's writable layer)",
            );
        }
        if self.service_templates {
            return;
        }
        for (i, service) in section.services.iter().enumerate() {
            if service.template.is_some() {
                unsupported(
                    problems,
                    &format!("environment.services[{i}].template"),
                    backend,
                    "service templates (a copy-on-write layer per run)",
                );
            }
        }
    }
}

impl EnvironmentCapabilities {
    /// Records every setting of `section` this implementation cannot enforce.
    pub fn check(&self, backend: &str, section: &EnvironmentSection, problems: &mut Problems) {
        if !self.network.contains(&section.network.mode) {
            unsupported(
                problems,
                "environment.network.mode",
                backend,
                format!(
                    "network mode {}",
                    serde_json::to_value(section.network.mode)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_else(|| format!("{:?}", section.network.mode))
                ),
            );
        }
        let limits = &section.limits;
        let declared = [
            (LimitKind::Cpu, "cpus", limits.cpus.is_some()),
            (LimitKind::Memory, "memory", limits.memory.is_some()),
            (LimitKind::Pids, "pids", limits.pids.is_some()),
            (LimitKind::Disk, "disk", limits.disk.is_some()),
            (LimitKind::Tmp, "tmp", limits.tmp.is_some()),
            (LimitKind::WallTime, "wall_time", limits.wall_time.is_some()),
            (
                LimitKind::OpenFiles,
                "open_files",
                limits.open_files.is_some(),
            ),
        ];
        for (kind, name, set) in declared {
            if set && !self.limits.contains(&kind) {
                unsupported(
                    problems,
                    &format!("environment.limits.{name}"),
                    backend,
                    format!("a {name} limit"),
                );
            }
        }
        if !section.services.is_empty() && !self.services {
            unsupported(problems, "environment.services", backend, "services");
        }
    }
}

impl IdentityCapabilities {
    /// Records every setting of `section` this implementation cannot enforce.
    pub fn check(&self, backend: &str, section: &IdentitySection, problems: &mut Problems) {
        if !self.users.contains(&section.user) {
            unsupported(
                problems,
                "identity.user",
                backend,
                format!("user class {:?}", section.user),
            );
        }
        if !section.credentials.is_empty() && !self.credentials {
            unsupported(
                problems,
                "identity.credentials",
                backend,
                "credential injection",
            );
        }
    }
}

impl PromotionCapabilities {
    /// Records every setting of `section` this implementation cannot provide.
    pub fn check(&self, backend: &str, section: &PromotionSection, problems: &mut Problems) {
        if !self.targets.contains(&section.target) {
            unsupported(
                problems,
                "promotion.target",
                backend,
                format!("target {:?}", section.target),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::HttpCheck;

    #[test]
    fn a_service_template_needs_a_boundary_that_layers_it() {
        let contract = crate::contract::Contract::from_toml(
            "objective = \"t\"\nshape = \"narrow-fix\"\n[filesystem]\nwritable = [\".\"]\n\
             [[environment.services]]\nname = \"db\"\ncommand = [\"pg\"]\n\
             health = { tcp = 5432 }\n\
             [environment.services.template]\npath = \"/tmp/pgdata\"\ncommand = [\"initdb\"]\n",
        )
        .unwrap();
        let environment = &contract.environment;
        let mut without = ProcessCapabilities {
            isolation: vec![IsolationLevel::Task],
            private_network: true,
            ..ProcessCapabilities::default()
        };
        let mut problems = Problems::new();
        without.check_environment("host", environment, &mut problems);
        assert_eq!(
            problems.to_string(),
            "environment.services[0].template: host cannot enforce service templates (a copy-on-write layer per run)"
        );
        without.service_templates = true;
        let mut problems = Problems::new();
        without.check_environment("namespace", environment, &mut problems);
        assert!(problems.is_empty(), "{problems}");
    }

    #[test]
    fn a_pinned_image_needs_a_boundary_that_runs_it() {
        let mut environment = EnvironmentSection::default();
        environment.runtime.image = Some(format!("oci-layout:/i@sha256:{}", "0".repeat(64)));
        let mut host = ProcessCapabilities::default();
        let mut problems = Problems::new();
        host.check_environment("namespace", &environment, &mut problems);
        assert_eq!(
            problems.to_string(),
            "environment.runtime.image: namespace cannot enforce a pinned image (it runs the host's base system; `--backend container` runs images)"
        );
        host.images = true;
        let mut problems = Problems::new();
        host.check_environment("container", &environment, &mut problems);
        assert!(problems.is_empty(), "{problems}");
    }

    #[test]
    fn a_disk_cap_needs_a_boundary_that_makes_disks() {
        let mut environment = EnvironmentSection::default();
        environment.limits.disk = Some(crate::contract::ByteSize(1 << 30));
        let mut process = ProcessCapabilities::default();
        let mut problems = Problems::new();
        process.check_environment("container", &environment, &mut problems);
        assert_eq!(
            problems.to_string(),
            "environment.limits.disk: container cannot enforce a disk cap (a file system of the cap's size for the run's writable layer)"
        );
        process.disk_caps = true;
        let mut problems = Problems::new();
        process.check_environment("namespace", &environment, &mut problems);
        assert!(problems.is_empty(), "{problems}");
    }

    #[test]
    fn a_preview_check_needs_a_network_of_its_own() {
        let section = ProcessSection {
            ports: vec![8000],
            preview_check: Some(HttpCheck {
                port: 8000,
                path: "/".into(),
                status: 200,
            }),
            ..ProcessSection::default()
        };
        let shared = ProcessCapabilities {
            isolation: vec![IsolationLevel::Task],
            ..ProcessCapabilities::default()
        };
        let mut problems = Problems::new();
        shared.check("host", &section, &mut problems);
        let text = problems.to_string();
        assert!(
            text.starts_with("process.preview_check: host cannot enforce a preview check"),
            "{text}"
        );
        let unpublished = ProcessCapabilities {
            private_network: true,
            ..shared.clone()
        };
        let mut problems = Problems::new();
        unpublished.check("container", &section, &mut problems);
        let text = problems.to_string();
        assert!(
            text.contains("process.preview_check: container cannot enforce a preview check")
                && text
                    .contains("process.ports: container cannot enforce ports of a private network"),
            "{text}"
        );
        let private = ProcessCapabilities {
            private_network: true,
            preview_ports: true,
            ..shared
        };
        let mut problems = Problems::new();
        private.check("namespace", &section, &mut problems);
        assert!(problems.is_empty(), "{problems}");
    }
}
