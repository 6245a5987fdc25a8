//! Crest's load engine: pinned shards that send RESP requests on an open-loop schedule
//! and record latency in HDR histograms, plus the agent that takes runs from a coordinator.
//! The `crest-worker` binary is this crate's agent behind a command line.
//!
//! # Layout
//! - [`shard`]: one pinned thread: connections, epoll loop, pacing, measurement.
//! - [`agent`]: session with the coordinator, dead man's switch, run lifecycle.
//! - [`cpus`]: which cores the shards run on.
//!
//! Data flow: coordinator → `StartRun` → [`agent`] → one [`shard`] thread per core →
//! `ShardEvent::Interval` per interval → [`agent`] sums shards → `Interval` to the coordinator.
//! What a run is (plans, workloads, stats) comes from `crest-model`; the bytes on the
//! target's wire from `crest-resp`.

pub mod agent;
pub mod cpus;
pub mod shard;
