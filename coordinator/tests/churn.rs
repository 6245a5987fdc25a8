//! Connection churn (issue #29, item 1) against real servers: connections that live a set
//! time (`--conn-lifetime`) or retire at a fleet-wide rate (`--conn-rate`) close once
//! their replies are in and open again with their full setup; the server counts every new
//! connection, no request is lost to a reconnect, and over TLS every life is a handshake.

use crate::support::*;
use serde_json::Value;

/// The server's `total_connections_received`.
fn accepted(server: &Server) -> u64 {
    let crest_resp::Frame::Bulk(text) = server.command(&[b"INFO", b"stats"]) else {
        panic!("INFO stats did not answer a bulk string");
    };
    String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO stats has total_connections_received")
}

/// 10 connections living about a second each (900 ms ± 50 ms), 6 s at 1,000/s against
/// Valkey: every connection retires about six times (five even when a busy core stretches
/// each life by 100 ms), so the server accepts 50–90 new ones beside the first ten; all
/// 6,000 requests complete, none fails, and the report's count of connections is the
/// server's.
#[test]
fn connections_with_a_one_second_life_reconnect_and_lose_nothing() {
    let server = Server::start(Kind::Valkey);
    let before = accepted(&server);
    let dir = TempDir::new("churn-life");
    let r = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--rate",
            "1000",
            "--duration",
            "6s",
            "--connections",
            "10",
            "--conn-lifetime",
            "900ms±50ms",
        ])
        .run(0);
    let after = accepted(&server);
    assert_balanced("churn", &r);
    let t = &r["totals"];
    assert_eq!(u(t, "completed"), 6000, "{t}");
    assert_eq!(u(t, "errors"), 0, "{t}");
    let c = &r["connections"];
    assert_eq!(c["lifetime"], "900ms±50ms", "{c}");
    assert_eq!(u(c, "initial"), 10, "{c}");
    let opened = u(c, "opened");
    assert!((50..=90).contains(&opened), "{c}");
    assert!(u(c, "retired") >= opened, "{c}");
    // Plaintext without a login: a connect phase, no handshake, no session commands.
    assert!(f(&c["connect_us"], "p50") > 0.0, "{c}");
    assert!(c["tls_us"].is_null() && c["session_us"].is_null(), "{c}");
    // The server accepted each of them, and the probe's and sampler's own (a handful).
    let server_saw = after - before;
    assert!(
        (10 + opened..=10 + opened + 6).contains(&server_saw),
        "server accepted {server_saw}, the report says 10 + {opened}"
    );
    // The report's server figures count them too, and the timeline says when.
    let rows = r["timeline"].as_array().unwrap();
    let per_row: u64 = rows.iter().map(|p| u(p, "connections_opened")).sum();
    assert_eq!(per_row, opened, "the timeline's rows add up to the run's");
    assert!(
        u(&r["server"]["total"], "connections_received") >= opened,
        "{}",
        r["server"]["total"]
    );
    let out = read_log(dir.path(), "crest", "stdout");
    assert!(
        out.contains("connections: 10 at the start") && out.contains("--conn-lifetime 900ms±50ms"),
        "{out}"
    );
}

/// Over TLS with a password: every life is a full setup (a handshake and AUTH), so the
/// handshakes counted equal the connections' lives and the setup histogram holds each.
#[test]
fn every_life_over_tls_is_a_handshake() {
    let dir = TempDir::new("churn-tls");
    let pki = Pki::new(dir.path());
    let Some(server) = Server::with_tls(&pki, false) else {
        eprintln!("SKIP: this redis-server has no TLS support; the churn TLS test did not run");
        return;
    };
    server.command(&[b"CONFIG", b"SET", b"requirepass", b"s3cret"]);
    let r = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.tls_addr(),
            "--tls",
            "--cacert",
            pki.ca.to_str().unwrap(),
            "--password",
            "s3cret",
            "--rate",
            "500",
            "--duration",
            "3s",
            "--connections",
            "4",
            "--conn-lifetime",
            "500ms",
            "--no-server-stats",
        ])
        .run(0);
    assert_balanced("churn-tls", &r);
    assert_eq!(u(&r["totals"], "completed"), 1500, "{}", r["totals"]);
    let c = &r["connections"];
    let lives = u(c, "initial") + u(c, "opened");
    assert!(u(c, "opened") >= 12, "{c}");
    let tls = &r["tls"];
    assert_eq!(
        u(tls, "handshakes_full") + u(tls, "handshakes_resumed"),
        lives,
        "{tls} {c}"
    );
    let setup: &Value = &c["setup_us"];
    assert!(f(setup, "p50") > 0.0, "{c}");
    // Each phase has its own percentiles: the connect, the handshake, the login. They
    // split each setup, so their means add up to the whole's (a busy core's coarse clock
    // may read one phase as 0, never break the sum).
    let mut sum = 0.0;
    for phase in ["connect_us", "tls_us", "session_us"] {
        let p = &c[phase];
        assert!(p.is_object(), "{phase}: {c}");
        assert!(f(p, "max") <= f(setup, "max"), "{phase}: {c}");
        sum += f(p, "mean");
    }
    let whole = f(setup, "mean");
    assert!(
        (sum - whole).abs() <= 0.01 * whole + 1.0,
        "{sum} vs {whole}: {c}"
    );
}

/// `--conn-rate 20` for 10 s: the fleet retires 20 connections a second, each reopened;
/// the run's count is within 5% of 200 (a late look catches up on what came due, so only
/// the run's last instants can lose a few) and every second carries about its share.
#[test]
fn a_conn_rate_holds_its_rate() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("churn-rate");
    let r = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--rate",
            "500",
            "--duration",
            "10s",
            "--connections",
            "20",
            "--conn-rate",
            "20/s",
            "--no-server-stats",
        ])
        .run(0);
    assert_balanced("churn-rate", &r);
    assert_eq!(u(&r["totals"], "errors"), 0, "{}", r["totals"]);
    let c = &r["connections"];
    assert_eq!(f(c, "rate"), 20.0, "{c}");
    let retired = u(c, "retired");
    assert!((190..=200).contains(&retired), "{c}");
    // Per second: its share, give or take what a late sweep carries into the next one.
    let rows = r["timeline"].as_array().unwrap();
    for p in &rows[..rows.len() - 1] {
        assert!((10..=30).contains(&u(p, "connections_opened")), "{p}");
    }
}

/// Bad values and impossible combinations, each refused in one line before load.
#[test]
fn churn_flags_refuse_what_cannot_be() {
    for (args, needle) in [
        (&["--conn-lifetime", "0"][..], "too short"),
        (&["--conn-lifetime", "5ms"][..], "too short"),
        (&["--conn-lifetime", "1s±2s"][..], "less than the lifetime"),
        (&["--conn-lifetime", "soon"][..], "not a duration"),
        (&["--conn-rate", "0"][..], "more than 0"),
        (&["--conn-rate", "-5"][..], "more than 0"),
        (&["--conn-rate", "lots"][..], "connections per second"),
        (
            &["--conn-rate", "5", "--conn-lifetime", "1s"][..],
            "cannot be used with",
        ),
    ] {
        let mut all = vec!["run", "--duration", "1s"];
        all.extend_from_slice(args);
        crest_fails(&all, needle);
    }
}
