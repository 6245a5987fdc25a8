//! What each request of a class is: the command mix, keys, values, fields and members,
//! and their RESP encoding straight into a connection's write buffer.
//!
//! The mix is deterministic (smooth weighted round robin, as nginx balances upstreams):
//! with SET:GET = 1:10 every run of 11 requests holds exactly one SET, so the server-side
//! ratio matches the asked one at any scale instead of only on average.
//!
//! Every command, built-in or a user template like `SET __key__ __value__ EX 60`, is a list
//! of [`Part`]s with an optional repeated group (`MSET k v k v ...`, `ZADD key s m s m ...`),
//! so one encoder serves them all without allocating.

use crate::rng::Rng;
use crate::shapes::{KeySpace, ValueSizes};
use std::sync::Arc;

/// The largest value Redis accepts (proto-max-bulk-len's default).
pub const MAX_VALUE: u64 = crest_resp::MAX_BULK_LEN;

/// Built-in commands (Redis spellings, any case).
pub const BUILTINS: &[&str] = &[
    "GET",
    "SET",
    "DEL",
    "EXISTS",
    "INCR",
    "EXPIRE",
    "MGET",
    "MSET",
    "HSET",
    "HGET",
    "HGETALL",
    "LPUSH",
    "RPUSH",
    "LPOP",
    "RPOP",
    "LRANGE",
    "SADD",
    "SREM",
    "SISMEMBER",
    "ZADD",
    "ZREM",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZCARD",
    "PING",
];

/// One argument of a command.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Fixed bytes.
    Lit(Vec<u8>),
    /// A key from the keyspace (`__key__`).
    Key,
    /// A value of a size from the value distribution (`__value__`).
    Value,
    /// A hash field `f<n>` (`__field__`).
    Field,
    /// A set or sorted-set member `m<n>` (`__member__`).
    Member,
    /// A score, the member number of the same group (`__score__`).
    Score,
    /// The class's TTL in seconds (`__ttl__`).
    Ttl,
}

/// A command as the engine sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct CmdDef {
    /// Name in results (upper case: `SET`, or a template's first word).
    pub name: String,
    head: Vec<Part>,
    group: Vec<Part>,
    times: u32,
    tail: Vec<Part>,
}

/// Bad workload settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// A command Crest does not know.
    #[error("unknown command {0:?}; known: {list} or a template like \"SET __key__ __value__ EX 60\"", list = BUILTINS.join(" "))]
    UnknownCommand(String),
    /// All weights are zero.
    #[error("command weights sum to 0; give at least one command a weight > 0")]
    ZeroWeights,
    /// Keyspace, value or distribution problem.
    #[error("{0}")]
    Shape(#[from] crate::shapes::ShapeError),
    /// Batch of 0.
    #[error("batch must be ≥ 1 (members or keys per call)")]
    Batch,
    /// An empty template.
    #[error("command template is empty")]
    EmptyTemplate,
    /// A word shaped like a placeholder that is none (a typo would be sent literally).
    #[error("unknown placeholder {0}; known: {list}", list = PLACEHOLDERS.join(" "))]
    UnknownPlaceholder(String),
}

/// The placeholders a template may use.
pub const PLACEHOLDERS: [&str; 8] = [
    "__key__",
    "__value__",
    "__field__",
    "__member__",
    "__score__",
    "__ttl__",
    "__rand_int__",
    "__data__",
];

/// `__word__`: two underscores, letters, digits or underscores, two underscores.
fn is_placeholder_shaped(w: &str) -> bool {
    w.len() > 4
        && w.starts_with("__")
        && w.ends_with("__")
        && w.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric())
        && w.bytes().any(|b| b.is_ascii_alphanumeric())
}

fn lit(s: &str) -> Part {
    Part::Lit(s.as_bytes().to_vec())
}

