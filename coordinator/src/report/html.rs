//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, no network) with
//! the summary table, rate and latency over time, each class's latency percentile
//! distribution (latency beside service time and schedule lag), the server's figures on
//! the same time axis, the workers and the checks. Every curve is a `<g class="series">`
//! naming itself and its point count (`data-series`, `data-points`); points carry their
//! values as hover titles.

use crate::report::{Report, Summary, human_us};
use std::fmt::Write as _;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const W: f64 = 860.0;
const H: f64 = 220.0;
const PAD: f64 = 48.0;

/// A line chart of several series over the timeline's x; `log` plots y on a log10 scale.
fn chart(
    title: &str,
    xs: &[f64],
    series: &[(&str, &str, Vec<f64>)],
    unit: &str,
    log: bool,
) -> String {
    chart_xy(
        title,
        xs,
        series,
        unit,
        log,
        ("time since the measured start, s", "s"),
    )
}

/// [`chart`] over any x: `x_axis` is its label and the unit its values are shown in.
pub(crate) fn chart_xy(
    title: &str,
    xs: &[f64],
    series: &[(&str, &str, Vec<f64>)],
    unit: &str,
    log: bool,
    x_axis: (&str, &str),
) -> String {
    let (x_label, x_unit) = x_axis;
    let mut out = String::new();
    let x_max = xs.last().copied().unwrap_or(1.0).max(1e-9);
    let tf = |v: f64| if log { v.max(1.0).log10() } else { v };
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .map(tf)
        .collect();
    let y_max = ys
        .iter()
        .copied()
        .fold(0.0f64, f64::max)
        .max(if log { 1.0 } else { 1e-9 })
        * 1.05;
    let y_min = 0.0;
    let px = |x: f64| PAD + (W - 2.0 * PAD) * x / x_max;
    let py = |y: f64| H - PAD / 2.0 - (H - PAD) * (tf(y) - y_min) / (y_max - y_min).max(1e-9);
    let _ = write!(
        out,
        "<h2>{}</h2><svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\">",
        esc(title)
    );
    let _ = write!(
        out,
        "<rect x=\"{PAD}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#bbb\"/>",
        PAD / 2.0,
        W - 2.0 * PAD,
        H - PAD
    );
    for i in 0..=4 {
        let frac = f64::from(i) / 4.0;
        let yv = y_min + (y_max - y_min) * frac;
        let label = if log { 10f64.powf(yv) } else { yv };
        let y = H - PAD / 2.0 - (H - PAD) * frac;
        let text = if unit == "µs" {
            human_us(label)
        } else if y_max < 10.0 {
            format!("{label:.2}")
        } else {
            format!("{label:.0}")
        };
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{y}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            PAD - 4.0,
            esc(&text)
        );
    }
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">{x_max:.1} {x_unit}</text>",
        W - PAD,
        H - 4.0
    );
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text><text x=\"10\" y=\"{}\" font-size=\"10\" transform=\"rotate(-90 10 {})\" text-anchor=\"middle\">{}</text>",
        W / 2.0,
        H - 4.0,
        esc(x_label),
        H / 2.0,
        H / 2.0,
        match (unit, log) {
            ("/s", _) => "per second",
            ("%", _) => "percent",
            ("µs", true) => "µs (log scale)",
            (u, _) => u,
        }
    );
    // Hover values on every point up to this many per series (a run of thousands of
    // intervals keeps its page small: its lines only).
    const HOVER_MAX: usize = 600;
    for (k, (name, colour, vals)) in series.iter().enumerate() {
        let drawn = xs
            .iter()
            .zip(vals)
            .filter(|(_, y)| !(log && **y <= 0.0))
            .count();
        let _ = write!(
            out,
            "<g class=\"series\" data-series=\"{}\" data-points=\"{drawn}\">",
            esc(name)
        );
        // On a log scale an empty interval (no samples) breaks the line instead of diving to 0.
        let mut runs: Vec<Vec<String>> = vec![Vec::new()];
        for (x, y) in xs.iter().zip(vals) {
            if log && *y <= 0.0 {
                runs.push(Vec::new());
            } else if let Some(run) = runs.last_mut() {
                run.push(format!("{:.1},{:.1}", px(*x), py(*y)));
            }
        }
        for run in runs.iter().filter(|r| r.len() > 1) {
            let _ = write!(
                out,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
                run.join(" ")
            );
        }
        let hover = drawn <= HOVER_MAX;
        for (x, y) in xs.iter().zip(vals) {
            if log && *y <= 0.0 {
                continue;
            }
            // Lone points (a line of one) are always drawn; the rest only to hover on.
            let (cx, cy) = (px(*x), py(*y));
            if hover {
                let shown = if unit == "µs" {
                    human_us(*y)
                } else {
                    format!("{y:.2} {unit}")
                };
                let _ = write!(
                    out,
                    "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"2\" fill=\"{colour}\"><title>{} at {x:.2} {x_unit}: {}</title></circle>",
                    esc(name),
                    esc(&shown)
                );
            }
        }
        if !hover {
            for run in runs.iter().filter(|r| r.len() == 1) {
                if let Some((cx, cy)) = run[0].split_once(',') {
                    let _ = write!(
                        out,
                        "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"2.5\" fill=\"{colour}\"/>"
                    );
                }
            }
        }
        legend_end(&mut out, k, name, colour);
    }
    out.push_str("</svg>");
    out
}

