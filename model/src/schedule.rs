//! Intended send times: a piecewise-linear rate function λ(t) and the open-loop arrival
//! process that follows it.
//!
//! The n-th request of a shard is due at Λ⁻¹(xₙ), where Λ(t) = ∫₀ᵗ λ is the expected
//! number of requests by time t. Uniform arrivals use xₙ = n + phase: each time is computed
//! from the start, never from the previous one, so nothing drifts (wrk2's `start + n/rate`
//! generalised to a changing rate). Poisson arrivals use xₙ = xₙ₋₁ + Exp(1): a unit-rate
//! Poisson process mapped through Λ⁻¹ is a non-homogeneous Poisson process with rate λ(t)
//! (time rescaling). ETC arrivals use xₙ = xₙ₋₁ + a unit-mean generalized-Pareto gap, a
//! renewal process mapped the same way. A segment whose rate is 0 simply holds no
//! arrivals.

use crate::rng::Rng;

const NS: f64 = 1e9;

/// A stretch of the profile whose rate moves linearly from `from_rps` to `to_rps`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    /// Length of the segment.
    pub duration_ns: u64,
    /// Rate at the segment's start, requests per second.
    pub from_rps: f64,
    /// Rate at the segment's end; equal to `from_rps` for a hold.
    pub to_rps: f64,
}

/// A rate function of time made of consecutive linear segments, starting at t = 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    segments: Vec<Segment>,
    /// Start time (ns) and Λ (requests) at the start of each segment, plus one entry for the end.
    starts_ns: Vec<u64>,
    cum: Vec<f64>,
}

/// A profile that cannot be run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProfileError {
    /// A rate below zero, or not a finite number.
    #[error("segment {index}: rate {rate} is not a finite number ≥ 0")]
    BadRate {
        /// Segment index.
        index: usize,
        /// The offending rate.
        rate: f64,
    },
    /// The profile has no segments or no length.
    #[error("the rate profile is empty; give at least one segment with a duration > 0")]
    Empty,
    /// The segments add up to more than `u64::MAX` ns (584 years).
    #[error("the rate profile is longer than 584 years; give shorter segments")]
    TooLong,
}

impl Profile {
    /// Builds a profile from segments.
    ///
    /// # Errors
    /// [`ProfileError`] on a negative or non-finite rate, or an empty profile.
    pub fn new(segments: Vec<Segment>) -> Result<Self, ProfileError> {
        let mut starts_ns = Vec::with_capacity(segments.len() + 1);
        let mut cum = Vec::with_capacity(segments.len() + 1);
        let (mut t, mut c) = (0u64, 0.0f64);
        for (index, s) in segments.iter().enumerate() {
            for rate in [s.from_rps, s.to_rps] {
                if !rate.is_finite() || rate < 0.0 {
                    return Err(ProfileError::BadRate { index, rate });
                }
            }
            starts_ns.push(t);
            cum.push(c);
            t = t.checked_add(s.duration_ns).ok_or(ProfileError::TooLong)?;
            c += (s.from_rps + s.to_rps) / 2.0 * (s.duration_ns as f64 / NS);
        }
        if t == 0 {
            return Err(ProfileError::Empty);
        }
        starts_ns.push(t);
        cum.push(c);
        Ok(Self {
            segments,
            starts_ns,
            cum,
        })
    }

    /// A constant rate for a duration.
    ///
    /// # Errors
    /// As [`Profile::new`].
    pub fn constant(rate_rps: f64, duration_ns: u64) -> Result<Self, ProfileError> {
        Self::new(vec![Segment {
            duration_ns,
            from_rps: rate_rps,
            to_rps: rate_rps,
        }])
    }

    /// The highest rate any segment asks for, requests per second.
    pub fn peak_rps(&self) -> f64 {
        self.segments
            .iter()
            .map(|s| s.from_rps.max(s.to_rps))
            .fold(0.0, f64::max)
    }

    /// The segments, in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Total length.
    pub fn duration_ns(&self) -> u64 {
        self.starts_ns.last().copied().unwrap_or(0)
    }

    /// Expected requests over the whole profile.
    pub fn total(&self) -> f64 {
        self.cum.last().copied().unwrap_or(0.0)
    }

