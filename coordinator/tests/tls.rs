//! TLS to the target (issue #9, item 2), against Debian's redis-server 7.0 with a TLS
//! port: a test CA and a server certificate for `localhost`/`127.0.0.1` made here with
//! rcgen. Every connection handshakes in the engine's epoll loop; the server's counters
//! (read on its plaintext port) agree with the report; a certificate Crest cannot trust, a
//! name it is not valid for, or a missing client certificate stops the run before any
//! load with one line naming the flag that fixes it; 10 MB values cross TLS intact.
//!
//! The Valkey wheel has no TLS: these tests need redis-server, and say SKIP when the one
//! installed lacks TLS.

use crate::support::*;

/// A TLS redis-server for `pki`, or None (with a loud SKIP line) when it lacks TLS.
fn tls_server(pki: &Pki, auth_clients: bool) -> Option<Server> {
    let s = Server::with_tls(pki, auth_clients);
    if s.is_none() {
        eprintln!("SKIP: this redis-server has no TLS support; the TLS tests did not run");
    }
    s
}

fn p(path: &std::path::Path) -> &str {
    path.to_str().unwrap()
}

fn tls_run<'a>(dir: &'a TempDir, target: &str, rate: &str, extra: &[&str]) -> CrestRun<'a> {
    short_run(dir, target, rate).args(extra)
}

/// The run's one error line (its last line of stderr).
fn last_line(dir: &TempDir) -> String {
    let err = read_log(dir.path(), "crest", "stderr");
    err.trim_end()
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
}

fn no_load(server: &Server) {
    let stats = server.commandstats();
    assert_eq!(stats.get("get").copied().unwrap_or(0), 0, "{stats:?}");
    assert_eq!(stats.get("set").copied().unwrap_or(0), 0, "{stats:?}");
}

/// `--tls --cacert`: the counts match the server's, the connections negotiated TLS 1.3
/// with full verification, and the summary says so.
#[test]
fn a_tls_run_matches_the_server_and_reports_what_it_negotiated() {
    let dir = TempDir::new("tls-run");
    let pki = Pki::new(dir.path());
    let Some(server) = tls_server(&pki, false) else {
        return;
    };
    let report = tls_run(
        &dir,
        &server.tls_addr(),
        "2000",
        &["--tls", "--cacert", p(&pki.ca)],
    )
    .run(0);
    check_against_server(&report, &server.commandstats(), 2000.0, 2.0);
    // The server sampler logs in over the same TLS and agrees.
    assert_eq!(
        report["checks"]["server_agrees"], true,
        "{}",
        report["server_stats"]
    );
    let tls = &report["tls"];
    assert_eq!(tls["verify"], "full", "{tls}");
    assert_eq!(tls["server_name"], "127.0.0.1", "{tls}");
    assert_eq!(tls["ca"], "file", "{tls}");
    assert_eq!(tls["client_certificate"], false, "{tls}");
    assert_eq!(tls["version"], "TLSv1_3", "{tls}");
    assert!(
        tls["cipher"].as_str().unwrap().starts_with("TLS13_"),
        "{tls}"
    );
    assert_eq!(
        u(tls, "handshakes_full") + u(tls, "handshakes_resumed"),
        4,
        "one handshake per connection: {tls}"
    );
    assert!(
        report["connection_errors"].as_object().unwrap().is_empty(),
        "{}",
        report["connection_errors"]
    );
    let summary = read_log(dir.path(), "crest", "stdout");
    assert!(summary.contains("(TLS TLSv1_3)"), "{summary}");
}

/// `rediss://localhost:PORT`: the scheme turns TLS on and the URI's host is the name the
/// certificate is checked against.
#[test]
fn a_rediss_uri_turns_tls_on_and_checks_its_host() {
    let dir = TempDir::new("tls-uri");
    let pki = Pki::new(dir.path());
    let Some(server) = tls_server(&pki, false) else {
        return;
    };
    let uri = format!("rediss://localhost:{}", server.tls_port.unwrap());
    let report = tls_run(&dir, &uri, "500", &["--cacert", p(&pki.ca)]).run(0);
    assert_eq!(
        report["tls"]["server_name"], "localhost",
        "{}",
        report["tls"]
    );
    assert_eq!(
        u(&report["totals"], "completed"),
        1000,
        "{}",
        report["totals"]
    );
}

