//! `crest compare`: two or more targets under the same plan, runs as the replicates.
//!
//! # Design
//! - the live mode (the coordinator's `crest::compare`). The same configuration and seed for every run, one target
//!   swapped in; the runs interleaved in rounds A B, B A, A B … (ABBA: a drift in the
//!   machine or the servers falls on both arms alike), `--runs` per target; optionally a
//!   `FLUSHALL` (and the run's prefill) before each run. Each run is a whole `crest run`
//!   (same workers, same report, written under `--out`/runs/).
//! - this module: from reports (the live runs', or `report.json` files of earlier runs)
//!   to [`Comparison`]: per class and metric, each target's runs reduced to one number
//!   each ([`Metric`]: latency p50/p90/p99/p99.9 from the run's exact merged histogram,
//!   achieved rate, the server's CPU µs per op and `used_memory`); every other target
//!   against the first (the baseline) with [`stats`]: medians, CVs, the Hodges–Lehmann
//!   shift (relative and absolute) with its exact Mann–Whitney interval and p-value, and
//!   a verdict.
//! - [`render`]: the terminal table, `compare.json` (this module's types, serialized)
//!   and `compare.html` (the table and the targets' percentile curves overlaid).
//!
//! Why runs and not requests or intervals: requests of one run share its queues and its
//! server state, intervals follow each other; both give intervals far narrower than what
//! a re-run moves (the README's "Compare two servers" says so with numbers).

pub mod render;
pub mod stats;

use crate::model::{ClassSettings, Histograms, Report, Summary};
use crest_model::hist::Hist;
use serde::Serialize;
use stats::{ALPHA, Verdict};
use std::collections::BTreeMap;

/// What is compared per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Latency from intended time, 50th percentile, µs.
    P50,
    /// 90th.
    P90,
    /// 99th.
    P99,
    /// 99.9th.
    P999,
    /// Non-error replies per second.
    AchievedRate,
    /// The server's CPU (user + sys) per command it ran, µs.
    ServerCpuPerOp,
    /// The server's `used_memory` at the end of the run, bytes.
    UsedMemory,
}

impl Metric {
    /// Per class (and `all`); the rest are the server's, per run.
    pub const CLIENT: [Metric; 5] = [
        Metric::P50,
        Metric::P90,
        Metric::P99,
        Metric::P999,
        Metric::AchievedRate,
    ];
    /// The server's, from the report's `server` section.
    pub const SERVER: [Metric; 2] = [Metric::ServerCpuPerOp, Metric::UsedMemory];

    /// As the table shows it.
    pub fn name(self) -> &'static str {
        match self {
            Metric::P50 => "p50",
            Metric::P90 => "p90",
            Metric::P99 => "p99",
            Metric::P999 => "p99.9",
            Metric::AchievedRate => "achieved rate",
            Metric::ServerCpuPerOp => "CPU/op",
            Metric::UsedMemory => "used_memory",
        }
    }

    /// The quantile of a latency metric.
    pub fn quantile(self) -> Option<f64> {
        match self {
            Metric::P50 => Some(0.5),
            Metric::P90 => Some(0.9),
            Metric::P99 => Some(0.99),
            Metric::P999 => Some(0.999),
            _ => None,
        }
    }

    /// Unit of its values.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::AchievedRate => "req/s",
            Metric::UsedMemory => "bytes",
            _ => "µs",
        }
    }

    /// True when a larger value is better (only the achieved rate).
    pub fn higher_is_better(self) -> bool {
        self == Metric::AchievedRate
    }

    /// The verdict in words, for B against A.
    pub fn words(self, v: Verdict, b: &str, n: usize, m: usize) -> String {
        let (up, down) = match self {
            Metric::AchievedRate => ("higher", "lower"),
            Metric::ServerCpuPerOp => ("costlier", "cheaper"),
            Metric::UsedMemory => ("larger", "smaller"),
            _ => ("slower", "faster"),
        };
        match v {
            Verdict::Higher => format!("{b} {up}"),
            Verdict::Lower => format!("{b} {down}"),
            Verdict::NoDifference => "no difference".into(),
            Verdict::Inconclusive => "inconclusive".into(),
            Verdict::Unstable => "UNSTABLE".into(),
            Verdict::NoInterval => format!("no CI ({n}+{m} runs)"),
        }
    }
}

