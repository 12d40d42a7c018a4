//! From a destination a client asked for to a connected socket, or a refusal:
//! the policy decides on the name, the name is resolved once, the policy
//! decides on each address, and the proxy connects to exactly the address it
//! checked.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use workspace_core::clock::unix_ms_now;
use workspace_core::egress::{Decision, EgressPolicy, NetworkAttempt, Protocol, Requested};

/// How long a name may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a connection may take to be accepted.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One attempt while it lasts: what goes into its record.
#[derive(Debug)]
pub(crate) struct Attempt {
    started: Instant,
    record: NetworkAttempt,
    counters: Arc<Counters>,
}

/// Bytes each way through an [`Counted`] stream.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    up: AtomicU64,
    down: AtomicU64,
}

/// What [`open`] gives: the connection, or why there is none.
pub(crate) enum Opened {
    /// Connected (to the checked address).
    Connected(Counted),
    /// Refused by the policy.
    Denied,
    /// Allowed, but the destination could not be reached.
    Failed,
}

impl Attempt {
    /// An attempt of `protocol` for `host:port`, by `command` when known.
    pub(crate) fn new(protocol: Protocol, host: &str, port: u16, command: Option<u32>) -> Self {
        Self {
            started: Instant::now(),
            record: NetworkAttempt {
                at_unix_ms: unix_ms_now(),
                command,
                protocol,
                // As the client wrote it (an IPv6 address in brackets).
                destination: if host.contains(':') && !host.starts_with('[') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                },
                resolved: None,
                decision: Decision::Deny {
                    reason: "not decided".into(),
                },
                error: None,
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: 0,
            },
            counters: Arc::default(),
        }
    }

    /// The record, with its byte counts and duration as of now.
    pub(crate) fn finish(mut self) -> NetworkAttempt {
        self.record.bytes_up = self.counters.up.load(Ordering::Relaxed);
        self.record.bytes_down = self.counters.down.load(Ordering::Relaxed);
        self.record.duration_ms =
            u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.record
    }

    /// Refuses it before the policy is asked (a request the proxy does not
    /// offer).
    pub(crate) fn refuse(&mut self, reason: impl Into<String>) {
        self.record.decision = Decision::Deny {
            reason: reason.into(),
        };
    }

    /// Notes why the allowed connection then failed.
    pub(crate) fn fail(&mut self, error: impl std::fmt::Display) {
        self.record.error = Some(error.to_string());
    }

    /// Decides, resolves, checks and connects: see the module docs.
    pub(crate) async fn open(&mut self, policy: &EgressPolicy, host: &str, port: u16) -> Opened {
        let decision = policy.decide(host, port);
        let allowed = decision.allowed();
        self.record.decision = decision;
        if !allowed {
            return Opened::Denied;
        }
        let addresses: Vec<SocketAddr> = match Requested::parse(host) {
            Some(Requested::Address(address)) => vec![SocketAddr::new(address, port)],
            _ => match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port)))
                .await
            {
                Ok(Ok(found)) => found.collect(),
                Ok(Err(e)) => {
                    self.fail(format!("resolving {host}: {e}"));
                    return Opened::Failed;
                }
                Err(_) => {
                    self.fail(format!(
                        "resolving {host}: no answer within {} s",
                        RESOLVE_TIMEOUT.as_secs()
                    ));
                    return Opened::Failed;
                }
            },
        };
        // The first address the policy lets through; a name that resolves
        // only inward is refused with the first address's reason.
        let mut refusal = None;
        let Some(address) = addresses.iter().copied().find(|a| {
            let decision = policy.check_address(a.ip(), port);
            let allowed = decision.allowed();
            if !allowed && refusal.is_none() {
                refusal = Some((*a, decision));
            }
            allowed
        }) else {
            match refusal {
                Some((address, decision)) => {
                    self.record.resolved = Some(address.to_string());
                    self.record.decision = decision;
                    return Opened::Denied;
                }
                None => {
                    self.fail(format!("{host} has no address"));
                    return Opened::Failed;
                }
            }
        };
        self.record.resolved = Some(address.to_string());
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                Opened::Connected(Counted {
                    inner: stream,
                    counters: Arc::clone(&self.counters),
                })
            }
            Ok(Err(e)) => {
                self.fail(format!("connecting to {address}: {e}"));
                Opened::Failed
            }
            Err(_) => {
                self.fail(format!(
                    "connecting to {address}: no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ));
                Opened::Failed
            }
        }
    }
}

/// The connection to the destination, counting the bytes each way.
#[derive(Debug)]
pub(crate) struct Counted {
    inner: TcpStream,
    counters: Arc<Counters>,
}

impl Counted {
    /// Tunnels `client` to the destination, in the kernel: first `early` (what
    /// the client sent before the tunnel existed), then both ways until each
    /// side ended.
    pub(crate) async fn tunnel(mut self, client: &TcpStream, early: &[u8]) -> std::io::Result<()> {
        if !early.is_empty() {
            tokio::io::AsyncWriteExt::write_all(&mut self, early).await?;
        }
        let (up, down) = super::splice::both_ways(client, &self.inner).await?;
        self.counters.up.fetch_add(up, Ordering::Relaxed);
        self.counters.down.fetch_add(down, Ordering::Relaxed);
        Ok(())
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        self.counters.down.fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &polled {
            self.counters.up.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
