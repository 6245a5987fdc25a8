//! Simulated workers for the coordinator-memory benchmark (`bench/coordinator-memory.sh`):
//! N workers register with a real `crest run --workers N` over the real gRPC session
//! protocol, answer its clock pings, and on `StartRun` stream synthetic but valid intervals
//! (realistic latency histograms, every command of the plan's mix) as fast as the
//! coordinator takes them, then finals that add up exactly. 3,600 intervals take seconds
//! to minutes, not an hour.
//!
//! "As fast as the coordinator takes them": its event queue is bounded and HTTP/2 flow
//! control pushes back, but what the streams and the queue hold would then be measured with
//! the books, and one worker far ahead of the others fills the pending-interval cap. Given
//! the run's live `timeline.csv`, the workers stay at most [`AHEAD`] intervals ahead of the
//! rows the coordinator has finalized (the file grows by one row per finalized interval);
//! without it they send flat out.
//!
//! `SIM_PACE=1` sends each interval when it ends in wall time instead (interval k at the
//! run's start + warm-up + (k + 1) × the plan's interval, every worker at once, as a fleet
//! with a common start does): what a fleet costs per second of wall time, the idle cost
//! (heartbeats, keepalive) included (`bench/coordinator-fanin.sh`).
//!
//! Heartbeats as a real worker sends them (`worker/src/uplink.rs`): one each
//! [`crest_proto::WORKER_HEARTBEAT`] in which nothing else went up; `SIM_BEATS=always` one
//! every period whatever else goes up (what workers did before an interval counted as
//! their heartbeat: for an A/B with a build of then).
//!
//! ```text
//! cargo run --release -p crest --example sim_workers -- http://127.0.0.1:7600 16 3600 out/timeline.csv
//! ```
//! Arguments: coordinator URL (or several, comma-separated: `crest relay`s, worker i dialling
//! the (i mod n)th), workers, intervals per worker, optionally the live timeline.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark tool: fail loudly

#[path = "synth/mod.rs"]
mod synth;

