//! From a run's results to its [`Report`]: the one place where numbers are merged.

use crate::config::RunConfig;
use crate::merge;
use crate::orchestrate::RunResults;
use crate::server_stats::ServerStats;
use crest_model::plan::Pacer;
use crest_model::schedule::Arrival;
use crest_model::shapes::Ttl;
use crest_report::server::series;
use crest_report::{
    Checks, ClassReport, ClassSettings, Histograms, Percentiles, ProfileSegment, Report,
    SCHEMA_VERSION, Settings, Summary, Target, TlsReport, Totals, WorkerReport, commands,
    commands_over_classes, error_map,
};
use std::collections::BTreeMap;

/// The connections' lives, with the churn asked for.
fn conn_report<'a>(
    cfg: &RunConfig,
    books: impl Iterator<Item = &'a merge::WorkerBooks>,
) -> crest_report::ConnReport {
    let life = merge::connections(books);
    let phase = |i: usize| {
        let h = &life.phases[i];
        (!h.is_empty()).then(|| Percentiles::of(h))
    };
    crest_report::ConnReport {
        lifetime: cfg.churn.lifetime.map(|(l, j)| {
            if j.is_zero() {
                humantime::format_duration(l).to_string()
            } else {
                format!(
                    "{}±{}",
                    humantime::format_duration(l),
                    humantime::format_duration(j)
                )
            }
        }),
        rate: cfg.churn.rate,
        initial: life.initial,
        opened: life.opened,
        retired: life.retired,
        setup_us: Percentiles::of(&life.setup),
        connect_us: phase(0),
        tls_us: phase(1),
        session_us: phase(2),
    }
}

/// Per target node; a memcached ring's servers carry the share of the keys the ring gives
/// each (its hash space) where a cluster's nodes carry their slots'.
fn node_reports(
    cfg: &RunConfig,
    nodes: &[crest_model::stats::NodeStats],
    completed: u64,
) -> Vec<crest_report::NodeReport> {
    let mut all = crest_report::NodeReport::all(nodes, completed);
    if cfg.protocol.is_memcache() {
        let shares = crest_memcache::ring::Ring::of_addrs(&cfg.ring).shares();
        for n in &mut all {
            let at = cfg.ring.iter().position(|s| *s == n.addr);
            n.slots = 0;
            n.slot_share = at
                .and_then(|i| shares.get(i))
                .map_or(0.0, |s| (s * 1e4).round() / 1e4);
        }
    }
    all
}

/// `--check-staleness`'s counts, summed over classes and workers.
fn staleness(cfg: &RunConfig, results: &RunResults) -> crest_report::StalenessReport {
    let mut all = crest_model::stats::ClassCounts::default();
    for c in &cfg.classes {
        all.add(&merge::class_counts(
            results.workers.iter().map(|m| &m.books),
            &c.name,
        ));
    }
    crest_report::StalenessReport::of(all.stale_checked, all.stale, all.behind.as_ref())
}

/// Every node's outages; slots are named only for a cluster (a memcached ring's "slots"
/// are its servers, a standalone primary holds them all).
fn outage_reports(
    cfg: &RunConfig,
    nodes: &[crest_model::stats::NodeStats],
    timeline: &[crest_report::TimelinePoint],
    cluster: bool,
) -> Vec<crest_report::OutageReport> {
    let mut all = crest_report::OutageReport::all(
        nodes,
        cfg.warmup.as_nanos() as u64,
        timeline,
        cfg.interval.as_secs_f64(),
    );
    if !cluster {
        for o in &mut all {
            o.slots.clear();
        }
    }
    all
}

/// A finished run as its callers keep it: the report, and the errors of the files written
/// during the run.
#[derive(Debug)]
pub struct Ran {
    /// The report.
    pub report: Report,
    /// What went wrong writing `timeline.csv` and `latency.hlog` during the run.
    pub live_errors: Vec<String>,
}

