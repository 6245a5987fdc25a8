//! The end of a run: the measured span settled (a stop's instant, an interrupt's last
//! whole interval, or the schedule), the books closed on it, the board's final counters,
//! and everything gathered into [`RunResults`].

use super::cluster::Fleet;
use super::collect::{self, Ended};
use super::measure::Measured;
use super::target::Target;
use super::{RunResults, WorkerResult};
use crate::config::RunConfig;
use crate::merge;
use std::time::Duration;

/// Closes the books of the measured phase and gathers the run's results.
pub(super) fn assemble(cfg: &RunConfig, target: &Target, fleet: Fleet, m: Measured) -> RunResults {
    let Measured {
        run_id,
        started_at,
        measured_start,
        ended,
        budget,
        mut books,
        control,
        checkpoints,
        server,
    } = m;
    let mut members = fleet.members;
    let interrupted = ended == Ended::Interrupted;
    let elapsed = match members.iter().filter_map(|m| m.finished_at).max() {
        Some(t) if !interrupted => t.saturating_duration_since(measured_start),
        _ => measured_start.elapsed(),
    };
    let stopped_ns = control.steering.stopped_at;
    let rows_span = rows_span(cfg, elapsed, interrupted, stopped_ns);
    for bad in books.close(merge::last_row(rows_span, super::interval_ns(cfg))) {
        // Unreadable at the very end: the worker is lost, what it sent before counts.
        if let Some(m) = members.get_mut(bad.worker) {
            m.lost
                .get_or_insert_with(|| format!("sent an unreadable interval: {}", bad.error));
        }
    }
    // The final counters: every worker's totals are in the books now.
    collect::publish(&control, &members, &books, &run_id, measured_start, budget);
    let (coordinator_calls, checkpoints) = match checkpoints {
        Some(c) => (c.calls, c.rows),
        None => Default::default(),
    };
    RunResults {
        run_id,
        started_at: started_at + cfg.warmup,
        elapsed,
        builtin_target: target.builtin(),
        interrupted,
        live_errors: books.live_errors(),
        error_messages: books.error_messages(),
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
        server,
        coordinator_calls,
        checkpoints,
        changes: control.steering.rows,
        stopped_by: control.stopped_by,
        stopped_ns,
        profiles: books.profiles,
    }
}

/// The span the timeline's rows cover, ns: up to a stop's instant, the measured span, or
/// for an interrupted run its last whole interval.
fn rows_span(cfg: &RunConfig, elapsed: Duration, interrupted: bool, stopped: Option<u64>) -> u64 {
    let span = match stopped {
        Some(s) if !interrupted => s.max(1),
        _ => super::measured_ns(cfg, elapsed, interrupted),
    };
    if interrupted {
        let iv = super::interval_ns(cfg);
        span - span % iv
    } else {
        span
    }
}
