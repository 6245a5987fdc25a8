//! Crest's coordinator: plans a run, splits it across workers, merges their histograms
//! into one exact report.
//!
//! # Layout
//! - [`admin`]: the admin HTTP API (`--admin`): Prometheus `/metrics` merged across
//!   workers, `/status`, and runtime control (`PUT /rate`, pause, resume, stop).
//! - [`cli`]: `crest run` flags, merged with a profile file into a [`config::RunConfig`].
//! - [`defaults`]: the one table of defaults that code, `--help` and the README read.
//! - [`config`]: the checked run configuration: classes, profiles, shapes.
//! - [`profile`]: rate profiles (`--stages`, TOML shapes) and profile files.
//! - [`split`]: rate and connection splits that lose no remainder.
//! - [`service`]: the gRPC hub workers dial, behind an accept loop that serves TLS
//!   (`--control-cert`) or plaintext and refuses a client of the other kind in one line;
//!   sessions become [`service::HubEvent`]s.
//! - [`orchestrate`]: the run lifecycle behind `run(config, listener, shutdown)`: wait, clock
//!   offsets, plan, start, collect, lost workers.
//! - [`merge`]: the books kept as the run goes: each interval merged once every worker sent
//!   it (pending ones capped), run totals, per-worker books, timeline rows.
//! - [`report`]: the report built once from results, and its renderers (table, JSON, CSV, hlog, HTML).
//! - [`output`]: the report's files in `--out`: `timeline.csv` and `latency.hlog` as the run
//!   goes, `report.json` and `report.html` atomically at the end.
//! - [`progress`]: live progress once a second.
//! - [`server_stats`]: the target's `INFO` sampled at every interval boundary on the
//!   coordinator's own connection, per-interval deltas, and the truth check of the
//!   server's command counts against the report's.
//! - [`compare`]: `crest compare`: targets under one plan and seed, runs interleaved, or
//!   earlier reports; per metric an exact Mann–Whitney interval over runs and a verdict.
//! - [`search`]: `crest search`: the knee, the highest rate that holds the SLOs (climb,
//!   bisect, confirm; windows judged on their exact merged histograms; a generator-bound
//!   window stops it as the clients' limit), `search.json` and the hockey stick.
//! - [`relay`]: `crest relay`, a tier between the coordinator and groups of workers
//!   (upstream one worker with their shards, downstream a coordinator): plans split down,
//!   results summed exactly on the way up.
//! - [`suite`]: `crest suite`: valkey-benchmark's default tests, its commands and output
//!   formats, each test a whole run.
//!
//! Data flow: `crest run` → [`config::RunConfig`] → [`orchestrate::run`] ⇄ [`service::Hub`] ⇄
//! workers → intervals → [`merge::RunBooks`] (→ [`output::Live`] files) →
//! [`orchestrate::RunResults`] → [`build::build()`] → [`report::Report`] → stdout and
//! [`output::write_all`].

pub mod admin;
pub mod build;
pub mod cli;
pub mod compare;
pub mod config;
pub mod defaults;
pub mod merge;
pub mod orchestrate;
pub mod output;
pub mod profile;
pub mod progress;
pub mod relay;
pub mod search;
pub mod server_stats;
pub mod service;
pub mod split;
pub mod suite;
