//! Multi-host on one machine: separate hosts made of network namespaces joined by veth pairs
//! to a bridge, each with its own address. A coordinator host, a server host running a real
//! valkey-server bound to its own address, and three worker hosts; every process starts with
//! `ip netns exec`. Needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN): the tests are `#[ignore]`d
//! (cargo shows them as ignored, not passed) and `scripts/test.sh` runs them when it is root.
//!
//! Layout per test (`P` = `crnet-<pid>-<case>`, a fresh `10.a.b.0/24` from pid and case):
//!
//! ```text
//!   P-br : bridge br0 (own namespace, so the host's firewall and routes never see it)
//!   P-co : 10.a.b.1   crest run --listen 10.a.b.1:7600
//!   P-sv : 10.a.b.2   valkey-server --bind 10.a.b.2 --port 6379
//!   P-w0 : 10.a.b.10  crest-worker --name w0      (P-w1 .11, P-w2 .12)
//! ```
//!
//! The delayed path (second test): the kernel has no `netem`, so worker host w2 runs
//! `tests/delay_relay.py` in its namespace, listening on 10.a.b.12:16379 and forwarding to
//! the server with every client→server chunk held 2 ms. An nft (or iptables) DNAT rule in
//! w2's OUTPUT path sends w2's connections to 10.a.b.2:6379 to the relay instead, so the
//! coordinator keeps one `--target` for every worker; the relay's own connections carry
//! SO_MARK 42, which the rule skips. The other hosts are untouched.
//!
//! Cleanup: a guard created before anything else kills what runs in the namespaces and
//! deletes them (which destroys their veth ends) on drop, on success and on panic alike;
//! leftovers of the same names, and of runs whose pid is gone, are deleted at start.

use crate::support::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const COORD_PORT: u16 = 7600;
const SERVER_PORT: u16 = 6379;
const RELAY_PORT: u16 = 16379;
const RELAY_MARK: u32 = 42;
const WORKERS: usize = 3;

