//! The sentences about a report that the terminal summary and `report.html` share: the
//! generator's cost, the server's figures, off-pace and bound intervals, the footer,
//! the rows every rendering shows.

use crate::fmt::{grouped, human_bytes, human_us};
use crate::model::{OffPace, Report, Summary, TimelinePoint};
use crate::rules::OFF_PACE_CAUSES;
use crest_model::stats::ENGINE_KINDS;
use std::collections::BTreeMap;

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

    /// What would send connection-bound requests on time: more connections, unless
    /// connections failed (a node refusing or dropping them holds its requests, and more
    /// connections would not help).
    pub fn connection_bound_advice(&self) -> String {
        connection_advice(&self.connection_errors)
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
            let why = if *cause == OffPace::Steal {
                let ms: f64 = rows.iter().map(|p| p.steal_ms).sum();
                format!("{ms:.0} ms stolen in all: {why}")
            } else if *cause == OffPace::Preempted {
                let n: u64 = rows.iter().map(|p| p.preemptions).sum();
                let ms: f64 = rows.iter().map(|p| p.core_wait_ms).sum();
                format!(
                    "the scheduler gave the shards' core to other threads {} times, {ms:.1} ms queued for it in all: {why}",
                    grouped(n)
                )
            } else if *cause == OffPace::Connections && !self.connection_errors.is_empty() {
                // Not "more connections" when connections failed: the same advice as the
                // connection-bound note.
                format!(
                    "requests waited for a free connection; {}",
                    connection_advice(&self.connection_errors)
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

    /// The plain sentence for requests that gave up after following redirects
    /// ([`crest_model::topology::MAX_REDIRECTS`] sends each): how many, and where the
    /// first one pointed; when that is the one node that redirected, the node sent them
    /// back to itself (a loop no routing can end). None when no request gave up so.
    pub fn redirect_loop(&self) -> Option<String> {
        let redirecting: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.moved + n.asked > 0)
            .map(|n| n.addr.as_str())
            .collect();
        if redirecting.is_empty() {
            return None;
        }
        let t = &self.totals.summary;
        let (word, n) = ["MOVED", "ASK"]
            .iter()
            .find_map(|w| t.errors_by_kind.get(*w).map(|n| (*w, *n)))
            .filter(|(_, n)| *n > 0)?;
        let max = crest_model::topology::MAX_REDIRECTS;
        let mut line =
            format!("redirect loop: {n} requests gave up after {max} redirects ({word})");
        let message = self.error_messages.get(word).map(String::as_str);
        let to = message
            .and_then(|m| crest_model::topology::parse_redirect(m.as_bytes()))
            .map(|r| r.addr);
        match (message, to) {
            (Some(m), Some(to)) if redirecting == [to] => line.push_str(&format!(
                "; the redirect (\"{m}\") pointed back to the node that sent it: {to} names itself as the owner of a slot it does not serve; check its cluster state (CLUSTER SLOTS, CLUSTER NODES) and its cluster-announce-ip/port (an address that leads to another node, through a NAT or a proxy?)"
            )),
            (Some(m), _) => line.push_str(&format!(
                "; the first was \"{m}\": the nodes sent them round, disagreeing about who owns the slots (a resharding that does not settle, or an announced address that leads to another node?); check CLUSTER SLOTS on each"
            )),
            (None, _) => {}
        }
        Some(line)
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
        match self.protocol.as_str() {
            "memcache-text" => parts.push("memcached text protocol".into()),
            "memcache-meta" => parts.push("memcached meta protocol".into()),
            _ if self.resp != 2 => parts.push(format!("RESP{}", self.resp)),
            _ => {}
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
}

/// What would send connection-bound requests on time, given the run's connection errors
/// by kind (see [`Report::connection_bound_advice`]).
pub fn connection_advice(errors: &BTreeMap<String, u64>) -> String {
    if errors.is_empty() {
        return "more --connections or --pipeline would send them on time".into();
    }
    let kinds: Vec<String> = errors.iter().map(|(k, n)| format!("{k}={n}")).collect();
    format!(
        "connections failed meanwhile ({}): a node that refuses or drops them holds its requests, so look at the target before adding --connections",
        kinds.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Failed connections are blamed, not too few of them; with none failed, more.
    #[test]
    fn connection_advice_blames_failed_connections_before_asking_for_more() {
        let none = connection_advice(&BTreeMap::new());
        assert!(none.starts_with("more --connections"), "{none}");
        let failed = connection_advice(&[("eof".to_string(), 3)].into());
        assert!(
            failed.starts_with("connections failed meanwhile (eof=3)")
                && !failed.contains("more --connections"),
            "{failed}"
        );
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
}
