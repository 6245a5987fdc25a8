//! The books of a run: every interval each worker sent, its final totals, and the checks
//! that the two agree. Merging is histogram addition; percentiles are only ever read off
//! merged histograms, never averaged.

use crest_model::convert;
use crest_model::hist::HistError;
use crest_model::stats::{CmdStats, ErrorCounts, add_error};
use crest_proto::pb;
use std::collections::BTreeMap;

/// Per-command results, keyed by (class, command).
pub type ByCommand = BTreeMap<(String, String), CmdStats>;

/// Results summed by command name across classes.
pub fn by_name(by: &ByCommand) -> BTreeMap<String, CmdStats> {
    let mut out: BTreeMap<String, CmdStats> = BTreeMap::new();
    for ((_, cmd), s) in by {
        *out.entry(cmd.clone()).or_default() += s;
    }
    out
}

/// Results of one class, by command name.
pub fn of_class(by: &ByCommand, class: &str) -> BTreeMap<String, CmdStats> {
    by.iter()
        .filter(|((c, _), _)| c == class)
        .map(|((_, cmd), s)| (cmd.clone(), s.clone()))
        .collect()
}

/// Adds `b` into `a`.
pub fn add_into(a: &mut ByCommand, b: &ByCommand) {
    for (k, v) in b {
        *a.entry(k.clone()).or_default() += v;
    }
}

/// Sum over every command.
pub fn all_commands(by: &ByCommand) -> CmdStats {
    sum(by.values())
}

/// The sum of some results (histograms added, counts summed).
pub fn sum<'a>(stats: impl IntoIterator<Item = &'a CmdStats>) -> CmdStats {
    let mut t = CmdStats::default();
    for v in stats {
        t += v;
    }
    t
}

fn decode(cmds: &[pb::CommandStats]) -> Result<ByCommand, HistError> {
    let mut out = ByCommand::new();
    for c in cmds {
        let (class, name, s) = convert::stats_from_pb(c)?;
        *out.entry((class, name)).or_default() += &s;
    }
    Ok(out)
}

/// An interval a worker sent that the books cannot take.
#[derive(Debug, thiserror::Error)]
pub enum BooksError {
    /// A histogram does not decode.
    #[error(transparent)]
    Hist(#[from] HistError),
    /// An interval index past the end of the phase.
    #[error("interval index {index} is past the phase's last interval {last}")]
    Index {
        /// The index sent.
        index: u32,
        /// The highest index the phase can have.
        last: u32,
    },
    /// A target rate that is not a finite number ≥ 0.
    #[error("interval target rate {0} is not a finite number ≥ 0")]
    Rate(f64),
}

/// A worker's final message.
#[derive(Debug, Clone, Default)]
pub struct Final {
    /// Totals per command, as the worker summed them.
    pub totals: ByCommand,
    /// Sent, unanswered at the end.
    pub in_flight: u64,
    /// Scheduled, never written.
    pub unsent: u64,
    /// Intervals the worker says it sent.
    pub intervals: u32,
    /// Connection failures.
    pub connection_errors: ErrorCounts,
    /// The server's first message of each error kind.
    pub error_messages: Vec<(String, String)>,
}

/// One worker's part of the books.
#[derive(Debug, Clone, Default)]
pub struct WorkerBooks {
    /// Intervals received, by index.
    pub intervals: BTreeMap<u32, ByCommand>,
    /// Failed requests in every interval received so far (kept as they arrive, for progress).
    pub errors: u64,
    /// The worker's own target rate (requests per second due) for each interval received.
    pub targets: BTreeMap<u32, f64>,
    /// The final message, when it came.
    pub final_: Option<Final>,
    /// Why the worker was lost, if it was.
    pub lost: Option<String>,
}

impl WorkerBooks {
    /// Adds one interval message; `last` is the highest interval index the phase can have
    /// (its schedule, drain and grace), so a worker cannot grow the books without bound.
    ///
    /// # Errors
    /// [`BooksError`] when a histogram does not decode, or the index or rate is nonsense.
    pub fn add_interval(&mut self, iv: &pb::Interval, last: u32) -> Result<(), BooksError> {
        if iv.index > last {
            return Err(BooksError::Index {
                index: iv.index,
                last,
            });
        }
        if !(iv.target_rate.is_finite() && iv.target_rate >= 0.0) {
            return Err(BooksError::Rate(iv.target_rate));
        }
        let by = decode(&iv.commands)?;
        self.errors += by.values().map(CmdStats::error_total).sum::<u64>();
        add_into(self.intervals.entry(iv.index).or_default(), &by);
        *self.targets.entry(iv.index).or_default() += iv.target_rate;
        Ok(())
    }