impl CmdDef {
    /// A built-in command, or a template (any text with spaces or `__placeholders__`).
    ///
    /// # Errors
    /// [`WorkloadError::UnknownCommand`] for an unknown single word.
    pub fn parse(
        spec: &str,
        batch: u32,
        ttl: Option<u64>,
        range: u32,
    ) -> Result<Self, WorkloadError> {
        let t = spec.trim();
        if t.contains(char::is_whitespace) || t.contains("__") {
            return Self::template(t);
        }
        let name = t.to_ascii_uppercase();
        let b = batch.max(1);
        let r = range.max(1) - 1;
        let one = |head: Vec<Part>| (head, vec![], 0, vec![]);
        let (head, group, times, tail) = match name.as_str() {
            "GET" => one(vec![lit("GET"), Part::Key]),
            "SET" => match ttl {
                Some(_) => one(vec![
                    lit("SET"),
                    Part::Key,
                    Part::Value,
                    lit("EX"),
                    Part::Ttl,
                ]),
                None => one(vec![lit("SET"), Part::Key, Part::Value]),
            },
            "DEL" => one(vec![lit("DEL"), Part::Key]),
            "EXISTS" => one(vec![lit("EXISTS"), Part::Key]),
            "INCR" => one(vec![lit("INCR"), Part::Key]),
            "EXPIRE" => one(vec![lit("EXPIRE"), Part::Key, Part::Ttl]),
            "MGET" => (vec![lit("MGET")], vec![Part::Key], b, vec![]),
            "MSET" => (vec![lit("MSET")], vec![Part::Key, Part::Value], b, vec![]),
            "HSET" => (
                vec![lit("HSET"), Part::Key],
                vec![Part::Field, Part::Value],
                b,
                vec![],
            ),
            "HGET" => one(vec![lit("HGET"), Part::Key, Part::Field]),
            "HGETALL" => one(vec![lit("HGETALL"), Part::Key]),
            "LPUSH" => (vec![lit("LPUSH"), Part::Key], vec![Part::Value], b, vec![]),
            "RPUSH" => (vec![lit("RPUSH"), Part::Key], vec![Part::Value], b, vec![]),
            "LPOP" => one(vec![lit("LPOP"), Part::Key]),
            "RPOP" => one(vec![lit("RPOP"), Part::Key]),
            "LRANGE" => one(vec![
                lit("LRANGE"),
                Part::Key,
                lit("0"),
                lit(&r.to_string()),
            ]),
            "SADD" => (vec![lit("SADD"), Part::Key], vec![Part::Member], b, vec![]),
            "SREM" => one(vec![lit("SREM"), Part::Key, Part::Member]),
            "SISMEMBER" => one(vec![lit("SISMEMBER"), Part::Key, Part::Member]),
            "ZADD" => (
                vec![lit("ZADD"), Part::Key],
                vec![Part::Score, Part::Member],
                b,
                vec![],
            ),
            "ZREM" => one(vec![lit("ZREM"), Part::Key, Part::Member]),
            "ZRANGE" => one(vec![
                lit("ZRANGE"),
                Part::Key,
                lit("0"),
                lit(&r.to_string()),
            ]),
            "ZRANGEBYSCORE" => one(vec![
                lit("ZRANGEBYSCORE"),
                Part::Key,
                lit("-inf"),
                lit("+inf"),
                lit("LIMIT"),
                lit("0"),
                lit(&range.max(1).to_string()),
            ]),
            "ZCARD" => one(vec![lit("ZCARD"), Part::Key]),
            "PING" => one(vec![lit("PING")]),
            _ => return Err(WorkloadError::UnknownCommand(t.to_string())),
        };
        Ok(Self {
            name,
            head,
            group,
            times,
            tail,
        })
    }

    /// A template: words separated by spaces; `__key__`, `__value__`, `__field__`,
    /// `__member__`, `__score__`, `__ttl__` and valkey-benchmark's `__rand_int__` (a key
    /// index) are placeholders, everything else is sent as written.
    ///
    /// # Errors
    /// [`WorkloadError::EmptyTemplate`] when there are no words,
    /// [`WorkloadError::UnknownPlaceholder`] for a word like `__nope__`.
    pub fn template(spec: &str) -> Result<Self, WorkloadError> {
        let head: Vec<Part> = spec
            .split_whitespace()
            .map(|w| {
                Ok(match w {
                    "__key__" | "__rand_int__" => Part::Key,
                    "__value__" | "__data__" => Part::Value,
                    "__field__" => Part::Field,
                    "__member__" => Part::Member,
                    "__score__" => Part::Score,
                    "__ttl__" => Part::Ttl,
                    other if is_placeholder_shaped(other) => {
                        return Err(WorkloadError::UnknownPlaceholder(other.to_string()));
                    }
                    other => lit(other),
                })
            })
            .collect::<Result<_, _>>()?;
        let name = match head.first() {
            Some(Part::Lit(b)) => String::from_utf8_lossy(b).to_ascii_uppercase(),
            Some(_) => return Err(WorkloadError::UnknownCommand(spec.to_string())),
            None => return Err(WorkloadError::EmptyTemplate),
        };
        Ok(Self {
            name,
            head,
            group: vec![],
            times: 0,
            tail: vec![],
        })
    }

