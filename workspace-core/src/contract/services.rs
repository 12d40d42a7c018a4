//! Services a run depends on (`environment.services`) and their readiness checks.
//!
//! A service is a long-lived command of the run's own sandbox (a database, a dev
//! server, a queue): it starts before the run is sealed, in declared order after
//! the services it `depends_on`, and counts as ready once its `health` check
//! passes. The run's commands find it through its `connection` variables.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::checks;
use super::problem::{Problems, indexed};
use super::units::DurationSpec;

/// A service the run depends on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Unique name of the service within the contract (its logs are
    /// `services/NAME/stdout|stderr` in the evidence).
    pub name: String,
    /// Program and arguments, run inside the workspace's sandbox as the run's
    /// identity, from the workspace root.
    pub command: Vec<String>,
    /// Services that must be ready before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// When the service counts as ready.
    pub health: HealthCheck,
    /// Variables every command of the run gets to reach the service (e.g.
    /// `DATABASE_URL`). `${AGENT_WORKSPACE_DB_SCHEMA}` and
    /// `${AGENT_WORKSPACE_CACHE_PREFIX}` in a value are replaced by the run's
    /// leased names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub connection: BTreeMap<String, String>,
    /// How long the service may take to stop after `SIGTERM` when the run
    /// drains, before it is killed.
    #[serde(default = "default_stop_grace")]
    pub stop_grace: DurationSpec,
    /// A prepared state the service starts from (a database cluster, say),
    /// made once per host and shared, read-only, by every run that declares
    /// the same template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<ServiceTemplate>,
}

/// A service's prepared state: the directory `path` as `command` leaves it.
///
/// The first run that needs it runs `command` in its sandbox, as the run's
/// identity, with `path` an empty directory, and keeps what it made as the
/// template. Every run (that first one included) then sees the template at
/// `path` through a copy-on-write layer of its own: it may change anything
/// there, and neither the template nor another run sees the change. The
/// template is found again by a key: the command, the path, the run's
/// identity, the contract's `environment.env` and `environment.runtime`, the
/// checkout's initial state, and the names, sizes, modes and modification
/// times of everything under `inputs` (so an upgraded package makes a new
/// template). `command` must not depend on what differs between runs (leased
/// names, ports).
///
/// The command runs with the whole checkout visible and may read any file of
/// it, so the checkout is always part of the key: its commit's tree id, where
/// it came from (fresh, resumed, restored), its initial diff, the untracked
/// inputs copied in and the submodules initialised. Runs of one revision share
/// a template; a run of another revision makes its own (one run never sets
/// another's starting state). `inputs` names what the command reads from the
/// *host* (an installation directory); nothing needs naming in the checkout.
///
/// A template holds directories, regular files and symbolic links: set-uid
/// and set-gid bits are dropped when it is stored, extended attributes are not
/// kept, and a FIFO, socket or device node the command leaves fails the
/// service, naming its path, with nothing stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceTemplate {
    /// Where the template appears inside (absolute; outside the workspace
    /// root).
    pub path: String,
    /// The command that makes it.
    pub command: Vec<String>,
    /// Host paths whose contents are part of the template's key (e.g. the
    /// server's installation directory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
}

/// A readiness check: exactly one of `command`, `tcp`, `http` or `log`, tried
/// every `interval` until it passes or `timeout` has passed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    /// A command run inside the sandbox that exits 0 once the service is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// A port on the workspace's own loopback that accepts a TCP connection once
    /// the service is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<u16>,
    /// An HTTP request on the workspace's own loopback that answers with the
    /// expected status once the service is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpCheck>,
    /// A text the service writes to its stdout or stderr once it is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// Pause between attempts.
    #[serde(default = "default_health_interval")]
    pub interval: DurationSpec,
    /// How long the service may take to become ready before the run fails.
    #[serde(default = "default_health_timeout")]
    pub timeout: DurationSpec,
}

/// An HTTP `GET` of `path` on a port of the workspace, expecting `status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpCheck {
    /// The port inside the workspace.
    pub port: u16,
    /// The request path.
    #[serde(default = "default_http_path")]
    pub path: String,
    /// The expected status code.
    #[serde(default = "default_http_status")]
    pub status: u16,
}

