//! `crest relay`'s two sides: the hub its workers dial ([`crate::service::Hub`], as `crest
//! run`'s) and one session upstream, in which the relay is one worker.
//!
//! One task runs both: it waits for `--workers` workers, dials the coordinator (the
//! session loop is `crest_engine::uplink`, the one a worker runs) and
//! registers with their shards, then passes orders down ([`super::pass`]) and results up
//! ([`super::gather`], [`super::sum`]). When its workers change (one leaves, one joins)
//! it ends the session once no run is active and registers again with the new shards. A
//! run whose worker leaves or falls silent loses the relay: its other workers are told to
//! abort and the relay leaves the session, so the coordinator marks it lost. The hub
//! beats its workers every 250 ms; however the session with the coordinator ends (closed,
//! broken, silent for [`crest_proto::DEAD_MAN`]), the run it carried is aborted on the workers at once,
//! so load stops within a second of the coordinator's last word, as for a worker that
//! dials the coordinator directly.

use super::gather::Gather;
use super::pass::{self, Acks, Member};
use super::sum::Summer;
use crate::orchestrate::SILENCE;
use crate::service::{EVENTS, Hub, HubEvent, WorkerLink};
use crest_engine::control_tls::{ClientTls, ServerTls};
use crest_engine::uplink::{self, Outbox, SessionError};
use crest_model::clock::unix_ns;
use crest_model::convert::{self, FailureKind};
use crest_proto::PROTOCOL_VERSION;
use crest_proto::pb::{self, coordinator_message::Msg as In, worker_message::Msg as Out};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Clock pings sent to a worker when it joins (the lowest-RTT answer sets its offset).
const PINGS: u64 = 5;
/// A worker whose clock is still unknown this long after the relay began waiting is named
/// (and pinged again), every this long.
const UNANSWERED: Duration = Duration::from_secs(5);
/// Waits between dials to an absent coordinator.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// What `crest relay` was told.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The coordinator's URL (`http://host:port`, or `https://` for TLS).
    pub coordinator: String,
    /// TLS to the coordinator: its CA and this relay's client certificate (`https://`).
    pub tls: Option<ClientTls>,
    /// TLS for its workers (they dial `https://`): as `crest run --control-cert` serves.
    pub serve_tls: Option<ServerTls>,
    /// Workers to wait for before registering upstream.
    pub workers: usize,
    /// Shared secret: what its workers must give, and what it gives the coordinator.
    pub token: String,
    /// Its name in reports.
    pub name: String,
    /// Its host.
    pub host: String,
}

/// Why the relay stopped.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The URL is not one the relay dials, or its TLS settings cannot be used.
    #[error("{0}")]
    BadUrl(String),
    /// The coordinator refused the relay: retrying cannot fix it.
    #[error("the coordinator refused this relay: {0}")]
    Refused(String),
}

/// A worker under the relay.
#[derive(Debug)]
struct Worker {
    link: WorkerLink,
    /// (RTT, its clock minus the relay's), from the best ping so far.
    clock: Option<(u64, i64)>,
    last_seen: Instant,
}

/// The run in progress: its workers (by id, in the order its shards were split) and what
/// is summed for it.
#[derive(Debug)]
struct Run {
    id: String,
    workers: Vec<String>,
    gather: Gather,
    summer: Summer,
    checkpoints: Acks,
    steered: Acks,
    finals: Vec<Option<pb::Finished>>,
    sent: u32,
}

