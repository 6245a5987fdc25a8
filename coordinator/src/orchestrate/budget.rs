//! The memory a plan needs, estimated before any load starts, and the refusal of a plan
//! whose estimate is over `--memory-budget` (one line naming the estimate and its parts).
//!
//! The estimate is made of what grows with the plan, each part from the structure that
//! holds it (the figures in brackets were measured in debug builds on Linux):
//! - a process: [`PROCESS`] (the binary, tokio, the gRPC stack: 15–20 MB);
//! - a shard: [`SHARD`] (its loop, buffers and thread) and a reply buffer and a value of
//!   the class's largest size;
//! - a connection: [`CONN`] (its write buffer, the part of its read buffer a small reply
//!   touches and its slots: 24 KB measured), [`CONN_READ`] more when replies or values
//!   pass 4 KB (the whole 64 KiB read buffer is touched);
//! - a class × command on a shard: three histograms (latency, service time, schedule lag)
//!   for the interval and three for the run, and the agent's sums of the same; each a
//!   [`crest_model::hist::Dense`] of the samples it holds ([`dense`]);
//! - a class's backlog on a shard: the requests that may wait for a connection, bounded
//!   by `--backlog-limit` and by the rate × `--timeout` (a request older is given up),
//!   24 bytes each, twice for the queue's growth;
//! - the coordinator: its per-(class, command) totals and row sums, every worker's books
//!   and session, the pending intervals' cap, and the timeline rows the report keeps.
//!
//! A histogram's cost depends on how many distinct buckets its samples touch: the estimate
//! takes at most [`PAGES_SPREAD`] pages: latencies within a 256× range (50 µs to 13 ms),
//! where a run's samples mostly land; a run spreading wider takes more, up to 270 KB a
//! histogram. Checked against measured peaks in `coordinator/tests/hostile.rs` (a profile
//! of 50 classes × 10 commands: 62 MB estimated, 31 MB measured; 20 classes × 10 commands
//! at 2,000 requests/s each: see the closing note of the issue that added it).

use crate::config::{ClassConfig, RunConfig};
use crate::merge::{MAX_PENDING_BYTES, PENDING_BYTES_PER_WORKER};
use crest_model::hist::{PAGE, SMALL};
use crest_model::schedule::Profile;
use std::fmt::Write as _;

/// A process with nothing to do.
pub const PROCESS: u64 = 20 << 20;
/// A shard with no class: its loop, its events and its thread's stack in use.
pub const SHARD: u64 = 256 << 10;
/// A connection with small replies.
pub const CONN: u64 = 24 << 10;
/// A connection's read buffer, when replies or values are larger than a page.
pub const CONN_READ: u64 = 64 << 10;
/// Pages of 2 KB a histogram is taken to touch at most (8 powers of two of latency, 4
/// pages each).
pub const PAGES_SPREAD: u64 = 32;
/// A queued request.
const QUEUED: u64 = 24;
/// A timeline row in the coordinator and in `report.json`.
const ROW: u64 = 512;
/// A worker's session and books in the coordinator.
const MEMBER: u64 = 64 << 10;
/// A (class, command)'s counts and names besides its histograms, per copy.
const CMD: u64 = 512;

/// Heap bytes of a [`crest_model::hist::Dense`] holding `samples` samples (None: as many
/// as it likes): a sorted list while at most [`SMALL`] buckets, then a page table and a
/// page per [`PAGE`] buckets touched, at most [`PAGES_SPREAD`].
pub fn dense(samples: Option<u64>) -> u64 {
    let list_entry = 16;
    match samples {
        Some(0) => 0,
        Some(n) if n <= SMALL as u64 => (n.next_power_of_two().max(4)) * list_entry,
        n => {
            let pages = n.unwrap_or(u64::MAX).min(PAGES_SPREAD);
            1024 + pages * PAGE as u64 * 8
        }
    }
}

/// The estimate of one process, in parts (bytes).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Footprint {
    /// The process itself.
    pub process: u64,
    /// Shards and their value and reply buffers.
    pub shards: u64,
    /// Connections.
    pub connections: u64,
    /// Histograms of every class × command (shards, agent, coordinator).
    pub histograms: u64,
    /// Backlogs.
    pub backlog: u64,
    /// The coordinator's books: workers, pending intervals, timeline rows.
    pub books: u64,
    /// Connections counted (for the line).
    pub conn_count: u64,
    /// Class × command pairs counted (for the line).
    pub cmd_count: u64,
    /// Shards counted (for the line).
    pub shard_count: u64,
}

