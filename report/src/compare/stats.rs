//! Two arms of runs, one number per run: the Hodges–Lehmann estimate of B's shift from A
//! with an exact Mann–Whitney confidence interval and p-value, and the coefficient of
//! variation of each arm.
//!
//! The replicates are runs. Requests within a run and intervals of one run share the
//! server's state and are serially correlated, so treating them as independent samples
//! gives intervals that are far too narrow; a re-run moves a p99 by more than any such
//! interval says. Between runs the variation that matters (placement, memory layout,
//! drift) is present, and nothing is assumed about its distribution: the interval comes
//! from the exact null distribution of the Mann–Whitney U statistic (no normal
//! approximation, no crate), computed by counting arrangements.
//!
//! Relative effects are estimated on the log scale: `d_ij = ln b_j − ln a_i` over all
//! `n·m` pairs, `Δ = exp(median d) − 1`, and the interval is `exp` of the order statistics
//! of `d` at ranks `C+1 … nm−C`, where `C` is the largest value with `P(U ≤ C) ≤ α/2`.
//! With 5 runs each `C = 2`: ranks 3 to 23 of 25, coverage 96.8%. The absolute shift
//! (`b_j − a_i`) uses the same ranks.

/// Two-sided level of every interval.
pub const ALPHA: f64 = 0.05;

/// The null distribution of U for arms of `n` and `m` runs: `counts[u]` arrangements of
/// the `C(n+m, n)` give `U = u` (pairs where B's value is above A's).
fn u_counts(n: usize, m: usize) -> Vec<f64> {
    // f(i, j, u): arrangements of i A-values and j B-values with u pairs where A's value
    // is above B's (the same distribution as U, which is symmetric). The largest value is
    // A's (above all j B-values: u gains j) or B's (u gains nothing):
    // f(i, j, u) = f(i − 1, j, u − j) + f(i, j − 1, u).
    let max_u = n * m;
    let mut prev: Vec<Vec<f64>> = vec![vec![0.0; max_u + 1]; m + 1];
    for row in prev.iter_mut() {
        row[0] = 1.0; // i = 0: one arrangement, U = 0
    }
    for _i in 1..=n {
        let mut cur: Vec<Vec<f64>> = vec![vec![0.0; max_u + 1]; m + 1];
        cur[0][0] = 1.0; // j = 0
        for j in 1..=m {
            for u in 0..=max_u {
                let a = if u >= j { prev[j][u - j] } else { 0.0 };
                cur[j][u] = a + cur[j - 1][u];
            }
        }
        prev = cur;
    }
    prev.swap_remove(m)
}

/// `P(U ≤ u)` for every u, arms of `n` and `m`.
fn u_cdf(n: usize, m: usize) -> Vec<f64> {
    let counts = u_counts(n, m);
    let total: f64 = counts.iter().sum();
    let mut acc = 0.0;
    counts
        .iter()
        .map(|c| {
            acc += c;
            acc / total
        })
        .collect()
}

/// The largest `C` with `P(U ≤ C) ≤ alpha / 2`, and the interval's exact coverage
/// `1 − 2·P(U ≤ C)`; `None` when even `U = 0` is too likely (fewer than 4 runs in an arm
/// of a pair, e.g. 3 + 3: 1/20 = 0.05 per side) and no interval reaches the level.
pub fn critical(n: usize, m: usize, alpha: f64) -> Option<(usize, f64)> {
    if n == 0 || m == 0 {
        return None;
    }
    let cdf = u_cdf(n, m);
    let mut best = None;
    for (c, p) in cdf.iter().enumerate() {
        if *p <= alpha / 2.0 + 1e-12 {
            best = Some((c, 1.0 - 2.0 * p));
        } else {
            break;
        }
    }
    best
}

/// Exact two-sided Mann–Whitney p-value of A against B. Ties count one half; the tail
/// probabilities are then taken at the conservative side (floor for the lower tail, ceil
/// for the upper).
pub fn p_value(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let mut twice_u = 0usize;
    for x in a {
        for y in b {
            if y > x {
                twice_u += 2;
            } else if y == x {
                twice_u += 1;
            }
        }
    }
    let cdf = u_cdf(a.len(), b.len());
    let lo = twice_u / 2; // floor(U)
    let hi = twice_u.div_ceil(2); // ceil(U)
    let below = cdf[lo]; // P(U ≤ floor U)
    let above = 1.0 - if hi == 0 { 0.0 } else { cdf[hi - 1] }; // P(U ≥ ceil U)
    Some((2.0 * below.min(above)).min(1.0))
}

