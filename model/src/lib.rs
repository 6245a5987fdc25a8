//! Crest's shared vocabulary: what a run is (rate profiles, workloads, key and value
//! shapes), what it measures (stats and HDR histograms), and every conversion between
//! those domain types and the wire (`crest-proto`), checked once at the boundary.
//!
//! The engine and the coordinator both depend on this crate; it depends on neither.
//!
//! # Layout
//! - [`schedule`]: rate profiles λ(t) and intended send times (uniform, Poisson).
//! - [`shapes`]: key distributions and value sizes.
//! - [`workload`]: the command vocabulary, the mix and the request encoder (to a plain
//!   buffer, or a [`Wire`](workload::Wire) that takes large values by reference).
//! - [`stats`], [`hist`]: per-command counts and HDR histograms that merge by addition, and
//!   the bounded set of error kinds with their first messages.
//! - [`slot`]: Redis Cluster hash slots (CRC16 of the key or its `{hash tag}`).
//! - [`topology`]: a Redis Cluster's slot table (`CLUSTER SLOTS`) and its redirects
//!   (`MOVED`, `ASK`).
//! - [`rng`]: the seeded generator every random choice comes from.
//! - [`convert`]: every domain ↔ wire conversion, and the one check of each field a peer sends.
//! - [`plan`]: what a run plan is: classes, each shard's part, pacer, session.
//! - [`built`]: a run plan as a worker runs it: the checked wire plan with workloads built.
//! - [`trace`]: a replayed trace's requests as a shard holds them (`crest replay`, being
//!   built): the op table, a checked chunk, each request's RESP encoding.
//! - [`clock`]: Unix time as the protocol carries it.
//! - [`file`](mod@file): reading a file a user named, with a cap on its size.
//! - [`target`]: the target's address and the session every connection opens with (login,
//!   database), parsed from `host:port` or a `redis://` URI; passwords as [`Secret`](target::Secret)s.

pub mod built;
pub mod clock;
pub mod convert;
pub mod etc;
pub mod file;
pub mod hist;
pub mod plan;
pub mod rng;
pub mod schedule;
pub mod shapes;
pub mod slot;
pub mod stats;
pub mod target;
pub mod topology;
pub mod trace;
pub mod workload;
