//! `crest compare` against real servers: an A/A comparison calls nothing, a target behind
//! a known added delay is called slower with the delay inside its interval, earlier
//! reports compare (one run each: no interval, said so), bad input is one line.

use crate::support::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The flags every compare here shares: short runs on one shard, a small prefilled
/// keyspace (every GET hits, memory steady from run to run).
const PLAN: [&str; 12] = [
    "--rate",
    "1000",
    "--duration",
    "1s",
    "--connections",
    "4",
    "--keys",
    "500",
    "--prefill",
    "--threads",
    "1",
    "--no-cluster",
];

fn compare(dir: &TempDir, args: &[&str], want: i32) -> (Value, String) {
    let out = dir.path().join("out");
    let mut all: Vec<&str> = vec!["compare"];
    all.extend_from_slice(args);
    let out_s = out.to_str().unwrap().to_string();
    all.extend_from_slice(&["--out", &out_s]);
    let mut p = Proc::spawn(&crest_bin(), &all, dir.path(), "crest");
    let code = p.wait(Duration::from_secs(240));
    let err = read_log(dir.path(), "crest", "stderr");
    assert_eq!(code, want, "crest {all:?} exited {code}: {err}");
    let stdout = read_log(dir.path(), "crest", "stdout");
    let path = out.join("compare.json");
    assert!(path.exists(), "no compare.json: {err}");
    (read_checked(&path, "Comparison"), stdout)
}

fn row<'a>(c: &'a Value, scope: &str, metric: &str) -> &'a Value {
    c["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["scope"] == scope && r["metric"] == metric)
        .unwrap_or_else(|| panic!("no row {scope} {metric} in {c}"))
}

/// The same server as A and B, 5 + 5 interleaved runs: no metric is called faster or
/// slower; the order is ABBA; every run's report is there and its server agrees; the
/// achieved rate is "no difference". The runs' reports then compare as earlier reports:
/// one each has no interval (said so), five each grouped by label give the same medians.
#[test]
fn an_a_a_comparison_calls_nothing_and_its_reports_compare_again() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("compare-aa");
    let a = format!("a={}", server.addr());
    let b = format!("b={}", server.addr());
    let mut args = vec!["--target", &a, "--target", &b, "--runs", "5"];
    args.extend_from_slice(&PLAN);
    let (c, stdout) = compare(&dir, &args, 0);
    assert_eq!(c["mode"], "runs");
    assert_eq!(c["runs_per_target"], serde_json::json!([5, 5]));
    let order: Vec<&str> = c["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(order, ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]);
    for r in c["rows"].as_array().unwrap() {
        // A metric whose runs vary too much is marked UNSTABLE beside any call (the
        // server's CPU per op on a busy 2-core machine once varied 41% and its two sides
        // separated by chance); a stable metric must never be called in an A/A.
        assert!(
            r["unstable"] == true || !matches!(r["verdict"].as_str(), Some("higher" | "lower")),
            "A/A called a difference: {r}\n{stdout}"
        );
        if r["unstable"] == true && matches!(r["verdict"].as_str(), Some("higher" | "lower")) {
            let words = r["words"].as_str().unwrap_or_default();
            assert!(words.contains("UNSTABLE"), "an unstable call says so: {r}");
        }
        // The interval holds the estimate; the p-value is a probability.
        let ci = r["ci"].as_array().unwrap();
        let d = r["delta"].as_f64().unwrap();
        assert!(
            ci[0].as_f64().unwrap() <= d && d <= ci[1].as_f64().unwrap(),
            "{r}"
        );
        let p = r["p_value"].as_f64().unwrap();
        assert!(p > 0.0 && p <= 1.0, "{r}");
        // Holm over the scope's metrics: a call needs at least p <= 0.05 / family size.
        assert!(r["callable"].is_boolean(), "{r}");
        if r["callable"] == true {
            assert!(p <= 0.05, "{r}");
        }
    }
    assert_eq!(
        row(&c, "default", "achieved_rate")["verdict"],
        "no_difference"
    );
    for m in ["p50", "p90", "p99", "p999"] {
        assert!(row(&c, "default", m)["values_a"].as_array().unwrap().len() == 5);
    }
    assert!(stdout.contains("B = b against A = a"), "{stdout}");
    // Every run wrote its report, and the server agrees with each.
    let runs = dir.path().join("out/runs");
    let mut reports: Vec<String> = Vec::new();
    for (i, label) in order.iter().enumerate() {
        let d = runs.join(format!("{:02}-{label}", i + 1));
        let r = read_report(&d);
        assert_eq!(r["checks"]["server_agrees"], true, "{}", d.display());
        assert_eq!(u(&r["totals"], "completed"), 1000);
        reports.push(format!("{label}={}", d.join("report.json").display()));
    }
    assert!(dir.path().join("out/compare.html").exists());

    // Two earlier reports, one each: shown without an interval, and said so.
    let d2 = TempDir::new("compare-files");
    let first = runs.join("01-a/report.json");
    let second = runs.join("02-b/report.json");
    let (c2, out2) = compare(&d2, &[first.to_str().unwrap(), second.to_str().unwrap()], 0);
    assert_eq!(c2["mode"], "reports");
    assert_eq!(row(&c2, "default", "p50")["verdict"], "no_interval");
    assert!(out2.contains("too few for a confidence interval"), "{out2}");
    // Ten reports under two labels: the live comparison's figures again.
    let d3 = TempDir::new("compare-grouped");
    let refs: Vec<&str> = reports.iter().map(String::as_str).collect();
    let (c3, _) = compare(&d3, &refs, 0);
    for m in ["p50", "p99", "achieved_rate", "used_memory"] {
        let scope = if m == "used_memory" {
            "server"
        } else {
            "default"
        };
        assert_eq!(
            row(&c3, scope, m)["median_a"],
            row(&c, scope, m)["median_a"],
            "{m}"
        );
        assert_eq!(row(&c3, scope, m)["ci"], row(&c, scope, m)["ci"], "{m}");
    }
}

