//! The terminal summary of a report: one row per command (and class), the total, the
//! checkpoints and the target's nodes, then the notes.

use crate::fmt::{grouped, human_bytes};
use crate::model::{OutageReport, Report, Summary};
use crate::server::series::agreement_words;
use crate::words::counts_line;
use std::fmt::Write as _;

impl Report {
    /// The checkpoints as a table (empty without `--checkpoint-every`): at most the first
    /// and last 10 rows on the terminal; report.json and report.html have every one.
    pub fn checkpoints_table(&self) -> String {
        let mut out = String::new();
        if self.checkpoints.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "checkpoints (load paused, replies in, then {}):",
            if self.protocol.starts_with("memcache") {
                "stats of every server: bytes as used_memory, curr_items as the probe"
            } else if self.checkpoints.iter().any(|c| c.probe.is_some()) {
                "INFO memory and the probe"
            } else {
                "INFO memory"
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

    /// The terminal summary: one row per command and a total row.
    pub fn table(&self) -> String {
        let mut out = String::new();
        self.title_line(&mut out);
        self.summary_rows(&mut out);
        self.totals_lines(&mut out);
        if self.cluster || self.read_from != "primary" || self.nodes.len() > 1 && !self.is_ring() {
            self.nodes_table(&mut out);
        } else if self.is_ring() {
            self.ring_table(&mut out);
        }
        self.outage_lines(&mut out);
        self.run_lines(&mut out);
        self.notes(&mut out);
        self.changes_lines(&mut out);
        self.end_line(&mut out);
        out
    }

    /// The first line: the run, its target, length, arrivals, workers and shards.
    fn title_line(&self, out: &mut String) {
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
    }

    /// The column headings and one row per command (and class), then the total.
    fn summary_rows(&self, out: &mut String) {
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
        for (label, s) in self.rows() {
            summary_row(out, &label, s);
        }
    }

    /// Under the rows: the timing and counts footer, errors by kind, push frames, and the
    /// line for a server that stopped answering.
    fn totals_lines(&self, out: &mut String) {
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
        if let Some(line) = self.redirect_loop() {
            let _ = writeln!(out, "{line}");
        }
        if let Some(line) = self.connections_line() {
            let _ = writeln!(out, "{line}");
        }
        if let Some(s) = &self.staleness {
            let [p50, _, p99, _, _, max] = s.behind_us.cells();
            let _ = writeln!(
                out,
                "staleness (--check-staleness): {} of {} checked reads stale ({:.2}%); behind p50 {p50} p99 {p99} max {max} (a lower bound)",
                grouped(s.stale),
                grouped(s.checked),
                s.stale_share * 100.0
            );
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
    }

    /// Connection errors, lost workers, the generator's and the server's lines, the
    /// checkpoints and the server's agreement.
    fn run_lines(&self, out: &mut String) {
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
        if let Some(r) = &self.replay {
            out.push_str(&replay_lines(r));
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
    }

    /// The notes, warnings and checks: connection-bound, off-pace and generator-bound
    /// intervals, late interval messages, and each problem the checks found.
    fn notes(&self, out: &mut String) {
        if let Some(spans) = self.connection_bound_spans() {
            let _ = writeln!(
                out,
                "NOTE: requests waited for a free connection in {spans}; {}",
                self.connection_bound_advice()
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
    }

    /// One line per runtime change: who asked, when, the rate before and after, and when
    /// each worker switched.
    fn changes_lines(&self, out: &mut String) {
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
    }

    /// How the run ended, when not on schedule: interrupted, or stopped through an API.
    fn end_line(&self, out: &mut String) {
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
    }

    /// The connections' lives, when they came and went (churn asked for, or reconnects
    /// after failures): how many at the start and during the run, their setup time, and
    /// the server's own count of connections accepted beside it.
    fn connections_line(&self) -> Option<String> {
        let c = &self.connections;
        let churn = c.lifetime.is_some() || c.rate.is_some();
        if !churn && c.opened == 0 {
            return None;
        }
        let why = match (&c.lifetime, c.rate) {
            (Some(l), _) => format!(" (--conn-lifetime {l}: {} retired)", c.retired),
            (None, Some(r)) => format!(" (--conn-rate {r}/s: {} retired)", c.retired),
            (None, None) => " (reconnects after failures)".to_string(),
        };
        let [p50, _, p99, p999, _, max] = c.setup_us.cells();
        let server = self
            .server
            .as_ref()
            .and_then(|s| s.total.connections_received)
            .map(|n| {
                format!(
                    "; the server accepted {n} (its own count, the sampler's and probes' included)"
                )
            })
            .unwrap_or_default();
        let phases: Vec<String> = [
            ("connect", &c.connect_us),
            ("TLS", &c.tls_us),
            ("session", &c.session_us),
        ]
        .into_iter()
        .filter_map(|(name, p)| {
            let [p50, _, p99, ..] = p.as_ref()?.cells();
            Some(format!("{name} p50 {p50} p99 {p99}"))
        })
        .collect();
        let phases = if phases.is_empty() {
            String::new()
        } else {
            format!(" ({})", phases.join(", "))
        };
        Some(format!(
            "connections: {} at the start, {} opened during the run{why}; setup (connect to ready) p50 {p50} p99 {p99} p99.9 {p999} max {max}{phases}{server}",
            c.initial, c.opened
        ))
    }

    /// Whether the target was a ring of memcached servers.
    pub(crate) fn is_ring(&self) -> bool {
        self.protocol.starts_with("memcache") && self.nodes.len() > 1
    }

    /// A memcached ring's servers, one row each: the share of the keys the ring gives it
    /// beside the share of the requests it answered, errors, latency.
    fn ring_table(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "ring: {} memcached servers, keys placed by libmemcached's ketama (MD5, 160 points each)",
            self.nodes.len()
        );
        let _ = writeln!(
            out,
            "{:<22} {:>7} {:>10} {:>7} {:>8} {:>8} {:>8} {:>8} {:>6}",
            "server", "ring%", "completed", "req%", "p50", "p99", "p99.9", "errors", "conns"
        );
        for n in &self.nodes {
            let [p50, _, p99, p999, _, _] = n.latency_us.cells();
            let _ = writeln!(
                out,
                "{:<22} {:>6.2}% {:>10} {:>6.2}% {p50:>8} {p99:>8} {p999:>8} {:>8} {:>6}",
                n.addr,
                n.slot_share * 100.0,
                n.completed,
                n.request_share * 100.0,
                n.errors,
                n.connections
            );
        }
    }

    /// One line per outage (the first [`MAX_OUTAGE_LINES`]; the rest are in report.json).
    fn outage_lines(&self, out: &mut String) {
        let paced = matches!(
            self.totals.summary.target_rate,
            crate::model::Target::Rate(_)
        );
        let nodes = {
            let mut n: Vec<&str> = self.outages.iter().map(|o| o.node.as_str()).collect();
            n.sort_unstable();
            n.dedup();
            n.len()
        };
        if nodes > 1 {
            let _ = writeln!(
                out,
                "outages: {nodes} nodes, {} ms in all with some node out",
                grouped(self.outage_ms.round() as u64)
            );
        }
        for o in self.outages.iter().take(MAX_OUTAGE_LINES) {
            let _ = writeln!(out, "outage: {}", outage_words(o, paced));
        }
        let more = (self.outages.len().saturating_sub(MAX_OUTAGE_LINES) as u64)
            .saturating_add(self.outages_dropped);
        if more > 0 {
            let _ = writeln!(
                out,
                "outage: {} more (report.json's outages lists up to 64 per node)",
                grouped(more)
            );
        }
    }

    /// The cluster's nodes, one row each: slots and requests side by side (a hot node
    /// stands out), errors, redirects, latency; and the redirects over the run.
    fn nodes_table(&self, out: &mut String) {
        let r = self.totals.summary.redirects;
        let primaries = self.nodes.iter().filter(|n| n.primary).count();
        if self.cluster {
            let _ = writeln!(
                out,
                "cluster: {} nodes ({primaries} primaries); redirects followed: MOVED {} ASK {}, retried (TRYAGAIN/CLUSTERDOWN/LOADING) {}",
                self.nodes.len(),
                r.moved,
                r.asked,
                r.retried
            );
        } else {
            let _ = writeln!(
                out,
                "a primary and {} replicas",
                self.nodes.len().saturating_sub(primaries)
            );
        }
        let replicas = self.read_from != "primary";
        if replicas {
            let reads: u64 = self.nodes.iter().map(|n| n.reads).sum();
            let on_replicas: u64 = self
                .nodes
                .iter()
                .filter(|n| !n.primary)
                .map(|n| n.reads)
                .sum();
            let _ = writeln!(
                out,
                "reads from {} (--read-from): {on_replicas} of {reads} reads answered by replicas",
                self.read_from
            );
        }
        let _ = writeln!(
            out,
            "{:<22} {:>7} {:>6} {:>7} {:>10} {:>10} {:>7} {:>8} {:>8} {:>8} {:>8} {:>7} {:>5}",
            "node",
            "role",
            "slots",
            "slot%",
            "completed",
            "reads",
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
                "{:<22} {:>7} {:>6} {:>6.2}% {:>10} {:>10} {:>6.2}% {p50:>8} {p99:>8} {p999:>8} {:>8} {:>7} {:>5}",
                n.addr,
                if n.primary { "primary" } else { "replica" },
                n.slots,
                n.slot_share * 100.0,
                n.completed,
                n.reads,
                n.request_share * 100.0,
                n.errors,
                n.moved,
                n.asked
            );
        }
    }
}

/// One row of the summary table: a command, class or the total.
/// Outages the summary names one by one.
const MAX_OUTAGE_LINES: usize = 10;

/// An outage in words: "primary 127.0.0.1:7001 lost at 12.40 s: 1,900 ms without
/// successful writes to slots 0-5460, 3,812 requests failed, 120 redirected, the slot
/// table moved after 1,650 ms, back to 99% of the target rate by 15.00 s" (the rate's
/// recovery only for a paced run, `paced`).
pub fn outage_words(o: &OutageReport, paced: bool) -> String {
    let what = match (o.role.as_str(), o.slots.is_empty()) {
        ("primary", false) => format!("successful writes to slots {}", o.slots),
        (_, false) => format!("successful reads of slots {}", o.slots),
        (_, true) => "a successful request".to_string(),
    };
    let span = match o.length_ms {
        Some(ms) => format!("{} ms without {what}", grouped(ms.round() as u64)),
        None => format!("without {what} to the end of the run"),
    };
    let mut line = format!(
        "{} {} lost at {:.2} s: {span}, {} requests failed",
        o.role,
        o.node,
        o.start_s,
        grouped(o.failed)
    );
    if o.redirected > 0 {
        let _ = write!(line, ", {} redirected", grouped(o.redirected));
    }
    if let Some(r) = o.rediscovered_ms {
        let _ = write!(
            line,
            ", the slot table moved after {} ms",
            grouped(r.round() as u64)
        );
    }
    match (o.end_s, o.recovered_s) {
        (Some(_), Some(at)) => {
            let _ = write!(line, ", back to 99% of the target rate by {at:.2} s");
        }
        (Some(_), None) if paced => {
            line.push_str(", not back to 99% of the target rate by the end")
        }
        (Some(_), None) => {}
        (None, _) => {}
    }
    line
}

fn summary_row(out: &mut String, name: &str, s: &Summary) {
    // No sample at all (nothing completed, nothing timed out): no latency, not 0µs.
    let [p50, p90, p99, p999, p9999, max] = if s.latency_us.max == 0.0 {
        std::array::from_fn(|_| "–".to_string())
    } else {
        s.latency_us.cells()
    };
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>21} {p50:>8} {p90:>8} {p99:>8} {p999:>8} {p9999:>8} {max:>8} {:>8} {:>8}",
        name,
        s.completed,
        format!("{:.0}/{}", s.achieved_rate, s.target_rate.show()),
        s.errors,
        s.misses
    );
}

/// A replay's lines: the trace, how far it went, the ops as sent, what was left out.
fn replay_lines(r: &crate::ReplayReport) -> String {
    let mut out = String::new();
    let clock = match r.speed {
        Some(s) if (s - 1.0).abs() < f64::EPSILON => "on its own clock".to_string(),
        Some(s) => format!("on its own clock at {s}x"),
        None => "re-timed".to_string(),
    };
    let _ = writeln!(
        out,
        "replay: {} ({}) {clock}: {} records, {} requests, {} sent{}, last at {:.3} s{}",
        r.files.join(" "),
        r.format,
        r.records,
        r.requests,
        r.sent,
        if r.amplify > 1 {
            format!(" (x{} keys)", r.amplify)
        } else {
            String::new()
        },
        r.last_at_s,
        if r.finished {
            ""
        } else {
            "; the run ended before the trace"
        }
    );
    if !r.by_op.is_empty() {
        let ops: Vec<String> = r.by_op.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(out, "replay ops: {}", ops.join(", "));
    }
    let left: Vec<String> = [
        (
            "reordered (sent at the later time before them)",
            r.reordered,
        ),
        ("past the --rate/--stages profile", r.past_profile),
        ("past --duration (or the longest run, 30 days)", r.past_end),
        ("for a lost worker", r.lost),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(w, n)| format!("{n} {w}"))
    .collect();
    if !left.is_empty() {
        let _ = writeln!(out, "replay requests: {}", left.join(", "));
    }
    for s in &r.skipped {
        let _ = writeln!(
            out,
            "replay skipped: {}: {} lines {} (first at line {})",
            s.file, s.lines, s.reason, s.first_line
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Percentiles, RedirectCounts, Target};

    /// A command with no latency sample (nothing completed, nothing timed out: every
    /// request redirected away, say) shows no latency, not `0µs`.
    #[test]
    fn a_row_with_no_sample_shows_no_latency() {
        let s = Summary {
            scheduled: 200,
            sent: 200,
            completed: 0,
            misses: 0,
            errors: 200,
            errors_by_kind: [("MOVED".to_string(), 200)].into(),
            backlogged: 0,
            redirects: RedirectCounts::default(),
            target_rate: Target::Max,
            achieved_rate: 0.0,
            latency_us: Percentiles::default(),
            service_time_us: Percentiles::default(),
            schedule_lag_us: Percentiles::default(),
        };
        let mut out = String::new();
        summary_row(&mut out, "GET", &s);
        assert!(!out.contains("0µs"), "{out}");
        assert_eq!(out.matches('–').count(), 6, "{out}");
    }

    /// An outage from the books reads as one line: its node and slots, its length, what
    /// failed, when the table moved, and the end of the first interval back at 99% of
    /// target; each interval it touched counts the node as out.
    #[test]
    fn an_outage_reads_as_one_line_with_its_recovery() {
        use crate::model::TimelinePoint;
        use crate::rules::{Baseline, Load};
        use crest_model::stats::{NodeStats, Outage};
        const S: u64 = 1_000_000_000;
        let mut n = NodeStats::new("127.0.0.1:7001");
        // Warm-up 1 s: from 2.4 s to 4.3 s of the measured time.
        n.outages.push(Outage {
            start: S + 2_400_000_000,
            end: Some(S + 4_300_000_000),
            failed: 3_812,
            redirected: 12,
            rediscovered: Some(S + 4_250_000_000),
            slots: vec![(0, 5460)],
            writes: true,
        });
        let mut timeline: Vec<TimelinePoint> = (0..8)
            .map(|i| {
                let s = crest_model::stats::CmdStats::default();
                let mut p = TimelinePoint::of(
                    i,
                    1.0,
                    &s,
                    1000.0,
                    1000.0,
                    Load::default(),
                    Baseline::default(),
                );
                // Down in 2..=4, short in 5, back in 6.
                p.achieved_rate =
                    [1000.0, 1000.0, 500.0, 600.0, 700.0, 980.0, 995.0, 1000.0][i as usize];
                p
            })
            .collect();
        let all = OutageReport::all(&[n], S, &timeline, 1.0);
        assert_eq!(all.len(), 1);
        let o = &all[0];
        assert_eq!(
            (o.start_s, o.end_s, o.length_ms),
            (2.4, Some(4.3), Some(1900.0))
        );
        assert_eq!(
            (o.rediscovered_ms, o.recovered_s),
            (Some(1850.0), Some(7.0))
        );
        assert_eq!(
            outage_words(o, true),
            "primary 127.0.0.1:7001 lost at 2.40 s: 1,900 ms without successful writes to slots 0-5460, 3,812 requests failed, 12 redirected, the slot table moved after 1,850 ms, back to 99% of the target rate by 7.00 s"
        );
        // The whole target's: two overlapping spans and one apart, united.
        let mut two = o.clone();
        two.node = "127.0.0.1:7002".into();
        two.start_s = 3.0;
        two.end_s = Some(5.0);
        let mut three = two.clone();
        three.start_s = 6.0;
        three.end_s = None;
        assert_eq!(
            OutageReport::united_ms(&[o.clone(), two, three], 8.0),
            4600.0
        );
        OutageReport::mark(&all, &mut timeline, 1.0);
        let out: Vec<u32> = timeline.iter().map(|p| p.nodes_out).collect();
        assert_eq!(out, [0, 0, 1, 1, 1, 0, 0, 0]);
        // Open at the end, of a replica, unslotted: no recovery is claimed.
        let open = OutageReport {
            role: "replica".into(),
            end_s: None,
            length_ms: None,
            recovered_s: None,
            slots: String::new(),
            ..o.clone()
        };
        assert_eq!(
            outage_words(&open, true),
            "replica 127.0.0.1:7001 lost at 2.40 s: without a successful request to the end of the run, 3,812 requests failed, 12 redirected, the slot table moved after 1,850 ms"
        );
    }
}
