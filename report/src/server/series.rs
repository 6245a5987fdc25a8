//! From samples to the report's `server` section: per-interval deltas of the counters,
//! gauges at each interval's end, the run's totals, and the truth check.
//!
//! A counter that went down between two samples (a server restart, `CONFIG RESETSTAT`)
//! has no delta: the row names it in `counter_reset` and leaves the value null, never a
//! negative or wrapped number; the truth check then says the counts cannot be compared.
//! A memcached target's samples are the same snapshots; its truth check is per counter
//! family ([`super::memcache`]) when [`Books::memcache`] says the run was memcached's.

use super::info::{CmdCounters, Snap};
use super::memcache::{COMMANDS, FamilyCheck, Keys, META, McBooks, TEXT, Unit};
use crate::fmt::{grouped, round2};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Commands a connection's setup sends (`HELLO`, `AUTH`, `SELECT`, `CLIENT SETNAME`,
/// `CLIENT TRACKING`) and the workers' probe (`ECHO`): real calls, but not load. Matched on
/// the name before `|` (`client|setname`).
pub const SETUP_COMMANDS: &[&str] = &["hello", "auth", "select", "client", "echo"];
/// What the sampler sends at every boundary (subtracted exactly, see [`Series`]).
pub const SAMPLER_COMMAND: &str = "info";

/// Where a sample was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// After the prefill, before the measured phase's plans went out: no load yet.
    BeforeLoad,
    /// At boundary `k` of the run clock: the measured start plus k intervals.
    Boundary(u32),
    /// After the last worker's finals (the drain is over).
    Final,
}

/// One `INFO` sample.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Where it was taken.
    pub mark: Mark,
    /// When its reply came, seconds since the measured start (negative before it).
    pub at_s: f64,
    /// Its reply came this long after the instant it was due, µs (0 for samples not on
    /// the clock).
    pub late_us: f64,
    /// How many `INFO`s the sampler had written before this one: the sampler's calls
    /// between two samples `a` and `b` are `b.seq - a.seq` (`a`'s own call, counted by the
    /// server after it answered, and any unanswered one in between).
    pub seq: u64,
    /// The reply.
    pub info: Snap,
}

/// Everything the sampler collected in a run.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Samples in the order taken.
    pub samples: Vec<Sample>,
    /// `INFO`s written that got no reply (timed out or the connection broke): each may or
    /// may not have run on the server.
    pub unanswered: u64,
    /// `io-threads` from `CONFIG GET io-threads` (None when the server refused it).
    pub io_threads: Option<u64>,
    /// What went wrong while sampling, one line each (missed boundaries, reconnects).
    pub notes: Vec<String>,
}

/// Per-command counter deltas in a span.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct CmdDelta {
    /// Δ calls (the sampler's own `INFO`s taken out of `info`).
    pub calls: u64,
    /// Δ rejected_calls (refused before running; not in `calls`).
    pub rejected_calls: u64,
    /// Δ failed_calls (ran and failed; in `calls`).
    pub failed_calls: u64,
    /// Δ usec: server time in the command, µs.
    pub usec: u64,
}

/// One span of the server's counters: an interval of the timeline, the warm-up, the
/// drain or the whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerRow {
    /// Interval index (the timeline's); null for the warm-up, drain and total spans.
    pub index: Option<u32>,
    /// Start of the span, seconds since the measured start (the timeline's `t_s`).
    pub t_s: f64,
    /// Length of the span between the two samples, seconds (their replies' times).
    pub span_s: f64,
    /// False when a sample at either end is missing: every value is then null.
    pub sampled: bool,
    /// Commands the server ran: Σ Δ(calls + rejected_calls) over every command except the
    /// sampler's `INFO`s and connection setup ([`SETUP_COMMANDS`]).
    pub ops: Option<u64>,
    /// `ops` per second: of the interval for a timeline row (as its `achieved_rate`), of
    /// `span_s` for the warm-up, drain and total.
    pub ops_per_sec: Option<f64>,
    /// Per command, lower case as the server names it (`get`, `config|get`); only those
    /// with a change; the sampler's `INFO`s taken out.
    pub commands: BTreeMap<String, CmdDelta>,
    /// Σ Δ rejected_calls of those commands.
    pub rejected_calls: Option<u64>,
    /// Σ Δ failed_calls of those commands.
    pub failed_calls: Option<u64>,
    /// Δ(used_cpu_user + used_cpu_sys), µs, less the server time of the sampler's `INFO`s
    /// (their `usec`); null without a cpu section.
    pub cpu_us: Option<u64>,
    /// `cpu_us / ops`: server CPU per command, µs.
    pub cpu_us_per_op: Option<f64>,
    /// Δ total_net_input_bytes.
    pub net_input_bytes: Option<u64>,
    /// Δ total_net_output_bytes.
    pub net_output_bytes: Option<u64>,
    /// Δ evicted_keys.
    pub evicted_keys: Option<u64>,
    /// Δ total_connections_received (memcached: total_connections): connections the
    /// server accepted, the sampler's and other clients' included.
    #[serde(default)]
    pub connections_received: Option<u64>,
    /// Δ expired_keys.
    pub expired_keys: Option<u64>,
    /// Δ keyspace_hits.
    pub keyspace_hits: Option<u64>,
    /// Δ keyspace_misses.
    pub keyspace_misses: Option<u64>,
    /// Δ errorstat counts by kind.
    pub errors: BTreeMap<String, u64>,
    /// Gauge at the span's end: used_memory, bytes.
    pub used_memory: Option<u64>,
    /// Gauge: used_memory_rss, bytes.
    pub used_memory_rss: Option<u64>,
    /// Gauge: mem_fragmentation_ratio.
    pub mem_fragmentation_ratio: Option<f64>,
    /// Gauge: connected_clients.
    pub connected_clients: Option<u64>,
    /// Gauge: keys over every database.
    pub keys: Option<u64>,
    /// Gauge: keys per database (`db0`).
    pub keys_by_db: BTreeMap<String, u64>,
    /// Counters that went down in this span (restart, `CONFIG RESETSTAT`): their deltas
    /// are null (commands: left out), never negative.
    pub counter_reset: Vec<String>,
}

