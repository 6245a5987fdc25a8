//! HTML: the toolkit every page shares (escaping, line and percentile charts, the
//! histograms a report carries decoded) and the pages themselves: [`run`] (`report.html`)
//! and [`live`] (the admin API's live page, drawn in the browser on these same axis
//! rules). Report pages are self-contained: inline CSS and SVG, no scripts, no network;
//! the live page's script talks to its own origin only. Every curve is a
//! `<g class="series">` naming itself and its point count (`data-series`, `data-points`),
//! so tests (and people) can read what was drawn.

pub mod live;
pub mod run;

use crate::fmt::human_us;
use std::fmt::Write as _;

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const W: f64 = 860.0;
const H: f64 = 244.0;
const PAD: f64 = 48.0;

/// A line chart of several series over the timeline's x; `log` plots y on a log10 scale.
pub fn chart(
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
pub fn chart_xy(
    title: &str,
    xs: &[f64],
    series: &[(&str, &str, Vec<f64>)],
    unit: &str,
    log: bool,
    x_axis: (&str, &str),
) -> String {
    let (x_label, x_unit) = x_axis;
    let mut out = String::new();
    let plot = Plot::new(xs, series, unit, log, x_unit);
    let _ = write!(
        out,
        "<h2>{}</h2><svg viewBox=\"0 0 {W} {H}\" width=\"100%\" style=\"height:auto;max-width:1600px\">",
        esc(title)
    );
    let _ = write!(
        out,
        "<rect x=\"{PAD}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#bbb\"/>",
        PAD / 2.0,
        W - 2.0 * PAD,
        H - PAD
    );
    y_ticks(&mut out, &plot);
    axis_labels(&mut out, &plot, x_label);
    for (k, s) in series.iter().enumerate() {
        curve(&mut out, &plot, xs, k, s);
    }
    out.push_str("</svg>");
    out
}

/// A line chart's scales (x from 0 to `x_max`; y from `y_min` to `y_max`, in log10 of
/// the values when `log`), its y ticks' step (a round value; a decade on a log scale)
/// and the units its labels show.
struct Plot<'a> {
    x_max: f64,
    y_min: f64,
    y_max: f64,
    step: f64,
    log: bool,
    unit: &'a str,
    x_unit: &'a str,
}

impl<'a> Plot<'a> {
    /// The scales that hold `xs` and every series' values, with 5% headroom above.
    fn new(
        xs: &[f64],
        series: &[(&str, &str, Vec<f64>)],
        unit: &'a str,
        log: bool,
        x_unit: &'a str,
    ) -> Self {
        let x_max = xs.last().copied().unwrap_or(1.0).max(1e-9);
        let tf = |v: f64| if log { v.max(1.0).log10() } else { v };
        let ys: Vec<f64> = series
            .iter()
            .flat_map(|s| s.2.iter().copied())
            .map(tf)
            .collect();
        // A series of zeros (no errors) still gets an axis from 0 to a round 1.
        let top = ys.iter().copied().fold(0.0f64, f64::max);
        let top = if top > 0.0 { top } else { 1.0 };
        // Up to a round value: the next decade on a log scale, else the next multiple of a
        // 1-2-5 step that gives about four ticks (2% headroom).
        let (y_max, step) = if log {
            ((top * 1.02).ceil().max(1.0), 1.0)
        } else {
            let step = nice_step(top.max(1e-9) * 1.02, 4.0);
            (((top * 1.02) / step).ceil().max(1.0) * step, step)
        };
        Plot {
            x_max,
            y_min: 0.0,
            y_max,
            step,
            log,
            unit,
            x_unit,
        }
    }

    /// A value as the y scale holds it: its log10 (of at least 1) on a log scale.
    fn tf(&self, v: f64) -> f64 {
        if self.log { v.max(1.0).log10() } else { v }
    }

    /// The x pixel of `x`.
    fn px(&self, x: f64) -> f64 {
        PAD + (W - 2.0 * PAD) * x / self.x_max
    }

    /// The y pixel of the value `y`.
    fn py(&self, y: f64) -> f64 {
        H - PAD / 2.0 - (H - PAD) * (self.tf(y) - self.y_min) / (self.y_max - self.y_min).max(1e-9)
    }
}

