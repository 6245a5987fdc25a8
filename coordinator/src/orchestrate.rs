//! The run lifecycle, from `crest run` to the report:
//! listen → (start local workers / built-in target) → wait for workers → clock offsets →
//! plan and split → common start instant → collect intervals with live progress →
//! finals, lost workers → merge → report.
//!
//! Lost workers: a worker whose session ends, or who sends nothing for [`SILENCE`], is
//! marked lost and sent an abort; the run finishes with the others and keeps every interval
//! the lost worker sent. The coordinator never waits past the schedule end + drain + grace.

use crate::config::{ClassConfig, RunConfig, Workers};
use crate::merge::{self, ByCommand, WorkerBooks, add_into};
use crate::progress::{Progress, Sample};
use crate::report::{self, Checks, Report, Settings, Target, TimelinePoint, Totals, WorkerReport};
use crate::service::{self, Hub, HubEvent, WorkerLink};
use crate::split;
use crest_engine::agent;
use crest_model::clock::unix_ns;
use crest_model::plan::Pacer;
use crest_model::rng::derive_seed;
use crest_model::schedule::Arrival;
use crest_model::shapes::{KeyDist, ValueSizes};
use crest_proto::pb::{self, coordinator_message::Msg as Out, worker_message::Msg as In};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};

/// A worker that sends nothing for this long during a run is lost.
pub const SILENCE: Duration = Duration::from_secs(3);
/// Extra wait for finals after the schedule and the drain.
const GRACE: Duration = Duration::from_secs(5);
const PINGS: u64 = 5;

/// Why a run did not produce a report.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The user can fix it: bad setting, unreachable target, missing workers (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Something else went wrong (exit 1).
    #[error("{0}")]
    Failed(String),
    /// Interrupted by the user (exit 130).
    #[error("interrupted; workers told to stop")]
    Interrupted,
}

struct Member {
    link: WorkerLink,
    offset_ns: i64,
    rtt_ns: u64,
    books: WorkerBooks,
    last_seen: Instant,
    done: bool,
    finished_at: Option<Instant>,
}

impl Member {
    fn lost(&self) -> bool {
        self.books.lost.is_some()
    }
}

