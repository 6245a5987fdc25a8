//! `crest suite`: valkey-benchmark's default tests, the same commands, keys and values it
//! sends, each run as a whole `crest run`, printed in its formats (`-q` lines, `--csv`).
//!
//! # Design
//! - [`tests`]: the pinned test list of a suite version (`redis-7.0`: the 20 tests of
//!   redis-benchmark 7.0; `valkey-8.1`: the same plus `XADD`), each a command string the
//!   engine sends byte for byte as valkey-benchmark does: literal key names
//!   (`key:__rand_int__`) without `-r`, 12-digit zero-padded numbers below `-r` with it
//!   (`__rand12__`), the payload from valkey-benchmark's own generator ([`data`]), and
//!   `PING_INLINE` inline.
//! - [`run`]: each selected test in order, closed loop with exactly `-n` requests over `-c`
//!   connections of `-P` pipelined requests (the compatibility mode), or open loop at
//!   `--rate` for `-n / rate` seconds; each through [`crate::compare::run_one`], so
//!   the workers, the report and the truth check are `crest run`'s.
//! - this module also formats the results: valkey-benchmark's `-q` line
//!   (`SET: 46511.62 requests per second, p50=0.135 msec`), its `--csv` rows, and a longer
//!   block per test by default.
//!
//! Latency is Crest's: from each request's intended time (its issue time in the closed
//! loop), per request. valkey-benchmark times a pipeline batch to its first readable byte
//! and gives every reply of the batch that value, so with `-P` above 1 the two differ.

use crate::cli::RunArgs;
use crate::compare::{CompareError, run_one};
use crate::config::RateArg;
use crest_report::Report;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::PathBuf;
use tokio::sync::watch;

/// valkey-benchmark's payload generator (`genBenchmarkRandomData`): an LCG seeded with
/// 1234, one byte `'0' + ((state >> 16) & 63)` per step; the first 3 bytes are `VXK`.
pub fn data(size: usize) -> String {
    let mut state: u32 = 1234;
    (0..size)
        .map(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            char::from(b'0' + ((state >> 16) & 63) as u8)
        })
        .collect()
}

/// Which list of tests: the tests a given valkey-benchmark/redis-benchmark runs by
/// default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Suite {
    /// redis-benchmark 7.0: 20 tests, no XADD.
    #[value(name = "redis-7.0")]
    Redis70,
    /// redis-benchmark 7.2 and valkey-benchmark 7.2 to 8.1: the same plus XADD.
    #[value(name = "valkey-8.1")]
    Valkey81,
}

/// One test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Test {
    /// The title valkey-benchmark prints (`SET`, `LRANGE_100 (first 100 elements)`).
    pub title: String,
    /// Its `-t` name.
    pub name: &'static str,
    /// The command string Crest sends.
    pub command: String,
}

/// The tests of `suite` in valkey-benchmark's order, for payload `data` and keyspace
/// `random` (`-r`; None: literal `__rand_int__` names, one key each).
pub fn tests(suite: Suite, data: &str, random: Option<u64>) -> Vec<Test> {
    let r = if random.is_some() {
        "__rand12__"
    } else {
        "__rand_int__"
    };
    let t = |title: &str, name: &'static str, command: String| Test {
        title: title.to_string(),
        name,
        command,
    };
    let mut v = vec![
        t("PING_INLINE", "ping_inline", "inline:PING".into()),
        t("PING_MBULK", "ping_mbulk", "PING".into()),
        t("SET", "set", format!("SET key:{r} {data}")),
        t("GET", "get", format!("GET key:{r}")),
        t("INCR", "incr", format!("INCR counter:{r}")),
        t("LPUSH", "lpush", format!("LPUSH mylist {data}")),
        t("RPUSH", "rpush", format!("RPUSH mylist {data}")),
        t("LPOP", "lpop", "LPOP mylist".into()),
        t("RPOP", "rpop", "RPOP mylist".into()),
        t("SADD", "sadd", format!("SADD myset element:{r}")),
        t("HSET", "hset", format!("HSET myhash element:{r} {data}")),
        t("SPOP", "spop", "SPOP myset".into()),
        t(
            "ZADD",
            "zadd",
            format!(
                "ZADD myzset {} element:{r}",
                if random.is_some() { r } else { "0" }
            ),
        ),
        t("ZPOPMIN", "zpopmin", "ZPOPMIN myzset".into()),
        t(
            "LPUSH (needed to benchmark LRANGE)",
            "lrange_prepare",
            format!("LPUSH mylist {data}"),
        ),
    ];
    for n in [100, 300, 500, 600] {
        v.push(t(
            &format!("LRANGE_{n} (first {n} elements)"),
            match n {
                100 => "lrange_100",
                300 => "lrange_300",
                500 => "lrange_500",
                _ => "lrange_600",
            },
            format!("LRANGE mylist 0 {}", n - 1),
        ));
    }
    let mset: String = (0..10).map(|_| format!(" key:{r} {data}")).collect();
    v.push(t("MSET (10 keys)", "mset", format!("MSET{mset}")));
    if suite == Suite::Valkey81 {
        v.push(t("XADD", "xadd", format!("XADD mystream * myfield {data}")));
    }
    v
}

