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
    /// `crest replay`: where the trace's stream ended.
    pub replay: Option<crest_report::ReplayReport>,
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
    let plan = measured_phase(cfg, fleet.shards);
    let for_member = |m: &_| target.for_member(cfg, m);
    let (run_id, start_local, started_at) =
        phase::start(cfg, &fleet.members, &plan, fleet.shards, &for_member).await?;
    // A replay's first seconds go right behind the plans.
    let mut feeder = match &cfg.replay {
        Some(spec) => {
            // To --duration, else the trace's end within the longest run a worker takes
            // (a trace slowed past it is cut there, what is left counted past the end).
            let longest = crest_model::convert::limits::MAX_RUN;
            let until = if cfg.duration.is_zero() {
                longest
            } else {
                cfg.duration.min(longest)
            };
            let until = u64::try_from(until.as_nanos()).unwrap_or(u64::MAX);
            let mut f =
                super::stream::Feeder::new(spec, &fleet.members, cfg.seed, until, start_local)?;
            f.pump(&fleet.members, &run_id, Instant::now()).await?;
            Some(f)
        }
        None => None,
    };
    if let ServerStats::Unavailable(why) = &server {
        eprintln!("crest: server stats off: {why}");
    }
    if !cfg.quiet {
        eprintln!("crest: run {run_id}: {}", started_line(cfg, fleet));
    }
    let measured_start = start_local + cfg.warmup;
    if let Some(c) = checkpoints.as_mut() {
        c.started(measured_start, fleet.members.len());
    }
    // Boundary 0 only with a warm-up: without one the sample before load is the baseline.
    let first = u32::from(cfg.warmup.is_zero());
    // With --admin the sampler's figures go to /metrics and the live page as they come.
    let to_admin = cfg.admin.is_some().then(|| live.admin.server_feed());
    let sampler = sampler.map(|s| s.clock(measured_start, cfg.interval, first, to_admin));
    let budget = budget(cfg);
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
        .replay(feeder.as_mut())
        .run(events, interrupt)
        .await;
    let ended = match ended {
        Ok(e) => e,
        Err(e) => {
            // Refused before its first interval (a worker's open-file limit, a server
            // that wants a password): no header-only files left in --out.
            books.discard_unused_live();
            return Err(e);
        }
    };
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
        replay: feeder.as_ref().map(super::stream::Feeder::report),
    })
}

/// The measured phase: every class's plan (its warm-up first), closed-loop budget,
/// connections (a replay's: at least one per shard of the `shards`) and checkpoint step,
/// and the warm-up.
fn measured_phase(cfg: &RunConfig, shards: u32) -> phase::Phase {
    phase::Phase {
        classes: cfg
            .classes
            .iter()
            .map(|c| phase::class_plan(cfg, c))
            .collect(),
        budgets: cfg.classes.iter().map(|c| c.requests).collect(),
        conns: cfg
            .classes
            .iter()
            .map(|c| cfg.connections(c, shards))
            .collect(),
        checkpoint_every: cfg.classes.iter().map(|_| cfg.checkpoint_every).collect(),
        warmup: cfg.warmup,
    }
}

/// The scheduled length the collection judges lateness by: the duration, or
/// [`UNBOUNDED_PHASE`] for a count-bounded closed loop, or the longest run for a replay
/// to its trace's end (the collection moves its deadline once the trace's end is known).
fn budget(cfg: &RunConfig) -> Duration {
    if cfg.replay.is_some() && cfg.duration.is_zero() {
        crest_model::convert::limits::MAX_RUN
    } else if cfg.closed_loop() && cfg.duration.is_zero() {
        UNBOUNDED_PHASE
    } else {
        cfg.duration
    }
}

