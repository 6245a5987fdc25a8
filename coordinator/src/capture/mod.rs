//! `crest capture` (issue #27): watches a live server without loading it and writes a
//! commented profile that `crest run --profile` runs.
//!
//! - **Rates**: `INFO commandstats` once a second on one connection; each second's calls
//!   per command are the difference of two readings, less the commands the capture itself
//!   sent in between (its INFO, SCAN, TYPE…), so its own traffic never reaches the profile.
//! - **A cluster**: every node `CLUSTER NODES` names, each asked its `ROLE`: the rates
//!   summed over them all, keys sampled on each primary, the keyspace the primaries'.
//! - **Keys**: between readings, at most `--sample-rate` commands a second go to sampling
//!   up to `--sample-keys` keys: `SCAN` (COUNT 100), then per key `TYPE`, its size
//!   (`STRLEN`, `HLEN`, `LLEN`, `SCARD`, `ZCARD`), `PTTL`, and `OBJECT FREQ` under an LFU
//!   policy. A command the server refuses (an ACL, a disabled command) turns that probe
//!   off and is said in the profile's comments; the capture goes on.
//! - **The profile** ([`profile_toml`]): one class per command Crest can send, its rate
//!   curve as `points` (each second's rate at the middle of its second, so a plateau is
//!   exact), its keyspace the sampled share of the database's keys of its type, string
//!   writes' values the sampled sizes (ten deciles, equal weights), the TTL a table of the
//!   sampled `PTTL`s (`ttl_line`), under an LFU policy a popularity table from the
//!   counters (`popularity`); the server's version and settings, the commands left out,
//!   the key-length quantiles and the hot keys as comments. `--smooth N` averages
//!   each curve over N seconds; a curve too long for a profile's segment cap is averaged
//!   over whole windows, said in a comment.
//!
//! The pure part (rates from readings, smoothing, sizes, the TOML) is unit-tested; the
//! round trip (a server driven by a known profile, captured, the capture run against a
//! fresh server) is `coordinator/tests/capture.rs`.

use crest_engine::probe::Control;
use crest_report::server::info::Info;
use crest_resp::Frame;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Longest capture.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
/// Most points all curves together hold (a profile's segment cap is 100,000).
pub const MAX_POINTS: usize = 50_000;
/// The largest reply read (an INFO, a SCAN page).
const MAX_REPLY: usize = 16 << 20;

/// `crest capture` flags.
// Field docs are clap's help text (terminal syntax, not intra-doc links).
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args)]
pub struct CaptureArgs {
    /// The server watched.
    #[command(flatten, next_help_heading = "Target")]
    pub target: crate::cli::TargetArgs,
    /// How long to watch, e.g. 60s, 10m (at most 24h).
    #[arg(long, value_parser = crate::config::parse_duration)]
    pub duration: Duration,
    /// The profile to write (TOML; `crest run --profile` runs it).
    #[arg(long)]
    pub out: std::path::PathBuf,
    /// Keys to sample at most (SCAN, then TYPE, size, PTTL and, under LFU, OBJECT FREQ
    /// per key).
    #[arg(long, default_value_t = 1000)]
    pub sample_keys: u64,
    /// Sampling commands per second at most (the capture's cost on the server, beside
    /// one INFO a second).
    #[arg(long, default_value_t = 100)]
    pub sample_rate: u32,
    /// Average each command's rate curve over this many seconds (1: as read).
    #[arg(long, default_value_t = 1)]
    pub smooth: u32,
}

impl CaptureArgs {
    /// The options, checked.
    ///
    /// # Errors
    /// One line naming the flag and what would be right.
    pub fn options(&self) -> Result<Options, crate::config::ConfigError> {
        use crate::config::ConfigError as E;
        if self.duration < Duration::from_secs(1) || self.duration > MAX_DURATION {
            return Err(E::new(
                "--duration",
                format!("{:?}", self.duration),
                "must be 1s to 24h (the capture reads the server once a second)",
            ));
        }
        if !(1..=10_000).contains(&self.sample_rate) {
            return Err(E::new(
                "--sample-rate",
                self.sample_rate,
                "must be 1 to 10000 commands per second",
            ));
        }
        if self.sample_keys > 1_000_000 {
            return Err(E::new(
                "--sample-keys",
                self.sample_keys,
                "must be at most 1000000 (0: no sampling)",
            ));
        }
        if !(1..=3600).contains(&self.smooth) {
            return Err(E::new("--smooth", self.smooth, "must be 1 to 3600 seconds"));
        }
        Ok(Options {
            duration: self.duration,
            sample_keys: self.sample_keys,
            sample_rate: self.sample_rate,
            smooth: self.smooth,
        })
    }
}

/// What `crest capture` was asked.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long to watch.
    pub duration: Duration,
    /// Keys to sample at most.
    pub sample_keys: u64,
    /// Sampling commands per second at most.
    pub sample_rate: u32,
    /// Seconds each curve is averaged over (1: as read).
    pub smooth: u32,
}

pub mod memcache;

/// The commands Crest sends to memcached that a capture counts (all on plain items).
const KNOWN_MC: &[(&str, &str)] = &[
    ("GET", "string"),
    ("SET", "string"),
    ("DEL", "string"),
    ("INCR", "string"),
    ("DECR", "string"),
    ("TOUCH", "string"),
];

