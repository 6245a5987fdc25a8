//! What a replay is (`crest replay`), as settings: its files, format, timing, keys, op
//! table and streaming window, and the checks made before a run (each file opens and is
//! in its format; a MONITOR capture's op table is read from it). The streamer that runs it
//! is [`crate::replay`].

use crest_model::schedule::{Arrival, Profile};
use crest_model::target::Protocol;
use crest_model::trace::{MAX_BATCH, TraceOp};
use crest_trace::clock::Spread;
use crest_trace::{Format, Op, Reader};
use std::path::PathBuf;

/// The window a replay streams with: two seconds of the run ahead, and at most four full
/// chunks unacknowledged per shard (about 10 MB of requests on either side per shard).
pub const WINDOW: Window = Window {
    ahead_ns: 2_000_000_000,
    per_shard: 4 * MAX_BATCH as u64,
};

/// The size of the value buffer a replay's shards share: a value longer than it is this
/// buffer repeated.
pub const VALUE_BUFFER: u64 = 16 << 10;

/// MONITOR commands that are not replayed: they change the connection's state (a shard
/// sends every key of its part on one connection), block it, or act on the server
/// itself. Counted as skipped, by line.
pub const NOT_REPLAYED: &[&str] = &[
    "AUTH",
    "HELLO",
    "SELECT",
    "CLIENT",
    "QUIT",
    "RESET",
    "READONLY",
    "READWRITE",
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "MONITOR",
    "SUBSCRIBE",
    "PSUBSCRIBE",
    "SSUBSCRIBE",
    "UNSUBSCRIBE",
    "PUNSUBSCRIBE",
    "SUNSUBSCRIBE",
    "SYNC",
    "PSYNC",
    "REPLCONF",
    "REPLICAOF",
    "SLAVEOF",
    "SHUTDOWN",
    "DEBUG",
    "FAILOVER",
    "CLUSTER",
    "BLPOP",
    "BRPOP",
    "BLMOVE",
    "BRPOPLPUSH",
    "BLMPOP",
    "BZPOPMIN",
    "BZPOPMAX",
    "BZMPOP",
    "WAIT",
    "WAITAOF",
    "CONFIG",
    "ACL",
    "MODULE",
    "SCRIPT",
    "FUNCTION",
    "FLUSHALL",
    "FLUSHDB",
    "SAVE",
    "BGSAVE",
    "BGREWRITEAOF",
    "LATENCY",
    "SLOWLOG",
    "COMMAND",
    "INFO",
    "PING",
    "ECHO",
];

/// Most distinct command names a MONITOR capture's survey keeps (replayable or not).
const MAX_NAMES: usize = 4 * crest_model::trace::MAX_OPS;

/// A replay as `crest replay` was given it.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The files, read one after another as one trace.
    pub files: Vec<PathBuf>,
    /// Their format.
    pub format: Format,
    /// `--speed`: the trace's clock this many times as fast.
    pub speed: f64,
    /// How a whole second's requests are spread over it.
    pub spread: Spread,
    /// `--key-prefix` and `--amplify`.
    pub keys: Keys,
    /// The op table (the plan's, in order).
    pub ops: Vec<TraceOp>,
    /// `--rate`/`--stages`: re-timed at this fleet-wide profile and arrival process.
    pub retime: Option<(Profile, Arrival)>,
    /// How far ahead the coordinator streams.
    pub window: Window,
}

