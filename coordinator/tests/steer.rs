//! Steering a running test (issue #11): runtime rate changes through the admin API, pause
//! and resume, the Prometheus export, checked against the server's own counts (`INFO`
//! sampled at every interval boundary) and the report.

use crate::support::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// One HTTP/1.1 request to the admin API on 127.0.0.1:`port`: (status, body).
pub(crate) fn http(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    // Chunked bodies (axum streams /metrics): drop the chunk-size lines.
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

fn dechunk(mut b: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = b.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        b = &rest[n + 2..];
    }
    out
}

/// `/status` once the admin API answers.
pub(crate) fn status(port: u16) -> Option<Value> {
    TcpStream::connect(("127.0.0.1", port)).ok()?;
    let (code, body) = http(port, "GET", "/status", "", None);
    (code == 200).then(|| serde_json::from_str(&body).unwrap())
}

/// Waits (at most 60 s) until the run's `/status` passes `ok`; returns it.
pub(crate) fn wait_status(port: u16, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = status(port)
            && ok(&s)
        {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "the run's status never got there"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the measured phase has run `secs` seconds.
pub(crate) fn running_for(port: u16, secs: f64) -> Value {
    wait_status(port, |s| {
        s["phase"] == "running" && f(s, "elapsed_s") >= secs
    })
}

fn server_rows(report: &Value) -> &Vec<Value> {
    report["server"]["intervals"].as_array().unwrap()
}

/// 5,000/s on two workers, switched to 12,000/s mid-run with `PUT /rate`: both workers'
/// shards switch at the change's instant (to the microsecond on one clock), the server's
/// own per-second counts follow within 5% from the first whole interval after it, and
/// the timeline's target follows the change.
#[test]
fn a_runtime_rate_change_switches_every_worker_at_one_instant() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("steer-rate");
    let port = free_port();
    let run = CrestRun::exactly(
        &dir,
        &[
            "run",
            "--target",
            &server.addr(),
            "--rate",
            "5000",
            "--duration",
            "8s",
            "--local-workers",
            "2",
            "--connections",
            "20",
            "--admin",
            &format!("127.0.0.1:{port}"),
        ],
    );
    let out = run.out();
    let mut p = run.spawn();
    running_for(port, 3.2);
    let (code, body) = http(port, "PUT", "/rate", "12000", None);
    assert_eq!(code, 200, "{body}");
    let change: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (f(&change, "from_rps"), f(&change, "to_rps")),
        (5000.0, 12000.0)
    );
    assert_eq!(
        p.wait(Duration::from_secs(60)),
        0,
        "{}",
        read_log(dir.path(), "crest", "stderr")
    );
    let report = read_report(&out);
    assert_balanced("steer", &report);
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let c = &changes[0];
    assert_eq!(
        (c["action"].as_str(), c["by"].as_str()),
        (Some("rate"), Some("admin"))
    );
    let at = f(c, "at_s");
    assert!(at > f(c, "asked_s"), "{c}");
    let workers = c["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "both workers report their switch: {c}");
    let firsts: Vec<f64> = workers.iter().map(|w| f(w, "first_s")).collect();
    for w in workers {
        for k in ["first_s", "last_s"] {
            assert!(
                (f(w, k) - at).abs() < 1e-3,
                "{k} of {w} vs the instant {at}"
            );
        }
    }
    assert!((firsts[0] - firsts[1]).abs() < 1e-3, "{firsts:?}");
    // The server's own count per second: 5,000 before the change, 12,000 from the first
    // whole interval after it.
    let timeline = report["timeline"].as_array().unwrap();
    let rows = server_rows(&report);
    assert_eq!(rows.len(), timeline.len());
    // A VM stall that holds requests past a second's end moves them into the next
    // second: a second off by more than 5% must be made up by a neighbour of the same
    // rate (the pair within 5% of twice the rate; CI once read 12,644/s in the last
    // second). The run's total is checked to 1% below.
    let want_at = |row: &Value| {
        let t0 = f(row, "t_s");
        if t0 + 1.0 <= at {
            Some(5000.0)
        } else if t0 >= at.ceil() {
            Some(12000.0)
        } else {
            None
        }
    };
    let per_s: Vec<(Option<f64>, f64)> = rows
        .iter()
        .map(|r| (want_at(r), f(r, "ops_per_sec")))
        .collect();
    let pair_holds = |a: usize, b: usize| match (per_s[a], per_s[b]) {
        ((Some(w), x), (Some(v), y)) if w == v => (x + y - 2.0 * w).abs() <= 0.05 * w,
        _ => false,
    };
    let mut checked = (0, 0);
    for (k, (row, p)) in rows.iter().zip(timeline).enumerate() {
        let t0 = f(row, "t_s");
        let (Some(want), ops) = per_s[k] else {
            continue;
        };
        if want == 5000.0 {
            checked.0 += 1;
        } else {
            checked.1 += 1;
        }
        assert!(row["sampled"].as_bool().unwrap(), "{row}");
        let made_up =
            (k + 1 < rows.len() && pair_holds(k, k + 1)) || (k > 0 && pair_holds(k - 1, k));
        assert!(
            (ops - want).abs() <= 0.05 * want || made_up,
            "t={t0}: the server counted {ops}/s, want {want}, not made up by a neighbour ({per_s:?})"
        );
        assert!(
            (f(p, "target_rate") - want).abs() < 1.0,
            "timeline target at {t0}: {p}"
        );
    }
    assert!(checked.0 >= 2 && checked.1 >= 3, "{checked:?}");
    // The report's target is what the run asked for: the change included.
    let asked = 5000.0 * at + 12000.0 * (8.0 - at);
    let target = f(&report["totals"], "target_rate");
    assert!(
        (target - asked / 8.0).abs() < 5.0,
        "{target} vs {}",
        asked / 8.0
    );
    let total = total_calls(&server);
    assert!(
        (total as f64 - asked).abs() < 0.01 * asked,
        "the server saw {total} requests, the run asked {asked:.0}"
    );
}

/// Pause and resume: nothing reaches the server in the seconds the pause covers, the
/// schedule after the resume starts where the plan is (no burst of the paused requests),
/// and the API refuses what does not apply now with a line that says what would.
#[test]
fn pause_and_resume_leave_a_flat_counter_and_no_burst() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("steer-pause");
    let port = free_port();
    let run = CrestRun::new(&dir).args(&[
        "--target",
        &server.addr(),
        "--rate",
        "4000",
        "--duration",
        "8s",
        "--admin",
        &format!("127.0.0.1:{port}"),
    ]);
    let out = run.out();
    let mut p = run.spawn();
    running_for(port, 1.5);
    let (code, body) = http(port, "PUT", "/rate?class=nope", "10", None);
    assert_eq!(code, 400);
    assert!(
        body.contains("no such class; the run's classes are default"),
        "{body}"
    );
    let (code, body) = http(port, "POST", "/pause", "", None);
    assert_eq!(code, 200, "{body}");
    let paused_at = f(&serde_json::from_str::<Value>(&body).unwrap(), "at_s");
    let (code, body) = http(port, "POST", "/pause", "", None);
    assert_eq!((code, body.trim()), (409, "already paused: POST /resume"));
    let (code, body) = http(port, "PUT", "/rate", "9000", None);
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("POST /resume first"), "{body}");
    let (code, body) = http(port, "PUT", "/rate", "lots", None);
    assert_eq!(code, 400);
    assert!(body.contains("requests per second"), "{body}");
    running_for(port, paused_at + 2.6);
    assert_eq!(wait_status(port, |_| true)["paused"], true);
    let (code, body) = http(port, "POST", "/resume", "", None);
    assert_eq!(code, 200, "{body}");
    let resumed_at = f(&serde_json::from_str::<Value>(&body).unwrap(), "at_s");
    assert_eq!(
        p.wait(Duration::from_secs(60)),
        0,
        "{}",
        read_log(dir.path(), "crest", "stderr")
    );
    let report = read_report(&out);
    assert_balanced("pause", &report);
    let timeline = report["timeline"].as_array().unwrap();
    let mut flat = 0;
    for (row, p) in server_rows(&report).iter().zip(timeline) {
        let t0 = f(row, "t_s");
        let ops = u(row, "ops");
        let due = f(p, "target_rate");
        // Each second schedules what the spliced profile asks, never more: no burst.
        let scheduled = u(p, "scheduled") as f64;
        assert!(
            (scheduled - due).abs() <= 2.0,
            "t={t0}: scheduled {scheduled}, due {due}"
        );
        if t0 >= paused_at && t0 + 1.0 <= resumed_at {
            flat += 1;
            assert_eq!(ops, 0, "t={t0}: the server counted {ops} during the pause");
            assert_eq!(due, 0.0);
        } else if t0 >= resumed_at.ceil() || t0 + 1.0 <= paused_at {
            assert!((ops as f64 - 4000.0).abs() <= 200.0, "t={t0}: {ops}");
        }
        assert!(ops as f64 <= 4000.0 * 1.05, "t={t0}: {ops}: a burst");
    }
    assert!(flat >= 1, "no whole second inside the pause");
    let changes = report["changes"].as_array().unwrap();
    let actions: Vec<&str> = changes
        .iter()
        .map(|c| c["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["pause", "resume"],
        "refused requests are not changes"
    );
}

