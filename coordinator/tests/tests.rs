//! End-to-end tests: the real `crest` and `crest-worker` binaries against real Redis and
//! Valkey servers started here on free loopback ports, and the coordinator driven
//! in-process through its `run(config, listener, shutdown)` seam. Every number is checked
//! against the server's own `INFO commandstats`.
//!
//! One module per area; launchers and server helpers live in `support`.

// Tests: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod books;
mod bound;
mod browser;
mod builtin;
mod capture;
mod churn;
mod cli;
mod cluster;
mod compare;
mod control_tls;
mod failover;
mod failure;
mod hostile;
mod html;
mod inprocess;
mod live;
mod memcache_stats;
mod memcached;
mod netns;
mod redis_cluster;
mod relay;
mod replay;
mod replicas;
mod report;
mod resp3;
mod search;
mod server_stats;
mod slots;
mod steer;
mod suite;
mod support;
mod tls;
mod workload;
