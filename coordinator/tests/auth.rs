//! AUTH, ACL users and databases (issue #9, item 1), against real servers: every
//! connection logs in (`HELLO 2 AUTH`) and selects its database before its first request,
//! the server's counters agree with the report, the password is nowhere in what a run
//! leaves behind, and a login the server refuses stops the run before any load.

use crate::support::*;
use serde_json::Value;
use std::path::Path;

const PASSWORD: &str = "s3cret-pw-9f2c";

/// Every file under `dir` (the report, the timeline, the logs) without `needle`.
fn assert_nowhere(dir: &Path, needle: &str) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            assert_nowhere(&p, needle);
        } else {
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{} holds the password",
                p.display()
            );
        }
    }
}

/// A server with `requirepass` and an ACL user `bench` (password `pw`) that may touch
/// only `bench:*` keys.
fn acl_server(kind: Kind) -> Server {
    let s = Server::with_password(kind, PASSWORD);
    let reply = s.command(&[
        b"ACL",
        b"SETUSER",
        b"bench",
        b"on",
        b">pw",
        b"~bench:*",
        b"+@read",
        b"+@write",
        b"+select",
        b"+hello",
        b"+auth",
        b"+ping",
        b"+echo",
    ]);
    assert_eq!(
        reply,
        crest_resp::Frame::Simple(b"OK".to_vec()),
        "{reply:?}"
    );
    s
}

/// `requirepass`: a run with `--password` completes, its counts match INFO commandstats,
/// every connection (and the probe) said HELLO once, and no file or log holds the password.
#[test]
fn a_password_run_matches_the_server_and_leaves_the_password_nowhere() {
    let server = Server::with_password(Kind::Redis, PASSWORD);
    let dir = TempDir::new("auth-pass");
    let report = short_run(&dir, &server.addr(), "2000")
        .args(&["--password", PASSWORD])
        .run(0);
    let stats = server.commandstats();
    check_against_server(&report, &stats, 2000.0, 2.0);
    assert_eq!(
        stats.get("hello"),
        Some(&6),
        "4 connections + the probe + the server sampler: {stats:?}"
    );
    assert_eq!(report["auth"], Value::Bool(true));
    assert_eq!(report["user"], "default");
    assert_eq!(report["db"], 0);
    assert!(
        report["connection_errors"].as_object().unwrap().is_empty(),
        "{}",
        report["connection_errors"]
    );
    assert_nowhere(dir.path(), PASSWORD);
    let summary = read_log(dir.path(), "crest", "stdout");
    assert!(summary.contains("(user default)"), "{summary}");
}

/// A short run as the ACL user `bench` on keys under `prefix`.
fn as_bench(server: &Server, name: &str, prefix: &str) -> Value {
    let dir = TempDir::new(name);
    short_run(&dir, &server.addr(), "500")
        .args(&[
            "--user",
            "bench",
            "--password",
            "pw",
            "--key-prefix",
            prefix,
        ])
        .run(0)
}

/// An ACL user inside its key pattern gets no errors; outside it every request is
/// counted as NOPERM, with the server's message.
#[test]
fn an_acl_user_runs_in_its_keys_and_gets_noperm_outside_them() {
    let server = acl_server(Kind::Valkey);
    let report = as_bench(&server, "auth-acl", "bench:");
    let totals = &report["totals"];
    assert_eq!(u(totals, "errors"), 0, "{totals}");
    assert_eq!(u(totals, "completed"), 1000, "{totals}");
    assert_eq!(report["user"], "bench");
    // INFO is @dangerous: the sampler, logged in as bench too, is refused and says so;
    // the run goes on without server figures.
    let stats = report["server_stats"].as_str().unwrap();
    assert!(
        stats.starts_with("unavailable: the target does not answer INFO")
            && stats.contains("NOPERM"),
        "{stats}"
    );
    assert!(report["server"].is_null());

    let report = as_bench(&server, "auth-noperm", "other:");
    let totals = &report["totals"];
    assert_eq!(u(totals, "errors"), 1000, "{totals}");
    assert_eq!(u(&totals["errors_by_kind"], "NOPERM"), 1000, "{totals}");
    let message = report["error_messages"]["NOPERM"].as_str().unwrap();
    assert!(
        message.contains("No permissions to access a key"),
        "{message}"
    );
}

/// A wrong password stops the run before any load: exit 2, and the run's last line (its
/// one error line, after the progress lines) names WRONGPASS and what to check.
#[test]
fn a_wrong_password_fails_before_load_with_one_line() {
    let server = acl_server(Kind::Redis);
    for login in [
        &["--password", "nope"][..],
        &["--user", "bench", "--password", "nope"][..],
    ] {
        let dir = TempDir::new("auth-wrong");
        short_run(&dir, &server.addr(), "500").args(login).run(2);
        let err = read_log(dir.path(), "crest", "stderr");
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert_eq!(
            last,
            format!(
                "crest: --target: worker local-0: target {} refuses the generator: WRONGPASS invalid username-password pair or user is disabled. (wrong user or password: check --user and --password, --password-file, CREST_PASSWORD or the redis:// URI)",
                server.addr()
            ),
            "{err}"
        );
        assert!(!err.contains("nope"), "{err}");
    }
    let stats = server.commandstats();
    assert_eq!(stats.get("get").copied().unwrap_or(0), 0, "{stats:?}");
    assert_eq!(stats.get("set").copied().unwrap_or(0), 0, "{stats:?}");
}

