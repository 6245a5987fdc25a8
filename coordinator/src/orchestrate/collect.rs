//! Collecting a phase: intervals and finals in (into the [`RunBooks`], which finalize each
//! interval once every live worker is past it), lost workers out, live progress, and an
//! abort to everyone when the user interrupts or a worker fails.

use super::member::{GRACE, Member, RunError, SILENCE, UNBOUNDED_PHASE, interrupted};
use super::steer::{Control, LEAD};
use crate::admin::{Binned, ClassRate, Counters, WorkerView};
use crate::config::RunConfig;
use crate::control::{Refusal, Request};
use crate::merge::RunBooks;
use crate::progress::{Progress, Sample};
use crate::service::HubEvent;
use crest_model::convert::{self, FailureKind};
use crest_model::stats::CmdSum;
use crest_proto::pb::{self, coordinator_message::Msg as Out, worker_message::Msg as In};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Progress lines come once a second, the first a little after the first interval ends.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
const PROGRESS_FIRST: Duration = Duration::from_millis(1_100);
/// While messages wait, the books advance once per this many of them.
const ADVANCE_EVERY: usize = 64;

/// How a phase's collection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// Every worker finished or was lost.
    Done,
    /// The user interrupted: workers were told to stop; the books hold what came before.
    Interrupted,
}

/// The highest interval index a worker can send in a phase scheduled for `duration` (one
/// past, for the drain's partial interval); anything later is nonsense, not data.
pub(super) fn phase_last(cfg: &RunConfig, duration: Duration) -> u32 {
    u32::try_from((duration + cfg.drain + GRACE).as_nanos() / cfg.interval.as_nanos().max(1) + 1)
        .unwrap_or(u32::MAX)
}

/// One phase's collection: the state the loop in [`Collector::run`] keeps, and one method
/// per thing that can happen ([`Collector::on_message`], [`Collector::on_tick`],
/// [`Collector::on_request`], [`Collector::on_interrupt`]), so each can be driven alone
/// (the unit tests below drive them with paused time).
pub(super) struct Collector<'a> {
    cfg: &'a RunConfig,
    run_id: &'a str,
    /// The phase's start on the coordinator's clock (the measured start for the run).
    start: Instant,
    /// The phase's scheduled length.
    duration: Duration,
    /// The schedule end + drain + grace: a worker without finals by then is lost.
    deadline: Instant,
    members: &'a mut [Member],
    books: &'a mut RunBooks,
    /// Workers by id: a fleet's messages are matched in O(1), not by comparing ids with
    /// every member (1,000 workers made that a tenth of the coordinator's CPU).
    by_id: HashMap<String, usize>,
    progress: Progress,
    /// Messages received since the books last advanced: advancing looks at every worker,
    /// so while more messages wait it runs once per [`ADVANCE_EVERY`] of them, not once
    /// each (and at once when the pending messages pass their cap, which stays a bound).
    unadvanced: usize,
    /// Timeline rows published to the control board so far.
    published: usize,
    checkpoints: Option<&'a mut super::checkpoint::Checkpoints>,
    control: Option<&'a mut Control>,
    /// A replay's stream to the fleet.
    feeder: Option<&'a mut super::stream::Feeder>,
    /// The deadline was moved to the trace's end.
    trace_ended: bool,
}

impl<'a> Collector<'a> {
    /// A collection of one phase that started at `start` and is scheduled for `duration`
    /// into `books`.
    pub(super) fn new(
        cfg: &'a RunConfig,
        run_id: &'a str,
        (start, duration): (Instant, Duration),
        members: &'a mut [Member],
        books: &'a mut RunBooks,
    ) -> Self {
        let by_id = members
            .iter()
            .enumerate()
            .map(|(w, m)| (m.link.info.id.clone(), w))
            .collect();
        Collector {
            cfg,
            run_id,
            start,
            duration,
            deadline: start + duration + cfg.drain + GRACE,
            members,
            books,
            by_id,
            progress: Progress::new(),
            unadvanced: 0,
            published: usize::MAX,
            checkpoints: None,
            control: None,
            feeder: None,
            trace_ended: false,
        }
    }

