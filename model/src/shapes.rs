//! Key and value shapes: which key a request touches (uniform, zipfian, sequential,
//! gaussian) and how large a value it writes (fixed, uniform range, weighted list).

use crate::rng::Rng;

/// How keys are drawn from the keyspace `[0, count)`.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Key of rank k (k = 1 is key 0) with probability ∝ 1/k^s (YCSB's "zipfian", s = 0.99).
    Zipf(f64),
    /// Keys in order, wrapping at the end; shards interleave so the cluster walks the space once.
    Sequential,
    /// Normal around `mean` with `stddev` (key indices), redrawn when outside the space.
    Gaussian {
        /// Centre, as a key index.
        mean: f64,
        /// Spread, in keys.
        stddev: f64,
    },
    /// An empirical popularity table, as cachebench's: (share of the keys, share of the
    /// requests) per bucket, buckets over consecutive key ranges from key 0; within a
    /// bucket keys are equally likely. Shares are normalized.
    Table(Vec<(f64, f64)>),
}

/// Most buckets a popularity table holds.
pub const MAX_BUCKETS: usize = 1024;

impl std::fmt::Display for KeyDist {
    /// The `--key-dist` spelling: `uniform`, `sequential`, `zipf:0.99`, `gaussian:MEAN:STDDEV`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyDist::Uniform => write!(f, "uniform"),
            KeyDist::Sequential => write!(f, "sequential"),
            KeyDist::Zipf(s) => write!(f, "zipf:{s}"),
            KeyDist::Gaussian { mean, stddev } => write!(f, "gaussian:{mean}:{stddev}"),
            KeyDist::Table(t) => {
                let parts: Vec<String> = t.iter().map(|(k, r)| format!("{k}={r}")).collect();
                write!(f, "table:{}", parts.join(","))
            }
        }
    }
}

impl std::fmt::Display for ValueSizes {
    /// The `--value-size` spelling: `1024`, `100-4096`, `100:3,4096:1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueSizes::Fixed(n) => write!(f, "{n}"),
            ValueSizes::Range(a, b) => write!(f, "{a}-{b}"),
            ValueSizes::Weighted(list) => {
                let parts: Vec<String> = list.iter().map(|(s, w)| format!("{s}:{w}")).collect();
                write!(f, "{}", parts.join(","))
            }
            ValueSizes::Etc(max) => write!(f, "etc:{max}"),
        }
    }
}

/// A bad keyspace or value setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShapeError {
    /// Empty keyspace.
    #[error("keyspace count is 0; give at least 1 key")]
    NoKeys,
    /// Zipf exponent not > 0.
    #[error("zipf exponent {0} must be > 0 (0.99 is YCSB's default)")]
    ZipfExponent(f64),
    /// Gaussian stddev not > 0.
    #[error("gaussian stddev {0} must be > 0")]
    Stddev(f64),
    /// A value size of 0 or beyond 512 MB.
    #[error("value size {0} is out of range; give 1 byte to 512 MB")]
    ValueSize(u64),
    /// A range whose low end exceeds its high end.
    #[error("value size range {0}-{1} is empty; the low end must not exceed the high end")]
    EmptyRange(u64, u64),
    /// Weights summing to 0.
    #[error("value size weights sum to 0; give at least one a weight > 0")]
    ZeroWeights,
    /// A popularity table with no bucket, too many, or a share that is not a finite
    /// number > 0.
    #[error(
        "popularity table: {0}; give 1 to 1024 buckets of KEYS=REQUESTS shares > 0, e.g. table:0.1=0.9,0.9=0.1"
    )]
    Table(String),
    /// A TTL or TTL table out of range.
    #[error(
        "TTL: {0}; give seconds from 1 (or a table SECONDS:WEIGHT,… where 0 is no TTL), e.g. 60s or 0:30,60s:50,1h:20"
    )]
    Ttl(String),
    /// A key length out of range.
    #[error("key size {0} is out of range; give 1 to 250 bytes (or etc: ETC's key sizes)")]
    KeyLength(u64),
}

