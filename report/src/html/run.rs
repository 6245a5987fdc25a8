//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, no network) with
//! the summary table, rate and latency over time, each class's latency percentile
//! distribution (latency beside service time and schedule lag), the server's figures on
//! the same time axis, the workers and the checks. Every curve is a `<g class="series">`
//! naming itself and its point count (`data-series`, `data-points`); points carry their
//! values as hover titles.

use super::{chart, decode_b64, esc, percentile_chart, percentile_summary_chart};
use crate::fmt::human_us;
use crate::model::{Report, Summary};
use crate::server::{ServerReport, ServerRow};
use std::fmt::Write as _;

fn row(out: &mut String, name: &str, s: &Summary) {
    let _ = write!(
        out,
        "<tr><td>{}</td><td>{}</td><td>{:.0} / {}</td>",
        esc(name),
        s.completed,
        s.achieved_rate,
        s.target_rate.show(),
    );
    for cell in s.latency_us.cells() {
        let _ = write!(out, "<td>{cell}</td>");
    }
    let _ = write!(out, "<td>{}</td></tr>", s.errors);
}

/// Renders the page.
pub fn render(r: &Report) -> String {
    let mut out = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Crest report</title><style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}.warn{color:#a40}</style></head><body>",
    );
    header(&mut out, r);
    summary_section(&mut out, r);
    errors_section(&mut out, r);
    let xs: Vec<f64> = r.timeline.iter().map(|p| p.t_s).collect();
    timeline_charts(&mut out, r, &xs);
    outages_section(&mut out, r);
    class_charts(&mut out, r);
    generator_chart(&mut out, r, &xs);
    if r.cluster || r.read_from != "primary" || (r.nodes.len() > 1 && !r.is_ring()) {
        cluster_section(&mut out, r);
    }
    if let Some(s) = &r.server {
        server_charts(&mut out, r, s);
    }
    checkpoints_section(&mut out, r);
    changes_section(&mut out, r);
    workers_section(&mut out, r);
    checks_section(&mut out, r);
    out.push_str("</body></html>\n");
    out
}

/// The page's title line: the run, its target, length, arrivals and workers.
fn header(out: &mut String, r: &Report) {
    let _ = write!(
        out,
        "<h1>Crest run {}</h1><p>target <b>{}</b>{}, {:.1} s measured from {}, {} arrivals, {} worker(s)</p>",
        esc(&r.run_id),
        esc(&r.target),
        esc(&r.session_note()),
        r.duration_s,
        esc(&r.started_at),
        esc(&r.arrival),
        r.workers.len()
    );
}

/// The summary table (a row per command or class, then the total), its footer, and the
/// line for a server that stopped answering.
fn summary_section(out: &mut String, r: &Report) {
    out.push_str("<h2>Summary</h2><p>Latency is measured from each request's intended send time.</p><table><tr><th>class / command</th><th>completed</th><th>achieved / target per s</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>p99.99</th><th>max</th><th>errors</th></tr>");
    for (label, s) in r.rows() {
        row(out, &label, s);
    }
    out.push_str("</table>");
    let (timing, counts) = r.footer();
    let _ = write!(out, "<p>{} · {}</p>", esc(&timing), esc(&counts.join(" ")));
    if let Some(line) = r.stopped_answering() {
        let _ = write!(out, "<p class=\"warn\">{}</p>", esc(&line));
    }
}

/// The errors by kind with the server's first message of each, and the connection
/// errors.
fn errors_section(out: &mut String, r: &Report) {
    if !r.totals.summary.errors_by_kind.is_empty() {
        out.push_str("<h2>Errors</h2><table><tr><th>kind</th><th>requests</th><th>the server's first message of this kind</th></tr>");
        for (k, n) in &r.totals.summary.errors_by_kind {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{n}</td><td>{}</td></tr>",
                esc(k),
                esc(r.error_messages.get(k).map_or("", String::as_str))
            );
        }
        out.push_str("</table>");
    }
    if let Some(line) = r.redirect_loop() {
        let _ = write!(out, "<p class=\"warn\">{}</p>", esc(&line));
    }
    if !r.connection_errors.is_empty() {
        let _ = write!(
            out,
            "<p>connection errors: {}</p>",
            esc(&crate::words::counts_line(&r.connection_errors))
        );
    }
}

