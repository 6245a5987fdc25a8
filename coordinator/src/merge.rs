//! The books of a run, kept as the run goes. Merging is histogram addition; percentiles are
//! only ever read off merged histograms, never averaged.
//!
//! Memory is bounded by the configuration, never by the run's length (issue #8): an interval
//! message is kept as it came off the wire (deflated histograms) only until every live
//! worker has sent a later one (workers send intervals in increasing index order, see
//! `worker/src/agent.rs`), finished, or was lost. Then it is *finalized*: decoded once,
//! added into the run totals per (class, command) and into each sending worker's books
//! (counts and histogram fingerprints per command: a worker's histograms come with its
//! final message, checked against them), turned into one timeline row and written to the
//! live files (`timeline.csv`, `latency.hlog`). What stays is O(classes × commands)
//! histograms, a few hundred bytes per worker and one [`TimelinePoint`] per interval.
//! Intervals still pending are capped ([`MAX_PENDING_BYTES`] plus
//! [`PENDING_BYTES_PER_WORKER`] for each worker, [`MAX_PENDING_INTERVALS`]): past
//! the cap the oldest is finalized anyway, and a message that comes later for it is still
//! counted in the totals and its worker's books, but not in the timeline ([`RunBooks::late`]).

use crate::config::RunConfig;
use crate::output::Live;
use crest_engine::target_tls::Handshakes;
use crest_model::convert;
use crest_model::hist::{self, Dense, Hist, HistError, SparseDecoder};
use crest_model::schedule::Profile;
use crest_model::stats::{
    ClassCounts, CmdDelta, CmdStats, CmdStatsOf, CmdSum, ErrorCounts, Kinds, NodeStats, Samples,
    add_error, fold_kinds,
};
use crest_proto::pb;
use crest_report::TimelinePoint;
use crest_report::rules::{Baseline, Load};
use prost::Message as _;
use std::collections::BTreeMap;
use std::ops::AddAssign;

/// Per-command sums as the books keep them, keyed by (class, command): every worker's
/// every interval added bucket by bucket ([`CmdSum`]), full histograms made one class at a
/// time, where they are read.
pub type SumBy = BTreeMap<(String, String), CmdSum>;

/// Bytes of interval messages kept while they wait for every worker (their wire size plus
/// a fixed overhead per command); past it the oldest pending interval is finalized.
pub const MAX_PENDING_BYTES: usize = 32 << 20;
/// ...and this much more per worker: one interval of 1,000 workers with 10 commands is
/// 1,000 messages of 10–60 KB, which must all be in before its row is finalized.
pub const PENDING_BYTES_PER_WORKER: usize = 512 << 10;
/// Interval indices kept waiting for every worker; past it the oldest is finalized.
pub const MAX_PENDING_INTERVALS: usize = 4_096;
/// Counts per class from a worker's final message (push frames, the staleness check):
/// at most one entry per class a plan may hold, counts saturating (a peer's numbers).
///
/// # Errors
/// A staleness histogram that does not decode.
pub fn class_counts_from_pb(
    classes: &[pb::ClassCounts],
) -> Result<BTreeMap<String, ClassCounts>, convert::WireError> {
    let mut out = BTreeMap::<String, ClassCounts>::new();
    for c in classes.iter().take(convert::limits::MAX_CLASSES) {
        let counts = convert::class_counts_from_pb(c)?;
        out.entry(c.class.clone()).or_default().add(&counts);
    }
    Ok(out)
}

/// The counts of `class` beside its commands', summed over the workers that finished.
pub fn class_counts<'a>(
    workers: impl Iterator<Item = &'a WorkerBooks>,
    class: &str,
) -> ClassCounts {
    let mut out = ClassCounts::default();
    for c in workers.filter_map(|w| w.final_.as_ref()?.classes.get(class)) {
        out.add(c);
    }
    out
}

/// Memory a decoded command entry takes beside its wire bytes (strings, vectors, structs).
const PENDING_OVERHEAD: usize = 256;

/// Results summed by command name across classes.
pub fn by_name<H: Samples>(
    by: &BTreeMap<(String, String), CmdStatsOf<H>>,
) -> BTreeMap<String, CmdStats> {
    let mut out: BTreeMap<String, CmdStats> = BTreeMap::new();
    for ((_, cmd), s) in by {
        *out.entry(cmd.clone()).or_default() += s;
    }
    out
}

/// Results of one class, by command name, with full histograms (made for this class
/// only: every class's at once is 0.8 MB per class × command).
pub fn of_class<H: Samples>(
    by: &BTreeMap<(String, String), CmdStatsOf<H>>,
    class: &str,
) -> BTreeMap<String, CmdStats> {
    by.iter()
        .filter(|((c, _), _)| c == class)
        .map(|((_, cmd), s)| (cmd.clone(), s.to_stats()))
        .collect()
}

/// Sum over every command.
pub fn all_commands<H: Samples>(by: &BTreeMap<(String, String), CmdStatsOf<H>>) -> CmdStats {
    sum(by.values())
}

/// The sum of some results (histograms added, counts summed).
pub fn sum<'a, H: Samples + 'a>(stats: impl IntoIterator<Item = &'a CmdStatsOf<H>>) -> CmdStats {
    let mut t = CmdStats::default();
    for v in stats {
        t += v;
    }
    t
}

/// Sets a reused (class, command) key: looked up with it, a sum costs no string copies
/// per message (only a key seen for the first time is cloned, by [`add_keyed`]).
pub fn set_key(key: &mut (String, String), class: &str, name: &str) {
    key.0.clear();
    key.0.push_str(class);
    key.1.clear();
    key.1.push_str(name);
}

/// `by[key] += s`, the entry made when the key is new.
pub fn add_keyed(by: &mut SumBy, key: &(String, String), s: &CmdDelta) {
    match by.get_mut(key) {
        Some(t) => *t += s,
        None => *by.entry(key.clone()).or_default() += s,
    }
}

/// The interval hot path's decode: sparse histograms, one reused decoder.
fn decode_delta<'a>(
    de: &mut SparseDecoder,
    cmds: &'a [pb::CommandStats],
) -> Result<Vec<(&'a str, &'a str, CmdDelta)>, HistError> {
    cmds.iter().map(|c| convert::delta_from_pb(c, de)).collect()
}

