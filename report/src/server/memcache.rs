//! memcached's own counters (issue #28): its `stats` reply read into the same [`Info`] (and
//! so the same [`Snap`]) a Redis `INFO` gives, and the truth check per counter family.
//!
//! # Design
//!
//! - **One snapshot for both protocols.** [`Stats::parse`] keeps the few `STAT name value`
//!   lines the series reads; [`Stats::info`] writes them under the names the RESP path
//!   uses, so the rows, deltas, resets and restarts of [`super::series`] work unchanged:
//!
//!   | memcached `stats` | as `INFO`'s | in the row |
//!   |---|---|---|
//!   | `rusage_user`, `rusage_system` | `used_cpu_user`, `used_cpu_sys` | `cpu_us`, `cpu_us_per_op` |
//!   | `bytes` (item memory) | `used_memory` | `used_memory` (no RSS, no fragmentation: null) |
//!   | `curr_connections` (the sampler's own included) | `connected_clients` | `connected_clients` |
//!   | `curr_items` | a keyspace line `items` | `keys`, `keys_by_db` `{"items": n}` |
//!   | `evictions` | `evicted_keys` | `evicted_keys` (`expired_keys` null) |
//!   | `get_hits + touch_hits`, `get_misses + touch_misses` | `keyspace_hits`, `keyspace_misses` | the same |
//!   | `bytes_read`, `bytes_written` | `total_net_input_bytes`, `…output…` | `net_*_bytes` |
//!   | `limit_maxbytes` | `maxmemory` | `maxmemory` |
//!   | `version` | `memcached_version` | `version` `memcached 1.6.18` |
//!   | `pid` and `time − uptime` (its start) | `run_id` `pid@start` | a restart is a changed `run_id` |
//!
//!   Hits and misses are get's and touch's together because a meta touch (`mg k T…`)
//!   counts its hit as a touch but its miss as a get (below): only the sum is consistent.
//!   `pid` alone would not do (a restarted container is pid 1 again); `time − uptime` is
//!   the process's start in memcached's own clock, the same in every sample.
//! - **Commands by family.** memcached counts per family, not per command: the command
//!   table holds [`COMMANDS`], one entry per family (`cmd_get`, `cmd_set`, `cmd_touch`,
//!   `cmd_flush`, `delete`, `incr`, `decr`), `calls` their sum; there is no per-command
//!   server time (`usec` 0), and no failed or rejected count. `ops` is their sum: a
//!   multi-get counts once per key there, as memcached counts it. The hit and miss
//!   counters are kept beside ([`Info::counters`]).
//! - **What each request moves**, established against memcached 1.6.18 (Debian's), one
//!   request at a time between two `stats`:
//!
//!   | request (text / meta) | moves |
//!   |---|---|
//!   | `get k` / `mg k v` (also `mg k`, `mg k v k`, quiet `q`) | `cmd_get` +1, `get_hits` or `get_misses` |
//!   | `get a b c` (multi-get) / `mg a v q`, `mg b v q`, `mg c v q`, `mn` | `cmd_get` +3: one per key, hits and misses per key |
//!   | `gets k` / `mg k v c` | as `get` |
//!   | `gat t k`, `gats t k` (per key, as a multi-get) | `cmd_touch` +1, `touch_hits` or `touch_misses`; not `cmd_get` |
//!   | `touch k t` | `cmd_touch` +1, `touch_hits` or `touch_misses` |
//!   | `mg k v T…`, `mg k v c T…`, `mg k T…` (meta GAT, GATS, TOUCH) | a hit: `cmd_touch` +1, `touch_hits`; **a miss: `cmd_get` +1, `get_misses`** |
//!   | `set`, `add`, `replace`, `append`, `prepend`, stored or not / `ms` in every mode (`MS`, `ME`, `MA`, `MP`, `MR`), `HD` or `NS` | `cmd_set` +1 |
//!   | `cas` / `ms k n C…` | `cmd_set` +1, and `cas_hits`, `cas_misses` (`NOT_FOUND`) or `cas_badval` (`EXISTS`) |
//!   | `delete` / `md` | `delete_hits` or `delete_misses` (no `cmd_`) |
//!   | `incr` / `ma k` (`MI`, `M+`) | `incr_hits` or `incr_misses` |
//!   | `decr` / `ma k MD` (`M-`) | `decr_hits` or `decr_misses` |
//!   | `flush_all` | `cmd_flush` +1 |
//!   | `version`, `mn`, `stats`, `stats settings`, `stats slabs` | nothing |
//!   | any request answered `ERROR`, `CLIENT_ERROR` or `SERVER_ERROR` (unknown command, key too long, `incr` of a non-number, a value over the item size) | nothing |
//!   | `ma k N…` on a miss (auto-create, `HD`; Crest never sends `N`) | nothing |
//!
//!   So the sampler's own `stats` (and `stats settings` at connect) are in no command
//!   counter: nothing is taken out, unlike Redis's `INFO` (they are in `bytes_read`,
//!   `bytes_written` and `curr_connections`, as a Redis sampler's are).
//! - **Truth check per family** (`series::memcache_agreement`): a family's server count (the Δ of its
//!   counters over the span) against the report's commands in it ([`TEXT`], [`META`]),
//!   each request counted as memcached counts it: once, or once per key it names
//!   ([`Unit::Key`]: a multi-get of 8 keys is 8, from the caller's [`Keys`]). The band is
//!   `completed − allowance ≤ server ≤ sent + allowance`: the lower end is the requests
//!   answered **without an error**, because memcached counts no request it answers with
//!   `ERROR`/`CLIENT_ERROR`/`SERVER_ERROR` (Redis counts those as calls); the upper end
//!   is what was written; the allowance is the warm-up boundary's, in keys for a per-key
//!   family. With the meta protocol `cmd_get` and `cmd_touch` are one family (GET, GETS,
//!   MGET, GAT, GATS, TOUCH): a meta touch's miss moves `cmd_get`, so only their sum
//!   matches. `PING` (`version` / `mn`) is in no counter: shown, not judged. A command
//!   the table does not place (a template such as `mg __key__ s v`) may move any family:
//!   then nothing is judged, and the check says why. Hits and misses are shown beside
//!   each family (the server's `get_hits`/`get_misses`… against the report's misses),
//!   not judged: the report's misses are of answered requests only.
//! - **A ring** is sampled per server and summed ([`Stats::sum`]): every counter and
//!   gauge is the ring's, the truth check the whole run's; `run_id` lists every server's
//!   process, so any restart shows. A field one server lacks is left out of the sum.
//!
//! # Bounds
//! A reply is at most [`MAX_STATS`] bytes (the sampler reads no more); parsing keeps only
//! the named fields (a few dozen numbers, one version of at most 64 bytes), skips lines
//! that are not `STAT name value` or whose value is not a number that fits, and never
//! panics.

