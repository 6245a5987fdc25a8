//! The end of a run: the measured span settled (a stop's instant, an interrupt's last
//! whole interval, or the schedule), the books closed on it, the board's final counters,
//! and everything gathered into [`RunResults`].

use super::cluster::Fleet;
use super::collect::{self, Ended};
use super::measure::Measured;
use super::member::{interval_ns, measured_ns};
use super::target::Target;
use crate::config::RunConfig;
use crate::merge::{self, SumBy, WorkerBooks};
use crate::server_stats::ServerStats;
use crate::service::WorkerInfo;
use crest_report::TimelinePoint;
use std::time::{Duration, SystemTime};

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
    /// Run totals per (class, command), summed bucket by bucket: full histograms are
    /// made where a report reads them, one class at a time.
    pub totals: SumBy,
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
    /// `crest replay`: where the trace's stream ended, what was left out.
    pub replay: Option<crest_report::ReplayReport>,
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
        replay,
    } = m;
    let mut members = fleet.members;
    let interrupted = ended == Ended::Interrupted;
    let elapsed = match members.iter().filter_map(|m| m.finished_at).max() {
        Some(t) if !interrupted => t.saturating_duration_since(measured_start),
        _ => measured_start.elapsed(),
    };
    let stopped_ns = control.steering.stopped_at;
    let rows_span = rows_span(cfg, elapsed, interrupted, stopped_ns);
    for bad in books.close(merge::last_row(rows_span, interval_ns(cfg))) {
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
        totals: books.totals,
        timeline: books.timeline,
        late_intervals: books.late,
        server,
        coordinator_calls,
        checkpoints,
        changes: control.steering.rows,
        stopped_by: control.stopped_by,
        stopped_ns,
        profiles: books.profiles,
        replay,
    }
}

/// The span the timeline's rows cover, ns: up to a stop's instant, the measured span, or
/// for an interrupted run its last whole interval.
fn rows_span(cfg: &RunConfig, elapsed: Duration, interrupted: bool, stopped: Option<u64>) -> u64 {
    let span = match stopped {
        Some(s) if !interrupted => s.max(1),
        _ => measured_ns(cfg, elapsed, interrupted),
    };
    if interrupted {
        let iv = interval_ns(cfg);
        span - span % iv
    } else {
        span
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An open-loop run at 100/s for 2 s, intervals of 1 s.
    fn cfg() -> RunConfig {
        crate::cli::test_run(100.0, 2)
    }

    const MS: u64 = 1_000_000;

    /// A stop request ends the rows at its instant, to the nanosecond, whatever the
    /// schedule or the elapsed time say.
    #[test]
    fn a_stop_ends_the_rows_at_its_instant() {
        let cfg = cfg();
        let elapsed = Duration::from_millis(1900);
        assert_eq!(
            rows_span(&cfg, elapsed, false, Some(1_234_567_891)),
            1_234_567_891
        );
    }

    /// A stop at the very start still spans one nanosecond, never zero.
    #[test]
    fn a_stop_at_the_start_spans_one_nanosecond() {
        let cfg = cfg();
        assert_eq!(rows_span(&cfg, Duration::from_secs(1), false, Some(0)), 1);
    }

    /// An interrupt overrides a stop: the span is the elapsed time cut to its last whole
    /// interval, not the stop's instant.
    #[test]
    fn an_interrupt_wins_over_a_stop() {
        let cfg = cfg();
        let elapsed = Duration::from_millis(1700);
        assert_eq!(rows_span(&cfg, elapsed, true, Some(500 * MS)), 1000 * MS);
    }

    /// An interrupted run's rows end at the last whole interval before the interrupt.
    #[test]
    fn an_interrupted_run_ends_at_its_last_whole_interval() {
        let mut cfg = cfg();
        assert_eq!(
            rows_span(&cfg, Duration::from_millis(1999), true, None),
            1000 * MS
        );
        cfg.interval = Duration::from_millis(250);
        assert_eq!(
            rows_span(&cfg, Duration::from_millis(1300), true, None),
            1250 * MS
        );
        assert_eq!(
            rows_span(&cfg, Duration::from_millis(1500), true, None),
            1500 * MS
        );
    }

    /// An interrupt before the first interval ends leaves no row at all.
    #[test]
    fn an_interrupt_within_the_first_interval_leaves_no_rows() {
        let cfg = cfg();
        assert_eq!(rows_span(&cfg, Duration::from_millis(400), true, None), 0);
    }

    /// A run that neither stopped nor was interrupted covers its configured duration, not
    /// the time its workers took to finish.
    #[test]
    fn an_uninterrupted_run_covers_the_configured_duration() {
        let cfg = cfg();
        assert_eq!(
            rows_span(&cfg, Duration::from_millis(2700), false, None),
            2000 * MS
        );
        assert_eq!(
            rows_span(&cfg, Duration::from_millis(1200), false, None),
            2000 * MS
        );
    }

    /// A closed loop with no duration (bounded by a request count) covers the time it took,
    /// not cut to whole intervals.
    #[test]
    fn a_zero_duration_closed_loop_covers_its_elapsed_time() {
        let mut cfg = cfg();
        cfg.classes[0].profile = None;
        cfg.duration = Duration::ZERO;
        assert_eq!(
            rows_span(&cfg, Duration::from_millis(1500), false, None),
            1500 * MS
        );
    }
}
