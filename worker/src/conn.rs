//! One connection of a shard: its socket, its write and read buffers, the requests in
//! flight on it, and its state (connecting, up, backing off before a retry).
//!
//! Replies come back in order on a connection, so telling which request a reply answers
//! needs no socket: [`match_replies`] is a pure function of the read buffer and the
//! in-flight queue. The rest of this file moves bytes and keeps the state.
//!
//! Requests are encoded straight into the write buffer, and all of a turn's requests leave
//! in one `send`; a read fills as much of the read buffer as the socket has, and a read
//! that fills less than the space offered means the socket is drained (no extra read to
//! see `EAGAIN`). What a connection learns is reported to its class through callbacks,
//! which the compiler inlines: nothing here allocates or dispatches dynamically per
//! request.

use crate::class::ClassId;
use crate::sys::epoll::{Epoll, Interest};
use crate::sys::error_kind;
use crest_resp::{self as resp, ReplyKind, Scan};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::fd::AsFd;

/// Read buffer size, and the least space offered to one read.
const READ_CHUNK: usize = 64 * 1024;
/// Largest reply the read buffer grows for in one step (Redis's largest bulk plus framing).
const MAX_FRAME: usize = resp::MAX_BULK_LEN as usize + 64;
/// Write buffer capacity reserved up front: a turn's requests usually fit.
const WBUF_CAPACITY: usize = 16 * 1024;
/// First wait before reconnecting; doubled on each failure in a row.
pub const BACKOFF_MIN_NS: u64 = 10_000_000;
/// Longest wait before reconnecting.
pub const BACKOFF_MAX_NS: u64 = 1_000_000_000;

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
    /// Command index in the class's workload.
    pub cmd: u32,
    /// Intended after the warm-up: its results count.
    pub measured: bool,
}

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

/// A connection's lifecycle.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum ConnState {
    /// A non-blocking connect is under way since `since` (ns since the start).
    Connecting {
        /// When the connect began.
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
    /// Value or error, with the error's first word.
    pub kind: ReplyKind<'a>,
    /// The reply came before the request's write had completed (the server answered a
    /// partial command, e.g. with an error): it was sent, but no write will say so.
    pub early: bool,
    /// Nothing is in flight on the connection after this reply.
    pub idle: bool,
}

/// Bytes from the server that cannot be matched with a request: the connection can no
/// longer be trusted to pair replies with requests, so it is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A complete reply with nothing in flight.
    UnexpectedReply,
    /// Bytes that are not RESP.
    ProtocolError,
}