/// Series `k`'s name above the plot, in its colour, closing its `<g class="series">`.
fn legend_end(out: &mut String, k: usize, name: &str, colour: &str) {
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"{colour}\">{}</text></g>",
        PAD + 8.0 + 140.0 * k as f64,
        PAD / 2.0 - 6.0,
        esc(name)
    );
}

/// Decodes a report histogram (base64 of V2 + DEFLATE, ns).
pub(crate) fn decode_b64(b64: &str) -> Option<crest_model::hist::Hist> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    crest_model::hist::decode(&bytes).ok()
}

/// Decades of `1/(1−p)` the percentile chart spans: p = 0 to p = 99.999%.
const DECADES: f64 = 5.0;
/// Points per decade.
const STEPS: u32 = 10;

/// The quantiles a percentile curve is drawn at, with their x (log10 of 1/(1−p)), up to
/// the histogram's own resolution (a quantile past its last sample is its largest).
fn quantile_points(count: u64) -> Vec<(f64, f64)> {
    let top = if count == 0 {
        0.0
    } else {
        (count as f64).log10().min(DECADES)
    };
    let mut v: Vec<(f64, f64)> = (0..=(DECADES as u32 * STEPS))
        .map(|k| f64::from(k) / f64::from(STEPS))
        .take_while(|x| *x <= top + 1e-9)
        .map(|x| (x, 1.0 - 10f64.powf(-x)))
        .collect();
    if v.is_empty() {
        v.push((0.0, 0.0));
    }
    v
}

/// The HdrHistogram percentile-distribution plot: latency (log scale, µs) against the
/// percentile on a log axis of `1/(1−p)`, one curve per histogram (ns), each point with
/// its value on hover. `data-series` and `data-points` on each curve say what is drawn.
pub(crate) fn percentile_chart(
    title: &str,
    series: &[(&str, &str, &crest_model::hist::Hist)],
) -> String {
    let curves: Vec<Curve<'_>> = series
        .iter()
        .map(|(name, colour, h)| {
            let pts = quantile_points(h.len())
                .into_iter()
                .map(|(x, q)| {
                    let us = h.value_at_quantile(q) as f64 / 1000.0;
                    (x, q, us.max(0.001))
                })
                .collect();
            (*name, *colour, pts)
        })
        .collect();
    curves_chart(title, &curves)
}

/// (name, colour, [(x, quantile, µs)]) per curve.
type Curve<'a> = (&'a str, &'a str, Vec<(f64, f64, f64)>);

/// The same plot from summaries' percentiles (p50, p90, p99, p99.9, p99.99), one curve
/// each: for commands, whose histograms the report does not carry.
pub(crate) fn percentile_summary_chart(
    title: &str,
    series: &[(&str, &str, &super::Percentiles)],
) -> String {
    let curves: Vec<Curve<'_>> = series
        .iter()
        .map(|(name, colour, p)| {
            let pts = [
                (0.5, p.p50),
                (0.9, p.p90),
                (0.99, p.p99),
                (0.999, p.p999),
                (0.9999, p.p9999),
            ]
            .into_iter()
            .filter(|(_, us)| *us > 0.0)
            .map(|(q, us): (f64, f64)| ((1.0 / (1.0 - q)).log10(), q, us))
            .collect();
            (*name, *colour, pts)
        })
        .collect();
    curves_chart(title, &curves)
}

