//! The report: one value ([`Report`], serialized as `report.json`, schema in
//! `docs/report.md`) built once from a run's results by [`build()`], and the renderers over
//! it: the terminal table ([`Report::table`]), `timeline.csv` ([`Report::timeline_csv`]),
//! `report.html` ([`html::render`]), and the line formats of the files written while the
//! run goes (`timeline.csv` rows, `latency.hlog` lines: [`timeline_csv_row`], [`hlog_line`]).
//! Every figure is read off merged histograms and exact counts.
//!
//! # Layout
//! - [`build`](mod@build): results → report (merging, timeline, self-checks).
//! - [`html`]: `report.html`, one self-contained page with charts.
//! - this module: the report model, the table, CSV and hlog renderers.

pub mod build;
pub mod html;

pub use build::build;

use crate::server_stats::ServerRow;
use crate::server_stats::series::{agreement_words, grouped};
use crest_model::hist::Hist;
use crest_model::stats::{CmdStats, ENGINE_KINDS, ErrorCounts};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Version of the report's layout; bumped when a key changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 2;

/// Percentiles of one histogram, in microseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Default)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Largest value.
    pub max: f64,
    /// Mean.
    pub mean: f64,
}

pub(crate) fn us(ns: u64) -> f64 {
    (ns as f64 / 10.0).round() / 100.0
}

impl Percentiles {
    /// p50, p90, p99, p99.9, p99.99 and max as people read them (`57µs`, `2.53ms`): the
    /// summary columns of every renderer.
    pub fn cells(&self) -> [String; 6] {
        [
            self.p50, self.p90, self.p99, self.p999, self.p9999, self.max,
        ]
        .map(human_us)
    }

    /// Reads a nanosecond histogram (all zero when empty).
    pub fn of(h: &Hist) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            p9999: us(h.value_at_quantile(0.9999)),
            max: us(h.max()),
            mean: (h.mean() / 10.0).round() / 100.0,
        }
    }
}

/// An asked rate: requests per second, or "max" for closed loop.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(untagged)]
pub enum Target {
    /// Open loop.
    Rate(f64),
    /// Closed loop: as fast as `pipeline` requests in flight per connection allow.
    Max(&'static str),
}

impl Target {
    /// The closed-loop marker.
    pub const MAX: Target = Target::Max("max");

    /// Requests per second (0 for "max").
    pub fn rps(&self) -> f64 {
        match self {
            Target::Rate(r) => *r,
            Target::Max(_) => 0.0,
        }
    }

    /// `20000` or `max`.
    pub fn show(&self) -> String {
        match self {
            Target::Rate(r) => format!("{r:.0}"),
            Target::Max(_) => "max".into(),
        }
    }
}

/// Results of a command, a class or the whole run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Requests whose intended time came.
    pub scheduled: u64,
    /// Requests written.
    pub sent: u64,
    /// Non-error replies.
    pub completed: u64,
    /// Misses among them: nil replies (`GET` of a missing key: `$-1` in RESP2, `_` in
    /// RESP3) and nil elements of array replies (`MGET`'s missing keys).
    pub misses: u64,
    /// Failed requests (error replies, timeouts, disconnects, backlog overflow).
    pub errors: u64,
    /// `errors` by kind.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Requests that waited for a free connection.
    pub backlogged: u64,
    /// Cluster redirects and retries the requests went through (absent when none): each
    /// request is still counted once above, by how it ended.
    #[serde(skip_serializing_if = "RedirectCounts::is_zero")]
    pub redirects: RedirectCounts,
    /// Asked rate, requests per second, or "max".
    pub target_rate: Target,
    /// Completed per second over the run.
    pub achieved_rate: f64,
    /// Completion − intended send time.
    pub latency_us: Percentiles,
    /// Completion − actual write.
    pub service_time_us: Percentiles,
    /// Actual write − intended send time.
    pub schedule_lag_us: Percentiles,
}

/// The three histograms behind a summary, each V2 + DEFLATE serialized and base64-encoded
/// (the HdrHistogram interchange format): anyone can re-merge them or read any percentile.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Histograms {
    /// Latency, ns.
    pub latency: String,
    /// Service time, ns.
    pub service_time: String,
    /// Schedule lag, ns.
    pub schedule_lag: String,
}

impl Histograms {
    /// Encodes the histograms of `s`.
    pub fn of(s: &CmdStats) -> Self {
        use base64::Engine as _;
        let enc = |h: &Hist| {
            base64::engine::general_purpose::STANDARD.encode(crest_model::hist::encode(h))
        };
        Self {
            latency: enc(&s.latency),
            service_time: enc(&s.service_time),
            schedule_lag: enc(&s.schedule_lag),
        }
    }
}

/// Error counts as a sorted map.
pub fn error_map(e: &ErrorCounts) -> BTreeMap<String, u64> {
    e.iter().map(|(k, n)| (k.clone(), *n)).collect()
}

impl Summary {
    /// Summarises `s` over `duration_s` with the asked `target_rate`.
    pub fn of(s: &CmdStats, target_rate: Target, duration_s: f64) -> Self {
        Self {
            scheduled: s.scheduled,
            sent: s.sent,
            completed: s.completed,
            misses: s.misses,
            errors: s.error_total(),
            errors_by_kind: error_map(&s.errors),
            backlogged: s.backlogged,
            redirects: RedirectCounts {
                moved: s.redirects.moved,
                asked: s.redirects.asked,
                retried: s.redirects.retried,
            },
            target_rate: match target_rate {
                Target::Rate(r) => Target::Rate(round2(r)),
                t => t,
            },
            achieved_rate: round2(s.completed as f64 / duration_s.max(1e-9)),
            latency_us: Percentiles::of(&s.latency),
            service_time_us: Percentiles::of(&s.service_time),
            schedule_lag_us: Percentiles::of(&s.schedule_lag),
        }
    }
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Totals add the end-of-run accounting to a [`Summary`].
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Totals {
    /// The summary over every command.
    #[serde(flatten)]
    pub summary: Summary,
    /// Sent and unanswered when the run ended.
    pub in_flight: u64,
    /// Scheduled and never written when the run ended.
    pub unsent: u64,
    /// CPU time of every worker's shard threads over the timeline's intervals, seconds.
    pub generator_cpu_s: f64,
    /// The highest busy share of any shard in any interval (0 to 1).
    pub busiest_shard: f64,
    /// The merged histograms.
    pub histograms: Histograms,
}

/// Three latency percentiles for the timeline.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct ShortPercentiles {
    /// Median, µs.
    pub p50: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// 99.9th percentile, µs.
    pub p999: f64,
}

