//! `crest search`: the highest open-loop rate a target holds within its SLOs (the knee),
//! found across every worker on the exact merged histogram of each window.
//!
//! Each window is one whole `crest run` at a fixed rate (same workers, its own report in
//! `probes/NN-RATE/`), so every window's histogram is exactly that window's. Phases:
//!
//! 1. **climb**: from `--min`, doubling, short windows (`--probe-window`), until the first
//!    window fails (a climb window is cut short once its latency passes 20× the loosest
//!    SLO or under half of the offered rate completes: the server is clearly past it);
//!    A climb window that fails softly (it ran to its end and completed 99% of the
//!    offered requests, failing only on latency: an SLO or a growing queue) is run again
//!    as a full window (**recheck**) before it bounds the search: a 2 s window near
//!    capacity fails on one stall of a VM, and a bracket set by it would hold the knee
//!    below a rate the server holds. A recheck that passes resumes the climb;
//! 2. **bisect**: between the last pass and the first fail, full windows (`--window`),
//!    until the bracket is within `--tolerance`;
//! 3. **confirm**: the winner once more; a winner that fails its confirmation steps down
//!    by the tolerance (at most three times).
//!
//! A window **passes** when every SLO holds on the merged histogram of that window
//! (latency from the intended send time), completions reach 99% of the offered requests,
//! errors stay within `--error-budget` and the queue did not grow (the last interval's
//! median latency under 4× the first's, or under 1 ms). A window is **invalid**, not a
//! server failure, when the generator could not keep its schedule: schedule lag
//! p99 over `--lag-limit` while under 0.5% of requests waited for a connection, a shard 90%
//! busy, or under 98% of the offered requests scheduled (each over the window). Then the
//! search stops and says the clients are the limit, and about how many shards would not
//! be.

use crate::cli::{RunArgs, to_config};
use crate::compare::{Between, CompareError, flush, run_one};
use crate::output;
use crest_report::Report;
use crest_report::fmt::human_us;
use crest_report::html::{chart_xy, esc};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Most windows one search makes (climb, bisect and confirm together).
pub const MAX_WINDOWS: usize = 40;
/// A climb window is cut short once its latency passes this many times the loosest SLO.
const ABORT_FACTOR: f64 = 20.0;

/// One service-level objective: a latency quantile at most a limit, overall or for one
/// class.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Slo {
    /// The class it applies to (None: every class together).
    pub class: Option<String>,
    /// `p99`, `p99.9`, `max`, ...
    pub name: String,
    /// The quantile, 0 to 1 (1: the maximum).
    pub quantile: f64,
    /// The limit, µs.
    pub limit_us: f64,
}

impl std::fmt::Display for Slo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(c) = &self.class {
            write!(f, "{c}:")?;
        }
        write!(f, "{}<={}", self.name, human_us(self.limit_us))
    }
}

/// `--slo "p99<=1ms,p99.9<=5ms"` (a term may start with `CLASS:`).
///
/// # Errors
/// One line naming the term that does not parse and the form that would.
pub fn parse_slos(s: &str) -> Result<Vec<Slo>, String> {
    let form = "give e.g. \"p99<=1ms,p99.9<=5ms\" (quantiles p50 … p99.999 or max, limits in us, ms or s; CLASS:p99<=1ms for one class)";
    let mut out = Vec::new();
    for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let bad = || format!("--slo {term:?}: {form}");
        let (class, rest) = match term.split_once(':') {
            Some((c, r)) => (Some(c.trim().to_string()), r),
            None => (None, term),
        };
        let (q, limit) = rest.split_once("<=").ok_or_else(bad)?;
        let (q, limit) = (q.trim(), limit.trim());
        let quantile = if q == "max" {
            1.0
        } else {
            let v: f64 = q
                .strip_prefix('p')
                .and_then(|v| v.parse().ok())
                .ok_or_else(bad)?;
            if !(v > 0.0 && v < 100.0) {
                return Err(bad());
            }
            v / 100.0
        };
        let (num, scale) = if let Some(v) = limit.strip_suffix("ms") {
            (v, 1e3)
        } else if let Some(v) = limit.strip_suffix("us").or(limit.strip_suffix("µs")) {
            (v, 1.0)
        } else if let Some(v) = limit.strip_suffix('s') {
            (v, 1e6)
        } else {
            return Err(bad());
        };
        let v: f64 = num.trim().parse().map_err(|_| bad())?;
        if !(v.is_finite() && v > 0.0) {
            return Err(bad());
        }
        out.push(Slo {
            class,
            name: q.to_string(),
            quantile,
            limit_us: v * scale,
        });
    }
    if out.is_empty() {
        return Err(format!("--slo {s:?}: no objective; {form}"));
    }
    Ok(out)
}

