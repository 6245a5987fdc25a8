//! A relay tier between the coordinator and a fleet's workers (issue #12: one coordinator
//! pays ~25–35 µs of CPU per worker message and four heartbeat writes per worker per
//! second, so 1,000 workers at 1 s intervals cost it 140–175 ms of CPU a second; with a
//! relay per 100 workers it talks to ten).
//!
//! # Design
//! Upstream a relay is **one worker**: it registers with the sum of its workers' shards
//! (their cores listed in order), answers the coordinator's pings with its own clock, and
//! sends one interval message per index and one final message per run. Downstream it is a
//! **coordinator**: workers dial it exactly as they dial `crest run` and it keeps each
//! worker's clock offset.
//!
//! - Plan: the coordinator's `StartRun` holds one `ShardPlan` per shard of the relay, in
//!   the order the relay listed its workers' shards ([`pass::register`]); each worker gets
//!   its own shards' plans back (renumbered within the worker, their cluster-wide
//!   `global_index` kept), and the start instant moved into its clock by its offset
//!   ([`pass::split`]).
//! - Intervals: [`gather::Gather`] holds each index until every worker of the run sent it
//!   or a later one (or finished); [`sum::Summer`] adds their messages into one, exactly
//!   (histograms bucket by bucket, encoded byte for byte as a worker would), which goes
//!   upstream. The coordinator checks a relay's intervals against its final as it checks a
//!   worker's: the fingerprints of sums are the sums of fingerprints.
//! - Finals: when every worker finished, one final message, their sum.
//! - Liveness: the hub beats its workers as `crest run`'s does; the relay's own dead man's
//!   switch (the coordinator silent for a second, or its session ended) aborts the
//!   workers' run at once, so load stops within a second of the coordinator's last word.
//!   A worker lost mid-run (its session ended, or silent for 3 s) loses the relay: it
//!   aborts its other workers and leaves the coordinator's session, which marks it lost as
//!   it marks any lost worker (its intervals so far kept; the rest of the fleet finishes).
//!   Between runs a worker that leaves or joins makes the relay register again with its
//!   new shards ([`session`]).
//! - Steering, checkpoints: a `Steer`, `ReleaseCheckpoint` or `Abort` goes to every
//!   worker; `Steered` and `CheckpointReached` go upstream once every worker sent its own
//!   (the earliest and latest switch instants of all: [`pass::Acks`]).
//!
//! - TLS: upstream the relay dials as a worker does
//!   (`crest_engine::agent::coordinator_endpoint`: `https://` with a CA and an optional
//!   client certificate); downstream it serves as `crest run` does (`service::serve` with
//!   a `ServerTls`).
//!
//! Not yet: relays of relays (a relay's workers are `crest-worker`s).

pub mod gather;
pub mod pass;
pub mod session;
pub mod sum;