/// A and B are the same server through the same relay code, B's holding every request
/// 1 ms: B's p50 is called slower, and the interval of the absolute p50 shift reaches
/// the added millisecond (±15%; the relay's own sleep overshoots by tens of µs). A
/// comparison whose runs disagree ("unstable") is run once more.
#[test]
fn a_delayed_target_is_called_slower_with_the_delay_in_its_interval() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("compare-delay");
    let (mut ra, a_addr) = delay_relay(&server.addr(), "0", "0", dir.path(), "relay-a");
    let (mut rb, b_addr) = delay_relay(&server.addr(), "1", "0", dir.path(), "relay-b");
    let a = format!("direct={a_addr}");
    let b = format!("delayed={b_addr}");
    let mut args = vec![
        "--target",
        &a,
        "--target",
        &b,
        "--runs",
        "5",
        "--no-server-stats",
    ];
    args.extend_from_slice(&PLAN);
    // When the runs themselves disagree, compare says so ("unstable") instead of calling
    // anything: that is its job, and it is what a stall of this VM gives (CI once: A's p50
    // from run to run with a CV of 80%, B's median 74 ms). Then, and only then, the whole
    // comparison is run once more.
    let (mut c, mut stdout) = compare(&dir, &args, 0);
    if row(&c, "default", "p50")["verdict"] == "unstable" {
        eprintln!("the runs disagreed; comparing again:\n{stdout}");
        let again = TempDir::new("compare-delay-again");
        (c, stdout) = compare(&again, &args, 0);
    }
    let _ = ra.kill();
    let _ = rb.kill();
    let p50 = row(&c, "default", "p50");
    assert_eq!(p50["verdict"], "higher", "{stdout}");
    assert_eq!(
        p50["callable"], true,
        "Holm lets a 1 ms delay be called: {p50}"
    );
    assert!(
        p50["words"].as_str().unwrap().starts_with("delayed slower"),
        "{p50}"
    );
    let ci = p50["shift_ci"].as_array().unwrap();
    let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
    assert!(
        lo <= 1150.0 && hi >= 850.0,
        "p50 shift CI [{lo}, {hi}] µs misses 1 ms ± 15%\n{stdout}"
    );
    assert!(lo > 500.0, "{lo}");
    assert_eq!(
        row(&c, "default", "achieved_rate")["verdict"],
        "no_difference",
        "{stdout}"
    );
    // --no-server-stats: no server rows.
    assert!(
        c["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["scope"] != "server")
    );
}

