//! One connection of a shard: its socket, its write and read buffers, the requests in
//! flight on it, and its state (connecting, up, backing off before a retry).
//!
//! Replies come back in order on a connection, so telling which request a reply answers
//! needs no socket: [`match_replies`] is a pure function of the read buffer and the
//! in-flight queue. The rest of this file moves bytes and keeps the state.
//!
//! Requests are encoded straight into the write buffer, and all of a turn's requests leave
//! in one `send`. A large value is not copied: the buffer records where it goes ([`Splice`])
//! and the write takes its bytes from the class's one shared value buffer with `writev`, so
//! 50 connections sending 64 MB values hold headers, not 3.2 GB of copies. A read fills as much of the read buffer as the socket has, and a read
//! that fills less than the space offered means the socket is drained (no extra read to
//! see `EAGAIN`). What a connection learns is reported to its class through callbacks,
//! which the compiler inlines: nothing here allocates or dispatches dynamically per
//! request.
//!
//! What a hostile server can make a connection buffer is bounded ([`ReadBudget`]): one
//! reply at most `max_reply` bytes, all of a shard's read buffers together at most a budget
//! beyond their base size, and a top-level bulk string (a GET of a 512 MB value) is streamed
//! past without being buffered at all: only its header and final CRLF are kept. A reply
//! over a cap fails as `reply_too_large` and closes the connection.
//!
//! A run with a login, a database or RESP3 sets every connection up before it carries
//! requests ([`Setup`]): once the TCP connect is done the connection sends `HELLO <2|3>
//! [AUTH] SETNAME crest-<worker>-<shard>` (on RESP2 servers without `HELLO`: `AUTH` and
//! `CLIENT SETNAME`), `SELECT` and `CLIENT TRACKING on` as the session asks, one step at a
//! time, and only when the last step's reply is in does it become [`ConnState::Up`] and
//! take requests. Setup replies are matched by [`Conn::take_setup`], never by
//! [`match_replies`]: they are not requests of the run and count nowhere but, when the
//! server refuses a step, as one connection error of its kind (`setup: WRONGPASS`).
//!
//! A memcached connection ([`Conn::speaking`]) matches replies the same way, but a
//! memcached reply does not say its own shape: the request at the front of the queue says
//! what it expects (its command's [`Expect`]), and [`crest_memcache::scan_reply`] reads
//! exactly that (a miss is a nil, a multi-get's missing keys are its nils). It has no
//! setup and no push frames, and its large values are buffered (within the reply cap), not
//! streamed past.
//!
//! RESP3 push frames (invalidations, pub/sub) come between replies, never inside them, and
//! answer no request: [`match_replies`] hands them to their own callback and goes on, so a
//! push can neither take a request's reply nor be an unexpected reply on an idle
//! connection. An attribute is part of the reply after it (the scanner skips it). A nil
//! reply, and each nil element of an array reply, is a miss ([`Reply::misses`]).

use crate::spec::ClassId;
use crate::sys::epoll::{Epoll, Interest};
use crate::sys::error_kind;
use crate::sys::stamp;
use crate::target_tls::{self, Client, Handshakes};
use crest_memcache::{Expect, McError};
use crest_model::stats::clean_message;
use crest_model::target::{DEFAULT_USER, Resp, Session, client_name};
use crest_model::workload::Wire;
use crest_resp::{self as resp, ReplyKind, Scan};
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use tokio_rustls::rustls::ClientConnection;

/// Read buffer size, and the least space offered to one read.
const READ_CHUNK: usize = 64 * 1024;
/// Largest reply a connection buffers, by default: 64 MiB. Top-level bulk strings of any
/// legal size (512 MB) are streamed past unbuffered, so this bounds arrays and lines.
pub const MAX_REPLY: usize = 64 * 1024 * 1024;
/// What all of a shard's read buffers may hold beyond their base size, by default: 256 MiB.
pub const SHARD_READ_BUDGET: usize = 256 * 1024 * 1024;
/// A top-level bulk string at least this long is streamed past instead of buffered.
const SKIP_MIN: usize = READ_CHUNK;
/// A value at least this long is written from the shared value buffer, not copied.
const SPLICE_MIN: usize = 16 * 1024;
/// Most pieces one `writev` carries.
const MAX_IOV: usize = 64;
/// Write buffer capacity reserved up front: a turn's requests usually fit.
const WBUF_CAPACITY: usize = 16 * 1024;
/// First wait before reconnecting; doubled on each failure in a row.
pub const BACKOFF_MIN_NS: u64 = 10_000_000;
/// Longest wait before reconnecting.
pub const BACKOFF_MAX_NS: u64 = 1_000_000_000;

/// What a shard's connections may buffer of their replies; shared by the shard's
/// connections (one thread), each growing and shrinking its read buffer against it.
#[derive(Debug)]
pub struct ReadBudget {
    /// Largest reply one connection buffers.
    max_reply: usize,
    /// Bytes the shard's read buffers may still grow by.
    left: Cell<usize>,
}

impl ReadBudget {
    /// Replies of at most `max_reply` bytes, all read buffers together at most `shard`
    /// bytes beyond their base size.
    pub fn new(max_reply: usize, shard: usize) -> Rc<Self> {
        Rc::new(Self {
            max_reply,
            left: Cell::new(shard),
        })
    }

    /// The defaults: [`MAX_REPLY`] and [`SHARD_READ_BUDGET`].
    pub fn default_caps() -> Rc<Self> {
        Self::new(MAX_REPLY, SHARD_READ_BUDGET)
    }

    /// Takes `n` bytes; false (taking nothing) when fewer are left.
    fn take(&self, n: usize) -> bool {
        match self.left.get().checked_sub(n) {
            Some(rest) => {
                self.left.set(rest);
                true
            }
            None => false,
        }
    }

    fn give(&self, n: usize) {
        self.left.set(self.left.get().saturating_add(n));
    }

    /// Bytes the read buffers may still grow by.
    #[cfg(test)]
    pub fn left(&self) -> usize {
        self.left.get()
    }
}

/// A value written from the shared value buffer: `value[off..off + len]` goes before `wbuf[at]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Splice {
    at: usize,
    off: usize,
    len: usize,
}

/// The write buffer as a [`Wire`]: small parts copied, large values spliced.
pub struct Outgoing<'a> {
    bytes: &'a mut Vec<u8>,
    splices: &'a mut VecDeque<Splice>,
}

impl Wire for Outgoing<'_> {
    #[inline]
    fn bytes(&mut self) -> &mut Vec<u8> {
        self.bytes
    }

    #[inline]
    fn value(&mut self, shared: &[u8], off: usize, len: usize) {
        if len >= SPLICE_MIN {
            self.splices.push_back(Splice {
                at: self.bytes.len(),
                off,
                len,
            });
        } else {
            self.bytes.extend_from_slice(&shared[off..off + len]);
        }
    }
}

/// A connection's index within its shard; also its epoll token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u32);

impl ConnId {
    /// Position in the shard's connection list.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The epoll token of this connection.
    #[inline]
    pub fn token(self) -> u64 {
        u64::from(self.0)
    }

    /// The connection an epoll token names (None for a token no connection uses).
    #[inline]
    pub fn from_token(token: u64) -> Option<Self> {
        u32::try_from(token).ok().map(ConnId)
    }
}

/// A request on a connection, waiting for its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// Intended send time, ns since the run's start.
    pub intended: u64,
    /// When its write completed; 0 while not yet written. (A request written at 0 was
    /// also intended at 0, so the two readings agree.)
    pub written: u64,
    /// Its first key ([`NO_KEY`]: none), kept so a redirect sends the same key again.
    pub key: u64,
    /// Command index in the class's workload.
    pub cmd: u32,
    /// Sends before this one (cluster redirects and retries): 0 the first time.
    pub tries: u8,
    /// Intended after the warm-up: its results count.
    pub measured: bool,
    /// The `ASKING` sent before an `ASK`-redirected request: its reply answers no request
    /// of the schedule.
    pub asking: bool,
}

/// A request without a key (`PING`).
pub const NO_KEY: u64 = u64::MAX;

impl Pending {
    /// Where its service time (and its timeout) starts: the write, or the intended time
    /// for a request answered before its write finished.
    #[inline]
    pub fn since(&self) -> u64 {
        if self.written == 0 {
            self.intended
        } else {
            self.written
        }
    }
}

/// The commands a connection sends before any request, encoded once per shard. Its
/// `Debug` leaves out the bytes: they hold the password.
pub struct Setup {
    /// `HELLO <2|3> [AUTH user password] SETNAME name`.
    hello: Vec<u8>,
    /// RESP3: a refused `HELLO` is final (there is no RESP3 without it).
    resp3: bool,
    /// `AUTH [user] password`: what a RESP2 server that refuses `HELLO` gets instead (the
    /// user is left out for `default`, so a server older than ACLs takes it too).
    auth: Option<Vec<u8>>,
    /// `CLIENT SETNAME name`, after `AUTH` on a server without `HELLO`.
    setname: Vec<u8>,
    /// `SELECT db`, when the database is not 0.
    select: Option<Vec<u8>>,
    /// `CLIENT TRACKING on`, when asked for.
    tracking: Option<Vec<u8>>,
    /// `READONLY`, in a cluster read from replicas.
    readonly: Option<Vec<u8>>,
}

impl std::fmt::Debug for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setup")
            .field("resp3", &self.resp3)
            .field("login", &self.auth.is_some())
            .field("select", &self.select.is_some())
            .field("tracking", &self.tracking.is_some())
            .field("readonly", &self.readonly.is_some())
            .finish()
    }
}

/// The setup reply a connection waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `HELLO`.
    Hello,
    /// `AUTH`, after a RESP2 server refused `HELLO`.
    Auth,
    /// `CLIENT SETNAME`, after a RESP2 server refused `HELLO`.
    SetName,
    /// `SELECT`.
    Select,
    /// `CLIENT TRACKING on`.
    Tracking,
    /// `READONLY`.
    Readonly,
}

/// What a setup reply leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next<'a> {
    /// Send these bytes and wait for `Step`'s reply.
    Send(&'a [u8], Step),
    /// Set up: requests may go.
    Done,
    /// The server refused the step: the connection cannot be used.
    Refused(Refusal),
}

/// A setup step the server refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The step.
    pub step: Step,
    /// The connection-error kind it counts as: `setup: ` and the reply's first word,
    /// from a fixed set so a hostile server cannot grow the books.
    pub kind: &'static str,
}

/// The connection-error kind of a setup step refused with first word `word`.
fn refusal_kind(word: &[u8]) -> &'static str {
    match word {
        b"WRONGPASS" => "setup: WRONGPASS",
        b"NOPERM" => "setup: NOPERM",
        b"NOAUTH" => "setup: NOAUTH",
        b"NOPROTO" => "setup: NOPROTO",
        b"ERR" => "setup: ERR",
        _ => "setup: other",
    }
}

impl Setup {
    /// The setup of `session` for connections named `name` (made fit by
    /// [`client_name`](crest_model::target::client_name)); None when a connection needs
    /// none (RESP2, no login, database 0, no tracking).
    pub fn new(session: &Session, name: &str) -> Option<Self> {
        if session.is_plain() {
            return None;
        }
        let enc = |args: &[&[u8]]| {
            let mut b = Vec::new();
            resp::encode_command(&mut b, args);
            b
        };
        let name = client_name(name);
        let name = name.as_bytes();
        let proto: &[u8] = match session.resp {
            Resp::Resp2 => b"2",
            Resp::Resp3 => b"3",
        };
        let (hello, auth) = match &session.login {
            Some(l) => {
                let (u, p) = (l.user.as_bytes(), l.password.expose().as_bytes());
                let auth = if l.user == DEFAULT_USER {
                    enc(&[b"AUTH", p])
                } else {
                    enc(&[b"AUTH", u, p])
                };
                (
                    enc(&[b"HELLO", proto, b"AUTH", u, p, b"SETNAME", name]),
                    Some(auth),
                )
            }
            None => (enc(&[b"HELLO", proto, b"SETNAME", name]), None),
        };
        let db = session.db.to_string();
        let select = (session.db != 0).then(|| enc(&[b"SELECT", db.as_bytes()]));
        Some(Self {
            hello,
            resp3: session.resp == Resp::Resp3,
            auth,
            setname: enc(&[b"CLIENT", b"SETNAME", name]),
            select,
            tracking: session
                .tracking
                .then(|| enc(&[b"CLIENT", b"TRACKING", b"on"])),
            readonly: session.readonly.then(|| enc(&[b"READONLY"])),
        })
    }

