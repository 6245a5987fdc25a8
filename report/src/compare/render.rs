//! The comparison as people read it: the terminal table and `compare.html` (the same
//! table, and the targets' latency percentile curves overlaid per class).

use super::{Comparison, Metric, Row};
use crate::fmt::{human_bytes, human_us};
use crate::html::{esc, percentile_chart};
use std::fmt::Write as _;

/// A value in its unit, for people.
fn show(metric: Metric, v: f64) -> String {
    match metric {
        Metric::AchievedRate => {
            if v >= 10_000.0 {
                format!("{:.1}k/s", v / 1000.0)
            } else {
                format!("{v:.1}/s")
            }
        }
        Metric::UsedMemory => human_bytes(v.max(0.0) as u64),
        Metric::ServerCpuPerOp => format!("{v:.2}µs"),
        _ => human_us(v),
    }
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

fn cells(r: &Row) -> [String; 9] {
    [
        format!("{} {}", r.scope, r.metric.name()),
        show(r.metric, r.median_a),
        show(r.metric, r.median_b),
        r.delta.map_or("n/a".into(), pct),
        r.ci.map_or("–".into(), |[l, h]| {
            format!("[{:+.1}, {:+.1}]", l * 100.0, h * 100.0)
        }),
        format!("{:.3}", r.p_value),
        format!("{:.1}%", r.cv_a * 100.0),
        format!("{:.1}%", r.cv_b * 100.0),
        r.words.clone(),
    ]
}

const HEADER: [&str; 9] = [
    "metric",
    "A median",
    "B median",
    "Δ B vs A",
    "95% CI %",
    "p(MWU)",
    "CV A",
    "CV B",
    "verdict",
];

impl Comparison {
    /// The first line: who against whom, how many runs, in what order.
    pub fn headline(&self) -> String {
        let names: Vec<String> = self
            .targets
            .iter()
            .zip('A'..)
            .map(|(a, k)| {
                let who = match (&a.version, &a.allocator) {
                    (Some(v), Some(m)) => format!(" ({v}, {m})"),
                    (Some(v), None) => format!(" ({v})"),
                    _ => String::new(),
                };
                format!("{k}={} {}{who}", a.label, a.target)
            })
            .collect();
        let runs: Vec<String> = self.runs_per_target.iter().map(usize::to_string).collect();
        format!(
            "crest compare  {}   {} runs{}, min effect {:.1}%",
            names.join("  "),
            runs.join("+"),
            if self.mode == "runs" {
                ", interleaved ABBA"
            } else {
                " from earlier reports"
            },
            self.min_effect * 100.0
        )
    }

    /// The terminal table: one block per compared target.
    pub fn table(&self) -> String {
        let mut out = self.headline();
        out.push('\n');
        let mut pairs: Vec<&str> = self.rows.iter().map(|r| r.b.as_str()).collect();
        pairs.dedup();
        for b in pairs {
            let rows: Vec<[String; 9]> = self.rows.iter().filter(|r| r.b == b).map(cells).collect();
            let a = self
                .rows
                .iter()
                .find(|r| r.b == b)
                .map_or("", |r| r.a.as_str());
            let _ = writeln!(out, "\nB = {b} against A = {a}");
            let mut width = HEADER.map(str::len);
            for r in &rows {
                for (w, c) in width.iter_mut().zip(r) {
                    *w = (*w).max(c.chars().count());
                }
            }
            let line = |out: &mut String, cs: &[String]| {
                for (k, (c, w)) in cs.iter().zip(width).enumerate() {
                    let pad = w.saturating_sub(c.chars().count());
                    if k == 0 || k == 8 {
                        let _ = write!(out, "{c}{}  ", " ".repeat(pad));
                    } else {
                        let _ = write!(out, "{}{c}  ", " ".repeat(pad));
                    }
                }
                let trimmed = out.trim_end().len();
                out.truncate(trimmed);
                out.push('\n');
            };
            line(&mut out, &HEADER.map(String::from));
            for r in &rows {
                line(&mut out, r);
            }
        }
        for w in &self.warnings {
            let _ = writeln!(out, "WARNING: {w}");
        }
        out
    }

    /// `compare.html`: self-contained (inline SVG, no scripts, no network).
    pub fn html(&self) -> String {
        let mut out = String::from(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>Crest compare</title><style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}.warn{color:#a40}.hi{font-weight:bold}</style></head><body>",
        );
        let _ = write!(
            out,
            "<h1>Crest compare</h1><p>{}</p>",
            esc(&self.headline())
        );
        out.push_str("<p>Each run is one replicate: medians over runs, the Hodges–Lehmann shift of B from A with an exact Mann–Whitney 95% interval over runs, the runs' coefficient of variation per target.</p>");
        for w in &self.warnings {
            let _ = write!(out, "<p class=\"warn\">{}</p>", esc(w));
        }
        let mut pairs: Vec<&str> = self.rows.iter().map(|r| r.b.as_str()).collect();
        pairs.dedup();
        for b in &pairs {
            let _ = write!(
                out,
                "<h2>{} against {}</h2><table class=\"cmp\"><tr>",
                esc(b),
                esc(self.targets.first().map_or("", |a| a.label.as_str()))
            );
            for h in HEADER {
                let _ = write!(out, "<th>{}</th>", esc(h));
            }
            out.push_str("</tr>");
            for r in self.rows.iter().filter(|r| r.b == *b) {
                let c = cells(r);
                let called = matches!(r.verdict, "higher" | "lower" | "unstable");
                out.push_str("<tr>");
                for (k, cell) in c.iter().enumerate() {
                    let class = if k == 8 && called {
                        " class=\"hi\""
                    } else {
                        ""
                    };
                    let _ = write!(out, "<td{class}>{}</td>", esc(cell));
                }
                out.push_str("</tr>");
            }
            out.push_str("</table>");
        }
        // Percentile curves per scope: each target's runs merged (for the picture only:
        // the table's figures are per run).
        const COLOURS: [&str; 6] = ["#06c", "#c30", "#393", "#a0a", "#e80", "#555"];
        let mut scopes: Vec<&String> = self
            .targets
            .iter()
            .flat_map(|a| a.runs.iter().flat_map(|r| r.hists.keys()))
            .collect();
        scopes.sort();
        scopes.dedup();
        for scope in scopes {
            let merged: Vec<(String, crest_model::hist::Hist)> = self
                .targets
                .iter()
                .map(|a| {
                    let mut h = crest_model::hist::new_hist();
                    for r in &a.runs {
                        if let Some(x) = r.hists.get(scope) {
                            crest_model::hist::add(&mut h, x);
                        }
                    }
                    (a.label.clone(), h)
                })
                .collect();
            let series: Vec<(&str, &str, &crest_model::hist::Hist)> = merged
                .iter()
                .zip(COLOURS.iter().cycle())
                .map(|((l, h), c)| (l.as_str(), *c, h))
                .collect();
            out.push_str(&percentile_chart(
                &format!("Latency distribution, {scope}: each target's runs merged"),
                &series,
            ));
        }
        out.push_str("<h2>Runs</h2><table><tr><th>target</th><th>order</th><th>run</th><th>complete</th></tr>");
        for a in &self.targets {
            for r in &a.runs {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&a.label),
                    r.order.map_or(String::new(), |o| o.to_string()),
                    esc(&r.source),
                    if r.complete { "yes" } else { "NO" }
                );
            }
        }
        out.push_str("</table></body></html>\n");
        out
    }
}
