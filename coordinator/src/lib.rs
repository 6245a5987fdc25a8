//! Crest's coordinator: plans a run, splits it across workers, merges their histograms
//! into one exact report.
//!
//! # Layout
//! - [`cli`]: `crest run` flags, merged with a profile file into a [`config::RunConfig`].
//! - [`config`]: the checked run configuration: classes, profiles, shapes.
//! - [`profile`]: rate profiles (`--stages`, TOML shapes) and profile files.
//! - [`split`]: rate and connection splits that lose no remainder.
//! - [`service`]: the gRPC hub workers dial; sessions become [`service::HubEvent`]s.
//! - [`orchestrate`]: the run lifecycle: wait, clock offsets, plan, start, collect, lost workers.
//! - [`merge`]: per-worker, per-command, per-interval results folded by histogram addition.
//! - [`html`]: `report.html`, one self-contained page with charts.
//! - [`report`]: `report.json` (schema in `docs/report.md`) and the terminal summary.
//! - [`progress`]: live progress once a second.
//!
//! Data flow: `crest run` → [`config::RunConfig`] → [`orchestrate::run`] ⇄ [`service::Hub`] ⇄
//! workers → intervals → [`merge::Books`] → [`report::Report`] → stdout and `report.json`.

pub mod cli;
pub mod config;
pub mod html;
pub mod merge;
pub mod orchestrate;
pub mod profile;
pub mod progress;
pub mod report;
pub mod service;
pub mod split;