    /// The first command, and the step whose reply it waits for.
    pub fn first(&self) -> (&[u8], Step) {
        (&self.hello, Step::Hello)
    }

    /// What the reply `reply` to `step` leads to. A RESP2 `HELLO` refused for any reason
    /// but a wrong password (an unknown command on Redis 5, an ACL without `+hello`) falls
    /// back to `AUTH` (when there is a login) and `CLIENT SETNAME`; a RESP3 `HELLO` refused
    /// for any reason is final. A refused `CLIENT SETNAME` is let pass (the name only
    /// labels the connection in `CLIENT LIST`).
    pub fn next(&self, step: Step, reply: ReplyKind<'_>) -> Next<'_> {
        let then_readonly = || match &self.readonly {
            Some(r) => Next::Send(r, Step::Readonly),
            None => Next::Done,
        };
        let then_tracking = || match &self.tracking {
            Some(t) => Next::Send(t, Step::Tracking),
            None => then_readonly(),
        };
        let then_select = || match &self.select {
            Some(s) => Next::Send(s, Step::Select),
            None => then_tracking(),
        };
        let refused = |step, kind: &[u8]| {
            Next::Refused(Refusal {
                step,
                kind: refusal_kind(kind),
            })
        };
        match (step, reply) {
            (Step::Hello, ReplyKind::Error { kind, .. }) if kind != b"WRONGPASS" && !self.resp3 => {
                match &self.auth {
                    Some(a) => Next::Send(a, Step::Auth),
                    None => Next::Send(&self.setname, Step::SetName),
                }
            }
            (Step::Auth, ReplyKind::Value | ReplyKind::Nil) => {
                Next::Send(&self.setname, Step::SetName)
            }
            (Step::SetName, _) | (Step::Hello, ReplyKind::Value | ReplyKind::Nil) => then_select(),
            (Step::Select, ReplyKind::Value | ReplyKind::Nil) => then_tracking(),
            (Step::Tracking, ReplyKind::Value | ReplyKind::Nil) => then_readonly(),
            (Step::Readonly, ReplyKind::Value | ReplyKind::Nil) => Next::Done,
            (step, ReplyKind::Error { kind, .. }) => refused(step, kind),
        }
    }
}

/// How far [`Conn::take_setup`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupProgress {
    /// Waiting for a setup reply; `flush` when a next command was queued to write.
    Waiting {
        /// The write buffer holds the next setup command.
        flush: bool,
    },
    /// Set up: the connection is [`ConnState::Up`].
    Up,
}

/// Why a setup ended the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupError {
    /// Bytes that are not a setup reply (garbage, too large, or more than was asked).
    Fault(Fault),
    /// The server refused a step; with its message, cleaned.
    Refused(Refusal, String),
}

/// A connection's lifecycle.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum ConnState {
    /// A non-blocking connect is under way since `since` (ns since the start).
    Connecting {
        /// When the connect began.
        since: u64,
    },
    /// Connected, the TLS handshake under way since `since`; no setup or requests yet.
    Handshake {
        /// When the connect completed.
        since: u64,
    },
    /// Connected, sending the session's setup ([`Setup`]) since `since`; no requests yet.
    Setup {
        /// When the connect completed.
        since: u64,
    },
    /// Connected; requests may be sent.
    Up,
    /// Closed; reconnect at `retry_at`.
    Down {
        /// When to try again.
        retry_at: u64,
    },
}

/// One complete reply and the request it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply<'a> {
    /// The request, taken off the in-flight queue.
    pub req: Pending,
    /// Value, nil or error, with the error's first word.
    pub kind: ReplyKind<'a>,
    /// Misses it carries: 1 for a nil reply, the nil elements of an array reply (`MGET`).
    pub misses: u32,
    /// The reply came before the request's write had completed (the server answered a
    /// partial command, e.g. with an error): it was sent, but no write will say so.
    pub early: bool,
    /// Nothing is in flight on the connection after this reply.
    pub idle: bool,
    /// The reply's first bytes (at most [`HEAD_LEN`]): where a GET's value starts.
    pub head: &'a [u8],
}

/// Bytes of a reply kept in [`Reply::head`]: a bulk header and a version stamp.
pub const HEAD_LEN: usize = 48;

/// Bytes from the server that cannot be matched with a request: the connection can no
/// longer be trusted to pair replies with requests, so it is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A complete reply with nothing in flight.
    UnexpectedReply,
    /// An error reply with nothing in flight: the server refusing the connection itself,
    /// as Redis does past `maxclients` (`-ERR max number of clients reached` on accept).
    RefusedByServer,
    /// Bytes that are not RESP.
    ProtocolError,
    /// A reply larger than the connection may buffer (or than the shard's read budget
    /// has room for).
    TooLarge,
}

impl Fault {
    /// The connection-error kind it is counted as.
    pub fn kind(self) -> &'static str {
        match self {
            Fault::UnexpectedReply => "unexpected_reply",
            Fault::RefusedByServer => "refused_by_server",
            Fault::ProtocolError => "protocol_error",
            Fault::TooLarge => "reply_too_large",
        }
    }
}

/// How far [`match_replies`] got through a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// Every byte belonged to a complete reply.
    All,
    /// The first `consumed` bytes were complete replies; the next one is not complete
    /// before the buffer holds `need` bytes (counted from its start).
    Partial {
        /// Bytes of complete replies.
        consumed: usize,
        /// Buffer length worth scanning again at.
        need: usize,
    },
    /// Stopped at bytes that cannot be matched; replies before them were reported.
    Fault(Fault),
}

/// Matches the complete replies at the front of `buf` with the requests in `inflight`, in
/// order, reporting each to `on_reply`. `unwritten` counts the requests at the back of
/// `inflight` whose write has not completed; a reply to one of them is `early`, and marks
/// it (and everything before it) as sent. RESP3 push frames answer no request: they go to
/// `on_push` (with whether each is an `invalidate`), and the matching goes on after them,
/// also with nothing in flight.
///
/// `expects`: None for RESP; for memcached, the reply each command index expects (the
/// front request's decides how the next bytes are read).
#[inline]
pub fn match_replies<'a>(
    buf: &'a [u8],
    inflight: &mut VecDeque<Pending>,
    unwritten: &mut usize,
    expects: Option<&[Expect]>,
    mut on_reply: impl FnMut(Reply<'a>),
    mut on_push: impl FnMut(bool),
) -> Matched {
    let mut at = 0;
    loop {
        if at == buf.len() {
            return Matched::All;
        }
        let scanned = match expects {
            None => resp::scan_reply(&buf[at..]).map_err(|_| Fault::ProtocolError),
            Some(table) => scan_memcache(&buf[at..], inflight.front(), table),
        };
        match scanned {
            Ok(Scan::Incomplete { need }) => {
                return Matched::Partial {
                    consumed: at,
                    need: at + need,
                };
            }
            Ok(Scan::Push { len, invalidate }) => {
                at += len;
                on_push(invalidate);
            }
            Ok(Scan::Reply { kind, len, nils }) => {
                let Some(req) = inflight.pop_front() else {
                    return Matched::Fault(match kind {
                        ReplyKind::Error { .. } => Fault::RefusedByServer,
                        _ => Fault::UnexpectedReply,
                    });
                };
                let early = inflight.len() < *unwritten;
                if early {
                    *unwritten = inflight.len();
                }
                let head = &buf[at..(at + len.min(HEAD_LEN)).min(buf.len())];
                at += len;
                on_reply(Reply {
                    req,
                    kind,
                    misses: nils + u32::from(kind == ReplyKind::Nil),
                    early,
                    idle: inflight.is_empty(),
                    head,
                });
            }
            Err(f) => return Matched::Fault(f),
        }
    }
}

/// One memcached reply at the front of `buf`, read as `front` (the oldest request in
/// flight) expects it. With nothing in flight the bytes are read as a status line, so a
/// server's refusal (`SERVER_ERROR too many open connections`) is told from stray bytes.
#[inline]
fn scan_memcache<'a>(
    buf: &'a [u8],
    front: Option<&Pending>,
    table: &[Expect],
) -> Result<Scan<'a>, Fault> {
    let expect = front
        .and_then(|p| table.get(p.cmd as usize).copied())
        .unwrap_or(Expect::Line);
    crest_memcache::scan_reply(buf, expect).map_err(|e| match e {
        _ if front.is_none() => Fault::UnexpectedReply,
        McError::ValueTooLarge(_) => Fault::TooLarge,
        _ => Fault::ProtocolError,
    })
}

/// What one read brought.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Bytes arrived; `filled` when they filled all the space offered, so more may wait.
    Data {
        /// The read filled the buffer: read again before waiting.
        filled: bool,
    },
    /// Nothing to read now.
    WouldBlock,
    /// The peer closed (`eof`) or the socket failed; carries the connection-error kind.
    Closed(Cow<'static, str>),
    /// The reply being read does not fit the caps ([`Fault::TooLarge`]).
    TooLarge,
}

/// What is due on a connection at a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Nothing.
    Nothing,
    /// The oldest request has waited longer than the timeout.
    Timeout,
    /// The connect has taken longer than the timeout.
    ConnectTimeout,
    /// The TLS handshake has taken longer than the timeout.
    HandshakeTimeout,
    /// The setup has taken longer than the timeout.
    SetupTimeout,
    /// The backoff has passed: connect again.
    Retry,
    /// Its life is over (`--conn-lifetime`): it takes no new request from now on.
    Retire,
    /// Retired, and nothing is in flight any more: close it and open it again.
    Recycle,
}

/// One connection: socket, buffers, requests in flight, state.
pub struct Conn {
    /// The class whose requests this connection carries.
    pub class: ClassId,
    /// The target node it is connected to (the shard's node index: 0 for a single node).
    pub node: u16,
    /// Its lane among its class's connections to the node: a replayed trace sends each
    /// key on one lane, so the key's requests keep their order (0 for any other class).
    pub lane: u16,
    sock: Option<socket2::Socket>,
    /// TLS to the target: what every (re)connect handshakes with.
    tls_client: Option<Rc<Client>>,
    /// This socket's TLS state (Some while a TLS socket is open): requests go through
    /// its writer, replies come out of its reader.
    tls: Option<Box<ClientConnection>>,
    state: ConnState,
    /// Wait before the next reconnect.
    backoff: u64,
    wbuf: Vec<u8>,
    /// Bytes of `wbuf` already written.
    wpos: usize,
    /// Values to write from `value` between the bytes of `wbuf`, in order.
    splices: VecDeque<Splice>,
    /// Bytes of the first splice already written (only while `wpos` is at its place).
    spos: usize,
    /// The class's shared value bytes that splices refer to.
    value: Arc<[u8]>,
    /// Registered for writability because a send could not finish.
    want_out: bool,
    /// Requests in order; the last `unwritten` are in `wbuf` but not yet written.
    inflight: VecDeque<Pending>,
    unwritten: usize,
    rbuf: Vec<u8>,
    /// Unparsed bytes are `rbuf[rstart..rend]`.
    rstart: usize,
    rend: usize,
    /// Do not scan again until `rend` reaches this.
    need: usize,
    /// Payload bytes of a large bulk reply still to read and drop (the buffer holds an
    /// empty bulk in its place).
    skip: usize,
    /// The caps this connection's read buffer grows against.
    budget: Rc<ReadBudget>,
    /// On the shard's list of connections to flush this turn.
    dirty: bool,
    /// The kernel's receive stamp (wall ns) of the newest segment of the last socket read,
    /// when it gave one ([`crate::sys::stamp`]).
    rx_stamp: Option<u64>,
    /// What the connection sends before requests (None: nothing).
    setup: Option<Rc<Setup>>,
    /// The setup reply awaited, while [`ConnState::Setup`].
    step: Step,
    /// memcached: the reply each command of the class expects (None: RESP).
    expects: Option<Rc<[Expect]>>,
    /// When the current (or last) connect began: its setup time runs from here.
    connect_started: u64,
    /// When its TCP connect completed.
    connected_at: u64,
    /// When its TLS handshake completed (over plaintext: `connected_at`).
    secured_at: u64,
    /// When it came up (ns since the start), for the longest-lived-first retirement.
    up_at: u64,
    /// When its life ends (0: never).
    retire_at: u64,
    /// Its life is over: it takes no new request and closes once its replies are in.
    retiring: bool,
    /// Free-slot tokens of this connection on its class's list that stand for no free
    /// slot: the class filled a slot without taking its token (it kept writing to the
    /// connection it had just written to), so the next such many tokens popped are dropped.
    pub owed_tokens: u32,
}