/// Runs one load test to its report.
///
/// # Errors
/// [`RunError`] when no report can be made.
pub async fn run(cfg: RunConfig) -> Result<Report, RunError> {
    let (ev_tx, mut events) = mpsc::unbounded_channel();
    let hub = Hub::new(ev_tx, cfg.token.clone());
    let listen = match cfg.workers {
        Workers::Local { .. } => SocketAddr::from(([127, 0, 0, 1], 0)),
        Workers::Remote { .. } => cfg.listen,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| RunError::Usage(format!("--listen {listen}: cannot listen: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| RunError::Failed(e.to_string()))?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let server = {
        let mut rx = stop_rx.clone();
        tokio::spawn(service::serve(hub, listener, async move {
            let _ = rx.wait_for(|s| *s).await;
        }))
    };
    let result = run_inner(&cfg, addr, &mut events, stop_rx).await;
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    result
}

async fn run_inner(
    cfg: &RunConfig,
    addr: SocketAddr,
    events: &mut mpsc::UnboundedReceiver<HubEvent>,
    stop: watch::Receiver<bool>,
) -> Result<Report, RunError> {
    // The built-in target, when no --target is given.
    let builtin_port = match &cfg.target {
        Some(_) => None,
        None => {
            let ip = match cfg.workers {
                Workers::Local { .. } => [127, 0, 0, 1].into(),
                Workers::Remote { .. } => cfg.listen.ip(),
            };
            let l = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
                .await
                .map_err(|e| RunError::Failed(format!("cannot start the built-in target: {e}")))?;
            let port = l
                .local_addr()
                .map_err(|e| RunError::Failed(e.to_string()))?
                .port();
            let mut rx = stop.clone();
            tokio::spawn(crest_sink::serve(l, async move {
                let _ = rx.wait_for(|s| *s).await;
            }));
            eprintln!("crest: no --target given: using the built-in target on {ip}:{port}");
            Some(port)
        }
    };
    let expected = match &cfg.workers {
        Workers::Local {
            count,
            cpus,
            threads,
        } => {
            start_local_workers(
                *count,
                cpus.as_deref(),
                *threads,
                addr,
                &cfg.token,
                stop.clone(),
            )?;
            *count as usize
        }
        Workers::Remote { count, .. } => {
            eprintln!(
                "crest: listening on {addr}; waiting for {count} worker(s): crest-worker --coordinator http://<this host>:{}",
                addr.port()
            );
            *count as usize
        }
    };
    let wait = match cfg.workers {
        Workers::Local { .. } => Duration::from_secs(10),
        Workers::Remote { wait_timeout, .. } => wait_timeout,
    };
    let mut members = wait_for_workers(events, expected, wait, addr).await?;
    measure_offsets(events, &mut members).await?;

    let total_shards: u32 = members.iter().map(|m| m.link.info.shards).sum();
    for c in &cfg.classes {
        if u64::from(c.connections) < u64::from(total_shards) {
            return Err(RunError::Usage(format!(
                "--connections {} (class {}): fewer connections than the {total_shards} shards the workers run; give --connections ≥ {total_shards} (or fewer worker threads)",
                c.connections, c.name
            )));
        }
    }
    let target_for = |m: &Member| match (&cfg.target, builtin_port) {
        (Some(t), _) => t.clone(),
        (None, Some(port)) => {
            let ip = m.link.info.local.map_or_else(|| addr.ip(), |a| a.ip());
            SocketAddr::new(ip, port).to_string()
        }
        (None, None) => unreachable!("builtin port is set when there is no target"),
    };

    // Prefill: every key of each prefill class written once, closed loop, split across the
    // shards by key (sequential keys interleaved by shard), excluded from results.
    let prefill: Vec<pb::ClassPlan> = cfg
        .classes
        .iter()
        .filter(|c| c.prefill)
        .map(prefill_class)
        .collect();
    if !prefill.is_empty() {
        let budgets: Vec<Option<u64>> = cfg
            .classes
            .iter()
            .filter(|c| c.prefill)
            .map(|c| Some(c.keys))
            .collect();
        let conns: Vec<u32> = cfg
            .classes
            .iter()
            .filter(|c| c.prefill)
            .map(|c| c.connections)
            .collect();
        let keys: u64 = cfg
            .classes
            .iter()
            .filter(|c| c.prefill)
            .map(|c| c.keys)
            .sum();
        eprintln!("crest: prefill: writing {keys} keys");
        let t0 = Instant::now();
        let phase = Phase {
            classes: prefill,
            budgets,
            conns,
            warmup: Duration::ZERO,
            duration: Duration::ZERO,
        };
        let (run_id, _, _) = start_phase(cfg, &members, &phase, total_shards, &target_for).await;
        collect(
            cfg,
            events,
            &mut members,
            &run_id,
            Instant::now(),
            Duration::from_secs(3600),
        )
        .await?;
        let mut written = 0;
        let mut errors = 0;
        for m in &mut members {
            let t = merge::all_commands(&m.books.sum());
            written += t.completed;
            errors += t.error_total();
            if let Some(reason) = &m.books.lost {
                return Err(RunError::Failed(format!(
                    "worker {} lost during prefill: {reason}",
                    m.link.info.name
                )));
            }
            m.books = WorkerBooks::default();
            m.done = false;
            m.finished_at = None;
        }
        let secs = t0.elapsed().as_secs_f64();
        eprintln!(
            "crest: prefill: {written} keys written in {secs:.1} s ({:.0}/s), {errors} errors",
            written as f64 / secs.max(1e-9)
        );
    }

    let phase = Phase {
        classes: cfg.classes.iter().map(|c| class_plan(cfg, c)).collect(),
        budgets: cfg.classes.iter().map(|c| c.requests).collect(),
        conns: cfg.classes.iter().map(|c| c.connections).collect(),
        warmup: cfg.warmup,
        duration: cfg.duration,
    };
    let (run_id, start_local, started_at) =
        start_phase(cfg, &members, &phase, total_shards, &target_for).await;
    let conns: u32 = cfg.classes.iter().map(|c| c.connections).sum();
    eprintln!(
        "crest: run {run_id}: {} worker(s), {total_shards} shard(s), {} class(es), {conns} connections{}",
        members.len(),
        cfg.classes.len(),
        if cfg.warmup.is_zero() {
            String::new()
        } else {
            format!(", warm-up {:?} not measured", cfg.warmup)
        }
    );
    let measured_start = start_local + cfg.warmup;
    let budget = if cfg.closed_loop() && cfg.duration.is_zero() {
        Duration::from_secs(3600)
    } else {
        cfg.duration
    };
    collect(cfg, events, &mut members, &run_id, measured_start, budget).await?;
    let elapsed = members
        .iter()
        .filter_map(|m| m.finished_at)
        .max()
        .map_or_else(
            || measured_start.elapsed(),
            |t| t.saturating_duration_since(measured_start),
        );
    Ok(build_report(
        cfg,
        &members,
        elapsed,
        run_id,
        started_at + cfg.warmup,
        builtin_port.is_some(),
    ))
}

/// One phase of a run (prefill, or the measured run): its classes and their splits.
struct Phase {
    classes: Vec<pb::ClassPlan>,
    /// Closed-loop budgets per class (None: by time).
    budgets: Vec<Option<u64>>,
    /// Connections per class, cluster-wide.
    conns: Vec<u32>,
    warmup: Duration,
    duration: Duration,
}

fn profile_pb(segments: &[crest_model::schedule::Segment]) -> pb::RateProfile {
    pb::RateProfile {
        segments: segments
            .iter()
            .map(|s| pb::RateSegment {
                duration_ns: s.duration_ns,
                from_rps: s.from_rps,
                to_rps: s.to_rps,
            })
            .collect(),
    }
}

fn keys_pb(c: &ClassConfig, dist: &KeyDist) -> pb::KeySpace {
    let (name, p1, p2) = match dist {
        KeyDist::Uniform => ("uniform", 0.0, 0.0),
        KeyDist::Zipf(s) => ("zipf", *s, 0.0),
        KeyDist::Sequential => ("sequential", 0.0, 0.0),
        KeyDist::Gaussian { mean, stddev } => ("gaussian", *mean, *stddev),
    };
    pb::KeySpace {
        count: c.keys,
        prefix: c.key_prefix.clone(),
        dist: name.into(),
        param1: p1,
        param2: p2,
    }
}

fn values_pb(v: &ValueSizes) -> pb::ValueSizes {
    match v {
        ValueSizes::Fixed(n) => pb::ValueSizes {
            kind: "fixed".into(),
            sizes: vec![*n],
            weights: vec![],
        },
        ValueSizes::Range(a, b) => pb::ValueSizes {
            kind: "range".into(),
            sizes: vec![*a, *b],
            weights: vec![],
        },
        ValueSizes::Weighted(list) => pb::ValueSizes {
            kind: "weighted".into(),
            sizes: list.iter().map(|w| w.0).collect(),
            weights: list.iter().map(|w| w.1).collect(),
        },
    }
}

/// A class of the measured run: warm-up prepended at the profile's first rate.
fn class_plan(cfg: &RunConfig, c: &ClassConfig) -> pb::ClassPlan {
    let profile = c.profile.as_ref().map(|p| {
        let mut segs = Vec::new();
        if !cfg.warmup.is_zero() {
            let r = p.segments().first().map_or(0.0, |s| s.from_rps);
            segs.push(crest_model::schedule::Segment {
                duration_ns: cfg.warmup.as_nanos() as u64,
                from_rps: r,
                to_rps: r,
            });
        }
        segs.extend_from_slice(p.segments());
        profile_pb(&segs)
    });
    pb::ClassPlan {
        name: c.name.clone(),
        closed_loop: profile.is_none(),
        profile,
        duration_ns: cfg.duration.as_nanos() as u64,
        mix: c
            .mix
            .iter()
            .map(|(n, w)| pb::Command {
                name: n.clone(),
                weight: *w,
            })
            .collect(),
        keys: Some(keys_pb(c, &c.key_dist)),
        values: Some(values_pb(&c.values)),
        pipeline: c.pipeline,
        ttl_s: c.ttl.unwrap_or(0),
        batch: c.batch,
        members: c.members,
        members_sequential: c.members_sequential,
        range: c.range,
    }
}

/// The prefill of a class: SET every key once, in order, closed loop.
fn prefill_class(c: &ClassConfig) -> pb::ClassPlan {
    pb::ClassPlan {
        name: format!("prefill:{}", c.name),
        closed_loop: true,
        profile: None,
        duration_ns: 0,
        mix: vec![pb::Command {
            name: "SET".into(),
            weight: 1,
        }],
        keys: Some(keys_pb(c, &KeyDist::Sequential)),
        values: Some(values_pb(&c.values)),
        pipeline: c.pipeline.max(16),
        ttl_s: c.ttl.unwrap_or(0),
        batch: 1,
        members: c.members,
        members_sequential: false,
        range: c.range,
    }
}

/// Splits a phase over every shard, sends each worker its plan and a common start instant.
/// Returns the run id, the local start instant and the wall-clock start.
async fn start_phase(
    cfg: &RunConfig,
    members: &[Member],
    phase: &Phase,
    total_shards: u32,
    target_for: &dyn Fn(&Member) -> String,
) -> (String, Instant, SystemTime) {
    let ones = vec![1u64; total_shards as usize];
    let shares = split::shares(&ones);
    let conns: Vec<Vec<u64>> = phase
        .conns
        .iter()
        .map(|c| split::split_integer(u64::from(*c), &ones))
        .collect();
    let budgets: Vec<Vec<u64>> = phase
        .budgets
        .iter()
        .map(|b| b.map_or_else(|| vec![0; ones.len()], |n| split::split_integer(n, &ones)))
        .collect();
    let run_id = uuid::Uuid::new_v4().to_string();
    let max_rtt = members.iter().map(|m| m.rtt_ns).max().unwrap_or(0);
    let lead = Duration::from_millis(1_000).max(Duration::from_nanos(max_rtt * 4));
    let start_unix = unix_ns() + lead.as_nanos() as i64;
    let start_local = Instant::now() + lead;
    let started_at = SystemTime::now() + lead;
    let mut g = 0usize;
    for m in members {
        let mut shards = Vec::new();
        for s in 0..m.link.info.shards {
            shards.push(pb::ShardPlan {
                shard: s,
                global_index: g as u32,
                share: shares[g],
                seed: derive_seed(cfg.seed, g as u64),
                classes: (0..phase.classes.len())
                    .map(|c| pb::ShardClass {
                        connections: conns[c][g] as u32,
                        requests: budgets[c][g],
                        bounded: phase.budgets[c].is_some(),
                    })
                    .collect(),
            });
            g += 1;
        }
        let plan = pb::RunPlan {
            run_id: run_id.clone(),
            target: target_for(m),
            classes: phase.classes.clone(),
            arrival: match cfg.arrival {
                Arrival::Uniform => pb::Arrival::Uniform,
                Arrival::Poisson => pb::Arrival::Poisson,
            } as i32,
            pacer: match cfg.pacer {
                Pacer::Sleep => pb::Pacer::Sleep,
                Pacer::Spin => pb::Pacer::Spin,
            } as i32,
            timeout_ns: cfg.timeout.as_nanos() as u64,
            drain_ns: cfg.drain.as_nanos() as u64,
            total_shards,
            shards,
            backlog_limit: cfg.backlog_limit,
            warmup_ns: phase.warmup.as_nanos() as u64,
            interval_ns: cfg.interval.as_nanos() as u64,
        };
        let _ = phase.duration;
        m.link
            .send(Out::Start(pb::StartRun {
                plan: Some(plan),
                start_at_unix_ns: start_unix + m.offset_ns,
            }))
            .await;
    }
    (run_id, start_local, started_at)
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM (`docker stop`, Kubernetes deleting the Job).
pub async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Starts `count` in-process workers that dial `addr` over loopback, the same path remote
/// workers take. Cores are dealt out round-robin so local workers do not share a core.
fn start_local_workers(
    count: u32,
    cpus: Option<&str>,
    threads: Option<usize>,
    addr: SocketAddr,
    token: &str,
    stop: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let cores =
        crest_engine::cpus::pick(cpus, threads).map_err(|e| RunError::Usage(e.to_string()))?;
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into());
    for i in 0..count as usize {
        let mine: Vec<_> = if cores.len() >= count as usize {
            cores
                .iter()
                .skip(i)
                .step_by(count as usize)
                .copied()
                .collect()
        } else {
            vec![cores[i % cores.len()]]
        };
        let acfg = agent::AgentConfig {
            coordinator: format!("http://{addr}"),
            name: format!("local-{i}"),
            host: host.clone(),
            token: token.to_string(),
            cores: mine,
            once: true,
        };
        let mut rx = stop.clone();
        tokio::spawn(async move {
            if let Err(e) = agent::run(acfg, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
            {
                tracing::error!(error = %e, "local worker stopped");
            }
        });
    }
    Ok(())
}

async fn wait_for_workers(
    events: &mut mpsc::UnboundedReceiver<HubEvent>,
    expected: usize,
    wait: Duration,
    addr: SocketAddr,
) -> Result<Vec<Member>, RunError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut members: Vec<Member> = Vec::new();
    let mut refusals: Vec<String> = Vec::new();
    while members.len() < expected {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = tokio::time::sleep_until(deadline) => None,
            _ = interrupted() => return Err(RunError::Interrupted),
        };
        match ev {
            Some(HubEvent::Joined(link)) => {
                eprintln!(
                    "crest: worker {} ({}, {} shard(s)) registered: {}/{expected}",
                    link.info.name,
                    link.info.host,
                    link.info.shards,
                    members.len() + 1
                );
                members.push(Member {
                    link,
                    offset_ns: 0,
                    rtt_ns: 0,
                    books: WorkerBooks::default(),
                    last_seen: Instant::now(),
                    done: false,
                    finished_at: None,
                });
            }
            Some(HubEvent::Refused { name, reason }) => {
                eprintln!("crest: refused worker {name}: {reason}");
                refusals.push(reason);
            }
            Some(HubEvent::Left(id, _)) => members.retain(|m| m.link.info.id != id),
            Some(HubEvent::Message(id, _)) => {
                if let Some(m) = members.iter_mut().find(|m| m.link.info.id == id) {
                    m.last_seen = Instant::now();
                }
            }
            None => {
                let names: Vec<&str> = members.iter().map(|m| m.link.info.name.as_str()).collect();
                let refused = refusals
                    .first()
                    .map(|r| format!("; refused: {r}"))
                    .unwrap_or_default();
                return Err(RunError::Usage(format!(
                    "waited {:?} for {expected} worker(s); {} arrived{}{refused}. Start `crest-worker --coordinator http://<this host>:{}` on each client node, or lower --workers / raise --wait-timeout",
                    wait,
                    members.len(),
                    if names.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", names.join(", "))
                    },
                    addr.port()
                )));
            }
        }
    }
    Ok(members)
}

