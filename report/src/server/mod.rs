//! The target's own figures: its `INFO` parsed ([`info`]), and the samples taken at every
//! interval boundary turned into the report's `server` section: per-interval rows, run
//! totals and the truth check of its command counts against the report's ([`series`]).
//! A memcached target's `stats` reply comes to the same snapshot, its truth check per
//! counter family ([`memcache`]). The sampling itself (a connection, a clock) is the
//! coordinator's.

pub mod info;
pub mod memcache;
pub mod series;

pub use series::{Series, ServerReport, ServerRow};