/// The one probe a [`HealthCheck`] declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe<'a> {
    /// A command that exits 0.
    Command(&'a [String]),
    /// A TCP port that accepts.
    Tcp(u16),
    /// An HTTP status.
    Http(&'a HttpCheck),
    /// A log line seen.
    Log(&'a str),
}

impl HealthCheck {
    /// The declared probe (validation makes sure there is exactly one).
    pub fn probe(&self) -> Option<Probe<'_>> {
        let declared = [
            self.command.as_deref().map(Probe::Command),
            self.tcp.map(Probe::Tcp),
            self.http.as_ref().map(Probe::Http),
            self.log.as_deref().map(Probe::Log),
        ];
        let mut declared = declared.into_iter().flatten();
        match (declared.next(), declared.next()) {
            (Some(probe), None) => Some(probe),
            _ => None,
        }
    }
}

fn default_health_interval() -> DurationSpec {
    DurationSpec::from_millis(500)
}

fn default_health_timeout() -> DurationSpec {
    DurationSpec::from_secs(60)
}

fn default_stop_grace() -> DurationSpec {
    DurationSpec::from_secs(5)
}

fn default_http_path() -> String {
    "/".into()
}

fn default_http_status() -> u16 {
    200
}

/// Checks the services: unique names, commands, exactly one probe each,
/// `depends_on` naming earlier-declared services only (so declared order is a
/// start order and there is no cycle), connection variables.
pub(crate) fn validate(services: &[Service], root: &str, problems: &mut Problems) {
    let mut names = Vec::new();
    let mut template_paths: Vec<&str> = Vec::new();
    for (i, service) in services.iter().enumerate() {
        if let Some(template) = &service.template {
            validate_template(
                template,
                &format!("{}.template", indexed("environment.services", i)),
                root,
                &mut template_paths,
                problems,
            );
        }
        let field = indexed("environment.services", i);
        checks::unique_name(
            problems,
            &format!("{field}.name"),
            &service.name,
            &mut names,
            "service",
        );
        if !service
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            problems.push(
                format!("{field}.name"),
                format!(
                    "{:?} may only hold letters, digits, '-' and '_' (it names log files)",
                    service.name
                ),
            );
        }
        if service.name.starts_with("exec-") {
            problems.push(
                format!("{field}.name"),
                format!("{:?}: names starting with \"exec-\" are the commands started with exec --detach", service.name),
            );
        }
        checks::command(problems, &format!("{field}.command"), &service.command);
        for (d, dependency) in service.depends_on.iter().enumerate() {
            let earlier = services[..i].iter().any(|s| &s.name == dependency);
            if !earlier {
                problems.push(
                    indexed(&format!("{field}.depends_on"), d),
                    format!("{dependency:?} is not a service declared before this one"),
                );
            }
        }
        for name in service.connection.keys() {
            checks::env_name(problems, &format!("{field}.connection.{name}"), name);
        }
        validate_health(&service.health, &format!("{field}.health"), problems);
        if service.stop_grace.as_millis() == 0 {
            problems.push(
                format!("{field}.stop_grace"),
                "is zero; the service could never stop cleanly",
            );
        }
    }
}

fn validate_template<'a>(
    template: &'a ServiceTemplate,
    field: &str,
    root: &str,
    taken: &mut Vec<&'a str>,
    problems: &mut Problems,
) {
    let path_field = format!("{field}.path");
    if checks::absolute_path(problems, &path_field, &template.path) {
        if checks::is_under(&template.path, root) || checks::is_under(root, &template.path) {
            problems.push(
                &path_field,
                format!(
                    "{:?} overlaps the workspace root {root:?}; a template lives outside the checkout",
                    template.path
                ),
            );
        } else if taken.contains(&template.path.as_str()) {
            problems.push(
                &path_field,
                format!(
                    "{:?} is the path of another service's template",
                    template.path
                ),
            );
        }
        taken.push(&template.path);
    }
    checks::command(problems, &format!("{field}.command"), &template.command);
    for (i, input) in template.inputs.iter().enumerate() {
        checks::absolute_path(problems, &indexed(&format!("{field}.inputs"), i), input);
    }
}

fn validate_health(health: &HealthCheck, field: &str, problems: &mut Problems) {
    match health.probe() {
        None => {
            let given: Vec<&str> = [
                ("command", health.command.is_some()),
                ("tcp", health.tcp.is_some()),
                ("http", health.http.is_some()),
                ("log", health.log.is_some()),
            ]
            .into_iter()
            .filter_map(|(name, set)| set.then_some(name))
            .collect();
            let said = if given.is_empty() {
                "declares no check".to_owned()
            } else {
                format!("declares {}", given.join(" and "))
            };
            problems.push(
                field,
                format!("{said}; declare exactly one of command, tcp, http or log"),
            );
        }
        Some(Probe::Command(argv)) => checks::command(problems, &format!("{field}.command"), argv),
        Some(Probe::Log("")) => {
            problems.push(format!("{field}.log"), "is empty; every output would match")
        }
        Some(Probe::Http(http)) if !http.path.starts_with('/') => problems.push(
            format!("{field}.http.path"),
            format!("{:?} does not start with '/'", http.path),
        ),
        Some(_) => {}
    }
    if health.interval.as_millis() == 0 {
        problems.push(format!("{field}.interval"), "is zero; checks would spin");
    }
    if health.timeout.as_millis() == 0 {
        problems.push(
            format!("{field}.timeout"),
            "is zero; the service could never become ready",
        );
    }
}
