//! `crest report`: a saved report.json renders to the same summary, report.html and
//! timeline.csv as the run wrote; a report this build cannot read is refused in one line.

use crate::support::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `crest report FILE --out DIR`: (stdout, exit code).
fn rerender(report: &Path, out: &Path) -> (String, i32) {
    let o = Command::new(crest_bin())
        .args([
            "report",
            report.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    (
        String::from_utf8(o.stdout).unwrap(),
        o.status.code().unwrap_or(-1),
    )
}

/// Runs `crest` to the end (exit 0) and checks that `crest report` renders its report.json
/// to what the run printed and wrote, byte for byte.
fn round_trip(tag: &str, run_args: &[&str]) -> serde_json::Value {
    let dir = TempDir::new(tag);
    let out = dir.path().join("out");
    let mut args = vec!["run"];
    args.extend_from_slice(run_args);
    args.extend_from_slice(&["--threads", "1", "--out", out.to_str().unwrap()]);
    let mut p = Proc::spawn(&crest_bin(), &args, dir.path(), "crest");
    assert_eq!(
        p.wait(Duration::from_secs(120)),
        0,
        "{}",
        read_log(dir.path(), "crest", "stderr")
    );
    let printed = read_log(dir.path(), "crest", "stdout");
    let again = dir.path().join("again");
    let (summary, code) = rerender(&out.join("report.json"), &again);
    assert_eq!(code, 0);
    assert_eq!(summary, printed, "the summary re-rendered");
    for f in ["report.html", "timeline.csv"] {
        let a = std::fs::read_to_string(out.join(f)).unwrap();
        let b = std::fs::read_to_string(again.join(f)).unwrap();
        assert!(
            a == b,
            "{f} re-rendered differs ({} vs {} bytes)",
            a.len(),
            b.len()
        );
    }
    read_report(&out)
}

/// Several classes, server stats, a warm-up: everything the page and summary show.
#[test]
fn a_report_with_classes_and_server_stats_renders_again_the_same() {
    let server = Server::start(Kind::Redis);
    let profile = r#"
duration = "2s"
warmup = "500ms"
seed = 7
[[class]]
name = "small"
rate = 1500
mix = { GET = 10, SET = 1 }
[[class]]
name = "big"
rate = 300
values = { size = 4096 }
mix = { SET = 1, HSET = 1 }
"#;
    let dir = TempDir::new("report-profile");
    let file = dir.path().join("p.toml");
    std::fs::write(&file, profile).unwrap();
    let addr = server.addr();
    let report = round_trip(
        "report-classes",
        &["--target", &addr, "--profile", file.to_str().unwrap()],
    );
    assert_eq!(report["classes"].as_object().unwrap().len(), 2);
    assert_eq!(report["server_stats"], "on");
    assert!(report["server"]["intervals"].as_array().unwrap().len() >= 2);
}

/// Checkpoints (closed loop, `--probe`): their table and page section come back too.
#[test]
fn a_report_with_checkpoints_renders_again_the_same() {
    let server = Server::start(Kind::Redis);
    let addr = server.addr();
    let report = round_trip(
        "report-checkpoints",
        &[
            "--target",
            &addr,
            "--rate",
            "max",
            "--requests",
            "3000",
            "--checkpoint-every",
            "1000",
            "--command",
            "ZADD growth __score__ __member__",
            "--probe",
            "ZCARD growth",
        ],
    );
    assert_eq!(report["checkpoints"].as_array().unwrap().len(), 3);
}

/// A newer schema, a missing key, not JSON, no file: one line each, exit 2.
#[test]
fn a_report_this_build_cannot_read_is_refused_in_one_line() {
    let dir = TempDir::new("report-bad");
    let crest = CrestRun::new(&dir).args(&["--rate", "500", "--duration", "1s"]);
    let out = crest.out();
    crest.run(0);
    let text = std::fs::read_to_string(out.join("report.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let bad = |name: &str, v: &serde_json::Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
        p
    };
    v["schema_version"] = 99.into();
    let newer = bad("newer.json", &v);
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["totals"].as_object_mut().unwrap().remove("in_flight");
    let missing = bad("missing.json", &v);
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"schema_version\": 2, \"nope\"").unwrap();
    for (file, needle) in [
        (newer.to_str().unwrap(), "schema_version 99 is newer"),
        (missing.to_str().unwrap(), "missing field `in_flight`"),
        (junk.to_str().unwrap(), "not JSON"),
        ("/nonexistent/report.json", "cannot read it"),
    ] {
        let line = crest_fails(&["report", file], needle);
        assert_eq!(line.trim_end().lines().count(), 1, "{line}");
    }
}

/// The schema check that every test's report goes through can fail: a report missing its
/// required keys, or percentiles that are not numbers, are refused naming the place.
#[test]
fn the_schema_check_refuses_a_report_that_does_not_fit() {
    let dir = TempDir::new("schema-refuses");
    for (name, def, body, needle) in [
        (
            "empty.json",
            "Report",
            "{}",
            "'schema_version' is a required property",
        ),
        (
            "typed.json",
            "Percentiles",
            r#"{"p50": "fast", "p90": 1, "p99": 1, "p999": 1, "p9999": 1, "max": 1, "mean": 1}"#,
            "p50: 'fast' is not of type 'number'",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let refused = std::panic::catch_unwind(|| read_checked(&path, def))
            .expect_err("a report that does not fit is refused");
        let why = refused
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(why.contains(needle), "{why}");
    }
}
