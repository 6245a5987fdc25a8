//! `report.html` and `compare.html` in a real browser (headless Chromium): a harness page
//! loads each into a frame and reads, from the rendered DOM, every chart's title, its
//! series, their point counts, hover titles and drawn size. Every chart must have data,
//! not just exist; a screenshot is taken and must not be blank.

use crate::support::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn chromium() -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|n| path.split(':').map(move |d| Path::new(d).join(n)))
        .find(|p| p.is_file())
}

const HARNESS: &str = r#"<!doctype html><html><body><iframe id="f" width="1100" height="4000"></iframe>
<script>
var f = document.getElementById('f');
f.onload = function () {
  var d = f.contentDocument, out = [];
  d.querySelectorAll('svg').forEach(function (svg) {
    var h = svg.previousElementSibling, series = [];
    svg.querySelectorAll('g.series').forEach(function (g) {
      var bb = g.getBBox();
      series.push({name: g.getAttribute('data-series'),
                   points: +g.getAttribute('data-points'),
                   circles: g.querySelectorAll('circle').length,
                   titles: g.querySelectorAll('circle > title').length,
                   lines: g.querySelectorAll('polyline').length,
                   width: bb.width, height: bb.height});
    });
    out.push({title: h ? h.textContent : '', series: series});
  });
  var pre = document.createElement('pre');
  pre.id = 'result';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
};
f.src = 'PAGE';
</script></body></html>"#;

/// The charts of `page` as Chromium rendered them: [(title, [series])].
fn charts(page: &Path, dir: &Path) -> Vec<Value> {
    let Some(bin) = chromium() else {
        panic!("chromium is not installed: ./scripts/install-test-deps.sh installs it");
    };
    let harness = dir.join("harness.html");
    let url = format!("file://{}", page.display());
    std::fs::write(&harness, HARNESS.replace("PAGE", &url)).unwrap();
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--allow-file-access-from-files",
        "--virtual-time-budget=10000",
    ];
    let out = run_bounded(
        Command::new(&bin)
            .args(common)
            .arg("--dump-dom")
            .arg(format!("file://{}", harness.display())),
    );
    let dom = String::from_utf8_lossy(&out);
    let start = dom
        .find("<pre id=\"result\">")
        .unwrap_or_else(|| panic!("the harness found no result: {dom}"))
        + "<pre id=\"result\">".len();
    let end = dom[start..].find("</pre>").unwrap() + start;
    let text = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&");
    // A screenshot of the page itself: a rendered page is not a blank image.
    let shot = dir.join(format!(
        "{}.png",
        page.file_stem().unwrap().to_str().unwrap()
    ));
    run_bounded(
        Command::new(&bin)
            .args(common)
            .arg(format!("--screenshot={}", shot.display()))
            .arg("--window-size=1100,3000")
            .arg(&url),
    );
    let png =
        std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot {}: {e}", shot.display()));
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    assert!(
        png.len() > 20_000,
        "the screenshot is nearly empty: {} bytes",
        png.len()
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    v.as_array().unwrap().clone()
}

/// Runs a browser command, killed after 60 s; returns its stdout.
fn run_bounded(cmd: &mut Command) -> Vec<u8> {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let guard = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        // SAFETY: kill(2) on a pid we started; harmless if it already exited.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    });
    let out = child.wait_with_output().unwrap();
    drop(guard);
    assert!(out.status.success(), "browser failed: {:?}", out.status);
    out.stdout
}

/// Every chart has at least one series, every series is drawn (points, a line or dots of
/// non-zero size) and, below the hover cap, has a hover title per point.
fn assert_drawn(charts: &[Value], page: &str) {
    assert!(!charts.is_empty(), "{page}: no charts");
    for c in charts {
        let title = c["title"].as_str().unwrap();
        let series = c["series"].as_array().unwrap();
        assert!(!series.is_empty(), "{page}: chart {title:?} has no series");
        for s in series {
            let points = s["points"].as_u64().unwrap();
            assert!(points > 0, "{page}: {title:?} {s}");
            assert!(
                s["width"].as_f64().unwrap() > 0.0,
                "{page}: {title:?} {s} not drawn"
            );
            assert_eq!(
                s["titles"].as_u64().unwrap(),
                points,
                "{page}: {title:?} {s}"
            );
        }
    }
}

fn titled<'a>(charts: &'a [Value], needle: &str) -> Vec<&'a Value> {
    charts
        .iter()
        .filter(|c| c["title"].as_str().unwrap().contains(needle))
        .collect()
}

