//! A trace's records as requests on the replay's clock: each record made into the
//! requests it stands for (`op_count` repeats, `--amplify` copies under suffixed keys),
//! each request given its intended time (ns from the replay's start), and the shard that
//! sends it (by key hash, so one key's requests keep their order).
//!
//! Timing on the trace's own clock ([`OwnClock`]): a request recorded at `t` µs is
//! intended at `(t − t₀) / speed`, `t₀` the first record's time. Whole-second traces
//! (Twitter, cachebench) say only the second: the records of one second are held until
//! the next second begins (at most [`MAX_PER_SECOND`] of them, so memory stays bounded;
//! a denser second stops the replay with one line that names `--rate`) and then spread
//! over it, evenly (`k/n` of the second for the k-th of n) or as a Poisson process
//! (`n` uniform points in the second, in order). A record earlier than one before it is
//! sent at the later time (a trace's order is kept, never its clock run backwards) and
//! counted ([`OwnClock::reordered`]).
//!
//! Re-timing at a fixed rate or profile (`--rate`, `--stages`) needs no clock here: the
//! k-th request goes at the profile's k-th arrival, drawn by the caller.

use crate::Record;
use std::collections::VecDeque;

/// Most records one second of a whole-second trace may hold (what is held while the
/// second is gathered).
pub const MAX_PER_SECOND: usize = 1 << 20;

/// How the requests of one whole second are spread over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// The k-th of n at k/n of the second.
    Even,
    /// n uniform points in the second, in order (a Poisson process given its count),
    /// drawn from this seed.
    Poisson(u64),
}

/// FNV-1a, 64 bits: a key's hash for partitioning (stable across machines and versions).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The shard (of `shards`, fleet-wide) that sends `rec`: by its key's hash, so one key's
/// requests go in order through one shard; a keyless command (MONITOR's `PING`) by its
/// line.
pub fn shard_of(rec: &Record, shards: u32) -> u32 {
    let h = if rec.key.is_empty() {
        rec.line
    } else {
        fnv1a64(&rec.key)
    };
    (h % u64::from(shards.max(1))) as u32
}

/// Calls `each` with the requests `rec` stands for: `rec.repeat` times, and with
/// `amplify > 1`, each of those once per copy `i` in `0..amplify` under the key
/// `key:i` (the first key of a MONITOR command too), as cachebench's amplification does.
/// A MONITOR command's arguments are rewritten only where its first key stands. A record
/// that is one request (the usual case) is handed on as it is, not copied.
pub fn expand(rec: Record, amplify: u32, mut each: impl FnMut(Record)) {
    let amplify = if rec.key.is_empty() {
        1
    } else {
        amplify.max(1)
    };
    let repeat = rec.repeat.max(1);
    let plain = Record { repeat: 1, ..rec };
    if repeat == 1 && amplify == 1 {
        each(plain);
        return;
    }
    for _ in 0..repeat {
        if amplify == 1 {
            each(plain.clone());
            continue;
        }
        for i in 0..amplify {
            let mut r = plain.clone();
            r.key.extend_from_slice(format!(":{i}").as_bytes());
            if r.args.get(1).is_some_and(|a| *a == plain.key) {
                r.args[1] = r.key.clone();
            }
            each(r);
        }
    }
}

/// A second denser than [`MAX_PER_SECOND`]: the replay stops with this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooDense {
    /// The line where the limit was passed.
    pub line: u64,
    /// The second, on the trace's clock.
    pub second: u64,
}

impl std::fmt::Display for TooDense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {}: second {} holds more than {MAX_PER_SECOND} requests, more than a whole-second trace's spreading holds; replay it re-timed with --rate R or --stages",
            self.line, self.second
        )
    }
}

/// Requests timed on the trace's own clock: push them in file order, pop them with
/// their intended time (ns from the replay's start) in that order.
#[derive(Debug)]
pub struct OwnClock {
    speed: f64,
    spread: Spread,
    whole_seconds: bool,
    first_us: Option<u64>,
    /// The latest time pushed (µs, trace clock): earlier ones are sent at it.
    latest_us: u64,
    /// Whole seconds: the second being gathered, and its requests.
    held: VecDeque<Record>,
    /// Timed requests ready to go.
    ready: VecDeque<(u64, Record)>,
    rng: u64,
    /// Requests sent later than recorded because an earlier one had a later time.
    pub reordered: u64,
}

