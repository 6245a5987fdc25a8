//! Runtime control of a running phase: a request (the admin API's `PUT /rate`, pause,
//! resume and stop; `crest search`'s steps) becomes one [`Change`] at one instant on the
//! run's clock, sent to every worker; the coordinator splices the same change into its
//! own profiles (the timeline's target rates) and keeps a row per change for the report,
//! with the instants each worker's shards switched at.
//!
//! A change takes effect [`LEAD`] plus the slowest worker's round trip after it is asked
//! for, so every shard reads it before its instant (a shard looks once per loop turn and
//! sleeps at most 20 ms) and every worker switches at the same instant, to within the
//! clock offsets' error.

use crate::control::{Action, Refusal, Request};
use crest_model::convert::limits;
use crest_model::schedule::{Change, Profile, Steer};
use crest_report::{ChangeRow, Switched};
use tokio::sync::mpsc;

/// How far ahead of now a change is placed, before the slowest worker's round trip.
pub const LEAD: std::time::Duration = std::time::Duration::from_millis(100);

/// Runtime control of the measured phase: where requests come from, and the state.
#[derive(Debug)]
pub struct Control {
    /// Requests (the admin API's); None: nobody can ask.
    pub rx: Option<mpsc::Receiver<Request>>,
    /// The admin API's board, published after every finalized interval and change.
    pub admin: Option<crate::admin::Admin>,
    /// The HTTP API serves `/metrics`: the board carries counters and latency bins.
    pub metrics: bool,
    /// The changes and the instructions in force.
    pub steering: Steering,
    /// Who stopped the run, when a stop request did.
    pub stopped_by: Option<&'static str>,
    /// Each finalized timeline row, as it is laid out, for an in-process watcher (`crest
    /// search` cuts a climb window short through it).
    pub points: Option<Points>,
}

/// The sending side of a run's live timeline: the latest finalized row (None before the
/// first). A `watch`: a watcher that falls behind sees the latest row, never a queue.
pub type Points = tokio::sync::watch::Sender<Option<crest_report::TimelinePoint>>;

/// The coordinator's side of runtime changes in one phase.
#[derive(Debug)]
pub struct Steering {
    names: Vec<String>,
    /// The plan's profiles, measured clock (None: closed loop).
    plan: Vec<Option<Profile>>,
    /// Each class's instruction in force.
    now: Vec<Steer>,
    /// The instructions before a pause (Some while paused).
    paused: Option<Vec<Steer>>,
    seq: u32,
    warmup_ns: u64,
    /// The highest total rate the shards can schedule.
    max_rps: f64,
    /// Every change so far.
    pub rows: Vec<ChangeRow>,
    /// The instant a stop ends the phase at, ns on the measured clock.
    pub stopped_at: Option<u64>,
}

impl Steering {
    /// Control of a phase of classes `names` with `plan` profiles (measured clock), a
    /// warm-up of `warmup_ns` before the measured start, on `shards` shards.
    pub fn new(
        names: Vec<String>,
        plan: Vec<Option<Profile>>,
        warmup_ns: u64,
        shards: u32,
    ) -> Self {
        Self {
            now: vec![Steer::Follow; names.len()],
            names,
            plan,
            paused: None,
            seq: 0,
            warmup_ns,
            max_rps: f64::from(shards.max(1)) * limits::MAX_RATE_PER_SHARD,
            rows: Vec::new(),
            stopped_at: None,
        }
    }

    /// Whether a pause is in force.
    pub fn paused(&self) -> bool {
        self.paused.is_some()
    }