/// Rejection-inversion sampling of a Zipf distribution over ranks 1..=n (Hörmann and
/// Derflinger 1996, as in Apache Commons RNG): O(1) per sample and no O(n) table, so a
/// keyspace of millions costs nothing to set up.
#[derive(Debug, Clone, PartialEq)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    threshold: f64,
}

fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

impl Zipf {
    /// A sampler over ranks 1..=n with exponent s > 0.
    pub fn new(n: u64, s: f64) -> Self {
        let mut z = Self {
            n: n as f64,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            threshold: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(z.n + 0.5);
        z.threshold = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.s) * lx) * lx
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// A rank in 1..=n.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.next_f64() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.threshold || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

/// The longest key a length distribution gives (memcached's limit; Redis takes more, but
/// a key this long is built on the stack on the routing path).
pub const MAX_KEY_LEN: u64 = 250;

/// How long each key's name is (`--key-size`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum KeyLengths {
    /// `prefix` + index, as long as that is.
    #[default]
    Natural,
    /// Each key's length drawn once from these sizes (fixed, a range, or a weighted
    /// table), the name zero-padded between prefix and index to it.
    Sizes(ValueSizes),
    /// Facebook ETC's key sizes: GEV (loc 30.7984, scale 8.20449, shape 0.078688).
    Etc,
}

impl KeyLengths {
    /// `--key-size`'s spelling: `natural`, `etc`, or a size list as `--value-size`'s.
    pub fn name(&self) -> String {
        match self {
            KeyLengths::Natural => "natural".into(),
            KeyLengths::Sizes(s) => s.to_string(),
            KeyLengths::Etc => "etc".into(),
        }
    }