/// What a search is asked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The objectives.
    pub slos: Vec<Slo>,
    /// Lowest and highest rate tried, per second.
    pub min: f64,
    /// See `min`.
    pub max: f64,
    /// The bracket's width at which bisection stops, relative (0.02: 2%).
    pub tolerance: f64,
    /// Failed requests a passing window may have, relative.
    pub error_budget: f64,
    /// A climb window.
    pub probe_window: Duration,
    /// A bisect or confirm window.
    pub window: Duration,
    /// Load before each window, not measured.
    pub warmup: Duration,
    /// Before each window.
    pub between: Between,
    /// Schedule lag p99 above this (with free connections) makes a window invalid, µs.
    pub lag_limit_us: f64,
}

/// One window's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every objective held.
    Pass,
    /// The server did not hold it.
    Fail,
    /// The generator could not keep its schedule: says nothing of the server.
    Invalid,
}

impl Verdict {
    /// `pass`, `fail`, `invalid` (as in `search.json`).
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Invalid => "invalid",
        }
    }
}

/// One window, as the table and `search.json` show it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Probe {
    /// 1, 2, ...
    pub n: usize,
    /// `climb`, `recheck`, `bisect`, `confirm`.
    pub phase: &'static str,
    /// The rate asked for, per second.
    pub offered: f64,
    /// Non-error replies per second.
    pub achieved: f64,
    /// Latency from the intended send time over the window, µs.
    pub p50_us: f64,
    /// See `p50_us`.
    pub p99_us: f64,
    /// See `p50_us`.
    pub p999_us: f64,
    /// Schedule lag p99, µs.
    pub lag_p99_us: f64,
    /// Failed requests.
    pub errors: u64,
    /// The busiest shard's busy share in its busiest interval.
    pub busiest_shard: f64,
    /// The outcome.
    pub verdict: Verdict,
    /// Why (the objectives that failed, or what limited the generator).
    pub reason: String,
    /// Measured length, s (shorter when cut short).
    pub window_s: f64,
    /// The window's report folder, when `--out` is given.
    pub report: Option<String>,
}

/// A whole search: `search.json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Search {
    /// The target.
    pub target: String,
    /// The objectives, as given.
    pub slos: Vec<String>,
    /// The range searched, per second.
    pub min_rps: f64,
    /// See `min_rps`.
    pub max_rps: f64,
    /// Bisection stops within this (relative).
    pub tolerance: f64,
    /// Error budget (relative).
    pub error_budget: f64,
    /// Shards the workers ran.
    pub shards: u32,
    /// Every window, in order.
    pub probes: Vec<Probe>,
    /// The highest rate that passed (and was confirmed), per second.
    pub knee_rps: Option<f64>,
    /// The lowest rate that failed above the knee, per second.
    pub first_fail_rps: Option<f64>,
    /// The winner passed its confirmation window.
    pub confirmed: bool,
    /// The search stopped because the generator was the limit.
    pub clients_limit: bool,
    /// One line: the answer.
    pub outcome: String,
    /// Wall time of the whole search, s.
    pub elapsed_s: f64,
}

/// The merged latency histogram of `report` for `class` (None: every class).
fn latency_hist(report: &Report, class: Option<&str>) -> Option<crest_model::hist::Hist> {
    let b64 = match class {
        None => &report.totals.histograms.latency,
        Some(c) => &report.classes.get(c)?.histograms.latency,
    };
    crest_report::html::decode_b64(b64)
}