/// The end of a run ([`crate::orchestrate::run_with`]'s `finish`): its report, and with
/// `--admin` and `--admin-linger` the report.html the live page shows while the API lingers.
pub fn finish(cfg: &RunConfig, mut results: RunResults) -> (Ran, Option<String>) {
    let live_errors = std::mem::take(&mut results.live_errors);
    let report = build(cfg, results);
    // Only a lingering API can serve it: without a linger it closes with the run.
    let html = (cfg.admin.is_some() && !cfg.admin_linger.is_zero())
        .then(|| crest_report::html::run::render(&report));
    (
        Ran {
            report,
            live_errors,
        },
        html,
    )
}

/// Builds the report of a run from its configuration and what its workers measured: the
/// run totals (merged by addition as the intervals came, never averaged), the timeline laid
/// out during the run, each worker's row, and the books' self-checks.
pub fn build(cfg: &RunConfig, mut results: RunResults) -> Report {
    let members = &results.workers;
    let duration_ns = results.measured_ns(cfg);
    let duration_s = duration_ns as f64 / 1e9;
    // What each class asked for, runtime changes included; interrupted: up to the
    // interrupt.
    let asked = |i: usize| {
        results
            .profiles
            .get(i)
            .cloned()
            .flatten()
            .map(|p| p.expected(0, duration_ns))
    };
    let class_target = |i: usize| match asked(i) {
        Some(n) => Target::Rate(n / duration_s),
        None => Target::MAX,
    };
    let target = if cfg.closed_loop() {
        Target::MAX
    } else {
        Target::Rate((0..cfg.classes.len()).filter_map(asked).sum::<f64>() / duration_s)
    };
    let all = &results.totals;
    let (workers, mut problems, in_flight, unsent) = worker_rows(&results);
    // Taken, not copied: the one part of the results that grows with the run's length.
    let mut timeline = std::mem::take(&mut results.timeline);
    let classes = class_reports(cfg, &results, &class_target, duration_s);
    let total = merge::all_commands(all);
    let nodes = merge::nodes(members.iter().map(|m| &m.books));
    // Slots routed: `--cluster`, more than one node, a node with a share of the slots, or
    // a redirect followed (only slot routing follows them: a one-node cluster that
    // answers MOVED to itself has all 16,384 slots).
    let cluster = !cfg.protocol.is_memcache()
        && (cfg.cluster == crest_model::target::ClusterMode::On
            || nodes.iter().filter(|n| n.slots > 0).count() > 1
            || (nodes.len() > 1 && !cfg.read_from.uses_replicas() && cfg.replicas.is_empty())
            || nodes.iter().any(|n| {
                (n.primary && n.slots != u32::from(crest_model::slot::SLOTS))
                    || !n.redirects.is_zero()
            }));
    let outages = outage_reports(cfg, &nodes, &timeline, cluster);
    crest_report::OutageReport::mark(&outages, &mut timeline, cfg.interval.as_secs_f64());
    let commands = commands_over_classes(&merge::by_name(all), &classes, duration_s);
    let server = server_report(cfg, &results, &timeline, &commands, cluster);
    let (server, server_problem) = match server {
        Some((r, p)) => (Some(r), p),
        None => (None, None),
    };
    let server_agrees = server.as_ref().and_then(|s| s.agrees);
    let server_stats = match (&results.server, &server) {
        (ServerStats::Sampled(_), None) => {
            "unavailable: no sample before and after the load".into()
        }
        (s, _) => s.word(),
    };
    problems.extend(server_problem);
    let conn_errors = merge::connection_errors(members.iter().map(|m| &m.books));
    let complete = !results.interrupted && !members.iter().any(|m| m.lost()) && problems.is_empty();
    Report {
        schema_version: SCHEMA_VERSION,
        complete,
        interrupted: results.interrupted,
        run_id: results.run_id.clone(),
        crest_version: env!("CARGO_PKG_VERSION").into(),
        target: if results.builtin_target {
            "builtin".into()
        } else if cfg.ring.len() > 1 {
            format!("memcache://{}", cfg.ring.join(","))
        } else {
            cfg.target.clone().unwrap_or_default()
        },
        auth: cfg.session.login.is_some(),
        user: cfg.session.login.as_ref().map(|l| l.user.clone()),
        db: cfg.session.db,
        tls: tls_report(cfg, &results),
        resp: cfg.session.resp.version(),
        protocol: cfg.protocol.name().into(),
        tracking: cfg.session.tracking,
        cluster,
        read_from: cfg.read_from.name().into(),
        nodes: node_reports(cfg, &nodes, total.completed),
        outage_ms: crest_report::OutageReport::united_ms(&outages, duration_s),
        outages,
        staleness: cfg.check_staleness.then(|| staleness(cfg, &results)),
        replay: results.replay.clone(),
        outages_dropped: nodes.iter().map(|n| n.outages_dropped).sum(),
        connections: conn_report(cfg, members.iter().map(|m| &m.books)),
        started_at: humantime::format_rfc3339_millis(results.started_at).to_string(),
        duration_s,
        arrival: match cfg.arrival {
            Arrival::Uniform => "uniform",
            Arrival::Poisson => "poisson",
            Arrival::Etc => "etc",
        }
        .into(),
        settings: Settings {
            classes: class_settings(
                cfg,
                &class_target,
                members.iter().map(|m| m.info.shards).sum(),
            ),
            pacer: pacer_word(cfg.pacer),
            lag_bound_us: cfg.pacer.lag_bound_ns() as f64 / 1e3,
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
            generator_cpu_s: (timeline.iter().map(|p| p.generator_cpu_s).sum::<f64>() * 1e3)
                .round()
                / 1e3,
            busiest_shard: timeline.iter().map(|p| p.busiest_shard).fold(0.0, f64::max),
            histograms: Histograms::of(&total),
        },
        commands,
        classes,
        checks: checks(&timeline, problems, results.late_intervals, server_agrees),
        server_stats,
        server,
        checkpoints: results.checkpoints.clone(),
        changes: results.changes.clone(),
        stopped_by: results.stopped_by.map(String::from),
        timeline,
        connection_errors: error_map(&conn_errors),
        error_messages: results.error_messages.iter().cloned().collect(),
    }
}