/// One run, as the comparison reads it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunEntry {
    /// Where it came from: the report file, or the live run's folder (or number).
    pub source: String,
    /// Its `run_id`.
    pub run_id: String,
    /// Its report was whole (`complete`).
    pub complete: bool,
    /// Requests that completed (all classes): none means it measured nothing, and it has
    /// no latency to compare.
    pub completed: u64,
    /// Position in the interleaved order (live mode), from 1.
    pub order: Option<usize>,
    /// (scope, metric) → value. Scopes: class names, `all` (several classes), `server`.
    #[serde(skip)]
    pub values: BTreeMap<(String, Metric), f64>,
    /// Latency samples per scope (the tail-precision guard).
    #[serde(skip)]
    pub samples: BTreeMap<String, u64>,
    /// Latency histogram per scope (ns), for the percentile curves.
    #[serde(skip)]
    pub hists: BTreeMap<String, Hist>,
}

/// One target and its runs.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Arm {
    /// Its label (`valkey` in `--target valkey=…`; A, B, … otherwise).
    pub label: String,
    /// The report's `target` (never a password).
    pub target: String,
    /// The server's version line (`valkey 8.1.8`), when it was sampled.
    pub version: Option<String>,
    /// Its `mem_allocator`.
    pub allocator: Option<String>,
    /// Its runs, in the order made.
    pub runs: Vec<RunEntry>,
}

/// A report as one run of an arm. `source` names it in messages.
pub fn entry(report: &Report, source: &str, order: Option<usize>) -> RunEntry {
    let mut scopes: Vec<(String, &Summary, &Histograms)> = report
        .classes
        .iter()
        .map(|(k, c)| (k.clone(), &c.summary, &c.histograms))
        .collect();
    if report.classes.len() > 1 {
        let t = &report.totals;
        scopes.push(("all".into(), &t.summary, &t.histograms));
    }
    let mut e = RunEntry {
        source: source.to_string(),
        run_id: report.run_id.clone(),
        complete: report.complete,
        completed: report.totals.summary.completed,
        order,
        values: BTreeMap::new(),
        samples: BTreeMap::new(),
        hists: BTreeMap::new(),
    };
    for (scope, s, h) in scopes {
        let lat = &s.latency_us;
        for m in Metric::CLIENT {
            // No request completed: no latency (a 0 would read as the fastest run).
            if s.completed == 0 && m.quantile().is_some() {
                continue;
            }
            let x = match m {
                Metric::P50 => lat.p50,
                Metric::P90 => lat.p90,
                Metric::P99 => lat.p99,
                Metric::P999 => lat.p999,
                _ => s.achieved_rate,
            };
            e.values.insert((scope.clone(), m), x);
        }
        let kind = |k: &str| s.errors_by_kind.get(k).copied().unwrap_or(0);
        let n = s.completed + kind("timeout") + kind("timeout_unsent");
        e.samples.insert(scope.clone(), n);
        if let Some(h) = crate::html::decode_b64(&h.latency) {
            e.hists.insert(scope, h);
        }
    }
    if let Some(server) = &report.server {
        if let Some(x) = server.total.cpu_us_per_op {
            e.values
                .insert(("server".into(), Metric::ServerCpuPerOp), x);
        }
        if let Some(x) = server.total.used_memory {
            e.values
                .insert(("server".into(), Metric::UsedMemory), x as f64);
        }
    }
    e
}

