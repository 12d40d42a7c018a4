//! The default stack: backend-worktree for source, filesystem and promotion,
//! backend-namespace for process, environment and identity.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use backend_container::environment::ContainerEnvironment;
use backend_container::identity::ContainerIdentity;
use backend_container::process::{ContainerOptions, ContainerProcess};
use backend_namespace::environment::NamespaceEnvironment;
use backend_namespace::identity::NamespaceIdentity;
use backend_namespace::process::{HostIds, NamespaceProcess, ProcessError, ProcessOptions};
use backend_worktree::filesystem::WorktreeFilesystem;
use backend_worktree::layered::cache::{CacheError, TreeCache};
use backend_worktree::promotion::WorktreePromotion;
use backend_worktree::source::WorktreeSource;
use workspace_core::boundary::RunDisks;
use workspace_core::boundary::Stack;
use workspace_core::private_dirs::PrivateDirError;

/// The cgroup directory (in every hierarchy) the default stack's runs are made in.
pub const DEFAULT_CGROUP_PARENT: &str = "agent-workspace";

/// The cgroup directory the runs of user `uid` are made in by default:
/// [`DEFAULT_CGROUP_PARENT`] for root, `agent-workspace-user-<uid>` for an
/// ordinary user, a subtree root delegates to it once
/// (`agent-workspace check-host --fix --user NAME`, or
/// `backend_namespace::cgroup::delegate`).
pub fn default_cgroup_parent(uid: u32) -> String {
    if uid == 0 {
        DEFAULT_CGROUP_PARENT.to_owned()
    } else {
        format!("{DEFAULT_CGROUP_PARENT}-user-{uid}")
    }
}

/// The cgroup directory this process's runs are made in by default: root's
/// [`DEFAULT_CGROUP_PARENT`]; for an ordinary user on a pure cgroup v2 host,
/// `agent-workspace` inside the subtree delegated to it that this process runs
/// in (systemd's user manager gives one: `systemd-run --user --scope -p
/// Delegate=yes`), where v2 lets it move its own processes; else the subtree
/// root delegates to it once (`check-host --fix --user NAME`, see
/// [`default_cgroup_parent`]).
///
/// # Ambient authority
/// Reads this process's cgroup and the host's cgroup directories.
pub fn default_cgroup_parent_here() -> String {
    let delegated = backend_namespace::cgroup::CgroupLayout::detect()
        .ok()
        .and_then(|layout| backend_namespace::cgroup::delegated_subtree(&layout));
    match delegated {
        Some(subtree) => format!("{}/{DEFAULT_CGROUP_PARENT}", subtree.display()),
        None => default_cgroup_parent(nix::unistd::geteuid().as_raw()),
    }
}

/// The embedded default stack: fresh standalone checkouts, path grants and patch
/// promotion on the host; Linux namespaces, cgroups and seccomp around every
/// command. No daemon, no image.
///
/// `cgroup_parent` names the cgroup directory runs are made in (see
/// [`DEFAULT_CGROUP_PARENT`]); give each independent host application (or test)
/// its own.
///
/// # Ambient authority
/// Looks at the host's root directory to find the base system passed into runs.
pub fn namespace_stack(cgroup_parent: &str) -> Result<Stack, ProcessError> {
    stack_over(WorktreeSource::new(), cgroup_parent)
}

/// [`namespace_stack`] with layered checkouts: a read-only base tree per commit,
/// cached under `cache_root` (at most `cache_bytes` of tree content, least
/// recently used trees evicted), and a per-run upper directory, mounted as
/// overlayfs in the run (the base tree through an idmapped mount: it is never
/// changed, and no repository file is copied per run). Contracts with
/// `source.materialization = "auto"` (the presets' default) are then layered.
///
/// # Ambient authority
/// Creates `cache_root` if needed; looks at the host's root directory.
pub fn namespace_stack_layered(
    cgroup_parent: &str,
    cache_root: impl Into<PathBuf>,
    cache_bytes: u64,
) -> Result<Stack, LayeredStackError> {
    let cache = TreeCache::open(cache_root, cache_bytes)?;
    Ok(stack_over(
        WorktreeSource::with_layered_cache(cache),
        cgroup_parent,
    )?)
}

/// The container stack: backend-worktree for source, filesystem and promotion
/// (standalone checkouts), and one OCI container per workspace for its
/// processes, driven by the runtime `runtime` (a name on `PATH` or a path;
/// `None`: the first of runc, crun, youki found), which keeps its containers'
/// state under `state_root`, with the container backend's environment and
/// identity (the contract's variables, limits and ids, as core plans them).
///
/// # Ambient authority
/// Looks up the runtime on `PATH` and at the host's root directory.
pub fn container_stack(
    cgroup_parent: &str,
    runtime: Option<&str>,
    state_root: &Path,
) -> Result<Stack, backend_container::ContainerError> {
    let runtime = backend_container::runtime::Runtime::find(runtime, state_root)?;
    let options = ContainerOptions {
        preview_forwarder: helper_program(),
        // A capped disk is the host's, under the run's directory: the
        // namespace backend's loop-mounted images serve here too.
        disks: backend_namespace::disk::available()
            .then(|| Arc::new(backend_namespace::disk::LoopDisks) as Arc<dyn RunDisks>),
        // The namespace backend's keepers: a fork of this process each, out of
        // the container's reach (the container backend has no `unsafe`).
        output_keepers: Some(Arc::new(backend_namespace::process::ForkedOutputKeepers)),
        ..ContainerOptions::probe(runtime, cgroup_parent)?
    };
    Ok(Stack {
        source: Arc::new(WorktreeSource::new()),
        filesystem: Arc::new(WorktreeFilesystem::new()),
        process: Arc::new(ContainerProcess::new(options)),
        environment: Arc::new(ContainerEnvironment::from_host()),
        identity: Arc::new(ContainerIdentity::new()),
        promotion: Arc::new(WorktreePromotion::new()),
    })
}

