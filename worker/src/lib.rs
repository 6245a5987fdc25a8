//! Crest's load engine: pinned shards that send RESP requests on an open-loop schedule
//! and record latency in HDR histograms, plus the agent that takes runs from a coordinator.
//! The `crest-worker` binary is this crate's agent behind a command line.
//!
//! # Layout
//! - [`shard`]: one pinned thread and its loop (schedule, flush, wait, handle events, ship
//!   intervals), interval rollover, finish; the shard's configuration and events.
//! - `class` (private): one class in a shard: open-loop schedule or closed-loop budget,
//!   dispatch onto free pipeline slots, the backlog, results.
//! - `conn` (private): one connection: socket (plaintext, or TLS through a rustls client
//!   connection driven by the same loop), buffers, state and backoff, the session
//!   setup it sends before any request (`HELLO 2 AUTH` / `AUTH`, `SELECT`), and reply
//!   matching as a pure function of the read buffer and the requests in flight (RESP, or
//!   memcached's replies read as each request expects them).
//! - `churn` (private): which connection retires when (`--conn-lifetime`, `--conn-rate`)
//!   and the books of the connections' lives (setup times, reconnects).
//! - `pace` (private): when the loop wakes: the pacer's lag budget and the offset from the
//!   next intended time that spends it, set by feedback from the lags the shard sees.
//! - `sys` (private): epoll with nanosecond waits, timer slack, errno names, the open-file
//!   limit; the crate's only `unsafe` code.
//! - [`route`]: where each request goes: the one node, or in a Redis Cluster the owner
//!   of its key's slot; the worker's shared slot table and its refresher, each shard's
//!   own copy updated by `MOVED`.
//! - [`steer`]: runtime changes of rate, from the agent to every shard (one atomic per
//!   loop turn).
//! - [`assemble`]: a checked plan → one shard configuration per core.
//! - [`uplink`]: one session with the coordinator (dial, register, clock pings, dead
//!   man's switch, heartbeats, a bounded outbox), shared with `crest relay`.
//! - [`agent`]: the worker's side of it: runs started, steered and ended on its shards.
//! - [`control_tls`]: TLS for the coordinator ↔ worker gRPC: PEM files checked up front,
//!   rustls configurations of both ends, a failed dial worded as one line.
//! - [`target_tls`]: TLS to the load target: the `--tls`/`--cacert`/`--cert`/`--key`
//!   files checked on the coordinator, one rustls client configuration per run on the
//!   worker (hostname verified by default), TLS failures as a fixed set of kinds and lines.
//! - [`cpus`]: which cores the shards run on.
//! - [`probe`]: one connection set up like every other (login, database) and one question
//!   to the target before a run (`version` to each memcached server), so a server that refuses the generator (a wrong password,
//!   a missing permission or database, maxclients) stops the run with its own words.
//!
//! Data flow: coordinator → `StartRun` → [`agent`] (probe; in cluster mode the slot table
//! from the seed, then its refresher) → [`assemble`] → one [`shard`] thread
//! per core → `ShardEvent::Interval` per interval → [`agent`] sums shards → `Interval` to
//! the coordinator. What a run is (plans, workloads, stats) comes from `crest-model`; the
//! bytes on the target's wire from `crest-resp`.

// The engine faces the network: a panic there kills a worker mid-run. The workspace lints
// deny unwrap/expect outside tests and unsafe without a SAFETY comment.

pub mod agent;
pub mod assemble;
mod churn;
mod class;
mod conn;
pub mod control_tls;
pub mod cpus;
pub mod feed;
mod outage;
mod pace;
pub mod probe;
pub mod route;
pub mod shard;
mod spec;
pub mod steer;
mod sys;

/// CPU time the calling thread has used, ns (`CLOCK_THREAD_CPUTIME_ID`; 0 if unreadable):
/// what the shards report per interval, and what the benchmarks time a thread with.
pub use sys::epoll::thread_cpu_ns;
pub mod target_tls;
pub mod uplink;
