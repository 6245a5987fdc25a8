//! Test support shared by every crate's tests: real servers on free loopback ports with
//! their own counters (`INFO commandstats`; memcached's `stats`), processes and temporary folders cleaned up on
//! drop, and a test PKI. A dev-dependency only; nothing here is part of Crest.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

pub mod memcached;
pub mod net;
pub mod pki;
pub mod proc;
pub mod server;

pub use memcached::Memcached;
pub use net::free_port;
pub use pki::Pki;
pub use proc::{Proc, TempDir, proc_status_kb, wait_for_calls};
pub use server::{
    Kind, RedisCluster, Server, command, command_as, commandstats, find_on_path,
    parse_commandstats, parse_info, server_args, server_binary, total_calls,
};