/// Rate (target and achieved) and latency per interval over the timeline `xs`.
fn timeline_charts(out: &mut String, r: &Report, xs: &[f64]) {
    out.push_str(&chart(
        "Rate per second",
        xs,
        &[
            (
                "target",
                "#888",
                r.timeline.iter().map(|p| p.target_rate).collect(),
            ),
            (
                "achieved",
                "#06c",
                r.timeline.iter().map(|p| p.achieved_rate).collect(),
            ),
        ],
        "/s",
        false,
    ));
    out.push_str(&chart(
        "Latency per interval (log scale)",
        xs,
        &[
            (
                "p50",
                "#06c",
                r.timeline.iter().map(|p| p.latency_us.p50).collect(),
            ),
            (
                "p99",
                "#e80",
                r.timeline.iter().map(|p| p.latency_us.p99).collect(),
            ),
            (
                "p99.9",
                "#c00",
                r.timeline.iter().map(|p| p.latency_us.p999).collect(),
            ),
            (
                "lag p99",
                "#999",
                r.timeline.iter().map(|p| p.schedule_lag_p99_us).collect(),
            ),
        ],
        "µs",
        true,
    ));
}

/// Per class: its commands' percentiles side by side (several commands), and its latency
/// distribution beside service time and schedule lag (when its histograms decode).
fn class_charts(out: &mut String, r: &Report) {
    const COLOURS: [&str; 6] = ["#06c", "#c30", "#393", "#a0a", "#e80", "#555"];
    for (name, c) in &r.classes {
        if c.commands.len() > 1 {
            let series: Vec<(&str, &str, &crate::model::Percentiles)> = c
                .commands
                .iter()
                .zip(COLOURS.iter().cycle())
                .map(|((cmd, s), colour)| (cmd.as_str(), *colour, &s.latency_us))
                .collect();
            out.push_str(&percentile_summary_chart(
                &format!("Latency by command, class {name}: p50 to p99.99 from each command's exact histogram"),
                &series,
            ));
        }
        let h = &c.histograms;
        let (Some(lat), Some(svc), Some(lag)) = (
            decode_b64(&h.latency),
            decode_b64(&h.service_time),
            decode_b64(&h.schedule_lag),
        ) else {
            continue;
        };
        out.push_str(&percentile_chart(
            &format!("Latency distribution, class {name}: latency from intended time beside service time and schedule lag"),
            &[
                ("latency", "#06c", &lat),
                ("service time", "#3a3", &svc),
                ("schedule lag", "#999", &lag),
            ],
        ));
    }
}

/// The busiest shard's busy share per interval over the timeline `xs`.
fn generator_chart(out: &mut String, r: &Report, xs: &[f64]) {
    out.push_str(&chart(
        "Generator: busiest shard's busy share per interval (90%+: the generator is the bottleneck)",
        xs,
        &[(
            "busiest shard",
            "#6a3",
            r.timeline.iter().map(|p| p.busiest_shard * 100.0).collect(),
        )],
        "%",
        false,
    ));
}