/// One command of the truth check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Agreement {
    /// The report's command name (`SET`).
    pub command: String,
    /// What the server counted from the baseline to the last sample: Σ Δ(calls +
    /// rejected_calls) of the commands of that name (subcommands included).
    pub server: u64,
    /// What the report says was written.
    pub sent: u64,
    /// What the report says was answered by the server (completed + server error replies).
    pub answered: u64,
    /// `server − sent`.
    pub difference: i64,
    /// How far `server` may lie outside [`answered`, `sent`] and still agree: the start
    /// boundary's allowance (0 when the baseline was taken before any load).
    pub allowance: u64,
    /// `answered − allowance ≤ server ≤ sent + allowance` (true, not judged, for a
    /// command every connection's setup sends too: see `judged`).
    pub agrees: bool,
    /// False for a command the connections' setup or the workers' probe sends as well
    /// ([`SETUP_COMMANDS`]: a workload of `ECHO` or `CLIENT ...`): the server's count
    /// holds every connection's and reconnect's setup, which no report counts.
    pub judged: bool,
    /// A memcached run's family: `command` names it and its commands (`cmd_get (GET +
    /// MGET keys)`), `sent` and `server` count as memcached counts (keys of a multi-get),
    /// `answered` is the requests completed without an error (memcached counts no request
    /// it answers with one). Absent for a Redis-protocol server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcache: Option<FamilyCheck>,
}

/// The name before `|`.
fn base(name: &str) -> &str {
    name.split('|').next().unwrap_or(name)
}

/// True for a setup command's name.
pub fn is_setup(name: &str) -> bool {
    SETUP_COMMANDS.contains(&base(name))
}

/// `b − a` of a counter; None (and `name` pushed on `reset`) when it went down; None when
/// either is missing.
fn counter(a: Option<u64>, b: Option<u64>, name: &str, reset: &mut Vec<String>) -> Option<u64> {
    let (a, b) = (a?, b?);
    if b < a {
        reset.push(name.to_string());
        return None;
    }
    Some(b - a)
}

/// The deltas from sample `a` to sample `b`, the gauges of `b`; `t_s` the span's start.
pub fn row(a: &Sample, b: &Sample, index: Option<u32>, t_s: f64) -> ServerRow {
    let (ia, ib) = (&a.info, &b.info);
    let mut reset = Vec::new();
    let sampler_calls = b.seq.saturating_sub(a.seq);
    let mut commands = BTreeMap::new();
    let mut sampler_usec = 0u64;
    for (name, cb) in &ib.commands {
        let ca = ia.commands.get(name).copied().unwrap_or_default();
        if cb.calls < ca.calls
            || cb.rejected_calls < ca.rejected_calls
            || cb.failed_calls < ca.failed_calls
            || cb.usec < ca.usec
        {
            reset.push(format!("cmdstat_{name}"));
            continue;
        }
        let mut d = CmdDelta {
            calls: cb.calls - ca.calls,
            rejected_calls: cb.rejected_calls - ca.rejected_calls,
            failed_calls: cb.failed_calls - ca.failed_calls,
            usec: cb.usec - ca.usec,
        };
        if name == SAMPLER_COMMAND && d.calls > 0 {
            // The sampler's share of the INFO time, out of the CPU figure too.
            let ours = sampler_calls.min(d.calls);
            sampler_usec = d.usec * ours / d.calls;
            d.usec -= sampler_usec;
            d.calls -= ours;
        }
        if d != CmdDelta::default() {
            commands.insert(name.clone(), d);
        }
    }
    // A command the later sample no longer lists was reset (RESETSTAT clears the list).
    for (name, ca) in &ia.commands {
        if !ib.commands.contains_key(name) && *ca != CmdCounters::default() {
            reset.push(format!("cmdstat_{name}"));
        }
    }
    let load: Vec<&CmdDelta> = commands
        .iter()
        .filter(|(n, _)| !is_setup(n))
        .map(|(_, d)| d)
        .collect();
    let ops: u64 = load.iter().map(|d| d.calls + d.rejected_calls).sum();
    let span_s = b.at_s - a.at_s;
    let cpu = counter(
        ia.cpu_us(),
        ib.cpu_us(),
        "used_cpu_user+used_cpu_sys",
        &mut reset,
    )
    .map(|c| c.saturating_sub(sampler_usec));
    let mut c = |field: &str| counter(ia.uint(field), ib.uint(field), field, &mut reset);
    let net_input_bytes = c("total_net_input_bytes");
    let net_output_bytes = c("total_net_output_bytes");
    let evicted_keys = c("evicted_keys");
    let connections_received = c("total_connections_received");
    let expired_keys = c("expired_keys");
    let keyspace_hits = c("keyspace_hits");
    let keyspace_misses = c("keyspace_misses");
    let mut errors = BTreeMap::new();
    for (kind, nb) in &ib.errors {
        let na = ia.errors.get(kind).copied().unwrap_or(0);
        if *nb < na {
            reset.push(format!("errorstat_{kind}"));
        } else if *nb > na {
            errors.insert(kind.clone(), nb - na);
        }
    }
    ServerRow {
        index,
        t_s,
        span_s: (span_s * 1e6).round() / 1e6,
        sampled: true,
        ops: Some(ops),
        ops_per_sec: (span_s > 0.0).then(|| round2(ops as f64 / span_s)),
        rejected_calls: Some(load.iter().map(|d| d.rejected_calls).sum()),
        failed_calls: Some(load.iter().map(|d| d.failed_calls).sum()),
        commands,
        cpu_us: cpu,
        cpu_us_per_op: cpu
            .filter(|_| ops > 0)
            .map(|c| round2(c as f64 / ops as f64)),
        net_input_bytes,
        net_output_bytes,
        evicted_keys,
        connections_received,
        expired_keys,
        keyspace_hits,
        keyspace_misses,
        errors,
        used_memory: ib.uint("used_memory"),
        used_memory_rss: ib.uint("used_memory_rss"),
        mem_fragmentation_ratio: ib.float("mem_fragmentation_ratio"),
        connected_clients: ib.uint("connected_clients"),
        keys: Some(ib.keys()),
        keys_by_db: ib.dbs.iter().map(|(d, k)| (d.clone(), k.keys)).collect(),
        counter_reset: reset,
    }
}

/// A row with no samples at one end.
fn missing(index: Option<u32>, t_s: f64) -> ServerRow {
    ServerRow {
        index,
        t_s,
        ..ServerRow::default()
    }
}

/// The server as its `INFO server` and `INFO memory` describe it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerIdentity {
    /// `valkey 8.1.8`, `redis 7.0.15`, `memcached 1.6.18`, or `crest-sink 7.0.0` for the
    /// built-in target.
    pub version: String,
    /// `redis_version` (Valkey reports the Redis version it is compatible with).
    pub redis_version: Option<String>,
    /// `valkey_version`; null on Redis.
    pub valkey_version: Option<String>,
    /// `mem_allocator` (`jemalloc-5.3.0`, `libc`).
    pub mem_allocator: Option<String>,
    /// `io_threads_active` (INFO server/stats): 1 while I/O threads run.
    pub io_threads_active: Option<u64>,
    /// `io-threads` (`CONFIG GET io-threads`); null when the server refused CONFIG.
    pub io_threads: Option<u64>,
    /// `maxmemory`, bytes (0: no limit).
    pub maxmemory: Option<u64>,
}

