//! The command line as a user meets it: bad input gets one clear line and exit code 2.

use crate::support::*;
use std::process::Command;

/// Bad input: one clear line naming what is wrong, exit code 2, never a panic.
#[test]
fn bad_input_gets_one_clear_line_and_exit_code_2() {
    crest_fails(&["run", "--ratio", "1:0:3"], "--ratio");
    crest_fails(&["run", "--rate", "-5"], "--rate");
    crest_fails(&["run", "--duration", "ten"], "--duration");
    crest_fails(&["run", "--value-size", "0"], "--value-size");
    crest_fails(&["run", "--value-size", "600MB"], "--value-size");
    crest_fails(&["run", "--keys", "0"], "--keys");
    crest_fails(&["run", "--connections", "0"], "--connections");
    crest_fails(&["run", "--target", "nonsense"], "--target");
    crest_fails(&["run", "--requests", "5"], "--requests");
    crest_fails(&["run", "--mix", "GET=1,FLY=2"], "FLY");
    crest_fails(&["run", "--key-dist", "zipf:0"], "--key-dist");
    crest_fails(&["run", "--stages", "5s:10,-1s:4"], "--stages");
    crest_fails(&["run", "--interval", "1ms"], "--interval");
    // Absurd sizes are refused by name before any load, never a panic or a giant allocation.
    crest_fails(&["run", "--duration", "1e20"], "--duration");
    crest_fails(&["run", "--duration", "1e9"], "--duration");
    crest_fails(&["run", "--warmup", "100000000s"], "--warmup");
    crest_fails(&["run", "--timeout", "0s"], "--timeout");
    crest_fails(&["run", "--rate", "1e12"], "--rate");
    crest_fails(&["run", "--pipeline", "1000000"], "--pipeline");
    crest_fails(&["run", "--backlog-limit", "0"], "--backlog-limit");
    crest_fails(
        &["run", "--threads", "1", "--connections", "10000000"],
        "--connections",
    );
    crest_fails(
        &["run", "--stages", "5s:100", "--time-scale", "1e300"],
        "--time-scale",
    );
    crest_fails(
        &["run", "--threads", "2", "--connections", "1"],
        "--connections",
    );
    // Nothing listens on this port: the workers cannot connect, the run stops with exit 2.
    let port = free_port().to_string();
    let target = format!("127.0.0.1:{port}");
    crest_fails(
        &["run", "--target", &target, "--duration", "2s"],
        "cannot connect",
    );
}

