//! The server's own figures on the run's time axis (issue #10, items 1 and 2): the
//! coordinator samples the target's `INFO` at every interval boundary of the run clock and
//! checks the server's command counts against the report's.
//!
//! # Design
//!
//! - **One connection, the coordinator's.** [`sampler::Sampler`] opens one control
//!   connection with the worker crate's `probe::control` (the same TLS client
//!   configuration, `HELLO`/`AUTH`, `SETNAME crest-sampler`, `SELECT` every shard
//!   connection uses; no `CLIENT TRACKING`), never in a shard. It is a tokio task: each
//!   request waits for its reply, bounded by a timeout, and nothing on the coordinator
//!   waits for it during the run.
//! - **On by default** when the target answers `INFO`: a target that refuses it (an ACL
//!   user without `@dangerous`, a proxy) turns the sampler off with one line on stderr and
//!   `server_stats` in the report saying why; the run goes on. `--no-server-stats`
//!   (`CREST_NO_SERVER_STATS`, profile `server_stats = false`) turns it off: no connection,
//!   no `INFO`.
//! - **When.** One sample after the prefill and before the measured phase's plans go out
//!   ([`series::Mark::BeforeLoad`](crest_report::server::series::Mark::BeforeLoad): the server has seen no measured request yet), one at
//!   every boundary `measured start + k·interval` ([`series::Mark::Boundary`](crest_report::server::series::Mark::Boundary); `k = 0`
//!   only with a warm-up), one after the last worker's finals ([`series::Mark::Final`](crest_report::server::series::Mark::Final): the
//!   drain is over). A reply that comes after the next boundary skips it (the row is
//!   `sampled: false`, the totals span it anyway). One `INFO server clients memory stats
//!   cpu commandstats errorstats keyspace` per sample (28.7 µs of server time on redis
//!   7.0, research E9); `INFO everything` on servers that take one section only.
//! - **What.** Counters become deltas between consecutive samples ([`series::row`](crest_report::server::series::row)):
//!   calls, rejected and failed calls and usec per command, server CPU
//!   (`used_cpu_user + used_cpu_sys`) and CPU µs per op, network bytes, evicted and
//!   expired keys, keyspace hits and misses, errorstats. Gauges are read at each row's
//!   end: used_memory, used_memory_rss, mem_fragmentation_ratio, connected_clients, keys
//!   per database. `instantaneous_*` fields are moving averages over ~1.6 s and never used.
//!   A counter that goes down (restart, `CONFIG RESETSTAT`) has no delta: flagged, null.
//! - **The sampler's own calls.** Redis counts a command after it ran, so `INFO` number
//!   `n` is in the sample of `INFO` `n+1`: between two samples the sampler made exactly
//!   `seq_b − seq_a` calls, which come out of the `info` row (calls and usec) and out of
//!   the CPU figure (their usec). Connection setup (`HELLO`, `AUTH`, `SELECT`, `CLIENT`,
//!   and the workers' probe `ECHO`) is counted by the server but is not load: excluded by
//!   name from `ops`. The sampler's `CONFIG GET io-threads` and first `INFO` come before
//!   the baseline, in no delta.
//! - **Truth check** ([`series::report`](crest_report::server::series::report)): per command the report counts, the server's
//!   Σ Δ(calls + rejected_calls) from the baseline to the final sample must lie within
//!   [answered, sent]: every answered request ran on the server, a written one that got no
//!   reply (in flight at the end, timed out, cut by a disconnect) may or may not have, an
//!   unsent one never reached it. No tolerance beyond that, because the baseline is taken
//!   before any measured request is written and the final after the drain. Warm-up
//!   requests reach the server but are in no count, and the workers do not report them,
//!   so with `--warmup` the baseline is the sample at the measured start instead, and the
//!   check allows the boundary: the requests that can be in flight at that instant (Σ
//!   connections × pipeline) plus the first interval's rate times the baseline's lateness.
//!   The prefill is over (all its replies in) before the baseline: never counted.
//!   Commands crest did not send (another client's) are listed, not judged; a command
//!   crest sent that the server counted more or fewer times fails `checks` by name. A
//!   workload command that setup sends too (`ECHO`, `CLIENT`...) is shown, not judged.
//!   No truth check (null, said why, no problem) when the final sample is missing (the
//!   server stopped answering), the server restarted (`run_id` changed) or a counter
//!   went down (`CONFIG RESETSTAT`): the client's figures stand.
//! - **memcached** (issue #28): [`Sampler::connect_memcache`] opens one plain connection
//!   (TLS with the run's client configuration) to every server of the ring, with no
//!   setup, and asks `stats` at every sample (`stats settings` once at connect: the worker
//!   threads, the report's `io_threads`; `item_size_max` and `maxconns` have no place in
//!   the report). The replies are read to `END`, bounded in size and by the same reply
//!   timeout (a late reply drops the connections), and summed over the ring into the same
//!   snapshot an `INFO` gives ([`crest_report::server::memcache`]: the field mapping, what
//!   each memcached request moves, and the truth check per counter family). memcached
//!   counts the sampler's `stats` in no command counter, so nothing is taken out. The
//!   whole ring is sampled, so its check is judged (a Redis Cluster's is not: the seed
//!   only); the report has no per-server place for a ring's figures, so only the sums are
//!   kept.
//! - **Cost.** A sample keeps only what it reads, as numbers ([`info::Snap`](crest_report::server::info::Snap): about 1 kB
//!   with the command, error and database lines), plus the interval's row in the report.
//!
//! # Layout
//! - [`sampler`]: the connection and the clock (this crate); `memcache`: its connections
//!   to a memcached ring.
//! - [`crest_report::server::info`]: one `INFO` reply parsed; [`crest_report::server::series`]:
//!   samples → per-interval rows, totals, the truth check; the report's `server` section
//!   (the report library: a saved report is judged and shown without a connection).

pub(crate) mod memcache;
pub mod sampler;

pub use crest_report::server::{Series, ServerReport, ServerRow};
pub use sampler::{Now, Running, Sampler};

/// What the run's sampler did.
#[derive(Debug, Clone, Default)]
pub enum ServerStats {
    /// Turned off (`--no-server-stats`).
    #[default]
    Off,
    /// The target would not be sampled: why.
    Unavailable(String),
    /// Sampled.
    Sampled(Series),
}

impl ServerStats {
    /// The report's `server_stats` word: `on`, `off`, or `unavailable: <why>`.
    pub fn word(&self) -> String {
        match self {
            ServerStats::Off => "off".into(),
            ServerStats::Unavailable(why) => format!("unavailable: {why}"),
            ServerStats::Sampled(_) => "on".into(),
        }
    }
}