impl OwnClock {
    /// A clock `speed` times the trace's (2.0: twice as fast); `whole_seconds` when the
    /// format records only the second.
    pub fn new(speed: f64, spread: Spread, whole_seconds: bool) -> Self {
        let rng = match spread {
            Spread::Poisson(seed) => seed | 1,
            Spread::Even => 1,
        };
        Self {
            speed: if speed.is_finite() && speed > 0.0 {
                speed
            } else {
                1.0
            },
            spread,
            whole_seconds,
            first_us: None,
            latest_us: 0,
            held: VecDeque::new(),
            ready: VecDeque::new(),
            rng,
            reordered: 0,
        }
    }

    fn offset_ns(&self, at_us: f64) -> u64 {
        let from = at_us - self.first_us.unwrap_or(0) as f64;
        (from * 1_000.0 / self.speed).round().max(0.0) as u64
    }

    /// One request, in file order.
    ///
    /// # Errors
    /// A second of a whole-second trace holds more than [`MAX_PER_SECOND`] requests.
    pub fn push(&mut self, rec: Record) -> Result<(), TooDense> {
        self.first_us.get_or_insert(rec.at_us);
        let at = if rec.at_us < self.latest_us {
            self.reordered += 1;
            self.latest_us
        } else {
            rec.at_us
        };
        if !self.whole_seconds {
            self.latest_us = at;
            let t = self.offset_ns(at as f64);
            self.ready.push_back((t, rec));
            return Ok(());
        }
        let second = at / 1_000_000;
        if !self.held.is_empty() && second > self.latest_us / 1_000_000 {
            self.release();
        }
        self.latest_us = at;
        if self.held.len() >= MAX_PER_SECOND {
            return Err(TooDense {
                line: rec.line,
                second,
            });
        }
        self.held.push_back(rec);
        Ok(())
    }

    /// The end of the trace: the last second is spread too.
    pub fn finish(&mut self) {
        self.release();
    }

    /// The next timed request, if one is ready, left in place.
    pub fn front(&self) -> Option<&(u64, Record)> {
        self.ready.front()
    }

    /// The next timed request, if one is ready.
    pub fn pop(&mut self) -> Option<(u64, Record)> {
        self.ready.pop_front()
    }

    /// Drops every request held or ready (the run ends before them).
    pub fn clear(&mut self) {
        self.held.clear();
        self.ready.clear();
    }

    /// How many requests are held or ready.
    pub fn len(&self) -> usize {
        self.held.len() + self.ready.len()
    }

    /// Whether nothing is held or ready.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Spreads the held second over itself.
    fn release(&mut self) {
        let n = self.held.len();
        if n == 0 {
            return;
        }
        let second_us = (self.latest_us / 1_000_000 * 1_000_000) as f64;
        let fractions: Vec<f64> = match self.spread {
            Spread::Even => (0..n).map(|k| k as f64 / n as f64).collect(),
            Spread::Poisson(_) => {
                // n sorted uniforms on [0, 1): the first n of n + 1 exponential spacings,
                // normalised by their total.
                let mut acc = 0.0;
                let mut gaps: Vec<f64> = (0..=n)
                    .map(|_| {
                        acc += self.exp1();
                        acc
                    })
                    .collect();
                let total = gaps.pop().unwrap_or(1.0);
                gaps.iter().map(|g| g / total).collect()
            }
        };
        for f in fractions {
            let Some(rec) = self.held.pop_front() else {
                break;
            };
            let t = self.offset_ns(second_us + f * 1_000_000.0);
            self.ready.push_back((t, rec));
        }
    }