/// One interval of the run (1 s unless `--interval` says otherwise).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelinePoint {
    /// Start of the interval, seconds since the measured start.
    pub t_s: f64,
    /// Rate the profile asked for in this interval, requests per second.
    pub target_rate: f64,
    /// Requests scheduled in this interval (a count).
    pub scheduled: u64,
    /// Non-error replies received in this interval, per second.
    pub achieved_rate: f64,
    /// Failed requests in this interval (a count).
    pub errors: u64,
    /// `errors` by kind (ERR, WRONGTYPE, timeout, disconnected, ...).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Latency of the replies received in this second.
    pub latency_us: ShortPercentiles,
    /// 99th percentile of schedule lag in this second.
    pub schedule_lag_p99_us: f64,
    /// True when the generator itself could not keep the schedule in this second (the
    /// workers that reported it scheduled clearly fewer requests than they were due —
    /// beyond 2% plus three standard deviations of Poisson noise — or schedule lag p99
    /// passed 1 ms while under 1% of requests waited for a connection): these latencies
    /// describe the client, not the server. Also true when the busiest shard was busy for
    /// 90% of the interval or more. The same as `bound == "generator"`.
    pub generator_bound: bool,
    /// CPU time of every worker's shard threads in this interval, seconds.
    pub generator_cpu_s: f64,
    /// Busy share of the busiest shard's loop in this interval (0 to 1): the time it was
    /// not waiting for the clock or the network.
    pub busiest_shard: f64,
    /// What limited this interval: `generator` (see `generator_bound`); `server` (service
    /// time p50 more than twice the lowest interval's of the run so far: the server, or
    /// the network, slowed down — requests that waited for a connection waited for its
    /// slow replies); `connections` (1% or more of the requests waited for a free
    /// connection while service time held: more `--connections` or `--pipeline` would have
    /// sent them on time); `server` too when the client kept its schedule with free
    /// connections, yet latency p99 was 1 ms or more and over 10× the schedule lag p99;
    /// or empty (nothing limited it).
    pub bound: &'static str,
    /// Why schedule lag p99 passed the pacer's bound (`settings.lag_bound_us`: what the
    /// pacer holds on a core of its own) in this interval, or empty when it did not:
    /// `busy` (the busiest shard was busy 90% of the interval or more), `connections` (1%
    /// or more of the requests waited for a free connection), `preempted` (the scheduler
    /// took the shards' core from them for 0.5% of the interval or more, [`PREEMPTED_SHARE`]:
    /// see `preemptions` and `core_wait_ms`; something else runs on it), `steal` (the
    /// hypervisor took the shards' virtual CPUs for 0.5% of the interval or more: see
    /// `steal_ms`), or `pacer` (none of these: the pacer itself came late, by its own work
    /// or by timer or host latency the workers cannot see).
    pub off_pace: &'static str,
    /// Involuntary context switches of the shard threads in this interval, summed over
    /// workers: times the scheduler gave a shard's core to another thread.
    pub preemptions: u64,
    /// Time the shard threads were runnable but waited for their core in this interval,
    /// ms, summed over shards (0 where the kernel keeps no schedstat).
    pub core_wait_ms: f64,
    /// The hypervisor's steal on the shards' cores in this interval, ms, summed over
    /// cores (`/proc/stat`, in whole ticks of 10 ms; 0 off a VM).
    pub steal_ms: f64,
}

/// What an interval is judged against: the run so far and the pacer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Baseline {
    /// The lowest interval service-time p50 of the run so far, ns (0: none yet).
    pub service_floor: u64,
    /// The schedule lag p99 the pacer holds on a core of its own, ns
    /// ([`crest_model::plan::Pacer::lag_bound_ns`]).
    pub lag_bound_ns: u64,
}

impl Default for Baseline {
    /// No service floor yet; the default pacer's bound.
    fn default() -> Self {
        Self {
            service_floor: 0,
            lag_bound_ns: crest_model::plan::Pacer::Sleep.lag_bound_ns(),
        }
    }
}

/// The generator's work over one interval, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    /// CPU time of every shard thread, ns.
    pub cpu_ns: u64,
    /// Busy share of the busiest shard, 0 to 1.
    pub busiest: f64,
    /// Involuntary context switches of the shard threads.
    pub preemptions: u64,
    /// Time the shard threads waited for their core, ns.
    pub queued_ns: u64,
    /// The hypervisor's steal on the shards' cores, ns.
    pub steal_ns: u64,
}

impl Load {
    /// Adds one worker's (or relay's) interval: sums, and the busiest of the busiest.
    pub fn add(&mut self, iv: &crest_proto::pb::Interval) {
        self.cpu_ns = self.cpu_ns.saturating_add(iv.shard_cpu_ns);
        self.busiest = self.busiest.max(iv.busiest_shard);
        self.preemptions = self.preemptions.saturating_add(iv.shard_preemptions);
        self.queued_ns = self.queued_ns.saturating_add(iv.shard_queued_ns);
        self.steal_ns = self.steal_ns.saturating_add(iv.shard_steal_ns);
    }
}

/// Each cause of an off-pace interval ([`TimelinePoint::off_pace`]), in the order they are
/// tried, and what it asks of the user.
pub const OFF_PACE_CAUSES: &[(&str, &str)] = &[
    (
        "busy",
        "a shard was busy 90% of the interval or more: add shards or workers",
    ),
    (
        "connections",
        "requests waited for a free connection: more --connections or --pipeline",
    ),
    ("preempted", "give each shard a core of its own"),
    (
        "steal",
        "the hypervisor ran other guests on the shards' virtual CPUs: a dedicated host or vCPUs pinned to physical cores",
    ),
    (
        "pacer",
        "with free connections and its core (nearly) its own, the pacer itself came late: its own work, or timer or host latency the workers cannot see (a VM's vCPU steal, interrupts)",
    ),
];

/// Shards that waited for their core this share of an interval or more (summed over
/// shards) were held back enough to make the lag p99: the requests due while they waited,
/// and those queued behind them as they caught up, are about 1% of the interval's. Less
/// waiting than this cannot explain an interval's p99, so it is not blamed for it.
pub const PREEMPTED_SHARE: f64 = 0.005;

/// A shard busy for this share of an interval or more cannot keep its schedule.
pub const SATURATED: f64 = 0.9;

impl TimelinePoint {
    /// Builds one point from the merged second, the profile's target for it, and what the
    /// workers that reported this second were due to schedule (`due`; less than `target`
    /// when a worker was lost).
    pub fn of(
        index: u32,
        interval_s: f64,
        s: &CmdStats,
        target: f64,
        due_rate: f64,
        load: Load,
        base: Baseline,
    ) -> Self {
        let service_floor = base.service_floor;
        let lag_p99 = s.schedule_lag.value_at_quantile(0.99);
        let latency_p99 = s.latency.value_at_quantile(0.99);
        let due = due_rate * interval_s;
        let short_of_schedule = (s.scheduled as f64) < due * 0.98 - 3.0 * due.sqrt() - 2.0;
        let waited = (s.backlogged as f64) >= 0.01 * s.scheduled as f64 && s.backlogged > 0;
        let pacer_late = lag_p99 > 1_000_000 && !waited;
        let saturated = load.busiest >= SATURATED;
        let generator = short_of_schedule || pacer_late || saturated;
        let service_rose = service_floor > 0
            && !s.service_time.is_empty()
            && s.service_time.value_at_quantile(0.5) > service_floor.saturating_mul(2);
        let off_pace = if lag_p99 <= base.lag_bound_ns || s.schedule_lag.is_empty() {
            ""
        } else if saturated {
            "busy"
        } else if waited {
            "connections"
        } else if load.preemptions > 0
            && (load.queued_ns == 0 || load.queued_ns as f64 >= PREEMPTED_SHARE * interval_s * 1e9)
        {
            "preempted"
        } else if load.steal_ns as f64 >= PREEMPTED_SHARE * interval_s * 1e9 {
            "steal"
        } else {
            "pacer"
        };
        let bound = if generator {
            "generator"
        } else if service_rose {
            "server"
        } else if waited {
            "connections"
        } else if latency_p99 >= 1_000_000 && latency_p99 > lag_p99.saturating_mul(10) {
            "server"
        } else {
            ""
        };
        Self {
            t_s: round2(f64::from(index) * interval_s),
            target_rate: round2(target),
            scheduled: s.scheduled,
            achieved_rate: round2(s.completed as f64 / interval_s),
            errors: s.error_total(),
            errors_by_kind: error_map(&s.errors),
            latency_us: ShortPercentiles {
                p50: us(s.latency.value_at_quantile(0.5)),
                p99: us(s.latency.value_at_quantile(0.99)),
                p999: us(s.latency.value_at_quantile(0.999)),
            },
            schedule_lag_p99_us: us(lag_p99),
            generator_bound: generator,
            generator_cpu_s: (load.cpu_ns as f64 / 1e6).round() / 1e3,
            busiest_shard: (load.busiest * 1000.0).round() / 1000.0,
            bound,
            off_pace,
            preemptions: load.preemptions,
            core_wait_ms: (load.queued_ns as f64 / 1e3).round() / 1e3,
            steal_ms: (load.steal_ns as f64 / 1e3).round() / 1e3,
        }
    }
}