    /// The same shape with every rate multiplied by `share`. Shares come checked from the
    /// wire (finite, in [0, 1]); anything else is taken as 0 rather than trusted.
    pub fn scaled(&self, share: f64) -> Self {
        let share = if share.is_finite() && share >= 0.0 {
            share
        } else {
            0.0
        };
        let segs = self
            .segments
            .iter()
            .map(|s| Segment {
                duration_ns: s.duration_ns,
                from_rps: s.from_rps * share,
                to_rps: s.to_rps * share,
            })
            .collect();
        // A finite rate times a finite share ≥ 0 is finite and ≥ 0 unless it overflows to ∞;
        // then the unscaled profile is the safe answer.
        Self::new(segs).unwrap_or_else(|_| self.clone())
    }

    /// The part of this profile on [`t0_ns`, `t1_ns`), as segments (a segment cut by an end
    /// keeps its straight line: its rates at the cut are interpolated).
    fn clip(&self, t0_ns: u64, t1_ns: u64) -> Vec<Segment> {
        let mut out = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let (a, b) = (self.starts_ns[i], self.starts_ns[i + 1]);
            let (lo, hi) = (a.max(t0_ns), b.min(t1_ns));
            if lo >= hi {
                continue;
            }
            let at = |t: u64| {
                s.from_rps + (s.to_rps - s.from_rps) * ((t - a) as f64 / s.duration_ns as f64)
            };
            out.push(Segment {
                duration_ns: hi - lo,
                from_rps: at(lo),
                to_rps: if hi == b { s.to_rps } else { at(hi) },
            });
        }
        out
    }

    /// This profile cut at `at_ns` (a run stopped there): unchanged when it ends before.
    pub fn until(&self, at_ns: u64) -> Profile {
        if at_ns >= self.duration_ns() {
            return self.clone();
        }
        let mut segs = self.clip(0, at_ns);
        if segs.is_empty() {
            // Stopped at its very start: one nanosecond at rate 0 keeps it a profile.
            segs.push(Segment {
                duration_ns: 1,
                from_rps: 0.0,
                to_rps: 0.0,
            });
        }
        Self::new(segs).unwrap_or_else(|_| self.clone())
    }

    /// This profile until `at_ns`, then `tail` (on the same clock) from `at_ns` to this
    /// profile's end: a runtime change of rate. Λ is continuous at `at_ns`, so a schedule
    /// that switches keeps its spacing: no burst, no gap. A change at or past the end
    /// leaves the profile as it is.
    pub fn splice(&self, at_ns: u64, tail: &Profile) -> Profile {
        let end = self.duration_ns();
        if at_ns >= end {
            return self.clone();
        }
        let mut segs = self.clip(0, at_ns);
        segs.extend(tail.clip(at_ns, end));
        // A tail shorter than this profile holds its last rate to the end: the run's
        // length never changes with its rate.
        let covered = at_ns.max(tail.duration_ns().min(end));
        if covered < end {
            let last = tail.rate_at(tail.duration_ns().saturating_sub(1));
            segs.push(Segment {
                duration_ns: end - covered,
                from_rps: last,
                to_rps: last,
            });
        }
        Self::new(segs).unwrap_or_else(|_| self.clone())
    }

    fn segment_at(&self, t_ns: u64) -> Option<usize> {
        if t_ns >= self.duration_ns() {
            return None;
        }
        Some(self.starts_ns.partition_point(|&s| s <= t_ns) - 1)
    }

    /// λ(t) in requests per second; 0 outside the profile.
    pub fn rate_at(&self, t_ns: u64) -> f64 {
        match self.segment_at(t_ns) {
            None => 0.0,
            Some(i) => {
                let s = &self.segments[i];
                let frac = (t_ns - self.starts_ns[i]) as f64 / s.duration_ns as f64;
                s.from_rps + (s.to_rps - s.from_rps) * frac
            }
        }
    }

    /// Λ(t): expected requests in [0, t).
    pub fn cumulative(&self, t_ns: u64) -> f64 {
        match self.segment_at(t_ns) {
            None => self.total(),
            Some(i) => {
                let s = &self.segments[i];
                let dt = (t_ns - self.starts_ns[i]) as f64 / NS;
                let d = s.duration_ns as f64 / NS;
                let k = (s.to_rps - s.from_rps) / d;
                self.cum[i] + s.from_rps * dt + k * dt * dt / 2.0
            }
        }
    }

    /// Expected requests in [t0, t1).
    pub fn expected(&self, t0_ns: u64, t1_ns: u64) -> f64 {
        self.cumulative(t1_ns) - self.cumulative(t0_ns)
    }

    /// Λ⁻¹(x): the time (ns, fractional) at which the x-th expected request falls due,
    /// or `None` when x lies beyond the profile. `hint` is a segment cursor that only
    /// moves forward, making a monotone walk O(1) per call.
    fn inverse(&self, x: f64, hint: &mut usize) -> Option<f64> {
        let n = self.segments.len();
        while *hint < n && self.cum[*hint + 1] <= x {
            *hint += 1;
        }
        // Skip zero-rate segments: their Λ does not grow, so no arrival falls there.
        if *hint >= n {
            return None;
        }
        let i = *hint;
        let s = &self.segments[i];
        let y = x - self.cum[i];
        let a = s.from_rps;
        let d = s.duration_ns as f64 / NS;
        let k = (s.to_rps - a) / d;
        // Solve a·s + k·s²/2 = y for s ≥ 0, in the form that stays stable as k → 0.
        let secs = if y <= 0.0 {
            0.0
        } else if k == 0.0 {
            y / a
        } else {
            2.0 * y / (a + (a * a + 2.0 * k * y).max(0.0).sqrt())
        };
        Some(self.starts_ns[i] as f64 + (secs * NS).min(s.duration_ns as f64))
    }
}

