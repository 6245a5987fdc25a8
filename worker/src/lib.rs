//! Crest's load engine: pinned shards that send RESP requests on an open-loop schedule
//! and record latency in HDR histograms, plus the agent that takes runs from a coordinator.
//!
//! # Layout
//! - [`resp`]: RESP2 codec: zero-allocation reply scanner, request encoder, frames.
//! - [`schedule`]: rate profiles λ(t) and intended send times (uniform, Poisson).
//! - [`workload`]: command mix, keys, values and their encoding.
//! - [`shard`]: one pinned thread: connections, epoll loop, pacing, measurement.
//! - [`stats`], [`hist`]: per-command counts and HDR histograms that merge by addition.
//! - [`plan`]: the run plan, checked at the wire boundary.
//! - [`wire`]: results to and from protobuf.
//! - [`agent`]: session with the coordinator, dead man's switch, run lifecycle.
//! - [`cpus`]: which cores the shards run on.
//!
//! Data flow: coordinator → `StartRun` → [`agent`] → one [`shard`] thread per core →
//! `ShardEvent::Interval` each second → [`agent`] sums shards → `Interval` to the coordinator.

pub mod agent;
pub mod cpus;
pub mod hist;
pub mod keys;
pub mod plan;
pub mod resp;
pub mod rng;
pub mod schedule;
pub mod shard;
pub mod stats;
pub mod wire;
pub mod workload;
