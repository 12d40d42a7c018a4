//! The contract flags `run`, `create` and `probe` share, and the checks made on
//! them before anything is created.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use workspace_core::contract::{
    ByteSize, Contract, DurationSpec, HostMount, MountMode, NetworkMode, Problems, SourceSection,
    TaskShape,
};

use workspace_core::runner::{RunErrorKind, Runner};

use super::BadInput;
use super::backend::Backend;
use super::contract::load_contract;
use super::text::one_line;

/// The network of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Network {
    /// Nothing but a private loopback interface.
    Deny,
    /// A private loopback for the run's own services.
    Loopback,
    /// The destinations of `--allow` (and the contract's
    /// `environment.network.allow`) through the workspace's egress proxy, and
    /// nothing else.
    Allowlist,
}

#[derive(Debug, Args)]
pub(crate) struct ContractArgs {
    /// The workspace contract (TOML, or JSON for `.json`); without one, the
    /// "narrow fix" preset. The flags below override its values.
    #[arg(long, value_name = "FILE")]
    contract: Option<PathBuf>,
    /// The source repository [default: the contract's, else `.`].
    #[arg(long, value_name = "PATH")]
    repo: Option<PathBuf>,
    /// The revision to check out [default: the contract's, else `HEAD`].
    #[arg(long, value_name = "REV")]
    rev: Option<String>,
    /// The isolation backend.
    #[arg(long, value_enum, default_value_t = Backend::Namespace)]
    backend: Backend,
    /// The OCI runtime of `--backend container`: a name on `PATH` or a path
    /// [default: the first of runc, crun, youki on `PATH`]; recorded, and every
    /// later command on the run uses it.
    #[arg(long, value_name = "NAME|PATH")]
    runtime: Option<String>,
    /// The network policy [default: the contract's, else `deny`].
    #[arg(long, value_enum)]
    network: Option<Network>,
    /// A destination the run may reach (repeatable; implies `--network
    /// allowlist`): `pypi.org:443`, `*.pythonhosted.org:443`, `10.0.0.7:8080`.
    /// A name that resolves to a loopback, private or metadata address is
    /// refused unless that address is allowed literally.
    #[arg(long = "allow", value_name = "HOST:PORT")]
    allow: Vec<String>,
    /// A destination the run may not reach even when `--allow` covers it
    /// (repeatable).
    #[arg(long = "deny", value_name = "HOST:PORT")]
    deny: Vec<String>,
    /// Wall-clock limit of a command in seconds; after it the whole process tree
    /// is killed and the exit status is 124.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// Memory cap (bytes, or with a unit: `512MiB`, `2GiB`).
    #[arg(long, value_name = "BYTES")]
    memory: Option<ByteSize>,
    /// Cap on what the run writes to disk (its checkout's changes, its
    /// services' data): a file system of that size of its own, where a write
    /// past it fails with "No space left on device" (`256MiB`, `2GiB`; needs
    /// root on the host).
    #[arg(long, value_name = "BYTES")]
    disk: Option<ByteSize>,
    /// The most of each command's stdout and of its stderr kept in the
    /// evidence (`16MiB` by default): past it the first and last half are
    /// kept, and the command runs on; what it writes is still passed through
    /// whole. Never counted against `--disk`.
    #[arg(long, value_name = "SIZE")]
    output_limit: Option<ByteSize>,
    /// Cap on processes and threads.
    #[arg(long, value_name = "N")]
    pids: Option<u32>,
    /// CPU cap in cores (e.g. `1.5`).
    #[arg(long, value_name = "CORES")]
    cpus: Option<f64>,
    /// A variable for the run's commands (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    env: Vec<String>,
    /// A host variable passed through by name (repeatable).
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
    /// A host path mounted read-only, at the same path or at TARGET (repeatable).
    #[arg(long = "ro", value_name = "HOST[:TARGET]")]
    read_only_mounts: Vec<String>,
    /// A host directory mounted read-write at TARGET (repeatable): a cache the
    /// run's commands fill and later runs reuse (a package cache, a
    /// `node_modules` inside the workspace). What is written there outlives the
    /// run and is never part of the patch.
    #[arg(long = "rw-cache", value_name = "HOST:TARGET")]
    rw_caches: Vec<String>,
    /// A path the run generates (build output), left out of the patch on both
    /// sides (repeatable; the contract's `source.generated`).
    #[arg(long, value_name = "GLOB")]
    generated: Vec<String>,
}

