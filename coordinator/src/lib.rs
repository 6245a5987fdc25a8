//! Crest's coordinator: plans a run, splits it across workers, merges their histograms
//! into one exact report ([`crest_report`] renders it), and the drivers that run it
//! several times (compare, search, suite) or relay it (relay).
//!
//! # Layers (a module may use modules of its own layer or below, never above)
//! 1. **Settings** — flags and profile files to a checked [`config::RunConfig`]:
//!    [`defaults`] (the one table of defaults), [`split`] (rate and connection splits that
//!    lose no remainder), [`control`] (the runtime-control vocabulary), [`config`] (the
//!    checked configuration), [`profile`] (rate profiles and profile files),
//!    [`trace_plan`] (what a replay is: its files, timing, keys, op table and window,
//!    checked before the run), [`cli`] (`crest run`'s and `crest replay`'s flags, layered
//!    over a profile).
//! 2. **The run** — one run from configuration to results, and what it publishes as it
//!    goes: [`admin`] (the admin HTTP API and Prometheus), [`service`] (the gRPC hub
//!    workers dial, TLS-sniffing accept loop, gRPC `Control`), [`server_stats`] (the
//!    target's `INFO` sampled at every interval boundary), [`output`] (the report's files
//!    in `--out`), [`merge`] (the books: each interval merged once every worker sent it,
//!    totals, per-worker books, timeline rows), [`progress`] (the live line),
//!    [`orchestrate`] (the lifecycle behind `run(config, listener, shutdown)` as phases:
//!    target, fleet (wait, clock offsets), prefill, measured phase (warm-up, collection
//!    with runtime steering, checkpoints and lost workers; each finalized row published on
//!    a `watch`), results), [`build`]
//!    (results → [`crest_report::Report`]), [`replay`] (a trace read, timed, partitioned
//!    and cut into chunks per shard within a window: `crest replay`).
//! 3. **Drivers** — commands built on whole runs: [`compare`] (targets under one plan
//!    and seed, runs interleaved; the shared runner `run_one`), [`search`] (the knee:
//!    climb, bisect, confirm), [`suite`] (valkey-benchmark's tests), [`relay`] (a tier
//!    between the coordinator and groups of workers), [`capture`] (a live server watched
//!    and written as a profile a run replays).
//!
//! `scripts/check-import-cycles.py` (in CI) fails on any import circle between files;
//! `ARCHITECTURE.md` draws the crates and a run's data flow.
//!
//! Data flow: `crest run` → [`config::RunConfig`] → [`orchestrate::run`] ⇄ [`service::Hub`] ⇄
//! workers → intervals → [`merge::RunBooks`] (→ [`output::Live`] files) →
//! [`orchestrate::RunResults`] → [`build::build()`] → [`crest_report::Report`] → stdout and
//! [`output::write_all`].

pub mod admin;
pub mod build;
pub mod capture;
pub mod cli;
pub mod compare;
pub mod config;
pub mod control;
pub mod defaults;
#[cfg(test)]
mod fake_resp;
pub mod merge;
pub mod orchestrate;
pub mod output;
pub mod profile;
pub mod progress;
pub mod relay;
pub mod replay;
pub mod schema;
pub mod search;
pub mod server_stats;
pub mod service;
pub mod split;
pub mod suite;
pub mod trace_plan;
