//! HTTP proxying (`HTTP_PROXY`/`HTTPS_PROXY=http://127.0.0.1:3128`): `CONNECT
//! host:port` for HTTPS (the tunnel carries the client's own TLS), and plain
//! HTTP requests in absolute form, forwarded over a connection of their own
//! with the `Host` of the destination checked (see [`super::target`]).
//!
//! What a `CONNECT` tunnel carries is opaque to the proxy: it decides and
//! records the `host:port` the `CONNECT` names and connects to an address it
//! checked, but the TLS server name (SNI) and the `Host` of the requests inside
//! are the client's, unread. A server at an allowed address that serves other
//! names too (a CDN, a shared load balancer) serves whichever name the client
//! puts there ("domain fronting"), and `network.jsonl` still names the
//! `CONNECT`'s destination. The same holds for SOCKS5 and for plain HTTP sent
//! through a tunnel. An allowlist entry therefore allows an address and port,
//! and everything served there, not one site of many.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use workspace_core::egress::{Decision, Protocol};

use super::connect::{Attempt, Opened};
use super::target::{Target, origin_form};
use super::{BUFFER, Proxy};

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves one HTTP client connection (several requests, with keep-alive).
pub(crate) async fn serve(proxy: Arc<Proxy>, client: TcpStream, command: Option<u32>) {
    let service = hyper::service::service_fn(move |request| {
        let proxy = Arc::clone(&proxy);
        async move { Ok::<_, Infallible>(handle(proxy, request, command).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .preserve_header_case(true)
        .title_case_headers(true)
        .serve_connection(TokioIo::new(client), service)
        .with_upgrades()
        .await;
}

async fn handle(
    proxy: Arc<Proxy>,
    request: Request<Incoming>,
    command: Option<u32>,
) -> Response<Body> {
    if request.method() == Method::CONNECT {
        return tunnel(proxy, request, command).await;
    }
    forward(proxy, request, command).await
}

/// `CONNECT host:port`: 200 and a tunnel, or 403 (denied) or 502 (unreachable).
async fn tunnel(
    proxy: Arc<Proxy>,
    request: Request<Incoming>,
    command: Option<u32>,
) -> Response<Body> {
    let Some((host, port)) = request
        .uri()
        .authority()
        .and_then(|a| Some((a.host().to_owned(), a.port_u16()?)))
    else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let mut attempt = Attempt::new(Protocol::HttpConnect, &host, port, command);
    match attempt.open(&proxy.policy, &host, port).await {
        Opened::Connected(mut upstream) => {
            tokio::spawn(async move {
                match hyper::upgrade::on(request).await {
                    // The client's own socket: the tunnel runs in the kernel.
                    Ok(upgraded) => match upgraded.downcast::<TokioIo<TcpStream>>() {
                        Ok(parts) => {
                            let client = parts.io.into_inner();
                            if let Err(e) = upstream.tunnel(&client, &parts.read_buf).await {
                                attempt.fail(e);
                            }
                        }
                        Err(upgraded) => {
                            let mut client = TokioIo::new(upgraded);
                            let _ = tokio::io::copy_bidirectional_with_sizes(
                                &mut client,
                                &mut upstream,
                                BUFFER,
                                BUFFER,
                            )
                            .await;
                        }
                    },
                    Err(e) => attempt.fail(e),
                }
                proxy.log.record(&attempt.finish());
            });
            Response::new(empty())
        }
        Opened::Denied => refused(&proxy, attempt),
        Opened::Failed => unreachable(&proxy, attempt),
    }
}

/// A plain HTTP request in absolute form (`GET http://host/path`), forwarded
/// in origin form over a new connection, its `Host` the destination's; the
/// response streams back. A target naming no destination is refused (400)
/// before anything is connected or recorded.
async fn forward(
    proxy: Arc<Proxy>,
    mut request: Request<Incoming>,
    command: Option<u32>,
) -> Response<Body> {
    let uri = request.uri().clone();
    let target = match Target::of(&uri) {
        Ok(target) => target,
        Err(bad) => return text(StatusCode::BAD_REQUEST, &bad.to_string()),
    };
    let (host, port) = (target.host.as_str(), target.port);
    let mut attempt = Attempt::new(Protocol::Http, host, port, command);
    let upstream = match attempt.open(&proxy.policy, host, port).await {
        Opened::Connected(upstream) => upstream,
        Opened::Denied => return refused(&proxy, attempt),
        Opened::Failed => return unreachable(&proxy, attempt),
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(handshake) => handshake,
            Err(e) => {
                attempt.fail(e);
                return unreachable(&proxy, attempt);
            }
        };
    let log = proxy.log.clone();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            attempt.fail(e);
        }
        log.record(&attempt.finish());
    });
    *request.uri_mut() = origin_form(&uri);
    strip_hop_by_hop(request.headers_mut());
    // After the hop-by-hop headers: `Connection: host` cannot remove it.
    target.set_host(request.headers_mut());
    match sender.send_request(request).await {
        Ok(response) => response.map(BodyExt::boxed),
        Err(e) => text(
            StatusCode::BAD_GATEWAY,
            &format!("the destination failed: {e}"),
        ),
    }
}

/// Removes the headers meant for the proxy hop, not the destination.
fn strip_hop_by_hop(headers: &mut hyper::HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in [
        "connection",
        "proxy-connection",
        "proxy-authorization",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
    ] {
        headers.remove(name);
    }
}

fn refused(proxy: &Proxy, attempt: Attempt) -> Response<Body> {
    let record = attempt.finish();
    proxy.log.record(&record);
    let reason = match &record.decision {
        Decision::Deny { reason } | Decision::Allow { reason } => reason.clone(),
    };
    text(
        StatusCode::FORBIDDEN,
        &format!("agent-workspace egress: {reason}"),
    )
}

fn unreachable(proxy: &Proxy, attempt: Attempt) -> Response<Body> {
    let record = attempt.finish();
    proxy.log.record(&record);
    text(
        StatusCode::BAD_GATEWAY,
        &format!(
            "agent-workspace egress: {}",
            record
                .error
                .as_deref()
                .unwrap_or("the destination could not be reached")
        ),
    )
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(format!("{message}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn empty() -> Body {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed()
}
