//! What a shard is told and what it tells back: its configuration ([`ShardConfig`], each
//! class's [`ShardClass`] and [`Load`]), the class index every layer shares
//! ([`ClassId`]), and the events it sends its agent ([`ShardEvent`], [`ShardLoad`]). The
//! vocabulary below the shard loop ([`crate::shard`]), its classes ([`crate::class`]) and
//! connections ([`crate::conn`]): it imports none of them.

use crate::route::Shared;
use crate::steer::Steering;
use crate::sys::sched::Sched;
use crate::target_tls::{Client, Handshakes};
use crest_model::plan::Pacer;
use crest_model::schedule::Schedule;
use crest_model::stats::{ConnLife, ErrorCounts, NodeStats, Stats};
use crest_model::target::Session;
use crest_model::workload::Workload;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// A class's index within the run (and within each shard's results).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClassId(pub u32);

impl ClassId {
    /// Position in the shard's class list.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// How a class's requests come.
#[derive(Debug, Clone)]
pub enum Load {
    /// Open loop: at intended send times, whether or not replies keep up.
    Open(Schedule),
    /// Closed loop: every free pipeline slot gets a request at once.
    Closed {
        /// Stop sending at this time since the start, warm-up included (None: only the
        /// budget bounds the class).
        until: Option<Duration>,
        /// Measured requests to send in all (None: unbounded). Warm-up requests do not
        /// use it.
        budget: Option<u64>,
        /// After this many measured requests (cumulative, ascending) the shard stops,
        /// drains, reports [`ShardEvent::Checkpoint`] and waits until
        /// [`ShardConfig::released`] passes it.
        checkpoints: Vec<u64>,
    },
    /// A replayed trace: its requests as the coordinator streams them (issue #27).
    Trace(crate::feed::TraceSource),
}

/// One class as one shard runs it.
#[derive(Debug)]
pub struct ShardClass {
    /// What to send.
    pub workload: Arc<Workload>,
    /// When to send (an open-loop schedule is already scaled to this shard's share).
    pub load: Load,
    /// Connections this shard opens for the class (to each node, in a cluster).
    pub connections: u32,
    /// Requests in flight per connection.
    pub pipeline: u32,
}

/// Everything one shard needs for one run.
#[derive(Debug)]
pub struct ShardConfig {
    /// Index within the worker.
    pub index: u32,
    /// Index within the cluster (sequential keys and members interleave by it).
    pub global_index: u32,
    /// Shards in the cluster.
    pub total_shards: u32,
    /// Server address (the seed, in a cluster).
    pub target: SocketAddr,
    /// A Redis Cluster's slot table, kept current by the worker (None: one node).
    pub topology: Option<Arc<Shared>>,
    /// What every connection sends before its first request (protocol, login, database).
    pub session: Session,
    /// TLS to the target: every connection handshakes with it first. None: plaintext.
    pub tls: Option<Client>,
    /// The name every connection gives itself (`crest-<worker>-<shard>`, in `CLIENT LIST`).
    pub client_name: String,
    /// The classes.
    pub classes: Vec<ShardClass>,
    /// This shard's RNG seed.
    pub seed: u64,
    /// How to wait.
    pub pacer: Pacer,
    /// Local instant of the run's t = 0 (warm-up included).
    pub start: Instant,
    /// Requests due before this are not measured; intervals count from here.
    pub warmup: Duration,
    /// Length of one reported interval.
    pub interval: Duration,
    /// A request unanswered this long after its write fails as `timeout`.
    pub timeout: Duration,
    /// After the schedule ends, wait at most this long for outstanding replies.
    pub drain: Duration,
    /// Requests allowed to wait for a free connection, per class; beyond that they fail as
    /// `backlog_full`.
    pub backlog_limit: usize,
    /// Core to pin to, if any.
    pub core: Option<core_affinity::CoreId>,
    /// Set by the worker to stop at once (abort, lost coordinator).
    pub stop: Arc<AtomicBool>,
    /// Checkpoints the coordinator released (`--checkpoint-every`): a shard waiting at
    /// checkpoint k goes on once this is above k.
    pub released: Arc<AtomicU32>,
    /// Runtime changes of rate, shared by the run's shards.
    pub steering: Arc<Steering>,
    /// This shard's part of each open-loop class's cluster-wide rate (a held rate is
    /// scaled by it).
    pub share: f64,
    /// How connections come and go.
    pub churn: crest_model::plan::Churn,
    /// Where reads go when the target has replicas.
    pub read_from: crest_model::target::ReadFrom,
    /// `--check-staleness`: SET values stamped, GET replies checked.
    pub check_staleness: bool,
    /// Where intervals and the final totals go.
    pub out: UnboundedSender<ShardEvent>,
}

/// What a shard reports.
#[derive(Debug)]
pub enum ShardEvent {
    /// First connection attempts are done (before the start instant when possible).
    Connected {
        /// Shard index.
        shard: u32,
        /// Connections up.
        up: u32,
        /// Connections asked for.
        want: u32,
        /// The first connect error, if any connection failed.
        error: Option<String>,
        /// In a cluster, the node (`host:port` as the slot table names it) whose
        /// connection failed first.
        node: Option<String>,
    },
    /// Results of one interval (1 s by default), by completion time, one [`Stats`] per class.
    Interval {
        /// Shard index.
        shard: u32,
        /// Interval since the end of the warm-up.
        index: u32,
        /// Results of that interval, per class.
        stats: Vec<Stats>,
        /// Server error kinds first seen in this interval, each with its first message.
        messages: Vec<(String, String)>,
        /// How hard the shard's thread worked in this interval.
        load: ShardLoad,
        /// Connections that came up in this interval (reconnects).
        opened: u64,
    },
    /// Stopped at checkpoint `index` (0-based) with nothing in flight; waits for the
    /// release.
    Checkpoint {
        /// Shard index.
        shard: u32,
        /// The checkpoint.
        index: u32,
    },
    /// Follows runtime change `seq` from `at_ns` (ns since the start: the change's
    /// instant, or when the shard read it if that was later).
    Steered {
        /// Shard index.
        shard: u32,
        /// The change.
        seq: u32,
        /// The instant the shard switched at.
        at_ns: u64,
    },
    /// The run is over for this shard.
    Finished {
        /// Shard index.
        shard: u32,
        /// Results of the whole run per class (the sum of this shard's intervals).
        totals: Vec<Stats>,
        /// Sent, unanswered at the end.
        in_flight: u64,
        /// Scheduled, never written at the end.
        unsent: u64,
        /// Intervals this shard reported.
        intervals: u32,
        /// Connection failures not tied to one request (refused, reset, eof...).
        connection_errors: ErrorCounts,
        /// TLS handshakes completed (all zero for plaintext).
        handshakes: Handshakes,
        /// Per target node: its share of the measured requests, every class.
        nodes: Vec<NodeStats>,
        /// How its connections came and went (boxed: four histograms).
        connections: Box<ConnLife>,
    },
}

/// How hard a shard's thread worked over one interval of its loop (between two shipped
/// intervals): its CPU time, and the wall time it was not waiting for the clock or the
/// network. A shard busy for most of an interval cannot keep its schedule: it is the
/// bottleneck, not the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShardLoad {
    /// CPU time of the thread (user + system).
    pub cpu_ns: u64,
    /// Wall time not spent waiting (in `epoll_wait`, or in polling turns that woke early
    /// and found nothing); with the sleep pacer at least the CPU time.
    pub busy_ns: u64,
    /// Wall time covered.
    pub wall_ns: u64,
    /// How much of its core the thread did not get: preemptions and time queued for it.
    pub sched: Sched,
}

impl ShardLoad {
    /// The busy share of the wall time, 0 to 1. With the sleep pacer `busy_ns` is at least
    /// the CPU time (its polls are short, and what else the thread burns is the generator's
    /// own work); with the spin pacer, whose CPU time is always ~100%, only the time not
    /// waiting counts.
    pub fn busy(&self) -> f64 {
        if self.wall_ns == 0 {
            0.0
        } else {
            (self.busy_ns as f64 / self.wall_ns as f64).min(1.0)
        }
    }
}
