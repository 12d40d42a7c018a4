//! pid 1 of a live sandbox as the forwarder of its preview ports.
//!
//! The runner binds each published port's host end (a listening TCP socket on
//! the host's loopback) before the clone, in the host's network namespace, and
//! pid 1 inherits it. pid 1 lives in the sandbox's network namespace, so each
//! connection it accepts on a listener it forwards to a socket it creates
//! itself, connected to the published port on the sandbox's loopback. The
//! forwarder lives exactly as long as the sandbox: when pid 1 ends, the
//! listeners close, and no host port of the run outlives it.
//!
//! It runs in a fork-style child of a multi-threaded process, so it only makes
//! raw system calls and never allocates: the connection table is one anonymous
//! mapping made at start, every socket is non-blocking, and one `poll` waits for
//! the sockets and for `SIGCHLD` (a `signalfd`; pid 1 still reaps what is
//! reparented to it). Each direction of a connection has a buffer that is filled
//! only once it is empty, so a slow reader stops the reads from its writer
//! (back-pressure, no unbounded memory); a direction that ends is passed on
//! with `shutdown(SHUT_WR)`. At most [`MAX_CONNECTIONS`] are forwarded at once;
//! more wait in the listener's backlog.

use std::mem;
use std::ptr;

use nix::libc;

use super::error::{ChildStage, Report, op};
use crate::sys as raw;

/// Connections forwarded at once, over every published port.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Published ports one sandbox may have.
pub(crate) const MAX_PUBLISHED: usize = 16;
/// The buffer of one direction of one connection.
const BUFFER: usize = 16 << 10;
/// How long the listeners rest after an accept failed for want of resources.
const REST_MS: libc::c_int = 100;
/// `poll` entries: the signalfd, the listeners, two per connection.
const POLL_ENTRIES: usize = 1 + MAX_PUBLISHED + 2 * MAX_CONNECTIONS;

/// Bytes on their way from one socket to the other.
struct Flow {
    buffer: [u8; BUFFER],
    start: usize,
    end: usize,
    /// The reading side ended (read returned 0).
    ended: bool,
    /// The end was passed on to the writing side.
    shut: bool,
}

impl Flow {
    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Whether to read more: the buffer is empty and the reader has not ended.
    fn wants_read(&self) -> bool {
        self.is_empty() && !self.ended
    }
}

/// One forwarded connection. All zeroes is a free slot.
struct Connection {
    used: bool,
    /// The host's end, accepted on a listener.
    client: libc::c_int,
    /// The sandbox's end, connected to the published port.
    upstream: libc::c_int,
    /// The upstream `connect` has not completed yet.
    connecting: bool,
    /// Index of the client's `poll` entry this round (the upstream's follows
    /// it); 0, the signalfd's, when the connection was not polled.
    polled: usize,
    /// Client to upstream.
    up: Flow,
    /// Upstream to client.
    down: Flow,
}

/// One published port: the listener's descriptor in pid 1 and the port inside.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Published {
    pub listener: libc::c_int,
    pub port: u16,
}

/// What the forwarder needs, made before pid 1 closes its error pipe (so that a
/// failure here is still reported).
pub(crate) struct Forwarder {
    signals: libc::c_int,
    connections: &'static mut [Connection],
}

