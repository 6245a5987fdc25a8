//! The rules that judge each interval of a run: whether the generator, the server or the
//! connections bound it, and why its schedule lag passed the pacer's bound (off pace).
//! Applied once, as the coordinator lays out each timeline row; the report keeps the
//! verdicts, so a saved report is rendered without them.

use crate::fmt::{round_us, round2};
use crate::model::{Bound, OffPace, ShortPercentiles, TimelinePoint, error_map, us};
use crest_model::stats::CmdStats;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Baseline {
    /// The lowest interval service-time p50 of the run so far, ns (0: none yet).
    pub service_floor: u64,
    /// The schedule lag p99 the pacer holds on a core of its own, ns
    /// ([`crest_model::plan::Pacer::lag_bound_ns`]).
    pub lag_bound_ns: u64,
}

impl Default for Baseline {
    /// No service floor yet; the default pacer's bound.
    fn default() -> Self {
        Self {
            service_floor: 0,
            lag_bound_ns: crest_model::plan::Pacer::Sleep.lag_bound_ns(),
        }
    }
}

/// The generator's work over one interval, summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    /// CPU time of every shard thread, ns.
    pub cpu_ns: u64,
    /// Busy share of the busiest shard, 0 to 1.
    pub busiest: f64,
    /// Involuntary context switches of the shard threads.
    pub preemptions: u64,
    /// Time the shard threads waited for their core, ns.
    pub queued_ns: u64,
    /// The hypervisor's steal on the shards' cores, ns.
    pub steal_ns: u64,
    /// Connections that came up (reconnects).
    pub connections_opened: u64,
}

impl Load {
    /// Adds one worker's (or relay's) interval: sums, and the busiest of the busiest.
    pub fn add(&mut self, o: Load) {
        self.cpu_ns = self.cpu_ns.saturating_add(o.cpu_ns);
        self.busiest = self.busiest.max(o.busiest);
        self.preemptions = self.preemptions.saturating_add(o.preemptions);
        self.queued_ns = self.queued_ns.saturating_add(o.queued_ns);
        self.steal_ns = self.steal_ns.saturating_add(o.steal_ns);
        self.connections_opened = self.connections_opened.saturating_add(o.connections_opened);
    }
}

/// Each cause of an off-pace interval ([`TimelinePoint::off_pace`]), in the order they are
/// tried, and what it asks of the user.
pub const OFF_PACE_CAUSES: &[(OffPace, &str)] = &[
    (
        OffPace::Busy,
        "a shard was busy 90% of the interval or more: add shards or workers",
    ),
    (
        OffPace::Connections,
        "requests waited for a free connection: more --connections or --pipeline",
    ),
    (OffPace::Preempted, "give each shard a core of its own"),
    (
        OffPace::Steal,
        "the hypervisor ran other guests on the shards' virtual CPUs: a dedicated host or vCPUs pinned to physical cores",
    ),
    (
        OffPace::Pacer,
        "with free connections and its core (nearly) its own, the pacer itself came late: its own work, or timer or host latency the workers cannot see (a VM's vCPU steal, interrupts)",
    ),
];

/// Shards that waited for their core this share of an interval or more (summed over
/// shards) were held back enough to make the lag p99: the requests due while they waited,
/// and those queued behind them as they caught up, are about 1% of the interval's. Less
/// waiting than this cannot explain an interval's p99, so it is not blamed for it.
pub const PREEMPTED_SHARE: f64 = 0.005;

/// A shard busy for this share of an interval or more cannot keep its schedule.
pub const SATURATED: f64 = 0.9;

