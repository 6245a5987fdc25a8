//! The one table of defaults: what a setting is when neither a flag nor the profile file
//! gives it. The code reads the constants; `crest run --help` shows [`SHOWN`] (added to each
//! flag's help by [`annotate`]); a unit test checks that [`SHOWN`] spells the constants and
//! that the README's flag table says the same, so the three cannot drift apart.

use std::time::Duration;

/// Requests per second of a class with no `--rate`, `--stages` or profile.
pub const RATE_RPS: f64 = 1000.0;
/// How long a run with no `--duration` (and no profile length) sends.
pub const DURATION: Duration = Duration::from_secs(10);
/// SET:GET weights.
pub const RATIO: (u32, u32) = (1, 10);
/// Keyspace size.
pub const KEYS: u64 = 100_000;
/// Key name prefix.
pub const KEY_PREFIX: &str = "crest:";
/// Value size in bytes.
pub const VALUE_SIZE: u64 = 32;
/// Connections across the whole cluster, per class.
pub const CONNECTIONS: u32 = 50;
/// Requests in flight per connection.
pub const PIPELINE: u32 = 1;
/// Keys or members per batched command.
pub const BATCH: u32 = 1;
/// Members or fields per key (hashes, sets, sorted sets).
pub const MEMBERS: u64 = 1000;
/// LRANGE / ZRANGE / ZRANGEBYSCORE length.
pub const RANGE: u32 = 10;
/// Per-request timeout.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Wait for replies after the schedule.
pub const DRAIN: Duration = Duration::from_secs(2);
/// Unmeasured lead-in.
pub const WARMUP: Duration = Duration::ZERO;
/// Timeline resolution.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Address remote workers dial.
pub const LISTEN: ([u8; 4], u16) = ([0, 0, 0, 0], 7600);
/// How long to wait for remote workers.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(60);
/// In-process workers when `--workers` is not given.
pub const LOCAL_WORKERS: u32 = 1;
/// Requests per shard and class allowed to wait for a free connection.
pub const BACKLOG_LIMIT: u64 = 1_000_000;

/// The default budget: half this machine's memory (`MemTotal` in `/proc/meminfo`), or
/// 4 GiB where that cannot be read.
pub fn memory_budget() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(4 << 30, |kb| kb * 1024 / 2)
}

/// Each default as `crest run --help` and the README show it: (flag id, shown value).
pub const SHOWN: &[(&str, &str)] = &[
    ("rate", "1000"),
    ("duration", "10s"),
    ("ratio", "1:10"),
    ("keys", "100000"),
    ("key_prefix", "crest:"),
    ("value_size", "32"),
    ("connections", "50"),
    ("pipeline", "1"),
    ("batch", "1"),
    ("timeout", "5s"),
    ("drain", "2s"),
    ("warmup", "0"),
    ("interval", "1s"),
    ("listen", "0.0.0.0:7600"),
    ("wait_timeout", "60s"),
    ("local_workers", "1"),
    ("backlog_limit", "1000000"),
];

/// Adds `[default: …]` from [`SHOWN`] to the help of each of `cmd`'s flags that has one.
pub fn annotate(mut cmd: clap::Command) -> clap::Command {
    for (id, shown) in SHOWN {
        // A command that flattens only some of `crest run`'s groups (suite) lacks the rest.
        if !cmd.get_arguments().any(|a| a.get_id() == *id) {
            continue;
        }
        cmd = cmd.mut_arg(*id, |a| {
            let help = a.get_help().map(ToString::to_string).unwrap_or_default();
            a.help(format!("{help} [default: {shown}]"))
        });
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RateArg, parse_duration, parse_rate, parse_ratio, parse_size};

    fn shown(id: &str) -> &'static str {
        SHOWN
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| *s)
            .unwrap_or_else(|| panic!("{id} is not in SHOWN"))
    }

    /// What help and README show is what the code uses.
    #[test]
    fn shown_defaults_spell_the_constants() {
        assert_eq!(parse_rate(shown("rate")).unwrap(), RateArg::Rps(RATE_RPS));
        assert_eq!(parse_duration(shown("duration")).unwrap(), DURATION);
        assert_eq!(parse_ratio(shown("ratio")).unwrap(), RATIO);
        assert_eq!(shown("keys").parse::<u64>().unwrap(), KEYS);
        assert_eq!(shown("key_prefix"), KEY_PREFIX);
        assert_eq!(parse_size(shown("value_size")).unwrap(), VALUE_SIZE);
        assert_eq!(shown("connections").parse::<u32>().unwrap(), CONNECTIONS);
        assert_eq!(shown("pipeline").parse::<u32>().unwrap(), PIPELINE);
        assert_eq!(shown("batch").parse::<u32>().unwrap(), BATCH);
        assert_eq!(parse_duration(shown("timeout")).unwrap(), TIMEOUT);
        assert_eq!(parse_duration(shown("drain")).unwrap(), DRAIN);
        assert_eq!(parse_duration(shown("warmup")).unwrap(), WARMUP);
        assert_eq!(parse_duration(shown("interval")).unwrap(), INTERVAL);
        assert_eq!(
            shown("listen").parse::<std::net::SocketAddr>().unwrap(),
            std::net::SocketAddr::from(LISTEN)
        );
        assert_eq!(parse_duration(shown("wait_timeout")).unwrap(), WAIT_TIMEOUT);
        assert_eq!(
            shown("local_workers").parse::<u32>().unwrap(),
            LOCAL_WORKERS
        );
        assert_eq!(
            shown("backlog_limit").parse::<u64>().unwrap(),
            BACKLOG_LIMIT
        );
    }

    /// The README's flag table gives the same default for every flag it lists.
    #[test]
    fn readme_agrees_with_the_table() {
        // `\|` inside a cell is an escaped bar, not a column break.
        let readme = include_str!("../../README.md").replace("\\|", "/");
        for (id, shown) in SHOWN {
            let flag = format!("`--{}", id.replace('_', "-"));
            // `--rate` must not match `--rate-scale`: the flag ends at a space or backtick.
            let names_flag = |cell: &str| {
                cell.match_indices(&flag)
                    .any(|(i, _)| matches!(cell[i + flag.len()..].chars().next(), Some(' ' | '`')))
            };
            let Some(row) = readme
                .lines()
                .find(|l| l.starts_with('|') && l.split('|').nth(1).is_some_and(names_flag))
            else {
                continue; // not every flag has a README row
            };
            let cell = row.split('|').nth(2).unwrap_or_default();
            assert!(
                cell.contains(shown),
                "README row for {flag} says {cell:?}; the default is {shown}"
            );
        }
    }

    /// Every default shown is attached to a real `crest run` flag.
    #[test]
    fn every_shown_default_names_a_flag() {
        use clap::{Args, Command};
        let cmd = annotate(crate::cli::RunArgs::augment_args(Command::new("run")));
        for (id, shown) in SHOWN {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == id)
                .unwrap_or_else(|| panic!("{id} is not a flag"));
            let help = arg.get_help().unwrap().to_string();
            assert!(
                help.ends_with(&format!("[default: {shown}]")),
                "{id}: {help}"
            );
        }
    }
}
