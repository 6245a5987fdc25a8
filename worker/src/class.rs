//! One class as a shard runs it: where its requests come from (an open-loop schedule or
//! a closed loop with a budget), which of its connections takes the next one, the backlog
//! of requests that found every connection full, and its results.
//!
//! A request's first key is drawn when the request is created, so its node is known
//! before it is given a connection: one node for a single server, the owner of the key's
//! slot in a Redis Cluster ([`Routes`]). Free slots and the backlog are kept per node, so a
//! slow or missing node holds up only its own requests.
//!
//! Free pipeline slots are tokens: a connection's id, pushed once per slot when it comes
//! up and once per reply (open loop) or `pipeline` times when its pipeline empties (closed
//! loop). A token can go stale (its connection closed, or refilled through another token);
//! dispatch skips those, so tokens never need to be withdrawn.
//!
//! A request that finds no free slot waits in its node's backlog keeping its intended
//! time, so the wait shows in its latency; beyond the backlog limit (all nodes together)
//! it fails as `backlog_full`. A request whose intended time is more than the timeout ago
//! is given up whether or not it was written: from the backlog (or at once, when it is
//! scheduled that late) it fails as `timeout_unsent`, and its wait goes into the latency
//! histogram like any timeout's.
//!
//! Cluster redirects: a `MOVED` or `ASK` answer is not a result. The request is set aside
//! (`redirected`) for the shard, which updates its routes and hands it back through
//! [`ClassState::resend`] with its original intended time, so the redirect shows in its
//! latency; `TRYAGAIN`, `CLUSTERDOWN` and `LOADING` park it for a back-off. Each request is
//! counted once, by how it finally ends; the redirects it went through are counted apart.
//!
//! A turn schedules at most [`MAX_PER_TURN`] requests per class, so a rate the shard
//! cannot keep up with still lets the loop do I/O, roll intervals and see the stop flag;
//! what it could not schedule by the class's end is dropped (the interval's `scheduled`
//! falls short of its target, which marks it generator-bound).

use crate::conn::{Conn, ConnId, NO_KEY, Pending, Reply};
use crate::feed::{POLL_NS, TraceQueue};
use crate::outage::Outages;
use crate::pace::Pace;
use crate::route::{NO_SLOT, Routes};
use crate::spec::Load;
use crest_model::hist::Dense;
use crest_model::rng::Rng;
use crest_model::schedule::{Profile, Schedule, Steer};
use crest_model::stats::{Kinds, Redirects, Staleness, Stats, add_error, clean_message};
use crest_model::topology::{RedirectKind, parse_redirect};
use crest_model::workload::{Cursor, Mixer, Stamped, Wire, Workload, read_stamp, stamp};
use crest_resp::ReplyKind;
use std::collections::VecDeque;
use std::sync::Arc;

/// Most requests one class schedules in one loop turn.
pub const MAX_PER_TURN: usize = 4096;

/// A batch looks this far down its node's free slots for a connection with nothing in
/// flight to start on.
const IDLE_SCAN: usize = 8;
/// Most times one request is sent (redirects and retries included); then it fails with
/// the server's word for the last refusal.
pub const MAX_TRIES: u8 = crest_model::topology::MAX_REDIRECTS;
/// First back-off after `TRYAGAIN`, `CLUSTERDOWN` or `LOADING`; it doubles per try, to
/// [`BACKOFF_MAX_NS`].
const BACKOFF_MIN_NS: u64 = 5_000_000;
const BACKOFF_MAX_NS: u64 = 200_000_000;

/// Why a request failed without a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Written, unanswered past the timeout: it waited that long, so it stays in latency.
    Timeout,
    /// Never written, and its intended time passed the timeout ago (it waited in the
    /// backlog, or in a write buffer): in latency too.
    TimeoutUnsent,
    /// The connection broke under it.
    Disconnected,
    /// Its reply was larger than the connection may buffer.
    TooLarge,
}

impl Failure {
    /// The error kind the requests are counted under.
    pub fn kind(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::TimeoutUnsent => "timeout_unsent",
            Failure::Disconnected => "disconnected",
            Failure::TooLarge => "reply_too_large",
        }
    }

    /// How a request on a connection closed for `self` fails: timeouts of requests never
    /// written are `timeout_unsent`.
    pub fn of(self, written: bool) -> Self {
        match self {
            Failure::Timeout if !written => Failure::TimeoutUnsent,
            f => f,
        }
    }
}

/// A request waiting for a free slot (or to be sent again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queued {
    intended: u64,
    /// Its first key ([`NO_KEY`]: none).
    key: u64,
    cmd: u32,
    /// Its key's slot ([`NO_SLOT`]: no key, or not a cluster).
    slot: u16,
    /// Sends before this one.
    tries: u8,
    /// Goes with `ASKING` first (an `ASK` redirect).
    ask: bool,
    /// Its lane among the class's connections to its node ([`ClassState::lanes`]).
    lane: u16,
}

/// What the shard does with a redirected or refused request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redo {
    /// `MOVED`: `slot` is at `addr` now.
    Moved {
        /// The slot.
        slot: u16,
        /// `host:port` (or `:port`).
        addr: String,
    },
    /// `ASK`: send once to `addr` with `ASKING`.
    Ask {
        /// `host:port` (or `:port`).
        addr: String,
    },
    /// `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`: the same again after a back-off.
    Later,
}

/// A request set aside for the shard: the node that answered, what it said.
#[derive(Debug, Clone)]
pub struct Redirected {
    /// The request, as it will be sent again.
    pub q: Queued,
    /// The node that answered.
    pub from: u16,
    /// What to do.
    pub redo: Redo,
    /// The server's first word, to fail it with when it cannot be sent again.
    pub word: &'static str,
    /// The server's whole error line (cleaned, bounded), the kind's first message when
    /// the request fails with `word`.
    pub message: Box<str>,
}

/// Where a running class's requests come from.
enum Arrivals {
    /// On schedule; `next_due` is the next intended time (None: the schedule is over).
    Open {
        schedule: Schedule,
        next_due: Option<u64>,
        /// The plan's profile (this shard's share), for a change back to it.
        original: Profile,
        /// A runtime change reached this class: a schedule that ran out (a pause to the
        /// end) may come back, so the class keeps sending until its time is up.
        steered: bool,
    },
    /// As fast as replies come, until `until` (ns) and within `budget` (None: no bound),
    /// pausing at each of `gates` (measured requests issued, cumulative) until released.
    Closed {
        until: Option<u64>,
        budget: Option<u64>,
        issued: u64,
        gates: VecDeque<u64>,
    },
    /// A replayed trace (`crest replay`): at each request's intended time, as the
    /// coordinator streams them; a request's `key` is its number in the shard's part.
    Trace(Box<TraceQueue>),
}

/// The shard-wide things a class sends with: the connections (each class uses only its
/// own), the RNG, the routes, and the list of connections to flush this turn.
pub struct Outbox<'a> {
    /// Every connection of the shard.
    pub conns: &'a mut [Conn],
    /// The shard's RNG (keys, values, Poisson gaps), drawn in a fixed order so a seed
    /// repeats a run.
    pub rng: &'a mut Rng,
    /// Connections with requests to write this turn.
    pub dirty: &'a mut Vec<ConnId>,
    /// Which node each request goes to.
    pub routes: &'a mut Routes,
    /// The pacer: each open-loop request's lag as the loop schedules it.
    pub pace: &'a mut Pace,
}

/// One node's share of a class's measured requests.
#[derive(Debug, Default)]
pub struct NodeTally {
    /// Answered with a non-error reply.
    pub completed: u64,
    /// Of those, reads.
    pub reads: u64,
    /// Failed on it.
    pub errors: u64,
    /// Redirects it answered with.
    pub redirects: Redirects,
    /// Latency of its completed requests (pages made as samples land).
    pub latency: Dense,
}

/// Per-class state of a running shard.
pub struct ClassState {
    workload: Arc<Workload>,
    arrivals: Arrivals,
    pipeline: usize,
    /// Requests intended before this (ns) are sent but not measured.
    warmup: u64,
    backlog_limit: usize,
    mixer: Mixer,
    /// Per command: whether it only reads (a replica may answer it: `--read-from`).
    reads: Vec<bool>,
    cursor: Cursor,
    /// Free slots, per queue (a node's lane: [`ClassState::queue`]): one token per slot,
    /// oldest first (a connection's tokens may be owed: see [`Conn::owed_tokens`]).
    free: Vec<VecDeque<ConnId>>,
    /// Lanes per node: 1, or for a replayed trace its connections per node, each key's
    /// requests on the one its hash picks (so they reach the server in order).
    lanes: u16,
    /// With several lanes: each connection's lane, by connection index.
    conn_lane: Vec<u16>,
    /// The connection the current batch last went to: the batch's next request goes there
    /// too while it has room, so what one wake-up sends to a node leaves in as few writes
    /// as the pipeline allows (each batch starts on the oldest free slot, so connections
    /// take turns).
    last: Option<ConnId>,
    /// Requests waiting for a free slot, per queue, in intended order.
    backlog: Vec<VecDeque<Queued>>,
    backlog_len: usize,
    /// Requests waiting out a back-off: (when to send again, the request).
    parked: VecDeque<(u64, Queued)>,
    /// Closed loop: a request made and not placed (every free token was stale, or its
    /// node full), sent first by the next fill.
    held: Option<Queued>,
    /// Redirected requests for the shard to route again.
    pub redirected: Vec<Redirected>,
    /// Per node, measured requests.
    nodes: Vec<NodeTally>,
    /// Outages as this class's requests saw them.
    pub outages: Outages,
    /// `--check-staleness`: the versions this class wrote, and which commands take part.
    stale: Option<Box<StaleCheck>>,
    interval: Stats,
    totals: Stats,
}

/// `--check-staleness` for one class: which commands take part, and per key the latest
/// write it saw acknowledged.
struct StaleCheck {
    /// Per command: `Some(true)` stamps its value (SET), `Some(false)` checks its reply
    /// (GET).
    roles: Vec<Option<bool>>,
    table: Versions,
}

