//! The state commands run against, shared by the accept loop and the commands and below
//! both (as mini-redis's `db.rs`): the sink's [`Sink`], one connection's [`Conn`], and the
//! [`Flow`] a command leaves its connection in. No sockets: tests drive commands on a
//! [`Sink`] directly.

use std::sync::atomic::AtomicU64;
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
}

impl Sink {
    /// An empty sink reading time from `clock`, counting calls of `commands` (the dispatch
    /// table's names, `cmd::NAMES`; a command's counters are at its table index).
    pub(crate) fn new(clock: Clock, commands: &'static [&'static str]) -> Self {
        Sink {
            store: Store::new(),
            stats: Stats::new(commands),
            next_client_id: AtomicU64::new(0),
            connected_clients: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            started: clock(),
            clock,
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