impl Conn {
    /// A closed connection of `class`, due to connect at once; large values are written
    /// from `value` (the class's [`Workload::value_bytes`](crest_model::workload::Workload::value_bytes)),
    /// and replies are buffered within `budget`.
    pub fn new(class: ClassId, value: Arc<[u8]>, budget: Rc<ReadBudget>) -> Self {
        Self {
            class,
            node: 0,
            lane: 0,
            sock: None,
            tls_client: None,
            tls: None,
            state: ConnState::Down { retry_at: 0 },
            backoff: BACKOFF_MIN_NS,
            wbuf: Vec::with_capacity(WBUF_CAPACITY),
            wpos: 0,
            splices: VecDeque::new(),
            spos: 0,
            value,
            want_out: false,
            inflight: VecDeque::new(),
            unwritten: 0,
            rbuf: vec![0; READ_CHUNK],
            rstart: 0,
            rend: 0,
            need: 0,
            skip: 0,
            budget,
            dirty: false,
            rx_stamp: None,
            owed_tokens: 0,
            setup: None,
            step: Step::Select,
            expects: None,
            connect_started: 0,
            connected_at: 0,
            secured_at: 0,
            up_at: 0,
            retire_at: 0,
            retiring: false,
        }
    }

    /// How long its setup took, from the connect's start to `now` (it just came up).
    pub fn setup_ns(&self, now: u64) -> u64 {
        now.saturating_sub(self.connect_started)
    }

    /// Its setup's phases, ns, when it came up at `now`: the TCP connect, the TLS
    /// handshake (None over plaintext) and the session's commands (None without any).
    pub fn setup_phases(&self, now: u64) -> [Option<u64>; 3] {
        [
            Some(self.connected_at.saturating_sub(self.connect_started)),
            self.tls_client
                .is_some()
                .then(|| self.secured_at.saturating_sub(self.connected_at)),
            self.setup
                .is_some()
                .then(|| now.saturating_sub(self.secured_at)),
        ]
    }

    /// It came up at `now` and lives until `retire_at` (0: for good).
    pub fn live(&mut self, now: u64, retire_at: u64) {
        self.up_at = now;
        self.retire_at = retire_at;
        self.retiring = false;
    }

    /// When it came up, if it is up and not retiring (a candidate for retirement).
    pub fn up_since(&self) -> Option<u64> {
        (self.state == ConnState::Up && !self.retiring).then_some(self.up_at)
    }

    /// Ends its life: no new request from now on; [`Due::Recycle`] once none is in flight.
    pub fn retire(&mut self) {
        self.retiring = true;
    }

    /// Closes a retired connection with nothing in flight, without any error, and makes it
    /// due to connect again at `now` (no backoff: it did not fail).
    pub fn recycle(&mut self, now: u64) {
        debug_assert!(self.inflight.is_empty());
        self.close(now, |_, _| {});
        self.backoff = BACKOFF_MIN_NS;
        self.state = ConnState::Down { retry_at: now };
    }

    /// The same connection, speaking memcached: `expects` is the reply each of its class's
    /// commands expects (None: RESP).
    pub fn speaking(mut self, expects: Option<Rc<[Expect]>>) -> Self {
        self.expects = expects;
        self
    }

    /// The same connection, to node `node` of the shard's routes.
    pub fn at_node(mut self, node: u16) -> Self {
        self.node = node;
        self
    }

    /// The same connection, in lane `lane` of its class's connections to its node.
    pub fn in_lane(mut self, lane: u16) -> Self {
        self.lane = lane;
        self
    }

    /// The same connection, set up with `setup` on every (re)connect.
    pub fn with_setup(mut self, setup: Option<Rc<Setup>>) -> Self {
        self.setup = setup;
        self
    }

    /// The same connection, over TLS with `client` on every (re)connect.
    pub fn with_tls(mut self, client: Option<Rc<Client>>) -> Self {
        self.tls_client = client;
        self
    }

    /// Where the connection is in its lifecycle.
    #[inline]
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// Whether a request may be added: up, with fewer than `pipeline` in flight.
    #[inline]
    pub fn has_room(&self, pipeline: usize) -> bool {
        self.state == ConnState::Up && !self.retiring && self.inflight.len() < pipeline
    }

    /// Requests sent or queued on this connection, unanswered.
    #[inline]
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Whether the connection waits for writability (a send could not finish); it is then
    /// flushed when epoll says so, not by the turn's flush.
    #[inline]
    pub fn want_out(&self) -> bool {
        self.want_out
    }

    /// Encodes a request with `encode` into the write buffer and queues it. Returns true
    /// when the connection just became dirty (the caller lists it for this turn's flush).
    #[inline]
    pub fn enqueue(&mut self, req: Pending, encode: impl FnOnce(&mut Outgoing<'_>)) -> bool {
        encode(&mut Outgoing {
            bytes: &mut self.wbuf,
            splices: &mut self.splices,
        });
        self.inflight.push_back(req);
        self.unwritten += 1;
        !std::mem::replace(&mut self.dirty, true)
    }

    /// Takes the connection off this turn's flush list.
    #[inline]
    pub fn clear_dirty(&mut self) {
        self.dirty = false;
    }

    /// Starts a non-blocking connect to `addr` and registers the socket as `id`.
    ///
    /// # Errors
    /// The connection-error kind when the socket cannot be made or registered; the caller
    /// closes the connection with it.
    pub fn connect(
        &mut self,
        id: ConnId,
        ep: &Epoll,
        addr: SocketAddr,
        now: u64,
    ) -> Result<(), String> {
        let sock = open(addr).map_err(|e| format!("connect: {}", error_kind(&e)))?;
        let sock = self.sock.insert(sock);
        self.state = ConnState::Connecting { since: now };
        self.connect_started = now;
        ep.add(sock.as_fd(), Interest::ReadWrite, id.token())
            .map_err(|e| {
                tracing::debug!(error = %e, "epoll_ctl failed");
                "epoll".to_string()
            })
    }

    /// Completes a connect that epoll reported done at `now`: handshaking (TLS: the
    /// ClientHello is on its way), up, or setting up (its first setup command is in the
    /// write buffer, for the caller to flush), or the error that ended it.
    ///
    /// # Errors
    /// The connection-error kind of a failed connect.
    pub fn finish_connect(
        &mut self,
        id: ConnId,
        ep: &Epoll,
        now: u64,
        handshakes: &mut Handshakes,
    ) -> Result<ConnState, Cow<'static, str>> {
        let err = self
            .sock
            .as_ref()
            .map(|s| s.take_error())
            .unwrap_or(Ok(None));
        match err {
            Ok(None) => {
                if let Some(s) = &self.sock {
                    let _ = ep.modify(s.as_fd(), Interest::Read, id.token());
                }
                self.want_out = false;
                match &self.tls_client {
                    Some(client) => {
                        let c = client
                            .connection()
                            .map_err(|e| Cow::Borrowed(target_tls::kind(&e)))?;
                        self.tls = Some(Box::new(c));
                        self.connected_at = now;
                        self.state = ConnState::Handshake { since: now };
                        self.handshake(id, ep, now, handshakes)
                    }
                    None => {
                        self.connected_at = now;
                        self.begin(now);
                        Ok(self.state)
                    }
                }
            }
            Ok(Some(e)) | Err(e) => Err(Cow::Owned(format!("connect: {}", error_kind(&e)))),
        }
    }