/// Commands Crest generates, by the type of key they act on.
const KNOWN: &[(&str, &str)] = &[
    ("GET", "string"),
    ("SET", "string"),
    ("DEL", "string"),
    ("EXISTS", "string"),
    ("INCR", "string"),
    ("EXPIRE", "string"),
    ("MGET", "string"),
    ("MSET", "string"),
    ("HSET", "hash"),
    ("HGET", "hash"),
    ("HGETALL", "hash"),
    ("LPUSH", "list"),
    ("RPUSH", "list"),
    ("LPOP", "list"),
    ("RPOP", "list"),
    ("LRANGE", "list"),
    ("SADD", "set"),
    ("SREM", "set"),
    ("SISMEMBER", "set"),
    ("SPOP", "set"),
    ("ZADD", "zset"),
    ("ZREM", "zset"),
    ("ZRANGE", "zset"),
    ("ZRANGEBYSCORE", "zset"),
    ("ZCARD", "zset"),
    ("ZPOPMIN", "zset"),
    ("XADD", "stream"),
    ("PING", ""),
];

/// One sampled key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeySample {
    /// `string`, `hash`, `list`, `set`, `zset`, `stream`…
    pub kind: String,
    /// Its name's length, bytes.
    pub key_len: u64,
    /// STRLEN, or the number of fields/elements/members.
    pub size: Option<u64>,
    /// PTTL, ms (None: no deadline, or not read).
    pub ttl_ms: Option<u64>,
    /// OBJECT FREQ (LFU) and the key, when read.
    pub freq: Option<(u64, String)>,
}

/// What a capture read.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The target as shown.
    pub target: String,
    /// Per second: calls per command (upper case), the capture's own left out.
    pub seconds: Vec<BTreeMap<String, u64>>,
    /// The first INFO's fields (version, memory, clients, settings).
    pub info: BTreeMap<String, String>,
    /// Keys in every database at the end, and of them with a deadline.
    pub keys: (u64, u64),
    /// CONFIG GET answers (or why there are none).
    pub settings: Result<BTreeMap<String, String>, String>,
    /// The sampled keys.
    pub sample: Vec<KeySample>,
    /// Probes the server refused, with its word.
    pub refused: BTreeMap<String, String>,
    /// Commands the capture sent, by lower-case name.
    pub own: BTreeMap<String, u64>,
    /// How long it watched.
    pub watched: Duration,
    /// The nodes watched: primaries and replicas (1 and 0 for a single server).
    pub nodes: (u64, u64),
}

/// One line saying why a capture cannot start or go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CaptureError(pub String);

/// A connection that counts what it sends.
struct Conn {
    c: Control,
    own: BTreeMap<String, u64>,
}

impl Conn {
    /// Sends `args`; the reply, or None when the connection is no longer usable.
    async fn ask(&mut self, args: &[&[u8]]) -> Result<Frame, CaptureError> {
        let name = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
        let r = self
            .c
            .ask(args, MAX_REPLY)
            .await
            .map_err(|e| CaptureError(format!("the connection failed: {e}")))?
            .ok_or_else(|| CaptureError("the server closed the connection".into()))?;
        // Sub-commands count under `name|sub`, as INFO commandstats does.
        let key = match args.get(1) {
            Some(sub) if matches!(name.as_str(), "config" | "object" | "memory") => {
                format!(
                    "{name}|{}",
                    String::from_utf8_lossy(sub).to_ascii_lowercase()
                )
            }
            _ => name,
        };
        *self.own.entry(key).or_default() += 1;
        Ok(r)
    }
}

/// The text of a bulk or verbatim reply; an error reply's message as Err.
fn text(f: Frame) -> Result<String, String> {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        Frame::Verbatim { data, .. } => Ok(String::from_utf8_lossy(&data).into_owned()),
        Frame::Error(e) | Frame::BlobError(e) => Err(String::from_utf8_lossy(&e).into_owned()),
        other => Err(format!("an unexpected reply {other:?}")),
    }
}

fn int(f: &Frame) -> Option<i64> {
    match f {
        Frame::Integer(n) => Some(*n),
        _ => None,
    }
}

fn is_error(f: &Frame) -> Option<String> {
    match f {
        Frame::Error(e) | Frame::BlobError(e) => Some(String::from_utf8_lossy(e).into_owned()),
        _ => None,
    }
}

/// The cluster `conn`'s server is in, from `CLUSTER NODES`: whether that server is a
/// primary, and the other nodes (address, is a primary), failed and address-less ones
/// left out; None when it is not a cluster (or will not say).
pub async fn cluster_peers(conn: &mut Control) -> Option<(bool, Vec<(String, bool)>)> {
    let reply = conn.ask(&[b"CLUSTER", b"NODES"], MAX_REPLY).await.ok()??;
    peers_of(&text(reply).ok()?)
}

/// [`cluster_peers`]'s reading of a `CLUSTER NODES` reply.
pub fn peers_of(nodes: &str) -> Option<(bool, Vec<(String, bool)>)> {
    let mut me = None;
    let mut peers = Vec::new();
    for l in nodes.lines() {
        let w: Vec<&str> = l.split(' ').collect();
        let (Some(addr), Some(flags)) = (w.get(1), w.get(2)) else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        let primary = flags.contains(&"master");
        if flags.contains(&"myself") {
            me = Some(primary);
            continue;
        }
        if flags
            .iter()
            .any(|f| matches!(*f, "fail" | "noaddr" | "handshake"))
        {
            continue;
        }
        let addr = addr.split('@').next().unwrap_or_default();
        if !addr.is_empty() && !addr.starts_with(':') {
            peers.push((addr.to_string(), primary));
        }
    }
    Some((me?, peers))
}

/// The nodes' `INFO commandstats` summed (calls only).
async fn readings(
    cs: &mut [Conn],
    target: &str,
) -> Result<BTreeMap<String, crest_report::server::info::CmdCounters>, CaptureError> {
    let mut sum: BTreeMap<String, crest_report::server::info::CmdCounters> = BTreeMap::new();
    for c in cs.iter_mut() {
        let reply = c.ask(&[b"INFO", b"commandstats"]).await?;
        let info = Info::parse(&text(reply).map_err(|why| {
            CaptureError(format!(
                "--target {target}: INFO commandstats refused ({why})"
            ))
        })?);
        for (k, v) in info.commands {
            sum.entry(k).or_default().calls += v.calls;
        }
    }
    Ok(sum)
}