    /// Checks the sizes: 1 to [`MAX_KEY_LEN`] bytes.
    ///
    /// # Errors
    /// [`ShapeError::KeyLength`] for a size out of range, or ETC's value sizes.
    pub fn check(&self) -> Result<(), ShapeError> {
        match self {
            KeyLengths::Sizes(ValueSizes::Etc(_)) => Err(ShapeError::KeyLength(0)),
            KeyLengths::Sizes(s) => {
                s.check()?;
                if s.max() > MAX_KEY_LEN {
                    return Err(ShapeError::KeyLength(s.max()));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Key `k`'s length: the same for a key on every shard, worker and run (drawn from
    /// a hash of `k`), at most [`MAX_KEY_LEN`]; 0 for natural names.
    #[inline]
    pub fn of(&self, k: u64) -> u64 {
        // splitmix64 of the index: a key's own uniform draw.
        let mut z = k.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let len = match self {
            KeyLengths::Natural => return 0,
            KeyLengths::Sizes(s) => s.next(&mut Rng::new(z)),
            KeyLengths::Etc => {
                // (0, 1): the top 53 bits, off both ends.
                let u = ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                let (loc, scale, shape) = crate::etc::KEY_GEV;
                let x = crate::etc::gev(u, loc, scale, shape).round();
                if x.is_finite() && x >= 1.0 {
                    x as u64
                } else {
                    1
                }
            }
        };
        len.min(MAX_KEY_LEN)
    }
}

/// A popularity table's buckets over `count` keys: (first key, keys, cumulative share of
/// requests); every bucket holds at least one key (a table of more buckets than keys is
/// refused).
fn buckets(t: &[(f64, f64)], count: u64) -> Result<Vec<(u64, u64, f64)>, ShapeError> {
    if t.is_empty() || t.len() > MAX_BUCKETS {
        return Err(ShapeError::Table(format!("{} buckets", t.len())));
    }
    if let Some((k, r)) = t
        .iter()
        .find(|(k, r)| !(k.is_finite() && *k > 0.0 && r.is_finite() && *r > 0.0))
    {
        return Err(ShapeError::Table(format!("a bucket {k}={r}")));
    }
    if count < t.len() as u64 {
        return Err(ShapeError::Table(format!(
            "{} buckets over {count} keys",
            t.len()
        )));
    }
    let keys: f64 = t.iter().map(|b| b.0).sum();
    let reqs: f64 = t.iter().map(|b| b.1).sum();
    let mut out = Vec::with_capacity(t.len());
    let (mut start, mut kc, mut rc) = (0u64, 0.0, 0.0);
    for (i, (k, r)) in t.iter().enumerate() {
        kc += k / keys;
        rc += r / reqs;
        let left = (t.len() - i - 1) as u64;
        let end = if left == 0 {
            count
        } else {
            ((kc * count as f64).round() as u64).clamp(start + 1, count - left)
        };
        out.push((start, end - start, if left == 0 { 1.0 } else { rc }));
        start = end;
    }
    Ok(out)
}

/// A keyspace: `count` keys named `prefix` + index, drawn by `dist`.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySpace {
    /// Number of keys.
    pub count: u64,
    /// Name prefix.
    pub prefix: Vec<u8>,
    /// Distribution.
    pub dist: KeyDist,
    /// Each key's name length.
    pub lengths: KeyLengths,
    zipf: Option<Zipf>,
    /// A popularity table's buckets: (first key, keys, cumulative share of requests).
    buckets: Vec<(u64, u64, f64)>,
}

impl KeySpace {
    /// Checks and builds a keyspace.
    ///
    /// # Errors
    /// [`ShapeError`] on an empty space or a bad parameter.
    pub fn new(count: u64, prefix: &str, dist: KeyDist) -> Result<Self, ShapeError> {
        if count == 0 {
            return Err(ShapeError::NoKeys);
        }
        let zipf = match dist {
            KeyDist::Zipf(s) if !(s > 0.0 && s.is_finite()) => {
                return Err(ShapeError::ZipfExponent(s));
            }
            KeyDist::Zipf(s) => Some(Zipf::new(count, s)),
            KeyDist::Gaussian { stddev, .. } if !(stddev > 0.0 && stddev.is_finite()) => {
                return Err(ShapeError::Stddev(stddev));
            }
            _ => None,
        };
        let buckets = match &dist {
            KeyDist::Table(t) => buckets(t, count)?,
            _ => Vec::new(),
        };
        Ok(Self {
            count,
            prefix: prefix.as_bytes().to_vec(),
            dist,
            lengths: KeyLengths::Natural,
            zipf,
            buckets,
        })
    }

    /// Keys of `lengths` from now on.
    ///
    /// # Errors
    /// [`ShapeError::KeyLength`] for a length out of range.
    pub fn with_lengths(mut self, lengths: KeyLengths) -> Result<Self, ShapeError> {
        lengths.check()?;
        self.lengths = lengths;
        Ok(self)
    }

    /// Zeros between the prefix and key `k`'s `digits` digits that make its name its
    /// length (0 for natural names, or a length the name already reaches).
    #[inline]
    pub fn pad(&self, k: u64, digits: usize) -> usize {
        if matches!(self.lengths, KeyLengths::Natural) {
            return 0;
        }
        (self.lengths.of(k) as usize).saturating_sub(self.prefix.len() + digits)
    }

    /// The next key index. `seq` is the caller's cursor for sequential walks, advanced by
    /// `stride` (the number of shards) so shards interleave.
    #[inline]
    pub fn next(&self, rng: &mut Rng, seq: &mut u64, stride: u64) -> u64 {
        match &self.dist {
            KeyDist::Uniform => rng.below(self.count),
            KeyDist::Zipf(_) => self.zipf.as_ref().map_or(0, |z| z.sample(rng) - 1),
            KeyDist::Sequential => {
                let k = *seq % self.count;
                *seq = seq.wrapping_add(stride.max(1));
                k
            }
            KeyDist::Table(_) => {
                let u = rng.next_f64();
                let b = self
                    .buckets
                    .iter()
                    .find(|b| u < b.2)
                    .or(self.buckets.last())
                    .copied()
                    .unwrap_or((0, self.count, 1.0));
                b.0 + rng.below(b.1.max(1))
            }
            KeyDist::Gaussian { mean, stddev } => {
                for _ in 0..16 {
                    // Box–Muller.
                    let u1 = 1.0 - rng.next_f64();
                    let u2 = rng.next_f64();
                    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                    let k = (mean + stddev * z).round();
                    if k >= 0.0 && k < self.count as f64 {
                        return k as u64;
                    }
                }
                (*mean as u64).min(self.count - 1)
            }
        }
    }
}

/// How large each written value is.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueSizes {
    /// Always this many bytes.
    Fixed(u64),
    /// Uniform in [min, max].
    Range(u64, u64),
    /// One of the sizes, with probability ∝ its weight.
    Weighted(Vec<(u64, u32)>),
    /// Facebook ETC's sizes ([`crate::etc::value_size`]: 0–14 bytes from a table, a
    /// generalized-Pareto tail above), capped at this many bytes.
    Etc(u64),
}

/// `--value-size etc`'s cap when none is given (the tail passes 1 MiB once in about a
/// billion draws).
pub const ETC_CAP: u64 = 1 << 20;

impl ValueSizes {
    /// Checks every size and weight.
    ///
    /// # Errors
    /// [`ShapeError`] on a size of 0 or beyond 512 MB, an empty range, or zero weights.
    pub fn check(&self) -> Result<(), ShapeError> {
        let ok = |v: u64| {
            if v == 0 || v > crest_resp::MAX_BULK_LEN {
                Err(ShapeError::ValueSize(v))
            } else {
                Ok(())
            }
        };
        match self {
            ValueSizes::Fixed(v) => ok(*v),
            ValueSizes::Range(a, b) => {
                ok(*a)?;
                ok(*b)?;
                if a > b {
                    Err(ShapeError::EmptyRange(*a, *b))
                } else {
                    Ok(())
                }
            }
            ValueSizes::Weighted(list) => {
                for (v, _) in list {
                    ok(*v)?;
                }
                if list.iter().map(|w| u64::from(w.1)).sum::<u64>() == 0 {
                    return Err(ShapeError::ZeroWeights);
                }
                Ok(())
            }
            // Its cap must leave the table whole.
            ValueSizes::Etc(max) if *max < 15 => Err(ShapeError::ValueSize(*max)),
            ValueSizes::Etc(max) => ok(*max),
        }
    }

    /// The smallest size this can produce.
    pub fn min(&self) -> u64 {
        match self {
            ValueSizes::Fixed(v) => *v,
            ValueSizes::Range(a, _) => *a,
            ValueSizes::Weighted(list) => list.iter().map(|w| w.0).min().unwrap_or(1),
            ValueSizes::Etc(_) => 0,
        }
    }

    /// The largest size this can produce.
    pub fn max(&self) -> u64 {
        match self {
            ValueSizes::Fixed(v) => *v,
            ValueSizes::Range(_, b) => *b,
            ValueSizes::Weighted(list) => list.iter().map(|w| w.0).max().unwrap_or(1),
            ValueSizes::Etc(max) => *max,
        }
    }

    /// Draws a size.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            ValueSizes::Fixed(v) => *v,
            ValueSizes::Range(a, b) => a + rng.below(b - a + 1),
            ValueSizes::Weighted(list) => {
                let total: u64 = list.iter().map(|w| u64::from(w.1)).sum();
                let mut x = rng.below(total);
                for (v, w) in list {
                    if x < u64::from(*w) {
                        return *v;
                    }
                    x -= u64::from(*w);
                }
                list.last().map_or(1, |w| w.0)
            }
            ValueSizes::Etc(max) => crate::etc::value_size(rng, *max),
        }
    }
}