/// One worker's (or relay's) interval as the generator's work over it.
pub fn load_of(iv: &pb::Interval) -> Load {
    Load {
        cpu_ns: iv.shard_cpu_ns,
        busiest: iv.busiest_shard,
        preemptions: iv.shard_preemptions,
        queued_ns: iv.shard_queued_ns,
        steal_ns: iv.shard_steal_ns,
        connections_opened: iv.connections_opened,
    }
}

/// The index of the last timeline row of a measured span of `duration_ns` cut into
/// intervals of `interval_ns` (at least one row).
pub fn last_row(duration_ns: u64, interval_ns: u64) -> u32 {
    u32::try_from(duration_ns.div_ceil(interval_ns.max(1)).max(1) - 1).unwrap_or(u32::MAX)
}

/// An interval a worker sent that the books cannot take.
#[derive(Debug, thiserror::Error)]
pub enum BooksError {
    /// A histogram does not decode.
    #[error(transparent)]
    Hist(#[from] HistError),
    /// An interval index past the end of the phase.
    #[error("interval index {index} is past the phase's last interval {last}")]
    Index {
        /// The index sent.
        index: u32,
        /// The highest index the phase can have.
        last: u32,
    },
    /// An interval index not above the worker's previous one (workers send in order).
    #[error("interval index {index} after index {previous}: intervals must come in order")]
    Order {
        /// The index sent.
        index: u32,
        /// The worker's previous index.
        previous: u32,
    },
    /// A target rate that is not a finite number ≥ 0.
    #[error("interval target rate {0} is not a finite number ≥ 0")]
    Rate(f64),
    /// A busy share that is not a number from 0 to 1.
    #[error("interval busiest_shard {0} is not a number from 0 to 1")]
    Busy(f64),
}

/// The counts of one command, without its histograms: what a worker's books keep per
/// command to check that its intervals add up to its totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests scheduled.
    pub scheduled: u64,
    /// Requests written.
    pub sent: u64,
    /// Non-error replies.
    pub completed: u64,
    /// Failed requests.
    pub errors: u64,
    /// Latency samples.
    pub latency: u64,
    /// Service-time samples.
    pub service_time: u64,
    /// Schedule-lag samples.
    pub schedule_lag: u64,
    /// The [`fingerprint`](hist::fingerprint)s of the latency, service-time and
    /// schedule-lag histograms: they add like the histograms, so a worker's intervals are
    /// checked against its totals histogram by histogram without a merged copy per worker.
    pub prints: [u64; 3],
}

impl Counts {
    /// The counts of `s`.
    pub fn of<H: Samples>(s: &CmdStatsOf<H>) -> Self {
        Self {
            scheduled: s.scheduled,
            sent: s.sent,
            completed: s.completed,
            errors: s.error_total(),
            latency: s.latency.samples(),
            service_time: s.service_time.samples(),
            schedule_lag: s.schedule_lag.samples(),
            prints: [
                s.latency.fingerprint(),
                s.service_time.fingerprint(),
                s.schedule_lag.fingerprint(),
            ],
        }
    }
}

impl AddAssign for Counts {
    fn add_assign(&mut self, o: Self) {
        // Peer numbers: saturate, so a hostile count reads as a mismatch, not an overflow.
        self.scheduled = self.scheduled.saturating_add(o.scheduled);
        self.sent = self.sent.saturating_add(o.sent);
        self.completed = self.completed.saturating_add(o.completed);
        self.errors = self.errors.saturating_add(o.errors);
        self.latency = self.latency.saturating_add(o.latency);
        self.service_time = self.service_time.saturating_add(o.service_time);
        self.schedule_lag = self.schedule_lag.saturating_add(o.schedule_lag);
        for (a, b) in self.prints.iter_mut().zip(o.prints) {
            *a = a.wrapping_add(b);
        }
    }
}

/// Counts per (class, command).
pub type CountsBy = BTreeMap<(String, String), Counts>;

/// A worker's final message, reduced to what the books check.
#[derive(Debug, Clone)]
pub struct Final {
    /// Counts per command, as the worker summed them.
    pub counts: CountsBy,
    /// Every command together.
    pub total: Counts,
    /// Every command together, with its histograms kept as their nonzero buckets (a
    /// fleet's workers kept full histograms once: 0.8 MB each): this worker's part of the
    /// report (its intervals add up to it: [`WorkerBooks::check`]).
    pub all: CmdDelta,
    /// Sent, unanswered at the end.
    pub in_flight: u64,
    /// Scheduled, never written.
    pub unsent: u64,
    /// Intervals the worker says it sent.
    pub intervals: u32,
    /// Connection failures.
    pub connection_errors: ErrorCounts,
    /// TLS handshakes, when the run used TLS.
    pub tls: Option<Handshakes>,
    /// Per class: push frames its connections received, and its staleness check.
    pub classes: BTreeMap<String, ClassCounts>,
    /// Per target node, every class.
    pub nodes: Vec<NodeStats>,
    /// How its connections came and went.
    pub connections: crest_model::stats::ConnLife,
}

/// One worker's part of the books: counts and histogram fingerprints per command over
/// every interval of it that was finalized, a few hundred bytes whatever the run's length
/// (its histograms come with its final message, checked against these).
#[derive(Debug, Clone, Default)]
pub struct WorkerBooks {
    /// Counts per command over its finalized intervals.
    pub counts: CountsBy,
    /// Intervals finalized.
    pub intervals: u32,
    /// The highest interval index received (workers send in increasing order).
    pub last_index: Option<u32>,
    /// The final message, when it came.
    pub final_: Option<Final>,
}