/// Judges one window's report at `offered` per second.
pub fn judge(report: &Report, offered: f64, plan: &Plan) -> (Verdict, String) {
    let s = &report.totals.summary;
    let lag = s.schedule_lag_us.p99;
    let waited = s.backlogged as f64 / (s.scheduled.max(1)) as f64;
    let due = offered * report.duration_s;
    // Requests that waited for a connection carry that wait in their lag: under 0.5% of
    // them cannot make the p99 (the top 1%) theirs, so a high p99 is the pacer's.
    let lagging = lag > plan.lag_limit_us && waited < 0.005;
    let busy = report.totals.busiest_shard >= 0.9;
    let short = (s.scheduled as f64) < 0.98 * due;
    // Judged over the window: one hiccup (a thread descheduled for a few ms) does not
    // void it, a generator that cannot keep up does.
    if lagging || busy || short {
        let why = if lagging {
            format!(
                "schedule lag p99 {} over the limit {} with free connections (under 0.5% of requests waited for one)",
                human_us(lag),
                human_us(plan.lag_limit_us)
            )
        } else if busy {
            format!(
                "the busiest shard was {:.0}% busy",
                report.totals.busiest_shard * 100.0
            )
        } else {
            format!(
                "the shards scheduled only {:.1}% of the offered requests",
                100.0 * s.scheduled as f64 / due.max(1.0)
            )
        };
        return (Verdict::Invalid, why);
    }
    let mut why = Vec::new();
    for slo in &plan.slos {
        let Some(h) = latency_hist(report, slo.class.as_deref()) else {
            why.push(format!("{slo}: no such class in the report"));
            continue;
        };
        let v_ns = if slo.quantile >= 1.0 {
            h.max()
        } else {
            h.value_at_quantile(slo.quantile)
        };
        let v = v_ns as f64 / 1e3;
        if h.is_empty() || v > slo.limit_us {
            why.push(format!(
                "{} {} > {}",
                slo.name,
                human_us(v),
                human_us(slo.limit_us)
            ));
        }
    }
    if (s.completed as f64) < 0.99 * due {
        why.push(format!(
            "completed {:.1}% of the offered requests",
            100.0 * s.completed as f64 / due.max(1.0)
        ));
    }
    let errors = s.errors as f64 / (s.scheduled.max(1)) as f64;
    if errors > plan.error_budget {
        why.push(format!(
            "errors {:.3}% over the budget {:.3}%",
            errors * 100.0,
            plan.error_budget * 100.0
        ));
    }
    let p50s: Vec<f64> = report
        .timeline
        .iter()
        .filter(|p| p.achieved_rate > 0.0)
        .map(|p| p.latency_us.p50)
        .collect();
    if let Some((first, last)) = queue_grew(&p50s) {
        why.push(format!(
            "the queue grew: median {} at the end, {} in the first interval",
            human_us(last),
            human_us(first)
        ));
    }
    if report.interrupted {
        why.push("cut short: the latency exploded".into());
    }
    if why.is_empty() {
        (Verdict::Pass, "every objective held".into())
    } else {
        (Verdict::Fail, why.join("; "))
    }
}

/// Whether a window's queue grew, from its intervals' latency p50s (µs): the end over 4×
/// the first interval and over 1 ms. "The end" is the lower of the last two intervals when
/// the window has four or more: a queue that grows (offered over capacity) is high in both,
/// while one stall (a VM's hiccup) that drains again is high in one, and is the SLOs'
/// business, not this check's. Returns (first, end) when it grew.
fn queue_grew(p50s: &[f64]) -> Option<(f64, f64)> {
    let first = *p50s.first()?;
    let end = match p50s {
        [.., a, b] if p50s.len() >= 4 => a.min(*b),
        _ => *p50s.last()?,
    };
    (end > 4.0 * first && end > 1_000.0).then_some((first, end))
}

/// Stops a window (`stop`) when the user interrupts, or when a finalized interval of
/// it shows the server clearly past its capacity: latency p99 over `abort_p99_us`, or
/// under half the asked rate achieved. A window nobody publishes points for (a bisect or
/// confirm window runs whole) only forwards the interrupt.
async fn watch_window(
    mut user: watch::Receiver<bool>,
    mut points: watch::Receiver<Option<crest_report::TimelinePoint>>,
    stop: watch::Sender<bool>,
    abort_p99_us: f64,
) {
    let mut watched = true;
    loop {
        tokio::select! {
            r = user.wait_for(|v| *v) => {
                if r.is_ok() {
                    let _ = stop.send(true);
                }
                return;
            }
            r = points.changed(), if watched => {
                if r.is_err() {
                    watched = false;
                    continue;
                }
                let past = points.borrow_and_update().as_ref().is_some_and(|p| {
                    p.latency_us.p99 > abort_p99_us || p.achieved_rate < 0.5 * p.target_rate
                });
                if past {
                    let _ = stop.send(true);
                    return;
                }
            }
        }
    }
}

