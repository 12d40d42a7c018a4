//! SOCKS5 (`ALL_PROXY=socks5h://127.0.0.1:1080`): `CONNECT` to a name or an
//! address, no authentication (the listener is reachable from the one
//! workspace only); every other command is refused.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use fast_socks5::server::Socks5ServerProtocol;
use fast_socks5::util::target_addr::TargetAddr;
use fast_socks5::{ReplyError, Socks5Command};
use tokio::net::TcpStream;
use workspace_core::egress::Protocol;

use super::Proxy;
use super::connect::{Attempt, Opened};

/// Serves one SOCKS5 client.
pub(crate) async fn serve(proxy: Arc<Proxy>, client: TcpStream, command: Option<u32>) {
    let Ok(protocol) = Socks5ServerProtocol::accept_no_auth(client).await else {
        return;
    };
    let Ok((protocol, verb, target)) = protocol.read_command().await else {
        return;
    };
    let (host, port) = match &target {
        TargetAddr::Ip(address) => (address.ip().to_string(), address.port()),
        TargetAddr::Domain(name, port) => (name.clone(), *port),
    };
    let mut attempt = Attempt::new(Protocol::Socks5, &host, port, command);
    if verb != Socks5Command::TCPConnect {
        attempt.refuse(format!("SOCKS5 {verb:?} is not offered; only CONNECT"));
        let _ = protocol.reply_error(&ReplyError::CommandNotSupported).await;
        proxy.log.record(&attempt.finish());
        return;
    }
    match attempt.open(&proxy.policy, &host, port).await {
        Opened::Connected(upstream) => {
            let bound = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
            match protocol.reply_success(bound).await {
                Ok(client) => {
                    if let Err(e) = upstream.tunnel(&client, &[]).await {
                        attempt.fail(e);
                    }
                }
                Err(e) => attempt.fail(e),
            }
        }
        Opened::Denied => {
            let _ = protocol
                .reply_error(&ReplyError::ConnectionNotAllowed)
                .await;
        }
        Opened::Failed => {
            let _ = protocol.reply_error(&ReplyError::HostUnreachable).await;
        }
    }
    proxy.log.record(&attempt.finish());
}