/// One worker's own results, so a slow client node stands out.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerReport {
    /// Worker uuid.
    pub id: String,
    /// Name.
    pub name: String,
    /// Host.
    pub host: String,
    /// Shards (pinned threads).
    pub shards: u32,
    /// Their cores.
    pub cpus: Vec<u32>,
    /// Worker clock − coordinator clock, µs (from the lowest-RTT ping).
    pub clock_offset_us: f64,
    /// Round trip of that ping, µs.
    pub rtt_us: f64,
    /// True when the worker vanished or never finished.
    pub lost: bool,
    /// Why it was lost.
    pub lost_reason: Option<String>,
    /// Scheduled requests.
    pub scheduled: u64,
    /// Non-error replies.
    pub completed: u64,
    /// Failed requests.
    pub errors: u64,
    /// Sent and unanswered at the end (null when lost: unknown).
    pub in_flight: Option<u64>,
    /// This worker's latency (null when it sent no final totals: it was lost).
    pub latency_us: Option<Percentiles>,
    /// This worker's service time (null when lost).
    pub service_time_us: Option<Percentiles>,
    /// This worker's schedule lag (null when lost).
    pub schedule_lag_us: Option<Percentiles>,
    /// This worker's histograms, from its final totals, which its intervals were checked
    /// to add up to (fingerprints, histogram by histogram): when no worker was lost, the
    /// totals' histograms are exactly their sum. Null when it sent no final totals.
    pub histograms: Option<Histograms>,
}

/// Counts by kind as `kind=n kind=n`.
pub fn counts_line(counts: &BTreeMap<String, u64>) -> String {
    let kinds: Vec<String> = counts.iter().map(|(k, n)| format!("{k}={n}")).collect();
    kinds.join(" ")
}

/// Most spans [`describe_spans`] names.
pub const MAX_SPANS: usize = 8;

/// `starts` (interval start times, s, rising) of intervals of `interval_s` among `of`
/// intervals, in words: "3 of 500 intervals (0.6%): 0.02–0.04 s, 1.5 s".
pub fn describe_spans(starts: &[f64], interval_s: f64, of: usize) -> String {
    let mut spans: Vec<(f64, f64)> = Vec::new();
    for &t in starts {
        match spans.last_mut() {
            Some((_, end)) if t - *end <= interval_s * 1.5 => *end = t,
            _ => spans.push((t, t)),
        }
    }
    let shown: Vec<String> = spans
        .iter()
        .take(MAX_SPANS)
        .map(|&(a, b)| {
            if a == b {
                format!("{a} s")
            } else {
                format!("{a}–{b} s")
            }
        })
        .collect();
    let more = spans.len().saturating_sub(MAX_SPANS);
    let share = if of > 0 {
        format!(" ({:.1}%)", 100.0 * starts.len() as f64 / of as f64)
    } else {
        String::new()
    };
    format!(
        "{} of {} interval(s){share}, starting at {}{}",
        starts.len(),
        of,
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more span(s) (report.json lists every one)")
        } else {
            String::new()
        }
    )
}

/// The report's self-check.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Checks {
    /// Every worker's intervals add up to its final totals, and every scheduled request is
    /// accounted for.
    pub intervals_match_totals: bool,
    /// One sentence per problem found.
    pub problems: Vec<String>,
    /// Start times (s) of the intervals in which the generator could not keep its schedule.
    pub generator_bound_intervals: Vec<f64>,
    /// Start times (s) of the intervals in which 1% or more of the requests waited for a
    /// free connection (and no shard was saturated).
    pub connection_bound_intervals: Vec<f64>,
    /// Start times (s) of the intervals whose schedule lag p99 passed the pacer's bound
    /// (`settings.lag_bound_us`); each row's `off_pace` says why.
    pub off_pace_intervals: Vec<f64>,
    /// Interval messages that came after their timeline row was written (a worker lagged
    /// past the coordinator's cap on pending intervals): counted in the totals and the
    /// worker's row, not in the timeline.
    pub late_intervals: u64,
    /// The truth check: the server's own command counts (`INFO commandstats`, baseline to
    /// final sample) agree with the report's for every command (`server.agreement`); null
    /// when the server was not sampled. False is a problem: the report is not complete.
    pub server_agrees: Option<bool>,
}

/// One class's settings, echoed so the run can be repeated.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassSettings {
    /// Name.
    pub name: String,
    /// Mean asked rate, or "max".
    pub rate: Target,
    /// The rate profile, segment by segment (empty for closed loop).
    pub profile: Vec<ProfileSegment>,
    /// Closed loop: requests in all.
    pub requests: Option<u64>,
    /// Command weights.
    pub mix: BTreeMap<String, u32>,
    /// Keyspace size.
    pub keys: u64,
    /// Key prefix.
    pub key_prefix: String,
    /// Key distribution.
    pub key_distribution: String,
    /// Value sizes.
    pub value_sizes: String,
    /// Connections across the cluster.
    pub connections: u32,
    /// Requests in flight per connection.
    pub pipeline: u32,
    /// TTL, seconds.
    pub ttl_s: Option<u64>,
    /// Members or keys per batch command.
    pub batch: u32,
    /// Keys written before the run.
    pub prefill: bool,
}

/// The run's settings, echoed so the report can be repeated.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Settings {
    /// Classes.
    pub classes: Vec<ClassSettings>,
    /// Pacer.
    pub pacer: String,
    /// The schedule lag p99 the pacer holds on a core of its own, µs (spin 20, sleep 100,
    /// sleep:T T + 100): intervals above it are off pace.
    pub lag_bound_us: f64,
    /// Per-request timeout, seconds.
    pub timeout_s: f64,
    /// Wait for replies after the schedule, seconds.
    pub drain_s: f64,
    /// Unmeasured lead-in, seconds.
    pub warmup_s: f64,
    /// Length of one timeline interval, seconds.
    pub interval_s: f64,
    /// Seed (a string: JSON readers lose precision on u64).
    pub seed: String,
    /// Requests per shard and class allowed to wait for a free connection.
    pub backlog_limit: u64,
}

/// One segment of the rate profile.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ProfileSegment {
    /// Length, seconds.
    pub duration_s: f64,
    /// Rate at its start, requests per second.
    pub from_rps: f64,
    /// Rate at its end.
    pub to_rps: f64,
}

/// One class's results.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassReport {
    /// The class over all its commands.
    #[serde(flatten)]
    pub summary: Summary,
    /// Per command.
    pub commands: BTreeMap<String, Summary>,
    /// The protocol its connections spoke: 2 or 3.
    pub resp: u32,
    /// RESP3 push frames its connections received (never counted as replies), warm-up
    /// included; from the workers that finished.
    pub pushes: u64,
    /// Of them, client-side caching invalidations.
    pub invalidations: u64,
    /// The class's merged histograms.
    pub histograms: Histograms,
}

/// Cluster redirects and retries.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
pub struct RedirectCounts {
    /// `MOVED` answers followed (the request sent to the slot's new owner).
    pub moved: u64,
    /// `ASK` answers followed (`ASKING` and the request at the importing node).
    pub asked: u64,
    /// `TRYAGAIN` / `CLUSTERDOWN` / `LOADING` answers retried after a back-off.
    pub retried: u64,
}

impl RedirectCounts {
    /// Whether none happened.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

/// One target node's share of the run (every worker, every class).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeReport {
    /// `host:port` as the cluster announces it (the target, for one node).
    pub addr: String,
    /// Owned slots in the workers' last slot tables.
    pub primary: bool,
    /// Slots it owned there (16,384 for a single node).
    pub slots: u32,
    /// `slots` / 16,384.
    pub slot_share: f64,
    /// Requests it answered with a non-error reply.
    pub completed: u64,
    /// `completed` / the run's completed: against `slot_share`, how evenly keys spread.
    pub request_share: f64,
    /// Requests that failed on it (error replies, timeouts, disconnects).
    pub errors: u64,
    /// `MOVED` answers it gave.
    pub moved: u64,
    /// `ASK` answers it gave.
    pub asked: u64,
    /// Connections the workers opened to it.
    pub connections: u32,
    /// Latency of its completed requests, from intended time.
    pub latency_us: Percentiles,
}

