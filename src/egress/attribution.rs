//! Which command a connecting process belongs to: the kernel's socket
//! diagnostics (`NETLINK_SOCK_DIAG`, asked from inside the workspace's network
//! namespace) name the cgroup of the process that made the client's socket,
//! and the run's `cmd-N` cgroups name the commands.
//!
//! The netlink socket is made in the workspace's network namespace before the
//! proxy drops its privileges; asking about a socket of that namespace needs
//! none.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
};

/// `SOCK_DIAG_BY_FAMILY`, the request type of socket diagnostics.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLM_F_REQUEST`.
const NLM_F_REQUEST: u16 = 1;
/// `NLMSG_ERROR`.
const NLMSG_ERROR: u16 = 2;
/// `INET_DIAG_CGROUP_ID`: the attribute holding the socket's cgroup (v2) id.
const INET_DIAG_CGROUP_ID: u16 = 21;
/// `struct nlmsghdr` and `struct inet_diag_msg`.
const NLMSG_HEADER: usize = 16;
const INET_DIAG_MSG: usize = 72;

/// Asks which command a client socket belongs to.
#[derive(Debug)]
pub(crate) struct Attribution {
    diag: Mutex<OwnedFd>,
    /// The run's cgroup in the unified hierarchy.
    cgroup: PathBuf,
    /// cgroup id → command sequence number, as last read.
    commands: Mutex<HashMap<u64, u32>>,
}

impl Attribution {
    /// A netlink socket in the calling thread's network namespace, for the
    /// commands under `cgroup`.
    pub(crate) fn new(cgroup: PathBuf) -> nix::Result<Self> {
        let diag = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkSockDiag,
        )?;
        nix::sys::socket::setsockopt(
            &diag,
            nix::sys::socket::sockopt::ReceiveTimeout,
            &nix::sys::time::TimeVal::new(0, 200_000),
        )?;
        Ok(Self {
            diag: Mutex::new(diag),
            cgroup,
            commands: Mutex::new(HashMap::new()),
        })
    }

    /// The command of the process whose socket `client` connected to the
    /// proxy's `local` address, when the kernel and the cgroups tell.
    pub(crate) fn command_of(&self, client: SocketAddr, local: SocketAddr) -> Option<u32> {
        let id = self.cgroup_of(client, local)?;
        if let Some(seq) = self.lock_commands().get(&id) {
            return Some(*seq);
        }
        self.read_commands();
        self.lock_commands().get(&id).copied()
    }

    fn lock_commands(&self) -> std::sync::MutexGuard<'_, HashMap<u64, u32>> {
        self.commands.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the `cmd-N` cgroups again (a command started since).
    fn read_commands(&self) {
        let Ok(entries) = std::fs::read_dir(&self.cgroup) else {
            return;
        };
        let mut commands = self.lock_commands();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(seq) = name
                .to_str()
                .and_then(|n| n.strip_prefix("cmd-"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            if let Ok(meta) = entry.metadata() {
                commands.insert(meta.ino(), seq);
            }
        }
    }

    /// The cgroup id of the socket whose local address is `client` and whose
    /// peer is `local` (the client's end of a connection to the proxy).
    fn cgroup_of(&self, client: SocketAddr, local: SocketAddr) -> Option<u64> {
        let request = request(client, local)?;
        let diag = self.diag.lock().unwrap_or_else(PoisonError::into_inner);
        sendto(
            diag.as_raw_fd(),
            &request,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .ok()?;
        let mut reply = [0u8; 1024];
        let n = recv(diag.as_raw_fd(), &mut reply, MsgFlags::empty()).ok()?;
        parse_cgroup_id(&reply[..n])
    }
}

/// A `SOCK_DIAG_BY_FAMILY` request for the one TCP socket `src` → `dst`.
fn request(src: SocketAddr, dst: SocketAddr) -> Option<Vec<u8>> {
    let family = match (src.ip(), dst.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => libc_af::INET,
        (IpAddr::V6(_), IpAddr::V6(_)) => libc_af::INET6,
        _ => return None,
    };
    let mut m = Vec::with_capacity(NLMSG_HEADER + 56);
    let len = (NLMSG_HEADER + 56) as u32;
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    // struct inet_diag_req_v2: family, protocol, ext, pad, states.
    m.extend_from_slice(&[family, 6 /* IPPROTO_TCP */, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    // struct inet_diag_sockid: ports and addresses in network order.
    m.extend_from_slice(&src.port().to_be_bytes());
    m.extend_from_slice(&dst.port().to_be_bytes());
    for address in [src.ip(), dst.ip()] {
        let mut bytes = [0u8; 16];
        match address {
            IpAddr::V4(v4) => bytes[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => bytes.copy_from_slice(&v6.octets()),
        }
        m.extend_from_slice(&bytes);
    }
    m.extend_from_slice(&0u32.to_ne_bytes()); // interface: any
    m.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    Some(m)
}

/// The `INET_DIAG_CGROUP_ID` of the first answer in `reply`.
fn parse_cgroup_id(reply: &[u8]) -> Option<u64> {
    let u16_at = |at: usize| Some(u16::from_ne_bytes(reply.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(reply.get(at..at + 4)?.try_into().ok()?));
    let total = usize::try_from(u32_at(0)?).ok()?.min(reply.len());
    if u16_at(4)? == NLMSG_ERROR || total < NLMSG_HEADER + INET_DIAG_MSG {
        return None;
    }
    let mut at = NLMSG_HEADER + INET_DIAG_MSG;
    while at + 4 <= total {
        let len = usize::from(u16_at(at)?);
        let kind = u16_at(at + 2)?;
        if len < 4 {
            return None;
        }
        if kind == INET_DIAG_CGROUP_ID && len >= 12 {
            return Some(u64::from_ne_bytes(
                reply.get(at + 4..at + 12)?.try_into().ok()?,
            ));
        }
        at += (len + 3) & !3;
    }
    None
}

/// Address family numbers (`AF_INET`, `AF_INET6`) as the request carries them.
mod libc_af {
    pub(super) const INET: u8 = 2;
    pub(super) const INET6: u8 = 10;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_of_this_process_is_found_in_its_own_cgroup() {
        // Asked about a connection this test makes, the kernel names the
        // cgroup of this process: the one /proc/self/cgroup lists (v2).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
            panic!("this test needs a cgroup v2 (unified) hierarchy: {own}");
        };
        let mount = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .find(|m| std::path::Path::new(m).join("cgroup.procs").exists())
            .unwrap();
        let dir = format!("{mount}{path}");
        let expected = std::fs::metadata(&dir).unwrap().ino();
        let attribution = Attribution::new(PathBuf::from(&dir)).unwrap();
        let found =
            attribution.cgroup_of(client.local_addr().unwrap(), listener.local_addr().unwrap());
        assert_eq!(found, Some(expected));
    }
}