    /// Records the final message.
    ///
    /// # Errors
    /// [`HistError`] when a histogram does not decode.
    pub fn finish(&mut self, f: &pb::Finished) -> Result<(), HistError> {
        self.final_ = Some(Final {
            totals: decode(&f.totals)?,
            in_flight: f.in_flight,
            unsent: f.unsent,
            intervals: f.intervals,
            connection_errors: convert::errors_from_pb(&f.connection_errors),
            error_messages: convert::messages_from_pb(&f.error_messages),
        });
        Ok(())
    }

    /// The sum of every interval received: the worker's results as the books hold them.
    pub fn sum(&self) -> ByCommand {
        let mut t = ByCommand::new();
        for by in self.intervals.values() {
            add_into(&mut t, by);
        }
        t
    }

    /// Disagreements between the intervals (`sum`, from [`WorkerBooks::sum`]) and the final
    /// totals, each as one sentence.
    pub fn check(&self, name: &str, sum: &ByCommand) -> Vec<String> {
        let Some(f) = &self.final_ else {
            return vec![format!(
                "worker {name}: no final totals ({}); its {} intervals received are counted",
                self.lost.as_deref().unwrap_or("never finished"),
                self.intervals.len()
            )];
        };
        let mut problems = Vec::new();
        if f.intervals as usize != self.intervals.len() {
            problems.push(format!(
                "worker {name}: sent {} intervals, {} received",
                f.intervals,
                self.intervals.len()
            ));
        }
        let empty = CmdStats::default();
        for (key, t) in &f.totals {
            let s = sum.get(key).unwrap_or(&empty);
            let cmd = format!("{}/{}", key.0, key.1);
            let pairs = [
                ("scheduled", s.scheduled, t.scheduled),
                ("sent", s.sent, t.sent),
                ("completed", s.completed, t.completed),
                ("errors", s.error_total(), t.error_total()),
                ("latency samples", s.latency.len(), t.latency.len()),
                (
                    "service-time samples",
                    s.service_time.len(),
                    t.service_time.len(),
                ),
                (
                    "schedule-lag samples",
                    s.schedule_lag.len(),
                    t.schedule_lag.len(),
                ),
            ];
            for (what, a, b) in pairs {
                if a != b {
                    problems.push(format!(
                        "worker {name} {cmd}: intervals add up to {a} {what}, totals say {b}"
                    ));
                }
            }
            if s.latency != t.latency {
                problems.push(format!(
                    "worker {name} {cmd}: merged interval latency histogram differs from the total"
                ));
            }
        }
        // Every scheduled request is accounted for: answered, failed, in flight or unsent.
        let all = all_commands(&f.totals);
        // Peer numbers: saturate, so a hostile total reads as a mismatch, not an overflow.
        let accounted = all
            .completed
            .saturating_add(all.error_total())
            .saturating_add(f.in_flight)
            .saturating_add(f.unsent);
        if accounted != all.scheduled {
            problems.push(format!(
                "worker {name}: {} scheduled but {} accounted for (completed {} + errors {} + in flight {} + unsent {})",
                all.scheduled,
                accounted,
                all.completed,
                all.error_total(),
                f.in_flight,
                f.unsent
            ));
        }
        problems
    }
}

/// The first message of each error kind over the workers that finished (the first
/// worker's, in order, when several saw a kind).
pub fn error_messages<'a>(
    workers: impl Iterator<Item = &'a WorkerBooks>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for f in workers.filter_map(|w| w.final_.as_ref()) {
        for (k, m) in &f.error_messages {
            out.entry(k.clone()).or_insert_with(|| m.clone());
        }
    }
    out
}