impl NodeReport {
    /// Every node of `nodes`, its shares out of the run's `completed`.
    pub fn all(nodes: &[crest_model::stats::NodeStats], completed: u64) -> Vec<Self> {
        let slots = f64::from(crest_model::slot::SLOTS);
        nodes
            .iter()
            .map(|n| NodeReport {
                addr: n.addr.clone(),
                primary: n.primary,
                slots: n.slots,
                slot_share: round4(f64::from(n.slots) / slots),
                completed: n.completed,
                request_share: round4(n.completed as f64 / completed.max(1) as f64),
                errors: n.errors,
                moved: n.redirects.moved,
                asked: n.redirects.asked,
                connections: n.connections,
                latency_us: Percentiles::of(&n.latency),
            })
            .collect()
    }
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// TLS to the target, as the run set it up and the connections negotiated it. No
/// secret is recorded: not the key, not the certificates' bytes.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TlsReport {
    /// How much of the server's certificate was checked: `full` (chain and name),
    /// `skip-hostname` (chain only) or `none` (any certificate: no authentication).
    pub verify: String,
    /// SNI, and the name the certificate had to be valid for.
    pub server_name: String,
    /// `file` (--cacert) or `system` (the machine's CAs).
    pub ca: String,
    /// A client certificate was presented.
    pub client_certificate: bool,
    /// Protocol of the first completed handshake, e.g. `TLSv1_3`; empty when none completed.
    pub version: String,
    /// Its cipher suite, e.g. `TLS13_AES_256_GCM_SHA384`.
    pub cipher: String,
    /// Full handshakes, over every connection and reconnect.
    pub handshakes_full: u64,
    /// Handshakes that resumed an earlier session (reconnects).
    pub handshakes_resumed: u64,
}

/// `report.json`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Layout version.
    pub schema_version: u32,
    /// True when the report is whole: not interrupted, no worker lost, the books balanced.
    pub complete: bool,
    /// True when the run was stopped by Ctrl-C or SIGTERM: the report holds what was
    /// collected until then (`duration_s` is the measured time up to the interrupt).
    pub interrupted: bool,
    /// Run uuid.
    pub run_id: String,
    /// Crest version.
    pub crest_version: String,
    /// `host:port`, or `builtin`.
    pub target: String,
    /// True when every connection authenticated (`HELLO <2|3> AUTH`, or `AUTH`).
    pub auth: bool,
    /// The user connections authenticated as (`default` for a password alone); null
    /// without authentication. The password is never recorded.
    pub user: Option<String>,
    /// The database every connection selected (0: the server's default, no `SELECT`).
    pub db: u32,
    /// TLS to the target; null for plaintext.
    pub tls: Option<TlsReport>,
    /// The protocol every connection spoke: 2 (RESP2) or 3 (RESP3, `HELLO 3`).
    pub resp: u32,
    /// True when every connection turned on client-side caching (`CLIENT TRACKING on`).
    pub tracking: bool,
    /// True when the target was loaded as a Redis Cluster (`--cluster`, or a seed that
    /// said it is one): requests routed by slot.
    pub cluster: bool,
    /// Per target node (one for a single node): its slots, its share of the requests,
    /// its errors, redirects and latency, so one hot or slow node stands out.
    pub nodes: Vec<NodeReport>,
    /// Start instant, RFC 3339 UTC.
    pub started_at: String,
    /// Measured length, seconds: the schedule's, or up to the interrupt.
    pub duration_s: f64,
    /// `uniform` or `poisson`.
    pub arrival: String,
    /// Settings.
    pub settings: Settings,
    /// Per worker.
    pub workers: Vec<WorkerReport>,
    /// The whole run.
    pub totals: Totals,
    /// Per command name, summed over classes.
    pub commands: BTreeMap<String, Summary>,
    /// Per class: its summary and its commands.
    pub classes: BTreeMap<String, ClassReport>,
    /// Per second.
    pub timeline: Vec<TimelinePoint>,
    /// Connection failures by kind (refused, reset, eof, timeout...).
    pub connection_errors: BTreeMap<String, u64>,
    /// Error kind → the server's message for its first occurrence (server kinds only).
    pub error_messages: BTreeMap<String, String>,
    /// `on` when the target's `INFO` was sampled, `off` (`--no-server-stats`), or
    /// `unavailable: <why>` (the target refused it).
    pub server_stats: String,
    /// The server's own figures per interval and the truth check; null unless
    /// `server_stats` is `on`.
    pub server: Option<crate::server_stats::ServerReport>,
    /// `--checkpoint-every`: the server read at each checkpoint (empty without).
    pub checkpoints: Vec<crate::orchestrate::CheckpointRow>,
    /// Runtime changes (the admin API's `PUT /rate`, pause, resume, stop), in order: who
    /// asked, when, the rate before and after, and the instant each worker's shards
    /// switched at (empty without).
    pub changes: Vec<crate::orchestrate::steer::ChangeRow>,
    /// Who stopped the run early (`admin`, `grpc`), when a stop request did: the workers
    /// ended at the stop's instant as at a scheduled end, and `duration_s` ends there.
    pub stopped_by: Option<String>,
    /// Self-check.
    pub checks: Checks,
}

/// The first line of `timeline.csv`: the client's columns, then the server's (the
/// report's `server.intervals`, empty when the server was not sampled).
pub const TIMELINE_CSV_HEADER: &str = "t_s,target_rate,scheduled,achieved_rate,errors,latency_p50_us,latency_p99_us,latency_p999_us,schedule_lag_p99_us,generator_bound,generator_cpu_s,busiest_shard,bound,off_pace,preemptions,core_wait_ms,steal_ms,server_ops,server_ops_per_sec,server_cpu_us,server_cpu_us_per_op,server_rejected_calls,server_failed_calls,server_net_input_bytes,server_net_output_bytes,server_evicted_keys,server_keyspace_hits,server_keyspace_misses,server_used_memory,server_used_memory_rss,server_mem_fragmentation_ratio,server_connected_clients,server_keys\n";

/// An optional CSV cell: empty when None.
fn cell<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// Appends one `timeline.csv` row (with its newline); `server` fills the server's
/// columns (None: left empty, as while the run goes: the rows are rewritten with them at
/// the end).
pub fn timeline_csv_row(out: &mut String, p: &TimelinePoint, server: Option<&ServerRow>) {
    let _ = write!(
        out,
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        p.t_s,
        p.target_rate,
        p.scheduled,
        p.achieved_rate,
        p.errors,
        p.latency_us.p50,
        p.latency_us.p99,
        p.latency_us.p999,
        p.schedule_lag_p99_us,
        p.generator_bound,
        p.generator_cpu_s,
        p.busiest_shard,
        p.bound,
        p.off_pace,
        p.preemptions,
        p.core_wait_ms,
        p.steal_ms
    );
    let s = server.filter(|s| s.sampled);
    let cells = [
        cell(s.and_then(|s| s.ops)),
        cell(s.and_then(|s| s.ops_per_sec)),
        cell(s.and_then(|s| s.cpu_us)),
        cell(s.and_then(|s| s.cpu_us_per_op)),
        cell(s.and_then(|s| s.rejected_calls)),
        cell(s.and_then(|s| s.failed_calls)),
        cell(s.and_then(|s| s.net_input_bytes)),
        cell(s.and_then(|s| s.net_output_bytes)),
        cell(s.and_then(|s| s.evicted_keys)),
        cell(s.and_then(|s| s.keyspace_hits)),
        cell(s.and_then(|s| s.keyspace_misses)),
        cell(s.and_then(|s| s.used_memory)),
        cell(s.and_then(|s| s.used_memory_rss)),
        cell(s.and_then(|s| s.mem_fragmentation_ratio)),
        cell(s.and_then(|s| s.connected_clients)),
        cell(s.and_then(|s| s.keys)),
    ];
    let _ = writeln!(out, ",{}", cells.join(","));
}