fn curves_chart(title: &str, curves: &[Curve<'_>]) -> String {
    let mut out = String::new();
    let all = curves.iter().flat_map(|c| c.2.iter().map(|p| p.2));
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
    let (lo, hi) = if hi <= 0.0 {
        (0.0, 1.0)
    } else {
        (
            lo.max(0.001).log10().floor(),
            hi.log10().ceil().max(lo.log10().floor() + 1.0),
        )
    };
    let px = |x: f64| PAD + (W - 2.0 * PAD) * x / DECADES;
    let py = |us: f64| H - PAD / 2.0 - (H - PAD) * (us.log10() - lo) / (hi - lo).max(1e-9);
    let _ = write!(
        out,
        "<h2>{}</h2><svg class=\"pct\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\"><rect x=\"{PAD}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#bbb\"/>",
        esc(title),
        PAD / 2.0,
        W - 2.0 * PAD,
        H - PAD
    );
    for (x, label) in [
        (0.0, "0%"),
        (1.0, "90%"),
        (2.0, "99%"),
        (3.0, "99.9%"),
        (4.0, "99.99%"),
        (5.0, "99.999%"),
    ] {
        let _ = write!(
            out,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{1}\" y2=\"{2}\" stroke=\"#eee\"/><text x=\"{0:.1}\" y=\"{3}\" font-size=\"10\" text-anchor=\"middle\">{label}</text>",
            px(x),
            PAD / 2.0,
            H - PAD / 2.0,
            H - PAD / 2.0 + 12.0
        );
    }
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"end\">percentile (log scale of 1/(1−p))</text>",
        W - PAD,
        H - 1.0
    );
    let mut d = lo;
    while d <= hi + 1e-9 {
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            PAD - 4.0,
            py(10f64.powf(d)),
            esc(&human_us(10f64.powf(d)).replace(".00", ""))
        );
        d += 1.0;
    }
    let _ = write!(
        out,
        "<text x=\"10\" y=\"{}\" font-size=\"10\" transform=\"rotate(-90 10 {})\" text-anchor=\"middle\">latency (log)</text>",
        H / 2.0,
        H / 2.0
    );
    for (k, (name, colour, pts)) in curves.iter().enumerate() {
        let line: Vec<String> = pts
            .iter()
            .map(|(x, _, us)| format!("{:.1},{:.1}", px(*x), py(*us)))
            .collect();
        let _ = write!(
            out,
            "<g class=\"series\" data-series=\"{}\" data-points=\"{}\"><polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            esc(name),
            pts.len(),
            line.join(" ")
        );
        for (x, q, us) in pts {
            let _ = write!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2\" fill=\"{colour}\"><title>{}: p{} = {}</title></circle>",
                px(*x),
                py(*us),
                esc(name),
                trim_pct(*q * 100.0),
                esc(&human_us(*us))
            );
        }
        legend_end(&mut out, k, name, colour);
    }
    out.push_str("</svg>");
    out
}