/// The capture's own commands on every node, summed.
fn own_of(cs: &[Conn]) -> BTreeMap<String, u64> {
    let mut sum = BTreeMap::new();
    for c in cs {
        for (k, v) in &c.own {
            *sum.entry(k.clone()).or_default() += v;
        }
    }
    sum
}

/// Watches the server of `nodes`' first (shown as `target`) as `opts` says, and in a
/// cluster every node given after it (each `(connection, is a primary)`): the rates summed
/// over every node, keys sampled on each primary (the sample split between them);
/// `started` is called once the server has let it read INFO and the baseline is taken.
///
/// # Errors
/// [`CaptureError`] when the server refuses `INFO` (an ACL) or a connection fails.
pub async fn capture(
    nodes: Vec<(Control, bool)>,
    target: &str,
    opts: &Options,
    started: impl FnOnce(),
) -> Result<Captured, CaptureError> {
    let mut primaries: Vec<bool> = nodes.iter().map(|n| n.1).collect();
    let mut cs: Vec<Conn> = nodes
        .into_iter()
        .map(|(c, _)| Conn {
            c,
            own: BTreeMap::new(),
        })
        .collect();
    if cs.len() > 1 {
        // Each node says what it is now (the seed's view may lag a failover).
        for (c, p) in cs.iter_mut().zip(primaries.iter_mut()) {
            if let Frame::Array(a) = c.ask(&[b"ROLE"]).await?
                && let Some(Frame::Bulk(role)) = a.first()
            {
                *p = role.as_slice() == b"master";
            }
        }
    }
    let first = cs[0].ask(&[b"INFO", b"everything"]).await?;
    let first = text(first).map_err(|why| {
        CaptureError(format!(
            "--target {target}: INFO refused ({why}); crest capture reads the server's INFO: use a user allowed INFO (ACL +info)"
        ))
    })?;
    let info = Info::parse(&first);
    let n_primaries = primaries.iter().filter(|p| **p).count() as u64;
    let mut out = Captured {
        target: target.to_string(),
        seconds: Vec::new(),
        info: info.fields.clone(),
        keys: (0, 0),
        settings: settings(&mut cs[0]).await,
        sample: Vec::new(),
        refused: BTreeMap::new(),
        own: BTreeMap::new(),
        watched: Duration::ZERO,
        nodes: (n_primaries, cs.len() as u64 - n_primaries),
    };
    let lfu = out
        .settings
        .as_ref()
        .is_ok_and(|s| s.get("maxmemory-policy").is_some_and(|p| p.contains("lfu")));
    // The baseline reading, after the capture's own setup: its INFO counts in the next
    // reading's difference and in the capture's own between them.
    let mut own_prev = own_of(&cs);
    let mut prev = readings(&mut cs, target).await?;
    started();
    let start = Instant::now();
    // One sampler per primary (a replica holds its primary's keys), the sample split.
    let owners: Vec<usize> = (0..cs.len()).filter(|&i| primaries[i]).collect();
    let mut samplers: Vec<(usize, Sampler)> = owners
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            let n = owners.len() as u64;
            let share = opts.sample_keys / n + u64::from((j as u64) < opts.sample_keys % n);
            (
                i,
                Sampler::new(
                    &Options {
                        sample_keys: share,
                        ..opts.clone()
                    },
                    lfu,
                ),
            )
        })
        .collect();
    // Sampling commands go on a schedule of sample_rate a second, the samplers in turn.
    let gap = Duration::from_secs(1) / opts.sample_rate.max(1);
    let mut next = start;
    let mut turn = 0;
    for second in 1..=opts.duration.as_secs().max(1) {
        let tick = start + Duration::from_secs(second);
        let mut idle = 0;
        while idle < samplers.len() {
            let Some(now) = sample_turn(next, tick).await else {
                break;
            };
            turn = (turn + 1) % samplers.len();
            let (i, sampler) = &mut samplers[turn];
            if sampler.done() {
                idle += 1;
                continue;
            }
            match sampler.step(&mut cs[*i], &mut out).await? {
                Step::Sent => {
                    next = (next + gap).max(now);
                    idle = 0;
                }
                Step::Free => idle = 0,
                Step::Idle => idle += 1,
            }
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(tick)).await;
        let own_now = own_of(&cs);
        let now = readings(&mut cs, target).await?;
        out.seconds
            .push(calls_between(&prev, &now, &own_prev, &own_now));
        prev = now;
        own_prev = own_now;
    }
    out.watched = start.elapsed();
    for &i in &owners {
        let end = cs[i].ask(&[b"INFO", b"keyspace"]).await?;
        if let Ok(t) = text(end) {
            let (k, e) = Info::parse(&t)
                .dbs
                .values()
                .fold((0, 0), |(k, e), d| (k + d.keys, e + d.expires));
            out.keys = (out.keys.0 + k, out.keys.1 + e);
        }
    }
    for (_, s) in samplers {
        out.refused.extend(s.refused);
    }
    out.own = own_of(&cs);
    Ok(out)
}

/// A sampling command's turn: sleeps until `next` (its place on the schedule) and says
/// the time then; None once `tick` (the next reading) comes first.
async fn sample_turn(next: Instant, tick: Instant) -> Option<Instant> {
    loop {
        let now = Instant::now();
        if next >= tick || now >= tick {
            return None;
        }
        if next <= now {
            return Some(now);
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(next)).await;
    }
}