/// The tests `-t` selects, in the list's order: `ping` is both pings, `lrange` the four
/// LRANGEs, and any LRANGE brings the LPUSH it needs first.
///
/// # Errors
/// A name no test has, with the names there are.
pub fn select(all: Vec<Test>, list: Option<&str>) -> Result<Vec<Test>, String> {
    let Some(list) = list else {
        return Ok(all);
    };
    let wanted: Vec<String> = list
        .split(',')
        .map(|w| w.trim().to_ascii_lowercase())
        .filter(|w| !w.is_empty())
        .collect();
    let known = |w: &str| all.iter().any(|t| t.name == w) || matches!(w, "ping" | "lrange");
    let names: Vec<&str> = all
        .iter()
        .map(|t| t.name)
        .filter(|n| *n != "lrange_prepare")
        .collect();
    if wanted.is_empty() {
        return Err(format!(
            "-t {list:?}: an empty test list; give some of: ping, {}, lrange (or leave -t out for all)",
            names.join(", ")
        ));
    }
    if let Some(bad) = wanted.iter().find(|w| !known(w) || *w == "lrange_prepare") {
        return Err(format!(
            "-t {list}: no test {bad:?} in this suite; give some of: ping, {}, lrange",
            names.join(", ")
        ));
    }
    let picked = |t: &Test| {
        wanted.iter().any(|w| {
            w == t.name
                || (w == "ping" && t.name.starts_with("ping_"))
                || (w == "lrange" && t.name.starts_with("lrange"))
        })
    };
    let lrange = all
        .iter()
        .any(|t| t.name.starts_with("lrange_") && t.name != "lrange_prepare" && picked(t));
    Ok(all
        .into_iter()
        .filter(|t| picked(t) || (t.name == "lrange_prepare" && lrange))
        .collect())
}

/// The suite's own settings.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The tests, in order.
    pub tests: Vec<Test>,
    /// `-n`: requests per test.
    pub requests: u64,
    /// `-c`: connections.
    pub clients: u32,
    /// `-P`: pipeline.
    pub pipeline: u32,
    /// `-r`: the keyspace of `__rand12__` (None: literal names).
    pub random: Option<u64>,
    /// `--rate`: open loop at this rate (None: closed loop, valkey-benchmark's way).
    pub rate: Option<f64>,
}

/// `suite.json`: the suite's settings and each test's result.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SuiteFile {
    /// Which suite (`Default`, `Cache`, ...).
    pub suite: String,
    /// `-n`: requests per test.
    pub requests: u64,
    /// `-c`: connections.
    pub clients: u32,
    /// `-P`: pipeline.
    pub pipeline: u32,
    /// `-d`: bytes of each value.
    pub payload_bytes: usize,
    /// `-r`: the keyspace of `__rand12__` (null: literal names).
    pub random: Option<u64>,
    /// `--rate`: the open-loop rate (null: closed loop).
    pub rate: Option<f64>,
    /// Each test's result, in order.
    pub tests: Vec<Outcome>,
}

impl SuiteFile {
    /// `suite.json` of `plan` (suite `which`, values of `payload_bytes`) and its outcomes.
    pub fn of(which: String, plan: &Plan, payload_bytes: usize, tests: Vec<Outcome>) -> Self {
        Self {
            suite: which,
            requests: plan.requests,
            clients: plan.clients,
            pipeline: plan.pipeline,
            payload_bytes,
            random: plan.random,
            rate: plan.rate,
            tests,
        }
    }
}

/// One test's result.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Outcome {
    /// The test.
    #[serde(flatten)]
    pub test: Test,
    /// Requests answered without an error.
    pub completed: u64,
    /// Failed requests.
    pub errors: u64,
    /// Of the completed, nil replies (`SPOP` of an empty set).
    pub misses: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Completed requests per second.
    pub rps: f64,
    /// Latency, ms: mean, min, p50, p95, p99, max.
    pub avg_ms: f64,
    /// Smallest.
    pub min_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// The truth check's words (`server agrees: SET 1,000 = 1,000`), or why there is
    /// none.
    pub server: String,
    /// The report was whole.
    pub complete: bool,
}