impl ContractArgs {
    /// The backend `--backend` names.
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// The OCI runtime `--runtime` names.
    pub(crate) fn runtime(&self) -> Option<&str> {
        self.runtime.as_deref()
    }

    /// Everything `runner` would refuse `contract` for, its source resolved
    /// by the runner's source boundary (see
    /// [`Runner::resolve`](workspace_core::runner::Runner::resolve)), as bad
    /// input naming the flag that set a field where one did. Says so when the
    /// run gets a commit without the repository's uncommitted changes.
    pub(crate) async fn check_on(
        &self,
        runner: &Runner,
        contract: &Contract,
    ) -> Result<(), BadInput> {
        match runner.resolve(contract).await {
            Ok(resolved) => {
                if let Some(resolved) = resolved
                    && runner.uncommitted_changes(contract).await == Some(true)
                {
                    eprintln!(
                        "agent-workspace: {} has uncommitted changes; the run gets {} as committed, without them",
                        resolved.repository.display(),
                        super::text::escaped(&contract.source.revision)
                    );
                }
                Ok(())
            }
            Err(RunErrorKind::InvalidContract(problems)) if self.names_a_flag(&problems) => {
                Err(self.refused(&problems, self.naming_flags(&problems)))
            }
            Err(RunErrorKind::Unsupported(problems)) => {
                let refused = if self.names_a_flag(&problems) {
                    self.naming_flags(&problems)
                } else {
                    one_line(&RunErrorKind::Unsupported(problems.clone()).to_string())
                };
                // For an ordinary user what is refused is most often what only
                // root may give a run (a disk cap, an egress proxy): check-host
                // says which.
                let hint = if nix::unistd::geteuid().is_root() {
                    String::new()
                } else {
                    format!(
                        "; `agent-workspace check-host --backend {}` says what this user and host lack",
                        self.backend.name()
                    )
                };
                Err(self.refused(&problems, format!("{refused}{hint}")))
            }
            Err(RunErrorKind::InvalidContract(problems)) => Err(self.refused(
                &problems,
                one_line(&RunErrorKind::InvalidContract(problems.clone()).to_string()),
            )),
            Err(kind) => Err(BadInput::new(one_line(&kind.to_string()))),
        }
    }

    /// `message` as bad input naming `problems`' fields (and the flag that
    /// set the first, where one did).
    fn refused(&self, problems: &Problems, message: String) -> BadInput {
        let first = problems.iter().next();
        BadInput::new(message).with(|mut f| {
            if let Some(first) = first {
                f = f.field(first.path.clone());
                if let Some(flag) = self.flag_of(&first.path) {
                    f = f.flag(flag);
                }
            }
            f.problems(super::json::ProblemJson::list(problems))
        })
    }

    /// Whether a flag set the field of any of `problems`.
    fn names_a_flag(&self, problems: &Problems) -> bool {
        problems.iter().any(|p| self.flag_of(&p.path).is_some())
    }

    /// `problems` on one line, each naming the flag that set its field, and
    /// the field, where one did (`--disk (environment.limits.disk): ...`),
    /// else the field.
    fn naming_flags(&self, problems: &Problems) -> String {
        let lines: Vec<String> = problems
            .iter()
            .map(|p| match self.flag_of(&p.path) {
                Some(flag) => format!("{flag} ({}): {}", p.path, p.message),
                None => p.to_string(),
            })
            .collect();
        one_line(&lines.join("; "))
    }

