//! Crest's report as a library: what a run measured ([`Report`], `report.json`, read and
//! written through the same types), the rules that judge it, and every way it is shown.
//! Anyone can read, re-render or compare a saved `report.json` with it (`crest report`,
//! `crest compare`, a notebook or a CI dashboard); nothing here runs load or talks to a
//! worker.
//!
//! # Layout (each module may use only those listed before it)
//! - [`fmt`]: numbers as people read them (`2.50ms`, `1.2 MB`, `12,345`).
//! - [`server`]: the target's `INFO` parsed ([`server::info`]), samples → per-interval
//!   rows and the truth check ([`server::series`]): the report's `server` section.
//! - [`model`]: the report's types, [`SCHEMA_VERSION`] and how `report.json` is read back
//!   ([`Report::from_json`]).
//! - [`rules`]: the judgements on each interval (what bound it, why it was off pace).
//! - [`words`]: the sentences the summary and the page share.
//! - [`files`]: `timeline.csv` and `latency.hlog` lines.
//! - [`text`]: the terminal summary.
//! - [`html`]: the HTML toolkit (escaping, charts) and `report.html`.
//! - [`compare`]: A/B statistics over reports, and their table, JSON and page.
//!
//! Data flow: the coordinator builds a [`Report`] once from its books; [`text`], [`files`]
//! and [`html`] render it; [`Report::from_json`] reads it back for `crest report` and
//! [`compare`].

pub mod compare;
pub mod files;
pub mod fmt;
pub mod html;
pub mod model;
pub mod rules;
pub mod server;
pub mod text;
pub mod words;

pub use model::*;
