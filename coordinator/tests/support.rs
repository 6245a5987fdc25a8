//! The coordinator's end-to-end support: the real binaries, a run's report and logs, and
//! the launchers the area modules share. Servers, processes, temporary folders and the
//! test PKI come from `crest-testkit` (re-exported here).

pub use crest_testkit::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The `crest` binary under test.
pub fn crest_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_crest"))
}

/// The `crest-worker` binary (built beside `crest` by the workspace build).
pub fn worker_bin() -> PathBuf {
    let p = crest_bin().with_file_name("crest-worker");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (scripts/test.sh does: cargo build --workspace --bins)",
        p.display()
    );
    p
}

/// A 2 s run against `target` at `rate` over 4 connections (the login and TLS tests' run).
pub fn short_run<'a>(dir: &'a TempDir, target: &str, rate: &str) -> CrestRun<'a> {
    CrestRun::new(dir).args(&[
        "--target",
        target,
        "--rate",
        rate,
        "--duration",
        "2s",
        "--connections",
        "4",
    ])
}

/// Reads `dir/report.json`, checked against the published schema.
pub fn read_report(dir: &Path) -> serde_json::Value {
    read_checked(&dir.join("report.json"), "Report")
}

/// Reads a JSON file Crest wrote, after checking it against `docs/report.schema.json`'s
/// `$defs/<def>` (`scripts/validate-report.py`, Python's `jsonschema`).
pub fn read_checked(path: &Path, def: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/validate-report.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .arg(def)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("python3 {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} does not fit the schema's {def}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&text).unwrap()
}

/// Reads a captured stream of a [`Proc`].
pub fn read_log(dir: &Path, name: &str, stream: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.{stream}"))).unwrap_or_default()
}

/// `v[key]` as u64 (panics with the key when absent).
pub fn u(v: &serde_json::Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// `v[key]` as f64.
pub fn f(v: &serde_json::Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// Decodes a report histogram (base64 V2 + DEFLATE).
pub fn histogram(v: &serde_json::Value) -> crest_model::hist::Hist {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v.as_str().expect("histogram string"))
        .unwrap();
    crest_model::hist::decode(&bytes).unwrap()
}

// ---- Launchers shared by the area modules.

/// Starts a coordinator expecting `workers` remote workers plus those workers (one core
/// each, alternating over the machine's cores), and returns them with the coordinator's port.
pub fn start_cluster(
    dir: &TempDir,
    target: &str,
    workers: usize,
    run_args: &[&str],
) -> (Proc, Vec<Proc>) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = coordinator_args(&listen, workers, "30s", target, &dir.path().join("out"));
    args.extend(run_args.iter().map(|a| a.to_string()));
    let coord = Proc::spawn(&crest_bin(), &strs(&args), dir.path(), "crest");
    (coord, spawn_workers(dir, &listen, workers))
}

/// `n` remote workers (`worker0`…, as [`worker_args`] names them) dialling the
/// coordinator on `listen`.
pub fn spawn_workers(dir: &TempDir, listen: &str, n: usize) -> Vec<Proc> {
    (0..n)
        .map(|i| {
            let args = worker_args(listen, i);
            Proc::spawn(
                &worker_bin(),
                &strs(&args),
                dir.path(),
                &format!("worker{i}"),
            )
        })
        .collect()
}

/// `crest run` for a coordinator on `listen` that waits up to `wait` for `workers` remote
/// workers and writes its report to `out`.
pub fn coordinator_args(
    listen: &str,
    workers: usize,
    wait: &str,
    target: &str,
    out: &Path,
) -> Vec<String> {
    [
        "run",
        "--listen",
        listen,
        "--workers",
        &workers.to_string(),
        "--wait-timeout",
        wait,
        "--target",
        target,
        "--out",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

/// `crest-worker` arguments for worker `i` of a coordinator on `listen`: named `w<i>`, one
/// core each, alternating over the cores this process may use.
pub fn worker_args(listen: &str, i: usize) -> Vec<String> {
    let cores = crest_engine::cpus::allowed();
    let cpu = cores[i % cores.len()].to_string();
    [
        "--coordinator",
        &format!("http://{listen}"),
        "--cpus",
        &cpu,
        "--name",
        &format!("w{i}"),
    ]
    .map(String::from)
    .to_vec()
}

/// Borrows owned arguments for [`Proc::spawn`].
pub fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

pub fn finish(dir: &TempDir, coord: &mut Proc, limit: Duration) -> Value {
    finish_with(dir, coord, limit, 0)
}

pub fn finish_with(dir: &TempDir, coord: &mut Proc, limit: Duration, want: i32) -> Value {
    let code = coord.wait(limit);
    assert_eq!(
        code,
        want,
        "crest exited {code}: {}",
        read_log(dir.path(), "crest", "stderr")
    );
    read_report(&dir.path().join("out"))
}

/// The report agrees with the server: total within 1% of R·D, SET:GET within 1% of 1:10,
/// and report counts equal server counts within the requests in flight at the end.
pub fn check_against_server(
    report: &Value,
    stats: &std::collections::HashMap<String, u64>,
    rate: f64,
    secs: f64,
) {
    let set_server = stats.get("set").copied().unwrap_or(0);
    let get_server = stats.get("get").copied().unwrap_or(0);
    let total_server = set_server + get_server;
    let expected = rate * secs;
    assert!(
        (total_server as f64 - expected).abs() <= 0.01 * expected,
        "server saw {total_server} SET+GET, expected {expected} ± 1%"
    );
    let ratio = set_server as f64 / get_server as f64;
    assert!(
        (ratio - 0.1).abs() <= 0.001,
        "server SET:GET = {set_server}:{get_server} = {ratio}, expected 1:10 ± 1%"
    );
    let totals = &report["totals"];
    let in_flight = u(totals, "in_flight") + u(totals, "unsent");
    for (cmd, server) in [("SET", set_server), ("GET", get_server)] {
        let c = &report["commands"][cmd];
        let answered = u(c, "completed") + u(c, "errors");
        assert!(
            answered <= server && server <= answered + in_flight,
            "{cmd}: report answered {answered} (in flight {in_flight}), server counted {server}"
        );
        assert_eq!(u(c, "errors"), 0, "{cmd} errors: {}", c["errors_by_kind"]);
    }
    assert_eq!(u(totals, "scheduled"), expected as u64, "scheduled count");
    assert!(
        report["checks"]["intervals_match_totals"]
            .as_bool()
            .unwrap(),
        "{}",
        report["checks"]
    );
    let timeline = report["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), secs as usize);
    for p in timeline {
        assert!((f(p, "target_rate") - rate).abs() < 1e-6 * rate, "{p}");
    }
}

/// Runs `crest` with `args`, expects exit code 2 and `needle` in what it printed, never a
/// panic; returns stderr.
pub fn crest_fails(args: &[&str], needle: &str) -> String {
    let dir = TempDir::new("usage");
    let mut p = Proc::spawn(&crest_bin(), args, dir.path(), "crest");
    let code = p.wait(Duration::from_secs(30));
    let err = read_log(dir.path(), "crest", "stderr");
    assert_eq!(code, 2, "{args:?} exited {code}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: stderr lacks {needle:?}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Every shipped example profile, with the flags that make it a short test run.
pub const EXAMPLE_RUNS: [(&str, &[&str]); 4] = [
    (
        "valkey-1m-rps.toml",
        &[
            "--rate-scale",
            "0.004",
            "--time-scale",
            "0.02",
            "--keys",
            "5000",
            // The profile's 5 s warm-up is for a real server; the checks here are counts.
            "--warmup",
            "500ms",
        ],
    ),
    (
        "peaks-and-valleys.toml",
        &["--rate-scale", "0.02", "--time-scale", "0.02"],
    ),
    (
        "noisy-neighbour.toml",
        &[
            "--rate-scale",
            "0.02",
            "--time-scale",
            "0.05",
            "--warmup",
            "500ms",
        ],
    ),
    ("zset-growth.toml", &["--batch", "1000", "--requests", "40"]),
];

/// `examples/`.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

/// One `crest run` as the tests start it: `crest run ARGS --threads 1 --out DIR/out`
/// (one shard, so counts per connection are predictable on 2 cores).
pub struct CrestRun<'a> {
    dir: &'a TempDir,
    args: Vec<String>,
    one_thread: bool,
    env: Vec<(String, String)>,
}

impl<'a> CrestRun<'a> {
    /// A run whose files go under `dir`.
    pub fn new(dir: &'a TempDir) -> Self {
        Self {
            dir,
            args: vec!["run".into()],
            one_thread: true,
            env: Vec::new(),
        }
    }

    /// Exactly `args` (starting with `run`, choosing their own `--threads`), plus `--out`.
    pub fn exactly(dir: &'a TempDir, args: &[&str]) -> Self {
        Self {
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
            one_thread: false,
            env: Vec::new(),
        }
    }

    /// Appends arguments.
    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Sets an environment variable of the run.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Lets the local worker use every core (no `--threads 1`).
    pub fn all_threads(mut self) -> Self {
        self.one_thread = false;
        self
    }

    /// Where the report goes.
    pub fn out(&self) -> PathBuf {
        self.dir.path().join("out")
    }

    /// Starts it.
    pub fn spawn(self) -> Proc {
        let out = self.out().to_str().unwrap().to_string();
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        if self.one_thread {
            args.extend_from_slice(&["--threads", "1"]);
        }
        args.extend_from_slice(&["--out", &out]);
        Proc::spawn_env(&crest_bin(), &args, self.dir.path(), "crest", &self.env)
    }

    /// Runs it to the end (at most 120 s), asserts its exit code and returns its report
    /// (`Null` for exit code 2, which writes none).
    pub fn run(self, want: i32) -> Value {
        let (dir, out, args) = (self.dir, self.out(), self.args.clone());
        let mut p = self.spawn();
        let code = p.wait(Duration::from_secs(120));
        assert_eq!(
            code,
            want,
            "crest {args:?} exited {code}: {}",
            read_log(dir.path(), "crest", "stderr")
        );
        if want == 2 {
            return Value::Null;
        }
        read_report(&out)
    }
}

/// The histograms of an hlog, as (tag, start s, histogram); panics naming a line that does
/// not parse.
pub fn hlog(path: &Path) -> Vec<(Option<String>, f64, crest_model::hist::Hist)> {
    use base64::Engine as _;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    let text = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    for e in IntervalLogIterator::new(&text) {
        if let LogEntry::Interval(h) = e.unwrap_or_else(|e| panic!("hlog does not parse: {e:?}")) {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(h.encoded_histogram())
                .unwrap();
            out.push((
                h.tag().map(|t| t.as_str().to_string()),
                h.start_timestamp().as_secs_f64(),
                crest_model::hist::decode(&bytes).unwrap(),
            ));
        }
    }
    out
}

/// Every scheduled request of `r` is in exactly one place (completed, failed, in flight,
/// never sent), and the intervals add up to the totals.
pub fn assert_balanced(name: &str, r: &Value) {
    let t = &r["totals"];
    assert_eq!(
        u(t, "scheduled"),
        u(t, "completed") + u(t, "errors") + u(t, "in_flight") + u(t, "unsent"),
        "{name}: books do not balance: {t}"
    );
    assert_eq!(
        r["checks"]["intervals_match_totals"], true,
        "{name}: {}",
        r["checks"]
    );
}

/// `tests/delay_relay.py` on a free loopback port: each request held `delay_ms` and each
/// reply `reply_delay_ms` before it is forwarded. Returns the process and its address.
pub fn delay_relay(
    to: &str,
    delay_ms: &str,
    reply_delay_ms: &str,
    dir: &Path,
    name: &str,
) -> (std::process::Child, String) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/delay_relay.py");
    let log = std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap();
    let mut child = Command::new("python3")
        .arg(&script)
        .args([
            "--listen",
            &listen,
            "--to",
            to,
            "--delay-ms",
            delay_ms,
            "--mark",
            "0",
            "--reply-delay-ms",
            reply_delay_ms,
        ])
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("listening"), "{name}: {line}");
    (child, listen)
}

/// Waits (at most 30 s) until `primary`'s `INFO replication` lists `n` online replicas.
pub fn wait_online(primary: &Server, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let online = match primary.command(&[b"INFO", b"replication"]) {
            crest_resp::Frame::Bulk(b) => {
                String::from_utf8_lossy(&b).matches("state=online").count()
            }
            other => panic!("{other:?}"),
        };
        if online >= n {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{n} replica(s) never synced"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
