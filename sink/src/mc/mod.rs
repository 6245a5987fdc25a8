//! The memcached target ([`crate::serve_memcache`]): memcached 1.6's text and meta
//! protocols, answered as memcached 1.6.18 answers them (replies, error texts, what is
//! counted where), over items of its own.
//!
//! # Layout
//! - [`serve`] (here): builds the state and runs the accept loop ([`crate::net`]) over
//!   `conn`.
//! - `conn`: a connection's reads and writes around its `session`.
//! - `session`: a connection's protocol state without its socket: a command line, a data
//!   block to read or swallow, a multi-get's keys; it hands replies back to be written
//!   whenever a chunk of them waits.
//! - `cmd`: the dispatcher, `process_command_ascii`'s choice of command.
//! - `text`, `meta`: the commands, one function each, in `proto_text.c`'s order of checks.
//! - `storage`: what both share below them: a storage command's second half (its data
//!   block in), `do_store_item`'s rules, `incr`'s arithmetic.
//! - `state`: the server's state, one command's context, and what a command leaves its
//!   connection to do.
//! - `items`: lock-striped items with memcached's sizes, CAS uniques, lazy expiry and
//!   `flush_all`. `stats`: the counters. `parse`: lines, words and numbers as memcached
//!   reads them.
//!
//! Dependencies point one way: `parse`, `stats` ← `items` ← `state` ← `storage` ←
//! `text`, `meta` ← `cmd` ← `session` ← `conn` ← `serve`. Nothing here uses the RESP side
//! but its shard hash ([`crate::store::shard_of`]), clock type, and [`crate::net`].
//!
//! # What is counted where (measured on memcached 1.6.18)
//! | request | counters |
//! |---|---|
//! | `get`/`gets k1 k2 k3` | per key: `cmd_get`, and `get_hits` or `get_misses` |
//! | `gat`/`gats` | per key: `cmd_touch`, and `touch_hits` or `touch_misses`; never `cmd_get` nor `get_*` |
//! | `touch` | `cmd_touch`, and `touch_hits` or `touch_misses` |
//! | `mg` (no `T`) | `cmd_get`, and `get_hits` or `get_misses` |
//! | `mg … T<ttl>` | hit: `cmd_touch` and `touch_hits` only; **miss: `cmd_get` and `get_misses`** (not touch) |
//! | `mg … N<ttl>` on a miss | the item is created: a hit (`get_hits`, or `touch_hits` with `T`) and `total_items` |
//! | `set`/`add`/`replace`/`append`/`prepend`/`cas`, `ms` | `cmd_set` once the data block is read, stored or not (a bad data chunk too); a value too large counts `store_too_large`, not `cmd_set` |
//! | `cas`, `ms C` (set or replace mode) | `cas_hits`; a different unique `cas_badval`; a missing key `cas_misses` |
//! | `incr`/`decr`, `ma` | `incr_hits`/`decr_hits`, or `incr_misses`/`decr_misses`; a non-numeric value counts nothing; no `cmd_*` |
//! | `ma N` on a miss | nothing but `total_items` (the created item) |
//! | `ma C` mismatch (`EX`) | nothing |
//! | `delete`, `md` | `delete_hits` or `delete_misses`; `md C` mismatch (`EX`) is a miss; `md I` counts nothing |
//! | `me` | `cmd_meta` |
//! | `flush_all` | `cmd_flush`, even refused |
//! | any lookup finding an expired or flushed item | `get_expired` or `get_flushed`, whatever the command (`set`, `delete` too) |
//! | an item linked | `total_items` (every store; an `incr` that outgrows its value's length; `ma N`, `mg N`) |
//!
//! `curr_connections` counts clients; `total_connections` clients ever plus the listening
//! socket, as memcached counts it. `stats reset` zeroes every counter, `total_items` and
//! `total_connections` too. `bytes` is memcached's own item size, so it matches a
//! memcached given the same items.
//!
//! # Differences from memcached, on purpose
//! - No memory limit and no eviction (`evictions` is 0; `limit_maxbytes` is not
//!   reported); no LRU: `mg l`/`me la` give the time since the item was linked or last
//!   fetched again, `mg h`/`me fetch` whether it was fetched.
//! - Expired and flushed items are removed when found, as memcached does, or by `stats`
//!   (memcached's LRU maintainer reaps them in the background, so whether a later lookup
//!   counts `get_expired` there depends on its timing; here it always does until `stats`).
//!   A `flush_all` does not come undone by a later delayed one.
//! - Time is exact, not memcached's one-second clock: an exptime of `n` seconds lasts `n`
//!   seconds from the command.
//! - Only what Crest and common clients send: no `stats items|slabs|sizes|conns` content
//!   (an empty list), no `slabs`, `lru`, `lru_crawler`, `watch`, `cache_memlimit`
//!   (`ERROR`), no SASL or binary protocol, no UDP.
//! - A multi-get line is bounded by the connection's input budget ([`crate::Limits`]),
//!   where memcached grows without bound; past it, `SERVER_ERROR out of memory reading
//!   request` and the connection is closed.
//! - `version` says `1.6.18`, the behaviour followed; `stats` adds `crest_sink 1`.

mod cmd;
mod conn;
mod items;
mod meta;
mod parse;
mod session;
mod state;
mod stats;
mod storage;
mod text;

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use tokio::net::TcpListener;

use crate::state::Limits;

/// Serves memcached clients on `listener` until `shutdown` resolves (see
/// [`crate::serve_memcache`]).
pub(crate) async fn serve(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) -> io::Result<()> {
    let threads = tokio::runtime::Handle::current().metrics().num_workers();
    let port = listener.local_addr().map_or(0, |a| a.port());
    let state = Arc::new(state::State::new(
        Box::new(Instant::now),
        limits,
        threads,
        port,
    ));
    crate::net::accept_loop(listener, shutdown, move |stream| {
        conn::connection(stream, Arc::clone(&state))
    })
    .await
}