impl WorkerBooks {
    /// Records the final message, its histograms decoded with `de` and summed in `sum`.
    ///
    /// # Errors
    /// [`HistError`] when a histogram does not decode.
    pub fn finish(
        &mut self,
        f: &pb::Finished,
        de: &mut SparseDecoder,
        sum: &mut CmdSum,
    ) -> Result<(), HistError> {
        let mut counts = CountsBy::new();
        let mut total = Counts::default();
        sum.clear();
        for (class, name, s) in decode_delta(de, &f.totals)? {
            let c = Counts::of(&s);
            *counts
                .entry((class.to_string(), name.to_string()))
                .or_default() += c;
            total += c;
            *sum += &s;
        }
        self.final_ = Some(Final {
            counts,
            total,
            all: sum.to_delta(),
            in_flight: f.in_flight,
            unsent: f.unsent,
            intervals: f.intervals,
            connection_errors: convert::errors_from_pb(&f.connection_errors),
            tls: f.tls.as_ref().map(|t| Handshakes {
                full: t.full,
                resumed: t.resumed,
                version: label(&t.version),
                cipher: label(&t.cipher),
            }),
            classes: class_counts_from_pb(&f.classes)
                .map_err(|e| HistError::Decode(e.to_string()))?,
            nodes: convert::nodes_from_pb(&f.nodes)
                .map_err(|e| HistError::Decode(e.to_string()))?,
            connections: convert::conn_life_from_pb(f.connections.as_ref())
                .map_err(|e| HistError::Decode(e.to_string()))?,
        });
        Ok(())
    }

    /// Adds one command's interval under `key` (class, command).
    fn add(&mut self, key: &(String, String), s: &CmdDelta) {
        let c = Counts::of(s);
        match self.counts.get_mut(key) {
            Some(n) => *n += c,
            None => {
                self.counts.insert(key.clone(), c);
            }
        }
    }

    /// Every command together over the finalized intervals, counts only.
    pub fn total(&self) -> Counts {
        let mut t = Counts::default();
        for c in self.counts.values() {
            t += *c;
        }
        t
    }

    /// Disagreements between the intervals and the final totals, each as one sentence:
    /// counts per command, the all-commands latency histogram, and every scheduled request
    /// accounted for. `missing` says why there are no finals when there are none.
    pub fn check(&self, name: &str, missing: &str) -> Vec<String> {
        let Some(f) = &self.final_ else {
            return vec![format!(
                "worker {name}: no final totals ({missing}); its {} intervals received are counted",
                self.intervals
            )];
        };
        let mut problems = Vec::new();
        if f.intervals != self.intervals {
            problems.push(format!(
                "worker {name}: sent {} intervals, {} received",
                f.intervals, self.intervals
            ));
        }
        let empty = Counts::default();
        for (key, t) in &f.counts {
            let s = self.counts.get(key).unwrap_or(&empty);
            let cmd = format!("{}/{}", key.0, key.1);
            let pairs = [
                ("scheduled", s.scheduled, t.scheduled),
                ("sent", s.sent, t.sent),
                ("completed", s.completed, t.completed),
                ("errors", s.errors, t.errors),
                ("latency samples", s.latency, t.latency),
                ("service-time samples", s.service_time, t.service_time),
                ("schedule-lag samples", s.schedule_lag, t.schedule_lag),
            ];
            for (what, a, b) in pairs {
                if a != b {
                    problems.push(format!(
                        "worker {name} {cmd}: intervals add up to {a} {what}, totals say {b}"
                    ));
                }
            }
            let kinds = ["latency", "service-time", "schedule-lag"];
            for ((what, a), b) in kinds.iter().zip(s.prints).zip(t.prints) {
                if a != b {
                    problems.push(format!(
                        "worker {name} {cmd}: the intervals' {what} histograms do not add up to the totals' histogram"
                    ));
                }
            }
        }
        // Every scheduled request is accounted for: answered, failed, in flight or unsent.
        let all = &f.total;
        let accounted = all
            .completed
            .saturating_add(all.errors)
            .saturating_add(f.in_flight)
            .saturating_add(f.unsent);
        if accounted != all.scheduled {
            problems.push(format!(
                "worker {name}: {} scheduled but {} accounted for (completed {} + errors {} + in flight {} + unsent {})",
                all.scheduled, accounted, all.completed, all.errors, f.in_flight, f.unsent
            ));
        }
        problems
    }
}

/// A peer's name for a TLS version or cipher suite, as the report may show it: at most
/// 64 printable ASCII bytes (rustls's names are about 30).
fn label(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

/// TLS handshakes summed over workers; None when no worker used TLS.
pub fn handshakes<'a>(workers: impl Iterator<Item = &'a WorkerBooks>) -> Option<Handshakes> {
    let mut out: Option<Handshakes> = None;
    for t in workers.filter_map(|w| w.final_.as_ref()?.tls.as_ref()) {
        out.get_or_insert_with(Handshakes::default).add(t);
    }
    out
}

/// Per target node, summed over workers (by address), in the order first reported.
pub fn nodes<'a>(workers: impl Iterator<Item = &'a WorkerBooks>) -> Vec<NodeStats> {
    let mut out: Vec<NodeStats> = Vec::new();
    for n in workers
        .filter_map(|w| w.final_.as_ref())
        .flat_map(|f| &f.nodes)
    {
        match out.iter_mut().find(|m| m.addr == n.addr) {
            Some(m) => m.add(n),
            None => out.push(n.clone()),
        }
    }
    out
}

/// How the connections came and went, summed over workers.
pub fn connections<'a>(
    workers: impl Iterator<Item = &'a WorkerBooks>,
) -> crest_model::stats::ConnLife {
    let mut out = crest_model::stats::ConnLife::default();
    for f in workers.filter_map(|w| w.final_.as_ref()) {
        out.add(&f.connections);
    }
    out
}

/// Connection errors summed over workers.
pub fn connection_errors<'a>(workers: impl Iterator<Item = &'a WorkerBooks>) -> ErrorCounts {
    let mut out = Vec::new();
    for w in workers {
        if let Some(f) = &w.final_ {
            for (k, n) in &f.connection_errors {
                add_error(&mut out, k, *n);
            }
        }
    }
    out
}

/// A worker whose interval could not be read when it was finalized: the caller loses it.
#[derive(Debug)]
pub struct Unreadable {
    /// The worker's position in [`RunBooks::workers`].
    pub worker: usize,
    /// What was wrong.
    pub error: BooksError,
}

