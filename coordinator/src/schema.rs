//! The published schema of what Crest writes: `report.json` (a run), `compare.json`,
//! `search.json` and `suite.json`, as one JSON Schema (2020-12) document generated from
//! their types (`docs/report.schema.json`). Each file's shape is a `$defs` entry (`Report`,
//! `Comparison`, `Search`, `SuiteFile`) and the root accepts any of them. A test keeps the checked-in
//! file current; the end-to-end tests validate every file they read against it.

use schemars::SchemaGenerator;
use serde_json::{Value, json};

/// Where the schema is checked in, from the workspace root.
pub const PATH: &str = "docs/report.schema.json";

/// The schema document, as written to [`PATH`] (pretty, with a final newline).
pub fn document() -> String {
    let mut generator = SchemaGenerator::default();
    let roots = [
        generator.subschema_for::<crest_report::Report>(),
        generator.subschema_for::<crest_report::compare::Comparison>(),
        generator.subschema_for::<crate::search::Search>(),
        generator.subschema_for::<crate::suite::SuiteFile>(),
    ];
    let defs = generator.take_definitions(true);
    let doc = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://crest.invalid/report.schema.json",
        "title": "Crest's JSON files",
        "description": "report.json (a run: $defs/Report), compare.json ($defs/Comparison), search.json ($defs/Search) and suite.json ($defs/SuiteFile), as `crest` writes them. Generated from the report types: do not edit by hand (`cargo test -p crest --lib schema` says how to refresh it).",
        "anyOf": roots.iter().map(|s| s.as_value().clone()).collect::<Vec<Value>>(),
        "$defs": defs,
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    /// `docs/report.schema.json` is what the types say now; `CREST_UPDATE_SCHEMA=1`
    /// rewrites it.
    #[test]
    fn the_checked_in_schema_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(super::PATH);
        let now = super::document();
        if std::env::var_os("CREST_UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &now).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == now,
            "{} is not what the report types say: run CREST_UPDATE_SCHEMA=1 cargo test -p crest --lib schema, and commit it",
            super::PATH
        );
        let doc: serde_json::Value = serde_json::from_str(&now).unwrap();
        for def in ["Report", "Comparison", "Search", "SuiteFile"] {
            assert!(doc["$defs"][def].is_object(), "{def}");
        }
    }
}
