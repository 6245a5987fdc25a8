//! From a run's results to its [`Report`]: the one place where numbers are merged.

use super::{
    Checks, ClassReport, ClassSettings, Histograms, IntervalLatency, Percentiles, ProfileSegment,
    Report, SCHEMA_VERSION, Settings, Summary, Target, TimelinePoint, Totals, WorkerReport,
    commands, commands_over_classes, error_map,
};
use crate::config::{ClassConfig, RunConfig};
use crate::merge::{self, ByCommand, add_into};
use crate::orchestrate::RunResults;
use crest_model::hist;
use crest_model::plan::Pacer;
use crest_model::schedule::Arrival;
use std::collections::BTreeMap;

/// Builds the report of a run from its configuration and what its workers measured:
/// merges every worker's histograms and counts (by addition, never averaging), lays out
/// the timeline, and runs the books' self-checks.
pub fn build(cfg: &RunConfig, results: &RunResults) -> Report {
    let members = &results.workers;
    let mut duration_ns = u64::try_from(cfg.duration.as_nanos()).unwrap_or(u64::MAX);
    if duration_ns == 0 {
        // Closed loop bounded by count: the run lasted from its start to the last worker's
        // final message (which follows its last reply by one message delay).
        duration_ns = u64::try_from(results.elapsed.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
    }
    let duration_s = duration_ns as f64 / 1e9;
    let class_target = |c: &ClassConfig| match &c.profile {
        Some(p) => Target::Rate(p.total() / duration_s),
        None => Target::MAX,
    };
    let target = if cfg.closed_loop() {
        Target::MAX
    } else {
        Target::Rate(cfg.expected(0, duration_ns) / duration_s)
    };
    let mut all = ByCommand::new();
    let mut timeline: BTreeMap<u32, ByCommand> = BTreeMap::new();
    let mut due: BTreeMap<u32, f64> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut workers = Vec::new();
    let (mut in_flight, mut unsent) = (0, 0);
    for m in members {
        let sum = m.books.sum();
        add_into(&mut all, &sum);
        for (k, iv) in &m.books.intervals {
            add_into(timeline.entry(*k).or_default(), iv);
        }
        for (k, t) in &m.books.targets {
            *due.entry(*k).or_default() += t;
        }
        problems.extend(m.books.check(&m.info.name, &sum));
        let f = m.books.final_.as_ref();
        in_flight += f.map_or(0, |f| f.in_flight);
        unsent += f.map_or(0, |f| f.unsent);
        let t = merge::all_commands(&sum);
        workers.push(WorkerReport {
            id: m.info.id.clone(),
            name: m.info.name.clone(),
            host: m.info.host.clone(),
            shards: m.info.shards,
            cpus: m.info.cpus.clone(),
            clock_offset_us: m.offset_ns as f64 / 1e3,
            rtt_us: m.rtt_ns as f64 / 1e3,
            lost: m.lost(),
            lost_reason: m.books.lost.clone(),
            scheduled: t.scheduled,
            completed: t.completed,
            errors: t.error_total(),
            in_flight: f.map(|f| f.in_flight),
            latency_us: Percentiles::of(&t.latency),
            service_time_us: Percentiles::of(&t.service_time),
            schedule_lag_us: Percentiles::of(&t.schedule_lag),
            histograms: Histograms::of(&t),
        });
    }
    let iv = u64::try_from(cfg.interval.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    let iv_s = iv as f64 / 1e9;
    let last = u32::try_from(duration_ns.div_ceil(iv).max(1) - 1).unwrap_or(u32::MAX);
    let mut interval_latency = Vec::new();
    let timeline: Vec<TimelinePoint> = (0..=last)
        .map(|k| {
            let by = timeline.remove(&k).unwrap_or_default();
            let start_s = f64::from(k) * iv_s;
            let sum = merge::all_commands(&by);
            interval_latency.push(IntervalLatency {
                start_s,
                length_s: iv_s,
                class: None,
                hist: sum.latency.clone(),
            });
            if cfg.classes.len() > 1 {
                for c in &cfg.classes {
                    // Added in place: no copy of every command's histograms per interval.
                    let mut h = crest_model::hist::new_hist();
                    for (_, s) in by.iter().filter(|((class, _), _)| *class == c.name) {
                        hist::add(&mut h, &s.latency);
                    }
                    interval_latency.push(IntervalLatency {
                        start_s,
                        length_s: iv_s,
                        class: Some(c.name.clone()),
                        hist: h,
                    });
                }
            }
            let t0 = u64::from(k).saturating_mul(iv);
            let target = cfg.expected(t0, t0.saturating_add(iv)) / iv_s;
            TimelinePoint::of(k, iv_s, &sum, target, due.get(&k).copied().unwrap_or(0.0))
        })
        .collect();
    let classes: BTreeMap<String, ClassReport> = cfg
        .classes
        .iter()
        .map(|c| {
            let by = merge::of_class(&all, &c.name);
            let t = class_target(c);
            let sum = merge::sum(by.values());
            (
                c.name.clone(),
                ClassReport {
                    summary: Summary::of(&sum, t, duration_s),
                    commands: commands(&by, &c.weights(), t, duration_s),
                    histograms: Histograms::of(&sum),
                },
            )
        })
        .collect();
    let total = merge::all_commands(&all);
    let conn_errors = merge::connection_errors(members.iter().map(|m| &m.books));
    Report {
        schema_version: SCHEMA_VERSION,
        run_id: results.run_id.clone(),
        crest_version: env!("CARGO_PKG_VERSION").into(),
        target: if results.builtin_target {
            "builtin".into()
        } else {
            cfg.target.clone().unwrap_or_default()
        },
        started_at: humantime::format_rfc3339_millis(results.started_at).to_string(),
        duration_s,
        arrival: match cfg.arrival {
            Arrival::Uniform => "uniform",
            Arrival::Poisson => "poisson",
        }
        .into(),
        settings: Settings {
            classes: cfg
                .classes
                .iter()
                .map(|c| ClassSettings {
                    name: c.name.clone(),
                    rate: class_target(c),
                    profile: c
                        .profile
                        .as_ref()
                        .map(|p| {
                            p.segments()
                                .iter()
                                .map(|s| ProfileSegment {
                                    duration_s: s.duration_ns as f64 / 1e9,
                                    from_rps: s.from_rps,
                                    to_rps: s.to_rps,
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    requests: c.requests,
                    mix: c.mix.iter().cloned().collect(),
                    keys: c.keys,
                    key_prefix: c.key_prefix.clone(),
                    key_distribution: c.key_dist.to_string(),
                    value_sizes: c.values.to_string(),
                    connections: c.connections,
                    pipeline: c.pipeline,
                    ttl_s: c.ttl,
                    batch: c.batch,
                    prefill: c.prefill,
                })
                .collect(),
            pacer: match cfg.pacer {
                Pacer::Sleep => "sleep",
                Pacer::Spin => "spin",
            }
            .into(),
            timeout_s: cfg.timeout.as_secs_f64(),
            drain_s: cfg.drain.as_secs_f64(),
            warmup_s: cfg.warmup.as_secs_f64(),
            interval_s: cfg.interval.as_secs_f64(),
            seed: cfg.seed.to_string(),
            backlog_limit: cfg.backlog_limit,
        },
        workers,
        totals: Totals {
            summary: Summary::of(&total, target, duration_s),
            in_flight,
            unsent,
            histograms: Histograms::of(&total),
        },
        commands: commands_over_classes(&merge::by_name(&all), &classes, duration_s),
        classes,
        checks: Checks {
            intervals_match_totals: problems.is_empty(),
            problems,
            generator_bound_intervals: timeline
                .iter()
                .filter(|p| p.generator_bound)
                .map(|p| p.t_s)
                .collect(),
        },
        timeline,
        connection_errors: error_map(&conn_errors),
        error_messages: merge::error_messages(members.iter().map(|m| &m.books)),
        interval_latency,
    }
}
