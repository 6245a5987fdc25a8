//! One `INFO` reply, parsed: the plain `field:value` lines, `cmdstat_<command>` counters,
//! `errorstat_<KIND>` counts and `db<N>` keyspace lines. Nothing is interpreted here beyond
//! splitting; which field is a counter and which a gauge is [`super::series`]'s business.
//! A memcached `stats` reply comes to the same [`Info`] through [`super::memcache`].

use std::collections::BTreeMap;

/// One command's `cmdstat_<name>:calls=…,usec=…,rejected_calls=…,failed_calls=…` line.
/// Redis 6 has no `rejected_calls`/`failed_calls` (read as 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CmdCounters {
    /// Calls that ran (successfully or not).
    pub calls: u64,
    /// Server time spent in them, µs.
    pub usec: u64,
    /// Calls refused before they ran (arity, ACL, OOM...): not in `calls`.
    pub rejected_calls: u64,
    /// Calls that ran and failed: in `calls`.
    pub failed_calls: u64,
}

/// A keyspace line, `db0:keys=…,expires=…,avg_ttl=…`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DbKeys {
    /// Keys in the database.
    pub keys: u64,
    /// Of them, keys with a deadline.
    pub expires: u64,
}

/// A parsed `INFO` reply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    /// Every `field:value` line of the plain sections (server, clients, memory, stats,
    /// cpu...), the value as the server wrote it.
    pub fields: BTreeMap<String, String>,
    /// `cmdstat_<name>` by lower-case name as the server spells it (`get`, `config|get`).
    pub commands: BTreeMap<String, CmdCounters>,
    /// `errorstat_<KIND>:count=N` by kind.
    pub errors: BTreeMap<String, u64>,
    /// `db<N>` lines by database name (`db0`).
    pub dbs: BTreeMap<String, DbKeys>,
    /// `latency_percentiles_usec_<name>:p50=…,p99=…,p99.9=…` (INFO latencystats, Redis
    /// 7+ and Valkey) by lower-case command name: the server's own latency percentiles,
    /// µs, since its stats were last reset.
    pub latency: BTreeMap<String, BTreeMap<String, f64>>,
    /// memcached's hit and miss counters (`get_hits`, `delete_misses`, `cas_badval`...),
    /// which its truth check reads per family ([`super::memcache`]); empty for a
    /// Redis-protocol server.
    pub counters: BTreeMap<String, u64>,
}

/// `k=v,k=v` into pairs (values trimmed).
fn pairs(s: &str) -> impl Iterator<Item = (&str, &str)> {
    s.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
}

fn num(v: &str) -> u64 {
    v.parse().unwrap_or(0)
}

impl Info {
    /// Parses the text of an `INFO` reply (CRLF or LF line ends; `# Section` headers and
    /// blank lines skipped; lines that are not `field:value` ignored).
    pub fn parse(text: &str) -> Self {
        let mut info = Info::default();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            if let Some(name) = key.strip_prefix("cmdstat_") {
                let mut c = CmdCounters::default();
                for (k, v) in pairs(value) {
                    match k {
                        "calls" => c.calls = num(v),
                        "usec" => c.usec = num(v),
                        "rejected_calls" => c.rejected_calls = num(v),
                        "failed_calls" => c.failed_calls = num(v),
                        _ => {}
                    }
                }
                info.commands.insert(name.to_ascii_lowercase(), c);
            } else if let Some(name) = key.strip_prefix("latency_percentiles_usec_") {
                let p: BTreeMap<String, f64> = pairs(value)
                    .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
                    .filter(|(_, v): &(String, f64)| v.is_finite())
                    .take(8)
                    .collect();
                info.latency.insert(name.to_ascii_lowercase(), p);
            } else if let Some(kind) = key.strip_prefix("errorstat_") {
                let n = pairs(value)
                    .find(|(k, _)| *k == "count")
                    .map_or(0, |p| num(p.1));
                info.errors.insert(kind.to_string(), n);
            } else if key.len() > 2
                && key.starts_with("db")
                && key[2..].bytes().all(|b| b.is_ascii_digit())
                && value.contains("keys=")
            {
                let mut d = DbKeys::default();
                for (k, v) in pairs(value) {
                    match k {
                        "keys" => d.keys = num(v),
                        "expires" => d.expires = num(v),
                        _ => {}
                    }
                }
                info.dbs.insert(key.to_string(), d);
            } else {
                info.fields.insert(key.to_string(), value.to_string());
            }
        }
        info
    }

    /// A whole-number field (`used_memory`), None when absent or not a number.
    pub fn uint(&self, field: &str) -> Option<u64> {
        self.fields.get(field)?.trim().parse().ok()
    }

    /// A decimal field (`mem_fragmentation_ratio`, `used_cpu_user`), None when absent.
    pub fn float(&self, field: &str) -> Option<f64> {
        self.fields
            .get(field)?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
    }

    /// A text field (`redis_version`), None when absent.
    pub fn text(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }

    /// `used_cpu_user + used_cpu_sys` in whole µs (the server prints seconds with six
    /// decimals), None when the server has no cpu section (the built-in target).
    pub fn cpu_us(&self) -> Option<u64> {
        let user = self.float("used_cpu_user")?;
        let sys = self.float("used_cpu_sys")?;
        Some(((user + sys) * 1e6).round() as u64)
    }

    /// Keys over every database.
    pub fn keys(&self) -> u64 {
        self.dbs.values().map(|d| d.keys).sum()
    }
}