/// The cluster's redirects and its nodes' table (slots beside requests, latency, errors).
fn cluster_section(out: &mut String, r: &Report) {
    let red = r.totals.summary.redirects;
    let _ = write!(
        out,
        "<h2>Cluster nodes</h2><p>Redirects followed: MOVED {}, ASK {}; retried (TRYAGAIN/CLUSTERDOWN/LOADING) {}. A node whose share of requests is above its share of slots is hot.</p>{}<table><tr><th>node</th><th>role</th><th>slots</th><th>share of slots</th><th>completed</th><th>reads</th><th>share of requests</th><th>p50</th><th>p99</th><th>p99.9</th><th>errors</th><th>MOVED</th><th>ASK</th><th>connections</th></tr>",
        red.moved,
        red.asked,
        red.retried,
        if r.read_from == "primary" {
            String::new()
        } else {
            format!(
                "<p>Reads went to {} (<code>--read-from</code>): the reads column says where.</p>",
                esc(&r.read_from)
            )
        }
    );
    for n in &r.nodes {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}%</td><td>{}</td><td>{}</td><td>{:.2}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&n.addr),
            if n.primary { "primary" } else { "replica" },
            n.slots,
            n.slot_share * 100.0,
            n.completed,
            n.reads,
            n.request_share * 100.0,
            human_us(n.latency_us.p50),
            human_us(n.latency_us.p99),
            human_us(n.latency_us.p999),
            n.errors,
            n.moved,
            n.asked,
            n.connections
        );
    }
    out.push_str("</table>");
}

/// `f` of each sampled server row, with the row's time: the server's rows carry the
/// timeline's indexes; a row without samples is a gap.
fn sampled(s: &ServerReport, f: &dyn Fn(&ServerRow) -> Option<f64>) -> (Vec<f64>, Vec<f64>) {
    s.intervals
        .iter()
        .filter(|row| row.sampled)
        .filter_map(|row| Some((row.t_s, f(row)?)))
        .unzip()
}

/// The server's figures on the timeline's axis: commands per second, CPU per op and
/// memory.
fn server_charts(out: &mut String, r: &Report, s: &ServerReport) {
    server_ops_chart(out, r, s);
    let (cx, cpu) = sampled(s, &|row| row.cpu_us_per_op);
    if !cpu.is_empty() {
        out.push_str(&chart(
            "Server CPU per op (used_cpu_user + used_cpu_sys per command), µs",
            &cx,
            &[("CPU µs/op", "#c60", cpu)],
            "µs",
            false,
        ));
    }
    server_memory_chart(out, s);
}

/// The five busiest commands over the run (setup and the sampler's `INFO` left out), each
/// with its calls per second of every sampled interval.
fn busiest_commands(s: &ServerReport) -> Vec<(String, Vec<f64>)> {
    let mut busiest: Vec<(&String, u64)> = s
        .total
        .commands
        .iter()
        .filter(|(n, _)| !crate::server::series::is_setup(n) && n.as_str() != "info")
        .map(|(n, d)| (n, d.calls + d.rejected_calls))
        .collect();
    busiest.sort_by_key(|b| std::cmp::Reverse(b.1));
    busiest.truncate(5);
    busiest
        .iter()
        .map(|(n, _)| {
            // ops_per_sec / ops is the row's per-second factor (1 / its interval).
            let (_, v) = sampled(s, &|row| {
                let calls = row
                    .commands
                    .get(*n)
                    .map_or(0.0, |d| (d.calls + d.rejected_calls) as f64);
                Some(match (row.ops, row.ops_per_sec) {
                    (Some(o), Some(r)) if o > 0 => calls * r / o as f64,
                    _ => 0.0,
                })
            });
            ((*n).clone(), v)
        })
        .collect()
}

/// The server's commands per second, in all and by command (the five busiest), beside the
/// client's completions.
fn server_ops_chart(out: &mut String, r: &Report, s: &ServerReport) {
    let per_command = busiest_commands(s);
    let (sx, ops) = sampled(s, &|row| row.ops_per_sec);
    let client: Vec<f64> = sx
        .iter()
        .map(|t| {
            r.timeline
                .iter()
                .find(|p| (p.t_s - t).abs() < 1e-9)
                .map_or(0.0, |p| p.achieved_rate)
        })
        .collect();
    out.push_str(&chart(
        &format!(
            "Server: commands per second ({}, INFO commandstats; the sampler's INFO and connection setup excluded), in all and by command, beside the client's completions",
            s.identity.version
        ),
        &sx,
        &{
            let mut v = vec![("server ops/s", "#a0a", ops), ("client completed/s", "#06c", client)];
            for ((n, vals), colour) in per_command.iter().zip(["#393", "#e80", "#c30", "#555", "#6a3"]) {
                v.push((n.as_str(), colour, vals.clone()));
            }
            v
        },
        "/s",
        false,
    ));
}