    /// Plans `action` asked at `asked_ns` to take effect at `at_ns` (both measured clock):
    /// splices `profiles` (the books') and returns the change for the workers (run clock)
    /// with its report row. [`Action::Stop`] ends the phase at `at_ns`: every profile is
    /// cut there and the change tells the workers to end (drain, finals) as at a
    /// scheduled end.
    ///
    /// # Errors
    /// [`Refusal`] naming what is wrong and what would be right.
    pub fn plan(
        &mut self,
        action: &Action,
        by: &'static str,
        asked_ns: u64,
        at_ns: u64,
        profiles: &mut [Option<Profile>],
    ) -> Result<(Change, ChangeRow), Refusal> {
        let open: Vec<usize> = (0..self.names.len())
            .filter(|&i| self.plan[i].is_some())
            .collect();
        if let Some(at) = self.stopped_at {
            // One stop ends the phase: a second, or a change after it, would be recorded
            // as if it did something.
            return Err(Refusal::Conflict(format!(
                "the run was stopped at {:.3} s and is ending: nothing more to change",
                at as f64 / 1e9
            )));
        }
        if *action == Action::Stop {
            return Ok(self.stop(by, asked_ns, at_ns, profiles));
        }
        if open.is_empty() {
            return Err(Refusal::Conflict(
                "every class is closed loop (--rate max): there is no rate to change".into(),
            ));
        }
        let rate_at = |p: &Option<Profile>| p.as_ref().map_or(0.0, |p| p.rate_at(at_ns));
        let from: f64 = profiles.iter().map(rate_at).sum();
        let next: Vec<Steer> = match action {
            Action::Stop => {
                return Err(Refusal::Conflict(
                    "stop ends the phase; it is not a change".into(),
                ));
            }
            Action::Pause if self.paused() => {
                return Err(Refusal::Conflict("already paused: POST /resume".into()));
            }
            Action::Resume if !self.paused() => {
                return Err(Refusal::Conflict("not paused: nothing to resume".into()));
            }
            Action::Rate { .. } if self.paused() => {
                return Err(Refusal::Conflict(
                    "paused: POST /resume first, then set the rate".into(),
                ));
            }
            Action::Pause => {
                self.paused = Some(self.now.clone());
                vec![Steer::Hold(0.0); self.names.len()]
            }
            Action::Resume => self.paused.take().unwrap_or_else(|| self.now.clone()),
            Action::Rate { rps, class } => {
                self.rated(*rps, class.as_deref(), &open, at_ns, profiles)?
            }
        };
        for (i, how) in next.iter().enumerate() {
            if let (Some(p), Some(plan)) = (&mut profiles[i], &self.plan[i]) {
                *p = how.apply(p, plan, at_ns, 1.0);
            }
        }
        if !matches!(action, Action::Pause) {
            self.now = next.clone();
        }
        self.seq += 1;
        let to: f64 = profiles.iter().map(rate_at).sum();
        let row = ChangeRow {
            seq: self.seq,
            action: action.name().into(),
            by: by.into(),
            asked_s: asked_ns as f64 / 1e9,
            at_s: at_ns as f64 / 1e9,
            from_rps: from,
            to_rps: to,
            classes: open
                .iter()
                .map(|&i| (self.names[i].clone(), rate_at(&profiles[i])))
                .collect(),
            workers: Vec::new(),
        };
        self.rows.push(row.clone());
        let change = Change {
            seq: self.seq,
            at_ns: at_ns.saturating_add(self.warmup_ns),
            classes: next,
            end: false,
        };
        Ok((change, row))
    }