/// Runs the search. `args` are the run's flags (its `--rate`, `--duration` and `--out`
/// are set per window); `out` the search's folder.
///
/// # Errors
/// [`CompareError::Usage`] before any load, [`CompareError::Failed`] when a window could
/// not be run.
pub async fn run(
    args: RunArgs,
    plan: &Plan,
    out: Option<PathBuf>,
    interrupt: watch::Receiver<bool>,
) -> Result<Search, CompareError> {
    let t0 = Instant::now();
    let cfg = base_config(args, plan, out.as_deref())?;
    let target = cfg.target.clone().unwrap_or_else(|| "builtin".into());
    let mut s = Search::new(target, plan);
    let loosest = plan.slos.iter().map(|s| s.limit_us).fold(0.0, f64::max);
    let window = |rate: f64, phase: &'static str, s: &mut Search| {
        let n = s.probes.len() + 1;
        let dir = out
            .as_ref()
            .map(|d| d.join("probes").join(format!("{n:02}-{rate:.0}")));
        let len = if phase == "climb" {
            plan.probe_window
        } else {
            plan.window
        };
        let mut window = cfg.at_fixed_rate(rate, len)?;
        window.out.clone_from(&dir);
        window.quiet = true;
        window.label = format!("search: window {n} at {rate:.0}/s ({phase})");
        Ok::<_, crate::config::ConfigError>((window, dir, n))
    };
    let mut b = Bracket::new(plan.min);
    loop {
        if *interrupt.borrow() {
            s.outcome = "interrupted".into();
            break;
        }
        if s.probes.len() >= MAX_WINDOWS {
            s.outcome = format!("stopped after {MAX_WINDOWS} windows");
            break;
        }
        let (rate, phase) = (b.rate, b.phase);
        let (cfg, dir, n) =
            window(rate, phase, &mut s).map_err(|e| CompareError::Usage(e.to_string()))?;
        if let Some(d) = &dir {
            output::check_writable(d).map_err(CompareError::Failed)?;
        }
        if plan.between != Between::None {
            flush(&cfg).await.map_err(CompareError::Failed)?;
        }
        // A climb window is watched: cut short once the server is clearly past it.
        let (stop_tx, stop_rx) = watch::channel(false);
        let (points_tx, points) = watch::channel(None);
        let watched = (phase == "climb").then_some(points_tx);
        let watcher = tokio::spawn(watch_window(
            interrupt.clone(),
            points,
            stop_tx,
            ABORT_FACTOR * loosest,
        ));
        let report = run_one(&cfg, &stop_rx, watched).await;
        watcher.abort();
        let Some(report) = report? else {
            s.outcome = "interrupted".into();
            break;
        };
        if *interrupt.borrow() {
            s.outcome = "interrupted".into();
            break;
        }
        s.shards = report.workers.iter().map(|w| w.shards).sum();
        let (probe, soft) = probe_of(&report, plan, (n, phase, rate), dir);
        eprintln!("crest search: {}", probe_line(&probe));
        let verdict = probe.verdict;
        s.probes.push(probe);
        match b.next(verdict, soft, plan) {
            Next::Window => {}
            Next::Done => break,
            Next::ClientsLimit => {
                s.clients_limit = true;
                s.outcome = clients_limit(&s, &report, rate, b.lo);
                break;
            }
            Next::Stop(why) => {
                s.outcome = why;
                break;
            }
            Next::BelowMin => {
                s.outcome = format!(
                    "--min {:.0}/s already fails ({}): the knee is below it; search lower",
                    plan.min,
                    s.probes.last().map_or("", |p| p.reason.as_str())
                );
                break;
            }
        }
    }
    finish(&mut s, &b);
    s.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(s)
}

/// The search's one configuration, checked before any load at the highest rate it may
/// ask for: every window is this configuration at its own rate and length (the seed
/// drawn here for all).
fn base_config(
    args: RunArgs,
    plan: &Plan,
    out: Option<&std::path::Path>,
) -> Result<crate::config::RunConfig, CompareError> {
    if !(plan.min > 0.0 && plan.min <= plan.max) {
        return Err(CompareError::Usage(format!(
            "--min {} --max {}: give 0 < min ≤ max, requests per second",
            plan.min, plan.max
        )));
    }
    // The highest rate any class may ask for, said of the flag that asks it.
    let most = crest_model::convert::limits::MAX_RATE;
    for (flag, rate) in [("--min", plan.min), ("--max", plan.max)] {
        if rate > most {
            return Err(CompareError::Usage(format!(
                "{flag} {rate}: a search may climb to at most {most:e} requests/s; give e.g. {flag} {}",
                if flag == "--min" { 1_000 } else { 1_000_000 }
            )));
        }
    }
    if let Some(dir) = out {
        output::check_writable(dir).map_err(CompareError::Usage)?;
    }
    for (flag, given) in [
        ("--rate-scale", args.load.rate_scale.is_some()),
        ("--time-scale", args.load.time_scale.is_some()),
    ] {
        if given {
            return Err(CompareError::Usage(format!(
                "{flag}: crest search sets each window's rate and length itself; leave it out"
            )));
        }
    }
    let mut base = args;
    if plan.between == Between::Prefill {
        base.load.prefill = true;
    }
    base.load.warmup = Some(plan.warmup);
    // Checked once before any load, at the highest rate it may ask for; each window is
    // this configuration at its own rate and length (the seed drawn here for all).
    base.pace.rate = Some(crate::config::RateArg::Rps(plan.max));
    base.load.duration = Some(plan.window);
    base.pace.out = None;
    let cfg = to_config(base).map_err(|mut e| {
        // The rate checked is --max's (search refuses --rate itself).
        if e.flag == "--rate" {
            e.flag = "--max";
        }
        CompareError::Usage(e.to_string())
    })?;
    // An SLO on a class the run does not have could never be judged: say so before load.
    for slo in &plan.slos {
        if let Some(class) = &slo.class
            && !cfg.classes.iter().any(|c| &c.name == class)
        {
            let names: Vec<&str> = cfg.classes.iter().map(|c| c.name.as_str()).collect();
            return Err(CompareError::Usage(format!(
                "--slo {slo}: the run has no class {class:?}; its classes: {}",
                names.join(", ")
            )));
        }
    }
    Ok(cfg)
}

