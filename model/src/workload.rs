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
//!
//! The same parts speak memcached ([`Protocol::McText`], [`Protocol::McMeta`]): a command
//! is then words on a line (`get k`, `ms k 100 T60`), a value's part writes its length on
//! the line and its bytes after it, and [`Part::Eol`] starts another line (the meta
//! multi-get: a quiet `mg` per key, then `mn`). Each memcached command knows the reply it
//! expects ([`Expect`]), since memcached's replies do not say their own shape. With a ring
//! of servers ([`Workload::on_ring`]) a key's "slot" is its server on the ring, so the
//! engine routes a ring exactly as it routes a cluster.

use crate::rng::Rng;
use crate::shapes::{Content, KeySpace, Ttl, ValueSizes};
use crate::slot;
use crate::target::Protocol;
use crest_memcache::Expect;
use crest_memcache::ring::Ring;
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
    "SPOP",
    "ZPOPMIN",
    "XADD",
];

/// Built-in commands of a memcached target (text and meta protocols alike; the report
/// counts them under these names).
pub const MC_BUILTINS: &[&str] = &[
    "GET", "GETS", "GAT", "GATS", "MGET", "SET", "ADD", "REPLACE", "APPEND", "PREPEND", "CAS",
    "DEL", "INCR", "DECR", "TOUCH", "PING",
];

/// Commands a replica may answer: those Valkey and Redis flag `readonly` that a workload
/// may name (sorted, upper case). Anything else goes to the primary under `--read-from`.
pub const READ_ONLY: &[&str] = &[
    "BITCOUNT",
    "BITPOS",
    "DBSIZE",
    "DUMP",
    "EVALSHA_RO",
    "EVAL_RO",
    "EXISTS",
    "EXPIRETIME",
    "FCALL_RO",
    "GEODIST",
    "GEOHASH",
    "GEOPOS",
    "GEORADIUSBYMEMBER_RO",
    "GEORADIUS_RO",
    "GEOSEARCH",
    "GET",
    "GETBIT",
    "GETRANGE",
    "HEXISTS",
    "HGET",
    "HGETALL",
    "HKEYS",
    "HLEN",
    "HMGET",
    "HRANDFIELD",
    "HSCAN",
    "HSTRLEN",
    "HVALS",
    "KEYS",
    "LCS",
    "LINDEX",
    "LLEN",
    "LPOS",
    "LRANGE",
    "MGET",
    "PEXPIRETIME",
    "PFCOUNT",
    "PTTL",
    "RANDOMKEY",
    "SCAN",
    "SCARD",
    "SDIFF",
    "SINTER",
    "SINTERCARD",
    "SISMEMBER",
    "SMEMBERS",
    "SMISMEMBER",
    "SORT_RO",
    "SRANDMEMBER",
    "SSCAN",
    "STRLEN",
    "SUBSTR",
    "SUNION",
    "TTL",
    "TYPE",
    "XLEN",
    "XPENDING",
    "XRANGE",
    "XREAD",
    "XREVRANGE",
    "ZCARD",
    "ZCOUNT",
    "ZDIFF",
    "ZINTER",
    "ZINTERCARD",
    "ZLEXCOUNT",
    "ZMSCORE",
    "ZRANDMEMBER",
    "ZRANGE",
    "ZRANGEBYLEX",
    "ZRANGEBYSCORE",
    "ZRANK",
    "ZREVRANGE",
    "ZREVRANGEBYLEX",
    "ZREVRANGEBYSCORE",
    "ZREVRANK",
    "ZSCAN",
    "ZSCORE",
    "ZUNION",
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
    /// The class's TTL in seconds (`__ttl__`; drawn per request from a TTL table).
    Ttl,
    /// RESP `SET`'s `EX <seconds>`: two words, or none when a TTL table draws 0 (no TTL).
    ExTtl,
    /// memcached meta's TTL flag `T<seconds>`.
    TtlFlag,
    /// valkey-benchmark's `-r`: a word with `__rand12__` inside (`key:__rand12__`), the
    /// placeholder replaced by a number drawn uniformly below the keyspace's size, zero
    /// padded to 12 digits (`key:000000001234`), each occurrence drawn anew.
    Padded(Vec<u8>, Vec<u8>),
    /// memcached: the end of a line (and of the value after it, if the line had one); the
    /// parts after it start a new line.
    Eol,
}

/// How a command's parts go on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// A RESP array of bulk strings.
    Resp,
    /// RESP's inline form: words and spaces, then CRLF.
    Inline,
    /// memcached: words and spaces on a line, each value's bytes after its line.
    Mc,
}

/// The embedded placeholder of [`Part::Padded`].
pub const RAND12: &str = "__rand12__";
/// A command string that starts with this is sent inline (`PING\r\n`, as
/// valkey-benchmark's PING_INLINE), its words as written.
pub const INLINE: &str = "inline:";

/// A command as the engine sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct CmdDef {
    /// Name in results (upper case: `SET`, or a template's first word).
    pub name: String,
    head: Vec<Part>,
    group: Vec<Part>,
    times: u32,
    tail: Vec<Part>,
    /// Whether it names a key.
    has_key: bool,
    /// How it is written.
    form: Form,
    /// memcached: the reply it expects; None for RESP (whose replies say their shape).
    expect: Option<Expect>,
    /// Keys it names (a batch's count included).
    keys: u32,
}

/// Bad workload settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// A command Crest does not know.
    #[error("unknown command {0:?}; known: {list} or a template like \"SET __key__ __value__ EX 60\"", list = BUILTINS.join(" "))]
    UnknownCommand(String),
    /// A TTL table that may draw 0 (no TTL) for a RESP command other than `SET`.
    #[error(
        "{0} takes the TTL, and the TTL table holds 0 (no TTL): {0} with 0 deletes the key or is refused; drop the 0 entry, or send the TTL only through SET"
    )]
    TtlNone(String),
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
    /// A quote opened and not closed, or closed and not followed by a space.
    #[error("{0}")]
    Quotes(String),
    /// A word shaped like a placeholder that is none (a typo would be sent literally).
    #[error("unknown placeholder {0}; known: {list}", list = PLACEHOLDERS.join(" "))]
    UnknownPlaceholder(String),
    /// A command the memcached target does not have (a Redis command, or an unknown one).
    #[error("{0} is not a memcached command; a memcache:// target takes {list} or a template like \"get __key__\"", list = MC_BUILTINS.join(" "))]
    NotMemcache(String),
    /// A memcached template that would make the server answer nothing or something Crest
    /// cannot pair with it.
    #[error("{0}")]
    McTemplate(String),
    /// Cluster mode with multi-key commands over a keyspace too large to index by slot.
    #[error(
        "--keys {0} is too many for multi-key commands in cluster mode (at most {MAX_SLOT_INDEX_KEYS}); use fewer keys, --batch 1, or a hash tag in --key-prefix (e.g. 'crest:{{t}}:', which puts every key on one node)"
    )]
    SlotIndex(u64),
}

/// The placeholders a template may use (`__rand12__` inside a word: [`Part::Padded`]).
pub const PLACEHOLDERS: [&str; 9] = [
    "__key__",
    "__value__",
    "__field__",
    "__member__",
    "__score__",
    "__ttl__",
    "__rand_int__",
    "__data__",
    "__rand12__",
];