    /// Moves the TLS handshake on as far as the socket allows: writes what rustls has to
    /// send, reads what the server sent. Returns the state it leaves the connection in:
    /// still handshaking (waiting for the socket), or — handshake done, counted in
    /// `handshakes` — up or setting up, as after a plaintext connect.
    ///
    /// # Errors
    /// The connection-error kind (`tls: unknown_issuer`, `tls: eof`, ...); the caller
    /// closes the connection.
    pub fn handshake(
        &mut self,
        id: ConnId,
        ep: &Epoll,
        now: u64,
        handshakes: &mut Handshakes,
    ) -> Result<ConnState, Cow<'static, str>> {
        let (Some(sock), Some(tls)) = (&self.sock, &mut self.tls) else {
            return Err(Cow::Borrowed("eof"));
        };
        loop {
            let sent = send_records(sock, tls).map_err(|e| Cow::Owned(error_kind(&e)))?;
            want_writable(ep, sock, id, &mut self.want_out, !sent);
            if !sent {
                return Ok(self.state);
            }
            if !tls.is_handshaking() {
                handshakes.count(tls);
                break;
            }
            match tls.read_tls(&mut Io(sock)) {
                Ok(0) => return Err(Cow::Borrowed("tls: eof_in_handshake")),
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        // Tell the server why (the alert rustls queued), best effort.
                        let _ = tls.write_tls(&mut Io(sock));
                        return Err(Cow::Borrowed(target_tls::kind(&e)));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(self.state),
                Err(e) => return Err(Cow::Owned(error_kind(&e))),
            }
        }
        self.begin(now);
        Ok(self.state)
    }

    /// A connected socket at `now` (over TLS: handshake done): up, or setting up with the
    /// first setup command in the write buffer.
    fn begin(&mut self, now: u64) {
        self.secured_at = now;
        match self.setup.clone() {
            Some(setup) => {
                let (bytes, step) = setup.first();
                self.wbuf.extend_from_slice(bytes);
                self.step = step;
                self.state = ConnState::Setup { since: now };
            }
            None => self.up(),
        }
    }

    /// Ready for requests. The backoff resets only here, so a server that accepts the
    /// connect but refuses the setup is retried with a growing wait, not every 10 ms.
    fn up(&mut self) {
        self.state = ConnState::Up;
        self.backoff = BACKOFF_MIN_NS;
    }

    /// Takes the setup replies read so far, advancing the setup a step per reply; the last
    /// makes the connection up. Nothing is taken from or added to the requests in flight
    /// (there are none while setting up).
    ///
    /// # Errors
    /// [`SetupError`] when the server refused a step or sent bytes that are not the reply
    /// asked for; the caller closes the connection.
    pub fn take_setup(&mut self) -> Result<SetupProgress, SetupError> {
        let Some(setup) = self.setup.clone() else {
            return Err(SetupError::Fault(Fault::UnexpectedReply));
        };
        let mut flush = false;
        loop {
            let buf = &self.rbuf[self.rstart..self.rend];
            if buf.is_empty() {
                self.reset_read();
                return Ok(SetupProgress::Waiting { flush });
            }
            let scanned = resp::scan_reply(buf);
            if self.state == ConnState::Up {
                match scanned {
                    // Pushes after the last setup reply: skipped below. The start of one:
                    // the connection's replies are read from here on.
                    Ok(Scan::Push { .. }) => {}
                    Ok(Scan::Incomplete { need }) => {
                        self.need = self.rstart + need;
                        return Ok(SetupProgress::Up);
                    }
                    // More than the last setup step's reply, before any request was sent.
                    _ => return Err(SetupError::Fault(Fault::UnexpectedReply)),
                }
            }
            match scanned {
                Ok(Scan::Incomplete { need }) => {
                    if need > self.budget.max_reply {
                        return Err(SetupError::Fault(Fault::TooLarge));
                    }
                    self.need = self.rstart + need;
                    return Ok(SetupProgress::Waiting { flush });
                }
                // A push during the setup (or right after it, before any request)
                // answers no setup step: skipped.
                Ok(Scan::Push { len, .. }) => {
                    self.rstart += len;
                    if self.state == ConnState::Up && self.rstart == self.rend {
                        self.reset_read();
                        return Ok(SetupProgress::Up);
                    }
                }
                Ok(Scan::Reply { kind, len, .. }) => {
                    let next = setup.next(self.step, kind);
                    let message = match kind {
                        ReplyKind::Error { message, .. } => clean_message(message),
                        ReplyKind::Value | ReplyKind::Nil => String::new(),
                    };
                    self.rstart += len;
                    match next {
                        Next::Send(bytes, step) => {
                            self.wbuf.extend_from_slice(bytes);
                            self.step = step;
                            flush = true;
                        }
                        Next::Done => {
                            self.up();
                            if self.rstart == self.rend {
                                self.reset_read();
                                return Ok(SetupProgress::Up);
                            }
                        }
                        Next::Refused(r) => return Err(SetupError::Refused(r, message)),
                    }
                }
                Err(_) => return Err(SetupError::Fault(Fault::ProtocolError)),
            }
        }
    }

    /// Writes the write buffer. When all of it is written, every request that was waiting
    /// for the write is stamped `now` and reported to `on_sent`; when the socket is full,
    /// the connection asks epoll for writability and the rest waits for it.
    ///
    /// # Errors
    /// The send error; the caller closes the connection.
    #[inline]
    pub fn flush(
        &mut self,
        id: ConnId,
        ep: &Epoll,
        now: u64,
        mut on_sent: impl FnMut(&Pending),
    ) -> io::Result<()> {
        if let Some(sock) = &self.sock {
            let (wbuf, value) = (&self.wbuf, &self.value);
            let (wpos, splices, spos) = (&mut self.wpos, &mut self.splices, &mut self.spos);
            let done = match &mut self.tls {
                Some(tls) => flush_tls(sock, tls, wbuf, wpos, splices, spos, value)?,
                None => send_plain(sock, wbuf, wpos, splices, spos, value)?,
            };
            want_writable(ep, sock, id, &mut self.want_out, !done);
            if !done {
                return Ok(());
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        self.splices.clear();
        self.spos = 0;
        let first = self.inflight.len() - self.unwritten;
        for p in self.inflight.range_mut(first..) {
            p.written = now;
            on_sent(p);
        }
        self.unwritten = 0;
        Ok(())
    }

    /// One read into the read buffer, growing it first when little room is left (within
    /// the caps), or dropping the payload of a large bulk reply being streamed past.
    #[inline]
    pub fn receive(&mut self) -> Received {
        if self.skip == 0 && self.rbuf.len() - self.rend < READ_CHUNK / 4 {
            if self.rstart > 0 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.need = self.need.saturating_sub(self.rstart);
                self.rstart = 0;
            }
            if self.rbuf.len() - self.rend < READ_CHUNK / 4 {
                // One partial reply fills the buffer: it may grow to the reply cap.
                let cap = self.budget.max_reply + READ_CHUNK;
                let want = (self.rbuf.len() * 2).max(self.need + READ_CHUNK).min(cap);
                if want <= self.rbuf.len() || !self.budget.take(want - self.rbuf.len()) {
                    return Received::TooLarge;
                }
                self.rbuf.resize(want, 0);
            }
        }
        let Some(sock) = self.sock.as_ref() else {
            return Received::Closed(Cow::Borrowed("eof"));
        };
        let space = self.rbuf.len() - self.rend;
        // While streaming past a bulk payload, read no further than its end.
        let space = if self.skip > 0 {
            space.min(self.skip)
        } else {
            space
        };
        loop {
            let buf = &mut self.rbuf[self.rend..self.rend + space];
            let read = match &mut self.tls {
                None => stamp::recv(sock, buf).map(|(n, at)| {
                    self.rx_stamp = at;
                    (n, n == space)
                }),
                Some(tls) => read_tls(sock, tls, buf, &mut self.rx_stamp)
                    .map(|(n, more)| (n, more || n == space)),
            };
            match read {
                Ok((0, _)) => return Received::Closed(Cow::Borrowed("eof")),
                Ok((n, more)) if self.skip > 0 => {
                    self.skip -= n;
                    return Received::Data { filled: more };
                }
                Ok((n, more)) => {
                    self.rend += n;
                    return Received::Data { filled: more };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Received::WouldBlock,
                Err(e) => return Received::Closed(target_tls::io_kind(&e)),
            }
        }
    }

    /// When the kernel received the newest bytes read so far (wall ns), if it said.
    #[inline]
    pub fn rx_stamp(&self) -> Option<u64> {
        self.rx_stamp
    }

    /// Whether the bytes read so far may complete a reply (the scanner said how many it
    /// needs, so a large value is not rescanned on every read).
    #[inline]
    pub fn reply_ready(&self) -> bool {
        self.skip == 0 && self.rend >= self.need
    }

    /// Matches the complete replies read so far with their requests, and hands push frames
    /// to `on_push` (see [`match_replies`]); drops their bytes.
    ///
    /// # Errors
    /// The [`Fault`] that makes the connection unusable; the caller closes it.
    #[inline]
    pub fn take_replies(
        &mut self,
        on_reply: impl FnMut(Reply<'_>),
        on_push: impl FnMut(bool),
    ) -> Result<(), Fault> {
        let buf = &self.rbuf[self.rstart..self.rend];
        match match_replies(
            buf,
            &mut self.inflight,
            &mut self.unwritten,
            self.expects.as_deref(),
            on_reply,
            on_push,
        ) {
            Matched::All => {
                self.reset_read();
                self.shrink();
                Ok(())
            }
            Matched::Partial { consumed, need } => {
                self.need = self.rstart + need;
                self.rstart += consumed;
                self.check_partial()
            }
            Matched::Fault(f) => Err(f),
        }
    }

    /// The reply at `rstart` is incomplete: a large top-level bulk is turned into an empty
    /// one whose payload is dropped as it arrives; anything else larger than the reply cap
    /// is [`Fault::TooLarge`].
    fn check_partial(&mut self) -> Result<(), Fault> {
        let at_least = self.need - self.rstart;
        if at_least < SKIP_MIN {
            return Ok(());
        }
        let pending = &self.rbuf[self.rstart..self.rend];
        if let Some((header, len)) = resp::bulk_prefix(pending).filter(|_| self.expects.is_none()) {
            let have = (pending.len() - header).min(len);
            // The buffer keeps `$0\r\n` and whatever came after the payload (part of its
            // CRLF); the final CRLF completes an empty bulk, matched as any value. It goes
            // to the buffer's start (everything before `rstart` is consumed), so the reads
            // that stream the payload past get the whole buffer, not what is left after
            // earlier replies. The header is at least 8 bytes (`$65536\r\n`: a length ≥ SKIP_MIN), so the
            // stub never overwrites what it moves.
            let after = self.rstart + header + have;
            let tail = self.rend - after;
            self.rbuf[..4].copy_from_slice(b"$0\r\n");
            self.rbuf.copy_within(after..self.rend, 4);
            self.rstart = 0;
            self.rend = 4 + tail;
            self.skip = len - have;
            self.need = 6;
            return Ok(());
        }
        if at_least > self.budget.max_reply {
            return Err(Fault::TooLarge);
        }
        Ok(())
    }

    /// The read buffer holds nothing pending.
    fn reset_read(&mut self) {
        self.rstart = 0;
        self.rend = 0;
        self.need = 0;
    }

    /// Gives back a read buffer that grew for a large reply once it is empty.
    fn shrink(&mut self) {
        if self.rbuf.len() > 2 * READ_CHUNK {
            self.budget.give(self.rbuf.len() - READ_CHUNK);
            self.rbuf = vec![0; READ_CHUNK];
        }
    }

    /// Closes the connection: every request on it goes to `on_failed` (oldest first, with
    /// whether its write had completed), buffers empty, and a reconnect is due after the
    /// backoff, which doubles for the next failure.
    pub fn close(&mut self, now: u64, mut on_failed: impl FnMut(Pending, bool)) {
        // Closing the fd removes it from the epoll set.
        drop(self.sock.take());
        self.tls = None;
        // A stamp of this socket's reads says nothing of the next socket's (a TLS
        // handshake's reads are not stamped).
        self.rx_stamp = None;
        let written = self.inflight.len() - self.unwritten;
        for (i, p) in self.inflight.drain(..).enumerate() {
            on_failed(p, i < written);
        }
        self.unwritten = 0;
        self.wbuf.clear();
        self.wpos = 0;
        self.splices.clear();
        self.spos = 0;
        self.reset_read();
        self.skip = 0;
        // A buffer that grew for a reply goes back to its base size.
        if self.rbuf.len() > READ_CHUNK {
            self.budget.give(self.rbuf.len() - READ_CHUNK);
            self.rbuf = vec![0; READ_CHUNK];
        }
        self.dirty = false;
        self.want_out = false;
        self.retiring = false;
        self.retire_at = 0;
        self.state = ConnState::Down {
            retry_at: now + self.backoff,
        };
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX_NS);
    }

    /// Takes off the requests, oldest first, whose intended time is more than `timeout`
    /// before `now`, to `on_expired` with whether each was written (the shard's end: what
    /// is left stays in flight or unsent).
    pub fn expire_front(
        &mut self,
        now: u64,
        timeout: u64,
        mut on_expired: impl FnMut(Pending, bool),
    ) {
        while let Some(p) = self.inflight.front() {
            if now.saturating_sub(p.intended) <= timeout {
                break;
            }
            let written = self.inflight.len() > self.unwritten;
            if !written {
                self.unwritten -= 1;
            }
            if let Some(p) = self.inflight.pop_front() {
                on_expired(p, written);
            }
        }
    }

    /// What a sweep at `now` must do with this connection. A request times out when its
    /// intended time is more than `timeout` ago, written or not (issue #8: a request's
    /// deadline does not move because it waited for a connection).
    pub fn due(&self, now: u64, timeout: u64) -> Due {
        match self.state {
            ConnState::Up => match self.inflight.front() {
                Some(p) if now.saturating_sub(p.intended) > timeout => Due::Timeout,
                None if self.retiring => Due::Recycle,
                _ if !self.retiring && self.retire_at != 0 && now >= self.retire_at => Due::Retire,
                _ => Due::Nothing,
            },
            ConnState::Connecting { since } if now.saturating_sub(since) > timeout => {
                Due::ConnectTimeout
            }
            ConnState::Handshake { since } if now.saturating_sub(since) > timeout => {
                Due::HandshakeTimeout
            }
            ConnState::Setup { since } if now.saturating_sub(since) > timeout => Due::SetupTimeout,
            ConnState::Down { retry_at } if now >= retry_at => Due::Retry,
            _ => Due::Nothing,
        }
    }

    /// Measured requests left at the end: (written and unanswered, never written).
    pub fn leftovers(&self) -> (u64, u64) {
        let first_unwritten = self.inflight.len() - self.unwritten;
        let (mut in_flight, mut unsent) = (0, 0);
        for (i, p) in self.inflight.iter().enumerate() {
            if !p.measured {
                continue;
            }
            if i >= first_unwritten {
                unsent += 1;
            } else {
                in_flight += 1;
            }
        }
        (in_flight, unsent)
    }

    /// A connection with no shared value bytes and the default read caps.
    #[cfg(test)]
    pub fn for_tests(class: ClassId) -> Self {
        Self::new(class, Arc::from(Vec::new()), ReadBudget::default_caps())
    }

    /// Makes the connection up over `sock`, as a completed connect would (tests drive
    /// connections over socket pairs this way).
    #[cfg(test)]
    pub fn attach(&mut self, id: ConnId, ep: &Epoll, sock: socket2::Socket) {
        sock.set_nonblocking(true).unwrap();
        ep.add(sock.as_fd(), Interest::Read, id.token()).unwrap();
        self.sock = Some(sock);
        self.state = ConnState::Up;
    }

    /// Marks the connection up without a socket, for tests of the pure parts (a flush then
    /// counts the buffer as written).
    #[cfg(test)]
    pub fn set_up(&mut self) {
        self.state = ConnState::Up;
    }

    /// Appends `bytes` to the read buffer as if a read had brought them.
    #[cfg(test)]
    pub fn feed(&mut self, bytes: &[u8]) {
        self.rbuf.truncate(self.rend);
        self.rbuf.extend_from_slice(bytes);
        self.rend = self.rbuf.len();
        self.rbuf.resize(self.rend + READ_CHUNK, 0);
    }

    /// The bytes queued and not yet written.
    #[cfg(test)]
    pub fn wbuf_for_tests(&self) -> &[u8] {
        &self.wbuf[self.wpos..]
    }

    /// The requests in flight, oldest first.
    #[cfg(test)]
    pub fn requests(&self) -> impl Iterator<Item = &Pending> {
        self.inflight.iter()
    }
}

/// Counts `n` bytes written: through the write buffer (`wpos`) and the splices (`spos`
/// into the first), in stream order.
fn advance(splices: &mut VecDeque<Splice>, wpos: &mut usize, spos: &mut usize, mut n: usize) {
    while n > 0 {
        match splices.front() {
            Some(sp) if *wpos < sp.at => {
                let t = n.min(sp.at - *wpos);
                *wpos += t;
                n -= t;
            }
            Some(sp) => {
                let t = n.min(sp.len - *spos);
                *spos += t;
                n -= t;
                if *spos == sp.len {
                    splices.pop_front();
                    *spos = 0;
                }
            }
            None => {
                *wpos += n;
                n = 0;
            }
        }
    }
}

/// The pieces of the unwritten stream from `wpos` (and `spos` into the first splice):
/// `wbuf` runs and spliced values, in order, into `iov`; returns how many.
fn pieces<'a>(
    wbuf: &'a [u8],
    wpos: usize,
    splices: &VecDeque<Splice>,
    spos: usize,
    value: &'a [u8],
    iov: &mut [IoSlice<'a>; MAX_IOV],
) -> usize {
    let (mut n, mut pos, mut skip) = (0, wpos, spos);
    for sp in splices {
        if n + 2 > MAX_IOV {
            return n;
        }
        if pos < sp.at {
            iov[n] = IoSlice::new(&wbuf[pos..sp.at]);
            n += 1;
            pos = sp.at;
        }
        iov[n] = IoSlice::new(&value[sp.off + skip..sp.off + sp.len]);
        n += 1;
        skip = 0;
    }
    if pos < wbuf.len() {
        iov[n] = IoSlice::new(&wbuf[pos..]);
        n += 1;
    }
    n
}

/// The socket as rustls reads and writes it: `MSG_NOSIGNAL` on every send, as for
/// plaintext.
struct Io<'a>(&'a socket2::Socket);

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self.0).read(buf)
    }
}

