//! The run lifecycle, from a checked [`RunConfig`] to [`RunResults`]:
//! (start local workers / built-in target) → wait for workers → clock offsets →
//! plan and split → common start instant → collect intervals with live progress (merged
//! into [`RunBooks`] as they come, `timeline.csv` and `latency.hlog` written as the run
//! goes) → finals, lost workers. Turning results into a report is
//! [`crate::build::build()`]'s job. An interrupt during the measured phase still returns
//! results ([`RunResults::interrupted`]): what was collected until then.
//!
//! The seam is [`run`]`(config, listener, shutdown)`, in the manner of mini-redis's
//! `server::run`: the caller binds the listener (port 0 in tests) and decides what stops
//! the run (signals in the binary, a channel in tests), so the whole coordinator can be
//! driven in-process.
//!
//! Lost workers: a worker whose session ends, or who sends nothing for [`SILENCE`], is
//! marked lost and sent an abort; the run finishes with the others and keeps every interval
//! the lost worker sent. The coordinator never waits past the schedule end + drain + grace.
//!
//! # Layout
//! - `cluster`: local workers, waiting for registrations, clock offsets.
//! - `phase`: a phase's plan (domain → wire through `crest_model::convert`) and its start.
//! - `collect`: intervals and finals in, lost workers out, live progress, the admin board
//!   published after every interval, control requests carried out.
//! - [`steer`]: runtime changes (rate, pause, resume, stop) as one instant on the run's
//!   clock for every worker, spliced into the books' profiles, rows for the report.

mod checkpoint;
mod cluster;
mod collect;
mod member;
mod phase;
pub mod steer;

use member::{Member, interrupted};
pub use member::{RunError, SILENCE};

use crate::config::{RunConfig, Workers};
use crate::merge::{self, ByCommand, RunBooks, WorkerBooks};
use crate::output::Live;
use crate::server_stats::{Sampler, ServerStats};
use crate::service::{self, Hub, HubEvent, WorkerInfo};
use crest_model::convert::limits;
use crest_model::plan::ClassPlan;
use crest_model::target::Verify;
use crest_report::TimelinePoint;
use crest_report::server::series::Mark;
use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

/// How long a phase with no time bound (count-bounded closed loop, prefill) may run.
const UNBOUNDED_PHASE: Duration = Duration::from_secs(3600);
/// Local workers register over loopback; they get this long.
const LOCAL_WAIT: Duration = Duration::from_secs(10);
/// How long the gRPC server gets to close its streams after a run.
const SERVER_STOP: Duration = Duration::from_secs(2);

/// Everything a run measured, before it becomes a report.
#[derive(Debug)]
pub struct RunResults {
    /// Run id (also the workers' run id).
    pub run_id: String,
    /// Wall-clock instant of the measured start (after the warm-up).
    pub started_at: SystemTime,
    /// From the measured start to the last worker's final message.
    pub elapsed: Duration,
    /// The run went to the built-in target (no `--target`).
    pub builtin_target: bool,
    /// Stopped by the shutdown future (Ctrl-C, SIGTERM) during the measured phase: the
    /// results are what was collected until then, `elapsed` the time up to the interrupt.
    pub interrupted: bool,
    /// Every worker that took part, lost ones included.
    pub workers: Vec<WorkerResult>,
    /// Run totals per (class, command).
    pub totals: ByCommand,
    /// One row per interval of the measured span.
    pub timeline: Vec<TimelinePoint>,
    /// Interval messages that came after their timeline row was written.
    pub late_intervals: u64,
    /// Errors writing `timeline.csv` / `latency.hlog` during the run, each naming its file.
    pub live_errors: Vec<String>,
    /// Every server error kind of the run, with the server's first message for it.
    pub error_messages: Vec<(String, String)>,
    /// The target's `INFO` samples (or why there are none).
    pub server: ServerStats,
    /// `--checkpoint-every`: the server read at each checkpoint.
    pub checkpoints: Vec<crest_report::CheckpointRow>,
    /// Commands the coordinator itself sent the target during the measured span (the
    /// checkpoints' `INFO memory` and probe), lower case → calls: not the load's.
    pub coordinator_calls: std::collections::BTreeMap<String, u64>,
    /// Runtime changes of rate (the admin API's), in order.
    pub changes: Vec<crest_report::ChangeRow>,
    /// Who stopped the run early, when a stop request did (the admin API, gRPC).
    pub stopped_by: Option<&'static str>,
    /// The measured span a stop request cut the run to, ns.
    pub stopped_ns: Option<u64>,
    /// Each class's profile on the measured clock as runtime changes left it (None:
    /// closed loop): what the run asked for.
    pub profiles: Vec<Option<crest_model::schedule::Profile>>,
}

