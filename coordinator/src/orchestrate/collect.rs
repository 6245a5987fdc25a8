//! Collecting a phase: intervals and finals in, lost workers out, live progress, and an
//! abort to everyone when the user interrupts or a worker fails.

use super::{GRACE, Member, RunError, SILENCE, interrupted};
use crate::config::RunConfig;
use crate::merge::{self, ByCommand, add_into};
use crate::progress::{Progress, Sample};
use crate::service::HubEvent;
use crest_model::convert::{self, FailureKind};
use crest_proto::pb::{self, coordinator_message::Msg as Out, worker_message::Msg as In};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Progress lines come once a second, the first a little after the first interval ends.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
const PROGRESS_FIRST: Duration = Duration::from_millis(1_100);

/// Collects one phase that started at `start` and is scheduled for `duration`, until every
/// worker has sent its finals or is lost.
///
/// # Errors
/// [`RunError::Interrupted`] when `interrupt` flips; [`RunError::Usage`] when a worker
/// cannot reach the target; [`RunError::Failed`] when a worker fails otherwise.
#[allow(clippy::too_many_arguments)]
pub(super) async fn collect(
    cfg: &RunConfig,
    events: &mut mpsc::UnboundedReceiver<HubEvent>,
    members: &mut [Member],
    run_id: &str,
    start: Instant,
    duration: Duration,
    interrupt: &watch::Receiver<bool>,
) -> Result<(), RunError> {
    let deadline = start + duration + cfg.drain + GRACE;
    // The highest interval index a worker can send in this phase (one past, for the drain's
    // partial interval); anything later is nonsense, not data.
    let last_index = u32::try_from(
        (duration + cfg.drain + GRACE).as_nanos() / cfg.interval.as_nanos().max(1) + 1,
    )
    .unwrap_or(u32::MAX);
    let mut progress = Progress::new();
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(start + PROGRESS_FIRST),
        PROGRESS_EVERY,
    );
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
            () = interrupted(interrupt) => {
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
                        if let Err(e) = m.books.add_interval(&iv, last_index) {
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
    let iv = u64::try_from(cfg.interval.as_nanos()).unwrap_or(u64::MAX);
    // `latest` is a worker-chosen index: saturate rather than overflow.
    let t0 = u64::from(latest).saturating_mul(iv);
    let per_s = 1e9 / iv as f64;
    Some(Sample {
        elapsed_s: start.elapsed().as_secs_f64().min(duration.as_secs_f64()),
        total_s: duration.as_secs_f64(),
        target_rate: (!cfg.closed_loop()).then(|| cfg.expected(t0, t0.saturating_add(iv)) * per_s),
        achieved_rate: all.completed as f64 * per_s,
        p99_us: all.latency.value_at_quantile(0.99) as f64 / 1_000.0,
        errors,
        alive: alive.len(),
        workers: members.len(),
    })
}
