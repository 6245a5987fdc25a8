//! The control plane secured: `crest run --control-cert/--control-key` and `crest-worker
//! --coordinator https://… --control-ca`, mutual TLS, and the one-line refusals of every
//! mismatch (issue 8, item 5). A test CA, a server certificate for 127.0.0.1/localhost and
//! a client certificate are made here with rcgen; every case runs the real binaries
//! against the built-in target.

use crate::support::{
    Pki, Proc, Server, TempDir, crest_bin, free_port, read_log, read_report, strs, u, worker_bin,
};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `crest run` with remote workers on `listen` and the built-in target: a short run.
fn coordinator(dir: &TempDir, listen: &str, wait: &str, extra: &[&str]) -> Proc {
    let out = dir.path().join("out");
    let mut args = vec![
        "run",
        "--listen",
        listen,
        "--workers",
        "1",
        "--wait-timeout",
        wait,
        "--rate",
        "500",
        "--duration",
        "1s",
        "--connections",
        "1",
        "--token",
        "s3cret",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Proc::spawn(&crest_bin(), &args, dir.path(), "crest")
}

/// `crest-worker` dialling `url` on one core with the coordinator's token.
fn worker(dir: &TempDir, url: &str, extra: &[&str]) -> Proc {
    let cpu = crest_engine::cpus::allowed()[0].to_string();
    let mut args = vec![
        "--coordinator",
        url,
        "--cpus",
        &cpu,
        "--name",
        "w0",
        "--token",
        "s3cret",
    ];
    args.extend_from_slice(extra);
    Proc::spawn(&worker_bin(), &args, dir.path(), "worker")
}

/// Waits up to `limit` until `name`'s stderr contains `needle`; returns the log.
fn wait_for_log(dir: &TempDir, name: &str, needle: &str, limit: Duration) -> String {
    let t0 = Instant::now();
    loop {
        let log = read_log(dir.path(), name, "stderr");
        if log.contains(needle) {
            return log;
        }
        assert!(
            t0.elapsed() < limit,
            "{name} never logged {needle:?} within {limit:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tls_args(pki: &Pki) -> Vec<String> {
    vec![
        "--control-cert".into(),
        p(&pki.server_cert).into(),
        "--control-key".into(),
        p(&pki.server_key).into(),
    ]
}

/// A run over TLS: the worker trusts the test CA, the run completes, and neither side
/// logs anything above INFO at its normal end (no WARN, no `MetadataMap` debug dump).
#[test]
fn a_tls_worker_with_the_ca_completes_a_run_and_ends_quietly() {
    let dir = TempDir::new("tls-ok");
    let pki = Pki::new(dir.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut c = coordinator(&dir, &listen, "30s", &strs(&tls_args(&pki)));
    // Started after the coordinator listens: a worker that finds no coordinator yet warns.
    wait_for_log(&dir, "crest", "listening on", Duration::from_secs(20));
    let mut w = worker(
        &dir,
        &format!("https://127.0.0.1:{port}"),
        &["--control-ca", p(&pki.ca)],
    );
    let code = c.wait(Duration::from_secs(60));
    let crest_err = read_log(dir.path(), "crest", "stderr");
    assert_eq!(code, 0, "{crest_err}");
    assert!(crest_err.contains("(TLS)"), "{crest_err}");
    let report = read_report(&dir.path().join("out"));
    assert!(u(&report["totals"], "completed") > 0, "{report}");
    // The worker sees the coordinator go and waits for the next run, quietly.
    wait_for_log(
        &dir,
        "worker",
        "session with coordinator ended",
        Duration::from_secs(10),
    );
    std::thread::sleep(Duration::from_millis(800));
    let log = read_log(dir.path(), "worker", "stderr");
    assert!(
        w.child.try_wait().unwrap().is_none(),
        "the worker stays up: {log}"
    );
    w.kill();
    for (who, text) in [("worker", &log), ("crest", &crest_err)] {
        assert!(
            !text.contains("WARN") && !text.contains("MetadataMap"),
            "{who} logged above INFO at a normal end:\n{text}"
        );
    }
}

/// A worker that does not trust the coordinator's CA is refused with one line naming the
/// certificate problem and exits 2 (retrying cannot help); the coordinator logs one line.
#[test]
fn a_worker_without_the_ca_is_refused_naming_the_certificate() {
    let dir = TempDir::new("tls-noca");
    let pki = Pki::new(dir.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut c = coordinator(&dir, &listen, "4s", &strs(&tls_args(&pki)));
    let url = format!("https://127.0.0.1:{port}");
    let mut w = worker(&dir, &url, &["--control-ca", p(&pki.other_ca)]);
    assert_eq!(w.wait(Duration::from_secs(30)), 2);
    let log = read_log(dir.path(), "worker", "stderr");
    assert!(
        log.contains(&format!(
            "crest-worker: TLS to the coordinator at {url} failed: the coordinator's certificate is not signed by a CA this worker trusts: give --control-ca the CA that signed the coordinator's --control-cert"
        )),
        "{log}"
    );
    assert_eq!(c.wait(Duration::from_secs(30)), 2);
    let err = read_log(dir.path(), "crest", "stderr");
    assert_eq!(
        err.matches("refused a control connection").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("does not trust this coordinator's certificate"),
        "{err}"
    );
}

/// A plaintext worker (http://) to a TLS coordinator: the coordinator answers only with
/// an HTTP/2 GOAWAY (INADEQUATE_SECURITY), the worker says TLS is required and exits 2.
#[test]
fn a_plaintext_worker_is_refused_by_a_tls_coordinator() {
    let dir = TempDir::new("tls-plain");
    let pki = Pki::new(dir.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut c = coordinator(&dir, &listen, "4s", &strs(&tls_args(&pki)));
    std::thread::sleep(Duration::from_millis(300));
    let url = format!("http://127.0.0.1:{port}");
    let mut w = worker(&dir, &url, &[]);
    assert_eq!(w.wait(Duration::from_secs(30)), 2);
    let log = read_log(dir.path(), "worker", "stderr");
    assert!(
        log.contains(&format!(
            "crest-worker: the coordinator at {url} requires TLS (crest run --control-cert) and refused this plaintext connection"
        )),
        "{log}"
    );
    assert_eq!(c.wait(Duration::from_secs(30)), 2);
    let err = read_log(dir.path(), "crest", "stderr");
    assert!(
        err.contains("a plaintext client on this TLS listener"),
        "{err}"
    );
    assert!(err.contains("0 arrived"), "{err}");
}

/// A TLS worker to a plaintext coordinator: the worker names the mismatch and keeps
/// retrying; the coordinator logs one line for all its retries, not a storm.
#[test]
fn a_tls_worker_to_a_plaintext_coordinator_is_told_and_logged_once() {
    let dir = TempDir::new("tls-toplain");
    let pki = Pki::new(dir.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut c = coordinator(&dir, &listen, "4s", &[]);
    std::thread::sleep(Duration::from_millis(300));
    let url = format!("https://127.0.0.1:{port}");
    let mut w = worker(&dir, &url, &["--control-ca", p(&pki.ca)]);
    let log = wait_for_log(
        &dir,
        "worker",
        "a plaintext coordinator (crest run without --control-cert)? then dial http://",
        Duration::from_secs(15),
    );
    assert!(
        log.contains(&format!("cannot reach the coordinator at {url}")),
        "{log}"
    );
    assert_eq!(c.wait(Duration::from_secs(30)), 2);
    assert!(
        w.child.try_wait().unwrap().is_none(),
        "the worker keeps retrying"
    );
    w.kill();
    let err = read_log(dir.path(), "crest", "stderr");
    assert_eq!(
        err.matches("a TLS client on this plaintext listener")
            .count(),
        1,
        "one line for every retry of one worker:\n{err}"
    );
}

/// Mutual TLS: a worker without a client certificate is refused, by a line that says
/// what to give; with one, the run completes.
#[test]
fn mutual_tls_refuses_a_worker_without_a_client_certificate() {
    let dir = TempDir::new("mtls-no");
    let pki = Pki::new(dir.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = tls_args(&pki);
    args.extend(["--control-client-ca".into(), p(&pki.ca).into()]);
    // Under TLS 1.3 the coordinator's alert can race the worker's first write (a reset
    // may discard it); each redial is a new chance to read it, so the coordinator waits
    // long enough for several.
    let mut c = coordinator(&dir, &listen, "20s", &strs(&args));
    let url = format!("https://127.0.0.1:{port}");
    let mut w = worker(&dir, &url, &["--control-ca", p(&pki.ca)]);
    assert_eq!(w.wait(Duration::from_secs(30)), 2);
    let log = read_log(dir.path(), "worker", "stderr");
    assert!(
        log.contains(&format!(
            "crest-worker: the coordinator at {url} requires a client certificate (mutual TLS, crest run --control-client-ca): give --control-client-cert and --control-client-key"
        )),
        "{log}"
    );
    // The coordinator says why as the handshake fails; it would then wait out its 20 s for
    // a worker (the exit code of that wait is `cluster::wrong_token_is_refused`'s).
    let t0 = std::time::Instant::now();
    let err = loop {
        let err = read_log(dir.path(), "crest", "stderr");
        if err.contains("presented no client certificate") || t0.elapsed() > Duration::from_secs(30)
        {
            break err;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    c.kill();
    assert!(err.contains("presented no client certificate"), "{err}");
}

#[test]
fn mutual_tls_with_a_client_certificate_completes_a_run() {
    let dir = TempDir::new("mtls-ok");
    let pki = Pki::new(dir.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut args = tls_args(&pki);
    args.extend(["--control-client-ca".into(), p(&pki.ca).into()]);
    let mut c = coordinator(&dir, &listen, "30s", &strs(&args));
    let mut w = worker(
        &dir,
        &format!("https://localhost:{port}"),
        &[
            "--control-ca",
            p(&pki.ca),
            "--control-client-cert",
            p(&pki.client_cert),
            "--control-client-key",
            p(&pki.client_key),
        ],
    );
    let code = c.wait(Duration::from_secs(60));
    assert_eq!(code, 0, "{}", read_log(dir.path(), "crest", "stderr"));
    let report = read_report(&dir.path().join("out"));
    assert!(u(&report["totals"], "completed") > 0, "{report}");
    w.kill();
}

/// The TLS listener never serves plaintext: a raw client sending the HTTP/2 preface and
/// a frame carrying the token gets only SETTINGS and a GOAWAY (INADEQUATE_SECURITY), no
/// HEADERS or DATA, then the close; five tries make one log line.
#[test]
fn the_tls_listener_never_answers_plaintext() {
    let dir = TempDir::new("tls-raw");
    let pki = Pki::new(dir.path());
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut c = coordinator(&dir, &listen, "5s", &strs(&tls_args(&pki)));
    let t0 = Instant::now();
    let mut s = loop {
        match TcpStream::connect(&listen) {
            Ok(s) => break s,
            Err(_) if t0.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("coordinator never listened: {e}"),
        }
    };
    for attempt in 0..5 {
        if attempt > 0 {
            s = TcpStream::connect(&listen).unwrap();
        }
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // SETTINGS, empty
        // A DATA frame on stream 1 with the token in it, as a careless client would send.
        let body = b"token=s3cret";
        hello.extend_from_slice(&[0, 0, body.len() as u8, 0x0, 0, 0, 0, 0, 1]);
        hello.extend_from_slice(body);
        s.write_all(&hello).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        let mut frames = Vec::new();
        let mut at = 0;
        while at + 9 <= got.len() {
            let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
            frames.push((
                got[at + 3],
                got[at + 9..(at + 9 + len).min(got.len())].to_vec(),
            ));
            at += 9 + len;
        }
        let types: Vec<u8> = frames.iter().map(|f| f.0).collect();
        assert_eq!(types, vec![0x4, 0x7], "only SETTINGS and GOAWAY: {got:?}");
        let goaway = &frames[1].1;
        assert_eq!(
            u32::from_be_bytes([goaway[4], goaway[5], goaway[6], goaway[7]]),
            0xc,
            "GOAWAY carries INADEQUATE_SECURITY"
        );
        assert!(!got.windows(6).any(|w| w == b"s3cret"), "nothing echoed");
    }
    assert_eq!(c.wait(Duration::from_secs(30)), 2);
    let err = read_log(dir.path(), "crest", "stderr");
    assert_eq!(
        err.matches("a plaintext client on this TLS listener")
            .count(),
        1,
        "five tries from one host, one line:\n{err}"
    );
}

/// A worker dialling a closed port says so in words (not "transport error"), once, and
/// keeps retrying with backoff.
#[test]
fn a_worker_dialling_a_closed_port_says_connection_refused() {
    let dir = TempDir::new("closed-port");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut w = worker(&dir, &url, &[]);
    let line = format!(
        "cannot reach the coordinator at {url}: connection refused; is `crest run --listen` up there?"
    );
    wait_for_log(&dir, "worker", &line, Duration::from_secs(10));
    // Several retries (backoff 0.1, 0.2, 0.4, 0.8 s...) and still one line.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(w.child.try_wait().unwrap().is_none(), "it keeps retrying");
    w.kill();
    let log = read_log(dir.path(), "worker", "stderr");
    assert_eq!(log.matches(&line).count(), 1, "{log}");
    assert!(!log.contains("transport error"), "{log}");
}

/// A TLS worker to a port that takes the connection and never answers (a plaintext
/// service that waits for a line, like Redis): the dial gives up at its deadline with a
/// line saying what to check, where it sat silent for ever; it keeps retrying.
#[test]
fn a_tls_worker_to_a_port_that_never_answers_says_so_at_its_deadline() {
    let dir = TempDir::new("tls-silent");
    let pki = Pki::new(dir.path());
    // Never accepted: the kernel completes the connection, nothing ever answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let mut w = worker(&dir, &url, &["--control-ca", p(&pki.ca)]);
    let line = format!(
        "no TLS answer from {url} within 10s: is the coordinator started with --control-cert? (use http:// for a plaintext control port)"
    );
    wait_for_log(&dir, "worker", &line, Duration::from_secs(60));
    assert!(w.child.try_wait().unwrap().is_none(), "it keeps retrying");
    w.kill();
}

/// A plaintext worker to a TLS port that is not a coordinator (Redis's, which resets
/// what is not TLS): a line naming TLS as the likely cause, and it keeps retrying.
#[test]
fn a_plaintext_worker_to_a_tls_port_is_told_it_may_be_tls() {
    let dir = TempDir::new("plain-to-tls-port");
    let pki = Pki::new(dir.path());
    let Some(server) = Server::with_tls(&pki, false) else {
        eprintln!("SKIP: this redis-server has no TLS support");
        return;
    };
    let url = format!("http://{}", server.tls_addr());
    let mut w = worker(&dir, &url, &[]);
    let log = wait_for_log(
        &dir,
        "worker",
        "if the coordinator serves TLS (crest run --control-cert), dial https://… with --control-ca",
        Duration::from_secs(30),
    );
    assert!(
        log.contains(&format!("cannot reach the coordinator at {url}: ")),
        "{log}"
    );
    assert!(w.child.try_wait().unwrap().is_none(), "it keeps retrying");
    w.kill();
}

/// The token never crosses the network in the clear by default: a plaintext URL to a
/// non-loopback host with a token is refused before anything is dialled.
#[test]
fn a_token_over_plaintext_to_another_host_is_refused_without_insecure() {
    let dir = TempDir::new("insecure");
    let mut w = worker(&dir, "http://192.0.2.1:7600", &[]);
    assert_eq!(w.wait(Duration::from_secs(10)), 2);
    let log = read_log(dir.path(), "worker", "stderr");
    assert!(
        log.contains("crest-worker: --coordinator http://192.0.2.1:7600: refusing to send the token in the clear to 192.0.2.1;"),
        "{log}"
    );
    assert!(log.contains("--insecure"), "{log}");
}

/// Bad certificate or key files: one line naming the flag, the file and what is wrong,
/// exit 2, before anything listens or dials.
#[test]
fn bad_tls_files_are_one_line_and_exit_2() {
    let dir = TempDir::new("tls-files");
    let pki = Pki::new(dir.path());
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let missing = dir.path().join("missing.pem");
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec![
                "--control-cert",
                p(&missing),
                "--control-key",
                p(&pki.server_key),
            ],
            format!("crest: --control-cert {:?}: cannot read:", p(&missing)),
        ),
        (
            vec![
                "--control-cert",
                p(&garbage),
                "--control-key",
                p(&pki.server_key),
            ],
            format!(
                "crest: --control-cert {:?}: no certificate in it; expected a PEM certificate",
                p(&garbage)
            ),
        ),
        (
            vec![
                "--control-cert",
                p(&pki.server_cert),
                "--control-key",
                p(&garbage),
            ],
            format!(
                "crest: --control-key {:?}: no private key in it; expected a PEM private key",
                p(&garbage)
            ),
        ),
        (
            vec![
                "--control-cert",
                p(&pki.server_cert),
                "--control-key",
                p(&pki.client_key),
            ],
            format!(
                "crest: --control-key {:?}: this key does not belong to the certificate in --control-cert {}",
                p(&pki.client_key),
                p(&pki.server_cert)
            ),
        ),
        (
            vec!["--control-cert", p(&pki.server_cert)],
            format!(
                "crest: --control-cert {:?}: needs --control-key",
                p(&pki.server_cert)
            ),
        ),
        (
            vec![
                "--control-cert",
                p(&pki.server_cert),
                "--control-key",
                p(&pki.server_key),
                "--control-client-ca",
                p(&garbage),
            ],
            format!(
                "crest: --control-client-ca {:?}: no certificate in it",
                p(&garbage)
            ),
        ),
    ];
    for (i, (flags, want)) in cases.iter().enumerate() {
        let name = format!("crest{i}");
        let mut args = vec![
            "run",
            "--listen",
            &listen,
            "--workers",
            "1",
            "--duration",
            "1s",
        ];
        args.extend_from_slice(flags);
        let mut c = Proc::spawn(&crest_bin(), &args, dir.path(), &name);
        assert_eq!(c.wait(Duration::from_secs(20)), 2, "{flags:?}");
        let err = read_log(dir.path(), &name, "stderr");
        assert!(
            err.starts_with(want.as_str()),
            "{flags:?}: want {want:?}, got {err:?}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let worker_cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--control-ca", p(&garbage)],
            format!(
                "crest-worker: --control-ca {}: no certificate in it",
                p(&garbage)
            ),
        ),
        (
            vec!["--control-ca", p(&missing)],
            format!("crest-worker: --control-ca {}: cannot read:", p(&missing)),
        ),
        (
            vec![
                "--control-ca",
                p(&pki.ca),
                "--control-client-cert",
                p(&pki.client_cert),
            ],
            format!(
                "crest-worker: --control-client-cert {}: needs --control-client-key",
                p(&pki.client_cert)
            ),
        ),
        (
            vec![
                "--control-ca",
                p(&pki.ca),
                "--control-client-cert",
                p(&pki.client_cert),
                "--control-client-key",
                p(&pki.server_key),
            ],
            format!(
                "crest-worker: --control-client-key {}: this key does not belong to the certificate in --control-client-cert {}",
                p(&pki.server_key),
                p(&pki.client_cert)
            ),
        ),
    ];
    for (i, (flags, want)) in worker_cases.iter().enumerate() {
        let name = format!("worker{i}");
        let url = format!("https://{listen}");
        let mut args = vec!["--coordinator", url.as_str()];
        args.extend_from_slice(flags);
        let mut w = Proc::spawn(&worker_bin(), &args, dir.path(), &name);
        assert_eq!(w.wait(Duration::from_secs(20)), 2, "{flags:?}");
        let err = read_log(dir.path(), &name, "stderr");
        assert!(
            err.starts_with(want.as_str()),
            "{flags:?}: want {want:?}, got {err:?}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}
