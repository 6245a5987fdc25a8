//! The report's types: `report.json` is [`Report`] serialized, and read back through the
//! same types ([`Report::from_json`]). Every figure is read off merged histograms and
//! exact counts.
//!
//! # Schema
//! [`SCHEMA_VERSION`] is bumped when a key changes meaning or goes away. A reader refuses
//! a report of a newer version, and one with a key missing, in one line; keys it does not
//! know (a newer minor addition) are ignored. `docs/report.md` describes every key.

use crate::fmt::{human_us, round2};
use crate::server::ServerReport;
use crest_model::hist::Hist;
use crest_model::stats::{CmdStats, ENGINE_KINDS, ErrorCounts};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the report's layout; bumped when a key changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 2;

/// Percentiles of one histogram, in microseconds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default, schemars::JsonSchema)]
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

pub fn us(ns: u64) -> f64 {
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

/// An asked rate: requests per second, or "max" for closed loop (`report.json`: a number
/// or the string `"max"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// Open loop.
    Rate(f64),
    /// Closed loop: as fast as `pipeline` requests in flight per connection allow.
    Max,
}

impl Target {
    /// The closed-loop marker.
    pub const MAX: Target = Target::Max;

    /// Requests per second (0 for "max").
    pub fn rps(&self) -> f64 {
        match self {
            Target::Rate(r) => *r,
            Target::Max => 0.0,
        }
    }

    /// `20000` or `max`.
    pub fn show(&self) -> String {
        match self {
            Target::Rate(r) => format!("{r:.0}"),
            Target::Max => "max".into(),
        }
    }
}

impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Target::Rate(r) => s.serialize_f64(*r),
            Target::Max => s.serialize_str("max"),
        }
    }
}

impl schemars::JsonSchema for Target {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Target".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A rate in requests per second, or \"max\" (a closed loop: as fast as the connections go).",
            "anyOf": [{"type": "number"}, {"const": "max"}]
        })
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Rate(f64),
            Word(String),
        }
        match Raw::deserialize(d)? {
            Raw::Rate(r) => Ok(Target::Rate(r)),
            Raw::Word(w) if w == "max" => Ok(Target::Max),
            Raw::Word(w) => Err(serde::de::Error::custom(format!(
                "a rate is a number or \"max\", not {w:?}"
            ))),
        }
    }
}