/// A CA that did not sign the server's certificate, and a name the certificate does not
/// list, each stop the run before load with the flag that fixes it; the weaker checks a
/// user may choose let the same runs through, and the report and summary say so.
#[test]
fn a_wrong_ca_or_name_is_refused_before_load_and_the_opt_outs_say_so() {
    let dir = TempDir::new("tls-refuse");
    let pki = Pki::new(dir.path());
    let Some(server) = tls_server(&pki, false) else {
        return;
    };
    let target = server.tls_addr();
    let d = TempDir::new("tls-wrong-ca");
    tls_run(&d, &target, "500", &["--tls", "--cacert", p(&pki.other_ca)]).run(2);
    assert_eq!(
        last_line(&d),
        format!(
            "crest: --target: worker local-0: TLS to target {target} failed: the server's certificate is not signed by a CA Crest trusts: give --cacert the CA that signed it (or --tls-skip-verify to accept any certificate, with no protection)"
        )
    );
    let d = TempDir::new("tls-wrong-name");
    tls_run(
        &d,
        &target,
        "500",
        &["--tls", "--cacert", p(&pki.ca), "--sni", "wronghost"],
    )
    .run(2);
    assert_eq!(
        last_line(&d),
        format!(
            "crest: --target: worker local-0: TLS to target {target} failed: the server's certificate is not valid for \"wronghost\": give --sni a name it lists (its subjectAltName), or --tls-skip-hostname to check the chain only (as memtier and valkey-benchmark do)"
        )
    );
    no_load(&server);

    let d = TempDir::new("tls-skip-name");
    let r = tls_run(
        &d,
        &target,
        "500",
        &[
            "--tls",
            "--cacert",
            p(&pki.ca),
            "--sni",
            "wronghost",
            "--tls-skip-hostname",
        ],
    )
    .run(0);
    assert_eq!(r["tls"]["verify"], "skip-hostname", "{}", r["tls"]);
    assert_eq!(u(&r["totals"], "completed"), 1000, "{}", r["totals"]);
    let summary = read_log(d.path(), "crest", "stdout");
    assert!(summary.contains("hostname not verified"), "{summary}");

    let d = TempDir::new("tls-skip-verify");
    let r = tls_run(
        &d,
        &target,
        "500",
        &["--tls", "--cacert", p(&pki.other_ca), "--tls-skip-verify"],
    )
    .run(0);
    assert_eq!(r["tls"]["verify"], "none", "{}", r["tls"]);
    assert_eq!(u(&r["totals"], "completed"), 1000, "{}", r["totals"]);
    let summary = read_log(d.path(), "crest", "stdout");
    assert!(summary.contains("certificate NOT verified"), "{summary}");
    let err = read_log(d.path(), "crest", "stderr");
    assert!(err.contains("--tls-skip-verify"), "a loud warning: {err}");
}

/// `tls-auth-clients yes`: without `--cert/--key` the run stops before load saying so;
/// with them it runs and the report records that a client certificate was presented.
#[test]
fn a_server_that_wants_a_client_certificate_gets_one_or_a_clear_line() {
    let dir = TempDir::new("tls-mutual");
    let pki = Pki::new(dir.path());
    let Some(server) = tls_server(&pki, true) else {
        return;
    };
    let target = server.tls_addr();
    let d = TempDir::new("tls-no-cert");
    tls_run(&d, &target, "500", &["--tls", "--cacert", p(&pki.ca)]).run(2);
    let line = last_line(&d);
    assert!(
        line.starts_with(&format!(
            "crest: --target: worker local-0: TLS to target {target} failed: "
        )) && line.contains("client certificate")
            && line.contains("--cert and --key"),
        "{line}"
    );
    no_load(&server);
    let d = TempDir::new("tls-cert");
    let r = tls_run(
        &d,
        &target,
        "1000",
        &[
            "--tls",
            "--cacert",
            p(&pki.ca),
            "--cert",
            p(&pki.client_cert),
            "--key",
            p(&pki.client_key),
        ],
    )
    .run(0);
    check_against_server(&r, &server.commandstats(), 1000.0, 2.0);
    assert_eq!(r["tls"]["client_certificate"], true, "{}", r["tls"]);
}

/// 10 MB (MiB) values both ways over TLS (rustls works in 16 KiB records; the engine hands it
/// the value in pieces and streams the GET replies past): every request completes, the
/// server counts each once, and the bytes are the right size.
#[test]
fn ten_megabyte_values_cross_tls_intact() {
    let dir = TempDir::new("tls-large");
    let pki = Pki::new(dir.path());
    let Some(server) = tls_server(&pki, false) else {
        return;
    };
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.tls_addr(),
            "--tls",
            "--cacert",
            p(&pki.ca),
            "--rate",
            "10",
            "--duration",
            "2s",
            "--ratio",
            "1:1",
            "--keys",
            "2",
            "--value-size",
            "10MB",
            "--connections",
            "2",
            "--prefill",
        ])
        .run(0);
    let totals = &report["totals"];
    assert_eq!(u(totals, "completed"), 20, "{totals}");
    assert_eq!(u(totals, "errors"), 0, "{totals}");
    let stats = server.commandstats();
    // Prefill wrote the 2 keys once; the run 10 SETs and 10 GETs.
    assert_eq!(stats.get("set"), Some(&12), "{stats:?}");
    assert_eq!(stats.get("get"), Some(&10), "{stats:?}");
    let len = server.command(&[b"STRLEN", b"crest:0"]);
    assert_eq!(len, crest_resp::Frame::Integer(10 << 20), "{len:?}");
}

