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
//! raw system calls and never allocates: the connection table is allocated
//! before the clone ([`ConnectionTable`]), every socket is non-blocking, and one `poll` waits for
//! the sockets and for `SIGCHLD` (a `signalfd`; pid 1 still reaps what is
//! reparented to it). Each direction of a connection has a buffer that is filled
//! only once it is empty, so a slow reader stops the reads from its writer
//! (back-pressure, no unbounded memory); a direction that ends is passed on
//! with `shutdown(SHUT_WR)`. At most [`MAX_CONNECTIONS`] are forwarded at once;
//! more wait in the listener's backlog.
//!
//! pid 1 may also be a *connection broker* (a runner that cannot enter the
//! sandbox's network namespace itself, an ordinary user's, needs one): on a
//! listening unix `SOCK_SEQPACKET` socket the runner bound in the run's own
//! directory, each connection asks for one port (two bytes, big-endian) and is
//! answered with a TCP socket of the sandbox's network namespace, connecting
//! to that port on its loopback, passed as `SCM_RIGHTS`. The runner then owns
//! the socket and learns from it whether the port accepted: exactly what a
//! connection made from inside the sandbox would have learnt.

use std::cell::{RefCell, RefMut};
use std::mem;

use nix::libc;

use super::error::{ChildStage, Report, op};
use crate::sys::signal::SignalSet;
use crate::sys::{self, process, socket};

/// Connections forwarded at once, over every published port.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// Published ports one sandbox may have.
pub(crate) const MAX_PUBLISHED: usize = 16;
/// The buffer of one direction of one connection.
const BUFFER: usize = 16 << 10;
/// How long the listeners rest after an accept failed for want of resources.
const REST_MS: libc::c_int = 100;
/// How long the broker waits for a request after accepting its connection
/// (the runner sends it at once).
const REQUEST_MS: libc::c_int = 1000;
/// `poll` entries: the signalfd, the listeners, the broker, two per connection.
const POLL_ENTRIES: usize = 1 + MAX_PUBLISHED + 1 + 2 * MAX_CONNECTIONS;

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
    fn new() -> Self {
        Self {
            buffer: [0; BUFFER],
            start: 0,
            end: 0,
            ended: false,
            shut: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Whether to read more: the buffer is empty and the reader has not ended.
    fn wants_read(&self) -> bool {
        self.is_empty() && !self.ended
    }
}

/// One forwarded connection, or a free slot (`used` false).
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

impl Connection {
    fn free() -> Self {
        Self {
            used: false,
            client: -1,
            upstream: -1,
            connecting: false,
            polled: 0,
            up: Flow::new(),
            down: Flow::new(),
        }
    }
}

/// The forwarder's connections: [`MAX_CONNECTIONS`] free slots allocated before
/// the clone (pid 1 must not allocate), written by pid 1 in its own copy.
#[derive(Default)]
pub(crate) struct ConnectionTable(RefCell<Vec<Connection>>);

impl ConnectionTable {
    /// A table of free slots.
    pub(crate) fn new() -> Self {
        Self(RefCell::new(
            (0..MAX_CONNECTIONS).map(|_| Connection::free()).collect(),
        ))
    }

    /// Whether it has no slot (nothing was published yet).
    pub(crate) fn is_empty(&self) -> bool {
        self.0.try_borrow().is_ok_and(|table| table.is_empty())
    }
}

impl std::fmt::Debug for ConnectionTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionTable")
            .field("slots", &self.0.try_borrow().map_or(0, |t| t.len()))
            .finish()
    }
}

/// One published port: the listener's descriptor in pid 1 and the port inside.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Published {
    pub listener: libc::c_int,
    pub port: u16,
}

/// What the forwarder needs, made before pid 1 closes its error pipe (so that a
/// failure here is still reported).
pub(crate) struct Forwarder<'a> {
    signals: libc::c_int,
    connections: RefMut<'a, Vec<Connection>>,
}

/// Makes the signalfd and takes the connection table.
pub(crate) fn prepare(table: &ConnectionTable) -> Result<Forwarder<'_>, Report> {
    let fail = |errno| Report {
        stage: ChildStage::Forward as u32,
        index: 0,
        op: op::CALL,
        errno,
    };
    // SIGCHLD is blocked (every signal is), so the signalfd is how it arrives.
    let signals = socket::signal_fd(&SignalSet::empty().with(libc::SIGCHLD)).map_err(fail)?;
    // Taken once, by pid 1 alone; an empty table would forward nothing.
    let connections = table.0.try_borrow_mut().map_err(|_| fail(libc::EBUSY))?;
    if connections.len() != MAX_CONNECTIONS {
        return Err(fail(libc::ENOMEM));
    }
    Ok(Forwarder {
        signals,
        connections,
    })
}