/// `/metrics` during and after a run parses with the Prometheus project's own parser
/// (Python `prometheus_client`, OpenMetrics), and its final counters equal the report's.
#[test]
fn metrics_parse_with_prometheus_and_end_equal_to_the_report() {
    let dir = TempDir::new("steer-metrics");
    let port = free_port();
    let run = CrestRun::new(&dir).args(&[
        "--rate",
        "3000",
        "--duration",
        "3s",
        "--admin",
        &format!("127.0.0.1:{port}"),
        "--admin-linger",
        "4s",
    ]);
    let out = run.out();
    let mut p = run.spawn();
    running_for(port, 1.2);
    let live = parse_metrics(&http(port, "GET", "/metrics", "", None).1);
    assert!(
        sample(
            &live,
            "crest_requests_completed_total",
            &[("command", "GET")]
        ) > 0.0
    );
    wait_status(port, |s| s["phase"] == "done");
    let (code, text) = http(port, "GET", "/metrics", "", None);
    assert_eq!(code, 200);
    let m = parse_metrics(&text);
    assert_eq!(
        p.wait(Duration::from_secs(60)),
        0,
        "{}",
        read_log(dir.path(), "crest", "stderr")
    );
    let report = read_report(&out);
    let mut completed = 0.0;
    for cmd in ["GET", "SET"] {
        let r = &report["commands"][cmd];
        let l = [("command", cmd)];
        for (metric, key) in [
            ("crest_requests_completed_total", "completed"),
            ("crest_requests_scheduled_total", "scheduled"),
        ] {
            assert_eq!(
                sample(&m, metric, &l),
                u(r, key) as f64,
                "{metric} {cmd}: {r}"
            );
        }
        completed += u(r, "completed") as f64;
    }
    // The merged histogram: cumulative buckets, +Inf holding every reply.
    let count = sample(&m, "crest_latency_seconds_count", &[]);
    assert_eq!(count, completed);
    let buckets = m["crest_latency_seconds_bucket"].as_array().unwrap();
    let values: Vec<f64> = buckets.iter().map(|b| b[1].as_f64().unwrap()).collect();
    assert!(values.windows(2).all(|w| w[0] <= w[1]), "{values:?}");
    assert_eq!(*values.last().unwrap(), count);
    let p99 = sample(
        &m,
        "crest_interval_latency_seconds",
        &[("quantile", "0.99")],
    );
    assert!(p99 > 0.0 && p99 < 1.0, "{p99}");
}