/// Each command's calls between two readings, less the capture's own (upper-case names;
/// a counter that went down, a `CONFIG RESETSTAT`, counts from 0).
pub fn calls_between(
    before: &BTreeMap<String, crest_report::server::info::CmdCounters>,
    after: &BTreeMap<String, crest_report::server::info::CmdCounters>,
    own_before: &BTreeMap<String, u64>,
    own_after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(name, a)| {
            let b = before.get(name).map_or(0, |b| b.calls);
            let d = if a.calls >= b { a.calls - b } else { a.calls };
            let ours = own_after.get(name).copied().unwrap_or(0)
                - own_before.get(name).copied().unwrap_or(0);
            let n = d.saturating_sub(ours);
            (n > 0).then(|| (name.to_ascii_uppercase(), n))
        })
        .collect()
}

/// The settings a profile's comments quote.
async fn settings(c: &mut Conn) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for name in [
        "maxmemory",
        "maxmemory-policy",
        "io-threads",
        "appendonly",
        "save",
        "hz",
        "lfu-log-factor",
    ] {
        let r = c
            .ask(&[b"CONFIG", b"GET", name.as_bytes()])
            .await
            .map_err(|e| e.0)?;
        if let Some(e) = is_error(&r) {
            return Err(e);
        }
        let pair = match r {
            Frame::Array(a) | Frame::Set(a) => {
                let mut it = a.into_iter();
                it.next().zip(it.next())
            }
            Frame::Map(m) => m.into_iter().next(),
            _ => None,
        };
        if let Some((k, v)) = pair {
            out.insert(text(k).unwrap_or_default(), text(v).unwrap_or_default());
        }
    }
    Ok(out)
}

/// What one sampling step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Sent a command.
    Sent,
    /// Moved on without one.
    Free,
    /// Nothing to do before the next reading.
    Idle,
}

/// Key sampling, one command per step. A SCAN pass that ends before enough keys were
/// sampled starts again a second later, skipping keys already sampled (a keyspace that
/// grows during the capture is sampled as it grows).
struct Sampler {
    want: u64,
    lfu: bool,
    cursor: Option<Vec<u8>>,
    /// Keys from the last SCAN page not yet read.
    page: Vec<Vec<u8>>,
    /// When the last SCAN pass ended.
    pass_ended: Option<Instant>,
    /// SCAN refused: no sampling.
    scan_refused: bool,
    /// Keys sampled (at most `--sample-keys`).
    seen: std::collections::HashSet<Vec<u8>>,
    refused: BTreeMap<String, String>,
    /// The key being read and what is known of it so far.
    current: Option<(Vec<u8>, KeySample, u8)>,
}

impl Sampler {
    fn new(opts: &Options, lfu: bool) -> Self {
        Self {
            want: opts.sample_keys,
            lfu,
            cursor: Some(b"0".to_vec()),
            page: Vec::new(),
            pass_ended: None,
            scan_refused: false,
            seen: std::collections::HashSet::new(),
            refused: BTreeMap::new(),
            current: None,
        }
    }

    fn done(&self) -> bool {
        self.want == 0 || self.scan_refused
    }

    /// One sampling step.
    async fn step(&mut self, c: &mut Conn, out: &mut Captured) -> Result<Step, CaptureError> {
        if let Some((key, mut s, stage)) = self.current.take() {
            let probe: Option<Vec<&[u8]>> = match stage {
                0 => Some(vec![b"TYPE", &key]),
                1 => match s.kind.as_str() {
                    "string" => Some(vec![b"STRLEN", &key]),
                    "hash" => Some(vec![b"HLEN", &key]),
                    "list" => Some(vec![b"LLEN", &key]),
                    "set" => Some(vec![b"SCARD", &key]),
                    "zset" => Some(vec![b"ZCARD", &key]),
                    _ => None,
                },
                2 => Some(vec![b"PTTL", &key]),
                3 if self.lfu => Some(vec![b"OBJECT", b"FREQ", &key]),
                _ => None,
            };
            let Some(args) = probe else {
                if stage >= 3 {
                    out.sample.push(s);
                    self.want = self.want.saturating_sub(1);
                } else {
                    self.current = Some((key, s, stage + 1));
                }
                return Ok(Step::Free);
            };
            let name = String::from_utf8_lossy(args[0]).to_ascii_uppercase();
            if self.refused.contains_key(&name) {
                self.current = Some((key, s, stage + 1));
                return Ok(Step::Free);
            }
            let r = c.ask(&args).await?;
            if let Some(e) = is_error(&r) {
                self.refused.insert(name, e);
            } else {
                match stage {
                    0 => s.kind = text(r).unwrap_or_default(),
                    1 => s.size = int(&r).and_then(|n| u64::try_from(n).ok()),
                    2 => s.ttl_ms = int(&r).and_then(|n| u64::try_from(n).ok()),
                    _ => {
                        s.freq = int(&r)
                            .and_then(|n| u64::try_from(n).ok())
                            .map(|f| (f, String::from_utf8_lossy(&key).into_owned()));
                    }
                }
            }
            if s.kind != "none" {
                // (A key gone since the SCAN is not a sample.)
                self.current = Some((key, s, stage + 1));
            }
            return Ok(Step::Sent);
        }
        if let Some(key) = self.page.pop() {
            if !self.seen.insert(key.clone()) {
                return Ok(Step::Free);
            }
            let s = KeySample {
                key_len: key.len() as u64,
                ..KeySample::default()
            };
            self.current = Some((key, s, 0));
            return Ok(Step::Free);
        }
        let Some(cursor) = self.cursor.take() else {
            // A pass ended: another a second later.
            if self
                .pass_ended
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
            {
                return Ok(Step::Idle);
            }
            self.cursor = Some(b"0".to_vec());
            return Ok(Step::Free);
        };
        let r = c.ask(&[b"SCAN", &cursor, b"COUNT", b"100"]).await?;
        if let Some(e) = is_error(&r) {
            self.refused.insert("SCAN".into(), e);
            self.scan_refused = true;
            return Ok(Step::Sent);
        }
        if let Frame::Array(mut a) = r
            && a.len() == 2
        {
            let keys = a.pop();
            let next = a.pop().and_then(|f| text(f).ok()).unwrap_or_default();
            if let Some(Frame::Array(keys)) = keys {
                self.page = keys
                    .into_iter()
                    .filter_map(|k| match k {
                        Frame::Bulk(b) => Some(b),
                        _ => None,
                    })
                    .collect();
            }
            if next != "0" {
                self.cursor = Some(next.into_bytes());
            } else {
                self.pass_ended = Some(Instant::now());
            }
        } else {
            self.pass_ended = Some(Instant::now());
        }
        Ok(Step::Sent)
    }
}