/// Forwards the published ports, answers the broker's requests (`broker`: its
/// listening socket, or -1) and reaps children until pid 1 is killed.
pub(crate) fn serve(forwarder: Forwarder<'_>, published: &[Published], broker: libc::c_int) -> ! {
    let Forwarder {
        signals,
        mut connections,
    } = forwarder;
    let connections = connections.as_mut_slice();
    let published = &published[..published.len().min(MAX_PUBLISHED)];
    let mut fds = [entry(-1, 0); POLL_ENTRIES];
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
        let brokered = n;
        fds[n] = entry(broker, if resting { 0 } else { libc::POLLIN });
        n += 1;
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
        let ready = sys::fd::poll(&mut fds[..n], timeout);
        let rested = resting;
        resting = false;
        if ready.is_err() {
            continue; // EINTR; nothing else can fail with valid arguments
        }
        if fds[0].revents != 0 {
            socket::drain_signal_fd(signals);
            while let Ok(Some(_)) = process::wait_any(false) {}
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
        if fds[brokered].revents & libc::POLLIN != 0 && answer(broker) == Accepted::Rest {
            resting = true;
        }
    }
}

/// Answers one request on the broker `listener`: reads the port asked for and
/// sends back a socket connecting to it on the sandbox's loopback. A request
/// that does not come in time, or is not two bytes, gets no socket: the
/// connection is closed.
fn answer(listener: libc::c_int) -> Accepted {
    let asker = match socket::accept(listener) {
        Ok(asker) => asker,
        Err(libc::EAGAIN | libc::ECONNABORTED | libc::EINTR | libc::EPROTO) => {
            return Accepted::Done;
        }
        Err(_) => return Accepted::Rest,
    };
    // Only this sandbox's own host user asks (the socket's mode says so
    // too); its uid is pid 1's here, another user's the overflow id. The same
    // user could end the sandbox outright: its wait below costs it nothing.
    let own = socket::peer_uid(asker).is_ok_and(|uid| uid == process::uid());
    let mut request = [entry(asker, libc::POLLIN)];
    let mut port = [0u8; 2];
    let asked = own
        && matches!(sys::fd::poll(&mut request, REQUEST_MS), Ok(1))
        && socket::recv_packet(asker, &mut port) == Ok(2);
    let mut outcome = Accepted::Done;
    if asked {
        match socket::connect_loopback(u16::from_be_bytes(port)) {
            Ok((upstream, _)) => {
                // A failed send only loses this answer: the asker sees its
                // connection end without a socket.
                let _ = socket::send_fd(asker, upstream);
                close(upstream);
            }
            Err(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
                outcome = Accepted::Rest;
            }
            Err(_) => {}
        }
    }
    close(asker);
    outcome
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
    let client = match socket::accept(p.listener) {
        Ok(client) => client,
        Err(libc::EAGAIN | libc::ECONNABORTED | libc::EINTR | libc::EPROTO) => {
            return Accepted::Done;
        }
        Err(_) => return Accepted::Rest,
    };
    let (upstream, connecting) = match socket::connect_loopback(p.port) {
        Ok(connection) => connection,
        // No socket (descriptors or memory short): rest a moment.
        Err(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
            close(client);
            return Accepted::Rest;
        }
        Err(_) => {
            close(client);
            return Accepted::Done;
        }
    };
    slot.used = true;
    slot.client = client;
    slot.upstream = upstream;
    slot.connecting = connecting;
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

fn connect_succeeded(upstream: libc::c_int) -> bool {
    socket::connected(upstream)
}

/// Reads into the empty buffer of `flow`: `false` on a failure.
fn fill(flow: &mut Flow, from: libc::c_int) -> bool {
    match socket::recv(from, &mut flow.buffer) {
        Ok(0) => flow.ended = true,
        Ok(n) => {
            flow.start = 0;
            flow.end = n;
        }
        Err(errno) => return would_block(errno),
    }
    true
}

/// Writes what `flow` holds: `false` on a failure.
fn flush(flow: &mut Flow, to: libc::c_int) -> bool {
    match socket::send(to, &flow.buffer[flow.start..flow.end]) {
        Ok(sent) => flow.start += sent,
        Err(errno) => return would_block(errno),
    }
    if flow.is_empty() {
        flow.start = 0;
        flow.end = 0;
    }
    true
}

/// Once the reading side ended and everything was written, passes the end on.
fn pass_end(flow: &mut Flow, to: libc::c_int) {
    if flow.ended && flow.is_empty() && !flow.shut {
        socket::shutdown_write(to);
        flow.shut = true;
    }
}

fn would_block(errno: sys::Errno) -> bool {
    matches!(errno, libc::EAGAIN | libc::EINTR)
}

/// Closes a socket this table owns.
fn close(fd: libc::c_int) {
    sys::close(fd);
}