/// Each worker's row, the books' self-check problems, and the requests left in flight and
/// never sent across the fleet.
fn worker_rows(results: &RunResults) -> (Vec<WorkerReport>, Vec<String>, u64, u64) {
    let mut problems = Vec::new();
    let mut workers = Vec::new();
    let (mut in_flight, mut unsent) = (0, 0);
    for m in &results.workers {
        let missing = match (&m.lost_reason, results.interrupted) {
            (Some(r), _) => r.as_str(),
            (None, true) => "the run was interrupted",
            (None, false) => "never finished",
        };
        problems.extend(m.books.check(&m.info.name, missing));
        let f = m.books.final_.as_ref();
        in_flight += f.map_or(0, |f| f.in_flight);
        unsent += f.map_or(0, |f| f.unsent);
        let t = m.books.total();
        // Full histograms for one worker at a time: a fleet's would not fit together.
        let all = f.map(|f| f.all.to_stats());
        let all = all.as_ref();
        workers.push(WorkerReport {
            id: m.info.id.clone(),
            name: m.info.name.clone(),
            host: m.info.host.clone(),
            shards: m.info.shards,
            cpus: m.info.cpus.clone(),
            clock_offset_us: m.offset_ns as f64 / 1e3,
            rtt_us: m.rtt_ns as f64 / 1e3,
            lost: m.lost(),
            lost_reason: m.lost_reason.clone(),
            scheduled: t.scheduled,
            completed: t.completed,
            errors: t.errors,
            in_flight: f.map(|f| f.in_flight),
            latency_us: all.map(|a| Percentiles::of(&a.latency)),
            service_time_us: all.map(|a| Percentiles::of(&a.service_time)),
            schedule_lag_us: all.map(|a| Percentiles::of(&a.schedule_lag)),
            histograms: all.map(Histograms::of),
        });
    }
    (workers, problems, in_flight, unsent)
}

