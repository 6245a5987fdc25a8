//! A small, fast, seedable RNG (xoshiro256++), one per shard, derived from the run's seed
//! so a run can be repeated exactly (rpc-perf derives per-thread seeds the same way).

/// xoshiro256++ by Blackman and Vigna; not cryptographic, just fast and well distributed.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Derives the seed of stream `index` from a run seed (distinct, well mixed).
pub fn derive_seed(seed: u64, index: u64) -> u64 {
    let mut x = seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03);
    splitmix64(&mut x)
}

impl Rng {
    /// A generator seeded from one u64 (expanded with splitmix64).
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        Self {
            s: [
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
                splitmix64(&mut x),
            ],
        }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, n) without modulo bias worth measuring (Lemire's multiply-shift).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// An exponential variate with mean 1 (unit-rate Poisson process gap).
    #[inline]
    pub fn exp1(&mut self) -> f64 {
        // 1 - u is in (0, 1], so the log is finite.
        -(1.0 - self.next_f64()).ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_derived_seeds_differ() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(derive_seed(7, 0), derive_seed(7, 1));
    }

    #[test]
    fn below_covers_range_evenly() {
        let mut r = Rng::new(1);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[r.below(10) as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
    }
}
