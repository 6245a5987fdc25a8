//! `crest capture` of a memcached server: the same [`Captured`] a Redis-protocol capture
//! makes, from memcached's own words.
//!
//! - **Rates**: `stats` once a second; each second's calls are the counters' differences:
//!   `cmd_get` (GET: every key of a multi-get, as memcached counts), `cmd_set` less the
//!   cas counters (SET), `delete_hits` + `delete_misses` (DEL), `incr_*` (INCR), `decr_*`
//!   (DECR), `cmd_touch` (TOUCH), less the capture's own (its `mg` probes count as gets).
//! - **Keys**: `lru_crawler metadump all` on a connection of its own, read up to
//!   `--sample-keys` keys and closed; then per key, at most `--sample-rate` a second,
//!   `mg <key> s t`: the value's size and its TTL (`t-1`: none). A server whose crawler is
//!   off or busy is said in a comment; the rates go on.
//! - **The server**: `stats` (version, connections, bytes, items) and `stats settings`
//!   (memory limit, item size cap, evictions, the LRU) as comments.

use super::{CaptureError, Captured, KeySample, Options, calls_between, sample_turn};
use crate::config::RunConfig;
use crate::orchestrate::memcache_ring;
use crate::server_stats::memcache::{Server, ask_all};
use crest_report::server::info::CmdCounters;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Every reply (each line of a metadump) is awaited this long at most.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// The `stats settings` a profile's comments quote.
const SETTINGS: &[&str] = &[
    "maxbytes",
    "item_size_max",
    "evictions",
    "lru_crawler",
    "lru_segmented",
    "num_threads",
    "maxconns",
];

/// The server (the coordinator's memcached connection, TLS as the run's), counting what
/// the capture sends.
struct Mc {
    s: Server,
    own: BTreeMap<String, u64>,
}

impl Mc {
    /// `stats [group]`: name → value (every `STAT` line); a failure in one line.
    async fn stats(&mut self, group: &str) -> Result<BTreeMap<String, String>, CaptureError> {
        let cmd = if group.is_empty() {
            "stats".to_string()
        } else {
            format!("stats {group}")
        };
        *self.own.entry("stats".into()).or_default() += 1;
        let req = format!("{cmd}\r\n");
        let reply = ask_all(
            std::slice::from_mut(&mut self.s),
            req.as_bytes(),
            REPLY_TIMEOUT,
        )
        .await
        .map_err(|f| CaptureError(format!("`{cmd}`: {}", f.words())))?;
        Ok(stat_lines(reply.first().map_or("", String::as_str)))
    }
}

/// A `stats` reply's `STAT name value` lines as name → value.
pub fn stat_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.trim_end_matches('\r').splitn(3, ' ');
            match (w.next(), w.next(), w.next()) {
                (Some("STAT"), Some(k), Some(v)) => Some((k.to_string(), v.to_string())),
                _ => None,
            }
        })
        .collect()
}