/// Runs the relay until `shutdown` resolves.
///
/// # Errors
/// [`RelayError`] when the URL is not one it dials or the coordinator refuses it.
pub async fn run(
    cfg: RelayConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), RelayError> {
    let (endpoint, tls) =
        crest_engine::agent::coordinator_endpoint(&cfg.coordinator, cfg.tls.as_ref())
            .map_err(|e| RelayError::BadUrl(e.to_string()))?;
    let (etx, mut events) = mpsc::channel(EVENTS);
    let hub = Hub::new(etx, cfg.token.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::service::serve(
        hub,
        listener,
        cfg.serve_tls.clone(),
        None,
        async {
            let _ = stopped.await;
        },
    ));
    let id = uuid::Uuid::new_v4().to_string();
    let mut workers: Vec<Worker> = Vec::new();
    let mut backoff = BACKOFF_MIN;
    tokio::pin!(shutdown);
    let result = loop {
        // Every worker's clock is known before the relay registers: a plan can come at once.
        let mut waiting = tokio::time::interval(UNANSWERED);
        waiting.tick().await;
        while workers.len() < cfg.workers || workers.iter().any(|w| w.clock.is_none()) {
            tokio::select! {
                _ = &mut shutdown => break,
                ev = events.recv() => match ev {
                    Some(ev) => { idle_event(ev, &mut workers).await; }
                    None => break,
                },
                _ = waiting.tick() => unanswered(&workers).await,
            }
        }
        if workers.len() < cfg.workers || workers.iter().any(|w| w.clock.is_none()) {
            break Ok(());
        }
        let mut run: Option<Run> = None;
        let dial = uplink::Dial {
            url: &cfg.coordinator,
            endpoint: &endpoint,
            tls,
        };
        let (stopping, outcome) = tokio::select! {
            _ = &mut shutdown => (true, Err(SessionError::Lost("the relay was told to stop".into()))),
            r = session(&cfg, dial, &id, &mut workers, &mut events, &mut run) => (false, r),
        };
        // However the session ended (an error, a stuck upstream, a signal), a run it was
        // carrying stops now: the hub's heartbeats alone would keep its workers sending.
        if let Some(r) = run.take() {
            let reason = match &outcome {
                Ok(why) => why.clone(),
                Err(e) => e.to_string(),
            };
            tracing::warn!(run_id = %r.id, %reason, "the workers' run is aborted");
            let abort = In::Abort(pb::Abort {
                run_id: r.id.clone(),
                reason,
            });
            down(&workers, &r, &abort).await;
        }
        if stopping {
            break Ok(());
        }
        match outcome {
            Ok(why) => {
                backoff = BACKOFF_MIN;
                tracing::info!(%why, "session with the coordinator ended");
            }
            Err(SessionError::Refused(r)) => break Err(RelayError::Refused(r)),
            // A certificate the coordinator refuses (or one this relay cannot trust) does
            // not get better by dialling again.
            Err(SessionError::Dial(f)) if f.fatal => break Err(RelayError::Refused(f.line)),
            Err(e) => tracing::warn!(coordinator = %cfg.coordinator, "{e}; dialling again"),
        }
        tokio::select! {
            _ = &mut shutdown => break Ok(()),
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    };
    // The workers' sessions never end on their own (a graceful stop would wait for them):
    // they are cut, and each worker's dead man's switch and redial take over.
    let _ = stop.send(());
    server.abort();
    result
}

/// A hub event with no session upstream (or none that it concerns): workers joining,
/// leaving, answering pings.
async fn idle_event(ev: HubEvent, workers: &mut Vec<Worker>) -> bool {
    match ev {
        HubEvent::Joined(link) => {
            tracing::info!(worker = %link.info.name, shards = link.info.shards, "worker joined");
            for seq in 0..PINGS {
                link.send(pb::coordinator_message::Msg::Ping(pb::Ping {
                    seq,
                    t1_unix_ns: unix_ns(),
                }))
                .await;
            }
            workers.push(Worker {
                link,
                clock: None,
                last_seen: Instant::now(),
            });
            true
        }
        HubEvent::Left(id, reason) => {
            let before = workers.len();
            workers.retain(|w| {
                let gone = w.link.info.id == id;
                if gone {
                    tracing::info!(worker = %w.link.info.name, %reason, "worker left");
                }
                !gone
            });
            workers.len() != before
        }
        HubEvent::Refused { name, reason } => {
            tracing::warn!(worker = %name, %reason, "worker refused");
            false
        }
        HubEvent::Message(id, m) => {
            if let Some(w) = workers.iter_mut().find(|w| w.link.info.id == id) {
                w.last_seen = Instant::now();
                if let Out::Pong(p) = m
                    && let Some((offset, rtt)) =
                        convert::clock_offset(p.t1_unix_ns, p.t2_unix_ns, unix_ns())
                    && w.clock.is_none_or(|(best, _)| rtt < best)
                {
                    w.clock = Some((rtt, offset));
                }
            }
            false
        }
    }
}

/// Says which workers have not answered a clock ping (the relay registers only once every
/// worker's clock is known) and pings them again.
async fn unanswered(workers: &[Worker]) {
    for w in workers.iter().filter(|w| w.clock.is_none()) {
        tracing::warn!(
            worker = %w.link.info.name,
            "has not answered the relay's clock pings; the relay registers with the coordinator once every worker has"
        );
        w.link
            .send(pb::coordinator_message::Msg::Ping(pb::Ping {
                seq: PINGS,
                t1_unix_ns: unix_ns(),
            }))
            .await;
    }
}

/// Sends `m` to each of the run's workers.
async fn down(workers: &[Worker], run: &Run, m: &In) {
    for w in workers
        .iter()
        .filter(|w| run.workers.contains(&w.link.info.id))
    {
        w.link.send(m.clone()).await;
    }
}

/// Ends `run` upstream as failed (`kind`, `reason`) and tells its workers to abort.
async fn fail(
    out: &mut Outbox,
    workers: &[Worker],
    run: Run,
    kind: i32,
    reason: String,
) -> Result<(), SessionError> {
    tracing::warn!(run_id = %run.id, %reason, "run failed");
    let abort = In::Abort(pb::Abort {
        run_id: run.id.clone(),
        reason: reason.clone(),
    });
    down(workers, &run, &abort).await;
    out.push(Out::Failed(pb::RunFailed {
        run_id: run.id,
        reason,
        kind,
    }))
}

/// Aborts `run` on its workers and ends the session upstream: the coordinator marks the
/// relay lost (as it marks a worker whose session ends), keeps the intervals it had, and
/// the rest of the fleet finishes the run. What one worker under the relay did after its
/// last summed interval cannot be accounted for, so the relay's part ends there.
async fn lose(workers: &[Worker], run: Run, reason: String) -> SessionError {
    tracing::warn!(run_id = %run.id, %reason, "run lost: leaving the coordinator's session");
    let abort = In::Abort(pb::Abort {
        run_id: run.id.clone(),
        reason: reason.clone(),
    });
    down(workers, &run, &abort).await;
    SessionError::Lost(reason)
}

/// The relay's work below its session upstream: its workers, their hub's events, and
/// the run it carries for them.
struct Below<'a> {
    cfg: &'a RelayConfig,
    workers: &'a mut Vec<Worker>,
    events: &'a mut mpsc::Receiver<HubEvent>,
    run: &'a mut Option<Run>,
    /// The workers changed: register again once no run is active.
    changed: bool,
}

