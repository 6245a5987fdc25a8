//! Crest's built-in targets: an in-memory server that answers every command Crest sends,
//! as cheaply as possible, in RESP2 and RESP3 with Redis 7's semantics ([`serve`]), or in
//! memcached's text and meta protocols with memcached 1.6's ([`serve_memcache`]).
//!
//! It exists so Crest runs with no server installed (the default when no `--target` is
//! given, or `crest sink --listen ADDR`, `crest sink --memcache`), and so a generator
//! fleet's own ceiling can be measured against a target that is not the bottleneck.
//! `INFO commandstats` counts calls per command in Redis's format, and memcached's `stats`
//! counts what memcached counts, so end-to-end tests check Crest's report against the
//! sink's own counters exactly as they do against Redis or memcached.
//!
//! # Layout
//! - [`serve`] (here): the RESP entry point; builds the state and runs `server`.
//!   [`serve_memcache`] runs `mc` instead.
//! - `net`: what both servers share: the accept loop with backoff and shutdown, and each
//!   connection's budget of unrun request bytes against [`Limits`].
//! - `server`: each RESP connection's read, parse, dispatch and write. Only `serve` uses
//!   it.
//! - `cmd`: the dispatch table (name, Redis arity, handler) and `execute`, over one file
//!   of handlers per family: `string`, `hash`, `list`, `set`, `zset`, `stream`, `keys`
//!   (DEL EXPIRE TTL TYPE...), `server` (PING HELLO INFO QUIT...). The family files never
//!   import the table; what they share is below it:
//!   - `cmd::ctx`: what a handler runs with (state, connection, time, reply buffer);
//!   - `cmd::reply`: what it answers (reply type, canned replies, error texts, scores);
//!   - `cmd::args`: how it reads its arguments (integers, floats, ranges, keywords).
//! - `info`: the text of `INFO`'s sections, read from the state.
//! - `state`: what commands run against, shared by `server` and `cmd` and below both:
//!   the sink (keyspace, counters, clock, connection counts), a connection, and what a
//!   command leaves it to do.
//! - `stats`: the counters `INFO` reports; commands are known by table index, and their
//!   names are given when the state is built (`cmd::NAMES`), so the counters need no table.
//! - `store`: the keyspace, lock-striped maps of typed values (string, hash, list, set,
//!   sorted set, stream) with lazy expiry and an incremental memory estimate.
//! - `resp3`: what a connection that said `HELLO 3` gets instead of RESP2 replies (maps,
//!   sets, doubles, `_` for a nil, a verbatim `INFO`), as Redis 7 sends them.
//! - `mc`: the memcached server, a world of its own (its items, counters, parser,
//!   commands, connections; its layout, what it counts where as measured on memcached
//!   1.6.18, and its differences from memcached are in its module documentation). It
//!   shares only `net`, and `store`'s shard hash and clock type, with the RESP side.
//!
//! Dependencies point one way, each module importing only ones to its left:
//! `store`, `stats`, `resp3`, `cmd::reply` ← `state` (with [`Limits`]), `cmd::args` ←
//! `net`, `cmd::ctx`, `info` ← `cmd::{string, hash, ..., server}` ← `cmd` (table) ←
//! `server` ← `serve`; and `store`, `state`'s [`Limits`], `net` ← `mc` ←
//! `serve_memcache`.
//!
//! Cost model: a command locks one of 64 `std::sync::Mutex`-guarded shards for one map
//! operation, never across an await. Each connection answers every pipelined request it
//! has read into one buffer, written once; its counters are added to the shared ones once
//! per read batch, before the replies are written, so a client never sees a reply whose
//! call is not counted yet.
//!
//! Differences from Redis, on purpose: expiry is lazy only (an expired key is removed when
//! touched, or by `DBSIZE` and `INFO keyspace`, which sweep); `MSET` is not atomic across
//! keys; `INFO` with no section includes every section, `commandstats` too; subcommands
//! are counted under their command (`cmdstat_client`, where Redis 7 says
//! `cmdstat_client|id`); `usec` is always 0; `HELLO` ignores `AUTH` and `SETNAME`; RESP3 covers the replies of the commands listed (no push frames: there is no `CLIENT TRACKING` or pub/sub); only
//! database 0 exists; `COMMAND` publishes no table.
//!
//! Differences from memcached, on purpose (the full list is `mc`'s): no memory limit and
//! no eviction; expired and flushed items are reaped when found or by `stats`, not by a
//! background thread; time is exact, not memcached's one-second clock; `stats items`,
//! `slabs`, `sizes`, `conns` answer an empty list and `lru`, `lru_crawler`, `watch`,
//! `slabs`, `cache_memlimit` are not answered; no binary protocol, SASL or UDP; a
//! multi-get line is bounded by [`Limits`].

// Nothing a client sends may panic the server: the workspace lints deny unwrap/expect
// outside tests.

mod cmd;
mod info;
mod mc;
mod net;
mod resp3;
mod server;
mod state;
mod stats;
mod store;
#[cfg(test)]
mod test_support;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpListener;

pub use state::Limits;

/// Serves RESP2 and RESP3 clients on `listener` until `shutdown` resolves; then stops accepting and
/// closes connections.
///
/// Each call has its own empty store. A connection's I/O or protocol error closes that
/// connection only. Transient accept errors (out of file descriptors, a connection aborted
/// before it was accepted) are logged, rate-limited, and retried with backoff.
///
/// # Errors
///
/// An accept error that retrying cannot fix (e.g. the listener's socket is invalid). Open
/// connections are closed before it is returned.
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()>) -> io::Result<()> {
    serve_with(listener, shutdown, Limits::default()).await
}

/// As [`serve`], with `limits` on what clients may make the sink hold.
///
/// # Errors
///
/// As [`serve`].
pub async fn serve_with(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) -> io::Result<()> {
    let sink = state::Sink::new(Box::new(Instant::now), &cmd::NAMES, limits);
    server::run(listener, shutdown, Arc::new(sink)).await
}

/// Serves memcached clients (text and meta protocols) on `listener` until `shutdown`
/// resolves; then stops accepting and closes connections. Each call has its own empty
/// items; what it answers, and how it counts in `stats`, is memcached 1.6's (see the
/// crate's documentation for the few differences).
///
/// # Errors
///
/// As [`serve`].
pub async fn serve_memcache(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_memcache_with(listener, shutdown, Limits::default()).await
}

/// As [`serve_memcache`], with `limits` on what clients may make it hold.
///
/// # Errors
///
/// As [`serve`].
pub async fn serve_memcache_with(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) -> io::Result<()> {
    mc::serve(listener, shutdown, limits).await
}

/// The names of every command the sink answers, lowercase, sorted; what its dispatch
/// table holds.
pub fn commands() -> impl Iterator<Item = &'static str> {
    cmd::names()
}