/// The header of an HdrHistogram interval log (the `.hlog` format HdrHistogram's log tools
/// read), as HdrHistogram's own writer lays it out: a comment, the start and base time (the
/// measured start), and the max column's divisor (values are ns, max is in ms).
pub fn hlog_header(run_id: &str, started_at: std::time::SystemTime) -> String {
    let t = started_at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    format!(
        "#crest run {run_id}: latency from intended send time, ns\n#[StartTime: {t:.3} (seconds since epoch)]\n#[BaseTime: {t:.3} (seconds since epoch)]\n#[MaxValueDivisor: {HLOG_MAX_DIVISOR:.3}]\n"
    )
}

/// The hlog's max column is in milliseconds.
const HLOG_MAX_DIVISOR: f64 = 1e6;

/// Appends one interval-log line (with its newline), in HdrHistogram's own layout:
/// `[Tag=<class>,]start,length,max,<base64 V2+DEFLATE histogram>`; untagged for the whole
/// run, tagged with the class name (characters a tag cannot hold become `_`) for a class.
pub fn hlog_line(
    out: &mut String,
    class: Option<&str>,
    start_s: f64,
    length_s: f64,
    h: &crest_model::hist::Hist,
) {
    use base64::Engine as _;
    if let Some(c) = class {
        let tag: String = c
            .chars()
            .map(|ch| {
                if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' || ch == ':' {
                    ch
                } else {
                    '_'
                }
            })
            .collect();
        let _ = write!(out, "Tag={tag},");
    }
    let _ = write!(
        out,
        "{start_s:.3},{length_s:.3},{:.3},",
        h.max() as f64 / HLOG_MAX_DIVISOR
    );
    base64::engine::general_purpose::STANDARD.encode_string(crest_model::hist::encode(h), out);
    out.push('\n');
}

/// Formats bytes for humans: B, KB, MB, GB (powers of 1024, as the servers' `_human`).
pub fn human_bytes(b: u64) -> String {
    let v = b as f64;
    if b < 1024 {
        format!("{b} B")
    } else if v < 1024.0 * 1024.0 {
        format!("{:.2} KB", v / 1024.0)
    } else if v < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} MB", v / 1024.0 / 1024.0)
    } else {
        format!("{:.2} GB", v / 1024.0 / 1024.0 / 1024.0)
    }
}

/// Formats microseconds for humans: µs below 1 ms, ms below 1 s, else s.
pub fn human_us(v: f64) -> String {
    if v < 1_000.0 {
        format!("{v:.0}µs")
    } else if v < 1_000_000.0 {
        format!("{:.2}ms", v / 1_000.0)
    } else {
        format!("{:.2}s", v / 1_000_000.0)
    }
}

impl Report {
    /// The generator-bound intervals in words: how many of how many, and where, as spans
    /// of consecutive intervals (at most [`MAX_SPANS`] named; the report's JSON lists
    /// every one).
    pub fn generator_bound_spans(&self) -> String {
        describe_spans(
            &self.checks.generator_bound_intervals,
            self.settings.interval_s,
            self.timeline.len(),
        )
    }

    /// The shards' cost in one line (`8.46 CPU s in the shards = 42.3 CPU s per million
    /// requests; busiest shard 45% busy in its busiest interval`), for the summary and the
    /// HTML page; None when no shard reported CPU time.
    pub fn generator_line(&self) -> Option<String> {
        let cpu = self.totals.generator_cpu_s;
        if cpu <= 0.0 {
            return None;
        }
        let reqs = self.totals.summary.completed + self.totals.summary.errors;
        let per_million = if reqs > 0 {
            format!(
                " = {:.1} CPU s per million requests",
                cpu / reqs as f64 * 1e6
            )
        } else {
            String::new()
        };
        Some(format!(
            "{cpu:.2} CPU s in the shards{per_million}; busiest shard {:.0}% busy in its busiest interval",
            self.totals.busiest_shard * 100.0
        ))
    }

    /// The server in one line (`valkey 8.1.8 (libc, io-threads 1): 9.88 µs CPU per op
    /// over 20,000 ops; used_memory 1.20 MB at the end (peak 1.31 MB), rss 8.10 MB`), for
    /// the summary and the HTML page; `off` or why it is unavailable when not sampled.
    pub fn server_line(&self) -> Option<String> {
        let Some(s) = &self.server else {
            return match self.server_stats.as_str() {
                "off" => None,
                other => Some(format!("stats {other}")),
            };
        };
        let id = &s.identity;
        let mut about = Vec::new();
        if let Some(a) = &id.mem_allocator {
            about.push(a.clone());
        }
        if let Some(n) = id.io_threads {
            about.push(format!("io-threads {n}"));
        }
        if let Some(n) = id.io_threads_active {
            about.push(format!("io_threads_active {n}"));
        }
        let t = &s.total;
        let ops = t.ops.unwrap_or(0);
        let cpu = match t.cpu_us_per_op {
            Some(c) => format!("{c:.2} µs CPU per op over {} ops", grouped(ops)),
            None => format!("{} ops (no CPU figures)", grouped(ops)),
        };
        let peak = s
            .intervals
            .iter()
            .filter_map(|r| r.used_memory)
            .chain(t.used_memory)
            .max();
        let memory = match (t.used_memory, peak) {
            (Some(m), Some(p)) => {
                let mut m = format!("used_memory {} at the end", human_bytes(m));
                if p > t.used_memory.unwrap_or(0) {
                    m.push_str(&format!(" (peak {})", human_bytes(p)));
                }
                if let Some(rss) = t.used_memory_rss {
                    m.push_str(&format!(", rss {}", human_bytes(rss)));
                }
                m
            }
            _ => "no memory figures".into(),
        };
        Some(format!(
            "{}{}: {cpu}; {memory}{}",
            id.version,
            if about.is_empty() {
                String::new()
            } else {
                format!(" ({})", about.join(", "))
            },
            match &s.unchecked {
                Some(why) => format!("; no truth check: {why}"),
                None => String::new(),
            }
        ))
    }

    /// The connection-bound intervals in words (as [`Report::generator_bound_spans`]);
    /// None when there are none.
    pub fn connection_bound_spans(&self) -> Option<String> {
        (!self.checks.connection_bound_intervals.is_empty()).then(|| {
            describe_spans(
                &self.checks.connection_bound_intervals,
                self.settings.interval_s,
                self.timeline.len(),
            )
        })
    }

    /// The intervals whose schedule lag p99 passed the pacer's bound, in words: how many,
    /// where, and why, cause by cause with what the workers measured; None when there are
    /// none. E.g. `schedule lag p99 passed the spin pacer's bound (20µs) in 4 of 10
    /// interval(s) (40.0%), starting at 0–3 s: 3 preempted (the scheduler gave the shards'
    /// core to other threads 212 times, 14.2 ms queued for it in all: give each shard a core
    /// of its own), 1 pacer (...)`.
    pub fn off_pace_line(&self) -> Option<String> {
        let starts = &self.checks.off_pace_intervals;
        if starts.is_empty() {
            return None;
        }
        let mut causes: Vec<String> = Vec::new();
        for (cause, why) in OFF_PACE_CAUSES {
            let rows: Vec<&TimelinePoint> = self
                .timeline
                .iter()
                .filter(|p| p.off_pace == *cause)
                .collect();
            if rows.is_empty() {
                continue;
            }
            let why = if *cause == "steal" {
                let ms: f64 = rows.iter().map(|p| p.steal_ms).sum();
                format!("{ms:.0} ms stolen in all: {why}")
            } else if *cause == "preempted" {
                let n: u64 = rows.iter().map(|p| p.preemptions).sum();
                let ms: f64 = rows.iter().map(|p| p.core_wait_ms).sum();
                format!(
                    "the scheduler gave the shards' core to other threads {} times, {ms:.1} ms queued for it in all: {why}",
                    grouped(n)
                )
            } else {
                (*why).to_string()
            };
            causes.push(format!("{} {cause} ({why})", rows.len()));
        }
        Some(format!(
            "schedule lag p99 passed the {} pacer's bound ({}) in {}: {}",
            self.settings.pacer,
            human_us(self.settings.lag_bound_us),
            describe_spans(starts, self.settings.interval_s, self.timeline.len()),
            causes.join(", ")
        ))
    }