/// Makes the signalfd and the connection table.
pub(crate) fn prepare() -> Result<Forwarder, Report> {
    let fail = |errno| Report {
        stage: ChildStage::Forward as u32,
        index: 0,
        op: op::CALL,
        errno,
    };
    // SAFETY: `sigset_t` is plain data initialised here; SIGCHLD is blocked (every
    // signal is), so signalfd is how it arrives.
    let chld = unsafe {
        let mut set: libc::sigset_t = mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        set
    };
    // SAFETY: a valid sigset; a new descriptor.
    let signals = unsafe { libc::signalfd(-1, &chld, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
    raw::check(signals).map_err(fail)?;
    let size = mem::size_of::<Connection>() * MAX_CONNECTIONS;
    // SAFETY: a fresh private anonymous mapping: zero-filled, which is a table of
    // free slots (every field a bool, an integer or a byte array: all zeroes is
    // false, 0 and empty flows).
    let table = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if table == libc::MAP_FAILED {
        return Err(fail(raw::errno()));
    }
    // SAFETY: the mapping holds MAX_CONNECTIONS zeroed `Connection`s, is aligned
    // to a page, and is used only through this slice for the life of pid 1.
    let connections =
        unsafe { std::slice::from_raw_parts_mut(table.cast::<Connection>(), MAX_CONNECTIONS) };
    Ok(Forwarder {
        signals,
        connections,
    })
}

/// Forwards the published ports and reaps children until pid 1 is killed.
pub(crate) fn serve(forwarder: Forwarder, published: &[Published]) -> ! {
    let Forwarder {
        signals,
        connections,
    } = forwarder;
    let published = &published[..published.len().min(MAX_PUBLISHED)];
    // SAFETY: `pollfd` is plain data.
    let mut fds: [libc::pollfd; POLL_ENTRIES] = unsafe { mem::zeroed() };
    let mut resting = false;
    loop {
        let listen = !resting && connections.iter().any(|c| !c.used);
        let mut n = 0;
        fds[n] = entry(signals, libc::POLLIN);
        n += 1;
        for p in published {
            fds[n] = entry(p.listener, if listen { libc::POLLIN } else { 0 });
            n += 1;
        }
        for c in connections.iter_mut().filter(|c| c.used) {
            let mut client = 0;
            let mut upstream = 0;
            if c.up.wants_read() {
                client |= libc::POLLIN;
            }
            if !c.down.is_empty() {
                client |= libc::POLLOUT;
            }
            if c.connecting || !c.up.is_empty() {
                upstream |= libc::POLLOUT;
            }
            if !c.connecting && c.down.wants_read() {
                upstream |= libc::POLLIN;
            }
            fds[n] = entry(c.client, client);
            fds[n + 1] = entry(c.upstream, upstream);
            c.polled = n;
            n += 2;
        }
        // After an accept failed for want of descriptors or memory, the
        // connection stays queued and the listener readable: the listeners rest
        // for a moment instead of waking `poll` at once, over and over.
        let timeout = if resting { REST_MS } else { -1 };
        // SAFETY: `fds[..n]` is initialised.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), n as libc::nfds_t, timeout) };
        let rested = resting;
        resting = false;
        if ready < 0 {
            continue; // EINTR; nothing else can fail with valid arguments
        }
        if fds[0].revents != 0 {
            drain_signals(signals);
            reap();
        }
        for c in connections.iter_mut().filter(|c| c.used) {
            let client = mem::take(&mut c.polled);
            if client != 0 {
                step(c, fds[client].revents, fds[client + 1].revents);
            }
        }
        if rested {
            continue;
        }
        for (i, p) in published.iter().enumerate() {
            if fds[1 + i].revents & libc::POLLIN != 0 && accept(p, connections) == Accepted::Rest {
                resting = true;
            }
        }
    }
}

/// A `poll` entry; one without interest is left out (a negative descriptor),
/// so a hung-up socket nobody reads or writes now does not wake `poll` again.
fn entry(fd: libc::c_int, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd: if events == 0 { -1 } else { fd },
        events,
        revents: 0,
    }
}

fn drain_signals(signals: libc::c_int) {
    // SAFETY: `signalfd_siginfo` is plain data.
    let mut info: libc::signalfd_siginfo = unsafe { mem::zeroed() };
    loop {
        // SAFETY: reads into a local buffer of the right size.
        let read = unsafe {
            libc::read(
                signals,
                (&raw mut info).cast(),
                mem::size_of::<libc::signalfd_siginfo>(),
            )
        };
        if read <= 0 {
            return;
        }
    }
}

fn reap() {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: valid out-pointer.
        if unsafe { libc::waitpid(-1, &mut status, libc::__WALL | libc::WNOHANG) } <= 0 {
            return;
        }
    }
}

/// What an accept did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Accepted {
    /// Took a connection, or there was none (or it went away first).
    Done,
    /// Could not take one for want of descriptors, memory or a slot: rest.
    Rest,
}