/// Connection errors summed over workers.
pub fn connection_errors<'a>(workers: impl Iterator<Item = &'a WorkerBooks>) -> ErrorCounts {
    let mut out = Vec::new();
    for w in workers {
        if let Some(f) = &w.final_ {
            for (k, n) in &f.connection_errors {
                add_error(&mut out, k, *n);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crest_model::hist;

    fn cmd(name: &str, values: &[u64], scheduled: u64) -> pb::CommandStats {
        let mut s = CmdStats {
            scheduled,
            sent: scheduled,
            completed: values.len() as u64,
            ..Default::default()
        };
        for &v in values {
            hist::record(&mut s.latency, v);
            hist::record(&mut s.service_time, v / 2);
            hist::record(&mut s.schedule_lag, 10);
        }
        convert::stats_to_pb("c", &[s], &[name.to_string()]).remove(0)
    }

    /// A worker cannot grow the books past the phase, nor feed them a NaN rate.
    #[test]
    fn intervals_past_the_phase_or_with_nonsense_rates_are_refused() {
        let mut w = WorkerBooks::default();
        let iv = |index, target_rate| pb::Interval {
            run_id: "r".into(),
            index,
            commands: vec![],
            target_rate,
            error_messages: vec![],
        };
        assert!(matches!(
            w.add_interval(&iv(u32::MAX, 1.0), 10),
            Err(BooksError::Index {
                index: u32::MAX,
                last: 10
            })
        ));
        assert!(matches!(
            w.add_interval(&iv(3, f64::NAN), 10),
            Err(BooksError::Rate(_))
        ));
        assert!(matches!(
            w.add_interval(&iv(3, -1.0), 10),
            Err(BooksError::Rate(_))
        ));
        w.add_interval(&iv(10, 1.0), 10).unwrap();
        assert_eq!(w.intervals.len(), 1);
    }

    #[test]
    fn intervals_that_add_up_pass_and_a_missing_one_is_named() {
        let mut w = WorkerBooks::default();
        let a = [100, 200, 300];
        let b = [5_000, 6_000];
        w.add_interval(
            &pb::Interval {
                run_id: "r".into(),
                index: 0,
                commands: vec![cmd("GET", &a, 3)],
                target_rate: 3.0,
                error_messages: vec![],
            },
            10,
        )
        .unwrap();
        w.add_interval(
            &pb::Interval {
                run_id: "r".into(),
                index: 1,
                commands: vec![cmd("GET", &b, 2)],
                target_rate: 2.0,
                error_messages: vec![],
            },
            10,
        )
        .unwrap();
        let all: Vec<u64> = a.iter().chain(&b).copied().collect();
        let fin = pb::Finished {
            run_id: "r".into(),
            totals: vec![cmd("GET", &all, 5)],
            in_flight: 0,
            unsent: 0,
            intervals: 2,
            connection_errors: vec![],
            error_messages: vec![],
        };
        w.finish(&fin).unwrap();
        assert_eq!(w.check("w1", &w.sum()), Vec::<String>::new());
        assert_eq!(
            w.sum()[&("c".to_string(), "GET".to_string())].latency.len(),
            5
        );

        let mut short = w.clone();
        short.intervals.remove(&1);
        let p = short.check("w1", &short.sum());
        assert!(
            p.iter().any(|s| s.contains("sent 2 intervals, 1 received")),
            "{p:?}"
        );
        assert!(p.iter().any(|s| s.contains("completed")), "{p:?}");
    }
}