/// The counters a second's calls come from, as commands (lower case), from `stats`.
pub fn counters(stats: &BTreeMap<String, String>) -> BTreeMap<String, CmdCounters> {
    let n = |k: &str| {
        stats
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let cas = n("cas_misses") + n("cas_hits") + n("cas_badval");
    [
        ("get", n("cmd_get")),
        ("set", n("cmd_set").saturating_sub(cas)),
        ("del", n("delete_hits") + n("delete_misses")),
        ("incr", n("incr_hits") + n("incr_misses")),
        ("decr", n("decr_hits") + n("decr_misses")),
        ("touch", n("cmd_touch")),
    ]
    .into_iter()
    .map(|(k, calls)| {
        (
            k.to_string(),
            CmdCounters {
                calls,
                ..CmdCounters::default()
            },
        )
    })
    .collect()
}

/// A metadump line's key (`key=<url-escaped>`), unescaped.
pub fn metadump_key(line: &str) -> Option<Vec<u8>> {
    let esc = line.split(' ').find_map(|w| w.strip_prefix("key="))?;
    let b = esc.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// An `mg <key> s t` reply as a sample (None: a miss, or not such a reply).
pub fn sample_of(key_len: usize, reply: &str) -> Option<KeySample> {
    let mut w = reply.split(' ');
    if w.next() != Some("HD") {
        return None;
    }
    let (mut size, mut ttl) = (None, None);
    for f in w {
        if let Some(s) = f.strip_prefix('s') {
            size = s.parse::<u64>().ok();
        } else if let Some(t) = f.strip_prefix('t') {
            ttl = t.parse::<i64>().ok().and_then(|t| u64::try_from(t).ok());
        }
    }
    Some(KeySample {
        kind: "string".into(),
        key_len: key_len as u64,
        size,
        ttl_ms: ttl.map(|t| t * 1000),
        freq: None,
    })
}

/// Up to `want` keys not in `skip` from `lru_crawler metadump all` on a connection of its
/// own to `server`'s address (dropped after), or the server's word when the crawler is off
/// or busy.
async fn keys(
    server: &Server,
    want: u64,
    skip: &std::collections::HashSet<Vec<u8>>,
) -> Result<Vec<Vec<u8>>, String> {
    let mut dump = server.twin();
    dump.open(REPLY_TIMEOUT).await?;
    let mut out = Vec::new();
    let mut refused = None;
    dump.lines(b"lru_crawler metadump all\r\n", REPLY_TIMEOUT, |l| {
        match metadump_key(l) {
            Some(k) if skip.contains(&k) => {}
            Some(k) => out.push(k),
            None if out.is_empty() && skip.is_empty() => {
                refused = Some(l.to_string());
                return false;
            }
            None => {}
        }
        (out.len() as u64) < want
    })
    .await
    .map_err(|f| f.words())?;
    match refused {
        Some(why) => Err(why),
        None => Ok(out),
    }
}

/// Watches `cfg`'s memcached (one server, reached as a run's: TLS too; shown as `target`)
/// as `opts` says; `started` is called
/// once the baseline is taken.
///
/// # Errors
/// [`CaptureError`] when the server cannot be reached or answers `stats` with nonsense.
pub async fn capture(
    cfg: &RunConfig,
    target: &str,
    opts: &Options,
    started: impl FnOnce(),
) -> Result<Captured, CaptureError> {
    let mut ring = memcache_ring(cfg, None)
        .await
        .map_err(|e| CaptureError(format!("--target {target}: {e}")))?;
    let Some(mut s) = ring.pop().filter(|_| ring.is_empty()) else {
        return Err(CaptureError(format!(
            "--target {target}: crest capture watches one server"
        )));
    };
    s.open(REPLY_TIMEOUT)
        .await
        .map_err(|e| CaptureError(format!("--target {target}: {e}")))?;
    let mut m = Mc {
        s,
        own: BTreeMap::new(),
    };
    let first = m
        .stats("")
        .await
        .map_err(|e| CaptureError(format!("--target {target}: stats: {e}")))?;
    let settings = match m.stats("settings").await {
        Ok(s) => Ok(s
            .into_iter()
            .filter(|(k, _)| SETTINGS.contains(&k.as_str()))
            .collect()),
        Err(e) => Err(e.0),
    };
    let mut info: BTreeMap<String, String> = first
        .iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "version" | "curr_connections" | "bytes" | "limit_maxbytes" | "curr_items"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(v) = info.remove("version") {
        info.insert("memcached_version".into(), v);
    }
    let mut out = Captured {
        target: target.to_string(),
        seconds: Vec::new(),
        info,
        keys: (0, 0),
        settings,
        sample: Vec::new(),
        refused: BTreeMap::new(),
        own: BTreeMap::new(),
        watched: Duration::ZERO,
        nodes: (1, 0),
    };
    let mut own_prev = m.own.clone();
    let mut prev = counters(&m.stats("").await?);
    started();
    let start = Instant::now();
    // Keys to probe (popped from the back), and every key taken so far: a dump that
    // found too few (a server still filling) is taken again the next second, skipping
    // those.
    let mut names: Vec<Vec<u8>> = Vec::new();
    let mut seen: std::collections::HashSet<Vec<u8>> = std::collections::HashSet::new();
    let gap = Duration::from_secs(1) / opts.sample_rate.max(1);
    let mut next = start;
    for second in 1..=opts.duration.as_secs().max(1) {
        let tick = start + Duration::from_secs(second);
        let want = opts.sample_keys.saturating_sub(seen.len() as u64);
        if names.is_empty() && want > 0 && !out.refused.contains_key("lru_crawler metadump") {
            *m.own.entry("lru_crawler".into()).or_default() += 1;
            match keys(&m.s, want, &seen).await {
                Ok(k) => {
                    seen.extend(k.iter().cloned());
                    names = k;
                    names.reverse();
                }
                Err(why) => {
                    out.refused.insert("lru_crawler metadump".into(), why);
                }
            }
        }
        while let Some(k) = names.last() {
            let Some(now) = sample_turn(next, tick).await else {
                break;
            };
            let req = [b"mg ", k.as_slice(), b" s t\r\n"].concat();
            let len = k.len();
            names.pop();
            // A meta get counts in cmd_get: the capture's own, left out of the rates.
            *m.own.entry("get".into()).or_default() += 1;
            let reply =
                m.s.ask_line(&req, REPLY_TIMEOUT)
                    .await
                    .map_err(|f| CaptureError(format!("mg: {}", f.words())))?;
            if let Some(s) = sample_of(len, &reply) {
                out.sample.push(s);
            }
            next = (next + gap).max(now);
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(tick)).await;
        let own_now = m.own.clone();
        let now = counters(&m.stats("").await?);
        out.seconds
            .push(calls_between(&prev, &now, &own_prev, &own_now));
        prev = now;
        own_prev = own_now;
    }
    out.watched = start.elapsed();
    let end = m.stats("").await?;
    let items = end
        .get("curr_items")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let with_ttl = out.sample.iter().filter(|s| s.ttl_ms.is_some()).count() as u64;
    let sampled = out.sample.len() as u64;
    out.keys = (items, (items * with_ttl).checked_div(sampled).unwrap_or(0));
    out.own = m.own;
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn stats_become_commands_and_cas_is_not_a_set() {
        let s: BTreeMap<String, String> = [
            ("cmd_get", "100"),
            ("cmd_set", "50"),
            ("cas_hits", "3"),
            ("cas_badval", "2"),
            ("delete_hits", "4"),
            ("delete_misses", "1"),
            ("incr_misses", "7"),
            ("cmd_touch", "9"),
            ("version", "1.6.18"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let c = counters(&s);
        let calls = |k: &str| c[k].calls;
        assert_eq!(
            (
                calls("get"),
                calls("set"),
                calls("del"),
                calls("incr"),
                calls("decr"),
                calls("touch")
            ),
            (100, 45, 5, 7, 0, 9)
        );
    }

    #[test]
    fn metadump_lines_and_meta_replies_read_back() {
        let l = "key=user%3A42%20x exp=-1 la=1700000000 cas=5 fetch=no cls=1 size=70";
        assert_eq!(metadump_key(l).unwrap(), b"user:42 x");
        assert_eq!(metadump_key("key=plain exp=-1").unwrap(), b"plain");
        assert_eq!(metadump_key("BUSY crawler busy"), None);
        assert_eq!(metadump_key("key=%zz exp=1"), None);
        let s = sample_of(7, "HD s512 t-1").unwrap();
        assert_eq!((s.key_len, s.size, s.ttl_ms), (7, Some(512), None));
        let s = sample_of(7, "HD t90 s3").unwrap();
        assert_eq!((s.size, s.ttl_ms), (Some(3), Some(90_000)));
        assert_eq!(sample_of(7, "EN"), None);
    }
}
