//! The coordinator's merge alone, without the network: W workers' synthetic intervals (drawn
//! as `sim_workers` draws its: 10 commands, `SIM_PER_INTERVAL` requests each)
//! received into the run's books and finalized, on one thread, timed with that thread's
//! CPU clock (`CLOCK_THREAD_CPUTIME_ID`). `bench/coordinator-memory.sh` measures
//! this plus gRPC transport and the fleet's heartbeats; this measures the books alone, with
//! none of the run-to-run noise of 1,000 connections sharing two cores.
//!
//! ```text
//! SIM_PER_INTERVAL=100 cargo run --release -p crest --example merge_cost -- 1000 60
//! ```
//! Arguments: workers (default 1,000), intervals (default 60; the first 5 warm up, untimed),
//! relays (default 0): with R relays the workers are dealt over R [`crest::relay`] tiers,
//! each gathering and summing its workers' intervals into one message for the books; the
//! relays' CPU and the books' are timed apart (all on this thread, one after the other).
//! Checks its own window: every timed interval must be a timeline row holding every
//! worker's requests, else it prints NOT MEASURED and exits 1.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark tool: fail loudly

#[path = "synth/mod.rs"]
mod synth;

use crest::cli::{LoadArgs, PaceArgs, RunArgs, TargetArgs, to_config};
use crest::config::RateArg;
use crest::merge::RunBooks;
use crest::relay::gather::Gather;
use crest::relay::sum::Summer;
use crest_model::convert;
use crest_model::stats::CmdStats;
use crest_proto::pb;
use std::time::Duration;
use synth::{DATASETS, VARIANTS, per_interval, rng_for, variant};

const MIX: &str = "GET=6,SET=3,INCR=1,HSET=1,ZADD=1,LPUSH=1,SADD=1,EXISTS=1,DEL=1,MGET=1";
const WARMUP: u32 = 5;

