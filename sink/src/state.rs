//! The state commands run against, shared by the accept loop and the commands and below
//! both (as mini-redis's `db.rs`): the sink's [`Sink`], one connection's [`Conn`], and the
//! [`Flow`] a command leaves its connection in. No sockets: tests drive commands on a
//! [`Sink`] directly.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Instant;

use crate::stats::{LocalStats, Stats};
use crate::store::{Clock, Store};

/// The sink's state, shared by all its connections.
pub(crate) struct Sink {
    /// The keyspace.
    pub(crate) store: Store,
    /// What `INFO` reports.
    pub(crate) stats: Stats,
    /// The last `CLIENT ID` handed out.
    pub(crate) next_client_id: AtomicU64,
    /// Connections open now.
    pub(crate) connected_clients: AtomicU64,
    /// Connections accepted ever.
    pub(crate) total_connections: AtomicU64,
    /// When this sink started, by its clock.
    pub(crate) started: Instant,
    /// The clock deadlines are measured on.
    pub(crate) clock: Clock,
    /// What a client may make the sink hold.
    pub(crate) limits: Limits,
    /// Request bytes read and not yet run, over every connection (bounded by
    /// [`Limits::clients_input`]).
    pub(crate) buffered_input: AtomicUsize,
    /// The most one connection has held: unrun request bytes, and replies not yet written.
    pub(crate) peak_input: AtomicUsize,
    pub(crate) peak_output: AtomicUsize,
}

/// What clients may make the sink hold, Redis's limits the model: past a limit the sink
/// closes the client and logs why, as Redis does at `client-query-buffer-limit`.
///
/// With them the sink's memory is its keyspace plus at most `clients_input` of requests
/// being received, plus, per connection, one `output_chunk` of replies and the reply that
/// crossed it (a value is at most 512 MB, `proto-max-bulk-len`).
///
/// [`crate::serve_memcache`] holds its clients to the same limits, where memcached has
/// none: an unfinished request there is a multi-get line (any other line is refused past
/// 2048 bytes, as memcached refuses it) or a data block (at most memcached's 1 MiB item
/// size; a larger one is discarded as it arrives), and a multi-get's values are written
/// each `output_chunk`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Request bytes one client may have read and not run: a request larger than this
    /// never completes. Redis's `client-query-buffer-limit`, 1 GiB.
    pub query_buffer: usize,
    /// Request bytes all clients together may have read and not run; the client whose
    /// read passes it is closed (Redis's `maxmemory-clients`, which is off by default
    /// there: a test server is no place for one client to take the machine). 2 GiB.
    pub clients_input: usize,
    /// Replies waiting past this many bytes are written before the next request of the
    /// batch runs, so a client that pipelines requests for large values without reading
    /// its replies is held back by TCP instead of growing the sink. 1 MiB.
    pub output_chunk: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            query_buffer: 1 << 30,
            clients_input: 2 << 30,
            output_chunk: 1 << 20,
        }
    }
}

impl Sink {
    /// An empty sink reading time from `clock`, counting calls of `commands` (the dispatch
    /// table's names, `cmd::NAMES`; a command's counters are at its table index), with
    /// `limits` on what clients may make it hold.
    pub(crate) fn new(clock: Clock, commands: &'static [&'static str], limits: Limits) -> Self {
        Sink {
            store: Store::new(),
            stats: Stats::new(commands),
            next_client_id: AtomicU64::new(0),
            connected_clients: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            started: clock(),
            clock,
            limits,
            buffered_input: AtomicUsize::new(0),
            peak_input: AtomicUsize::new(0),
            peak_output: AtomicUsize::new(0),
        }
    }
}

/// Per-connection state.
pub(crate) struct Conn {
    /// What `CLIENT ID` returns; unique within one `serve`.
    pub(crate) id: u64,
    /// Counts not yet added to [`Sink::stats`].
    pub(crate) stats: LocalStats,
    /// The client said `HELLO 3`: replies are RESP3.
    pub(crate) resp3: bool,
}

impl Conn {
    /// A connection with id `id` and nothing counted yet in `shared`'s commands.
    pub(crate) fn new(id: u64, shared: &Stats) -> Self {
        Conn {
            id,
            stats: shared.local(),
            resp3: false,
        }
    }
}

/// What the connection does after a command.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Go on reading.
    Continue,
    /// Write the replies so far, then close (`QUIT`).
    Close,
}