/// One metric of one scope: a target against the baseline.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Row {
    /// Class name, `all`, or `server`.
    pub scope: String,
    /// What is compared.
    pub metric: Metric,
    /// `µs`, `req/s` or `bytes`.
    pub unit: &'static str,
    /// `lower` or `higher`: which is better.
    pub better: &'static str,
    /// The baseline's label (A).
    pub a: String,
    /// The other target's label (B).
    pub b: String,
    /// Each run's value, in the order made.
    pub values_a: Vec<f64>,
    /// The same for B.
    pub values_b: Vec<f64>,
    /// Medians over runs.
    pub median_a: f64,
    /// B's.
    pub median_b: f64,
    /// Coefficients of variation over runs (sample sd / mean).
    pub cv_a: f64,
    /// B's.
    pub cv_b: f64,
    /// Hodges–Lehmann estimate of B / A − 1 (a fraction: 0.063 is +6.3%); null when a
    /// value is not positive.
    pub delta: Option<f64>,
    /// Its interval at `1 − alpha` (exact Mann–Whitney); null below 4 runs per target.
    pub ci: Option<[f64; 2]>,
    /// The same on the absolute scale: B − A in `unit`.
    pub shift: f64,
    /// Its interval.
    pub shift_ci: Option<[f64; 2]>,
    /// Exact two-sided Mann–Whitney p-value.
    pub p_value: f64,
    /// Holm's step-down over this scope's metrics (at `alpha`) lets this one be called:
    /// without it, a difference is not called however its interval lies.
    pub callable: bool,
    /// A run had fewer latency samples than 100 / (1 − q) beyond which the quantile is
    /// read: its value rests on a handful of requests.
    pub few_samples: bool,
    /// An arm's CV is above 10%: its runs vary too much for a small difference.
    pub unstable: bool,
    /// `higher`, `lower`, `no_difference`, `inconclusive`, `unstable`, `no_interval`.
    pub verdict: &'static str,
    /// The verdict as the table says it (`B slower`).
    pub words: String,
}

/// The whole comparison: `compare.json`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Comparison {
    /// Layout version of `compare.json`.
    pub schema_version: u32,
    /// `runs` (made by this command, interleaved) or `reports` (earlier reports).
    pub mode: &'static str,
    /// Runs per target asked for (live mode) or found (reports).
    pub runs_per_target: Vec<usize>,
    /// The interleaved order, labels (live mode).
    pub order: Vec<String>,
    /// The smallest relative effect called a difference (0.02: 2%).
    pub min_effect: f64,
    /// Two-sided level of the intervals.
    pub alpha: f64,
    /// Coverage of the intervals as built (exact: ≥ 1 − alpha), per compared target; null
    /// without an interval.
    pub coverage: Vec<Option<f64>>,
    /// The seed every run used (live mode).
    pub seed: Option<String>,
    /// `flush`, `prefill` or `none` (live mode).
    pub between: Option<String>,
    /// The targets; the first is the baseline.
    pub targets: Vec<Arm>,
    /// Every metric of every scope, each other target against the baseline.
    pub rows: Vec<Row>,
    /// What to keep in mind reading it, one line each.
    pub warnings: Vec<String>,
}

fn verdict_key(v: Verdict) -> &'static str {
    match v {
        Verdict::Higher => "higher",
        Verdict::Lower => "lower",
        Verdict::NoDifference => "no_difference",
        Verdict::Inconclusive => "inconclusive",
        Verdict::Unstable => "unstable",
        Verdict::NoInterval => "no_interval",
    }
}