impl TimelinePoint {
    /// Builds one point from the merged second, the profile's target for it, and what the
    /// workers that reported this second were due to schedule (`due`; less than `target`
    /// when a worker was lost).
    pub fn of(
        index: u32,
        interval_s: f64,
        s: &CmdStats,
        target: f64,
        due_rate: f64,
        load: Load,
        base: Baseline,
    ) -> Self {
        let service_floor = base.service_floor;
        let lag_p99 = s.schedule_lag.value_at_quantile(0.99);
        let latency_p99 = s.latency.value_at_quantile(0.99);
        let due = due_rate * interval_s;
        let short_of_schedule = (s.scheduled as f64) < due * 0.98 - 3.0 * due.sqrt() - 2.0;
        let waited = (s.backlogged as f64) >= 0.01 * s.scheduled as f64 && s.backlogged > 0;
        let pacer_late = lag_p99 > 1_000_000 && !waited;
        let saturated = load.busiest >= SATURATED;
        let generator = short_of_schedule || pacer_late || saturated;
        let service_rose = service_floor > 0
            && !s.service_time.is_empty()
            && s.service_time.value_at_quantile(0.5) > service_floor.saturating_mul(2);
        let off_pace = if lag_p99 <= base.lag_bound_ns || s.schedule_lag.is_empty() {
            OffPace::None
        } else if saturated {
            OffPace::Busy
        } else if waited {
            OffPace::Connections
        } else if load.preemptions > 0
            && (load.queued_ns == 0 || load.queued_ns as f64 >= PREEMPTED_SHARE * interval_s * 1e9)
        {
            OffPace::Preempted
        } else if load.steal_ns as f64 >= PREEMPTED_SHARE * interval_s * 1e9 {
            OffPace::Steal
        } else {
            OffPace::Pacer
        };
        let bound = if generator {
            Bound::Generator
        } else if service_rose {
            Bound::Server
        } else if waited {
            Bound::Connections
        } else if latency_p99 >= 1_000_000 && latency_p99 > lag_p99.saturating_mul(10) {
            Bound::Server
        } else {
            Bound::None
        };
        Self {
            t_s: round_us(f64::from(index) * interval_s),
            target_rate: round2(target),
            scheduled: s.scheduled,
            achieved_rate: round2(s.completed as f64 / interval_s),
            errors: s.error_total(),
            errors_by_kind: error_map(&s.errors),
            latency_us: ShortPercentiles {
                p50: us(s.latency.value_at_quantile(0.5)),
                p90: us(s.latency.value_at_quantile(0.9)),
                p99: us(s.latency.value_at_quantile(0.99)),
                p999: us(s.latency.value_at_quantile(0.999)),
                p9999: us(s.latency.value_at_quantile(0.9999)),
                max: us(s.latency.max()),
            },
            schedule_lag_p99_us: us(lag_p99),
            generator_bound: generator,
            generator_cpu_s: (load.cpu_ns as f64 / 1e6).round() / 1e3,
            busiest_shard: (load.busiest * 1000.0).round() / 1000.0,
            bound,
            off_pace,
            preemptions: load.preemptions,
            core_wait_ms: (load.queued_ns as f64 / 1e3).round() / 1e3,
            steal_ms: (load.steal_ns as f64 / 1e3).round() / 1e3,
            connections_opened: load.connections_opened,
            nodes_out: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crest_model::hist;

    /// A row starts at its index times the interval, exact at 10 ms and 25 ms intervals
    /// (two decimals made row 1 of a 25 ms timeline start at 0.03 s and row 3 at 0.08 s).
    #[test]
    fn a_row_starts_at_its_index_times_the_interval() {
        let s = CmdStats::default();
        let t = |index: u32, interval_s: f64| {
            TimelinePoint::of(
                index,
                interval_s,
                &s,
                0.0,
                0.0,
                Load::default(),
                Baseline::default(),
            )
            .t_s
        };
        assert_eq!(t(1, 0.025), 0.025);
        assert_eq!(t(3, 0.025), 0.075);
        assert_eq!(t(599, 0.025), 14.975);
        assert_eq!(t(7, 0.01), 0.07);
        assert_eq!(t(3, 0.5), 1.5);
    }

    #[test]
    fn a_second_short_of_schedule_is_generator_bound() {
        // One point of a 1 s interval due 1,000 requests, against a target of `target`.
        let at = |s: &CmdStats, target: f64, load: Load| {
            TimelinePoint::of(0, 1.0, s, target, 1000.0, load, Baseline::default())
        };
        let mut s = CmdStats {
            scheduled: 800,
            ..Default::default()
        };
        assert!(at(&s, 1000.0, Load::default()).generator_bound);
        s.scheduled = 960;
        assert!(
            !at(&s, 1000.0, Load::default()).generator_bound,
            "Poisson noise"
        );
        assert!(
            !at(&s, 2000.0, Load::default()).generator_bound,
            "a lost worker's share is not the generator's fault"
        );
        s.scheduled = 1000;
        for _ in 0..100 {
            hist::record(&mut s.schedule_lag, 5_000_000);
        }
        assert!(at(&s, 1000.0, Load::default()).generator_bound);
        s.backlogged = 100;
        let p = at(&s, 1000.0, Load::default());
        assert!(
            !p.generator_bound,
            "waiting for a connection is not the pacer's doing"
        );
        assert_eq!(p.bound, "connections");
        // ... unless a shard was saturated: then the shard is the bottleneck.
        let busy = Load {
            cpu_ns: 950_000_000,
            busiest: 0.95,
            ..Load::default()
        };
        let p = at(&s, 1000.0, busy);
        assert!(p.generator_bound);
        assert_eq!(
            (p.bound.as_str(), p.generator_cpu_s, p.busiest_shard),
            ("generator", 0.95, 0.95)
        );
    }

    /// Lag p99 past the pacer's bound is off pace, and the cause is the first that holds:
    /// a saturated shard, requests waiting for a connection, a preempted shard, else the
    /// pacer; under a looser pacer's bound the same interval is on pace.
    #[test]
    fn lag_past_the_pacers_bound_is_off_pace_with_its_cause() {
        use crest_model::plan::Pacer;
        let spin = Baseline {
            service_floor: 0,
            lag_bound_ns: Pacer::Spin.lag_bound_ns(),
        };
        let mut s = CmdStats {
            scheduled: 1000,
            ..Default::default()
        };
        let at = |s: &CmdStats, load: Load, base: Baseline| {
            TimelinePoint::of(0, 1.0, s, 1000.0, 1000.0, load, base)
        };
        assert_eq!(
            at(&s, Load::default(), spin).off_pace,
            "",
            "no lag recorded"
        );
        for i in 0..1000 {
            hist::record(&mut s.schedule_lag, if i < 980 { 5_000 } else { 50_000 });
        }
        let light = Load {
            cpu_ns: 100_000_000,
            busiest: 0.1,
            ..Load::default()
        };
        assert_eq!(at(&s, light, spin).off_pace, "pacer");
        // Preempted briefly: 2.5 ms of a second cannot hold back 1% of the requests.
        let brief = Load {
            preemptions: 3,
            queued_ns: 2_500_000,
            ..light
        };
        let p = at(&s, brief, spin);
        assert_eq!(
            (p.off_pace.as_str(), p.preemptions, p.core_wait_ms),
            ("pacer", 3, 2.5)
        );
        let preempted = Load {
            preemptions: 30,
            queued_ns: 5_000_000,
            ..light
        };
        assert_eq!(at(&s, preempted, spin).off_pace, "preempted");
        // A kernel without schedstat: preemptions alone.
        let unknown = Load {
            queued_ns: 0,
            ..brief
        };
        assert_eq!(at(&s, unknown, spin).off_pace, "preempted");
        assert!(
            !p.generator_bound,
            "50 µs of lag is not the generator's limit"
        );
        assert_eq!(at(&s, preempted, Baseline::default()).off_pace, "");
        assert_eq!(
            at(
                &s,
                preempted,
                Baseline {
                    lag_bound_ns: Pacer::SleepWithin(10_000).lag_bound_ns(),
                    ..spin
                }
            )
            .off_pace,
            ""
        );
        s.backlogged = 10;
        assert_eq!(at(&s, preempted, spin).off_pace, "connections");
        let busy = Load {
            busiest: 0.95,
            ..preempted
        };
        assert_eq!(at(&s, busy, spin).off_pace, "busy");
        s.backlogged = 0;
        let stolen = Load {
            steal_ns: 10_000_000,
            ..brief
        };
        let p = at(&s, stolen, spin);
        assert_eq!((p.off_pace.as_str(), p.steal_ms), ("steal", 10.0));
        // Every cause has its words.
        for cause in ["busy", "connections", "preempted", "steal", "pacer"] {
            assert!(OFF_PACE_CAUSES.iter().any(|(c, _)| *c == cause), "{cause}");
        }
    }

    #[test]
    fn slow_replies_on_time_with_free_connections_are_the_servers() {
        let mut s = CmdStats {
            scheduled: 1000,
            ..Default::default()
        };
        for _ in 0..100 {
            hist::record(&mut s.schedule_lag, 20_000);
            hist::record(&mut s.latency, 3_000_000);
        }
        let light = Load {
            cpu_ns: 100_000_000,
            busiest: 0.1,
            ..Load::default()
        };
        assert_eq!(
            TimelinePoint::of(0, 1.0, &s, 1000.0, 1000.0, light, Baseline::default()).bound,
            "server"
        );
        let mut fast = CmdStats {
            scheduled: 1000,
            ..Default::default()
        };
        hist::record(&mut fast.latency, 80_000);
        assert_eq!(
            TimelinePoint::of(0, 1.0, &fast, 1000.0, 1000.0, light, Baseline::default()).bound,
            ""
        );
        // Requests that waited for a connection while service time tripled waited for
        // the server's slow replies, not for too few connections.
        let mut waited = CmdStats {
            scheduled: 1000,
            backlogged: 500,
            ..Default::default()
        };
        hist::record(&mut waited.service_time, 3_000_000);
        let p = |service_floor| {
            let base = Baseline {
                service_floor,
                ..Baseline::default()
            };
            TimelinePoint::of(0, 1.0, &waited, 1000.0, 1000.0, light, base).bound
        };
        assert_eq!(p(1_000_000), "server");
        assert_eq!(p(2_000_000), "connections");
        assert_eq!(p(0), "connections", "no floor yet");
    }
}