/// The exact line for each bad input a user was seen to type: what is wrong and what
/// would be right, on one line, exit code 2 (the table is the contract; change a line
/// here only when the message gets better).
#[test]
fn each_bad_input_gets_its_exact_line() {
    let dir = TempDir::new("lines");
    let empty_name = dir.path().join("empty-name.toml");
    std::fs::write(
        &empty_name,
        "duration = \"1s\"\n[[class]]\nname = \"\"\nrate = 10\n",
    )
    .unwrap();
    let empty_name = empty_name.to_string_lossy().into_owned();
    let file = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.to_string_lossy().into_owned()
    };
    let class = |body: &str| format!("duration = \"1s\"\n[[class]]\n{body}\n");
    let conn0 = file(
        "conn0.toml",
        &class("name = \"a\"\nrate = 10\nconnections = 0"),
    );
    let getx = file(
        "getx.toml",
        &class("name = \"a\"\nrate = 10\nmix = { GETT = 1 }"),
    );
    let rate_neg = file("rate-neg.toml", &class("name = \"a\"\nrate = -1"));
    let bidi = file("bidi.toml", &class("name = \"a\\u202eevil\"\nrate = 10"));
    let zwsp = file("zwsp.toml", &class("name = \"a\\u200b\"\nrate = 10"));
    let deep = file(
        "deep.toml",
        &format!("x = {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
    );
    let deep_line = format!(
        r#"--profile "{deep}": TOML parse error at line 1, column 84: recursion limit exceeded (the line: "x = {}…")"#,
        "[".repeat(196)
    );
    let suite_tests = "ping, ping_inline, ping_mbulk, set, get, incr, lpush, rpush, lpop, rpop, sadd, hset, spop, zadd, zpopmin, lrange_100, lrange_300, lrange_500, lrange_600, mset, lrange";
    let empty_t = format!(
        r#"-t "": an empty test list; give some of: {suite_tests} (or leave -t out for all)"#
    );
    let commas_t = format!(
        r#"-t ",,": an empty test list; give some of: {suite_tests} (or leave -t out for all)"#
    );
    let table: &[(&[&str], &str)] = &[
        (
            &["--duration", "0s"],
            r#"--duration "0s": must be > 0, e.g. 10s"#,
        ),
        (
            &["--duration", "-1s"],
            r#"--duration "-1s": a duration cannot be negative; expected e.g. 10s, 500ms, 2m"#,
        ),
        (
            &["--duration", "3h", "--interval", "10ms"],
            r#"--interval "10ms": a 3h run would have 1080000 timeline rows, at most 1000000 (every row is kept for the report); give a longer --interval"#,
        ),
        (
            &["--seed", "-1"],
            r#"--seed "-1": expected a whole number from 0 to 18446744073709551615"#,
        ),
        (
            &["--rate", "1e400"],
            r#"--rate "1e400": more than the 1000000000 requests per second any run can schedule; give e.g. 20000, or max for closed loop"#,
        ),
        (
            &["--rate", "0"],
            r#"--rate "0": must be > 0 requests per second, e.g. 20000, or max"#,
        ),
        (
            &["--mix", "GET=99999999999999999999"],
            r#"--mix "GET=99999999999999999999": weight 99999999999999999999 is too large; weights are whole numbers 0 to 4294967295"#,
        ),
        (
            &["--mix", "GET=x"],
            r#"--mix "GET=x": weight "x" is not a whole number; expected e.g. GET=10,SET=1"#,
        ),
        (
            &["--command", ""],
            r#"--command "": is empty; give a command template, e.g. "LPUSH mylist __value__""#,
        ),
        (
            &["--command", "SET __nope__ __value__"],
            r#"--command "SET __nope__ __value__": unknown placeholder __nope__; known: __key__ __value__ __field__ __member__ __score__ __ttl__ __rand_int__ __data__ __rand12__"#,
        ),
        (
            &["--rate", "100", "--stages", "1s:100"],
            "the argument '--rate <RATE>' cannot be used with '--stages <STAGES>'; give one or the other",
        ),
        (
            &["--ratio", "1:2", "--mix", "GET=1"],
            "the argument '--ratio <RATIO>' cannot be used with '--mix <MIX>'; give one or the other",
        ),
        (
            &["--command", "GET k", "--mix", "GET=1"],
            "the argument '--command <COMMAND>' cannot be used with '--mix <MIX>'; give one or the other",
        ),
        (
            &["--rat", "5"],
            "unexpected argument '--rat' found; did you mean --rate?",
        ),
        (
            &["--resp", "4"],
            r#"--resp "4": expected 2 (RESP2, the default) or 3 (RESP3, via HELLO 3)"#,
        ),
        (
            &["--tracking"],
            r#"--tracking "on": needs --resp 3: the invalidations it asks for are RESP3 push frames"#,
        ),
        (
            &["--pacer", "fast"],
            r#"--pacer "fast": expected sleep, spin, or sleep:TOLERANCE (e.g. sleep:200us, at most 10ms)"#,
        ),
        (
            &["--pacer", "sleep:20ms"],
            r#"--pacer "sleep:20ms": expected sleep, spin, or sleep:TOLERANCE (e.g. sleep:200us, at most 10ms)"#,
        ),
        (
            &["--duration"],
            "a value is required for '--duration <DURATION>' but none was supplied; see --help",
        ),
        (
            &["--profile", &empty_name],
            r#"name "": the class at line 2 has an empty name; give it one like "small", or leave name out"#,
        ),
        // A negative number is the flag's value, not an unknown flag.
        (
            &["--connections", "-5"],
            r#"--connections "-5": cannot be negative; give a whole number"#,
        ),
        // A negative size with a unit is the flag's value too.
        (
            &["--value-size", "-1k"],
            r#"--value-size "-1k": a size cannot be negative; give e.g. 1024, 1k, 100-4096 or 100:3,4k:1"#,
        ),
        // Endless files behind file flags: read up to a cap, then one line.
        (
            &["--target", "127.0.0.1:1", "--password-file", "/dev/zero"],
            r#"--password-file "/dev/zero": cannot read: larger than 64 KiB"#,
        ),
        (
            &["--profile", "/dev/zero"],
            r#"--profile "/dev/zero": cannot read: larger than 16 MiB"#,
        ),
        (
            &["--target", "127.0.0.1:1", "--tls", "--cacert", "/dev/zero"],
            r#"--cacert "/dev/zero": cannot read: larger than 4 MiB"#,
        ),
        (
            &["--threads", "2", "--rate", "1e9"],
            "--rate (class default): a peak of 1000000000 requests/s is 500000000 per shard over the 2 shards the workers run; a shard schedules at most 5000000/s: use at least 200 shards (more workers or threads) or a lower rate",
        ),
        // A profile's class setting: the class, then its key and value.
        (
            &["--profile", &conn0],
            r#"class "a": connections "0": need at least 1 connection"#,
        ),
        (
            &["--profile", &getx],
            r#"class "a": mix "GETT": unknown command "GETT"; known: GET SET DEL EXISTS INCR EXPIRE MGET MSET HSET HGET HGETALL LPUSH RPUSH LPOP RPOP LRANGE SADD SREM SISMEMBER ZADD ZREM ZRANGE ZRANGEBYSCORE ZCARD PING SPOP ZPOPMIN XADD or a template like "SET __key__ __value__ EX 60""#,
        ),
        (
            &["--profile", &rate_neg],
            r#"class "a": at line 2: `rate` = -1: must be ≥ 0"#,
        ),
        // Format characters hide in a class name as control characters do.
        (
            &["--profile", &bidi],
            r#"name "a\u{202e}evil": the class at line 2 has an invisible character U+202E in its name (control and format characters are refused); give it one like "small", or leave name out"#,
        ),
        (
            &["--profile", &zwsp],
            r#"name "a\u{200b}": the class at line 2 has an invisible character U+200B in its name (control and format characters are refused); give it one like "small", or leave name out"#,
        ),
        // A 100,000-deep array: the line is quoted up to 200 characters.
        (&["--profile", &deep], deep_line.as_str()),
        // compare, suite and search name their own flags.
        (
            &["compare", "a=", "b.json"],
            "a=: no file after the label; give LABEL=FILE, e.g. a=runs/1/report.json",
        ),
        (
            &["compare", "--target", "a=", "--target", "b=127.0.0.1:1"],
            "--target a=: no address after the label; give LABEL=HOST:PORT, e.g. a=127.0.0.1:6379",
        ),
        (
            &["suite", "--suite", "redis-7.0", "-t", ""],
            empty_t.as_str(),
        ),
        (
            &["suite", "--suite", "redis-7.0", "-t", ",,"],
            commas_t.as_str(),
        ),
        (
            &["suite", "--suite", "redis-7.0", "-t", "get", "-P", "0"],
            "-P 0: need at least 1 request in flight per connection",
        ),
        (
            &[
                "suite",
                "--suite",
                "redis-7.0",
                "-t",
                "get",
                "-P",
                "1000000",
            ],
            "-P 1000000: at most 65536 requests in flight per connection",
        ),
        (
            &["suite", "--suite", "redis-7.0", "-t", "get", "-r", "0"],
            "-r 0: the keyspace needs at least 1 key",
        ),
        (
            &[
                "suite",
                "--suite",
                "redis-7.0",
                "-t",
                "get",
                "--threads",
                "1",
                "-c",
                "1000000",
            ],
            "-c 1000000: 1000000 per shard over the 1 shards the workers run; a shard opens at most 65536: add workers or threads, or use fewer connections",
        ),
        (
            &[
                "search", "--slo", "p99<=1ms", "--min", "100", "--max", "1e12",
            ],
            "--max 1000000000000: a search may climb to at most 1e9 requests/s; give e.g. --max 1000000",
        ),
        (
            &[
                "search", "--slo", "p99<=1ms", "--min", "1e12", "--max", "1e12",
            ],
            "--min 1000000000000: a search may climb to at most 1e9 requests/s; give e.g. --min 1000",
        ),
    ];
    for (flags, line) in table {
        // `crest run` unless the row names another command.
        let mut args = match flags.first() {
            Some(&("compare" | "suite" | "search")) => vec![],
            _ => vec!["run"],
        };
        args.extend_from_slice(flags);
        let err = crest_fails(&args, line);
        // Errors found once workers registered follow the lines that say so.
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert_eq!(last, format!("crest: {line}"), "{flags:?}: {err}");
        // A suite without --target says which built-in target it starts first.
        let lines = err
            .trim_end()
            .lines()
            .filter(|l| !l.starts_with("crest: no --target given"))
            .count();
        if !flags.contains(&"1e9") {
            assert_eq!(lines, 1, "{flags:?}: {err}");
        }
    }
}