/// Workers (default 1,000, at least 1), intervals (default 60, more than the warm-up) and
/// relays (default 0: none; at most the workers).
fn parse_args(args: &[String]) -> Result<(usize, u32, usize), String> {
    let workers = match args.get(1) {
        None => 1_000,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=100_000).contains(&n) => n,
            _ => return Err(format!("WORKERS {s:?}: a count from 1 to 100000")),
        },
    };
    let intervals = match args.get(2) {
        None => 60,
        Some(s) => match s.parse::<u32>() {
            Ok(n) if n > WARMUP && n <= 100_000 => n,
            _ => {
                return Err(format!(
                    "INTERVALS {s:?}: a count above the {WARMUP} warm-up intervals, at most 100000"
                ));
            }
        },
    };
    let relays = match args.get(3) {
        None => 0,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if n <= workers => n,
            _ => {
                return Err(format!(
                    "RELAYS {s:?}: a count from 0 to the {workers} workers"
                ));
            }
        },
    };
    if args.len() > 4 {
        return Err(format!("{} arguments, at most 3", args.len() - 1));
    }
    Ok((workers, intervals, relays))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (workers, intervals, relays) = match parse_args(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("merge_cost: {e} (usage: merge_cost [WORKERS [INTERVALS [RELAYS]]])");
            std::process::exit(2);
        }
    };
    let cfg = to_config(RunArgs {
        target: TargetArgs {
            target: Some("127.0.0.1:1".into()),
            ..Default::default()
        },
        pace: PaceArgs {
            rate: Some(RateArg::Rps(10_000.0)),
            interval: Some(Duration::from_secs(1)),
            ..Default::default()
        },
        load: LoadArgs {
            duration: Some(Duration::from_secs(u64::from(intervals))),
            mix: Some(MIX.into()),
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("a valid configuration");
    let class = cfg.classes[0].name.clone();
    let names: Vec<String> = cfg.classes[0]
        .shape
        .mix
        .iter()
        .map(|m| m.0.clone())
        .collect();
    let sets = wire_sets(&class, &names);
    // What the books take messages from: the workers, or their relays.
    let members = if relays == 0 { workers } else { relays };
    let mut books = RunBooks::new(&cfg, members, intervals, Some(intervals - 1), None);
    let active = vec![true; members];
    // Relay r holds workers r, r + R, r + 2R, ...
    let mut tiers: Vec<(Gather, Summer)> = (0..relays)
        .map(|r| {
            (
                Gather::new(workers / relays + usize::from(r < workers % relays)),
                Summer::new(),
            )
        })
        .collect();
    let (mut cpu_ns, mut relay_ns) = (0u64, 0u64);
    for k in 0..intervals {
        // The messages as they come off the wire, made before the clock runs.
        let msgs: Vec<pb::Interval> = (0..workers)
            .map(|w| pb::Interval {
                run_id: "r".into(),
                index: k,
                commands: sets[w % DATASETS][k as usize % VARIANTS].clone(),
                target_rate: 10_000.0,
                error_messages: vec![],
                shard_cpu_ns: 250_000_000,
                busiest_shard: 0.25,
                ..Default::default()
            })
            .collect();
        let t0 = crest_engine::thread_cpu_ns();
        let upstream: Vec<(usize, pb::Interval)> = if relays == 0 {
            msgs.into_iter().enumerate().collect()
        } else {
            for (w, m) in msgs.into_iter().enumerate() {
                tiers[w % relays]
                    .0
                    .receive(w / relays, m)
                    .expect("in order");
            }
            let mut out = Vec::with_capacity(relays);
            for (r, (gather, summer)) in tiers.iter_mut().enumerate() {
                while let Some((index, held)) = gather.take() {
                    let iv = summer
                        .interval("r", index, held.iter().map(|(w, iv)| (*w, iv)))
                        .expect("the workers' intervals sum");
                    out.push((r, iv));
                }
            }
            out
        };
        let t1 = crest_engine::thread_cpu_ns();
        for (w, m) in upstream {
            books.receive(w, m).expect("a valid interval");
        }
        let bad = books.advance(&active);
        let t2 = crest_engine::thread_cpu_ns();
        assert!(bad.is_empty(), "an interval did not decode");
        if k >= WARMUP {
            relay_ns += t1 - t0;
            cpu_ns += t2 - t1;
        }
    }
    let timed = intervals - WARMUP;
    let per = workers as u64 * names.len() as u64 * per_interval();
    let rows = &books.timeline;
    // Every worker is past interval k once k + 1 arrives: all but the last are rows.
    let full = rows.len() as u32 + 1 >= intervals && rows.iter().all(|p| p.scheduled == per);
    if cpu_ns == 0 {
        // A thread CPU clock that did not move over every timed interval is no measurement.
        println!("NOT MEASURED: the thread's CPU clock read 0 ns over {timed} intervals");
        std::process::exit(1);
    }
    if !full {
        println!(
            "NOT MEASURED: {} rows, not {}, or a row without every worker's {per} requests",
            rows.len(),
            intervals - 1
        );
        std::process::exit(1);
    }
    print_figures((workers, relays, timed), cpu_ns, relay_ns);
}

/// The measured figures: the books' CPU per interval (and per worker-interval), and the
/// relays' when there are any.
fn print_figures((workers, relays, timed): (usize, usize, u32), cpu_ns: u64, relay_ns: u64) {
    let ms = cpu_ns as f64 / 1e6 / f64::from(timed);
    if relays == 0 {
        println!(
            "merge_cost: {workers} workers, {timed} intervals timed, {} requests per command: {ms:.1} ms of CPU per interval ({:.1} µs per worker-interval), books only",
            per_interval(),
            ms * 1000.0 / workers as f64
        );
    } else {
        let relay_ms = relay_ns as f64 / 1e6 / f64::from(timed);
        println!(
            "merge_cost: {workers} workers through {relays} relays, {timed} intervals timed, {} requests per command: books {ms:.2} ms of CPU per interval; relays {relay_ms:.1} ms per interval in all ({:.2} ms each)",
            per_interval(),
            relay_ms / relays as f64
        );
    }
}

/// `sets[d][v]`: data set d's interval variant v, encoded as a worker sends it.
fn wire_sets(class: &str, names: &[String]) -> Vec<Vec<Vec<pb::CommandStats>>> {
    (0..DATASETS)
        .map(|d| {
            let mut rng = rng_for(d);
            (0..VARIANTS)
                .map(|_| {
                    let stats: Vec<CmdStats> = names.iter().map(|_| variant(&mut rng)).collect();
                    convert::stats_to_pb(class, &stats, names)
                })
                .collect()
        })
        .collect()
}
