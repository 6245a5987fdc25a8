//! Per-command counts and histograms. A shard owns one [`Stats`] per interval and one for
//! the whole run; they fold with `+=`, so shards, workers and intervals merge the same way.

use crate::hist::{self, Dense, Hist, Sparse};
use std::ops::AddAssign;

/// Counts of one kind of failure.
pub type ErrorCounts = Vec<(String, u64)>;

/// Adds `n` to the count of `kind`, inserting it when new (kinds are few; a scan is cheap).
pub fn add_error(errors: &mut ErrorCounts, kind: &str, n: u64) {
    if n == 0 {
        return;
    }
    match errors.iter_mut().find(|(k, _)| k == kind) {
        Some((_, c)) => *c = c.saturating_add(n),
        None => errors.push((kind.to_string(), n)),
    }
}

/// Most distinct server error kinds a shard, and then a worker, counts by name; later
/// kinds count as [`OTHER`] (random error codes must not grow the books without bound).
pub const MAX_KINDS: usize = 32;
/// Longest kind kept, in bytes; longer first words are cut.
pub const MAX_KIND_LEN: usize = 32;
/// Longest server message kept for a kind, in bytes (then `...`).
pub const MAX_MESSAGE_LEN: usize = 200;
/// The kind of server errors past the first [`MAX_KINDS`].
pub const OTHER: &str = "other";
/// Kinds the engine itself counts (never server words, never folded into [`OTHER`]): a
/// request given up after its intended time passed `--timeout` ago, sent (`timeout`) or
/// never written (`timeout_unsent`); its connection broke (`disconnected`); no room in
/// the backlog (`backlog_full`); its reply was over the buffering caps (`reply_too_large`).
pub const ENGINE_KINDS: &[&str] = &[
    "timeout",
    "timeout_unsent",
    "disconnected",
    "backlog_full",
    "reply_too_large",
    OTHER,
];

/// `bytes` as printable ASCII, anything else (spaces too, unless `spaces`) as `?`: valid
/// UTF-8, safe as a JSON key and on a terminal.
fn printable(bytes: &[u8], spaces: bool) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || (spaces && b == b' ') {
                char::from(b)
            } else {
                '?'
            }
        })
        .collect()
}

/// `bytes` as a kind: at most [`MAX_KIND_LEN`] bytes, printable ASCII (anything else is
/// `?`), so it is valid UTF-8 and safe as a JSON key and on a terminal; `(empty)` for none.
pub fn clean_kind(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "(empty)".into();
    }
    printable(&bytes[..bytes.len().min(MAX_KIND_LEN)], false)
}

/// `bytes` as a message: at most [`MAX_MESSAGE_LEN`] bytes (then `...`), printable ASCII
/// and spaces (anything else is `?`).
pub fn clean_message(bytes: &[u8]) -> String {
    let mut m = printable(&bytes[..bytes.len().min(MAX_MESSAGE_LEN)], true);
    if bytes.len() > MAX_MESSAGE_LEN {
        m.push_str("...");
    }
    m
}

/// Whether `kind` is cleaned (as [`clean_kind`] makes it) from `raw`, without allocating.
fn same_kind(kind: &str, raw: &[u8]) -> bool {
    let raw = &raw[..raw.len().min(MAX_KIND_LEN)];
    if raw.is_empty() {
        return kind == "(empty)";
    }
    kind.len() == raw.len()
        && kind
            .bytes()
            .zip(raw)
            .all(|(k, &r)| k == if r.is_ascii_graphic() { r } else { b'?' })
}

/// The server error kinds seen so far, at most [`MAX_KINDS`], each with the server's first
/// message for it; later kinds are [`OTHER`]. A shard keeps one; a worker keeps one to fold
/// its shards' kinds into the same bound.
#[derive(Debug, Clone, Default)]
pub struct Kinds {
    /// (kind, first message), in the order first seen.
    known: Vec<(String, String)>,
    /// The first message of a kind counted as [`OTHER`].
    other: Option<String>,
    /// Entries of `known` (and `other`) not yet taken by [`Kinds::take_new`].
    new: usize,
    other_new: bool,
}