/// Every file checked before the run, and the op table: a Twitter or cachebench trace's
/// is every cache op ([`cache_ops`]); a MONITOR capture's is every command it holds (read
/// to its end), in the order first seen, less those [`NOT_REPLAYED`] and those `usable`
/// refuses (at most [`crest_model::trace::MAX_OPS`]).
///
/// # Errors
/// One line naming the file, the line and what was expected: a file that cannot be
/// opened, is not in `format`, is empty, or cannot be read to its end (MONITOR).
pub fn survey(
    files: &[PathBuf],
    format: Format,
    usable: impl Fn(&str) -> bool,
) -> Result<Vec<TraceOp>, String> {
    let mut names: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for f in files {
        let name = f.display().to_string();
        let mut r = Reader::new(crest_trace::input::open(f)?, &name, format);
        if format != Format::Monitor {
            // The format is judged by its first lines.
            match r.next() {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err(format!("{name}: holds no record")),
            }
        }
        for rec in r {
            let rec = rec.map_err(|e| e.to_string())?;
            let Some(cmd) = rec.args.first() else {
                continue;
            };
            let upper = String::from_utf8_lossy(cmd).to_ascii_uppercase();
            if seen.contains(&upper) {
                continue;
            }
            if seen.len() >= MAX_NAMES {
                return Err(format!(
                    "{name}:{}: more than {MAX_NAMES} distinct command names; is this a MONITOR capture?",
                    rec.line
                ));
            }
            seen.insert(upper.clone());
            if NOT_REPLAYED.contains(&upper.as_str()) || !usable(&upper) {
                continue;
            }
            if names.len() >= crest_model::trace::MAX_OPS {
                return Err(format!(
                    "{name}:{}: more than {} distinct commands; a replay's op table holds at most that many",
                    rec.line,
                    crest_model::trace::MAX_OPS
                ));
            }
            names.push(upper);
        }
    }
    if format != Format::Monitor {
        return Ok(cache_ops());
    }
    if names.is_empty() {
        return Err(format!(
            "{}: no command that can be replayed (every one is connection state, blocking or admin)",
            files
                .first()
                .map(|f| f.display().to_string())
                .unwrap_or_default()
        ));
    }
    Ok(names.into_iter().map(TraceOp::Command).collect())
}

/// The mix entry (a command template, weight 1) a trace op is counted under: what the
/// server's `INFO commandstats` calls it (for memcached, the op's own verb, a built-in).
pub fn template(op: &TraceOp, protocol: Protocol) -> String {
    if protocol.is_memcache()
        && let TraceOp::Op(o) = op
    {
        // memcached's own verbs (built-ins in either protocol); a cas without its unique
        // goes as a replace ([`crest_model::trace::Batch::encode_mc`]).
        return match o {
            Op::Get => "GET",
            Op::Gets => "GETS",
            Op::Set => "SET",
            Op::Add => "ADD",
            Op::Replace | Op::Cas => "REPLACE",
            Op::Append => "APPEND",
            Op::Prepend => "PREPEND",
            Op::Delete => "DEL",
            Op::Incr => "INCR",
            Op::Decr => "DECR",
            Op::Command => "PING",
        }
        .into();
    }
    match op {
        TraceOp::Op(o) => match o {
            Op::Get | Op::Gets => "GET".into(),
            Op::Set => "SET __key__ __value__".into(),
            Op::Add => "SET __key__ __value__ NX".into(),
            Op::Replace | Op::Cas => "SET __key__ __value__ XX".into(),
            Op::Append | Op::Prepend => "APPEND __key__ __value__".into(),
            Op::Delete => "DEL".into(),
            Op::Incr => "INCR __key__".into(),
            Op::Decr => "DECR __key__".into(),
            Op::Command => "PING".into(),
        },
        // Only its name counts (the bytes sent are the trace's); a template parses as
        // any command, known to Crest or not.
        TraceOp::Command(name) => format!("{name} __key__"),
    }
}

/// How far ahead of the run the trace is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Requests intended more than this past now are not read yet.
    pub ahead_ns: u64,
    /// Requests one shard may hold sent and not yet taken: reading waits beyond it.
    pub per_shard: u64,
}

/// What is done to a record's key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keys {
    /// Put before every key (`--key-prefix`).
    pub prefix: Vec<u8>,
    /// Copies of each request under suffixed keys (`--amplify`; 0 and 1: none).
    pub amplify: u32,
    /// The target is memcached: a key it cannot take (over 250 bytes, a space or a
    /// control character) is skipped and counted.
    pub memcached: bool,
}

/// The op table of a Twitter or cachebench trace: every cache op, in [`Op::ALL`]'s order.
pub fn cache_ops() -> Vec<TraceOp> {
    Op::ALL
        .iter()
        .filter(|op| **op != Op::Command)
        .map(|&op| TraceOp::Op(op))
        .collect()
}
