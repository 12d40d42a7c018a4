//! The preview forwarder of a container workspace (`agent-workspace
//! preview-forward CONFIG`, started by backend-container at seal; see
//! [`backend_container::process::preview`]).
//!
//! It finds the container's network namespace at descriptor
//! [`NETNS_FD`], binds one
//! listener per port on the host's `127.0.0.1` (a port the kernel chooses),
//! and enters the container's namespace with one thread, which makes every
//! outgoing connection there. It then drops to the run's host ids, prints
//! [`READY`] and its endpoints, and
//! forwards each accepted connection to the same port on the container's
//! loopback, spliced in the kernel, until it is killed with the container.

use std::convert::Infallible;
use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use backend_container::process::preview::{ForwarderConfig, NETNS_FD, READY};
use nix::sched::{CloneFlags, setns};
use tokio::sync::oneshot;
use workspace_core::boundary::PreviewEndpoint;

/// Why the forwarder could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PreviewError {
    /// Its configuration could not be read or is not one.
    #[error("preview forwarder: reading {path}")]
    Config {
        /// The configuration file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A step on the host failed.
    #[error("preview forwarder: {step}")]
    Io {
        /// What was being done.
        step: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A system call failed.
    #[error("preview forwarder: {step}")]
    System {
        /// What was being done.
        step: &'static str,
        /// Why.
        #[source]
        source: nix::Error,
    },
}

/// A connection to make inside the container: the port, and where to answer.
type Request = (u16, oneshot::Sender<std::io::Result<TcpStream>>);

/// Runs the forwarder of the configuration at `config` until it is killed.
/// Must be called in a process of its own, before it starts any thread.
pub fn serve(config: &Path) -> Result<Infallible, PreviewError> {
    let read = |source| PreviewError::Config {
        path: config.to_path_buf(),
        source,
    };
    let text = std::fs::read(config).map_err(read)?;
    let config: ForwarderConfig =
        serde_json::from_slice(&text).map_err(|e| read(std::io::Error::other(e)))?;
    // The descriptor the backend passed, reopened by path: no unsafe adoption.
    let netns =
        File::open(format!("/proc/self/fd/{NETNS_FD}")).map_err(|source| PreviewError::Io {
            step: "opening the container's network namespace",
            source,
        })?;
    let connect = inside(netns)?;
    let mut listeners = Vec::with_capacity(config.ports.len());
    let mut endpoints = Vec::with_capacity(config.ports.len());
    for &port in &config.ports {
        let io = |source| PreviewError::Io {
            step: "listening on the host's loopback",
            source,
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        // Read back from the socket: the address it is bound to.
        endpoints.push(PreviewEndpoint {
            port,
            host: listener.local_addr().map_err(io)?,
        });
        listeners.push((port, listener));
    }
    drop_privileges(&config)?;
    let json = serde_json::to_string(&endpoints).map_err(|e| PreviewError::Io {
        step: "printing the endpoints",
        source: e.into(),
    })?;
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{READY}{json}").and_then(|()| stdout.flush());
    drop(stdout);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| PreviewError::Io {
            step: "starting the runtime",
            source,
        })?;
    runtime.block_on(forward_all(listeners, connect))
}

/// A thread in the container's network namespace that connects on request.
fn inside(netns: File) -> Result<mpsc::Sender<Request>, PreviewError> {
    let (requests, incoming) = mpsc::channel::<Request>();
    let (entered, entering) = mpsc::channel();
    std::thread::Builder::new()
        .name("in-container".into())
        .spawn(move || {
            let joined = setns(&netns, CloneFlags::CLONE_NEWNET);
            let failed = joined.is_err();
            let _ = entered.send(joined);
            if failed {
                return;
            }
            for (port, answer) in incoming {
                let _ = answer.send(TcpStream::connect((Ipv4Addr::LOCALHOST, port)));
            }
        })
        .map_err(|source| PreviewError::Io {
            step: "starting the thread that connects inside",
            source,
        })?;
    match entering.recv() {
        Ok(Ok(())) => Ok(requests),
        Ok(Err(source)) => Err(PreviewError::System {
            step: "entering the container's network namespace",
            source,
        }),
        Err(_) => Err(PreviewError::Io {
            step: "entering the container's network namespace",
            source: std::io::Error::other("the thread ended"),
        }),
    }
}

fn drop_privileges(config: &ForwarderConfig) -> Result<(), PreviewError> {
    crate::helper::become_run_user(config.uid, config.gid).map_err(|source| PreviewError::System {
        step: crate::helper::BECOMING_RUN_USER,
        source,
    })
}

async fn forward_all(
    listeners: Vec<(u16, TcpListener)>,
    connect: mpsc::Sender<Request>,
) -> Result<Infallible, PreviewError> {
    let mut accepting = tokio::task::JoinSet::new();
    for (port, listener) in listeners {
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|source| PreviewError::Io {
                step: "registering a listener",
                source,
            })?;
        let connect = connect.clone();
        accepting.spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    // Out of descriptors, say: a pause, not a spin.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let connect = connect.clone();
                tokio::spawn(async move {
                    let _ = forward(client, port, &connect).await;
                });
            }
        });
    }
    while accepting.join_next().await.is_some() {}
    Err(PreviewError::Io {
        step: "accepting connections",
        source: std::io::Error::other("every listener ended"),
    })
}

/// One connection: the same port inside, then both ways until each ends.
async fn forward(
    client: tokio::net::TcpStream,
    port: u16,
    connect: &mpsc::Sender<Request>,
) -> std::io::Result<()> {
    let (answer, answered) = oneshot::channel();
    connect
        .send((port, answer))
        .map_err(|_| std::io::Error::other("the thread that connects inside ended"))?;
    let upstream = answered
        .await
        .map_err(|_| std::io::Error::other("the thread that connects inside ended"))??;
    upstream.set_nonblocking(true)?;
    let upstream = tokio::net::TcpStream::from_std(upstream)?;
    crate::egress::splice::both_ways(&client, &upstream).await?;
    Ok(())
}