/// The server's side of the report from its `INFO` samples, beside the books' counts
/// (None: no samples, or not enough of them).
fn server_report(
    cfg: &RunConfig,
    results: &RunResults,
    timeline: &[crest_report::TimelinePoint],
    commands: &BTreeMap<String, Summary>,
    cluster: bool,
) -> Option<(series::ServerReport, Option<String>)> {
    let ServerStats::Sampled(samples) = &results.server else {
        return None;
    };
    let keys = keys_per_command(cfg, results);
    let first_rate = timeline.first().map_or(0.0, |p| {
        p.achieved_rate
            .max(p.scheduled as f64 / cfg.interval.as_secs_f64().max(1e-9))
    });
    let sent = commands
        .iter()
        .map(|(name, s)| {
            let sent = series::Sent {
                sent: s.sent,
                answered: s.answered(),
                completed: s.completed,
                misses: s.misses,
            };
            (name.clone(), sent)
        })
        .collect();
    let books = series::Books {
        commands: &sent,
        rows: timeline.len(),
        interval_s: cfg.interval.as_secs_f64(),
        warmup: !cfg.warmup.is_zero(),
        in_flight_max: cfg
            .classes
            .iter()
            .map(|c| u64::from(c.connections) * u64::from(c.shape.pipeline))
            .sum(),
        first_rate,
        cluster,
        replica_reads: !cluster && cfg.read_from.uses_replicas(),
        coordinator_calls: &results.coordinator_calls,
        short: short_books(results),
        refused: results
            .error_messages
            .iter()
            .map(|(_, m)| m)
            .find(|m| m.contains("max number of clients"))
            .cloned(),
        memcache: cfg
            .protocol
            .is_memcache()
            .then_some(crest_report::server::memcache::McBooks {
                meta: cfg.protocol == crest_model::target::Protocol::McMeta,
                keys: &keys,
            }),
    };
    series::report(samples, &books)
}

/// memcached counts a multi-get once per key: per command that names several keys a
/// request (`MGET` with `--batch`), the keys of its requests over every class (each
/// class's requests times its own batch).
fn keys_per_command(
    cfg: &RunConfig,
    results: &RunResults,
) -> BTreeMap<String, crest_report::server::memcache::Keys> {
    let mut keys: BTreeMap<String, crest_report::server::memcache::Keys> = BTreeMap::new();
    if !cfg.protocol.is_memcache() {
        return keys;
    }
    for c in &cfg.classes {
        let Ok(defs) = c.shape.commands(cfg.protocol) else {
            continue;
        };
        let by = merge::of_class(&results.totals, &c.name);
        for (def, _) in defs.iter().filter(|(d, _)| d.keys() > 1) {
            if let Some(s) = by.get(&def.name) {
                let k = keys.entry(def.name.clone()).or_default();
                k.sent += s.sent * u64::from(def.keys());
                k.completed += s.completed * u64::from(def.keys());
            }
        }
    }
    keys
}

/// Why the books hold less than reached the server: the workers lost (what each sent
/// after its last interval is in no book) and an interrupt (what was in flight).
fn short_books(results: &RunResults) -> Option<String> {
    let lost: Vec<&str> = results
        .workers
        .iter()
        .filter(|w| w.lost())
        .map(|w| w.info.name.as_str())
        .collect();
    let lost = match lost.as_slice() {
        [] => None,
        [one] => Some(format!("worker {one} was lost")),
        many => Some(format!("workers {} were lost", many.join(", "))),
    };
    match (lost, results.interrupted) {
        (Some(l), true) => Some(format!("{l} and the run was interrupted")),
        (Some(l), false) => Some(l),
        (None, true) => Some("the run was interrupted".into()),
        (None, false) => None,
    }
}