impl StaleCheck {
    /// A non-error reply to `p` at `now` (its first bytes `head`): a SET's `+OK`
    /// acknowledges its version (a nil, as `SET … NX` answers when it wrote nothing,
    /// does not); a measured GET's is checked against the key's latest acknowledged write,
    /// into `into`.
    #[inline]
    fn on_reply(&mut self, p: &Pending, head: &[u8], now: u64, into: &mut Staleness) {
        if p.key == NO_KEY {
            return;
        }
        match self.roles[p.cmd as usize] {
            Some(true) if head.starts_with(b"+OK") => self.table.acked(p.key, p.intended, now),
            Some(false) if p.measured => {
                let Some(version) = read_stamp(head) else {
                    return;
                };
                match self.table.check(p.key, version, p.since()) {
                    None => {}
                    Some(None) => into.checked += 1,
                    Some(Some(behind)) => {
                        into.checked += 1;
                        into.stale += 1;
                        into.behind.record(behind);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Per key, the latest write a class saw acknowledged: a direct-mapped table of
/// [`VERSION_SLOTS`] entries (a key whose entry another key took is not checked).
struct Versions {
    /// (key, the write's intended time, when its acknowledgement came), ns.
    slots: Box<[(u64, u64, u64)]>,
}

/// Entries of [`Versions`]: 262,144 keys, 6 MB per class of a shard (only with
/// `--check-staleness`).
const VERSION_SLOTS: usize = 1 << 18;

impl Versions {
    fn new() -> Self {
        Self {
            slots: vec![(NO_KEY, 0, 0); VERSION_SLOTS].into_boxed_slice(),
        }
    }

    #[inline]
    fn at(key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - VERSION_SLOTS.trailing_zeros())) as usize
    }

    /// The write of `key` intended at `written` was acknowledged at `now` (an older one
    /// acknowledged late changes nothing).
    #[inline]
    fn acked(&mut self, key: u64, written: u64, now: u64) {
        let e = &mut self.slots[Self::at(key)];
        if e.0 != key || e.1 < written {
            *e = (key, written, now);
        }
    }

    /// A read of `key` sent at `sent` returned `version` (None: no stamp): None when the
    /// table does not know the key; `Some(None)` when the read is fresh (it has the
    /// latest acknowledged write, or was sent before that write's acknowledgement);
    /// `Some(Some(ns))` when it missed a write acknowledged `ns` before it was sent.
    #[inline]
    fn check(&self, key: u64, version: Option<u64>, sent: u64) -> Option<Option<u64>> {
        let (k, written, acked) = self.slots[Self::at(key)];
        if k != key {
            return None;
        }
        let fresh = version.is_some_and(|v| v >= written) || acked >= sent;
        Some((!fresh).then(|| sent - acked))
    }
}

/// The redirect or retry an error reply asks for, in cluster mode.
fn redo_of(kind: &[u8], message: &[u8]) -> Option<(Redo, &'static str)> {
    match kind {
        b"MOVED" | b"ASK" => {
            let r = parse_redirect(message)?;
            Some(match r.kind {
                RedirectKind::Moved => (
                    Redo::Moved {
                        slot: r.slot,
                        addr: r.addr.to_string(),
                    },
                    "MOVED",
                ),
                RedirectKind::Ask => (
                    Redo::Ask {
                        addr: r.addr.to_string(),
                    },
                    "ASK",
                ),
            })
        }
        b"TRYAGAIN" => Some((Redo::Later, "TRYAGAIN")),
        b"CLUSTERDOWN" => Some((Redo::Later, "CLUSTERDOWN")),
        b"LOADING" => Some((Redo::Later, "LOADING")),
        _ => None,
    }
}

impl ClassState {
    /// A class that sends `workload` as `load` says, `pipeline` requests deep per
    /// connection.
    pub fn new(
        workload: Arc<Workload>,
        load: Load,
        pipeline: u32,
        warmup: u64,
        backlog_limit: usize,
        cursor: Cursor,
    ) -> Self {
        let n = workload.names().len();
        let arrivals = match load {
            Load::Open(schedule) => Arrivals::Open {
                original: schedule.profile().clone(),
                schedule,
                next_due: None,
                steered: false,
            },
            Load::Closed {
                until,
                budget,
                checkpoints,
            } => Arrivals::Closed {
                until: until.map(|u| u.as_nanos() as u64),
                budget,
                issued: 0,
                gates: checkpoints.into(),
            },
            Load::Trace(source) => Arrivals::Trace(Box::new(TraceQueue::new(source))),
        };
        Self {
            mixer: workload.mixer(),
            reads: workload.reads(),
            workload,
            arrivals,
            pipeline: pipeline.max(1) as usize,
            warmup,
            backlog_limit,
            cursor,
            free: vec![VecDeque::new()],
            lanes: 1,
            conn_lane: Vec::new(),
            last: None,
            backlog: vec![VecDeque::new()],
            backlog_len: 0,
            parked: VecDeque::new(),
            held: None,
            redirected: Vec::new(),
            nodes: vec![NodeTally::default()],
            outages: Outages::default(),
            stale: None,
            interval: Stats::new(n),
            totals: Stats::new(n),
        }
    }

    /// Stamps this class's SETs and checks its GETs for staleness (`--check-staleness`);
    /// nothing when it has neither.
    pub fn check_staleness(&mut self) {
        if matches!(self.arrivals, Arrivals::Trace(_)) {
            // A trace's values are its own sizes, never stamped.
            return;
        }
        let roles = self.workload.versioned();
        if roles.contains(&Some(true)) && roles.contains(&Some(false)) {
            self.stale = Some(Box::new(StaleCheck {
                roles,
                table: Versions::new(),
            }));
        }
    }

    /// A replayed trace on `per_node` connections to each node: as many lanes, each
    /// key's requests on one (any other class keeps one lane: any connection will do).
    pub fn set_lanes(&mut self, per_node: u32) {
        if matches!(self.arrivals, Arrivals::Trace(_)) {
            self.lanes = per_node.clamp(1, u32::from(u16::MAX)) as u16;
            self.free = vec![VecDeque::new(); usize::from(self.lanes)];
            self.backlog = vec![VecDeque::new(); usize::from(self.lanes)];
        }
    }

    /// Lanes per node (see [`ClassState::set_lanes`]).
    pub fn lanes(&self) -> u16 {
        self.lanes
    }

    /// The queue of `node`'s lane `lane` (an index of `free` and `backlog`).
    #[inline]
    fn queue(&self, node: u16, lane: u16) -> usize {
        usize::from(node) * usize::from(self.lanes) + usize::from(lane)
    }

    /// The node queue `qi` belongs to.
    #[inline]
    fn node_of_queue(&self, qi: usize) -> u16 {
        (qi / usize::from(self.lanes)) as u16
    }

    /// A trace record's lane: by its key's hash (FNV-1a, its high half mixed apart from
    /// the low bits that chose the shard), or by its number when it has no key.
    #[inline]
    fn lane_of(&self, key: &[u8], seq: u64) -> u16 {
        if self.lanes == 1 {
            return 0;
        }
        let h = if key.is_empty() {
            seq
        } else {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for &b in key {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32
        };
        (h % u64::from(self.lanes)) as u16
    }

    /// Makes room for node indexes below `n`.
    fn reach(&mut self, n: usize) {
        if self.nodes.len() < n {
            self.nodes.resize_with(n, NodeTally::default);
        }
        let queues = n * usize::from(self.lanes);
        if self.free.len() < queues {
            self.free.resize_with(queues, VecDeque::new);
            self.backlog.resize_with(queues, VecDeque::new);
        }
    }

    /// When the class stops sending, ns since the start: the end of its schedule or of
    /// its closed-loop time; `None` when only a request count bounds it (no known end).
    pub fn end(&self) -> Option<u64> {
        match &self.arrivals {
            Arrivals::Open { schedule, .. } => Some(schedule.profile().duration_ns()),
            Arrivals::Closed { until, .. } => *until,
            Arrivals::Trace(_) => None,
        }
    }

    /// Draws the first intended time (open loop).
    pub fn start(&mut self, rng: &mut Rng) {
        if let Arrivals::Open {
            schedule, next_due, ..
        } = &mut self.arrivals
        {
            *next_due = schedule.next(rng);
        }
    }

    /// Stops sending at `at` (ns since the start: a run stopped early): an open loop's
    /// schedule ends there, a closed loop's time too.
    pub fn end_at(&mut self, at: u64) {
        match &mut self.arrivals {
            Arrivals::Open {
                schedule,
                next_due,
                steered,
                ..
            } => {
                let p = schedule.profile().until(at);
                *next_due = schedule.respliced(p);
                *steered = true;
            }
            Arrivals::Closed { until, .. } => {
                *until = Some(until.map_or(at, |u| u.min(at)));
            }
            Arrivals::Trace(q) => q.end_at(at),
        }
    }

    /// Follows a runtime change from `at` (ns since the start) on: a held cluster-wide
    /// rate at this shard's `share`, or the plan's profile again. The next intended time
    /// is placed again under the new profile (unchanged when it falls before `at`), so
    /// the spacing stays continuous. Closed-loop and trace classes ignore it (a trace keeps
    /// its own clock).
    pub fn steer(&mut self, how: Steer, at: u64, share: f64) {
        if let Arrivals::Open {
            schedule,
            next_due,
            original,
            steered,
        } = &mut self.arrivals
        {
            let p = how.apply(schedule.profile(), original, at, share);
            *next_due = schedule.respliced(p);
            *steered = true;
        }
    }

    /// Whether this class may still start requests at `now`.
    #[inline]
    pub fn sending(&self, now: u64) -> bool {
        match &self.arrivals {
            Arrivals::Open {
                next_due,
                steered,
                schedule,
                ..
            } => next_due.is_some() || (*steered && now < schedule.profile().duration_ns()),
            Arrivals::Closed {
                until,
                budget,
                issued,
                gates,
            } => {
                budget.is_none_or(|b| b > 0)
                    && until.is_none_or(|u| now < u)
                    && gates.front().is_none_or(|g| issued < g)
            }
            Arrivals::Trace(q) => q.sending(),
        }
    }

    /// True when the class has issued its share up to its next checkpoint and waits there
    /// (its time not up): the shard drains, reports and waits for the release.
    pub fn at_gate(&self, now: u64) -> bool {
        match &self.arrivals {
            Arrivals::Closed {
                until,
                issued,
                gates,
                ..
            } => until.is_none_or(|u| now < u) && gates.front().is_some_and(|g| issued >= g),
            Arrivals::Open { .. } | Arrivals::Trace(_) => false,
        }
    }

    /// A closed loop bounded only by a count, with no connection up for longer than the
    /// timeout (the server is gone): the measured requests it has left are never sent.
    /// They fail as `timeout_unsent` (scheduled, and given up waiting for a connection),
    /// split over the mix by weight, so the books still add up to the `--requests` asked
    /// for, and the class stops. Returns how many; 0 for any other class.
    pub fn give_up(&mut self) -> u64 {
        let Arrivals::Closed {
            until: None,
            budget: Some(left),
            gates,
            ..
        } = &mut self.arrivals
        else {
            return 0;
        };
        let n = std::mem::take(left);
        gates.clear();
        for (s, k) in self.interval.cmds.iter_mut().zip(self.mixer.shares(n)) {
            if k > 0 {
                s.scheduled += k;
                add_error(&mut s.errors, Failure::TimeoutUnsent.kind(), k);
            }
        }
        n
    }

    /// Goes on past the checkpoint the class waits at.
    pub fn pass_gate(&mut self) {
        if let Arrivals::Closed { gates, .. } = &mut self.arrivals {
            gates.pop_front();
        }
    }

    /// The time this class next needs the loop awake for, if any.
    #[inline]
    pub fn wake_at(&self, now: u64) -> Option<u64> {
        match &self.arrivals {
            Arrivals::Open { next_due, .. } => *next_due,
            Arrivals::Closed { until, .. } => until.map(|u| u.max(now)),
            // Nothing held yet: look at the feed again soon.
            Arrivals::Trace(q) => q
                .next_due()
                .or_else(|| q.sending().then_some(now + POLL_NS)),
        }
    }

    /// Open loop: requests come at intended times, not when replies free slots.
    #[inline]
    pub fn is_open(&self) -> bool {
        matches!(self.arrivals, Arrivals::Open { .. } | Arrivals::Trace(_))
    }

    /// Whether requests wait in a backlog, a back-off or a redirect.
    #[inline]
    pub fn has_backlog(&self) -> bool {
        self.backlog_len > 0 || !self.parked.is_empty() || !self.redirected.is_empty()
    }

    /// Step 1 of a turn: every request due by `due` is scheduled (open loop), at most
    /// [`MAX_PER_TURN`] of them, or every free slot gets one (closed loop). `now` is the
    /// clock: a request already `timeout` old is given up instead of sent. Past the class's
    /// end, what the bound left unscheduled is dropped.
    #[inline]
    pub fn send_due(&mut self, due: u64, now: u64, timeout: u64, out: &mut Outbox<'_>) {
        self.last = None;
        match &mut self.arrivals {
            Arrivals::Closed { .. } => {
                self.fill_closed(due, out);
                return;
            }
            Arrivals::Trace(q) => q.refill(now),
            Arrivals::Open { .. } => {}
        }
        for _ in 0..MAX_PER_TURN {
            let t = match &self.arrivals {
                Arrivals::Open {
                    next_due: Some(t), ..
                } if *t <= due => *t,
                Arrivals::Trace(q) => match q.next_due() {
                    Some(t) if t <= due => t,
                    _ => return,
                },
                _ => return,
            };
            out.pace.record(now.saturating_sub(t));
            self.schedule(t, now, timeout, out);
            match &mut self.arrivals {
                Arrivals::Open {
                    schedule, next_due, ..
                } => *next_due = schedule.next(out.rng),
                Arrivals::Trace(q) => q.advance(),
                Arrivals::Closed { .. } => {}
            }
        }
        // The bound was hit: the shard cannot keep this rate. Once the class's time is
        // over, nothing more of its schedule is created (a frozen shard that thaws, or an
        // unschedulable rate, must not keep the run going past its end).
        if let Arrivals::Open {
            schedule, next_due, ..
        } = &mut self.arrivals
            && next_due.is_some_and(|t| t <= due)
            && now >= schedule.profile().duration_ns()
        {
            *next_due = None;
        }
    }

    /// A request not written yet, measured when intended after the warm-up.
    #[inline]
    fn unwritten(&self, q: Queued) -> Pending {
        Pending {
            intended: q.intended,
            written: 0,
            key: q.key,
            cmd: q.cmd,
            tries: q.tries,
            measured: q.intended >= self.warmup,
            asking: false,
        }
    }

    /// A new request intended at `intended`: its command, its first key and that key's
    /// slot (in a cluster).
    #[inline]
    fn create(&mut self, intended: u64, out: &mut Outbox<'_>) -> Queued {
        if let Arrivals::Trace(q) = &self.arrivals {
            // Its command and key are the record's; `key` is the record's number.
            let seq = q.next;
            let (cmd, slot, lane) = match q.current() {
                Some((b, i)) => (
                    b.op[i],
                    match b.key(i) {
                        k if !k.is_empty() && out.routes.is_cluster() => self.workload.name_slot(k),
                        _ => NO_SLOT,
                    },
                    self.lane_of(b.key(i), seq),
                ),
                None => (0, NO_SLOT, 0),
            };
            return Queued {
                intended,
                key: seq,
                cmd,
                slot,
                tries: 0,
                ask: false,
                lane,
            };
        }
        let cmd = self.mixer.pick() as u32;
        let key = self
            .workload
            .draw_key(cmd as usize, out.rng, &mut self.cursor);
        let slot = match key {
            Some(k) if out.routes.is_cluster() => self.workload.key_slot(k),
            _ => NO_SLOT,
        };
        Queued {
            intended,
            key: key.unwrap_or(NO_KEY),
            cmd,
            slot,
            tries: 0,
            ask: false,
            lane: 0,
        }
    }

    /// One open-loop request intended at `intended`: given up when it is already older
    /// than the timeout, else onto a free slot of its node, else into its node's backlog
    /// (behind any already waiting, so order holds), else `backlog_full`.
    #[inline]
    fn schedule(&mut self, intended: u64, now: u64, timeout: u64, out: &mut Outbox<'_>) {
        let q = self.create(intended, out);
        let measured = intended >= self.warmup;
        if measured {
            self.interval.cmds[q.cmd as usize].scheduled += 1;
        }
        if now.saturating_sub(intended) > timeout {
            let p = self.unwritten(q);
            self.on_failed(p, Failure::TimeoutUnsent, now, None, out.routes);
            return;
        }
        self.place(q, out);
    }

    /// Puts `q` on a free slot of its node, or in its node's backlog, or fails it as
    /// `backlog_full`. A slot no node owns parks it (the cluster is missing the slot: a
    /// refresh may find it).
    fn place(&mut self, q: Queued, out: &mut Outbox<'_>) {
        let Some(node) = self.node_for(&q, out) else {
            self.parked.push_back((0, q));
            return;
        };
        let qi = self.queue(node, q.lane);
        if self.backlog[qi].is_empty() && self.dispatch(q, qi, out) {
            return;
        }
        let measured = q.intended >= self.warmup;
        let full = self.backlog_len >= self.backlog_limit;
        if measured {
            let s = &mut self.interval.cmds[q.cmd as usize];
            if full {
                add_error(&mut s.errors, "backlog_full", 1);
                self.nodes[usize::from(node)].errors += 1;
            } else if q.tries == 0 {
                s.backlogged += 1;
            }
        }
        if !full {
            self.backlog[qi].push_back(q);
            self.backlog_len += 1;
        }
    }

    /// The node `q` goes to (an ASK's target is already in `q.slot`'s place: see
    /// [`ClassState::resend`]).
    #[inline]
    fn node_for(&mut self, q: &Queued, out: &mut Outbox<'_>) -> Option<u16> {
        let n = out.routes.node_of(q.slot, self.reads[q.cmd as usize])?;
        self.reach(out.routes.nodes.len());
        Some(n)
    }

    /// Closed loop: every free slot gets a request now, within the budget and the time.
    /// A request whose node has no free slot waits in its backlog, and the fill stops
    /// there for this turn (a slow node holds back only what is meant for it).
    #[inline]
    fn fill_closed(&mut self, now: u64, out: &mut Outbox<'_>) {
        while self.sending(now) && self.free.iter().any(|f| !f.is_empty()) {
            // A pick an earlier turn could not place goes first, issued now: its key and
            // command are kept, so a sequential keyspace (the prefill) skips no key and
            // the mix stays exact.
            let q = match self.held.take() {
                Some(q) => Queued { intended: now, ..q },
                None => self.create(now, out),
            };
            let Some(node) = self.node_for(&q, out) else {
                self.held = Some(q);
                break;
            };
            let qi = self.queue(node, q.lane);
            let placed = self.backlog[qi].is_empty() && self.dispatch(q, qi, out);
            if !placed {
                if !out.routes.is_cluster()
                    || self.backlog_len >= self.backlog_limit.min(self.pipeline)
                {
                    // Only stale tokens, or a full node: the pick waits for the next turn.
                    self.held = Some(q);
                    break;
                }
                self.backlog[qi].push_back(q);
                self.backlog_len += 1;
            }
            // Warm-up requests do not use the budget: --requests counts measured requests.
            if now >= self.warmup {
                if let Arrivals::Closed { budget, issued, .. } = &mut self.arrivals {
                    if let Some(b) = budget {
                        *b -= 1;
                    }
                    *issued += 1;
                }
                self.interval.cmds[q.cmd as usize].scheduled += 1;
            }
            if !placed {
                break;
            }
        }
    }

    /// Puts a request on a connection of queue `qi` (a node's lane) with a free slot;
    /// false when none has one. The connection the batch last went to keeps it while it
    /// has room (one write carries the batch); otherwise the oldest free slot's.
    #[inline]
    fn dispatch(&mut self, q: Queued, qi: usize, out: &mut Outbox<'_>) -> bool {
        // A closed loop refills a connection's whole pipeline at once already, and draws its
        // request before it knows whether a slot is free: it takes tokens one for one.
        let open = self.is_open();
        if let Some(id) = self.last.filter(|_| open) {
            let conn = &mut out.conns[id.index()];
            if self.queue(conn.node, conn.lane) == qi && conn.has_room(self.pipeline) {
                // Its token stays on the list: the next one of it popped is dropped.
                conn.owed_tokens += 1;
                self.put(q, id, out);
                return true;
            }
        }
        let free = &mut self.free[qi];
        // A batch starts on an idle connection if one of the oldest few free slots is on
        // one (the batch then fits in one write more often); the slots passed over go to
        // the back, still free.
        let mut passed = 0;
        while let Some(id) = free.pop_front() {
            let conn = &mut out.conns[id.index()];
            if conn.owed_tokens > 0 {
                conn.owed_tokens -= 1;
                continue;
            }
            if !conn.has_room(self.pipeline) {
                continue; // stale token
            }
            if open
                && self.pipeline > 1
                && conn.in_flight() > 0
                && passed < IDLE_SCAN
                && !free.is_empty()
            {
                passed += 1;
                free.push_back(id);
                continue;
            }
            self.last = Some(id);
            self.put(q, id, out);
            return true;
        }
        false
    }

    /// Writes `q` into connection `id`'s buffer (a slot of it is free) and marks it dirty.
    #[inline]
    fn put(&mut self, q: Queued, id: ConnId, out: &mut Outbox<'_>) {
        let req = self.unwritten(q);
        // A trace request's record, found once (None for any other class).
        let record = match &self.arrivals {
            Arrivals::Trace(t) => match t.find(q.key) {
                Some(r) => Some((t, r)),
                None => {
                    // Its chunk is gone: only a request a timeout past its time can get
                    // here, and such a request is given up.
                    self.on_failed(req, Failure::TimeoutUnsent, q.intended, None, out.routes);
                    return;
                }
            },
            _ => None,
        };
        let conn = &mut out.conns[id.index()];
        // An ASK-redirected request goes with ASKING first; the marker says its reply is no
        // request's.
        let asked = q.ask
            && conn.enqueue(
                Pending {
                    asking: true,
                    measured: false,
                    ..req
                },
                |w| w.bytes().extend_from_slice(b"*1\r\n$6\r\nASKING\r\n"),
            );
        let (workload, cursor, rng) = (&self.workload, &mut self.cursor, &mut *out.rng);
        if let Some((t, (b, i))) = record {
            let values = workload.value_bytes();
            let protocol = t.source.protocol;
            let dirty = conn.enqueue(req, |buf| {
                b.encode_in(protocol, i, &t.source.ops, values, buf);
            });
            if dirty || asked {
                out.dirty.push(id);
            }
            return;
        }
        let key = (q.key != NO_KEY).then_some(q.key);
        let stamped = self
            .stale
            .as_ref()
            .is_some_and(|s| s.roles[q.cmd as usize] == Some(true));
        let dirty = conn.enqueue(req, |buf| {
            if stamped {
                let mut w = Stamped {
                    inner: buf,
                    stamp: stamp(q.intended),
                };
                workload.encode_keyed(q.cmd as usize, key, rng, cursor, &mut w)
            } else {
                workload.encode_keyed(q.cmd as usize, key, rng, cursor, buf)
            }
        });
        if dirty || asked {
            out.dirty.push(id);
        }
    }

    /// Gives up requests intended more than `timeout` before `now` that wait in a
    /// backlog or a back-off, as `timeout_unsent` (a backlog is in intended order: only
    /// its front can be due). A parked one that was refused (`TRYAGAIN`) fails with the
    /// server's word instead.
    pub fn expire_backlog(&mut self, now: u64, timeout: u64, routes: &Routes) {
        for qi in 0..self.backlog.len() {
            while let Some(&q) = self.backlog[qi].front() {
                if now.saturating_sub(q.intended) <= timeout {
                    break;
                }
                self.backlog[qi].pop_front();
                self.backlog_len -= 1;
                let p = self.unwritten(q);
                let node = self.node_of_queue(qi);
                self.on_failed(p, Failure::TimeoutUnsent, now, Some(node), routes);
            }
        }
        let mut i = 0;
        while i < self.parked.len() {
            let q = self.parked[i].1;
            if now.saturating_sub(q.intended) > timeout {
                self.parked.remove(i);
                let p = self.unwritten(q);
                self.on_failed(p, Failure::TimeoutUnsent, now, None, routes);
                if p.measured {
                    // Waiting out a refusal (`CLUSTERDOWN`) or for an owner: its slot's
                    // node now is where it would have gone.
                    let read = self.reads[q.cmd as usize];
                    let slot = (q.slot != NO_SLOT).then_some(q.slot);
                    let owner = routes.owner(q.slot, read);
                    self.outages
                        .on_failed(owner, q.intended, read, slot, routes);
                }
            } else {
                i += 1;
            }
        }
    }

    /// Moves backlogged requests, oldest first, onto slots that came free; and parked
    /// requests whose back-off is over back to their nodes.
    pub fn drain_backlog(&mut self, out: &mut Outbox<'_>) {
        self.last = None;
        for qi in 0..self.backlog.len() {
            while let Some(&q) = self.backlog[qi].front() {
                if !self.dispatch(q, qi, out) {
                    break;
                }
                self.backlog[qi].pop_front();
                self.backlog_len -= 1;
            }
        }
    }

    /// Sends parked requests whose back-off ended by `now` (at the sweep).
    pub fn unpark(&mut self, now: u64, out: &mut Outbox<'_>) {
        for _ in 0..self.parked.len() {
            let Some((at, q)) = self.parked.pop_front() else {
                break;
            };
            if at > now {
                self.parked.push_back((at, q));
                continue;
            }
            if out
                .routes
                .node_of(q.slot, self.reads[q.cmd as usize])
                .is_none()
            {
                // Still nobody's slot: wait for a table that has it (or the timeout).
                self.parked.push_back((now + BACKOFF_MIN_NS, q));
                continue;
            }
            self.place(q, out);
        }
    }

    /// A new table: requests waiting for a node that no longer owns their slot go to the
    /// one that does.
    pub fn reroute(&mut self, out: &mut Outbox<'_>) {
        self.reach(out.routes.nodes.len());
        for qi in 0..self.backlog.len() {
            let node = usize::from(self.node_of_queue(qi));
            let moving: VecDeque<Queued> = {
                let (b, reads) = (&mut self.backlog[qi], &self.reads);
                let (stay, go): (VecDeque<_>, VecDeque<_>) = b.drain(..).partition(|q| {
                    q.ask
                        || q.slot == NO_SLOT
                        || usize::from(out.routes.owner(q.slot, reads[q.cmd as usize])) == node
                });
                *b = stay;
                go
            };
            self.backlog_len -= moving.len();
            for q in moving {
                self.place(q, out);
            }
        }
    }

    /// A connection of this class to `node`, in lane `lane`, came up: all its slots are
    /// free.
    pub fn on_up(&mut self, id: ConnId, node: u16, lane: u16) {
        self.reach(usize::from(node) + 1);
        let lane = lane.min(self.lanes - 1);
        if self.lanes > 1 {
            if self.conn_lane.len() <= id.index() {
                self.conn_lane.resize(id.index() + 1, 0);
            }
            self.conn_lane[id.index()] = lane;
        }
        let qi = self.queue(node, lane);
        for _ in 0..self.pipeline {
            self.free[qi].push_back(id);
        }
    }

    /// A request's write completed at `now` (a request sent again was counted at its
    /// first write).
    #[inline]
    pub fn on_sent(&mut self, p: &Pending, now: u64) {
        if p.measured && p.tries == 0 {
            let s = &mut self.interval.cmds[p.cmd as usize];
            s.sent += 1;
            s.schedule_lag.record(now.saturating_sub(p.intended));
        }
    }

    /// A reply on connection `id` to `node` at `now`: results, and the slot it frees.
    /// Error replies count under the kind `kinds` (the shard's bounded set) names; in a
    /// cluster (`cluster`), redirects and retries are set aside for the shard instead.
    #[inline]
    pub fn on_reply(
        &mut self,
        id: ConnId,
        node: u16,
        r: Reply<'_>,
        now: u64,
        kinds: &mut Kinds,
        cluster: bool,
    ) {
        let p = r.req;
        // `now` is when the reply arrived (the kernel's stamp, or the read): never before
        // its request left.
        let now = now.max(p.since());
        if p.asking {
            // `ASKING`'s own `+OK`: it took no slot of its own.
            return;
        }
        if p.measured {
            let s = &mut self.interval.cmds[p.cmd as usize];
            if r.early && p.tries == 0 {
                s.sent += 1;
                s.schedule_lag.record(now.saturating_sub(p.intended));
            }
        }
        let redo = match r.kind {
            ReplyKind::Error { kind, message } if cluster => {
                redo_of(kind, message).map(|(redo, word)| (redo, word, message))
            }
            _ => None,
        };
        if let Some((redo, word, message)) = redo {
            self.set_aside(p, node, redo, word, message);
            return self.free_slot(id, node, r.idle);
        }
        if !matches!(r.kind, ReplyKind::Error { .. }) {
            let (workload, read) = (&self.workload, self.reads[p.cmd as usize]);
            self.outages.on_ok(node, p.intended, now, read, || {
                (p.key != NO_KEY).then(|| workload.key_slot(p.key))
            });
            if let Some(st) = &mut self.stale {
                st.on_reply(&p, r.head, now, &mut self.interval.staleness);
            }
        }
        if p.measured {
            let s = &mut self.interval.cmds[p.cmd as usize];
            let t = &mut self.nodes[usize::from(node)];
            match r.kind {
                ReplyKind::Value | ReplyKind::Nil => {
                    s.completed += 1;
                    s.misses += u64::from(r.misses);
                    let l = now.saturating_sub(p.intended);
                    s.latency.record(l);
                    s.service_time.record(now.saturating_sub(p.since()));
                    t.completed += 1;
                    t.reads += u64::from(self.reads[p.cmd as usize]);
                    t.latency.record(l);
                }
                ReplyKind::Error { kind, message } => {
                    add_error(&mut s.errors, kinds.resolve(kind, message), 1);
                    t.errors += 1;
                }
            }
        }
        self.free_slot(id, node, r.idle);
    }

    /// A reply on connection `id` to `node` freed its slot (`idle`: the connection has
    /// nothing else in flight).
    #[inline]
    fn free_slot(&mut self, id: ConnId, node: u16, idle: bool) {
        match self.arrivals {
            Arrivals::Open { .. } | Arrivals::Trace(_) => {
                let lane = self.conn_lane.get(id.index()).copied().unwrap_or(0);
                let qi = self.queue(node, lane);
                self.free[qi].push_back(id);
            }
            // Closed loop refills a connection's whole pipeline at once, as
            // valkey-benchmark does: one write of `pipeline` requests instead of a trickle
            // of small ones, which the server reads more cheaply too.
            Arrivals::Closed { .. } if idle => self.on_up(id, node, 0),
            Arrivals::Closed { .. } => {}
        }
    }

    /// A redirect or refusal: counted, and the request kept to be sent again.
    fn set_aside(&mut self, p: Pending, from: u16, redo: Redo, word: &'static str, message: &[u8]) {
        if p.measured {
            let s = &mut self.interval.cmds[p.cmd as usize].redirects;
            let t = &mut self.nodes[usize::from(from)].redirects;
            match redo {
                Redo::Moved { .. } => (s.moved += 1, t.moved += 1),
                Redo::Ask { .. } => (s.asked += 1, t.asked += 1),
                Redo::Later => (s.retried += 1, t.retried += 1),
            };
        }
        // Recomputed from the key (a trace's from its record's): an ASK's slot is its
        // key's, like any other; a trace's lane stays its key's.
        let (slot, lane) = match &self.arrivals {
            Arrivals::Trace(t) => {
                let k = t.find(p.key).map_or(&[][..], |(b, i)| b.key(i));
                let slot = if k.is_empty() {
                    NO_SLOT
                } else {
                    self.workload.name_slot(k)
                };
                (slot, self.lane_of(k, p.key))
            }
            _ if p.key == NO_KEY => (NO_SLOT, 0),
            _ => (self.workload.key_slot(p.key), 0),
        };
        let q = Queued {
            intended: p.intended,
            key: p.key,
            cmd: p.cmd,
            slot,
            tries: p.tries.saturating_add(1),
            ask: false,
            lane,
        };
        if p.measured {
            let slot = (q.slot != NO_SLOT).then_some(q.slot);
            let read = self.reads[p.cmd as usize];
            self.outages.on_redirect(from, p.intended, read, slot);
        }
        self.redirected.push(Redirected {
            q,
            from,
            redo,
            word,
            message: clean_message(message).into_boxed_str(),
        });
    }

    /// Sends a redirected request again (the shard has updated the routes): to `ask`'s
    /// node with `ASKING` for an `ASK`, to its slot's owner otherwise, after a back-off for
    /// `later`. One past [`MAX_TRIES`], or older than the timeout, it fails with the
    /// server's `word` (counted under `kinds`, the server's line its first message) or as
    /// `timeout`.
    #[allow(clippy::too_many_arguments)]
    pub fn resend(
        &mut self,
        r: Redirected,
        ask: Option<u16>,
        later: bool,
        now: u64,
        timeout: u64,
        kinds: &mut Kinds,
        out: &mut Outbox<'_>,
    ) {
        let q = r.q;
        if q.tries >= MAX_TRIES {
            self.fail_word(q, r.word, &r.message, r.from, kinds);
            if q.intended >= self.warmup && matches!(r.redo, Redo::Later) {
                // Refused to the end (`CLUSTERDOWN`, `TRYAGAIN`, `LOADING`).
                let read = self.reads[q.cmd as usize];
                let slot = (q.slot != NO_SLOT).then_some(q.slot);
                self.outages
                    .on_failed(r.from, q.intended, read, slot, out.routes);
            }
            return;
        }
        if now.saturating_sub(q.intended) > timeout {
            let p = self.unwritten(q);
            self.on_failed(p, Failure::Timeout, now, Some(r.from), out.routes);
            return;
        }
        if later {
            let backoff = (BACKOFF_MIN_NS << q.tries.saturating_sub(1).min(8)).min(BACKOFF_MAX_NS);
            self.parked.push_back((now + backoff, q));
            return;
        }
        match ask {
            Some(node) => {
                self.reach(usize::from(node) + 1);
                let q = Queued { ask: true, ..q };
                let qi = self.queue(node, q.lane);
                if !self.dispatch(q, qi, out) {
                    // Waits at the importing node (its backlog keeps it there: `ask`).
                    self.backlog[qi].push_back(q);
                    self.backlog_len += 1;
                }
            }
            None => self.place(q, out),
        }
    }

    /// Fails `q` with the server's word (a redirect loop, or a refusal to the end), its
    /// line `message` the kind's first message in `kinds`.
    pub fn fail_word(
        &mut self,
        q: Queued,
        word: &str,
        message: &str,
        node: u16,
        kinds: &mut Kinds,
    ) {
        if q.intended >= self.warmup {
            let kind = kinds.resolve(word.as_bytes(), message.as_bytes());
            add_error(&mut self.interval.cmds[q.cmd as usize].errors, kind, 1);
            self.reach(usize::from(node) + 1);
            self.nodes[usize::from(node)].errors += 1;
        }
    }

    /// RESP3 push frames arrived on the class's connections, `invalidations` of them
    /// client-side caching invalidations. They answer no request; they are counted, warm-up
    /// included (a push carries no intended time).
    #[inline]
    pub fn on_pushes(&mut self, pushes: u64, invalidations: u64) {
        self.interval.pushes += pushes;
        self.interval.invalidations += invalidations;
    }

    /// The slot of a request for key `key` when requests are routed by slot.
    fn slot_of(&self, key: u64, routes: &Routes) -> Option<u16> {
        if !routes.is_cluster() || key == NO_KEY {
            return None;
        }
        match &self.arrivals {
            Arrivals::Trace(t) => t
                .find(key)
                .map(|(b, i)| b.key(i))
                .filter(|k| !k.is_empty())
                .map(|k| self.workload.name_slot(k)),
            _ => Some(self.workload.key_slot(key)),
        }
    }

    /// A request that failed without a reply (its connection, to `node`, closed under
    /// it, or it was given up); `routes`, as they are now, for an outage it opens.
    pub fn on_failed(
        &mut self,
        p: Pending,
        failure: Failure,
        now: u64,
        node: Option<u16>,
        routes: &Routes,
    ) {
        if !p.measured || p.asking {
            return;
        }
        if let Some(n) = node
            && failure != Failure::TooLarge
        {
            let slot = self.slot_of(p.key, routes);
            let read = self.reads[p.cmd as usize];
            self.outages.on_failed(n, p.intended, read, slot, routes);
        }
        let s = &mut self.interval.cmds[p.cmd as usize];
        add_error(&mut s.errors, failure.kind(), 1);
        if matches!(failure, Failure::Timeout | Failure::TimeoutUnsent) {
            // A request given up on waited at least this long: keep it in the latency
            // histogram so timing out can never make the percentiles look better.
            s.latency.record(now.saturating_sub(p.intended));
        }
        if let Some(n) = node {
            self.reach(usize::from(n) + 1);
            self.nodes[usize::from(n)].errors += 1;
        }
    }

    /// Ends the current interval: returns its results and adds them to the totals.
    pub fn take_interval(&mut self) -> Stats {
        let n = self.interval.cmds.len();
        let s = std::mem::replace(&mut self.interval, Stats::new(n));
        self.totals += &s;
        s
    }

    /// The results of every interval taken so far.
    pub fn take_totals(&mut self) -> Stats {
        std::mem::take(&mut self.totals)
    }

    /// Per node, this class's measured requests.
    pub fn take_nodes(&mut self) -> Vec<NodeTally> {
        std::mem::take(&mut self.nodes)
    }

    /// Measured requests still waiting in a backlog or a back-off (never written, or
    /// to be written again).
    pub fn unsent(&self) -> u64 {
        let measured = |q: &&Queued| q.intended >= self.warmup;
        (self.backlog.iter().flatten().filter(measured).count()
            + self.parked.iter().map(|(_, q)| q).filter(measured).count()
            + self
                .redirected
                .iter()
                .map(|r| &r.q)
                .filter(measured)
                .count()) as u64
    }

    /// Results of the interval so far.
    #[cfg(test)]
    pub fn interval(&self) -> &Stats {
        &self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::ClassId;
    use crest_model::schedule::{Arrival, Profile};
    use crest_model::shapes::{KeyDist, KeySpace, ValueSizes};
    use crest_model::workload::CmdDef;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn workload(mix: &[(&str, u32)]) -> Arc<Workload> {
        let commands = mix
            .iter()
            .map(|(name, w)| (CmdDef::parse(name, 1, None, 1).unwrap(), *w))
            .collect();
        let keys = KeySpace::new(100, "key:", KeyDist::Uniform).unwrap();
        Arc::new(Workload::new(commands, keys, ValueSizes::Fixed(8), 1, false, None, 1).unwrap())
    }

    /// An open-loop class sending `n` requests 1 ms apart from t = 0.
    fn open(n: u64, pipeline: u32, warmup: u64, backlog_limit: usize) -> ClassState {
        let profile = Profile::constant(1_000.0, n * MS).unwrap();
        let load = Load::Open(Schedule::new(profile, Arrival::Uniform, 0.0));
        let mut c = ClassState::new(
            workload(&[("GET", 1)]),
            load,
            pipeline,
            warmup,
            backlog_limit,
            Cursor::default(),
        );
        c.start(&mut Rng::new(1));
        c
    }

    fn closed(until: Option<Duration>, budget: Option<u64>, pipeline: u32) -> ClassState {
        ClassState::new(
            workload(&[("SET", 1), ("GET", 1)]),
            Load::Closed {
                until,
                budget,
                checkpoints: Vec::new(),
            },
            pipeline,
            0,
            16,
            Cursor::default(),
        )
    }

    /// Connections that are up, without sockets, plus the RNG and flush list.
    struct Rig {
        conns: Vec<Conn>,
        rng: Rng,
        dirty: Vec<ConnId>,
        routes: Routes,
        pace: Pace,
    }

    impl Rig {
        fn new(n: u32, class: &mut ClassState) -> Self {
            let conns = (0..n)
                .map(|i| {
                    let mut c = Conn::for_tests(ClassId(0));
                    c.set_up();
                    class.on_up(ConnId(i), 0, 0);
                    c
                })
                .collect();
            Self {
                conns,
                rng: Rng::new(7),
                dirty: Vec::new(),
                routes: Routes::single("127.0.0.1:1".parse().unwrap()),
                pace: Pace::new(crest_model::plan::Pacer::Sleep),
            }
        }

        /// A cluster of two nodes (slots below 8192 on node 0), `n` connections to each.
        fn cluster(n: u32, class: &mut ClassState) -> Self {
            let shared = crate::route::Shared::new(crate::route::Resolved {
                nodes: vec![
                    (
                        "127.0.0.1:7000".into(),
                        "127.0.0.1:7000".parse().unwrap(),
                        true,
                    ),
                    (
                        "127.0.0.1:7001".into(),
                        "127.0.0.1:7001".parse().unwrap(),
                        true,
                    ),
                ],
                owner: (0..crest_model::slot::SLOTS)
                    .map(|s| u16::from(s >= 8192))
                    .collect(),
                replica_of: Vec::new(),
            });
            let conns = (0..2 * n)
                .map(|i| {
                    let node = (i / n) as u16;
                    let mut c = Conn::for_tests(ClassId(0)).at_node(node);
                    c.set_up();
                    class.on_up(ConnId(i), node, 0);
                    c
                })
                .collect();
            Self {
                conns,
                rng: Rng::new(7),
                dirty: Vec::new(),
                routes: Routes::cluster(&shared, crest_model::target::ReadFrom::Primary),
                pace: Pace::new(crest_model::plan::Pacer::Sleep),
            }
        }

        fn out(&mut self) -> Outbox<'_> {
            Outbox {
                conns: &mut self.conns,
                rng: &mut self.rng,
                dirty: &mut self.dirty,
                routes: &mut self.routes,
                pace: &mut self.pace,
            }
        }

        /// Writes every dirty connection at `now` (no socket: the buffer counts as written).
        fn flush(&mut self, class: &mut ClassState, now: u64) {
            let ep = crate::sys::epoll::Epoll::new().unwrap();
            for id in self.dirty.drain(..) {
                let c = &mut self.conns[id.index()];
                c.clear_dirty();
                c.flush(id, &ep, now, |p| class.on_sent(p, now)).unwrap();
            }
        }

        /// The server answers `n` requests on `id` with `reply` at `now`.
        fn answer(&mut self, class: &mut ClassState, id: ConnId, n: usize, reply: &[u8], now: u64) {
            let cluster = self.routes.is_cluster();
            let c = &mut self.conns[id.index()];
            let node = c.node;
            c.feed(&reply.repeat(n));
            c.take_replies(
                |r| class.on_reply(id, node, r, now, &mut Kinds::default(), cluster),
                |_| {},
            )
            .unwrap();
        }

        /// What connection `id` has queued to write.
        fn written(&self, id: ConnId) -> String {
            String::from_utf8_lossy(self.conns[id.index()].wbuf_for_tests()).into_owned()
        }

        fn in_flight(&self) -> Vec<usize> {
            self.conns.iter().map(Conn::in_flight).collect()
        }
    }

    /// A trace class over ops get and set (its workload's commands in the same order),
    /// and its feed.
    fn trace(timeout_ns: u64) -> (ClassState, Arc<crate::feed::TraceFeed>) {
        use crest_model::trace::TraceOp;
        use crest_trace::Op;
        let feed = Arc::new(crate::feed::TraceFeed::default());
        let source = crate::feed::TraceSource {
            feed: feed.clone(),
            ops: vec![TraceOp::Op(Op::Get), TraceOp::Op(Op::Set)].into(),
            timeout_ns,
            protocol: crest_model::target::Protocol::Resp,
        };
        let class = ClassState::new(
            workload(&[("GET", 1), ("SET", 1)]),
            Load::Trace(source),
            4,
            0,
            16,
            Cursor::default(),
        );
        (class, feed)
    }

    #[test]
    fn a_trace_class_sends_its_records_in_order_at_their_times() {
        use crest_model::trace::Batch;
        let (mut class, feed) = trace(u64::MAX / 4);
        let mut rig = Rig::new(1, &mut class);
        assert!(class.is_open() && class.sending(0));
        assert_eq!(
            class.wake_at(0),
            Some(crate::feed::POLL_NS),
            "nothing held yet"
        );
        let mut b = Batch::new(1, true);
        b.push(MS, 1, b"user:1", 5, 30, b"");
        b.push(2 * MS, 0, b"user:1", 0, 0, b"");
        b.push(9 * MS, 0, b"user:2", 0, 0, b"");
        assert!(feed.push(b));
        class.send_due(2 * MS, 2 * MS, u64::MAX, &mut rig.out());
        assert_eq!(class.wake_at(2 * MS), Some(9 * MS));
        let s = class.interval();
        assert_eq!((s.cmds[0].scheduled, s.cmds[1].scheduled), (1, 1));
        let w = rig.written(ConnId(0));
        assert!(
            w.starts_with("*5\r\n$3\r\nSET\r\n$6\r\nuser:1\r\n$5\r\n"),
            "{w:?}"
        );
        assert!(
            w.ends_with("$2\r\nEX\r\n$2\r\n30\r\n*2\r\n$3\r\nGET\r\n$6\r\nuser:1\r\n"),
            "{w:?}"
        );
        let times: Vec<u64> = rig.conns[0].requests().map(|p| p.intended).collect();
        assert_eq!(times, [MS, 2 * MS]);
        assert_eq!(feed.consumed(), 2);
        class.send_due(9 * MS, 9 * MS, u64::MAX, &mut rig.out());
        assert_eq!(feed.consumed(), 3);
        assert!(!class.sending(9 * MS), "the trace ended and all of it went");
        assert!(class.end().is_none());
    }

    /// A trace on three connections: each key's requests all go on its lane's one
    /// connection, in order, waiting in that lane's backlog when it is full (never on
    /// another connection with room), and the keys spread over the three.
    #[test]
    fn a_trace_on_several_connections_keeps_each_key_on_one() {
        use crest_model::trace::Batch;
        let (mut class, feed) = trace(u64::MAX / 4);
        class.set_lanes(3);
        assert_eq!(class.lanes(), 3);
        let conns = (0..3u16)
            .map(|i| {
                let mut c = Conn::for_tests(ClassId(0)).in_lane(i);
                c.set_up();
                class.on_up(ConnId(u32::from(i)), 0, i);
                c
            })
            .collect();
        let mut rig = Rig::new(0, &mut class);
        rig.conns = conns;
        // 24 requests due at once: 12 fill the pipelines, 12 wait (the backlog holds 16).
        let keys: Vec<String> = (0..8).map(|k| format!("user:{k}")).collect();
        let mut b = Batch::new(1, true);
        for round in 0..3u64 {
            for k in &keys {
                b.push(MS + round, 1, k.as_bytes(), 10 + round, 0, b"");
            }
        }
        assert!(feed.push(b));
        let mut on: std::collections::BTreeMap<String, Vec<(u32, u64)>> = Default::default();
        let mut now = 2 * MS;
        class.send_due(now, now, u64::MAX, &mut rig.out());
        for _ in 0..20 {
            for i in 0..3u32 {
                let w = rig.written(ConnId(i));
                for k in &keys {
                    let n = w.matches(&format!("${}\r\n{k}\r\n", k.len())).count();
                    on.entry(k.clone())
                        .or_default()
                        .extend((0..n).map(|_| (i, 0)));
                }
            }
            rig.flush(&mut class, now);
            for i in 0..3u32 {
                let pending = rig.conns[i as usize].in_flight();
                if pending > 0 {
                    rig.answer(&mut class, ConnId(i), pending, b"+OK\r\n", now + 1);
                }
            }
            now += MS;
            class.drain_backlog(&mut rig.out());
            if on.values().map(Vec::len).sum::<usize>() == 24 {
                break;
            }
        }
        assert_eq!(on.values().map(Vec::len).sum::<usize>(), 24, "{on:?}");
        assert_eq!(errors(class.interval(), "backlog_full"), 0);
        let mut used = std::collections::BTreeSet::new();
        for (k, sent) in &on {
            let first = sent[0].0;
            assert!(sent.iter().all(|(c, _)| *c == first), "{k}: {sent:?}");
            used.insert(first);
        }
        assert_eq!(
            used.len(),
            3,
            "the keys spread over the three lanes: {on:?}"
        );
    }

    #[test]
    fn a_trace_record_routes_by_its_own_key_and_a_moved_one_is_resent_as_recorded() {
        use crest_model::trace::Batch;
        let (mut class, feed) = trace(u64::MAX / 4);
        let mut rig = Rig::cluster(1, &mut class);
        let mut b = Batch::new(1, false);
        b.push(0, 0, b"{a}x", 0, 0, b"");
        feed.push(b);
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        let (id, p) = only_request(&rig);
        let slot = crest_model::slot::key_slot(b"{a}x");
        let from = rig.conns[id.index()].node;
        assert_eq!(from, u16::from(slot >= 8192), "routed by the record's key");
        rig.flush(&mut class, MS);
        let to = 1 - from;
        let moved = format!("-MOVED {slot} 127.0.0.1:{}\r\n", 7000 + to);
        rig.answer(&mut class, id, 1, moved.as_bytes(), 2 * MS);
        let r = class.redirected.pop().unwrap();
        assert_eq!(follow_moved(&mut rig, &mut class, r), to);
        let (id2, p2) = only_request(&rig);
        assert_eq!(rig.conns[id2.index()].node, to);
        assert_eq!((p2.intended, p2.key), (p.intended, p.key));
        assert!(
            rig.written(id2).contains("$4\r\n{a}x\r\n"),
            "{}",
            rig.written(id2)
        );
    }

    /// Follows `r`'s `MOVED`: the routes learn the slot's new node (returned) and the
    /// request is sent again at 2 ms.
    fn follow_moved(rig: &mut Rig, class: &mut ClassState, r: Redirected) -> u16 {
        let Redo::Moved { slot, addr } = r.redo.clone() else {
            panic!("{:?}", r.redo)
        };
        let n = rig.routes.redirect_target(&addr, r.from).unwrap();
        rig.routes.moved(slot, n);
        class.resend(
            r,
            None,
            false,
            2 * MS,
            u64::MAX,
            &mut Kinds::default(),
            &mut rig.out(),
        );
        n
    }

    fn errors(s: &Stats, kind: &str) -> u64 {
        s.cmds
            .iter()
            .flat_map(|c| &c.errors)
            .filter(|(k, _)| k == kind)
            .map(|(_, n)| n)
            .sum()
    }

    #[test]
    fn a_full_backlog_fails_requests_as_backlog_full_and_keeps_order() {
        let mut class = open(5, 1, 0, 2);
        let mut rig = Rig::new(1, &mut class);
        class.send_due(10 * MS, 10 * MS, u64::MAX, &mut rig.out());
        let s = &class.interval().cmds[0];
        assert_eq!(s.scheduled, 5);
        assert_eq!(s.backlogged, 2);
        assert_eq!(errors(class.interval(), "backlog_full"), 2);
        assert_eq!(rig.in_flight(), vec![1]);
        assert_eq!(rig.dirty, vec![ConnId(0)]);
        assert_eq!(class.unsent(), 2);
        assert!(!class.sending(10 * MS), "the schedule is over");

        rig.flush(&mut class, 10 * MS);
        rig.answer(&mut class, ConnId(0), 1, b"$-1\r\n", 12 * MS);
        class.drain_backlog(&mut rig.out());
        // The first backlogged request (intended at 1 ms) went next, keeping its time.
        let next = rig.conns[0].requests().next().unwrap();
        assert_eq!(next.intended, MS);
        assert_eq!(class.unsent(), 1);
        rig.flush(&mut class, 13 * MS);
        rig.answer(&mut class, ConnId(0), 1, b"$-1\r\n", 20 * MS);
        let s = &class.interval().cmds[0];
        assert_eq!((s.sent, s.completed), (2, 2));
        // Latency runs from the intended time, so the backlog wait is in it: 12 ms and
        // 19 ms; the service times are 2 ms and 7 ms.
        assert!(s.latency.max() >= 19 * MS - 20_000, "{}", s.latency.max());
        assert!(s.service_time.max() < 8 * MS);
        assert!(s.schedule_lag.max() >= 12 * MS - 20_000);
    }

    #[test]
    fn warm_up_requests_are_sent_but_counted_nowhere() {
        let mut class = open(4, 1, 2 * MS, 1);
        let mut rig = Rig::new(1, &mut class);
        class.send_due(10 * MS, 10 * MS, u64::MAX, &mut rig.out());
        // Requests at 0 and 1 ms are warm-up: one sent, one backlogged, neither counted.
        // The warm-up one holds the backlog's only place, so those at 2 and 3 ms fail.
        let s = &class.interval().cmds[0];
        assert_eq!(s.scheduled, 2);
        assert_eq!(s.backlogged, 0);
        assert_eq!(errors(class.interval(), "backlog_full"), 2);
        assert_eq!(class.unsent(), 0, "the backlogged one is warm-up");
        rig.flush(&mut class, 10 * MS);
        assert_eq!(class.interval().cmds[0].sent, 0);
    }

    #[test]
    fn a_timed_out_request_keeps_its_latency_a_disconnected_one_does_not() {
        let mut class = open(2, 1, 0, 4);
        let mut rig = Rig::new(2, &mut class);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        rig.flush(&mut class, MS);
        let mut failed = Vec::new();
        rig.conns[0].close(500 * MS, |p, _| failed.push(p));
        rig.conns[1].close(500 * MS, |p, _| failed.push(p));
        assert_eq!(failed.len(), 2);
        class.on_failed(failed[0], Failure::Timeout, 500 * MS, Some(0), &rig.routes);
        class.on_failed(
            failed[1],
            Failure::Disconnected,
            500 * MS,
            Some(0),
            &rig.routes,
        );
        let s = &class.interval().cmds[0];
        assert_eq!(errors(class.interval(), "timeout"), 1);
        assert_eq!(errors(class.interval(), "disconnected"), 1);
        assert_eq!(s.completed, 0);
        assert_eq!(s.latency.len(), 1, "only the timed-out one");
        // Intended at 0 ms, given up on at 500 ms.
        let l = s.latency.max();
        assert!((499 * MS..=501 * MS).contains(&l), "{l}");
    }

    #[test]
    fn stale_tokens_are_skipped_and_a_reconnect_frees_slots_again() {
        let mut class = open(3, 2, 0, 8);
        let mut rig = Rig::new(1, &mut class);
        rig.conns[0].close(0, |_, _| {});
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        // Two tokens remain for a closed connection: the request waits.
        assert_eq!(class.unsent(), 1);
        assert_eq!(rig.in_flight(), vec![0]);
        rig.conns[0].set_up();
        class.on_up(ConnId(0), 0, 0);
        class.drain_backlog(&mut rig.out());
        class.send_due(2 * MS, 2 * MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![2], "pipeline 2 is full");
        assert_eq!(class.unsent(), 1);
        assert_eq!(class.interval().cmds[0].backlogged, 2);
    }

    #[test]
    fn closed_loop_budget_is_exact_and_refills_whole_pipelines() {
        let mut class = closed(None, Some(10), 4);
        let mut rig = Rig::new(2, &mut class);
        assert_eq!(class.end(), None, "only a count bounds it");
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![4, 4], "every slot filled at once");
        rig.flush(&mut class, 0);
        // Replies trickle in: no refill until a connection's pipeline is empty.
        rig.answer(&mut class, ConnId(0), 3, b"+OK\r\n", MS);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![1, 4]);
        rig.answer(&mut class, ConnId(0), 1, b"+OK\r\n", MS);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        assert_eq!(
            rig.in_flight(),
            vec![2, 4],
            "only 2 of the budget were left"
        );
        assert!(!class.sending(MS));
        rig.flush(&mut class, MS);
        rig.answer(&mut class, ConnId(0), 2, b"+OK\r\n", 2 * MS);
        rig.answer(&mut class, ConnId(1), 4, b"+OK\r\n", 2 * MS);
        class.send_due(3 * MS, 3 * MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![0, 0], "the budget is spent");
        let total: u64 = class.interval().cmds.iter().map(|c| c.scheduled).sum();
        let done: u64 = class.interval().cmds.iter().map(|c| c.completed).sum();
        assert_eq!((total, done), (10, 10));
        // The mix holds at 1:1 across the refills.
        assert_eq!(class.interval().cmds[0].completed, 5);
    }

    #[test]
    fn closed_loop_stops_at_its_time_and_warm_up_does_not_use_the_budget() {
        let mut class = ClassState::new(
            workload(&[("GET", 1)]),
            Load::Closed {
                until: Some(Duration::from_millis(10)),
                budget: Some(3),
                checkpoints: Vec::new(),
            },
            2,
            5 * MS,
            16,
            Cursor::default(),
        );
        let mut rig = Rig::new(1, &mut class);
        assert_eq!(class.end(), Some(10 * MS));
        assert_eq!(class.wake_at(0), Some(10 * MS));
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        rig.flush(&mut class, 0);
        rig.answer(&mut class, ConnId(0), 2, b"+OK\r\n", MS);
        assert_eq!(class.interval().cmds[0].scheduled, 0, "warm-up");
        assert_eq!(class.interval().cmds[0].completed, 0, "warm-up");
        class.send_due(6 * MS, 6 * MS, u64::MAX, &mut rig.out());
        rig.flush(&mut class, 6 * MS);
        rig.answer(&mut class, ConnId(0), 2, b"+OK\r\n", 7 * MS);
        class.send_due(11 * MS, 11 * MS, u64::MAX, &mut rig.out());
        assert!(!class.sending(11 * MS));
        assert_eq!(rig.in_flight(), vec![0], "past its time");
        assert_eq!(class.interval().cmds[0].completed, 2);
        assert_eq!(class.wake_at(11 * MS), Some(11 * MS));
    }

    #[test]
    fn open_loop_frees_one_slot_per_reply_and_counts_early_replies_as_sent() {
        let mut class = open(3, 3, 0, 8);
        let mut rig = Rig::new(1, &mut class);
        class.send_due(2 * MS, 2 * MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![3]);
        // The server answers the first request with an error before any write finished.
        rig.answer(&mut class, ConnId(0), 1, b"-ERR Protocol error\r\n", 3 * MS);
        let s = &class.interval().cmds[0];
        assert_eq!(s.sent, 1, "the early reply's request was sent");
        assert_eq!(errors(class.interval(), "ERR"), 1);
        rig.flush(&mut class, 4 * MS);
        assert_eq!(class.interval().cmds[0].sent, 3, "the rest counted once");
        rig.answer(&mut class, ConnId(0), 1, b"+OK\r\n", 5 * MS);
        // The batch went on one connection: one token taken, two owed.
        assert_eq!(rig.conns[0].owed_tokens, 2);
        assert_eq!(class.free[0].len() - 2, 2, "one token per reply");
    }

    /// Per connection: tokens on the free list less those owed = free slots.
    fn tokens_balance(class: &ClassState, rig: &Rig, pipeline: usize) {
        for (i, c) in rig.conns.iter().enumerate() {
            let tokens = class.free[usize::from(c.node)]
                .iter()
                .filter(|id| id.index() == i)
                .count();
            assert_eq!(
                tokens - c.owed_tokens as usize,
                pipeline - c.in_flight(),
                "connection {i}"
            );
        }
    }

    #[test]
    fn a_batch_fills_one_connection_before_the_next_and_batches_take_turns() {
        let mut class = open(12, 4, 0, 8);
        let mut rig = Rig::new(4, &mut class);
        // Free slots interleaved over the connections, as replies return them.
        class.free[0] = (0..16).map(|i| ConnId(i % 4)).collect();
        tokens_balance(&class, &rig, 4);
        // Four requests due: one connection, one write (they used to take four).
        class.send_due(3 * MS, 3 * MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![4, 0, 0, 0]);
        assert_eq!(rig.dirty, vec![ConnId(0)]);
        tokens_balance(&class, &rig, 4);
        rig.flush(&mut class, 3 * MS);
        // The next batch starts on the oldest free slot: the next connection.
        class.send_due(5 * MS, 5 * MS, u64::MAX, &mut rig.out());
        assert_eq!(rig.in_flight(), vec![4, 2, 0, 0]);
        assert_eq!(rig.dirty, vec![ConnId(1)]);
        rig.flush(&mut class, 5 * MS);
        tokens_balance(&class, &rig, 4);
        // Replies give the first connection its slots back; owed tokens are dropped as
        // they come up, so a batch never finds more room than there is.
        rig.answer(&mut class, ConnId(0), 4, b"+OK\r\n", 6 * MS);
        tokens_balance(&class, &rig, 4);
        class.send_due(11 * MS, 11 * MS, u64::MAX, &mut rig.out());
        // Six more due: 2 still in flight + 6, on two connections at most.
        assert_eq!(
            rig.in_flight().iter().sum::<usize>(),
            8,
            "every request placed"
        );
        assert!(rig.dirty.len() <= 2, "{:?}", rig.dirty);
        assert!(rig.in_flight().iter().all(|&n| n <= 4));
        tokens_balance(&class, &rig, 4);
        assert_eq!(class.interval().cmds[0].backlogged, 0);
    }

    #[test]
    fn intervals_move_into_totals() {
        let mut class = open(2, 1, 0, 8);
        let mut rig = Rig::new(1, &mut class);
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        let first = class.take_interval();
        assert_eq!(first.cmds[0].scheduled, 1);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        class.take_interval();
        assert_eq!(class.interval().cmds[0].scheduled, 0);
        assert_eq!(class.take_totals().cmds[0].scheduled, 2);
    }

    /// Issue #8: requests waiting in the backlog (every connection full or down) are
    /// given up once their intended time is more than the timeout ago: `timeout_unsent`,
    /// with their wait in latency; younger ones keep waiting.
    #[test]
    fn backlogged_requests_expire_as_timeout_unsent_with_their_wait_in_latency() {
        let mut class = open(10, 1, 0, 100);
        let mut rig = Rig::new(1, &mut class);
        rig.conns[0].close(0, |_, _| {});
        class.send_due(9 * MS, 9 * MS, u64::MAX, &mut rig.out());
        assert_eq!(class.unsent(), 10, "all wait: the only connection is down");
        // At 12 ms with a 5 ms timeout: those intended at 0..=6 ms are over it.
        class.expire_backlog(12 * MS, 5 * MS, &rig.routes);
        assert_eq!(errors(class.interval(), "timeout_unsent"), 7);
        assert_eq!(class.unsent(), 3);
        let s = &class.interval().cmds[0];
        assert_eq!(s.latency.len(), 7);
        assert!(s.latency.min() >= 5 * MS, "{}", s.latency.min());
        assert!(s.latency.max() >= 12 * MS - 20_000);
        // Books: scheduled = errors + unsent.
        assert_eq!(s.scheduled, s.error_total() + class.unsent());
    }

    /// A request whose intended time is already past the timeout when the shard gets to
    /// it (a shard that was frozen, then thawed) is given up, not sent.
    #[test]
    fn a_request_scheduled_later_than_the_timeout_is_never_sent() {
        let mut class = open(10, 1, 0, 100);
        let mut rig = Rig::new(1, &mut class);
        // The shard thaws at 8.5 ms with a 3 ms timeout: 0..=5 ms are given up.
        class.send_due(8 * MS + MS / 2, 8 * MS + MS / 2, 3 * MS, &mut rig.out());
        assert_eq!(errors(class.interval(), "timeout_unsent"), 6);
        assert_eq!(rig.in_flight(), vec![1]);
        assert_eq!(class.unsent(), 2);
        assert_eq!(class.interval().cmds[0].scheduled, 9);
    }

    /// A rate the shard cannot schedule: each turn creates at most MAX_PER_TURN requests,
    /// and once the class's time is over the rest of its schedule is dropped, so the loop
    /// ends instead of generating forever.
    #[test]
    fn an_unschedulable_rate_is_bounded_per_turn_and_dropped_at_the_end() {
        // 1e9 req/s for 10 ms: 10 million requests.
        let profile = Profile::constant(1e9, 10 * MS).unwrap();
        let load = Load::Open(Schedule::new(profile, Arrival::Uniform, 0.0));
        let mut class = ClassState::new(workload(&[("GET", 1)]), load, 1, 0, 16, Cursor::default());
        class.start(&mut Rng::new(1));
        let mut rig = Rig::new(1, &mut class);
        class.send_due(5 * MS, 5 * MS, 1_000, &mut rig.out());
        assert_eq!(class.interval().cmds[0].scheduled, MAX_PER_TURN as u64);
        assert!(class.sending(5 * MS), "still behind, within its time");
        class.send_due(20 * MS, 20 * MS, 1_000, &mut rig.out());
        assert_eq!(class.interval().cmds[0].scheduled, 2 * MAX_PER_TURN as u64);
        assert!(!class.sending(20 * MS), "past its end: the rest is dropped");
        let s = &class.interval().cmds[0];
        let in_flight = rig.in_flight()[0] as u64;
        assert_eq!(s.scheduled, s.error_total() + class.unsent() + in_flight);
    }

    #[test]
    fn error_replies_count_under_bounded_kinds_with_the_first_message() {
        let mut class = open(40, 1, 0, 100);
        let mut rig = Rig::new(1, &mut class);
        let mut kinds = Kinds::default();
        for i in 0..40u64 {
            class.send_due(i * MS, i * MS, u64::MAX, &mut rig.out());
            rig.flush(&mut class, i * MS);
            let reply = format!("-E{i} code {i}\r\n");
            let c = &mut rig.conns[0];
            c.feed(reply.as_bytes());
            c.take_replies(
                |r| class.on_reply(ConnId(0), 0, r, i * MS, &mut kinds, false),
                |_| {},
            )
            .unwrap();
        }
        let s = &class.interval().cmds[0];
        assert_eq!(s.errors.len(), crest_model::stats::MAX_KINDS + 1);
        assert_eq!(errors(class.interval(), "other"), 40 - 32);
        assert_eq!(kinds.message("E3"), Some("E3 code 3"));
        assert_eq!(kinds.message("other"), Some("E32 code 32"));
    }

    /// The one request in flight on the rig: its connection and itself.
    fn only_request(rig: &Rig) -> (ConnId, Pending) {
        let mut found = rig
            .conns
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.requests().map(move |p| (ConnId(i as u32), *p)));
        let one = found.next().expect("a request in flight");
        assert!(found.next().is_none(), "only one");
        one
    }

    fn slot_of(key: u64) -> u16 {
        crest_model::slot::key_slot(format!("key:{key}").as_bytes())
    }

    /// Issue #9: a MOVED answer is not a result: the request goes to the new owner with
    /// its original intended time, is counted once (sent, completed), and the redirect is
    /// counted apart; the routes learn the slot.
    #[test]
    fn a_moved_request_is_sent_again_to_the_new_owner_with_its_intended_time() {
        let mut class = open(1, 1, 0, 8);
        let mut rig = Rig::cluster(1, &mut class);
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        let (id, p) = only_request(&rig);
        let slot = slot_of(p.key);
        let (from, to) = (rig.conns[id.index()].node, 1 - rig.conns[id.index()].node);
        assert_eq!(from, u16::from(slot >= 8192), "routed by the key's slot");
        rig.flush(&mut class, MS);
        let moved = format!("-MOVED {slot} 127.0.0.1:{}\r\n", 7000 + to);
        rig.answer(&mut class, id, 1, moved.as_bytes(), 2 * MS);
        let s = &class.interval().cmds[0];
        assert_eq!((s.sent, s.completed, s.error_total()), (1, 0, 0));
        assert_eq!(s.redirects.moved, 1);
        let r = class.redirected.pop().unwrap();
        assert_eq!(r.from, from);
        assert!(
            matches!(&r.redo, Redo::Moved { slot: rs, .. } if *rs == slot),
            "{:?}",
            r.redo
        );
        assert_eq!(follow_moved(&mut rig, &mut class, r), to);
        let (id2, p2) = only_request(&rig);
        assert_eq!(rig.conns[id2.index()].node, to);
        assert_eq!((p2.intended, p2.key, p2.tries), (p.intended, p.key, 1));
        assert!(rig.written(id2).contains(&format!("key:{}", p.key)));
        rig.flush(&mut class, 3 * MS);
        rig.answer(&mut class, id2, 1, b"$-1\r\n", 5 * MS);
        let s = &class.interval().cmds[0];
        assert_eq!(
            (s.scheduled, s.sent, s.completed),
            (1, 1, 1),
            "counted once"
        );
        assert!(
            s.latency.max() >= 5 * MS - 20_000,
            "the redirect is in the latency"
        );
        assert_eq!(class.nodes[usize::from(to)].completed, 1);
        assert_eq!(class.nodes[usize::from(from)].redirects.moved, 1);
        assert_eq!(rig.routes.node_of(slot, false), Some(to));
    }

    /// ASK: ASKING and the request go to the importing node once; ASKING's +OK is no
    /// result; the table is not changed.
    #[test]
    fn an_ask_sends_asking_first_and_leaves_the_table() {
        let mut class = open(1, 2, 0, 8);
        let mut rig = Rig::cluster(1, &mut class);
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        let (id, p) = only_request(&rig);
        let slot = slot_of(p.key);
        let to = 1 - rig.conns[id.index()].node;
        rig.flush(&mut class, MS);
        let ask = format!("-ASK {slot} 127.0.0.1:{}\r\n", 7000 + to);
        rig.answer(&mut class, id, 1, ask.as_bytes(), 2 * MS);
        let r = class.redirected.pop().unwrap();
        let n = match &r.redo {
            Redo::Ask { addr } => rig.routes.redirect_target(addr, r.from).unwrap(),
            other => panic!("{other:?}"),
        };
        class.resend(
            r,
            Some(n),
            false,
            2 * MS,
            u64::MAX,
            &mut Kinds::default(),
            &mut rig.out(),
        );
        let target = ConnId(u32::from(to));
        let w = rig.written(target);
        assert!(
            w.starts_with("*1\r\n$6\r\nASKING\r\n*2\r\n$3\r\nGET"),
            "{w}"
        );
        assert_eq!(rig.conns[target.index()].in_flight(), 2);
        rig.flush(&mut class, 3 * MS);
        rig.answer(&mut class, target, 1, b"+OK\r\n", 4 * MS);
        assert_eq!(
            class.interval().cmds[0].completed,
            0,
            "ASKING's reply is no result"
        );
        rig.answer(&mut class, target, 1, b"$1\r\nx\r\n", 5 * MS);
        let s = &class.interval().cmds[0];
        assert_eq!((s.sent, s.completed, s.redirects.asked), (1, 1, 1));
        assert_ne!(
            rig.routes.node_of(slot, false),
            Some(to),
            "ASK leaves the table"
        );
        assert_eq!(rig.conns[target.index()].leftovers(), (0, 0));
    }

    /// TRYAGAIN parks the request for a back-off and sends it again; a request still
    /// refused when its timeout passes fails as `timeout`, with its wait in latency.
    #[test]
    fn tryagain_backs_off_and_gives_up_at_the_timeout() {
        let mut class = open(2, 1, 0, 8);
        let mut rig = Rig::cluster(2, &mut class);
        class.send_due(MS, MS, u64::MAX, &mut rig.out());
        rig.flush(&mut class, MS);
        let reqs: Vec<_> = rig
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.in_flight() > 0)
            .map(|(i, _)| ConnId(i as u32))
            .collect();
        assert_eq!(reqs.len(), 2);
        for &id in &reqs {
            rig.answer(
                &mut class,
                id,
                1,
                b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
                2 * MS,
            );
        }
        assert_eq!(class.interval().cmds[0].redirects.retried, 2);
        let timeout = 20 * MS;
        let first = class.redirected.remove(0);
        class.resend(
            first,
            None,
            true,
            2 * MS,
            timeout,
            &mut Kinds::default(),
            &mut rig.out(),
        );
        assert_eq!(class.unsent(), 2, "one parked, one still set aside");
        // Past its timeout, the other one is given up.
        let second = class.redirected.remove(0);
        class.resend(
            second,
            None,
            true,
            30 * MS,
            timeout,
            &mut Kinds::default(),
            &mut rig.out(),
        );
        assert_eq!(errors(class.interval(), "timeout"), 1);
        // The back-off (5 ms) is over at 8 ms: the parked one goes out again.
        class.unpark(3 * MS, &mut rig.out());
        assert!(
            rig.conns.iter().all(|c| c.in_flight() == 0),
            "still backing off"
        );
        class.unpark(8 * MS, &mut rig.out());
        assert_eq!(rig.conns.iter().map(Conn::in_flight).sum::<usize>(), 1);
        assert_eq!(class.unsent(), 0);
        let s = &class.interval().cmds[0];
        assert_eq!(s.scheduled, 2);
    }

    /// A request redirected MAX_TRIES times fails with the server's word (a redirect loop
    /// never spins forever).
    #[test]
    fn a_redirect_loop_ends_with_the_servers_word() {
        let mut class = open(1, 1, 0, 8);
        let mut rig = Rig::cluster(1, &mut class);
        let mut kinds = Kinds::default();
        class.send_due(0, 0, u64::MAX, &mut rig.out());
        for i in 0..u64::from(MAX_TRIES) + 1 {
            let Some((id, p)) = rig
                .conns
                .iter()
                .enumerate()
                .find_map(|(i, c)| c.requests().next().map(|p| (ConnId(i as u32), *p)))
            else {
                break;
            };
            rig.flush(&mut class, i * MS);
            let slot = slot_of(p.key);
            // Always pointing at the node that answered.
            let me = 7000 + rig.conns[id.index()].node;
            rig.answer(
                &mut class,
                id,
                1,
                format!("-MOVED {slot} 127.0.0.1:{me}\r\n").as_bytes(),
                i * MS,
            );
            let r = class.redirected.pop().unwrap();
            class.resend(r, None, false, i * MS, u64::MAX, &mut kinds, &mut rig.out());
        }
        let s = &class.interval().cmds[0];
        assert_eq!(errors(class.interval(), "MOVED"), 1);
        // The server's line is the kind's first message (it was lost, shown as "").
        let m = kinds.message("MOVED").unwrap();
        assert!(
            m.starts_with("MOVED ") && m.contains(" 127.0.0.1:700"),
            "{m}"
        );
        assert_eq!(s.redirects.moved, u64::from(MAX_TRIES));
        assert_eq!(s.completed + s.error_total(), s.scheduled);
    }

    /// A read is stale only when it was sent after the acknowledgement of a write newer
    /// than what it returned; a key the table does not hold is not checked.
    #[test]
    fn versions_judge_a_read_against_the_latest_acknowledged_write() {
        let mut v = Versions::new();
        assert_eq!(v.check(5, None, 100), None, "never written here");
        v.acked(5, 10, 50);
        // An older write acknowledged late changes nothing.
        v.acked(5, 8, 60);
        assert_eq!(v.check(5, Some(10), 100), Some(None), "has it");
        assert_eq!(v.check(5, Some(12), 100), Some(None), "has a newer one");
        assert_eq!(
            v.check(5, Some(9), 100),
            Some(Some(50)),
            "missed it by 50 ns"
        );
        assert_eq!(v.check(5, None, 100), Some(Some(50)), "nothing at all");
        assert_eq!(
            v.check(5, None, 40),
            Some(None),
            "sent before the acknowledgement"
        );
    }
}