/// `curve` averaged over a centred window of `n` seconds (1: as is).
pub fn smooth(curve: &[f64], n: u32) -> Vec<f64> {
    let n = n.max(1) as usize;
    if n == 1 {
        return curve.to_vec();
    }
    let half = n / 2;
    (0..curve.len())
        .map(|i| {
            let lo = i.saturating_sub(half);
            let hi = (i + n - half).min(curve.len());
            curve[lo..hi].iter().sum::<f64>() / (hi - lo) as f64
        })
        .collect()
}

/// `curve` averaged over consecutive windows of `k` seconds.
pub fn coarsen(curve: &[f64], k: usize) -> Vec<f64> {
    curve
        .chunks(k.max(1))
        .map(|c| c.iter().sum::<f64>() / c.len() as f64)
        .collect()
}

/// `q`-quantile of sorted `v` (nearest rank).
fn quantile(v: &[u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i.min(v.len() - 1)]
}

/// Ten sizes with equal weights: the sample's deciles' midpoints (5th, 15th … 95th
/// percentile); empty for no sample.
pub fn size_table(sizes: &[u64]) -> Vec<u64> {
    let mut v = sizes.to_vec();
    v.sort_unstable();
    if v.is_empty() {
        return Vec::new();
    }
    (0..10)
        .map(|d| quantile(&v, (f64::from(d) + 0.5) / 10.0).max(1))
        .collect()
}