use super::info::{CmdCounters, DbKeys, Info, Snap};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The largest `stats` (or `stats settings`) reply read: memcached 1.6's is about 2.5 kB.
pub const MAX_STATS: usize = 64 << 10;

/// The `stats` fields kept as numbers, by memcached's name.
const KEPT: &[&str] = &[
    "pid",
    "uptime",
    "time",
    "curr_connections",
    "total_connections",
    "bytes",
    "curr_items",
    "limit_maxbytes",
    "bytes_read",
    "bytes_written",
    "evictions",
    "threads",
    "cmd_get",
    "cmd_set",
    "cmd_touch",
    "cmd_flush",
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "touch_hits",
    "touch_misses",
    "delete_hits",
    "delete_misses",
    "incr_hits",
    "incr_misses",
    "decr_hits",
    "decr_misses",
    "cas_hits",
    "cas_misses",
    "cas_badval",
];

/// memcached's fields the series reads under `INFO`'s name.
const AS_INFO: &[(&str, &str)] = &[
    ("bytes", "used_memory"),
    ("curr_connections", "connected_clients"),
    ("bytes_read", "total_net_input_bytes"),
    ("bytes_written", "total_net_output_bytes"),
    ("evictions", "evicted_keys"),
    ("total_connections", "total_connections_received"),
    ("limit_maxbytes", "maxmemory"),
];

/// The snapshot's command table for memcached: each family's name and the counters whose
/// sum its `calls` is.
pub const COMMANDS: &[(&str, &[&str])] = &[
    ("cmd_get", &["cmd_get"]),
    ("cmd_set", &["cmd_set"]),
    ("cmd_touch", &["cmd_touch"]),
    ("cmd_flush", &["cmd_flush"]),
    ("delete", &["delete_hits", "delete_misses"]),
    ("incr", &["incr_hits", "incr_misses"]),
    ("decr", &["decr_hits", "decr_misses"]),
];

/// The hit and miss counters kept in [`Info::counters`].
const COUNTERS: &[&str] = &[
    "get_hits",
    "get_misses",
    "get_expired",
    "get_flushed",
    "touch_hits",
    "touch_misses",
    "delete_hits",
    "delete_misses",
    "incr_hits",
    "incr_misses",
    "decr_hits",
    "decr_misses",
    "cas_hits",
    "cas_misses",
    "cas_badval",
];

/// The keyspace line a memcached snapshot's items go under.
pub const ITEMS: &str = "items";

/// One `stats` reply (or a ring's, summed): the fields the series reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// The whole-number fields the sampler keeps, as the server gave them, by memcached's name.
    pub uints: BTreeMap<String, u64>,
    /// `rusage_user`, µs.
    pub user_us: Option<u64>,
    /// `rusage_system`, µs.
    pub sys_us: Option<u64>,
    /// `version` (a ring's distinct versions, joined by `, `).
    pub version: Option<String>,
    /// The process: `pid@start`, its start being `time − uptime`; a ring's, joined by `,`.
    pub process: Option<String>,
}

