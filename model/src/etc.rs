//! Facebook's ETC memcached workload (Atikoglu et al., "Workload Analysis of a Large-Scale
//! Key-Value Store", SIGMETRICS 2012) with the parameters mutilate's presets use
//! (`Generator.cc`): value sizes a discrete table for 0–14 bytes and a generalized-Pareto
//! tail above, inter-arrival gaps generalized-Pareto. Sampling is by inversion of one
//! uniform draw, as mutilate's `Generator.h` does:
//! - generalized Pareto: `loc + scale·(U^−k − 1)/k`;
//! - GEV (key sizes, for when keys take a length distribution): `loc + scale·((−ln U)^−k − 1)/k`.
//!
//! `--value-size etc` ([`crate::shapes::ValueSizes::Etc`]) and `--arrival etc`
//! ([`crate::schedule::Arrival::Etc`]) use them.

use crate::rng::Rng;

/// P(size = 0 … 14 bytes): the discrete head of ETC's value sizes (sums to 0.44155).
pub const VALUE_HEAD: [f64; 15] = [
    0.00536, 0.00047, 0.17820, 0.09239, 0.00018, 0.02740, 0.00065, 0.00606, 0.00023, 0.00837,
    0.00837, 0.08989, 0.00092, 0.00326, 0.01980,
];
/// The tail above the head: generalized Pareto (location, scale, shape).
pub const VALUE_TAIL: (f64, f64, f64) = (15.0, 214.476, 0.348_238);
/// Inter-arrival gaps: generalized Pareto with this shape (location 0); the scale is set
/// so the mean gap is 1/rate (mutilate's `set_lambda`), 16.0292 µs at its native rate.
pub const GAP_SHAPE: f64 = 0.154_971;
/// Key sizes: GEV (location, scale, shape).
pub const KEY_GEV: (f64, f64, f64) = (30.7984, 8.20449, 0.078_688);

/// A draw in (0, 1].
#[inline]
fn unit(rng: &mut Rng) -> f64 {
    1.0 - rng.next_f64()
}

/// Generalized Pareto at `u` in (0, 1].
#[inline]
pub fn gpareto(u: f64, loc: f64, scale: f64, shape: f64) -> f64 {
    loc + scale * (u.powf(-shape) - 1.0) / shape
}

/// Its distribution function: P(X ≤ x).
pub fn gpareto_cdf(x: f64, loc: f64, scale: f64, shape: f64) -> f64 {
    if x <= loc {
        return 0.0;
    }
    1.0 - (1.0 + shape * (x - loc) / scale).powf(-1.0 / shape)
}

/// GEV at `u` in (0, 1).
#[inline]
pub fn gev(u: f64, loc: f64, scale: f64, shape: f64) -> f64 {
    loc + scale * ((-u.ln()).powf(-shape) - 1.0) / shape
}

/// One ETC value size, at most `max` bytes.
#[inline]
pub fn value_size(rng: &mut Rng, max: u64) -> u64 {
    let mut u = rng.next_f64();
    for (size, p) in VALUE_HEAD.iter().enumerate() {
        if u < *p {
            return (size as u64).min(max);
        }
        u -= p;
    }
    let (loc, scale, shape) = VALUE_TAIL;
    let x = gpareto(unit(rng), loc, scale, shape);
    // Sizes are whole bytes; a draw past u64 (U near 0) is the cap.
    if x.is_finite() && x < max as f64 {
        x as u64
    } else {
        max
    }
}