/// `spec`'s words as `redis-cli` splits a line (its `sdssplitargs`): each with whether it
/// was quoted.
fn split_args(spec: &str) -> Result<Vec<(Vec<u8>, bool)>, WorkloadError> {
    let b = spec.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let (mut word, quote) = (Vec::new(), b[i]);
        let quoted = quote == b'"' || quote == b'\'';
        if quoted {
            i += 1;
            loop {
                let Some(&c) = b.get(i) else {
                    return Err(WorkloadError::Quotes(format!(
                        "{spec:?}: a {} quote is not closed; close it, or escape it with a backslash inside the other kind of quotes",
                        if quote == b'"' { "double" } else { "single" }
                    )));
                };
                i += 1;
                match (quote, c) {
                    (q, c) if c == q => break,
                    (b'"', b'\\') => {
                        let e = b.get(i).copied().unwrap_or(b'\\');
                        i += 1;
                        match e {
                            b'n' => word.push(b'\n'),
                            b'r' => word.push(b'\r'),
                            b't' => word.push(b'\t'),
                            b'x' => match (
                                b.get(i).and_then(|&c| hex(c)),
                                b.get(i + 1).and_then(|&c| hex(c)),
                            ) {
                                (Some(h), Some(l)) => {
                                    word.push(h << 4 | l);
                                    i += 2;
                                }
                                _ => word.extend_from_slice(b"x"),
                            },
                            other => word.push(other),
                        }
                    }
                    (b'\'', b'\\') if b.get(i) == Some(&b'\'') => {
                        word.push(b'\'');
                        i += 1;
                    }
                    (_, c) => word.push(c),
                }
            }
            if b.get(i).is_some_and(|c| !c.is_ascii_whitespace()) {
                return Err(WorkloadError::Quotes(format!(
                    "{spec:?}: a closing quote must be followed by a space (as redis-cli reads it); put the whole word in quotes"
                )));
            }
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                word.push(b[i]);
                i += 1;
            }
        }
        out.push((word, quoted));
    }
    Ok(out)
}

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
    /// [`CmdDef::parse`] for a target speaking `protocol`: a memcached target takes
    /// [`MC_BUILTINS`] and memcached templates (`get __key__`, `ms __key__ __value__ T60`).
    ///
    /// # Errors
    /// [`WorkloadError::NotMemcache`] for a Redis-only or unknown command,
    /// [`WorkloadError::McTemplate`] for a template whose reply cannot be paired with it.
    pub fn parse_in(
        protocol: Protocol,
        spec: &str,
        batch: u32,
        ttl: Option<u64>,
        range: u32,
    ) -> Result<Self, WorkloadError> {
        match protocol {
            Protocol::Resp => Self::parse(spec, batch, ttl, range),
            Protocol::McText => Self::memcache(spec, false, batch, ttl),
            Protocol::McMeta => Self::memcache(spec, true, batch, ttl),
        }
    }

    /// A memcached command: a built-in by name (text or meta spelling), or a template.
    fn memcache(
        spec: &str,
        meta: bool,
        batch: u32,
        ttl: Option<u64>,
    ) -> Result<Self, WorkloadError> {
        let t = spec.trim();
        if t.starts_with(INLINE) {
            return Err(WorkloadError::McTemplate(format!(
                "{t:?}: 'inline:' is RESP's; a memcached template is already a line (e.g. \"get __key__\")"
            )));
        }
        if t.contains(char::is_whitespace) || t.contains("__") {
            return Self::mc_template(t);
        }
        let name = t.to_ascii_uppercase();
        let b = batch.max(1);
        // SET without a TTL stores for good (exptime 0); a touch without one sets 60 s,
        // as EXPIRE does for Redis. With a TTL the workload writes it (drawn per request
        // from a table, or the one TTL).
        let exptime = || if ttl.is_some() { Part::Ttl } else { lit("0") };
        let touch = || if ttl.is_some() { Part::Ttl } else { lit("60") };
        let tflag = || {
            if ttl.is_some() {
                Part::TtlFlag
            } else {
                lit("T60")
            }
        };
        let one = |head: Vec<Part>, e: Expect| (head, vec![], 0, vec![], e);
        let store = |verb: &str, mode: &str| {
            if meta {
                let mut h = vec![lit("ms"), Part::Key, Part::Value];
                if ttl.is_some() {
                    h.push(Part::TtlFlag);
                }
                if !mode.is_empty() {
                    h.push(lit(mode));
                }
                one(h, Expect::Meta)
            } else {
                one(
                    vec![lit(verb), Part::Key, lit("0"), exptime(), Part::Value],
                    Expect::Line,
                )
            }
        };
        let get = |verb: &str, flags: &[Part]| {
            if meta {
                let mut h = vec![lit("mg"), Part::Key];
                h.extend_from_slice(flags);
                one(h, Expect::Meta)
            } else {
                let mut h = vec![lit(verb)];
                if verb.starts_with("gat") {
                    h.push(touch());
                }
                h.push(Part::Key);
                one(h, Expect::Values { keys: 1 })
            }
        };
        let (head, group, times, tail, expect) = match name.as_str() {
            "GET" => get("get", &[lit("v")]),
            "GETS" => get("gets", &[lit("v"), lit("c")]),
            "GAT" => get("gat", &[lit("v"), tflag()]),
            "GATS" => get("gats", &[lit("v"), lit("c"), tflag()]),
            "MGET" if meta => (
                vec![],
                vec![lit("mg"), Part::Key, lit("v"), lit("q"), Part::Eol],
                b,
                vec![lit("mn")],
                Expect::MetaQuiet { keys: b },
            ),
            "MGET" => (
                vec![lit("get")],
                vec![Part::Key],
                b,
                vec![],
                Expect::Values { keys: b },
            ),
            "SET" => store("set", ""),
            "ADD" => store("add", "ME"),
            "REPLACE" => store("replace", "MR"),
            "APPEND" => store("append", "MA"),
            "PREPEND" => store("prepend", "MP"),
            // A compare-and-swap against a CAS value no item has (1): it exercises the
            // server's compare path and is answered EXISTS or NOT_FOUND (a miss).
            "CAS" if meta => {
                let (mut h, g, n, tl, e) = store("", "");
                h.insert(3, lit("C1"));
                (h, g, n, tl, e)
            }
            "CAS" => one(
                vec![
                    lit("cas"),
                    Part::Key,
                    lit("0"),
                    exptime(),
                    Part::Value,
                    lit("1"),
                ],
                Expect::Line,
            ),
            "DEL" | "DELETE" if meta => one(vec![lit("md"), Part::Key], Expect::Meta),
            "DEL" | "DELETE" => one(vec![lit("delete"), Part::Key], Expect::Line),
            "INCR" if meta => one(vec![lit("ma"), Part::Key], Expect::Meta),
            "INCR" => one(vec![lit("incr"), Part::Key, lit("1")], Expect::Line),
            "DECR" if meta => one(vec![lit("ma"), Part::Key, lit("MD")], Expect::Meta),
            "DECR" => one(vec![lit("decr"), Part::Key, lit("1")], Expect::Line),
            "TOUCH" if meta => one(vec![lit("mg"), Part::Key, tflag()], Expect::Meta),
            "TOUCH" => one(vec![lit("touch"), Part::Key, touch()], Expect::Line),
            "PING" if meta => one(vec![lit("mn")], Expect::Meta),
            "PING" => one(vec![lit("version")], Expect::Line),
            _ => return Err(WorkloadError::NotMemcache(t.to_string())),
        };
        let name = if name == "DELETE" { "DEL".into() } else { name };
        let mut def = Self::counted(name, head, group, times, tail);
        def.form = Form::Mc;
        def.expect = Some(expect);
        Ok(def)
    }

    /// A memcached template: one line of words (placeholders as for Redis; `__value__`
    /// writes the value's length on the line and its bytes after it). Its reply is known
    /// by its first word: `get`/`gets`/`gat`/`gats` answer values then `END`, a meta
    /// command (`mg`, `ms`, `md`, `ma`, `mn`, `me`) one meta reply, anything else one line.
    fn mc_template(t: &str) -> Result<Self, WorkloadError> {
        let mut def = Self::template(t)?;
        let verb = match def.head.first() {
            Some(Part::Lit(w)) => String::from_utf8_lossy(w).into_owned(),
            _ => String::new(),
        };
        let words: Vec<&[u8]> = def
            .head
            .iter()
            .filter_map(|p| match p {
                Part::Lit(w) => Some(w.as_slice()),
                _ => None,
            })
            .collect();
        if let Some(w) = words
            .iter()
            .find(|w| w.iter().any(|b| b.is_ascii_control() || *b == b' '))
        {
            return Err(WorkloadError::McTemplate(format!(
                "{t:?}: the word {:?} holds a space or control character, which a memcached line cannot carry",
                String::from_utf8_lossy(w)
            )));
        }
        let meta = matches!(verb.as_str(), "mg" | "ms" | "md" | "ma" | "mn" | "me");
        if words.contains(&&b"noreply"[..]) || (meta && words.contains(&&b"q"[..])) {
            return Err(WorkloadError::McTemplate(format!(
                "{t:?}: noreply and quiet (q) requests are answered with nothing, so their latency cannot be measured; leave the flag out (--batch with MGET sends a quiet multi-get ended by mn)"
            )));
        }
        if def.head.iter().filter(|p| **p == Part::Value).count() > 1 {
            return Err(WorkloadError::McTemplate(format!(
                "{t:?}: a memcached command carries at most one value"
            )));
        }
        let expect = match verb.as_str() {
            "get" | "gets" | "gat" | "gats" => Expect::Values {
                keys: def.keys.max(1),
            },
            _ if meta => Expect::Meta,
            _ => Expect::Line,
        };
        def.form = Form::Mc;
        def.expect = Some(expect);
        Ok(def)
    }

    /// Whether it sends the TTL as a word of its own in RESP (`EXPIRE`, a `__ttl__`
    /// template), where 0 would not mean "no TTL".
    pub fn ttl_word(&self) -> bool {
        self.form != Form::Mc
            && [&self.head, &self.group, &self.tail]
                .iter()
                .any(|ps| ps.contains(&Part::Ttl))
    }

    /// Keys one request names (a batch's count included).
    pub fn keys(&self) -> u32 {
        self.keys
    }

    /// The reply a memcached command expects (None: RESP).
    pub fn expect(&self) -> Option<Expect> {
        self.expect
    }

    /// Whether it only reads (`GET`, `MGET`, `HGETALL`, `ZRANGE`, …: a command the server
    /// flags `readonly`), so a replica may answer it (`--read-from`). A command not in
    /// [`READ_ONLY`] is taken as a write and goes to the primary.
    pub fn reads_only(&self) -> bool {
        self.form != Form::Mc && READ_ONLY.contains(&self.name.as_str())
    }

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
        if let Some(words) = t.strip_prefix(INLINE) {
            let mut def = Self::template(words)?;
            if def.head.iter().any(|p| !matches!(p, Part::Lit(_))) {
                return Err(WorkloadError::UnknownCommand(format!(
                    "{t} (an inline command takes no placeholders)"
                )));
            }
            def.form = Form::Inline;
            return Ok(def);
        }
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
                Some(_) => one(vec![lit("SET"), Part::Key, Part::Value, Part::ExTtl]),
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
            "SPOP" => one(vec![lit("SPOP"), Part::Key]),
            "ZPOPMIN" => one(vec![lit("ZPOPMIN"), Part::Key]),
            "XADD" => (
                vec![lit("XADD"), Part::Key, lit("*")],
                vec![Part::Field, Part::Value],
                b,
                vec![],
            ),
            _ => return Err(WorkloadError::UnknownCommand(t.to_string())),
        };
        Ok(Self::counted(name, head, group, times, tail))
    }

    /// A template: words separated by spaces, quoted as `redis-cli` quotes them (a word in
    /// "double quotes" may hold spaces and the escapes `\"`, `\\`, `\n`, `\r`, `\t`,
    /// `\xHH`; in 'single quotes' only `\'`); `__key__`, `__value__`, `__field__`,
    /// `__member__`, `__score__`, `__ttl__` and valkey-benchmark's `__rand_int__` (a key
    /// index) are placeholders, everything else (and any quoted word) is sent as written.
    ///
    /// # Errors
    /// [`WorkloadError::EmptyTemplate`] when there are no words,
    /// [`WorkloadError::UnknownPlaceholder`] for a word like `__nope__`,
    /// [`WorkloadError::Quotes`] for a quote left open.
    pub fn template(spec: &str) -> Result<Self, WorkloadError> {
        let head: Vec<Part> = split_args(spec)?
            .into_iter()
            .map(|(w, quoted)| {
                if quoted {
                    return Ok(Part::Lit(w));
                }
                let w = String::from_utf8_lossy(&w);
                Ok(match w.as_ref() {
                    "__key__" | "__rand_int__" => Part::Key,
                    "__value__" | "__data__" => Part::Value,
                    "__field__" => Part::Field,
                    "__member__" => Part::Member,
                    "__score__" => Part::Score,
                    "__ttl__" => Part::Ttl,
                    other if other.contains(RAND12) => {
                        let (a, b) = other.split_once(RAND12).unwrap_or((other, ""));
                        Part::Padded(a.as_bytes().to_vec(), b.as_bytes().to_vec())
                    }
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
        Ok(Self::counted(name, head, vec![], 0, vec![]))
    }

    fn counted(
        name: String,
        head: Vec<Part>,
        group: Vec<Part>,
        times: u32,
        tail: Vec<Part>,
    ) -> Self {
        let n = |ps: &[Part]| ps.iter().filter(|p| **p == Part::Key).count() as u32;
        let keys = n(&head) + n(&group) * times + n(&tail);
        Self {
            name,
            head,
            group,
            times,
            tail,
            has_key: keys > 0,
            form: Form::Resp,
            expect: None,
            keys,
        }
    }

    /// Words sent, `EX <seconds>` counted as two.
    fn argc(&self) -> usize {
        self.head.len()
            + usize::from(self.ex_ttl())
            + self.group.len() * self.times as usize
            + self.tail.len()
    }

    /// Whether it ends in `EX <seconds>` (RESP `SET` with a TTL).
    #[inline]
    fn ex_ttl(&self) -> bool {
        self.head.last() == Some(&Part::ExTtl)
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
    /// A TTL table drawn per request ([`Workload::with_ttl`]), with its weights' sum;
    /// None: `ttl` always.
    ttls: Option<(Ttl, u64)>,
    /// The bytes every value is a slice of; shared, so a connection can write a large
    /// value straight from here ([`Wire::value`]) instead of copying it per request.
    value: Arc<[u8]>,
    /// Offsets a value may start at (0: always the start; [`Content::window`]).
    window: u64,
    /// The one slot every key hashes to, when the key prefix holds a hash tag.
    tag_slot: Option<u16>,
    /// Cluster mode with multi-key commands: the keyspace by slot.
    same_slot: Option<Arc<SlotKeys>>,
    /// A ring of memcached servers: each key's server stands for its slot.
    ring: Option<Arc<RingKeys>>,
}

/// The most keys whose server on a ring is computed once, up front (2 bytes each); a
/// larger keyspace hashes each request's key as it is drawn (one MD5, about 0.2 µs).
pub const MAX_RING_INDEX_KEYS: u64 = 4_000_000;

/// Keys placed on a ring: the ring, and each key's server when the keyspace is small
/// enough to index.
#[derive(Debug)]
struct RingKeys {
    ring: Ring,
    server: Vec<u16>,
}

/// Where [`Workload::encode_to`] writes a request: small parts are copied into `bytes`,
/// and each value (always a slice of [`Workload::value_bytes`]) goes through `value`, so a
/// writer may refer to the shared bytes instead of copying them.
pub trait Wire {
    /// The buffer small parts are appended to.
    fn bytes(&mut self) -> &mut Vec<u8>;
    /// A value: `shared[off..off + len]` of the workload's value bytes (`off` is 0 for
    /// fixed content, a drawn offset for random or compressible content).
    fn value(&mut self, shared: &[u8], off: usize, len: usize);
}

impl Wire for Vec<u8> {
    #[inline]
    fn bytes(&mut self) -> &mut Vec<u8> {
        self
    }

    #[inline]
    fn value(&mut self, shared: &[u8], off: usize, len: usize) {
        self.extend_from_slice(&shared[off..off + len]);
    }
}

/// Bytes of the version stamp a value starts with under `--check-staleness`: a prefix
/// and its write's intended time in 16 hex digits.
pub const STAMP_LEN: usize = 24;
const STAMP_PREFIX: &[u8; 8] = b"crest:v1";

/// The stamp of a write intended at `intended` (ns since the run's start).
pub fn stamp(intended: u64) -> [u8; STAMP_LEN] {
    let mut s = [0u8; STAMP_LEN];
    s[..8].copy_from_slice(STAMP_PREFIX);
    for (i, b) in s[8..].iter_mut().enumerate() {
        let nibble = (intended >> (60 - 4 * i)) & 0xf;
        *b = b"0123456789abcdef"[nibble as usize];
    }
    s
}

/// The version a GET's reply carries, read from the reply's first bytes `head`: None
/// when it is no bulk string or nil (not checkable); `Some(None)` for a nil or a value
/// without a stamp (written by someone else, or by the prefill: older than any stamped
/// write); `Some(Some(t))` for a stamp of a write intended at `t`.
pub fn read_stamp(head: &[u8]) -> Option<Option<u64>> {
    match head.first()? {
        b'_' => return Some(None),
        b'$' => {}
        _ => return None,
    }
    let eol = head.iter().position(|&b| b == b'\r')?;
    if &head[1..eol] == b"-1" {
        return Some(None);
    }
    let body = head.get(eol + 2..)?;
    let Some(hex) = body.strip_prefix(STAMP_PREFIX.as_slice()) else {
        return Some(None);
    };
    let hex = hex.get(..16)?;
    let mut t = 0u64;
    for &b in hex {
        let d = (b as char).to_digit(16)?;
        t = (t << 4) | u64::from(d);
    }
    Some(Some(t))
}

/// A [`Wire`] that writes every value (of [`STAMP_LEN`] bytes or more) starting with a
/// stamp: what `--check-staleness` sends its SETs through. The value is copied, not
/// spliced, so the stamp goes out with it.
pub struct Stamped<'a, W: Wire> {
    /// Where the bytes go.
    pub inner: &'a mut W,
    /// The stamp ([`stamp`]).
    pub stamp: [u8; STAMP_LEN],
}

impl<W: Wire> Wire for Stamped<'_, W> {
    #[inline]
    fn bytes(&mut self) -> &mut Vec<u8> {
        self.inner.bytes()
    }

    #[inline]
    fn value(&mut self, shared: &[u8], off: usize, len: usize) {
        if len < STAMP_LEN {
            return self.inner.value(shared, off, len);
        }
        let b = self.inner.bytes();
        b.extend_from_slice(&self.stamp);
        b.extend_from_slice(&shared[off + STAMP_LEN..off + len]);
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
        let value: Arc<[u8]> = Content::Fixed.buffer(values.max(), seed).into();
        let tag_slot = (slot::hashed_part(&keys.prefix).len() < keys.prefix.len())
            .then(|| slot::key_slot(&keys.prefix));
        Ok(Self {
            commands,
            values,
            members: members.max(1),
            members_sequential,
            ttl: ttl.unwrap_or(60).to_string().into_bytes(),
            ttls: None,
            value,
            window: 0,
            // A tag complete within the prefix decides every key's slot (the digits after
            // it hold no braces).
            tag_slot,
            same_slot: None,
            ring: None,
            keys,
        })
    }

    /// Values of `content` from now on: the shared buffer made again (`seed`'s draws),
    /// each value taken from an offset [`Content::window`] allows.
    #[must_use]
    pub fn with_content(mut self, content: Content, seed: u64) -> Self {
        if content != Content::Fixed {
            self.value = content.buffer(self.values.max(), seed).into();
            self.window = content.window();
        }
        self
    }

    /// Each write's TTL from `ttl` from now on: one TTL, or a table drawn per request
    /// (a 0 drawn sends `SET` without `EX`, memcached's exptime 0).
    ///
    /// # Errors
    /// [`WorkloadError::TtlNone`] when the table may draw 0 and a RESP command other than
    /// `SET` takes the TTL (`EXPIRE k 0`, a `__ttl__` template): 0 there deletes the key
    /// rather than keeping it.
    pub fn with_ttl(mut self, ttl: Ttl) -> Result<Self, WorkloadError> {
        if ttl.may_be_none()
            && let Some((c, _)) = self.commands.iter().find(|(c, _)| c.ttl_word())
        {
            return Err(WorkloadError::TtlNone(c.name.clone()));
        }
        match ttl {
            Ttl::Fixed(t) => {
                self.ttl = t.to_string().into_bytes();
                self.ttls = None;
            }
            table => {
                let total = table.weight().max(1);
                self.ttls = Some((table, total));
            }
        }
        Ok(self)
    }

    /// One request's TTL: drawn from the table, or the one TTL.
    #[inline]
    fn ttl_now<'a>(&'a self, rng: &mut Rng, d: &'a mut [u8; 20]) -> &'a [u8] {
        match &self.ttls {
            Some((t, total)) => digits(t.at(rng.below(*total)), d),
            None => &self.ttl,
        }
    }

    /// Where a value starts in the shared buffer: 0 for fixed content, else drawn.
    #[inline]
    fn value_offset(&self, rng: &mut Rng) -> usize {
        if self.window == 0 {
            0
        } else {
            rng.below(self.window) as usize
        }
    }

    /// The reply each command expects, in mix order, for a memcached workload (None for
    /// RESP).
    pub fn expects(&self) -> Option<Vec<Expect>> {
        self.commands.iter().map(|c| c.0.expect).collect()
    }

    /// Places the keys on `ring` (a memcached target of several servers): from now on a
    /// key's "slot" ([`Workload::key_slot`]) is its server's index on the ring, and a
    /// multi-get's keys (after [`Workload::for_cluster`]) all live on its first key's
    /// server. A key prefix's hash tag means nothing to a ring.
    pub fn on_ring(&mut self, ring: Ring) {
        self.tag_slot = None;
        let mut rk = RingKeys {
            ring,
            server: Vec::new(),
        };
        if self.keys.count <= MAX_RING_INDEX_KEYS {
            rk.server = (0..self.keys.count)
                .map(|k| self.with_key_name(k, |name| rk.ring.server_of(name) as u16))
                .collect();
        }
        self.ring = Some(Arc::new(rk));
    }

    /// The shared bytes every value is a prefix of (as long as the largest value).
    pub fn value_bytes(&self) -> &Arc<[u8]> {
        &self.value
    }

    /// Names of the commands in mix order; a command's index here is its index in results.
    pub fn names(&self) -> Vec<String> {
        self.commands.iter().map(|c| c.0.name.clone()).collect()
    }

    /// Per command (in [`Workload::names`] order): whether it only reads
    /// ([`CmdDef::reads_only`]).
    pub fn reads(&self) -> Vec<bool> {
        self.commands.iter().map(|c| c.0.reads_only()).collect()
    }

    /// Per command (in [`Workload::names`] order), its part in `--check-staleness`:
    /// `Some(true)` for a one-key `SET` (its value carries a version stamp), `Some(false)`
    /// for a one-key `GET` (its reply is read for one), None for the rest.
    pub fn versioned(&self) -> Vec<Option<bool>> {
        self.commands
            .iter()
            .map(|(c, _)| match (c.form, c.keys, c.name.as_str()) {
                (Form::Mc, ..) => None,
                (_, 1, "SET") => Some(true),
                (_, 1, "GET") => Some(false),
                _ => None,
            })
            .collect()
    }

    /// The value sizes it draws.
    pub fn value_sizes(&self) -> &ValueSizes {
        &self.values
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
        let key = self.draw_key(cmd, rng, cur);
        self.encode_keyed(cmd, key, rng, cur, out);
    }

    /// Draws the first key of command number `cmd` (None: it has none, as `PING`). The
    /// engine draws it when a request is created, so in cluster mode the request's slot,
    /// and so its node, is known before it is given a connection; a request sent again
    /// after a redirect keeps it.
    #[inline]
    pub fn draw_key(&self, cmd: usize, rng: &mut Rng, cur: &mut Cursor) -> Option<u64> {
        self.commands[cmd]
            .0
            .has_key
            .then(|| self.keys.next(rng, &mut cur.key, cur.stride))
    }

    /// The cluster slot of key number `k` (`CLUSTER KEYSLOT <prefix><k>`).
    #[inline]
    pub fn key_slot(&self, k: u64) -> u16 {
        if let Some(s) = self.tag_slot {
            return s;
        }
        if let Some(r) = &self.ring {
            if let Some(&s) = r.server.get(k as usize) {
                return s;
            }
            return self.with_key_name(k, |name| r.ring.server_of(name) as u16);
        }
        self.with_key_name(k, slot::key_slot)
    }

    /// The "slot" of a key named `name` as it is (a replayed trace's): its server's index
    /// on a memcached ring ([`Workload::on_ring`]), else its cluster slot.
    #[inline]
    pub fn name_slot(&self, name: &[u8]) -> u16 {
        match &self.ring {
            Some(r) => r.ring.server_of(name) as u16,
            None => slot::key_slot(name),
        }
    }

    /// `f` of key number `k`'s name (`<prefix><k>`), built on the stack (a memcached key
    /// is at most 250 bytes; a longer Redis key is built on the heap): no allocation per
    /// request on the routing path.
    #[inline]
    fn with_key_name<R>(&self, k: u64, f: impl FnOnce(&[u8]) -> R) -> R {
        let mut d = [0u8; 20];
        let d = digits(k, &mut d);
        let p = &self.keys.prefix;
        let pad = self.keys.pad(k, d.len());
        let mut buf = [0u8; 272];
        let n = p.len() + pad + d.len();
        if n <= buf.len() {
            buf[..p.len()].copy_from_slice(p);
            buf[p.len()..p.len() + pad].fill(b'0');
            buf[p.len() + pad..n].copy_from_slice(d);
            f(&buf[..n])
        } else {
            f(&[p.as_slice(), &vec![b'0'; pad], d].concat())
        }
    }

    /// Cluster mode: makes every key of one multi-key request (`MGET`/`MSET` with
    /// `--batch`, a template with several `__key__`) share the first key's slot, as a
    /// cluster requires. With a hash tag in the key prefix every key already shares one
    /// slot; otherwise the keyspace is indexed by slot once (4 bytes a key) and the keys
    /// after the first are drawn uniformly among the keyspace's keys in that slot, so they
    /// are the same key names single-key commands use (a `GET` finds what an `MSET` wrote).
    ///
    /// # Errors
    /// [`WorkloadError::SlotIndex`] when the keyspace is too large to index.
    pub fn for_cluster(&mut self) -> Result<(), WorkloadError> {
        if self.tag_slot.is_some() || !self.commands.iter().any(|c| c.0.keys > 1) {
            return Ok(());
        }
        if self.keys.count > MAX_SLOT_INDEX_KEYS {
            return Err(WorkloadError::SlotIndex(self.keys.count));
        }
        self.same_slot = Some(Arc::new(SlotKeys::new(self)));
        Ok(())
    }

    /// Whether every key of the keyspace hashes to one slot (a hash tag in the prefix).
    pub fn single_slot(&self) -> Option<u16> {
        self.tag_slot
    }

    /// Whether some command names more than one key (needs [`Workload::for_cluster`] in a
    /// cluster).
    pub fn multi_key(&self) -> bool {
        self.commands.iter().any(|c| c.0.keys > 1)
    }

    /// [`Workload::encode_to`] with the first key given (drawn by [`Workload::draw_key`]).
    #[inline]
    pub fn encode_keyed(
        &self,
        cmd: usize,
        key: Option<u64>,
        rng: &mut Rng,
        cur: &mut Cursor,
        out: &mut impl Wire,
    ) {
        let def = &self.commands[cmd].0;
        if def.form == Form::Mc {
            return self.encode_mc(def, key, rng, cur, out);
        }
        if def.form == Form::Inline {
            let b = out.bytes();
            for (i, p) in def.head.iter().enumerate() {
                if let Part::Lit(w) = p {
                    if i > 0 {
                        b.push(b' ');
                    }
                    b.extend_from_slice(w);
                }
            }
            b.extend_from_slice(b"\r\n");
            return;
        }
        // A TTL table's draw comes first: a 0 (no TTL) leaves `EX` out, two words fewer.
        let ttl = match &self.ttls {
            Some((t, total)) if def.ex_ttl() => Some(t.at(rng.below(*total))),
            _ => None,
        };
        let b = out.bytes();
        b.push(b'*');
        push_uint(b, (def.argc() - 2 * usize::from(ttl == Some(0))) as u64);
        b.extend_from_slice(b"\r\n");
        let mut st = Draws {
            member: None,
            first: key,
            first_used: false,
            slot: None,
            ttl,
        };
        for p in &def.head {
            self.part(p, rng, cur, &mut st, out);
        }
        for _ in 0..def.times {
            for p in &def.group {
                self.part(p, rng, cur, &mut st, out);
            }
        }
        for p in &def.tail {
            self.part(p, rng, cur, &mut st, out);
        }
    }

    /// A memcached command: its words on lines, each line's value after it.
    #[inline]
    fn encode_mc(
        &self,
        def: &CmdDef,
        key: Option<u64>,
        rng: &mut Rng,
        cur: &mut Cursor,
        out: &mut impl Wire,
    ) {
        let mut st = Draws {
            member: None,
            first: key,
            first_used: false,
            slot: None,
            ttl: None,
        };
        let mut line = McLine {
            start: true,
            value: None,
        };
        for p in &def.head {
            self.mc_part(p, rng, cur, &mut st, &mut line, out);
        }
        for _ in 0..def.times {
            for p in &def.group {
                self.mc_part(p, rng, cur, &mut st, &mut line, out);
            }
        }
        for p in &def.tail {
            self.mc_part(p, rng, cur, &mut st, &mut line, out);
        }
        if !line.start {
            self.mc_part(&Part::Eol, rng, cur, &mut st, &mut line, out);
        }
    }

    #[inline]
    fn mc_part(
        &self,
        p: &Part,
        rng: &mut Rng,
        cur: &mut Cursor,
        st: &mut Draws,
        line: &mut McLine,
        wire: &mut impl Wire,
    ) {
        if let Part::Eol = p {
            wire.bytes().extend_from_slice(b"\r\n");
            if let Some(n) = line.value.take() {
                let off = self.value_offset(rng);
                wire.value(&self.value, off, n);
                wire.bytes().extend_from_slice(b"\r\n");
            }
            line.start = true;
            return;
        }
        let out = wire.bytes();
        if !line.start {
            out.push(b' ');
        }
        line.start = false;
        let mut d = [0u8; 20];
        match p {
            Part::Lit(b) => out.extend_from_slice(b),
            Part::Key => {
                let k = self.key_of(rng, cur, st);
                let ds = digits(k, &mut d);
                out.extend_from_slice(&self.keys.prefix);
                let pad = self.keys.pad(k, ds.len());
                out.resize(out.len() + pad, b'0');
                out.extend_from_slice(ds);
            }
            Part::Value => {
                let n = self.values.next(rng) as usize;
                out.extend_from_slice(digits(n as u64, &mut d));
                line.value = Some(n);
            }
            Part::Field => {
                out.push(b'f');
                out.extend_from_slice(digits(rng.below(self.members), &mut d));
            }
            Part::Score => {
                let n = self.next_member(rng, cur);
                st.member = Some(n);
                out.extend_from_slice(digits(n, &mut d));
            }
            Part::Member => {
                let n = st
                    .member
                    .take()
                    .unwrap_or_else(|| self.next_member(rng, cur));
                out.push(b'm');
                out.extend_from_slice(digits(n, &mut d));
            }
            Part::Ttl => out.extend_from_slice(self.ttl_now(rng, &mut d)),
            Part::TtlFlag => {
                out.push(b'T');
                out.extend_from_slice(self.ttl_now(rng, &mut d));
            }
            Part::ExTtl => {
                out.extend_from_slice(b"EX ");
                out.extend_from_slice(self.ttl_now(rng, &mut d));
            }
            Part::Padded(before, after) => {
                let digits = digits(rng.below(self.keys.count.max(1)), &mut d);
                out.extend_from_slice(before);
                out.extend(std::iter::repeat_n(
                    b'0',
                    12usize.saturating_sub(digits.len()),
                ));
                out.extend_from_slice(digits);
                out.extend_from_slice(after);
            }
            Part::Eol => {}
        }
    }

    /// The request's next key: its first (drawn with the request, or now), then any other
    /// in the first's slot.
    #[inline]
    fn key_of(&self, rng: &mut Rng, cur: &mut Cursor, st: &mut Draws) -> u64 {
        if st.first_used {
            self.next_key(rng, cur, st)
        } else {
            st.first_used = true;
            *st.first
                .get_or_insert_with(|| self.keys.next(rng, &mut cur.key, cur.stride))
        }
    }

    /// A key after a request's first: in the first's slot in cluster mode, else any.
    #[inline]
    fn next_key(&self, rng: &mut Rng, cur: &mut Cursor, st: &mut Draws) -> u64 {
        if let (Some(index), Some(first)) = (&self.same_slot, st.first) {
            let slot = *st.slot.get_or_insert_with(|| self.key_slot(first));
            return index.draw(slot, rng).unwrap_or(first);
        }
        self.keys.next(rng, &mut cur.key, cur.stride)
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
        st: &mut Draws,
        wire: &mut impl Wire,
    ) {
        if let Part::Value = p {
            let n = self.values.next(rng) as usize;
            let b = wire.bytes();
            b.push(b'$');
            push_uint(b, n as u64);
            b.extend_from_slice(b"\r\n");
            let off = self.value_offset(rng);
            wire.value(&self.value, off, n);
            wire.bytes().extend_from_slice(b"\r\n");
            return;
        }
        let out = wire.bytes();
        match p {
            Part::Lit(b) => bulk(out, b),
            Part::Key => {
                let k = self.key_of(rng, cur, st);
                key_name(out, &self.keys, k);
            }
            Part::Value | Part::Eol => {}
            Part::Field => prefixed_number(out, b"f", rng.below(self.members)),
            Part::Score => {
                // A score and the member after it share one number, so ZRANGEBYSCORE ranges
                // line up with member order.
                let n = self.next_member(rng, cur);
                st.member = Some(n);
                let mut d = [0u8; 20];
                bulk(out, digits(n, &mut d));
            }
            Part::Member => {
                let n = st
                    .member
                    .take()
                    .unwrap_or_else(|| self.next_member(rng, cur));
                prefixed_number(out, b"m", n);
            }
            Part::Ttl => bulk(out, self.ttl_now(rng, &mut [0; 20])),
            Part::TtlFlag => {
                let mut d = [0u8; 20];
                let t = self.ttl_now(rng, &mut d);
                out.push(b'$');
                push_uint(out, t.len() as u64 + 1);
                out.extend_from_slice(b"\r\nT");
                out.extend_from_slice(t);
                out.extend_from_slice(b"\r\n");
            }
            Part::ExTtl => match st.ttl {
                Some(0) => {}
                Some(t) => {
                    bulk(out, b"EX");
                    bulk(out, digits(t, &mut [0; 20]));
                }
                None => {
                    bulk(out, b"EX");
                    bulk(out, &self.ttl);
                }
            },
            Part::Padded(before, after) => {
                let n = rng.below(self.keys.count.max(1));
                let mut d = [0u8; 20];
                let digits = digits(n, &mut d);
                let pad = 12usize.saturating_sub(digits.len());
                out.push(b'$');
                push_uint(
                    out,
                    (before.len() + pad + digits.len() + after.len()) as u64,
                );
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(before);
                out.extend(std::iter::repeat_n(b'0', pad));
                out.extend_from_slice(digits);
                out.extend_from_slice(after);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// Where a memcached request's encoding is on its line.
struct McLine {
    /// The next word starts the line (no space before it).
    start: bool,
    /// The line carries a value of this length, written after its CRLF.
    value: Option<usize>,
}

/// What one request's parts share while it is encoded.
struct Draws {
    /// A score's number, for the member after it.
    member: Option<u64>,
    /// The request's first key.
    first: Option<u64>,
    /// Whether a part used `first` already.
    first_used: bool,
    /// The first key's slot, once a later key needed it.
    slot: Option<u16>,
    /// `EX`'s TTL, drawn before the array's length was written (None: the one TTL).
    ttl: Option<u64>,
}

/// Largest keyspace [`Workload::for_cluster`] indexes by slot (64 MB of index).
pub const MAX_SLOT_INDEX_KEYS: u64 = 16_000_000;

/// The keyspace's key numbers grouped by slot: `keys[start[s]..start[s + 1]]` are slot `s`'s.
#[derive(Debug)]
struct SlotKeys {
    start: Vec<u32>,
    keys: Vec<u32>,
}

impl SlotKeys {
    fn new(w: &Workload) -> Self {
        let n = w.keys.count as usize;
        let slots: Vec<u16> = (0..n as u64).map(|k| w.key_slot(k)).collect();
        let mut start = vec![0u32; usize::from(slot::SLOTS) + 1];
        for &s in &slots {
            start[usize::from(s) + 1] += 1;
        }
        for i in 1..start.len() {
            start[i] += start[i - 1];
        }
        let mut fill = start.clone();
        let mut keys = vec![0u32; n];
        for (k, &s) in slots.iter().enumerate() {
            let at = &mut fill[usize::from(s)];
            keys[*at as usize] = k as u32;
            *at += 1;
        }
        Self { start, keys }
    }

    /// A key of slot `s`, uniformly; None when the keyspace has none there.
    #[inline]
    fn draw(&self, s: u16, rng: &mut Rng) -> Option<u64> {
        let (a, b) = (
            self.start[usize::from(s)] as usize,
            self.start[usize::from(s) + 1] as usize,
        );
        (b > a).then(|| u64::from(self.keys[a + rng.below((b - a) as u64) as usize]))
    }
}

pub(crate) fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    push_uint(out, b.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn digits(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
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

/// Key `k`'s name as a RESP bulk string: prefix, the zeros its length asks for, index.
#[inline]
fn key_name(out: &mut Vec<u8>, keys: &KeySpace, k: u64) {
    let mut d = [0u8; 20];
    let ds = digits(k, &mut d);
    let pad = keys.pad(k, ds.len());
    out.push(b'$');
    push_uint(out, (keys.prefix.len() + pad + ds.len()) as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&keys.prefix);
    out.resize(out.len() + pad, b'0');
    out.extend_from_slice(ds);
    out.extend_from_slice(b"\r\n");
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

pub(crate) fn push_uint(out: &mut Vec<u8>, v: u64) {
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

    /// `n` requests split over the commands by weight (floors, the rest one each to the
    /// heaviest first): what `n` picks come to, without making them one by one.
    pub fn shares(&self, n: u64) -> Vec<u64> {
        let total = u128::try_from(self.total).unwrap_or(0).max(1);
        let weight = |w: i64| u128::try_from(w).unwrap_or(0);
        let mut out: Vec<u64> = self
            .weights
            .iter()
            .map(|&w| u64::try_from(u128::from(n) * weight(w) / total).unwrap_or(u64::MAX))
            .collect();
        let mut left = n - out.iter().sum::<u64>().min(n);
        let mut order: Vec<usize> = (0..out.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.weights[i]));
        for i in order.into_iter().cycle().take(out.len() * 2) {
            if left == 0 {
                break;
            }
            if self.weights[i] > 0 {
                out[i] += 1;
                left -= 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Mixer;

    /// Reads are the commands a replica answers; writes, unknown templates and memcached
    /// commands are not. The list stays sorted (a reader checks it by eye).
    #[test]
    fn reads_only_names_the_readonly_commands() {
        use super::{CmdDef, READ_ONLY};
        use crate::target::Protocol;
        let def = |p, s| CmdDef::parse_in(p, s, 3, None, 10).unwrap().reads_only();
        for c in [
            "GET",
            "MGET",
            "HGETALL",
            "ZRANGE",
            "get __key__",
            "SMEMBERS __key__",
        ] {
            assert!(def(Protocol::Resp, c), "{c}");
        }
        for c in ["SET", "INCR", "MSET", "EVAL x 0", "SETRANGE __key__ 0 x"] {
            assert!(!def(Protocol::Resp, c), "{c}");
        }
        assert!(!def(Protocol::McText, "GET"), "memcached has no replicas");
        let mut sorted = READ_ONLY.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, READ_ONLY);
    }

    #[test]
    fn templates_take_quotes_as_redis_cli_does() {
        use super::{Part, split_args};
        let words = |s: &str| -> Vec<String> {
            split_args(s)
                .unwrap()
                .into_iter()
                .map(|(w, _)| String::from_utf8(w).unwrap())
                .collect()
        };
        assert_eq!(words(r#"SET "a b" __value__"#), ["SET", "a b", "__value__"]);
        assert_eq!(
            words(r#"SET 'it\'s' "q\"\x41\n""#),
            ["SET", "it's", "q\"A\n"]
        );
        assert_eq!(words("  GET   k  "), ["GET", "k"]);
        assert_eq!(words(r#"SET "" x"#), ["SET", "", "x"]);
        for bad in [r#"SET "a b"#, "SET 'a", r#"SET "a"b"#] {
            let e = split_args(bad).unwrap_err().to_string();
            assert!(e.contains("quote"), "{bad}: {e}");
        }
        // A quoted placeholder is sent as written.
        let def = super::CmdDef::template(r#"SET "__key__" __value__"#).unwrap();
        assert_eq!(def.head[1], Part::Lit(b"__key__".to_vec()));
        assert_eq!(def.head[2], Part::Value);
    }

    #[test]
    fn shares_split_a_count_by_weight_exactly() {
        let m = Mixer {
            weights: vec![1, 10, 0],
            current: vec![0; 3],
            total: 11,
        };
        assert_eq!(m.shares(0), vec![0, 0, 0]);
        assert_eq!(m.shares(11), vec![1, 10, 0]);
        assert_eq!(m.shares(1), vec![0, 1, 0]);
        assert_eq!(m.shares(1500), vec![136, 1364, 0]);
        assert_eq!(m.shares(u64::MAX).iter().sum::<u64>(), u64::MAX);
    }

    use super::*;
    use crate::shapes::KeyDist;
    use crest_resp::Frame;
    use std::collections::BTreeMap;

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
        bulks(&out)
    }

    /// The arguments of the one request encoded in `out`.
    fn bulks(out: &[u8]) -> Vec<Vec<u8>> {
        let (f, n) = Frame::parse(out).unwrap().unwrap();
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

    /// Random content: two SETs of one size carry different bytes (each from its own
    /// offset into the shared buffer, nothing allocated per value); fixed content the same
    /// bytes; the memcached text form too.
    #[test]
    fn random_values_differ_per_write_and_fixed_ones_do_not() {
        let values = |content: Content, spec: &str| {
            let wl = Workload::new(
                vec![(CmdDef::parse(spec, 1, None, 1).unwrap(), 1)],
                KeySpace::new(10, "k", KeyDist::Uniform).unwrap(),
                ValueSizes::Fixed(200),
                1,
                false,
                None,
                1,
            )
            .unwrap()
            .with_content(content, 9);
            let mut rng = Rng::new(3);
            let mut cur = Cursor::default();
            (0..4)
                .map(|_| {
                    let mut out = Vec::new();
                    wl.encode(0, &mut rng, &mut cur, &mut out);
                    out[out.len() - 202..out.len() - 2].to_vec()
                })
                .collect::<Vec<_>>()
        };
        let fixed = values(Content::Fixed, "SET");
        assert!(fixed.windows(2).all(|w| w[0] == w[1]));
        for content in [Content::Random, Content::Compressible(3.0)] {
            let v = values(content, "SET");
            assert!(v.windows(2).all(|w| w[0] != w[1]), "{content}");
            let mc = Workload::new(
                vec![(
                    CmdDef::parse_in(Protocol::McText, "SET", 1, None, 1).unwrap(),
                    1,
                )],
                KeySpace::new(10, "k", KeyDist::Uniform).unwrap(),
                ValueSizes::Fixed(200),
                1,
                false,
                None,
                1,
            )
            .unwrap()
            .with_content(content, 9);
            let mut a = Vec::new();
            let mut b = Vec::new();
            let mut rng = Rng::new(3);
            mc.encode(0, &mut rng, &mut Cursor::default(), &mut a);
            mc.encode(0, &mut rng, &mut Cursor::default(), &mut b);
            assert_ne!(
                a[a.len() - 202..],
                b[b.len() - 202..],
                "memcached {content}"
            );
        }
    }

    /// Keys of a length distribution: every encoded key has its length, RESP and
    /// memcached alike, and routing hashes the same name the request carries.
    #[test]
    fn padded_keys_are_their_length_and_route_by_their_name() {
        for protocol in [Protocol::Resp, Protocol::McText] {
            let wl = Workload::new(
                vec![(CmdDef::parse_in(protocol, "GET", 1, None, 1).unwrap(), 1)],
                KeySpace::new(1000, "k:", KeyDist::Uniform)
                    .unwrap()
                    .with_lengths(crate::shapes::KeyLengths::Sizes(ValueSizes::Range(8, 30)))
                    .unwrap(),
                ValueSizes::Fixed(3),
                1,
                false,
                None,
                1,
            )
            .unwrap();
            let mut rng = Rng::new(4);
            for _ in 0..200 {
                let mut cur = Cursor::default();
                let k = wl.draw_key(0, &mut rng, &mut cur).unwrap();
                let mut out = Vec::new();
                wl.encode_keyed(0, Some(k), &mut rng, &mut cur, &mut out);
                let text = String::from_utf8(out).unwrap();
                let name = text
                    .split(['\r', '\n', ' '])
                    .find(|w| w.starts_with("k:"))
                    .unwrap()
                    .to_string();
                let want = wl.keys.lengths.of(k).max(2 + k.to_string().len() as u64);
                assert_eq!(name.len() as u64, want, "{protocol:?} key {k}: {name}");
                assert_eq!(
                    name.trim_start_matches("k:").trim_start_matches('0'),
                    k.to_string().trim_start_matches('0')
                );
                if protocol == Protocol::Resp {
                    assert_eq!(wl.key_slot(k), slot::key_slot(name.as_bytes()));
                }
            }
        }
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

    fn encode_one(spec: &str, keys: u64) -> Vec<u8> {
        let wl = Workload::new(
            vec![(CmdDef::parse(spec, 1, None, 1).unwrap(), 1)],
            KeySpace::new(keys, "k", KeyDist::Uniform).unwrap(),
            ValueSizes::Fixed(3),
            1,
            false,
            None,
            1,
        )
        .unwrap();
        let mut out = Vec::new();
        wl.encode(0, &mut Rng::new(7), &mut Cursor::default(), &mut out);
        out
    }

    /// valkey-benchmark's forms: an inline PING, a literal `key:__rand_int__` (no -r),
    /// and `__rand12__` inside words: 12 zero-padded digits below the keyspace's size,
    /// each occurrence drawn anew.
    #[test]
    fn benchmark_forms_encode_as_valkey_benchmark_sends_them() {
        assert_eq!(encode_one("inline:PING", 1), b"PING\r\n");
        assert!(CmdDef::parse("inline:GET __key__", 1, None, 1).is_err());
        assert_eq!(
            encode_one("SET key:__rand_int__ VXK", 1),
            b"*3\r\n$3\r\nSET\r\n$16\r\nkey:__rand_int__\r\n$3\r\nVXK\r\n"
        );
        let out =
            String::from_utf8(encode_one("ZADD z __rand12__ element:__rand12__", 100)).unwrap();
        let words: Vec<&str> = out.split("\r\n").collect();
        assert_eq!(words[5], "$12", "{out}");
        assert_eq!(words[6].len(), 12);
        assert!(words[6].parse::<u64>().unwrap() < 100);
        assert_eq!(words[7], "$20");
        assert!(words[8].starts_with("element:0000000000"), "{out}");
        assert_eq!(CmdDef::parse("SPOP", 1, None, 1).unwrap().name, "SPOP");
        let x = encode_one("XADD", 1);
        let head = b"*5\r\n$4\r\nXADD\r\n$2\r\nk0\r\n$1\r\n*\r\n$2\r\nf0\r\n$3\r\n";
        assert!(x.starts_with(head), "{}", String::from_utf8_lossy(&x));
        assert_eq!(x.len(), head.len() + 3 + 2);
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

    fn keyed_args(w: &Workload, cmd: usize, key: Option<u64>, seed: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut rng = Rng::new(seed);
        w.encode_keyed(cmd, key, &mut rng, &mut Cursor::default(), &mut out);
        bulks(&out)
    }

    /// One command (`batch` deep) over `count` keys named `prefix<n>`.
    fn one(cmd: &str, batch: u32, count: u64, prefix: &str) -> Workload {
        Workload::new(
            vec![(CmdDef::parse(cmd, batch, None, 1).unwrap(), 1)],
            KeySpace::new(count, prefix, KeyDist::Uniform).unwrap(),
            ValueSizes::Fixed(3),
            1,
            false,
            None,
            1,
        )
        .unwrap()
    }

    #[test]
    fn the_first_key_is_the_one_drawn_with_the_request_and_its_slot_is_the_keys() {
        let wl = w(&[("SET", 1), ("PING", 1)], 1, None);
        assert_eq!(
            wl.draw_key(1, &mut Rng::new(1), &mut Cursor::default()),
            None
        );
        let k = wl
            .draw_key(0, &mut Rng::new(1), &mut Cursor::default())
            .unwrap();
        assert!(k < 1000);
        let a = keyed_args(&wl, 0, Some(k), 3);
        assert_eq!(a[1], format!("key:{k}").into_bytes());
        for k in [0, 7, 999, 123_456_789] {
            let name = format!("key:{k}");
            assert_eq!(wl.key_slot(k), slot::key_slot(name.as_bytes()), "{name}");
        }
        assert_eq!(wl.single_slot(), None);
    }

    #[test]
    fn in_cluster_mode_every_key_of_a_batch_shares_the_first_keys_slot() {
        for cmd in ["MGET", "MSET"] {
            let mut wl = w(&[(cmd, 1)], 20, None);
            assert!(wl.multi_key());
            // Without the index the keys land anywhere.
            let a = keyed_args(&wl, 0, Some(5), 9);
            let keys: Vec<_> = a[1..]
                .iter()
                .step_by(if cmd == "MSET" { 2 } else { 1 })
                .collect();
            assert_eq!(keys.len(), 20);
            let slots: std::collections::HashSet<_> =
                keys.iter().map(|k| slot::key_slot(k)).collect();
            assert!(slots.len() > 1, "{cmd}: uniform keys spread over slots");
            wl.for_cluster().unwrap();
            for seed in 0..50 {
                let first = seed * 19 % 1000;
                let a = keyed_args(&wl, 0, Some(first), seed);
                let keys: Vec<_> = a[1..]
                    .iter()
                    .step_by(if cmd == "MSET" { 2 } else { 1 })
                    .collect();
                assert_eq!(keys.len(), 20);
                assert_eq!(*keys[0], format!("key:{first}").into_bytes());
                let want = wl.key_slot(first);
                for k in &keys {
                    assert_eq!(
                        slot::key_slot(k),
                        want,
                        "{cmd}: {}",
                        String::from_utf8_lossy(k)
                    );
                    let n: u64 = std::str::from_utf8(&k[4..]).unwrap().parse().unwrap();
                    assert!(n < 1000, "keys stay in the keyspace");
                }
            }
        }
    }

    #[test]
    fn a_hash_tag_in_the_prefix_puts_every_key_in_one_slot() {
        let mut wl = one("MGET", 4, 1000, "crest:{t}:");
        assert_eq!(wl.single_slot(), Some(slot::key_slot(b"t")));
        assert_eq!(wl.key_slot(77), slot::key_slot(b"crest:{t}:77"));
        wl.for_cluster().unwrap();
        assert!(wl.same_slot.is_none(), "no index needed");
        // An unclosed brace in the prefix is no tag.
        let open = one("GET", 1, 10, "crest:{");
        assert_eq!(open.single_slot(), None);
        assert_eq!(open.key_slot(3), slot::key_slot(b"crest:{3"));
    }

    #[test]
    fn a_keyspace_too_large_to_index_is_refused_with_the_way_out() {
        let mut wl = one("MSET", 2, MAX_SLOT_INDEX_KEYS + 1, "k:");
        let e = wl.for_cluster().unwrap_err().to_string();
        assert!(e.contains("--batch 1") && e.contains("hash tag"), "{e}");
        // Single-key commands need no index, whatever the keyspace.
        let mut one = w(&[("GET", 1), ("SET", 1)], 8, None);
        assert!(!one.multi_key());
        one.for_cluster().unwrap();
    }

    /// A TTL table drawn per SET: a 0 sends `SET k v` (three words, the array's length
    /// says so), anything else `EX <seconds>`, in the table's proportions.
    #[test]
    fn a_ttl_table_is_drawn_per_set_and_zero_leaves_ex_out() {
        let table = Ttl::Table(vec![(0, 1), (60, 2), (3600, 1)]);
        let wl = w(&[("SET", 1)], 1, Some(60)).with_ttl(table).unwrap();
        let (mut rng, mut cur) = (Rng::new(3), Cursor::default());
        let mut seen: BTreeMap<String, u32> = BTreeMap::new();
        for _ in 0..8000 {
            let mut out = Vec::new();
            wl.encode(0, &mut rng, &mut cur, &mut out);
            let a = bulks(&out);
            let key = match a.as_slice() {
                [s, _, v] if s == b"SET" && v.len() == 3 => "none".to_string(),
                [s, _, v, ex, t] if s == b"SET" && v.len() == 3 && ex == b"EX" => {
                    String::from_utf8(t.clone()).unwrap()
                }
                other => panic!("{other:?}"),
            };
            *seen.entry(key).or_default() += 1;
        }
        let share = |k: &str| f64::from(seen[k]) / 8000.0;
        assert!((share("none") - 0.25).abs() < 0.02, "{seen:?}");
        assert!((share("60") - 0.5).abs() < 0.02, "{seen:?}");
        assert!((share("3600") - 0.25).abs() < 0.02, "{seen:?}");
        assert_eq!(seen.len(), 3, "{seen:?}");
        // One TTL draws nothing: the same bytes as before tables existed.
        let one = w(&[("SET", 1)], 1, Some(60));
        let again = one.clone().with_ttl(Ttl::Fixed(60)).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        one.encode(0, &mut Rng::new(9), &mut Cursor::default(), &mut a);
        again.encode(0, &mut Rng::new(9), &mut Cursor::default(), &mut b);
        assert_eq!(a, b);
        assert!(a.ends_with(b"$2\r\nEX\r\n$2\r\n60\r\n"), "{a:?}");
    }

    /// `EXPIRE k 0` deletes the key and a template's `__ttl__` means what it says: a table
    /// that may draw 0 is refused for them, and taken for SET and for memcached.
    #[test]
    fn a_ttl_table_with_zero_is_refused_where_zero_is_not_none() {
        let zero = Ttl::Table(vec![(0, 1), (60, 1)]);
        for cmd in ["EXPIRE", "SET __key__ __value__ PX __ttl__"] {
            let e = w(&[(cmd, 1)], 1, Some(60))
                .with_ttl(zero.clone())
                .unwrap_err();
            assert!(matches!(e, WorkloadError::TtlNone(_)), "{cmd}: {e}");
        }
        assert!(
            w(&[("EXPIRE", 1)], 1, Some(60))
                .with_ttl(Ttl::Table(vec![(5, 1), (60, 1)]))
                .is_ok()
        );
    }
}

#[cfg(test)]
mod memcache_tests {
    use super::*;
    use crate::shapes::KeyDist;
    use std::collections::BTreeMap;

    fn mc(proto: Protocol, cmd: &str, batch: u32, ttl: Option<u64>) -> Workload {
        Workload::new(
            vec![(CmdDef::parse_in(proto, cmd, batch, ttl, 1).unwrap(), 1)],
            KeySpace::new(10, "k:", KeyDist::Sequential).unwrap(),
            ValueSizes::Fixed(3),
            1,
            false,
            ttl,
            1,
        )
        .unwrap()
    }

    fn line(w: &Workload) -> String {
        let mut out = Vec::new();
        let mut cur = Cursor {
            stride: 1,
            ..Cursor::default()
        };
        w.encode(0, &mut Rng::new(1), &mut cur, &mut out);
        String::from_utf8(out).unwrap()
    }

    /// memcached takes a table that may draw 0 for any command: exptime 0 is no TTL.
    #[test]
    fn memcached_takes_zero_ttls_everywhere() {
        let zero = Ttl::Table(vec![(0, 1), (60, 1)]);
        for p in [Protocol::McText, Protocol::McMeta] {
            for cmd in ["TOUCH", "GAT", "SET"] {
                assert!(
                    mc(p, cmd, 1, Some(60)).with_ttl(zero.clone()).is_ok(),
                    "{p:?} {cmd}"
                );
            }
        }
    }

    /// memcached's exptime (text) and `T` flag (meta) are drawn per request from a table.
    #[test]
    fn memcached_draws_exptime_from_a_ttl_table() {
        let table = Ttl::Table(vec![(0, 1), (90, 1)]);
        let draw = |p: Protocol, cmd: &str| -> BTreeMap<String, u32> {
            let wl = mc(p, cmd, 1, Some(90)).with_ttl(table.clone()).unwrap();
            let (mut rng, mut cur) = (Rng::new(5), Cursor::default());
            let mut seen = BTreeMap::new();
            for _ in 0..400 {
                let mut out = Vec::new();
                wl.encode(0, &mut rng, &mut cur, &mut out);
                let first = String::from_utf8(out).unwrap();
                let first = first.split("\r\n").next().unwrap().to_string();
                let word = match p {
                    Protocol::McMeta => first.split(' ').find(|w| w.starts_with('T')),
                    _ => first.split(' ').nth(3),
                };
                *seen.entry(word.unwrap().to_string()).or_default() += 1;
            }
            seen
        };
        let text = draw(Protocol::McText, "SET");
        assert_eq!(text.keys().collect::<Vec<_>>(), ["0", "90"], "{text:?}");
        assert!(text.values().all(|n| *n > 150), "{text:?}");
        let meta = draw(Protocol::McMeta, "SET");
        assert_eq!(meta.keys().collect::<Vec<_>>(), ["T0", "T90"], "{meta:?}");
        assert!(meta.values().all(|n| *n > 150), "{meta:?}");
    }

    #[test]
    fn text_commands_are_lines_with_values_after_them() {
        let t = Protocol::McText;
        assert_eq!(line(&mc(t, "GET", 1, None)), "get k:0\r\n");
        assert_eq!(line(&mc(t, "gets", 1, None)), "gets k:0\r\n");
        assert_eq!(line(&mc(t, "GAT", 1, Some(30))), "gat 30 k:0\r\n");
        let v = line(&mc(t, "SET", 1, None));
        assert!(
            v.starts_with("set k:0 0 0 3\r\n") && v.ends_with("\r\n") && v.len() == 20,
            "{v:?}"
        );
        assert!(line(&mc(t, "ADD", 1, Some(60))).starts_with("add k:0 0 60 3\r\n"));
        assert!(line(&mc(t, "CAS", 1, None)).starts_with("cas k:0 0 0 3 1\r\n"));
        assert_eq!(line(&mc(t, "DEL", 1, None)), "delete k:0\r\n");
        assert_eq!(line(&mc(t, "DECR", 1, None)), "decr k:0 1\r\n");
        assert_eq!(line(&mc(t, "TOUCH", 1, None)), "touch k:0 60\r\n");
        assert_eq!(line(&mc(t, "PING", 1, None)), "version\r\n");
        let m = mc(t, "MGET", 3, None);
        assert_eq!(line(&m), "get k:0 k:1 k:2\r\n");
        assert_eq!(m.expects(), Some(vec![Expect::Values { keys: 3 }]));
        assert_eq!(mc(t, "SET", 1, None).expects(), Some(vec![Expect::Line]));
        assert_eq!(w_resp().expects(), None);
    }

    fn w_resp() -> Workload {
        Workload::new(
            vec![(CmdDef::parse("GET", 1, None, 1).unwrap(), 1)],
            KeySpace::new(10, "k:", KeyDist::Uniform).unwrap(),
            ValueSizes::Fixed(3),
            1,
            false,
            None,
            1,
        )
        .unwrap()
    }

    #[test]
    fn meta_commands_and_the_quiet_multi_get() {
        let m = Protocol::McMeta;
        assert_eq!(line(&mc(m, "GET", 1, None)), "mg k:0 v\r\n");
        assert_eq!(line(&mc(m, "GATS", 1, Some(5))), "mg k:0 v c T5\r\n");
        let s = line(&mc(m, "SET", 1, Some(60)));
        assert!(s.starts_with("ms k:0 3 T60\r\n") && s.len() == 19, "{s:?}");
        assert!(line(&mc(m, "ADD", 1, None)).starts_with("ms k:0 3 ME\r\n"));
        assert!(line(&mc(m, "CAS", 1, None)).starts_with("ms k:0 3 C1\r\n"));
        assert_eq!(line(&mc(m, "DEL", 1, None)), "md k:0\r\n");
        assert_eq!(line(&mc(m, "DECR", 1, None)), "ma k:0 MD\r\n");
        assert_eq!(line(&mc(m, "TOUCH", 1, None)), "mg k:0 T60\r\n");
        assert_eq!(line(&mc(m, "PING", 1, None)), "mn\r\n");
        let g = mc(m, "MGET", 2, None);
        assert_eq!(line(&g), "mg k:0 v q\r\nmg k:1 v q\r\nmn\r\n");
        assert_eq!(g.expects(), Some(vec![Expect::MetaQuiet { keys: 2 }]));
    }

    #[test]
    fn memcached_templates_and_refusals() {
        let t = Protocol::McText;
        let w = mc(t, "set __key__ 5 0 __value__", 1, None);
        let s = line(&w);
        assert!(s.starts_with("set k:0 5 0 3\r\n"), "{s:?}");
        assert_eq!(w.expects(), Some(vec![Expect::Line]));
        assert_eq!(
            mc(t, "gets __key__ __key__", 1, None).expects(),
            Some(vec![Expect::Values { keys: 2 }])
        );
        assert_eq!(
            mc(Protocol::McMeta, "mg __key__ s v", 1, None).expects(),
            Some(vec![Expect::Meta])
        );
        for (p, bad, want) in [
            (t, "HSET", "not a memcached command"),
            (t, "EXPIRE", "not a memcached command"),
            (t, "set __key__ 0 0 __value__ noreply", "noreply"),
            (Protocol::McMeta, "mg __key__ v q", "quiet"),
            (t, "inline:get k", "inline"),
            (
                t,
                "set __key__ 0 0 __value__ __value__",
                "at most one value",
            ),
            (t, "get \"a b\"", "space"),
        ] {
            let e = CmdDef::parse_in(p, bad, 1, None, 1)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn on_a_ring_a_keys_slot_is_its_server_and_multi_gets_stay_on_one() {
        let servers: Vec<String> = (1..=3).map(|i| format!("127.0.0.{i}:11211")).collect();
        let ring = Ring::of_addrs(&servers);
        let mut w = Workload::new(
            vec![(
                CmdDef::parse_in(Protocol::McText, "MGET", 4, None, 1).unwrap(),
                1,
            )],
            KeySpace::new(1000, "k:", KeyDist::Uniform).unwrap(),
            ValueSizes::Fixed(3),
            1,
            false,
            None,
            1,
        )
        .unwrap();
        w.on_ring(ring.clone());
        w.for_cluster().unwrap();
        let mut seen = [0u32; 3];
        for k in 0..1000u64 {
            let s = w.key_slot(k);
            assert_eq!(usize::from(s), ring.server_of(format!("k:{k}").as_bytes()));
            seen[usize::from(s)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 200), "{seen:?}");
        let mut rng = Rng::new(7);
        for _ in 0..50 {
            let mut cur = Cursor::default();
            let first = w.draw_key(0, &mut rng, &mut cur);
            let mut out = Vec::new();
            w.encode_keyed(0, first, &mut rng, &mut cur, &mut out);
            let text = String::from_utf8(out).unwrap();
            let servers: std::collections::BTreeSet<usize> = text
                .trim_end()
                .split(' ')
                .skip(1)
                .map(|k| ring.server_of(k.as_bytes()))
                .collect();
            assert_eq!(servers.len(), 1, "{text}");
        }
    }

    #[test]
    fn a_stamp_reads_back_from_a_get_reply_and_others_read_as_none() {
        for t in [0, 1, 12_345_678_901, u64::MAX] {
            let st = stamp(t);
            let mut reply = format!("${}\r\n", STAMP_LEN + 4).into_bytes();
            reply.extend_from_slice(&st);
            reply.extend_from_slice(b"xxxx\r\n");
            assert_eq!(read_stamp(&reply), Some(Some(t)), "{t}");
        }
        assert_eq!(read_stamp(b"$-1\r\n"), Some(None), "nil: no version");
        assert_eq!(read_stamp(b"_\r\n"), Some(None), "RESP3 nil");
        assert_eq!(
            read_stamp(b"$5\r\nhello\r\n"),
            Some(None),
            "another writer's"
        );
        assert_eq!(read_stamp(b"+OK\r\n"), None, "not a value");
        assert_eq!(read_stamp(b"$24\r\ncrest:v1zz"), None, "a cut stamp");
        // A stamped value goes out whole: the stamp, then the rest of the value's bytes.
        let shared: Vec<u8> = (0..64u8).collect();
        let mut out = Vec::new();
        Stamped {
            inner: &mut out,
            stamp: stamp(7),
        }
        .value(&shared, 0, 30);
        assert_eq!(&out[..STAMP_LEN], &stamp(7));
        assert_eq!(&out[STAMP_LEN..], &shared[STAMP_LEN..30]);
        let mut short = Vec::new();
        Stamped {
            inner: &mut short,
            stamp: stamp(7),
        }
        .value(&shared, 0, 10);
        assert_eq!(short, &shared[..10], "too short to carry one");
    }
}
