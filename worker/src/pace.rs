//! When the shard's loop wakes: the pacer as a lag budget.
//!
//! Every request has an intended time and the pacer promises a schedule lag p99
//! ([`Pacer::lag_bound_ns`]: 100 µs for `sleep`, T + 100 µs for `sleep:T`). A loop that
//! wakes once per request pays a wake-up per request (6–25 µs of CPU on a VM) and at high
//! rates cannot sleep at all; a loop that polls burns its core. [`Pace`] spends the budget
//! instead: the loop sleeps until the first request due *plus an offset*, and one wake-up
//! sends every request due by then, each measured from its own intended time.
//!
//! The offset is set by feedback, not guessed: each scheduled request's lag as the loop
//! sees it (the turn's clock minus the intended time) goes into a small fixed histogram;
//! every epoch (at least [`EPOCH_NS`] and [`EPOCH_MIN`] requests, or [`EPOCH_MAX_NS`])
//! the offset moves by half the gap between the lag p90 of the last few epochs and the
//! goal, three fifths of the bound, at most a fifth of the goal per epoch. The p90, not
//! the p99: on a VM the p99 of a wake-up is the hypervisor's (a preempted or stolen
//! millisecond), which no offset fixes, and a controller chasing it swings from batching
//! to polling and back; the p90 is the pacer's own, and three fifths of the bound leaves
//! the p99 the room a wake-up's tail takes on a quiet core (sleeps of 50–200 µs overshoot
//! by 10–20 µs at p90 and ~50 µs at p99 here). At a high rate
//! the offset grows until a wake-up carries as many requests as the budget allows; at a
//! low rate on a VM whose sleeps overshoot (50–90 µs p99 for a 1 ms sleep here) it turns
//! negative: the loop wakes that much early and polls the rest of the way
//! ([`MAX_EARLY_NS`] at most, so a machine that cannot keep the bound costs a bounded
//! poll per wake-up, and its intervals are reported off pace with their cause).
//!
//! `spin` has no budget to spend: it polls. Pure logic on the clock it is given (the unit
//! tests drive it with synthetic lags).

use crest_model::plan::Pacer;

/// The loop may wake this much before the first request due at most, and poll the rest.
pub const MAX_EARLY_NS: u64 = 60_000;
/// An epoch lasts at least this long...
pub const EPOCH_NS: u64 = 20_000_000;
/// ...and holds at least this many requests (fewer at a low rate: see [`EPOCH_MAX_NS`]).
pub const EPOCH_MIN: u32 = 500;
/// An epoch with any request closes after this long whatever its count.
pub const EPOCH_MAX_NS: u64 = 200_000_000;
/// A wait shorter than this is a poll: the syscall and context switch of a sleep cost more.
pub const MIN_SLEEP_NS: u64 = 2_000;
/// Buckets of the lag histogram; they cover twice the bound, the last one is "more".
const BUCKETS: usize = 128;

/// The pacer's state in one shard.
#[derive(Debug, Clone)]
pub struct Pace {
    pacer: Pacer,
    /// The lag p90 the offset aims at.
    goal: u64,
    /// Sleep until the first request due plus this (negative: wake early and poll).
    offset: i64,
    /// Width of a histogram bucket.
    width: u64,
    lags: [u32; BUCKETS],
    count: u32,
    epoch_start: u64,
}

impl Pace {
    pub fn new(pacer: Pacer) -> Self {
        let bound = pacer.lag_bound_ns();
        Self {
            pacer,
            goal: bound / 5 * 3,
            offset: 0,
            width: (bound * 2 / BUCKETS as u64).max(1),
            lags: [0; BUCKETS],
            count: 0,
            epoch_start: 0,
        }
    }

    /// Whether the loop ever sleeps.
    #[inline]
    pub fn sleeps(&self) -> bool {
        !matches!(self.pacer, Pacer::Spin)
    }

    /// The current offset (ns past the first request due; negative: before it).
    #[cfg(test)]
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// When the loop should wake for a request due at `due`.
    #[inline]
    pub fn wake_for(&self, due: u64) -> u64 {
        if !self.sleeps() {
            return due;
        }
        due.saturating_add_signed(self.offset)
    }