fn names(c: &Value) -> Vec<String> {
    c["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

/// A run against a real server: rate, latency, the class's percentile distribution
/// (latency, service time, schedule lag), generator, and the server's charts.
#[test]
fn a_runs_page_has_every_chart_with_data() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("html-run");
    let run = CrestRun::new(&dir).args(&[
        "--target",
        &server.addr(),
        "--rate",
        "2000",
        "--duration",
        "3s",
        "--connections",
        "4",
    ]);
    let out = run.out();
    run.run(0);
    let charts = charts(&out.join("report.html"), dir.path());
    assert_drawn(&charts, "report.html");
    let rate = titled(&charts, "Rate per second");
    assert_eq!(names(rate[0]), ["target", "achieved"]);
    assert_eq!(rate[0]["series"][1]["points"], 3);
    let dist = titled(&charts, "Latency distribution, class default");
    assert_eq!(dist.len(), 1);
    assert_eq!(names(dist[0]), ["latency", "service time", "schedule lag"]);
    // 6,000 samples: the curve reaches 1/(1−p) = 10^3.7, 10 points a decade.
    assert!(dist[0]["series"][0]["points"].as_u64().unwrap() >= 30);
    let ops = titled(&charts, "Server: commands per second");
    assert_eq!(ops.len(), 1);
    let mut series = names(ops[0]);
    series.sort();
    assert_eq!(series, ["client completed/s", "get", "server ops/s", "set"]);
    // Two commands: their curves side by side, five percentiles each.
    let by_command = titled(&charts, "Latency by command, class default");
    assert_eq!(names(by_command[0]), ["GET", "SET"]);
    assert_eq!(by_command[0]["series"][0]["points"], 5);
    assert_eq!(titled(&charts, "Server CPU per op").len(), 1);
    assert_eq!(titled(&charts, "Server memory").len(), 1);
}

/// A profile with two classes: one distribution per class.
#[test]
fn a_multi_class_page_has_a_distribution_per_class() {
    let dir = TempDir::new("html-classes");
    let profile = dir.path().join("two.toml");
    std::fs::write(
        &profile,
        "duration = \"2s\"\n[[class]]\nname = \"small\"\nrate = 1000\nvalues = { size = 32 }\n[[class]]\nname = \"big\"\nrate = 200\nvalues = { size = 4096 }\nconnections = 2\n",
    )
    .unwrap();
    let run = CrestRun::new(&dir).args(&["--profile", profile.to_str().unwrap()]);
    let out = run.out();
    run.run(0);
    let charts = charts(&out.join("report.html"), dir.path());
    assert_drawn(&charts, "report.html");
    assert_eq!(
        titled(&charts, "Latency distribution, class small").len(),
        1
    );
    assert_eq!(titled(&charts, "Latency distribution, class big").len(), 1);
}

/// compare.html overlays the targets' curves: one series per target.
#[test]
fn a_compare_page_overlays_the_targets() {
    let dir = TempDir::new("html-compare");
    let mut reports = Vec::new();
    for (label, rate) in [("slow", "500"), ("fast", "1000")] {
        let d = TempDir::new(&format!("html-compare-{label}"));
        let run = CrestRun::new(&d).args(&["--rate", rate, "--duration", "1s"]);
        let out = run.out();
        run.run(0);
        let keep = dir.path().join(format!("{label}.json"));
        std::fs::copy(out.join("report.json"), &keep).unwrap();
        reports.push(format!("{label}={}", keep.display()));
    }
    let out = dir.path().join("cmp");
    let mut p = Proc::spawn(
        &crest_bin(),
        &[
            "compare",
            &reports[0],
            &reports[1],
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
        "crest",
    );
    assert_eq!(
        p.wait(Duration::from_secs(60)),
        0,
        "{}",
        read_log(dir.path(), "crest", "stderr")
    );
    let charts = charts(&out.join("compare.html"), dir.path());
    assert_drawn(&charts, "compare.html");
    let dist = titled(&charts, "Latency distribution, default");
    assert_eq!(dist.len(), 1);
    assert_eq!(names(dist[0]), ["slow", "fast"]);
}

/// `crest search`'s page: the hockey stick, latency against the offered rate, one point
/// per window and the SLO's line.
#[test]
fn a_search_page_draws_the_hockey_stick() {
    let dir = TempDir::new("html-search");
    let out = dir.path().join("out");
    let mut p = Proc::spawn(
        &crest_bin(),
        &[
            "search",
            // A page test: nothing here may turn on the machine's noise.
            "--lag-limit",
            "1s",
            "--slo",
            "p99<=50ms",
            "--min",
            "1000",
            "--max",
            "4000",
            "--probe-window",
            "1s",
            "--window",
            "1s",
            "--warmup",
            "500ms",
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
        "crest",
    );
    assert_eq!(
        p.wait(Duration::from_secs(120)),
        0,
        "{}",
        read_log(dir.path(), "crest", "stderr")
    );
    let s: Value = read_checked(&out.join("search.json"), "Search");
    let windows = s["probes"].as_array().unwrap().len() as u64;
    assert_eq!(f(&s, "knee_rps"), 4000.0, "{s}");
    let c = charts(&out.join("report.html"), dir.path());
    assert_drawn(&c, "report.html");
    let stick = titled(&c, "hockey stick");
    assert_eq!(stick.len(), 1, "{c:?}");
    assert_eq!(names(stick[0]), ["p50", "p99", "p99.9", "SLO p99<=50.00ms"]);
    for series in stick[0]["series"].as_array().unwrap() {
        assert_eq!(series["points"].as_u64().unwrap(), windows, "{series}");
    }
}