/// Names a report writes as words (`""` for none): the enums below.
macro_rules! words {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $w:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
        pub enum $name {
            /// Nothing to say: `""`.
            #[default]
            #[serde(rename = "")]
            None,
            $($(#[$vm])* #[serde(rename = $w)] $v,)+
        }

        impl $name {
            /// As `report.json` and `timeline.csv` write it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $name::None => "",
                    $($name::$v => $w,)+
                }
            }

            /// Whether there is something to say.
            pub fn is_some(self) -> bool {
                self != $name::None
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, word: &&str) -> bool {
                self.as_str() == *word
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

words!(
    /// What limited an interval ([`TimelinePoint::bound`]).
    Bound {
        /// The generator could not keep its schedule.
        Generator = "generator",
        /// The server (or the network) slowed down.
        Server = "server",
        /// Requests waited for a free connection.
        Connections = "connections",
    }
);

words!(
    /// Why an interval's schedule lag p99 passed the pacer's bound
    /// ([`TimelinePoint::off_pace`]); each cause's advice is in
    /// [`crate::rules::OFF_PACE_CAUSES`].
    OffPace {
        /// A shard was busy 90% of the interval or more.
        Busy = "busy",
        /// Requests waited for a free connection.
        Connections = "connections",
        /// The shards waited for their core.
        Preempted = "preempted",
        /// The hypervisor ran other guests on the shards' virtual CPUs.
        Steal = "steal",
        /// None of these: the pacer itself came late.
        Pacer = "pacer",
    }
);

/// Results of a command, a class or the whole run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
    #[serde(default, skip_serializing_if = "RedirectCounts::is_zero")]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// Requests the server answered: non-error replies and server error replies (not the
    /// client's own kinds: timeouts, disconnects, backlog overflow).
    pub fn answered(&self) -> u64 {
        let server_errors: u64 = self
            .errors_by_kind
            .iter()
            .filter(|(k, _)| !ENGINE_KINDS.contains(&k.as_str()))
            .map(|(_, n)| n)
            .sum();
        self.completed + server_errors
    }

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

/// Totals add the end-of-run accounting to a [`Summary`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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

/// An interval's latency percentiles for the timeline (p90, p99.99 and max are absent, so
/// 0, in reports written before they were kept).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ShortPercentiles {
    /// Median, µs.
    pub p50: f64,
    /// 90th percentile, µs.
    #[serde(default)]
    pub p90: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// 99.9th percentile, µs.
    pub p999: f64,
    /// 99.99th percentile, µs.
    #[serde(default)]
    pub p9999: f64,
    /// Highest, µs.
    #[serde(default)]
    pub max: f64,
}

/// One interval of the run (1 s unless `--interval` says otherwise).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
    pub bound: Bound,
    /// Why schedule lag p99 passed the pacer's bound (`settings.lag_bound_us`: what the
    /// pacer holds on a core of its own) in this interval, or empty when it did not:
    /// `busy` (the busiest shard was busy 90% of the interval or more), `connections` (1%
    /// or more of the requests waited for a free connection), `preempted` (the scheduler
    /// took the shards' core from them for 0.5% of the interval or more, [`PREEMPTED_SHARE`](crate::rules::PREEMPTED_SHARE):
    /// see `preemptions` and `core_wait_ms`; something else runs on it), `steal` (the
    /// hypervisor took the shards' virtual CPUs for 0.5% of the interval or more: see
    /// `steal_ms`), or `pacer` (none of these: the pacer itself came late, by its own work
    /// or by timer or host latency the workers cannot see).
    pub off_pace: OffPace,
    /// Involuntary context switches of the shard threads in this interval, summed over
    /// workers: times the scheduler gave a shard's core to another thread.
    pub preemptions: u64,
    /// Time the shard threads were runnable but waited for their core in this interval,
    /// ms, summed over shards (0 where the kernel keeps no schedstat).
    pub core_wait_ms: f64,
    /// The hypervisor's steal on the shards' cores in this interval, ms, summed over
    /// cores (`/proc/stat`, in whole ticks of 10 ms; 0 off a VM).
    pub steal_ms: f64,
    /// Connections that came up in the interval after the start: reconnects, whether a
    /// life ended (`--conn-lifetime`, `--conn-rate`) or a connection failed.
    #[serde(default)]
    pub connections_opened: u64,
    /// Nodes in an outage (`outages`) at some point of this interval.
    #[serde(default)]
    pub nodes_out: u32,
}

/// What an interval is judged against: the run so far and the pacer.
/// One worker's own results, so a slow client node stands out.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// Key name lengths: `natural`, `etc`, or sizes (`--key-size`).
    #[serde(default)]
    pub key_size: String,
    /// Value sizes.
    pub value_sizes: String,
    /// What the values' bytes are: `fixed`, `random` or `compressible:R`.
    #[serde(default)]
    pub value_content: String,
    /// Connections across the cluster.
    pub connections: u32,
    /// Requests in flight per connection.
    pub pipeline: u32,
    /// TTL, seconds (a TTL table: absent, and `ttl_table` holds it).
    pub ttl_s: Option<u64>,
    /// A TTL table drawn per write, `SECONDS:WEIGHT,…` (0: no TTL); empty for one TTL or
    /// none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ttl_table: String,
    /// Members or keys per batch command.
    pub batch: u32,
    /// Members (fields) per key of a collection command (absent from reports before it
    /// was echoed: 0).
    #[serde(default)]
    pub members: u64,
    /// How members are numbered: `uniform` or `sequential` (absent before: empty).
    #[serde(default)]
    pub member_order: String,
    /// LRANGE / ZRANGE length (absent before: 0).
    #[serde(default)]
    pub range: u32,
    /// Keys written before the run.
    pub prefill: bool,
}