/// The books of one phase of a run: run totals, each worker's books, the timeline so far,
/// and the interval messages not yet finalized.
#[derive(Debug)]
pub struct RunBooks {
    /// Run totals per (class, command), over every finalized interval.
    pub totals: SumBy,
    /// Each worker's books, in the order of the phase's members.
    pub workers: Vec<WorkerBooks>,
    /// One row per finalized interval, in order (and empty rows for intervals nobody sent).
    pub timeline: Vec<TimelinePoint>,
    /// Interval messages that came after their index was finalized (past the pending cap):
    /// in the totals and their worker's books, not in the timeline.
    pub late: u64,
    /// Messages waiting, by index: (worker, bytes counted in `pending_bytes`, message).
    pending: BTreeMap<u32, Vec<(usize, usize, pb::Interval)>>,
    pending_bytes: usize,
    /// Indices below this are finalized.
    finalized_below: u32,
    /// The highest index a worker may send in this phase.
    phase_last: u32,
    /// The last timeline row when the span is known (timed runs); None for count-bounded.
    rows_last: Option<u32>,
    interval_ns: u64,
    classes: Vec<String>,
    /// Each class's profile on the measured clock as runtime changes left it (None: closed
    /// loop): the rows' target rates.
    pub profiles: Vec<Option<Profile>>,
    live: Option<Live>,
    /// Reused across messages (it keeps its buffers).
    de: SparseDecoder,
    /// The (class, command) a message's command is looked up in the totals with, reused.
    key: (String, String),
    /// The rows since the last [`RunBooks::take_window`].
    window: Window,
    /// The run's bound on server error kinds (each worker keeps 32; the union of several
    /// workers' kinds is folded into 32 again) with each kind's first message.
    kinds: Kinds,
    /// What rows are judged against: the lowest interval service-time p50 so far (what
    /// "service time rose" is measured against) and the pacer's lag bound.
    base: Baseline,
    /// The row being summed, kept from row to row so that a row allocates nothing (None
    /// while a row is being summed).
    scratch: Option<RowScratch>,
    /// One class's latency of a row as a full histogram, for its hlog line (made when a
    /// live hlog first needs it; one, not one per class).
    class_hist: Option<Hist>,
}

/// What one timeline row is summed in: every command's results bucket by bucket, each
/// class's latency, and the same as full histograms for the row's percentiles and hlog
/// lines. Cleared, not freed, between rows: a run's memory does not move with its length.
#[derive(Debug, Default)]
struct RowScratch {
    sum: CmdSum,
    /// The interval's every worker summed per (class, command) first: each bucket a
    /// worker sends is added once, here, and each key's sum goes into the totals, the row
    /// and its class once per interval (adding every worker's buckets into each of those
    /// took 5 additions per bucket and walked three sums' memory at once).
    by_key: SumBy,
    classes: Vec<Dense>,
    stats: CmdStats,
}

/// The timeline rows written since the progress line last read them, together: at
/// `--interval 10ms` a line once a second shows a second's worth of rows, not one row.
#[derive(Debug)]
struct Window {
    rows: u32,
    completed: u64,
    scheduled: u64,
    latency: Hist,
    target_rate: f64,
}

/// What [`RunBooks::take_window`] returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowSample {
    /// Rows in the window.
    pub rows: u32,
    /// The last row's target rate, per second.
    pub target_rate: f64,
    /// Non-error replies per second over the window.
    pub achieved_rate: f64,
    /// Requests scheduled per second over the window (a replay's target: its trace's).
    pub scheduled_rate: f64,
    /// Latency p99 over the window, µs.
    pub p99_us: f64,
}

impl RunBooks {
    /// The interval, seconds.
    pub fn interval_s(&self) -> f64 {
        self.interval_ns as f64 / 1e9
    }

    /// Books for `workers` workers of a phase of `cfg` whose workers may send indices up to
    /// `phase_last`, with timeline rows up to `rows_last` (None: unknown until the end),
    /// written as they are finalized to `live` when given.
    pub fn new(
        cfg: &RunConfig,
        workers: usize,
        phase_last: u32,
        rows_last: Option<u32>,
        live: Option<Live>,
    ) -> Self {
        Self {
            totals: SumBy::new(),
            workers: vec![WorkerBooks::default(); workers],
            timeline: Vec::new(),
            late: 0,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            finalized_below: 0,
            phase_last,
            rows_last,
            interval_ns: u64::try_from(cfg.interval.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1),
            classes: cfg.classes.iter().map(|c| c.name.clone()).collect(),
            profiles: cfg.classes.iter().map(|c| c.profile.clone()).collect(),
            live,
            de: SparseDecoder::new(),
            key: (String::new(), String::new()),
            window: Window {
                rows: 0,
                completed: 0,
                scheduled: 0,
                latency: hist::new_hist(),
                target_rate: 0.0,
            },
            kinds: Kinds::default(),
            base: Baseline {
                service_floor: 0,
                lag_bound_ns: cfg.pacer.lag_bound_ns(),
            },
            scratch: None,
            class_hist: None,
        }
    }

    /// Interval indices waiting for some worker.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Takes one interval message of worker `w`. Its histograms are read when the interval
    /// is finalized (by [`RunBooks::advance`]), which reports them if they do not decode.
    ///
    /// # Errors
    /// [`BooksError`] when the index is past the phase or not above the worker's previous
    /// one, or the rate is nonsense; the message is dropped.
    pub fn receive(&mut self, w: usize, mut iv: pb::Interval) -> Result<(), BooksError> {
        if iv.index > self.phase_last {
            return Err(BooksError::Index {
                index: iv.index,
                last: self.phase_last,
            });
        }
        if !(iv.target_rate.is_finite() && iv.target_rate >= 0.0) {
            return Err(BooksError::Rate(iv.target_rate));
        }
        if !(0.0..=1.0).contains(&iv.busiest_shard) {
            return Err(BooksError::Busy(iv.busiest_shard));
        }
        let Some(books) = self.workers.get_mut(w) else {
            return Ok(());
        };
        if let Some(previous) = books.last_index
            && iv.index <= previous
        {
            return Err(BooksError::Order {
                index: iv.index,
                previous,
            });
        }
        books.last_index = Some(iv.index);
        for (k, m) in convert::messages_from_pb(&std::mem::take(&mut iv.error_messages)) {
            self.kinds.fold(&k, Some(&m));
        }
        let bytes = iv.encoded_len() + PENDING_OVERHEAD * (1 + iv.commands.len());
        self.pending_bytes += bytes;
        self.pending
            .entry(iv.index)
            .or_default()
            .push((w, bytes, iv));
        Ok(())
    }