/// Compares every arm with the first. `reports` are the arms' reports (for identity and
/// settings); `min_effect` is a fraction.
pub fn compare(arms: Vec<Arm>, min_effect: f64, mode: &'static str) -> Comparison {
    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    let mut coverage = Vec::new();
    let others = arms.get(1..).unwrap_or_default();
    for (base, b) in others.iter().map(|b| (&arms[0], b)) {
        coverage.push(stats::critical(base.runs.len(), b.runs.len(), ALPHA).map(|c| c.1));
        warnings.extend(pair_warnings(base, b));
        let compared = compared(base, b);
        let holm = holm_by_scope(&compared);
        for (c, callable) in compared.into_iter().zip(holm) {
            rows.push(row(base, b, c, callable, min_effect));
        }
    }
    warnings.extend(incomplete_runs(&arms));
    warnings.extend(empty_runs(&arms));
    Comparison {
        schema_version: 1,
        mode,
        runs_per_target: arms.iter().map(|a| a.runs.len()).collect(),
        order: vec![],
        min_effect,
        alpha: ALPHA,
        coverage,
        seed: None,
        between: None,
        targets: arms,
        rows,
        warnings,
    }
}

/// What to keep in mind comparing `b` with `base`: different allocators or servers, and
/// too few runs for an interval.
fn pair_warnings(base: &Arm, b: &Arm) -> Vec<String> {
    let mut warnings = Vec::new();
    // "A and B <what> (x vs y)<then>" when both are known and differ.
    let differ = |what: &str, then: &str, x: &Option<String>, y: &Option<String>| match (x, y) {
        (Some(x), Some(y)) if x != y => Some(format!(
            "{} and {} {what} ({x} vs {y}){then}",
            base.label, b.label
        )),
        _ => None,
    };
    warnings.extend(differ(
        "use different allocators",
        ": their memory figures do not compare",
        &base.allocator,
        &b.allocator,
    ));
    warnings.extend(differ(
        "run different servers",
        "",
        &base.version,
        &b.version,
    ));
    if let Some(w) = no_class_in_common(base, b) {
        warnings.push(w);
    }
    let (n, m) = (base.runs.len(), b.runs.len());
    if stats::critical(n, m, ALPHA).is_none() {
        warnings.push(format!(
            "{}+{} runs of {} and {}: too few for a confidence interval (at least 4 each); differences are shown without one",
            n, m, base.label, b.label
        ));
    }
    warnings
}

/// The classes an arm's runs measured (every scope but `all` and `server`).
fn classes(arm: &Arm) -> std::collections::BTreeSet<&str> {
    arm.runs
        .iter()
        .flat_map(|r| r.samples.keys())
        .map(String::as_str)
        .filter(|s| *s != "all")
        .collect()
}

/// The warning when `base` and `b` share no class: no class's latency or rate is
/// compared (only the totals when both have several classes, and the server's figures).
fn no_class_in_common(base: &Arm, b: &Arm) -> Option<String> {
    let (ca, cb) = (classes(base), classes(b));
    if ca.is_empty() || cb.is_empty() || !ca.is_disjoint(&cb) {
        return None;
    }
    let names = |c: &std::collections::BTreeSet<&str>| {
        let mut shown = c.iter().copied().take(5).collect::<Vec<_>>().join(", ");
        if c.len() > 5 {
            shown.push_str(&format!(", … ({} in all)", c.len()));
        }
        shown
    };
    let both_all = [base, b]
        .iter()
        .all(|a| a.runs.iter().all(|r| r.samples.contains_key("all")));
    Some(format!(
        "{} and {} have no class in common ({}: {}; {}: {}): no class's latency or rate is compared, only {}the server's figures; compare reports made with the same classes",
        base.label,
        b.label,
        base.label,
        names(&ca),
        b.label,
        names(&cb),
        if both_all {
            "the totals (all) and "
        } else {
            ""
        }
    ))
}

/// Whether a target shares no class with the baseline (the comparison then says nothing
/// about any class).
pub fn any_without_common_class(c: &Comparison) -> bool {
    c.targets
        .get(1..)
        .unwrap_or_default()
        .iter()
        .any(|b| no_class_in_common(&c.targets[0], b).is_some())
}

/// One metric of one scope compared: (scope, metric, A's values, B's values, the
/// absolute shift, the p-value).
type Compared = (String, Metric, Vec<f64>, Vec<f64>, stats::Shift, f64);