    fn argc(&self) -> usize {
        self.head.len() + self.group.len() * self.times as usize + self.tail.len()
    }
}

/// One class's request generator: commands with weights, keys, values, members.
#[derive(Debug, Clone)]
pub struct Workload {
    commands: Vec<(CmdDef, u32)>,
    /// The keyspace.
    pub keys: KeySpace,
    /// Value sizes.
    pub values: ValueSizes,
    /// Members (and hash fields) per key; member numbers are drawn below this.
    pub members: u64,
    /// Members are numbered in order (growth: every ZADD adds new members) instead of drawn.
    pub members_sequential: bool,
    ttl: Vec<u8>,
    /// The bytes every value is a prefix of; shared, so a connection can write a large
    /// value straight from here ([`Wire::value`]) instead of copying it per request.
    value: Arc<[u8]>,
}

/// Where [`Workload::encode_to`] writes a request: small parts are copied into `bytes`,
/// and each value (always a prefix of [`Workload::value_bytes`]) goes through `value`, so a
/// writer may refer to the shared bytes instead of copying them.
pub trait Wire {
    /// The buffer small parts are appended to.
    fn bytes(&mut self) -> &mut Vec<u8>;
    /// A value: `shared[..len]` of the workload's value bytes.
    fn value(&mut self, shared: &[u8], len: usize);
}

impl Wire for Vec<u8> {
    #[inline]
    fn bytes(&mut self) -> &mut Vec<u8> {
        self
    }

    #[inline]
    fn value(&mut self, shared: &[u8], len: usize) {
        self.extend_from_slice(&shared[..len]);
    }
}

/// Per-shard cursor state of a workload (sequential keys and members).
#[derive(Debug, Clone, Default)]
pub struct Cursor {
    /// Next sequential key.
    pub key: u64,
    /// Next sequential member.
    pub member: u64,
    /// Stride between this shard's sequential keys (the number of shards).
    pub stride: u64,
}