/// Output of a finished command.
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs `prog args` to completion, killed (and failed) after `limit`. Output is small here
/// (ip, nft, redis-cli), so collecting it after exit cannot block.
fn run_limited(prog: &str, args: &[&str], limit: Duration) -> Out {
    let mut child = match Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return Out {
                ok: false,
                stdout: String::new(),
                stderr: format!("cannot start {prog}: {e}"),
            };
        }
    };
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Out {
                    ok: false,
                    stdout: String::new(),
                    stderr: format!("{prog} {args:?} did not finish within {limit:?}"),
                };
            }
        }
    }
    let o = child.wait_with_output().unwrap();
    Out {
        ok: o.status.success(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// `ip args`, bounded to 10 s; `Err(stderr)` on failure.
fn ip(args: &[&str]) -> Result<String, String> {
    let o = run_limited("ip", args, Duration::from_secs(10));
    if o.ok {
        Ok(o.stdout)
    } else {
        Err(format!("ip {}: {}", args.join(" "), o.stderr.trim()))
    }
}

/// `ip args` that must succeed.
fn ip_ok(args: &[&str]) -> String {
    ip(args).unwrap_or_else(|e| panic!("{e}"))
}

/// Names of the existing namespaces.
fn netns_list() -> Vec<String> {
    ip(&["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// SIGKILLs whatever still runs in namespace `ns` (processes this test started there;
/// nothing else enters these namespaces) and deletes it.
fn delete_netns(ns: &str) {
    if let Ok(pids) = ip(&["netns", "pids", ns]) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill(2) with a pid read from this namespace; no memory is involved.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
    let _ = ip(&["netns", "del", ns]);
}

/// One test's hosts. Drop deletes them all.
struct Hosts {
    /// `crnet-<pid>-<case>`: every namespace name starts with it.
    prefix: String,
    /// `c<pid><case>`: every interface name starts with it (≤ 15 bytes with a suffix).
    tag: String,
    /// `10.a.b`, this test's /24.
    net: String,
    /// Namespaces made so far (the bridge's first).
    made: Vec<String>,
}

const NS_PREFIX: &str = "crnet-";

impl Hosts {
    /// Makes the bridge namespace; `None` (after a loud message) when `ip netns add` is
    /// not permitted here.
    fn new(case: u32) -> Option<Self> {
        let pid = std::process::id();
        let x = (pid.wrapping_mul(2).wrapping_add(case)) % 65_536;
        let mut h = Hosts {
            prefix: format!("{NS_PREFIX}{pid}-{case}"),
            tag: format!("c{pid}{case}"),
            net: format!("10.{}.{}", x / 256, x % 256),
            made: Vec::new(),
        };
        // Leftovers: the same names (a killed earlier run that got this pid), and runs whose
        // process is gone.
        for ns in netns_list() {
            let Some(rest) = ns.strip_prefix(NS_PREFIX) else {
                continue;
            };
            let owner: Option<u32> = rest.split('-').next().and_then(|p| p.parse().ok());
            let stale =
                owner.is_some_and(|p| p != pid && !Path::new(&format!("/proc/{p}")).exists());
            if ns.starts_with(&format!("{}-", h.prefix)) || stale {
                delete_netns(&ns);
            }
        }
        let br = h.ns("br");
        match ip(&["netns", "add", &br]) {
            Ok(_) => h.made.push(br.clone()),
            Err(e) => {
                let lower = e.to_lowercase();
                if lower.contains("not permitted")
                    || lower.contains("permission denied")
                    || lower.contains("cannot start ip")
                {
                    // These tests are #[ignore]d unless asked for: asked for and unable to
                    // run is a failure, never a pass.
                    panic!(
                        "netns test asked for (--include-ignored) but network namespaces cannot be made here ({e}); run as root with `ip` (iproute2) installed"
                    );
                }
                panic!("{e}");
            }
        }
        ip_ok(&["-n", &br, "link", "set", "lo", "up"]);
        ip_ok(&["-n", &br, "link", "add", "br0", "type", "bridge"]);
        ip_ok(&["-n", &br, "link", "set", "br0", "up"]);
        Some(h)
    }

    fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// Adds host `role` at `10.a.b.<last>`: a namespace with a veth into the bridge.
    /// Both veth ends are created directly in their namespaces, never in the root one.
    fn add_host(&mut self, role: &str, last: u8) -> String {
        let ns = self.ns(role);
        ip_ok(&["netns", "add", &ns]);
        self.made.push(ns.clone());
        let br = self.ns("br");
        let inner = format!("{}{role}", self.tag);
        let outer = format!("{}{role}b", self.tag);
        assert!(outer.len() <= 15, "interface name {outer} too long");
        ip_ok(&[
            "link", "add", &inner, "netns", &ns, "type", "veth", "peer", "name", &outer, "netns",
            &br,
        ]);
        ip_ok(&["-n", &br, "link", "set", &outer, "master", "br0"]);
        ip_ok(&["-n", &br, "link", "set", &outer, "up"]);
        let addr = self.addr(last);
        ip_ok(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            &inner,
        ]);
        ip_ok(&["-n", &ns, "link", "set", &inner, "up"]);
        ip_ok(&["-n", &ns, "link", "set", "lo", "up"]);
        addr
    }

    fn addr(&self, last: u8) -> String {
        format!("{}.{last}", self.net)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Hosts first, the bridge last; veth pairs die with their namespaces.
        for ns in self.made.iter().rev() {
            delete_netns(ns);
        }
        let left: Vec<String> = netns_list()
            .into_iter()
            .filter(|n| n.starts_with(&format!("{}-", self.prefix)))
            .collect();
        if !left.is_empty() {
            eprintln!("netns cleanup: still present after delete: {left:?}");
        }
    }
}

/// `ip netns exec ns prog args`, output captured in `dir/name.{stdout,stderr}`.
fn spawn_in(ns: &str, prog: &Path, args: &[&str], dir: &Path, name: &str) -> Proc {
    let mut all = vec!["netns", "exec", ns, prog.to_str().unwrap()];
    all.extend_from_slice(args);
    Proc::spawn(Path::new(&find_on_path("ip")), &all, dir, name)
}

/// `redis-cli` run inside namespace `ns` against `host:port`, bounded to 10 s.
fn redis_cli(ns: &str, host: &str, port: u16, args: &[&str]) -> Result<String, String> {
    let port = port.to_string();
    let mut all = vec!["netns", "exec", ns, "redis-cli", "-h", host, "-p", &port];
    all.extend_from_slice(args);
    let o = run_limited("ip", &all, Duration::from_secs(10));
    if o.ok {
        Ok(o.stdout)
    } else {
        Err(format!(
            "redis-cli in {ns}: {} {}",
            o.stdout.trim(),
            o.stderr.trim()
        ))
    }
}

/// `cmdstat_<name>` calls from the server's own `INFO commandstats`, asked from `ns`.
fn commandstats_in(ns: &str, host: &str, port: u16) -> HashMap<String, u64> {
    let text =
        redis_cli(ns, host, port, &["info", "commandstats"]).unwrap_or_else(|e| panic!("{e}"));
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((name, fields)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|r| r.split_once(':'))
        else {
            continue;
        };
        for f in fields.split(',') {
            if let Some(v) = f.strip_prefix("calls=") {
                out.insert(name.to_string(), v.trim().parse().unwrap());
            }
        }
    }
    out
}

/// Waits up to `limit` for `f` to hold.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The built cluster: hosts plus the server running on its host.
struct Cluster {
    // Field order is drop order: processes die before their namespaces go.
    _server: Proc,
    _hosts: Hosts,
    dir: TempDir,
    co: String,
    sv: String,
    coord_addr: String,
    server_addr: String,
    workers: Vec<(String, String)>, // (namespace, address)
}

/// Builds the 6 namespaces and starts valkey on the server host; `None` to skip.
fn build(case: u32, tag: &str) -> Option<Cluster> {
    let mut hosts = Hosts::new(case)?;
    let dir = TempDir::new(tag);
    let coord_addr = hosts.add_host("co", 1);
    let server_addr = hosts.add_host("sv", 2);
    let workers: Vec<(String, String)> = (0..WORKERS)
        .map(|i| {
            let role = format!("w{i}");
            let a = hosts.add_host(&role, 10 + i as u8);
            (hosts.ns(&role), a)
        })
        .collect();
    let (co, sv) = (hosts.ns("co"), hosts.ns("sv"));
    let valkey = server_binary(Kind::Valkey);
    let args = server_args(&server_addr, SERVER_PORT, dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = spawn_in(&sv, &valkey, &args, dir.path(), "valkey");
    // Ready, and reachable across the bridge from the coordinator host and every worker host.
    wait_for(
        "valkey answers PING from the coordinator host",
        Duration::from_secs(15),
        || redis_cli(&co, &server_addr, SERVER_PORT, &["ping"]).is_ok_and(|s| s.trim() == "PONG"),
    );
    for (ns, _) in &workers {
        let pong =
            redis_cli(ns, &server_addr, SERVER_PORT, &["ping"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pong.trim(), "PONG", "from {ns}");
    }
    Some(Cluster {
        _server: server,
        _hosts: hosts,
        dir,
        co,
        sv,
        coord_addr,
        server_addr,
        workers,
    })
}

/// Runs the coordinator on its host and the 3 workers on theirs (one core each,
/// alternating over the machine's cores); returns the report after exit 0.
fn run(c: &Cluster, rate: u32, secs: u32, connections: u32) -> Value {
    let listen = format!("{}:{COORD_PORT}", c.coord_addr);
    let target = format!("{}:{SERVER_PORT}", c.server_addr);
    let out = c.dir.path().join("out");
    let mut args = coordinator_args(&listen, WORKERS, "30s", &target, &out);
    let (rate, secs, connections) = (
        rate.to_string(),
        format!("{secs}s"),
        connections.to_string(),
    );
    args.extend(
        [
            "--rate",
            &rate,
            "--duration",
            &secs,
            "--connections",
            &connections,
            "--ratio",
            "1:10",
            "--keys",
            "1000",
        ]
        .map(String::from),
    );
    let mut coord = spawn_in(&c.co, &crest_bin(), &strs(&args), c.dir.path(), "crest");
    let _workers: Vec<Proc> = c
        .workers
        .iter()
        .enumerate()
        .map(|(i, (ns, _))| {
            let args = worker_args(&listen, i);
            spawn_in(
                ns,
                &worker_bin(),
                &strs(&args),
                c.dir.path(),
                &format!("worker{i}"),
            )
        })
        .collect();
    let code = coord.wait(Duration::from_secs(90));
    assert_eq!(
        code,
        0,
        "crest exited {code}: {}\nworker0: {}",
        read_log(c.dir.path(), "crest", "stderr"),
        read_log(c.dir.path(), "worker0", "stderr")
    );
    read_report(&out)
}

/// Checks every report must pass: 3 workers, none lost, exact schedule, no errors, books
/// balanced, the server's own counters agree within what was in flight, and the merged
/// latency histogram is exactly the sum of the per-worker ones. Returns the workers by name.
fn check_report(c: &Cluster, report: &Value, rate: u32, secs: u32) -> HashMap<String, Value> {
    let expected = u64::from(rate) * u64::from(secs);
    let totals = &report["totals"];
    assert_eq!(u(totals, "scheduled"), expected, "total scheduled = R·D");
    assert_eq!(u(totals, "errors"), 0, "{}", totals["errors_by_kind"]);
    assert!(
        report["checks"]["intervals_match_totals"]
            .as_bool()
            .unwrap(),
        "{}",
        report["checks"]
    );
    let workers = report["workers"].as_array().unwrap();
    assert_eq!(workers.len(), WORKERS, "{workers:?}");
    let mut by_name = HashMap::new();
    let mut scheduled = 0;
    for w in workers {
        assert_eq!(w["lost"], false, "{w}");
        assert!(u(w, "completed") > 0, "{w}");
        let share = u(w, "scheduled");
        assert!(
            share.abs_diff(expected / WORKERS as u64) <= 1,
            "{} scheduled {share}, its share is {}",
            w["name"],
            expected / WORKERS as u64
        );
        scheduled += share;
        by_name.insert(w["name"].as_str().unwrap().to_string(), w.clone());
    }
    assert_eq!(scheduled, expected);
    let names: Vec<String> = (0..WORKERS).map(|i| format!("w{i}")).collect();
    for n in &names {
        assert!(
            by_name.contains_key(n),
            "worker {n} missing: {:?}",
            by_name.keys()
        );
    }

    // The server's view, asked from the server host itself.
    let stats = commandstats_in(&c.sv, &c.server_addr, SERVER_PORT);
    let in_flight = u(totals, "in_flight") + u(totals, "unsent");
    let mut server_total = 0;
    for (cmd, key) in [("SET", "set"), ("GET", "get")] {
        let server = stats.get(key).copied().unwrap_or(0);
        server_total += server;
        let cs = &report["commands"][cmd];
        let answered = u(cs, "completed") + u(cs, "errors");
        assert!(
            answered <= server && server <= answered + in_flight,
            "{cmd}: report answered {answered} (in flight {in_flight}), server counted {server}"
        );
    }
    assert!(
        server_total <= expected && server_total + in_flight >= expected,
        "server counted {server_total} SET+GET, scheduled {expected}, in flight {in_flight}"
    );

    // Merged = Σ per-worker, exactly, bucket by bucket.
    let mut sum = crest_model::hist::new_hist();
    for w in workers {
        sum.add(histogram(&w["histograms"]["latency"])).unwrap();
    }
    let total = histogram(&totals["histograms"]["latency"]);
    assert_eq!(total.len(), u(totals, "completed"));
    assert!(
        sum == total,
        "merged latency histogram ≠ sum of the 3 workers' histograms"
    );
    by_name
}

fn p50(w: &Value) -> f64 {
    f(&w["latency_us"], "p50")
}

/// Case 1: coordinator, server and 3 workers each on their own host (namespace + address),
/// talking over a bridge; the merged report agrees with the server and with its parts.
#[test]
#[ignore = "needs root and iproute2 (network namespaces); scripts/test.sh runs it when root"]
fn three_worker_hosts_across_a_bridge_give_a_merged_report_matching_the_server() {
    let Some(c) = build(0, "netns-plain") else {
        panic!("the netns cluster could not be built");
    };
    let (rate, secs) = (3000, 5);
    let t0 = Instant::now();
    let report = run(&c, rate, secs, 30);
    let ws = check_report(&c, &report, rate, secs);
    let p: Vec<f64> = (0..WORKERS).map(|i| p50(&ws[&format!("w{i}")])).collect();
    eprintln!(
        "netns plain run: worker latency p50 µs {p:?}, run took {:?}",
        t0.elapsed()
    );
    for (i, v) in p.iter().enumerate() {
        assert!(*v > 0.0 && *v < 5_000.0, "w{i} p50 {v} µs");
    }
    drop(c);
}

/// Case 2: worker host w2's path to the server goes through a relay in its own namespace
/// that holds each client→server chunk 2 ms (DNAT makes it transparent: same --target for
/// every worker). Its latency rises by the delay, the others' do not, and the merged
/// histogram is still exactly the sum of the per-worker histograms.
#[test]
#[ignore = "needs root and iproute2 (network namespaces); scripts/test.sh runs it when root"]
fn a_two_ms_delay_on_one_worker_host_raises_only_its_latency_and_merge_stays_exact() {
    let Some(c) = build(1, "netns-delay") else {
        panic!("the netns cluster could not be built");
    };
    let delay_ms = 2.0;
    let (slow_ns, slow_addr) = c.workers[2].clone();
    let relay_listen = format!("{slow_addr}:{RELAY_PORT}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/delay_relay.py");
    let _relay = spawn_in(
        &slow_ns,
        &find_on_path("python3"),
        &[
            script.to_str().unwrap(),
            "--listen",
            &relay_listen,
            "--to",
            &format!("{}:{SERVER_PORT}", c.server_addr),
            "--delay-ms",
            &delay_ms.to_string(),
            "--mark",
            &RELAY_MARK.to_string(),
        ],
        c.dir.path(),
        "relay",
    );
    wait_for("the relay listens", Duration::from_secs(15), || {
        read_log(c.dir.path(), "relay", "stdout").contains("listening")
    });
    redirect_to_relay(&slow_ns, &c.server_addr, &slow_addr);
    // The redirect is in place: w2's PING to the server's address goes through the relay.
    let pong = redis_cli(&slow_ns, &c.server_addr, SERVER_PORT, &["ping"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(pong.trim(), "PONG");
    assert!(
        read_log(c.dir.path(), "relay", "stderr").contains("connection 1 from"),
        "w2's connection to the server did not go through the relay"
    );
    // ...and nobody else's does.
    let pong = redis_cli(&c.workers[0].0, &c.server_addr, SERVER_PORT, &["ping"]).unwrap();
    assert_eq!(pong.trim(), "PONG");
    assert!(!read_log(c.dir.path(), "relay", "stderr").contains("connection 2 from"));

    let (rate, secs) = (3000, 5);
    let t0 = Instant::now();
    let report = run(&c, rate, secs, 30);
    let took = t0.elapsed();
    let ws = check_report(&c, &report, rate, secs);
    let (fast0, fast1, slow) = (p50(&ws["w0"]), p50(&ws["w1"]), p50(&ws["w2"]));
    eprintln!(
        "netns delayed run: latency p50 w0 {fast0} µs, w1 {fast1} µs, w2 (delayed {delay_ms} ms) {slow} µs; \
         totals p50 {} µs; run took {took:?}",
        p50(&report["totals"])
    );
    // Had the delay reached w0 or w1, their p50 would be at least the delay itself; under
    // it they are undelayed (usually well under 1 ms, but CI's VM once read 1.79 ms with
    // three workers, the relay and the server on 2 cores).
    for (n, v) in [("w0", fast0), ("w1", fast1)] {
        assert!(
            v < delay_ms * 1000.0,
            "undelayed worker {n} p50 {v} µs ≥ the {delay_ms} ms delay"
        );
    }
    assert!(
        slow >= fast0.max(fast1) + 1_800.0,
        "delayed worker p50 {slow} µs is not ≥ 1.8 ms above the others ({fast0}, {fast1})"
    );
    // Every request of w2 waited in the relay: even its fastest one took ≥ the delay
    // (less the histogram's 0.1% bucket width).
    let slow_hist = histogram(&ws["w2"]["histograms"]["latency"]);
    let floor = (delay_ms * 1e6 * 0.999) as u64;
    assert!(
        slow_hist.min() >= floor,
        "w2's fastest request took {} ns, under the {delay_ms} ms delay",
        slow_hist.min()
    );
    // The delay is on the wire, so it is service time too, not schedule lag.
    assert!(f(&ws["w2"]["service_time_us"], "p50") >= delay_ms * 1000.0 * 0.999);
    assert!(f(&ws["w2"]["schedule_lag_us"], "p50") < 1_000.0);
    drop(c);
}

/// In `ns`, sends TCP to `server:6379` to the relay at `local:16379` instead, except the
/// relay's own (marked) connections. nft when present, iptables otherwise.
fn redirect_to_relay(ns: &str, server: &str, local: &str) {
    let to = format!("{local}:{RELAY_PORT}");
    let sport = SERVER_PORT.to_string();
    let o = if which("nft") {
        let rules = format!(
            "table ip crest_delay {{\n  chain out {{\n    type nat hook output priority -100; policy accept;\n    \
             meta mark != {RELAY_MARK} ip daddr {server} tcp dport {SERVER_PORT} dnat to {to}\n  }}\n}}\n"
        );
        let file = std::env::temp_dir().join(format!("crest-netns-{}.nft", std::process::id()));
        std::fs::write(&file, rules).unwrap();
        let o = run_limited(
            "ip",
            &["netns", "exec", ns, "nft", "-f", file.to_str().unwrap()],
            Duration::from_secs(10),
        );
        let _ = std::fs::remove_file(&file);
        o
    } else {
        let mark = format!("{RELAY_MARK}");
        run_limited(
            "ip",
            &[
                "netns",
                "exec",
                ns,
                "iptables",
                "-t",
                "nat",
                "-A",
                "OUTPUT",
                "-p",
                "tcp",
                "-d",
                server,
                "--dport",
                &sport,
                "-m",
                "mark",
                "!",
                "--mark",
                &mark,
                "-j",
                "DNAT",
                "--to-destination",
                &to,
            ],
            Duration::from_secs(10),
        )
    };
    assert!(o.ok, "cannot install the DNAT rule in {ns}: {}", o.stderr);
}

fn which(name: &str) -> bool {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .any(|d| Path::new(d).join(name).is_file())
}