impl Fault {
    /// The connection-error kind it is counted as.
    pub fn kind(self) -> &'static str {
        match self {
            Fault::UnexpectedReply => "unexpected_reply",
            Fault::ProtocolError => "protocol_error",
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
/// it (and everything before it) as sent.
#[inline]
pub fn match_replies<'a>(
    buf: &'a [u8],
    inflight: &mut VecDeque<Pending>,
    unwritten: &mut usize,
    mut on_reply: impl FnMut(Reply<'a>),
) -> Matched {
    let mut at = 0;
    loop {
        if at == buf.len() {
            return Matched::All;
        }
        match resp::scan_reply(&buf[at..]) {
            Ok(Scan::Incomplete { need }) => {
                return Matched::Partial {
                    consumed: at,
                    need: at + need,
                };
            }
            Ok(Scan::Reply { kind, len }) => {
                let Some(req) = inflight.pop_front() else {
                    return Matched::Fault(Fault::UnexpectedReply);
                };
                let early = inflight.len() < *unwritten;
                if early {
                    *unwritten = inflight.len();
                }
                at += len;
                on_reply(Reply {
                    req,
                    kind,
                    early,
                    idle: inflight.is_empty(),
                });
            }
            Err(_) => return Matched::Fault(Fault::ProtocolError),
        }
    }
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
    /// The backoff has passed: connect again.
    Retry,
}

/// One connection: socket, buffers, requests in flight, state.
pub struct Conn {
    /// The class whose requests this connection carries.
    pub class: ClassId,
    sock: Option<socket2::Socket>,
    state: ConnState,
    /// Wait before the next reconnect.
    backoff: u64,
    wbuf: Vec<u8>,
    /// Bytes of `wbuf` already written.
    wpos: usize,
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
    /// On the shard's list of connections to flush this turn.
    dirty: bool,
}

impl Conn {
    /// A closed connection of `class`, due to connect at once.
    pub fn new(class: ClassId) -> Self {
        Self {
            class,
            sock: None,
            state: ConnState::Down { retry_at: 0 },
            backoff: BACKOFF_MIN_NS,
            wbuf: Vec::with_capacity(WBUF_CAPACITY),
            wpos: 0,
            want_out: false,
            inflight: VecDeque::new(),
            unwritten: 0,
            rbuf: vec![0; READ_CHUNK],
            rstart: 0,
            rend: 0,
            need: 0,
            dirty: false,
        }
    }

    /// Where the connection is in its lifecycle.
    #[inline]
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// Whether a request may be added: up, with fewer than `pipeline` in flight.
    #[inline]
    pub fn has_room(&self, pipeline: usize) -> bool {
        self.state == ConnState::Up && self.inflight.len() < pipeline
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
    pub fn enqueue(&mut self, req: Pending, encode: impl FnOnce(&mut Vec<u8>)) -> bool {
        encode(&mut self.wbuf);
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
        ep.add(sock.as_fd(), Interest::ReadWrite, id.token())
            .map_err(|e| {
                tracing::debug!(error = %e, "epoll_ctl failed");
                "epoll".to_string()
            })
    }

    /// Completes a connect that epoll reported done: up, or the error that ended it.
    ///
    /// # Errors
    /// The connection-error kind of a failed connect.
    pub fn finish_connect(&mut self, id: ConnId, ep: &Epoll) -> Result<(), String> {
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
                self.state = ConnState::Up;
                self.backoff = BACKOFF_MIN_NS;
                self.want_out = false;
                Ok(())
            }
            Ok(Some(e)) | Err(e) => Err(format!("connect: {}", error_kind(&e))),
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
            while self.wpos < self.wbuf.len() {
                match sock.send_with_flags(&self.wbuf[self.wpos..], libc::MSG_NOSIGNAL) {
                    Ok(n) => self.wpos += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if !self.want_out {
                            self.want_out = true;
                            let _ = ep.modify(sock.as_fd(), Interest::ReadWrite, id.token());
                        }
                        return Ok(());
                    }
                    Err(e) => return Err(e),
                }
            }
            if self.want_out {
                self.want_out = false;
                let _ = ep.modify(sock.as_fd(), Interest::Read, id.token());
            }
        }
        self.wbuf.clear();
        self.wpos = 0;
        let first = self.inflight.len() - self.unwritten;
        for p in self.inflight.range_mut(first..) {
            p.written = now;
            on_sent(p);
        }
        self.unwritten = 0;
        Ok(())
    }

