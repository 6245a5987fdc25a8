//! The coordinator's side of a replay alone (issue #27): a generated Twitter-format trace
//! of N lines (keys over a 1 M keyspace, 70% get, 25% set with sizes and TTLs, 5% delete,
//! 100,000 lines per second of trace), made in memory first (the disk and the making are
//! not what is measured), then read by [`crest_trace::Reader`], timed, partitioned over S
//! shards and cut into chunks by [`crest::replay::Streamer`] (a window of 65,536 requests
//! per shard), and each chunk encoded to its wire message, on one thread timed with its
//! CPU clock. The shards are simulated as taking each chunk at once.
//!
//! ```text
//! cargo run --release -p crest --example replay_stream -- 5000000 8
//! ```
//! Arguments: lines (default 5,000,000), shards (default 8). Checks its own window: every
//! request must come out in a chunk and every shard must end, else it prints NOT MEASURED
//! and exits 1.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark tool: fail loudly

use crest::replay::{Keys, Streamer, Timing, Window, cache_ops};
use crest_model::convert::batch_to_wire;
use crest_trace::clock::Spread;
use crest_trace::{Format, Reader};
use prost::Message;

/// The trace's text: N lines.
fn make(n: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n as usize * 40);
    let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let key = rng % 1_000_000;
        let (op, size, ttl) = match rng >> 60 {
            0..=10 => ("get", 0, 0),
            11..=14 => ("set", 100 + (rng >> 20) % 2_000, (rng >> 40) % 2 * 3_600),
            _ => ("delete", 0, 0),
        };
        let line = format!(
            "{},user:{key:07},12,{size},{},{op},{ttl}\n",
            i / 100_000,
            rng % 64
        );
        out.extend_from_slice(line.as_bytes());
    }
    out
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let lines = args.first().copied().unwrap_or(5_000_000);
    let shards = args.get(1).copied().unwrap_or(8) as u32;
    let text = make(lines);
    let reader = Reader::new(text.as_slice(), "generated", Format::Twitter);
    let window = Window {
        ahead_ns: u64::MAX / 4,
        per_shard: 1 << 16,
    };
    let timing = Timing::own(Format::Twitter, 1.0, Spread::Even);
    let mut st = Streamer::new(
        reader,
        "generated",
        cache_ops(),
        timing,
        shards,
        window,
        Keys::default(),
    );
    let t0 = crest_engine::thread_cpu_ns();
    let mut requests = 0u64;
    let mut chunks = 0u64;
    let mut bytes = 0u64;
    let mut given = vec![0u64; shards as usize];
    while !st.finished() {
        for (s, b) in st.pump(0).unwrap() {
            requests += b.len() as u64;
            given[s as usize] += b.len() as u64;
            chunks += 1;
            bytes += batch_to_wire("run", 0, s, b).encoded_len() as u64;
            st.ack(s, given[s as usize]);
        }
    }
    let cpu = crest_engine::thread_cpu_ns() - t0;
    if requests != lines || st.position.records != lines {
        println!(
            "NOT MEASURED: {requests} requests came out of {lines} lines ({} read)",
            st.position.records
        );
        std::process::exit(1);
    }
    let s = cpu as f64 / 1e9;
    println!(
        "replay_stream: {lines} lines over {shards} shards in {chunks} chunks, {:.1} B/request on the wire: {s:.2} CPU s, {:.0} lines per CPU second ({:.0} ns per line)",
        bytes as f64 / requests as f64,
        lines as f64 / s,
        cpu as f64 / lines as f64
    );
}