impl RunResults {
    /// The measured span, ns: the schedule's length, or for a count-bounded closed loop or
    /// an interrupted run the time from the measured start to its end.
    pub fn measured_ns(&self, cfg: &RunConfig) -> u64 {
        match self.stopped_ns {
            Some(s) if !self.interrupted => s.max(1),
            _ => measured_ns(cfg, self.elapsed, self.interrupted),
        }
    }
}

fn measured_ns(cfg: &RunConfig, elapsed: Duration, interrupted: bool) -> u64 {
    let d = if interrupted || cfg.duration.is_zero() {
        elapsed
    } else {
        cfg.duration
    };
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// One worker's part of the results.
#[derive(Debug)]
pub struct WorkerResult {
    /// Who.
    pub info: WorkerInfo,
    /// Its clock minus ours, ns.
    pub offset_ns: i64,
    /// Lowest round trip of the clock pings, ns.
    pub rtt_ns: u64,
    /// Why it was lost, if it was.
    pub lost_reason: Option<String>,
    /// What it reported.
    pub books: WorkerBooks,
}

impl WorkerResult {
    /// Whether the worker was lost during the run.
    pub fn lost(&self) -> bool {
        self.lost_reason.is_some()
    }
}

/// Binds the address workers dial: loopback port 0 for in-process workers (nobody else
/// needs to reach it), `--listen` otherwise.
///
/// # Errors
/// [`RunError::Usage`] naming `--listen` when the address cannot be bound.
pub async fn bind(cfg: &RunConfig) -> Result<TcpListener, RunError> {
    let listen = match cfg.workers {
        Workers::Local { .. } => SocketAddr::from(([127, 0, 0, 1], 0)),
        Workers::Remote { .. } => cfg.listen,
    };
    TcpListener::bind(listen)
        .await
        .map_err(|e| RunError::Usage(format!("--listen {listen}: cannot listen: {e}")))
}

/// Runs one load test on `listener` (workers dial it) until it ends or `shutdown`
/// resolves; returns what every worker measured.
///
/// # Errors
/// [`RunError`] when no results can be had: [`RunError::Interrupted`] after `shutdown`.
pub async fn run(
    cfg: &RunConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<RunResults, RunError> {
    run_watched(cfg, listener, shutdown, None).await
}

/// [`run`], publishing each finalized timeline row of the measured phase on `points` as
/// it is laid out (an in-process watcher's view of the run).
///
/// # Errors
/// As [`run`].
pub async fn run_watched(
    cfg: &RunConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    points: Option<steer::Points>,
) -> Result<RunResults, RunError> {
    let (ev_tx, mut events) = mpsc::channel(crate::service::EVENTS);
    let hub = Hub::new(ev_tx, cfg.token.clone());
    let addr = listener
        .local_addr()
        .map_err(|e| RunError::Failed(e.to_string()))?;
    let (int_tx, int_rx) = watch::channel(false);
    let interrupt_task = tokio::spawn(async move {
        shutdown.await;
        let _ = int_tx.send(true);
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    // The run's board and control requests: the gRPC Control service always, the HTTP
    // API with --admin.
    let loopback = cfg.admin.is_none_or(|a| a.ip().is_loopback());
    let admin = crate::admin::Admin::new(&cfg.token, loopback);
    if let Some(at) = cfg.admin {
        let mut rx = stop_rx.clone();
        let bound = crate::admin::serve(admin.0.clone(), at, async move {
            let _ = rx.wait_for(|s| *s).await;
        })
        .await
        .map_err(RunError::Usage)?;
        if !cfg.quiet {
            eprintln!(
                "crest: admin API on http://{bound}: GET /metrics /status, PUT /rate, POST /pause /resume /stop"
            );
        }
    }
    let server = {
        let mut rx = stop_rx.clone();
        let tls = served_tls(cfg).cloned();
        let control = Some(admin.0.clone());
        tokio::spawn(service::serve(hub, listener, tls, control, async move {
            let _ = rx.wait_for(|s| *s).await;
        }))
    };
    let admin = (admin.0, Some(admin.1), points);
    let result = run_inner(cfg, addr, &mut events, stop_rx, &int_rx, admin).await;
    interrupt_task.abort();
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(SERVER_STOP, server).await;
    result
}

/// The TLS the listener serves: the configured one for remote workers; none for
/// in-process workers, which dial loopback (nothing leaves the host).
fn served_tls(cfg: &RunConfig) -> Option<&crest_engine::control_tls::ServerTls> {
    match cfg.workers {
        Workers::Local { .. } => None,
        Workers::Remote { .. } => cfg.control_tls.as_ref(),
    }
}

async fn run_inner(
    cfg: &RunConfig,
    addr: SocketAddr,
    events: &mut mpsc::Receiver<HubEvent>,
    stop: watch::Receiver<bool>,
    interrupt: &watch::Receiver<bool>,
    (admin, requests, points): (
        crate::admin::Admin,
        Option<mpsc::Receiver<crate::control::Request>>,
        Option<steer::Points>,
    ),
) -> Result<RunResults, RunError> {
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
            if !cfg.quiet {
                eprintln!("crest: no --target given: using the built-in target on {ip}:{port}");
            }
            Some(port)
        }
    };
    let dial = match served_tls(cfg) {
        Some(t) => format!(
            "crest-worker --coordinator https://<this host>:{} --control-ca <CA of --control-cert>{}",
            addr.port(),
            if t.mutual {
                " --control-client-cert <cert> --control-client-key <key>"
            } else {
                ""
            }
        ),
        None => format!(
            "crest-worker --coordinator http://<this host>:{}",
            addr.port()
        ),
    };
    match cfg.tls.as_ref().map(|t| t.verify) {
        Some(Verify::None) => eprintln!(
            "crest: warning: --tls-skip-verify: any certificate is accepted, so the connections are encrypted but nobody vouches for the server (a machine in the middle could read and change the traffic); give --cacert instead"
        ),
        Some(Verify::SkipHostname) => eprintln!(
            "crest: warning: --tls-skip-hostname: the certificate's chain is checked but not its name, so any server with a certificate from the same CA passes"
        ),
        _ => {}
    }
    let expected = match &cfg.workers {
        Workers::Local {
            count,
            cpus,
            threads,
        } => {
            cluster::start_local_workers(
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
                "crest: listening on {addr}{}; waiting for {count} worker(s): {dial}",
                if cfg.control_tls.is_some() {
                    " (TLS)"
                } else {
                    ""
                }
            );
            if cfg.control_tls.is_none() && !addr.ip().is_loopback() {
                eprintln!(
                    "crest: warning: the control plane on {addr} is plaintext{}: serve TLS with --control-cert/--control-key",
                    match (
                        cfg.token.is_empty(),
                        cfg.session.login.is_some()
                            || cfg.tls.as_ref().is_some_and(|t| t.client.is_some()),
                    ) {
                        (_, true) =>
                            ", so the target's password or client key crosses the network in the clear to every worker",
                        (true, false) => " and, with no --token, open to any worker that dials it",
                        (false, false) => ", so the token crosses the network in the clear",
                    }
                );
            }
            *count as usize
        }
    };
    let wait = match cfg.workers {
        Workers::Local { .. } => LOCAL_WAIT,
        Workers::Remote { wait_timeout, .. } => wait_timeout,
    };
    let mut members =
        cluster::wait_for_workers(events, expected, wait, &dial, interrupt, cfg.quiet).await?;
    cluster::measure_offsets(events, &mut members).await?;

    let total_shards: u32 = members.iter().map(|m| m.link.info.shards).sum();
    for c in &cfg.classes {
        let per_shard = u64::from(c.connections).div_ceil(u64::from(total_shards.max(1)));
        if per_shard > u64::from(limits::MAX_CONNECTIONS_PER_SHARD) {
            return Err(RunError::Usage(format!(
                "--connections {} (class {}): {per_shard} per shard over the {total_shards} shards the workers run; a shard opens at most {}: add workers or threads, or use fewer connections",
                c.connections,
                c.name,
                limits::MAX_CONNECTIONS_PER_SHARD
            )));
        }
        let peak = c.profile.as_ref().map_or(0.0, |p| {
            p.segments()
                .iter()
                .map(|s| s.from_rps.max(s.to_rps))
                .fold(0.0, f64::max)
        });
        let per_shard_rate = peak / f64::from(total_shards.max(1));
        if per_shard_rate > limits::MAX_RATE_PER_SHARD {
            let need = (peak / limits::MAX_RATE_PER_SHARD).ceil();
            return Err(RunError::Usage(format!(
                "--rate (class {}): a peak of {peak:.0} requests/s is {per_shard_rate:.0} per shard over the {total_shards} shards the workers run; a shard schedules at most {:.0}/s: use at least {need:.0} shards (more workers or threads) or a lower rate",
                c.name,
                limits::MAX_RATE_PER_SHARD
            )));
        }
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
        // The built-in target is started exactly when no target is given.
        (None, None) => SocketAddr::new(addr.ip(), 0).to_string(),
    };

    // Prefill: every key of each prefill class written once, closed loop, split across the
    // shards by key (sequential keys interleaved by shard), excluded from results.
    let prefill: Vec<ClassPlan> = cfg
        .classes
        .iter()
        .filter(|c| c.prefill)
        .map(phase::prefill_class)
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
        admin.publish(|b| b.phase = "prefill");
        eprintln!("crest: prefill: writing {keys} keys");
        let t0 = Instant::now();
        let phase = phase::Phase {
            checkpoint_every: vec![None; prefill.len()],
            classes: prefill,
            budgets,
            conns,
            warmup: Duration::ZERO,
        };
        let (run_id, _, _) = phase::start(cfg, &members, &phase, total_shards, &target_for).await?;
        // No timeline and no files: only the totals count.
        let mut books = RunBooks::new(
            cfg,
            members.len(),
            collect::phase_last(cfg, UNBOUNDED_PHASE),
            Some(0),
            None,
        );
        let ended = collect::collect(
            cfg,
            events,
            &mut members,
            &mut books,
            &run_id,
            Instant::now(),
            UNBOUNDED_PHASE,
            interrupt,
            None,
            None,
        )
        .await?;
        if ended == collect::Ended::Interrupted {
            return Err(RunError::Interrupted);
        }
        let _ = books.close(0);
        let t = merge::all_commands(&books.totals);
        let (written, errors) = (t.completed, t.error_total());
        for m in &mut members {
            if let Some(reason) = &m.lost {
                return Err(RunError::Failed(format!(
                    "worker {} lost during prefill: {reason}",
                    m.link.info.name
                )));
            }
            m.done = false;
            m.finished_at = None;
        }
        let secs = t0.elapsed().as_secs_f64();
        eprintln!(
            "crest: prefill: {written} keys written in {secs:.1} s ({:.0}/s), {errors} errors",
            written as f64 / secs.max(1e-9)
        );
    }

    // The server sampler: connected after the prefill (whose replies are all in), its
    // baseline taken before the measured phase's plans go out.
    let mut server = ServerStats::Off;
    let mut sampler = None;
    if cfg.server_stats {
        match sampler_target(cfg, builtin_port).await {
            Ok((addr, shown)) => {
                match Sampler::connect(addr, &shown, &cfg.session, cfg.tls.as_ref(), cfg.interval)
                    .await
                {
                    Ok(mut s) => {
                        s.sample(Mark::BeforeLoad, None).await;
                        sampler = Some(s);
                    }
                    Err(why) => {
                        eprintln!(
                            "crest: server stats off: {why} (--no-server-stats says so up front)"
                        );
                        server = ServerStats::Unavailable(why);
                    }
                }
            }
            Err(why) => {
                eprintln!("crest: server stats off: {why}");
                server = ServerStats::Unavailable(why);
            }
        }
    }
    let mut checkpoints = match (cfg.checkpoint_every, cfg.classes.first()) {
        (Some(every), Some(class)) => {
            let (conn, _) = control_to(cfg, builtin_port, checkpoint::NAME)
                .await
                .map_err(|e| {
                    RunError::Usage(format!(
                        "--checkpoint-every: cannot reach the target to read it at the checkpoints: {e}"
                    ))
                })?;
            let probe = cfg.probe.clone().unwrap_or_default();
            Some(checkpoint::Checkpoints::new(
                conn,
                every,
                class.requests.unwrap_or(0),
                probe,
            ))
        }
        _ => None,
    };
    let phase = phase::Phase {
        classes: cfg
            .classes
            .iter()
            .map(|c| phase::class_plan(cfg, c))
            .collect(),
        budgets: cfg.classes.iter().map(|c| c.requests).collect(),
        conns: cfg.classes.iter().map(|c| c.connections).collect(),
        checkpoint_every: cfg.classes.iter().map(|_| cfg.checkpoint_every).collect(),
        warmup: cfg.warmup,
    };
    let (run_id, start_local, started_at) =
        phase::start(cfg, &members, &phase, total_shards, &target_for).await?;
    let conns: u32 = cfg.classes.iter().map(|c| c.connections).sum();
    if !cfg.quiet {
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
    }
    let measured_start = start_local + cfg.warmup;
    if let Some(c) = checkpoints.as_mut() {
        c.started(measured_start, members.len());
    }
    // Boundary 0 only with a warm-up: without one the sample before load is the baseline.
    let first = u32::from(cfg.warmup.is_zero());
    let sampler = sampler.map(|s| s.clock(measured_start, cfg.interval, first));
    let budget = if cfg.closed_loop() && cfg.duration.is_zero() {
        UNBOUNDED_PHASE
    } else {
        cfg.duration
    };
    let iv_ns = u64::try_from(cfg.interval.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    let live = match &cfg.out {
        Some(dir) => {
            Some(Live::create(dir, &run_id, started_at + cfg.warmup).map_err(RunError::Failed)?)
        }
        None => None,
    };
    let rows_last = (!cfg.duration.is_zero())
        .then(|| merge::last_row(measured_ns(cfg, Duration::ZERO, false), iv_ns));
    let mut books = RunBooks::new(
        cfg,
        members.len(),
        collect::phase_last(cfg, budget),
        rows_last,
        live,
    );
    let mut control = steer::Control {
        rx: requests,
        admin: Some(admin.clone()),
        metrics: cfg.admin.is_some(),
        steering: steer::Steering::new(
            cfg.classes.iter().map(|c| c.name.clone()).collect(),
            cfg.classes.iter().map(|c| c.profile.clone()).collect(),
            u64::try_from(cfg.warmup.as_nanos()).unwrap_or(u64::MAX),
            total_shards,
        ),
        stopped_by: None,
        points,
    };
    let ended = collect::collect(
        cfg,
        events,
        &mut members,
        &mut books,
        &run_id,
        measured_start,
        budget,
        interrupt,
        checkpoints.as_mut(),
        Some(&mut control),
    )
    .await?;
    let interrupted = ended == collect::Ended::Interrupted;
    if let Some(s) = sampler {
        server = ServerStats::Sampled(s.finish().await);
    }
    let elapsed = match members.iter().filter_map(|m| m.finished_at).max() {
        Some(t) if !interrupted => t.saturating_duration_since(measured_start),
        _ => measured_start.elapsed(),
    };
    let stopped_ns = control.steering.stopped_at;
    let span = match stopped_ns {
        Some(s) if !interrupted => s.max(1),
        _ => measured_ns(cfg, elapsed, interrupted),
    };
    // An interrupted run's rows end with its last whole interval.
    let rows_span = if interrupted {
        span - span % iv_ns
    } else {
        span
    };
    for bad in books.close(merge::last_row(rows_span, iv_ns)) {
        // Unreadable at the very end: the worker is lost, what it sent before counts.
        if let Some(m) = members.get_mut(bad.worker) {
            m.lost
                .get_or_insert_with(|| format!("sent an unreadable interval: {}", bad.error));
        }
    }
    let live_errors = books.live_errors();
    let error_messages = books.error_messages();
    // The final counters: every worker's totals are in the books now.
    collect::publish(&control, &members, &books, &run_id, measured_start, budget);
    admin.publish(|b| b.phase = "done");
    if cfg.admin.is_some() && !cfg.admin_linger.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(cfg.admin_linger) => {}
            () = self::interrupted(interrupt) => {}
        }
    }
    Ok(RunResults {
        run_id,
        started_at: started_at + cfg.warmup,
        elapsed,
        builtin_target: builtin_port.is_some(),
        interrupted,
        workers: members
            .into_iter()
            .zip(books.workers)
            .map(|(m, b)| WorkerResult {
                info: m.link.info,
                offset_ns: m.offset_ns,
                rtt_ns: m.rtt_ns,
                lost_reason: m.lost,
                books: b,
            })
            .collect(),
        totals: merge::full(books.totals),
        timeline: books.timeline,
        late_intervals: books.late,
        live_errors,
        error_messages,
        server,
        coordinator_calls: checkpoints
            .as_ref()
            .map(|c| c.calls.clone())
            .unwrap_or_default(),
        checkpoints: checkpoints.map(|c| c.rows).unwrap_or_default(),
        changes: control.steering.rows,
        stopped_by: control.stopped_by,
        stopped_ns,
        profiles: books.profiles,
    })
}