    /// One read into the read buffer, growing it first when little room is left.
    #[inline]
    pub fn receive(&mut self) -> Received {
        if self.rbuf.len() - self.rend < READ_CHUNK / 4 {
            if self.rstart > 0 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.need = self.need.saturating_sub(self.rstart);
                self.rstart = 0;
            }
            if self.rbuf.len() - self.rend < READ_CHUNK / 4 {
                let want = (self.rbuf.len() * 2).max(self.need.min(MAX_FRAME) + READ_CHUNK);
                self.rbuf.resize(want, 0);
            }
        }
        let Some(mut sock) = self.sock.as_ref() else {
            return Received::Closed(Cow::Borrowed("eof"));
        };
        let space = self.rbuf.len() - self.rend;
        loop {
            match sock.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Received::Closed(Cow::Borrowed("eof")),
                Ok(n) => {
                    self.rend += n;
                    return Received::Data { filled: n == space };
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Received::WouldBlock,
                Err(e) => return Received::Closed(Cow::Owned(error_kind(&e))),
            }
        }
    }

    /// Whether the bytes read so far may complete a reply (the scanner said how many it
    /// needs, so a large value is not rescanned on every read).
    #[inline]
    pub fn reply_ready(&self) -> bool {
        self.rend >= self.need
    }

    /// Matches the complete replies read so far with their requests (see
    /// [`match_replies`]) and drops their bytes.
    ///
    /// # Errors
    /// The [`Fault`] that makes the connection unusable; the caller closes it.
    #[inline]
    pub fn take_replies(&mut self, on_reply: impl FnMut(Reply<'_>)) -> Result<(), Fault> {
        let buf = &self.rbuf[self.rstart..self.rend];
        match match_replies(buf, &mut self.inflight, &mut self.unwritten, on_reply) {
            Matched::All => {
                self.rstart = 0;
                self.rend = 0;
                self.need = 0;
                Ok(())
            }
            Matched::Partial { consumed, need } => {
                self.need = self.rstart + need;
                self.rstart += consumed;
                Ok(())
            }
            Matched::Fault(f) => Err(f),
        }
    }

    /// Closes the connection: every request on it goes to `on_failed`, buffers empty, and
    /// a reconnect is due after the backoff, which doubles for the next failure.
    pub fn close(&mut self, now: u64, on_failed: impl FnMut(Pending)) {
        // Closing the fd removes it from the epoll set.
        drop(self.sock.take());
        self.inflight.drain(..).for_each(on_failed);
        self.unwritten = 0;
        self.wbuf.clear();
        self.wpos = 0;
        self.rstart = 0;
        self.rend = 0;
        self.need = 0;
        self.dirty = false;
        self.want_out = false;
        self.state = ConnState::Down {
            retry_at: now + self.backoff,
        };
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX_NS);
    }

    /// What a sweep at `now` must do with this connection.
    pub fn due(&self, now: u64, timeout: u64) -> Due {
        match self.state {
            ConnState::Up => match self.inflight.front() {
                Some(p) if now.saturating_sub(p.since()) > timeout => Due::Timeout,
                _ => Due::Nothing,
            },
            ConnState::Connecting { since } if now.saturating_sub(since) > timeout => {
                Due::ConnectTimeout
            }
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

    /// The requests in flight, oldest first.
    #[cfg(test)]
    pub fn requests(&self) -> impl Iterator<Item = &Pending> {
        self.inflight.iter()
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
            cmd,
            measured: true,
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
        let m = match_replies(bytes, inflight, unwritten, |r| {
            let err = match r.kind {
                ReplyKind::Value => None,
                ReplyKind::Error(k) => Some(String::from_utf8_lossy(k).into_owned()),
            };
            seen.push((r.req.intended, err, r.early, r.idle));
        });
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
        let mut c = Conn::new(ClassId(0));
        c.set_up();
        for t in 1..=3 {
            assert_eq!(
                c.enqueue(pending(t, 0), |b| b.extend_from_slice(b"x")),
                t == 1
            );
        }
        let mut failed = Vec::new();
        c.close(100, |p| failed.push(p.intended));
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
            c.close(0, |_| {});
            let ConnState::Down { retry_at } = c.state() else {
                panic!()
            };
            waits.push(retry_at);
        }
        assert_eq!(&waits[..3], &[20_000_000, 40_000_000, 80_000_000]);
        assert_eq!(*waits.last().unwrap(), BACKOFF_MAX_NS);
    }

    #[test]
    fn a_sweep_times_out_the_oldest_request_from_its_write() {
        let mut c = Conn::new(ClassId(0));
        c.set_up();
        c.enqueue(pending(1_000, 0), |_| {});
        // Never written: the clock runs from the intended time.
        assert_eq!(c.due(1_500, 500), Due::Nothing);
        assert_eq!(c.due(1_501, 500), Due::Timeout);
        c.inflight[0].written = 2_000;
        assert_eq!(c.due(2_500, 500), Due::Nothing);
        assert_eq!(c.due(2_501, 500), Due::Timeout);
        c.state = ConnState::Connecting { since: 10 };
        assert_eq!(c.due(510, 500), Due::Nothing);
        assert_eq!(c.due(511, 500), Due::ConnectTimeout);
    }

    #[test]
    fn leftovers_split_written_from_unwritten_and_skip_warmup() {
        let mut c = Conn::new(ClassId(0));
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
        let mut c = Conn::new(ClassId(0));
        c.attach(
            id,
            &ep,
            socket2::Socket::from(std::os::fd::OwnedFd::from(ours)),
        );
        c.enqueue(pending(5, 0), |b| b.extend_from_slice(b"PING\r\n"));
        c.enqueue(pending(6, 1), |b| b.extend_from_slice(b"PING\r\n"));
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
        c.take_replies(|r| answered.push((r.req.cmd, r.req.since(), r.idle)))
            .unwrap();
        assert_eq!(answered, vec![(0, 42, false)]);
        assert!(!c.reply_ready(), "waits for the rest of +PONG");
        (&theirs).write_all(b"NG\r\n").unwrap();
        assert_eq!(c.receive(), Received::Data { filled: false });
        assert!(c.reply_ready());
        answered.clear();
        c.take_replies(|r| answered.push((r.req.cmd, r.req.since(), r.idle)))
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
        let mut c = Conn::new(ClassId(0));
        c.attach(
            id,
            &ep,
            socket2::Socket::from(std::os::fd::OwnedFd::from(ours)),
        );
        let big = vec![b'x'; 4 << 20];
        c.enqueue(pending(1, 0), |b| b.extend_from_slice(&big));
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
}
