//! libmemcached's ketama continuum (`MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED`: MD5, 160 points
//! a server at equal weights), so keys land on the server a libmemcached client (and
//! Last.fm's libketama, which it follows) would send them to.
//!
//! - A server named `host:port` gets `floor(weight / total × 40 × servers + 1e-10) × 4`
//!   points (160 at equal weights): MD5 of `host-i` (when the port is memcached's 11211)
//!   or `host:port-i`, for i from 0, each digest giving four points (its four
//!   little-endian 32-bit words).
//! - A key's hash is the first little-endian word of its MD5; it goes to the first point
//!   at or after it, the ring's first point past the last.
//!
//! `host` is the name as the user gave it (`127.0.0.1` and `localhost` place keys
//! differently, as they do in libmemcached).

use md5::{Digest, Md5};

/// memcached's default port: its servers are named without it.
pub const DEFAULT_PORT: u16 = 11211;

/// Points per server at equal weights (libmemcached's `MEMCACHED_POINTS_PER_SERVER_KETAMA`).
pub const POINTS: u32 = 160;

/// A ring of servers.
#[derive(Debug, Clone)]
pub struct Ring {
    /// (point, server index), by point.
    points: Vec<(u32, u16)>,
    servers: usize,
}

fn md5(bytes: &[u8]) -> [u8; 16] {
    Md5::digest(bytes).into()
}

fn word(d: &[u8; 16], i: usize) -> u32 {
    u32::from_le_bytes([d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]])
}

/// A key's place on the ring.
pub fn key_hash(key: &[u8]) -> u32 {
    word(&md5(key), 0)
}

impl Ring {
    /// The ring of `servers`: (host as given, port, weight). Weights of 0 count as 1.
    /// At most 65,535 servers.
    pub fn new(servers: &[(&str, u16, u32)]) -> Self {
        let n = servers.len().min(usize::from(u16::MAX));
        let total: u64 = servers[..n].iter().map(|s| u64::from(s.2.max(1))).sum();
        let mut points = Vec::new();
        for (index, &(host, port, weight)) in servers[..n].iter().enumerate() {
            // As libmemcached computes it, in single precision.
            let pct = weight.max(1) as f32 / total as f32;
            let per = ((pct * (POINTS / 4) as f32 * n as f32 + 0.000_000_000_1).floor() as u32) * 4;
            for i in 0..per / 4 {
                let name = if port == DEFAULT_PORT {
                    format!("{host}-{i}")
                } else {
                    format!("{host}:{port}-{i}")
                };
                let d = md5(name.as_bytes());
                for w in 0..4 {
                    points.push((word(&d, w), index as u16));
                }
            }
        }
        points.sort_by_key(|p| p.0);
        Self { points, servers: n }
    }

    /// The ring of `host:port` addresses (`[v6]:port` too), every weight 1; an address
    /// without a port is on memcached's default port.
    pub fn of_addrs(addrs: &[String]) -> Self {
        let parts: Vec<(&str, u16, u32)> = addrs
            .iter()
            .map(|a| match a.rsplit_once(':') {
                Some((h, p)) if !h.ends_with(':') => (h, p.parse().unwrap_or(DEFAULT_PORT), 1),
                _ => (a.as_str(), DEFAULT_PORT, 1),
            })
            .collect();
        Self::new(&parts)
    }

    /// How many servers the ring places keys on.
    pub fn servers(&self) -> usize {
        self.servers
    }

    /// The server (its index in the list given) that holds `key`.
    pub fn server_of(&self, key: &[u8]) -> usize {
        self.server_of_hash(key_hash(key))
    }

    /// The server at ring position `hash`.
    pub fn server_of_hash(&self, hash: u32) -> usize {
        let i = self.points.partition_point(|p| p.0 < hash);
        self.points
            .get(i)
            .or_else(|| self.points.first())
            .map_or(0, |p| usize::from(p.1))
    }

    /// Each server's share of the ring (the fraction of all 32-bit hashes it holds).
    pub fn shares(&self) -> Vec<f64> {
        let mut share = vec![0u64; self.servers];
        let Some(last) = self.points.last() else {
            return vec![0.0; self.servers];
        };
        // The arc up to and including each point belongs to that point's server.
        let mut prev = last.0;
        for (i, &(v, s)) in self.points.iter().enumerate() {
            let arc = if i == 0 {
                u64::from(v) + (1u64 << 32) - u64::from(prev)
            } else {
                u64::from(v - prev)
            };
            share[usize::from(s)] += arc;
            prev = v;
        }
        share
            .iter()
            .map(|&a| a as f64 / (1u64 << 32) as f64)
            .collect()
    }

    /// Points on the ring.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether the ring has no point (no server).
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Ring {
        Ring::new(&[
            ("127.0.0.1", 11211, 1),
            ("127.0.0.1", 11212, 1),
            ("127.0.0.1", 11213, 1),
        ])
    }

    #[test]
    fn equal_weights_give_160_points_a_server_and_shares_near_a_third() {
        let r = three();
        assert_eq!(r.len(), 3 * POINTS as usize);
        let shares = r.shares();
        assert!(
            (shares.iter().sum::<f64>() - 1.0).abs() < 1e-9,
            "{shares:?}"
        );
        for s in &shares {
            assert!((s - 1.0 / 3.0).abs() < 0.08, "{shares:?}");
        }
    }

    #[test]
    fn a_weight_twice_the_others_takes_twice_the_points() {
        let r = Ring::new(&[("a", 1, 2), ("b", 1, 1), ("c", 1, 1)]);
        // 2/4 × 40 × 3 = 60 hashes → 240 points; 1/4 × 40 × 3 = 30 → 120.
        assert_eq!(r.len(), 240 + 120 + 120);
    }

    #[test]
    fn an_empty_ring_and_the_wrap_around_place_keys_somewhere() {
        assert_eq!(Ring::new(&[]).server_of(b"k"), 0);
        let r = three();
        assert_eq!(r.server_of_hash(u32::MAX), r.server_of_hash(0));
    }

    /// The placement of 20 keys on a ring of three, computed independently by a Python
    /// script (hashlib's MD5, the same continuum rules) and written down here.
    #[test]
    fn placement_matches_the_reference_computation() {
        let r = three();
        let got: Vec<usize> = (0..20)
            .map(|i| r.server_of(format!("crest:{i}").as_bytes()))
            .collect();
        assert_eq!(got, REFERENCE);
        assert_eq!(key_hash(b"crest:0"), REFERENCE_HASH_0);
    }

    const REFERENCE: [usize; 20] = [0, 0, 0, 2, 2, 0, 1, 0, 2, 2, 0, 2, 0, 2, 1, 2, 1, 1, 2, 2];
    const REFERENCE_HASH_0: u32 = 2_637_678_091;
}