/// Seconds as the profile writes a time (`12.5s`).
fn secs(t: f64) -> String {
    let ms = (t * 1000.0).round() as u64;
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The profile's opening comments: where and how long it was captured, the server's
/// version and settings, the keyspace, key lengths (`key_lens` sorted), hot keys, refused
/// probes, the commands left out (`left`) and the capture's own.
fn header(
    c: &Captured,
    kinds: &BTreeMap<String, u64>,
    left: &[(&String, &u64)],
    key_lens: &[u64],
) -> String {
    let n = c.seconds.len();
    let sampled = c.sample.len() as u64;
    let mut o = String::new();
    let v = |k: &str| c.info.get(k).cloned().unwrap_or_else(|| "?".into());
    let _ = writeln!(
        o,
        "# Captured by `crest capture` from {} over {} s.",
        c.target, n
    );
    let _ = writeln!(o, "#   crest run --profile THIS_FILE --target SERVER");
    if let Some(mc) = c.info.get("memcached_version") {
        let _ = writeln!(
            o,
            "# server: memcached {mc}, {} connections, {} items, {} bytes of {} (run it with --target memcache://SERVER)",
            v("curr_connections"),
            v("curr_items"),
            v("bytes"),
            v("limit_maxbytes")
        );
    } else {
        let version = c
            .info
            .get("valkey_version")
            .map(|v| format!("valkey {v}"))
            .unwrap_or_else(|| format!("redis {}", v("redis_version")));
        let _ = writeln!(
            o,
            "# server: {version}, {} clients connected, used_memory {} ({})",
            v("connected_clients"),
            v("used_memory"),
            v("used_memory_human")
        );
    }
    if c.nodes.0 + c.nodes.1 > 1 {
        let _ = writeln!(
            o,
            "# cluster: {} primaries and {} replicas watched; rates summed over every node, keys sampled on each primary",
            c.nodes.0, c.nodes.1
        );
    }
    match &c.settings {
        Ok(s) => {
            let line: Vec<String> = s.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
            let _ = writeln!(o, "# settings: {}", line.join(" "));
        }
        Err(why) => {
            let asked = if c.info.contains_key("memcached_version") {
                "stats settings"
            } else {
                "CONFIG GET"
            };
            let _ = writeln!(o, "# settings: {asked} refused ({why})");
        }
    }
    let _ = writeln!(
        o,
        "# keyspace: {} keys, {} with a deadline; sampled {sampled}: {}",
        c.keys.0,
        c.keys.1,
        kinds
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !key_lens.is_empty() {
        let _ = writeln!(
            o,
            "# key lengths: p10 {} p50 {} p90 {} max {} bytes (the classes' keys take the sampled lengths' deciles, zero-padded)",
            quantile(key_lens, 0.1),
            quantile(key_lens, 0.5),
            quantile(key_lens, 0.9),
            key_lens.last().copied().unwrap_or(0)
        );
    }
    let mut hot: Vec<&(u64, String)> = c.sample.iter().filter_map(|s| s.freq.as_ref()).collect();
    if !hot.is_empty() {
        hot.sort_by_key(|h| std::cmp::Reverse(h.0));
        let top: Vec<String> = hot
            .iter()
            .take(10)
            .map(|(f, k)| format!("{k:?} {f}"))
            .collect();
        let _ = writeln!(o, "# hot keys (OBJECT FREQ, LFU): {}", top.join(", "));
    }
    for (probe, why) in &c.refused {
        let _ = writeln!(o, "# {probe} refused: {why}; its figures are left out");
    }
    if !left.is_empty() {
        let l: Vec<String> = left.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            o,
            "# left out (calls in the capture; Crest has no built-in for them): {}",
            l.join(", ")
        );
    }
    let own: Vec<String> = c.own.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(
        o,
        "# the capture's own commands, not counted above: {}",
        own.join(", ")
    );
    o
}

/// The profile `crest run --profile` runs, commented (see the module's docs).
pub fn profile_toml(c: &Captured, smooth_s: u32) -> String {
    let n = c.seconds.len();
    let mut names: BTreeMap<String, u64> = BTreeMap::new();
    for s in &c.seconds {
        for (k, v) in s {
            *names.entry(k.clone()).or_default() += v;
        }
    }
    let table = if c.info.contains_key("memcached_version") {
        KNOWN_MC
    } else {
        KNOWN
    };
    let (known, left): (Vec<_>, Vec<_>) = names
        .iter()
        .partition(|(k, _)| table.iter().any(|(n, _)| n == k));
    let kinds: BTreeMap<String, u64> = c.sample.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(s.kind.clone()).or_default() += 1;
        m
    });
    let sampled = c.sample.len() as u64;
    let mut key_lens: Vec<u64> = c.sample.iter().map(|s| s.key_len).collect();
    key_lens.sort_unstable();
    let mut o = header(c, &kinds, &left, &key_lens);
    if known.is_empty() {
        let _ = writeln!(
            o,
            "# no command Crest sends was seen: this profile has no class (crest run would send its flags' load)"
        );
    }
    let total_points = known.len() * (n + 2);
    let k = total_points.div_ceil(MAX_POINTS).max(1);
    if k > 1 {
        let _ = writeln!(
            o,
            "# curves averaged over {k} s windows: {} commands × {n} s is past a profile's {MAX_POINTS} points",
            known.len()
        );
    }
    let _ = writeln!(o, "\nduration = \"{n}s\"");
    let strings: Vec<u64> = c
        .sample
        .iter()
        .filter(|s| s.kind == "string")
        .filter_map(|s| s.size)
        .collect();
    for (name, calls) in known {
        let kind = table
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, k)| *k);
        let curve: Vec<f64> = c
            .seconds
            .iter()
            .map(|s| s.get(name).copied().unwrap_or(0) as f64)
            .collect();
        let curve = coarsen(&smooth(&curve, smooth_s), k);
        let step = k as f64;
        let _ = writeln!(o, "\n# {name}: {calls} calls");
        let _ = writeln!(o, "[[class]]");
        let _ = writeln!(o, "name = \"{}\"", name.to_ascii_lowercase());
        let _ = writeln!(o, "mix = {{ {name} = 1 }}");
        // Each window's rate at its middle, held from 0 and to the end.
        let mut pts = vec![format!(
            "[\"0s\", {:.3}]",
            curve.first().copied().unwrap_or(0.0)
        )];
        for (i, r) in curve.iter().enumerate() {
            pts.push(format!("[\"{}\", {r:.3}]", secs((i as f64 + 0.5) * step)));
        }
        pts.push(format!(
            "[\"{}\", {:.3}]",
            secs(n as f64),
            curve.last().copied().unwrap_or(0.0)
        ));
        let _ = writeln!(o, "profile = [{{ points = [{}] }}]", pts.join(", "));
        let share = kinds.get(kind).copied().unwrap_or(0);
        let count = if sampled > 0 && c.keys.0 > 0 {
            (c.keys.0 as f64 * share as f64 / sampled as f64).round() as u64
        } else {
            c.keys.0
        }
        .max(1);
        let prefix = if kind == "string" || kind.is_empty() {
            "cap:".to_string()
        } else {
            format!("cap:{kind}:")
        };
        // The sampled key lengths' deciles (at most 250 bytes), as a size table.
        let lens: Vec<String> = size_table(&key_lens)
            .iter()
            .map(|l| format!("{}:1", (*l).min(crest_model::shapes::MAX_KEY_LEN)))
            .collect();
        let size = if lens.is_empty() {
            String::new()
        } else {
            format!(", size = \"{}\"", lens.join(","))
        };
        let of_kind: Vec<&KeySample> = c.sample.iter().filter(|s| s.kind == kind).collect();
        // Under an LFU policy, the sampled counters as a popularity table.
        let freqs: Vec<u64> = of_kind
            .iter()
            .filter_map(|s| s.freq.as_ref().map(|f| f.0))
            .collect();
        let factor = c
            .settings
            .as_ref()
            .ok()
            .and_then(|s| s.get("lfu-log-factor"))
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(10.0);
        let table = match popularity(&freqs, factor) {
            Some(rows) => {
                let rows: Vec<String> = rows
                    .iter()
                    .map(|(k, r)| format!("[{k:.4}, {r:.6}]"))
                    .collect();
                let _ = writeln!(
                    o,
                    "# popularity: {} sampled LFU counters (OBJECT FREQ, lfu-log-factor {factor}) as hits, hottest tenth first: an estimate (the counter is logarithmic and decays)",
                    freqs.len()
                );
                format!(", distribution = \"table\", table = [{}]", rows.join(", "))
            }
            None => String::new(),
        };
        let _ = writeln!(
            o,
            "keys = {{ count = {count}, prefix = \"{prefix}\"{size}{table} }}"
        );
        if kind == "string" && !strings.is_empty() {
            let t: Vec<String> = size_table(&strings)
                .iter()
                .map(|s| format!("[{s}, 1]"))
                .collect();
            let _ = writeln!(o, "values = {{ sizes = [{}] }}", t.join(", "));
        }
        if !matches!(kind, "string" | "") {
            let mut m: Vec<u64> = of_kind.iter().filter_map(|s| s.size).collect();
            m.sort_unstable();
            if !m.is_empty() {
                let _ = writeln!(o, "members = {}", quantile(&m, 0.5).max(1));
            }
        }
        if let Some(line) = ttl_line(&of_kind) {
            o.push_str(&line);
        }
    }
    o
}

/// The most buckets a captured popularity table has.
const POPULARITY_BUCKETS: usize = 10;