/// The run's settings, echoed so the report can be repeated.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ProfileSegment {
    /// Length, seconds.
    pub duration_s: f64,
    /// Rate at its start, requests per second.
    pub from_rps: f64,
    /// Rate at its end.
    pub to_rps: f64,
}

/// One class's results.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
#[derive(
    Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, schemars::JsonSchema,
)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct NodeReport {
    /// `host:port` as the cluster announces it (the target, for one node).
    pub addr: String,
    /// Owned slots in the workers' last slot tables.
    pub primary: bool,
    /// Slots it owned there (16,384 for a single node).
    pub slots: u32,
    /// `slots` / 16,384; on a memcached ring (`slots` 0), the share of the ring's hash
    /// space the server holds, which is its expected share of the keys.
    pub slot_share: f64,
    /// Requests it answered with a non-error reply.
    pub completed: u64,
    /// Of those, reads (commands a replica may answer): with `--read-from`, where the
    /// reads went.
    #[serde(default)]
    pub reads: u64,
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

/// The connections' lives over a run, summed over workers.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ConnReport {
    /// `--conn-lifetime` as given (`1s`, `30s±5s`); null without one.
    pub lifetime: Option<String>,
    /// `--conn-rate`: connections retired per second across the fleet; null without one.
    pub rate: Option<f64>,
    /// Connections that came up before the start (the first connects).
    pub initial: u64,
    /// Connections that came up after it (reconnects: a life's end, or a failure).
    pub opened: u64,
    /// Connections closed because their life ended (no request lost: each waited for its
    /// replies).
    pub retired: u64,
    /// Every connection's setup, from the connect's start to ready for requests (TCP, TLS
    /// handshake, login, database, protocol), µs.
    pub setup_us: Percentiles,
    /// The TCP connect alone, µs.
    #[serde(default)]
    pub connect_us: Option<Percentiles>,
    /// The TLS handshake alone, µs (null: no TLS connection).
    #[serde(default)]
    pub tls_us: Option<Percentiles>,
    /// The session's commands alone (`HELLO`/`AUTH`, `SELECT`, tracking, `READONLY`), µs
    /// (null: no connection sent any).
    #[serde(default)]
    pub session_us: Option<Percentiles>,
}

fn resp_protocol() -> String {
    "resp".into()
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
                reads: n.reads,
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

/// One outage as the clients saw it: from the intended time of the first request to a
/// node that failed (a disconnect, a timeout, a refusal retried to the end) with nothing
/// intended after it having succeeded, to the completion of the first success after it
/// of a request that went to that node when it began (on the node that took its slots
/// over, after a failover). Overlapping outages of one node seen by several shards or
/// workers are one, from the earliest start to the latest end.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct OutageReport {
    /// The node, `host:port`.
    pub node: String,
    /// `primary` when writes went to it as the outage began, else `replica`.
    pub role: String,
    /// Its start, seconds since the measured start.
    pub start_s: f64,
    /// Its end, seconds since the measured start (null: no success came before the run
    /// ended).
    pub end_s: Option<f64>,
    /// Its length, ms (null: not over when the run ended).
    pub length_ms: Option<f64>,
    /// Requests intended within it that failed.
    pub failed: u64,
    /// Its requests answered with a redirect or a retry while it lasted (`MOVED`, `ASK`,
    /// `TRYAGAIN`, `CLUSTERDOWN`, `LOADING`).
    pub redirected: u64,
    /// How long after its start the clients' slot table moved its slots to another node
    /// (the last client to learn it), ms (null: never, or not a cluster).
    pub rediscovered_ms: Option<f64>,
    /// The slots whose requests went to it when it began, e.g. `0-5460` (empty: not routed
    /// by slot).
    pub slots: String,
    /// The end of the first interval, from the one the outage ended in on, whose achieved
    /// rate was 99% of its target or more, seconds since the measured start (null: never,
    /// still open, or a closed loop).
    pub recovered_s: Option<f64>,
}