impl Outcome {
    fn of(test: Test, r: &Report) -> Self {
        let t = &r.totals.summary;
        let lat = r
            .classes
            .values()
            .next()
            .and_then(|c| crest_report::html::decode_b64(&c.histograms.latency));
        let ms = |ns: u64| ns as f64 / 1e6;
        let (min_ms, p95_ms) = lat
            .as_ref()
            .map_or((0.0, 0.0), |h| (ms(h.min()), ms(h.value_at_quantile(0.95))));
        let server = match &r.server {
            Some(s) if s.agrees == Some(true) => format!(
                "server agrees: {}",
                crest_report::server::series::agreement_words(&s.agreement, &s.other_commands)
            ),
            Some(s) if s.agrees == Some(false) => format!(
                "server DISAGREES: {}",
                crest_report::server::series::disagreement_words(&s.agreement, &s.other_commands)
            ),
            Some(s) => format!(
                "server not checked: {}",
                s.unchecked.as_deref().unwrap_or("")
            ),
            None => format!("server not sampled: {}", r.server_stats),
        };
        Self {
            test,
            completed: t.completed,
            errors: t.errors,
            misses: t.misses,
            seconds: r.duration_s,
            rps: if r.duration_s > 0.0 {
                t.completed as f64 / r.duration_s
            } else {
                0.0
            },
            avg_ms: t.latency_us.mean / 1e3,
            min_ms,
            p50_ms: t.latency_us.p50 / 1e3,
            p95_ms,
            p99_ms: t.latency_us.p99 / 1e3,
            max_ms: t.latency_us.max / 1e3,
            server,
            complete: r.complete,
        }
    }

    /// valkey-benchmark's `-q` line; a test where no request completed says so instead of
    /// a latency.
    pub fn quiet(&self) -> String {
        if self.completed == 0 {
            return format!(
                "{}: 0.00 requests per second, no request completed ({} errors)",
                self.test.title, self.errors
            );
        }
        format!(
            "{}: {:.2} requests per second, p50={:.3} msec",
            self.test.title, self.rps, self.p50_ms
        )
    }

    /// valkey-benchmark's `--csv` row; empty latency fields where no request completed.
    pub fn csv(&self) -> String {
        let ms: Vec<String> = self
            .latencies_ms()
            .iter()
            .map(|v| {
                if self.completed == 0 {
                    "\"\"".to_string()
                } else {
                    format!("\"{v:.3}\"")
                }
            })
            .collect();
        format!(
            "\"{}\",\"{:.2}\",{}",
            self.test.title,
            self.rps,
            ms.join(",")
        )
    }

    /// avg, min, p50, p95, p99, max, ms.
    fn latencies_ms(&self) -> [f64; 6] {
        [
            self.avg_ms,
            self.min_ms,
            self.p50_ms,
            self.p95_ms,
            self.p99_ms,
            self.max_ms,
        ]
    }

    /// Requests failed: how many of how many (the test's figures are of the rest, or of
    /// nothing when none completed).
    pub fn failures(&self) -> Option<String> {
        (self.errors > 0).then(|| {
            let of = self.completed + self.errors;
            if self.completed == 0 {
                format!(
                    "{}: every request failed ({} of {of}): no figure; see the errors in its report (--out)",
                    self.test.title, self.errors
                )
            } else {
                format!(
                    "{}: {} of {of} requests failed; its figures are of the {} that completed",
                    self.test.title, self.errors, self.completed
                )
            }
        })
    }

    /// Most replies were nil: the test measured next to nothing (valkey-benchmark's SPOP
    /// and ZPOPMIN without `-r`, whose SADD and ZADD add one member).
    pub fn degenerate(&self) -> Option<String> {
        (self.completed > 0 && self.misses * 2 > self.completed).then(|| {
            format!(
                "{}: {} of {} replies were nil: it read or popped what was not there{}",
                self.test.title,
                self.misses,
                self.completed,
                if matches!(self.test.name, "spop" | "zpopmin") {
                    " (without -r, SADD and ZADD add one member)"
                } else {
                    ""
                }
            )
        })
    }