impl Kinds {
    /// The kind an error reply with first word `kind` and message `message` counts under.
    /// Allocates only for a kind not seen before.
    pub fn resolve(&mut self, kind: &[u8], message: &[u8]) -> &str {
        match self.known.iter().position(|(k, _)| same_kind(k, kind)) {
            Some(i) => &self.known[i].0,
            None => self.admit(clean_kind(kind), || clean_message(message)),
        }
    }

    /// [`Kinds::resolve`] for a kind (and its first message) another shard already named:
    /// engine kinds pass unchanged.
    pub fn fold(&mut self, kind: &str, message: Option<&str>) -> &str {
        if let Some(k) = ENGINE_KINDS.iter().find(|k| **k == kind) {
            if *k == OTHER && self.other.is_none() {
                self.other = message.map(str::to_string);
                self.other_new = self.other.is_some();
            }
            return k;
        }
        match self.known.iter().position(|(k, _)| k == kind) {
            Some(i) => &self.known[i].0,
            None => self.admit(kind.to_string(), || {
                message.map(str::to_string).unwrap_or_default()
            }),
        }
    }

    fn admit(&mut self, kind: String, message: impl FnOnce() -> String) -> &str {
        if self.known.len() < MAX_KINDS {
            self.known.push((kind, message()));
            &self.known[self.known.len() - 1].0
        } else {
            if self.other.is_none() {
                self.other = Some(message());
                self.other_new = true;
            }
            OTHER
        }
    }

    /// The first message of a kind, if it was seen.
    pub fn message(&self, kind: &str) -> Option<&str> {
        if kind == OTHER {
            return self.other.as_deref();
        }
        self.known
            .iter()
            .find(|(k, _)| k == kind)
            .map(|(_, m)| m.as_str())
    }

    /// (kind, first message) of the kinds seen since the last call, in the order seen.
    pub fn take_new(&mut self) -> Vec<(String, String)> {
        let mut out: Vec<_> = self.known[self.new..].to_vec();
        self.new = self.known.len();
        let other_new = std::mem::take(&mut self.other_new);
        if let Some(m) = self.other.as_ref().filter(|_| other_new) {
            out.push((OTHER.to_string(), m.clone()));
        }
        out
    }

    /// Every (kind, first message) seen, [`OTHER`]'s last.
    pub fn all(&self) -> Vec<(String, String)> {
        let mut out = self.known.clone();
        if let Some(m) = &self.other {
            out.push((OTHER.to_string(), m.clone()));
        }
        out
    }
}

/// Rewrites the kinds of `errors` through `kinds` (a worker folding its shards' results
/// into one bound), merging counts that land on the same kind.
pub fn fold_kinds(errors: &mut ErrorCounts, kinds: &mut Kinds) {
    if errors.iter().all(|(k, _)| kinds.is_known(k)) {
        return;
    }
    let old = std::mem::take(errors);
    for (k, n) in old {
        let k = kinds.fold(&k, None).to_string();
        add_error(errors, &k, n);
    }
}

impl Kinds {
    /// Whether `kind` passes [`Kinds::fold`] unchanged and without being admitted.
    fn is_known(&self, kind: &str) -> bool {
        ENGINE_KINDS.contains(&kind) || self.known.iter().any(|(k, _)| k == kind)
    }
}

/// Cluster redirects and retries (a request sent again keeps its intended time, so what
/// they cost is in its latency).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Redirects {
    /// `MOVED` answers followed: the slot's owner changed; the table was updated and the
    /// request sent to the new owner.
    pub moved: u64,
    /// `ASK` answers followed: the slot is migrating; `ASKING` and the request went to
    /// the importing node.
    pub asked: u64,
    /// `TRYAGAIN`, `CLUSTERDOWN` or `LOADING` answers retried after a back-off.
    pub retried: u64,
}