/// Estimates each worker's clock offset from a few pings, keeping the lowest-RTT sample
/// (the one least disturbed by queueing): offset = t2 − (t1 + t3) / 2.
async fn measure_offsets(
    events: &mut mpsc::UnboundedReceiver<HubEvent>,
    members: &mut [Member],
) -> Result<(), RunError> {
    let mut best: HashMap<String, (u64, i64)> = HashMap::new();
    let mut got: HashMap<String, u64> = HashMap::new();
    for seq in 0..PINGS {
        for m in members.iter() {
            m.link
                .send(Out::Ping(pb::Ping {
                    seq,
                    t1_unix_ns: unix_ns(),
                }))
                .await;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        while got.values().filter(|&&n| n > seq).count() < members.len() {
            let ev = tokio::select! {
                ev = events.recv() => ev,
                _ = tokio::time::sleep_until(deadline) => break,
            };
            match ev {
                Some(HubEvent::Message(id, In::Pong(p))) => {
                    let t3 = unix_ns();
                    let rtt = (t3 - p.t1_unix_ns).max(0) as u64;
                    let offset = p.t2_unix_ns - (p.t1_unix_ns + t3) / 2;
                    *got.entry(id.clone()).or_default() += 1;
                    let e = best.entry(id).or_insert((u64::MAX, 0));
                    if rtt < e.0 {
                        *e = (rtt, offset);
                    }
                }
                Some(HubEvent::Left(id, reason)) => {
                    let name = members
                        .iter()
                        .find(|m| m.link.info.id == id)
                        .map(|m| m.link.info.name.clone());
                    return Err(RunError::Failed(format!(
                        "worker {} left before the run started: {reason}",
                        name.unwrap_or(id)
                    )));
                }
                Some(_) => {}
                None => return Err(RunError::Failed("event channel closed".into())),
            }
        }
    }
    for m in members.iter_mut() {
        let Some(&(rtt, offset)) = best.get(&m.link.info.id) else {
            return Err(RunError::Failed(format!(
                "worker {} did not answer clock pings",
                m.link.info.name
            )));
        };
        m.rtt_ns = rtt;
        m.offset_ns = offset;
        m.last_seen = Instant::now();
    }
    Ok(())
}

async fn collect(
    cfg: &RunConfig,
    events: &mut mpsc::UnboundedReceiver<HubEvent>,
    members: &mut [Member],
    run_id: &str,
    start: Instant,
    duration: Duration,
) -> Result<(), RunError> {
    let deadline = start + duration + cfg.drain + GRACE;
    let mut progress = Progress::new();
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(start + Duration::from_millis(1_100)),
        Duration::from_secs(1),
    );
    let (int_tx, mut int_rx) = oneshot::channel::<()>();
    let ctrl_c = tokio::spawn(async move {
        interrupted().await;
        let _ = int_tx.send(());
    });
    let result = loop {
        if members.iter().all(|m| m.done || m.lost()) {
            break Ok(());
        }
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = tick.tick() => {
                let now = Instant::now();
                for m in members.iter_mut().filter(|m| !m.done && !m.lost()) {
                    if now.duration_since(m.last_seen) > SILENCE {
                        lose(m, run_id, format!("no message for {} s", SILENCE.as_secs())).await;
                    }
                }
                if now > deadline {
                    for m in members.iter_mut().filter(|m| !m.done && !m.lost()) {
                        lose(m, run_id, "no final results by the schedule end + drain + grace".into()).await;
                    }
                }
                if let Some(s) = progress_sample(cfg, members, start, duration) {
                    progress.show(&s);
                }
                continue;
            }
            _ = &mut int_rx => {
                for m in members.iter() {
                    m.link.send(Out::Abort(pb::Abort { run_id: run_id.into(), reason: "coordinator interrupted".into() })).await;
                }
                progress.finish();
                break Err(RunError::Interrupted);
            }
        };
        let Some(ev) = ev else {
            break Err(RunError::Failed("event channel closed".into()));
        };
        match ev {
            HubEvent::Message(id, msg) => {
                let Some(m) = members.iter_mut().find(|m| m.link.info.id == id) else {
                    continue;
                };
                m.last_seen = Instant::now();
                match msg {
                    In::Interval(iv) if iv.run_id == run_id => {
                        if let Err(e) = m.books.add_interval(&iv) {
                            lose(m, run_id, format!("sent an unreadable interval: {e}")).await;
                        }
                    }
                    In::Finished(f) if f.run_id == run_id => match m.books.finish(&f) {
                        Ok(()) => {
                            m.done = true;
                            m.finished_at = Some(Instant::now());
                        }
                        Err(e) => lose(m, run_id, format!("sent unreadable totals: {e}")).await,
                    },
                    In::Failed(f) if f.run_id == run_id || f.run_id.is_empty() => {
                        let name = m.link.info.name.clone();
                        for m in members.iter() {
                            m.link
                                .send(Out::Abort(pb::Abort {
                                    run_id: run_id.into(),
                                    reason: format!("worker {name} failed"),
                                }))
                                .await;
                        }
                        progress.finish();
                        let msg = format!("worker {name}: {}", f.reason);
                        break Err(
                            if f.reason.starts_with("cannot connect")
                                || f.reason.starts_with("cannot resolve")
                                || f.reason.starts_with("target")
                            {
                                RunError::Usage(format!(
                                    "--target: {msg}; check the address and that the server is up"
                                ))
                            } else {
                                RunError::Failed(msg)
                            },
                        );
                    }
                    _ => {}
                }
            }
            HubEvent::Left(id, reason) => {
                if let Some(m) = members.iter_mut().find(|m| m.link.info.id == id)
                    && !m.done
                    && !m.lost()
                {
                    m.books.lost = Some(reason);
                }
            }
            HubEvent::Joined(link) => {
                tracing::info!(worker = %link.info.name, "worker registered during a run; it stays idle");
            }
            HubEvent::Refused { name, reason } => {
                eprintln!("crest: refused worker {name}: {reason}")
            }
        }
    };
    ctrl_c.abort();
    progress.finish();
    result
}