impl Workload {
    /// Builds a workload.
    ///
    /// # Errors
    /// [`WorkloadError`] when the weights sum to 0 or a value size is out of range.
    pub fn new(
        commands: Vec<(CmdDef, u32)>,
        keys: KeySpace,
        values: ValueSizes,
        members: u64,
        members_sequential: bool,
        ttl: Option<u64>,
        seed: u64,
    ) -> Result<Self, WorkloadError> {
        if commands.iter().map(|c| u64::from(c.1)).sum::<u64>() == 0 {
            return Err(WorkloadError::ZeroWeights);
        }
        values.check()?;
        // Printable pseudo-random bytes: incompressible enough, readable in redis-cli.
        let mut rng = Rng::new(seed);
        let value: Arc<[u8]> = (0..values.max())
            .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.below(36) as usize])
            .collect();
        Ok(Self {
            commands,
            keys,
            values,
            members: members.max(1),
            members_sequential,
            ttl: ttl.unwrap_or(60).to_string().into_bytes(),
            value,
        })
    }

    /// The shared bytes every value is a prefix of (as long as the largest value).
    pub fn value_bytes(&self) -> &Arc<[u8]> {
        &self.value
    }

    /// Names of the commands in mix order; a command's index here is its index in results.
    pub fn names(&self) -> Vec<String> {
        self.commands.iter().map(|c| c.0.name.clone()).collect()
    }

    /// A fresh mixer over this workload's weights.
    pub fn mixer(&self) -> Mixer {
        Mixer {
            weights: self.commands.iter().map(|c| i64::from(c.1)).collect(),
            current: vec![0; self.commands.len()],
            total: self.commands.iter().map(|c| i64::from(c.1)).sum(),
        }
    }

    /// Appends the RESP encoding of command number `cmd` to `out`, drawing keys, values and
    /// members from `rng` and `cur`.
    #[inline]
    pub fn encode(&self, cmd: usize, rng: &mut Rng, cur: &mut Cursor, out: &mut Vec<u8>) {
        self.encode_to(cmd, rng, cur, out);
    }

    /// [`Workload::encode`] to any [`Wire`]: the same bytes in the same order, with each
    /// value handed over as a length into [`Workload::value_bytes`].
    #[inline]
    pub fn encode_to(&self, cmd: usize, rng: &mut Rng, cur: &mut Cursor, out: &mut impl Wire) {
        let def = &self.commands[cmd].0;
        let b = out.bytes();
        b.push(b'*');
        push_uint(b, def.argc() as u64);
        b.extend_from_slice(b"\r\n");
        let mut member = None;
        for p in &def.head {
            self.part(p, rng, cur, &mut member, out);
        }
        for _ in 0..def.times {
            for p in &def.group {
                self.part(p, rng, cur, &mut member, out);
            }
        }
        for p in &def.tail {
            self.part(p, rng, cur, &mut member, out);
        }
    }

    #[inline]
    fn next_member(&self, rng: &mut Rng, cur: &mut Cursor) -> u64 {
        if self.members_sequential {
            // Shards interleave (stride = shard count) so members stay unique cluster-wide.
            let m = cur.member;
            cur.member += cur.stride.max(1);
            m
        } else {
            rng.below(self.members)
        }
    }

    #[inline]
    fn part(
        &self,
        p: &Part,
        rng: &mut Rng,
        cur: &mut Cursor,
        member: &mut Option<u64>,
        wire: &mut impl Wire,
    ) {
        if let Part::Value = p {
            let n = self.values.next(rng) as usize;
            let b = wire.bytes();
            b.push(b'$');
            push_uint(b, n as u64);
            b.extend_from_slice(b"\r\n");
            wire.value(&self.value, n);
            wire.bytes().extend_from_slice(b"\r\n");
            return;
        }
        let out = wire.bytes();
        match p {
            Part::Lit(b) => bulk(out, b),
            Part::Key => {
                let k = self.keys.next(rng, &mut cur.key, cur.stride);
                prefixed_number(out, &self.keys.prefix, k);
            }
            Part::Value => {}
            Part::Field => prefixed_number(out, b"f", rng.below(self.members)),
            Part::Score => {
                // A score and the member after it share one number, so ZRANGEBYSCORE ranges
                // line up with member order.
                let n = self.next_member(rng, cur);
                *member = Some(n);
                let mut d = [0u8; 20];
                bulk(out, digits(n, &mut d));
            }
            Part::Member => {
                let n = member.take().unwrap_or_else(|| self.next_member(rng, cur));
                prefixed_number(out, b"m", n);
            }
            Part::Ttl => bulk(out, &self.ttl),
        }
    }
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    push_uint(out, b.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

fn digits(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

fn prefixed_number(out: &mut Vec<u8>, prefix: &[u8], n: u64) {
    let mut d = [0u8; 20];
    let ds = digits(n, &mut d);
    out.push(b'$');
    push_uint(out, (prefix.len() + ds.len()) as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(prefix);
    out.extend_from_slice(ds);
    out.extend_from_slice(b"\r\n");
}

fn push_uint(out: &mut Vec<u8>, v: u64) {
    let mut d = [0u8; 20];
    out.extend_from_slice(digits(v, &mut d));
}

/// Smooth weighted round robin: each call picks the command furthest behind its share.
#[derive(Debug, Clone)]
pub struct Mixer {
    weights: Vec<i64>,
    current: Vec<i64>,
    total: i64,
}

impl Mixer {
    /// Index of the next command.
    #[inline]
    pub fn pick(&mut self) -> usize {
        if self.weights.len() == 1 {
            return 0;
        }
        let mut best = 0;
        for i in 0..self.weights.len() {
            self.current[i] += self.weights[i];
            if self.current[i] > self.current[best] {
                best = i;
            }
        }
        self.current[best] -= self.total;
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shapes::KeyDist;
    use crest_resp::Frame;

    fn w(cmds: &[(&str, u32)], batch: u32, ttl: Option<u64>) -> Workload {
        Workload::new(
            cmds.iter()
                .map(|(c, n)| (CmdDef::parse(c, batch, ttl, 10).unwrap(), *n))
                .collect(),
            KeySpace::new(1000, "key:", KeyDist::Uniform).unwrap(),
            ValueSizes::Fixed(3),
            100,
            false,
            ttl,
            1,
        )
        .unwrap()
    }

    fn args(w: &Workload, cmd: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        w.encode(cmd, &mut Rng::new(7), &mut Cursor::default(), &mut out);
        let (f, n) = Frame::parse(&out).unwrap().unwrap();
        assert_eq!(n, out.len());
        let Frame::Array(items) = f else {
            panic!("not an array")
        };
        items
            .into_iter()
            .map(|i| match i {
                Frame::Bulk(b) => b,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn mix_is_exact_in_every_cycle() {
        let w = w(&[("SET", 1), ("GET", 10)], 1, None);
        let mut m = w.mixer();
        for _ in 0..100 {
            let sets = (0..11).filter(|_| m.pick() == 0).count();
            assert_eq!(sets, 1);
        }
    }

    #[test]
    fn every_builtin_encodes_valid_resp() {
        for name in BUILTINS {
            let wl = w(&[(name, 1)], 3, Some(30));
            let a = args(&wl, 0);
            assert_eq!(String::from_utf8_lossy(&a[0]), *name);
        }
        let wl = w(&[("ZADD", 1)], 3, None);
        let a = args(&wl, 0);
        assert_eq!(a.len(), 2 + 2 * 3, "ZADD key s m s m s m");
        assert_eq!(&a[2][..], &a[3][1..], "score and member share a number");
        let wl = w(&[("SET", 1)], 1, Some(30));
        assert_eq!(args(&wl, 0)[3..], [b"EX".to_vec(), b"30".to_vec()]);
    }

    #[test]
    fn a_misspelt_placeholder_is_refused_by_name_not_sent_literally() {
        assert_eq!(
            CmdDef::template("SET __nope__ __value__").err(),
            Some(WorkloadError::UnknownPlaceholder("__nope__".into()))
        );
        // Underscores elsewhere are ordinary text.
        assert!(CmdDef::template("SET my__key__ __value__").is_ok());
        assert!(CmdDef::template("SET ____ __value__").is_ok());
        for p in PLACEHOLDERS {
            assert!(CmdDef::template(&format!("SET k{p} {p}")).is_ok(), "{p}");
        }
    }

    #[test]
    fn templates_fill_placeholders() {
        let wl = w(&[("SET __key__ __value__ EX 60", 1)], 1, None);
        let a = args(&wl, 0);
        assert_eq!(a[0], b"SET");
        assert!(a[1].starts_with(b"key:"));
        assert_eq!(a[2].len(), 3);
        assert_eq!(a[3..], [b"EX".to_vec(), b"60".to_vec()]);
        assert_eq!(wl.names(), vec!["SET".to_string()]);
        assert!(matches!(
            CmdDef::parse("FLY", 1, None, 1),
            Err(WorkloadError::UnknownCommand(_))
        ));
    }

    #[test]
    fn sequential_members_grow() {
        let wl = Workload::new(
            vec![(CmdDef::parse("ZADD", 4, None, 1).unwrap(), 1)],
            KeySpace::new(1, "z", KeyDist::Uniform).unwrap(),
            ValueSizes::Fixed(1),
            1,
            true,
            None,
            1,
        )
        .unwrap();
        let mut cur = Cursor::default();
        let mut out = Vec::new();
        wl.encode(0, &mut Rng::new(1), &mut cur, &mut out);
        wl.encode(0, &mut Rng::new(1), &mut cur, &mut out);
        assert_eq!(cur.member, 8);
    }

    #[test]
    fn zero_weights_are_an_error() {
        let e = Workload::new(
            vec![(CmdDef::parse("GET", 1, None, 1).unwrap(), 0)],
            KeySpace::new(1, "", KeyDist::Uniform).unwrap(),
            ValueSizes::Fixed(1),
            1,
            false,
            None,
            1,
        )
        .unwrap_err();
        assert_eq!(e, WorkloadError::ZeroWeights);
    }
}
