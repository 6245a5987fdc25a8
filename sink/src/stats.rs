//! The counters `INFO` reports: per command, calls, rejections and failures
//! (`commandstats`); keyspace hits and misses.
//!
//! Counting model: each connection counts into its own [`LocalStats`] and adds them to the
//! shared [`Stats`] once per read batch, before that batch's replies are written. So a
//! client never sees a reply whose call is not counted yet, and connections do not contend
//! on one atomic per request.
//!
//! A leaf: commands are known here only by their index in the list of names [`Stats::new`]
//! is given (the dispatch table's), so the counters sit below the table that bumps them and
//! the `INFO` text that reads them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Shared counters of one command, as `INFO commandstats` reports them.
#[derive(Default)]
struct CommandStats {
    /// Executed, successfully or not.
    calls: AtomicU64,
    /// Refused before running (wrong number of arguments).
    rejected: AtomicU64,
    /// Ran and replied with an error.
    failed: AtomicU64,
}

/// One command's counts, read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Executed, successfully or not.
    pub(crate) calls: u64,
    /// Refused before running (wrong number of arguments).
    pub(crate) rejected: u64,
    /// Ran and replied with an error.
    pub(crate) failed: u64,
}

/// Counters every connection adds to.
pub(crate) struct Stats {
    /// The commands counted; a command's counters are at its index here.
    names: &'static [&'static str],
    commands: Box<[CommandStats]>,
    keyspace_hits: AtomicU64,
    keyspace_misses: AtomicU64,
}

impl Stats {
    /// All zero, one set of counters per command in `names`, at the same index.
    pub(crate) fn new(names: &'static [&'static str]) -> Self {
        Stats {
            names,
            commands: names.iter().map(|_| CommandStats::default()).collect(),
            keyspace_hits: AtomicU64::new(0),
            keyspace_misses: AtomicU64::new(0),
        }
    }

    /// A connection's counts, all zero, indexed as these.
    pub(crate) fn local(&self) -> LocalStats {
        let zeros = || vec![0; self.names.len()].into_boxed_slice();
        LocalStats {
            calls: zeros(),
            rejected: zeros(),
            failed: zeros(),
            keyspace_hits: 0,
            keyspace_misses: 0,
        }
    }

    /// Every command's name and counts, in the order of the names given to [`Stats::new`].
    pub(crate) fn commands(&self) -> impl Iterator<Item = (&'static str, Counts)> + '_ {
        self.names
            .iter()
            .zip(&self.commands)
            .map(|(&name, stats)| (name, stats.load()))
    }

    /// Calls of every command together (`total_commands_processed`).
    pub(crate) fn total_calls(&self) -> u64 {
        self.commands.iter().map(|s| load(&s.calls)).sum()
    }

    /// Read lookups that found their key.
    pub(crate) fn keyspace_hits(&self) -> u64 {
        load(&self.keyspace_hits)
    }

    /// Read lookups that did not.
    pub(crate) fn keyspace_misses(&self) -> u64 {
        load(&self.keyspace_misses)
    }

    /// (calls, rejected, failed) of the command at `index` in the names.
    #[cfg(test)]
    pub(crate) fn of(&self, index: usize) -> (u64, u64, u64) {
        let counts = self.commands[index].load();
        (counts.calls, counts.rejected, counts.failed)
    }
}

impl CommandStats {
    fn load(&self) -> Counts {
        Counts {
            calls: load(&self.calls),
            rejected: load(&self.rejected),
            failed: load(&self.failed),
        }
    }
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// A connection's counts not yet added to the shared [`Stats`]; made by [`Stats::local`].
pub(crate) struct LocalStats {
    /// Calls per command, by index.
    pub(crate) calls: Box<[u64]>,
    /// Calls refused for their argument count.
    pub(crate) rejected: Box<[u64]>,
    /// Calls that replied with an error.
    pub(crate) failed: Box<[u64]>,
    keyspace_hits: u64,
    keyspace_misses: u64,
}

impl LocalStats {
    /// Counts one read lookup of a key, as Redis's `keyspace_hits`/`keyspace_misses` do.
    pub(crate) fn lookup(&mut self, found: bool) {
        if found {
            self.keyspace_hits += 1;
        } else {
            self.keyspace_misses += 1;
        }
    }

    /// Adds these counts to `shared` and zeroes them.
    pub(crate) fn flush(&mut self, shared: &Stats) {
        for (i, stats) in shared.commands.iter().enumerate() {
            for (local, total) in [
                (&mut self.calls[i], &stats.calls),
                (&mut self.rejected[i], &stats.rejected),
                (&mut self.failed[i], &stats.failed),
            ] {
                if *local != 0 {
                    total.fetch_add(std::mem::take(local), Ordering::Relaxed);
                }
            }
        }
        for (local, total) in [
            (&mut self.keyspace_hits, &shared.keyspace_hits),
            (&mut self.keyspace_misses, &shared.keyspace_misses),
        ] {
            if *local != 0 {
                total.fetch_add(std::mem::take(local), Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn local_counts_reach_the_shared_ones_on_flush_only() {
        static NAMES: [&str; 2] = ["get", "set"];
        let shared = Stats::new(&NAMES);
        let mut local = shared.local();
        local.calls[1] += 2;
        local.failed[1] += 1;
        local.rejected[0] += 1;
        local.lookup(true);
        local.lookup(false);
        local.lookup(false);
        assert_eq!(shared.total_calls(), 0, "nothing shared before a flush");
        local.flush(&shared);
        local.flush(&shared); // zeroed: a second flush adds nothing
        assert_eq!(shared.of(0), (0, 1, 0));
        assert_eq!(shared.of(1), (2, 0, 1));
        assert_eq!(shared.total_calls(), 2);
        assert_eq!((shared.keyspace_hits(), shared.keyspace_misses()), (1, 2));
        let listed: Vec<_> = shared.commands().map(|(name, c)| (name, c.calls)).collect();
        assert_eq!(listed, [("get", 0), ("set", 2)]);
    }
}