    /// The instructions after a new rate: for one class, or for all in proportion to
    /// their rates at the instant (to the plan's mean rates when those are all 0; evenly
    /// when those are too).
    fn rated(
        &self,
        rps: f64,
        class: Option<&str>,
        open: &[usize],
        at_ns: u64,
        profiles: &[Option<Profile>],
    ) -> Result<Vec<Steer>, Refusal> {
        let rate_at = |p: &Option<Profile>| p.as_ref().map_or(0.0, |p| p.rate_at(at_ns));
        if !(rps.is_finite() && rps >= 0.0) {
            return Err(Refusal::Bad(format!(
                "rate {rps}: give a number of requests per second ≥ 0"
            )));
        }
        if rps > self.max_rps {
            return Err(Refusal::Bad(format!(
                "rate {rps}: over the {:.0}/s the run's shards can schedule ({:.0} per shard); give at most that",
                self.max_rps,
                limits::MAX_RATE_PER_SHARD
            )));
        }
        let mut next = self.now.clone();
        match class {
            Some(name) => {
                let Some(i) = self.names.iter().position(|n| n == name) else {
                    return Err(Refusal::Bad(format!(
                        "class {name}: no such class; the run's classes are {}",
                        self.names.join(", ")
                    )));
                };
                if self.plan[i].is_none() {
                    return Err(Refusal::Conflict(format!(
                        "class {name} is closed loop (--rate max): it has no rate to change"
                    )));
                }
                next[i] = Steer::Hold(rps);
            }
            None => {
                // In proportion to the rates at the instant; when those are all 0,
                // to the plan's mean rates; when those are too, evenly.
                let mut w: Vec<f64> = open.iter().map(|&i| rate_at(&profiles[i])).collect();
                if w.iter().sum::<f64>() <= 0.0 {
                    w = open
                        .iter()
                        .map(|&i| {
                            self.plan[i]
                                .as_ref()
                                .map_or(0.0, |p| p.total() / (p.duration_ns().max(1) as f64 / 1e9))
                        })
                        .collect();
                }
                if w.iter().sum::<f64>() <= 0.0 {
                    w = vec![1.0; open.len()];
                }
                let sum: f64 = w.iter().sum();
                for (k, &i) in open.iter().enumerate() {
                    next[i] = Steer::Hold(rps * w[k] / sum);
                }
            }
        }
        Ok(next)
    }

    /// A stop at `at_ns`: profiles cut there, the change that ends the workers' run.
    fn stop(
        &mut self,
        by: &'static str,
        asked_ns: u64,
        at_ns: u64,
        profiles: &mut [Option<Profile>],
    ) -> (Change, ChangeRow) {
        self.seq += 1;
        let rate_at = |p: &Option<Profile>| p.as_ref().map_or(0.0, |p| p.rate_at(at_ns));
        let from = profiles.iter().map(rate_at).sum();
        for p in profiles.iter_mut().flatten() {
            *p = p.until(at_ns);
        }
        self.stopped_at = Some(at_ns);
        let row = ChangeRow {
            seq: self.seq,
            action: Action::Stop.name().into(),
            by: by.into(),
            asked_s: asked_ns as f64 / 1e9,
            at_s: at_ns as f64 / 1e9,
            from_rps: from,
            to_rps: 0.0,
            classes: Vec::new(),
            workers: Vec::new(),
        };
        self.rows.push(row.clone());
        let change = Change {
            seq: self.seq,
            at_ns: at_ns.saturating_add(self.warmup_ns),
            classes: vec![Steer::Follow; self.names.len()],
            end: true,
        };
        (change, row)
    }

    /// The rates in force at `at_ns` (measured clock), per class (None: closed loop).
    pub fn rates(&self, at_ns: u64, profiles: &[Option<Profile>]) -> Vec<(String, Option<f64>)> {
        self.names
            .iter()
            .zip(profiles)
            .map(|(n, p)| (n.clone(), p.as_ref().map(|p| p.rate_at(at_ns))))
            .collect()
    }

