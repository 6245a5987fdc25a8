//! `INFO`'s text, in Redis's layout, read from the shared state: the server, clients,
//! memory, stats, commandstats and keyspace sections.
//!
//! The counters it reports are kept in [`crate::stats`] (see there for when a call is
//! counted); the command names `commandstats` lists come with them, so this module reads
//! only [`crate::state`] and [`crate::store`], and the `INFO` command's handler sits above it.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::state::Sink;
use crate::stats::Counts;
use crate::store::Now;

/// What `INFO server` says `redis_version` is: the Redis release whose semantics the sink
/// follows. Clients parse it to pick features, so it stays a plain version; `crest_sink:1`
/// is how a test tells the sink from Redis.
pub(crate) const REDIS_VERSION: &str = "7.0.0";

/// The text of `INFO sections...`: `# Section` headers, `field:value` lines, CRLF line ends,
/// a blank line between sections. No section, `all`, `everything` or `default` means every
/// section; an unknown one adds nothing, as in Redis.
pub(crate) fn render(sink: &Sink, sections: &[Vec<u8>], now: &mut Now<'_>) -> String {
    let all = sections.is_empty()
        || sections.iter().any(|s| {
            [&b"all"[..], b"everything", b"default"]
                .iter()
                .any(|a| s.eq_ignore_ascii_case(a))
        });
    let wanted = |name: &str| {
        all || sections
            .iter()
            .any(|s| s.eq_ignore_ascii_case(name.as_bytes()))
    };
    // Writing to a String cannot fail; the `let _`s below discard `fmt::Result`s.
    let section = |text: &mut String, title: &str| {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let _ = write!(text, "# {title}\r\n");
    };
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut text = String::new();
    // The keyspace section sweeps expired keys; doing it first makes memory and
    // expired_keys in the same reply agree with it.
    let keyspace = wanted("keyspace").then(|| sink.store.sweep(now));
    if wanted("server") {
        section(&mut text, "Server");
        let uptime = now.get().saturating_duration_since(sink.started).as_secs();
        let _ = write!(
            text,
            "redis_version:{REDIS_VERSION}\r\ncrest_sink:1\r\nredis_mode:standalone\r\n\
             process_id:{}\r\nuptime_in_seconds:{uptime}\r\n",
            std::process::id(),
        );
    }
    if wanted("clients") {
        section(&mut text, "Clients");
        let connected = load(&sink.connected_clients);
        let _ = write!(text, "connected_clients:{connected}\r\n");
    }
    if wanted("memory") {
        section(&mut text, "Memory");
        let used: usize = sink.store.all().map(|shard| shard.bytes()).sum();
        let _ = write!(
            text,
            "used_memory:{used}\r\nused_memory_human:{}\r\nmaxmemory:0\r\n",
            human_bytes(used)
        );
    }
    if wanted("stats") {
        section(&mut text, "Stats");
        let connections = load(&sink.total_connections);
        let commands = sink.stats.total_calls();
        let expired: u64 = sink.store.all().map(|shard| shard.expired()).sum();
        let _ = write!(
            text,
            "total_connections_received:{connections}\r\n\
             total_commands_processed:{commands}\r\n\
             expired_keys:{expired}\r\n\
             keyspace_hits:{}\r\nkeyspace_misses:{}\r\n",
            sink.stats.keyspace_hits(),
            sink.stats.keyspace_misses(),
        );
    }
    if wanted("commandstats") {
        section(&mut text, "Commandstats");
        for (name, counts) in sink.stats.commands() {
            let Counts {
                calls,
                rejected,
                failed,
            } = counts;
            // Redis lists only commands that were called, rejected or failed.
            if calls + rejected + failed == 0 {
                continue;
            }
            let _ = write!(
                text,
                "cmdstat_{name}:calls={calls},usec=0,usec_per_call=0.00,\
                 rejected_calls={rejected},failed_calls={failed}\r\n",
            );
        }
    }
    if let Some((keys, expiring)) = keyspace {
        section(&mut text, "Keyspace");
        if keys > 0 {
            let _ = write!(text, "db0:keys={keys},expires={expiring},avg_ttl=0\r\n");
        }
    }
    text
}

