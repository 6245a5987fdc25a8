//! What memcached commands run against and leave behind, below the commands and the
//! session: the server's [`State`], one command's [`Ctx`], and the [`Step`] a command
//! leaves its connection to take (read a data block, swallow one, walk a multi-get's keys,
//! close). No sockets: tests drive commands on a [`State`] directly.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::items::Items;
use super::stats::{Counters, Counts};
use crate::state::Limits;
use crate::store::Clock;

/// memcached's `REALTIME_MAXDELTA`: an exptime up to 30 days is relative, above it a unix
/// time.
const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// The server's state, shared by its connections.
pub(crate) struct State {
    pub(crate) items: Items,
    pub(crate) stats: Counters,
    /// The clock deadlines are measured on.
    pub(crate) clock: Clock,
    /// When the server started, by its clock.
    pub(crate) started: Instant,
    /// When it started, in whole unix seconds: `stats`' `time` is this plus `uptime`, so
    /// `time − uptime` never moves (as memcached's, whose both come from one tick): a
    /// sampler reads a change of it as a restart.
    pub(crate) started_unix: u64,
    /// What a client may make the server hold.
    pub(crate) limits: Limits,
    /// Worker threads serving connections (`threads`).
    pub(crate) threads: usize,
    /// The port listened on (`stats settings`' `tcpport`).
    pub(crate) port: u16,
    /// Connections open now.
    pub(crate) curr_connections: AtomicU64,
    /// Connections ever, the listening socket included as memcached counts it.
    pub(crate) total_connections: AtomicU64,
    /// Request bytes read and not yet run, over every connection.
    pub(crate) buffered_input: AtomicUsize,
    /// The most one connection has held: unrun request bytes, and replies not yet written.
    pub(crate) peak_input: AtomicUsize,
    pub(crate) peak_output: AtomicUsize,
}

impl State {
    /// No items, reading time from `clock`.
    pub(crate) fn new(clock: Clock, limits: Limits, threads: usize, port: u16) -> Self {
        let started = clock();
        State {
            items: Items::new(started),
            stats: Counters::default(),
            clock,
            started,
            started_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            limits,
            threads,
            port,
            curr_connections: AtomicU64::new(0),
            total_connections: AtomicU64::new(1),
            buffered_input: AtomicUsize::new(0),
            peak_input: AtomicUsize::new(0),
            peak_output: AtomicUsize::new(0),
        }
    }
}

/// What one command runs with.
pub(crate) struct Ctx<'a> {
    pub(crate) state: &'a State,
    /// The connection's counts.
    pub(crate) counts: &'a mut Counts,
    /// The connection's replies.
    pub(crate) out: &'a mut Vec<u8>,
    /// The command's time.
    pub(crate) now: Instant,
}

impl Ctx<'_> {
    /// Appends `line` and CRLF.
    pub(crate) fn line(&mut self, line: &[u8]) {
        self.out.extend_from_slice(line);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Appends `line` and CRLF unless the command said `noreply` (memcached's
    /// `out_string`, which drops errors too).
    pub(crate) fn reply(&mut self, noreply: bool, line: &[u8]) {
        if !noreply {
            self.line(line);
        }
    }

    /// `ERROR`: not a command, or the wrong number of words for it.
    pub(crate) fn error(&mut self) {
        self.line(b"ERROR");
    }

    /// When an item given `exptime` expires (memcached's
    /// `realtime(EXPTIME_TO_POSITIVE_TIME(exptime))`): 0 never, up to 30 days that many
    /// seconds from now, above it a unix time; a negative one, or a unix time passed, at
    /// once.
    pub(crate) fn deadline(&self, exptime: i32) -> Option<Instant> {
        let exptime = i64::from(exptime);
        if exptime == 0 {
            return None;
        }
        let ahead = if exptime < 0 {
            0
        } else if exptime > REALTIME_MAXDELTA {
            let unix = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            u64::try_from(exptime).map_or(0, |e| e.saturating_sub(unix))
        } else {
            u64::try_from(exptime).unwrap_or(0)
        };
        Some(self.now + Duration::from_secs(ahead))
    }
}

/// The storage commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// A storage command read up to its data block.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) mode: Mode,
    pub(crate) key: Vec<u8>,
    pub(crate) flags: u32,
    pub(crate) exptime: Option<Instant>,
    /// The CAS unique asked for (0: none).
    pub(crate) cas: u64,
    /// The data block's bytes, CRLF included.
    pub(crate) need: usize,
    pub(crate) noreply: bool,
    /// Set by `ms`: what its reply carries.
    pub(crate) meta: Option<MetaSet>,
}

/// What an `ms` asked its reply to carry, and how it stores.
#[derive(Debug)]
pub(crate) struct MetaSet {
    /// The `O`, `k` and `c` flags, as given, in order.
    pub(crate) returns: Vec<Vec<u8>>,
    /// `I` with a CAS: a lower unique stores the value as stale.
    pub(crate) set_stale: bool,
    /// `b`: the key was base64.
    pub(crate) key_binary: bool,
}

/// A retrieval command (`get`, `gets`, `gat`, `gats`) read: its keys are run one by one
/// by the session, which writes replies between them when they pile up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retrieval {
    /// `gets`, `gats`: with CAS uniques.
    pub(crate) cas: bool,
    /// `gat`, `gats`: the new deadline (`Some(None)`: never).
    pub(crate) touch: Option<Option<Instant>>,
    /// Where the keys start in the line.
    pub(crate) keys_at: usize,
    /// A key is longer than 250 bytes: the keys before it run, unanswered, then the
    /// command answers `CLIENT_ERROR bad command line format` (memcached drops the values
    /// it had gathered).
    pub(crate) bad_key: bool,
}

/// What a command leaves its connection to do.
#[derive(Debug)]
pub(crate) enum Step {
    /// Go on with the next line.
    Next,
    /// Read the data block of this storage command.
    Read(Pending),
    /// Discard this many bytes (the data block of a refused storage command).
    Swallow(usize),
    /// Run a retrieval's keys.
    Retrieve(Retrieval),
    /// Go on; the replies so far count as written (`mn`: memcached writes them at once).
    Written,
    /// Write the replies so far, then close (`quit`).
    Quit,
    /// Close now, without writing what is not written yet (memcached's `conn_closing`:
    /// an HTTP request).
    Drop,
}