/// Whole-number fields a [`Snap`] keeps.
const UINTS: &[&str] = &[
    "total_net_input_bytes",
    "total_net_output_bytes",
    "evicted_keys",
    "expired_keys",
    "keyspace_hits",
    "keyspace_misses",
    "used_memory",
    "used_memory_rss",
    "connected_clients",
    "total_connections_received",
    "io_threads_active",
    "maxmemory",
];
/// Text fields a [`Snap`] keeps.
const TEXTS: &[&str] = &[
    "redis_version",
    "valkey_version",
    "crest_sink",
    "mem_allocator",
    "run_id",
    "memcached_version",
];
/// The one decimal gauge a [`Snap`] keeps.
const FRAG: &str = "mem_fragmentation_ratio";

/// What a sample keeps of an [`Info`]: the fields the series reads, as numbers (a run
/// keeps one sample per interval; a whole `INFO` is ~170 text fields, several kB), and
/// the command, error and database lines. The same accessors as [`Info`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snap {
    uints: [Option<u64>; UINTS.len()],
    texts: [Option<Box<str>>; TEXTS.len()],
    frag: Option<f64>,
    cpu_us: Option<u64>,
    /// As [`Info::commands`].
    pub commands: BTreeMap<String, CmdCounters>,
    /// As [`Info::errors`].
    pub errors: BTreeMap<String, u64>,
    /// As [`Info::dbs`].
    pub dbs: BTreeMap<String, DbKeys>,
    /// As [`Info::latency`].
    pub latency: BTreeMap<String, BTreeMap<String, f64>>,
    /// As [`Info::counters`].
    pub counters: BTreeMap<String, u64>,
}

impl From<Info> for Snap {
    fn from(info: Info) -> Self {
        Snap {
            uints: std::array::from_fn(|i| info.uint(UINTS[i])),
            texts: std::array::from_fn(|i| info.text(TEXTS[i]).map(Box::from)),
            frag: info.float(FRAG),
            cpu_us: info.cpu_us(),
            commands: info.commands,
            errors: info.errors,
            dbs: info.dbs,
            latency: info.latency,
            counters: info.counters,
        }
    }
}

impl Snap {
    /// A whole-number field it keeps (None for others, or when absent).
    pub fn uint(&self, field: &str) -> Option<u64> {
        UINTS
            .iter()
            .position(|f| *f == field)
            .and_then(|i| self.uints[i])
    }

    /// `mem_fragmentation_ratio` (None for other fields, or when absent).
    pub fn float(&self, field: &str) -> Option<f64> {
        (field == FRAG).then_some(self.frag).flatten()
    }

    /// A text field it keeps (None for others, or when absent).
    pub fn text(&self, field: &str) -> Option<&str> {
        TEXTS
            .iter()
            .position(|f| *f == field)
            .and_then(|i| self.texts[i].as_deref())
    }

    /// As [`Info::cpu_us`].
    pub fn cpu_us(&self) -> Option<u64> {
        self.cpu_us
    }