/// Every (scope, metric) the baseline's runs have, classes first (see [`scope_order`]).
fn metric_keys(base: &Arm) -> Vec<(String, Metric)> {
    let mut k: Vec<_> = base
        .runs
        .iter()
        .flat_map(|r| r.values.keys().cloned())
        .collect();
    k.sort_by(|x, y| scope_order(&x.0).cmp(&scope_order(&y.0)).then(x.cmp(y)));
    k.dedup();
    k
}

/// Every metric both arms have in every run, with its shift and its p-value.
fn compared(base: &Arm, b: &Arm) -> Vec<Compared> {
    // Every metric compared, with its p-value: each scope's metrics are one family,
    // and Holm's step-down over it decides which may be called at all (an A/A
    // comparison of five quantiles would otherwise call one about one time in ten).
    let mut compared = Vec::new();
    for (scope, metric) in metric_keys(base) {
        let get = |arm: &Arm| -> Option<Vec<f64>> {
            arm.runs
                .iter()
                .map(|r| r.values.get(&(scope.clone(), metric)).copied())
                .collect()
        };
        let (Some(va), Some(vb)) = (get(base), get(b)) else {
            continue;
        };
        let Some(shift) = stats::shift(&va, &vb, ALPHA) else {
            continue;
        };
        let p = stats::p_value(&va, &vb).unwrap_or(1.0);
        compared.push((scope, metric, va, vb, shift, p));
    }
    compared
}

/// Per compared metric, whether Holm's step-down over its scope's family lets it be
/// called, and how many metrics that family has.
fn holm_by_scope(compared: &[Compared]) -> Vec<(bool, usize)> {
    // Keys are sorted by scope, so each family is one run of `compared`.
    let mut holm: Vec<(bool, usize)> = Vec::with_capacity(compared.len());
    for family in compared.chunk_by(|x, y| x.0 == y.0) {
        let ps: Vec<f64> = family.iter().map(|c| c.5).collect();
        holm.extend(
            stats::holm(&ps, ALPHA)
                .into_iter()
                .map(|pass| (pass, ps.len())),
        );
    }
    holm
}

/// True when a run of either arm has fewer latency samples in `scope` than the quantile
/// of `metric` needs (100 / (1 − q)).
fn few_samples(base: &Arm, b: &Arm, scope: &str, metric: Metric) -> bool {
    metric.quantile().is_some_and(|q| {
        let need = (100.0 / (1.0 - q)).ceil() as u64;
        base.runs
            .iter()
            .chain(&b.runs)
            .any(|r| r.samples.get(scope).copied().unwrap_or(0) < need)
    })
}