/// A popularity table from sampled keys' LFU counters (`OBJECT FREQ`), as
/// `keys.table`'s [share of keys, share of requests] rows: each key's hits estimated from
/// its counter (Redis's logarithmic counter, `lfu-log-factor` `factor`: from the initial
/// 5, counter c takes about (c − 5) + factor·(c − 5)(c − 6)/2 hits, and each key counts
/// at least its one write), the keys sorted hottest first and cut into ten buckets of
/// equal key shares, each with its share of the estimated hits. None with fewer than ten
/// counters, or when every key has the same (uniform: no table needed).
fn popularity(freqs: &[u64], factor: f64) -> Option<Vec<(f64, f64)>> {
    if freqs.len() < POPULARITY_BUCKETS || freqs.iter().all(|f| *f == freqs[0]) {
        return None;
    }
    let hits = |c: u64| {
        let over = c.saturating_sub(5) as f64;
        1.0 + over + factor * over * (over - 1.0).max(0.0) / 2.0
    };
    let mut est: Vec<f64> = freqs.iter().map(|&c| hits(c)).collect();
    est.sort_by(|a, b| b.total_cmp(a));
    let total: f64 = est.iter().sum();
    let n = est.len();
    Some(
        (0..POPULARITY_BUCKETS)
            .map(|b| {
                let (lo, hi) = (b * n / POPULARITY_BUCKETS, (b + 1) * n / POPULARITY_BUCKETS);
                let share: f64 = est[lo..hi].iter().sum::<f64>() / total;
                ((hi - lo) as f64 / n as f64, share)
            })
            .collect(),
    )
}