/// `sec.usec` (memcached prints `%ld.%06ld`) in µs; None when it is not that, or too big.
fn seconds_us(v: &str) -> Option<u64> {
    let (s, frac) = v.split_once('.').unwrap_or((v, ""));
    if s.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let s: u64 = s.parse().ok()?;
    // The first six digits are µs (fewer: padded).
    let mut us = 0u64;
    for i in 0..6 {
        us = us * 10 + frac.as_bytes().get(i).map_or(0, |b| u64::from(b - b'0'));
    }
    s.checked_mul(1_000_000)?.checked_add(us)
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Stats {
    /// Parses the text of a `stats` reply: `STAT name value` lines (CRLF or LF), up to
    /// `END`; any other line, an unknown name or a value that is not a number that fits
    /// is skipped.
    pub fn parse(text: &str) -> Self {
        let mut s = Stats::default();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if line == "END" {
                break;
            }
            let Some((name, value)) = line.strip_prefix("STAT ").and_then(|l| l.split_once(' '))
            else {
                continue;
            };
            let value = value.trim();
            match name {
                "rusage_user" => s.user_us = seconds_us(value),
                "rusage_system" => s.sys_us = seconds_us(value),
                "version" => s.version = Some(cut(value, 64).to_string()),
                _ => {
                    if let Some(k) = KEPT.iter().find(|k| **k == name)
                        && let Ok(v) = value.parse::<u64>()
                    {
                        s.uints.insert((*k).to_string(), v);
                    }
                }
            }
        }
        s.process = match (s.uint("pid"), s.uint("time"), s.uint("uptime")) {
            (Some(pid), Some(time), Some(up)) => Some(format!("{pid}@{}", time.saturating_sub(up))),
            _ => None,
        };
        s
    }

    /// A field kept as a number.
    pub fn uint(&self, name: &str) -> Option<u64> {
        self.uints.get(name).copied()
    }

    /// A ring's figures: every number summed (a field one server lacks is left out), the
    /// processes listed, the distinct versions joined. None for no servers.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Stats>) -> Option<Stats> {
        let mut it = all.into_iter();
        let mut sum = it.next()?.clone();
        for s in it {
            sum.uints = sum
                .uints
                .iter()
                .filter_map(|(k, a)| Some((k.clone(), a.saturating_add(s.uint(k)?))))
                .collect();
            sum.user_us = sum.user_us.zip(s.user_us).map(|(a, b)| a.saturating_add(b));
            sum.sys_us = sum.sys_us.zip(s.sys_us).map(|(a, b)| a.saturating_add(b));
            sum.process = sum
                .process
                .zip(s.process.as_ref())
                .map(|(a, b)| format!("{a},{b}"));
            if let Some(v) = &s.version
                && !sum
                    .version
                    .as_deref()
                    .is_some_and(|have| have.split(", ").any(|h| h == v))
            {
                sum.version = Some(match sum.version {
                    Some(have) => format!("{have}, {v}"),
                    None => v.clone(),
                });
            }
        }
        Some(sum)
    }

    /// As the `INFO` the series reads (the table of the module's doc).
    pub fn info(&self) -> Info {
        let mut info = Info::default();
        for (mc, redis) in AS_INFO {
            if let Some(v) = self.uint(mc) {
                info.fields.insert((*redis).to_string(), v.to_string());
            }
        }
        let both = |a: &str, b: &str| Some(self.uint(a)?.saturating_add(self.uint(b)?));
        if let Some(h) = both("get_hits", "touch_hits") {
            info.fields.insert("keyspace_hits".into(), h.to_string());
        }
        if let Some(m) = both("get_misses", "touch_misses") {
            info.fields.insert("keyspace_misses".into(), m.to_string());
        }
        let secs = |us: u64| format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
        if let (Some(u), Some(s)) = (self.user_us, self.sys_us) {
            info.fields.insert("used_cpu_user".into(), secs(u));
            info.fields.insert("used_cpu_sys".into(), secs(s));
        }
        if let Some(v) = &self.version {
            info.fields.insert("memcached_version".into(), v.clone());
        }
        if let Some(p) = &self.process {
            info.fields.insert("run_id".into(), p.clone());
        }
        for (name, parts) in COMMANDS {
            let calls = parts
                .iter()
                .map(|p| self.uint(p))
                .try_fold(0u64, |a, v| Some(a.saturating_add(v?)));
            if let Some(calls) = calls {
                info.commands.insert(
                    (*name).to_string(),
                    CmdCounters {
                        calls,
                        ..CmdCounters::default()
                    },
                );
            }
        }
        for c in COUNTERS {
            if let Some(v) = self.uint(c) {
                info.counters.insert((*c).to_string(), v);
            }
        }
        if let Some(items) = self.uint("curr_items") {
            info.dbs.insert(
                ITEMS.into(),
                DbKeys {
                    keys: items,
                    expires: 0,
                },
            );
        }
        info
    }

    /// As a sample keeps it.
    pub fn snap(&self) -> Snap {
        Snap::from(self.info())
    }
}

/// What `stats settings` says that the report keeps: memcached's worker threads (`-t`,
/// the report's `io_threads`). `item_size_max` and `maxconns` have no place in the
/// report and are not kept.
pub fn settings_threads(text: &str) -> Option<u64> {
    text.lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == "num_threads")
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// How a command's requests count in its family's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Once per request.
    Request,
    /// Once per key the request names (`get a b c` is 3).
    Key,
}

/// One family of memcached's counters and the report's commands that move it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Family {
    /// Its name in the check (`cmd_get`; `cmd_get+cmd_touch` for the meta protocol).
    pub name: &'static str,
    /// The [`COMMANDS`] entries whose calls it sums; empty: memcached counts none.
    pub counts: &'static [&'static str],
    /// memcached's hit counters of the family, summed; empty where it keeps none.
    pub hits: &'static [&'static str],
    /// Its miss counters, summed.
    pub misses: &'static [&'static str],
    /// The report's commands in it, and how each request counts.
    pub commands: &'static [(&'static str, Unit)],
}