/// TLS flags without TLS, TLS to the built-in target, and a bad file: one line, exit 2.
#[test]
fn tls_settings_that_cannot_work_are_refused_by_their_flag() {
    let dir = TempDir::new("tls-flags");
    let pki = Pki::new(dir.path());
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--target", "127.0.0.1:1", "--cacert", p(&pki.ca)],
            format!(
                "crest: --cacert {:?}: is a TLS setting, but TLS is off: add --tls, or give the target as rediss://host:port",
                p(&pki.ca)
            ),
        ),
        (
            vec!["--tls"],
            "crest: --tls \"on\": the built-in target speaks plaintext only; give --target host:port of a TLS server".into(),
        ),
        (
            vec!["--target", "127.0.0.1:1", "--tls", "--cacert", p(&pki.server_key)],
            format!(
                "crest: --cacert {:?}: no certificate in it; expected a PEM certificate (-----BEGIN CERTIFICATE-----)",
                p(&pki.server_key)
            ),
        ),
        (
            vec!["--target", "127.0.0.1:1", "--tls", "--cert", p(&pki.client_cert)],
            format!(
                "crest: --cert {:?}: needs --key (the certificate's private key)",
                p(&pki.client_cert)
            ),
        ),
        (
            vec![
                "--target",
                "127.0.0.1:1",
                "--tls",
                "--cert",
                p(&pki.client_cert),
                "--key",
                p(&pki.server_key),
            ],
            format!(
                "crest: --key {:?}: this key does not belong to the certificate in --cert {}; give the key it was issued for",
                p(&pki.server_key),
                p(&pki.client_cert)
            ),
        ),
        (
            vec!["--target", "127.0.0.1:1", "--tls", "--sni", "bad name!"],
            "crest: --sni \"bad name!\": is not a DNS name or an IP address; give the name the server's certificate lists".into(),
        ),
    ];
    for (args, want) in cases {
        let d = TempDir::new("tls-flag");
        CrestRun::new(&d).args(&args).run(2);
        let err = read_log(d.path(), "crest", "stderr");
        assert_eq!(err.trim_end(), want, "{args:?}");
    }
}

/// `--tls` to a plaintext port (the server waits for a line, so the handshake gets no
/// answer): refused before load, saying so.
#[test]
fn tls_to_a_plaintext_port_says_it_is_not_tls() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("tls-plain");
    let pki = Pki::new(dir.path());
    tls_run(
        &dir,
        &server.addr(),
        "500",
        &["--tls", "--cacert", p(&pki.ca)],
    )
    .run(2);
    let line = last_line(&dir);
    assert!(
        line.starts_with(&format!(
            "crest: --target: worker local-0: TLS to target {} failed: the server accepted the connection but did not answer the TLS handshake within ",
            server.addr()
        )) && line.ends_with("a plaintext port? drop --tls (and use redis:// rather than rediss://), or give its tls-port"),
        "{line}"
    );
    no_load(&server);
}

/// A server whose certificate is a self-signed CA certificate (CA:TRUE, what `openssl req
/// -x509` makes): refused before load in words that say how to fix it, not the verifier's
/// `Other(OtherError(CaUsedAsEndEntity))`.
#[test]
fn a_ca_certificate_as_the_servers_own_is_refused_in_words() {
    let dir = TempDir::new("tls-ca-leaf");
    let pki = Pki::ca_as_server(dir.path());
    let Some(server) = tls_server(&pki, false) else {
        return;
    };
    let target = server.tls_addr();
    tls_run(&dir, &target, "500", &["--tls", "--cacert", p(&pki.ca)]).run(2);
    assert_eq!(
        last_line(&dir),
        format!(
            "crest: --target: worker local-0: TLS to target {target} failed: the server's certificate is a CA certificate (CA:TRUE, as `openssl req -x509` makes by default) used as the server's own: issue the server a certificate signed by that CA (CA:FALSE, its names in subjectAltName) as tls-cert-file, and give --cacert the CA, or --tls-skip-verify to accept any certificate (with no protection)"
        )
    );
    no_load(&server);
}