    /// The block printed per test without `-q` or `--csv`.
    pub fn block(&self, plan: &Plan, payload: usize) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "====== {} ======", self.test.title);
        let _ = writeln!(
            out,
            "  {} requests completed in {:.2} seconds, {} errors",
            self.completed, self.seconds, self.errors
        );
        let _ = writeln!(out, "  {} parallel clients", plan.clients);
        let _ = writeln!(out, "  {payload} bytes payload");
        let _ = writeln!(
            out,
            "  {}",
            match plan.rate {
                Some(r) => format!("open loop at {r:.0} requests per second"),
                None => format!("closed loop, pipeline {}", plan.pipeline),
            }
        );
        let named: Vec<String> = ["avg", "min", "p50", "p95", "p99", "max"]
            .iter()
            .zip(self.latencies_ms())
            .map(|(n, v)| format!("{n} {v:.3}"))
            .collect();
        let from = if plan.rate.is_some() {
            "intended"
        } else {
            "issue"
        };
        if self.completed == 0 {
            let _ = writeln!(
                out,
                "  latency from each request's {from} time: none, no request completed"
            );
        } else {
            let _ = writeln!(
                out,
                "  latency from each request's {from} time, ms: {}",
                named.join(" ")
            );
        }
        let _ = writeln!(out, "  {}", self.server);
        for w in self.failures().into_iter().chain(self.degenerate()) {
            let _ = writeln!(out, "  WARNING: {w}");
        }
        let _ = writeln!(out, "  {:.2} requests per second\n", self.rps);
        out
    }
}

/// valkey-benchmark's `--csv` header.
pub const CSV_HEADER: &str = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"";

/// Most requests a test may ask for.
pub const MAX_REQUESTS: u64 = 1_000_000_000;

/// Runs every test of `plan` in order with the connection flags of `base` (`--target`,
/// login, TLS, workers); each test's report goes to `out/NN-name/` when `out` is given.
/// `line` is called with each outcome as it comes.
///
/// # Errors
/// [`CompareError::Usage`] for settings a test refuses (before that test's load), or
/// [`CompareError::Failed`] when a test could not be run.
pub async fn run(
    base: RunArgs,
    plan: &Plan,
    out: Option<PathBuf>,
    interrupt: watch::Receiver<bool>,
    mut line: impl FnMut(&Outcome),
) -> Result<Vec<Outcome>, CompareError> {
    if plan.requests == 0 || plan.requests > MAX_REQUESTS {
        return Err(CompareError::Usage(format!(
            "-n {}: give 1 to {MAX_REQUESTS} requests per test",
            plan.requests
        )));
    }
    if plan.clients == 0 {
        return Err(CompareError::Usage(
            "-c 0: give at least one client (connection)".into(),
        ));
    }
    let base = base_config(base, plan)?;
    let mut outcomes = Vec::new();
    for (i, test) in plan.tests.iter().enumerate() {
        if *interrupt.borrow() {
            break;
        }
        let mut cfg = base.clone();
        let class = &mut cfg.classes[0];
        class.shape.mix = vec![(test.command.clone(), 1)];
        crate::config::check_class(class, true, base.protocol).map_err(|mut e| {
            e.flag = "--command";
            CompareError::Usage(format!("{}: {e}", test.title))
        })?;
        cfg.out = out
            .as_ref()
            .map(|d| d.join(format!("{:02}-{}", i + 1, test.name)));
        cfg.label = format!("suite: {} ({} of {})", test.title, i + 1, plan.tests.len());
        if let Some(d) = &cfg.out {
            crate::output::check_writable(d).map_err(CompareError::Usage)?;
        }
        let Some(report) = run_one(&cfg, &interrupt, None)
            .await
            .map_err(in_suite_words)?
        else {
            break;
        };
        let o = Outcome::of(test.clone(), &report);
        line(&o);
        outcomes.push(o);
        if report.interrupted {
            break;
        }
    }
    Ok(outcomes)
}