impl ServerIdentity {
    /// Read off one sample.
    pub fn of(info: &Snap, io_threads: Option<u64>) -> Self {
        let redis = info.text("redis_version").map(str::to_string);
        let valkey = info.text("valkey_version").map(str::to_string);
        let version = match (&valkey, &redis) {
            (None, None) if let Some(m) = info.text("memcached_version") => {
                format!("memcached {m}")
            }
            (Some(v), _) => format!("valkey {v}"),
            (None, Some(r)) if info.text("crest_sink") == Some("1") => format!("crest-sink {r}"),
            (None, Some(r)) => format!("redis {r}"),
            (None, None) => "unknown".into(),
        };
        Self {
            version,
            redis_version: redis,
            valkey_version: valkey,
            mem_allocator: info.text("mem_allocator").map(str::to_string),
            io_threads_active: info.uint("io_threads_active"),
            io_threads,
            maxmemory: info.uint("maxmemory"),
        }
    }
}

/// The report's `server` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerReport {
    /// Which server.
    #[serde(flatten)]
    pub identity: ServerIdentity,
    /// Where the truth check's baseline sample was taken: `before_load` (after the
    /// prefill, before any measured request: exact) or `measured_start` (the end of the
    /// warm-up, whose requests reach the server but are in no count: see `allowance`).
    pub baseline: String,
    /// `INFO` calls the sampler made in the sampled span, as the server counts them: the
    /// baseline's and every later one's but the final's own (a command is counted after it
    /// answered). Taken out of every `info` figure. The server's `cmdstat_info` grows by
    /// this plus two over a run: the check at connect and the final sample.
    pub sampler_calls: u64,
    /// Of them, without a reply (each may or may not have run).
    pub sampler_unanswered: u64,
    /// Server time of the sampler's `INFO`s over the run (their commandstats `usec`), µs.
    pub sampler_usec: u64,
    /// Largest delay of a boundary sample's reply after its boundary, µs.
    pub sample_late_max_us: f64,
    /// One row per timeline interval, `index` aligned with the timeline's.
    pub intervals: Vec<ServerRow>,
    /// From the baseline before load to the measured start (null without a warm-up).
    pub warmup: Option<ServerRow>,
    /// From the last interval boundary to the final sample after the drain.
    pub drain: Option<ServerRow>,
    /// From the baseline to the final sample (the truth check's span).
    pub total: ServerRow,
    /// The truth check, per command the report counts.
    pub agreement: Vec<Agreement>,
    /// True when every command agrees; null when the counts cannot be compared
    /// (`unchecked` says why).
    pub agrees: Option<bool>,
    /// The server's own latency percentiles per command the run sent (INFO
    /// latencystats at the final sample, µs: `p50`, `p99`, `p99.9`), lower case → them.
    /// Cumulative since the server's stats were last reset (a restart or `CONFIG
    /// RESETSTAT`), not this run's alone; empty where the server has no latencystats.
    pub latency_percentiles_usec: BTreeMap<String, BTreeMap<String, f64>>,
    /// Why there is no truth check: no sample after the drain (the server stopped
    /// answering), the server restarted (`run_id` changed), or a counter went down
    /// (`CONFIG RESETSTAT`); null when there is one.
    pub unchecked: Option<String>,
    /// Commands the server ran that crest did not send (setup and the sampler excluded):
    /// another client's, listed, not judged.
    pub other_commands: BTreeMap<String, u64>,
    /// What went wrong while sampling.
    pub notes: Vec<String>,
}

/// One command's counts as the report has them (summed over classes), for the truth check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Requests written.
    pub sent: u64,
    /// Requests the server answered: non-error replies and server error replies (not
    /// timeouts or disconnects, which the client decides).
    pub answered: u64,
    /// Of them, non-error replies (memcached counts no request it answers with an error).
    pub completed: u64,
    /// Misses among them: nil replies, and a multi-get's missing keys.
    pub misses: u64,
}

/// What the truth check needs from the rest of the report.
pub struct Books<'a> {
    /// Per command (summed over classes), as the report has them.
    pub commands: &'a BTreeMap<String, Sent>,
    /// Timeline rows.
    pub rows: usize,
    /// Interval length, s.
    pub interval_s: f64,
    /// The run had a warm-up: the baseline is at the measured start.
    pub warmup: bool,
    /// Σ connections × pipeline over classes: the most requests in flight at any instant.
    pub in_flight_max: u64,
    /// The first interval's achieved rate, requests per second (the warm-up's boundary
    /// allowance).
    pub first_rate: f64,
    /// The target was a Redis Cluster: the sampler read the seed node only, whose counts
    /// are its share of the run, so they are shown, not judged.
    pub cluster: bool,
    /// Reads went to a standalone primary's replicas (`--read-from`): the sampler read
    /// the primary only, so its counts leave the replicas' share out.
    pub replica_reads: bool,
    /// Commands the coordinator sent the target itself in the span (checkpoints' `INFO
    /// memory` and probe), lower case → calls: taken out of the server's counts.
    pub coordinator_calls: &'a BTreeMap<String, u64>,
    /// Why the report's books hold less than reached the server, if they do: a worker
    /// lost (what it sent after its last interval is in no book) or the run interrupted
    /// (what was in flight when it stopped). A server that counted more is then expected:
    /// its counts are shown, not judged.
    pub short: Option<String>,
    /// The server's first words when it refused connections (`ERR max number of clients
    /// reached`): requests written on them were answered without being run, so a server
    /// that counted fewer than were sent is explained.
    pub refused: Option<String>,
    /// The target was memcached (its `stats` sampled): the truth check is per counter
    /// family (`memcache_agreement`, with [`TEXT`] or [`META`]). None for a Redis-protocol target.
    pub memcache: Option<McBooks<'a>>,
}