    /// Finalizes every interval no active worker can still add to (`active[w]`: worker `w`
    /// has neither finished nor been lost), and the oldest ones past the pending cap.
    /// Returns the workers whose messages did not decode.
    pub fn advance(&mut self, active: &[bool]) -> Vec<Unreadable> {
        let frontier = self
            .workers
            .iter()
            .zip(active)
            .filter(|(_, a)| **a)
            .map(|(b, _)| b.last_index.unwrap_or(0))
            .min();
        let mut bad = Vec::new();
        while let Some((&k, _)) = self.pending.first_key_value() {
            let complete = frontier.is_none_or(|f| k < f);
            if !(complete || self.over_cap()) {
                break;
            }
            bad.extend(self.finalize_first());
        }
        if let Some(live) = &mut self.live {
            live.flush();
        }
        bad
    }

    /// Whether the pending messages are past their cap (bytes or intervals): the next
    /// [`RunBooks::advance`] finalizes the oldest whatever the workers.
    pub fn over_cap(&self) -> bool {
        let cap = MAX_PENDING_BYTES + PENDING_BYTES_PER_WORKER * self.workers.len();
        self.pending_bytes > cap || self.pending.len() > MAX_PENDING_INTERVALS
    }

    /// The measured span ends at `span_ns` instead (a run stopped early): no row past it.
    pub fn end_rows_at(&mut self, span_ns: u64) {
        let last = last_row(span_ns, self.interval_ns);
        self.rows_last = Some(self.rows_last.map_or(last, |r| r.min(last)));
    }

    /// Finalizes everything still pending and lays out the timeline up to `rows_last`
    /// (empty rows for intervals nobody sent): the end of the phase.
    pub fn close(&mut self, rows_last: u32) -> Vec<Unreadable> {
        let mut bad = Vec::new();
        while !self.pending.is_empty() {
            bad.extend(self.finalize_first());
        }
        let end = self
            .rows_last
            .map_or(rows_last, |r| r.min(rows_last))
            .saturating_add(1);
        self.rows_last = Some(end - 1);
        self.empty_rows_below(end);
        if let Some(live) = &mut self.live {
            live.flush();
        }
        bad
    }

    /// The rows written since the last call, together (None when there were none), and a
    /// new window.
    pub fn take_window(&mut self) -> Option<WindowSample> {
        let w = &mut self.window;
        if w.rows == 0 {
            return None;
        }
        let span_s = f64::from(w.rows) * self.interval_ns as f64 / 1e9;
        let out = WindowSample {
            rows: w.rows,
            target_rate: w.target_rate,
            achieved_rate: w.completed as f64 / span_s,
            scheduled_rate: w.scheduled as f64 / span_s,
            p99_us: crest_report::model::us(w.latency.value_at_quantile(0.99)),
        };
        w.rows = 0;
        w.completed = 0;
        w.scheduled = 0;
        w.latency.reset();
        Some(out)
    }

    /// Records worker `w`'s final message (see [`WorkerBooks::finish`]), its error kinds'
    /// messages into the run's.
    ///
    /// # Errors
    /// [`HistError`] when a histogram does not decode.
    pub fn finish(&mut self, w: usize, f: &pb::Finished) -> Result<(), HistError> {
        let Some(books) = self.workers.get_mut(w) else {
            return Ok(());
        };
        let mut scratch = self.scratch.take().unwrap_or_default();
        let done = books.finish(f, &mut self.de, &mut scratch.sum);
        self.scratch = Some(scratch);
        done?;
        for (k, m) in convert::messages_from_pb(&f.error_messages) {
            self.kinds.fold(&k, Some(&m));
        }
        Ok(())
    }

    /// Every server error kind of the run with the server's first message for it, in the
    /// order first seen ([`OTHER`](crest_model::stats::OTHER) last).
    pub fn error_messages(&self) -> Vec<(String, String)> {
        self.kinds.all()
    }

    /// Removes the live files when no timeline row was written to them yet (a run refused
    /// before its first interval leaves nothing in `--out`).
    pub fn discard_unused_live(&mut self) {
        if self.timeline.is_empty()
            && let Some(live) = self.live.take()
        {
            live.remove();
        }
    }

    /// The live files' errors (each names its file), for the end of the run.
    pub fn live_errors(&self) -> Vec<String> {
        self.live.as_ref().map(Live::errors).unwrap_or_default()
    }

    fn in_rows(&self, k: u32) -> bool {
        self.rows_last.is_none_or(|r| k <= r)
    }

    /// Rows with no data for every index from the next row up to (not including) `end`.
    fn empty_rows_below(&mut self, end: u32) {
        let k = u32::try_from(self.timeline.len()).unwrap_or(u32::MAX);
        let mut scratch = self.scratch.take().unwrap_or_default();
        self.empty_rows(k, end, &mut scratch.stats);
        self.scratch = Some(scratch);
    }

    /// Rows with no data from `k` up to (not including) `end`, `empty` cleared to stand for
    /// each.
    fn empty_rows(&mut self, mut k: u32, end: u32, empty: &mut CmdStats) {
        if k >= end || !self.in_rows(k) {
            return;
        }
        empty.clear();
        while k < end && self.in_rows(k) {
            self.row(k, empty, &[], 0.0, Load::default());
            k += 1;
        }
    }

