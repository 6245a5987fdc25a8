//! What the admin API serves: the run as the collect loop last published it ([`Board`]),
//! and each class's latency binned for Prometheus ([`Binned`]).

use super::live::FeedStats;
use crate::server_stats::Now;
use crest_model::hist::{Dense, Hist};
use crest_report::{ChangeRow, TimelinePoint};
use serde::Serialize;
use std::collections::BTreeMap;

/// Upper bounds of the latency histogram's buckets, seconds (then +Inf): 10 µs to 10 s,
/// 1-2.5-5 steps.
pub const BUCKETS_S: [f64; 19] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
    250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0,
];

/// One (class, command)'s counters, run so far, every worker.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Counters {
    /// Class.
    pub class: String,
    /// Command.
    pub command: String,
    /// Requests the schedule created.
    pub scheduled: u64,
    /// Requests written.
    pub sent: u64,
    /// Non-error replies.
    pub completed: u64,
    /// Failures by kind.
    pub errors: BTreeMap<String, u64>,
}

/// One class's latency histogram, binned.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Binned {
    /// Class.
    pub class: String,
    /// Counts per bucket of [`BUCKETS_S`] (not cumulative), the last one +Inf.
    pub buckets: Vec<u64>,
    /// Sum of the values, seconds (from the histogram's mean: exact to its 0.1%).
    pub sum_s: f64,
    /// Values.
    pub count: u64,
}

impl Binned {
    /// `h` in [`BUCKETS_S`].
    pub fn of(class: &str, h: &Hist) -> Self {
        let mut b = Self::empty(class);
        b.add(h);
        b
    }

    /// No values yet.
    pub fn empty(class: &str) -> Self {
        Self {
            class: class.to_string(),
            buckets: vec![0; BUCKETS_S.len() + 1],
            sum_s: 0.0,
            count: 0,
        }
    }

    /// Adds `h`'s values: binning each command's histogram into its class's buckets is
    /// the merge (bins add), with no full-size histogram built per scrape.
    pub fn add(&mut self, h: &Hist) {
        for v in h.iter_recorded() {
            // A value counts in the first bucket whose bound it does not pass, read at the
            // lowest value of its HDR bucket (the histogram's own 0.1% resolution).
            let s = h.lowest_equivalent(v.value_iterated_to()) as f64 / 1e9;
            let i = BUCKETS_S.partition_point(|&b| b < s);
            self.buckets[i] += v.count_at_value();
        }
        self.sum_s += h.mean() * h.len() as f64 / 1e9;
        self.count += h.len();
    }

    /// Adds `d`'s values, as [`Binned::add`] does a [`Hist`]'s.
    pub fn add_dense(&mut self, d: &Dense) {
        for (lowest, count) in d.iter() {
            let i = BUCKETS_S.partition_point(|&b| b < lowest as f64 / 1e9);
            self.buckets[i] += count;
        }
        self.sum_s += d.sum_ns() / 1e9;
        self.count += d.len();
    }
}

/// One worker, as the API shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WorkerView {
    /// Name.
    pub name: String,
    /// Host.
    pub host: String,
    /// Shards.
    pub shards: u32,
    /// Why it was lost, if it was.
    pub lost: Option<String>,
}

/// One class's rate in force.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassRate {
    /// Class.
    pub class: String,
    /// Rate now, per second (None: closed loop).
    pub rate: Option<f64>,
}

/// What the API serves: the run as the collect loop last published it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Board {
    /// `starting`, `prefill`, `running`, `stopping` (a stop was accepted: the phase drains
    /// and ends), `done`.
    pub phase: &'static str,
    /// What this run is part of, when it is (`compare: run 2 of 4, B`, `search: window 3
    /// at 40000/s`, `suite: GET (2 of 9)`); empty for a plain run.
    pub label: String,
    /// The interval, seconds.
    pub interval_s: f64,
    /// Run id (empty before the measured phase).
    pub run_id: String,
    /// Seconds since the measured start.
    pub elapsed_s: f64,
    /// The measured span, seconds (0: bounded by a count).
    pub duration_s: f64,
    /// A pause is in force.
    pub paused: bool,
    /// Rates in force.
    pub rates: Vec<ClassRate>,
    /// The last finished interval.
    pub last_interval: Option<TimelinePoint>,
    /// Finished intervals.
    pub intervals: usize,
    /// Workers.
    pub workers: Vec<WorkerView>,
    /// Changes so far.
    pub changes: Vec<ChangeRow>,
    /// The server as the sampler last saw it (None: not sampled, or fewer than two
    /// samples yet).
    pub server: Option<Now>,
    /// The live page's feed: viewers, points and bytes sent.
    pub feed: FeedStats,
    /// The run's report.html can be had at `GET /report` (the run is over).
    pub report: bool,
    /// Counters per (class, command) (`/status` leaves them out; the live page's state
    /// has them).
    #[serde(skip)]
    pub counters: Vec<Counters>,
    /// Latency per class.
    #[serde(skip)]
    pub latency: Vec<Binned>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bins_hold_every_value_in_the_first_bucket_it_does_not_pass() {
        let mut h = crest_model::hist::new_hist();
        for ns in [5_000u64, 10_000, 80_000, 2_000_000, 20_000_000_000] {
            h.record(ns).unwrap();
        }
        let b = Binned::of("c", &h);
        assert_eq!(b.count, 5);
        assert_eq!(b.buckets.iter().sum::<u64>(), 5);
        assert_eq!(b.buckets[0], 2, "5 µs and 10 µs are ≤ 10 µs");
        assert_eq!(b.buckets[3], 1, "80 µs: ≤ 100 µs");
        assert_eq!(b.buckets[7], 1, "2 ms: ≤ 2.5 ms");
        assert_eq!(*b.buckets.last().unwrap(), 1, "20 s: +Inf");
        assert!((b.sum_s - 20.002095).abs() < 0.03);
        // The same values summed bucket by bucket bin the same.
        let mut d = crest_model::hist::Dense::default();
        d.add(&crest_model::hist::Sparse::of(&h));
        let mut from_dense = Binned::empty("c");
        from_dense.add_dense(&d);
        assert_eq!(from_dense.buckets, b.buckets);
        assert_eq!(from_dense.count, b.count);
        assert!(
            (from_dense.sum_s - b.sum_s).abs() < 1e-9,
            "{} vs {}",
            from_dense.sum_s,
            b.sum_s
        );
    }
}
