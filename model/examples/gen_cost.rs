//! What deciding each request costs: profile evaluation (the schedule), the mix, the key and
//! value draws and the RESP encoding, per request, on one core — without any I/O. Compare
//! with the worker's whole CPU per request from `bench/core.sh` to see its share.
//!
//!   cargo run --release -p crest-model --example gen_cost

// A benchmark program: a failed setup should stop it loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crest_model::rng::Rng;
use crest_model::schedule::{Arrival, Profile, Segment};
use crest_model::shapes::{KeyDist, KeySpace, ValueSizes};
use crest_model::workload::{CmdDef, Cursor, Workload};
use std::time::Instant;

/// This thread's CPU time in seconds: the first field of `/proc/thread-self/schedstat` is
/// the time it spent on a CPU, in ns (no `unsafe` getrusage needed).
fn cpu_s() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("gen_cost needs Linux's /proc/thread-self/schedstat");
    let ns: f64 = s
        .split_whitespace()
        .next()
        .and_then(|f| f.parse().ok())
        .expect("schedstat starts with the on-CPU time in ns");
    ns / 1e9
}

fn main() {
    let n = 10_000_000u64;
    // A ramp-hold-sine-like profile long enough for n requests at 20k/s.
    let secs = n as f64 / 20_000.0;
    let seg = |d: f64, a: f64, b: f64| Segment {
        duration_ns: (d * 1e9) as u64,
        from_rps: a,
        to_rps: b,
    };
    let profile = Profile::new(vec![
        seg(secs / 4.0, 10_000.0, 30_000.0),
        seg(secs / 2.0, 20_000.0, 20_000.0),
        seg(secs / 4.0, 30_000.0, 10_000.0),
    ])
    .unwrap();
    for (label, dist, values) in [
        (
            "uniform keys, 1 KB values",
            KeyDist::Uniform,
            ValueSizes::Fixed(1024),
        ),
        (
            "zipf 0.99 keys, 100-4096 B values",
            KeyDist::Zipf(0.99),
            ValueSizes::Range(100, 4096),
        ),
    ] {
        let w = Workload::new(
            vec![
                (CmdDef::parse("SET", 1, None, 10).unwrap(), 1),
                (CmdDef::parse("GET", 1, None, 10).unwrap(), 10),
            ],
            KeySpace::new(100_000, "crest:", dist).unwrap(),
            values,
            1000,
            false,
            None,
            1,
        )
        .unwrap();
        let mut sched =
            crest_model::schedule::Schedule::new(profile.clone(), Arrival::Poisson, 0.0);
        let mut mixer = w.mixer();
        let mut rng = Rng::new(7);
        let mut cur = Cursor::default();
        let mut buf = Vec::with_capacity(1 << 20);
        let (t0, c0) = (Instant::now(), cpu_s());
        let mut sent = 0u64;
        let mut last = 0u64;
        while sent < n {
            let Some(t) = sched.next(&mut rng) else { break };
            last = t;
            let cmd = mixer.pick();
            w.encode(cmd, &mut rng, &mut cur, &mut buf);
            if buf.len() > (1 << 19) {
                buf.clear();
            }
            sent += 1;
        }
        let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_s() - c0);
        println!(
            "{label}: {sent} requests decided in {wall:.2} s wall, {cpu:.2} s CPU = {:.0} ns per request (last intended time {:.1} s)",
            cpu / sent as f64 * 1e9,
            last as f64 / 1e9
        );
    }
}