/// What one open-loop class does from a runtime change on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Steer {
    /// Hold this cluster-wide rate (requests per second; 0 pauses the class).
    Hold(f64),
    /// Follow the plan's profile again.
    Follow,
}

/// A runtime change of rate: from `at_ns` on the run's clock, each class does what its
/// entry says (one per class of the plan).
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// 1, 2, ... within a run; applied once each, in order.
    pub seq: u32,
    /// The instant, ns since the run's t = 0 (warm-up included).
    pub at_ns: u64,
    /// One per class of the plan (closed-loop classes ignore theirs).
    pub classes: Vec<Steer>,
    /// The run ends at `at_ns` instead: every class stops sending there (`classes` is
    /// ignored).
    pub end: bool,
}

impl Steer {
    /// `current` (on the run's clock) changed at `at_ns` as this says, `plan` being the
    /// plan's own profile at the same scale; a held rate (cluster-wide) is scaled by
    /// `share` (a shard's part of the whole: 1 for the whole).
    pub fn apply(self, current: &Profile, plan: &Profile, at_ns: u64, share: f64) -> Profile {
        match self {
            Steer::Hold(rate) => {
                let end = current.duration_ns().max(1);
                match Profile::constant(rate * share, end) {
                    Ok(tail) => current.splice(at_ns, &tail),
                    Err(_) => current.clone(),
                }
            }
            Steer::Follow => current.splice(at_ns, plan),
        }
    }
}

/// How requests are spaced in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Evenly spaced.
    Uniform,
    /// Exponential gaps (a Poisson process).
    Poisson,
    /// Facebook ETC's generalized-Pareto gaps ([`crate::etc::unit_gap`]): the same mean
    /// as Poisson, burstier (coefficient of variation 1.20).
    Etc,
}

/// The stream of intended send times of one shard, in ns since the run's start.
#[derive(Debug, Clone)]
pub struct Schedule {
    profile: Profile,
    arrival: Arrival,
    x: f64,
    /// The x of the last time drawn (or tried), for [`Schedule::respliced`].
    last_x: Option<f64>,
    /// The x that found no time (past the profile's end): tried again, never skipped.
    stalled: Option<f64>,
    n: u64,
    phase: f64,
    hint: usize,
}

impl Schedule {
    /// A schedule over `profile` (already scaled to this shard's share). `phase` in [0, 1)
    /// offsets uniform arrivals so shards do not fire together; Poisson ignores it.
    pub fn new(profile: Profile, arrival: Arrival, phase: f64) -> Self {
        Self {
            profile,
            arrival,
            x: 0.0,
            last_x: None,
            stalled: None,
            n: 0,
            phase: phase.clamp(0.0, 0.999_999),
            hint: 0,
        }
    }