    /// The flag that set the contract field at `path`, when one did.
    fn flag_of(&self, path: &str) -> Option<&'static str> {
        match path {
            "source.repo" if self.repo.is_some() => Some("--repo"),
            "source.revision" if self.rev.is_some() => Some("--rev"),
            "environment.limits.disk" if self.disk.is_some() => Some("--disk"),
            "environment.limits.memory" if self.memory.is_some() => Some("--memory"),
            "environment.limits.output" if self.output_limit.is_some() => Some("--output-limit"),
            "environment.limits.pids" if self.pids.is_some() => Some("--pids"),
            "environment.limits.cpus" if self.cpus.is_some() => Some("--cpus"),
            "environment.limits.wall_time" if self.timeout.is_some() => Some("--timeout"),
            "environment.network.mode" if !self.allow.is_empty() => Some("--allow"),
            "environment.network.mode" if !self.deny.is_empty() => Some("--deny"),
            "environment.network.mode" if self.network.is_some() => Some("--network"),
            _ => None,
        }
    }

    /// The contract these flags ask for: loaded (or the preset), overridden,
    /// its repository made an absolute path, validated. Nothing is created.
    pub(crate) fn resolve(&self, objective: &str) -> Result<Contract, BadInput> {
        if self.runtime.is_some() && self.backend != Backend::Container {
            return Err(BadInput::new(
                "--runtime names the OCI runtime of --backend container; the namespace backend has none",
            )
            .with(|f| f.flag("--runtime")));
        }
        let mut contract = match &self.contract {
            Some(file) => load_contract(file)?,
            None => Contract::preset(
                TaskShape::NarrowFix,
                objective,
                SourceSection::new(".", "HEAD"),
            ),
        };
        if let Some(repo) = &self.repo {
            contract.source.repo = repo.to_string_lossy().into_owned();
        }
        if let Some(rev) = &self.rev {
            contract.source.revision = rev.clone();
        }
        let repo = absolute_repository(Path::new(&contract.source.repo), self.repo.is_some())?;
        contract.source.repo = repo.to_string_lossy().into_owned();
        if let Some(network) = self.network {
            contract.environment.network.mode = match network {
                Network::Deny => NetworkMode::Deny,
                Network::Loopback => NetworkMode::Loopback,
                Network::Allowlist => NetworkMode::Allowlist,
            };
        }
        if !self.allow.is_empty() || !self.deny.is_empty() {
            if matches!(self.network, Some(Network::Deny | Network::Loopback)) {
                return Err(
                    BadInput::new("--allow and --deny go with --network allowlist")
                        .with(|f| f.flag("--network").field("environment.network.mode")),
                );
            }
            let network = &mut contract.environment.network;
            network.mode = NetworkMode::Allowlist;
            network.allow.extend(self.allow.iter().cloned());
            network.deny.extend(self.deny.iter().cloned());
        }
        let limits = &mut contract.environment.limits;
        if let Some(secs) = self.timeout {
            if secs == 0 {
                return Err(
                    BadInput::new("--timeout 0: the timeout must be at least 1 second")
                        .with(|f| f.flag("--timeout").field("environment.limits.wall_time")),
                );
            }
            limits.wall_time = Some(DurationSpec::from_secs(secs));
        }
        if let Some(memory) = self.memory {
            limits.memory = Some(memory);
        }
        if let Some(disk) = self.disk {
            limits.disk = Some(disk);
        }
        if let Some(output) = self.output_limit {
            limits.output = Some(output);
        }
        if let Some(pids) = self.pids {
            limits.pids = Some(pids);
        }
        if let Some(cpus) = self.cpus {
            limits.cpus = Some(cpus);
        }
        for pair in &self.env {
            let Some((name, value)) = pair.split_once('=') else {
                return Err(
                    BadInput::new(format!("--env {pair:?}: write it as NAME=VALUE"))
                        .with(|f| f.flag("--env").field("environment.env")),
                );
            };
            contract
                .environment
                .env
                .insert(name.to_owned(), value.to_owned());
        }
        for name in &self.env_allow {
            // Passed through only when the host has it: say so when it does not.
            if std::env::var_os(name).is_none() {
                eprintln!(
                    "agent-workspace: --env-allow {name}: this environment has no such variable; the run does not get it"
                );
            }
        }
        contract
            .environment
            .env_allow
            .extend(self.env_allow.iter().cloned());
        for mount in &self.read_only_mounts {
            let (host, target) = mount.split_once(':').unwrap_or((mount, mount));
            grant_exists("--ro", mount, host)?;
            contract.filesystem.host_mounts.push(HostMount {
                host: host.to_owned(),
                target: target.to_owned(),
                mode: MountMode::ReadOnly,
            });
        }
        for cache in &self.rw_caches {
            let Some((host, target)) = cache.split_once(':') else {
                return Err(BadInput::new(format!(
                    "--rw-cache {cache:?}: write it as HOST:TARGET"
                ))
                .with(|f| f.flag("--rw-cache")));
            };
            grant_exists("--rw-cache", cache, host)?;
            contract.filesystem.host_mounts.push(HostMount {
                host: host.to_owned(),
                target: target.to_owned(),
                mode: MountMode::DangerReadWrite,
            });
        }
        contract
            .source
            .generated
            .extend(self.generated.iter().cloned());
        // A credential from the environment that is not there is known now:
        // refused before anything is created.
        for (i, credential) in contract.identity.credentials.iter().enumerate() {
            if let Some(variable) = credential
                .source
                .strip_prefix(agent_workspace::ENV_SOURCE_PREFIX)
                && std::env::var_os(variable).is_none_or(|v| v.is_empty())
            {
                return Err(BadInput::new(format!(
                    "identity.credentials[{i}] ({}): the invoking environment has no variable {variable}",
                    credential.name
                ))
                .with(|f| f.field(format!("identity.credentials[{i}].source"))));
            }
        }
        contract.validate().map_err(|problems| {
            let message = if self.names_a_flag(&problems) {
                self.naming_flags(&problems)
            } else {
                format!(
                    "the contract is invalid: {}",
                    one_line(&problems.to_string())
                )
            };
            self.refused(&problems, message)
        })?;
        Ok(contract)
    }
}

