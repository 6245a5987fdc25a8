//! Collecting a phase: intervals and finals in (into the [`RunBooks`], which finalize each
//! interval once every live worker is past it), lost workers out, live progress, and an
//! abort to everyone when the user interrupts or a worker fails.

use super::member::{GRACE, Member, RunError, SILENCE, interrupted};
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

/// Collects one phase that started at `start` and is scheduled for `duration` into `books`,
/// until every worker has sent its finals or is lost, or the user interrupts.
///
/// # Errors
/// [`RunError::Usage`] when a worker cannot reach the target; [`RunError::Failed`] when a
/// worker fails otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) async fn collect(
    cfg: &RunConfig,
    events: &mut mpsc::Receiver<HubEvent>,
    members: &mut [Member],
    books: &mut RunBooks,
    run_id: &str,
    start: Instant,
    duration: Duration,
    interrupt: &watch::Receiver<bool>,
    mut checkpoints: Option<&mut super::checkpoint::Checkpoints>,
    mut control: Option<&mut Control>,
) -> Result<Ended, RunError> {
    let deadline = start + duration + cfg.drain + GRACE;
    let mut progress = Progress::new();
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(start + PROGRESS_FIRST),
        PROGRESS_EVERY,
    );
    let mut published = usize::MAX;
    // Workers by id: a fleet's messages are matched in O(1), not by comparing ids with
    // every member (1,000 workers made that a tenth of the coordinator's CPU).
    let by_id: HashMap<String, usize> = members
        .iter()
        .enumerate()
        .map(|(w, m)| (m.link.info.id.clone(), w))
        .collect();
    // Messages received since the books last advanced: advancing looks at every worker, so
    // while more messages wait it runs once per ADVANCE_EVERY of them, not once each (and
    // at once when the pending messages pass their cap, which stays a bound).
    let mut unadvanced = 0usize;
    let result = loop {
        if unadvanced >= ADVANCE_EVERY || unadvanced == 0 || events.is_empty() || books.over_cap() {
            unadvanced = 0;
            advance(members, books, run_id).await;
        }
        if let Some(c) = control.as_deref_mut()
            && books.timeline.len() != published
        {
            published = books.timeline.len();
            publish(c, members, books, run_id, start, duration);
        }
        if let Some(c) = checkpoints.as_deref_mut() {
            c.advance(members, run_id).await;
        }
        if unadvanced == 0 && members.iter().all(|m| m.done || m.lost()) {
            break Ok(Ended::Done);
        }
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = tick.tick() => {
                let now = Instant::now();
                // Messages still queued mean the books are behind, not the workers silent
                // (finalizing many workers' intervals can take a while): judge silence
                // only with the queue drained.
                let behind = !events.is_empty();
                for m in members.iter_mut().filter(|m| !m.done && !m.lost() && !behind) {
                    if now.duration_since(m.last_seen) > SILENCE {
                        lose(m, run_id, format!("no message for {} s", SILENCE.as_secs())).await;
                    }
                }
                if now > deadline {
                    for m in members.iter_mut().filter(|m| !m.done && !m.lost()) {
                        lose(m, run_id, "no final results by the schedule end + drain + grace".into()).await;
                    }
                }
                if let Some(s) = progress_sample(cfg, members, books, start, duration)
                    && !cfg.quiet
                {
                    progress.show(&s);
                }
                continue;
            }
            req = next_request(&mut control) => {
                let (Some(req), Some(c)) = (req, control.as_deref_mut()) else { continue };
                steer(c, req, members, books, run_id, start).await;
                publish(c, members, books, run_id, start, duration);
                continue;
            }
            () = interrupted(interrupt) => {
                for m in members.iter() {
                    m.link.send(Out::Abort(pb::Abort { run_id: run_id.into(), reason: "coordinator interrupted".into() })).await;
                }
                progress.finish();
                break Ok(Ended::Interrupted);
            }
        };
        let Some(ev) = ev else {
            break Err(RunError::Failed("event channel closed".into()));
        };
        match ev {
            HubEvent::Message(id, msg) => {
                let Some(&w) = by_id.get(&id) else {
                    continue;
                };
                unadvanced += 1;
                let m = &mut members[w];
                m.last_seen = Instant::now();
                match msg {
                    In::Interval(iv) if iv.run_id == run_id => {
                        if let Err(e) = books.receive(w, iv) {
                            lose(m, run_id, format!("sent an unreadable interval: {e}")).await;
                        }
                    }
                    In::Steered(s) if s.run_id == run_id => {
                        if let Some(c) = control.as_deref_mut() {
                            let name = m.link.info.name.clone();
                            c.steering.followed(s.seq, &name, s.first_ns, s.last_ns);
                        }
                    }
                    In::Checkpoint(c) if c.run_id == run_id => {
                        if let Some(cp) = checkpoints.as_deref_mut() {
                            cp.reached(w, c.index);
                        }
                    }
                    In::Finished(f) if f.run_id == run_id => match books.finish(w, &f) {
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
                        break Err(match convert::failure_kind(&f) {
                            FailureKind::TargetUnreachable => RunError::Usage(format!(
                                "--target: {msg}; check the address and that the server is up"
                            )),
                            FailureKind::TargetRefused => {
                                RunError::Usage(format!("--target: {msg}"))
                            }
                            k if k.is_usage() => RunError::Usage(msg),
                            _ => RunError::Failed(msg),
                        });
                    }
                    _ => {}
                }
            }
            HubEvent::Left(id, reason) => {
                if let Some(m) = by_id.get(&id).and_then(|&w| members.get_mut(w))
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
    };
    progress.finish();
    result
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
        b.phase = "running";
        b.run_id = run_id.to_string();
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
    Some(Sample {
        elapsed_s: start.elapsed().as_secs_f64().min(duration.as_secs_f64()),
        total_s: duration.as_secs_f64(),
        target_rate: (!cfg.closed_loop()).then_some(w.target_rate),
        achieved_rate: w.achieved_rate,
        p99_us: w.p99_us,
        errors: books.totals.values().map(CmdSum::error_total).sum(),
        alive: members.iter().filter(|m| !m.lost()).count(),
        workers: members.len(),
    })
}