    /// An exponential draw of mean 1 (xorshift64*).
    fn exp1(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        -u.ln()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Op;

    fn rec(line: u64, at_s: f64, key: &str) -> Record {
        Record {
            line,
            at_us: (at_s * 1e6) as u64,
            op: Op::Get,
            key: key.as_bytes().to_vec(),
            value_size: 0,
            ttl_s: 0,
            repeat: 1,
            args: Vec::new(),
        }
    }

    fn drain(c: &mut OwnClock) -> Vec<(u64, u64)> {
        std::iter::from_fn(|| c.pop())
            .map(|(t, r)| (t, r.line))
            .collect()
    }

    #[test]
    fn a_whole_second_is_spread_evenly_and_held_until_the_next_begins() {
        let mut c = OwnClock::new(1.0, Spread::Even, true);
        for (i, s) in [10.0, 10.0, 10.0, 10.0, 11.0, 13.0, 13.0]
            .iter()
            .enumerate()
        {
            c.push(rec(i as u64 + 1, *s, "k")).unwrap();
        }
        // Second 10 is released when 11 begins; 11 when 13 begins; 13 is held.
        assert_eq!(
            drain(&mut c),
            vec![
                (0, 1),
                (250_000_000, 2),
                (500_000_000, 3),
                (750_000_000, 4),
                (1_000_000_000, 5)
            ]
        );
        assert_eq!(c.len(), 2);
        c.finish();
        assert_eq!(drain(&mut c), vec![(3_000_000_000, 6), (3_500_000_000, 7)]);
    }

    #[test]
    fn speed_divides_the_trace_clock_and_microseconds_are_kept() {
        let mut c = OwnClock::new(2.0, Spread::Even, false);
        c.push(rec(1, 100.000_001, "a")).unwrap();
        c.push(rec(2, 100.500_001, "b")).unwrap();
        c.push(rec(3, 103.000_001, "c")).unwrap();
        assert_eq!(
            drain(&mut c),
            vec![(0, 1), (250_000_000, 2), (1_500_000_000, 3)]
        );
    }

    #[test]
    fn an_earlier_time_after_a_later_one_is_sent_at_the_later_and_counted() {
        let mut c = OwnClock::new(1.0, Spread::Even, false);
        c.push(rec(1, 5.0, "a")).unwrap();
        c.push(rec(2, 6.0, "b")).unwrap();
        c.push(rec(3, 5.5, "c")).unwrap();
        assert_eq!(
            drain(&mut c),
            vec![(0, 1), (1_000_000_000, 2), (1_000_000_000, 3)]
        );
        assert_eq!(c.reordered, 1);
    }

    #[test]
    fn poisson_spreading_keeps_each_second_and_the_order() {
        let mut c = OwnClock::new(1.0, Spread::Poisson(7), true);
        let n = 10_000u64;
        for i in 0..n {
            c.push(rec(i + 1, (i / 5_000) as f64, "k")).unwrap();
        }
        c.finish();
        let out = drain(&mut c);
        assert_eq!(out.len() as u64, n);
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(out[..5_000].iter().all(|(t, _)| *t < 1_000_000_000));
        assert!(out[5_000..].iter().all(|(t, _)| *t >= 1_000_000_000));
        // Uniform in its second: the median is near the middle (σ of it ≈ 7 ms here).
        let mid = out[2_500].0 as f64 / 1e9;
        assert!((mid - 0.5).abs() < 0.05, "{mid}");
        // Not the even spacing.
        assert_ne!(out[1].0, 200_000);
    }

    #[test]
    fn a_second_too_dense_to_hold_stops_with_its_line() {
        let mut c = OwnClock::new(1.0, Spread::Even, true);
        for i in 0..MAX_PER_SECOND as u64 {
            c.push(rec(i + 1, 3.0, "k")).unwrap();
        }
        let e = c.push(rec(9, 3.0, "k")).unwrap_err();
        assert_eq!(e, TooDense { line: 9, second: 3 });
        assert!(e.to_string().contains("--rate"), "{e}");
    }

    #[test]
    fn repeats_and_amplified_copies_are_requests_of_their_own() {
        let mut r = rec(4, 0.0, "user");
        r.repeat = 2;
        let mut keys = Vec::new();
        expand(r, 3, |x| keys.push(String::from_utf8(x.key).unwrap()));
        assert_eq!(
            keys,
            ["user:0", "user:1", "user:2", "user:0", "user:1", "user:2"]
        );
        let mut m = rec(5, 0.0, "k");
        m.op = Op::Command;
        m.args = vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()];
        let mut args = Vec::new();
        expand(m, 2, |x| args.push(x.args));
        assert_eq!(args[1][1], b"k:1");
        assert_eq!(args[1][2], b"v");
        let mut one = 0;
        expand(rec(6, 0.0, ""), 5, |_| one += 1);
        assert_eq!(one, 1, "a keyless command is not amplified");
    }

    #[test]
    fn a_key_always_goes_to_one_shard_and_keys_spread_over_all() {
        let mut seen = vec![0u32; 8];
        for i in 0..8_000 {
            let r = rec(i, 0.0, &format!("key:{i}"));
            let s = shard_of(&r, 8);
            assert_eq!(s, shard_of(&rec(i + 99, 1.0, &format!("key:{i}")), 8));
            seen[s as usize] += 1;
        }
        assert!(seen.iter().all(|&n| (800..1_200).contains(&n)), "{seen:?}");
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