    /// As [`Info::keys`].
    pub fn keys(&self) -> u64 {
        self.dbs.values().map(|d| d.keys).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `INFO server stats memory cpu clients commandstats errorstats keyspace` of
    /// redis-server 7.0.15 after SET k v, GET k, GET nokey, INCR k (which fails).
    const REDIS: &str = include_str!("testdata/redis-7.0.txt");
    /// The same of valkey-server 8.1.8 (the PyPI wheel).
    const VALKEY: &str = include_str!("testdata/valkey-8.1.txt");

    #[test]
    fn redis_7_info_reads_every_section() {
        let i = Info::parse(REDIS);
        assert_eq!(i.text("redis_version"), Some("7.0.15"));
        assert_eq!(i.text("valkey_version"), None);
        assert_eq!(i.text("mem_allocator"), Some("jemalloc-5.3.0"));
        assert_eq!(i.uint("io_threads_active"), Some(0));
        assert_eq!(i.uint("connected_clients"), Some(1));
        assert_eq!(i.uint("used_memory"), Some(991_232));
        assert_eq!(i.uint("used_memory_rss"), Some(6_782_976));
        assert_eq!(i.float("mem_fragmentation_ratio"), Some(7.74));
        assert_eq!(i.uint("total_net_input_bytes"), Some(213));
        assert_eq!(i.uint("keyspace_hits"), Some(1));
        assert_eq!(i.uint("keyspace_misses"), Some(1));
        assert_eq!(i.uint("evicted_keys"), Some(0));
        assert!(i.cpu_us().is_some());
        assert_eq!(
            i.commands["set"],
            CmdCounters {
                calls: 1,
                usec: 10,
                rejected_calls: 0,
                failed_calls: 0
            }
        );
        assert_eq!(i.commands["get"].calls, 2);
        assert_eq!(i.commands["incr"].failed_calls, 1);
        assert_eq!(i.errors["ERR"], 1);
        assert_eq!(
            i.dbs["db0"],
            DbKeys {
                keys: 1,
                expires: 0
            }
        );
        assert_eq!(i.keys(), 1);
        // No section header or cmdstat line leaks into the plain fields.
        assert!(i.fields.keys().all(|k| !k.starts_with("cmdstat_")
            && !k.starts_with("errorstat_")
            && !k.starts_with('#')
            && k != "db0"));
    }

    #[test]
    fn valkey_8_info_reads_every_section() {
        let i = Info::parse(VALKEY);
        assert_eq!(i.text("valkey_version"), Some("8.1.8"));
        // Valkey still says which Redis it is compatible with.
        assert_eq!(i.text("redis_version"), Some("7.2.4"));
        assert_eq!(i.text("mem_allocator"), Some("libc"));
        assert_eq!(i.uint("io_threads_active"), Some(0));
        assert_eq!(i.commands["set"].calls, 1);
        assert_eq!(i.commands["get"].calls, 2);
        assert_eq!(i.commands["incr"].failed_calls, 1);
        assert_eq!(i.errors["ERR"], 1);
        assert_eq!(i.keys(), 1);
        let cpu = i.float("used_cpu_user").unwrap() + i.float("used_cpu_sys").unwrap();
        assert_eq!(i.cpu_us(), Some((cpu * 1e6).round() as u64));
    }

    /// A sample keeps what the series reads, the same values.
    #[test]
    fn a_snap_keeps_what_the_series_reads() {
        for text in [REDIS, VALKEY] {
            let i = Info::parse(text);
            let s = Snap::from(i.clone());
            for f in UINTS {
                assert_eq!(s.uint(f), i.uint(f), "{f}");
            }
            for f in TEXTS {
                assert_eq!(s.text(f), i.text(f), "{f}");
            }
            assert_eq!(s.float(FRAG), i.float(FRAG));
            assert_eq!(s.cpu_us(), i.cpu_us());
            assert_eq!(s.keys(), i.keys());
            assert_eq!(s.commands, i.commands);
            assert!(s.text("run_id").is_some_and(|r| r.len() == 40));
            assert_eq!(s.uint("uptime_in_seconds"), None, "not kept");
        }
    }

    #[test]
    fn subcommands_old_servers_and_junk() {
        let i = Info::parse(
            "# Commandstats\r\ncmdstat_config|get:calls=2,usec=20,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\ncmdstat_GET:calls=7,usec=3,usec_per_call=0.43\r\nno colon here\r\n\r\n# Keyspace\r\ndb12:keys=5,expires=2,avg_ttl=0\r\n",
        );
        assert_eq!(i.commands["config|get"].calls, 2);
        // Redis 6: no rejected_calls / failed_calls.
        assert_eq!(
            i.commands["get"],
            CmdCounters {
                calls: 7,
                usec: 3,
                ..CmdCounters::default()
            }
        );
        assert_eq!(
            i.dbs["db12"],
            DbKeys {
                keys: 5,
                expires: 2
            }
        );
        assert!(i.fields.is_empty(), "{:?}", i.fields);
        assert_eq!(i.cpu_us(), None);
    }
}