/// Plaintext to a TLS port: Redis resets the connection on the probe's first command;
/// the port answers a TLS hello, so the run stops before load saying --tls is missing
/// (it ran with every request disconnected, exit 0).
#[test]
fn plaintext_to_a_tls_port_is_refused_naming_tls() {
    let dir = TempDir::new("plain-to-tls");
    let pki = Pki::new(dir.path());
    let Some(server) = tls_server(&pki, false) else {
        return;
    };
    let target = server.tls_addr();
    tls_run(&dir, &target, "500", &[]).run(2);
    assert_eq!(
        last_line(&dir),
        format!(
            "crest: --target: worker local-0: {target} closed the connection on the first command without a reply, and answers a TLS handshake: it is a TLS port; add --tls (and --cacert, the CA that signed its certificate), or give a rediss:// target"
        )
    );
    no_load(&server);
}

/// Connections the server drops mid-run reconnect and resume their TLS sessions (one
/// handshake each, from the worker's shared session cache); every request is in exactly
/// one bucket of the books.
#[test]
fn reconnects_resume_their_tls_sessions_and_lose_nothing() {
    let dir = TempDir::new("tls-resume");
    let pki = Pki::new(dir.path());
    let Some(server) = tls_server(&pki, false) else {
        return;
    };
    let run = CrestRun::new(&dir).args(&[
        "--target",
        &server.tls_addr(),
        "--tls",
        "--cacert",
        p(&pki.ca),
        "--rate",
        "1000",
        "--duration",
        "3s",
        "--connections",
        "4",
    ]);
    let out = run.out();
    let mut proc = run.spawn();
    wait_for_calls(500, || {
        server.commandstats().get("get").copied().unwrap_or(0)
    });
    // Every client but this one (SKIPME yes): the run's 4 connections and the server
    // sampler's (which reconnects at its next boundary).
    let killed = server.command(&[b"CLIENT", b"KILL", b"TYPE", b"normal"]);
    assert_eq!(killed, crest_resp::Frame::Integer(5), "{killed:?}");
    assert_eq!(proc.wait(std::time::Duration::from_secs(30)), 0);
    let report = read_report(&out);
    let tls = &report["tls"];
    assert_eq!(
        u(tls, "handshakes_full") + u(tls, "handshakes_resumed"),
        8,
        "{tls}"
    );
    assert!(
        u(tls, "handshakes_resumed") >= 4,
        "reconnects resume: {tls}"
    );
    let totals = &report["totals"];
    assert_eq!(u(totals, "scheduled"), 3000, "{totals}");
    assert_eq!(
        u(totals, "completed") + u(totals, "errors") + u(totals, "in_flight") + u(totals, "unsent"),
        3000,
        "{totals}"
    );
    let broke: u64 = report["connection_errors"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(broke, 4, "{}", report["connection_errors"]);
}

/// The managed-cache case: `rediss://user:password@host:port/db` with `--resp 3` says
/// `HELLO 3 AUTH` and selects the database over TLS; the keys land there and the password
/// is recorded nowhere.
#[test]
fn a_rediss_uri_with_a_login_and_a_database_works_over_tls() {
    let dir = TempDir::new("tls-auth");
    let pki = Pki::new(dir.path());
    let Some(server) = tls_server(&pki, false) else {
        return;
    };
    let ok = server.command(&[
        b"ACL",
        b"SETUSER",
        b"bench",
        b"on",
        b">s3cret-tls",
        b"~bench:*",
        b"+@all",
    ]);
    assert_eq!(ok, crest_resp::Frame::Simple(b"OK".to_vec()), "{ok:?}");
    let uri = format!(
        "rediss://bench:s3cret-tls@localhost:{}/2",
        server.tls_port.unwrap()
    );
    let report = tls_run(
        &dir,
        &uri,
        "500",
        &[
            "--cacert",
            p(&pki.ca),
            "--key-prefix",
            "bench:",
            "--keys",
            "50",
            "--resp",
            "3",
        ],
    )
    .run(0);
    assert_eq!(report["resp"], 3);
    assert_eq!(
        u(&report["totals"], "completed"),
        1000,
        "{}",
        report["totals"]
    );
    assert_eq!(
        (report["user"].as_str(), report["db"].as_u64()),
        (Some("bench"), Some(2))
    );
    assert_eq!(report["tls"]["version"], "TLSv1_3", "{}", report["tls"]);
    let keyspace = server.info_stats("keyspace", "db");
    assert!(
        keyspace.contains_key("2") && !keyspace.contains_key("0"),
        "{keyspace:?}"
    );
    let summary = read_log(dir.path(), "crest", "stdout");
    assert!(
        summary.contains("(TLS TLSv1_3, user bench, db 2, RESP3)"),
        "{summary}"
    );
    for f in ["report.json", "report.html", "timeline.csv"] {
        let text = std::fs::read_to_string(dir.path().join("out").join(f)).unwrap();
        assert!(!text.contains("s3cret-tls"), "the password is in {f}");
    }
    assert!(!summary.contains("s3cret-tls"));
}