/// Accepts one connection on `p` into a free slot and starts connecting its
/// upstream. Without a free slot it accepts nothing: the connection waits in
/// the listener's backlog.
fn accept(p: &Published, connections: &mut [Connection]) -> Accepted {
    let Some(slot) = connections.iter_mut().find(|c| !c.used) else {
        return Accepted::Rest;
    };
    // SAFETY: accept4 on a listening socket without an address out-pointer.
    let client = unsafe {
        libc::accept4(
            p.listener,
            ptr::null_mut(),
            ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if client < 0 {
        return match raw::errno() {
            libc::EAGAIN | libc::ECONNABORTED | libc::EINTR | libc::EPROTO => Accepted::Done,
            _ => Accepted::Rest,
        };
    }
    // SAFETY: a new socket of this (the sandbox's) network namespace.
    let upstream = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if upstream < 0 {
        close(client);
        return Accepted::Rest;
    }
    let address = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: p.port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a valid sockaddr_in and its size.
    let connected = unsafe {
        libc::connect(
            upstream,
            (&raw const address).cast(),
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if connected < 0 && raw::errno() != libc::EINPROGRESS {
        close(client);
        close(upstream);
        return Accepted::Done;
    }
    slot.used = true;
    slot.client = client;
    slot.upstream = upstream;
    slot.connecting = connected < 0;
    slot.polled = 0;
    reset(&mut slot.up);
    reset(&mut slot.down);
    Accepted::Done
}

fn reset(flow: &mut Flow) {
    flow.start = 0;
    flow.end = 0;
    flow.ended = false;
    flow.shut = false;
}

/// Moves what `poll` said can move on one connection; closes it when both
/// directions ended or either socket failed.
fn step(c: &mut Connection, client: libc::c_short, upstream: libc::c_short) {
    let failed = libc::POLLERR | libc::POLLNVAL;
    let mut broken = client & failed != 0;
    if c.connecting && upstream != 0 {
        broken |= !connect_succeeded(c.upstream);
        c.connecting = false;
    } else if upstream & failed != 0 {
        broken = true;
    }
    if !broken && client & (libc::POLLIN | libc::POLLHUP) != 0 && c.up.wants_read() {
        broken |= !fill(&mut c.up, c.client);
    }
    if !broken && upstream & (libc::POLLIN | libc::POLLHUP) != 0 && c.down.wants_read() {
        broken |= !fill(&mut c.down, c.upstream);
    }
    if !broken && !c.connecting && !c.up.is_empty() {
        broken |= !flush(&mut c.up, c.upstream);
    }
    if !broken && !c.down.is_empty() {
        broken |= !flush(&mut c.down, c.client);
    }
    if !broken {
        pass_end(&mut c.up, c.upstream);
        pass_end(&mut c.down, c.client);
    }
    if broken || (c.up.shut && c.down.shut) {
        close(c.client);
        close(c.upstream);
        c.used = false;
    }
}

fn connect_succeeded(socket: libc::c_int) -> bool {
    let mut error: libc::c_int = 0;
    let mut length = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR into a local int of the given length.
    let ret = unsafe {
        libc::getsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut error).cast(),
            &mut length,
        )
    };
    ret == 0 && error == 0
}

/// Reads into the empty buffer of `flow`: `false` on a failure.
fn fill(flow: &mut Flow, from: libc::c_int) -> bool {
    // SAFETY: receives into the flow's own buffer, within its length.
    let read = unsafe { libc::recv(from, flow.buffer.as_mut_ptr().cast(), BUFFER, 0) };
    match read {
        0 => flow.ended = true,
        n if n > 0 => {
            flow.start = 0;
            flow.end = n as usize;
        }
        _ => return would_block(),
    }
    true
}

/// Writes what `flow` holds: `false` on a failure.
fn flush(flow: &mut Flow, to: libc::c_int) -> bool {
    // SAFETY: sends from the flow's buffer, within what it holds; MSG_NOSIGNAL,
    // so a closed peer is EPIPE, not a signal.
    let sent = unsafe {
        libc::send(
            to,
            flow.buffer[flow.start..flow.end].as_ptr().cast(),
            flow.end - flow.start,
            libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        return would_block();
    }
    flow.start += sent as usize;
    if flow.is_empty() {
        flow.start = 0;
        flow.end = 0;
    }
    true
}

/// Once the reading side ended and everything was written, passes the end on.
fn pass_end(flow: &mut Flow, to: libc::c_int) {
    if flow.ended && flow.is_empty() && !flow.shut {
        // SAFETY: shutdown of a socket this table owns.
        unsafe { libc::shutdown(to, libc::SHUT_WR) };
        flow.shut = true;
    }
}

fn would_block() -> bool {
    matches!(raw::errno(), libc::EAGAIN | libc::EINTR)
}

fn close(fd: libc::c_int) {
    // SAFETY: closes a descriptor this table owns.
    unsafe { libc::close(fd) };
}
