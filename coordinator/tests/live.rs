//! The live page (`GET /` on `--admin`) in headless Chromium during real runs against
//! Valkey: its charts fill as the run goes, it agrees with `/status`, it steers the run
//! with a token typed into it (and is refused without one), and it shows the report at the
//! end; and its feed (`GET /events`) serves twenty viewers of a relay tier's run, one of
//! which stops reading, without slowing the run or losing an interval.

use crate::browser::Browser;
use crate::steer::{http, wait_status};
use crate::support::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Every chart's series on the page: (chart id, series, points).
const SERIES: &str = "JSON.stringify(Array.from(document.querySelectorAll('g.series')).map(function (g) { return [g.closest('div').id, g.getAttribute('data-series'), +g.getAttribute('data-points')]; }))";

fn series(page: &mut crate::browser::Page) -> Vec<(String, String, u64)> {
    let v: Value = serde_json::from_str(page.eval(SERIES).as_str().unwrap()).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s[0].as_str().unwrap().to_string(),
                s[1].as_str().unwrap().to_string(),
                s[2].as_u64().unwrap(),
            )
        })
        .collect()
}

/// The page's answer line once it is not "…".
fn answer(page: &mut crate::browser::Page) -> String {
    page.wait(
        "document.getElementById('answer').textContent.length > 1",
        Duration::from_secs(20),
    );
    page.eval("document.getElementById('answer').textContent")
        .as_str()
        .unwrap()
        .to_string()
}

fn png_ok(png: &[u8], what: &str) {
    assert!(png.starts_with(b"\x89PNG"), "{what}: not a PNG");
    assert!(
        png.len() > 20_000,
        "{what}: the screenshot is nearly empty: {} bytes",
        png.len()
    );
}

/// Two workers at 3,000/s; the admin API bound off loopback with a token, so the page
/// must be given it. Read twice: every series has points and more the second time; the
/// page's achieved rate is `/status`'s; its controls are refused without the token; a
/// rate change made from it (token typed in) reaches the server's per-second count and
/// the report's changes; once the run is over it shows report.html.
#[test]
fn the_live_page_draws_the_run_and_steers_it_with_the_typed_token() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("live-page");
    let port = free_port();
    let run = CrestRun::exactly(
        &dir,
        &[
            "run",
            "--target",
            &server.addr(),
            "--rate",
            "3000",
            "--duration",
            "12s",
            "--interval",
            "250ms",
            "--local-workers",
            "2",
            "--token",
            "s3cret",
            "--admin",
            &format!("0.0.0.0:{port}"),
            // Long enough for the page to fetch the report; the run exits after it.
            "--admin-linger",
            "6s",
        ],
    );
    let out = run.out();
    let mut p = run.spawn();
    let browser = Browser::start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the admin API never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut page = browser.open(&format!("http://127.0.0.1:{port}/"));
    // Without the token: no data, and the controls are refused.
    page.wait(
        "document.getElementById('phase').textContent === 'needs the token'",
        Duration::from_secs(30),
    );
    page.eval("document.getElementById('pause').click()");
    let refused = answer(&mut page);
    assert!(refused.starts_with("refused (401)"), "{refused}");
    assert!(refused.contains("Authorization: Bearer"), "{refused}");
    // The token typed in: the feed flows.
    page.eval("document.getElementById('token').value = 's3cret'; document.getElementById('use-token').click()");
    page.wait(
        "+document.body.getAttribute('data-points') >= 8",
        Duration::from_secs(60),
    );
    let first = series(&mut page);
    // Read again once the page has more points (a wait with a deadline, not a timing).
    let drawn = first.iter().map(|s| s.2).max().unwrap_or(0);
    page.wait(
        &format!("+document.body.getAttribute('data-points') > {drawn}"),
        Duration::from_secs(30),
    );
    let second = series(&mut page);
    let names: BTreeSet<_> = first.iter().map(|s| (s.0.as_str(), s.1.as_str())).collect();
    for want in [
        ("c-rate", "target"),
        ("c-rate", "achieved"),
        ("c-rate", "server ops"),
        ("c-latency", "p50"),
        ("c-latency", "p99.99"),
        ("c-lag", "lag p99"),
        ("c-errors", "errors"),
    ] {
        assert!(names.contains(&want), "{want:?} not in {first:?}");
    }
    for (a, b) in first.iter().zip(&second) {
        assert_eq!((&a.0, &a.1), (&b.0, &b.1));
        assert!(a.2 > 0, "{a:?} has no points");
        assert!(b.2 > a.2, "{a:?} did not grow: {b:?}");
    }
    // The page's last interval is /status's: compared when both show the same one.
    let mut agreed = false;
    for _ in 0..50 {
        let (code, body) = http(port, "GET", "/status", "", Some("s3cret"));
        assert_eq!(code, 200);
        let status: Value = serde_json::from_str(&body).unwrap();
        let last = &status["last_interval"];
        let on_page = page.eval(
            "(function () { var a = document.getElementById('achieved'); return JSON.stringify([+a.getAttribute('data-t'), +a.getAttribute('data-value')]); })()",
        );
        let on_page: Value = serde_json::from_str(on_page.as_str().unwrap()).unwrap();
        if on_page[0].as_f64() == last["t_s"].as_f64() {
            assert_eq!(
                on_page[1].as_f64().unwrap(),
                f(last, "achieved_rate"),
                "{on_page} vs {status}"
            );
            agreed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    assert!(
        agreed,
        "the page and /status never showed the same interval"
    );
    png_ok(&page.screenshot(), "the live page");
    // A rate change from the page.
    page.eval("document.getElementById('rate').value = '6000'; document.getElementById('set-rate').click()");
    let said = answer(&mut page);
    assert!(said.starts_with("rate in force at"), "{said}");
    assert!(said.ends_with("6,000/s"), "{said}");
    // The end: the page shows the report.
    page.wait("document.title === 'Crest report'", Duration::from_secs(60));
    let h1 = page.eval("document.querySelector('h1').textContent");
    assert!(h1.as_str().unwrap().starts_with("Crest run "), "{h1}");
    png_ok(&page.screenshot(), "the report shown by the live page");
    assert_eq!(p.wait(Duration::from_secs(60)), 0);
    let report = read_report(&out);
    assert_balanced("live", &report);
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["by"], "admin");
    assert_eq!(f(&changes[0], "to_rps"), 6000.0);
    let at = f(&changes[0], "at_s");
    // The server's own per-interval counts follow: every whole interval after the change
    // at 6,000/s (within 10%: a count, not a timing).
    let rows: Vec<&Value> = report["server"]["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| f(r, "t_s") >= at + 0.25 && f(r, "t_s") + 0.25 <= 12.0)
        .collect();
    assert!(rows.len() >= 4, "{rows:?}");
    for r in rows {
        let per_s = f(r, "ops_per_sec");
        assert!((per_s - 6000.0).abs() < 600.0, "{r}");
    }
}

/// Reads one viewer's frames until `end` or `limit`; returns (the interval starts it saw
/// in hello and point frames, frames by event).
fn read_feed(mut s: TcpStream, limit: Duration) -> (BTreeSet<u64>, Vec<String>) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let deadline = Instant::now() + limit;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    let mut seen = BTreeSet::new();
    let mut events = Vec::new();
    let mut at = 0;
    while Instant::now() < deadline {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => break,
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        while let Some(i) = text[at..].find("\n\n") {
            let block = &text[at..at + i];
            at += i + 2;
            let Some(ev) = block
                .lines()
                .find_map(|l| l.rsplit_once("event: ").map(|x| x.1))
            else {
                continue;
            };
            events.push(ev.to_string());
            let data = block
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("{}");
            let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
            let mut keep = |p: &Value| {
                // Interval starts in ms (points are 100 ms apart).
                seen.insert((f(p, "t") * 1000.0).round() as u64);
            };
            match ev {
                "hello" => v["points"].as_array().unwrap().iter().for_each(&mut keep),
                "point" => keep(&v),
                _ => {}
            }
            if ev == "end" {
                return (seen, events);
            }
        }
    }
    (seen, events)
}