/// How long a written key lives (`--ttl`, a profile's `ttl`): one TTL for every write,
/// or a table drawn per write (a captured or fitted distribution, as cachebench's).
#[derive(Debug, Clone, PartialEq)]
pub enum Ttl {
    /// Every write's TTL, in seconds (at least 1).
    Fixed(u64),
    /// Per write, one of the TTLs in seconds with probability ∝ its weight; 0 is no TTL
    /// (a `SET` without `EX`, memcached's exptime 0).
    Table(Vec<(u64, u32)>),
}

/// The most entries a TTL table holds.
pub const MAX_TTL_TABLE: usize = 1024;

impl Ttl {
    /// Checks every TTL (at most `max` seconds; a fixed one at least 1) and the weights.
    ///
    /// # Errors
    /// [`ShapeError::Ttl`] naming what is wrong.
    pub fn check(&self, max: u64) -> Result<(), ShapeError> {
        let bad = |m: String| Err(ShapeError::Ttl(m));
        match self {
            Ttl::Fixed(0) => bad("a TTL of 0 s".into()),
            Ttl::Fixed(t) if *t > max => bad(format!("{t} s is beyond {max} s")),
            Ttl::Fixed(_) => Ok(()),
            Ttl::Table(list) if list.is_empty() || list.len() > MAX_TTL_TABLE => {
                bad(format!("{} entries", list.len()))
            }
            Ttl::Table(list) => {
                if let Some((t, _)) = list.iter().find(|(t, _)| *t > max) {
                    return bad(format!("{t} s is beyond {max} s"));
                }
                if list.iter().all(|(_, w)| *w == 0) {
                    return bad("the weights sum to 0".into());
                }
                Ok(())
            }
        }
    }