    /// The profile this schedule follows.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The next intended send time in ns since start, or `None` when the profile has ended.
    #[inline]
    pub fn next(&mut self, rng: &mut Rng) -> Option<u64> {
        let x = match (self.stalled, self.arrival) {
            (Some(x), _) => x,
            (None, Arrival::Uniform) => self.n as f64 + self.phase,
            (None, Arrival::Poisson) => {
                self.x += rng.exp1();
                self.x
            }
            (None, Arrival::Etc) => {
                self.x += crate::etc::unit_gap(rng);
                self.x
            }
        };
        self.last_x = Some(x);
        self.place(x)
    }

    /// The time of `x` under the profile, keeping the count and the stall in step.
    fn place(&mut self, x: f64) -> Option<u64> {
        match self.profile.inverse(x, &mut self.hint) {
            Some(t) => {
                self.stalled = None;
                self.n += 1;
                Some(t.round() as u64)
            }
            None => {
                self.stalled = Some(x);
                None
            }
        }
    }

    /// Follows `profile` from now on (a runtime change: the old profile spliced with the
    /// new rate at an instant not before any time already used). Returns the last drawn
    /// request's time again under the new profile: unchanged when it fell before the
    /// splice, moved when it fell after it, none when the new profile has no room for it
    /// (a pause to the end), and found again when the old one had none (the resume).
    pub fn respliced(&mut self, profile: Profile) -> Option<u64> {
        self.profile = profile;
        self.hint = 0;
        let x = self.last_x?;
        if self.stalled.is_none() {
            // Not counted twice: the draw is undone and placed again.
            self.n -= 1;
        }
        self.place(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(d_s: f64, from: f64, to: f64) -> Segment {
        Segment {
            duration_ns: (d_s * NS) as u64,
            from_rps: from,
            to_rps: to,
        }
    }

    /// Intended times are computed from the start, so after 10^7 requests the n-th time is
    /// still exactly start + n/rate (to the nanosecond).
    #[test]
    fn uniform_times_do_not_drift_over_ten_million_requests() {
        let rate = 100_000.0;
        let n_total = 10_000_000u64;
        let p = Profile::constant(rate, (n_total as f64 / rate * NS) as u64).unwrap();
        let mut s = Schedule::new(p, Arrival::Uniform, 0.0);
        let mut rng = Rng::new(1);
        for n in 0..n_total {
            let t = s.next(&mut rng).unwrap();
            let exact = n * 10_000; // 1e9 / 1e5 ns apart
            assert!(t.abs_diff(exact) <= 1, "request {n}: {t} vs {exact}");
        }
        assert_eq!(s.next(&mut rng), None);
    }

    /// The gaps (s) of 10 s of `arrival` at `rate`, seed 42.
    fn gaps_of(arrival: Arrival, rate: f64) -> Vec<f64> {
        let p = Profile::constant(rate, 10 * 1_000_000_000).unwrap();
        let mut s = Schedule::new(p, arrival, 0.0);
        let mut rng = Rng::new(42);
        let mut prev = 0u64;
        let mut gaps = Vec::new();
        while let Some(t) = s.next(&mut rng) {
            gaps.push((t - prev) as f64 / NS);
            prev = t;
        }
        gaps
    }

    /// ETC gaps at 20,000/s for 10 s: the count within 2% of 200,000, the mean gap
    /// 1/rate within 2%, and the gaps' coefficient of variation ETC's 1.20 within 5%
    /// (Poisson's would be 1), and a Kolmogorov–Smirnov match at the 1% level to the
    /// generalized Pareto scaled to the rate (ns rounding is far inside the bound).
    #[test]
    fn etc_gaps_follow_the_rate_and_are_burstier_than_poisson() {
        use crate::etc::{GAP_SHAPE, gpareto_cdf};
        let rate = 20_000.0;
        let mut gaps = gaps_of(Arrival::Etc, rate);
        let n = gaps.len() as f64;
        assert!((n - 200_000.0).abs() < 0.02 * 200_000.0, "count {n}");
        let mean = gaps.iter().sum::<f64>() / n;
        assert!((mean * rate - 1.0).abs() < 0.02, "mean gap {mean}");
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n;
        let cv = var.sqrt() / mean;
        let want = 1.0 / (1.0 - 2.0 * GAP_SHAPE).sqrt();
        assert!((cv - want).abs() < 0.05 * want, "cv {cv}, want {want}");
        gaps.sort_by(f64::total_cmp);
        let scale = (1.0 - GAP_SHAPE) / rate;
        let d = gaps.iter().enumerate().fold(0.0f64, |d, (i, &g)| {
            let f = gpareto_cdf(g, 0.0, scale, GAP_SHAPE);
            d.max((f - i as f64 / n).abs())
                .max((f - (i + 1) as f64 / n).abs())
        });
        assert!(d < 1.63 / n.sqrt(), "KS D {d}");
    }

    /// Poisson gaps: mean 1/rate, and a Kolmogorov–Smirnov test against the exponential
    /// distribution passes at the 1% level.
    #[test]
    fn poisson_gaps_have_the_right_mean_and_distribution() {
        let rate = 20_000.0;
        let mut gaps = gaps_of(Arrival::Poisson, rate);
        let n = gaps.len() as f64;
        // ~200,000 arrivals expected; the count of a Poisson process has sd sqrt(200000)≈447.
        assert!((n - 200_000.0).abs() < 5.0 * 447.0, "count {n}");
        let mean = gaps.iter().sum::<f64>() / n;
        assert!((mean * rate - 1.0).abs() < 0.01, "mean gap {mean}");
        gaps.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let mut d = 0.0f64;
        for (i, g) in gaps.iter().enumerate() {
            let cdf = 1.0 - (-rate * g).exp();
            d = d
                .max((cdf - i as f64 / n).abs())
                .max((cdf - (i + 1) as f64 / n).abs());
        }
        // Critical value at alpha = 0.01 is 1.628 / sqrt(n); ns rounding adds < 1e-4.
        let crit = 1.628 / n.sqrt() + 1e-4;
        assert!(d < crit, "KS statistic {d} ≥ {crit}");
    }

    #[test]
    fn ramp_and_zero_segments_place_the_right_counts() {
        // 0 -> 1000 over 2 s (1000 expected), 1 s at 0, 1 s at 500.
        let p = Profile::new(vec![
            seg(2.0, 0.0, 1000.0),
            seg(1.0, 0.0, 0.0),
            seg(1.0, 500.0, 500.0),
        ])
        .unwrap();
        assert!((p.total() - 1500.0).abs() < 1e-9);
        let mut s = Schedule::new(p.clone(), Arrival::Uniform, 0.0);
        let mut rng = Rng::new(1);
        let mut per_sec = [0u32; 4];
        while let Some(t) = s.next(&mut rng) {
            per_sec[(t / 1_000_000_000) as usize] += 1;
        }
        // λ = 500 t on [0,2): 250 in the first second, 750 in the second.
        assert_eq!(per_sec, [250, 750, 0, 500]);
        assert!((p.rate_at(1_000_000_000) - 500.0).abs() < 1e-9);
        assert!((p.expected(0, 1_000_000_000) - 250.0).abs() < 1e-9);
    }

    #[test]
    fn scaled_shares_add_up_to_the_whole() {
        let p = Profile::constant(10_000.0, 1_000_000_000).unwrap();
        let mut total = 0;
        let shards = 3;
        for k in 0..shards {
            let mut s = Schedule::new(
                p.scaled(1.0 / shards as f64),
                Arrival::Uniform,
                k as f64 / shards as f64,
            );
            let mut rng = Rng::new(k);
            while s.next(&mut rng).is_some() {
                total += 1;
            }
        }
        assert_eq!(total, 10_000);
    }

    /// A change mid-run: Λ stays continuous, so the spacing steps from 1/r₀ to 1/r₁ at the
    /// instant, with no burst and no gap, and each side holds its exact count.
    #[test]
    fn a_spliced_rate_switches_at_its_instant_without_burst_or_gap() {
        let p = Profile::constant(1_000.0, 4 * NS as u64).unwrap();
        let mut s = Schedule::new(p.clone(), Arrival::Uniform, 0.0);
        let mut rng = Rng::new(1);
        let mut times = Vec::new();
        // Draw up to (and one past) 1.5 s, then switch to 4,000/s at 1.5 s.
        while let Some(t) = s.next(&mut rng) {
            times.push(t);
            if t >= 1_500_000_000 {
                break;
            }
        }
        let last = times.pop().unwrap();
        assert_eq!(last, 1_500_000_000);
        let hold = Profile::constant(4_000.0, p.duration_ns()).unwrap();
        let next = s.respliced(p.splice(1_500_000_000, &hold));
        assert_eq!(
            next,
            Some(1_500_000_000),
            "the drawn request at the instant stays"
        );
        times.push(next.unwrap());
        while let Some(t) = s.next(&mut rng) {
            times.push(t);
        }
        let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps[..1_499].iter().all(|&g| g == 1_000_000),
            "before: 1 ms apart"
        );
        assert!(
            gaps[1_500..].iter().all(|&g| g == 250_000),
            "after: 250 µs apart"
        );
        assert_eq!(times.len(), 1_500 + 4_000 * 5 / 2);
    }

    /// A pause to the end takes the drawn request away; a resume finds it again, from
    /// its own instant on, and nothing falls inside the pause.
    #[test]
    fn a_pause_to_the_end_then_a_resume_continues_the_schedule() {
        let p = Profile::constant(100.0, 10 * NS as u64).unwrap();
        let mut s = Schedule::new(p.clone(), Arrival::Uniform, 0.5);
        let mut rng = Rng::new(1);
        let mut n = 0;
        let mut t = s.next(&mut rng).unwrap();
        while t < 2_000_000_000 {
            n += 1;
            t = s.next(&mut rng).unwrap();
        }
        let zero = Profile::constant(0.0, p.duration_ns()).unwrap();
        let paused = p.splice(2_000_000_000, &zero);
        assert_eq!(s.respliced(paused.clone()), None, "paused to the end");
        assert_eq!(s.next(&mut rng), None);
        // Resumed at 5 s: following the first profile again from there.
        let resumed = paused.splice(5_000_000_000, &p);
        let mut t = s.respliced(resumed.clone()).unwrap();
        assert_eq!(t, 5_005_000_000, "half a gap after the resume (phase 0.5)");
        n += 1;
        while let Some(u) = s.next(&mut rng) {
            assert!(u > t);
            t = u;
            n += 1;
        }
        assert_eq!(n, 200 + 500, "2 s and 5 s at 100/s");
        assert!((resumed.expected(2_000_000_000, 5_000_000_000)).abs() < 1e-9);
        assert!((resumed.total() - 700.0).abs() < 1e-6);
    }

    #[test]
    fn splicing_a_ramp_cuts_it_on_its_line_and_keeps_the_length() {
        let p = Profile::new(vec![seg(2.0, 0.0, 1000.0), seg(2.0, 1000.0, 1000.0)]).unwrap();
        let flat = Profile::constant(10.0, 1_000_000_000).unwrap();
        let q = p.splice(1_000_000_000, &flat);
        assert_eq!(q.duration_ns(), p.duration_ns());
        assert!((q.expected(0, 1_000_000_000) - 250.0).abs() < 1e-9);
        assert!((q.rate_at(999_999_999) - 500.0).abs() < 0.01);
        assert!(
            (q.rate_at(3_500_000_000) - 10.0).abs() < 1e-9,
            "a short tail holds its rate"
        );
        assert_eq!(p.splice(9_000_000_000, &flat), p, "past the end: unchanged");
    }

    #[test]
    fn bad_rates_are_errors() {
        assert!(matches!(
            Profile::constant(-1.0, 10),
            Err(ProfileError::BadRate { .. })
        ));
        assert_eq!(Profile::new(vec![]), Err(ProfileError::Empty));
        let z = Profile::constant(0.0, 1_000_000_000).unwrap();
        let mut s = Schedule::new(z, Arrival::Poisson, 0.0);
        assert_eq!(s.next(&mut Rng::new(1)), None);
    }
}
