//! The egress proxy of a workspace whose contract allows a list of
//! destinations (`environment.network.mode = "allowlist"`).
//!
//! A backend starts it per workspace, as a process of its own
//! (`agent-workspace egress-proxy CONFIG`, see
//! [`workspace_core::egress::EgressConfig`]), and kills it with
//! the workspace. It makes its two listeners (HTTP on
//! [`HTTP_PROXY_PORT`], SOCKS5 on [`SOCKS_PROXY_PORT`]) inside the workspace's
//! network namespace, on its own loopback, so that only that workspace can
//! reach them (a concurrent workspace has a loopback of its own), then serves
//! from the host's network namespace as the run's unprivileged host user. The
//! workspace has no other route out.
//!
//! Each request is decided by the workspace's [`EgressPolicy`] on the name
//! asked for, resolved once, decided again on the address, and connected to
//! exactly that address; each attempt, allowed or not, is a line of
//! `network.jsonl` naming the command whose process asked.
//!
//! A plain HTTP request reaches its destination with the `Host` of the
//! destination checked, whatever `Host` the client sent (`target`). What a
//! tunnel carries (`CONNECT`, SOCKS5) is not read: its TLS server name and
//! inner `Host` are the client's (see `http`), so an allowed address allows
//! every site it serves.

mod attribution;
mod connect;
mod http;
mod log;
mod socks;
pub(crate) mod splice;
mod target;

use std::convert::Infallible;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::sched::{CloneFlags, setns};
use workspace_core::contract::{Network, NetworkMode};
use workspace_core::egress::{
    DestinationError, EgressConfig, EgressPolicy, HTTP_PROXY_PORT, SOCKS_PROXY_PORT,
};

use self::attribution::Attribution;
use self::log::AttemptLog;

/// The buffer each direction of a tunnel copies through when it cannot be
/// spliced: large enough that a bulk transfer is not held up by the copy
/// (tokio's default is 8 KiB).
pub(crate) const BUFFER: usize = 256 << 10;

/// What every connection of the proxy shares.
#[derive(Debug)]
pub(crate) struct Proxy {
    policy: EgressPolicy,
    log: AttemptLog,
    attribution: Option<Attribution>,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EgressError {
    /// Its configuration could not be read.
    #[error("egress proxy: reading {path}")]
    Config {
        /// The configuration file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Its configuration is not what a backend writes.
    #[error("egress proxy: {path} is not an egress configuration")]
    Parse {
        /// The configuration file.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A destination of the policy does not parse.
    #[error("egress proxy: the policy")]
    Policy(#[from] DestinationError),
    /// Entering or leaving the workspace's network namespace, or dropping to
    /// the run's user, failed.
    #[error("egress proxy: {step}")]
    System {
        /// What was being done.
        step: &'static str,
        /// Why.
        #[source]
        source: nix::Error,
    },
    /// A listener could not be made, or the runtime could not start.
    #[error("egress proxy: {step}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Runs the proxy of the configuration at `config` until it is killed.
/// Prints `ready` on stdout once its listeners exist. Must be called in a
/// process of its own, before it starts any thread (it enters the
/// workspace's network namespace and drops its privileges).
pub fn serve(config: &Path) -> Result<Infallible, EgressError> {
    let text = std::fs::read(config).map_err(|source| EgressError::Config {
        path: config.to_path_buf(),
        source,
    })?;
    let config: EgressConfig =
        serde_json::from_slice(&text).map_err(|source| EgressError::Parse {
            path: config.to_path_buf(),
            source,
        })?;
    let policy = EgressPolicy::of(&Network {
        mode: NetworkMode::Allowlist,
        allow: config.allow.clone(),
        deny: config.deny.clone(),
    })?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&config.log)
        .map_err(|source| EgressError::Io {
            step: "opening the attempt log",
            source,
        })?;
    let (listeners, attribution) = inside(&config)?;
    drop_privileges(&config)?;
    let proxy = Arc::new(Proxy {
        policy,
        log: AttemptLog::new(log),
        attribution,
    });
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "ready").and_then(|()| stdout.flush());
    drop(stdout);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| EgressError::Io {
            step: "starting the runtime",
            source,
        })?;
    runtime.block_on(accept_all(proxy, listeners))
}

/// The listeners and the socket-diagnostics socket, made in the workspace's
/// network namespace; the caller is back in its own afterwards.
fn inside(
    config: &EgressConfig,
) -> Result<([std::net::TcpListener; 2], Option<Attribution>), EgressError> {
    let open =
        |path: &Path, step| File::open(path).map_err(|source| EgressError::Io { step, source });
    let own = open(
        Path::new("/proc/self/ns/net"),
        "opening the host's network namespace",
    )?;
    let theirs = open(&config.netns, "opening the workspace's network namespace")?;
    let enter = |ns: &File, step| {
        setns(ns, CloneFlags::CLONE_NEWNET).map_err(|source| EgressError::System { step, source })
    };
    enter(&theirs, "entering the workspace's network namespace")?;
    let made = (|| {
        let bind = |port: u16, step| {
            let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
                .map_err(|source| EgressError::Io { step, source })?;
            listener
                .set_nonblocking(true)
                .map_err(|source| EgressError::Io { step, source })?;
            Ok::<_, EgressError>(listener)
        };
        let http = bind(
            HTTP_PROXY_PORT,
            "listening for HTTP on the workspace's loopback",
        )?;
        let socks = bind(
            SOCKS_PROXY_PORT,
            "listening for SOCKS5 on the workspace's loopback",
        )?;
        // Without a unified cgroup hierarchy the attempts name no command.
        let attribution = config
            .cgroup
            .clone()
            .and_then(|cgroup| Attribution::new(cgroup).ok());
        Ok(([http, socks], attribution))
    })();
    enter(&own, "returning to the host's network namespace")?;
    made
}

fn drop_privileges(config: &EgressConfig) -> Result<(), EgressError> {
    crate::helper::become_run_user(config.uid, config.gid).map_err(|source| EgressError::System {
        step: crate::helper::BECOMING_RUN_USER,
        source,
    })
}

async fn accept_all(
    proxy: Arc<Proxy>,
    [http, socks]: [std::net::TcpListener; 2],
) -> Result<Infallible, EgressError> {
    let listen = |listener| {
        tokio::net::TcpListener::from_std(listener).map_err(|source| EgressError::Io {
            step: "registering a listener",
            source,
        })
    };
    let (http, socks) = (listen(http)?, listen(socks)?);
    loop {
        let (kind, accepted) = tokio::select! {
            accepted = http.accept() => (Kind::Http, accepted),
            accepted = socks.accept() => (Kind::Socks, accepted),
        };
        let Ok((client, peer)) = accepted else {
            continue;
        };
        let local = client.local_addr().ok();
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move {
            let command = command_of(&proxy, peer, local);
            match kind {
                Kind::Http => http::serve(proxy, client, command).await,
                Kind::Socks => socks::serve(proxy, client, command).await,
            }
        });
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Http,
    Socks,
}

fn command_of(proxy: &Proxy, peer: SocketAddr, local: Option<SocketAddr>) -> Option<u32> {
    proxy.attribution.as_ref()?.command_of(peer, local?)
}