/// More connections than the open-file limit allows: one line before any load, not
/// thousands of `EMFILE` connect failures and exit 0.
#[test]
fn connections_beyond_the_open_file_limit_are_refused_up_front() {
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 256 && exec "$0" run --connections 1000 --duration 1s"#)
        .arg(crest_bin())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("crest: worker local-0: 1000 connections need ")
            && last.contains(
                "open files, but the limit is 256 (hard limit 256); raise it (ulimit -n "
            )
            && last.ends_with("or use fewer --connections"),
        "{err}"
    );
}

/// A run refused by its worker before the first interval (here its open-file limit): the
/// refusal printed once (not also as the in-process worker's warning), and nothing left
/// in `--out` (no header-only `timeline.csv` or `latency.hlog`).
#[test]
fn a_run_refused_before_it_starts_leaves_no_files_and_says_it_once() {
    let dir = TempDir::new("refused-out");
    let out = dir.path().join("out");
    let run = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 256 && exec "$0" run --connections 1000 --duration 1s --out "$1""#)
        .arg(crest_bin())
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_eq!(
        err.matches("open files, but the limit is 256").count(),
        1,
        "{err}"
    );
    assert!(!err.contains("run refused"), "{err}");
    assert_no_files(&out);
}

/// What a refused run left of `dir` (created by the run's check that it can write
/// there): nothing, not even the folder.
fn assert_no_files(dir: &std::path::Path) {
    let left: Vec<_> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{} holds {left:?}", dir.display());
    assert!(!dir.exists(), "{} is left behind, empty", dir.display());
}