/// The socket as rustls reads it, keeping the kernel's receive stamp of each read.
struct Stamped<'a>(&'a socket2::Socket, &'a mut Option<u64>);

impl Read for Stamped<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, at) = stamp::recv(self.0, buf)?;
        *self.1 = at;
        Ok(n)
    }
}

impl io::Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.send_with_flags(buf, libc::MSG_NOSIGNAL)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.send_vectored_with_flags(bufs, libc::MSG_NOSIGNAL)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Registers the socket for writability while a write waits for room (`on`), and back to
/// reads only once it is done; `want_out` remembers which, so epoll is told only on a change.
fn want_writable(ep: &Epoll, sock: &socket2::Socket, id: ConnId, want_out: &mut bool, on: bool) {
    if *want_out != on {
        *want_out = on;
        let interest = if on {
            Interest::ReadWrite
        } else {
            Interest::Read
        };
        let _ = ep.modify(sock.as_fd(), interest, id.token());
    }
}

/// Writes the unwritten stream (from `wpos`, and `spos` into the first splice) to a
/// plaintext socket: `send`, or `writev` with the spliced values. True when all of it was
/// written; false when the socket is full.
///
/// # Errors
/// The send error.
fn send_plain(
    sock: &socket2::Socket,
    wbuf: &[u8],
    wpos: &mut usize,
    splices: &mut VecDeque<Splice>,
    spos: &mut usize,
    value: &[u8],
) -> io::Result<bool> {
    while *wpos < wbuf.len() || !splices.is_empty() {
        let sent = if splices.is_empty() {
            sock.send_with_flags(&wbuf[*wpos..], libc::MSG_NOSIGNAL)
        } else {
            let mut iov = [IoSlice::new(&[]); MAX_IOV];
            let n = pieces(wbuf, *wpos, splices, *spos, value, &mut iov);
            sock.send_vectored_with_flags(&iov[..n], libc::MSG_NOSIGNAL)
        };
        match sent {
            Ok(n) => advance(splices, wpos, spos, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes the TLS records rustls holds to the socket. True when none is left; false when
/// the socket is full.
///
/// # Errors
/// The send error.
fn send_records(sock: &socket2::Socket, tls: &mut ClientConnection) -> io::Result<bool> {
    while tls.wants_write() {
        match tls.write_tls(&mut Io(sock)) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Hands the unwritten stream (from `wpos`, and `spos` into the first splice) to `tls`
/// and its records to the socket, alternating while rustls's send buffer (64 KiB) fills,
/// so a 10 MB value goes out in bounded pieces. True when all of it reached the socket;
/// false when the socket is full (the rest waits for writability).
///
/// # Errors
/// The send error, or the TLS connection's earlier failure.
fn flush_tls(
    sock: &socket2::Socket,
    tls: &mut ClientConnection,
    wbuf: &[u8],
    wpos: &mut usize,
    splices: &mut VecDeque<Splice>,
    spos: &mut usize,
    value: &[u8],
) -> io::Result<bool> {
    loop {
        while *wpos < wbuf.len() || !splices.is_empty() {
            let taken = if splices.is_empty() {
                tls.writer().write(&wbuf[*wpos..])?
            } else {
                let mut iov = [IoSlice::new(&[]); MAX_IOV];
                let n = pieces(wbuf, *wpos, splices, *spos, value, &mut iov);
                tls.writer().write_vectored(&iov[..n])?
            };
            if taken == 0 {
                break;
            }
            advance(splices, wpos, spos, taken);
        }
        if !send_records(sock, tls)? {
            return Ok(false);
        }
        if *wpos >= wbuf.len() && splices.is_empty() {
            return Ok(true);
        }
    }
}

/// One TLS read into `buf`: plaintext rustls already holds, else one `read` of records
/// from the socket, decrypted. Returns the bytes given and whether rustls still holds
/// plaintext (read again before waiting: epoll will not say so). `Ok((0, _))` is the end
/// of the stream (clean `close_notify` or TCP EOF).
///
/// # Errors
/// The socket's error (`WouldBlock` when nothing is there), or the TLS failure inside an
/// `InvalidData` error ([`target_tls::tls_error`]).
fn read_tls(
    sock: &socket2::Socket,
    tls: &mut ClientConnection,
    buf: &mut [u8],
    rx_stamp: &mut Option<u64>,
) -> io::Result<(usize, bool)> {
    loop {
        match tls.reader().read(buf) {
            Ok(n) => {
                let more = tls
                    .process_new_packets()
                    .map(|s| s.plaintext_bytes_to_read() > 0)
                    .unwrap_or(true);
                return Ok((n, n > 0 && more));
            }
            // An unclean close (TCP EOF without close_notify) ends the stream like EOF.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok((0, false)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        if tls.read_tls(&mut Stamped(sock, rx_stamp))? == 0 {
            // EOF: let rustls see it, then the reader says clean or not.
            tls.process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            return match tls.reader().read(buf) {
                Ok(n) => Ok((n, false)),
                Err(_) => Ok((0, false)),
            };
        }
        if let Err(e) = tls.process_new_packets() {
            let _ = tls.write_tls(&mut Io(sock));
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        // Records rustls must answer (a key update): sent now, or with the next flush.
        if tls.wants_write() {
            let _ = tls.write_tls(&mut Io(sock));
        }
    }
}

/// A non-blocking TCP socket with `TCP_NODELAY`, its connect to `addr` started.
fn open(addr: SocketAddr) -> io::Result<socket2::Socket> {
    let sock = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking().cloexec(),
        Some(socket2::Protocol::TCP),
    )?;
    sock.set_nodelay(true)?;
    // Replies are timed at their arrival even when read late; a kernel that refuses
    // leaves them timed at the read.
    let _ = stamp::enable(&sock);
    match sock.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(sock)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::epoll::Events;
    use std::io::Write;
    use std::os::unix::net::UnixStream;

    fn pending(intended: u64, cmd: u32) -> Pending {
        Pending {
            intended,
            written: 0,
            key: NO_KEY,
            cmd,
            tries: 0,
            measured: true,
            asking: false,
        }
    }

    /// (intended, error kind, early, idle) of each reply seen.
    type Seen = Vec<(u64, Option<String>, bool, bool)>;

    /// Runs `match_replies` over `bytes`, collecting what it reports.
    fn matched(
        bytes: &[u8],
        inflight: &mut VecDeque<Pending>,
        unwritten: &mut usize,
    ) -> (Seen, Matched) {
        let mut seen = Vec::new();
        let m = match_replies(
            bytes,
            inflight,
            unwritten,
            None,
            |r| {
                let err = match r.kind {
                    ReplyKind::Value | ReplyKind::Nil => None,
                    ReplyKind::Error { kind: k, .. } => {
                        Some(String::from_utf8_lossy(k).into_owned())
                    }
                };
                seen.push((r.req.intended, err, r.early, r.idle));
            },
            |_| panic!("no push"),
        );
        (seen, m)
    }

    #[test]
    fn replies_match_requests_in_order_with_error_kinds() {
        let mut q: VecDeque<_> = (1..=3).map(|t| pending(t, 0)).collect();
        let mut unwritten = 0;
        let (seen, m) = matched(
            b"+OK\r\n-WRONGTYPE no\r\n$3\r\nabc\r\n",
            &mut q,
            &mut unwritten,
        );
        assert_eq!(m, Matched::All);
        assert_eq!(
            seen,
            vec![
                (1, None, false, false),
                (2, Some("WRONGTYPE".into()), false, false),
                (3, None, false, true),
            ]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn a_partial_reply_waits_for_the_bytes_the_scanner_asks_for() {
        let mut q: VecDeque<_> = (1..=2).map(|t| pending(t, 0)).collect();
        let mut unwritten = 0;
        let (seen, m) = matched(b":1\r\n$10\r\nabc", &mut q, &mut unwritten);
        assert_eq!(seen.len(), 1);
        // The bulk's header is in: the scanner knows its exact end (4 + 5 + 10 + 2).
        assert_eq!(
            m,
            Matched::Partial {
                consumed: 4,
                need: 21
            }
        );
        assert_eq!(q.len(), 1, "the unanswered request stays in flight");
    }

    #[test]
    fn a_reply_before_the_write_finished_is_early_and_marks_the_request_sent() {
        let mut q: VecDeque<_> = (1..=3).map(|t| pending(t, 0)).collect();
        // The last two are still in the write buffer; the first was written.
        let mut unwritten = 2;
        let (seen, _) = matched(b"+OK\r\n", &mut q, &mut unwritten);
        assert_eq!(seen, vec![(1, None, false, false)]);
        assert_eq!(unwritten, 2);
        let (seen, _) = matched(b"-ERR partial\r\n", &mut q, &mut unwritten);
        assert_eq!(seen, vec![(2, Some("ERR".into()), true, false)]);
        assert_eq!(unwritten, 1, "the remaining request is still unwritten");
    }

    #[test]
    fn a_reply_with_nothing_in_flight_is_a_fault_after_the_matched_ones() {
        let mut q: VecDeque<_> = [pending(1, 0)].into();
        let mut unwritten = 0;
        let (seen, m) = matched(b"+OK\r\n+surprise\r\n", &mut q, &mut unwritten);
        assert_eq!(seen.len(), 1, "the answered request still counts");
        assert_eq!(m, Matched::Fault(Fault::UnexpectedReply));
        let (seen, m) = matched(b"+hello\r\n", &mut VecDeque::new(), &mut 0);
        assert!(seen.is_empty());
        assert_eq!(m, Matched::Fault(Fault::UnexpectedReply));
        assert_eq!(Fault::UnexpectedReply.kind(), "unexpected_reply");
        // An error nobody asked for is the server refusing the connection (maxclients).
        let (_, m) = matched(
            b"-ERR max number of clients reached\r\n",
            &mut VecDeque::new(),
            &mut 0,
        );
        assert_eq!(m, Matched::Fault(Fault::RefusedByServer));
        assert_eq!(Fault::RefusedByServer.kind(), "refused_by_server");
    }

    #[test]
    fn garbage_is_a_protocol_fault_not_a_panic() {
        let mut q: VecDeque<_> = (1..=2).map(|t| pending(t, 0)).collect();
        let (seen, m) = matched(b"+OK\r\n!!garbage\r\n", &mut q, &mut 0);
        assert_eq!(seen.len(), 1);
        assert_eq!(m, Matched::Fault(Fault::ProtocolError));
        assert_eq!(q.len(), 1, "left for the close to fail");
        assert_eq!(Fault::ProtocolError.kind(), "protocol_error");
        let (_, m) = matched(b"$-5\r\n", &mut q, &mut 0);
        assert_eq!(m, Matched::Fault(Fault::ProtocolError));
    }

    #[test]
    fn close_fails_every_request_and_backs_off_doubling_to_a_cap() {
        let mut c = Conn::for_tests(ClassId(0));
        c.set_up();
        for t in 1..=3 {
            assert_eq!(
                c.enqueue(pending(t, 0), |b| b.bytes().extend_from_slice(b"x")),
                t == 1
            );
        }
        let mut failed = Vec::new();
        c.close(100, |p, _| failed.push(p.intended));
        assert_eq!(failed, vec![1, 2, 3]);
        assert_eq!(c.in_flight(), 0);
        assert_eq!(c.leftovers(), (0, 0));
        assert_eq!(
            c.state(),
            ConnState::Down {
                retry_at: 100 + BACKOFF_MIN_NS
            }
        );
        assert!(!c.has_room(1), "a closed connection takes no requests");
        assert_eq!(c.due(100 + BACKOFF_MIN_NS - 1, u64::MAX), Due::Nothing);
        assert_eq!(c.due(100 + BACKOFF_MIN_NS, u64::MAX), Due::Retry);
        let mut waits = Vec::new();
        for _ in 0..10 {
            c.close(0, |_, _| {});
            let ConnState::Down { retry_at } = c.state() else {
                panic!()
            };
            waits.push(retry_at);
        }
        assert_eq!(&waits[..3], &[20_000_000, 40_000_000, 80_000_000]);
        assert_eq!(*waits.last().unwrap(), BACKOFF_MAX_NS);
    }

    #[test]
    fn a_sweep_times_out_the_oldest_request_from_its_intended_time() {
        let mut c = Conn::for_tests(ClassId(0));
        c.set_up();
        c.enqueue(pending(1_000, 0), |_| {});
        assert_eq!(c.due(1_500, 500), Due::Nothing);
        assert_eq!(c.due(1_501, 500), Due::Timeout);
        // Written late: the deadline still runs from the intended time.
        c.inflight[0].written = 1_400;
        assert_eq!(c.due(1_501, 500), Due::Timeout);
        c.state = ConnState::Connecting { since: 10 };
        assert_eq!(c.due(510, 500), Due::Nothing);
        assert_eq!(c.due(511, 500), Due::ConnectTimeout);
    }

    /// At the end, requests past their deadline leave the books as timeouts (told apart by
    /// whether they were written); younger ones stay in flight or unsent.
    #[test]
    fn expire_front_takes_only_requests_past_their_deadline() {
        let mut c = Conn::for_tests(ClassId(0));
        c.set_up();
        for t in [100, 200, 300, 900] {
            c.enqueue(pending(t, 0), |_| {});
        }
        c.unwritten = 2; // 100 and 200 written, 300 and 900 not
        let mut out = Vec::new();
        c.expire_front(1_000, 650, |p, w| out.push((p.intended, w)));
        assert_eq!(out, vec![(100, true), (200, true), (300, false)]);
        assert_eq!(c.leftovers(), (0, 1));
    }

    #[test]
    fn leftovers_split_written_from_unwritten_and_skip_warmup() {
        let mut c = Conn::for_tests(ClassId(0));
        c.set_up();
        c.enqueue(pending(1, 0), |_| {});
        c.enqueue(
            Pending {
                measured: false,
                ..pending(2, 0)
            },
            |_| {},
        );
        c.unwritten = 0; // both written
        c.enqueue(pending(3, 0), |_| {});
        assert_eq!(c.leftovers(), (1, 1));
    }

    /// Write and read over a socket pair: one send carries every queued request, each
    /// gets the write's time, and replies read back match them.
    #[test]
    fn flush_and_receive_over_a_socket_pair() {
        let ep = Epoll::new().unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let id = ConnId(3);
        let mut c = Conn::for_tests(ClassId(0));
        c.attach(
            id,
            &ep,
            socket2::Socket::from(std::os::fd::OwnedFd::from(ours)),
        );
        c.enqueue(pending(5, 0), |b| b.bytes().extend_from_slice(b"PING\r\n"));
        c.enqueue(pending(6, 1), |b| b.bytes().extend_from_slice(b"PING\r\n"));
        let mut sent = Vec::new();
        c.flush(id, &ep, 42, |p| sent.push((p.intended, p.written)))
            .unwrap();
        assert_eq!(sent, vec![(5, 42), (6, 42)]);
        let mut got = [0u8; 64];
        let n = (&theirs).read(&mut got).unwrap();
        assert_eq!(&got[..n], b"PING\r\nPING\r\n");

        assert_eq!(c.receive(), Received::WouldBlock);
        (&theirs).write_all(b"+PONG\r\n+PO").unwrap();
        assert_eq!(c.receive(), Received::Data { filled: false });
        let mut answered = Vec::new();
        c.take_replies(
            |r| answered.push((r.req.cmd, r.req.since(), r.idle)),
            |_| {},
        )
        .unwrap();
        assert_eq!(answered, vec![(0, 42, false)]);
        assert!(!c.reply_ready(), "waits for the rest of +PONG");
        (&theirs).write_all(b"NG\r\n").unwrap();
        assert_eq!(c.receive(), Received::Data { filled: false });
        assert!(c.reply_ready());
        answered.clear();
        c.take_replies(
            |r| answered.push((r.req.cmd, r.req.since(), r.idle)),
            |_| {},
        )
        .unwrap();
        assert_eq!(answered, vec![(1, 42, true)]);

        drop(theirs);
        assert_eq!(c.receive(), Received::Closed("eof".into()));
    }

    /// A full socket makes the connection ask for writability and finish later; the
    /// requests count as sent only when their bytes are all out.
    #[test]
    fn a_full_socket_defers_the_rest_to_writability() {
        let mut ep = Epoll::new().unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let id = ConnId(0);
        let mut c = Conn::for_tests(ClassId(0));
        c.attach(
            id,
            &ep,
            socket2::Socket::from(std::os::fd::OwnedFd::from(ours)),
        );
        let big = vec![b'x'; 4 << 20];
        c.enqueue(pending(1, 0), |b| b.bytes().extend_from_slice(&big));
        let mut sent = 0;
        c.flush(id, &ep, 10, |_| sent += 1).unwrap();
        assert!(c.want_out(), "4 MiB does not fit a socket buffer");
        assert_eq!(sent, 0);
        let mut events = Events::with_capacity(4);
        let mut drained = 0;
        let mut buf = vec![0u8; 1 << 20];
        while c.want_out() {
            drained += (&theirs).read(&mut buf).unwrap();
            ep.wait(&mut events, 0);
            if events.iter().any(|(t, r)| t == id.token() && r.writable()) {
                c.flush(id, &ep, 20, |p| {
                    sent += 1;
                    assert_eq!(p.written, 20);
                })
                .unwrap();
            }
        }
        assert_eq!(sent, 1);
        theirs.set_nonblocking(true).unwrap();
        while let Ok(n) = (&theirs).read(&mut buf) {
            drained += n;
        }
        assert_eq!(drained, big.len());
    }

    /// A socket pair with our end attached to a new connection as `ConnId(0)`.
    fn pair(c: &mut Conn) -> (Epoll, UnixStream) {
        let ep = Epoll::new().unwrap();
        let (ours, theirs) = UnixStream::pair().unwrap();
        c.attach(
            ConnId(0),
            &ep,
            socket2::Socket::from(std::os::fd::OwnedFd::from(ours)),
        );
        (ep, theirs)
    }

    /// Reads until `n` replies were matched or the connection gives up; returns the
    /// replies' kinds (None for a value) and how the reading ended.
    fn read_replies(c: &mut Conn, n: usize) -> (Vec<Option<Vec<u8>>>, Result<(), String>) {
        let mut got = Vec::new();
        for _ in 0..200_000 {
            if got.len() == n {
                return (got, Ok(()));
            }
            match c.receive() {
                Received::WouldBlock => std::thread::sleep(std::time::Duration::from_micros(200)),
                Received::Closed(k) => return (got, Err(k.into_owned())),
                Received::TooLarge => return (got, Err(Fault::TooLarge.kind().into())),
                Received::Data { .. } => {
                    if c.reply_ready() {
                        let r = c.take_replies(
                            |r| {
                                got.push(match r.kind {
                                    ReplyKind::Value | ReplyKind::Nil => None,
                                    ReplyKind::Error { kind, .. } => Some(kind.to_vec()),
                                })
                            },
                            |_| {},
                        );
                        if let Err(f) = r {
                            return (got, Err(f.kind().into()));
                        }
                    }
                }
            }
        }
        (got, Err("gave up".into()))
    }

    /// A 20 MiB bulk reply is streamed past: the read buffer never grows, the budget is
    /// untouched, and the reply and the one after it match their requests.
    #[test]
    fn a_huge_bulk_reply_is_streamed_past_without_buffering_it() {
        let mut c = Conn::for_tests(ClassId(0));
        let (_ep, theirs) = pair(&mut c);
        c.enqueue(pending(1, 0), |_| {});
        c.enqueue(pending(2, 0), |_| {});
        c.unwritten = 0;
        let writer = std::thread::spawn(move || {
            let mut theirs = theirs;
            theirs.write_all(b"$20971520\r\n").unwrap();
            let chunk = vec![b'v'; 1 << 20];
            for _ in 0..20 {
                theirs.write_all(&chunk).unwrap();
            }
            theirs.write_all(b"\r\n-ERR after\r\n").unwrap();
            theirs
        });
        let before = c.budget.left();
        let (got, end) = read_replies(&mut c, 2);
        let _theirs = writer.join().unwrap();
        assert_eq!(end, Ok(()));
        assert_eq!(got, vec![None, Some(b"ERR".to_vec())]);
        assert_eq!(c.rbuf.len(), READ_CHUNK, "the buffer never grew");
        assert_eq!(c.budget.left(), before);
    }

    /// A bulk whose payload is followed by something other than CRLF is still garbage
    /// after being streamed past.
    #[test]
    fn a_streamed_bulk_without_its_crlf_is_a_protocol_error() {
        let mut c = Conn::for_tests(ClassId(0));
        let (_ep, mut theirs) = pair(&mut c);
        c.enqueue(pending(1, 0), |_| {});
        c.unwritten = 0;
        let mut reply = b"$100000\r\n".to_vec();
        reply.resize(reply.len() + 100_000, b'v');
        reply.extend_from_slice(b"XY");
        std::thread::spawn(move || theirs.write_all(&reply).map(|_| theirs));
        let (got, end) = read_replies(&mut c, 1);
        assert!(got.is_empty());
        assert_eq!(end, Err("protocol_error".into()));
    }

    /// An array announcing a billion elements is refused as soon as its lower bound
    /// passes the reply cap, without growing the buffer towards it.
    #[test]
    fn an_endless_array_is_too_large_before_it_is_buffered() {
        let mut c = Conn::new(
            ClassId(0),
            Arc::from(Vec::new()),
            ReadBudget::new(1 << 20, 1 << 30),
        );
        let (_ep, mut theirs) = pair(&mut c);
        c.enqueue(pending(1, 0), |_| {});
        c.unwritten = 0;
        theirs.write_all(b"*999999999\r\n:1\r\n:2\r\n").unwrap();
        let (got, end) = read_replies(&mut c, 1);
        assert!(got.is_empty());
        assert_eq!(end, Err("reply_too_large".into()));
        assert_eq!(c.rbuf.len(), READ_CHUNK);
    }

    /// Elements that keep coming (a small announced count, huge elements inside an
    /// array) grow the buffer only to the reply cap.
    #[test]
    fn an_array_of_large_elements_stops_at_the_reply_cap() {
        let cap = 1 << 20;
        let mut c = Conn::new(
            ClassId(0),
            Arc::from(Vec::new()),
            ReadBudget::new(cap, 1 << 30),
        );
        let (_ep, theirs) = pair(&mut c);
        c.enqueue(pending(1, 0), |_| {});
        c.unwritten = 0;
        std::thread::spawn(move || {
            let mut theirs = theirs;
            let _ = theirs.write_all(b"*3\r\n$400000\r\n");
            let chunk = vec![b'v'; 400_000];
            for _ in 0..20 {
                if theirs.write_all(&chunk).is_err()
                    || theirs.write_all(b"\r\n$400000\r\n").is_err()
                {
                    break;
                }
            }
        });
        let (got, end) = read_replies(&mut c, 1);
        assert!(got.is_empty());
        assert_eq!(end, Err("reply_too_large".into()));
        assert!(c.rbuf.len() <= cap + READ_CHUNK, "{}", c.rbuf.len());
        // Closing gives the grown buffer back to the shard's budget.
        c.close(0, |_, _| {});
        assert_eq!(c.budget.left(), 1 << 30);
    }

    /// Connections share the shard's budget: when it is spent, the next one that must
    /// grow fails as too large instead of allocating.
    #[test]
    fn the_shard_budget_bounds_every_buffer_together() {
        let budget = ReadBudget::new(8 << 20, 3 * READ_CHUNK);
        let mut a = Conn::new(ClassId(0), Arc::from(Vec::new()), budget.clone());
        let (_ea, mut ta) = pair(&mut a);
        a.enqueue(pending(1, 0), |_| {});
        a.unwritten = 0;
        // A 300 KB simple string: not streamable, so it must be buffered.
        let mut line = b"+".to_vec();
        line.resize(300_000, b'x');
        std::thread::spawn(move || ta.write_all(&line).map(|_| ta));
        let (got, end) = read_replies(&mut a, 1);
        assert!(got.is_empty());
        assert_eq!(end, Err("reply_too_large".into()));
        assert!(a.rbuf.len() < 300_000, "stopped before holding the line");
        assert_eq!(a.rbuf.len() - READ_CHUNK + budget.left(), 3 * READ_CHUNK);
    }

    /// A line that never ends is a protocol error at the line cap.
    #[test]
    fn an_endless_line_ends_at_the_line_cap() {
        let mut c = Conn::for_tests(ClassId(0));
        c.set_up();
        c.enqueue(pending(1, 0), |_| {});
        let mut line = b"+".to_vec();
        line.resize(resp::MAX_LINE_LEN + 2, b'x');
        c.feed(&line);
        assert_eq!(
            c.take_replies(|_| panic!("no reply"), |_| panic!("no push")),
            Err(Fault::ProtocolError)
        );
    }

    /// A 1 MB value is written from the shared bytes (the write buffer holds only the
    /// framing) and the peer reads exactly what a copying encoder would have sent.
    #[test]
    fn large_values_are_spliced_from_the_shared_buffer_with_writev() {
        let value: Arc<[u8]> = Arc::from((0..1_000_000u32).map(|i| i as u8).collect::<Vec<_>>());
        let mut c = Conn::new(ClassId(0), value.clone(), ReadBudget::default_caps());
        let (mut ep, theirs) = pair(&mut c);
        let mut expected = Vec::new();
        for (t, len) in [(1, 1_000_000), (2, 10), (3, 20_000)] {
            c.enqueue(pending(t, 0), |b| {
                b.bytes().extend_from_slice(b"SET ");
                b.value(&value, 0, len);
                b.bytes().extend_from_slice(b"\r\n");
            });
            expected.extend_from_slice(b"SET ");
            expected.extend_from_slice(&value[..len]);
            expected.extend_from_slice(b"\r\n");
        }
        assert_eq!(c.splices.len(), 2, "the 10-byte value is copied");
        assert!(c.wbuf.len() < 100, "{}", c.wbuf.len());
        let reader = std::thread::spawn(move || {
            let mut theirs = theirs;
            let mut got = vec![0u8; expected.len()];
            theirs.read_exact(&mut got).unwrap();
            assert!(got == expected, "the bytes differ");
        });
        let mut sent = 0;
        let mut events = Events::with_capacity(4);
        c.flush(ConnId(0), &ep, 5, |_| sent += 1).unwrap();
        for _ in 0..100_000 {
            if sent == 3 {
                break;
            }
            ep.wait(&mut events, 1_000_000);
            c.flush(ConnId(0), &ep, 6, |_| sent += 1).unwrap();
        }
        assert_eq!(sent, 3);
        reader.join().unwrap();
        assert!(c.splices.is_empty() && c.wbuf.is_empty());
    }

    fn session(user: Option<&str>, db: u32, resp: Resp) -> Session {
        Session {
            login: user.map(|user| crest_model::target::Login {
                user: user.into(),
                password: crest_model::target::Secret::new("pw"),
            }),
            db,
            resp,
            tracking: false,
            readonly: false,
        }
    }

    fn login(user: &str, db: u32) -> Rc<Setup> {
        Rc::new(Setup::new(&session(Some(user), db, Resp::Resp2), "crest-w-0").unwrap())
    }

    const ERR: fn(&'static [u8]) -> ReplyKind<'static> = |kind| ReplyKind::Error {
        kind,
        message: kind,
    };

    fn cmd(args: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        resp::encode_command(&mut b, args);
        b
    }

    /// HELLO (naming the connection), then SELECT; a RESP2 HELLO refused for anything but
    /// the password falls back to AUTH and CLIENT SETNAME; every refusal counts under a
    /// fixed kind.
    #[test]
    fn setup_steps_follow_the_replies() {
        assert!(
            Setup::new(&Session::default(), "n").is_none(),
            "nothing to set up"
        );
        let s = login("bench", 2);
        assert_eq!(
            s.first(),
            (
                cmd(&[
                    b"HELLO",
                    b"2",
                    b"AUTH",
                    b"bench",
                    b"pw",
                    b"SETNAME",
                    b"crest-w-0"
                ])
                .as_slice(),
                Step::Hello
            )
        );
        let select = b"*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n".as_slice();
        let setname = cmd(&[b"CLIENT", b"SETNAME", b"crest-w-0"]);
        assert_eq!(
            s.next(Step::Hello, ReplyKind::Value),
            Next::Send(select, Step::Select)
        );
        assert_eq!(
            s.next(Step::Hello, ERR(b"ERR")),
            Next::Send(
                b"*3\r\n$4\r\nAUTH\r\n$5\r\nbench\r\n$2\r\npw\r\n",
                Step::Auth
            )
        );
        assert_eq!(
            s.next(Step::Auth, ReplyKind::Value),
            Next::Send(&setname, Step::SetName)
        );
        assert_eq!(
            s.next(Step::SetName, ReplyKind::Value),
            Next::Send(select, Step::Select)
        );
        // A name the server will not take only labels the connection: not a refusal.
        assert_eq!(
            s.next(Step::SetName, ERR(b"NOPERM")),
            Next::Send(select, Step::Select)
        );
        assert_eq!(s.next(Step::Select, ReplyKind::Value), Next::Done);
        for (step, word, kind) in [
            (Step::Hello, b"WRONGPASS".as_slice(), "setup: WRONGPASS"),
            (Step::Auth, b"WRONGPASS", "setup: WRONGPASS"),
            (Step::Select, b"NOPERM", "setup: NOPERM"),
            (Step::Select, b"ERR", "setup: ERR"),
            (Step::Auth, b"\xffWEIRD", "setup: other"),
        ] {
            let r = s.next(
                step,
                ReplyKind::Error {
                    kind: word,
                    message: word,
                },
            );
            assert_eq!(r, Next::Refused(Refusal { step, kind }));
        }
        // A password alone: the user `default`, left out of AUTH for old servers.
        let d = login("default", 0);
        assert_eq!(d.next(Step::Hello, ReplyKind::Value), Next::Done);
        assert_eq!(
            d.next(Step::Hello, ERR(b"ERR")),
            Next::Send(b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n", Step::Auth)
        );
        // A database alone: HELLO 2 to name the connection (CLIENT SETNAME on a server
        // without it), then SELECT.
        let db = Setup::new(&session(None, 7, Resp::Resp2), "crest-w-0").unwrap();
        assert_eq!(
            db.first().0,
            cmd(&[b"HELLO", b"2", b"SETNAME", b"crest-w-0"]).as_slice()
        );
        assert_eq!(
            db.next(Step::Hello, ERR(b"ERR")),
            Next::Send(&setname, Step::SetName)
        );
        assert!(!format!("{s:?}").contains("pw"), "{s:?}");
    }

    /// RESP3: HELLO 3 [AUTH] SETNAME; a server that refuses it (no HELLO, NOPROTO) cannot
    /// speak RESP3, so there is no fallback. CLIENT TRACKING on comes last. Names are made
    /// fit for CLIENT SETNAME.
    #[test]
    fn a_resp3_setup_says_hello_3_and_has_no_fallback() {
        let plain = Setup::new(&session(None, 0, Resp::Resp3), "crest-my host-1").unwrap();
        assert_eq!(
            plain.first().0,
            cmd(&[b"HELLO", b"3", b"SETNAME", b"crest-my-host-1"]).as_slice()
        );
        assert_eq!(plain.next(Step::Hello, ReplyKind::Value), Next::Done);
        for (word, kind) in [
            (b"ERR".as_slice(), "setup: ERR"),
            (b"NOPROTO", "setup: NOPROTO"),
            (b"WRONGPASS", "setup: WRONGPASS"),
            (b"NOPERM", "setup: NOPERM"),
        ] {
            assert_eq!(
                plain.next(Step::Hello, ERR(word)),
                Next::Refused(Refusal {
                    step: Step::Hello,
                    kind
                })
            );
        }
        let auth = Setup::new(&session(Some("bench"), 0, Resp::Resp3), "c").unwrap();
        assert_eq!(
            auth.first().0,
            cmd(&[b"HELLO", b"3", b"AUTH", b"bench", b"pw", b"SETNAME", b"c"]).as_slice()
        );
        let mut tracked = session(None, 3, Resp::Resp3);
        tracked.tracking = true;
        let t = Setup::new(&tracked, "c").unwrap();
        let track = cmd(&[b"CLIENT", b"TRACKING", b"on"]);
        assert!(matches!(
            t.next(Step::Hello, ReplyKind::Value),
            Next::Send(_, Step::Select)
        ));
        assert_eq!(
            t.next(Step::Select, ReplyKind::Value),
            Next::Send(&track, Step::Tracking)
        );
        assert_eq!(t.next(Step::Tracking, ReplyKind::Value), Next::Done);
        assert_eq!(
            t.next(Step::Tracking, ERR(b"NOPERM")),
            Next::Refused(Refusal {
                step: Step::Tracking,
                kind: "setup: NOPERM"
            })
        );
    }

    /// Reads from cluster replicas: `READONLY` ends the setup, after tracking; a plain
    /// RESP2 session sends nothing else first.
    #[test]
    fn a_replica_read_setup_ends_with_readonly() {
        let readonly = cmd(&[b"READONLY"]);
        let mut s = session(None, 0, Resp::Resp3);
        s.tracking = true;
        s.readonly = true;
        let t = Setup::new(&s, "c").unwrap();
        assert!(matches!(
            t.next(Step::Hello, ReplyKind::Value),
            Next::Send(_, Step::Tracking)
        ));
        assert_eq!(
            t.next(Step::Tracking, ReplyKind::Value),
            Next::Send(&readonly, Step::Readonly)
        );
        assert_eq!(t.next(Step::Readonly, ReplyKind::Value), Next::Done);
        let mut plain = session(None, 0, Resp::Resp2);
        plain.readonly = true;
        let p = Setup::new(&plain, "c").expect("READONLY needs a setup");
        assert!(matches!(
            p.next(Step::Hello, ReplyKind::Value),
            Next::Send(_, Step::Readonly)
        ));
        assert_eq!(
            p.next(Step::Readonly, ERR(b"ERR")),
            Next::Refused(Refusal {
                step: Step::Readonly,
                kind: "setup: ERR"
            })
        );
    }

    /// The pipeline of the research's live check, as redis (push before the reply) and
    /// valkey (push after it) send it: GET k1, DEBUG PROTOCOL push, GET k2, DEBUG PROTOCOL
    /// attrib, GET missing. Each reply answers its own request; the push answers none;
    /// the miss is counted; an invalidation with nothing in flight is no fault.
    #[test]
    fn pushes_and_attributes_never_shift_the_matching() {
        let push = b">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n".as_slice();
        let push_reply = b"$40\r\nSome real reply following the push reply\r\n".as_slice();
        let attrib = b"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n$39\r\nSome real reply following the attribute\r\n".as_slice();
        let redis = [
            b"$2\r\nv1\r\n".as_slice(),
            push,
            push_reply,
            b"$2\r\nv2\r\n",
            attrib,
            b"_\r\n",
        ]
        .concat();
        let valkey = [
            b"$2\r\nv1\r\n".as_slice(),
            push_reply,
            push,
            b"$2\r\nv2\r\n",
            attrib,
            b"_\r\n",
        ]
        .concat();
        for bytes in [redis, valkey] {
            // Whole, and split at every byte as reads would bring it.
            for split in 0..=bytes.len() {
                let mut q: VecDeque<_> = (1..=5).map(|t| pending(t, t as u32)).collect();
                let mut seen = Vec::new();
                let mut pushes = Vec::new();
                let mut at = 0;
                for chunk_end in [split, bytes.len()] {
                    let m = match_replies(
                        &bytes[at..chunk_end],
                        &mut q,
                        &mut 0,
                        None,
                        |r| seen.push((r.req.cmd, r.kind == ReplyKind::Nil, r.misses)),
                        |inv| pushes.push(inv),
                    );
                    match m {
                        Matched::All => at = chunk_end,
                        Matched::Partial { consumed, .. } => at += consumed,
                        Matched::Fault(f) => panic!("split {split}: {f:?}"),
                    }
                }
                assert_eq!(at, bytes.len(), "split {split}");
                assert_eq!(
                    seen,
                    vec![
                        (1, false, 0),
                        (2, false, 0),
                        (3, false, 0),
                        (4, false, 0),
                        (5, true, 1)
                    ],
                    "split {split}"
                );
                assert_eq!(pushes, vec![false], "split {split}");
            }
        }
        // An invalidation while idle, then an MGET with two missing keys.
        let mut q: VecDeque<_> = [pending(9, 0)].into();
        let mut seen = Vec::new();
        let mut pushes = Vec::new();
        let m = match_replies(
            b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\ntk\r\n*3\r\n$1\r\na\r\n_\r\n_\r\n>2\r\n$10\r\ninvalidate\r\n_\r\n",
            &mut q,
            &mut 0,
            None,
            |r| seen.push(r.misses),
            |inv| pushes.push(inv),
        );
        assert_eq!(m, Matched::All);
        assert_eq!(seen, vec![2]);
        assert_eq!(pushes, vec![true, true]);
    }

    /// memcached replies are read as the front request's command expects, split at every
    /// byte: a get's miss (a nil), a multi-get with one key of three found (two misses), a
    /// store, a quiet meta multi-get, an error; with nothing in flight a SERVER_ERROR is
    /// the server refusing the connection, anything else an unexpected reply.
    #[test]
    fn memcached_replies_follow_each_requests_expectation() {
        let table = [
            Expect::Values { keys: 1 },
            Expect::Values { keys: 3 },
            Expect::Line,
            Expect::MetaQuiet { keys: 2 },
            Expect::Meta,
        ];
        let bytes: &[u8] = b"END\r\nVALUE k:2 0 3\r\nabc\r\nEND\r\nSTORED\r\nVA 1\r\nx\r\nMN\r\nCLIENT_ERROR bad command line format\r\n";
        for split in 0..=bytes.len() {
            let mut q: VecDeque<_> = (0..5).map(|c| pending(u64::from(c) + 1, c)).collect();
            let mut seen = Vec::new();
            let mut at = 0;
            for end in [split, bytes.len()] {
                match match_replies(
                    &bytes[at..end],
                    &mut q,
                    &mut 0,
                    Some(&table),
                    |r| {
                        let kind = match r.kind {
                            ReplyKind::Value => "value".to_string(),
                            ReplyKind::Nil => "nil".to_string(),
                            ReplyKind::Error { kind, .. } => {
                                String::from_utf8_lossy(kind).into_owned()
                            }
                        };
                        seen.push((r.req.cmd, kind, r.misses));
                    },
                    |_| panic!("no push in memcached"),
                ) {
                    Matched::All => at = end,
                    Matched::Partial { consumed, .. } => at += consumed,
                    Matched::Fault(f) => panic!("split {split}: {f:?}"),
                }
            }
            let seen: Vec<(u32, &str, u32)> =
                seen.iter().map(|(c, k, m)| (*c, k.as_str(), *m)).collect();
            assert_eq!(
                seen,
                vec![
                    (0, "nil", 1),
                    (1, "value", 2),
                    (2, "value", 0),
                    (3, "value", 1),
                    (4, "CLIENT_ERROR", 0)
                ],
                "split {split}"
            );
        }
        let idle = |b: &[u8]| {
            match_replies(
                b,
                &mut VecDeque::new(),
                &mut 0,
                Some(&table),
                |_| {},
                |_| {},
            )
        };
        assert_eq!(
            idle(b"SERVER_ERROR Too many open connections\r\n"),
            Matched::Fault(Fault::RefusedByServer)
        );
        assert_eq!(idle(b"STORED\r\n"), Matched::Fault(Fault::UnexpectedReply));
        assert_eq!(idle(b"garbage\r\n"), Matched::Fault(Fault::UnexpectedReply));
        // A value too large for any memcached, and garbage where a reply was expected.
        let mut q: VecDeque<_> = [pending(1, 0)].into();
        let m = match_replies(
            b"VALUE k 0 99999999999\r\n",
            &mut q,
            &mut 0,
            Some(&table),
            |_| {},
            |_| {},
        );
        assert_eq!(m, Matched::Fault(Fault::TooLarge));
        let mut q: VecDeque<_> = [pending(1, 2)].into();
        let m = match_replies(b"HELLO\r\n", &mut q, &mut 0, Some(&table), |_| {}, |_| {});
        assert_eq!(m, Matched::Fault(Fault::ProtocolError));
    }

    /// Over a socket pair: the setup's replies are taken by the setup alone; the
    /// connection takes no request until it is up, and the first reply after that answers
    /// the first request, nothing else.
    #[test]
    fn setup_replies_are_never_counted_as_requests() {
        let mut c = Conn::for_tests(ClassId(0)).with_setup(Some(login("bench", 2)));
        let (ep, mut theirs) = pair(&mut c);
        c.begin(7);
        assert_eq!(c.state(), ConnState::Setup { since: 7 });
        assert!(!c.has_room(8), "no requests while setting up");
        let mut sent = 0;
        c.flush(ConnId(0), &ep, 8, |_| sent += 1).unwrap();
        assert_eq!(sent, 0, "the setup is not a request");
        let mut got = [0u8; 256];
        let n = theirs.read(&mut got).unwrap();
        assert!(got[..n].starts_with(b"*7\r\n$5\r\nHELLO"));
        // The HELLO reply in two pieces, as a RESP2 map.
        theirs.write_all(b"*2\r\n$6\r\nserver\r\n$5\r\nre").unwrap();
        assert_eq!(c.receive(), Received::Data { filled: false });
        assert_eq!(c.take_setup(), Ok(SetupProgress::Waiting { flush: false }));
        theirs.write_all(b"dis\r\n").unwrap();
        assert_eq!(c.receive(), Received::Data { filled: false });
        assert_eq!(c.take_setup(), Ok(SetupProgress::Waiting { flush: true }));
        c.flush(ConnId(0), &ep, 9, |_| sent += 1).unwrap();
        let n = theirs.read(&mut got).unwrap();
        assert_eq!(&got[..n], b"*2\r\n$6\r\nSELECT\r\n$1\r\n2\r\n");
        theirs.write_all(b"+OK\r\n").unwrap();
        assert_eq!(c.receive(), Received::Data { filled: false });
        assert_eq!(c.take_setup(), Ok(SetupProgress::Up));
        assert_eq!(c.state(), ConnState::Up);
        assert_eq!(sent, 0);
        // Now a request: its reply is the only one matched.
        c.enqueue(pending(10, 0), |b| b.bytes().extend_from_slice(b"PING\r\n"));
        c.flush(ConnId(0), &ep, 11, |_| sent += 1).unwrap();
        assert_eq!(sent, 1);
        theirs.write_all(b"+PONG\r\n").unwrap();
        assert_eq!(c.receive(), Received::Data { filled: false });
        let mut answered = Vec::new();
        c.take_replies(|r| answered.push(r.req.intended), |_| {})
            .unwrap();
        assert_eq!(answered, vec![10]);
    }

    /// A refused step ends the setup with its kind and the server's words; a reply beyond
    /// the last step (nothing asked for it) is unexpected; a reconnect sets up again.
    #[test]
    fn a_refused_or_overlong_setup_ends_the_connection() {
        let mut c = Conn::for_tests(ClassId(0)).with_setup(Some(login("bench", 0)));
        c.begin(0);
        c.feed(b"-WRONGPASS invalid username-password pair\r\n");
        assert_eq!(
            c.take_setup(),
            Err(SetupError::Refused(
                Refusal {
                    step: Step::Hello,
                    kind: "setup: WRONGPASS"
                },
                "WRONGPASS invalid username-password pair".into()
            ))
        );
        c.close(0, |_, _| panic!("no request was on it"));
        c.begin(1);
        assert_eq!(c.state(), ConnState::Setup { since: 1 });
        c.feed(b"+OK\r\n+surprise\r\n");
        assert_eq!(
            c.take_setup(),
            Err(SetupError::Fault(Fault::UnexpectedReply))
        );
        // A push is no reply: one during the setup and one after its last reply pass.
        c.close(2, |_, _| {});
        c.begin(3);
        c.feed(b">2\r\n$10\r\ninvalidate\r\n_\r\n+OK\r\n>2\r\n$10\r\ninvalidate\r\n_\r\n");
        assert_eq!(c.take_setup(), Ok(SetupProgress::Up));
        // ... and the start of one after it is left for the replies' reader.
        c.close(4, |_, _| {});
        c.begin(5);
        c.feed(b"+OK\r\n>2\r\n$10\r\ninval");
        assert_eq!(c.take_setup(), Ok(SetupProgress::Up));
        c.feed(b"idate\r\n_\r\n");
        let mut pushes = 0;
        c.take_replies(|_| panic!("no reply"), |inv| pushes += u32::from(inv))
            .unwrap();
        assert_eq!(pushes, 1);
        c.close(2, |_, _| {});
        c.begin(3);
        c.feed(b"!!\r\n");
        assert_eq!(c.take_setup(), Err(SetupError::Fault(Fault::ProtocolError)));
        // A setup that takes longer than the timeout is due to be closed.
        c.close(4, |_, _| {});
        c.begin(10);
        assert_eq!(c.due(15, 5), Due::Nothing);
        assert_eq!(c.due(16, 5), Due::SetupTimeout);
    }
}
