//! Crest's built-in RESP2 and RESP3 target: an in-memory server that answers every command Crest
//! sends with Redis 7's semantics, as cheaply as possible.
//!
//! It exists so Crest runs with no server installed (the default when no `--target` is
//! given, or `crest sink --listen ADDR`), and so a generator fleet's own ceiling can be
//! measured against a target that is not the bottleneck. `INFO commandstats` counts calls
//! per command in Redis's format, so end-to-end tests check Crest's report against the
//! sink's own counters exactly as they do against Redis.
//!
//! # Layout
//! - [`serve`] (here): the one entry point.
//! - `server`: the accept loop with backoff; each connection's read, parse, dispatch and
//!   write; shutdown.
//! - `store`: the keyspace, lock-striped maps of typed values (string, hash, list, set,
//!   sorted set) with lazy expiry and an incremental memory estimate.
//! - `cmd`: the one dispatch table (name, Redis arity, handler) and shared argument
//!   parsing; one file per family: `string`, `hash`, `list`, `set`, `zset`, `keys`
//!   (DEL EXPIRE TTL TYPE...), `server` (PING HELLO INFO QUIT...).
//! - `info`: the counters `INFO` reports and its sections.
//! - `resp3`: what a connection that said `HELLO 3` gets instead of RESP2 replies (maps,
//!   sets, doubles, `_` for a nil, a verbatim `INFO`), as Redis 7 sends them.
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

// Nothing a client sends may panic the server: the workspace lints deny unwrap/expect
// outside tests.

mod cmd;
mod info;
mod resp3;
mod server;
mod store;
#[cfg(test)]
mod test_support;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpListener;

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
    let sink = server::Sink::new(Box::new(Instant::now));
    server::run(listener, shutdown, Arc::new(sink)).await
}

/// The names of every command the sink answers, lowercase, sorted; what its dispatch
/// table holds.
pub fn commands() -> impl Iterator<Item = &'static str> {
    cmd::names()
}