impl OutageReport {
    /// Every node's outages from `nodes`, times made relative to the measured start
    /// (`warmup_ns` after the run's), the recovery read from `timeline` (intervals of
    /// `interval_s`); in start order.
    pub fn all(
        nodes: &[crest_model::stats::NodeStats],
        warmup_ns: u64,
        timeline: &[TimelinePoint],
        interval_s: f64,
    ) -> Vec<Self> {
        let secs = |ns: u64| round4(ns.saturating_sub(warmup_ns) as f64 / 1e9);
        let mut all: Vec<Self> = nodes
            .iter()
            .flat_map(|n| n.outages.iter().map(move |o| (n, o)))
            .map(|(n, o)| {
                let end_s = o.end.map(secs);
                OutageReport {
                    node: n.addr.clone(),
                    role: if o.writes { "primary" } else { "replica" }.into(),
                    start_s: secs(o.start),
                    end_s,
                    length_ms: o.len_ns().map(|l| round4(l as f64 / 1e6)),
                    failed: o.failed,
                    redirected: o.redirected,
                    rediscovered_ms: o
                        .rediscovered
                        .map(|r| round4(r.saturating_sub(o.start) as f64 / 1e6)),
                    slots: slot_ranges(&o.slots),
                    recovered_s: end_s.and_then(|e| recovered(timeline, e, interval_s)),
                }
            })
            .collect();
        all.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        all
    }
}

impl OutageReport {
    /// The time, ms, some outage of `all` lasted (their spans united; an open one to
    /// `end_s`).
    pub fn united_ms(all: &[Self], end_s: f64) -> f64 {
        let mut spans: Vec<(f64, f64)> = all
            .iter()
            .map(|o| (o.start_s, o.end_s.unwrap_or(end_s).max(o.start_s)))
            .collect();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mut total, mut cur): (f64, Option<(f64, f64)>) = (0.0, None);
        for (a, b) in spans {
            cur = match cur {
                Some((s, e)) if a <= e => Some((s, e.max(b))),
                Some((s, e)) => {
                    total += e - s;
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((s, e)) = cur {
            total += e - s;
        }
        round4(total * 1e3)
    }

    /// Sets each point's `nodes_out` of `timeline` (intervals of `interval_s`): the nodes
    /// of `all` in an outage at some point of it.
    pub fn mark(all: &[Self], timeline: &mut [TimelinePoint], interval_s: f64) {
        for p in timeline.iter_mut() {
            let (a, b) = (p.t_s, p.t_s + interval_s);
            let mut nodes: Vec<&str> = all
                .iter()
                .filter(|o| o.start_s < b && o.end_s.is_none_or(|e| e >= a))
                .map(|o| o.node.as_str())
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            p.nodes_out = nodes.len() as u32;
        }
    }
}

/// A replayed trace: where the stream stood at the end and what was left out. Every
/// request made from the trace is sent or counted here: `requests` = `sent` + skipped
/// commands' requests + `past_profile` + `past_end` + `lost`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ReplayReport {
    /// The files, in the order read.
    pub files: Vec<String>,
    /// `twitter`, `cachebench` or `monitor`.
    pub format: String,
    /// `--speed` on the trace's own clock; null when re-timed (`--rate`, `--stages`).
    pub speed: Option<f64>,
    /// `--amplify`: requests sent per recorded one, under suffixed keys.
    pub amplify: u32,
    /// `--key-prefix` put before every key.
    pub key_prefix: String,
    /// The whole trace was read and handed out (false: the run ended first).
    pub finished: bool,
    /// Records read from the files.
    pub records: u64,
    /// Requests made from them (cachebench's `op_count` repeats and `--amplify` copies).
    pub requests: u64,
    /// Requests handed to the workers.
    pub sent: u64,
    /// The intended time of the last request handed out, seconds from the start.
    pub last_at_s: f64,
    /// Requests handed out per trace op (`get`, `add`, `cmd:HSET`): what each was sent as
    /// is in `commands` (get and gets as GET; set, add, replace and cas as SET).
    pub by_op: BTreeMap<String, u64>,
    /// Lines left out, per file and reason, with the first line of each.
    pub skipped: Vec<ReplaySkip>,
    /// Requests sent later than recorded because an earlier line had a later time.
    pub reordered: u64,
    /// Requests left out because the `--rate`/`--stages` profile ended before them.
    pub past_profile: u64,
    /// Requests left out because `--duration` (or the longest run, 30 days) ended the run
    /// before them.
    pub past_end: u64,
    /// Requests that fell to a worker lost before their time.
    pub lost: u64,
    /// Chunks streamed to the workers.
    pub chunks: u64,
}

/// Lines of one file left out for one reason.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ReplaySkip {
    /// The file.
    pub file: String,
    /// Why (`bad op`, `bad size`, `command not replayed …`).
    pub reason: String,
    /// How many lines.
    pub lines: u64,
    /// The first such line's number.
    pub first_line: u64,
}

