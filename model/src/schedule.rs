//! Intended send times: a piecewise-linear rate function λ(t) and the open-loop arrival
//! process that follows it.
//!
//! The n-th request of a shard is due at Λ⁻¹(xₙ), where Λ(t) = ∫₀ᵗ λ is the expected
//! number of requests by time t. Uniform arrivals use xₙ = n + phase: each time is computed
//! from the start, never from the previous one, so nothing drifts (wrk2's `start + n/rate`
//! generalised to a changing rate). Poisson arrivals use xₙ = xₙ₋₁ + Exp(1): a unit-rate
//! Poisson process mapped through Λ⁻¹ is a non-homogeneous Poisson process with rate λ(t)
//! (time rescaling). A segment whose rate is 0 simply holds no arrivals.

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

/// How requests are spaced in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Evenly spaced.
    Uniform,
    /// Exponential gaps (a Poisson process).
    Poisson,
}

/// The stream of intended send times of one shard, in ns since the run's start.
#[derive(Debug, Clone)]
pub struct Schedule {
    profile: Profile,
    arrival: Arrival,
    x: f64,
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
        let x = match self.arrival {
            Arrival::Uniform => self.n as f64 + self.phase,
            Arrival::Poisson => {
                self.x += rng.exp1();
                self.x
            }
        };
        let t = self.profile.inverse(x, &mut self.hint)?;
        self.n += 1;
        Some(t.round() as u64)
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

    /// Poisson gaps: mean 1/rate, and a Kolmogorov–Smirnov test against the exponential
    /// distribution passes at the 1% level.
    #[test]
    fn poisson_gaps_have_the_right_mean_and_distribution() {
        let rate = 20_000.0;
        let p = Profile::constant(rate, 10 * 1_000_000_000).unwrap();
        let mut s = Schedule::new(p, Arrival::Poisson, 0.0);
        let mut rng = Rng::new(42);
        let mut prev = 0u64;
        let mut gaps = Vec::new();
        while let Some(t) = s.next(&mut rng) {
            gaps.push((t - prev) as f64 / NS);
            prev = t;
        }
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