    /// One row and its hlog lines.
    fn row(&mut self, k: u32, sum: &CmdStats, classes: &[Dense], due: f64, load: Load) {
        let iv_s = self.interval_ns as f64 / 1e9;
        let t0 = u64::from(k).saturating_mul(self.interval_ns);
        let t1 = t0.saturating_add(self.interval_ns);
        let target = self
            .profiles
            .iter()
            .flatten()
            .map(|p| p.expected(t0, t1))
            // From +0: an empty f64 sum is −0, which timeline.csv printed as "-0".
            .fold(0.0, |a, b| a + b)
            / iv_s;
        let p = TimelinePoint::of(k, iv_s, sum, target, due, load, self.base);
        // The lowest service time p50 of the run so far (intervals with at least 100
        // replies, so one lucky reply does not set it).
        if sum.service_time.len() >= 100 {
            let p50 = sum.service_time.value_at_quantile(0.5);
            if self.base.service_floor == 0 || p50 < self.base.service_floor {
                self.base.service_floor = p50;
            }
        }
        self.window.rows += 1;
        self.window.completed = self.window.completed.saturating_add(sum.completed);
        self.window.scheduled = self.window.scheduled.saturating_add(sum.scheduled);
        self.window.target_rate = target;
        hist::add(&mut self.window.latency, &sum.latency);
        if let Some(live) = &mut self.live {
            let start_s = f64::from(k) * iv_s;
            live.row(&p);
            live.hist(None, start_s, iv_s, &sum.latency);
            if self.classes.len() > 1 {
                // An empty row has no class histograms: an empty one stands for each.
                let h = self.class_hist.get_or_insert_with(hist::new_hist);
                for (i, c) in self.classes.iter().enumerate() {
                    h.reset();
                    if let Some(d) = classes.get(i) {
                        d.add_to(h);
                    }
                    live.hist(Some(c), start_s, iv_s, h);
                }
            }
        }
        self.timeline.push(p);
    }

    /// Decodes the oldest pending index and adds it everywhere it belongs.
    fn finalize_first(&mut self) -> Vec<Unreadable> {
        let Some((k, msgs)) = self.pending.pop_first() else {
            return Vec::new();
        };
        for (_, bytes, _) in &msgs {
            self.pending_bytes = self.pending_bytes.saturating_sub(*bytes);
        }
        let mut bad = Vec::new();
        let received = msgs.len() as u64;
        let rows = self.in_rows(k) && k >= self.finalized_below;
        // All commands together: counts, errors, latency and schedule lag (what a row reads;
        // service time is in the totals, not in rows).
        let RowScratch {
            mut sum,
            mut by_key,
            mut classes,
            mut stats,
        } = self.scratch.take().unwrap_or_default();
        sum.clear();
        for s in by_key.values_mut() {
            s.clear();
        }
        let classes_n = if rows && self.classes.len() > 1 {
            self.classes.len()
        } else {
            0
        };
        classes.resize_with(classes_n.max(classes.len()), Dense::default);
        for c in &mut classes {
            c.clear();
        }
        let mut due = 0.0;
        let mut load = Load::default();
        for (w, _, iv) in msgs {
            let decoded = match decode_delta(&mut self.de, &iv.commands) {
                Ok(d) => d,
                Err(e) => {
                    bad.push(Unreadable {
                        worker: w,
                        error: e.into(),
                    });
                    continue;
                }
            };
            due += iv.target_rate;
            load.add(load_of(&iv));
            let Some(books) = self.workers.get_mut(w) else {
                continue;
            };
            books.intervals += 1;
            for (class, name, mut s) in decoded {
                fold_kinds(&mut s.errors, &mut self.kinds);
                set_key(&mut self.key, class, name);
                books.add(&self.key, &s);
                add_keyed(&mut by_key, &self.key, &s);
                for h in [s.latency, s.service_time, s.schedule_lag] {
                    self.de.recycle(h);
                }
            }
        }
        // Keys stay in `by_key` from interval to interval (cleared, memory kept): one that
        // no worker sent this time adds nothing.
        for (key, s) in &by_key {
            if rows {
                sum += s;
                if let Some(i) = self.classes.iter().position(|c| *c == key.0)
                    && i < classes_n
                    && let Some(h) = classes.get_mut(i)
                {
                    h.add_dense(&s.latency);
                }
            }
            match self.totals.get_mut(key) {
                Some(t) => *t += s,
                None => {
                    self.totals.insert(key.clone(), s.clone());
                }
            }
        }
        if k >= self.finalized_below {
            if rows {
                let next = u32::try_from(self.timeline.len()).unwrap_or(u32::MAX);
                self.empty_rows(next, k, &mut stats);
                sum.to_stats_into(&mut stats);
                self.row(k, &stats, &classes[..classes_n], due, load);
            }
            self.finalized_below = k.saturating_add(1);
        } else {
            // Finalized already (past the pending cap): counted above, not in the timeline.
            self.late += received;
        }
        self.scratch = Some(RowScratch {
            sum,
            by_key,
            classes,
            stats,
        });
        bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crest_model::stats::MAX_KINDS;

    fn cfg(rate: f64, secs: u64) -> RunConfig {
        crate::cli::test_run(rate, secs)
    }

    fn cmd(name: &str, values: &[u64], scheduled: u64) -> pb::CommandStats {
        let mut s = CmdStats {
            scheduled,
            sent: scheduled,
            completed: values.len() as u64,
            ..Default::default()
        };
        for &v in values {
            hist::record(&mut s.latency, v);
            hist::record(&mut s.service_time, v / 2);
            hist::record(&mut s.schedule_lag, 10);
        }
        convert::stats_to_pb("c", &[s], &[name.to_string()]).remove(0)
    }

    fn iv(index: u32, commands: Vec<pb::CommandStats>, target_rate: f64) -> pb::Interval {
        pb::Interval {
            run_id: "r".into(),
            index,
            commands,
            target_rate,
            error_messages: vec![],
            shard_cpu_ns: 0,
            busiest_shard: 0.0,
            ..Default::default()
        }
    }

    fn finished(totals: Vec<pb::CommandStats>, intervals: u32) -> pb::Finished {
        pb::Finished {
            run_id: "r".into(),
            totals,
            in_flight: 0,
            unsent: 0,
            intervals,
            connection_errors: vec![],
            error_messages: vec![],
            ..Default::default()
        }
    }

    /// A worker cannot grow the books past the phase, feed them a NaN rate, or send an
    /// index twice (workers send in order).
    #[test]
    fn intervals_past_the_phase_out_of_order_or_with_nonsense_rates_are_refused() {
        let c = cfg(100.0, 10);
        let mut b = RunBooks::new(&c, 1, 10, Some(9), None);
        assert!(matches!(
            b.receive(0, iv(u32::MAX, vec![], 1.0)),
            Err(BooksError::Index {
                index: u32::MAX,
                last: 10
            })
        ));
        assert!(matches!(
            b.receive(0, iv(3, vec![], f64::NAN)),
            Err(BooksError::Rate(_))
        ));
        assert!(matches!(
            b.receive(0, iv(3, vec![], -1.0)),
            Err(BooksError::Rate(_))
        ));
        b.receive(0, iv(10, vec![], 1.0)).unwrap();
        assert!(matches!(
            b.receive(0, iv(10, vec![], 1.0)),
            Err(BooksError::Order {
                index: 10,
                previous: 10
            })
        ));
        assert_eq!(b.pending(), 1);
    }

    /// An interval is finalized only once every active worker has sent a later one (or
    /// finished, or was lost); its row is the merge of every worker's part, the totals are
    /// the sum of everything, and each worker's books balance with its finals.
    #[test]
    fn an_interval_is_finalized_when_every_live_worker_is_past_it() {
        let c = cfg(5.0, 2);
        let mut b = RunBooks::new(&c, 2, 5, Some(1), None);
        let (a0, a1, b0, b1) = ([100, 200, 300], [5_000, 6_000], [400], [7_000, 8_000]);
        b.receive(0, iv(0, vec![cmd("GET", &a0, 3)], 3.0)).unwrap();
        b.receive(0, iv(1, vec![cmd("GET", &a1, 2)], 2.0)).unwrap();
        assert!(b.advance(&[true, true]).is_empty());
        assert!(b.timeline.is_empty(), "worker 1 has sent nothing yet");
        b.receive(1, iv(0, vec![cmd("GET", &b0, 1)], 1.0)).unwrap();
        b.advance(&[true, true]);
        assert!(
            b.timeline.is_empty(),
            "worker 1 may still add to interval 0"
        );
        b.receive(1, iv(1, vec![cmd("GET", &b1, 2)], 2.0)).unwrap();
        b.advance(&[true, true]);
        assert_eq!(b.timeline.len(), 1);
        assert_eq!(b.timeline[0].scheduled, 4);
        assert_eq!(b.pending(), 1);
        // Both finish: interval 1 is final.
        let all_a: Vec<u64> = a0.iter().chain(&a1).copied().collect();
        let all_b: Vec<u64> = b0.iter().chain(&b1).copied().collect();
        b.finish(0, &finished(vec![cmd("GET", &all_a, 5)], 2))
            .unwrap();
        b.finish(1, &finished(vec![cmd("GET", &all_b, 3)], 2))
            .unwrap();
        b.advance(&[false, false]);
        assert_eq!(b.timeline.len(), 2);
        assert_eq!(b.timeline[1].scheduled, 4);
        assert_eq!(b.pending(), 0);
        let t = &b.totals[&("c".to_string(), "GET".to_string())].to_stats();
        assert_eq!(t.completed, 8);
        let mut whole = hist::new_hist();
        for v in all_a.iter().chain(&all_b) {
            hist::record(&mut whole, *v);
        }
        assert_eq!(t.latency, whole);
        assert_eq!(b.workers[0].check("w0", "-"), Vec::<String>::new());
        assert_eq!(b.workers[1].check("w1", "-"), Vec::<String>::new());
        assert_eq!(b.workers[0].total().latency, 5);
        let f = b.workers[0].final_.as_ref().unwrap();
        assert_eq!(f.all.latency.len(), 5);
    }

    /// Intervals whose histograms do not add up to the worker's totals are named, even
    /// when every count agrees: the same samples, one at another value.
    #[test]
    fn a_histogram_that_does_not_add_up_is_named_even_when_the_counts_agree() {
        let c = cfg(5.0, 2);
        let mut b = RunBooks::new(&c, 1, 5, Some(1), None);
        b.receive(0, iv(0, vec![cmd("GET", &[1_000, 2_000], 2)], 5.0))
            .unwrap();
        b.receive(0, iv(1, vec![cmd("GET", &[3_000], 1)], 5.0))
            .unwrap();
        b.finish(0, &finished(vec![cmd("GET", &[1_000, 2_000, 4_000], 3)], 2))
            .unwrap();
        b.advance(&[false]);
        // Latency and service time (v / 2) moved; the schedule lag (10 each) did not.
        let problems = b.workers[0].check("w0", "-");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("the intervals' latency histograms do not add up"));
        assert!(problems[1].contains("the intervals' service-time histograms do not add up"));
    }