    /// Whether a write may go without a TTL (a table holding 0).
    pub fn may_be_none(&self) -> bool {
        matches!(self, Ttl::Table(l) if l.iter().any(|(t, w)| *t == 0 && *w > 0))
    }

    /// The TTL of one write, in seconds (0: none). A fixed TTL draws nothing.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            Ttl::Fixed(t) => *t,
            Ttl::Table(_) => self.at(rng.below(self.weight().max(1))),
        }
    }

    /// A table's weights summed (a fixed TTL: 1); a per-request drawer keeps it.
    pub fn weight(&self) -> u64 {
        match self {
            Ttl::Fixed(_) => 1,
            Ttl::Table(list) => list.iter().map(|w| u64::from(w.1)).sum(),
        }
    }

    /// The TTL at `x` of the weights laid end to end (`x` below [`Ttl::weight`]).
    #[inline]
    pub fn at(&self, mut x: u64) -> u64 {
        match self {
            Ttl::Fixed(t) => *t,
            Ttl::Table(list) => {
                for (t, w) in list {
                    if x < u64::from(*w) {
                        return *t;
                    }
                    x -= u64::from(*w);
                }
                list.last().map_or(0, |w| w.0)
            }
        }
    }
}

impl std::fmt::Display for Ttl {
    /// The `--ttl` spelling in seconds: `60`, or `0:30,60:50,3600:20`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ttl::Fixed(t) => write!(f, "{t}"),
            Ttl::Table(list) => {
                let parts: Vec<String> = list.iter().map(|(t, w)| format!("{t}:{w}")).collect();
                write!(f, "{}", parts.join(","))
            }
        }
    }
}

/// What a value's bytes are (`--value-content`): each request's value is `len` bytes of
/// one shared buffer ([`Content::buffer`]), from an offset [`Content::window`] gives, so
/// nothing is allocated or filled per request.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Content {
    /// The same printable bytes every time (each value a prefix of one buffer).
    #[default]
    Fixed,
    /// Random bytes that differ per write: each value starts at a random offset into a
    /// buffer of random bytes [`CONTENT_WINDOW`] longer than the largest value.
    Random,
    /// Bytes a compressor shrinks about this many times (2.0: to half), differing per
    /// write as `Random`'s do: every block of 256 bytes is `256 / ratio` random
    /// bytes and a run of one byte.
    Compressible(f64),
}

/// Offsets a `Random` or `Compressible` value may start at.
pub const CONTENT_WINDOW: u64 = 64 << 10;
/// The block a `Compressible` buffer repeats its pattern in.
const BLOCK: usize = 256;
/// Most `compressible:R`.
pub const MAX_RATIO: f64 = 100.0;

impl Content {
    /// `fixed`, `random`, or `compressible:R` (R from 1 to 100: how many times a
    /// compressor shrinks it).
    ///
    /// # Errors
    /// One line naming what would be right.
    pub fn parse(s: &str) -> Result<Self, String> {
        let why = || {
            format!(
                "expected fixed, random or compressible:R (R from 1 to {MAX_RATIO}: how many times a compressor shrinks each value, e.g. compressible:2)"
            )
        };
        match s.trim() {
            "fixed" => Ok(Content::Fixed),
            "random" => Ok(Content::Random),
            other => {
                let r: f64 = other
                    .strip_prefix("compressible:")
                    .ok_or_else(why)?
                    .trim()
                    .parse()
                    .map_err(|_| why())?;
                if !(1.0..=MAX_RATIO).contains(&r) {
                    return Err(why());
                }
                Ok(Content::Compressible(r))
            }
        }
    }