/// A connection to the run's target (or the built-in target on `builtin_port`) set up as
/// every shard connection is (TLS, login, database, protocol), named `name` in `CLIENT
/// LIST`, within 5 s: for the coordinator's own requests (checkpoints, `crest compare`'s
/// FLUSHALL, `crest suite`'s version check). Returns it with the target's name.
///
/// # Errors
/// Why the target cannot be reached, in one line.
pub async fn control_to(
    cfg: &RunConfig,
    builtin_port: Option<u16>,
    name: &str,
) -> Result<(crest_engine::probe::Control, String), String> {
    let (addr, shown) = sampler_target(cfg, builtin_port).await?;
    let tls = cfg
        .tls
        .as_ref()
        .map(crest_engine::target_tls::Client::new)
        .transpose()?;
    let conn = tokio::time::timeout(
        Duration::from_secs(5),
        crest_engine::probe::control(addr, &shown, &cfg.session, tls.as_ref(), name),
    )
    .await
    .map_err(|_| format!("no connection to {shown} within 5s"))??;
    Ok((conn, shown))
}

/// The address the sampler dials and its name for messages: the target, or the built-in
/// target on loopback.
async fn sampler_target(
    cfg: &RunConfig,
    builtin_port: Option<u16>,
) -> Result<(SocketAddr, String), String> {
    match (&cfg.target, builtin_port) {
        (Some(t), _) => {
            let addr = tokio::net::lookup_host(t.as_str())
                .await
                .map_err(|e| format!("cannot resolve target {t}: {e}"))?
                .next()
                .ok_or_else(|| format!("target {t} resolves to no address"))?;
            Ok((addr, t.clone()))
        }
        (None, Some(port)) => {
            let ip = match cfg.workers {
                Workers::Remote { .. } if !cfg.listen.ip().is_unspecified() => cfg.listen.ip(),
                _ => [127, 0, 0, 1].into(),
            };
            let addr = SocketAddr::new(ip, port);
            Ok((addr, addr.to_string()))
        }
        (None, None) => Err("no target".into()),
    }
}