/// The server's `used_memory` (and `used_memory_rss` when every row has it) at each
/// interval's end.
fn server_memory_chart(out: &mut String, s: &ServerReport) {
    let mib = |b: Option<u64>| b.map(|b| b as f64 / 1024.0 / 1024.0);
    let (mx, used) = sampled(s, &|row| mib(row.used_memory));
    let (_, rss) = sampled(s, &|row| mib(row.used_memory.and(row.used_memory_rss)));
    let mut mem = vec![("used_memory", "#393", used)];
    if rss.len() == mx.len() && !rss.is_empty() {
        mem.push(("used_memory_rss", "#999", rss));
    }
    out.push_str(&chart(
        "Server memory at each interval's end, MB",
        &mx,
        &mem,
        "MB",
        false,
    ));
}

/// The checkpoints' table (nothing without checkpoints).
fn checkpoints_section(out: &mut String, r: &Report) {
    if r.checkpoints.is_empty() {
        return;
    }
    out.push_str("<h2>Checkpoints</h2><p>The load paused at each checkpoint, its replies came in, then the server's INFO memory (and the probe) was read.</p><table><tr><th>#</th><th>requests</th><th>at, s</th><th>req/s since the last</th><th>used_memory</th><th>used_memory_rss</th><th>used_memory_dataset</th><th>fragmentation</th><th>probe</th></tr>");
    for c in &r.checkpoints {
        let b = |v: Option<u64>| v.map_or(String::new(), crate::fmt::human_bytes);
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            c.index + 1,
            c.requests,
            c.at_s,
            c.rate,
            b(c.used_memory),
            b(c.used_memory_rss),
            b(c.used_memory_dataset),
            c.mem_fragmentation_ratio
                .map_or(String::new(), |f| format!("{f:.2}")),
            esc(c.probe.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</table>");
}

/// The runtime changes' table (nothing without changes).
/// The outages the clients saw, one row each (none: no section).
fn outages_section(out: &mut String, r: &Report) {
    if r.outages.is_empty() && r.outages_dropped == 0 {
        return;
    }
    out.push_str("<h2>Outages</h2><p>From the intended time of the first request to a node that failed with nothing after it yet answered, to the first success after it for the same slots (on the node that took them over, after a failover).</p><table class=\"outages\"><tr><th>node</th><th>role</th><th>slots</th><th>start, s</th><th>end, s</th><th>length, ms</th><th>failed</th><th>redirected</th><th>slot table moved after, ms</th><th>back to 99% of target by, s</th></tr>");
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("–".to_string(), |v| format!("{v:.digits$}"));
    for o in &r.outages {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&o.node),
            esc(&o.role),
            esc(&o.slots),
            o.start_s,
            opt(o.end_s, 3),
            opt(o.length_ms, 0),
            o.failed,
            o.redirected,
            opt(o.rediscovered_ms, 0),
            opt(o.recovered_s, 2)
        );
    }
    out.push_str("</table>");
    if r.outages_dropped > 0 {
        let _ = write!(
            out,
            "<p>{} more outages were counted and not kept (64 per node).</p>",
            r.outages_dropped
        );
    }
}

fn changes_section(out: &mut String, r: &Report) {
    if r.changes.is_empty() {
        return;
    }
    out.push_str("<h2>Runtime changes</h2><p>Each took effect at one instant on every worker (the admin API, gRPC); the timeline's target follows them.</p><table class=\"changes\"><tr><th>#</th><th>action</th><th>by</th><th>asked, s</th><th>at, s</th><th>from /s</th><th>to /s</th><th>workers switched at, s</th></tr>");
    for c in &r.changes {
        let switched: Vec<String> = c
            .workers
            .iter()
            .map(|w| format!("{} {:.6}", w.worker, w.first_s))
            .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td></tr>",
            c.seq,
            c.action,
            c.by,
            c.asked_s,
            c.at_s,
            c.from_rps,
            c.to_rps,
            esc(&switched.join(", "))
        );
    }
    out.push_str("</table>");
}

