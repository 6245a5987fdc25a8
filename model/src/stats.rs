//! Per-command counts and histograms. A shard owns one [`Stats`] per interval and one for
//! the whole run; they fold with `+=`, so shards, workers and intervals merge the same way.

use crate::hist::{self, Hist};
use std::ops::AddAssign;

/// Counts of one kind of failure.
pub type ErrorCounts = Vec<(String, u64)>;

/// Adds `n` to the count of `kind`, inserting it when new (kinds are few; a scan is cheap).
pub fn add_error(errors: &mut ErrorCounts, kind: &str, n: u64) {
    if n == 0 {
        return;
    }
    match errors.iter_mut().find(|(k, _)| k == kind) {
        Some((_, c)) => *c += n,
        None => errors.push((kind.to_string(), n)),
    }
}

/// Like [`add_error`] for a kind given as raw bytes from a server reply.
pub fn add_error_bytes(errors: &mut ErrorCounts, kind: &[u8]) {
    match errors.iter_mut().find(|(k, _)| k.as_bytes() == kind) {
        Some((_, c)) => *c += 1,
        None => errors.push((String::from_utf8_lossy(kind).into_owned(), 1)),
    }
}

/// Results of one command over some span.
#[derive(Debug, Clone, PartialEq)]
pub struct CmdStats {
    /// Requests whose intended send time came.
    pub scheduled: u64,
    /// Requests written to a connection.
    pub sent: u64,
    /// Requests answered with a non-error reply.
    pub completed: u64,
    /// Requests that found every connection full and waited in the backlog (their wait
    /// is in `schedule_lag` and `latency`; it is the server's slowness, not the pacer's).
    pub backlogged: u64,
    /// Failed requests by kind: server error replies by their first word (`ERR`,
    /// `WRONGTYPE`...), `timeout`, `disconnected`, `backlog_full`.
    pub errors: ErrorCounts,
    /// Completion − intended send time, ns.
    pub latency: Hist,
    /// Completion − actual write, ns.
    pub service_time: Hist,
    /// Actual write − intended send time, ns.
    pub schedule_lag: Hist,
}

impl Default for CmdStats {
    fn default() -> Self {
        Self {
            scheduled: 0,
            sent: 0,
            completed: 0,
            backlogged: 0,
            errors: Vec::new(),
            latency: hist::new_hist(),
            service_time: hist::new_hist(),
            schedule_lag: hist::new_hist(),
        }
    }
}

impl CmdStats {
    /// Sum of all error counts.
    pub fn error_total(&self) -> u64 {
        self.errors.iter().map(|e| e.1).sum()
    }
}

impl AddAssign<&CmdStats> for CmdStats {
    fn add_assign(&mut self, o: &CmdStats) {
        self.scheduled += o.scheduled;
        self.sent += o.sent;
        self.completed += o.completed;
        self.backlogged += o.backlogged;
        for (k, n) in &o.errors {
            add_error(&mut self.errors, k, *n);
        }
        // Same constructor everywhere, so the bounds always match.
        hist::add(&mut self.latency, &o.latency);
        hist::add(&mut self.service_time, &o.service_time);
        hist::add(&mut self.schedule_lag, &o.schedule_lag);
    }
}

/// Results of every command of a workload, indexed like the workload's commands.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stats {
    /// One entry per command, in mix order.
    pub cmds: Vec<CmdStats>,
}

impl Stats {
    /// Empty results for `n` commands.
    pub fn new(n: usize) -> Self {
        Self {
            cmds: (0..n).map(|_| CmdStats::default()).collect(),
        }
    }
}

impl AddAssign<&Stats> for Stats {
    fn add_assign(&mut self, o: &Stats) {
        if self.cmds.len() < o.cmds.len() {
            self.cmds.resize_with(o.cmds.len(), CmdStats::default);
        }
        for (a, b) in self.cmds.iter_mut().zip(&o.cmds) {
            *a += b;
        }
    }
}