impl Below<'_> {
    /// Why the session should end now: the workers changed and no run is active.
    fn reregister(&self) -> Option<String> {
        (self.changed && self.run.is_none())
            .then(|| "the relay's workers changed: registering again with their shards".into())
    }
}

impl uplink::Below for Below<'_> {
    type Event = HubEvent;

    async fn next(&mut self) -> Option<HubEvent> {
        self.events.recv().await
    }

    async fn order(&mut self, m: In, out: &mut Outbox) -> Result<(), SessionError> {
        upstream(m, out, self.workers, self.run).await
    }

    async fn event(
        &mut self,
        ev: HubEvent,
        out: &mut Outbox,
    ) -> Result<Option<String>, SessionError> {
        self.changed |= downstream(ev, out, self.workers, self.run).await?;
        Ok(self.reregister())
    }

    async fn watch(&mut self) -> Result<Option<String>, SessionError> {
        if let Some(r) = &*self.run
            && let Some(w) = self
                .workers
                .iter()
                .find(|w| r.workers.contains(&w.link.info.id) && w.last_seen.elapsed() > SILENCE)
        {
            let reason = format!(
                "worker {} under relay {} was silent for {SILENCE:?} mid-run",
                w.link.info.name, self.cfg.name
            );
            if let Some(r) = self.run.take() {
                return Err(lose(self.workers, r, reason).await);
            }
        }
        Ok(self.reregister())
    }

    fn busy(&self) -> bool {
        self.run.is_some()
    }
}