/// Bytes as Redis's `used_memory_human` writes them: `512B`, `1.50K`, `3.00M`.
fn human_bytes(bytes: usize) -> String {
    const UNITS: [(f64, &str); 3] = [
        (1024.0 * 1024.0 * 1024.0, "G"),
        (1024.0 * 1024.0, "M"),
        (1024.0, "K"),
    ];
    // Precision lost converting to f64 is far below the two decimals shown.
    #[allow(clippy::cast_precision_loss)]
    let value = bytes as f64;
    for (size, unit) in UNITS {
        if value >= size {
            return format!("{:.2}{unit}", value / size);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::test_support::{Harness, Server, info_field};
    use crest_resp::Frame;
    use std::time::Duration;

    #[test]
    fn human_bytes_like_redis() {
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.00M");
        assert_eq!(human_bytes(5 * 1024 * 1024 * 1024), "5.00G");
    }

    #[tokio::test]
    async fn info_commandstats_counts_calls() {
        let server = Server::start().await;
        let mut client = server.client().await;
        for i in 0..3 {
            client.call(&["SET", &format!("k{i}"), "v"]).await;
        }
        for _ in 0..5 {
            client.call(&["GET", "k0"]).await;
        }
        client.call(&["GET"]).await; // rejected: wrong arity
        client.call(&["INCR", "k0"]).await; // failed: not an integer
        client.call(&["NOSUCHCOMMAND"]).await; // not listed, as in Redis

        let info = client.info("commandstats").await;
        assert!(info.starts_with("# Commandstats\r\n"), "{info}");
        assert_eq!(
            info_field(&info, "cmdstat_get"),
            Some("calls=5,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0")
        );
        assert_eq!(
            info_field(&info, "cmdstat_set"),
            Some("calls=3,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0")
        );
        assert_eq!(
            info_field(&info, "cmdstat_incr"),
            Some("calls=1,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=1")
        );
        // Like Redis, an INFO does not count itself; the next one sees it.
        assert_eq!(info_field(&info, "cmdstat_info"), None);
        assert!(!info.contains("nosuchcommand"), "{info}");

        // Counts are server-wide: another connection sees them, and its own.
        let mut other = server.client().await;
        other.call(&["GET", "k1"]).await;
        let info = other.info("commandstats").await;
        assert_eq!(
            info_field(&info, "cmdstat_get").and_then(|v| v.split(',').next()),
            Some("calls=6")
        );
        assert_eq!(
            info_field(&info, "cmdstat_info").and_then(|v| v.split(',').next()),
            Some("calls=1")
        );
    }

    #[tokio::test]
    async fn info_has_server_and_keyspace_sections() {
        let server = Server::start().await;
        let mut client = server.client().await;
        client.call(&["SET", "a", "1"]).await;
        client.call(&["SET", "b", "2", "EX", "100"]).await;
        let info = client.info("everything").await;
        for header in [
            "# Server\r\n",
            "# Clients\r\n",
            "# Memory\r\n",
            "# Stats\r\n",
            "# Commandstats\r\n",
            "# Keyspace\r\n",
        ] {
            assert!(info.contains(header), "{header} missing from {info}");
        }
        assert_eq!(info_field(&info, "redis_version"), Some("7.0.0"));
        assert_eq!(info_field(&info, "crest_sink"), Some("1"));
        assert_eq!(info_field(&info, "connected_clients"), Some("1"));
        assert_eq!(info_field(&info, "db0"), Some("keys=2,expires=1,avg_ttl=0"));
        assert!(
            info.contains("\r\n\r\n# Keyspace\r\n"),
            "sections are separated by a blank line"
        );

        let server_only = client.info("server").await;
        assert!(server_only.starts_with("# Server\r\n") && !server_only.contains("# Keyspace"));
        // No section named: everything, commandstats included.
        match client.call(&["INFO"]).await {
            Frame::Bulk(text) => assert!(String::from_utf8_lossy(&text).contains("# Commandstats")),
            other => panic!("{other:?}"),
        }
    }

    fn field(h: &mut Harness, section: &str, name: &str) -> u64 {
        let Frame::Bulk(text) = h.run(&["INFO", section]) else {
            panic!("INFO is a bulk string");
        };
        let text = String::from_utf8(text).unwrap();
        info_field(&text, name)
            .unwrap_or_else(|| panic!("{name} missing from {text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn stats_count_hits_misses_and_expired_keys() {
        let mut h = Harness::new();
        h.run(&["SET", "a", "1"]);
        h.run(&["SET", "t", "1", "PX", "10"]);
        h.run(&["GET", "a"]);
        h.run(&["MGET", "a", "nope"]);
        h.run(&["HGET", "nope", "f"]);
        h.advance(Duration::from_millis(10));
        h.run(&["GET", "t"]);
        assert_eq!(field(&mut h, "stats", "keyspace_hits"), 2);
        assert_eq!(field(&mut h, "stats", "keyspace_misses"), 3);
        assert_eq!(field(&mut h, "stats", "expired_keys"), 1);
        // Six commands, and the three INFOs before this one (an INFO does not count itself).
        assert_eq!(field(&mut h, "stats", "total_commands_processed"), 9);
    }

    #[test]
    fn used_memory_grows_with_data_and_returns_to_zero() {
        let mut h = Harness::new();
        assert_eq!(field(&mut h, "memory", "used_memory"), 0);
        h.run(&["SET", "k", &"x".repeat(10_000)]);
        let one = field(&mut h, "memory", "used_memory");
        assert!((10_000..10_200).contains(&one), "{one}");
        for i in 0..100 {
            h.run(&["HSET", "h", &format!("f{i}"), "value"]);
            h.run(&["RPUSH", "l", "item"]);
            h.run(&["SADD", "s", &format!("m{i}")]);
            h.run(&["ZADD", "z", &i.to_string(), &format!("m{i}")]);
        }
        let more = field(&mut h, "memory", "used_memory");
        assert!(more > one + 4 * 100 * 5, "{more}");
        assert_eq!(
            more as usize,
            h.sink.store.all().map(|s| s.recount()).sum::<usize>(),
            "the incremental estimate equals a recount"
        );
        h.run(&["FLUSHALL"]);
        assert_eq!(field(&mut h, "memory", "used_memory"), 0);
    }
}