async fn lose(m: &mut Member, run_id: &str, reason: String) {
    tracing::warn!(worker = %m.link.info.name, %reason, "worker lost");
    m.books.lost = Some(reason.clone());
    m.link
        .send(Out::Abort(pb::Abort {
            run_id: run_id.into(),
            reason,
        }))
        .await;
}

/// The latest second every live worker has reported, for the progress line.
fn progress_sample(
    cfg: &RunConfig,
    members: &[Member],
    start: Instant,
    duration: Duration,
) -> Option<Sample> {
    let alive: Vec<&Member> = members.iter().filter(|m| !m.lost()).collect();
    let latest = alive
        .iter()
        .filter_map(|m| m.books.intervals.keys().next_back().copied())
        .min()?;
    let mut by = ByCommand::new();
    let mut errors = 0;
    for m in members {
        if let Some(iv) = m.books.intervals.get(&latest) {
            add_into(&mut by, iv);
        }
        errors += m.books.errors;
    }
    let all = merge::all_commands(&by);
    let iv = cfg.interval.as_nanos() as u64;
    let t0 = u64::from(latest) * iv;
    let per_s = 1e9 / iv as f64;
    Some(Sample {
        elapsed_s: start.elapsed().as_secs_f64().min(duration.as_secs_f64()),
        total_s: duration.as_secs_f64(),
        target_rate: (!cfg.closed_loop()).then(|| cfg.expected(t0, t0 + iv) * per_s),
        achieved_rate: all.completed as f64 * per_s,
        p99_us: all.latency.value_at_quantile(0.99) as f64 / 1_000.0,
        errors,
        alive: alive.len(),
        workers: members.len(),
    })
}