/// One compared metric as a row: its medians, CVs, shifts with their intervals, its
/// verdict and the verdict's words. `(callable, family)` is Holm's say on it.
fn row(
    base: &Arm,
    b: &Arm,
    (scope, metric, va, vb, shift, p): Compared,
    (callable, family): (bool, usize),
    min_effect: f64,
) -> Row {
    let (n, m) = (base.runs.len(), b.runs.len());
    // A side at 0 in every run (a rate where nothing completed) has no ratio to the
    // other, but is as far from it as can be: -100%, or B's side up from nothing.
    let zero = |v: &[f64]| v.iter().all(|x| *x == 0.0);
    let positive = |v: &[f64]| v.iter().all(|x| *x > 0.0);
    let rel = stats::ratio(&va, &vb, ALPHA).or_else(|| {
        let whole = |e: f64| stats::Shift {
            estimate: e,
            ci: shift.ci.map(|_| (e, e)),
        };
        if positive(&va) && zero(&vb) {
            Some(whole(-1.0))
        } else if zero(&va) && positive(&vb) {
            Some(whole(f64::INFINITY))
        } else {
            None
        }
    });
    let (cv_a, cv_b) = (stats::cv(&va), stats::cv(&vb));
    let v = match &rel {
        Some(r) => stats::verdict(r, cv_a, cv_b, min_effect, callable),
        None => Verdict::Inconclusive,
    };
    // The interval alone would have called it: say why it is not.
    let held_back =
        !callable && rel.is_some_and(|r| stats::verdict(&r, cv_a, cv_b, min_effect, true) != v);
    // A run-level verdict on a metric where bigger is better reads the other way
    // for latency-like metrics: "higher" is B slower, said by the words.
    let few = few_samples(base, b, &scope, metric);
    let noisy = stats::unstable(cv_a, cv_b);
    let mut words = metric.words(v, &b.label, n, m);
    if noisy && matches!(v, Verdict::Higher | Verdict::Lower) {
        words.push_str(" (UNSTABLE)");
    }
    if few {
        words.push_str(" (few tail samples)");
    }
    if held_back {
        words.push_str(&format!(
            " (not called: p = {p:.3} too large among {family} metrics, Holm)"
        ));
    }
    Row {
        scope,
        metric,
        unit: metric.unit(),
        better: if metric.higher_is_better() {
            "higher"
        } else {
            "lower"
        },
        a: base.label.clone(),
        b: b.label.clone(),
        median_a: stats::median(&va).unwrap_or(0.0),
        median_b: stats::median(&vb).unwrap_or(0.0),
        cv_a,
        cv_b,
        delta: rel.map(|r| r.estimate),
        ci: rel.and_then(|r| r.ci).map(|(l, h)| [l, h]),
        shift: shift.estimate,
        shift_ci: shift.ci.map(|(l, h)| [l, h]),
        p_value: p,
        callable,
        few_samples: few,
        unstable: noisy,
        verdict: verdict_key(v),
        words,
        values_a: va,
        values_b: vb,
    }
}

/// A warning for each run whose report is not complete.
fn incomplete_runs(arms: &[Arm]) -> Vec<String> {
    let mut warnings = Vec::new();
    for arm in arms {
        for r in &arm.runs {
            if !r.complete {
                warnings.push(format!(
                    "{} run {}: its report is not complete (errors, a lost worker or a failed check): read it before trusting the comparison",
                    arm.label, r.source
                ));
            }
        }
    }
    warnings
}

/// A warning for each arm with runs where no request completed.
fn empty_runs(arms: &[Arm]) -> Vec<String> {
    arms.iter()
        .filter_map(|arm| {
            let empty = arm.runs.iter().filter(|r| r.completed == 0).count();
            (empty > 0).then(|| {
                format!(
                    "{} ({}): {empty} of {} runs completed no request (every request failed or went unanswered): no latency to compare, and a rate of 0",
                    arm.label,
                    arm.target,
                    arm.runs.len()
                )
            })
        })
        .collect()
}

/// Whether a run of any arm completed no request (the comparison then has nothing to
/// say about that arm's latency).
pub fn any_empty_run(c: &Comparison) -> bool {
    c.targets
        .iter()
        .any(|a| a.runs.iter().any(|r| r.completed == 0))
}

/// Classes first (by name), then `all`, then `server`.
fn scope_order(s: &str) -> u8 {
    match s {
        "all" => 1,
        "server" => 2,
        _ => 0,
    }
}

/// The arm's identity from one of its reports: its target, and the server's version and
/// allocator when it was sampled.
pub fn identity(report: &Report) -> (String, Option<String>, Option<String>) {
    let s = report.server.as_ref().map(|s| &s.identity);
    (
        report.target.clone(),
        s.map(|s| s.version.clone()),
        s.and_then(|s| s.mem_allocator.clone()),
    )
}

/// Settings that must agree for two runs to be the same plan: the classes (rate,
/// profile, mix, keys, sizes, connections, pipeline), pacer, timeout, warm-up, length and
/// arrival.
#[derive(Debug, PartialEq)]
pub struct Plan<'a> {
    classes: &'a [ClassSettings],
    pacer: &'a str,
    timeout_s: f64,
    warmup_s: f64,
    duration_s: f64,
    arrival: &'a str,
}