/// The TLS the run spoke to its target, with the handshakes its workers made.
fn tls_report(cfg: &RunConfig, results: &RunResults) -> Option<TlsReport> {
    cfg.tls.as_ref().map(|t| {
        let books = results.workers.iter().map(|m| &m.books);
        let h = merge::handshakes(books).unwrap_or_default();
        TlsReport {
            verify: t.verify.word().into(),
            server_name: t.server_name.clone(),
            ca: if t.ca_pem.is_some() { "file" } else { "system" }.into(),
            client_certificate: t.client.is_some(),
            version: h.version,
            cipher: h.cipher,
            handshakes_full: h.full,
            handshakes_resumed: h.resumed,
        }
    })
}

/// Each class's settings as the report echoes them; `rate` is what the class asked for.
fn class_settings(
    cfg: &RunConfig,
    rate: &dyn Fn(usize) -> Target,
    shards: u32,
) -> Vec<ClassSettings> {
    cfg.classes
        .iter()
        .enumerate()
        .map(|(i, c)| ClassSettings {
            name: c.name.clone(),
            rate: rate(i),
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
            mix: c.shape.mix.iter().cloned().collect(),
            keys: c.shape.keys.count,
            key_prefix: c.shape.keys.prefix.clone(),
            key_distribution: c.shape.keys.dist.to_string(),
            key_size: c.shape.keys.lengths.name(),
            value_sizes: c.shape.values.to_string(),
            value_content: c.shape.content.to_string(),
            connections: cfg.connections(c, shards),
            pipeline: c.shape.pipeline,
            ttl_s: match c.shape.ttl {
                Some(Ttl::Fixed(s)) => Some(s),
                _ => None,
            },
            ttl_table: match &c.shape.ttl {
                Some(t @ Ttl::Table(_)) => t.to_string(),
                _ => String::new(),
            },
            batch: c.shape.batch,
            members: c.shape.members,
            member_order: if c.shape.members_sequential {
                "sequential"
            } else {
                "uniform"
            }
            .into(),
            range: c.shape.range,
            prefill: c.prefill,
        })
        .collect()
}

/// The pacer as `--pacer` spells it.
fn pacer_word(p: Pacer) -> String {
    match p {
        Pacer::Sleep => "sleep".to_string(),
        Pacer::Spin => "spin".to_string(),
        Pacer::SleepWithin(t) => format!(
            "sleep:{}",
            humantime::format_duration(std::time::Duration::from_nanos(t))
        ),
    }
}

/// The report's self-checks: the books' problems and the intervals each rule flagged.
fn checks(
    timeline: &[crest_report::TimelinePoint],
    problems: Vec<String>,
    late_intervals: u64,
    server_agrees: Option<bool>,
) -> Checks {
    let flagged = |f: &dyn Fn(&crest_report::TimelinePoint) -> bool| {
        timeline.iter().filter(|p| f(p)).map(|p| p.t_s).collect()
    };
    Checks {
        intervals_match_totals: problems.is_empty(),
        problems,
        generator_bound_intervals: flagged(&|p| p.generator_bound),
        connection_bound_intervals: flagged(&|p| p.bound == "connections"),
        off_pace_intervals: flagged(&|p| p.off_pace.is_some()),
        late_intervals,
        server_agrees,
    }
}