impl Footprint {
    /// Every part.
    pub fn total(&self) -> u64 {
        self.process + self.shards + self.connections + self.histograms + self.backlog + self.books
    }

    fn add(&mut self, o: &Footprint) {
        self.process += o.process;
        self.shards += o.shards;
        self.connections += o.connections;
        self.histograms += o.histograms;
        self.backlog += o.backlog;
        self.books += o.books;
        self.conn_count += o.conn_count;
        self.cmd_count += o.cmd_count;
        self.shard_count += o.shard_count;
    }

    /// Its parts in words, largest first, the empty ones left out.
    fn parts(&self) -> String {
        let mut parts = vec![
            (
                self.histograms,
                format!(
                    "histograms of {} class × command pairs on {} shard{}",
                    self.cmd_count,
                    self.shard_count,
                    if self.shard_count == 1 { "" } else { "s" }
                ),
            ),
            (self.connections, format!("{} connections", self.conn_count)),
            (self.backlog, "backlogs".to_string()),
            (self.shards, "shards and their buffers".to_string()),
            (self.books, "the coordinator's books".to_string()),
        ];
        parts.sort_by_key(|p| std::cmp::Reverse(p.0));
        let mut s = String::new();
        for (bytes, what) in parts.into_iter().filter(|p| p.0 > 0) {
            if !s.is_empty() {
                s.push_str(", ");
            }
            let _ = write!(s, "{} for {what}", size(bytes));
        }
        s
    }
}

/// `bytes` in words: 1.5 GB, 20.0 MB, 512 KB.
pub fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else {
        format!("{:.0} KB", (b / 1e3).ceil())
    }
}

/// Per command of class `c` at `peak` requests/s (None: closed loop, no bound): the
/// samples of one interval and of a run `measured` seconds long, split by the mix's weights.
fn samples(
    cfg: &RunConfig,
    c: &ClassConfig,
    peak: Option<f64>,
    measured: f64,
) -> impl Iterator<Item = (Option<u64>, Option<u64>)> {
    let weights = c.shape.weights(cfg.protocol);
    let sum = weights
        .values()
        .map(|w| f64::from(*w))
        .sum::<f64>()
        .max(1.0);
    let interval = cfg.interval.as_secs_f64();
    weights.into_values().map(move |w| {
        let share = f64::from(w) / sum;
        (
            peak.map(|r| (r * share * interval).ceil() as u64),
            peak.map(|r| (r * share * measured).ceil() as u64),
        )
    })
}

/// A worker's part of the plan: what its `shards` of the fleet's `total_shards` hold.
pub fn worker(cfg: &RunConfig, shards: u32, total_shards: u32) -> Footprint {
    let total_shards = u64::from(total_shards.max(1));
    let shards = u64::from(shards);
    let measured = cfg.duration.as_secs_f64() + cfg.warmup.as_secs_f64();
    let mut f = Footprint {
        shard_count: shards,
        ..Footprint::default()
    };
    for c in &cfg.classes {
        let value = c.shape.values.max();
        // A memcached ring: every shard connects to every server (a cluster's node count
        // is not known before the run: its seed alone is counted).
        let conns = u64::from(c.connections).div_ceil(total_shards) * cfg.ring.len().max(1) as u64;
        let big = value > 4096 || c.shape.batch > 64 || c.shape.range > 64;
        f.connections += shards * conns * (CONN + if big { CONN_READ } else { 0 });
        f.conn_count += shards * conns;
        f.shards += shards * 2 * value.min(1 << 30);
        // The peak rate one shard sends for this class (None: closed loop, as fast as it goes).
        let peak = c
            .profile
            .as_ref()
            .map(|p| p.peak_rps() / total_shards as f64);
        let queue = peak.map_or(cfg.backlog_limit, |r| {
            ((r * cfg.timeout.as_secs_f64()).ceil() as u64).min(cfg.backlog_limit)
        });
        f.backlog += shards * queue * QUEUED * 2;
        for (per_iv, per_run) in samples(cfg, c, peak, measured) {
            // A shard: the interval's and the run's; the agent: the same summed over its
            // shards (the worker's samples, so up to `shards` times as many).
            let shard = 3 * (dense(per_iv) + dense(per_run)) + 2 * CMD;
            let agent = 3
                * (dense(per_iv.map(|n| n * shards)) + dense(per_run.map(|n| n * shards)))
                + 2 * CMD;
            f.histograms += shards * shard + agent;
            f.cmd_count += 1;
        }
    }
    f.shards += shards * SHARD;
    f
}