/// Builds the `server` section from the samples; the second value is the truth check's
/// problem line when the server disagrees, for the report's `checks`.
pub fn report(series: &Series, books: &Books<'_>) -> Option<(ServerReport, Option<String>)> {
    let find = |m: Mark| sample_at(series, m);
    let before = find(Mark::BeforeLoad);
    let start = find(Mark::Boundary(0));
    let baseline = if books.warmup {
        start
    } else {
        before.or(start)
    }?;
    let final_ = find(Mark::Final);
    let last = final_.or_else(|| series.samples.last())?;
    let identity = ServerIdentity::of(&last.info, series.io_threads);
    let rows = u32::try_from(books.rows).unwrap_or(u32::MAX);
    let intervals = interval_rows(series, books, rows, baseline, final_);
    let end_s = round2(f64::from(rows) * books.interval_s);
    let drain_from = if rows == 0 {
        Some(baseline)
    } else {
        find(Mark::Boundary(rows))
    };
    let drain = match drain_from {
        Some(a) if !std::ptr::eq(a, last) => Some(row(a, last, None, end_s)),
        _ => None,
    };
    let warmup = match (books.warmup, before, start) {
        (true, Some(a), Some(b)) => Some(row(a, b, None, -(b.at_s - a.at_s).max(0.0))),
        _ => None,
    };
    let total = total_row(baseline, last, books);
    let late_max = series
        .samples
        .iter()
        .filter(|s| matches!(s.mark, Mark::Boundary(_)))
        .map(|s| s.late_us)
        .fold(0.0, f64::max);
    let allowance = boundary_allowance(series, books);
    let (agreement, counted) = match &books.memcache {
        Some(mc) => memcache_agreement(&total, &baseline.info, &last.info, books, mc, allowance),
        None => agreement(&total, books, allowance),
    };
    let other_commands = other_commands(&total, books, &counted);
    let restarted = baseline.info.text("run_id") != last.info.text("run_id");
    let went_down = went_down(&total, &intervals, drain.as_ref());
    let unchecked = unchecked(
        books.cluster,
        books.replica_reads,
        final_.is_none(),
        restarted,
        &went_down,
    );
    let agrees = match unchecked {
        Some(_) => None,
        None => Some(agreement.iter().all(|a| a.agrees)),
    };
    // What the books lack, or the server never ran, explains a difference in one
    // direction: then the counts are shown, not judged.
    let differences = |sign: i64| {
        agreement
            .iter()
            .all(|a| a.agrees || a.difference.signum() == sign)
            .then(|| {
                agreement
                    .iter()
                    .filter(|a| !a.agrees)
                    .map(|a| format!("{} {}", a.command, signed(a.difference)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
    };
    let explained = match (agrees, &books.short, &books.refused) {
        (Some(false), Some(why), _) => differences(1).map(|d| {
            format!("{why}, so the server counted requests the report does not have ({d}): shown, not judged")
        }),
        (Some(false), None, Some(words)) => differences(-1).map(|d| {
            format!(
                "the server refused connections (\"{words}\"): requests written on them were answered without being run, so it counted fewer than were sent ({d}): shown, not judged"
            )
        }),
        _ => None,
    };
    let (unchecked, agrees) = match explained {
        Some(why) => (Some(why), None),
        None => (unchecked, agrees),
    };
    let problem = match agrees {
        Some(false) => Some(disagreement_words(&agreement, &other_commands)),
        _ => None,
    };
    let sampler_usec = total_sampler_usec(baseline, last);
    Some((
        ServerReport {
            identity,
            baseline: if books.warmup || before.is_none() {
                "measured_start"
            } else {
                "before_load"
            }
            .into(),
            sampler_calls: last.seq.saturating_sub(baseline.seq),
            sampler_unanswered: series.unanswered,
            sampler_usec,
            sample_late_max_us: (late_max * 10.0).round() / 10.0,
            intervals,
            warmup,
            drain,
            total,
            agreement,
            agrees,
            latency_percentiles_usec: last
                .info
                .latency
                .iter()
                .filter(|(n, _)| counted.contains(base(n)))
                .map(|(n, p)| (n.clone(), p.clone()))
                .collect(),
            unchecked,
            other_commands,
            notes: series.notes.clone(),
        },
        problem,
    ))
}

/// The first sample taken at `mark`.
fn sample_at(series: &Series, mark: Mark) -> Option<&Sample> {
    series.samples.iter().find(|s| s.mark == mark)
}

/// One row per timeline interval (`rows` of them): from its start boundary (the baseline
/// for the first) to its end boundary, or a row without samples where one is missing.
fn interval_rows(
    series: &Series,
    books: &Books<'_>,
    rows: u32,
    baseline: &Sample,
    final_: Option<&Sample>,
) -> Vec<ServerRow> {
    let find = |m: Mark| sample_at(series, m);
    let mut intervals = Vec::with_capacity(books.rows);
    for k in 0..rows {
        let t_s = round2(f64::from(k) * books.interval_s);
        let a = if k == 0 {
            Some(baseline)
        } else {
            find(Mark::Boundary(k))
        };
        // The last row of a run that ended before its boundary (a count-bound closed
        // loop, whose last interval is partial) ends at the final sample instead.
        let b = find(Mark::Boundary(k + 1)).or_else(|| {
            let later = series
                .samples
                .iter()
                .any(|s| matches!(s.mark, Mark::Boundary(j) if j > k));
            (k + 1 == rows && !later).then_some(final_).flatten()
        });
        intervals.push(match (a, b) {
            (Some(a), Some(b)) => {
                let mut r = row(a, b, Some(k), t_s);
                // Per the interval, as the timeline's rates: the first row's span starts
                // at the baseline before load, up to a start lead earlier.
                r.ops_per_sec = r
                    .ops
                    .filter(|_| books.interval_s > 0.0)
                    .map(|o| round2(o as f64 / books.interval_s));
                r
            }
            _ => missing(Some(k), t_s),
        });
    }
    intervals
}

/// The whole run's row, from the baseline to the last sample, less the commands the
/// coordinator sent the target itself.
fn total_row(baseline: &Sample, last: &Sample, books: &Books<'_>) -> ServerRow {
    let mut total = row(baseline, last, None, 0.0);
    // The checkpoints' own INFO memory and probe calls are not the load's.
    let ours: u64 = books
        .coordinator_calls
        .iter()
        .filter(|(n, _)| !is_setup(n))
        .map(|(_, c)| c)
        .sum();
    if ours > 0
        && let Some(ops) = total.ops.map(|o| o.saturating_sub(ours))
    {
        total.ops = Some(ops);
        total.ops_per_sec = (total.span_s > 0.0).then(|| round2(ops as f64 / total.span_s));
        total.cpu_us_per_op = total
            .cpu_us
            .filter(|_| ops > 0)
            .map(|c| round2(c as f64 / ops as f64));
    }
    total
}

/// How far the server's count may lie outside what was sent and answered and still agree
/// (0 without a warm-up).
fn boundary_allowance(series: &Series, books: &Books<'_>) -> u64 {
    // The warm-up boundary: warm-up requests still in flight at the measured start reach
    // the server after the baseline, and measured ones sent before the baseline's reply
    // came reach it before.
    if books.warmup {
        let late_s = sample_at(series, Mark::Boundary(0)).map_or(0.0, |s| s.late_us / 1e6);
        books.in_flight_max + (books.first_rate * late_s).ceil() as u64
    } else {
        0
    }
}

/// The truth check of each command the report counts against the server's `total`, and
/// the lower-case names it checked.
fn agreement(
    total: &ServerRow,
    books: &Books<'_>,
    allowance: u64,
) -> (Vec<Agreement>, BTreeSet<String>) {
    let mut agreement = Vec::new();
    let mut counted = BTreeSet::new();
    for (name, s) in books.commands {
        let lower = name.to_ascii_lowercase();
        let server: u64 = total
            .commands
            .iter()
            .filter(|(n, _)| base(n) == lower)
            .map(|(_, d)| d.calls + d.rejected_calls)
            .sum::<u64>()
            .saturating_sub(books.coordinator_calls.get(&lower).copied().unwrap_or(0));
        counted.insert(lower.clone());
        let answered = s.answered;
        agreement.push(Agreement {
            command: name.clone(),
            server,
            sent: s.sent,
            answered,
            difference: i64::try_from(server).unwrap_or(i64::MAX)
                - i64::try_from(s.sent).unwrap_or(i64::MAX),
            allowance,
            agrees: is_setup(&lower)
                || (answered.saturating_sub(allowance) <= server
                    && server <= s.sent.saturating_add(allowance)),
            judged: !is_setup(&lower),
            memcache: None,
        });
    }
    (agreement, counted)
}

/// The commands the server ran that crest did not send (setup, the `counted` ones and
/// the coordinator's own calls left out), with their calls.
fn other_commands(
    total: &ServerRow,
    books: &Books<'_>,
    counted: &BTreeSet<String>,
) -> BTreeMap<String, u64> {
    total
        .commands
        .iter()
        .filter(|(n, _)| !is_setup(n) && !counted.contains(base(n)))
        .map(|(n, d)| {
            let ours = books
                .coordinator_calls
                .get(n.as_str())
                .copied()
                .unwrap_or(0);
            (n.clone(), (d.calls + d.rejected_calls).saturating_sub(ours))
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The counters that went down over the run: the total's, then each interval's and the
/// drain's, each named once.
fn went_down(total: &ServerRow, intervals: &[ServerRow], drain: Option<&ServerRow>) -> Vec<String> {
    let mut went_down: Vec<String> = total.counter_reset.clone();
    for r in intervals.iter().chain(drain) {
        for c in &r.counter_reset {
            if !went_down.contains(c) {
                went_down.push(c.clone());
            }
        }
    }
    went_down
}

/// Why the counts cannot be compared (a cluster, no final sample, a restart, counters
/// that went down); None when they can.
fn unchecked(
    cluster: bool,
    replica_reads: bool,
    no_final: bool,
    restarted: bool,
    went_down: &[String],
) -> Option<String> {
    if cluster {
        Some(
            "a cluster: the sampler reads the seed node only (sampling every node is not built), so its counts are that node's share of the run"
                .to_string(),
        )
    } else if replica_reads {
        Some(
            "reads went to replicas (--read-from): the sampler reads the primary only, so its counts leave out what the replicas answered"
                .to_string(),
        )
    } else if no_final {
        Some("no sample after the drain: the server did not answer INFO at the end".to_string())
    } else if restarted {
        Some(
            "the server restarted during the run (its run_id changed): its counts start over"
                .to_string(),
        )
    } else if !went_down.is_empty() {
        Some(format!(
            "server counters went down during the run ({}): the server restarted or its stats were reset",
            went_down.join(", ")
        ))
    } else {
        None
    }
}

/// Server time of the sampler's INFO calls from `a` to `b`, µs (their share of Δusec).
fn total_sampler_usec(a: &Sample, b: &Sample) -> u64 {
    let ca = a
        .info
        .commands
        .get(SAMPLER_COMMAND)
        .copied()
        .unwrap_or_default();
    let Some(cb) = b.info.commands.get(SAMPLER_COMMAND).copied() else {
        return 0;
    };
    let (calls, usec) = (
        cb.calls.saturating_sub(ca.calls),
        cb.usec.saturating_sub(ca.usec),
    );
    let ours = b.seq.saturating_sub(a.seq).min(calls);
    (usec * ours).checked_div(calls).unwrap_or(0)
}

fn signed(d: i64) -> String {
    let sign = if d < 0 { "-" } else { "+" };
    format!("{sign}{}", grouped(d.unsigned_abs()))
}

/// One command that disagrees, in words.
fn differs(a: &Agreement) -> String {
    if a.memcache.is_some() {
        return format!(
            "{} {} by the server vs {} sent by crest ({}; {} completed, the rest of the sent unanswered or answered with an error; boundary allowance {})",
            a.command,
            grouped(a.server),
            grouped(a.sent),
            signed(a.difference),
            grouped(a.answered),
            grouped(a.allowance)
        );
    }
    format!(
        "{} {} by the server vs {} sent by crest ({}; {} answered, the rest of the sent unanswered; boundary allowance {})",
        a.command,
        grouped(a.server),
        grouped(a.sent),
        signed(a.difference),
        grouped(a.answered),
        grouped(a.allowance)
    )
}

/// What a disagreement is put down to when nothing else explains it.
const ANOTHER_CLIENT: &str = "another client is using this server, or requests went missing";

/// The truth check's problem line: the commands that disagree first, then the rest.
pub fn disagreement_words(agreement: &[Agreement], other: &BTreeMap<String, u64>) -> String {
    let bad: Vec<String> = agreement
        .iter()
        .filter(|a| !a.agrees)
        .map(differs)
        .collect();
    let good: Vec<Agreement> = agreement.iter().filter(|a| a.agrees).cloned().collect();
    let mut line = format!("server disagrees: {}: {ANOTHER_CLIENT}", bad.join(", "));
    let rest = agreement_words(&good, other);
    if !rest.is_empty() {
        line.push_str(&format!("; agrees: {rest}"));
    }
    line
}

/// Each command's comparison in words: `SET 181,818 = 181,818`, or the difference named.
pub fn agreement_words(agreement: &[Agreement], other: &BTreeMap<String, u64>) -> String {
    let mut parts: Vec<String> = agreement
        .iter()
        .map(|a| {
            if let Some(m) = &a.memcache {
                return family_words(a, m);
            }
            if !a.judged {
                format!(
                    "{} {} by the server, {} sent (not judged: connection setup sends it too)",
                    a.command,
                    grouped(a.server),
                    grouped(a.sent)
                )
            } else if a.server == a.sent && a.answered == a.sent {
                format!("{} {} = {}", a.command, grouped(a.server), grouped(a.sent))
            } else if a.agrees {
                format!(
                    "{} {} by the server, {} sent, {} answered (the rest unanswered{})",
                    a.command,
                    grouped(a.server),
                    grouped(a.sent),
                    grouped(a.answered),
                    if a.allowance > 0 {
                        format!(", ±{} at the warm-up's end", grouped(a.allowance))
                    } else {
                        String::new()
                    }
                )
            } else {
                differs(a)
            }
        })
        .collect();
    if !other.is_empty() {
        let list: Vec<String> = other
            .iter()
            .map(|(n, c)| format!("{} {}", n.to_ascii_uppercase(), grouped(*c)))
            .collect();
        parts.push(format!("commands crest did not send: {}", list.join(", ")));
    }
    parts.join(", ")
}

/// A memcached family's comparison in words: as a command's, with the server's hits and
/// misses beside the report's misses.
fn family_words(a: &Agreement, m: &FamilyCheck) -> String {
    if let Some(why) = &m.not_judged {
        return format!("{} {} sent (not judged: {why})", a.command, grouped(a.sent));
    }
    let head = if a.server == a.sent && a.answered == a.sent {
        format!("{} {} = {}", a.command, grouped(a.server), grouped(a.sent))
    } else if a.agrees {
        format!(
            "{} {} by the server, {} sent, {} completed (the rest unanswered or answered with an error{})",
            a.command,
            grouped(a.server),
            grouped(a.sent),
            grouped(a.answered),
            if a.allowance > 0 {
                format!(", ±{} at the warm-up's end", grouped(a.allowance))
            } else {
                String::new()
            }
        )
    } else {
        differs(a)
    };
    match (m.server_hits, m.server_misses) {
        (Some(h), Some(x)) => format!(
            "{head} (hits {}, misses {} by the server; {} misses in the report)",
            grouped(h),
            grouped(x),
            grouped(m.misses)
        ),
        _ if m.misses > 0 => format!("{head} ({} misses in the report)", grouped(m.misses)),
        _ => head,
    }
}

/// memcached: Σ Δ of counters `names` from `a` to `b`; None when `names` is empty or one is missing.
fn delta(a: &Snap, b: &Snap, names: &[&str]) -> Option<u64> {
    if names.is_empty() {
        return None;
    }
    names.iter().try_fold(0u64, |acc, n| {
        let (x, y) = (a.counters.get(*n)?, b.counters.get(*n)?);
        Some(acc.saturating_add(y.saturating_sub(*x)))
    })
}

/// The truth check of a memcached run: one [`Agreement`] per family the report's commands
/// fall in (in the table's order), then one per command no family places; and the
/// command-table names it compared (for `other_commands`). `total` is the span's row,
/// `a` and `b` its samples, `allowance` the warm-up boundary's in requests.
fn memcache_agreement(
    total: &ServerRow,
    a: &Snap,
    b: &Snap,
    books: &Books<'_>,
    mc: &McBooks<'_>,
    allowance: u64,
) -> (Vec<Agreement>, BTreeSet<String>) {
    let table = if mc.meta { META } else { TEXT };
    let placed = |name: &str| {
        table
            .iter()
            .any(|f| f.commands.iter().any(|(c, _)| *c == name))
    };
    let unplaced: Vec<&String> = books.commands.keys().filter(|c| !placed(c)).collect();
    let blame = (!unplaced.is_empty()).then(|| {
        let list: Vec<&str> = unplaced.iter().map(|s| s.as_str()).collect();
        format!(
            "the run sent {}, which memcached's families do not place: it may move any counter",
            list.join(", ")
        )
    });
    let mut out = Vec::new();
    let mut counted = BTreeSet::new();
    for f in table {
        let mut commands = BTreeMap::new();
        let (mut sent, mut completed, mut misses, mut widest) = (0u64, 0u64, 0u64, 1u64);
        for (name, unit) in f.commands {
            let Some(s) = books.commands.get(*name) else {
                continue;
            };
            let k = match (unit, mc.keys.get(*name)) {
                (Unit::Key, Some(k)) => *k,
                _ => Keys::per_request(s.sent, s.completed, 1),
            };
            if s.sent > 0 {
                widest = widest.max(k.sent.div_ceil(s.sent));
            }
            commands.insert((*name).to_string(), k.sent);
            sent = sent.saturating_add(k.sent);
            completed = completed.saturating_add(k.completed);
            misses = misses.saturating_add(s.misses);
        }
        if commands.is_empty() {
            continue;
        }
        let server: u64 = f
            .counts
            .iter()
            .filter_map(|c| total.commands.get(*c))
            .map(|d| d.calls + d.rejected_calls)
            .sum();
        counted.extend(f.counts.iter().map(|c| (*c).to_string()));
        let allowance = allowance.saturating_mul(widest);
        let not_judged = if f.counts.is_empty() {
            Some("memcached counts no version or mn".to_string())
        } else {
            blame.clone()
        };
        let judged = not_judged.is_none();
        let label: Vec<String> = commands
            .iter()
            .map(|(c, n)| {
                let per_key = books.commands.get(c).is_some_and(|s| s.sent != *n);
                if per_key {
                    format!("{c} keys")
                } else {
                    c.clone()
                }
            })
            .collect();
        out.push(Agreement {
            command: if f.counts.is_empty() {
                label.join(" + ")
            } else {
                format!("{} ({})", f.name, label.join(" + "))
            },
            server,
            sent,
            answered: completed,
            difference: i64::try_from(server).unwrap_or(i64::MAX)
                - i64::try_from(sent).unwrap_or(i64::MAX),
            allowance,
            agrees: !judged
                || (completed.saturating_sub(allowance) <= server
                    && server <= sent.saturating_add(allowance)),
            judged,
            memcache: Some(FamilyCheck {
                counter: if f.counts.is_empty() {
                    "none".into()
                } else {
                    f.counts
                        .iter()
                        .flat_map(|c| {
                            COMMANDS
                                .iter()
                                .filter(move |(n, _)| n == c)
                                .flat_map(|(_, parts)| parts.iter())
                        })
                        .copied()
                        .collect::<Vec<_>>()
                        .join("+")
                },
                commands,
                completed,
                server_hits: delta(a, b, f.hits),
                server_misses: delta(a, b, f.misses),
                misses,
                not_judged,
            }),
        });
    }
    for name in unplaced {
        let s = books.commands.get(name).copied().unwrap_or(Sent {
            sent: 0,
            answered: 0,
            completed: 0,
            misses: 0,
        });
        out.push(Agreement {
            command: name.clone(),
            server: 0,
            sent: s.sent,
            answered: s.completed,
            difference: 0,
            allowance: 0,
            agrees: true,
            judged: false,
            memcache: Some(FamilyCheck {
                counter: "none".into(),
                commands: [(name.clone(), s.sent)].into(),
                completed: s.completed,
                misses: s.misses,
                not_judged: Some("no family of memcached's counters places it".into()),
                ..FamilyCheck::default()
            }),
        });
    }
    (out, counted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(mark: Mark, seq: u64, at_s: f64, text: &str) -> Sample {
        Sample {
            mark,
            at_s,
            late_us: 0.0,
            seq,
            info: crate::server::info::Info::parse(text).into(),
        }
    }

    fn info(set: u64, info: u64, cpu_s: f64, hits: u64) -> String {
        format!(
            "used_cpu_user:{cpu_s:.6}\r\nused_cpu_sys:0.000000\r\nkeyspace_hits:{hits}\r\nused_memory:{}\r\ncmdstat_set:calls={set},usec={set},usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls={info},usec={},usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\ncmdstat_hello:calls=3,usec=3,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\ndb0:keys={set},expires=0,avg_ttl=0\r\n",
            1000 + set,
            info * 30
        )
    }

    #[test]
    fn deltas_take_the_samplers_info_out() {
        // The sampler's INFO #5 was answered by sample a; b (INFO #6) counts it.
        let a = sample(Mark::Boundary(1), 5, 1.0, &info(100, 10, 1.0, 7));
        let b = sample(Mark::Boundary(2), 6, 2.0, &info(350, 11, 1.0025, 9));
        let r = row(&a, &b, Some(1), 1.0);
        assert_eq!(r.ops, Some(250));
        assert!(!r.commands.contains_key("info"), "{:?}", r.commands);
        assert_eq!(r.commands["set"].calls, 250);
        // 2500 µs of CPU less the sampler's 30 µs of INFO.
        assert_eq!(r.cpu_us, Some(2470));
        assert_eq!(r.cpu_us_per_op, Some(9.88));
        assert_eq!(r.keyspace_hits, Some(2));
        assert_eq!(r.used_memory, Some(1350));
        assert_eq!(r.keys, Some(350));
        assert!(r.counter_reset.is_empty());
        // Someone else's INFO stays in.
        let c = sample(Mark::Boundary(3), 7, 3.0, &info(350, 13, 1.0025, 9));
        assert_eq!(row(&b, &c, Some(2), 2.0).commands["info"].calls, 1);
    }

    #[test]
    fn a_counter_that_goes_down_is_flagged_never_negative() {
        let a = sample(Mark::Boundary(1), 5, 1.0, &info(1000, 10, 5.0, 70));
        // CONFIG RESETSTAT: commandstats and hits start over; the CPU does not.
        let b = sample(Mark::Boundary(2), 6, 2.0, &info(40, 1, 5.1, 2));
        let r = row(&a, &b, Some(1), 1.0);
        assert!(
            r.counter_reset.contains(&"cmdstat_set".to_string()),
            "{r:?}"
        );
        assert!(
            r.counter_reset.contains(&"keyspace_hits".to_string()),
            "{r:?}"
        );
        assert_eq!(r.keyspace_hits, None);
        assert!(!r.commands.contains_key("set"));
        assert_eq!(r.ops, Some(0), "no made-up count");
        // A restart: the CPU counter goes back too, and commands vanish.
        let c = sample(
            Mark::Boundary(3),
            7,
            3.0,
            "used_cpu_user:0.01\r\nused_cpu_sys:0.0\r\n",
        );
        let r = row(&b, &c, Some(2), 2.0);
        assert_eq!(r.cpu_us, None);
        assert!(
            r.counter_reset.iter().any(|c| c.starts_with("used_cpu")),
            "{r:?}"
        );
        assert!(
            r.counter_reset.contains(&"cmdstat_set".to_string()),
            "{r:?}"
        );
    }

    fn summary(sent: u64, completed: u64) -> Sent {
        Sent {
            sent,
            answered: completed,
            completed,
            misses: 0,
        }
    }

    fn books(commands: &BTreeMap<String, Sent>, warmup: bool) -> Books<'_> {
        Books {
            commands,
            rows: 2,
            interval_s: 1.0,
            warmup,
            in_flight_max: 4,
            first_rate: 100.0,
            cluster: false,
            replica_reads: false,
            coordinator_calls: &NONE,
            short: None,
            refused: None,
            memcache: None,
        }
    }

    /// A lost worker or an interrupt explains a server that counted more; refused
    /// connections one that counted fewer; neither explains the other direction.
    #[test]
    fn the_truth_check_names_a_lost_worker_or_refused_connections() {
        let series = Series {
            samples: vec![
                sample(Mark::BeforeLoad, 1, -1.0, &info(0, 1, 0.0, 0)),
                sample(Mark::Boundary(1), 2, 1.0, &info(100, 2, 0.0, 0)),
                sample(Mark::Final, 3, 2.0, &info(205, 3, 0.0, 0)),
            ],
            ..Series::default()
        };
        let fewer: BTreeMap<String, Sent> = [("SET".to_string(), summary(150, 150))].into();
        let more: BTreeMap<String, Sent> = [("SET".to_string(), summary(260, 260))].into();
        let lost = Books {
            short: Some("worker w1 was lost".into()),
            ..books(&fewer, false)
        };
        let (r, problem) = report(&series, &lost).unwrap();
        assert_eq!((problem, r.agrees), (None, None));
        let why = r.unchecked.unwrap();
        assert!(
            why.starts_with("worker w1 was lost, so the server counted"),
            "{why}"
        );
        assert!(why.contains("SET +55"), "{why}");
        // A lost worker does not explain requests the server never saw.
        let lost_more = Books {
            short: Some("worker w1 was lost".into()),
            ..books(&more, false)
        };
        let (r, problem) = report(&series, &lost_more).unwrap();
        assert_eq!(r.agrees, Some(false));
        assert!(problem.unwrap().contains("another client"));
        let refused = Books {
            refused: Some("ERR max number of clients reached".into()),
            ..books(&more, false)
        };
        let (r, problem) = report(&series, &refused).unwrap();
        assert_eq!((problem, r.agrees), (None, None));
        let why = r.unchecked.unwrap();
        assert!(
            why.starts_with(
                "the server refused connections (\"ERR max number of clients reached\")"
            ),
            "{why}"
        );
        assert!(why.contains("(SET -55): shown, not judged"), "{why}");
        // Refused connections do not explain more than was sent.
        let refused_fewer = Books {
            refused: Some("ERR max number of clients reached".into()),
            ..books(&fewer, false)
        };
        let (_, problem) = report(&series, &refused_fewer).unwrap();
        assert!(problem.unwrap().contains("another client"));
    }

    static NONE: BTreeMap<String, u64> = BTreeMap::new();

    #[test]
    fn the_truth_check_agrees_names_and_fails() {
        let series = Series {
            samples: vec![
                sample(Mark::BeforeLoad, 1, -1.0, &info(0, 1, 0.0, 0)),
                sample(Mark::Boundary(1), 2, 1.0, &info(100, 2, 0.0, 0)),
                sample(Mark::Boundary(2), 3, 2.0, &info(200, 3, 0.0, 0)),
                sample(Mark::Final, 4, 4.0, &info(205, 4, 0.0, 0)),
            ],
            ..Series::default()
        };
        let exact: BTreeMap<String, Sent> = [("SET".to_string(), summary(205, 205))].into();
        let (r, problem) = report(&series, &books(&exact, false)).unwrap();
        assert!(problem.is_none(), "{problem:?}");
        assert_eq!(r.agrees, Some(true));
        assert_eq!(r.baseline, "before_load");
        assert_eq!(r.sampler_calls, 3);
        assert_eq!(
            agreement_words(&r.agreement, &r.other_commands),
            "SET 205 = 205"
        );
        // Rows and drain add up to the total.
        let rows: u64 = r.intervals.iter().map(|i| i.ops.unwrap()).sum();
        assert_eq!(
            rows + r.drain.as_ref().unwrap().ops.unwrap(),
            r.total.ops.unwrap()
        );
        assert_eq!(r.intervals[1].index, Some(1));
        // Three written, never answered: the server may have run them or not.
        let unanswered: BTreeMap<String, Sent> = [("SET".to_string(), summary(206, 203))].into();
        let (r, problem) = report(&series, &books(&unanswered, false)).unwrap();
        assert!(problem.is_none() && r.agrees == Some(true), "{problem:?}");
        // Another client's 5 SETs beyond what was written: flagged, by name.
        let short: BTreeMap<String, Sent> = [("SET".to_string(), summary(200, 200))].into();
        let (r, problem) = report(&series, &books(&short, false)).unwrap();
        assert_eq!(r.agrees, Some(false));
        let p = problem.unwrap();
        assert!(
            p.starts_with("server disagrees: SET 205 by the server vs 200 sent"),
            "{p}"
        );
        assert!(p.contains("(+5;"), "{p}");
        // A workload of ECHO (which every worker's probe sends too) is not judged.
        let mut echo = series.clone();
        for s in &mut echo.samples {
            s.info.commands.insert(
                "echo".into(),
                CmdCounters {
                    calls: s.seq * 7,
                    ..CmdCounters::default()
                },
            );
        }
        let echoes: BTreeMap<String, Sent> = [
            ("SET".to_string(), summary(205, 205)),
            ("ECHO".to_string(), summary(3, 3)),
        ]
        .into();
        let (r, problem) = report(&echo, &books(&echoes, false)).unwrap();
        assert!(problem.is_none(), "{problem:?}");
        let e = r.agreement.iter().find(|a| a.command == "ECHO").unwrap();
        assert_eq!((e.server, e.judged, e.agrees), (21, false, true));
        // With a warm-up the baseline is the measured start, give or take the boundary.
        let mut warm = series.clone();
        warm.samples
            .insert(1, sample(Mark::Boundary(0), 2, 0.0, &info(3, 2, 0.0, 0)));
        let (r, problem) = report(&warm, &books(&short, true)).unwrap();
        assert_eq!(r.baseline, "measured_start");
        assert_eq!(r.agreement[0].server, 202);
        assert_eq!(r.agreement[0].allowance, 4);
        assert!(problem.is_none(), "{problem:?}");
        assert!(r.warmup.is_some());
    }

    /// A reset, a restart or no final sample: no truth check (null), said why, no
    /// problem: the client's report stands, the server's counts cannot be compared.
    #[test]
    fn a_reset_or_a_restart_leaves_the_check_unchecked() {
        let series = Series {
            samples: vec![
                sample(Mark::BeforeLoad, 1, -1.0, &info(50, 1, 0.0, 0)),
                sample(Mark::Final, 2, 2.0, &info(10, 1, 0.0, 0)),
            ],
            ..Series::default()
        };
        let c: BTreeMap<String, Sent> = [("SET".to_string(), summary(10, 10))].into();
        let (r, problem) = report(&series, &books(&c, false)).unwrap();
        assert_eq!(r.agrees, None);
        assert!(problem.is_none());
        assert!(r.unchecked.unwrap().contains("went down"));
        assert!(
            r.intervals.iter().all(|i| !i.sampled),
            "no boundary samples"
        );
        // A restart whose counts happen to grow anyway: the run_id says so.
        let restarted = Series {
            samples: vec![
                sample(
                    Mark::BeforeLoad,
                    1,
                    -1.0,
                    &format!("run_id:aaa\r\n{}", info(0, 1, 0.0, 0)),
                ),
                sample(
                    Mark::Final,
                    2,
                    2.0,
                    &format!("run_id:bbb\r\n{}", info(4, 1, 0.0, 0)),
                ),
            ],
            ..Series::default()
        };
        let c4: BTreeMap<String, Sent> = [("SET".to_string(), summary(10, 10))].into();
        let (r, problem) = report(&restarted, &books(&c4, false)).unwrap();
        assert_eq!((r.agrees, problem), (None, None));
        assert!(r.unchecked.unwrap().contains("restarted"));
        // The server stopped answering: no final sample.
        let mut gone = restarted.clone();
        gone.samples.pop();
        let (r, _) = report(&gone, &books(&c4, false)).unwrap();
        assert_eq!(r.agrees, None);
        assert!(r.unchecked.unwrap().contains("no sample after the drain"));
    }

    /// A count-bound run ends inside its last interval: that row ends at the final
    /// sample, there is no drain, and the rows still add up to the total.
    #[test]
    fn a_partial_last_interval_ends_at_the_final_sample() {
        let series = Series {
            samples: vec![
                sample(Mark::BeforeLoad, 1, -1.0, &info(0, 1, 0.0, 0)),
                sample(Mark::Boundary(1), 2, 1.0, &info(100, 2, 0.0, 0)),
                sample(Mark::Final, 3, 1.4, &info(140, 3, 0.0, 0)),
            ],
            ..Series::default()
        };
        let c: BTreeMap<String, Sent> = [("SET".to_string(), summary(140, 140))].into();
        let (r, problem) = report(&series, &books(&c, false)).unwrap();
        assert!(problem.is_none());
        assert!(r.drain.is_none());
        let ops: Vec<u64> = r.intervals.iter().map(|i| i.ops.unwrap()).collect();
        assert_eq!(ops, [100, 40]);
        assert_eq!(r.total.ops, Some(140));
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(181_818), "181,818");
        assert_eq!(grouped(1_000_000), "1,000,000");
    }
}