impl Redirects {
    /// Whether none happened.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

impl AddAssign for Redirects {
    fn add_assign(&mut self, o: Self) {
        self.moved = self.moved.saturating_add(o.moved);
        self.asked = self.asked.saturating_add(o.asked);
        self.retried = self.retried.saturating_add(o.retried);
    }
}

/// How a worker's connections came and went over a run (`--conn-lifetime`,
/// `--conn-rate`, and every reconnect after a failure): how many came up before and after
/// the start, how many retired at the end of their life, and each one's setup time.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnLife {
    /// Connections that came up after the run's start (reconnects).
    pub opened: u64,
    /// Connections that came up before it (the first connects).
    pub initial: u64,
    /// Connections closed because their life ended.
    pub retired: u64,
    /// Every connection's setup, ns: from the connect's start to ready for requests
    /// (TCP, TLS handshake, login, database, protocol).
    pub setup: crate::hist::Hist,
    /// Its phases, ns: the TCP connect; the TLS handshake (TLS connections only); the
    /// session's commands, `HELLO`/`AUTH`, `SELECT`, tracking, `READONLY` (connections
    /// that send any).
    pub phases: [crate::hist::Hist; 3],
}

impl Default for ConnLife {
    fn default() -> Self {
        Self {
            opened: 0,
            initial: 0,
            retired: 0,
            setup: crate::hist::new_hist(),
            phases: std::array::from_fn(|_| crate::hist::new_hist()),
        }
    }
}

impl ConnLife {
    /// Adds `o` (another shard's or worker's).
    pub fn add(&mut self, o: &ConnLife) {
        self.opened += o.opened;
        self.initial += o.initial;
        self.retired += o.retired;
        crate::hist::add(&mut self.setup, &o.setup);
        for (p, q) in self.phases.iter_mut().zip(&o.phases) {
            crate::hist::add(p, q);
        }
    }
}

/// One target node's share of a run (cluster mode), measured requests of every class.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeStats {
    /// `host:port` as the cluster announces it.
    pub addr: String,
    /// Owned slots in the last slot table.
    pub primary: bool,
    /// Slots it owned there.
    pub slots: u32,
    /// Requests it answered with a non-error reply.
    pub completed: u64,
    /// Of those, reads (commands a replica may answer): with `--read-from`, how the reads
    /// spread over primaries and replicas.
    pub reads: u64,
    /// Requests that failed on it (error replies, timeouts, disconnects).
    pub errors: u64,
    /// Redirects it answered with (`moved`, `asked`).
    pub redirects: Redirects,
    /// Connections opened to it.
    pub connections: u32,
    /// Completed requests' latency from intended time, ns.
    pub latency: Hist,
    /// Its outages as the clients saw them, in start order, overlapping ones united (at
    /// most [`MAX_OUTAGES`]).
    pub outages: Vec<Outage>,
    /// Outages past [`MAX_OUTAGES`], left out of `outages`.
    pub outages_dropped: u64,
}

/// Most outages kept per node (and per class of a shard); later ones are only counted.
pub const MAX_OUTAGES: usize = 64;

/// A span in which a node's requests failed and none succeeded, as the clients saw it
/// (the engine's `outage` module says how it opens and closes). Times are ns since the
/// run's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    /// The intended time of its first failed request.
    pub start: u64,
    /// When the first success after it completed: a request intended after `start` that
    /// went to this node when it opened (on another node after a failover). None: none
    /// came before the run ended.
    pub end: Option<u64>,
    /// Requests intended within it that failed (timeouts, disconnects, retries given up).
    pub failed: u64,
    /// Its requests answered with a redirect or a retry (`MOVED`, `ASK`, `TRYAGAIN`,
    /// `CLUSTERDOWN`, `LOADING`) while it lasted.
    pub redirected: u64,
    /// When the clients' slot table first moved its slots to another node (None: it never
    /// did, or not a cluster). Of many clients, the last to learn it.
    pub rediscovered: Option<u64>,
    /// The slots whose requests went to the node when it began, as inclusive ranges in
    /// order (empty: not routed by slot).
    pub slots: Vec<(u16, u16)>,
    /// Writes went to the node when it began (a primary; false: a replica taking reads).
    pub writes: bool,
}