const SETS: Family = Family {
    name: "cmd_set",
    counts: &["cmd_set"],
    hits: &[],
    misses: &[],
    commands: &[
        ("SET", Unit::Request),
        ("ADD", Unit::Request),
        ("REPLACE", Unit::Request),
        ("APPEND", Unit::Request),
        ("PREPEND", Unit::Request),
        ("CAS", Unit::Request),
    ],
};
const DELETES: Family = Family {
    name: "delete",
    counts: &["delete"],
    hits: &["delete_hits"],
    misses: &["delete_misses"],
    commands: &[("DEL", Unit::Request)],
};
const INCRS: Family = Family {
    name: "incr",
    counts: &["incr"],
    hits: &["incr_hits"],
    misses: &["incr_misses"],
    commands: &[("INCR", Unit::Request)],
};
const DECRS: Family = Family {
    name: "decr",
    counts: &["decr"],
    hits: &["decr_hits"],
    misses: &["decr_misses"],
    commands: &[("DECR", Unit::Request)],
};
/// `version` (text) and `mn` (meta): memcached counts them nowhere.
const PINGS: Family = Family {
    name: "none",
    counts: &[],
    hits: &[],
    misses: &[],
    commands: &[("PING", Unit::Request)],
};

/// The families of a run over the text protocol.
pub const TEXT: &[Family] = &[
    Family {
        name: "cmd_get",
        counts: &["cmd_get"],
        hits: &["get_hits"],
        misses: &["get_misses"],
        commands: &[("GET", Unit::Key), ("GETS", Unit::Key), ("MGET", Unit::Key)],
    },
    Family {
        name: "cmd_touch",
        counts: &["cmd_touch"],
        hits: &["touch_hits"],
        misses: &["touch_misses"],
        commands: &[
            ("TOUCH", Unit::Request),
            ("GAT", Unit::Key),
            ("GATS", Unit::Key),
        ],
    },
    SETS,
    DELETES,
    INCRS,
    DECRS,
    PINGS,
];

/// The families of a run over the meta protocol: gets and touches are one (a meta touch's
/// miss moves `cmd_get`, its hit `cmd_touch`).
pub const META: &[Family] = &[
    Family {
        name: "cmd_get+cmd_touch",
        counts: &["cmd_get", "cmd_touch"],
        hits: &["get_hits", "touch_hits"],
        misses: &["get_misses", "touch_misses"],
        commands: &[
            ("GET", Unit::Key),
            ("GETS", Unit::Key),
            ("MGET", Unit::Key),
            ("TOUCH", Unit::Request),
            ("GAT", Unit::Key),
            ("GATS", Unit::Key),
        ],
    },
    SETS,
    DELETES,
    INCRS,
    DECRS,
    PINGS,
];

/// The keys a command's requests named, for a [`Unit::Key`] command that names several
/// (`MGET` with `--batch`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keys {
    /// Keys of the requests written.
    pub sent: u64,
    /// Keys of the requests answered without an error.
    pub completed: u64,
}

impl Keys {
    /// `per_request` keys in every one of `sent` requests written and `completed`
    /// answered (one batch size for the command).
    pub fn per_request(sent: u64, completed: u64, per_request: u64) -> Self {
        Self {
            sent: sent.saturating_mul(per_request),
            completed: completed.saturating_mul(per_request),
        }
    }
}

/// What the truth check needs to know of a memcached run beyond the books.
#[derive(Debug, Clone, Copy)]
pub struct McBooks<'a> {
    /// The run spoke the meta protocol (`--meta`): [`META`]'s families, else [`TEXT`]'s.
    pub meta: bool,
    /// Per command of [`Unit::Key`] that named several keys a request, its keys (summed
    /// over classes, each class's requests times its batch); a command absent named one
    /// key a request.
    pub keys: &'a BTreeMap<String, Keys>,
}