/// Each class's part of the report: its summary against what it asked for, its commands,
/// its push frames, its histograms.
fn class_reports(
    cfg: &RunConfig,
    results: &RunResults,
    class_target: &dyn Fn(usize) -> Target,
    duration_s: f64,
) -> BTreeMap<String, ClassReport> {
    cfg.classes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let by = merge::of_class(&results.totals, &c.name);
            let t = class_target(i);
            let sum = merge::sum(by.values());
            let books = results.workers.iter().map(|m| &m.books);
            let counts = merge::class_counts(books, &c.name);
            let report = ClassReport {
                summary: Summary::of(&sum, t, duration_s),
                commands: commands(&by, &c.shape.weights(cfg.protocol), t, duration_s),
                resp: cfg.session.resp.version(),
                pushes: counts.pushes,
                invalidations: counts.invalidations,
                histograms: Histograms::of(&sum),
            };
            (c.name.clone(), report)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::parse_pacer;
    use crest_model::schedule::{Profile, Segment};
    use crest_model::shapes::{KeyDist, ValueSizes};
    use crest_report::{Bound, OffPace, ShortPercentiles, TimelinePoint};

    /// An open-loop run at 100/s for 2 s, one class.
    fn cfg() -> RunConfig {
        crate::cli::test_run(100.0, 2)
    }

    /// The interval starting at `t_s`, with the given verdicts and nothing else of note.
    fn point(t_s: f64, generator_bound: bool, bound: Bound, off_pace: OffPace) -> TimelinePoint {
        TimelinePoint {
            t_s,
            target_rate: 100.0,
            scheduled: 100,
            achieved_rate: 100.0,
            errors: 0,
            errors_by_kind: BTreeMap::new(),
            latency_us: ShortPercentiles {
                p50: 100.0,
                p99: 200.0,
                p999: 300.0,
                ..ShortPercentiles::default()
            },
            schedule_lag_p99_us: 10.0,
            generator_bound,
            generator_cpu_s: 0.01,
            busiest_shard: 0.1,
            bound,
            off_pace,
            preemptions: 0,
            core_wait_ms: 0.0,
            steal_ms: 0.0,
            connections_opened: 0,
            nodes_out: 0,
        }
    }

    /// `sleep` and `spin` are spelled as the flag takes them.
    #[test]
    fn sleep_and_spin_are_spelled_as_the_flag_takes_them() {
        assert_eq!(pacer_word(Pacer::Sleep), "sleep");
        assert_eq!(pacer_word(Pacer::Spin), "spin");
    }

    /// A sleep with a tolerance is spelled `sleep:` and the tolerance as a duration.
    #[test]
    fn a_sleep_tolerance_is_spelled_as_a_duration() {
        assert_eq!(pacer_word(Pacer::SleepWithin(200_000)), "sleep:200us");
        assert_eq!(pacer_word(Pacer::SleepWithin(2_000_000)), "sleep:2ms");
    }

    /// Every pacer's word reads back through `--pacer` as the same pacer, so the run can
    /// be repeated from the report.
    #[test]
    fn every_pacer_word_reads_back_as_the_same_pacer() {
        for p in [
            Pacer::Sleep,
            Pacer::Spin,
            Pacer::SleepWithin(1),
            Pacer::SleepWithin(200_000),
            Pacer::SleepWithin(1_500_000),
            Pacer::SleepWithin(crest_model::plan::MAX_TOLERANCE_NS),
        ] {
            assert_eq!(parse_pacer(&pacer_word(p)), Ok(p), "{}", pacer_word(p));
        }
    }

    /// Each rule lists the start times of exactly the intervals it flagged, in order.
    #[test]
    fn each_rule_lists_the_intervals_it_flagged_by_start_time() {
        let timeline = vec![
            point(0.0, false, Bound::None, OffPace::None),
            point(0.5, true, Bound::Generator, OffPace::Busy),
            point(1.0, false, Bound::Connections, OffPace::Connections),
            point(1.5, false, Bound::Server, OffPace::Pacer),
            point(2.0, false, Bound::Connections, OffPace::None),
        ];
        let c = checks(&timeline, Vec::new(), 0, None);
        assert_eq!(c.generator_bound_intervals, vec![0.5]);
        assert_eq!(c.connection_bound_intervals, vec![1.0, 2.0]);
        assert_eq!(c.off_pace_intervals, vec![0.5, 1.0, 1.5]);
    }

    /// A quiet timeline flags no interval under any rule.
    #[test]
    fn a_quiet_timeline_flags_nothing() {
        let timeline: Vec<_> = (0..3)
            .map(|i| point(f64::from(i), false, Bound::None, OffPace::None))
            .collect();
        let c = checks(&timeline, Vec::new(), 0, Some(true));
        assert!(c.generator_bound_intervals.is_empty());
        assert!(c.connection_bound_intervals.is_empty());
        assert!(c.off_pace_intervals.is_empty());
        assert!(c.intervals_match_totals);
    }

    /// The books' problems are listed as given and make the intervals disagree with the
    /// totals; late intervals and the server's agreement are echoed.
    #[test]
    fn the_books_problems_mean_the_intervals_do_not_match_the_totals() {
        let problems = vec!["w0: 3 requests unaccounted for".to_string()];
        let c = checks(&[], problems.clone(), 7, Some(false));
        assert!(!c.intervals_match_totals);
        assert_eq!(c.problems, problems);
        assert_eq!(c.late_intervals, 7);
        assert_eq!(c.server_agrees, Some(false));
        let c = checks(&[], Vec::new(), 0, None);
        assert!(c.intervals_match_totals);
        assert_eq!(c.server_agrees, None);
    }

    /// An open-loop class's settings are echoed as configured, its profile in seconds and
    /// its rate as the caller says.
    #[test]
    fn class_settings_echo_an_open_classs_settings() {
        let mut cfg = cfg();
        let c = &mut cfg.classes[0];
        c.name = "big".into();
        c.profile = Some(
            Profile::new(vec![
                Segment {
                    duration_ns: 1_500_000_000,
                    from_rps: 100.0,
                    to_rps: 300.0,
                },
                Segment {
                    duration_ns: 500_000_000,
                    from_rps: 300.0,
                    to_rps: 300.0,
                },
            ])
            .unwrap(),
        );
        c.requests = None;
        c.shape.mix = vec![("GET".into(), 7), ("HSET".into(), 2)];
        c.shape.keys.count = 1234;
        c.shape.keys.prefix = "k:".into();
        c.shape.keys.dist = KeyDist::Zipf(0.99);
        c.shape.values = ValueSizes::Range(100, 4096);
        c.connections = 9;
        c.shape.pipeline = 3;
        c.shape.ttl = Some(Ttl::Fixed(60));
        c.shape.batch = 5;
        c.shape.members = 50;
        c.shape.members_sequential = true;
        c.shape.range = 7;
        c.prefill = true;
        let s = class_settings(&cfg, &|_| Target::Rate(250.0), 2);
        assert_eq!(
            s,
            vec![ClassSettings {
                name: "big".into(),
                rate: Target::Rate(250.0),
                profile: vec![
                    ProfileSegment {
                        duration_s: 1.5,
                        from_rps: 100.0,
                        to_rps: 300.0,
                    },
                    ProfileSegment {
                        duration_s: 0.5,
                        from_rps: 300.0,
                        to_rps: 300.0,
                    },
                ],
                requests: None,
                mix: BTreeMap::from([("GET".to_string(), 7), ("HSET".to_string(), 2)]),
                keys: 1234,
                key_prefix: "k:".into(),
                key_distribution: "zipf:0.99".into(),
                key_size: "natural".into(),
                value_sizes: "100-4096".into(),
                value_content: "fixed".into(),
                connections: 9,
                pipeline: 3,
                ttl_s: Some(60),
                ttl_table: String::new(),
                batch: 5,
                members: 50,
                member_order: "sequential".into(),
                range: 7,
                prefill: true,
            }]
        );
    }

    /// A closed-loop class echoes an empty profile and its request count, and every class
    /// gets the rate for its own index.
    #[test]
    fn class_settings_echo_a_closed_class_and_each_classs_own_rate() {
        let mut cfg = cfg();
        let mut closed = cfg.classes[0].clone();
        closed.name = "closed".into();
        closed.profile = None;
        closed.requests = Some(5000);
        cfg.classes.push(closed);
        let rate = |i: usize| {
            if i == 0 {
                Target::Rate(100.0)
            } else {
                Target::MAX
            }
        };
        let s = class_settings(&cfg, &rate, 2);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].rate, Target::Rate(100.0));
        assert_eq!(
            s[0].profile,
            vec![ProfileSegment {
                duration_s: 2.0,
                from_rps: 100.0,
                to_rps: 100.0,
            }]
        );
        assert_eq!(s[1].name, "closed");
        assert_eq!(s[1].rate, Target::Max);
        assert!(s[1].profile.is_empty());
        assert_eq!(s[1].requests, Some(5000));
    }
}