    /// Offsets a value may start at: 0 for `Fixed` (always the buffer's start).
    pub fn window(self) -> u64 {
        match self {
            Content::Fixed => 0,
            _ => CONTENT_WINDOW,
        }
    }

    /// The shared buffer for values of at most `max` bytes, drawn from `seed`.
    pub fn buffer(self, max: u64, seed: u64) -> Vec<u8> {
        let mut rng = Rng::new(seed);
        let len = max.saturating_add(self.window()) as usize;
        match self {
            // Printable pseudo-random bytes: readable in redis-cli.
            Content::Fixed => (0..len)
                .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.below(36) as usize])
                .collect(),
            Content::Random => {
                let mut v = Vec::with_capacity(len + 8);
                while v.len() < len {
                    v.extend_from_slice(&rng.next_u64().to_le_bytes());
                }
                v.truncate(len);
                v
            }
            Content::Compressible(ratio) => {
                let random = ((BLOCK as f64 / ratio).round() as usize).clamp(1, BLOCK);
                let mut v = Vec::with_capacity(len + BLOCK);
                while v.len() < len {
                    for _ in 0..random {
                        v.push(rng.next_u64() as u8);
                    }
                    v.resize(v.len() + BLOCK - random, b'x');
                }
                v.truncate(len);
                v
            }
        }
    }
}