/// A percentage with the digits it needs: 50, 99.9, 99.999.
fn trim_pct(p: f64) -> String {
    let s = format!("{p:.4}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

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
    out.push_str("<h2>Summary</h2><p>Latency is measured from each request's intended send time.</p><table><tr><th>class / command</th><th>completed</th><th>achieved / target per s</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>p99.99</th><th>max</th><th>errors</th></tr>");
    for (label, s) in r.rows() {
        row(&mut out, &label, s);
    }
    out.push_str("</table>");
    let (timing, counts) = r.footer();
    let _ = write!(out, "<p>{} · {}</p>", esc(&timing), esc(&counts.join(" ")));
    if let Some(line) = r.stopped_answering() {
        let _ = write!(out, "<p class=\"warn\">{}</p>", esc(&line));
    }
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
    if !r.connection_errors.is_empty() {
        let _ = write!(
            out,
            "<p>connection errors: {}</p>",
            esc(&super::counts_line(&r.connection_errors))
        );
    }
    let xs: Vec<f64> = r.timeline.iter().map(|p| p.t_s).collect();
    out.push_str(&chart(
        "Rate per second",
        &xs,
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
        &xs,
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
    const COLOURS: [&str; 6] = ["#06c", "#c30", "#393", "#a0a", "#e80", "#555"];
    for (name, c) in &r.classes {
        if c.commands.len() > 1 {
            let series: Vec<(&str, &str, &super::Percentiles)> = c
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
    out.push_str(&chart(
        "Generator: busiest shard's busy share per interval (90%+: the generator is the bottleneck)",
        &xs,
        &[(
            "busiest shard",
            "#6a3",
            r.timeline.iter().map(|p| p.busiest_shard * 100.0).collect(),
        )],
        "%",
        false,
    ));
    if r.cluster {
        let red = r.totals.summary.redirects;
        let _ = write!(
            out,
            "<h2>Cluster nodes</h2><p>Redirects followed: MOVED {}, ASK {}; retried (TRYAGAIN/CLUSTERDOWN/LOADING) {}. A node whose share of requests is above its share of slots is hot.</p><table><tr><th>node</th><th>slots</th><th>share of slots</th><th>completed</th><th>share of requests</th><th>p50</th><th>p99</th><th>p99.9</th><th>errors</th><th>MOVED</th><th>ASK</th><th>connections</th></tr>",
            red.moved, red.asked, red.retried
        );
        for n in &r.nodes {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{:.2}%</td><td>{}</td><td>{:.2}%</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&n.addr),
                n.slots,
                n.slot_share * 100.0,
                n.completed,
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
    if let Some(s) = &r.server {
        // The server's rows carry the timeline's indexes; a row without samples is a gap.
        let pick =
            |f: &dyn Fn(&crate::server_stats::ServerRow) -> Option<f64>| -> (Vec<f64>, Vec<f64>) {
                s.intervals
                    .iter()
                    .filter(|row| row.sampled)
                    .filter_map(|row| Some((row.t_s, f(row)?)))
                    .unzip()
            };
        // Per command (the five busiest over the run), per second of each interval.
        let mut busiest: Vec<(&String, u64)> = s
            .total
            .commands
            .iter()
            .filter(|(n, _)| !crate::server_stats::series::is_setup(n) && n.as_str() != "info")
            .map(|(n, d)| (n, d.calls + d.rejected_calls))
            .collect();
        busiest.sort_by_key(|b| std::cmp::Reverse(b.1));
        busiest.truncate(5);
        let per_command: Vec<(String, Vec<f64>)> = busiest
            .iter()
            .map(|(n, _)| {
                // ops_per_sec / ops is the row's per-second factor (1 / its interval).
                let (_, v) = pick(&|row| {
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
            .collect();
        let (sx, ops) = pick(&|row| row.ops_per_sec);
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
        let (cx, cpu) = pick(&|row| row.cpu_us_per_op);
        if !cpu.is_empty() {
            out.push_str(&chart(
                "Server CPU per op (used_cpu_user + used_cpu_sys per command), µs",
                &cx,
                &[("CPU µs/op", "#c60", cpu)],
                "µs",
                false,
            ));
        }
        let mib = |b: Option<u64>| b.map(|b| b as f64 / 1024.0 / 1024.0);
        let (mx, used) = pick(&|row| mib(row.used_memory));
        let (_, rss) = pick(&|row| mib(row.used_memory.and(row.used_memory_rss)));
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
    if !r.checkpoints.is_empty() {
        out.push_str("<h2>Checkpoints</h2><p>The load paused at each checkpoint, its replies came in, then the server's INFO memory (and the probe) was read.</p><table><tr><th>#</th><th>requests</th><th>at, s</th><th>req/s since the last</th><th>used_memory</th><th>used_memory_rss</th><th>used_memory_dataset</th><th>fragmentation</th><th>probe</th></tr>");
        for c in &r.checkpoints {
            let b = |v: Option<u64>| v.map_or(String::new(), super::human_bytes);
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
    if !r.changes.is_empty() {
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
    out.push_str("</table><h2>Checks</h2>");
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
            esc(&crate::server_stats::series::agreement_words(
                &s.agreement,
                &s.other_commands
            ))
        );
    }
    if let Some(spans) = r.connection_bound_spans() {
        let _ = write!(
            out,
            "<p class=\"warn\">Requests waited for a free connection in {}: more --connections or --pipeline would send them on time.</p>",
            esc(&spans)
        );
    }
    if let Some(line) = r.off_pace_line() {
        let _ = write!(out, "<p class=\"warn\">{}.</p>", esc(&capitalized(&line)));
    }
    out.push_str("</body></html>\n");
    out
}
/// `line` with its first letter upper-case (a summary line as a sentence).
fn capitalized(line: &str) -> String {
    let mut c = line.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