/// A shift estimate with its interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shift {
    /// Hodges–Lehmann estimate: the median of the pairwise differences.
    pub estimate: f64,
    /// The interval, when the arms are large enough for the level.
    pub ci: Option<(f64, f64)>,
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Median of any values (NaN-free input).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(median_sorted(&s))
}

/// Hodges–Lehmann shift of `b` from `a` over the pairwise differences `f(b_j) − f(a_i)`,
/// with the exact interval at level `1 − alpha`.
fn shift_by(a: &[f64], b: &[f64], alpha: f64, f: impl Fn(f64) -> f64) -> Option<Shift> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let mut d: Vec<f64> = a
        .iter()
        .flat_map(|x| b.iter().map(|y| f(*y) - f(*x)).collect::<Vec<_>>())
        .collect();
    d.sort_by(f64::total_cmp);
    let ci = critical(a.len(), b.len(), alpha).map(|(c, _)| (d[c], d[d.len() - 1 - c]));
    Some(Shift {
        estimate: median_sorted(&d),
        ci,
    })
}

/// Absolute shift of B from A (B − A), in the values' unit.
pub fn shift(a: &[f64], b: &[f64], alpha: f64) -> Option<Shift> {
    shift_by(a, b, alpha, |x| x)
}

/// Relative shift of B from A (`B/A − 1`), from log ratios; every value must be positive.
pub fn ratio(a: &[f64], b: &[f64], alpha: f64) -> Option<Shift> {
    if a.iter()
        .chain(b)
        .any(|x| x.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) || !x.is_finite())
    {
        return None;
    }
    let s = shift_by(a, b, alpha, f64::ln)?;
    Some(Shift {
        estimate: s.estimate.exp_m1(),
        ci: s.ci.map(|(l, h)| (l.exp_m1(), h.exp_m1())),
    })
}

/// Coefficient of variation: sample standard deviation over mean (0 for one run or a
/// mean of 0).
pub fn cv(v: &[f64]) -> f64 {
    let n = v.len();
    if n < 2 {
        return 0.0;
    }
    let mean = v.iter().sum::<f64>() / n as f64;
    if mean == 0.0 {
        return 0.0;
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    var.sqrt() / mean.abs()
}

/// What a comparison of one metric concludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The interval excludes 0 and the estimate is at least the minimum effect (and, on
    /// an unstable arm, at least twice its CV): B is above A (slower, for a latency).
    Higher,
    /// The same, below.
    Lower,
    /// The whole interval lies within ± the minimum effect.
    NoDifference,
    /// Neither: more runs would tell.
    Inconclusive,
    /// An arm varies more than 10% from run to run and the difference is not larger
    /// than that noise: no sound verdict.
    Unstable,
    /// Too few runs for an interval at the level (fewer than 4 in an arm).
    NoInterval,
}

/// The coefficient of variation over which an arm is unstable (the rule of
/// redis-benchmarks-specification's compare).
pub const UNSTABLE_CV: f64 = 0.10;

/// True when either arm's runs vary more than [`UNSTABLE_CV`].
pub fn unstable(cv_a: f64, cv_b: f64) -> bool {
    cv_a > UNSTABLE_CV || cv_b > UNSTABLE_CV
}

/// Holm's step-down over one family of p-values at level `alpha`: which may be called
/// (the family-wise chance of calling any true equality is at most `alpha`). The i-th
/// smallest p passes when it and every smaller one is at most `alpha / (k − rank)`.
pub fn holm(ps: &[f64], alpha: f64) -> Vec<bool> {
    let mut order: Vec<usize> = (0..ps.len()).collect();
    order.sort_by(|&i, &j| ps[i].total_cmp(&ps[j]));
    let k = ps.len();
    let mut pass = vec![false; k];
    for (rank, &i) in order.iter().enumerate() {
        if ps[i] > alpha / (k - rank) as f64 {
            break;
        }
        pass[i] = true;
    }
    pass
}