/// The configuration every test shares, made and checked once from the user's flags:
/// the clients, pipeline and keyspace, one shard per client at most, and the closed loop
/// of `-n` requests (or the open loop at `--rate` for as long as `-n` takes). Each test
/// then sets only its command.
fn base_config(mut base: RunArgs, plan: &Plan) -> Result<crate::config::RunConfig, CompareError> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let first = plan.tests.first();
    base.load.command = first.map(|t| t.command.clone());
    base.load.connections = Some(plan.clients);
    base.load.pipeline = Some(plan.pipeline);
    base.load.keys = Some(plan.random.unwrap_or(1));
    let threads = base.fleet.threads.unwrap_or(cores);
    base.fleet.threads = Some(threads.min(plan.clients as usize).max(1));
    match plan.rate {
        None => {
            base.pace.rate = Some(RateArg::Max);
            base.load.requests = Some(plan.requests);
        }
        Some(r) => {
            base.pace.rate = Some(RateArg::Rps(r));
            let secs = plan.requests as f64 / r;
            let len = std::time::Duration::try_from_secs_f64(secs).map_err(|_| {
                CompareError::Usage(format!(
                    "--rate {r}: {} requests at that rate take too long; give a higher rate or a smaller -n",
                    plan.requests
                ))
            })?;
            base.load.duration = Some(len);
        }
    }
    base.pace.out = None;
    // Said as the first test's, as it would be by the first test to run.
    let title = first.map_or("", |t| t.title.as_str());
    let mut cfg = crate::cli::to_config(base).map_err(|e| match suite_flag(e.flag) {
        // A setting of every test: said with the suite's flag, as typed.
        Some(flag) => CompareError::Usage(format!("{flag} {}: {}", e.value, e.why)),
        None => CompareError::Usage(format!("{title}: {e}")),
    })?;
    cfg.quiet = true;
    Ok(cfg)
}

/// The suite's flags for the `crest run` flags it sets from them.
const SUITE_FLAGS: [(&str, &str); 3] = [
    ("--connections", "-c"),
    ("--pipeline", "-P"),
    ("--keys", "-r"),
];

/// The suite's own flag (valkey-benchmark's) for a `crest run` flag it sets from one.
fn suite_flag(run_flag: &str) -> Option<&'static str> {
    SUITE_FLAGS
        .iter()
        .find(|(run, _)| *run == run_flag)
        .map(|(_, suite)| *suite)
}

/// A test's run refused (the fleet cannot carry `-c`, a worker's open-file limit), said
/// with the suite's flags and without the class (a suite has one, `default`).
fn in_suite_words(e: CompareError) -> CompareError {
    let words = |line: String| {
        let mut line = line
            .replace(" (class default)", "")
            .replace("use fewer --connections", "use a smaller -c");
        for (run, suite) in SUITE_FLAGS {
            line = line.replace(run, suite);
        }
        line
    };
    match e {
        CompareError::Usage(m) => CompareError::Usage(words(m)),
        CompareError::Failed(m) => CompareError::Failed(words(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_is_valkey_benchmarks() {
        assert_eq!(data(3), "VXK");
        assert_eq!(data(0), "");
        assert!(data(1000).bytes().all(|b| (b'0'..=b'o').contains(&b)));
    }

    /// redis-benchmark 7.0's 20 titles in its order; valkey adds XADD.
    #[test]
    fn the_lists_are_pinned() {
        let titles: Vec<String> = tests(Suite::Redis70, "VXK", None)
            .into_iter()
            .map(|t| t.title)
            .collect();
        assert_eq!(titles.len(), 20);
        assert_eq!(titles[0], "PING_INLINE");
        assert_eq!(titles[14], "LPUSH (needed to benchmark LRANGE)");
        assert_eq!(titles[19], "MSET (10 keys)");
        assert_eq!(tests(Suite::Valkey81, "VXK", None).len(), 21);
        let set = &tests(Suite::Redis70, "VXK", None)[2];
        assert_eq!(set.command, "SET key:__rand_int__ VXK");
        let zadd = &tests(Suite::Redis70, "VXK", Some(10))[12];
        assert_eq!(zadd.command, "ZADD myzset __rand12__ element:__rand12__");
    }

    #[test]
    fn selection_follows_valkey_benchmark() {
        let all = tests(Suite::Redis70, "VXK", None);
        let names = |l: &str| -> Vec<&'static str> {
            select(all.clone(), Some(l))
                .unwrap()
                .into_iter()
                .map(|t| t.name)
                .collect()
        };
        assert_eq!(
            names("get,lrange_300"),
            ["get", "lrange_prepare", "lrange_300"]
        );
        assert_eq!(names("ping"), ["ping_inline", "ping_mbulk"]);
        assert_eq!(names("LRANGE").len(), 5);
        assert!(
            select(all.clone(), Some("xadd"))
                .unwrap_err()
                .contains("no test \"xadd\"")
        );
        for empty in ["", ",,", " , "] {
            let e = select(all.clone(), Some(empty)).unwrap_err();
            assert!(
                e.contains(": an empty test list; give some of: ping, "),
                "{e}"
            );
        }
        assert_eq!(select(all, None).unwrap().len(), 20);
    }
}