impl Outage {
    /// Whether `self` and `o` overlap (an open end reaches the run's end).
    pub fn overlaps(&self, o: &Outage) -> bool {
        self.start <= o.end.unwrap_or(u64::MAX) && o.start <= self.end.unwrap_or(u64::MAX)
    }

    /// Unites `o`, which overlaps, into `self`: the earlier start, the later end (an open
    /// one stays open), counts added, the later rediscovery, the slots of both.
    pub fn unite(&mut self, o: &Outage) {
        self.start = self.start.min(o.start);
        self.end = match (self.end, o.end) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        self.failed = self.failed.saturating_add(o.failed);
        self.redirected = self.redirected.saturating_add(o.redirected);
        self.rediscovered = self.rediscovered.max(o.rediscovered);
        self.slots = unite_ranges(&self.slots, &o.slots);
        self.writes |= o.writes;
    }

    /// Its length in ns (None: open at the end).
    pub fn len_ns(&self) -> Option<u64> {
        self.end.map(|e| e.saturating_sub(self.start))
    }
}

/// Slot ranges (inclusive, in order, apart) of `a` and `b` together, in order and apart.
pub fn unite_ranges(a: &[(u16, u16)], b: &[(u16, u16)]) -> Vec<(u16, u16)> {
    let mut all: Vec<(u16, u16)> = a.iter().chain(b).copied().collect();
    all.sort_unstable();
    let mut out: Vec<(u16, u16)> = Vec::with_capacity(all.len());
    for (s, e) in all {
        match out.last_mut() {
            Some(l) if u32::from(s) <= u32::from(l.1) + 1 => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Adds `o` to `list` (in start order, overlapping ones united): every outage it
/// overlaps is united into one. Past `MAX_OUTAGES`, `o` is counted in `dropped` instead.
pub fn add_outage(list: &mut Vec<Outage>, dropped: &mut u64, o: &Outage) {
    let mut merged = o.clone();
    let before = list.len();
    list.retain(|x| {
        if x.overlaps(&merged) {
            merged.unite(x);
            false
        } else {
            true
        }
    });
    // A united span may now reach outages it did not overlap before.
    while let Some(i) = list.iter().position(|x| x.overlaps(&merged)) {
        let x = list.remove(i);
        merged.unite(&x);
    }
    if list.len() == before && list.len() >= MAX_OUTAGES {
        *dropped = dropped.saturating_add(1);
        return;
    }
    let at = list.partition_point(|x| x.start < merged.start);
    list.insert(at, merged);
}

impl NodeStats {
    /// Nothing yet for the node at `addr`.
    pub fn new(addr: &str) -> Self {
        Self {
            addr: addr.to_string(),
            primary: false,
            slots: 0,
            completed: 0,
            reads: 0,
            errors: 0,
            redirects: Redirects::default(),
            connections: 0,
            latency: hist::new_hist(),
            outages: Vec::new(),
            outages_dropped: 0,
        }
    }

    /// Adds another worker's or shard's share of the same node (slots and role: the
    /// later table's, which `o` is).
    pub fn add(&mut self, o: &NodeStats) {
        self.primary = o.primary;
        self.slots = o.slots;
        self.completed = self.completed.saturating_add(o.completed);
        self.reads = self.reads.saturating_add(o.reads);
        self.errors = self.errors.saturating_add(o.errors);
        self.redirects += o.redirects;
        self.connections = self.connections.saturating_add(o.connections);
        hist::add(&mut self.latency, &o.latency);
        for x in &o.outages {
            add_outage(&mut self.outages, &mut self.outages_dropped, x);
        }
        self.outages_dropped = self.outages_dropped.saturating_add(o.outages_dropped);
    }
}

/// Results of one command over some span, with histograms of type `H`: [`CmdStats`]
/// (full histograms, what is recorded and reported) or [`CmdDelta`] (sparse ones, one
/// interval as it came off the wire, added into a [`CmdStats`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CmdStatsOf<H> {
    /// Requests whose intended send time came.
    pub scheduled: u64,
    /// Requests written to a connection.
    pub sent: u64,
    /// Requests answered with a non-error reply.
    pub completed: u64,
    /// Misses among the completed: nil replies (`$-1`, `*-1`, RESP3 `_`: a `GET` of a
    /// missing key), and each nil element of an array reply (`MGET`'s missing keys).
    pub misses: u64,
    /// Requests that found every connection full and waited in the backlog (their wait
    /// is in `schedule_lag` and `latency`; it is the server's slowness, not the pacer's).
    pub backlogged: u64,
    /// Cluster redirects and retries the requests went through (each request still counts
    /// once above, by how it ended).
    pub redirects: Redirects,
    /// Failed requests by kind: server error replies by their first word (`ERR`,
    /// `WRONGTYPE`..., bounded by [`Kinds`]), and the [`ENGINE_KINDS`].
    pub errors: ErrorCounts,
    /// Completion − intended send time, ns.
    pub latency: H,
    /// Completion − actual write, ns.
    pub service_time: H,
    /// Actual write − intended send time, ns.
    pub schedule_lag: H,
}

/// Results of one command over some span.
pub type CmdStats = CmdStatsOf<Hist>;

/// One command's results of one interval as decoded from the wire, with [`Sparse`]
/// histograms: added into a [`CmdStats`] or a [`CmdSum`] without a full histogram in
/// between.
pub type CmdDelta = CmdStatsOf<Sparse>;

/// Results with [`Dense`] histograms (memory as their samples need it): what a shard
/// records an interval into, what a worker sums its shards' into and what the coordinator
/// adds every worker's every interval into, turned into a [`CmdStats`]
/// ([`CmdStatsOf::to_stats`]) where percentiles are read.
pub type CmdSum = CmdStatsOf<Dense>;

impl<H> CmdStatsOf<H> {
    /// Sum of all error counts.
    pub fn error_total(&self) -> u64 {
        self.errors.iter().fold(0u64, |a, e| a.saturating_add(e.1))
    }
}

impl CmdSum {
    /// The same results with [`Sparse`] histograms: compact, for keeping.
    pub fn to_delta(&self) -> CmdDelta {
        CmdDelta {
            scheduled: self.scheduled,
            sent: self.sent,
            completed: self.completed,
            misses: self.misses,
            backlogged: self.backlogged,
            redirects: self.redirects,
            errors: self.errors.clone(),
            latency: self.latency.to_sparse(),
            service_time: self.service_time.to_sparse(),
            schedule_lag: self.schedule_lag.to_sparse(),
        }
    }
}

impl<H: Samples> CmdStatsOf<H> {
    /// The same results with full histograms.
    pub fn to_stats(&self) -> CmdStats {
        let mut t = CmdStats::default();
        t += self;
        t
    }

    /// `dst` set to the same results, its histograms' memory reused.
    pub fn to_stats_into(&self, dst: &mut CmdStats) {
        dst.clear();
        *dst += self;
    }

    /// Empties it, keeping its histograms' memory.
    pub fn clear(&mut self) {
        (self.scheduled, self.sent, self.completed) = (0, 0, 0);
        (self.misses, self.backlogged) = (0, 0);
        self.redirects = Redirects::default();
        self.errors.clear();
        self.latency.clear();
        self.service_time.clear();
        self.schedule_lag.clear();
    }
}

impl<H: Samples> Default for CmdStatsOf<H> {
    fn default() -> Self {
        Self {
            scheduled: 0,
            sent: 0,
            completed: 0,
            misses: 0,
            backlogged: 0,
            redirects: Redirects::default(),
            errors: Vec::new(),
            latency: H::none(),
            service_time: H::none(),
            schedule_lag: H::none(),
        }
    }
}

/// What [`CmdStatsOf`] needs of its histograms.
pub trait Samples {
    /// An empty one, with Crest's bounds.
    fn none() -> Self;
    /// Samples held.
    fn samples(&self) -> u64;
    /// `dst += self`, exactly.
    fn add_to(&self, dst: &mut Hist);
    /// Its [`hist::fingerprint`].
    fn fingerprint(&self) -> u64;
    /// Empties it, keeping its memory.
    fn clear(&mut self);
    /// Its plain V2 encoding ([`hist::encode_wire`]).
    fn encode_wire(&self) -> Vec<u8>;
}

impl Samples for Hist {
    fn none() -> Self {
        hist::new_hist()
    }
    fn samples(&self) -> u64 {
        self.len()
    }
    fn add_to(&self, dst: &mut Hist) {
        hist::add(dst, self);
    }
    fn fingerprint(&self) -> u64 {
        hist::fingerprint(self)
    }
    fn clear(&mut self) {
        self.reset();
    }
    fn encode_wire(&self) -> Vec<u8> {
        hist::encode_wire(self)
    }
}

impl Samples for Dense {
    fn none() -> Self {
        Dense::default()
    }
    fn samples(&self) -> u64 {
        self.len()
    }
    fn add_to(&self, dst: &mut Hist) {
        Dense::add_to(self, dst);
    }
    fn fingerprint(&self) -> u64 {
        Dense::fingerprint(self)
    }
    fn clear(&mut self) {
        Dense::clear(self);
    }
    fn encode_wire(&self) -> Vec<u8> {
        Dense::encode_wire(self)
    }
}

/// A histogram that takes the samples of an `S` into itself, exactly.
pub trait Takes<S> {
    /// `self += s`.
    fn take(&mut self, s: &S);
}

impl<S: Samples> Takes<S> for Hist {
    fn take(&mut self, s: &S) {
        s.add_to(self);
    }
}

impl Takes<Sparse> for Dense {
    fn take(&mut self, s: &Sparse) {
        self.add(s);
    }
}

impl Takes<Dense> for Dense {
    fn take(&mut self, s: &Dense) {
        self.add_dense(s);
    }
}

impl Samples for Sparse {
    fn none() -> Self {
        Sparse::default()
    }
    fn samples(&self) -> u64 {
        self.len()
    }
    fn add_to(&self, dst: &mut Hist) {
        Sparse::add_to(self, dst);
    }
    fn fingerprint(&self) -> u64 {
        Sparse::fingerprint(self)
    }
    fn clear(&mut self) {
        Sparse::clear(self);
    }
    fn encode_wire(&self) -> Vec<u8> {
        Sparse::encode_wire(self)
    }
}

impl<H: Takes<S>, S> AddAssign<&CmdStatsOf<S>> for CmdStatsOf<H> {
    fn add_assign(&mut self, o: &CmdStatsOf<S>) {
        // Peer numbers among them: saturate, so a hostile count reads as a mismatch, not
        // an overflow.
        self.scheduled = self.scheduled.saturating_add(o.scheduled);
        self.sent = self.sent.saturating_add(o.sent);
        self.completed = self.completed.saturating_add(o.completed);
        self.misses = self.misses.saturating_add(o.misses);
        self.backlogged = self.backlogged.saturating_add(o.backlogged);
        self.redirects += o.redirects;
        for (k, n) in &o.errors {
            add_error(&mut self.errors, k, *n);
        }
        self.latency.take(&o.latency);
        self.service_time.take(&o.service_time);
        self.schedule_lag.take(&o.schedule_lag);
    }
}

/// Results of every command of a workload, indexed like the workload's commands, and what
/// the class's connections received that answers no request.
///
/// Its histograms are [`Dense`]: a shard keeps one of these per class for the interval
/// and one for its totals, and the worker one per class for the interval being summed and
/// one for its totals, so a profile of many classes × commands holds as many of each; a
/// [`Hist`] there was 270 KB whether it held a sample or not (three per command: 0.8 MB
/// per class × command × shard × copy).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stats {
    /// One entry per command, in mix order.
    pub cmds: Vec<CmdSum>,
    /// Out-of-band frames (RESP3 pushes) received, including the warm-up's.
    pub pushes: u64,
    /// Of them, client-side caching invalidations (`invalidate` pushes).
    pub invalidations: u64,
    /// Reads checked for staleness (`--check-staleness`), measured ones only.
    pub staleness: Staleness,
}

impl Stats {
    /// Empty results for `n` commands.
    pub fn new(n: usize) -> Self {
        Self {
            cmds: (0..n).map(|_| CmdSum::default()).collect(),
            pushes: 0,
            invalidations: 0,
            staleness: Staleness::default(),
        }
    }
}

/// Reads checked for staleness (`--check-staleness`): a read is checked when the shard
/// knows the key's latest write it saw acknowledged, and stale when it was sent after
/// that acknowledgement and returned an older version (or none).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Staleness {
    /// Reads checked.
    pub checked: u64,
    /// Of them, stale.
    pub stale: u64,
    /// How far behind each stale read was, ns: from the missed write's acknowledgement to
    /// the read's send (a lower bound).
    pub behind: Dense,
}