    /// How long the loop may block at `now` when it must be awake at `wake`: 0 polls.
    #[inline]
    pub fn wait_ns(&self, now: u64, wake: u64) -> u64 {
        if !self.sleeps() {
            return 0;
        }
        let t = wake.saturating_sub(now);
        if t < MIN_SLEEP_NS { 0 } else { t }
    }

    /// One request scheduled `lag` ns after its intended time.
    #[inline]
    pub fn record(&mut self, lag: u64) {
        let b = ((lag / self.width) as usize).min(BUCKETS - 1);
        self.lags[b] += 1;
        self.count += 1;
    }

    /// End of a loop turn at `now`: closes the epoch when it is long and full enough and
    /// moves the offset towards the goal, at most a tenth of the bound per epoch (one
    /// hiccup moves it a little; a machine that stays slow moves it all the way), then
    /// halves the histogram (it remembers the last few epochs).
    #[inline]
    pub fn end_turn(&mut self, now: u64) {
        let age = now.saturating_sub(self.epoch_start);
        let full = self.count >= EPOCH_MIN && age >= EPOCH_NS;
        let old = self.count > 0 && age >= EPOCH_MAX_NS;
        if !(full || old) {
            if self.count == 0 && age >= EPOCH_MAX_NS {
                self.epoch_start = now;
            }
            return;
        }
        let p90 = self.p90();
        let most = (self.goal / 5) as i64;
        let step = ((self.goal as i64 - p90 as i64) / 2).clamp(-most, most);
        self.offset = (self.offset + step).clamp(-(MAX_EARLY_NS as i64), self.goal as i64);
        for n in &mut self.lags {
            *n /= 2;
        }
        self.count = 0;
        self.epoch_start = now;
    }