/// One session upstream, registered with the shards of every worker; `Ok` carries why it
/// ended normally.
async fn session(
    cfg: &RelayConfig,
    dial: uplink::Dial<'_>,
    id: &str,
    workers: &mut Vec<Worker>,
    events: &mut mpsc::Receiver<HubEvent>,
    run: &mut Option<Run>,
) -> Result<String, SessionError> {
    let theirs: Vec<pb::Register> = workers
        .iter()
        .map(|w| pb::Register {
            shards: w.link.info.shards,
            cpus: w.link.info.cpus.clone(),
            ..Default::default()
        })
        .collect();
    let own = pb::Register {
        protocol_version: PROTOCOL_VERSION,
        worker_id: id.to_string(),
        name: cfg.name.clone(),
        host: cfg.host.clone(),
        token: cfg.token.clone(),
        crest_version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    };
    let register = pass::register(&own, &theirs);
    let mut below = Below {
        cfg,
        workers,
        events,
        run,
        changed: false,
    };
    uplink::session(dial, register, &mut below).await
}

/// An order from the coordinator.
async fn upstream(
    m: In,
    out: &mut Outbox,
    workers: &[Worker],
    run: &mut Option<Run>,
) -> Result<(), SessionError> {
    match m {
        In::Start(s) => {
            let run_id = s
                .plan
                .as_ref()
                .map(|p| p.run_id.clone())
                .unwrap_or_default();
            if run.is_some() {
                let kind = pb::FailureKind::from(FailureKind::Busy) as i32;
                let reason = "the relay is already in another run".to_string();
                return out.push(Out::Failed(pb::RunFailed {
                    run_id,
                    reason,
                    kind,
                }));
            }
            let members: Option<Vec<Member>> = workers
                .iter()
                .map(|w| {
                    w.clock.map(|(_, offset_ns)| Member {
                        shards: w.link.info.shards,
                        offset_ns,
                    })
                })
                .collect();
            let Some(members) = members else {
                let reason = "a worker under the relay has not answered its clock pings yet".into();
                return out.push(Out::Failed(convert::run_failed(
                    &run_id,
                    FailureKind::Internal,
                    reason,
                )));
            };
            let parts = match pass::split(&s, &members) {
                Ok(p) => p,
                Err(e) => {
                    let reason = format!("the relay cannot split the plan: {e}");
                    return out.push(Out::Failed(convert::run_failed(
                        &run_id,
                        FailureKind::BadPlan,
                        reason,
                    )));
                }
            };
            for (w, part) in workers.iter().zip(parts) {
                w.link.send(In::Start(part)).await;
            }
            let n = workers.len();
            *run = Some(Run {
                id: run_id,
                workers: workers.iter().map(|w| w.link.info.id.clone()).collect(),
                gather: Gather::new(n),
                summer: Summer::new(),
                checkpoints: Acks::new(n),
                steered: Acks::new(n),
                finals: vec![None; n],
                sent: 0,
            });
        }
        In::Abort(ref a) => {
            if let Some(r) = run.take_if(|r| r.id == a.run_id) {
                down(workers, &r, &m).await;
            }
        }
        In::Release(ref c) => {
            if let Some(r) = run.as_ref().filter(|r| r.id == c.run_id) {
                down(workers, r, &m).await;
            }
        }
        In::Steer(ref c) => {
            if let Some(r) = run.as_ref().filter(|r| r.id == c.run_id) {
                down(workers, r, &m).await;
            }
        }
        // The session's own: it answers them before anything comes here.
        In::Welcome(_) | In::Refused(_) | In::Ping(_) | In::Heartbeat(_) => {}
    }
    Ok(())
}