impl Staleness {
    /// `self += o`.
    pub fn add(&mut self, o: &Staleness) {
        self.checked = self.checked.saturating_add(o.checked);
        self.stale = self.stale.saturating_add(o.stale);
        self.behind.add_dense(&o.behind);
    }
}

/// A class's counts beside its commands', from workers' final messages, summed: push
/// frames and the staleness check.
#[derive(Debug, Clone, Default)]
pub struct ClassCounts {
    /// Push frames (RESP3).
    pub pushes: u64,
    /// Of them, client-side caching invalidations.
    pub invalidations: u64,
    /// Reads checked for staleness.
    pub stale_checked: u64,
    /// Of them, stale.
    pub stale: u64,
    /// How far behind the stale ones were, ns (None: no stale read).
    pub behind: Option<Hist>,
}

impl ClassCounts {
    /// `self += o`.
    pub fn add(&mut self, o: &ClassCounts) {
        self.pushes = self.pushes.saturating_add(o.pushes);
        self.invalidations = self.invalidations.saturating_add(o.invalidations);
        self.stale_checked = self.stale_checked.saturating_add(o.stale_checked);
        self.stale = self.stale.saturating_add(o.stale);
        if let Some(b) = &o.behind {
            hist::add(self.behind.get_or_insert_with(hist::new_hist), b);
        }
    }
}