    /// The totals under the summary, for every renderer: the timing line (service time
    /// and schedule lag) and the exact counts, one `name value` item each.
    pub fn footer(&self) -> (String, Vec<String>) {
        let t = &self.totals.summary;
        let timing = format!(
            "service time p50 {} p99 {} p99.9 {}; schedule lag p50 {} p99 {} max {}",
            human_us(t.service_time_us.p50),
            human_us(t.service_time_us.p99),
            human_us(t.service_time_us.p999),
            human_us(t.schedule_lag_us.p50),
            human_us(t.schedule_lag_us.p99),
            human_us(t.schedule_lag_us.max),
        );
        let counts = [
            ("scheduled", t.scheduled),
            ("sent", t.sent),
            ("completed", t.completed),
            ("errors", t.errors),
            ("in flight at end", self.totals.in_flight),
            ("unsent", self.totals.unsent),
        ]
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
        (timing, counts)
    }

    /// The plain sentence for a server that stopped answering (issue #8): the trailing
    /// timeline points with requests due or failing but no reply, and the requests that
    /// timed out before they could be written. None while replies kept coming.
    pub fn stopped_answering(&self) -> Option<String> {
        // No reply at all: no value and no server error reply (engine kinds such as
        // `timeout` are not replies).
        let silent = |p: &TimelinePoint| {
            p.achieved_rate == 0.0
                && p.errors_by_kind
                    .keys()
                    .all(|k| ENGINE_KINDS.contains(&k.as_str()))
        };
        let quiet: Vec<&TimelinePoint> = self
            .timeline
            .iter()
            .rev()
            .take_while(|p| silent(p))
            .collect();
        let t = &self.totals.summary;
        let kind = |k: &str| t.errors_by_kind.get(k).copied().unwrap_or(0);
        let (timed_out, unsent) = (kind("timeout"), kind("timeout_unsent"));
        let busy = quiet.iter().any(|p| p.scheduled > 0 || p.errors > 0);
        if quiet.is_empty() || !busy || t.scheduled == 0 {
            return None;
        }
        // Rounded to the ms; f64's Display writes 3.0 as "3".
        let secs = (quiet.len() as f64 * self.settings.interval_s * 1000.0).round() / 1000.0;
        let mut line = if quiet.len() == self.timeline.len() {
            format!("the server never answered: 0 replies in {secs} s")
        } else {
            format!("the server stopped answering: 0 replies in the last {secs} s")
        };
        if timed_out > 0 {
            line.push_str(&format!("; {timed_out} requests timed out unanswered"));
        }
        if unsent > 0 {
            line.push_str(&format!(
                "; {unsent} requests timed out waiting for a connection"
            ));
        }
        Some(line)
    }

    /// The summary rows every rendering shows, in order: per command (`class/command` and a
    /// row per class when there are several classes), then `total`.
    pub fn rows(&self) -> Vec<(String, &Summary)> {
        let mut rows = Vec::new();
        if self.classes.len() > 1 {
            for (class, c) in &self.classes {
                for (name, s) in &c.commands {
                    rows.push((format!("{class}/{name}"), s));
                }
                rows.push((class.clone(), &c.summary));
            }
        } else {
            for (name, s) in &self.commands {
                rows.push((name.clone(), s));
            }
        }
        rows.push(("total".to_string(), &self.totals.summary));
        rows
    }

    /// ` (user bench, db 2, RESP3, tracking)` after the target when the connections logged
    /// in, selected a database, spoke RESP3 or tracked keys; empty otherwise.
    pub fn session_note(&self) -> String {
        let mut parts = Vec::new();
        if let Some(t) = &self.tls {
            let version = if t.version.is_empty() {
                "no handshake completed"
            } else {
                &t.version
            };
            parts.push(match t.verify.as_str() {
                "full" => format!("TLS {version}"),
                "none" => format!("TLS {version}, certificate NOT verified"),
                _ => format!("TLS {version}, hostname not verified"),
            });
        }
        if let Some(u) = &self.user {
            parts.push(format!("user {u}"));
        }
        if self.db != 0 {
            parts.push(format!("db {}", self.db));
        }
        if self.resp != 2 {
            parts.push(format!("RESP{}", self.resp));
        }
        if self.tracking {
            parts.push("tracking".into());
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(" ({})", parts.join(", "))
        }
    }

    /// The terminal summary: one row per command and a total row.
    /// The checkpoints as a table (empty without `--checkpoint-every`): at most the first
    /// and last 10 rows on the terminal; report.json and report.html have every one.
    pub fn checkpoints_table(&self) -> String {
        let mut out = String::new();
        if self.checkpoints.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "checkpoints (load paused, replies in, then INFO memory{}):",
            if self.checkpoints.iter().any(|c| c.probe.is_some()) {
                " and the probe"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "  {:>6}  {:>14}  {:>10}  {:>12}  {:>12}  {:>12}  {:>6}  probe",
            "#", "requests", "at", "req/s", "used_memory", "rss", "frag"
        );
        let n = self.checkpoints.len();
        for (i, c) in self.checkpoints.iter().enumerate() {
            if n > 20 && i == 10 {
                let _ = writeln!(out, "  … {} more …", n - 20);
            }
            if n > 20 && (10..n - 10).contains(&i) {
                continue;
            }
            let bytes = |b: Option<u64>| b.map_or("?".to_string(), human_bytes);
            let _ = writeln!(
                out,
                "  {:>6}  {:>14}  {:>9.2}s  {:>12.0}  {:>12}  {:>12}  {:>6}  {}{}",
                c.index + 1,
                grouped(c.requests),
                c.at_s,
                c.rate,
                bytes(c.used_memory),
                bytes(c.used_memory_rss),
                c.mem_fragmentation_ratio
                    .map_or("?".to_string(), |f| format!("{f:.2}")),
                c.probe.as_deref().unwrap_or(""),
                c.error
                    .as_deref()
                    .map_or(String::new(), |e| format!("  ({e})"))
            );
        }
        out
    }