    /// A replay: its trace streamed to the fleet as the run goes.
    pub(super) fn replay(mut self, f: Option<&'a mut super::stream::Feeder>) -> Self {
        self.feeder = f;
        self
    }

    /// Checkpoints to take as the workers reach them.
    pub(super) fn checkpoints(mut self, c: Option<&'a mut super::checkpoint::Checkpoints>) -> Self {
        self.checkpoints = c;
        self
    }

    /// Runtime control: requests carried out, the board and the live timeline published.
    pub(super) fn control(mut self, c: &'a mut Control) -> Self {
        self.control = Some(c);
        self
    }

    /// Collects until every worker has sent its finals or is lost, or the user interrupts.
    ///
    /// # Errors
    /// [`RunError::Usage`] when a worker cannot reach the target; [`RunError::Failed`]
    /// when a worker fails otherwise.
    pub(super) async fn run(
        mut self,
        events: &mut mpsc::Receiver<HubEvent>,
        interrupt: &watch::Receiver<bool>,
    ) -> Result<Ended, RunError> {
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::from_std(self.start + PROGRESS_FIRST),
            PROGRESS_EVERY,
        );
        let mut pump = tokio::time::interval(super::stream::PUMP_EVERY);
        pump.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let result = loop {
            if let Some(ended) = self.settle(events.is_empty()).await {
                break Ok(ended);
            }
            let step = tokio::select! {
                ev = events.recv() => match ev {
                    Some(ev) => self.on_message(ev).await,
                    None => Err(RunError::Failed("event channel closed".into())),
                },
                _ = tick.tick() => {
                    // Messages still queued mean the books are behind, not the workers
                    // silent: judge silence only with the queue drained.
                    self.on_tick(Instant::now(), !events.is_empty()).await;
                    Ok(())
                }
                _ = pump.tick(), if self.feeder.is_some() => {
                    self.on_pump(Instant::now()).await
                }
                req = next_request(&mut self.control) => {
                    if let Some(req) = req {
                        self.on_request(req).await;
                    }
                    Ok(())
                }
                () = interrupted(interrupt) => {
                    self.on_interrupt().await;
                    break Ok(Ended::Interrupted);
                }
            };
            if let Err(e) = step {
                break Err(e);
            }
        };
        self.progress.finish();
        result
    }

    /// Brings the books, the board and the checkpoints up to date; `Some` when the phase
    /// is over (every worker done or lost, nothing left to read). `idle`: no message waits.
    async fn settle(&mut self, idle: bool) -> Option<Ended> {
        if self.unadvanced >= ADVANCE_EVERY || self.unadvanced == 0 || idle || self.books.over_cap()
        {
            self.unadvanced = 0;
            advance(self.members, self.books, self.run_id).await;
        }
        if self.books.timeline.len() != self.published && self.control.is_some() {
            self.published = self.books.timeline.len();
            self.publish();
        }
        if let Some(c) = self.checkpoints.as_deref_mut() {
            c.advance(self.members, self.run_id).await;
        }
        (self.unadvanced == 0 && self.members.iter().all(|m| m.done || m.lost()))
            .then_some(Ended::Done)
    }

    /// Publishes the run as the books have it (no control: nothing to publish to).
    fn publish(&self) {
        if let Some(c) = self.control.as_deref() {
            publish(
                c,
                self.members,
                self.books,
                self.run_id,
                self.start,
                self.duration,
            );
        }
    }

    /// Once a second: silent workers and workers past the deadline are lost, and the
    /// progress line shows the rows finalized since the last one. `behind`: messages
    /// still wait to be read, so silence is not judged.
    pub(super) async fn on_tick(&mut self, now: Instant, behind: bool) {
        let run_id = self.run_id;
        if !behind {
            for m in self.members.iter_mut().filter(|m| !m.done && !m.lost()) {
                if now.saturating_duration_since(m.last_seen) > SILENCE {
                    lose(m, run_id, format!("no message for {} s", SILENCE.as_secs())).await;
                }
            }
        }
        if now > self.deadline {
            for m in self.members.iter_mut().filter(|m| !m.done && !m.lost()) {
                let why = "no final results by the schedule end + drain + grace";
                lose(m, run_id, why.into()).await;
            }
        }
        if let Some(s) = progress_sample(
            self.cfg,
            self.members,
            self.books,
            self.start,
            self.duration,
        ) && !self.cfg.quiet
        {
            self.progress.show(&s);
        }
    }

    /// A replay's turn: the trace read on and sent as far as the window allows; once all
    /// of it went, the deadline is the last request's time + drain + grace. `Err`: the
    /// trace stopped being readable, and every worker was told to stop.
    pub(super) async fn on_pump(&mut self, now: Instant) -> Result<(), RunError> {
        let Some(f) = self.feeder.as_deref_mut() else {
            return Ok(());
        };
        if self.trace_ended {
            return Ok(());
        }
        if let Err(e) = f.pump(self.members, self.run_id, now).await {
            abort_all(self.members, self.run_id, "the trace cannot be read on").await;
            self.progress.finish();
            return Err(e);
        }
        if let Some(last) = f.finished() {
            self.trace_ended = true;
            self.deadline = self
                .deadline
                .min(self.start + last + self.cfg.drain + GRACE);
        }
        Ok(())
    }

    /// A control request: carried out, and the board published with its row.
    pub(super) async fn on_request(&mut self, req: Request) {
        let Some(c) = self.control.as_deref_mut() else {
            return;
        };
        steer(c, req, self.members, self.books, self.run_id, self.start).await;
        self.publish();
    }

    /// The user interrupted: every worker is told to stop.
    pub(super) async fn on_interrupt(&mut self) {
        let reason = "coordinator interrupted";
        abort_all(self.members, self.run_id, reason).await;
        self.progress.finish();
    }

    /// One event from the hub. `Err` ends the phase: a worker failed.
    pub(super) async fn on_message(&mut self, ev: HubEvent) -> Result<(), RunError> {
        let run_id = self.run_id;
        match ev {
            HubEvent::Message(id, msg) => {
                let Some(&w) = self.by_id.get(&id) else {
                    return Ok(());
                };
                self.unadvanced += 1;
                let m = &mut self.members[w];
                m.last_seen = Instant::now();
                match msg {
                    In::Interval(iv) if iv.run_id == run_id => {
                        if let Err(e) = self.books.receive(w, iv) {
                            lose(m, run_id, format!("sent an unreadable interval: {e}")).await;
                        }
                    }
                    In::Steered(s) if s.run_id == run_id => {
                        if let Some(c) = self.control.as_deref_mut() {
                            let name = m.link.info.name.clone();
                            c.steering.followed(s.seq, &name, s.first_ns, s.last_ns);
                        }
                    }
                    In::TraceAck(a) if a.run_id == run_id => {
                        if let Some(f) = self.feeder.as_deref_mut() {
                            f.ack(w, &a);
                        }
                    }
                    In::Checkpoint(c) if c.run_id == run_id => {
                        if let Some(cp) = self.checkpoints.as_deref_mut() {
                            cp.reached(w, c.index);
                        }
                    }
                    In::Finished(f) if f.run_id == run_id => match self.books.finish(w, &f) {
                        Ok(()) => {
                            m.done = true;
                            m.finished_at = Some(Instant::now());
                        }
                        Err(e) => lose(m, run_id, format!("sent unreadable totals: {e}")).await,
                    },
                    In::Failed(f) if f.run_id == run_id || f.run_id.is_empty() => {
                        let name = m.link.info.name.clone();
                        abort_all(self.members, run_id, &format!("worker {name} failed")).await;
                        self.progress.finish();
                        return Err(failure(&name, &f));
                    }
                    _ => {}
                }
            }
            HubEvent::Left(id, reason) => {
                if let Some(m) = self.by_id.get(&id).and_then(|&w| self.members.get_mut(w))
                    && !m.done
                    && !m.lost()
                {
                    m.lost = Some(reason);
                }
            }
            HubEvent::Joined(link) => {
                tracing::info!(worker = %link.info.name, "worker registered during a run; it stays idle");
            }
            HubEvent::Refused { name, reason } => {
                eprintln!("crest: refused worker {name}: {reason}")
            }
        }
        Ok(())
    }
}