impl std::fmt::Display for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Content::Fixed => write!(f, "fixed"),
            Content::Random => write!(f, "random"),
            Content::Compressible(r) => write!(f, "compressible:{r}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most frequent key's share matches 1 / H(n, s), the generalized harmonic number.
    #[test]
    fn zipf_top_key_frequency_matches_the_exponent() {
        for s in [0.6, 0.99, 1.2] {
            let n = 1000u64;
            let ks = KeySpace::new(n, "", KeyDist::Zipf(s)).unwrap();
            let h: f64 = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).sum();
            let mut rng = Rng::new(3);
            let draws = 200_000;
            let mut counts = vec![0u32; n as usize];
            let mut seq = 0;
            for _ in 0..draws {
                counts[ks.next(&mut rng, &mut seq, 1) as usize] += 1;
            }
            for rank in [1usize, 2, 10] {
                let want = 1.0 / (rank as f64).powf(s) / h;
                let got = f64::from(counts[rank - 1]) / f64::from(draws);
                assert!(
                    (got - want).abs() < 0.05 * want + 0.001,
                    "s={s} rank {rank}: {got} vs {want}"
                );
            }
        }
        assert_eq!(
            KeySpace::new(10, "", KeyDist::Zipf(0.0)).unwrap_err(),
            ShapeError::ZipfExponent(0.0)
        );
    }

    #[test]
    fn uniform_covers_the_space_and_sequential_wraps() {
        let ks = KeySpace::new(100, "", KeyDist::Uniform).unwrap();
        let mut rng = Rng::new(1);
        let mut seen = [false; 100];
        let mut seq = 0;
        for _ in 0..5_000 {
            seen[ks.next(&mut rng, &mut seq, 1) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
        let ks = KeySpace::new(5, "", KeyDist::Sequential).unwrap();
        let mut seq = 1;
        let walk: Vec<u64> = (0..6).map(|_| ks.next(&mut rng, &mut seq, 2)).collect();
        assert_eq!(walk, vec![1, 3, 0, 2, 4, 1]);
    }

    #[test]
    fn gaussian_stays_in_the_space_and_centres_on_the_mean() {
        let ks = KeySpace::new(
            1000,
            "",
            KeyDist::Gaussian {
                mean: 500.0,
                stddev: 50.0,
            },
        )
        .unwrap();
        let mut rng = Rng::new(9);
        let mut seq = 0;
        let v: Vec<u64> = (0..20_000)
            .map(|_| ks.next(&mut rng, &mut seq, 1))
            .collect();
        let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
        assert!((mean - 500.0).abs() < 2.0, "{mean}");
        let within =
            v.iter().filter(|&&k| (450..=550).contains(&k)).count() as f64 / v.len() as f64;
        assert!((within - 0.683).abs() < 0.02, "{within}");
    }

    #[test]
    fn value_sizes_respect_bounds_and_weights() {
        let mut rng = Rng::new(5);
        let r = ValueSizes::Range(100, 200);
        let v: Vec<u64> = (0..10_000).map(|_| r.next(&mut rng)).collect();
        assert!(v.iter().all(|x| (100..=200).contains(x)));
        assert!(v.contains(&100) && v.contains(&200));
        let w = ValueSizes::Weighted(vec![(10, 3), (1000, 1)]);
        let small = (0..40_000).filter(|_| w.next(&mut rng) == 10).count() as f64 / 40_000.0;
        assert!((small - 0.75).abs() < 0.01, "{small}");
        assert_eq!(ValueSizes::Fixed(0).check(), Err(ShapeError::ValueSize(0)));
        assert_eq!(
            ValueSizes::Fixed(600 << 20).check(),
            Err(ShapeError::ValueSize(600 << 20))
        );
        assert_eq!(
            ValueSizes::Range(5, 4).check(),
            Err(ShapeError::EmptyRange(5, 4))
        );
        assert_eq!(
            ValueSizes::Weighted(vec![(5, 0)]).check(),
            Err(ShapeError::ZeroWeights)
        );
    }

    /// `--value-content`'s forms; anything else is refused naming them.
    #[test]
    fn content_parses_its_three_forms() {
        assert_eq!(Content::parse("fixed"), Ok(Content::Fixed));
        assert_eq!(Content::parse("random"), Ok(Content::Random));
        assert_eq!(
            Content::parse("compressible:2.5"),
            Ok(Content::Compressible(2.5))
        );
        for bad in [
            "",
            "rand",
            "compressible:",
            "compressible:0.5",
            "compressible:1000",
            "compressible:x",
        ] {
            let e = Content::parse(bad).unwrap_err();
            assert!(e.contains("fixed, random or compressible:R"), "{bad}: {e}");
        }
        assert_eq!(Content::Compressible(2.5).to_string(), "compressible:2.5");
    }

    /// A buffer is the largest value and the offset window long; fixed content is the
    /// same printable bytes as before this setting existed (seeded alike).
    #[test]
    fn buffers_hold_every_offset_and_fixed_is_printable() {
        assert_eq!(Content::Fixed.buffer(100, 1).len(), 100);
        assert_eq!(
            Content::Random.buffer(100, 1).len(),
            100 + CONTENT_WINDOW as usize
        );
        let f = Content::Fixed.buffer(1000, 7);
        assert!(f.iter().all(u8::is_ascii_alphanumeric));
        let mut rng = Rng::new(7);
        let before: Vec<u8> = (0..1000)
            .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.below(36) as usize])
            .collect();
        assert_eq!(f, before);
    }

    /// What a compressor makes of each content: random bytes do not shrink, and
    /// `compressible:R` shrinks about R times (zstd, within a third of R).
    #[test]
    fn compressible_content_shrinks_about_as_asked() {
        use ruzstd::encoding::{CompressionLevel, compress_to_vec};
        let ratio = |c: Content| {
            let b = c.buffer(64 << 10, 3);
            let v = &b[1234..1234 + (32 << 10)];
            v.len() as f64 / compress_to_vec(v, CompressionLevel::Fastest).len() as f64
        };
        assert!(ratio(Content::Random) < 1.05, "{}", ratio(Content::Random));
        for r in [2.0, 4.0, 10.0] {
            let got = ratio(Content::Compressible(r));
            assert!(
                (got - r).abs() <= r / 3.0,
                "compressible:{r} shrinks {got} times"
            );
        }
    }

    /// ETC sizes: a cap that would cut the table is refused; sizes stay under the cap
    /// (0-byte values included, as ETC has them); spelled `etc:CAP`.
    #[test]
    fn etc_sizes_are_capped_and_checked() {
        assert!(ValueSizes::Etc(14).check().is_err());
        assert!(
            ValueSizes::Etc(crest_resp::MAX_BULK_LEN + 1)
                .check()
                .is_err()
        );
        let v = ValueSizes::Etc(100);
        assert!(v.check().is_ok());
        assert_eq!((v.min(), v.max()), (0, 100));
        let mut rng = Rng::new(1);
        let sizes: Vec<u64> = (0..10_000).map(|_| v.next(&mut rng)).collect();
        assert!(sizes.iter().all(|&s| s <= 100));
        assert!(
            sizes.contains(&0) && sizes.contains(&100),
            "the head's 0 and the cap"
        );
        assert_eq!(v.to_string(), "etc:100");
    }

    /// Key lengths: the same for a key every time, within 1–250 bytes, and ETC's match
    /// the GEV's quantiles (10th to 99th percentile) within a byte over 100,000 keys.
    #[test]
    fn key_lengths_are_per_key_and_etc_follows_the_gev() {
        let fixed = KeyLengths::Sizes(ValueSizes::Fixed(40));
        assert!((0..1000).all(|k| fixed.of(k) == 40));
        let range = KeyLengths::Sizes(ValueSizes::Range(10, 20));
        assert!((0..1000).all(|k| (10..=20).contains(&range.of(k)) && range.of(k) == range.of(k)));
        assert_eq!(KeyLengths::Natural.of(5), 0);
        assert!(KeyLengths::Sizes(ValueSizes::Fixed(251)).check().is_err());
        assert!(KeyLengths::Sizes(ValueSizes::Etc(100)).check().is_err());
        let mut lens: Vec<u64> = (0..100_000u64).map(|k| KeyLengths::Etc.of(k)).collect();
        assert!(lens.iter().all(|&l| (1..=MAX_KEY_LEN).contains(&l)));
        lens.sort_unstable();
        let (loc, scale, shape) = crate::etc::KEY_GEV;
        for q in [0.1, 0.5, 0.9, 0.99] {
            let got = lens[(q * lens.len() as f64) as usize] as f64;
            let want = crate::etc::gev(q, loc, scale, shape);
            assert!((got - want).abs() <= 1.0, "q{q}: {got} bytes, GEV {want}");
        }
        // A keyspace pads between prefix and number, never below the natural name.
        let ks = KeySpace::new(10, "key:", KeyDist::Uniform)
            .unwrap()
            .with_lengths(fixed)
            .unwrap();
        assert_eq!(ks.pad(7, 1), 40 - 5);
        assert_eq!(ks.pad(7, 40), 0);
    }

    /// A popularity table: each bucket's share of 100,000 draws within a point of its
    /// requests' share, its keys the consecutive range of its keys' share; bad tables
    /// refused.
    #[test]
    fn a_popularity_table_sends_each_bucket_its_share() {
        let t = vec![(0.01, 0.5), (0.09, 0.3), (0.9, 0.2)];
        let ks = KeySpace::new(10_000, "k", KeyDist::Table(t)).unwrap();
        let mut rng = Rng::new(2);
        let mut hits = [0u64; 3];
        for _ in 0..100_000 {
            let k = ks.next(&mut rng, &mut 0, 1);
            let b = match k {
                0..100 => 0,
                100..1000 => 1,
                1000..10_000 => 2,
                _ => panic!("key {k} outside the space"),
            };
            hits[b] += 1;
        }
        for (h, want) in hits.iter().zip([0.5, 0.3, 0.2]) {
            assert!((*h as f64 / 1e5 - want).abs() < 0.01, "{hits:?}");
        }
        assert_eq!(
            KeyDist::Table(vec![(1.0, 3.0), (3.0, 1.0)]).to_string(),
            "table:1=3,3=1"
        );
        for bad in [vec![], vec![(0.0, 1.0)], vec![(1.0, f64::NAN)]] {
            assert!(KeySpace::new(10, "k", KeyDist::Table(bad)).is_err());
        }
        assert!(KeySpace::new(1, "k", KeyDist::Table(vec![(1.0, 1.0), (1.0, 1.0)])).is_err());
    }
}