/// Stale reads from replicas (`--check-staleness`). Every SET's value starts with a
/// version stamp (its intended time); every GET's reply is read for it. A read is checked
/// when the shard that sent it knows the key's latest write it saw acknowledged (its own
/// writes; a key whose table entry another key took is not checked), and stale when it
/// was sent after that acknowledgement and returned an older version or none.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct StalenessReport {
    /// Reads checked (measured ones).
    pub checked: u64,
    /// Of them, stale.
    pub stale: u64,
    /// `stale / checked`, rounded 0.0001 (0 with none checked).
    pub stale_share: f64,
    /// How far behind each stale read was, µs: from the acknowledgement of the write it
    /// missed to its send (a lower bound: an earlier missed write, or another shard's,
    /// would make it more). All zero with no stale read.
    pub behind_us: Percentiles,
}

impl StalenessReport {
    /// From the counts summed over classes and workers.
    pub fn of(checked: u64, stale: u64, behind: Option<&crest_model::hist::Hist>) -> Self {
        Self {
            checked,
            stale,
            stale_share: round4(stale as f64 / checked.max(1) as f64),
            behind_us: behind.map(Percentiles::of).unwrap_or_default(),
        }
    }
}

/// The end of the first interval, from the one holding `after` on, whose achieved rate
/// reached 99% of its (non-zero) target.
fn recovered(timeline: &[TimelinePoint], after: f64, interval_s: f64) -> Option<f64> {
    timeline
        .iter()
        .filter(|p| p.t_s + interval_s > after && p.target_rate > 0.0)
        .find(|p| p.achieved_rate >= 0.99 * p.target_rate)
        .map(|p| round4(p.t_s + interval_s))
}