impl AddAssign<&Stats> for Stats {
    fn add_assign(&mut self, o: &Stats) {
        if self.cmds.len() < o.cmds.len() {
            self.cmds.resize_with(o.cmds.len(), CmdSum::default);
        }
        for (a, b) in self.cmds.iter_mut().zip(&o.cmds) {
            *a += b;
        }
        self.pushes = self.pushes.saturating_add(o.pushes);
        self.invalidations = self.invalidations.saturating_add(o.invalidations);
        self.staleness.add(&o.staleness);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn outage(start: u64, end: Option<u64>, failed: u64, slots: &[(u16, u16)]) -> Outage {
        Outage {
            start,
            end,
            failed,
            redirected: 1,
            rediscovered: end.map(|e| e - 1),
            slots: slots.to_vec(),
            writes: true,
        }
    }

    #[test]
    fn overlapping_outages_unite_and_apart_ones_stay_in_order() {
        let (mut list, mut dropped) = (Vec::new(), 0);
        add_outage(
            &mut list,
            &mut dropped,
            &outage(50, Some(60), 2, &[(0, 10)]),
        );
        add_outage(
            &mut list,
            &mut dropped,
            &outage(10, Some(20), 1, &[(0, 10)]),
        );
        assert_eq!(list.iter().map(|o| o.start).collect::<Vec<_>>(), [10, 50]);
        // Reaches both: one outage from 5 to the last end, counts added, slots united.
        add_outage(
            &mut list,
            &mut dropped,
            &outage(5, Some(55), 4, &[(11, 20), (30, 30)]),
        );
        assert_eq!(list.len(), 1);
        let o = &list[0];
        assert_eq!(
            (o.start, o.end, o.failed, o.redirected),
            (5, Some(60), 7, 3)
        );
        assert_eq!(o.rediscovered, Some(59), "the last client to learn it");
        assert_eq!(o.slots, [(0, 20), (30, 30)]);
        // An open one reaches the end of the run.
        add_outage(&mut list, &mut dropped, &outage(58, None, 1, &[]));
        assert_eq!(
            (list[0].start, list[0].end, list[0].len_ns()),
            (5, None, None)
        );
        assert_eq!(dropped, 0);
    }

    #[test]
    fn outages_past_the_bound_are_counted_not_kept() {
        let (mut list, mut dropped) = (Vec::new(), 0);
        for i in 0..(MAX_OUTAGES as u64 + 5) {
            add_outage(
                &mut list,
                &mut dropped,
                &outage(i * 10, Some(i * 10 + 1), 1, &[]),
            );
        }
        assert_eq!((list.len(), dropped), (MAX_OUTAGES, 5));
        // One that overlaps a kept one still unites.
        add_outage(&mut list, &mut dropped, &outage(0, Some(5), 1, &[]));
        assert_eq!((list.len(), dropped, list[0].failed), (MAX_OUTAGES, 5, 2));
    }

    #[test]
    fn kinds_are_short_printable_and_keep_their_first_message() {
        let mut k = Kinds::default();
        assert_eq!(
            k.resolve(b"NOAUTH", b"NOAUTH Authentication required."),
            "NOAUTH"
        );
        assert_eq!(k.resolve(b"NOAUTH", b"NOAUTH something else"), "NOAUTH");
        assert_eq!(k.message("NOAUTH"), Some("NOAUTH Authentication required."));
        let long = [b'K'; 100];
        assert_eq!(k.resolve(&long, &long), "K".repeat(MAX_KIND_LEN));
        assert_eq!(k.resolve(b"\xff\x1b[31m", b"\xff\x1b[31m red"), "??[31m");
        assert_eq!(k.resolve(b"", b""), "(empty)");
        let mut big = b"ERR ".to_vec();
        big.resize(1_000_000, b'x');
        assert_eq!(k.resolve(b"ERR", &big), "ERR");
        let m = k.message("ERR").unwrap();
        assert_eq!(m.len(), MAX_MESSAGE_LEN + 3);
        assert!(m.starts_with("ERR xxx") && m.ends_with("..."));
        let new = k.take_new();
        assert_eq!(new.len(), 5);
        assert!(k.take_new().is_empty());
    }

    #[test]
    fn kinds_past_the_bound_are_other_with_the_first_message() {
        let mut k = Kinds::default();
        for i in 0..MAX_KINDS {
            let name = format!("E{i}");
            assert_eq!(k.resolve(name.as_bytes(), b"m"), name);
        }
        assert_eq!(k.resolve(b"E999", b"E999 first"), OTHER);
        assert_eq!(k.resolve(b"E1000", b"E1000 second"), OTHER);
        assert_eq!(
            k.resolve(b"E3", b"again"),
            "E3",
            "known kinds keep their name"
        );
        assert_eq!(k.message(OTHER), Some("E999 first"));
        assert_eq!(k.all().len(), MAX_KINDS + 1);
    }

    #[test]
    fn a_worker_folds_its_shards_kinds_into_the_same_bound() {
        let mut worker = Kinds::default();
        let mut errors: ErrorCounts = (0..40).map(|i| (format!("E{i}"), 1)).collect();
        errors.push(("timeout".into(), 7));
        errors.push(("other".into(), 2));
        fold_kinds(&mut errors, &mut worker);
        assert_eq!(errors.len(), MAX_KINDS + 2);
        let other = errors.iter().find(|e| e.0 == OTHER).unwrap().1;
        assert_eq!(other, 2 + 8);
        assert_eq!(errors.iter().find(|e| e.0 == "timeout").unwrap().1, 7);
        assert_eq!(errors.iter().map(|e| e.1).sum::<u64>(), 40 + 7 + 2);
        // The same kinds again map the same way.
        let mut again: ErrorCounts = vec![("E39".into(), 1), ("E0".into(), 1)];
        fold_kinds(&mut again, &mut worker);
        assert_eq!(again, vec![(OTHER.to_string(), 1), ("E0".to_string(), 1)]);
    }
}