/// A round step for about `n` ticks over `span`: 1, 2 or 5 times a power of ten.
fn nice_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(1e-12);
    let mag = 10f64.powf(raw.log10().floor());
    let m = match raw / mag {
        f if f <= 1.0 => 1.0,
        f if f <= 2.0 => 2.0,
        f if f <= 5.0 => 5.0,
        _ => 10.0,
    };
    m * mag
}

/// `x` with at most three decimals and no trailing zeros: `2.5`, `10`, `0.002`.
fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// A tick's label: µs as µs, ms or s (`500µs`, `2.5ms`); any other unit with an SI
/// prefix (`15k`, `2M`).
fn tick_label(v: f64, unit: &str) -> String {
    if unit == "µs" {
        return match v {
            v if v < 1e3 => format!("{}µs", trim(v)),
            v if v < 1e6 => format!("{}ms", trim(v / 1e3)),
            v => format!("{}s", trim(v / 1e6)),
        };
    }
    match v.abs() {
        a if a >= 1e9 => format!("{}G", trim(v / 1e9)),
        a if a >= 1e6 => format!("{}M", trim(v / 1e6)),
        a if a >= 1e3 => format!("{}k", trim(v / 1e3)),
        _ => trim(v),
    }
}

/// The y axis' ticks, from the bottom to the top of the scale: a faint grid line and a
/// label at each multiple of the step (each decade on a log scale).
fn y_ticks(out: &mut String, plot: &Plot<'_>) {
    let (y_min, y_max) = (plot.y_min, plot.y_max);
    let n = ((y_max - y_min) / plot.step).round() as u32;
    for i in 0..=n.min(50) {
        let yv = y_min + plot.step * f64::from(i);
        let label = if plot.log { 10f64.powf(yv) } else { yv };
        let y = H - PAD / 2.0 - (H - PAD) * (yv - y_min) / (y_max - y_min).max(1e-9);
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{PAD}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text class=\"tick\" x=\"{}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            W - PAD,
            PAD - 4.0,
            y + 3.0,
            esc(&tick_label(label, plot.unit))
        );
    }
}

/// The x axis' ticks (round values, in `x_unit`) and label, and the y axis' label (its
/// unit in words).
fn axis_labels(out: &mut String, plot: &Plot<'_>, x_label: &str) {
    let step = nice_step(plot.x_max, 8.0);
    let n = (plot.x_max / step + 1e-9).floor() as u32;
    for i in 0..=n.min(50) {
        let v = step * f64::from(i);
        let x = plot.px(v);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#bbb\"/><text class=\"tick\" x=\"{x:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            H - PAD / 2.0,
            H - PAD / 2.0 + 3.0,
            H - PAD / 2.0 + 11.0,
            esc(&tick_label(v, plot.x_unit))
        );
    }
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text><text x=\"10\" y=\"{}\" font-size=\"10\" transform=\"rotate(-90 10 {})\" text-anchor=\"middle\">{}</text>",
        W / 2.0,
        H - 1.0,
        esc(x_label),
        H / 2.0,
        H / 2.0,
        match (plot.unit, plot.log) {
            ("/s", _) => "per second",
            ("%", _) => "percent",
            ("µs", true) => "µs (log scale)",
            (u, _) => u,
        }
    );
}

/// Hover values on every point up to this many per series (a run of thousands of
/// intervals keeps its page small: its lines only).
const HOVER_MAX: usize = 600;

/// Series `k` as a `<g class="series">`: its lines, its points (to hover on, or the lone
/// ones alone past [`HOVER_MAX`]) and its legend.
fn curve(
    out: &mut String,
    plot: &Plot<'_>,
    xs: &[f64],
    k: usize,
    (name, colour, vals): &(&str, &str, Vec<f64>),
) {
    let log = plot.log;
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
    let runs = line_runs(plot, xs, vals);
    for run in runs.iter().filter(|r| r.len() > 1) {
        let _ = write!(
            out,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            run.join(" ")
        );
    }
    if drawn <= HOVER_MAX {
        hover_points(out, plot, xs, name, colour, vals);
    } else {
        // Lone points (a line of one) are always drawn; the rest only to hover on.
        for run in runs.iter().filter(|r| r.len() == 1) {
            if let Some((cx, cy)) = run[0].split_once(',') {
                let _ = write!(
                    out,
                    "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"2.5\" fill=\"{colour}\"/>"
                );
            }
        }
    }
    legend_end(out, k, name, colour);
}

