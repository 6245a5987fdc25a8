//! Synthetic interval results shared by the fleet benchmarks' examples (`sim_workers`,
//! `merge_cost`): the same histograms whichever measures them.

use crest_model::hist;
use crest_model::stats::CmdStats;

/// Requests per command per interval: `SIM_PER_INTERVAL`, default 1,000 (with 10 commands
/// at 1 s intervals, 10,000 req/s per worker). The merge's cost follows the histograms'
/// nonzero buckets, which follow this.
pub fn per_interval() -> u64 {
    static N: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("SIM_PER_INTERVAL")
            .map_or(1_000, |v| v.parse().expect("SIM_PER_INTERVAL: a count"))
    })
}
/// Distinct workers' data sets: worker i streams set i % DATASETS.
pub const DATASETS: usize = 8;
/// Distinct synthetic intervals per command; interval k uses variant k % VARIANTS.
pub const VARIANTS: usize = 4;

/// The random stream data set `d` is drawn from.
pub fn rng_for(d: usize) -> Rng {
    Rng(0x9E37_79B9_7F4A_7C15 ^ (d as u64 + 1))
}

/// A small xorshift: synthetic data needs no quality beyond "spread".
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One command's interval: latencies log-uniform over 50 µs .. 20 ms with a tail to 200 ms,
/// service time a little under, schedule lag a few µs, a few errors.
pub fn variant(rng: &mut Rng) -> CmdStats {
    let mut s = CmdStats {
        scheduled: per_interval(),
        sent: per_interval(),
        ..Default::default()
    };
    let mut errors = 0;
    for _ in 0..per_interval() {
        let tail = if rng.next() < 0.01 { 10.0 } else { 1.0 };
        let lat = (50_000.0 * (400f64).powf(rng.next()) * tail) as u64;
        hist::record(&mut s.latency, lat);
        hist::record(&mut s.service_time, lat * 9 / 10);
        hist::record(
            &mut s.schedule_lag,
            (2_000.0 + 20_000.0 * rng.next()) as u64,
        );
        if rng.next() < 0.002 {
            errors += 1;
        }
    }
    s.completed = per_interval() - errors;
    if errors > 0 {
        s.errors.push(("ERR".into(), errors));
    }
    s
}