    #[test]
    fn the_progress_window_holds_every_row_since_it_was_last_read() {
        let c = cfg(5.0, 4);
        let mut b = RunBooks::new(&c, 1, 5, Some(3), None);
        assert_eq!(b.take_window(), None);
        b.receive(0, iv(0, vec![cmd("GET", &[100, 200], 2)], 5.0))
            .unwrap();
        b.receive(0, iv(1, vec![cmd("GET", &[3_000_000; 4], 4)], 5.0))
            .unwrap();
        b.receive(0, iv(2, vec![cmd("GET", &[5_000], 1)], 5.0))
            .unwrap();
        b.advance(&[true]);
        // Rows 0 and 1 are final (row 2 waits for a later index or the final).
        let w = b.take_window().unwrap();
        assert_eq!(w.rows, 2);
        assert!((w.achieved_rate - 3.0).abs() < 1e-9, "{w:?}");
        assert!(
            (w.p99_us - 3_000.0).abs() < 5.0,
            "the slow row counts: {w:?}"
        );
        assert!((w.target_rate - 5.0).abs() < 1e-9, "{w:?}");
        assert!(
            (w.scheduled_rate - 3.0).abs() < 1e-9,
            "2 + 4 over 2 s: {w:?}"
        );
        assert_eq!(b.take_window(), None, "read once");
        b.receive(0, iv(3, vec![cmd("GET", &[1_000], 1)], 5.0))
            .unwrap();
        b.advance(&[true]);
        let w = b.take_window().unwrap();
        assert_eq!((w.rows, w.achieved_rate, w.scheduled_rate), (1, 1.0, 1.0));
        assert!((w.p99_us - 5.0).abs() < 0.1, "a new window: {w:?}");
    }