/// The plan a report was made with.
pub fn plan_of(report: &Report) -> Plan<'_> {
    let s = &report.settings;
    Plan {
        classes: &s.classes,
        pacer: &s.pacer,
        timeout_s: s.timeout_s,
        warmup_s: s.warmup_s,
        duration_s: report.duration_s,
        arrival: &report.arrival,
    }
}

/// Groups report files into arms: `LABEL=FILE` puts a file in arm LABEL, a bare FILE is
/// an arm of its own labelled by its target (or its position when targets repeat).
///
/// # Errors
/// One line naming the file that cannot be read or is not a report.
pub fn arms_from_files(specs: &[String]) -> Result<(Vec<Arm>, Vec<String>), String> {
    let mut arms: Vec<Arm> = Vec::new();
    let mut reports: Vec<(String, Report)> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let (label, path) = match spec.split_once('=') {
            _ if spec.is_empty() => {
                return Err(
                    "\"\": an empty report name; give report.json files of earlier runs".into(),
                );
            }
            Some((l, "")) if is_label(l) => {
                return Err(format!(
                    "{spec}: no file after the label; give LABEL=FILE, e.g. {l}=runs/1/report.json"
                ));
            }
            Some((l, p)) if is_label(l) => (Some(l.to_string()), p),
            _ => (None, spec.as_str()),
        };
        let report = Report::read(std::path::Path::new(path))
            .map_err(|e| format!("{path}: {e} (give report.json files of earlier runs)"))?;
        let run = entry(&report, path, None);
        let (target, version, allocator) = identity(&report);
        let label = label.unwrap_or_else(|| {
            let t = target.clone();
            if arms.iter().any(|a| a.label == t) {
                format!("{t}#{}", i + 1)
            } else {
                t
            }
        });
        match arms.iter_mut().find(|a| a.label == label) {
            Some(a) => a.runs.push(run),
            None => arms.push(Arm {
                label,
                target,
                version,
                allocator,
                runs: vec![run],
            }),
        }
        reports.push((path.to_string(), report));
    }
    let mut warnings = Vec::new();
    if let Some((first, report)) = reports.first() {
        let plan = plan_of(report);
        for (p, other) in &reports[1..] {
            if plan_of(other) != plan {
                warnings.push(format!(
                    "{p} and {first} were not made with the same plan (settings differ): the comparison mixes different loads"
                ));
                break;
            }
        }
    }
    Ok((arms, warnings))
}