/// Why a layered stack could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LayeredStackError {
    /// The base-tree cache could not be opened.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The namespace backend could not look at the host.
    #[error(transparent)]
    Process(#[from] ProcessError),
}

fn stack_over(source: WorktreeSource, cgroup_parent: &str) -> Result<Stack, ProcessError> {
    let worktree_promotion = Arc::new(WorktreePromotion::new());
    let probed = ProcessOptions::probe(cgroup_parent)?;
    // The egress proxy enters its run's network namespace from a thread, which
    // needs `CAP_SYS_ADMIN` in the runner's own user namespace as well: an
    // ordinary user's runs get no allowlisted network (refused naming the field).
    let egress_proxy = match probed.host_ids {
        HostIds::Offset { .. } => helper_program(),
        HostIds::Caller { .. } => None,
    };
    let options = ProcessOptions {
        egress_proxy,
        ..probed
    };
    let environment = match options.egress_proxy {
        Some(_) => NamespaceEnvironment::from_host().with_egress_proxy(),
        None => NamespaceEnvironment::from_host(),
    };
    Ok(Stack {
        source: Arc::new(source),
        filesystem: Arc::new(WorktreeFilesystem::new()),
        process: Arc::new(NamespaceProcess::new(options)),
        environment: Arc::new(environment),
        identity: Arc::new(NamespaceIdentity::new()),
        promotion: worktree_promotion,
    })
}

/// The environment variable naming the helper program.
pub const HELPER_PROGRAM_VAR: &str = "AGENT_WORKSPACE_HELPER";

/// The program the stacks start as their helpers: an allowlisted run's egress
/// proxy (`PROGRAM egress-proxy CONFIG`, see [`crate::egress`]) and a
/// container's preview forwarder (`PROGRAM preview-forward CONFIG`, see
/// [`crate::preview`]). `$`[`HELPER_PROGRAM_VAR`] when set, else the
/// `agent-workspace` executable this process is or sits beside (as a test or a
/// benchmark under `target/` does). `None`: no allowlisted contract, and no
/// container's ports, are kept.
///
/// # Ambient authority
/// Reads the environment and looks next to this process's executable.
pub fn helper_program() -> Option<PathBuf> {
    if let Some(program) = std::env::var_os(HELPER_PROGRAM_VAR) {
        return Some(PathBuf::from(program));
    }
    let exe = std::env::current_exe().ok()?;
    let named = |dir: &Path| dir.join("agent-workspace");
    [
        Some(exe.clone()).filter(|e| e.file_name().is_some_and(|n| n == "agent-workspace")),
        exe.parent().map(named),
        exe.parent().and_then(Path::parent).map(named),
    ]
    .into_iter()
    .flatten()
    .find(|candidate| candidate.is_file())
}

/// Where runs live on this host when the caller does not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDirs {
    /// Journals, checkouts, leases: `/var/lib/agent-workspace` for root, else
    /// `$XDG_STATE_HOME/agent-workspace/runtime`. Closed to other users
    /// ([`HostDirs::make_private`], which a runner does itself before its
    /// first run); the container backend needs every ancestor searchable by
    /// the host id a container's root maps to.
    pub runtime: PathBuf,
    /// Evidence bundles: `$XDG_STATE_HOME/agent-workspace/evidence` (or
    /// `~/.local/state/agent-workspace/evidence`).
    pub evidence: PathBuf,
}

impl HostDirs {
    /// The defaults for the current user and environment.
    ///
    /// # Ambient authority
    /// Reads `XDG_STATE_HOME`, `HOME` and the effective uid.
    pub fn from_env() -> Self {
        let state = std::env::var_os("XDG_STATE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".local/state")))
            .unwrap_or_else(|| PathBuf::from("/tmp"))
            .join("agent-workspace");
        let runtime = if effective_uid_is_root() {
            PathBuf::from("/var/lib/agent-workspace")
        } else {
            state.join("runtime")
        };
        Self {
            runtime,
            evidence: state.join("evidence"),
        }
    }

    /// Creates the runtime directory and the evidence root when missing and
    /// makes them the runner's alone, as a [`Runner`](workspace_core::runner::Runner)
    /// does before its first run ([`workspace_core::private_dirs`], the one
    /// rule): the runtime directory `0700` (root: `0710`, the group of the
    /// host id a container's root maps to), the evidence root `0700`; one
    /// that is another user's, or stays open to other users, is refused
    /// naming it. Call it before building a stack whose caches live under the
    /// runtime directory (the layered tree cache, the container state).
    ///
    /// # Ambient authority
    /// Creates and changes host directories; reads the effective uid.
    pub fn make_private(&self) -> Result<(), PrivateDirError> {
        workspace_core::private_dirs::make_private(&self.runtime, &self.evidence)
    }

    /// [`make_private`](Self::make_private) for the runtime directory alone
    /// (the evidence root is made by the first run's `Runner::create`): what a
    /// command that may refuse its input before any run exists calls before
    /// building its stack, so that a refusal leaves no evidence root behind.
    ///
    /// # Ambient authority
    /// As [`make_private`](Self::make_private).
    pub fn make_runtime_private(&self) -> Result<(), PrivateDirError> {
        workspace_core::private_dirs::make_runtime_private(&self.runtime)
    }
}

/// Whether this process runs as root: `/proc/self` belongs to the effective uid.
fn effective_uid_is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}