/// Slot ranges as `0-5460,10923` (a lone slot alone).
pub fn slot_ranges(r: &[(u16, u16)]) -> String {
    r.iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn primary_reads() -> String {
    "primary".into()
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// TLS to the target, as the run set it up and the connections negotiated it. No
/// secret is recorded: not the key, not the certificates' bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
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
    /// What the connections spoke: `resp`, or memcached's `memcache-text` or
    /// `memcache-meta` (then `resp` means nothing, and `nodes` are the ring's servers).
    #[serde(default = "resp_protocol")]
    pub protocol: String,
    /// True when every connection turned on client-side caching (`CLIENT TRACKING on`).
    pub tracking: bool,
    /// True when the target was loaded as a Redis Cluster (`--cluster`, or a seed that
    /// said it is one): requests routed by slot. Read from the nodes (more than one, a
    /// share of the slots, or a redirect followed), so a one-node cluster owning every
    /// slot that never redirected reads false.
    pub cluster: bool,
    /// Where reads went (`--read-from`): `primary`, `replicas`, `prefer-replicas` or
    /// `any`; each node's `reads` says how they spread.
    #[serde(default = "primary_reads")]
    pub read_from: String,
    /// Per target node (one for a single node): its slots, its share of the requests,
    /// its errors, redirects and latency, so one hot or slow node stands out.
    pub nodes: Vec<NodeReport>,
    /// Outages as the clients saw them, per node in start order: spans in which a node's
    /// requests failed and none succeeded (a primary killed, a failover, a server that
    /// stopped answering), each with its failed and redirected requests, when the clients
    /// learned the new owner, and when the rate was back (empty: none).
    #[serde(default)]
    pub outages: Vec<OutageReport>,
    /// Outages past the 64 kept per node, left out of `outages`.
    #[serde(default)]
    pub outages_dropped: u64,
    /// The whole target's outage, ms: the time some node was out (`outages`' spans
    /// united; one still open counts to the end of the measured time). 0: none.
    #[serde(default)]
    pub outage_ms: f64,
    /// Stale reads from replicas (`--check-staleness`); null without it.
    #[serde(default)]
    pub staleness: Option<StalenessReport>,
    /// `crest replay`: the trace, how far it was sent, what each op was sent as, and what
    /// was left out; null for `crest run`.
    #[serde(default)]
    pub replay: Option<ReplayReport>,
    /// How the connections came and went: the first connects, the reconnects during the
    /// run (a life's end with `--conn-lifetime`/`--conn-rate`, or a failure), and every
    /// connection's setup time.
    #[serde(default)]
    pub connections: ConnReport,
    /// Start instant, RFC 3339 UTC.
    pub started_at: String,
    /// Measured length, seconds: the schedule's, or up to the interrupt.
    pub duration_s: f64,
    /// `uniform`, `poisson` or `etc`.
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
    pub server: Option<ServerReport>,
    /// `--checkpoint-every`: the server read at each checkpoint (empty without).
    pub checkpoints: Vec<CheckpointRow>,
    /// Runtime changes (the admin API's `PUT /rate`, pause, resume, stop), in order: who
    /// asked, when, the rate before and after, and the instant each worker's shards
    /// switched at (empty without).
    pub changes: Vec<ChangeRow>,
    /// Who stopped the run early (`admin`, `grpc`), when a stop request did: the workers
    /// ended at the stop's instant as at a scheduled end, and `duration_s` ends there.
    pub stopped_by: Option<String>,
    /// Self-check.
    pub checks: Checks,
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
                Target::Max => {}
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

/// One checkpoint as the report has it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct CheckpointRow {
    /// From 0.
    pub index: u32,
    /// Measured requests of the class done (issued and answered) at this point:
    /// (index + 1) × `--checkpoint-every`.
    pub requests: u64,
    /// When the last worker got there, seconds since the measured start.
    pub at_s: f64,
    /// Requests per second from the previous checkpoint's release (or the measured start)
    /// to this one: the class's throughput over that stretch, pauses excluded.
    pub rate: f64,
    /// How long the load waited here for the sample, ms.
    pub paused_ms: f64,
    /// `INFO memory` gauges, bytes (null when the server did not answer).
    pub used_memory: Option<u64>,
    /// `used_memory_rss`.
    pub used_memory_rss: Option<u64>,
    /// `used_memory_dataset`.
    pub used_memory_dataset: Option<u64>,
    /// `mem_fragmentation_ratio`.
    pub mem_fragmentation_ratio: Option<f64>,
    /// The probe's reply as text (an integer, a bulk string, an error's words; at most
    /// 200 bytes); null without `--probe`.
    pub probe: Option<String>,
    /// What went wrong reading the server here, if anything.
    pub error: Option<String>,
}

/// One worker's shards switching at a change.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Switched {
    /// The worker.
    pub worker: String,
    /// The earliest and latest instant its shards switched at, seconds since the measured
    /// start (the change's instant, unless it came late).
    pub first_s: f64,
    /// See `first_s`.
    pub last_s: f64,
}

