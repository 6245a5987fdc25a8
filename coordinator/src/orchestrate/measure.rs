//! The measured phase: the server's baseline, the plans and the common start, intervals
//! collected into the run's books with live files, progress, steering and checkpoints, and
//! the server's last sample. What it leaves is a [`Measured`], which
//! [`super::results`] turns into [`super::RunResults`].

use super::checkpoint::{self, Checkpoints};
use super::cluster::Fleet;
use super::collect::{self, Collector, Ended};
use super::member::{RunError, UNBOUNDED_PHASE, interval_ns, measured_ns};
use super::phase;
use super::steer;
use super::target::{self, Target};
use crate::config::RunConfig;
use crate::merge::{self, RunBooks};
use crate::output::Live;
use crate::server_stats::{Sampler, ServerStats};
use crate::service::HubEvent;
use crest_report::server::series::Mark;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::{mpsc, watch};

/// What the measured phase left.
pub(super) struct Measured {
    pub run_id: String,
    /// The phase's start (the warm-up's start), wall clock.
    pub started_at: SystemTime,
    /// The measured start (after the warm-up) on the coordinator's clock.
    pub measured_start: Instant,
    /// How the collection ended.
    pub ended: Ended,
    /// The scheduled length the collection judged lateness by.
    pub budget: Duration,
    pub books: RunBooks,
    pub control: steer::Control,
    pub checkpoints: Option<Checkpoints>,
    /// The server's samples, or why there are none.
    pub server: ServerStats,
}

/// The run's live surfaces, passed to the measured phase: the admin board, its control
/// requests and the timeline's watchers.
pub(super) struct Surfaces {
    pub admin: crate::admin::Admin,
    pub requests: Option<mpsc::Receiver<crate::control::Request>>,
    pub points: Option<steer::Points>,
}