/// A class's `ttl` from its sampled keys' `PTTL`s: one TTL when every sampled key has
/// the same, else a table of the deciles (in whole seconds, rounded up), with the keys
/// that have none as 0 in proportion. None when no sampled key has a TTL.
fn ttl_line(sample: &[&KeySample]) -> Option<String> {
    let mut secs: Vec<u64> = sample
        .iter()
        .filter_map(|s| s.ttl_ms)
        .map(|ms| ms.div_ceil(1000).max(1))
        .collect();
    if secs.is_empty() {
        return None;
    }
    secs.sort_unstable();
    let none = (sample.len() - secs.len()) as u64;
    let note = format!(
        "# {} of {} sampled keys have a TTL (p10 {} s, median {} s, p90 {} s): what remained when sampled, so a write's TTL is at least this",
        secs.len(),
        sample.len(),
        quantile(&secs, 0.1),
        quantile(&secs, 0.5),
        quantile(&secs, 0.9)
    );
    if none == 0 && secs.first() == secs.last() {
        return Some(format!("{note}\nttl = \"{}s\"\n", secs[0]));
    }
    // Each decile stands for a tenth of the keys with a TTL; the keys without weigh
    // ten times their count against it.
    let with = secs.len() as u64;
    let mut table: Vec<(u64, u64)> = Vec::new();
    if none > 0 {
        table.push((0, none * 10));
    }
    for t in size_table(&secs) {
        match table.last_mut() {
            Some((last, w)) if *last == t => *w += with,
            _ => table.push((t, with)),
        }
    }
    let g = table.iter().fold(0, |g, (_, w)| gcd(g, *w)).max(1);
    let rows: Vec<String> = table
        .iter()
        .map(|(t, w)| format!("[{t}, {}]", w / g))
        .collect();
    Some(format!(
        "{note}\nttl = {{ table = [{}] }}  # [seconds, weight]; 0: no TTL\n",
        rows.join(", ")
    ))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crest_report::server::info::CmdCounters;

    fn counters(pairs: &[(&str, u64)]) -> BTreeMap<String, CmdCounters> {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    CmdCounters {
                        calls: *v,
                        ..CmdCounters::default()
                    },
                )
            })
            .collect()
    }

    fn own(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// A second's calls are the counters' difference less what the capture sent; a
    /// counter that went down (a reset) counts from 0; commands with none are left out.
    #[test]
    fn a_seconds_calls_leave_out_the_captures_own() {
        let before = counters(&[("get", 100), ("info", 5), ("set", 50), ("scan", 1)]);
        let after = counters(&[("get", 160), ("info", 7), ("set", 20), ("scan", 3)]);
        let got = calls_between(
            &before,
            &after,
            &own(&[("info", 5), ("scan", 1)]),
            &own(&[("info", 7), ("scan", 3)]),
        );
        assert_eq!(got, own(&[("GET", 60), ("SET", 20)]));
    }

    /// LFU counters become a popularity table: a hot tenth (counter 30) of 100 sampled
    /// keys against cold ones (5, never read) takes nearly every estimated hit; equal
    /// counters, or too few, give none.
    #[test]
    fn lfu_counters_become_a_popularity_table() {
        let mut freqs = vec![5u64; 90];
        freqs.extend([30u64; 10]);
        let t = popularity(&freqs, 10.0).unwrap();
        assert_eq!(t.len(), 10);
        assert!(t.iter().all(|(k, _)| (k - 0.1).abs() < 1e-9), "{t:?}");
        // A hot key: 1 + 25 + 10·25·24/2 = 3,026 hits; a cold one 1.
        let hot = 30_260.0 / (30_260.0 + 90.0);
        assert!((t[0].1 - hot).abs() < 1e-9, "{t:?}");
        assert!((t.iter().map(|r| r.1).sum::<f64>() - 1.0).abs() < 1e-9);
        assert!(t[1..].iter().all(|r| r.1 > 0.0 && r.1 < 0.001), "{t:?}");
        // The rows make a table a profile takes.
        let rows: Vec<String> = t.iter().map(|(k, r)| format!("[{k}, {r}]")).collect();
        let toml = format!(
            "duration = \"1s\"\n[[class]]\nrate = 10\nkeys = {{ count = 1000, distribution = \"table\", table = [{}] }}\n",
            rows.join(", ")
        );
        let file = crate::profile::parse_file(&toml).unwrap();
        let keys = file.classes[0].get_ref().keys.clone().unwrap();
        assert!(crate::profile::key_dist(&keys, 1000).is_ok());
        assert_eq!(popularity(&[7; 50], 10.0), None, "all alike");
        assert_eq!(popularity(&[5, 30, 9], 10.0), None, "too few");
    }

    /// `CLUSTER NODES`: the seed's role, and the other nodes that can be reached.
    #[test]
    fn cluster_nodes_read_as_the_seeds_role_and_its_peers() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7001@17001,host master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7002@17002 master,fail - 0 1 3 connected 10923-16383
d4 127.0.0.1:7003@17003 slave b2 0 1 2 connected
e5 :0@0 master,noaddr - 0 0 0 disconnected
";
        let (me, peers) = peers_of(nodes).unwrap();
        assert!(me);
        assert_eq!(
            peers,
            [
                ("127.0.0.1:7001".to_string(), true),
                ("127.0.0.1:7003".to_string(), false)
            ]
        );
        let (me, _) = peers_of("x 127.0.0.1:7003@17003 myself,slave b2 0 0 2 connected\n").unwrap();
        assert!(!me);
        assert_eq!(
            peers_of("ERR This instance has cluster support disabled"),
            None
        );
    }

    #[test]
    fn smoothing_and_coarsening_keep_the_mean() {
        let c = [0.0, 0.0, 30.0, 30.0, 30.0, 0.0];
        assert_eq!(smooth(&c, 1), c);
        let s = smooth(&c, 3);
        assert_eq!(s[3], 30.0, "a plateau's middle stays");
        assert_eq!(s[1], 10.0);
        assert_eq!(coarsen(&c, 2), [0.0, 30.0, 15.0]);
        assert_eq!(coarsen(&c, 4), [15.0, 15.0]);
    }

    #[test]
    fn the_size_table_is_the_samples_deciles() {
        let sizes: Vec<u64> = (1..=100).collect();
        assert_eq!(size_table(&sizes), [6, 16, 26, 36, 46, 55, 65, 75, 85, 95]);
        assert!(size_table(&[]).is_empty());
        assert_eq!(size_table(&[0, 0]), [1; 10], "at least one byte");
    }

    /// The profile parses as `crest run --profile` reads it: one class per known command
    /// with its curve (a plateau's rate exact), keys by type, string sizes, the TTL when
    /// most keys have one; the rest as comments.
    #[test]
    fn the_profile_is_one_class_per_command_and_runs() {
        let mut seconds = Vec::new();
        for i in 0..6u64 {
            let rate = if i < 3 { 100 } else { 300 };
            seconds.push(own(&[
                ("GET", rate),
                ("SET", rate / 10),
                ("CLIENT|LIST", 1),
            ]));
        }
        let sample: Vec<KeySample> = (0..20u64)
            .map(|i| KeySample {
                kind: if i < 16 { "string" } else { "hash" }.into(),
                key_len: 8 + i % 3,
                size: Some(if i < 16 { 100 + i } else { 4 }),
                ttl_ms: (i % 4 != 0).then_some(60_000),
                freq: None,
            })
            .collect();
        let c = Captured {
            target: "127.0.0.1:6379".into(),
            seconds,
            info: own(&[])
                .into_iter()
                .map(|(k, v)| (k, v.to_string()))
                .collect(),
            keys: (1000, 700),
            settings: Err("NOPERM".into()),
            sample,
            refused: BTreeMap::new(),
            own: own(&[("info", 7)]),
            watched: Duration::from_secs(6),
            nodes: (1, 0),
        };
        let text = profile_toml(&c, 1);
        assert!(text.contains("# left out"), "{text}");
        assert!(text.contains("CLIENT|LIST 6"), "{text}");
        assert!(text.contains("# settings: CONFIG GET refused (NOPERM)"));
        let file: crate::profile::FileToml = toml::from_str(&text).unwrap();
        assert_eq!(file.classes.len(), 2, "{text}");
        let get = file
            .classes
            .iter()
            .map(|c| c.get_ref())
            .find(|c| c.name.as_deref() == Some("get"))
            .unwrap();
        let keys = get.keys.as_ref().unwrap();
        assert_eq!(keys.count, Some(800), "16 of 20 sampled keys are strings");
        let size = keys.size.as_ref().unwrap().as_str().unwrap();
        assert!(
            crate::profile::parse_key_sizes(size).is_ok(),
            "the key lengths' table parses: {size}"
        );
        assert!(
            size.split(',').all(|l| ["8:1", "9:1", "10:1"].contains(&l)),
            "{size}"
        );
        // 12 of 16 sampled strings keep 60 s, 4 have none: 0 weighs 4, 60 s weighs 12.
        let ttl = crate::profile::parse_ttl(get.ttl.as_ref().unwrap()).unwrap();
        assert_eq!(
            ttl,
            crest_model::shapes::Ttl::Table(vec![(0, 1), (60, 3)]),
            "{text}"
        );
        let shapes = get.profile.as_ref().unwrap();
        let segs = shapes[0].get_ref().segments().unwrap();
        let p = crest_model::schedule::Profile::new(segs).unwrap();
        assert_eq!(p.duration_ns(), 6_000_000_000);
        // Whole seconds inside a plateau are exact.
        assert!((p.expected(1_000_000_000, 2_000_000_000) - 100.0).abs() < 1e-6);
        assert!((p.expected(4_000_000_000, 5_000_000_000) - 300.0).abs() < 1e-6);
        // And the whole curve holds every call.
        assert!((p.expected(0, 6_000_000_000) - 1200.0).abs() < 1e-6);
    }
}