/// The workers' table: each one's shards, counts, latency, clock offset and state.
fn workers_section(out: &mut String, r: &Report) {
    out.push_str("<h2>Workers</h2><table><tr><th>name</th><th>host</th><th>shards</th><th>completed</th><th>errors</th><th>p50</th><th>p99</th><th>lag p99</th><th>clock offset</th><th>state</th></tr>");
    for w in &r.workers {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0} µs</td><td>{}</td></tr>",
            esc(&w.name),
            esc(&w.host),
            w.shards,
            w.completed,
            w.errors,
            w.latency_us.map_or("—".into(), |p| human_us(p.p50)),
            w.latency_us.map_or("—".into(), |p| human_us(p.p99)),
            w.schedule_lag_us.map_or("—".into(), |p| human_us(p.p99)),
            w.clock_offset_us,
            if w.lost {
                format!("LOST: {}", esc(w.lost_reason.as_deref().unwrap_or("")))
            } else {
                "ok".into()
            }
        );
    }
    out.push_str("</table>");
}

/// The checks: an interrupted run, late intervals, problems and generator-bound
/// intervals, then the notes on the generator, the server and the pace.
fn checks_section(out: &mut String, r: &Report) {
    out.push_str("<h2>Checks</h2>");
    if r.interrupted {
        let _ = write!(
            out,
            "<p class=\"warn\">INCOMPLETE: interrupted after {:.1} s; this report holds what was collected until then.</p>",
            r.duration_s
        );
    }
    if r.checks.late_intervals > 0 {
        let _ = write!(
            out,
            "<p>{} interval message(s) came after their timeline row was written; they are in the totals, not in the timeline.</p>",
            r.checks.late_intervals
        );
    }
    if r.checks.problems.is_empty() && r.checks.generator_bound_intervals.is_empty() {
        out.push_str("<p>Every worker's intervals add up to its totals; the generator kept its schedule.</p>");
    }
    for p in &r.checks.problems {
        let _ = write!(out, "<p class=\"warn\">{}</p>", esc(p));
    }
    if !r.checks.generator_bound_intervals.is_empty() {
        let _ = write!(
            out,
            "<p class=\"warn\">The generator could not keep its schedule in {}: latency there describes the client, not the server.</p>",
            esc(&r.generator_bound_spans())
        );
    }
    notes(out, r);
}

/// The notes under the checks: the generator's and the server's lines, the server's
/// agreement, connection-bound and off-pace intervals.
fn notes(out: &mut String, r: &Report) {
    if let Some(line) = r.generator_line() {
        let _ = write!(out, "<p>Generator: {}.</p>", esc(&line));
    }
    if let Some(line) = r.server_line() {
        let _ = write!(out, "<p>Server: {}.</p>", esc(&line));
    }
    if let Some(s) = r.server.as_ref().filter(|s| s.agrees == Some(true)) {
        let _ = write!(
            out,
            "<p>Server agrees: {}.</p>",
            esc(&crate::server::series::agreement_words(
                &s.agreement,
                &s.other_commands
            ))
        );
    }
    if let Some(spans) = r.connection_bound_spans() {
        let _ = write!(
            out,
            "<p class=\"warn\">Requests waited for a free connection in {}: {}.</p>",
            esc(&spans),
            esc(&r.connection_bound_advice())
        );
    }
    if let Some(line) = r.off_pace_line() {
        let _ = write!(out, "<p class=\"warn\">{}.</p>", esc(&capitalized(&line)));
    }
}

/// `line` with its first letter upper-case (a summary line as a sentence).
fn capitalized(line: &str) -> String {
    let mut c = line.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