/// A server that wants a password: one line with the server's own words, exit 2, before
/// the run starts (not a report of `NOAUTH=...` and exit 0), said once, no files left.
#[test]
fn a_server_that_wants_a_password_stops_the_run_before_it_starts() {
    let server = Server::start(Kind::Redis);
    server.command(&[b"CONFIG", b"SET", b"requirepass", b"s3cret"]);
    let target = format!("127.0.0.1:{}", server.port);
    let dir = TempDir::new("noauth-out");
    let out = dir.path().join("out");
    let out_s = out.to_string_lossy().into_owned();
    let err = crest_fails(
        &[
            "run",
            "--target",
            &target,
            "--duration",
            "2s",
            "--out",
            &out_s,
        ],
        "NOAUTH",
    );
    assert_eq!(
        err.trim_end().lines().last().unwrap_or_default(),
        format!(
            "crest: --target: worker local-0: target {target} refuses the generator: NOAUTH Authentication required. (the server requires a password: give --password, --password-file or CREST_PASSWORD, and --user for an ACL user)"
        ),
        "{err}"
    );
    assert_eq!(err.matches("refuses the generator").count(), 1, "{err}");
    assert!(!err.contains("run refused"), "{err}");
    assert_no_files(&out);
}

/// Every subcommand's `--help` ends with an example, and so does `crest --help`.
#[test]
fn every_help_has_an_example() {
    let dir = TempDir::new("help-examples");
    for sub in [
        None,
        Some("run"),
        Some("compare"),
        Some("suite"),
        Some("search"),
        Some("relay"),
        Some("report"),
        Some("sink"),
        Some("completions"),
        Some("man"),
    ] {
        let mut args: Vec<&str> = sub.into_iter().collect();
        args.push("--help");
        let mut p = Proc::spawn(&crest_bin(), &args, dir.path(), "crest");
        assert_eq!(p.wait(std::time::Duration::from_secs(30)), 0, "{args:?}");
        let out = read_log(dir.path(), "crest", "stdout");
        assert!(out.contains("Example"), "{args:?}: {out}");
        assert!(out.contains("crest "), "{args:?}: {out}");
    }
}

/// `crest completions` for bash, zsh and fish name every subcommand and run's flags (bash's
/// script parses in bash), and `crest man` writes roff pages for crest and each subcommand.
#[test]
fn completions_and_man_pages_list_what_parses() {
    let dir = TempDir::new("completions");
    let out_of = |args: &[&str]| {
        let mut p = Proc::spawn(&crest_bin(), args, dir.path(), "crest");
        assert_eq!(p.wait(std::time::Duration::from_secs(30)), 0, "{args:?}");
        read_log(dir.path(), "crest", "stdout")
    };
    for shell in ["bash", "zsh", "fish"] {
        let script = out_of(&["completions", shell]);
        // Fish names a long flag `-l conn-lifetime`, the others `--conn-lifetime`.
        for word in ["compare", "suite", "sink", "conn-lifetime", "meta"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
        if shell == "bash" {
            let path = dir.path().join("crest.bash");
            std::fs::write(&path, &script).unwrap();
            let ok = std::process::Command::new("bash")
                .arg("-n")
                .arg(&path)
                .status()
                .unwrap();
            assert!(ok.success(), "the bash completion script does not parse");
        }
    }
    let page = out_of(&["man"]);
    assert!(page.contains(".TH crest 1"), "{page}");
    assert!(page.contains("memcached"), "{page}");
    let run = out_of(&["man", "run"]);
    assert!(run.contains(".TH crest-run 1"), "{run}");
    assert!(run.contains("conn\\-lifetime"), "{run}");
    crest_fails(&["man", "nope"], "no such subcommand");
    crest_fails(&["completions", "tcsh"], "tcsh");
}