    pub fn table(&self) -> String {
        let mut out = String::new();
        let lost = self.workers.iter().filter(|w| w.lost).count();
        let shards: u32 = self.workers.iter().map(|w| w.shards).sum();
        let _ = writeln!(
            out,
            "crest run {}  target {}{}  {:.1}s  {} arrivals  {} worker(s), {} shard(s){}",
            self.run_id,
            self.target,
            self.session_note(),
            self.duration_s,
            self.arrival,
            self.workers.len(),
            shards,
            if lost > 0 {
                format!(", {lost} LOST")
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "{:<16} {:>10} {:>21} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "command",
            "completed",
            "rate (achieved/target)",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "p99.99",
            "max",
            "errors",
            "misses"
        );
        let row = |out: &mut String, name: &str, s: &Summary| {
            let [p50, p90, p99, p999, p9999, max] = s.latency_us.cells();
            let _ = writeln!(
                out,
                "{:<16} {:>10} {:>21} {p50:>8} {p90:>8} {p99:>8} {p999:>8} {p9999:>8} {max:>8} {:>8} {:>8}",
                name,
                s.completed,
                format!("{:.0}/{}", s.achieved_rate, s.target_rate.show()),
                s.errors,
                s.misses
            );
        };
        for (label, s) in self.rows() {
            row(&mut out, &label, s);
        }
        let t = &self.totals.summary;
        let (timing, counts) = self.footer();
        let _ = writeln!(
            out,
            "latency is from each request's intended send time; {timing}"
        );
        let _ = writeln!(out, "{}", counts.join("  "));
        if !t.errors_by_kind.is_empty() {
            let kinds: Vec<String> = t
                .errors_by_kind
                .iter()
                .map(|(k, n)| match self.error_messages.get(k) {
                    Some(m) => format!("{k}={n} (\"{m}\")"),
                    None => format!("{k}={n}"),
                })
                .collect();
            let _ = writeln!(out, "errors by kind: {}", kinds.join(" "));
        }
        let pushes: u64 = self.classes.values().map(|c| c.pushes).sum();
        if pushes > 0 {
            let invalidations: u64 = self.classes.values().map(|c| c.invalidations).sum();
            let _ = writeln!(
                out,
                "push frames (RESP3, not replies): {pushes}, of them invalidations: {invalidations}"
            );
        }
        if let Some(line) = self.stopped_answering() {
            let _ = writeln!(out, "{line}");
        }
        if self.cluster {
            self.nodes_table(&mut out);
        }
        if !self.connection_errors.is_empty() {
            let _ = writeln!(
                out,
                "connection errors: {}",
                counts_line(&self.connection_errors)
            );
        }
        for w in self.workers.iter().filter(|w| w.lost) {
            let _ = writeln!(
                out,
                "worker {} ({}) LOST: {}; its {} completed requests received before that are counted",
                w.name,
                w.host,
                w.lost_reason.as_deref().unwrap_or("unknown"),
                w.completed
            );
        }
        if let Some(line) = self.generator_line() {
            let _ = writeln!(out, "generator: {line}");
        }
        if let Some(line) = self.server_line() {
            let _ = writeln!(out, "server: {line}");
        }
        out.push_str(&self.checkpoints_table());
        if let Some(s) = self.server.as_ref().filter(|s| s.agrees == Some(true)) {
            let _ = writeln!(
                out,
                "server agrees: {}",
                agreement_words(&s.agreement, &s.other_commands)
            );
        }
        if let Some(spans) = self.connection_bound_spans() {
            let _ = writeln!(
                out,
                "NOTE: requests waited for a free connection in {spans}; more --connections or --pipeline would send them on time"
            );
        }
        if let Some(line) = self.off_pace_line() {
            let _ = writeln!(out, "NOTE: {line}");
        }
        if !self.checks.generator_bound_intervals.is_empty() {
            let _ = writeln!(
                out,
                "WARNING: the generator could not keep its schedule in {}; latency there describes the client, not the server",
                self.generator_bound_spans()
            );
        }
        if self.checks.late_intervals > 0 {
            let _ = writeln!(
                out,
                "note: {} interval message(s) came after their timeline row was written; they are in the totals, not in the timeline",
                self.checks.late_intervals
            );
        }
        for p in &self.checks.problems {
            let _ = writeln!(out, "check: {p}");
        }
        for c in &self.changes {
            let _ = writeln!(
                out,
                "change {} ({}, {}): asked at {:.3} s, at {:.3} s: {:.0}/s -> {:.0}/s{}",
                c.seq,
                c.action,
                c.by,
                c.asked_s,
                c.at_s,
                c.from_rps,
                c.to_rps,
                c.workers
                    .iter()
                    .map(|w| format!("; {} switched at {:.6} s", w.worker, w.first_s))
                    .collect::<String>()
            );
        }
        if self.interrupted {
            let _ = writeln!(
                out,
                "INCOMPLETE: interrupted after {:.1} s; this report holds what was collected until then",
                self.duration_s
            );
        } else if let Some(by) = &self.stopped_by {
            let _ = writeln!(
                out,
                "stopped through the {by} API after {:.1} s: the workers ended there, drained and reported; this report covers that span",
                self.duration_s
            );
        }
        out
    }

    /// The cluster's nodes, one row each: slots and requests side by side (a hot node
    /// stands out), errors, redirects, latency; and the redirects over the run.
    fn nodes_table(&self, out: &mut String) {
        let r = self.totals.summary.redirects;
        let _ = writeln!(
            out,
            "cluster: {} nodes ({} primaries); redirects followed: MOVED {} ASK {}, retried (TRYAGAIN/CLUSTERDOWN/LOADING) {}",
            self.nodes.len(),
            self.nodes.iter().filter(|n| n.primary).count(),
            r.moved,
            r.asked,
            r.retried
        );
        let _ = writeln!(
            out,
            "{:<22} {:>6} {:>7} {:>10} {:>7} {:>8} {:>8} {:>8} {:>8} {:>7} {:>5}",
            "node",
            "slots",
            "slot%",
            "completed",
            "req%",
            "p50",
            "p99",
            "p99.9",
            "errors",
            "MOVED",
            "ASK"
        );
        for n in &self.nodes {
            let [p50, _, p99, p999, _, _] = n.latency_us.cells();
            let _ = writeln!(
                out,
                "{:<22} {:>6} {:>6.2}% {:>10} {:>6.2}% {p50:>8} {p99:>8} {p999:>8} {:>8} {:>7} {:>5}",
                n.addr,
                n.slots,
                n.slot_share * 100.0,
                n.completed,
                n.request_share * 100.0,
                n.errors,
                n.moved,
                n.asked
            );
        }
    }

    /// `timeline.csv`: one row per second.
    pub fn timeline_csv(&self) -> String {
        let mut out = String::from(TIMELINE_CSV_HEADER);
        let rows = self.server.as_ref().map(|s| s.intervals.as_slice());
        for (i, p) in self.timeline.iter().enumerate() {
            timeline_csv_row(&mut out, p, rows.and_then(|r| r.get(i)));
        }
        out
    }
}

/// Per-command summaries over every class: a command's target is the sum of its targets in
/// each class (a rate where any open-loop class sends it, else "max").
pub fn commands_over_classes(
    by: &BTreeMap<String, CmdStats>,
    classes: &BTreeMap<String, ClassReport>,
    duration_s: f64,
) -> BTreeMap<String, Summary> {
    let mut targets: BTreeMap<String, (f64, bool)> = BTreeMap::new();
    for c in classes.values() {
        for (name, s) in &c.commands {
            let e = targets.entry(name.clone()).or_insert((0.0, false));
            match s.target_rate {
                Target::Rate(r) => {
                    e.0 += r;
                    e.1 = true;
                }
                Target::Max(_) => {}
            }
        }
    }
    by.iter()
        .filter(|(_, s)| s.scheduled > 0 || s.error_total() > 0)
        .map(|(name, s)| {
            let t = match targets.get(name) {
                Some((r, true)) => Target::Rate(*r),
                _ => Target::MAX,
            };
            (name.clone(), Summary::of(s, t, duration_s))
        })
        .collect()
}

/// Per-command summaries; each command's target is its weight's share of `target`.
pub fn commands(
    by: &BTreeMap<String, CmdStats>,
    weights: &BTreeMap<String, u32>,
    target: Target,
    duration_s: f64,
) -> BTreeMap<String, Summary> {
    let wsum: u32 = weights.values().sum();
    let mut out = BTreeMap::new();
    for (name, w) in weights {
        if *w == 0 {
            continue;
        }
        let s = by.get(name).cloned().unwrap_or_default();
        let t = match target {
            Target::Rate(r) => Target::Rate(r * f64::from(*w) / f64::from(wsum.max(1))),
            m => m,
        };
        out.insert(name.clone(), Summary::of(&s, t, duration_s));
    }
    for (name, s) in by {
        if s.scheduled > 0 || s.error_total() > 0 {
            out.entry(name.clone())
                .or_insert_with(|| Summary::of(s, Target::Rate(0.0), duration_s));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crest_model::hist;

    #[test]
    fn percentiles_are_read_in_microseconds() {
        let mut h = hist::new_hist();
        for v in 1..=1000u64 {
            hist::record(&mut h, v * 1_000); // 1 µs .. 1 ms
        }
        let p = Percentiles::of(&h);
        assert!((p.p50 - 500.0).abs() <= 1.0, "{p:?}");
        assert!((p.p99 - 990.0).abs() <= 1.0, "{p:?}");
        assert!((p.max - 1000.0).abs() <= 1.0, "{p:?}");
        assert_eq!(Percentiles::of(&hist::new_hist()), Percentiles::default());
        assert_eq!(human_us(250.0), "250µs");
        assert_eq!(human_us(2_500.0), "2.50ms");
        assert_eq!(human_us(2_500_000.0), "2.50s");
    }

    #[test]
    fn generator_bound_intervals_read_as_a_few_spans() {
        assert_eq!(
            describe_spans(&[0.02, 0.03, 0.04, 1.5], 0.01, 500),
            "4 of 500 interval(s) (0.8%), starting at 0.02–0.04 s, 1.5 s"
        );
        // Thousands of scattered intervals: a bounded line, the rest counted.
        let many: Vec<f64> = (0..3000).map(|i| f64::from(i) * 2.0).collect();
        let line = describe_spans(&many, 1.0, 6000);
        assert!(line.len() < 300, "{line}");
        assert!(
            line.starts_with("3000 of 6000 interval(s) (50.0%), starting at 0 s, 2 s,"),
            "{line}"
        );
        assert!(
            line.ends_with(" and 2992 more span(s) (report.json lists every one)"),
            "{line}"
        );
    }

    #[test]
    fn a_second_short_of_schedule_is_generator_bound() {
        // One point of a 1 s interval due 1,000 requests, against a target of `target`.
        let at = |s: &CmdStats, target: f64, load: Load| {
            TimelinePoint::of(0, 1.0, s, target, 1000.0, load, Baseline::default())
        };
        let mut s = CmdStats {
            scheduled: 800,
            ..Default::default()
        };
        assert!(at(&s, 1000.0, Load::default()).generator_bound);
        s.scheduled = 960;
        assert!(
            !at(&s, 1000.0, Load::default()).generator_bound,
            "Poisson noise"
        );
        assert!(
            !at(&s, 2000.0, Load::default()).generator_bound,
            "a lost worker's share is not the generator's fault"
        );
        s.scheduled = 1000;
        for _ in 0..100 {
            hist::record(&mut s.schedule_lag, 5_000_000);
        }
        assert!(at(&s, 1000.0, Load::default()).generator_bound);
        s.backlogged = 100;
        let p = at(&s, 1000.0, Load::default());
        assert!(
            !p.generator_bound,
            "waiting for a connection is not the pacer's doing"
        );
        assert_eq!(p.bound, "connections");
        // ... unless a shard was saturated: then the shard is the bottleneck.
        let busy = Load {
            cpu_ns: 950_000_000,
            busiest: 0.95,
            ..Load::default()
        };
        let p = at(&s, 1000.0, busy);
        assert!(p.generator_bound);
        assert_eq!(
            (p.bound, p.generator_cpu_s, p.busiest_shard),
            ("generator", 0.95, 0.95)
        );
    }

    /// Lag p99 past the pacer's bound is off pace, and the cause is the first that holds:
    /// a saturated shard, requests waiting for a connection, a preempted shard, else the
    /// pacer; under a looser pacer's bound the same interval is on pace.
    #[test]
    fn lag_past_the_pacers_bound_is_off_pace_with_its_cause() {
        use crest_model::plan::Pacer;
        let spin = Baseline {
            service_floor: 0,
            lag_bound_ns: Pacer::Spin.lag_bound_ns(),
        };
        let mut s = CmdStats {
            scheduled: 1000,
            ..Default::default()
        };
        let at = |s: &CmdStats, load: Load, base: Baseline| {
            TimelinePoint::of(0, 1.0, s, 1000.0, 1000.0, load, base)
        };
        assert_eq!(
            at(&s, Load::default(), spin).off_pace,
            "",
            "no lag recorded"
        );
        for i in 0..1000 {
            hist::record(&mut s.schedule_lag, if i < 980 { 5_000 } else { 50_000 });
        }
        let light = Load {
            cpu_ns: 100_000_000,
            busiest: 0.1,
            ..Load::default()
        };
        assert_eq!(at(&s, light, spin).off_pace, "pacer");
        // Preempted briefly: 2.5 ms of a second cannot hold back 1% of the requests.
        let brief = Load {
            preemptions: 3,
            queued_ns: 2_500_000,
            ..light
        };
        let p = at(&s, brief, spin);
        assert_eq!(
            (p.off_pace, p.preemptions, p.core_wait_ms),
            ("pacer", 3, 2.5)
        );
        let preempted = Load {
            preemptions: 30,
            queued_ns: 5_000_000,
            ..light
        };
        assert_eq!(at(&s, preempted, spin).off_pace, "preempted");
        // A kernel without schedstat: preemptions alone.
        let unknown = Load {
            queued_ns: 0,
            ..brief
        };
        assert_eq!(at(&s, unknown, spin).off_pace, "preempted");
        assert!(
            !p.generator_bound,
            "50 µs of lag is not the generator's limit"
        );
        assert_eq!(at(&s, preempted, Baseline::default()).off_pace, "");
        assert_eq!(
            at(
                &s,
                preempted,
                Baseline {
                    lag_bound_ns: Pacer::SleepWithin(10_000).lag_bound_ns(),
                    ..spin
                }
            )
            .off_pace,
            ""
        );
        s.backlogged = 10;
        assert_eq!(at(&s, preempted, spin).off_pace, "connections");
        let busy = Load {
            busiest: 0.95,
            ..preempted
        };
        assert_eq!(at(&s, busy, spin).off_pace, "busy");
        s.backlogged = 0;
        let stolen = Load {
            steal_ns: 10_000_000,
            ..brief
        };
        let p = at(&s, stolen, spin);
        assert_eq!((p.off_pace, p.steal_ms), ("steal", 10.0));
        // Every cause has its words.
        for cause in ["busy", "connections", "preempted", "steal", "pacer"] {
            assert!(OFF_PACE_CAUSES.iter().any(|(c, _)| *c == cause), "{cause}");
        }
    }

    #[test]
    fn slow_replies_on_time_with_free_connections_are_the_servers() {
        let mut s = CmdStats {
            scheduled: 1000,
            ..Default::default()
        };
        for _ in 0..100 {
            hist::record(&mut s.schedule_lag, 20_000);
            hist::record(&mut s.latency, 3_000_000);
        }
        let light = Load {
            cpu_ns: 100_000_000,
            busiest: 0.1,
            ..Load::default()
        };
        assert_eq!(
            TimelinePoint::of(0, 1.0, &s, 1000.0, 1000.0, light, Baseline::default()).bound,
            "server"
        );
        let mut fast = CmdStats {
            scheduled: 1000,
            ..Default::default()
        };
        hist::record(&mut fast.latency, 80_000);
        assert_eq!(
            TimelinePoint::of(0, 1.0, &fast, 1000.0, 1000.0, light, Baseline::default()).bound,
            ""
        );
        // Requests that waited for a connection while service time tripled waited for
        // the server's slow replies, not for too few connections.
        let mut waited = CmdStats {
            scheduled: 1000,
            backlogged: 500,
            ..Default::default()
        };
        hist::record(&mut waited.service_time, 3_000_000);
        let p = |service_floor| {
            let base = Baseline {
                service_floor,
                ..Baseline::default()
            };
            TimelinePoint::of(0, 1.0, &waited, 1000.0, 1000.0, light, base).bound
        };
        assert_eq!(p(1_000_000), "server");
        assert_eq!(p(2_000_000), "connections");
        assert_eq!(p(0), "connections", "no floor yet");
    }
}