/// Bad input: one line naming what is wrong, exit 2, no load.
#[test]
fn bad_compare_input_is_one_line() {
    crest_fails(
        &["compare", "--target", "a=127.0.0.1:1"],
        "two or more targets",
    );
    crest_fails(
        &[
            "compare",
            "--target",
            "a=127.0.0.1:1",
            "--target",
            "a=127.0.0.1:2",
        ],
        "given twice",
    );
    crest_fails(
        &[
            "compare",
            "--target",
            "127.0.0.1:1",
            "--target",
            "127.0.0.1:2",
            "--runs",
            "0",
        ],
        "--runs 0",
    );
    crest_fails(
        &[
            "compare",
            "--target",
            "127.0.0.1:1",
            "--target",
            "127.0.0.1:2",
            "--min-effect",
            "150%",
        ],
        "from 0 to below 100",
    );
    crest_fails(
        &[
            "compare",
            "--target",
            "127.0.0.1:1",
            "--target",
            "127.0.0.1:2",
            "--rate",
            "-5",
        ],
        "--rate",
    );
    let dir = TempDir::new("compare-bad");
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"hello\": 1}").unwrap();
    let j = junk.to_str().unwrap();
    crest_fails(&["compare", j, j], "not a Crest report");
    crest_fails(
        &["compare", j, j, "--rate", "5"],
        "--rate: a compare of earlier reports makes no runs",
    );
    crest_fails(&["compare", j], "two or more reports");
    crest_fails(
        &["compare", "/nonexistent/report.json", j],
        "cannot read it",
    );
}

/// Reports with no class in common (two classes against `default`): the comparison says
/// so, naming both sides' classes, compares no class, and exits 1.
#[test]
fn reports_without_a_class_in_common_are_said_so() {
    let dir = TempDir::new("compare-classes");
    let profile = dir.path().join("two.toml");
    std::fs::write(
        &profile,
        "duration = \"1s\"\n[[class]]\nname = \"c0\"\nrate = 100\nconnections = 2\n[[class]]\nname = \"c1\"\nrate = 100\nconnections = 2\n",
    )
    .unwrap();
    let profile = profile.to_string_lossy().into_owned();
    let run = |name: &str, load: &[&str]| -> String {
        let out = dir.path().join(name);
        let out_s = out.to_string_lossy().into_owned();
        let mut args = vec!["run", "--threads", "1", "--out", &out_s];
        args.extend_from_slice(load);
        let done = Command::new(crest_bin())
            .args(&args)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.code(), Some(0), "{args:?}: {err}");
        format!("{name}={}", out.join("report.json").display())
    };
    let a = run("a", &["--profile", &profile]);
    let b = run(
        "b",
        &["--rate", "100", "--duration", "1s", "--connections", "2"],
    );
    let (c, stdout) = compare(&dir, &[&a, &b], 1);
    let want = "a and b have no class in common (a: c0, c1; b: default): no class's latency or rate is compared, only the server's figures; compare reports made with the same classes";
    assert!(
        c["warnings"].as_array().unwrap().iter().any(|w| w == want),
        "{}\n{stdout}",
        c["warnings"]
    );
    assert!(stdout.contains(want), "{stdout}");
    assert!(
        c["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["scope"] == "server"),
        "{}",
        c["rows"]
    );
}