/// A label as `--target LABEL=ADDR` and `LABEL=FILE` take it: letters, digits, `-_.`.
pub fn is_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(values: &[(Metric, f64)]) -> RunEntry {
        RunEntry {
            source: "x".into(),
            run_id: String::new(),
            complete: true,
            completed: 1_000,
            order: None,
            values: values
                .iter()
                .map(|(m, v)| (("main".to_string(), *m), *v))
                .collect(),
            samples: [("main".to_string(), 1_000_000)].into(),
            hists: BTreeMap::new(),
        }
    }

    fn arm(label: &str, p50s: &[f64]) -> Arm {
        Arm {
            label: label.into(),
            target: label.into(),
            version: Some("redis 7.0.15".into()),
            allocator: Some(
                if label == "B" {
                    "libc"
                } else {
                    "jemalloc-5.3.0"
                }
                .into(),
            ),
            runs: p50s
                .iter()
                .map(|p| run(&[(Metric::P50, *p), (Metric::AchievedRate, 1000.0)]))
                .collect(),
        }
    }

    #[test]
    fn a_slower_b_is_called_slower_and_equal_rates_no_difference() {
        let a = arm("A", &[100.0, 101.0, 99.0, 100.5, 100.2]);
        let b = arm("B", &[150.0, 151.0, 149.0, 150.5, 150.2]);
        let c = compare(vec![a, b], 0.02, "runs");
        let p50 = c.rows.iter().find(|r| r.metric == Metric::P50).unwrap();
        assert_eq!(p50.words, "B slower");
        let [lo, hi] = p50.shift_ci.unwrap();
        assert!(lo <= 50.0 && 50.0 <= hi, "{lo} {hi}");
        assert!((p50.delta.unwrap() - 0.5).abs() < 0.01);
        let rate = c
            .rows
            .iter()
            .find(|r| r.metric == Metric::AchievedRate)
            .unwrap();
        assert_eq!(rate.words, "no difference");
        assert!(c.warnings.iter().any(|w| w.contains("allocators")));
    }

    #[test]
    fn one_run_each_has_no_interval_and_says_so() {
        let c = compare(
            vec![arm("A", &[100.0]), arm("B", &[120.0])],
            0.02,
            "reports",
        );
        let p50 = c.rows.iter().find(|r| r.metric == Metric::P50).unwrap();
        assert_eq!(p50.verdict, "no_interval");
        assert!(p50.ci.is_none());
        assert!((p50.delta.unwrap() - 0.2).abs() < 1e-9);
        assert!(c.warnings.iter().any(|w| w.contains("too few")));
    }

    /// B answered nothing: no latency row for it (not "0µs, faster"), its rate called
    /// lower (not "inconclusive"), a warning naming it, and `any_empty_run`.
    #[test]
    fn a_target_that_completed_nothing_is_named_and_has_no_latency() {
        let a = arm("A", &[100.0, 101.0, 99.0, 100.5]);
        let mut b = arm("B", &[0.0; 4]);
        for r in &mut b.runs {
            r.completed = 0;
            r.values.remove(&("main".to_string(), Metric::P50));
            r.values
                .insert(("main".to_string(), Metric::AchievedRate), 0.0);
        }
        let c = compare(vec![a, b], 0.02, "runs");
        assert!(
            c.rows.iter().all(|r| r.metric != Metric::P50),
            "{:?}",
            c.rows
        );
        let rate = c
            .rows
            .iter()
            .find(|r| r.metric == Metric::AchievedRate)
            .unwrap();
        assert_eq!(rate.words, "B lower");
        assert_eq!(rate.delta, Some(-1.0));
        assert!(
            c.warnings
                .iter()
                .any(|w| w.starts_with("B (B): 4 of 4 runs completed no request")),
            "{:?}",
            c.warnings
        );
        assert!(any_empty_run(&c));
    }

    /// Reports with no class in common: a warning naming both sides' classes, no class
    /// row, and `any_without_common_class`; one class in common says nothing.
    #[test]
    fn targets_without_a_class_in_common_are_said_so() {
        let a = arm("A", &[100.0, 101.0]);
        let mut b = arm("B", &[100.0, 101.0]);
        for r in &mut b.runs {
            r.values = r
                .values
                .iter()
                .map(|((_, m), v)| (("default".to_string(), *m), *v))
                .collect();
            r.samples = [("default".to_string(), 1_000_000)].into();
        }
        let c = compare(vec![a.clone(), b], 0.02, "reports");
        assert!(c.rows.is_empty(), "{:?}", c.rows);
        assert!(
            c.warnings.iter().any(|w| w
                == "A and B have no class in common (A: main; B: default): no class's latency or rate is compared, only the server's figures; compare reports made with the same classes"),
            "{:?}",
            c.warnings
        );
        assert!(any_without_common_class(&c));
        let same = compare(vec![a.clone(), a], 0.02, "reports");
        assert!(!any_without_common_class(&same));
        assert!(!same.warnings.iter().any(|w| w.contains("no class")));
    }

    #[test]
    fn labels_are_plain_words() {
        assert!(is_label("valkey-8.1"));
        assert!(!is_label("redis://u:p"));
        assert!(!is_label(""));
    }
}
