//! The prefill phase: every key of each prefill class written once, closed loop, split
//! across the shards by key (sequential keys interleaved by shard), excluded from the
//! results. Only its totals are kept, for one line.

use super::cluster::Fleet;
use super::collect::{self, Collector, Ended};
use super::member::{RunError, UNBOUNDED_PHASE};
use super::phase;
use super::target::Target;
use crate::config::RunConfig;
use crate::merge::{self, RunBooks};
use crate::service::HubEvent;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// Runs the prefill of every class that asks for one (nothing when none does).
///
/// # Errors
/// [`RunError::Interrupted`] when the user interrupts it, [`RunError::Failed`] when a
/// worker is lost during it, and whatever a worker's failure is.
pub(super) async fn run(
    cfg: &RunConfig,
    target: &Target,
    fleet: &mut Fleet,
    events: &mut mpsc::Receiver<HubEvent>,
    interrupt: &watch::Receiver<bool>,
    admin: &crate::admin::Admin,
) -> Result<(), RunError> {
    let Some(phase) = plan(cfg) else {
        return Ok(());
    };
    let keys: u64 = phase.budgets.iter().flatten().sum();
    admin.publish(|b| b.phase = "prefill");
    eprintln!("crest: prefill: writing {keys} keys");
    let t0 = Instant::now();
    let for_member = |m: &_| target.for_member(cfg, m);
    let (run_id, _, _) =
        phase::start(cfg, &fleet.members, &phase, fleet.shards, &for_member).await?;
    // No timeline and no files: only the totals count.
    let last = collect::phase_last(cfg, UNBOUNDED_PHASE);
    let mut books = RunBooks::new(cfg, fleet.members.len(), last, Some(0), None);
    let span = (Instant::now(), UNBOUNDED_PHASE);
    let ended = Collector::new(cfg, &run_id, span, &mut fleet.members, &mut books)
        .run(events, interrupt)
        .await?;
    if ended == Ended::Interrupted {
        return Err(RunError::Interrupted);
    }
    let _ = books.close(0);
    for m in &mut fleet.members {
        if let Some(reason) = &m.lost {
            let name = &m.link.info.name;
            return Err(RunError::Failed(format!(
                "worker {name} lost during prefill: {reason}"
            )));
        }
        m.done = false;
        m.finished_at = None;
    }
    let t = merge::all_commands(&books.totals);
    let (written, errors) = (t.completed, t.error_total());
    eprintln!("crest: prefill: {}", line(written, errors, t0.elapsed()));
    let kinds: Vec<String> = t.errors.iter().map(|(k, n)| format!("{k}={n}")).collect();
    let unanswered = keys.saturating_sub(written.saturating_add(errors));
    let first = books.error_messages().into_iter().next();
    let words = match &first {
        Some((kind, m)) => format!(" (errors {}; first {kind}: \"{m}\")", kinds.join(" ")),
        None if !kinds.is_empty() => format!(" (errors {})", kinds.join(" ")),
        None => String::new(),
    };
    match verdict(keys, written) {
        Verdict::Nothing => Err(RunError::Usage(match first {
            // The server said why: its words.
            Some(_) => format!(
                "--prefill: the target took none of the {keys} keys: it refused every write{words}; fix the target or run without --prefill"
            ),
            // Nothing came back at all.
            None => {
                let mut what = kinds;
                if unanswered > 0 {
                    what.push(format!("{unanswered} unanswered"));
                }
                format!(
                    "--prefill: the target took none of the {keys} keys: it answered none of them in {:.1} s ({}); check that it is up and speaks RESP, or run without --prefill",
                    t0.elapsed().as_secs_f64(),
                    what.join(", ")
                )
            }
        })),
        Verdict::Partly(missing) => {
            eprintln!(
                "crest: warning: --prefill: {missing} of the {keys} keys were not written{words}: reads of them will miss"
            );
            Ok(())
        }
        Verdict::Whole => Ok(()),
    }
}

/// What a prefill came to.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Every key written.
    Whole,
    /// Some keys (this many) not written.
    Partly(u64),
    /// No key written: the run stops.
    Nothing,
}

fn verdict(keys: u64, written: u64) -> Verdict {
    if keys > 0 && written == 0 {
        Verdict::Nothing
    } else if written < keys {
        Verdict::Partly(keys - written)
    } else {
        Verdict::Whole
    }
}

/// The prefill phase's plan: one closed-loop class per prefill class, its key count the
/// budget (None: no class asks for a prefill).
fn plan(cfg: &RunConfig) -> Option<phase::Phase> {
    let classes: Vec<_> = cfg.classes.iter().filter(|c| c.prefill).collect();
    (!classes.is_empty()).then(|| phase::Phase {
        classes: classes.iter().map(|c| phase::prefill_class(c)).collect(),
        budgets: classes.iter().map(|c| Some(c.shape.keys.count)).collect(),
        conns: classes.iter().map(|c| c.connections).collect(),
        checkpoint_every: vec![None; classes.len()],
        warmup: Duration::ZERO,
    })
}

/// What the prefill did, for its line.
fn line(written: u64, errors: u64, took: Duration) -> String {
    let secs = took.as_secs_f64();
    let rate = written as f64 / secs.max(1e-9);
    format!("{written} keys written in {secs:.1} s ({rate:.0}/s), {errors} errors")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefill_line_reads_keys_rate_and_errors() {
        let l = line(100_000, 3, Duration::from_millis(2_500));
        assert_eq!(l, "100000 keys written in 2.5 s (40000/s), 3 errors");
        // An instant prefill does not divide by zero.
        assert!(line(0, 0, Duration::ZERO).starts_with("0 keys written in 0.0 s (0/s)"));
    }

    /// A prefill that wrote nothing stops the run; one that wrote part of the keys warns.
    #[test]
    fn a_prefill_that_wrote_nothing_stops_the_run() {
        assert_eq!(verdict(1000, 0), Verdict::Nothing);
        assert_eq!(verdict(1000, 990), Verdict::Partly(10));
        assert_eq!(verdict(1000, 1000), Verdict::Whole);
        assert_eq!(verdict(0, 0), Verdict::Whole);
    }
}