/// A change as the report shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct ChangeRow {
    /// 1, 2, ... within the run.
    pub seq: u32,
    /// `rate`, `pause`, `resume`, `stop`.
    pub action: String,
    /// `admin`, `grpc`, `search`.
    pub by: String,
    /// When it was asked for, seconds since the measured start.
    pub asked_s: f64,
    /// The instant it takes effect, seconds since the measured start.
    pub at_s: f64,
    /// The open-loop classes' total rate just before and from the instant on, per second.
    pub from_rps: f64,
    /// See `from_rps`.
    pub to_rps: f64,
    /// Per class, the rate from the instant on (open-loop classes).
    pub classes: Vec<(String, f64)>,
    /// Each worker's switch, as it reported it (a worker lost before it did is missing).
    pub workers: Vec<Switched>,
}

/// Largest `report.json` [`Report::read`] reads: a day-long run at 10 ms intervals is
/// about 8.6 million timeline rows, far past what anyone renders; this bounds memory
/// against a wrong path (`/dev/zero`).
pub const MAX_REPORT_BYTES: u64 = 1 << 30;

impl Report {
    /// Reads a saved `report.json` ([`Report::from_json`]), at most [`MAX_REPORT_BYTES`].
    ///
    /// # Errors
    /// What is wrong, without the path: "cannot read it: …" (missing, unreadable, "larger
    /// than 1 GiB", not UTF-8), or what [`Report::from_json`] says.
    pub fn read(path: &std::path::Path) -> Result<Report, String> {
        let text = crest_model::file::read_text_capped(path, MAX_REPORT_BYTES)
            .map_err(|e| format!("cannot read it: {e}"))?;
        Report::from_json(&text)
    }

    /// Reads a `report.json` back: the same types it was written from.
    ///
    /// # Errors
    /// One line naming what is wrong: not JSON, not a Crest report, a schema version
    /// other than this build's [`SCHEMA_VERSION`] (newer: written by a newer Crest), or a
    /// key missing or of the wrong kind. Keys this build does not know are ignored.
    pub fn from_json(text: &str) -> Result<Report, String> {
        /// The one key read before the rest: which layout the text is in.
        #[derive(Deserialize)]
        struct Layout {
            schema_version: Option<u64>,
        }
        let layout: Layout = serde_json::from_str(text).map_err(|e| {
            if e.is_data() {
                format!("not a Crest report.json ({e})")
            } else {
                format!("not JSON ({e})")
            }
        })?;
        let Some(version) = layout.schema_version else {
            return Err("no schema_version: not a Crest report.json".into());
        };
        if version > u64::from(SCHEMA_VERSION) {
            return Err(format!(
                "schema_version {version} is newer than this crest reads ({SCHEMA_VERSION}): read it with the crest that wrote it, or a newer one"
            ));
        }
        if version < u64::from(SCHEMA_VERSION) {
            return Err(format!(
                "schema_version {version} is older than this crest reads ({SCHEMA_VERSION}): read it with the crest that wrote it"
            ));
        }
        serde_json::from_str(text).map_err(|e| format!("not a schema {SCHEMA_VERSION} report: {e}"))
    }

    /// The exit code for a run that produced this report: 0 when complete, 130 when it was
    /// interrupted (Ctrl-C, SIGTERM), 3 when a report was written but is incomplete
    /// otherwise (a worker was lost, or the books did not balance).
    pub fn exit_code(&self) -> u8 {
        if self.interrupted {
            130
        } else if self.complete {
            0
        } else {
            3
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fmt::human_us;
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
}