/// One gap of a unit-rate ETC arrival process (mean 1, coefficient of variation
/// 1/√(1 − 2k) ≈ 1.20: burstier than Poisson).
#[inline]
pub fn unit_gap(rng: &mut Rng) -> f64 {
    gpareto(unit(rng), 0.0, 1.0 - GAP_SHAPE, GAP_SHAPE)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The largest distance between the sample's distribution function and `cdf`
    /// (Kolmogorov–Smirnov), over sorted `xs`.
    fn ks(xs: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
        xs.sort_by(f64::total_cmp);
        let n = xs.len() as f64;
        xs.iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = cdf(x);
                (f - i as f64 / n).abs().max((f - (i + 1) as f64 / n).abs())
            })
            .fold(0.0, f64::max)
    }

    /// 200,000 value sizes: the head's share and its largest sizes' shares within 0.5
    /// points of the table, and the tail a Kolmogorov–Smirnov match to the generalized
    /// Pareto at the 1% level (D < 1.63/√n).
    #[test]
    fn value_sizes_follow_the_etc_table_and_tail() {
        let mut rng = Rng::new(11);
        let n = 200_000;
        let sizes: Vec<u64> = (0..n).map(|_| value_size(&mut rng, 1 << 20)).collect();
        let share =
            |f: &dyn Fn(u64) -> bool| sizes.iter().filter(|&&s| f(s)).count() as f64 / n as f64;
        let head: f64 = VALUE_HEAD.iter().sum();
        assert!(
            (share(&|s| s <= 14) - head).abs() < 0.005,
            "{}",
            share(&|s| s <= 14)
        );
        for size in [2u64, 3, 11] {
            let got = share(&|s| s == size);
            assert!(
                (got - VALUE_HEAD[size as usize]).abs() < 0.005,
                "size {size}: {got}"
            );
        }
        // The tail, continuous before whole bytes: compare at the bytes' upper edges.
        let (loc, scale, shape) = VALUE_TAIL;
        let mut tail: Vec<f64> = sizes
            .iter()
            .filter(|&&s| s > 14)
            .map(|&s| s as f64 + 1.0)
            .collect();
        let d = ks(&mut tail, |x| gpareto_cdf(x, loc, scale, shape));
        let bound = 1.63 / (tail.len() as f64).sqrt();
        assert!(d < bound, "KS D {d} over the tail, 1% bound {bound}");
        assert!(sizes.iter().all(|&s| s <= 1 << 20));
        let mean = sizes.iter().sum::<u64>() as f64 / n as f64;
        assert!(
            (mean - 194.0).abs() < 15.0,
            "mean value size {mean}, about 194 published"
        );
    }

    /// Unit-rate gaps: mean 1 and coefficient of variation 1.20 within 2%, and a
    /// Kolmogorov–Smirnov match to the generalized Pareto at the 1% level.
    #[test]
    fn gaps_are_generalized_pareto_with_mean_one() {
        let mut rng = Rng::new(5);
        let n = 200_000;
        let mut gaps: Vec<f64> = (0..n).map(|_| unit_gap(&mut rng)).collect();
        let mean = gaps.iter().sum::<f64>() / n as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
        let cv = var.sqrt() / mean;
        assert!((mean - 1.0).abs() < 0.02, "mean {mean}");
        let want_cv = 1.0 / (1.0 - 2.0 * GAP_SHAPE).sqrt();
        assert!(
            (cv - want_cv).abs() < 0.05 * want_cv,
            "cv {cv}, want {want_cv}"
        );
        let d = ks(&mut gaps, |x| {
            gpareto_cdf(x, 0.0, 1.0 - GAP_SHAPE, GAP_SHAPE)
        });
        assert!(d < 1.63 / (n as f64).sqrt(), "KS D {d}");
    }

    /// GEV quantiles by inversion: the median of ETC's key sizes is loc + scale·((ln 2)^−k − 1)/k.
    #[test]
    fn gev_inverts_its_distribution() {
        let (loc, scale, shape) = KEY_GEV;
        let median = gev(0.5, loc, scale, shape);
        let want = loc + scale * (std::f64::consts::LN_2.powf(-shape) - 1.0) / shape;
        assert!((median - want).abs() < 1e-9);
        assert!((median - 33.9).abs() < 0.5, "{median}");
    }
}