/// The repository as an absolute path (as git does, a directory inside a
/// repository names that repository), or why it cannot be one. Whether it is
/// a repository, and what its revision names, the source boundary resolves
/// ([`ContractArgs::check_on`]).
fn absolute_repository(repo: &Path, from_flag: bool) -> Result<PathBuf, BadInput> {
    let named = if from_flag { "--repo" } else { "source.repo" };
    let at_fault = |f: super::json::Failure| {
        let f = f.field("source.repo").path(repo);
        if from_flag { f.flag("--repo") } else { f }
    };
    let shown = repo.to_string_lossy();
    if shown.contains("://") || shown.starts_with("git@") {
        return Err(BadInput::new(format!(
            "{named} {shown}: only a repository on this host is supported; clone it and name the clone"
        ))
        .with(at_fault));
    }
    let named_dir = std::fs::canonicalize(repo).map_err(|e| {
        BadInput::new(format!("{named} {}: {}", repo.display(), io_reason(&e))).with(at_fault)
    })?;
    Ok(named_dir
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .map_or(named_dir.clone(), Path::to_path_buf))
}

fn io_reason(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => error.to_string(),
    }
}

/// A grant's host path must be there (a typo is bad input, known before
/// anything is created).
fn grant_exists(flag: &str, given: &str, host: &str) -> Result<(), BadInput> {
    match std::fs::metadata(host) {
        Ok(_) => Ok(()),
        Err(e) => Err(BadInput::new(format!(
            "{flag} {given:?}: {host}: {}",
            one_line(&e.to_string())
        ))
        .with(|f| f.flag(flag).path(host))),
    }
}