/// A worker's event; true when the relay's workers changed.
async fn downstream(
    ev: HubEvent,
    out: &mut Outbox,
    workers: &mut Vec<Worker>,
    run: &mut Option<Run>,
) -> Result<bool, SessionError> {
    let (id, m) = match ev {
        HubEvent::Message(id, m) => (id, m),
        HubEvent::Left(ref id, ref reason) => {
            let name = workers
                .iter()
                .find(|w| w.link.info.id == *id)
                .map(|w| w.link.info.name.clone());
            let in_run = run.as_ref().is_some_and(|r| r.workers.contains(id));
            let reason = format!(
                "worker {} under the relay left mid-run: {reason}",
                name.as_deref().unwrap_or(id)
            );
            let changed = idle_event(ev, workers).await;
            if in_run && let Some(r) = run.take() {
                return Err(lose(workers, r, reason).await);
            }
            return Ok(changed);
        }
        other => return Ok(idle_event(other, workers).await),
    };
    let Some(wk) = workers.iter_mut().find(|w| w.link.info.id == id) else {
        return Ok(false);
    };
    wk.last_seen = Instant::now();
    let name = wk.link.info.name.clone();
    let Some(r) = run.as_mut() else {
        idle_event(HubEvent::Message(id, m), workers).await;
        return Ok(false);
    };
    let Some(w) = r.workers.iter().position(|x| *x == id) else {
        return Ok(false);
    };
    match m {
        Out::Interval(iv) if iv.run_id == r.id => {
            if let Err(e) = r.gather.receive(w, iv) {
                let reason = format!("worker {name}: {e}");
                if let Some(r) = run.take() {
                    return Err(lose(workers, r, reason).await);
                }
                return Ok(false);
            }
            forward(out, workers, run).await?;
        }
        Out::Finished(f) if f.run_id == r.id => {
            r.gather.finish(w);
            r.finals[w] = Some(f);
            forward(out, workers, run).await?;
        }
        Out::Failed(mut f) if f.run_id == r.id => {
            f.reason = format!("worker {name} under the relay: {}", f.reason);
            if let Some(r) = run.take() {
                fail(out, workers, r, f.kind, f.reason).await?;
            }
        }
        Out::Checkpoint(c) if c.run_id == r.id => {
            if r.checkpoints.ack(w, c.index, 0, 0).is_some() {
                out.push(Out::Checkpoint(c))?;
            }
        }
        Out::Steered(s) if s.run_id == r.id => {
            if let Some((first_ns, last_ns)) = r.steered.ack(w, s.seq, s.first_ns, s.last_ns) {
                let s = pb::Steered {
                    first_ns,
                    last_ns,
                    ..s
                };
                out.push(Out::Steered(s))?;
            }
        }
        other => {
            idle_event(HubEvent::Message(id, other), workers).await;
        }
    }
    Ok(false)
}

/// Sums and sends every interval nothing more can come for, then the final message once
/// every worker's came (the run is over then).
async fn forward(
    out: &mut Outbox,
    workers: &[Worker],
    run: &mut Option<Run>,
) -> Result<(), SessionError> {
    let Some(r) = run.as_mut() else { return Ok(()) };
    while let Some((index, held)) = r.gather.take() {
        match r
            .summer
            .interval(&r.id, index, held.iter().map(|(w, iv)| (*w, iv)))
        {
            Ok(iv) => {
                out.push(Out::Interval(iv))?;
                r.sent += 1;
            }
            Err(e) => {
                let reason = format!("an interval cannot be summed: {e}");
                if let Some(r) = run.take() {
                    return Err(lose(workers, r, reason).await);
                }
                return Ok(());
            }
        }
    }
    if r.finals.iter().all(Option::is_some) {
        let finals: Vec<(usize, &pb::Finished)> = r
            .finals
            .iter()
            .enumerate()
            .filter_map(|(w, f)| Some((w, f.as_ref()?)))
            .collect();
        let summed = r.summer.finished(&r.id, r.sent, finals);
        let Some(r) = run.take() else { return Ok(()) };
        match summed {
            Ok(f) => out.push(Out::Finished(f))?,
            Err(e) => {
                let reason = format!("the final results cannot be summed: {e}");
                return Err(lose(workers, r, reason).await);
            }
        }
    }
    Ok(())
}