/// The verdict on a relative shift given both arms' CVs and the minimum effect (a
/// fraction: 0.02 for 2%). On an unstable arm a difference is still called when the
/// interval excludes 0 and the estimate is at least twice the larger CV (a 6× slower
/// server is slower however noisy its runs); a smaller one is `Unstable`. `callable` is
/// false when the metric's family (Holm, [`holm`]) does not allow a call: then the
/// interval can only say no difference, inconclusive or unstable.
pub fn verdict(s: &Shift, cv_a: f64, cv_b: f64, min_effect: f64, callable: bool) -> Verdict {
    let Some((lo, hi)) = s.ci else {
        return Verdict::NoInterval;
    };
    let noisy = unstable(cv_a, cv_b);
    let needed = if noisy {
        min_effect.max(2.0 * cv_a.max(cv_b))
    } else {
        min_effect
    };
    if callable && lo > 0.0 && s.estimate >= needed {
        Verdict::Higher
    } else if callable && hi < 0.0 && s.estimate <= -needed {
        Verdict::Lower
    } else if noisy {
        Verdict::Unstable
    } else if lo >= -min_effect && hi <= min_effect {
        Verdict::NoDifference
    } else {
        Verdict::Inconclusive
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn binom(n: usize, k: usize) -> f64 {
        (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
    }

    /// The U distribution counts every arrangement once and is symmetric.
    #[test]
    fn u_distribution_is_whole_and_symmetric() {
        for (n, m) in [(1, 1), (2, 3), (5, 5), (4, 7), (10, 10)] {
            let c = u_counts(n, m);
            assert_eq!(c.len(), n * m + 1);
            let total: f64 = c.iter().sum();
            assert!((total - binom(n + m, n)).abs() < 1e-6, "{n},{m}");
            for u in 0..=n * m {
                assert_eq!(c[u], c[n * m - u], "{n},{m},{u}");
            }
        }
        // 5 + 5: P(U ≤ 0) = 1/252, P(U ≤ 1) = 2/252, P(U ≤ 2) = 4/252, P(U ≤ 3) = 7/252.
        let c = u_counts(5, 5);
        assert_eq!(&c[..4], &[1.0, 1.0, 2.0, 3.0]);
    }

    /// The critical values of published tables (two-sided 0.05): 5+5 → 2, 10+10 → 23,
    /// 4+4 → 0, 3+3 → none; 6+6 → 5, 8+8 → 13.
    #[test]
    fn critical_values_match_the_tables() {
        assert_eq!(critical(5, 5, ALPHA).map(|c| c.0), Some(2));
        let cov = critical(5, 5, ALPHA).unwrap().1;
        assert!((cov - (1.0 - 8.0 / 252.0)).abs() < 1e-9, "{cov}");
        assert_eq!(critical(10, 10, ALPHA).map(|c| c.0), Some(23));
        assert_eq!(critical(4, 4, ALPHA).map(|c| c.0), Some(0));
        assert_eq!(critical(3, 3, ALPHA), None);
        assert_eq!(critical(1, 1, ALPHA), None);
        assert_eq!(critical(6, 6, ALPHA).map(|c| c.0), Some(5));
        assert_eq!(critical(8, 8, ALPHA).map(|c| c.0), Some(13));
    }

    /// Complete separation of 5 + 5 runs gives the smallest p, 2/252; identical arms 1.
    #[test]
    fn p_values_are_exact() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        let b = [6.0, 7.0, 8.0, 9.0, 10.0];
        let p = p_value(&a, &b).unwrap();
        assert!((p - 2.0 / 252.0).abs() < 1e-12, "{p}");
        assert_eq!(p_value(&a, &a).unwrap(), 1.0);
        let q = p_value(&b, &a).unwrap();
        assert!((q - p).abs() < 1e-12, "{q} {p}");
    }

    /// A pure shift of 10 is estimated as 10, and its interval holds it; on ratios a
    /// pure scaling by 1.2 is +20%.
    #[test]
    fn a_known_shift_is_recovered() {
        let a = [100.0, 103.0, 98.0, 101.0, 99.5];
        let b: Vec<f64> = a.iter().map(|x| x + 10.0).collect();
        let s = shift(&a, &b, ALPHA).unwrap();
        assert!((s.estimate - 10.0).abs() < 1e-9);
        let (lo, hi) = s.ci.unwrap();
        assert!(lo <= 10.0 && 10.0 <= hi && lo > 0.0, "{lo} {hi}");
        let b: Vec<f64> = a.iter().map(|x| x * 1.2).collect();
        let r = ratio(&a, &b, ALPHA).unwrap();
        assert!((r.estimate - 0.2).abs() < 1e-9);
        assert_eq!(verdict(&r, cv(&a), cv(&b), 0.02, true), Verdict::Higher);
        let r = ratio(&b, &a, ALPHA).unwrap();
        assert_eq!(verdict(&r, cv(&a), cv(&b), 0.02, true), Verdict::Lower);
        assert!(ratio(&[0.0], &[1.0], ALPHA).is_none());
    }

    #[test]
    fn verdicts_follow_the_rules() {
        let s = |e, lo, hi| Shift {
            estimate: e,
            ci: Some((lo, hi)),
        };
        assert_eq!(
            verdict(&s(0.0, -0.01, 0.01), 0.0, 0.0, 0.02, true),
            Verdict::NoDifference
        );
        assert_eq!(
            verdict(&s(0.01, -0.01, 0.05), 0.0, 0.0, 0.02, true),
            Verdict::Inconclusive
        );
        // Significant but smaller than the minimum effect: not called.
        assert_eq!(
            verdict(&s(0.01, 0.005, 0.03), 0.0, 0.0, 0.02, true),
            Verdict::Inconclusive
        );
        assert_eq!(
            verdict(&s(0.05, 0.03, 0.07), 0.0, 0.11, 0.02, true),
            Verdict::Unstable
        );
        let none = Shift {
            estimate: 0.3,
            ci: None,
        };
        assert_eq!(verdict(&none, 0.0, 0.0, 0.02, true), Verdict::NoInterval);
        // A clear shift its family does not allow is not called.
        assert_eq!(
            verdict(&s(0.2, 0.1, 0.3), 0.0, 0.0, 0.02, false),
            Verdict::Inconclusive
        );
        assert_eq!(
            verdict(&s(0.2, 0.1, 0.3), 0.0, 0.11, 0.02, false),
            Verdict::Unstable
        );
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert!((cv(&[1.0, 1.0, 1.0]) - 0.0).abs() < 1e-12);
    }

    /// Holm: the smallest p against alpha/k, the next against alpha/(k−1)…, stopping at
    /// the first that fails; 5 against 5 runs separated completely (p = 2/252) passes in a
    /// family of 5 and not in one of 7.
    #[test]
    fn holm_steps_down_and_stops_at_the_first_failure() {
        assert_eq!(
            holm(&[0.04, 0.001, 0.015, 0.5], 0.05),
            vec![false, true, true, false]
        );
        assert_eq!(holm(&[0.03, 0.026], 0.05), vec![false, false]);
        assert_eq!(holm(&[0.026, 0.024], 0.05), vec![true, true]);
        assert_eq!(holm(&[0.02, 0.013], 0.05), vec![true, true]);
        let apart = p_value(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert!((apart - 2.0 / 252.0).abs() < 1e-12, "{apart}");
        assert!(holm(&[apart, 1.0, 1.0, 1.0, 1.0], 0.05)[0]);
        assert!(!holm(&[apart, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 0.05)[0]);
        assert!(holm(&[], 0.05).is_empty());
    }

    proptest! {
        /// The interval always holds the estimate, and shifting B by k shifts both by k.
        #[test]
        fn the_interval_holds_the_estimate_and_moves_with_b(
            a in prop::collection::vec(1.0f64..1000.0, 4..8),
            b in prop::collection::vec(1.0f64..1000.0, 4..8),
            k in -100.0f64..100.0,
        ) {
            let s = shift(&a, &b, ALPHA).unwrap();
            let (lo, hi) = s.ci.unwrap();
            prop_assert!(lo <= s.estimate && s.estimate <= hi);
            let moved: Vec<f64> = b.iter().map(|x| x + k).collect();
            let t = shift(&a, &moved, ALPHA).unwrap();
            prop_assert!((t.estimate - s.estimate - k).abs() < 1e-6);
            let (tl, th) = t.ci.unwrap();
            prop_assert!((tl - lo - k).abs() < 1e-6 && (th - hi - k).abs() < 1e-6);
            let p = p_value(&a, &b).unwrap();
            prop_assert!(p > 0.0 && p <= 1.0);
        }
    }
}
