//! Connection churn (`--conn-lifetime`, `--conn-rate`): which of a shard's connections
//! retires when, and the books of their lives.
//!
//! A connection's life starts when it comes up (set up, ready for requests). With a
//! lifetime `D ± J` it retires at `up + D + u`, `u` uniform in `[-J, J]`, drawn anew for
//! each life, so connections that came up together do not all reconnect together. With a
//! rate `N` per second across the fleet, each shard retires its share (`N / shards`) at
//! evenly spaced instants, each time the connection that has been up longest.
//!
//! A retired connection takes no new request; once its replies are in it closes (no error,
//! nothing lost) and opens again at once with its full setup, and its class's requests
//! due meanwhile wait for a free connection keeping their intended time: the reconnect's
//! cost shows in latency exactly as an application pays it. The shard records every
//! connection's setup time (connect to ready) and counts the connections that came up
//! before and after the start, and those that retired.

use crest_model::hist;
use crest_model::plan::Churn as Plan;
use crest_model::rng::Rng;
use crest_model::stats::ConnLife;

/// One shard's churn: its plan, its clock for rate-driven retirements, and its books.
#[derive(Debug)]
pub struct Churn {
    /// Lifetime and jitter, ns.
    lifetime: Option<(u64, u64)>,
    /// Rate-driven: ns between two of this shard's retirements.
    every: Option<u64>,
    /// The next rate-driven retirement (ns since the start).
    next: u64,
    rng: Rng,
    /// Connections that came up in the open interval, after the start.
    pub opened_in_interval: u64,
    /// The run's books.
    pub life: ConnLife,
}

impl Churn {
    /// A shard's churn: the plan's, this shard's share of a fleet-wide rate
    /// (`total_shards` shards), lives jittered from `seed`.
    pub fn new(plan: &Plan, total_shards: u32, seed: u64) -> Self {
        let every = plan.rate.map(|r| {
            let per_shard = r / f64::from(total_shards.max(1));
            (1e9 / per_shard).clamp(1.0, u64::MAX as f64) as u64
        });
        Self {
            lifetime: plan
                .lifetime
                .map(|(l, j)| (l.as_nanos() as u64, j.as_nanos() as u64)),
            every,
            // The first rate-driven retirement a period after the start (a shard's share
            // may be below one a second: its first comes later, not at once).
            next: every.unwrap_or(u64::MAX),
            rng: Rng::new(seed ^ 0x6368_7572_6e00_0001),
            opened_in_interval: 0,
            life: ConnLife::default(),
        }
    }

    /// A connection came up at `now` after a setup of `setup_ns`: its books, and when it
    /// retires (0: never).
    pub fn came_up(
        &mut self,
        now: u64,
        setup_ns: u64,
        phases: [Option<u64>; 3],
        started: bool,
    ) -> u64 {
        hist::record(&mut self.life.setup, setup_ns.max(1));
        for (h, p) in self.life.phases.iter_mut().zip(phases) {
            if let Some(ns) = p {
                hist::record(h, ns.max(1));
            }
        }
        if started {
            self.life.opened += 1;
            self.opened_in_interval += 1;
        } else {
            self.life.initial += 1;
        }
        match self.lifetime {
            None => 0,
            Some((l, 0)) => now.saturating_add(l),
            Some((l, j)) => {
                let u = self.rng.below(2 * j + 1);
                now.saturating_add(l - j + u)
            }
        }
    }

    /// How many connections the rate retires by `now` (advancing its clock); 0 without a
    /// rate.
    pub fn due(&mut self, now: u64) -> u32 {
        let Some(every) = self.every else {
            return 0;
        };
        let mut n = 0u32;
        while self.next <= now && n < u32::MAX {
            self.next = self.next.saturating_add(every);
            n += 1;
        }
        n
    }

    /// Whether connections retire at all.
    pub fn is_on(&self) -> bool {
        self.lifetime.is_some() || self.every.is_some()
    }

    /// The connections opened in the interval just closed.
    pub fn take_interval(&mut self) -> u64 {
        std::mem::take(&mut self.opened_in_interval)
    }

    /// A connection retired (its life ended and it closed).
    pub fn retired(&mut self) {
        self.life.retired += 1;
    }

    /// The setup histogram, for tests.
    #[cfg(test)]
    pub fn setup(&self) -> &hist::Hist {
        &self.life.setup
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lives_are_jittered_within_their_bounds_and_counted() {
        let plan = Plan {
            lifetime: Some((Duration::from_secs(1), Duration::from_millis(200))),
            rate: None,
        };
        let mut c = Churn::new(&plan, 4, 7);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..1000u64 {
            // Every connection connects; half handshake TLS; none sends a session.
            let tls = (i % 2 == 1).then_some(600);
            let at = c.came_up(5_000, 1_000 + i, [Some(400), tls, None], i % 2 == 0);
            assert!((800_005_000..=1_200_005_000).contains(&at), "{at}");
            seen.insert(at / 10_000_000);
        }
        assert!(
            seen.len() > 30,
            "lives spread over the jitter: {}",
            seen.len()
        );
        assert_eq!((c.life.opened, c.life.initial), (500, 500));
        assert_eq!(c.take_interval(), 500);
        assert_eq!(c.take_interval(), 0);
        assert_eq!(c.setup().len(), 1000);
        let phases: Vec<u64> = c.life.phases.iter().map(|h| h.len()).collect();
        assert_eq!(
            phases,
            [1000, 500, 0],
            "each phase counts the connections that had it"
        );
        let fixed = Plan {
            lifetime: Some((Duration::from_millis(10), Duration::ZERO)),
            rate: None,
        };
        assert_eq!(
            Churn::new(&fixed, 1, 1).came_up(1, 1, [None; 3], true),
            10_000_001
        );
        assert_eq!(
            Churn::new(&Plan::default(), 1, 1).came_up(1, 1, [None; 3], true),
            0
        );
    }

    #[test]
    fn a_rate_retires_this_shards_share_at_even_instants() {
        // 100/s over 4 shards: 25/s here, one every 40 ms.
        let plan = Plan {
            lifetime: None,
            rate: Some(100.0),
        };
        let mut c = Churn::new(&plan, 4, 1);
        assert_eq!(c.due(39_999_999), 0);
        assert_eq!(c.due(40_000_000), 1);
        // A late look retires every one that came due meanwhile.
        assert_eq!(c.due(200_000_000), 4);
        assert_eq!(c.due(1_000_000_000), 20);
        assert!(c.is_on());
        assert_eq!(Churn::new(&Plan::default(), 4, 1).due(u64::MAX - 1), 0);
        assert!(!Churn::new(&Plan::default(), 4, 1).is_on());
    }
}