/// A coordinator and a relay of two workers at 2,000/s, 100 ms intervals, with twenty
/// viewers of the feed and one more that asks and never reads (a 4 KB receive buffer):
/// every reading viewer sees every interval and the end; the run keeps its schedule
/// (every request scheduled is sent and answered) and the coordinator's memory stays
/// bounded.
#[test]
fn twenty_viewers_of_a_relay_tier_and_one_that_stops_reading_do_not_slow_the_run() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("live-viewers");
    let port = free_port();
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = coordinator_args(&listen, 1, "30s", &server.addr(), &dir.path().join("out"));
    args.extend(
        [
            "--duration",
            "8s",
            "--interval",
            "100ms",
            "--admin",
            &format!("127.0.0.1:{port}"),
            "--rate",
            "2000",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut coord = Proc::spawn(&crest_bin(), &strs(&args), dir.path(), "crest");
    let (_relay, _workers) = crate::relay::start_relay(&dir, &listen, "r", 2);
    wait_status(port, |s| s["phase"] == "running");
    let open = |rcvbuf: Option<i32>| {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        if let Some(size) = rcvbuf {
            use std::os::fd::AsRawFd;
            // SAFETY: setsockopt on a socket this test owns.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVBUF,
                    (&raw const size).cast(),
                    std::mem::size_of::<i32>() as u32,
                );
            }
        }
        let mut w = s.try_clone().unwrap();
        write!(
            w,
            "GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        s
    };
    // The one that never reads.
    let _stalled = open(Some(4096));
    let viewers: Vec<_> = (0..20)
        .map(|_| {
            let s = open(None);
            std::thread::spawn(move || read_feed(s, Duration::from_secs(90)))
        })
        .collect();
    let during = wait_status(port, |s| s["feed"]["viewers"].as_u64() == Some(21));
    assert_eq!(during["label"], "");
    // The coordinator's peak memory late in the run, twenty-one viewers on.
    wait_status(port, |s| f(s, "elapsed_s") >= 7.0);
    let status = std::fs::read_to_string(format!("/proc/{}/status", coord.child.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(
        peak_kb < 256 * 1024,
        "the coordinator's peak RSS: {peak_kb} kB"
    );
    let code = coord.wait(Duration::from_secs(90));
    assert_eq!(code, 0, "{}", read_log(dir.path(), "crest", "stderr"));
    let report = read_report(&dir.path().join("out"));
    assert_balanced("live-viewers", &report);
    let t = &report["totals"];
    assert_eq!(u(t, "errors"), 0, "{t}");
    // The schedule was kept: 8 s at 2,000/s, every request sent and answered.
    assert_eq!(u(t, "completed"), u(t, "scheduled"), "{t}");
    assert!(u(t, "scheduled").abs_diff(16_000) < 800, "{t}");
    let want: BTreeSet<u64> = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (f(p, "t_s") * 1000.0).round() as u64)
        .collect();
    for v in viewers {
        let (seen, events) = v.join().unwrap();
        assert_eq!(
            events.first().map(String::as_str),
            Some("hello"),
            "{events:?}"
        );
        assert_eq!(events.last().map(String::as_str), Some("end"), "{events:?}");
        assert!(
            seen.is_superset(&want),
            "missed {:?}",
            want.difference(&seen)
        );
    }
}