fn build_report(
    cfg: &RunConfig,
    members: &[Member],
    elapsed: Duration,
    run_id: String,
    started_at: SystemTime,
    builtin: bool,
) -> Report {
    let mut duration_ns = cfg.duration.as_nanos() as u64;
    if duration_ns == 0 {
        // Closed loop bounded by count: the run lasted from its start to the last worker's
        // final message (which follows its last reply by one message delay).
        duration_ns = (elapsed.as_nanos() as u64).max(1);
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
        problems.extend(m.books.check(&m.link.info.name, &sum));
        let f = m.books.final_.as_ref();
        in_flight += f.map_or(0, |f| f.in_flight);
        unsent += f.map_or(0, |f| f.unsent);
        let t = merge::all_commands(&sum);
        workers.push(WorkerReport {
            id: m.link.info.id.clone(),
            name: m.link.info.name.clone(),
            host: m.link.info.host.clone(),
            shards: m.link.info.shards,
            cpus: m.link.info.cpus.clone(),
            clock_offset_us: m.offset_ns as f64 / 1e3,
            rtt_us: m.rtt_ns as f64 / 1e3,
            lost: m.lost(),
            lost_reason: m.books.lost.clone(),
            scheduled: t.scheduled,
            completed: t.completed,
            errors: t.error_total(),
            in_flight: f.map(|f| f.in_flight),
            latency_us: report::Percentiles::of(&t.latency),
            service_time_us: report::Percentiles::of(&t.service_time),
            schedule_lag_us: report::Percentiles::of(&t.schedule_lag),
            histograms: report::Histograms::of(&t),
        });
    }
    let iv = cfg.interval.as_nanos() as u64;
    let iv_s = iv as f64 / 1e9;
    let last = (duration_ns.div_ceil(iv).max(1) - 1) as u32;
    let mut interval_latency = Vec::new();
    let timeline: Vec<TimelinePoint> = (0..=last)
        .map(|k| {
            let by = timeline.remove(&k).unwrap_or_default();
            let start_s = f64::from(k) * iv_s;
            interval_latency.push(report::IntervalLatency {
                start_s,
                length_s: iv_s,
                class: None,
                hist: merge::all_commands(&by).latency,
            });
            if cfg.classes.len() > 1 {
                for c in &cfg.classes {
                    let mut h = crest_model::hist::new_hist();
                    for s in merge::of_class(&by, &c.name).values() {
                        h.add(&s.latency).expect("same bounds");
                    }
                    interval_latency.push(report::IntervalLatency {
                        start_s,
                        length_s: iv_s,
                        class: Some(c.name.clone()),
                        hist: h,
                    });
                }
            }
            let t0 = u64::from(k) * iv;
            let target = cfg.expected(t0, t0 + iv) / iv_s;
            TimelinePoint::of(
                k,
                iv_s,
                &merge::all_commands(&by),
                target,
                due.get(&k).copied().unwrap_or(0.0),
            )
        })
        .collect();
    let classes: BTreeMap<String, report::ClassReport> = cfg
        .classes
        .iter()
        .map(|c| {
            let by = merge::of_class(&all, &c.name);
            let t = class_target(c);
            let mut sum = crest_model::stats::CmdStats::default();
            for v in by.values() {
                sum += v;
            }
            (
                c.name.clone(),
                report::ClassReport {
                    summary: report::Summary::of(&sum, t, duration_s),
                    commands: report::commands(&by, &c.weights(), t, duration_s),
                    histograms: report::Histograms::of(&sum),
                },
            )
        })
        .collect();
    let conn_errors = merge::connection_errors(members.iter().map(|m| &m.books));
    Report {
        schema_version: report::SCHEMA_VERSION,
        run_id,
        crest_version: env!("CARGO_PKG_VERSION").into(),
        target: if builtin {
            "builtin".into()
        } else {
            cfg.target.clone().unwrap_or_default()
        },
        started_at: humantime::format_rfc3339_millis(started_at).to_string(),
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
                .map(|c| report::ClassSettings {
                    name: c.name.clone(),
                    rate: class_target(c),
                    profile: c
                        .profile
                        .as_ref()
                        .map(|p| {
                            p.segments()
                                .iter()
                                .map(|s| report::ProfileSegment {
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
            summary: report::Summary::of(&merge::all_commands(&all), target, duration_s),
            in_flight,
            unsent,
            histograms: report::Histograms::of(&merge::all_commands(&all)),
        },
        commands: report::commands_over_classes(&merge::by_name(&all), &classes, duration_s),
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
        connection_errors: report::error_map(&conn_errors),
        interval_latency,
    }
}
