//! The run lifecycle, from a checked [`RunConfig`] to [`RunResults`]:
//! (start local workers / built-in target) → wait for workers → clock offsets →
//! plan and split → common start instant → collect intervals with live progress (merged
//! into [`crate::merge::RunBooks`] as they come, `timeline.csv` and `latency.hlog` written as the run
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
//! The phases, in the order [`run`] takes them:
//! - `target`: the user's target or the built-in one; the coordinator's own connections.
//! - `cluster`: local workers, waiting for registrations, clock offsets, whether the fleet
//!   can carry the plan (`cluster::gather` → a `Fleet`).
//! - `prefill`: every key of the prefill classes written once, outside the results.
//! - `measure`: the server's baseline, the plans and the common start, the collection.
//! - `results`: the span settled, the books closed, [`RunResults`].
//!
//! Below them: `member` (the workers as tracked, the run's errors, the timing rules),
//! `phase` (a phase's plan, domain → wire through `crest_model::convert`, and its start),
//! `collect` (a `Collector`: intervals and finals in, lost workers out, live progress, the
//! admin board and the live timeline published after every interval, control requests
//! carried out), `checkpoint`.
//! - [`steer`]: runtime changes (rate, pause, resume, stop) as one instant on the run's
//!   clock for every worker, spliced into the books' profiles, rows for the report.

pub mod budget;
mod checkpoint;
mod cluster;
mod collect;
mod measure;
mod member;
mod phase;
mod prefill;
mod results;
pub mod steer;
mod stream;
mod target;

pub use member::{RunError, SILENCE};
pub use results::{RunResults, WorkerResult};
pub(crate) use target::memcache_ring;
pub use target::{control_to, probe_target};

use crate::config::{RunConfig, Workers};
use crate::service::{self, Hub, HubEvent};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

/// How long the gRPC server gets to close its streams after a run.
const SERVER_STOP: Duration = Duration::from_secs(2);

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
    run_with(cfg, listener, shutdown, None, |_, r| (r, None)).await
}

/// [`run`], publishing each finalized timeline row of the measured phase on `points` as
/// it is laid out (an in-process watcher's view of the run), and ending with `finish`:
/// what the run's results become (its report), and the `report.html` the live page
/// shows while the admin API lingers.
///
/// # Errors
/// As [`run`].
pub async fn run_with<T>(
    cfg: &RunConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    points: Option<steer::Points>,
    finish: impl FnOnce(&RunConfig, RunResults) -> (T, Option<String>),
) -> Result<T, RunError> {
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
    admin.0.publish(|b| b.label.clone_from(&cfg.label));
    if let Some(at) = cfg.admin {
        let mut rx = stop_rx.clone();
        let bound = crate::admin::serve(admin.0.clone(), at, async move {
            let _ = rx.wait_for(|s| *s).await;
        })
        .await
        .map_err(RunError::Usage)?;
        if !cfg.quiet {
            eprintln!(
                "crest: live page on http://{bound}/ (admin API: GET /metrics /status, PUT /rate, POST /pause /resume /stop)"
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
    let live = measure::Surfaces {
        admin: admin.0,
        requests: Some(admin.1),
        points,
    };
    let result = run_inner(cfg, addr, &mut events, stop_rx, &int_rx, live, finish).await;
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

/// The run as its phases: the target, the fleet, the prefill, the measured phase, the
/// results (each phase a module of its own; the admin board lingers at the end).
async fn run_inner<T>(
    cfg: &RunConfig,
    addr: SocketAddr,
    events: &mut mpsc::Receiver<HubEvent>,
    stop: watch::Receiver<bool>,
    interrupt: &watch::Receiver<bool>,
    live: measure::Surfaces,
    finish: impl FnOnce(&RunConfig, RunResults) -> (T, Option<String>),
) -> Result<T, RunError> {
    let target = target::Target::start(cfg, addr, &stop).await?;
    let mut fleet = cluster::gather(cfg, addr, events, &stop, interrupt).await?;
    let admin = live.admin.clone();
    prefill::run(cfg, &target, &mut fleet, events, interrupt, &admin).await?;
    let measured = measure::run(cfg, &target, &mut fleet, events, interrupt, live).await?;
    let (done, html) = finish(cfg, results::assemble(cfg, &target, fleet, measured));
    if let Some(html) = html {
        admin.set_report(html);
    }
    admin.publish(|b| b.phase = "done");
    if cfg.admin.is_some() && !cfg.admin_linger.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(cfg.admin_linger) => {}
            () = member::interrupted(interrupt) => {}
        }
    }
    Ok(done)
}