    #[test]
    fn the_union_of_workers_error_kinds_is_bounded_again_and_keeps_its_messages() {
        let c = cfg(5.0, 1);
        let mut b = RunBooks::new(&c, 2, 5, Some(0), None);
        for w in 0..2usize {
            let mut g = cmd("GET", &[], 40);
            g.errors = (0..20)
                .map(|i| pb::ErrorCount {
                    kind: format!("E{w}_{i}"),
                    count: 2,
                })
                .chain([pb::ErrorCount {
                    kind: "timeout".into(),
                    count: 5,
                }])
                .collect();
            let mut m = iv(0, vec![g], 5.0);
            m.error_messages = (0..20)
                .map(|i| pb::ErrorMessage {
                    kind: format!("E{w}_{i}"),
                    message: format!("E{w}_{i} said by worker {w}"),
                })
                .collect();
            b.receive(w, m).unwrap();
        }
        b.close(0);
        let t = &b.totals[&("c".to_string(), "GET".to_string())].to_stats();
        let kinds: Vec<&str> = t.errors.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(t.error_total(), 2 * (20 * 2 + 5), "no error lost");
        assert_eq!(
            kinds.len(),
            MAX_KINDS + 2,
            "32 server kinds, other, timeout: {kinds:?}"
        );
        assert!(kinds.contains(&"other") && kinds.contains(&"timeout"));
        let other = t.errors.iter().find(|(k, _)| k == "other").unwrap().1;
        assert_eq!(other, 2 * (40 - MAX_KINDS as u64));
        let msgs = b.error_messages();
        assert_eq!(msgs.len(), MAX_KINDS + 1);
        assert_eq!(msgs[0], ("E0_0".into(), "E0_0 said by worker 0".into()));
        assert_eq!(msgs[MAX_KINDS].0, "other");
        assert_eq!(b.timeline[0].errors, 90, "the row counts them all too");
    }

    /// A worker's books that miss an interval say so: the count of intervals, the counts
    /// per command and the latency histogram.
    #[test]
    fn a_missing_interval_is_named_by_the_check() {
        let c = cfg(5.0, 2);
        let mut b = RunBooks::new(&c, 1, 5, Some(1), None);
        b.receive(0, iv(0, vec![cmd("GET", &[100, 200, 300], 3)], 3.0))
            .unwrap();
        b.finish(
            0,
            &finished(vec![cmd("GET", &[100, 200, 300, 5_000, 6_000], 5)], 2),
        )
        .unwrap();
        b.close(1);
        let p = b.workers[0].check("w1", "-");
        assert!(
            p.iter().any(|s| s.contains("sent 2 intervals, 1 received")),
            "{p:?}"
        );
        assert!(p.iter().any(|s| s.contains("completed")), "{p:?}");
        assert!(p.iter().any(|s| s.contains("latency histogram")), "{p:?}");
        // Rows up to the end of the span, the missing one empty.
        assert_eq!(b.timeline.len(), 2);
        assert_eq!(b.timeline[1].scheduled, 0);
    }

    /// Memory is bounded by the pending cap, not by how long one worker stays behind: a
    /// silent worker lets at most MAX_PENDING_INTERVALS pile up; what it sends later for a
    /// finalized interval is still counted (totals and its books), only not in the timeline.
    #[test]
    fn pending_intervals_are_capped_and_late_ones_still_counted() {
        let c = cfg(1.0, 100_000);
        let n = u32::try_from(MAX_PENDING_INTERVALS).unwrap() + 100;
        let mut b = RunBooks::new(&c, 2, n + 10, None, None);
        for k in 0..n {
            b.receive(0, iv(k, vec![cmd("GET", &[1_000], 1)], 1.0))
                .unwrap();
            b.advance(&[true, true]);
            assert!(b.pending() <= MAX_PENDING_INTERVALS + 1);
        }
        assert!(b.timeline.len() >= 99, "{}", b.timeline.len());
        b.receive(1, iv(0, vec![cmd("GET", &[2_000], 1)], 1.0))
            .unwrap();
        b.advance(&[true, true]);
        b.close(n);
        assert_eq!(b.late, 1);
        let t = &b.totals[&("c".to_string(), "GET".to_string())].to_stats();
        assert_eq!(t.completed, u64::from(n) + 1);
        assert_eq!(b.workers[1].intervals, 1);
        let rows: u64 = b.timeline.iter().map(|p| p.scheduled).sum();
        assert_eq!(rows, u64::from(n), "the late one is not in the timeline");
    }

    /// The fast decode of the finalizing path reads exactly what the checked decode reads,
    /// and refuses what it refuses.
    #[test]
    fn the_fast_decode_equals_the_checked_one() {
        let mut de = SparseDecoder::new();
        let values = [1, 1_000, 5_000_000, 3_000_000_000_000];
        let mut c = cmd("GET", &values, 4);
        c.errors = vec![pb::ErrorCount {
            kind: "ERR".into(),
            count: 2,
        }];
        let fast = decode_delta(&mut de, std::slice::from_ref(&c)).unwrap();
        assert_eq!((fast[0].0, fast[0].1), ("c", "GET"));
        let mut added = CmdStats::default();
        added += &fast[0].2;
        // What `cmd` recorded, and the errors set above.
        let mut want = CmdStats {
            scheduled: 4,
            sent: 4,
            completed: values.len() as u64,
            errors: vec![("ERR".into(), 2)],
            ..Default::default()
        };
        for v in values {
            hist::record(&mut want.latency, v);
            hist::record(&mut want.service_time, v / 2);
            hist::record(&mut want.schedule_lag, 10);
        }
        assert_eq!(added, want);
        assert_eq!(Counts::of(&fast[0].2), Counts::of(&want));
        c.service_time = Some(pb::Histogram {
            v2: b"garbage".to_vec().into(),
        });
        assert!(decode_delta(&mut de, &[c]).is_err());
    }

    /// A message whose histogram does not decode names its worker when finalized, and
    /// adds nothing.
    #[test]
    fn an_unreadable_interval_names_its_worker() {
        let c = cfg(5.0, 2);
        let mut b = RunBooks::new(&c, 1, 5, Some(1), None);
        let mut bad = cmd("GET", &[1], 1);
        bad.latency = Some(pb::Histogram {
            v2: b"garbage".to_vec().into(),
        });
        b.receive(0, iv(0, vec![bad], 1.0)).unwrap();
        let u = b.advance(&[false]);
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].worker, 0);
        assert!(b.totals.is_empty());
        assert_eq!(b.workers[0].intervals, 0);
    }
}