/// Off loopback the admin API needs the run's token, and asks every request for it.
#[test]
fn the_admin_api_off_loopback_asks_for_the_token() {
    crest_fails(
        &["run", "--duration", "1s", "--admin", "0.0.0.0:7601"],
        "--admin \"0.0.0.0:7601\": off loopback the admin API asks every request for the run's token: give --token too",
    );
    let dir = TempDir::new("steer-token");
    let port = free_port();
    let run = CrestRun::new(&dir).args(&[
        "--rate",
        "1000",
        "--duration",
        "3s",
        "--token",
        "s3cret",
        "--admin",
        &format!("0.0.0.0:{port}"),
    ]);
    let mut p = run.spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut denied = None;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            denied = Some(http(port, "GET", "/status", "", None));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, body) = denied.expect("the admin API never listened");
    assert_eq!(code, 401);
    assert!(body.contains("Authorization: Bearer"), "{body}");
    assert_eq!(http(port, "GET", "/status", "", Some("wrong")).0, 401);
    assert_eq!(http(port, "GET", "/status", "", Some("s3cret")).0, 200);
    assert_eq!(p.wait(Duration::from_secs(60)), 0);
}

/// The samples of `text`, parsed by `prometheus_client`'s OpenMetrics parser: name →
/// [[labels, value], ...].
fn parse_metrics(text: &str) -> Value {
    let script = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.setdefault(s.name, []).append([s.labels, s.value])
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 (scripts/install-test-deps.sh installs prometheus_client)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "prometheus_client refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The value of the sample of `name` whose labels include `labels`, summed when several
/// match.
fn sample(m: &Value, name: &str, labels: &[(&str, &str)]) -> f64 {
    let rows = m[name]
        .as_array()
        .unwrap_or_else(|| panic!("no {name} in {m}"));
    rows.iter()
        .filter(|r| labels.iter().all(|(k, v)| r[0][*k] == *v))
        .map(|r| r[1].as_f64().unwrap())
        .sum()
}

/// The gRPC `Control` service on the workers' listener, behind the run's token: a rate
/// change applies, a bad one is refused by name, and a stop ends the run cleanly at its
/// instant (the worker drains and reports; the report is complete and its span ends
/// there; the server counted what the report says).
#[test]
fn grpc_control_changes_the_rate_and_stops_the_run_cleanly() {
    use crest_proto::pb::control_client::ControlClient;
    use crest_proto::pb::{ControlRequest, SetRateRequest};
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("steer-grpc");
    let listen = format!("127.0.0.1:{}", free_port());
    let admin = free_port();
    let out = dir.path().join("out");
    let mut args = coordinator_args(&listen, 1, "30s", &server.addr(), &out);
    args.extend(
        [
            "--rate",
            "2000",
            "--duration",
            "30s",
            "--token",
            "tok",
            "--admin",
            &format!("127.0.0.1:{admin}"),
        ]
        .map(String::from),
    );
    let mut coord = Proc::spawn(&crest_bin(), &strs(&args), dir.path(), "crest");
    let mut wargs = worker_args(&listen, 0);
    wargs.extend(["--token", "tok"].map(String::from));
    let _worker = Proc::spawn(&worker_bin(), &strs(&wargs), dir.path(), "worker");
    running_for(admin, 1.5);
    let tok = || ControlRequest {
        token: "tok".into(),
    };
    let rate = |rps: f64| SetRateRequest {
        token: "tok".into(),
        rps,
        class: String::new(),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (changed_at, stopped_at) = rt.block_on(async {
        let mut c = ControlClient::connect(format!("http://{listen}"))
            .await
            .unwrap();
        let e = c
            .status(ControlRequest {
                token: "nope".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e}");
        let e = c.set_rate(rate(-1.0)).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
        assert!(e.message().contains("≥ 0"), "{e}");
        let r = c.set_rate(rate(3000.0)).await.unwrap().into_inner();
        assert_eq!(
            (r.action.as_str(), r.from_rps, r.to_rps),
            ("rate", 2000.0, 3000.0)
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let st = c.status(tok()).await.unwrap().into_inner();
        let v: Value = serde_json::from_str(&st.json).unwrap();
        assert_eq!(v["rates"][0]["rate"], 3000.0, "{v}");
        let s = c.stop(tok()).await.unwrap().into_inner();
        assert_eq!((s.action.as_str(), s.to_rps), ("stop", 0.0));
        (r.at_s, s.at_s)
    });
    let report = finish(&dir, &mut coord, Duration::from_secs(60));
    assert_eq!(report["complete"], true, "{}", report["checks"]);
    assert_eq!(report["interrupted"], false);
    assert_eq!(report["stopped_by"], "grpc");
    assert!((f(&report, "duration_s") - stopped_at).abs() < 1e-6);
    assert_balanced("grpc", &report);
    let actions: Vec<&str> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["rate", "stop"]);
    let asked = 2000.0 * changed_at + 3000.0 * (stopped_at - changed_at);
    let scheduled = u(&report["totals"], "scheduled") as f64;
    assert!(
        (scheduled - asked).abs() <= 2.0,
        "scheduled {scheduled}, asked {asked:.1}"
    );
    assert_eq!(total_calls(&server), u(&report["totals"], "completed"));
}

/// `deploy/grafana/crest.json` is a dashboard model Grafana imports, and every query in it
/// asks for metrics, labels and label values that a real scrape of `/metrics` has (a run
/// with server errors, so the error counters have samples); a dashboard that asks for
/// something else is refused, naming it.
#[test]
fn the_grafana_dashboard_asks_for_what_metrics_serves() {
    // A real server: the server panels ask for its CPU, which the built-in target has not.
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("grafana");
    let port = free_port();
    let run = CrestRun::new(&dir).args(&[
        "--target",
        &server.addr(),
        "--rate",
        "2000",
        "--duration",
        "4s",
        // GET on a list: WRONGTYPE, so crest_request_errors_total has samples (ten keys:
        // every key is a list within the first few milliseconds).
        "--mix",
        "GET=1,LPUSH=1",
        "--keys",
        "10",
        "--admin",
        &format!("127.0.0.1:{port}"),
    ]);
    let mut p = run.spawn();
    running_for(port, 1.2);
    // The server's gauges come once the sampler has two samples, the error counter once
    // an interval with a WRONGTYPE is merged.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let text = loop {
        let (code, text) = http(port, "GET", "/metrics", "", None);
        assert_eq!(code, 200);
        if text.contains("crest_server_cpu_per_op_seconds")
            && text.contains("crest_request_errors_total{")
        {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no server gauges or no error samples: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let scrape = dir.path().join("metrics.txt");
    std::fs::write(&scrape, &text).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let check = |dashboard: &Path| {
        let o = std::process::Command::new("python3")
            .arg(root.join("scripts/check-grafana.py"))
            .arg(dashboard)
            .arg(&scrape)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let ours = root.join("deploy/grafana/crest.json");
    let (ok, out) = check(&ours);
    assert!(ok, "{out}");
    // A made-up metric, label and label value are each named.
    let bad = std::fs::read_to_string(&ours)
        .unwrap()
        .replace("\"crest_workers\"", "\"crest_worker_count\"")
        .replace("sum by (kind)", "sum by (reason)")
        .replace("quantile=\\\"0.999\\\"", "quantile=\\\"0.95\\\"");
    let bad_path = dir.path().join("bad.json");
    std::fs::write(&bad_path, bad).unwrap();
    let (ok, out) = check(&bad_path);
    assert!(!ok, "{out}");
    for needle in [
        "crest_worker_count is not in the scrape",
        "by (reason)",
        "quantile=\"0.95\"} matches no sample",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    assert_eq!(p.wait(Duration::from_secs(60)), 0);
}