/// A family's side of an [`Agreement`](super::series::Agreement) (its `memcache`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FamilyCheck {
    /// memcached's counters compared (`cmd_get`, `delete_hits+delete_misses`); `none`
    /// for commands memcached counts nowhere.
    pub counter: String,
    /// The report's commands in it → what they count for (requests, or keys for a
    /// multi-key command): `sent` is their sum.
    pub commands: BTreeMap<String, u64>,
    /// The report's requests (keys) of the family answered without an error: the band's
    /// lower end (`answered` holds the same).
    pub completed: u64,
    /// Δ of the server's hit counters of the family (`get_hits`…); null where memcached
    /// keeps none (sets).
    pub server_hits: Option<u64>,
    /// Δ of its miss counters (`get_misses`…).
    pub server_misses: Option<u64>,
    /// The report's misses of those commands (nil replies, a multi-get's missing keys).
    pub misses: u64,
    /// Why it is shown, not judged, if it is not.
    pub not_judged: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::series::{self, Books, Mark, Sample, Sent, Series};

    /// `stats` of memcached 1.6.18 (Debian's, `-t 1 -U 0`) after set a, b, n; get a; get
    /// zz; get a b zz; gets a; gets a b zz; gat a, zz, a b zz; gats a; set/add ×2/
    /// replace ×2/append/prepend/append miss; cas bad, cas miss; delete ×2; incr ×2;
    /// decr ×2; touch ×2; version; mn; mg hit, miss, no flags, T hit, T miss, q; ms ×10;
    /// md ×2; ma ×5; a bogus command and a bare get (both ERROR).
    const MEMCACHED: &str = include_str!("testdata/memcached-1.6.txt");

    #[test]
    fn memcached_1_6_stats_read_into_the_snapshot() {
        let s = Stats::parse(MEMCACHED);
        assert_eq!(s.version.as_deref(), Some("1.6.18"));
        assert_eq!(s.uint("pid"), Some(7162));
        assert_eq!(s.process.as_deref(), Some("7162@1796567829"));
        assert_eq!(s.user_us, Some(0));
        assert_eq!(s.sys_us, Some(16_167));
        let i = s.info();
        assert_eq!(i.text("memcached_version"), Some("1.6.18"));
        assert_eq!(i.text("run_id"), Some("7162@1796567829"));
        assert_eq!(i.uint("used_memory"), Some(375));
        assert_eq!(i.uint("connected_clients"), Some(1));
        assert_eq!(i.uint("total_net_input_bytes"), Some(1526));
        assert_eq!(i.uint("total_net_output_bytes"), Some(252_643));
        assert_eq!(i.uint("evicted_keys"), Some(0));
        assert_eq!(i.uint("maxmemory"), Some(67_108_864));
        // get_hits 9 + touch_hits 6, get_misses 5 + touch_misses 3.
        assert_eq!(i.uint("keyspace_hits"), Some(15));
        assert_eq!(i.uint("keyspace_misses"), Some(8));
        assert_eq!(i.cpu_us(), Some(16_167));
        assert_eq!(i.keys(), 6);
        let calls = |n: &str| i.commands[n].calls;
        assert_eq!(
            [
                "cmd_get",
                "cmd_set",
                "cmd_touch",
                "cmd_flush",
                "delete",
                "incr",
                "decr"
            ]
            .map(calls),
            [14, 23, 9, 0, 4, 4, 4]
        );
        assert_eq!(i.commands.len(), COMMANDS.len());
        assert!(
            i.commands
                .values()
                .all(|c| c.usec == 0 && c.failed_calls == 0)
        );
        assert_eq!(i.counters["cas_badval"], 2);
        assert_eq!(i.counters["delete_misses"], 2);
        assert_eq!(i.counters.len(), COUNTERS.len());
        // What the sample keeps: the same, through the same Snap as INFO's.
        let snap = s.snap();
        assert_eq!(snap.cpu_us(), Some(16_167));
        assert_eq!(snap.uint("used_memory"), Some(375));
        assert_eq!(snap.text("memcached_version"), Some("1.6.18"));
        assert_eq!(snap.text("run_id"), Some("7162@1796567829"));
        assert_eq!(snap.commands, i.commands);
        assert_eq!(snap.counters, i.counters);
        assert_eq!(snap.uint("used_memory_rss"), None);
        assert_eq!(snap.float("mem_fragmentation_ratio"), None);
        let id = series::ServerIdentity::of(&snap, Some(4));
        assert_eq!(id.version, "memcached 1.6.18");
        assert_eq!((id.redis_version, id.maxmemory), (None, Some(67_108_864)));
    }

    #[test]
    fn stats_settings_give_the_threads() {
        let t = "STAT maxbytes 67108864\r\nSTAT maxconns 1024\r\nSTAT num_threads 4\r\nSTAT item_size_max 1048576\r\nEND\r\n";
        assert_eq!(settings_threads(t), Some(4));
        assert_eq!(settings_threads("END\r\n"), None);
        assert_eq!(settings_threads("STAT num_threads lots\r\n"), None);
    }

    /// Garbage lines, numbers too big for u64, negative or fractional counters, a CPU
    /// figure that is not `sec.usec`, a huge version: skipped or cut, never a panic.
    #[test]
    fn garbage_and_huge_numbers_are_skipped() {
        let big = "9".repeat(400);
        let text = format!(
            "STAT cmd_get {big}\r\nSTAT cmd_set -4\r\nSTAT bytes 1.5\r\nSTAT rusage_user {big}.000001\r\n\
             STAT rusage_system 1.2345678901\r\nSTAT version {}\r\nnonsense\r\nSTAT\r\nSTAT \r\n\
             STAT cmd_touch 18446744073709551615\r\nSTAT pid 9\r\nSTAT time 5\r\nSTAT uptime 7\r\n\
             STAT évé 1\r\nSTAT curr_items  12 \r\n",
            "é".repeat(100)
        );
        let s = Stats::parse(&text);
        assert_eq!(s.uint("cmd_get"), None);
        assert_eq!(s.uint("cmd_set"), None);
        assert_eq!(s.uint("bytes"), None);
        assert_eq!(s.uint("cmd_touch"), Some(u64::MAX));
        assert_eq!(s.uint("curr_items"), Some(12));
        assert_eq!(s.user_us, None);
        assert_eq!(s.sys_us, None, "ten decimals are not memcached's");
        assert!(s.version.as_ref().is_some_and(|v| v.len() <= 64));
        // time < uptime: a start of 0, not a wrap.
        assert_eq!(s.process.as_deref(), Some("9@0"));
        let i = s.info();
        assert_eq!(i.cpu_us(), None);
        assert!(!i.commands.contains_key("cmd_get"));
        assert_eq!(i.commands["cmd_touch"].calls, u64::MAX);
        // Sums saturate.
        let twice = Stats::sum([&s, &s]).unwrap();
        assert_eq!(twice.uint("cmd_touch"), Some(u64::MAX));
        assert_eq!(seconds_us("1.5"), Some(1_500_000));
        assert_eq!(seconds_us("0.016167"), Some(16_167));
        assert_eq!(seconds_us(".5"), None);
        assert_eq!(seconds_us("1.-5"), None);
        assert_eq!(seconds_us("18446744073710"), None);
        // Nothing after END is read; an empty reply is an empty snapshot.
        let s = Stats::parse("STAT cmd_get 1\r\nEND\r\nSTAT cmd_set 2\r\n");
        assert_eq!((s.uint("cmd_get"), s.uint("cmd_set")), (Some(1), None));
        assert_eq!(Stats::parse(""), Stats::default());
    }

    /// A ring's figures are its servers' summed; a field one lacks is left out; every
    /// process is listed, so one restart changes the ring's run_id.
    #[test]
    fn a_ring_is_summed() {
        let a = Stats::parse(MEMCACHED);
        let b = Stats::parse(
            "STAT pid 1\r\nSTAT uptime 5\r\nSTAT time 105\r\nSTAT version 1.6.21\r\nSTAT rusage_user 1.000000\r\nSTAT rusage_system 0.500000\r\nSTAT cmd_get 100\r\nSTAT get_hits 60\r\nSTAT get_misses 40\r\nSTAT touch_hits 0\r\nSTAT touch_misses 0\r\nSTAT bytes 1000\r\nSTAT curr_connections 3\r\nEND\r\n",
        );
        let r = Stats::sum([&a, &b]).unwrap();
        assert_eq!(r.uint("cmd_get"), Some(114));
        assert_eq!(r.uint("bytes"), Some(1375));
        assert_eq!(r.uint("curr_connections"), Some(4));
        assert_eq!(r.uint("cmd_set"), None, "the second server has none");
        assert_eq!(r.user_us, Some(1_000_000));
        assert_eq!(r.sys_us, Some(516_167));
        assert_eq!(r.version.as_deref(), Some("1.6.18, 1.6.21"));
        assert_eq!(r.process.as_deref(), Some("7162@1796567829,1@100"));
        let i = r.info();
        assert_eq!(i.uint("keyspace_hits"), Some(75));
        assert_eq!(i.commands["cmd_get"].calls, 114);
        assert!(!i.commands.contains_key("cmd_set"));
        assert_eq!(
            Stats::sum([&a, &a]).unwrap().version.as_deref(),
            Some("1.6.18")
        );
        assert_eq!(Stats::sum(std::iter::empty()), None);
    }

    /// Every command the report names for memcached is in exactly one family of each
    /// table; the meta table joins gets and touches.
    #[test]
    fn every_command_is_in_one_family() {
        let names = [
            "GET", "GETS", "MGET", "GAT", "GATS", "SET", "ADD", "REPLACE", "APPEND", "PREPEND",
            "CAS", "DEL", "INCR", "DECR", "TOUCH", "PING",
        ];
        for table in [TEXT, META] {
            for n in names {
                let homes: Vec<&str> = table
                    .iter()
                    .filter(|f| f.commands.iter().any(|(c, _)| *c == n))
                    .map(|f| f.name)
                    .collect();
                assert_eq!(homes.len(), 1, "{n}: {homes:?}");
            }
            for f in table {
                for c in f.counts {
                    assert!(COMMANDS.iter().any(|(n, _)| n == c), "{c}");
                }
            }
        }
        let home = |t: &[Family], c: &str| {
            t.iter()
                .find(|f| f.commands.iter().any(|(n, _)| *n == c))
                .map(|f| f.name)
        };
        assert_eq!(home(TEXT, "GAT"), Some("cmd_touch"));
        assert_eq!(home(TEXT, "MGET"), Some("cmd_get"));
        assert_eq!(home(META, "TOUCH"), Some("cmd_get+cmd_touch"));
        assert_eq!(home(TEXT, "CAS"), Some("cmd_set"));
        assert_eq!(home(TEXT, "PING"), Some("none"));
    }

    /// A snapshot of the counters a run moves: gets (per key), sets, touches, deletes,
    /// incrs and decrs, with their hits and misses.
    fn stats(get: u64, set: u64, touch: u64, del: u64, incr: u64, misses: u64) -> Snap {
        Stats::parse(&format!(
            "STAT pid 7\r\nSTAT uptime 10\r\nSTAT time 1000\r\nSTAT version 1.6.18\r\nSTAT rusage_user 0.5\r\nSTAT rusage_system 0.25\r\n\
             STAT cmd_get {get}\r\nSTAT cmd_set {set}\r\nSTAT cmd_touch {touch}\r\nSTAT cmd_flush 0\r\n\
             STAT get_hits {}\r\nSTAT get_misses {misses}\r\nSTAT touch_hits {touch}\r\nSTAT touch_misses 0\r\n\
             STAT delete_hits {del}\r\nSTAT delete_misses 0\r\nSTAT incr_hits {incr}\r\nSTAT incr_misses 0\r\n\
             STAT decr_hits 0\r\nSTAT decr_misses 0\r\nSTAT curr_connections 2\r\nSTAT bytes 100\r\nSTAT curr_items 3\r\nEND\r\n",
            get - misses
        ))
        .snap()
    }

    fn sample(mark: Mark, seq: u64, at_s: f64, info: Snap) -> Sample {
        Sample {
            mark,
            at_s,
            late_us: 0.0,
            seq,
            info,
        }
    }

    fn sent(sent: u64, completed: u64, misses: u64) -> Sent {
        Sent {
            sent,
            answered: completed,
            completed,
            misses,
        }
    }

    static NONE: BTreeMap<String, u64> = BTreeMap::new();

    fn books<'a>(
        commands: &'a BTreeMap<String, Sent>,
        mc: Option<McBooks<'a>>,
        warmup: bool,
    ) -> Books<'a> {
        Books {
            commands,
            rows: 1,
            interval_s: 1.0,
            warmup,
            in_flight_max: 4,
            first_rate: 0.0,
            cluster: false,
            replica_reads: false,
            coordinator_calls: &NONE,
            short: None,
            refused: None,
            memcache: mc,
        }
    }

    /// A run of 100 GET (10 missed), 50 MGET of 8 keys (40 keys missed), 30 SET + 20 ADD,
    /// 10 GAT, 5 DEL, 5 INCR, 7 PING: the server's samples before and after.
    fn run() -> Series {
        Series {
            samples: vec![
                sample(Mark::BeforeLoad, 1, -1.0, stats(1000, 500, 0, 0, 0, 100)),
                sample(Mark::Final, 2, 1.0, stats(1500, 550, 10, 5, 5, 150)),
            ],
            ..Series::default()
        }
    }

    fn commands() -> BTreeMap<String, Sent> {
        [
            ("GET", sent(100, 100, 10)),
            ("MGET", sent(50, 50, 40)),
            ("SET", sent(30, 30, 0)),
            ("ADD", sent(20, 20, 3)),
            ("GAT", sent(10, 10, 0)),
            ("DEL", sent(5, 5, 0)),
            ("INCR", sent(5, 5, 0)),
            ("PING", sent(7, 7, 0)),
        ]
        .map(|(c, s)| (c.to_string(), s))
        .into()
    }

    fn mget_keys(per: u64) -> BTreeMap<String, Keys> {
        let c = commands();
        [(
            "MGET".to_string(),
            Keys::per_request(c["MGET"].sent, c["MGET"].completed, per),
        )]
        .into()
    }

    /// The counts match, family by family, a multi-get counted per key; the rows read
    /// the same snapshot as INFO's; hits and misses are shown beside the report's.
    #[test]
    fn a_report_that_matches_agrees_per_family() {
        let series = run();
        let c = commands();
        let keys = mget_keys(8);
        let mc = McBooks {
            meta: false,
            keys: &keys,
        };
        let (r, problem) = series::report(&series, &books(&c, Some(mc), false)).unwrap();
        assert!(problem.is_none(), "{problem:?}");
        assert_eq!(r.agrees, Some(true), "{:?}", r.agreement);
        assert_eq!(r.identity.version, "memcached 1.6.18");
        let fam: Vec<(&str, u64, u64, bool)> = r
            .agreement
            .iter()
            .map(|a| (a.command.as_str(), a.server, a.sent, a.judged))
            .collect();
        assert_eq!(
            fam,
            [
                ("cmd_get (GET + MGET keys)", 500, 500, true),
                ("cmd_touch (GAT)", 10, 10, true),
                ("cmd_set (ADD + SET)", 50, 50, true),
                ("delete (DEL)", 5, 5, true),
                ("incr (INCR)", 5, 5, true),
                ("PING", 0, 7, false),
            ]
        );
        let get = r.agreement[0].memcache.as_ref().unwrap();
        assert_eq!(get.counter, "cmd_get");
        assert_eq!(get.commands["MGET"], 400);
        assert_eq!(
            (get.server_hits, get.server_misses, get.misses),
            (Some(450), Some(50), 50)
        );
        let set = r.agreement[2].memcache.as_ref().unwrap();
        assert_eq!(
            (set.server_hits, set.server_misses, set.misses),
            (None, None, 3)
        );
        assert_eq!(
            r.agreement[3].memcache.as_ref().unwrap().counter,
            "delete_hits+delete_misses"
        );
        let words = series::agreement_words(&r.agreement, &r.other_commands);
        assert!(
            words.starts_with("cmd_get (GET + MGET keys) 500 = 500 (hits 450, misses 50 by the server; 50 misses in the report)"),
            "{words}"
        );
        assert!(
            words.contains("PING 7 sent (not judged: memcached counts no version or mn)"),
            "{words}"
        );
        // The row: ops are the server's per family, multi-get keys included; the CPU and
        // the gauges come through.
        assert_eq!(r.total.ops, Some(570));
        assert_eq!(r.total.commands["cmd_get"].calls, 500);
        assert_eq!(r.total.keyspace_misses, Some(50));
        assert_eq!(r.total.cpu_us, Some(0));
        assert_eq!(r.total.connected_clients, Some(2));
        assert_eq!(r.total.keys_by_db[ITEMS], 3);
        assert!(r.other_commands.is_empty(), "{:?}", r.other_commands);
        assert!(r.unchecked.is_none());
    }

    /// Fewer sets than the server counted (another client's), or a multi-get taken as one
    /// key a request: the family disagrees, by name.
    #[test]
    fn a_report_that_counted_fewer_disagrees() {
        let series = run();
        let mut c = commands();
        c.insert("SET".into(), sent(25, 25, 0));
        let keys = mget_keys(8);
        let mc = McBooks {
            meta: false,
            keys: &keys,
        };
        let (r, problem) = series::report(&series, &books(&c, Some(mc), false)).unwrap();
        assert_eq!(r.agrees, Some(false));
        let p = problem.unwrap();
        assert!(
            p.starts_with(
                "server disagrees: cmd_set (ADD + SET) 50 by the server vs 45 sent by crest (+5;"
            ),
            "{p}"
        );
        // The multi-get's 8 keys a request not said: 150 requests against 500 keys.
        let c = commands();
        let one = BTreeMap::new();
        let mc = McBooks {
            meta: false,
            keys: &one,
        };
        let (r, problem) = series::report(&series, &books(&c, Some(mc), false)).unwrap();
        assert_eq!(r.agrees, Some(false));
        assert!(
            problem
                .unwrap()
                .contains("cmd_get (GET + MGET) 500 by the server vs 150 sent")
        );
    }

    /// Unanswered requests and error replies (which memcached does not count) widen the
    /// band; the warm-up's allowance is in keys for a per-key family.
    #[test]
    fn the_band_is_completed_to_sent() {
        let series = run();
        let mut c = commands();
        // 3 more SETs written, not answered; 4 GETs answered with CLIENT_ERROR (in
        // answered, not in completed, not counted by the server).
        c.insert("SET".into(), sent(33, 30, 0));
        c.insert(
            "GET".into(),
            Sent {
                sent: 104,
                answered: 104,
                completed: 100,
                misses: 10,
            },
        );
        let keys = mget_keys(8);
        let mc = McBooks {
            meta: false,
            keys: &keys,
        };
        let (r, problem) = series::report(&series, &books(&c, Some(mc), false)).unwrap();
        assert!(problem.is_none(), "{problem:?}");
        assert_eq!(r.agrees, Some(true));
        let get = &r.agreement[0];
        assert_eq!((get.server, get.sent, get.answered), (500, 504, 500));
        // With a warm-up: 4 requests in flight at the boundary, 8 keys each at most.
        let mut warm = series.clone();
        warm.samples.insert(
            1,
            sample(Mark::Boundary(0), 2, 0.0, stats(1000, 500, 0, 0, 0, 100)),
        );
        let (r, _) = series::report(&warm, &books(&c, Some(mc), true)).unwrap();
        assert_eq!(r.agreement[0].allowance, 32);
        assert_eq!(r.agreement[2].allowance, 4);
    }

    /// Over the meta protocol a touch's miss moves cmd_get: gets and touches are judged
    /// together, and agree where the text table would not.
    #[test]
    fn the_meta_protocol_judges_gets_and_touches_together() {
        // 10 meta GATs, 4 of them misses: cmd_touch +6, cmd_get +4 (on top of 500).
        let series = Series {
            samples: vec![
                sample(Mark::BeforeLoad, 1, -1.0, stats(1000, 500, 0, 0, 0, 100)),
                sample(Mark::Final, 2, 1.0, stats(1504, 550, 6, 5, 5, 154)),
            ],
            ..Series::default()
        };
        let c = commands();
        let keys = mget_keys(8);
        let text = McBooks {
            meta: false,
            keys: &keys,
        };
        let (r, _) = series::report(&series, &books(&c, Some(text), false)).unwrap();
        assert_eq!(r.agrees, Some(false), "text: a touch's miss is no get");
        let meta = McBooks { meta: true, ..text };
        let (r, problem) = series::report(&series, &books(&c, Some(meta), false)).unwrap();
        assert!(problem.is_none(), "{problem:?}");
        let a = &r.agreement[0];
        assert_eq!(a.command, "cmd_get+cmd_touch (GAT + GET + MGET keys)");
        assert_eq!((a.server, a.sent), (510, 510));
        let m = a.memcache.as_ref().unwrap();
        assert_eq!(m.counter, "cmd_get+cmd_touch");
        assert_eq!((m.server_hits, m.server_misses), (Some(456), Some(54)));
    }

    /// A command no family places (a template) may move any counter: nothing is judged,
    /// and the check says why; a family no command of the run is in is another client's.
    #[test]
    fn an_unplaced_command_leaves_the_families_unjudged() {
        let series = run();
        let mut c = commands();
        c.insert("MG".into(), sent(3, 3, 0));
        let keys = mget_keys(8);
        let mc = McBooks {
            meta: true,
            keys: &keys,
        };
        let (r, problem) = series::report(&series, &books(&c, Some(mc), false)).unwrap();
        assert!(problem.is_none());
        assert!(r.agreement.iter().all(|a| !a.judged && a.agrees));
        let last = r.agreement.last().unwrap();
        assert_eq!(last.command, "MG");
        let words = series::agreement_words(&r.agreement, &r.other_commands);
        assert!(
            words.contains("which memcached's families do not place"),
            "{words}"
        );
        // Deletes nobody in the run sent: another client's, listed.
        let mut c = commands();
        c.remove("DEL");
        let (r, _) = series::report(
            &series,
            &books(
                &c,
                Some(McBooks {
                    meta: false,
                    keys: &keys,
                }),
                false,
            ),
        )
        .unwrap();
        assert_eq!(r.other_commands["delete"], 5);
        assert_eq!(r.agrees, Some(true));
    }

    /// A restarted server (pid and start changed) leaves the check unchecked, as Redis's
    /// run_id does.
    #[test]
    fn a_restart_is_a_new_process() {
        let mut series = run();
        let restarted = Stats::parse(
            "STAT pid 7\r\nSTAT uptime 1\r\nSTAT time 5000\r\nSTAT cmd_get 1600\r\nSTAT cmd_set 600\r\nEND\r\n",
        );
        series.samples[1].info = restarted.snap();
        let c = commands();
        let keys = mget_keys(8);
        let mc = McBooks {
            meta: false,
            keys: &keys,
        };
        let (r, problem) = series::report(&series, &books(&c, Some(mc), false)).unwrap();
        assert_eq!((r.agrees, problem), (None, None));
        assert!(r.unchecked.unwrap().contains("restarted"));
    }
}