impl Search {
    /// A search of `target` under `plan`, before its first window.
    fn new(target: String, plan: &Plan) -> Self {
        Search {
            target,
            slos: plan.slos.iter().map(ToString::to_string).collect(),
            min_rps: plan.min,
            max_rps: plan.max,
            tolerance: plan.tolerance,
            error_budget: plan.error_budget,
            shards: 0,
            probes: Vec::new(),
            knee_rps: None,
            first_fail_rps: None,
            confirmed: false,
            clients_limit: false,
            outcome: String::new(),
            elapsed_s: 0.0,
        }
    }
}

/// A window's probe row from its report, and whether a failure was soft: on latency alone,
/// run to its end while keeping up with the offered rate.
fn probe_of(
    report: &Report,
    plan: &Plan,
    (n, phase, rate): (usize, &'static str, f64),
    dir: Option<PathBuf>,
) -> (Probe, bool) {
    let (verdict, reason) = judge(report, rate, plan);
    let soft = !report.interrupted
        && (report.totals.summary.completed as f64) >= 0.99 * rate * report.duration_s;
    let t = &report.totals.summary;
    let probe = Probe {
        n,
        phase,
        offered: rate,
        achieved: t.achieved_rate,
        p50_us: t.latency_us.p50,
        p99_us: t.latency_us.p99,
        p999_us: t.latency_us.p999,
        lag_p99_us: t.schedule_lag_us.p99,
        errors: t.errors,
        busiest_shard: report.totals.busiest_shard,
        verdict,
        reason,
        window_s: report.duration_s,
        report: dir.map(|d| d.display().to_string()),
    };
    (probe, soft)
}

/// The outcome when the generator, not the server, could not keep a window's schedule:
/// how many shards would, and what the server held so far.
fn clients_limit(s: &Search, report: &Report, rate: f64, held: Option<f64>) -> String {
    let busiest = report.totals.busiest_shard.max(0.05);
    let need = ((f64::from(s.shards) * busiest / 0.7).ceil() as u32)
        .max(s.shards * 2)
        .max(s.shards + 1);
    format!(
        "the clients are the limit, not the server: at {rate:.0}/s the generator could not keep its schedule ({}); run about {need} shards (now {}: more workers or --threads) and search again{}",
        s.probes.last().map_or("", |p| p.reason.as_str()),
        s.shards,
        held.map_or(String::new(), |l| format!("; the server held {l:.0}/s"))
    )
}

/// The knee and the outcome's line once the windows are over.
fn finish(s: &mut Search, b: &Bracket) {
    s.confirmed = b.confirmed;
    s.knee_rps = if s.clients_limit && !s.confirmed {
        None
    } else {
        b.lo.filter(|_| b.confirmed)
    };
    s.first_fail_rps = b.hi;
    if s.outcome.is_empty() {
        s.outcome = match (s.knee_rps, b.hi) {
            (Some(k), Some(h)) => format!(
                "knee {k:.0}/s: the highest rate that held every objective (confirmed); {h:.0}/s did not"
            ),
            (Some(k), None) => format!(
                "{k:.0}/s (--max) held every objective: the knee is above it; search higher"
            ),
            _ => "no knee found".into(),
        };
    }
}

/// What the search does after a window.
#[derive(Debug, Clone, PartialEq)]
enum Next {
    /// Another window, at [`Bracket::rate`] in [`Bracket::phase`].
    Window,
    /// The winner is confirmed, or nothing is left to try.
    Done,
    /// The generator could not keep its schedule: the search says so and stops.
    ClientsLimit,
    /// The search stops with this outcome.
    Stop(String),
    /// `--min` already failed: the knee is below the range searched.
    BelowMin,
}

/// The search's state between windows, and its rules as a pure function of each verdict
/// ([`Bracket::next`]): climb by doubling from `--min` until a window fails, bisect
/// between the last pass and the first failure down to the tolerance, then confirm the
/// winner with a full window; a failed confirmation steps down by the tolerance, three
/// times at most. A short climb window that fails softly is run again at full length.
#[derive(Debug, Clone)]
struct Bracket {
    /// The highest rate that held.
    lo: Option<f64>,
    /// The lowest rate that did not.
    hi: Option<f64>,
    /// The next window's rate.
    rate: f64,
    /// The next window's phase: climb, recheck, bisect or confirm.
    phase: &'static str,
    /// Confirmations failed so far.
    confirms: u32,
    /// The winner held its confirmation.
    confirmed: bool,
}

impl Bracket {
    fn new(min: f64) -> Self {
        Bracket {
            lo: None,
            hi: None,
            rate: min,
            phase: "climb",
            confirms: 0,
            confirmed: false,
        }
    }

    /// The step after a window at [`Bracket::rate`] judged `verdict`.
    fn next(&mut self, verdict: Verdict, soft: bool, plan: &Plan) -> Next {
        let rate = self.rate;
        match verdict {
            Verdict::Invalid => return Next::ClientsLimit,
            Verdict::Pass if self.phase == "confirm" => {
                self.lo = Some(rate);
                self.confirmed = true;
                return Next::Done;
            }
            Verdict::Fail if self.phase == "confirm" => {
                // The winner did not hold twice: a step down, confirmed in turn.
                self.hi = Some(rate);
                self.lo = None;
                self.confirms += 1;
                if self.confirms >= 3 {
                    return Next::Stop(format!(
                        "the winner failed its confirmation {} times, down to {rate:.0}/s: the server's capacity moves more than the tolerance between windows; give a longer --window or a wider --tolerance",
                        self.confirms
                    ));
                }
                self.rate = rate * (1.0 - plan.tolerance);
                return Next::Window;
            }
            Verdict::Pass => {
                self.lo = Some(rate);
                if self.phase == "climb" || self.phase == "recheck" {
                    if rate >= plan.max {
                        self.phase = "confirm";
                    } else {
                        self.phase = "climb";
                        self.rate = (rate * 2.0).min(plan.max);
                    }
                    return Next::Window;
                }
            }
            Verdict::Fail if self.phase == "climb" && soft && self.lo.is_some() => {
                // A short window's soft failure: a full window at the same rate decides.
                self.phase = "recheck";
                return Next::Window;
            }
            Verdict::Fail => {
                self.hi = Some(rate);
                if self.lo.is_none() {
                    return Next::BelowMin;
                }
                self.phase = "bisect";
            }
        }
        // Bisect between the last pass and the first fail, or confirm the winner.
        match (self.lo, self.hi) {
            (Some(l), Some(h)) if (h - l) / l > plan.tolerance && self.phase != "confirm" => {
                self.phase = "bisect";
                self.rate = (l + h) / 2.0;
                Next::Window
            }
            (Some(l), _) => {
                self.phase = "confirm";
                self.rate = l;
                Next::Window
            }
            _ => Next::Done,
        }
    }
}

fn probe_line(p: &Probe) -> String {
    format!(
        "{:>2} {:<7} offered {:>10.0}/s achieved {:>10.0}/s p50 {:>8} p99 {:>8} p99.9 {:>8} lag p99 {:>8} errors {:>6}  {:<7} {}",
        p.n,
        p.phase,
        p.offered,
        p.achieved,
        human_us(p.p50_us),
        human_us(p.p99_us),
        human_us(p.p999_us),
        human_us(p.lag_p99_us),
        p.errors,
        p.verdict.word().to_uppercase(),
        p.reason
    )
}

impl Search {
    /// The table for stdout.
    pub fn table(&self) -> String {
        let mut out = format!(
            "crest search {}  SLO {}  {:.0}..{:.0}/s  tolerance {:.1}%  {} window(s) in {:.1} s\n",
            self.target,
            self.slos.join(","),
            self.min_rps,
            self.max_rps,
            self.tolerance * 100.0,
            self.probes.len(),
            self.elapsed_s
        );
        for p in &self.probes {
            out.push_str(&probe_line(p));
            out.push('\n');
        }
        let _ = writeln!(out, "{}", self.outcome);
        out
    }

    /// `report.html` of the search: the hockey stick (latency against the offered rate)
    /// and the windows.
    pub fn html(&self) -> String {
        let mut probes: Vec<&Probe> = self
            .probes
            .iter()
            .filter(|p| p.verdict != Verdict::Invalid)
            .collect();
        probes.sort_by(|a, b| a.offered.total_cmp(&b.offered));
        let xs: Vec<f64> = probes.iter().map(|p| p.offered).collect();
        let mut series: Vec<(String, &str, Vec<f64>)> = vec![
            (
                "p50".into(),
                "#1f77b4",
                probes.iter().map(|p| p.p50_us).collect(),
            ),
            (
                "p99".into(),
                "#d62728",
                probes.iter().map(|p| p.p99_us).collect(),
            ),
            (
                "p99.9".into(),
                "#9467bd",
                probes.iter().map(|p| p.p999_us).collect(),
            ),
        ];
        for slo in &self.slos {
            if let Ok(v) = parse_slos(slo) {
                series.push((format!("SLO {slo}"), "#999", vec![v[0].limit_us; xs.len()]));
            }
        }
        let refs: Vec<(&str, &str, Vec<f64>)> = series
            .iter()
            .map(|(n, c, v)| (n.as_str(), *c, v.clone()))
            .collect();
        let mut h = String::from(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>crest search</title><style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.l{text-align:left}.pass{color:#080}.fail{color:#b00}.invalid{color:#b60}</style></head><body>",
        );
        let _ = write!(
            h,
            "<h1>crest search: {}</h1><p>{}</p><p>SLO {}; {:.0} to {:.0}/s; tolerance {:.1}%; error budget {:.3}%; {} shard(s); {} window(s) in {:.1} s.</p>",
            esc(&self.target),
            esc(&self.outcome),
            esc(&self.slos.join(", ")),
            self.min_rps,
            self.max_rps,
            self.tolerance * 100.0,
            self.error_budget * 100.0,
            self.shards,
            self.probes.len(),
            self.elapsed_s
        );
        h.push_str(&chart_xy(
            "Latency against the offered rate (the hockey stick)",
            &xs,
            &refs,
            "µs",
            true,
            ("offered rate, requests per second", "/s"),
        ));
        h.push_str("<h2>Windows</h2><table><tr><th>#</th><th>phase</th><th>offered /s</th><th>achieved /s</th><th>p50</th><th>p99</th><th>p99.9</th><th>lag p99</th><th>errors</th><th>verdict</th><th>reason</th></tr>");
        for p in &self.probes {
            let v = p.verdict.word();
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"l\">{}</td><td>{:.0}</td><td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l {v}\">{v}</td><td class=\"l\">{}</td></tr>",
                p.n,
                p.phase,
                p.offered,
                p.achieved,
                human_us(p.p50_us),
                human_us(p.p99_us),
                human_us(p.p999_us),
                human_us(p.lag_p99_us),
                p.errors,
                esc(&p.reason)
            );
        }
        h.push_str("</table></body></html>\n");
        h
    }
}

/// Writes `search.json` and `report.html` into `dir`; returns the JSON's path.
///
/// # Errors
/// The file that cannot be written, named.
pub fn write(s: &Search, dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let html = dir.join("report.html");
    std::fs::write(&html, s.html()).map_err(|e| format!("{}: {e}", html.display()))?;
    let json = serde_json::to_string_pretty(s).map_err(|e| format!("search.json: {e}"))?;
    let path = dir.join("search.json");
    std::fs::write(&path, json).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn bracket_plan(min: f64, max: f64) -> Plan {
        Plan {
            slos: Vec::new(),
            min,
            max,
            tolerance: 0.05,
            error_budget: 0.001,
            probe_window: Duration::from_secs(2),
            window: Duration::from_secs(5),
            warmup: Duration::from_secs(1),
            between: Between::None,
            lag_limit_us: 1_000.0,
        }
    }

    /// Drives the search's rules against a server that holds exactly `capacity` (every
    /// window at or below it passes, every one above fails) and returns the windows it
    /// asked for, with the end.
    fn drive(plan: &Plan, capacity: f64) -> (Vec<(&'static str, f64)>, Next, Bracket) {
        let mut b = Bracket::new(plan.min);
        let mut windows = Vec::new();
        loop {
            windows.push((b.phase, b.rate));
            let v = if b.rate <= capacity {
                Verdict::Pass
            } else {
                Verdict::Fail
            };
            match b.next(v, false, plan) {
                Next::Window if windows.len() < 60 => {}
                end => return (windows, end, b),
            }
        }
    }

    /// Climb by doubling, bisect to the tolerance, confirm: the knee lands within the
    /// tolerance below the capacity, confirmed, with the first failure above it.
    #[test]
    fn the_bracket_climbs_bisects_and_confirms_below_the_capacity() {
        let plan = bracket_plan(1_000.0, 1_000_000.0);
        let (windows, end, b) = drive(&plan, 37_000.0);
        assert_eq!(end, Next::Done);
        let climb: Vec<f64> = windows[..7].iter().map(|w| w.1).collect();
        assert_eq!(
            climb,
            [
                1_000.0, 2_000.0, 4_000.0, 8_000.0, 16_000.0, 32_000.0, 64_000.0
            ]
        );
        assert!(windows[..7].iter().all(|w| w.0 == "climb"));
        assert_eq!(windows.last().unwrap().0, "confirm");
        let (knee, fail) = (b.lo.unwrap(), b.hi.unwrap());
        assert!(b.confirmed);
        assert!(knee <= 37_000.0 && fail > 37_000.0, "{knee} {fail}");
        assert!((fail - knee) / knee <= plan.tolerance, "{knee} {fail}");
    }

    /// A server that holds --max is confirmed at --max; one that fails --min stops at
    /// once; a generator that cannot keep its schedule stops the search as such.
    #[test]
    fn the_bracket_ends_at_max_below_min_and_on_a_generator_limit() {
        let plan = bracket_plan(1_000.0, 5_000.0);
        let (windows, end, b) = drive(&plan, 1e9);
        assert_eq!(end, Next::Done);
        assert_eq!(windows.last().unwrap(), &("confirm", 5_000.0));
        assert_eq!((b.lo, b.hi, b.confirmed), (Some(5_000.0), None, true));
        let (windows, end, _) = drive(&plan, 10.0);
        assert_eq!((windows.len(), end), (1, Next::BelowMin));
        let mut b = Bracket::new(1_000.0);
        assert_eq!(b.next(Verdict::Invalid, false, &plan), Next::ClientsLimit);
    }

    /// A soft failure of a short climb window is run again at full length before it
    /// counts; a winner that fails its confirmation steps down by the tolerance, and
    /// three failed confirmations stop the search.
    #[test]
    fn soft_failures_are_rechecked_and_failed_confirmations_step_down() {
        let plan = bracket_plan(1_000.0, 1_000_000.0);
        let mut b = Bracket::new(1_000.0);
        assert_eq!(b.next(Verdict::Pass, false, &plan), Next::Window);
        assert_eq!((b.phase, b.rate), ("climb", 2_000.0));
        assert_eq!(b.next(Verdict::Fail, true, &plan), Next::Window);
        assert_eq!((b.phase, b.rate), ("recheck", 2_000.0));
        assert_eq!(b.next(Verdict::Pass, false, &plan), Next::Window);
        assert_eq!((b.phase, b.rate), ("climb", 4_000.0));

        let mut b = Bracket::new(1_000.0);
        b.phase = "confirm";
        b.lo = Some(10_000.0);
        b.rate = 10_000.0;
        for i in 1..=2 {
            assert_eq!(b.next(Verdict::Fail, false, &plan), Next::Window);
            assert_eq!(b.phase, "confirm");
            let want = 10_000.0 * 0.95f64.powi(i);
            assert!((b.rate - want).abs() < 1e-6, "{} {want}", b.rate);
        }
        let end = b.next(Verdict::Fail, false, &plan);
        assert!(
            matches!(&end, Next::Stop(m) if m.contains("3 times")),
            "{end:?}"
        );
    }

    #[test]
    fn a_queue_grows_when_the_end_stays_high_not_for_one_stall() {
        // Over capacity: p50 climbs interval after interval.
        assert_eq!(
            queue_grew(&[1_100.0, 3_000.0, 9_000.0, 15_000.0, 21_000.0]),
            Some((1_100.0, 15_000.0))
        );
        // One stall in the last interval, or one that drained: no growth.
        assert_eq!(
            queue_grew(&[1_100.0, 1_200.0, 1_100.0, 1_150.0, 30_000.0]),
            None
        );
        assert_eq!(
            queue_grew(&[1_100.0, 30_000.0, 1_300.0, 1_100.0, 1_200.0]),
            None
        );
        // A climb window (two intervals) judges its last one.
        assert_eq!(queue_grew(&[1_100.0, 9_000.0]), Some((1_100.0, 9_000.0)));
        // Sub-millisecond medians never count as a queue.
        assert_eq!(queue_grew(&[100.0, 500.0, 900.0, 950.0]), None);
        assert_eq!(queue_grew(&[]), None);
    }

    #[test]
    fn slos_parse_with_classes_quantiles_and_units() {
        let s = parse_slos("p99<=1ms, p99.9<=5ms,reads:max<=250us,p50<=0.5s").unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!((s[0].quantile, s[0].limit_us), (0.99, 1_000.0));
        assert!((s[1].quantile - 0.999).abs() < 1e-12);
        assert_eq!(s[2].class.as_deref(), Some("reads"));
        assert_eq!((s[2].quantile, s[2].limit_us), (1.0, 250.0));
        assert_eq!(s[3].limit_us, 500_000.0);
        assert_eq!(s[2].to_string(), "reads:max<=250µs");
        for bad in [
            "",
            "p99",
            "p99<1ms",
            "p100<=1ms",
            "q99<=1ms",
            "p99<=1",
            "p99<=-1ms",
        ] {
            let e = parse_slos(bad).unwrap_err();
            assert!(
                e.starts_with("--slo") && e.contains("p99<=1ms"),
                "{bad}: {e}"
            );
        }
    }
}