    /// Worker `worker`'s shards switched at change `seq` between `first_ns` and `last_ns`
    /// (run clock).
    pub fn followed(&mut self, seq: u32, worker: &str, first_ns: u64, last_ns: u64) {
        let w = self.warmup_ns;
        let s = |ns: u64| ns.saturating_sub(w) as f64 / 1e9;
        if let Some(row) = self.rows.iter_mut().find(|r| r.seq == seq) {
            row.workers.push(Switched {
                worker: worker.to_string(),
                first_s: s(first_ns),
                last_s: s(last_ns),
            });
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn two_classes() -> (Steering, Vec<Option<Profile>>) {
        let plan = vec![
            Some(Profile::constant(900.0, 10 * S).unwrap()),
            Some(Profile::constant(100.0, 10 * S).unwrap()),
            None,
        ];
        let names = vec!["reads".into(), "writes".into(), "scan".into()];
        (Steering::new(names, plan.clone(), 2 * S, 4), plan)
    }

    #[test]
    fn a_total_rate_keeps_the_classes_in_proportion_and_splices_at_the_instant() {
        let (mut s, mut p) = two_classes();
        let rate = Action::Rate {
            rps: 2_000.0,
            class: None,
        };
        let (c, row) = s.plan(&rate, "admin", S, 3 * S, &mut p).unwrap();
        assert_eq!(
            c.at_ns,
            5 * S,
            "run clock: the warm-up before the measured start"
        );
        assert_eq!(c.classes[0], Steer::Hold(1_800.0));
        assert_eq!(c.classes[1], Steer::Hold(200.0));
        assert_eq!(c.classes[2], Steer::Follow, "closed loop: untouched");
        assert_eq!((row.from_rps, row.to_rps), (1_000.0, 2_000.0));
        let p0 = p[0].as_ref().unwrap();
        assert!((p0.expected(0, 3 * S) - 2_700.0).abs() < 1e-6);
        assert!((p0.expected(3 * S, 4 * S) - 1_800.0).abs() < 1e-6);
        assert_eq!(p0.duration_ns(), 10 * S, "the run's length holds");
    }

    #[test]
    fn pause_then_resume_restores_what_was_in_force() {
        let (mut s, mut p) = two_classes();
        let one = Action::Rate {
            rps: 50.0,
            class: Some("writes".into()),
        };
        s.plan(&one, "admin", 0, S, &mut p).unwrap();
        let (c, row) = s.plan(&Action::Pause, "admin", 0, 2 * S, &mut p).unwrap();
        assert_eq!(c.classes[..2], [Steer::Hold(0.0), Steer::Hold(0.0)]);
        assert_eq!((row.from_rps, row.to_rps), (950.0, 0.0));
        assert!(matches!(
            s.plan(&one, "admin", 0, 3 * S, &mut p),
            Err(Refusal::Conflict(_))
        ));
        let (c, row) = s.plan(&Action::Resume, "admin", 0, 4 * S, &mut p).unwrap();
        assert_eq!(c.classes[..2], [Steer::Follow, Steer::Hold(50.0)]);
        assert_eq!(row.to_rps, 950.0);
        assert!((p[1].as_ref().unwrap().expected(2 * S, 4 * S)).abs() < 1e-9);
        assert_eq!(s.rows.len(), 3);
        assert_eq!(c.seq, 3);
    }

    #[test]
    fn a_stop_cuts_every_profile_and_tells_the_workers_to_end() {
        let (mut s, mut p) = two_classes();
        let (c, row) = s.plan(&Action::Stop, "admin", S, 3 * S, &mut p).unwrap();
        assert!(c.end);
        assert_eq!(c.at_ns, 5 * S);
        assert_eq!((row.from_rps, row.to_rps), (1_000.0, 0.0));
        assert_eq!(p[0].as_ref().unwrap().duration_ns(), 3 * S);
        assert_eq!(s.stopped_at, Some(3 * S));
        // A second stop, or any change after it, is refused and recorded nowhere.
        for again in [Action::Stop, Action::Pause] {
            match s.plan(&again, "admin", 4 * S, 4 * S, &mut p) {
                Err(Refusal::Conflict(why)) => assert_eq!(
                    why,
                    "the run was stopped at 3.000 s and is ending: nothing more to change"
                ),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(s.rows.len(), 1);
    }

    #[test]
    fn bad_requests_say_what_would_be_right() {
        let (mut s, mut p) = two_classes();
        let bad = |rps: f64, class: Option<&str>| Action::Rate {
            rps,
            class: class.map(String::from),
        };
        for (a, word) in [
            (bad(-1.0, None), "≥ 0"),
            (bad(f64::NAN, None), "≥ 0"),
            (bad(1e12, None), "at most"),
            (bad(1.0, Some("nope")), "reads, writes, scan"),
        ] {
            let e = s.plan(&a, "admin", 0, S, &mut p).unwrap_err();
            assert!(
                matches!(e, Refusal::Bad(_)) && e.to_string().contains(word),
                "{e}"
            );
        }
        let e = s
            .plan(&bad(1.0, Some("scan")), "admin", 0, S, &mut p)
            .unwrap_err();
        assert!(matches!(e, Refusal::Conflict(_)), "{e}");
        assert!(s.rows.is_empty(), "nothing refused is on the books");
    }
}