use crest_model::convert;
use crest_model::hist::{self, Hist};
use crest_model::stats::CmdStats;
use crest_proto::pb::{
    self, coordinator_client::CoordinatorClient, coordinator_message::Msg as In,
    worker_message::Msg as Out,
};
use prost::Message as _;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;
use synth::{DATASETS, VARIANTS, per_interval, rng_for, variant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

// The DATASETS data sets are built once, one after the other on one thread, so that
// 1,000 simulated workers do not starve the runtime (and their heartbeats) building 1,000
// sets at once.
/// Intervals a worker may run ahead of the coordinator's finalized rows.
const AHEAD: u32 = 16;

/// `h` recorded `n` times over.
fn times(h: &Hist, n: u64) -> Hist {
    let mut out = hist::new_hist();
    for v in h.iter_recorded() {
        out.saturating_record_n(v.value_iterated_to(), v.count_at_value() * n);
    }
    out
}

/// Counts the rows of the live timeline (header excluded) into `rows`, reading only what
/// was appended since the last look.
async fn watch_rows(path: std::path::PathBuf, rows: Arc<AtomicU32>) {
    let mut offset = 0u64;
    let mut lines = 0u32;
    let mut buf = Vec::new();
    loop {
        if let Ok(mut f) = std::fs::File::open(&path) {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len < offset {
                (offset, lines) = (0, 0); // a new run truncated it
            }
            if f.seek(SeekFrom::Start(offset)).is_ok() {
                buf.clear();
                if let Ok(n) = f.read_to_end(&mut buf) {
                    offset += n as u64;
                    lines += buf.iter().filter(|b| **b == b'\n').count() as u32;
                    rows.store(lines.saturating_sub(1), Ordering::Relaxed);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Connects and opens a session with a `Register` queued: its sender and the inbound stream.
async fn open(
    url: &str,
    i: usize,
) -> Result<
    (
        mpsc::Sender<pb::WorkerMessage>,
        tonic::Streaming<pb::CoordinatorMessage>,
    ),
    String,
> {
    let channel = crest_proto::worker_endpoint(url)
        .map_err(|e| format!("{url}: {e}"))?
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (tx, rx) = mpsc::channel::<pb::WorkerMessage>(64);
    let register = Out::Register(pb::Register {
        protocol_version: crest_proto::PROTOCOL_VERSION,
        worker_id: uuid::Uuid::new_v4().to_string(),
        name: format!("sim{i}"),
        host: "sim".into(),
        shards: 1,
        token: std::env::var("CREST_TOKEN").unwrap_or_default(),
        crest_version: env!("CARGO_PKG_VERSION").into(),
        cpus: vec![0],
    });
    tx.send(pb::WorkerMessage {
        msg: Some(register),
    })
    .await
    .map_err(|_| "queue closed".to_string())?;
    let inbound = CoordinatorClient::new(channel)
        .session(ReceiverStream::new(rx))
        .await
        .map_err(|e| format!("session: {e:?}"))?
        .into_inner();
    Ok((tx, inbound))
}

async fn worker(
    url: String,
    i: usize,
    intervals: u32,
    workers: usize,
    rows: Option<Arc<AtomicU32>>,
) {
    // A fleet connecting at once can overflow the listener's backlog, and a session can be
    // cut before it registers: retry both, as a real worker does, for at most 30 s (a lost
    // simulated worker fails the wait, not the measurement). The endpoint is a real
    // worker's (its keepalive and timeouts), so the coordinator sees what a fleet costs.
    let mut tries = 0;
    let (tx, mut inbound) = loop {
        match open(&url, i).await {
            Ok(s) => break s,
            Err(e) if tries < 300 => {
                tries += 1;
                if tries == 1 {
                    eprintln!("sim{i}: {e}; retrying");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("sim{i}: {e}"),
        }
    };
    // The way up, and whether anything went up since the last heartbeat tick.
    let up = Up {
        tx: tx.clone(),
        sent: Arc::new(AtomicBool::new(false)),
    };
    // Heartbeats, as a real worker sends them: a worker held back by the pacing is idle,
    // not lost.
    let hb = tx.clone();
    let beat_sent = up.sent.clone();
    let always = std::env::var("SIM_BEATS").is_ok_and(|v| v == "always");
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(crest_proto::WORKER_HEARTBEAT);
        loop {
            tick.tick().await;
            if !beat_sent.swap(false, Ordering::Relaxed) || always {
                let m = pb::WorkerMessage {
                    msg: Some(Out::Heartbeat(pb::Heartbeat {})),
                };
                if hb.send(m).await.is_err() {
                    break;
                }
            }
        }
    });
    // The session ends when the coordinator closes it after the run.
    while let Ok(Some(m)) = inbound.message().await {
        match m.msg {
            Some(In::Ping(p)) => {
                let t2 = crest_model::clock::unix_ns();
                up.send(Out::Pong(pb::Pong {
                    seq: p.seq,
                    t1_unix_ns: p.t1_unix_ns,
                    t2_unix_ns: t2,
                }))
                .await;
            }
            Some(In::Start(s)) => {
                let plan = s.plan.unwrap_or_default();
                let pace = std::env::var("SIM_PACE")
                    .is_ok_and(|v| v == "1")
                    .then_some(s.start_at_unix_ns);
                tokio::spawn(stream_run(
                    up.clone(),
                    plan,
                    pace,
                    i,
                    intervals,
                    workers,
                    rows.clone(),
                ));
            }
            Some(In::Refused(r)) => panic!("refused: {}", r.reason),
            Some(In::Abort(a)) => {
                eprintln!("sim{i}: aborted: {}", a.reason);
                return;
            }
            _ => {}
        }
    }
}

/// The synthetic intervals (encoded), the finals that add them up, and the rate.
type Prepared = (Vec<Vec<pb::CommandStats>>, Vec<pb::CommandStats>, f64);

/// Builds a worker's synthetic data: CPU work kept off the runtime (in `spawn_blocking`), so
/// the sessions' heartbeats and pongs keep flowing meanwhile.
fn prepare(plan: &pb::RunPlan, i: usize, n: u32) -> Prepared {
    let mut rng = rng_for(i);
    // (class, command names, VARIANTS encoded intervals per command, their stats)
    let mut classes = Vec::new();
    for c in &plan.classes {
        let names: Vec<String> = c.mix.iter().map(|m| m.name.clone()).collect();
        let vars: Vec<Vec<CmdStats>> = names
            .iter()
            .map(|_| (0..VARIANTS).map(|_| variant(&mut rng)).collect())
            .collect();
        classes.push((c.name.clone(), names, vars));
    }
    let encoded: Vec<Vec<pb::CommandStats>> = (0..VARIANTS)
        .map(|v| {
            classes
                .iter()
                .flat_map(|(class, names, vars)| {
                    let stats: Vec<CmdStats> = vars.iter().map(|x| x[v].clone()).collect();
                    convert::stats_to_pb(class, &stats, names)
                })
                .collect()
        })
        .collect();
    let rate = (per_interval() * classes.iter().map(|c| c.1.len() as u64).sum::<u64>()) as f64
        / (plan.interval_ns.max(1) as f64 / 1e9);
    // Finals: every variant times the intervals that used it.
    let uses = |v: usize| -> u64 {
        u64::from(n / VARIANTS as u32) + u64::from((v as u32) < n % VARIANTS as u32)
    };
    let mut totals = Vec::new();
    for (class, names, vars) in &classes {
        let stats: Vec<CmdStats> = vars
            .iter()
            .map(|x| {
                let mut t = CmdStats::default();
                for (v, s) in x.iter().enumerate() {
                    let u = uses(v);
                    t.scheduled += s.scheduled * u;
                    t.sent += s.sent * u;
                    t.completed += s.completed * u;
                    for (kind, c) in &s.errors {
                        crest_model::stats::add_error(&mut t.errors, kind, c * u);
                    }
                    hist::add(&mut t.latency, &times(&s.latency, u));
                    hist::add(&mut t.service_time, &times(&s.service_time, u));
                    hist::add(&mut t.schedule_lag, &times(&s.schedule_lag, u));
                }
                t
            })
            .collect();
        totals.extend(convert::stats_to_pb(class, &stats, names));
    }
    (encoded, totals, rate)
}

/// A session's way up, and its flag that something went up (no heartbeat needed).
#[derive(Clone)]
struct Up {
    tx: mpsc::Sender<pb::WorkerMessage>,
    sent: Arc<AtomicBool>,
}

impl Up {
    async fn send(&self, m: Out) -> bool {
        self.sent.store(true, Ordering::Relaxed);
        self.tx
            .send(pb::WorkerMessage { msg: Some(m) })
            .await
            .is_ok()
    }
}

/// When interval `k` ends, on this process's monotonic clock: the run's start
/// (`start_at_unix_ns`, this host's wall clock) + warm-up + (k + 1) intervals.
fn interval_end(start_at_unix_ns: i64, plan: &pb::RunPlan, k: u32) -> tokio::time::Instant {
    let end_ns = i128::from(start_at_unix_ns)
        + i128::from(plan.warmup_ns)
        + i128::from(plan.interval_ns) * (i128::from(k) + 1);
    let ahead_ns = end_ns - i128::from(crest_model::clock::unix_ns());
    tokio::time::Instant::now() + Duration::from_nanos(u64::try_from(ahead_ns).unwrap_or(0))
}

async fn stream_run(
    up: Up,
    plan: pb::RunPlan,
    pace: Option<i64>,
    i: usize,
    n: u32,
    workers: usize,
    rows: Option<Arc<AtomicU32>>,
) {
    static SETS: tokio::sync::OnceCell<Vec<Prepared>> = tokio::sync::OnceCell::const_new();
    let p = plan.clone();
    let sets = SETS
        .get_or_init(|| async move {
            tokio::task::spawn_blocking(move || (0..DATASETS).map(|d| prepare(&p, d, n)).collect())
                .await
                .expect("prepare")
        })
        .await;
    let (encoded, totals, rate) = &sets[i % DATASETS];
    let rate = *rate;
    // A fleet stays closer: what its workers hold ahead is all pending in the coordinator.
    let ahead = if workers > 16 { 2 } else { AHEAD };
    if i == 0 {
        let one = pb::Interval {
            commands: encoded[0].clone(),
            ..Default::default()
        };
        // What the same histograms take with DEFLATE (the V2 + DEFLATE encoding).
        let (mut plain, mut deflated) = (0, 0);
        for c in &encoded[0] {
            for h in [&c.latency, &c.service_time, &c.schedule_lag]
                .into_iter()
                .flatten()
            {
                plain += h.v2.len();
                deflated += hist::encode(&hist::decode(&h.v2).expect("own encoding")).len();
            }
        }
        eprintln!(
            "sim: one interval message: {} bytes ({} per command); its histograms {plain} bytes, {deflated} with DEFLATE",
            one.encoded_len(),
            one.encoded_len() / encoded[0].len().max(1)
        );
    }
    for k in 0..n {
        if let Some(start) = pace {
            tokio::time::sleep_until(interval_end(start, &plan, k)).await;
        }
        while let Some(r) = &rows
            && k > r.load(Ordering::Relaxed) + ahead
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let msg = Out::Interval(pb::Interval {
            run_id: plan.run_id.clone(),
            index: k,
            commands: encoded[k as usize % VARIANTS].clone(),
            target_rate: rate,
            error_messages: vec![],
            shard_cpu_ns: 250_000_000,
            busiest_shard: 0.25,
            ..Default::default()
        });
        if !up.send(msg).await {
            return;
        }
    }
    let fin = Out::Finished(pb::Finished {
        run_id: plan.run_id.clone(),
        totals: totals.clone(),
        in_flight: 0,
        unsent: 0,
        intervals: n,
        connection_errors: vec![],
        error_messages: vec![],
        tls: None,
        classes: vec![],
        nodes: vec![],
        connections: None,
    });
    let _ = up.send(fin).await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args
        .get(1)
        .cloned()
        .expect("usage: sim_workers URL[,URL...] WORKERS INTERVALS [TIMELINE]");
    let workers: usize = args.get(2).map_or(1, |s| s.parse().expect("WORKERS"));
    let intervals: u32 = args.get(3).map_or(3_600, |s| s.parse().expect("INTERVALS"));
    let rows = args.get(4).map(|p| {
        let rows = Arc::new(AtomicU32::new(0));
        tokio::spawn(watch_rows(p.into(), rows.clone()));
        rows
    });
    // Several URLs (comma-separated: relays): worker i dials the (i mod n)th.
    let urls: Vec<String> = url.split(',').map(str::to_string).collect();
    let tasks: Vec<_> = (0..workers)
        .map(|i| {
            let url = urls[i % urls.len()].clone();
            tokio::spawn(worker(url, i, intervals, workers, rows.clone()))
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}