    /// The lag p90 of the last few epochs: the upper edge of the bucket that holds it.
    fn p90(&self) -> u64 {
        let total: u64 = self.lags.iter().map(|&n| u64::from(n)).sum();
        let want = (total * 9).div_ceil(10).max(1);
        let mut seen = 0;
        for (b, &n) in self.lags.iter().enumerate() {
            seen += u64::from(n);
            if seen >= want {
                return (b as u64 + 1) * self.width;
            }
        }
        BUCKETS as u64 * self.width
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1_000;

    /// Feeds `pace` epochs of 1,000 requests as a shard would see them: the loop wakes the
    /// offset past the first request due, plus the sleep's `overshoot` (never before it:
    /// a loop that wakes early polls until it is due). At a low rate (`batch` false) each
    /// wake-up sends one request, late by that much; at a high rate every request due
    /// while the loop slept goes at the wake-up, so lags spread evenly from 0 to that.
    /// Returns the offset after each epoch.
    fn settle(pace: &mut Pace, overshoot: i64, batch: bool, epochs: usize) -> Vec<i64> {
        let mut now = 0;
        let mut out = Vec::new();
        for _ in 0..epochs {
            let late = (pace.offset() + overshoot).max(0) as u64;
            for i in 0..1000u64 {
                pace.record(if batch { late * i / 1000 } else { late });
            }
            now += EPOCH_NS;
            pace.end_turn(now);
            out.push(pace.offset());
        }
        out
    }

    #[test]
    fn spin_never_sleeps_and_sleep_sleeps_until_the_wake_up_unless_it_is_too_close() {
        let spin = Pace::new(Pacer::Spin);
        assert!(!spin.sleeps());
        assert_eq!(spin.wait_ns(0, 5_000_000), 0);
        assert_eq!(spin.wake_for(70), 70);
        let sleep = Pace::new(Pacer::Sleep);
        assert_eq!(sleep.wait_ns(0, 5_000_000), 5_000_000);
        assert_eq!(sleep.wait_ns(0, MIN_SLEEP_NS - 1), 0, "too short: poll");
        assert_eq!(sleep.wait_ns(10 * US, 5 * US), 0, "late: poll");
        assert_eq!(sleep.wake_for(70), 70, "no offset before any epoch");
    }

    #[test]
    fn a_fast_wake_up_lets_the_offset_grow_until_the_batch_spends_the_budget() {
        // 10 µs overshoot at a high rate: lag p90 = 0.9 x (offset + 10 µs).
        let mut pace = Pace::new(Pacer::Sleep);
        let offs = settle(&mut pace, 10 * US as i64, true, 30);
        let goal = (Pacer::Sleep.lag_bound_ns() / 5 * 3) as i64;
        let off = *offs.last().unwrap();
        assert!(offs[..5].windows(2).all(|w| w[1] > w[0]), "grows: {offs:?}");
        // 0.9 x (57 µs + 10 µs) = the goal of 60 µs, within a bucket.
        assert!((55_000..=59_000).contains(&off), "{offs:?}");
        assert!((off + 10_000) * 9 / 10 <= goal + 2 * pace.width as i64);
        assert_eq!(pace.wake_for(1_000_000), 1_000_000 + off as u64);
    }

    #[test]
    fn a_late_wake_up_turns_the_offset_negative_but_no_earlier_than_the_cap() {
        // Every sleep overshoots by 90 µs at a low rate (one request per wake-up): the loop
        // wakes 30 µs early and polls.
        let mut pace = Pace::new(Pacer::Sleep);
        let offs = settle(&mut pace, 90 * US as i64, false, 30);
        let last = *offs.last().unwrap();
        assert!((-32_000..=-28_000).contains(&last), "{offs:?}");
        assert_eq!(pace.wake_for(1_000_000), 1_000_000 - last.unsigned_abs());
        assert_eq!(pace.wake_for(10), 0, "never before the start");
        // A machine that cannot keep the bound stops at the cap.
        let mut pace = Pace::new(Pacer::Sleep);
        let offs = settle(&mut pace, 500 * US as i64, false, 20);
        assert_eq!(*offs.last().unwrap(), -(MAX_EARLY_NS as i64));
    }

    #[test]
    fn a_tolerance_is_budget_the_offset_spends() {
        // sleep:1ms at a low rate: the loop sleeps past the first due by most of 1.1 ms.
        let mut pace = Pace::new(Pacer::SleepWithin(1_000_000));
        let offs = settle(&mut pace, 10 * US as i64, false, 30);
        let last = *offs.last().unwrap();
        // The goal: three fifths of 1.1 ms, less the overshoot.
        assert!((630_000..=650_000).contains(&last), "{offs:?}");
    }

    #[test]
    fn epochs_close_on_time_and_count_and_a_quiet_shard_keeps_its_offset() {
        let mut pace = Pace::new(Pacer::Sleep);
        for _ in 0..(EPOCH_MIN - 1) {
            pace.record(10 * US);
        }
        pace.end_turn(EPOCH_NS * 2);
        assert_eq!(pace.offset(), 0, "too few requests for an epoch");
        pace.record(10 * US);
        pace.end_turn(EPOCH_NS * 2);
        assert!(pace.offset() > 0, "full and old enough");
        let off = pace.offset();
        // Nothing scheduled for a long time: the offset stays.
        pace.end_turn(EPOCH_NS * 2 + EPOCH_MAX_NS * 5);
        assert_eq!(pace.offset(), off);
        // A low rate: a few requests close an epoch once it is old (late ones: they outweigh
        // what is left of the earlier epoch).
        for _ in 0..40 {
            pace.record(200 * US);
        }
        pace.end_turn(EPOCH_NS * 2 + EPOCH_MAX_NS * 5 + EPOCH_NS);
        assert_eq!(pace.offset(), off, "young and small: still open");
        pace.end_turn(EPOCH_NS * 2 + EPOCH_MAX_NS * 7);
        assert!(pace.offset() < off, "old: closed on a few late requests");
    }

    #[test]
    fn p90_reads_the_bucket_that_holds_it_and_lags_past_the_range_count_as_the_top() {
        let mut pace = Pace::new(Pacer::Sleep);
        for _ in 0..90 {
            pace.record(0);
        }
        for _ in 0..10 {
            pace.record(10_000_000);
        }
        assert_eq!(pace.p90(), pace.width, "90 of 100 in the first bucket");
        pace.record(10_000_000);
        assert_eq!(pace.p90(), BUCKETS as u64 * pace.width);
    }
}