/// The server sampler with its baseline taken, or why there is none (said once).
async fn sampler(cfg: &RunConfig, target: &Target) -> (Option<Sampler>, ServerStats) {
    if !cfg.server_stats {
        return (None, ServerStats::Off);
    }
    let connected = match target::sampler_target(cfg, target.builtin_port).await {
        Ok((_, shown)) if cfg.protocol.is_memcache() => {
            // Every server of a ring: its figures are the sum of theirs.
            let addrs = match target::memcache_addrs(cfg, target.builtin_port).await {
                Ok(a) => a,
                Err(why) => return (None, ServerStats::Unavailable(why)),
            };
            let shown = if cfg.ring.len() > 1 {
                format!("memcache://{}", cfg.ring.join(","))
            } else {
                shown
            };
            Sampler::connect_memcache(&addrs, &shown, cfg.tls.as_ref(), cfg.interval)
                .await
                .map_err(|why| format!("{why} (--no-server-stats says so up front)"))
        }
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
        // Said once the plans are accepted: a target the workers cannot reach either is
        // refused in one line of its own, not announced twice.
        Err(why) => (None, ServerStats::Unavailable(why)),
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
    let cannot = |e: String| {
        RunError::Usage(format!(
            "--checkpoint-every: cannot reach the target to read it at the checkpoints: {e}"
        ))
    };
    let total = class.requests.unwrap_or(0);
    if cfg.protocol.is_memcache() {
        let ring = target::memcache_ring(cfg, target.builtin_port)
            .await
            .map_err(cannot)?;
        return Ok(Some(Checkpoints::memcache(ring, every, total)));
    }
    let dial = target::dial(cfg, target.builtin_port, checkpoint::NAME)
        .await
        .map_err(cannot)?;
    let conn = target::open(&dial).await.map_err(cannot)?;
    let probe = cfg.probe.clone().unwrap_or_default();
    Ok(Some(Checkpoints::new(dial, conn, every, total, probe)))
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
    let (last, rows_last) = spans(cfg, budget);
    Ok(RunBooks::new(
        cfg,
        fleet.members.len(),
        last,
        rows_last,
        live,
    ))
}

/// The books' spans for a phase scheduled for `budget`: the highest interval index a
/// worker may send, and the last timeline row when the span is known (a timed run; None
/// for a count-bounded one).
fn spans(cfg: &RunConfig, budget: Duration) -> (u32, Option<u32>) {
    let iv_ns = interval_ns(cfg);
    let rows_last = (!cfg.duration.is_zero())
        .then(|| merge::last_row(measured_ns(cfg, Duration::ZERO, false), iv_ns));
    (collect::phase_last(cfg, budget), rows_last)
}

/// The run's opening line after its run id.
fn started_line(cfg: &RunConfig, fleet: &Fleet) -> String {
    let conns: u32 = cfg
        .classes
        .iter()
        .map(|c| cfg.connections(c, fleet.shards))
        .sum();
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::orchestrate::member::{GRACE, Member};
    use crate::service::WorkerLink;
    use crest_model::convert::limits;
    use crest_proto::pb::{self, coordinator_message::Msg as Out, worker_message::Msg as In};

    type Inbox = mpsc::Receiver<pb::CoordinatorMessage>;

    /// An open-loop run at 100/s for 2 s against 127.0.0.1:1 (unreachable), one class,
    /// no server stats.
    fn cfg() -> RunConfig {
        let mut cfg = crate::cli::test_run(100.0, 2);
        cfg.server_stats = false;
        cfg
    }

    /// A count-bounded closed loop: `cfg()`'s class sends 1,000 requests, no duration.
    fn count_bounded() -> RunConfig {
        cfg().closed_loop_of(1_000).unwrap()
    }

    /// Fake workers, worker `i` with `shards[i]` shards, and what each is sent.
    fn fleet(shards: &[u32]) -> (Fleet, Vec<Inbox>) {
        let (members, inboxes): (Vec<Member>, Vec<Inbox>) = shards
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let (mut link, rx) = WorkerLink::fake(i);
                link.info.shards = s;
                (Member::new(link), rx)
            })
            .unzip();
        let fleet = Fleet {
            members,
            shards: shards.iter().sum(),
        };
        (fleet, inboxes)
    }

    fn surfaces() -> Surfaces {
        Surfaces {
            admin: crate::admin::Admin::new("", true).0,
            requests: None,
            points: None,
        }
    }

    async fn target(cfg: &RunConfig) -> Target {
        let (_stop_tx, stop) = watch::channel(false);
        let listen = "127.0.0.1:0".parse().unwrap();
        Target::start(cfg, listen, &stop).await.unwrap()
    }

    /// Every message a worker was sent so far.
    fn sent(rx: &mut Inbox) -> Vec<Out> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|m| m.msg)
            .collect()
    }

    /// Plays each fake worker: waits for its plan, then sends its finals for that run.
    /// Returns the start messages, by worker.
    fn answer(
        mut inboxes: Vec<Inbox>,
        events: mpsc::Sender<HubEvent>,
    ) -> tokio::task::JoinHandle<Vec<pb::StartRun>> {
        tokio::spawn(async move {
            let mut starts = Vec::new();
            for (i, rx) in inboxes.iter_mut().enumerate() {
                let start = loop {
                    match rx.recv().await.expect("a plan").msg {
                        Some(Out::Start(s)) => break s,
                        _ => continue,
                    }
                };
                let run_id = start.plan.as_ref().unwrap().run_id.clone();
                let fin = In::Finished(pb::Finished {
                    run_id,
                    ..Default::default()
                });
                events
                    .send(HubEvent::Message(format!("id-{i}"), fin))
                    .await
                    .unwrap();
                starts.push(start);
            }
            starts
        })
    }

    /// The measured phase carries every class's plan (its warm-up first), its closed-loop
    /// budget, its connections, the checkpoint step, and the warm-up.
    #[test]
    fn the_phase_holds_every_class_with_its_budget_connections_and_step() {
        let mut cfg = cfg();
        cfg.warmup = Duration::from_secs(1);
        cfg.checkpoint_every = Some(100);
        let mut closed = cfg.classes[0].clone();
        closed.name = "closed".into();
        closed.profile = None;
        closed.requests = Some(5_000);
        closed.connections = 9;
        cfg.classes.push(closed);
        let p = measured_phase(&cfg, 1);
        let want: Vec<_> = cfg
            .classes
            .iter()
            .map(|c| phase::class_plan(&cfg, c))
            .collect();
        assert_eq!(p.classes, want);
        assert_eq!(p.classes[1].name, "closed");
        assert_eq!(p.budgets, vec![None, Some(5_000)]);
        assert_eq!(p.conns, vec![cfg.classes[0].connections, 9]);
        assert_eq!(p.checkpoint_every, vec![Some(100), Some(100)]);
        assert_eq!(p.warmup, Duration::from_secs(1));
    }

    /// A timed run is judged by its duration (open or closed loop); a count-bounded closed
    /// loop by [`UNBOUNDED_PHASE`].
    #[test]
    fn the_budget_is_the_duration_or_unbounded_for_a_count_bounded_run() {
        let mut cfg = cfg();
        assert_eq!(budget(&cfg), Duration::from_secs(2));
        cfg.classes[0].profile = None;
        assert!(cfg.closed_loop());
        assert_eq!(budget(&cfg), Duration::from_secs(2));
        assert_eq!(budget(&count_bounded()), UNBOUNDED_PHASE);
    }

    /// A timed run's books end their rows at the duration's last interval and take
    /// indices up to the schedule + drain + grace; a count-bounded run's rows have no
    /// known end and its indices run to the unbounded phase's.
    #[test]
    fn the_spans_end_at_the_schedule_or_are_open_for_a_count_bounded_run() {
        let mut cfg = cfg();
        cfg.interval = Duration::from_millis(500);
        let (last, rows_last) = spans(&cfg, budget(&cfg));
        assert_eq!(rows_last, Some(3), "2 s in 500 ms rows: 0 to 3");
        let span = Duration::from_secs(2) + cfg.drain + GRACE;
        let want = u32::try_from(span.as_millis() / 500 + 1).unwrap();
        assert_eq!(last, want);

        let cfg = count_bounded();
        let (last, rows_last) = spans(&cfg, budget(&cfg));
        assert_eq!(rows_last, None);
        assert_eq!(last, collect::phase_last(&cfg, UNBOUNDED_PHASE));
        assert!(last > collect::phase_last(&cfg, Duration::from_secs(2)));
    }

    /// The books have one worker per member and refuse an index past the phase's last.
    #[test]
    fn the_books_have_every_member_and_refuse_indices_past_the_phase() {
        let cfg = cfg();
        let (fleet, _inboxes) = fleet(&[2, 1, 1]);
        let budget = budget(&cfg);
        let mut books = books(&cfg, &fleet, "r", SystemTime::now(), budget).unwrap();
        assert_eq!(books.workers.len(), 3);
        let (last, _) = spans(&cfg, budget);
        let iv = |index| pb::Interval {
            run_id: "r".into(),
            index,
            ..Default::default()
        };
        books.receive(0, iv(last)).unwrap();
        let e = books.receive(1, iv(last + 1)).unwrap_err();
        assert!(
            e.to_string().contains("past the phase's last interval"),
            "{e}"
        );
    }

    /// With `--out` the books write `timeline.csv` and `latency.hlog` from the start.
    #[test]
    fn with_an_out_directory_the_live_files_are_created() {
        let mut cfg = cfg();
        let dir = std::env::temp_dir().join(format!("crest-measure-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        cfg.out = Some(dir.clone());
        let (fleet, _inboxes) = fleet(&[1]);
        let books = books(&cfg, &fleet, "r", SystemTime::now(), budget(&cfg));
        let made = ["timeline.csv", "latency.hlog"].map(|f| dir.join(f).is_file());
        drop(books);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(made, [true, true]);
    }

    /// The opening line counts workers, shards, classes and connections, and names the
    /// warm-up only when there is one.
    #[test]
    fn the_started_line_counts_the_fleet_and_names_the_warmup() {
        let mut cfg = cfg();
        let mut second = cfg.classes[0].clone();
        second.connections = 5;
        cfg.classes.push(second);
        let conns = cfg.classes[0].connections + 5;
        let (fleet, _inboxes) = fleet(&[2, 1]);
        cfg.warmup = Duration::ZERO;
        assert_eq!(
            started_line(&cfg, &fleet),
            format!("2 worker(s), 3 shard(s), 2 class(es), {conns} connections")
        );
        cfg.warmup = Duration::from_millis(1500);
        assert_eq!(
            started_line(&cfg, &fleet),
            format!(
                "2 worker(s), 3 shard(s), 2 class(es), {conns} connections, warm-up 1.5s not measured"
            )
        );
    }

    /// With server stats off there is no sampler and the stats say off; a target that
    /// cannot be reached leaves them unavailable, saying why and how to skip them.
    #[tokio::test]
    async fn server_stats_are_off_or_unavailable_with_the_reason() {
        let mut cfg = cfg();
        let t = target(&cfg).await;
        let (s, stats) = sampler(&cfg, &t).await;
        assert!(s.is_none());
        assert!(matches!(stats, ServerStats::Off), "{stats:?}");
        cfg.server_stats = true;
        let (s, stats) = sampler(&cfg, &t).await;
        assert!(s.is_none());
        match stats {
            ServerStats::Unavailable(why) => {
                assert!(
                    why.ends_with("(--no-server-stats says so up front)"),
                    "{why}"
                )
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    /// Without `--checkpoint-every` there are no checkpoints; with it, a target the
    /// coordinator cannot reach is the user's to fix, said before any plan goes out.
    #[tokio::test]
    async fn checkpoints_need_the_flag_and_a_reachable_target() {
        let mut cfg = count_bounded();
        cfg.server_stats = false;
        let t = target(&cfg).await;
        assert!(checkpoints(&cfg, &t).await.unwrap().is_none());
        cfg.checkpoint_every = Some(100);
        match checkpoints(&cfg, &t).await {
            Err(RunError::Usage(m)) => assert!(
                m.starts_with("--checkpoint-every: cannot reach the target"),
                "{m}"
            ),
            Err(e) => panic!("expected a usage error, got {e:?}"),
            Ok(_) => panic!("expected a usage error, got checkpoints"),
        }

        let (mut fleet, mut inboxes) = fleet(&[1]);
        let (_tx, mut events) = mpsc::channel(8);
        let (_int_tx, int_rx) = watch::channel(false);
        let r = run(&cfg, &t, &mut fleet, &mut events, &int_rx, surfaces()).await;
        assert!(matches!(r, Err(RunError::Usage(_))));
        assert!(sent(&mut inboxes[0]).is_empty(), "a plan went out");
    }

    /// The whole phase with fake workers: each gets its own part of one run's plan, their
    /// finals end it as done, and what it leaves names that run, its budget and books for
    /// every worker. Paused time: the progress ticks cost nothing.
    #[tokio::test(start_paused = true)]
    async fn the_phase_sends_one_run_and_collects_every_workers_finals() {
        let mut cfg = cfg();
        cfg.warmup = Duration::from_secs(1);
        let t = target(&cfg).await;
        let (mut fleet, inboxes) = fleet(&[2, 1]);
        let (tx, mut events) = mpsc::channel(8);
        let (_int_tx, int_rx) = watch::channel(false);
        let workers = answer(inboxes, tx.clone());
        let before = Instant::now();
        let m = run(&cfg, &t, &mut fleet, &mut events, &int_rx, surfaces())
            .await
            .unwrap();
        let starts = workers.await.unwrap();
        assert_eq!(m.ended, Ended::Done);
        assert_eq!(m.budget, Duration::from_secs(2));
        assert_eq!(m.books.workers.len(), 2);
        assert!(m.checkpoints.is_none());
        assert!(matches!(m.server, ServerStats::Off));
        assert!(m.control.stopped_by.is_none());
        assert!(
            m.measured_start >= before + cfg.warmup,
            "the warm-up is not measured"
        );
        assert!(fleet.members.iter().all(|w| w.done && !w.lost()));
        let plans: Vec<&pb::RunPlan> = starts.iter().map(|s| s.plan.as_ref().unwrap()).collect();
        assert!(plans.iter().all(|p| p.run_id == m.run_id));
        assert_eq!(
            plans.iter().map(|p| p.shards.len()).collect::<Vec<_>>(),
            [2, 1]
        );
        assert!(plans.iter().all(|p| p.total_shards == 3));
        assert!(plans.iter().all(|p| p.target == "127.0.0.1:1"));
        assert!(plans.iter().all(|p| p.warmup_ns == 1_000_000_000));
        assert_eq!(starts[0].start_at_unix_ns, starts[1].start_at_unix_ns);
    }

    /// An interrupt during the phase ends it as interrupted, every worker told to stop
    /// after its plan.
    #[tokio::test(start_paused = true)]
    async fn an_interrupt_ends_the_phase_and_stops_every_worker() {
        let cfg = cfg();
        let t = target(&cfg).await;
        let (mut fleet, mut inboxes) = fleet(&[1, 1]);
        let (_tx, mut events) = mpsc::channel(8);
        let (int_tx, int_rx) = watch::channel(false);
        int_tx.send(true).unwrap();
        let m = run(&cfg, &t, &mut fleet, &mut events, &int_rx, surfaces())
            .await
            .unwrap();
        assert_eq!(m.ended, Ended::Interrupted);
        for rx in &mut inboxes {
            let got = sent(rx);
            assert_eq!(got.len(), 2, "{got:?}");
            assert!(
                matches!(&got[0], Out::Start(s) if s.plan.as_ref().unwrap().run_id == m.run_id)
            );
            assert!(
                matches!(&got[1], Out::Abort(a) if a.run_id == m.run_id && a.reason == "coordinator interrupted")
            );
        }
    }

    /// A plan a worker would refuse (more connections per shard than a shard opens) is
    /// the user's to fix, said before any worker gets a plan.
    #[tokio::test(start_paused = true)]
    async fn a_plan_out_of_bounds_sends_nothing() {
        let mut cfg = cfg();
        cfg.classes[0].connections = limits::MAX_CONNECTIONS_PER_SHARD + 1;
        let t = target(&cfg).await;
        let (mut fleet, mut inboxes) = fleet(&[1]);
        let (_tx, mut events) = mpsc::channel(8);
        let (_int_tx, int_rx) = watch::channel(false);
        match run(&cfg, &t, &mut fleet, &mut events, &int_rx, surfaces()).await {
            Err(RunError::Usage(m)) => {
                assert!(
                    m.starts_with("the plan for worker w0 is out of bounds"),
                    "{m}"
                )
            }
            Err(e) => panic!("expected a usage error, got {e:?}"),
            Ok(_) => panic!("expected a usage error, got a run"),
        }
        assert!(sent(&mut inboxes[0]).is_empty());
    }

    /// With server stats on, the baseline is taken before the plans go out (before the
    /// measured start) and the last sample after the finals; the built-in target answers.
    #[tokio::test]
    async fn the_server_baseline_comes_before_the_start_and_the_final_sample_after() {
        let mut cfg = cfg();
        cfg.server_stats = true;
        cfg.target = None;
        let (_stop_tx, stop) = watch::channel(false);
        let t = Target::start(&cfg, "127.0.0.1:0".parse().unwrap(), &stop)
            .await
            .unwrap();
        assert!(t.builtin());
        let (mut fleet, inboxes) = fleet(&[1]);
        let (tx, mut events) = mpsc::channel(8);
        let (_int_tx, int_rx) = watch::channel(false);
        let workers = answer(inboxes, tx.clone());
        let m = run(&cfg, &t, &mut fleet, &mut events, &int_rx, surfaces())
            .await
            .unwrap();
        let starts = workers.await.unwrap();
        let port = t.builtin_port.unwrap();
        assert_eq!(
            starts[0].plan.as_ref().unwrap().target,
            format!("127.0.0.1:{port}")
        );
        let ServerStats::Sampled(series) = m.server else {
            panic!("not sampled: {:?}", m.server);
        };
        let marks: Vec<Mark> = series.samples.iter().map(|s| s.mark).collect();
        assert_eq!(marks.first(), Some(&Mark::BeforeLoad), "{marks:?}");
        assert_eq!(marks.last(), Some(&Mark::Final), "{marks:?}");
        assert!(series.samples[0].at_s < 0.0, "{}", series.samples[0].at_s);
    }
}