/// The coordinator's own part: per (class, command) run totals and a row's sums, each
/// worker's books, the pending intervals' cap and the timeline.
pub fn coordinator(cfg: &RunConfig, workers: u64) -> Footprint {
    let interval = cfg.interval.as_secs_f64();
    let measured = cfg.duration.as_secs_f64();
    let mut f = Footprint::default();
    for c in &cfg.classes {
        let peak = c.profile.as_ref().map(Profile::peak_rps);
        for (per_iv, per_run) in samples(cfg, c, peak, measured) {
            f.histograms += 3 * (dense(per_iv) + dense(per_run)) + (2 + workers) * CMD;
        }
        // A class's latency for the row and the live hlog.
        f.histograms += dense(peak.map(|r| (r * interval).ceil() as u64));
    }
    let rows = if cfg.interval.is_zero() {
        0
    } else {
        (cfg.duration.as_nanos() / cfg.interval.as_nanos()) as u64 + 1
    };
    let pending = (MAX_PENDING_BYTES + PENDING_BYTES_PER_WORKER * workers as usize) as u64;
    f.books = workers * MEMBER + rows * ROW + pending;
    f.process = PROCESS;
    f
}

/// What the run needs in the largest process: the coordinator with its in-process
/// workers (`local`: the shards of the fleet that live in this process), or the largest
/// remote worker (`remote`: each worker's shards).
pub struct Estimate {
    /// This process (the coordinator and any in-process workers).
    pub here: Footprint,
    /// The largest remote worker, with its shards, if any.
    pub remote: Option<Footprint>,
}

/// The plan's estimate over a fleet of `local` in-process shards and `remote` workers'
/// shards (one entry per remote worker).
pub fn estimate(cfg: &RunConfig, local: &[u32], remote: &[u32]) -> Estimate {
    let total: u32 = local.iter().chain(remote).sum();
    let workers = (local.len() + remote.len()) as u64;
    let mut here = coordinator(cfg, workers);
    for &s in local {
        here.add(&worker(cfg, s, total));
    }
    let remote = remote
        .iter()
        .map(|&s| {
            let mut f = worker(cfg, s, total);
            f.process += PROCESS;
            f
        })
        .max_by_key(Footprint::total);
    Estimate { here, remote }
}

/// One line when the estimate of a process is over `budget`, None when it fits.
pub fn check(est: &Estimate, budget: u64) -> Option<String> {
    let over = |f: &Footprint, who: &str| {
        (f.total() > budget).then(|| {
            format!(
                "the plan needs about {} {who} ({}) over the budget of {} (--memory-budget): use fewer classes, commands, connections or a lower --backlog-limit, a shorter --timeout, more workers, or raise --memory-budget",
                size(f.total()),
                f.parts(),
                size(budget)
            )
        })
    };
    over(&est.here, "in this process").or_else(|| {
        est.remote
            .as_ref()
            .and_then(|r| over(r, "in each remote worker"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dense_histogram_costs_what_its_samples_touch() {
        assert_eq!(dense(Some(0)), 0);
        assert_eq!(dense(Some(1)), 64);
        assert_eq!(dense(Some(64)), 1024);
        assert_eq!(dense(Some(65)), 1024 + 32 * 2048);
        assert_eq!(dense(Some(40)), 64 * 16);
        assert_eq!(dense(None), 1024 + PAGES_SPREAD * 2048);
        assert_eq!(dense(Some(u64::MAX)), dense(None));
        // The pages it may take are Crest's bounds' at most.
        assert!(PAGES_SPREAD <= crest_model::hist::PAGES as u64);
    }

    #[test]
    fn sizes_read_in_words() {
        assert_eq!(size(1_500_000_000), "1.5 GB");
        assert_eq!(size(20_000_000), "20.0 MB");
        assert_eq!(size(1), "1 KB");
    }
}