/// Tells every member to abort the run.
async fn abort_all(members: &[Member], run_id: &str, reason: &str) {
    for m in members {
        let abort = pb::Abort {
            run_id: run_id.into(),
            reason: reason.into(),
        };
        m.link.send(Out::Abort(abort)).await;
    }
}

/// The run's error for a worker's failure: the user's to fix when the target cannot be
/// reached or refused the worker, or the failure's kind says so.
fn failure(name: &str, f: &pb::RunFailed) -> RunError {
    let msg = format!("worker {name}: {}", f.reason);
    match convert::failure_kind(f) {
        FailureKind::TargetUnreachable => RunError::Usage(format!(
            "--target: {msg}; check the address and that the server is up"
        )),
        FailureKind::TargetRefused => RunError::Usage(format!("--target: {msg}")),
        k if k.is_usage() => RunError::Usage(msg),
        _ => RunError::Failed(msg),
    }
}

/// The next control request, or never (no control, or nobody left to ask).
async fn next_request(control: &mut Option<&mut Control>) -> Option<Request> {
    match control.as_deref_mut().and_then(|c| c.rx.as_mut()) {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Carries out one control request: a change goes to every live worker for one instant
/// [`LEAD`] plus the slowest round trip ahead (a stop too: the workers end there as at a
/// scheduled end, and the phase's collection goes on until their finals are in).
async fn steer(
    c: &mut Control,
    req: Request,
    members: &[Member],
    books: &mut RunBooks,
    run_id: &str,
    start: Instant,
) {
    let now = Instant::now();
    let Some(asked) = now.checked_duration_since(start) else {
        let _ = req.reply.send(Err(Refusal::Conflict(
            "the run is in its warm-up: changes apply from its measured start".into(),
        )));
        return;
    };
    let asked_ns = u64::try_from(asked.as_nanos()).unwrap_or(u64::MAX);
    let rtt = members
        .iter()
        .filter(|m| !m.lost() && !m.done)
        .map(|m| m.rtt_ns)
        .max()
        .unwrap_or(0);
    let lead = u64::try_from(LEAD.as_nanos()).unwrap_or(u64::MAX);
    let at = asked_ns.saturating_add(lead).saturating_add(rtt);
    match c
        .steering
        .plan(&req.action, req.by, asked_ns, at, &mut books.profiles)
    {
        Ok((change, row)) => {
            let mut msg = pb::Steer::from(&change);
            msg.run_id = run_id.into();
            for m in members.iter().filter(|m| !m.lost() && !m.done) {
                m.link.send(Out::Steer(msg.clone())).await;
            }
            if change.end {
                // The workers end at the instant, drain and send their finals; the
                // timeline ends with the interval the stop falls in.
                c.stopped_by = Some(req.by);
                books.end_rows_at(at);
            }
            tracing::info!(
                seq = row.seq,
                action = row.action,
                at_s = row.at_s,
                to = row.to_rps,
                "runtime change"
            );
            let _ = req.reply.send(Ok(row));
        }
        Err(e) => {
            let _ = req.reply.send(Err(e));
        }
    }
}

/// Publishes the run as the books have it to the admin API's board.
pub(super) fn publish(
    c: &Control,
    members: &[Member],
    books: &RunBooks,
    run_id: &str,
    start: Instant,
    duration: Duration,
) {
    if let (Some(tx), Some(p)) = (&c.points, books.timeline.last()) {
        tx.send_if_modified(|now| {
            let new = now.as_ref() != Some(p);
            if new {
                *now = Some(p.clone());
            }
            new
        });
    }
    let Some(admin) = &c.admin else { return };
    if c.metrics {
        let ops = admin.server_now().map(|n| n.ops_per_s);
        admin.feed.points(&books.timeline, books.interval_s(), ops);
    }
    let elapsed = start.elapsed();
    let now_ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
    let mut counters = Vec::new();
    // Each class's latency binned command by command (bins add): no histogram copied.
    let mut latency: Vec<Binned> = Vec::new();
    // Counters and bins only for /metrics: the gRPC status and the search's watcher read
    // the rest, and this runs at every finalized interval.
    let totals = books.totals.iter().filter(|_| c.metrics);
    for ((class, command), s) in totals {
        counters.push(Counters {
            class: class.clone(),
            command: command.clone(),
            scheduled: s.scheduled,
            sent: s.sent,
            completed: s.completed,
            errors: s.errors.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        });
        let i = match latency.iter().position(|b| b.class == *class) {
            Some(i) => i,
            None => {
                latency.push(Binned::empty(class));
                latency.len() - 1
            }
        };
        latency[i].add_dense(&s.latency);
    }
    let rates = c
        .steering
        .rates(now_ns, &books.profiles)
        .into_iter()
        .map(|(class, rate)| ClassRate { class, rate })
        .collect();
    let workers = members
        .iter()
        .map(|m| WorkerView {
            name: m.link.info.name.clone(),
            host: m.link.info.host.clone(),
            shards: m.link.info.shards,
            lost: m.lost.clone(),
        })
        .collect();
    admin.publish(|b| {
        // A stop was accepted: the phase drains and ends; /status says so at once.
        b.phase = if c.stopped_by.is_some() {
            "stopping"
        } else {
            "running"
        };
        b.run_id = run_id.to_string();
        b.interval_s = books.interval_s();
        b.elapsed_s = elapsed.as_secs_f64();
        b.duration_s = duration.as_secs_f64();
        b.paused = c.steering.paused();
        b.rates = rates;
        b.last_interval = books.timeline.last().cloned();
        b.intervals = books.timeline.len();
        b.workers = workers;
        b.changes = c.steering.rows.clone();
        b.counters = counters;
        b.latency = latency;
    });
}

/// Finalizes what the books can; a worker whose interval does not decode is lost.
async fn advance(members: &mut [Member], books: &mut RunBooks, run_id: &str) {
    let active: Vec<bool> = members.iter().map(|m| !m.done && !m.lost()).collect();
    for bad in books.advance(&active) {
        if let Some(m) = members.get_mut(bad.worker)
            && !m.lost()
        {
            lose(
                m,
                run_id,
                format!("sent an unreadable interval: {}", bad.error),
            )
            .await;
        }
    }
}

async fn lose(m: &mut Member, run_id: &str, reason: String) {
    tracing::warn!(worker = %m.link.info.name, %reason, "worker lost");
    m.lost = Some(reason.clone());
    m.link
        .send(Out::Abort(pb::Abort {
            run_id: run_id.into(),
            reason,
        }))
        .await;
}

/// The rows the books wrote since the last line, for the progress line (None: no new row).
fn progress_sample(
    cfg: &RunConfig,
    members: &[Member],
    books: &mut RunBooks,
    start: Instant,
    duration: Duration,
) -> Option<Sample> {
    let w = books.take_window()?;
    // A phase bounded by a request count (a prefill, `--requests`) has no end to show, and
    // sends closed loop whatever the run's classes do.
    let timed = duration < UNBOUNDED_PHASE;
    Some(Sample {
        elapsed_s: start.elapsed().as_secs_f64().min(duration.as_secs_f64()),
        total_s: timed.then_some(duration.as_secs_f64()),
        // A replay's target is its trace's rate: what it scheduled.
        target_rate: if cfg.replay.is_some() {
            Some(w.scheduled_rate)
        } else {
            (timed && !cfg.closed_loop()).then_some(w.target_rate)
        },
        achieved_rate: w.achieved_rate,
        p99_us: w.p99_us,
        errors: books.totals.values().map(CmdSum::error_total).sum(),
        alive: members.iter().filter(|m| !m.lost()).count(),
        workers: members.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orchestrate::member::{Inbox, fake_fleet as fleet};

    use crest_model::convert::FailureKind;

    fn cfg() -> RunConfig {
        crate::cli::test_run(100.0, 2)
    }

    /// The abort reasons a worker was sent.
    fn aborts(rx: &mut Inbox) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(m) = rx.try_recv() {
            if let Some(Out::Abort(a)) = m.msg {
                out.push(a.reason);
            }
        }
        out
    }

    fn new_books(cfg: &RunConfig, workers: usize) -> RunBooks {
        RunBooks::new(cfg, workers, phase_last(cfg, cfg.duration), Some(3), None)
    }

    fn message(i: usize, m: In) -> HubEvent {
        HubEvent::Message(format!("id-{i}"), m)
    }

    fn finished() -> In {
        In::Finished(pb::Finished {
            run_id: "r".into(),
            ..Default::default()
        })
    }

    /// A worker silent past [`SILENCE`] is lost and told why; one that spoke recently is
    /// not; and none is judged while messages still wait to be read.
    #[tokio::test]
    async fn a_silent_worker_is_lost_but_not_while_messages_wait() {
        let cfg = cfg();
        let (mut members, mut inboxes) = fleet(2);
        let mut books = new_books(&cfg, 2);
        let now = Instant::now();
        members[0].last_seen = now - SILENCE - Duration::from_millis(1);
        let mut c = Collector::new(&cfg, "r", (now, cfg.duration), &mut members, &mut books);
        c.on_tick(now, true).await;
        assert!(c.members.iter().all(|m| !m.lost()), "judged while behind");
        c.on_tick(now, false).await;
        assert_eq!(c.members[0].lost.as_deref(), Some("no message for 3 s"));
        assert!(!c.members[1].lost());
        assert_eq!(aborts(&mut inboxes[0]), vec!["no message for 3 s"]);
        assert!(aborts(&mut inboxes[1]).is_empty());
    }

    /// Past the schedule end + drain + grace, a worker without finals is lost even if it
    /// keeps talking; a done worker is not.
    #[tokio::test]
    async fn no_finals_by_the_deadline_is_lost_a_done_worker_is_not() {
        let cfg = cfg();
        let (mut members, mut inboxes) = fleet(2);
        let mut books = new_books(&cfg, 2);
        let start = Instant::now();
        members[1].done = true;
        let mut c = Collector::new(&cfg, "r", (start, cfg.duration), &mut members, &mut books);
        let late = start + cfg.duration + cfg.drain + GRACE + Duration::from_millis(1);
        c.members[0].last_seen = late;
        c.on_tick(late, false).await;
        let why = "no final results by the schedule end + drain + grace";
        assert_eq!(c.members[0].lost.as_deref(), Some(why));
        assert!(!c.members[1].lost());
        assert_eq!(aborts(&mut inboxes[0]), vec![why]);
        assert!(aborts(&mut inboxes[1]).is_empty());
    }

    /// A worker's failure ends the phase: every worker is told to stop, and a target the
    /// workers cannot reach is the user's to fix (exit 2), an internal failure is not.
    #[tokio::test]
    async fn a_failed_worker_aborts_everyone_and_names_the_target() {
        let cfg = cfg();
        for (kind, usage) in [
            (FailureKind::TargetUnreachable, true),
            (FailureKind::Internal, false),
        ] {
            let (mut members, mut inboxes) = fleet(2);
            let mut books = new_books(&cfg, 2);
            let now = (Instant::now(), cfg.duration);
            let mut c = Collector::new(&cfg, "r", now, &mut members, &mut books);
            let mut failed = pb::RunFailed {
                run_id: "r".into(),
                reason: "connection refused".into(),
                ..Default::default()
            };
            failed.kind = pb::FailureKind::from(kind) as i32;
            let err = c
                .on_message(message(1, In::Failed(failed)))
                .await
                .unwrap_err();
            match (err, usage) {
                (RunError::Usage(m), true) => {
                    assert!(
                        m.starts_with("--target: worker w1: connection refused"),
                        "{m}"
                    )
                }
                (RunError::Failed(m), false) => assert_eq!(m, "worker w1: connection refused"),
                (e, _) => panic!("{kind:?}: {e:?}"),
            }
            for inbox in &mut inboxes {
                assert_eq!(aborts(inbox), vec!["worker w1 failed"]);
            }
        }
    }

    /// Messages of another run, or from a worker not in the run, change nothing; a
    /// worker's stream ending loses it with the hub's reason.
    #[tokio::test]
    async fn strangers_and_other_runs_are_ignored_a_left_worker_is_lost() {
        let cfg = cfg();
        let (mut members, _inboxes) = fleet(2);
        let mut books = new_books(&cfg, 2);
        let now = (Instant::now(), cfg.duration);
        let mut c = Collector::new(&cfg, "r", now, &mut members, &mut books);
        let other = In::Finished(pb::Finished {
            run_id: "another".into(),
            ..Default::default()
        });
        c.on_message(message(0, other)).await.unwrap();
        c.on_message(message(7, finished())).await.unwrap();
        assert!(c.members.iter().all(|m| !m.done && !m.lost()));
        c.on_message(HubEvent::Left("id-1".into(), "stream reset".into()))
            .await
            .unwrap();
        assert_eq!(c.members[1].lost.as_deref(), Some("stream reset"));
        c.on_message(message(0, finished())).await.unwrap();
        assert!(c.members[0].done && c.members[0].finished_at.is_some());
    }

    /// The whole loop: every worker's finals end the phase as done; an interrupt ends it
    /// as interrupted with every worker told to stop. Paused time: the ticks cost nothing.
    #[tokio::test(start_paused = true)]
    async fn the_phase_ends_when_every_worker_is_done_or_when_interrupted() {
        let cfg = cfg();
        let (mut members, _inboxes) = fleet(2);
        let mut books = new_books(&cfg, 2);
        let (tx, mut events) = mpsc::channel(8);
        let (_int_tx, int_rx) = watch::channel(false);
        for w in 0..2 {
            tx.send(message(w, finished())).await.unwrap();
        }
        let now = (Instant::now(), cfg.duration);
        let ended = Collector::new(&cfg, "r", now, &mut members, &mut books)
            .run(&mut events, &int_rx)
            .await
            .unwrap();
        assert_eq!(ended, Ended::Done);
        assert!(members.iter().all(|m| m.done));

        let (mut members, mut inboxes) = fleet(2);
        let mut books = new_books(&cfg, 2);
        let (int_tx, int_rx) = watch::channel(false);
        int_tx.send(true).unwrap();
        let now = (Instant::now(), cfg.duration);
        let ended = Collector::new(&cfg, "r", now, &mut members, &mut books)
            .run(&mut events, &int_rx)
            .await
            .unwrap();
        assert_eq!(ended, Ended::Interrupted);
        for inbox in &mut inboxes {
            assert_eq!(aborts(inbox), vec!["coordinator interrupted"]);
        }
    }
}