/// A URI's user, password and database: the keys land in that database.
#[test]
fn a_uri_logs_in_and_selects_its_database() {
    let server = acl_server(Kind::Redis);
    let dir = TempDir::new("auth-uri");
    let uri = format!("redis://bench:pw@127.0.0.1:{}/3", server.port);
    let report = short_run(&dir, &uri, "500")
        .args(&[
            "--command",
            "SET __key__ __value__",
            "--keys",
            "100",
            "--key-dist",
            "sequential",
            "--key-prefix",
            "bench:",
        ])
        .run(0);
    assert_eq!(
        u(&report["totals"], "completed"),
        1000,
        "{}",
        report["totals"]
    );
    assert_eq!(report["target"], format!("127.0.0.1:{}", server.port));
    assert_eq!(
        (report["user"].as_str(), report["db"].as_u64()),
        (Some("bench"), Some(3))
    );
    let keyspace = server.info_stats("keyspace", "db");
    assert_eq!(
        keyspace.get("3").map(|d| d["keys"]),
        Some(100),
        "{keyspace:?}"
    );
    assert!(!keyspace.contains_key("0"), "{keyspace:?}");
    assert_nowhere(dir.path(), ":pw@");
}

/// `--password-file` and `CREST_PASSWORD` work like `--password`.
#[test]
fn a_password_file_and_the_environment_work() {
    let server = Server::with_password(Kind::Valkey, PASSWORD);
    let dir = TempDir::new("auth-file");
    let file = dir.path().join("pw.txt");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let report = short_run(&dir, &server.addr(), "200")
        .args(&["--password-file", file.to_str().unwrap(), "--db", "2"])
        .run(0);
    assert_eq!(u(&report["totals"], "errors"), 0, "{}", report["totals"]);
    assert_eq!(report["db"], 2);
    let dir = TempDir::new("auth-env");
    let report = short_run(&dir, &server.addr(), "200")
        .env("CREST_PASSWORD", PASSWORD)
        .run(0);
    assert_eq!(u(&report["totals"], "errors"), 0, "{}", report["totals"]);
    assert_eq!(report["auth"], Value::Bool(true));
    assert_nowhere(dir.path(), PASSWORD);
    let stats = server.commandstats();
    // 4 connections, the probe and the server sampler.
    assert_eq!(stats.get("select"), Some(&6), "{stats:?}");
}

/// Each bad combination is one line naming what is wrong and what would be right, and
/// never quotes the password.
#[test]
fn conflicting_or_bad_logins_get_one_line() {
    let dir = TempDir::new("auth-lines");
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\n").unwrap();
    let empty = empty.to_str().unwrap();
    let t = "redis://bench:hunter2@127.0.0.1:1/2";
    let table: &[(&[&str], &str)] = &[
        (
            &["--target", t, "--password", "hunter2"],
            r#"--password "***": the --target URI holds a password too; give the password one way"#,
        ),
        (
            &[
                "--target",
                "127.0.0.1:1",
                "--password",
                "x",
                "--password-file",
                empty,
            ],
            "and --password (or CREST_PASSWORD) are both given; give the password one way",
        ),
        (
            &["--target", t, "--db", "4"],
            r#"--db "4": the --target URI names database /2; give the database in one place"#,
        ),
        (
            &["--target", t, "--user", "alice"],
            r#"--user "alice": the --target URI names user "bench"; give the user in one place"#,
        ),
        (
            &["--target", "127.0.0.1:1", "--user", "bench"],
            r#"--user "bench": needs a password: give --password-file FILE, CREST_PASSWORD or --password (a nopass user takes any)"#,
        ),
        (
            &["--target", "127.0.0.1:1", "--password-file", empty],
            "is empty; write the server's password in it",
        ),
        (
            &["--password", "hunter2"],
            r#"--password "***": the built-in target has no users or databases; give --target host:port of a server"#,
        ),
        (
            &[
                "--target",
                "rediss://bench:hunter2@127.0.0.1:1",
                "--sni",
                "bad name",
            ],
            r#"--sni "bad name": is not a DNS name or an IP address; give the name the server's certificate lists"#,
        ),
        (
            &["--target", "redis://bench:hunter2@127.0.0.1:1/x"],
            r#"--target "redis://bench:***@127.0.0.1:1/x": database /x is not a number 0 to 2147483647; e.g. redis://host:6379/2"#,
        ),
    ];
    for (args, line) in table {
        let mut all = vec!["run"];
        all.extend_from_slice(args);
        let err = crest_fails(&all, line);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.contains("hunter2"), "{args:?}: {err}");
    }
}