/// The series' points as runs of `x,y` pixels: on a log scale an empty interval (no
/// samples) breaks the line instead of diving to 0.
fn line_runs(plot: &Plot<'_>, xs: &[f64], vals: &[f64]) -> Vec<Vec<String>> {
    let mut runs: Vec<Vec<String>> = vec![Vec::new()];
    for (x, y) in xs.iter().zip(vals) {
        if plot.log && *y <= 0.0 {
            runs.push(Vec::new());
        } else if let Some(run) = runs.last_mut() {
            run.push(format!("{:.1},{:.1}", plot.px(*x), plot.py(*y)));
        }
    }
    runs
}

/// A circle on every drawn point with its value as a hover title.
fn hover_points(
    out: &mut String,
    plot: &Plot<'_>,
    xs: &[f64],
    name: &str,
    colour: &str,
    vals: &[f64],
) {
    let (unit, x_unit) = (plot.unit, plot.x_unit);
    for (x, y) in xs.iter().zip(vals) {
        if plot.log && *y <= 0.0 {
            continue;
        }
        let (cx, cy) = (plot.px(*x), plot.py(*y));
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
pub fn decode_b64(b64: &str) -> Option<crest_model::hist::Hist> {
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
pub fn percentile_chart(title: &str, series: &[(&str, &str, &crest_model::hist::Hist)]) -> String {
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
pub fn percentile_summary_chart(
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
        "<h2>{}</h2><svg class=\"pct\" viewBox=\"0 0 {W} {H}\" width=\"100%\" style=\"height:auto;max-width:1600px\"><rect x=\"{PAD}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#bbb\"/>",
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The labels of a chart's ticks, y then x.
    fn tick_labels(svg: &str) -> Vec<&str> {
        svg.split("class=\"tick\"")
            .skip(1)
            .filter_map(|t| t.split('>').nth(1)?.split('<').next())
            .collect()
    }

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(21_006.0, 4.0), 10_000.0);
        assert_eq!(nice_step(15_755.0, 4.0), 5_000.0);
        assert_eq!(nice_step(7.0, 4.0), 2.0);
        assert_eq!(nice_step(0.9, 4.0), 0.5);
        assert_eq!(nice_step(100.0, 4.0), 50.0);
    }

    #[test]
    fn ticks_read_as_round_values_with_si_and_time_units() {
        assert_eq!(tick_label(15_000.0, "/s"), "15k");
        assert_eq!(tick_label(2_500_000.0, "/s"), "2.5M");
        assert_eq!(tick_label(0.5, "%"), "0.5");
        assert_eq!(tick_label(0.30000000000000004, "%"), "0.3");
        assert_eq!(tick_label(1.0, "µs"), "1µs");
        assert_eq!(tick_label(2_500.0, "µs"), "2.5ms");
        assert_eq!(tick_label(10_000_000.0, "µs"), "10s");
        assert_eq!(tick_label(0.0, "µs"), "0µs");
    }

    /// A rate chart's ticks sit on multiples of a round step up to just above its top; a
    /// log latency chart's on decades: no `15,755`, no `0µs 0µs 1µs`.
    #[test]
    fn a_chart_labels_its_axes_on_round_values() {
        let xs: Vec<f64> = (0..10).map(f64::from).collect();
        let rate = chart(
            "rate",
            &xs,
            &[("achieved", "#000", vec![21_006.0; 10])],
            "/s",
            false,
        );
        let ticks = tick_labels(&rate);
        // y: 0 to 30k by 10k; x: 0 to 9 s by 1 s (8 ticks at most: by 2).
        assert_eq!(ticks, ["0", "10k", "20k", "30k", "0", "2", "4", "6", "8"]);
        let lat = chart(
            "latency",
            &xs,
            &[("p99", "#000", vec![80.0, 1_500.0, 40_000.0])],
            "µs",
            true,
        );
        assert_eq!(
            tick_labels(&lat)[..6],
            ["1µs", "10µs", "100µs", "1ms", "10ms", "100ms"]
        );
        assert!(rate.contains("width=\"100%\""), "full width");
    }
}
