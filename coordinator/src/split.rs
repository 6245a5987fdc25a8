//! Splitting a cluster-wide quantity over shards without losing any remainder.

/// Splits `total` into `weights.len()` integer parts proportional to `weights`, by largest
/// remainder: the parts always sum to `total` exactly (no `total / n` truncation).
/// All-zero weights split evenly.
pub fn split_integer(total: u64, weights: &[u64]) -> Vec<u64> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let wsum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let weights: Vec<u128> = if wsum == 0 {
        vec![1; n]
    } else {
        weights.iter().map(|&w| u128::from(w)).collect()
    };
    let wsum: u128 = weights.iter().sum();
    let mut parts: Vec<u64> = Vec::with_capacity(n);
    let mut rems: Vec<(u128, usize)> = Vec::with_capacity(n);
    for (i, &w) in weights.iter().enumerate() {
        let exact = u128::from(total) * w;
        parts.push((exact / wsum) as u64);
        rems.push((exact % wsum, i));
    }
    let assigned: u64 = parts.iter().sum();
    // Largest remainders first; ties go to the lower index, so the split is deterministic.
    rems.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in rems.iter().take((total - assigned) as usize) {
        parts[i] += 1;
    }
    parts
}

/// Per shard, the cumulative request counts at which it pauses for the checkpoints every
/// `every` requests of a closed loop whose budget is split as `budgets`: for each k with
/// k × every ≤ Σ budgets, the shards' counts sum to exactly k × every, never decrease
/// from one checkpoint to the next and never pass a shard's budget. Each step splits
/// `every` over what the shards still have to send, in proportion (largest remainder),
/// so every shard reaches a checkpoint at about the same time.
pub fn checkpoints(budgets: &[u64], every: u64) -> Vec<Vec<u64>> {
    let total: u64 = budgets.iter().sum();
    let mut out = vec![Vec::new(); budgets.len()];
    if every == 0 {
        return out;
    }
    let mut at = vec![0u64; budgets.len()];
    let mut done = 0u64;
    while done + every <= total {
        let left: Vec<u64> = budgets.iter().zip(&at).map(|(b, a)| b - a).collect();
        for (j, part) in split_integer(every, &left).into_iter().enumerate() {
            at[j] += part;
            out[j].push(at[j]);
        }
        done += every;
    }
    out
}

/// Each shard's fraction of the cluster's rate, proportional to `weights` (summing to 1).
pub fn shares(weights: &[u64]) -> Vec<f64> {
    let sum: u64 = weights.iter().sum();
    if sum == 0 {
        return vec![1.0 / weights.len().max(1) as f64; weights.len()];
    }
    weights.iter().map(|&w| w as f64 / sum as f64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Checkpoints: each sums to k × every over the shards, rises, stays in budget.
        #[test]
        fn checkpoints_sum_rise_and_stay_in_budget(budgets in proptest::collection::vec(0u64..5_000, 1..12), every in 1u64..3_000) {
            let cps = checkpoints(&budgets, every);
            let total: u64 = budgets.iter().sum();
            let n = (total / every) as usize;
            for (j, c) in cps.iter().enumerate() {
                prop_assert_eq!(c.len(), n);
                prop_assert!(c.windows(2).all(|w| w[0] <= w[1]));
                prop_assert!(c.last().is_none_or(|l| *l <= budgets[j]));
            }
            for k in 0..n {
                prop_assert_eq!(cps.iter().map(|c| c[k]).sum::<u64>(), (k as u64 + 1) * every);
            }
        }

        /// The parts add up to the total, and each is within one of its exact share.
        #[test]
        fn integer_split_conserves_the_total(total in 0u64..10_000_000, weights in proptest::collection::vec(0u64..64, 1..40)) {
            let parts = split_integer(total, &weights);
            prop_assert_eq!(parts.len(), weights.len());
            prop_assert_eq!(parts.iter().sum::<u64>(), total);
            let wsum: u64 = weights.iter().sum();
            for (p, w) in parts.iter().zip(&weights) {
                let exact = if wsum == 0 { total as f64 / weights.len() as f64 } else { total as f64 * *w as f64 / wsum as f64 };
                prop_assert!((*p as f64 - exact).abs() < 1.0 + 1e-9, "part {} exact {}", p, exact);
            }
        }

        /// Rate shares sum to 1, so the shards together carry the whole rate.
        #[test]
        fn shares_sum_to_one(weights in proptest::collection::vec(1u64..64, 1..40)) {
            let s: f64 = shares(&weights).iter().sum();
            prop_assert!((s - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn fifty_connections_over_three_shards() {
        assert_eq!(split_integer(50, &[1, 1, 1]), vec![17, 17, 16]);
        assert_eq!(split_integer(2, &[1, 1, 1]), vec![1, 1, 0]);
    }
}
