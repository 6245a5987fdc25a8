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
//! beats its workers every [`crest_proto::HEARTBEAT`]; however the session with the coordinator ends (closed,
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
/// (and pinged again), every this long; so is how many workers it still waits for.
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
    /// Per worker of the run, the relay's index of its shard 0 (the relay's shards are its
    /// workers' in turn), and the relay's shard count last: a trace chunk for relay shard
    /// `s` goes to the worker whose range holds it, its acknowledgement comes back shifted
    /// by the base.
    shard_base: Vec<u32>,
}

impl Run {
    /// The worker (index in the run) and its own shard index for relay shard `s`.
    fn shard_owner(&self, s: u32) -> Option<(usize, u32)> {
        let w = self
            .shard_base
            .partition_point(|&b| b <= s)
            .checked_sub(1)?;
        (w + 1 < self.shard_base.len()).then(|| (w, s - self.shard_base[w]))
    }
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
                _ = waiting.tick() => unanswered(&workers, cfg.workers).await,
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
async fn unanswered(workers: &[Worker], wanted: usize) {
    // A relay registers only once its workers are there: say what it waits for.
    if workers.len() < wanted {
        tracing::warn!(
            "still waiting for workers: {} of {wanted} joined (crest-worker --coordinator pointed at this relay); the relay dials the coordinator once all have",
            workers.len()
        );
    }
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

    async fn watch(&mut self, _out: &mut Outbox) -> Result<Option<String>, SessionError> {
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
            let shard_base = std::iter::once(0)
                .chain(members.iter().scan(0u32, |acc, m| {
                    *acc = acc.saturating_add(m.shards);
                    Some(*acc)
                }))
                .collect();
            *run = Some(Run {
                id: run_id,
                workers: workers.iter().map(|w| w.link.info.id.clone()).collect(),
                gather: Gather::new(n),
                summer: Summer::new(),
                checkpoints: Acks::new(n),
                steered: Acks::new(n),
                finals: vec![None; n],
                sent: 0,
                shard_base,
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
        In::TraceChunk(c) => {
            let Some(r) = run.as_ref().filter(|r| r.id == c.run_id) else {
                return Ok(());
            };
            let to = r.shard_owner(c.shard).and_then(|(w, shard)| {
                let id = r.workers.get(w)?;
                let wk = workers.iter().find(|x| x.link.info.id == *id)?;
                Some((wk, shard))
            });
            match to {
                Some((wk, shard)) => {
                    wk.link
                        .send(In::TraceChunk(pb::TraceChunk { shard, ..c }))
                        .await;
                }
                None => {
                    let reason = format!(
                        "a trace chunk for shard {}, which the relay does not have",
                        c.shard
                    );
                    if let Some(r) = run.take() {
                        let kind = pb::FailureKind::from(FailureKind::BadPlan) as i32;
                        return fail(out, workers, r, kind, reason).await;
                    }
                }
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
        // A worker that joined during the run: not in it, but its clock pongs count.
        idle_event(HubEvent::Message(id, m), workers).await;
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
        Out::TraceAck(a) if a.run_id == r.id => {
            let base = r.shard_base.get(w).copied().unwrap_or(0);
            out.push(Out::TraceAck(pb::TraceAck {
                shard: base.saturating_add(a.shard),
                ..a
            }))?;
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crest_engine::uplink::Below as _;

    /// What the relay sends one of its workers.
    type Inbox = mpsc::Receiver<pb::CoordinatorMessage>;
    /// What the relay sends its coordinator.
    type Upstream = mpsc::Receiver<pb::WorkerMessage>;

    /// Worker `i` (`w{i}`, id `id-{i}`) with `shards` shards and, when known, its clock
    /// offset (RTT 100 ns).
    fn worker(i: usize, shards: u32, offset: Option<i64>) -> (Worker, Inbox) {
        let (mut link, rx) = WorkerLink::fake(i);
        link.info.shards = shards;
        let w = Worker {
            link,
            clock: offset.map(|o| (100, o)),
            last_seen: Instant::now(),
        };
        (w, rx)
    }

    /// Workers with known clocks, by (shards, offset).
    fn fleet(spec: &[(u32, i64)]) -> (Vec<Worker>, Vec<Inbox>) {
        spec.iter()
            .enumerate()
            .map(|(i, &(s, o))| worker(i, s, Some(o)))
            .unzip()
    }

    fn outbox() -> (Outbox, Upstream) {
        let (tx, rx) = mpsc::channel(64);
        (Outbox::new(tx), rx)
    }

    /// Everything sent upstream so far.
    fn up(rx: &mut Upstream) -> Vec<Out> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|m| m.msg)
            .collect()
    }

    /// Everything sent to one worker so far.
    fn sent(rx: &mut Inbox) -> Vec<In> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|m| m.msg)
            .collect()
    }

    /// The coordinator's start of run `run_id` with one shard plan per shard 0..`shards`.
    fn start(run_id: &str, shards: u32) -> In {
        In::Start(pb::StartRun {
            plan: Some(pb::RunPlan {
                run_id: run_id.into(),
                total_shards: shards,
                shards: (0..shards)
                    .map(|i| pb::ShardPlan {
                        shard: i,
                        global_index: 10 + i,
                        seed: u64::from(i),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            start_at_unix_ns: 1_000_000,
        })
    }

    fn msg(i: usize, m: Out) -> HubEvent {
        HubEvent::Message(format!("id-{i}"), m)
    }

    fn interval(run_id: &str, index: u32, target_rate: f64) -> Out {
        Out::Interval(pb::Interval {
            run_id: run_id.into(),
            index,
            target_rate,
            ..Default::default()
        })
    }

    fn finished(in_flight: u64) -> Out {
        Out::Finished(pb::Finished {
            run_id: "r".into(),
            in_flight,
            ..Default::default()
        })
    }

    /// A run `r` started on workers of `spec`, the plans they were sent drained.
    struct Running {
        workers: Vec<Worker>,
        inboxes: Vec<Inbox>,
        run: Option<Run>,
        out: Outbox,
        coord: Upstream,
    }

    async fn running(spec: &[(u32, i64)]) -> Running {
        let (workers, mut inboxes) = fleet(spec);
        let (mut out, coord) = outbox();
        let mut run = None;
        let shards = spec.iter().map(|(s, _)| s).sum();
        upstream(start("r", shards), &mut out, &workers, &mut run)
            .await
            .unwrap();
        for rx in &mut inboxes {
            assert!(matches!(sent(rx).as_slice(), [In::Start(_)]));
        }
        Running {
            workers,
            inboxes,
            run,
            out,
            coord,
        }
    }

    impl Running {
        async fn event(&mut self, ev: HubEvent) -> Result<bool, SessionError> {
            downstream(ev, &mut self.out, &mut self.workers, &mut self.run).await
        }

        fn up(&mut self) -> Vec<Out> {
            up(&mut self.coord)
        }
    }

    /// A trace chunk for the relay's shard `s` reaches the worker that holds it as that
    /// worker's own shard; its acknowledgement comes back as the relay's shard; a shard the
    /// relay does not have fails the run.
    #[tokio::test]
    async fn trace_chunks_go_to_the_worker_holding_the_shard_and_acks_come_back_shifted() {
        let mut r = running(&[(2, 0), (3, 0)]).await;
        let chunk = |shard: u32| {
            In::TraceChunk(pb::TraceChunk {
                run_id: "r".into(),
                shard,
                seq: 1,
                ..Default::default()
            })
        };
        upstream(chunk(3), &mut r.out, &r.workers, &mut r.run)
            .await
            .unwrap();
        assert!(sent(&mut r.inboxes[0]).is_empty());
        assert!(matches!(
            sent(&mut r.inboxes[1]).as_slice(),
            [In::TraceChunk(c)] if c.shard == 1
        ));
        let ack = Out::TraceAck(pb::TraceAck {
            run_id: "r".into(),
            class_index: 0,
            shard: 2,
            consumed: 7,
        });
        r.event(msg(1, ack)).await.unwrap();
        assert!(matches!(
            r.up().as_slice(),
            [Out::TraceAck(a)] if a.shard == 4 && a.consumed == 7
        ));
        upstream(chunk(5), &mut r.out, &r.workers, &mut r.run)
            .await
            .unwrap();
        assert!(r.run.is_none(), "a chunk for no shard fails the run");
        assert!(matches!(
            r.up().as_slice(),
            [Out::Failed(f)] if f.reason.contains("shard 5, which the relay does not have")
        ));
    }

    fn relay_cfg() -> RelayConfig {
        RelayConfig {
            coordinator: "http://127.0.0.1:1".into(),
            tls: None,
            serve_tls: None,
            workers: 2,
            token: String::new(),
            name: "relay-a".into(),
            host: "test".into(),
        }
    }

    /// The reason a session error carries when the relay leaves its session.
    fn lost(e: SessionError) -> String {
        match e {
            SessionError::Lost(why) => why,
            other => panic!("expected the relay to leave its session, got {other:?}"),
        }
    }

    /// The reasons of the aborts a worker was sent.
    fn aborts(rx: &mut Inbox) -> Vec<String> {
        sent(rx)
            .into_iter()
            .filter_map(|m| match m {
                In::Abort(a) => Some(a.reason),
                _ => None,
            })
            .collect()
    }

    /// A joining worker is pinged [`PINGS`] times and starts with no clock; the pong with
    /// the lowest RTT sets its clock, a slower one does not; pongs from strangers,
    /// refusals and strangers leaving change nothing; its leaving removes it.
    #[tokio::test]
    async fn a_joining_worker_is_pinged_and_its_fastest_pong_sets_its_clock() {
        let mut workers = Vec::new();
        let (link, mut rx) = WorkerLink::fake(0);
        assert!(idle_event(HubEvent::Joined(link), &mut workers).await);
        assert_eq!(workers.len(), 1);
        assert!(workers[0].clock.is_none());
        let seqs: Vec<u64> = sent(&mut rx)
            .into_iter()
            .map(|m| match m {
                In::Ping(p) => p.seq,
                other => panic!("expected a ping, got {other:?}"),
            })
            .collect();
        assert_eq!(seqs, (0..PINGS).collect::<Vec<_>>());

        let pong = |ago: Duration, ahead: i64| {
            let t1 = unix_ns() - i64::try_from(ago.as_nanos()).unwrap();
            Out::Pong(pb::Pong {
                seq: 0,
                t1_unix_ns: t1,
                t2_unix_ns: t1 + ahead,
            })
        };
        let second = Duration::from_secs(1);
        assert!(!idle_event(msg(0, pong(second, 5_000_000_000)), &mut workers).await);
        let (rtt, offset) = workers[0].clock.unwrap();
        assert!(rtt >= 1_000_000_000, "{rtt}");
        assert!(offset <= 4_500_000_000, "{offset}");
        idle_event(msg(0, pong(2 * second, 0)), &mut workers).await;
        assert_eq!(workers[0].clock, Some((rtt, offset)), "a slower pong");
        idle_event(msg(7, pong(Duration::ZERO, 0)), &mut workers).await;
        assert_eq!(workers[0].clock, Some((rtt, offset)), "a stranger's pong");
        idle_event(msg(0, pong(Duration::ZERO, 0)), &mut workers).await;
        assert!(workers[0].clock.unwrap().0 < rtt, "a faster pong");

        let refused = HubEvent::Refused {
            name: "x".into(),
            reason: "bad token".into(),
        };
        assert!(!idle_event(refused, &mut workers).await);
        let stranger = HubEvent::Left("id-7".into(), "gone".into());
        assert!(!idle_event(stranger, &mut workers).await);
        assert_eq!(workers.len(), 1);
        let left = HubEvent::Left("id-0".into(), "gone".into());
        assert!(idle_event(left, &mut workers).await);
        assert!(workers.is_empty());
    }

    /// Only the workers whose clock is unknown are pinged again.
    #[tokio::test]
    async fn only_workers_without_a_clock_are_pinged_again() {
        let (known, mut known_rx) = worker(0, 1, Some(0));
        let (unknown, mut unknown_rx) = worker(1, 1, None);
        unanswered(&[known, unknown], 2).await;
        assert!(sent(&mut known_rx).is_empty());
        let got = sent(&mut unknown_rx);
        assert!(
            matches!(got.as_slice(), [In::Ping(p)] if p.seq == PINGS),
            "{got:?}"
        );
    }

    /// A plan is split over the workers in the order their shards were registered, each
    /// getting its own shards and the start in its own clock; the run covers them all.
    #[tokio::test]
    async fn a_plan_is_split_over_the_workers_in_their_own_clocks() {
        let (workers, mut inboxes) = fleet(&[(2, 500), (1, -250)]);
        let (mut out, mut coord) = outbox();
        let mut run = None;
        upstream(start("r", 3), &mut out, &workers, &mut run)
            .await
            .unwrap();
        let parts: Vec<pb::StartRun> = inboxes
            .iter_mut()
            .map(|rx| match sent(rx).as_slice() {
                [In::Start(s)] => s.clone(),
                other => panic!("expected one start, got {other:?}"),
            })
            .collect();
        let globals = |s: &pb::StartRun| -> Vec<(u32, u32)> {
            let p = s.plan.as_ref().unwrap();
            p.shards.iter().map(|s| (s.shard, s.global_index)).collect()
        };
        assert_eq!(globals(&parts[0]), vec![(0, 10), (1, 11)]);
        assert_eq!(globals(&parts[1]), vec![(0, 12)]);
        assert_eq!(parts[0].start_at_unix_ns, 1_000_500);
        assert_eq!(parts[1].start_at_unix_ns, 999_750);
        let r = run.as_ref().unwrap();
        assert_eq!(r.id, "r");
        assert_eq!(r.workers, vec!["id-0", "id-1"]);
        assert_eq!(r.finals.len(), 2);
        assert!(up(&mut coord).is_empty());
    }

    /// A plan while a run is active is refused as busy, and the active run goes on.
    #[tokio::test]
    async fn a_second_plan_is_refused_as_busy() {
        let mut r = running(&[(1, 0), (1, 0)]).await;
        upstream(start("r2", 2), &mut r.out, &r.workers, &mut r.run)
            .await
            .unwrap();
        match r.up().as_slice() {
            [Out::Failed(f)] => {
                assert_eq!(f.run_id, "r2");
                assert_eq!(convert::failure_kind(f), FailureKind::Busy);
            }
            other => panic!("expected one failure, got {other:?}"),
        }
        assert_eq!(r.run.as_ref().unwrap().id, "r");
        assert!(r.inboxes.iter_mut().all(|rx| sent(rx).is_empty()));
    }

    /// A plan before every worker's clock is known, or one that does not match the
    /// relay's shards, fails upstream and starts nothing.
    #[tokio::test]
    async fn a_plan_that_cannot_be_split_fails_and_starts_nothing() {
        let (known, mut known_rx) = worker(0, 1, Some(0));
        let (unknown, _unknown_rx) = worker(1, 1, None);
        let workers = vec![known, unknown];
        let (mut out, mut coord) = outbox();
        let mut run = None;
        upstream(start("r", 2), &mut out, &workers, &mut run)
            .await
            .unwrap();
        match up(&mut coord).as_slice() {
            [Out::Failed(f)] => {
                assert_eq!(f.run_id, "r");
                assert_eq!(convert::failure_kind(f), FailureKind::Internal);
                assert!(
                    f.reason.contains("has not answered its clock pings"),
                    "{f:?}"
                );
            }
            other => panic!("expected one failure, got {other:?}"),
        }
        assert!(run.is_none());
        assert!(sent(&mut known_rx).is_empty());

        let (workers, mut inboxes) = fleet(&[(1, 0), (1, 0)]);
        upstream(start("r", 3), &mut out, &workers, &mut run)
            .await
            .unwrap();
        match up(&mut coord).as_slice() {
            [Out::Failed(f)] => {
                assert_eq!(convert::failure_kind(f), FailureKind::BadPlan);
                assert!(
                    f.reason.starts_with("the relay cannot split the plan: "),
                    "{f:?}"
                );
            }
            other => panic!("expected one failure, got {other:?}"),
        }
        assert!(run.is_none());
        assert!(inboxes.iter_mut().all(|rx| sent(rx).is_empty()));
    }

    /// Steering, checkpoint releases and the abort of the run go to each of its workers;
    /// those of another run are dropped; an abort ends the run.
    #[tokio::test]
    async fn orders_for_the_run_go_to_its_workers_and_others_are_dropped() {
        let mut r = running(&[(1, 0), (1, 0)]).await;
        let steer = |run_id: &str| {
            In::Steer(pb::Steer {
                run_id: run_id.into(),
                seq: 1,
                ..Default::default()
            })
        };
        let release = |run_id: &str| {
            In::Release(pb::ReleaseCheckpoint {
                run_id: run_id.into(),
                index: 1,
            })
        };
        let abort = |run_id: &str| {
            In::Abort(pb::Abort {
                run_id: run_id.into(),
                reason: "stop".into(),
            })
        };
        for m in [
            steer("other"),
            release("other"),
            abort("other"),
            In::Heartbeat(pb::Heartbeat {}),
        ] {
            upstream(m, &mut r.out, &r.workers, &mut r.run)
                .await
                .unwrap();
        }
        assert!(r.inboxes.iter_mut().all(|rx| sent(rx).is_empty()));
        assert!(r.run.is_some(), "another run's abort");
        for m in [steer("r"), release("r"), abort("r")] {
            upstream(m, &mut r.out, &r.workers, &mut r.run)
                .await
                .unwrap();
        }
        for rx in &mut r.inboxes {
            let got = sent(rx);
            assert!(
                matches!(
                    got.as_slice(),
                    [In::Steer(_), In::Release(_), In::Abort(a)] if a.reason == "stop"
                ),
                "{got:?}"
            );
        }
        assert!(r.run.is_none());
        assert!(r.up().is_empty());
    }

    /// An interval goes up once every worker sent that index, their sum; the final goes
    /// up once every worker finished, after every interval still held, and ends the run.
    #[tokio::test]
    async fn intervals_and_the_final_go_up_summed_once_every_worker_sent_its_own() {
        let mut r = running(&[(1, 0), (2, 0)]).await;
        assert!(!r.event(msg(0, interval("r", 0, 10.0))).await.unwrap());
        assert!(r.up().is_empty(), "worker 1 has not sent index 0");
        r.event(msg(1, interval("r", 0, 5.0))).await.unwrap();
        match r.up().as_slice() {
            [Out::Interval(iv)] => {
                assert_eq!((iv.run_id.as_str(), iv.index), ("r", 0));
                assert_eq!(iv.target_rate, 15.0);
            }
            other => panic!("expected one interval, got {other:?}"),
        }
        r.event(msg(0, interval("r", 1, 10.0))).await.unwrap();
        r.event(msg(0, finished(1))).await.unwrap();
        assert!(r.up().is_empty(), "index 1 waits for worker 1");
        assert!(r.run.is_some());
        r.event(msg(1, finished(2))).await.unwrap();
        match r.up().as_slice() {
            [Out::Interval(iv), Out::Finished(f)] => {
                assert_eq!((iv.index, iv.target_rate), (1, 10.0));
                assert_eq!(f.run_id, "r");
                assert_eq!(f.in_flight, 3);
                assert_eq!(f.intervals, 2, "the intervals the relay sent");
            }
            other => panic!("expected an interval and the final, got {other:?}"),
        }
        assert!(r.run.is_none());
        assert!(r.inboxes.iter_mut().all(|rx| aborts(rx).is_empty()));
    }

    /// A worker's failure fails the run upstream with its kind, naming the worker, and
    /// every worker of the run is told to abort.
    #[tokio::test]
    async fn a_workers_failure_fails_the_run_and_aborts_every_worker() {
        let mut r = running(&[(1, 0), (1, 0)]).await;
        let failed = convert::run_failed("r", FailureKind::TargetUnreachable, "refused".into());
        assert!(!r.event(msg(1, Out::Failed(failed))).await.unwrap());
        let why = "worker w1 under the relay: refused";
        match r.up().as_slice() {
            [Out::Failed(f)] => {
                assert_eq!((f.run_id.as_str(), f.reason.as_str()), ("r", why));
                assert_eq!(convert::failure_kind(f), FailureKind::TargetUnreachable);
            }
            other => panic!("expected one failure, got {other:?}"),
        }
        assert!(r.run.is_none());
        for rx in &mut r.inboxes {
            assert_eq!(aborts(rx), vec![why]);
        }
    }

    /// A checkpoint goes up once every worker reached it; a steering change once every
    /// worker followed it, spanning the earliest and latest switch of all.
    #[tokio::test]
    async fn checkpoints_and_steering_go_up_once_every_worker_sent_its_own() {
        let mut r = running(&[(1, 0), (1, 0)]).await;
        let reached = || {
            Out::Checkpoint(pb::CheckpointReached {
                run_id: "r".into(),
                index: 1,
            })
        };
        let steered = |first_ns, last_ns| {
            Out::Steered(pb::Steered {
                run_id: "r".into(),
                seq: 1,
                first_ns,
                last_ns,
            })
        };
        r.event(msg(0, reached())).await.unwrap();
        r.event(msg(0, reached())).await.unwrap();
        r.event(msg(0, steered(50, 60))).await.unwrap();
        assert!(r.up().is_empty(), "worker 1 sent neither");
        r.event(msg(1, reached())).await.unwrap();
        r.event(msg(1, steered(40, 70))).await.unwrap();
        match r.up().as_slice() {
            [Out::Checkpoint(c), Out::Steered(s)] => {
                assert_eq!((c.run_id.as_str(), c.index), ("r", 1));
                assert_eq!((s.seq, s.first_ns, s.last_ns), (1, 40, 70));
            }
            other => panic!("expected a checkpoint and a steering ack, got {other:?}"),
        }
    }

    /// A worker of the run leaving mid-run loses the relay: the others are told to abort,
    /// the relay leaves its session naming the worker, and nothing goes up.
    #[tokio::test]
    async fn a_worker_leaving_mid_run_loses_the_relay() {
        let mut r = running(&[(1, 0), (1, 0)]).await;
        let e = r
            .event(HubEvent::Left("id-1".into(), "stream reset".into()))
            .await
            .unwrap_err();
        let why = "worker w1 under the relay left mid-run: stream reset";
        assert_eq!(lost(e), why);
        assert!(r.run.is_none());
        assert_eq!(r.workers.len(), 1);
        assert_eq!(aborts(&mut r.inboxes[0]), vec![why]);
        assert!(r.up().is_empty());
    }

    /// A worker sending an interval out of order, or one that cannot be summed, loses the
    /// relay and its run's workers are told to abort.
    #[tokio::test]
    async fn an_unreadable_interval_loses_the_relay() {
        let mut r = running(&[(1, 0), (1, 0)]).await;
        r.event(msg(0, interval("r", 2, 1.0))).await.unwrap();
        let e = r.event(msg(0, interval("r", 1, 1.0))).await.unwrap_err();
        let why = "worker w0: worker 0 sent interval 1 after 2";
        assert_eq!(lost(e), why);
        assert!(r.run.is_none());
        for rx in &mut r.inboxes {
            assert_eq!(aborts(rx), vec![why]);
        }

        let mut r = running(&[(1, 0), (1, 0)]).await;
        let bad = pb::Interval {
            run_id: "r".into(),
            index: 0,
            commands: vec![pb::CommandStats {
                class: "c".into(),
                command: "GET".into(),
                latency: Some(pb::Histogram {
                    v2: vec![0x1c, 0x84, 0x93, 0x13, 0, 0].into(),
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        r.event(msg(0, Out::Interval(bad))).await.unwrap();
        let e = r.event(msg(1, interval("r", 0, 1.0))).await.unwrap_err();
        let why = lost(e);
        assert!(
            why.starts_with("an interval cannot be summed: worker 0:"),
            "{why}"
        );
        assert!(r.run.is_none());
        for rx in &mut r.inboxes {
            assert_eq!(aborts(rx), vec![why.clone()]);
        }
        assert!(r.up().is_empty());
    }

    /// Messages of another run, and a worker that joined during the run, are not summed
    /// into it nor sent its orders; the newcomer's clock pongs still set its clock.
    #[tokio::test]
    async fn a_worker_that_joined_mid_run_stays_out_of_it_but_gets_its_clock() {
        let mut r = running(&[(1, 0)]).await;
        r.event(msg(0, interval("other", 0, 1.0))).await.unwrap();
        let (link, mut new_rx) = WorkerLink::fake(1);
        assert!(r.event(HubEvent::Joined(link)).await.unwrap(), "changed");
        assert_eq!(sent(&mut new_rx).len(), PINGS as usize);
        r.event(msg(1, interval("r", 0, 1.0))).await.unwrap();
        assert!(r.up().is_empty());
        let t1 = unix_ns();
        let pong = Out::Pong(pb::Pong {
            seq: 0,
            t1_unix_ns: t1,
            t2_unix_ns: t1,
        });
        assert!(!r.event(msg(1, pong)).await.unwrap());
        assert!(
            r.workers[1].clock.is_some(),
            "the newcomer's pong was dropped"
        );
        let steer = In::Steer(pb::Steer {
            run_id: "r".into(),
            seq: 1,
            ..Default::default()
        });
        upstream(steer, &mut r.out, &r.workers, &mut r.run)
            .await
            .unwrap();
        assert_eq!(sent(&mut r.inboxes[0]).len(), 1);
        assert!(sent(&mut new_rx).is_empty());
        r.event(msg(0, finished(0))).await.unwrap();
        assert!(matches!(r.up().as_slice(), [Out::Finished(f)] if f.in_flight == 0));
    }

    /// The relay registers again (ends its session) when its workers changed and no run
    /// is active: at once between runs, with the run's last message when they changed
    /// during one.
    #[tokio::test]
    async fn changed_workers_reregister_once_no_run_is_active() {
        let cfg = relay_cfg();
        let (_tx, mut events) = mpsc::channel(8);
        let Running {
            mut workers,
            mut run,
            mut out,
            mut coord,
            ..
        } = running(&[(1, 0)]).await;
        let mut below = Below {
            cfg: &cfg,
            workers: &mut workers,
            events: &mut events,
            run: &mut run,
            changed: false,
        };
        assert_eq!(below.watch(&mut out).await.unwrap(), None);
        let (link, _new_rx) = WorkerLink::fake(1);
        let during = below.event(HubEvent::Joined(link), &mut out).await.unwrap();
        assert_eq!(during, None, "a run is active");
        assert!(below.busy());
        let after = below.event(msg(0, finished(0)), &mut out).await.unwrap();
        let after = after.expect("the run is over");
        assert!(after.contains("registering again"), "{after}");
        assert!(!below.busy());
        assert_eq!(below.watch(&mut out).await.unwrap(), Some(after));
        assert!(matches!(up(&mut coord).as_slice(), [Out::Finished(_)]));

        let mut below = Below {
            changed: false,
            ..below
        };
        assert_eq!(
            below.watch(&mut out).await.unwrap(),
            None,
            "nothing changed"
        );
        let left = HubEvent::Left("id-1".into(), "gone".into());
        assert!(below.event(left, &mut out).await.unwrap().is_some());
    }

    /// A worker of the run silent past [`SILENCE`] loses the relay, naming the worker and
    /// the relay, and the others are told to abort; between runs silence is not judged.
    #[tokio::test]
    async fn a_silent_worker_mid_run_loses_the_relay() {
        let cfg = relay_cfg();
        let (_tx, mut events) = mpsc::channel(8);
        let mut r = running(&[(1, 0), (1, 0)]).await;
        let silent = Instant::now()
            .checked_sub(SILENCE + Duration::from_millis(10))
            .unwrap();
        r.workers[1].last_seen = silent;
        let mut below = Below {
            cfg: &cfg,
            workers: &mut r.workers,
            events: &mut events,
            run: &mut r.run,
            changed: false,
        };
        let why = lost(below.watch(&mut r.out).await.unwrap_err());
        assert_eq!(
            why,
            format!("worker w1 under relay relay-a was silent for {SILENCE:?} mid-run")
        );
        assert!(!below.busy());
        assert_eq!(
            below.watch(&mut r.out).await.unwrap(),
            None,
            "no run: not judged"
        );
        assert_eq!(aborts(&mut r.inboxes[0]), vec![why]);
    }
}