/// Runs the measured phase on `fleet`.
///
/// # Errors
/// [`RunError`] when the phase cannot start (a plan out of bounds, an unreachable target
/// for checkpoints, a worker gone) or a worker fails.
pub(super) async fn run(
    cfg: &RunConfig,
    target: &Target,
    fleet: &mut Fleet,
    events: &mut mpsc::Receiver<HubEvent>,
    interrupt: &watch::Receiver<bool>,
    live: Surfaces,
) -> Result<Measured, RunError> {
    // The sampler connects after the prefill (whose replies are all in) and takes its
    // baseline before the plans go out.
    let (sampler, mut server) = sampler(cfg, target).await;
    let mut checkpoints = checkpoints(cfg, target).await?;
    let plan = phase::Phase {
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
    let for_member = |m: &_| target.for_member(cfg, m);
    let (run_id, start_local, started_at) =
        phase::start(cfg, &fleet.members, &plan, fleet.shards, &for_member).await?;
    if !cfg.quiet {
        eprintln!("crest: run {run_id}: {}", started_line(cfg, fleet));
    }
    let measured_start = start_local + cfg.warmup;
    if let Some(c) = checkpoints.as_mut() {
        c.started(measured_start, fleet.members.len());
    }
    // Boundary 0 only with a warm-up: without one the sample before load is the baseline.
    let first = u32::from(cfg.warmup.is_zero());
    let sampler = sampler.map(|s| s.clock(measured_start, cfg.interval, first));
    let budget = if cfg.closed_loop() && cfg.duration.is_zero() {
        UNBOUNDED_PHASE
    } else {
        cfg.duration
    };
    let mut books = books(cfg, fleet, &run_id, started_at, budget)?;
    let mut control = steer::Control {
        rx: live.requests,
        admin: Some(live.admin),
        metrics: cfg.admin.is_some(),
        steering: steer::Steering::new(
            cfg.classes.iter().map(|c| c.name.clone()).collect(),
            cfg.classes.iter().map(|c| c.profile.clone()).collect(),
            u64::try_from(cfg.warmup.as_nanos()).unwrap_or(u64::MAX),
            fleet.shards,
        ),
        stopped_by: None,
        points: live.points,
    };
    let span = (measured_start, budget);
    let ended = Collector::new(cfg, &run_id, span, &mut fleet.members, &mut books)
        .checkpoints(checkpoints.as_mut())
        .control(&mut control)
        .run(events, interrupt)
        .await?;
    if let Some(s) = sampler {
        server = ServerStats::Sampled(s.finish().await);
    }
    Ok(Measured {
        run_id,
        started_at,
        measured_start,
        ended,
        budget,
        books,
        control,
        checkpoints,
        server,
    })
}

/// The server sampler with its baseline taken, or why there is none (said once).
async fn sampler(cfg: &RunConfig, target: &Target) -> (Option<Sampler>, ServerStats) {
    if !cfg.server_stats {
        return (None, ServerStats::Off);
    }
    let connected = match target::sampler_target(cfg, target.builtin_port).await {
        Ok((addr, shown)) => {
            Sampler::connect(addr, &shown, &cfg.session, cfg.tls.as_ref(), cfg.interval)
                .await
                .map_err(|why| format!("{why} (--no-server-stats says so up front)"))
        }
        Err(why) => Err(why),
    };
    match connected {
        Ok(mut s) => {
            s.sample(Mark::BeforeLoad, None).await;
            (Some(s), ServerStats::Off)
        }
        Err(why) => {
            eprintln!("crest: server stats off: {why}");
            (None, ServerStats::Unavailable(why))
        }
    }
}

/// `--checkpoint-every`: the coordinator's own connection to read the server at each
/// checkpoint.
///
/// # Errors
/// [`RunError::Usage`] when the target cannot be reached.
async fn checkpoints(cfg: &RunConfig, target: &Target) -> Result<Option<Checkpoints>, RunError> {
    let (Some(every), Some(class)) = (cfg.checkpoint_every, cfg.classes.first()) else {
        return Ok(None);
    };
    let (conn, _) = target::control_to(cfg, target.builtin_port, checkpoint::NAME)
        .await
        .map_err(|e| {
            RunError::Usage(format!(
                "--checkpoint-every: cannot reach the target to read it at the checkpoints: {e}"
            ))
        })?;
    let probe = cfg.probe.clone().unwrap_or_default();
    let total = class.requests.unwrap_or(0);
    Ok(Some(Checkpoints::new(conn, every, total, probe)))
}

/// The measured phase's books, with `timeline.csv` and `latency.hlog` written as it goes
/// when there is an `--out`.
fn books(
    cfg: &RunConfig,
    fleet: &Fleet,
    run_id: &str,
    started_at: SystemTime,
    budget: Duration,
) -> Result<RunBooks, RunError> {
    let live = match &cfg.out {
        Some(dir) => {
            Some(Live::create(dir, run_id, started_at + cfg.warmup).map_err(RunError::Failed)?)
        }
        None => None,
    };
    let iv_ns = interval_ns(cfg);
    let rows_last = (!cfg.duration.is_zero())
        .then(|| merge::last_row(measured_ns(cfg, Duration::ZERO, false), iv_ns));
    let last = collect::phase_last(cfg, budget);
    Ok(RunBooks::new(
        cfg,
        fleet.members.len(),
        last,
        rows_last,
        live,
    ))
}

/// The run's opening line after its run id.
fn started_line(cfg: &RunConfig, fleet: &Fleet) -> String {
    let conns: u32 = cfg.classes.iter().map(|c| c.connections).sum();
    let warmup = if cfg.warmup.is_zero() {
        String::new()
    } else {
        format!(", warm-up {:?} not measured", cfg.warmup)
    };
    format!(
        "{} worker(s), {} shard(s), {} class(es), {conns} connections{warmup}",
        fleet.members.len(),
        fleet.shards,
        cfg.classes.len()
    )
}
