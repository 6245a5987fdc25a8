//! Where the load goes and how every connection to it begins: the target's address, and
//! the session each connection (and the worker's probe) sets up before its first request
//! (who to authenticate as, which database to select).
//!
//! A target is given as `host:port` or as a URI, `redis://[user[:password]@]host[:port][/db]`
//! ([`parse_target`]), or as `memcache://host[:port][,host[:port]…]`: one memcached server,
//! or a ring of them that keys are placed on by consistent hashing ([`Protocol`]). The password is a [`Secret`]: its `Debug` never shows it, so no log
//! line, error or report can print it by accident; only the bytes sent to the server
//! ([`Secret::expose`]) carry it.

use std::fmt;

/// The user a password alone authenticates as (Redis 6 ACLs: `AUTH pass` is `AUTH default pass`).
pub const DEFAULT_USER: &str = "default";
/// Port of a URI without one.
pub const DEFAULT_PORT: u16 = 6379;
/// Port of a `memcache://` server without one.
pub const MEMCACHE_PORT: u16 = 11211;
/// Most servers a `memcache://` ring may list (as many nodes as a cluster may have).
pub const MAX_RING: usize = crate::topology::MAX_NODES;

/// What a run's connections speak: RESP to a Redis-protocol server, or memcached's text
/// or meta protocol to one memcached server or a ring of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Protocol {
    /// RESP (2 or 3, as the [`Session`] says).
    #[default]
    Resp,
    /// memcached's text protocol (`get`, `set`, …).
    McText,
    /// memcached's meta protocol (`mg`, `ms`, `md`, `ma`, `mn`).
    McMeta,
}

impl Protocol {
    /// Whether the target is memcached.
    pub fn is_memcache(self) -> bool {
        !matches!(self, Protocol::Resp)
    }

    /// How the report, the summary and errors name it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Resp => "resp",
            Protocol::McText => "memcache-text",
            Protocol::McMeta => "memcache-meta",
        }
    }
}
/// Highest database index `SELECT` may name (Redis keeps it in an `int`).
pub const MAX_DB: u32 = i32::MAX as u32;

/// A password: shown as `***` by `Debug`, read only by [`Secret::expose`].
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a password.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The password itself, for the bytes that go to the server.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Who a connection authenticates as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Login {
    /// ACL user ([`DEFAULT_USER`] when only a password was given).
    pub user: String,
    /// Its password.
    pub password: Secret,
}

/// The protocol a connection speaks: RESP2 (every server) or RESP3 (`HELLO 3`, Redis 6+).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Resp {
    /// RESP2, what a connection speaks until it says `HELLO 3`.
    #[default]
    Resp2,
    /// RESP3: maps, sets, doubles, nulls, and out-of-band push frames.
    Resp3,
}

impl Resp {
    /// 2 or 3.
    pub fn version(self) -> u32 {
        match self {
            Resp::Resp2 => 2,
            Resp::Resp3 => 3,
        }
    }

    /// The protocol numbered `v`, if Crest speaks it.
    pub fn of(v: u32) -> Option<Self> {
        match v {
            2 => Some(Resp::Resp2),
            3 => Some(Resp::Resp3),
            _ => None,
        }
    }
}

/// What every connection sends before any request of the schedule: `HELLO <2|3> [AUTH]
/// SETNAME` when there is a login or the protocol is RESP3 (`AUTH` and `CLIENT SETNAME`
/// on RESP2 servers without `HELLO`), `SELECT` when `db` is not 0, and `CLIENT TRACKING
/// on` when `tracking`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Session {
    /// Authenticate as this user; None: no authentication.
    pub login: Option<Login>,
    /// Database to select; 0 is the server's default and needs no `SELECT`.
    pub db: u32,
    /// The protocol.
    pub resp: Resp,
    /// Turn on client-side caching (`CLIENT TRACKING on`, RESP3 only): the server then
    /// pushes an invalidation whenever a key the connection read changes.
    pub tracking: bool,
    /// `READONLY` after the rest (cluster mode with `--read-from` other than `primary`):
    /// a cluster replica then answers reads of its primary's slots instead of `MOVED`.
    /// Set by the worker once it knows the target is a cluster, never sent on the wire.
    pub readonly: bool,
}

impl Session {
    /// True when a connection needs no setup at all.
    pub fn is_plain(&self) -> bool {
        self.login.is_none()
            && self.db == 0
            && self.resp == Resp::Resp2
            && !self.tracking
            && !self.readonly
    }
}

/// Where read commands go when the target has replicas (`--read-from`); writes always go
/// to the primary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadFrom {
    /// Every request to the primary (the default).
    #[default]
    Primary,
    /// Reads to a replica of the key's primary only: a slot with no replica left (after a
    /// failover) holds its reads until one is back or they time out.
    Replicas,
    /// Reads to a replica of the key's primary, to the primary when it has none.
    PreferReplicas,
    /// Reads spread over the primary and its replicas.
    Any,
}

impl ReadFrom {
    /// Every choice, in the order the help lists them.
    pub const ALL: [ReadFrom; 4] = [
        ReadFrom::Primary,
        ReadFrom::Replicas,
        ReadFrom::PreferReplicas,
        ReadFrom::Any,
    ];

    /// How flags, the report and errors name it.
    pub fn name(self) -> &'static str {
        match self {
            ReadFrom::Primary => "primary",
            ReadFrom::Replicas => "replicas",
            ReadFrom::PreferReplicas => "prefer-replicas",
            ReadFrom::Any => "any",
        }
    }

    /// The choice named `s` (as [`ReadFrom::name`] spells it).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == s)
    }

    /// Whether some reads leave the primary.
    pub fn uses_replicas(self) -> bool {
        self != ReadFrom::Primary
    }
}

/// Whether the target is one node or a Redis Cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ClusterMode {
    /// A cluster when the seed node says it is one (its `HELLO` says `mode` `cluster`).
    #[default]
    Auto,
    /// One node, whatever it is: redirects are counted as errors.
    Off,
    /// A cluster: a seed that is not one stops the run before load.
    On,
}

impl ClusterMode {
    /// How the report and summary name it.
    pub fn name(self) -> &'static str {
        match self {
            ClusterMode::Auto => "auto",
            ClusterMode::Off => "off",
            ClusterMode::On => "on",
        }
    }
}

/// How much of the server's certificate a TLS connection checks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verify {
    /// The chain leads to a trusted CA and the certificate is valid for the server name.
    #[default]
    Full,
    /// The chain is checked, the name is not (what memtier and valkey-benchmark do).
    SkipHostname,
    /// Any certificate is accepted: encryption without authentication.
    None,
}

impl Verify {
    /// The word the report and the flags use.
    pub fn word(self) -> &'static str {
        match self {
            Verify::Full => "full",
            Verify::SkipHostname => "skip-hostname",
            Verify::None => "none",
        }
    }
}

/// TLS to the target: what every connection trusts, presents and checks. The PEM bytes
/// were read and checked where the flags were given; the key's `Debug` is hidden.
#[derive(Clone, PartialEq, Eq)]
pub struct Tls {
    /// CAs to trust (PEM); None: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate chain and its key (PEM), for servers that demand one.
    pub client: Option<(Vec<u8>, Secret)>,
    /// SNI, and the name the certificate must be valid for (a DNS name or an IP address).
    pub server_name: String,
    /// How much of the certificate is checked.
    pub verify: Verify,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("ca_pem", &self.ca_pem.as_ref().map(Vec::len))
            .field("client", &self.client.is_some())
            .field("server_name", &self.server_name)
            .field("verify", &self.verify)
            .finish()
    }
}

/// `name` as a connection name a server takes (`CLIENT SETNAME` refuses spaces and
/// anything outside printable ASCII): every such byte is `-`, at most 64 bytes.
pub fn client_name(name: &str) -> String {
    name.bytes()
        .take(64)
        .map(|b| {
            if b.is_ascii_graphic() {
                char::from(b)
            } else {
                '-'
            }
        })
        .collect()
}

/// A `--target` taken apart: the address, and what a URI said about the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// `host:port`.
    pub addr: String,
    /// The URI's user.
    pub user: Option<String>,
    /// The URI's password.
    pub password: Option<Secret>,
    /// The URI's database.
    pub db: Option<u32>,
    /// The URI's scheme asks for TLS (`rediss://`, `valkeys://`).
    pub tls: bool,
    /// `memcache://`: every server of the ring, `addr` first (one for a single server);
    /// empty for a Redis-protocol target.
    pub ring: Vec<String>,
}

impl TargetSpec {
    /// A plain `host:port` (or a URI's) with nothing else said.
    fn addr_only(addr: String) -> Self {
        Self {
            addr,
            user: None,
            password: None,
            db: None,
            tls: false,
            ring: Vec::new(),
        }
    }
}

/// `s` with a URI's password replaced by `***`, safe to quote in an error line: whatever
/// stands between the user's `:` and the last `@` (a password may hold `/` or `@`), with
/// or without a scheme.
pub fn redacted(s: &str) -> String {
    let (scheme, rest) = match s.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), s),
    };
    match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => format!("{scheme}{user}:***{}", &rest[at..]),
            None => s.to_string(),
        },
        None => s.to_string(),
    }
}

/// Parses a target: `host:port`, or `redis://[user[:password]@]host[:port][/db]`
/// (`valkey://` is the same; user and password may be percent-encoded).
///
/// # Errors
/// What is wrong and what would be right, never quoting the password.
pub fn parse_target(s: &str) -> Result<TargetSpec, String> {
    let Some((scheme, rest)) = s.split_once("://") else {
        if s.contains('@') {
            return Err(
                "a user or password needs the URI form: redis://user:password@host:port".into(),
            );
        }
        return match s.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
            Some((h, Ok(_))) if !h.is_empty() => Ok(TargetSpec::addr_only(s.to_string())),
            _ => Err(
                "expected host:port or redis://[user[:password]@]host[:port][/db], e.g. 127.0.0.1:6379"
                    .into(),
            ),
        };
    };
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "redis" | "valkey" => false,
        "rediss" | "valkeys" => true,
        "memcache" | "memcached" => return parse_ring(rest),
        _ => {
            return Err(format!(
                "unknown scheme {scheme}://; expected redis://[user[:password]@]host[:port][/db] (rediss:// for TLS) or memcache://host[:port][,host[:port]…]"
            ));
        }
    };
    if rest.contains('?') || rest.contains('#') {
        return Err(
            "URI query parameters are not supported; give the database as /N and the rest as flags"
                .into(),
        );
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    if path.contains('@') {
        return Err("a '/' in the user or password must be written %2F".into());
    }
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        None => (None, None),
        Some(u) => {
            let (user, pass) = match u.split_once(':') {
                Some((user, pass)) => (user, Some(pass)),
                None => (u, None),
            };
            let user = (!user.is_empty())
                .then(|| decode(user).map_err(|e| format!("user: {e}")))
                .transpose()?;
            let password = match pass {
                Some("") => {
                    return Err(
                        "the password after ':' is empty; give one, or leave out the ':'".into(),
                    );
                }
                Some(p) => Some(Secret::new(
                    decode(p).map_err(|e| format!("password: {e}"))?,
                )),
                None => None,
            };
            (user, password)
        }
    };
    let (host, port) = split_host_port(hostport)?;
    let db = match path {
        "" => None,
        p => Some(
            p.parse::<u32>()
                .ok()
                .filter(|d| *d <= MAX_DB)
                .ok_or_else(|| {
                    format!("database /{p} is not a number 0 to {MAX_DB}; e.g. redis://host:6379/2")
                })?,
        ),
    };
    Ok(TargetSpec {
        addr: format!("{host}:{port}"),
        user,
        password,
        db,
        tls,
        ring: Vec::new(),
    })
}

/// `memcache://builtin`: the built-in target, speaking memcached (its `addr` and only
/// server).
pub const MEMCACHE_BUILTIN: &str = "builtin";

/// The servers of `memcache://host[:port][,host[:port]…]` (after the scheme): each at most
/// once, at most [`MAX_RING`]. memcached has no login or database in its URI.
/// `memcache://builtin` is the built-in target ([`MEMCACHE_BUILTIN`]).
fn parse_ring(rest: &str) -> Result<TargetSpec, String> {
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest == MEMCACHE_BUILTIN {
        return Ok(TargetSpec {
            ring: vec![MEMCACHE_BUILTIN.into()],
            ..TargetSpec::addr_only(MEMCACHE_BUILTIN.into())
        });
    }
    if rest.contains('@') {
        return Err(
            "memcached has no user or password in its target (SASL is not supported); give memcache://host:port".into(),
        );
    }
    if rest.contains(['/', '?', '#']) {
        return Err(
            "a memcache:// target has no database or parameters; give memcache://host[:port][,host[:port]…]".into(),
        );
    }
    let mut ring: Vec<String> = Vec::new();
    for part in rest.split(',') {
        if part.is_empty() {
            return Err(
                "an empty server in the list; give memcache://host[:port][,host[:port]…]".into(),
            );
        }
        let (host, port) = split_host_port_or(part, MEMCACHE_PORT)?;
        let addr = format!("{host}:{port}");
        if ring.contains(&addr) {
            return Err(format!(
                "server {addr} is listed twice; each server of a ring once"
            ));
        }
        ring.push(addr);
    }
    if ring.len() > MAX_RING {
        return Err(format!(
            "{} servers in the ring; at most {MAX_RING}",
            ring.len()
        ));
    }
    Ok(TargetSpec {
        ring: ring.clone(),
        ..TargetSpec::addr_only(ring[0].clone())
    })
}

/// The host part of `host:port` (`[::1]` loses its brackets): the name a TLS certificate
/// must be valid for when no SNI is given.
pub fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

/// `host[:port]` of a URI (`[::1]:6380` for IPv6), the port defaulting to 6379.
fn split_host_port(s: &str) -> Result<(&str, u16), String> {
    split_host_port_or(s, DEFAULT_PORT)
}

/// `host[:port]`, the port defaulting to `default`.
fn split_host_port_or(s: &str, default: u16) -> Result<(&str, u16), String> {
    let bad_port = |p: &str| format!("port {p:?} is not a number 1 to 65535");
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (inner, after) = v6.split_once(']').ok_or_else(|| {
            "an IPv6 host needs its closing ']', e.g. redis://[::1]:6379".to_string()
        })?;
        let host = &s[..inner.len() + 2];
        match after {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':').ok_or_else(|| bad_port(p))?)),
        }
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err("no host; expected redis://[user[:password]@]host[:port][/db]".into());
    }
    let port = match port {
        None => default,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| bad_port(p))?,
    };
    Ok((host, port))
}

/// Percent-decodes a URI's user or password (`p%40ss` → `p@ss`).
fn decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a '%' must start an escape like %40")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 once decoded".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> TargetSpec {
        parse_target(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn host_port_passes_unchanged() {
        let t = spec("10.0.0.5:6379");
        assert_eq!(t.addr, "10.0.0.5:6379");
        assert_eq!((t.user, t.password, t.db), (None, None, None));
        assert_eq!(spec("cache.local:7000").addr, "cache.local:7000");
    }

    #[test]
    fn uris_give_user_password_host_port_and_db() {
        let t = spec("redis://bench:s3cret@cache.example:6380/2");
        assert_eq!(t.addr, "cache.example:6380");
        assert_eq!(t.user.as_deref(), Some("bench"));
        assert_eq!(t.password, Some(Secret::new("s3cret")));
        assert_eq!(t.db, Some(2));
        let t = spec("redis://:pw@127.0.0.1");
        assert_eq!((t.addr.as_str(), t.user), ("127.0.0.1:6379", None));
        assert_eq!(t.password, Some(Secret::new("pw")));
        let t = spec("valkey://alice@h:1/");
        assert_eq!(
            (t.user.as_deref(), t.password, t.db),
            (Some("alice"), None, None)
        );
        let t = spec("redis://[::1]:6390/15");
        assert_eq!((t.addr.as_str(), t.db), ("[::1]:6390", Some(15)));
        assert_eq!(spec("redis://[::1]").addr, "[::1]:6379");
        // TLS schemes: the same parts, and `tls`.
        let t = spec("rediss://bench:s3cret@cache.example:6380/0");
        assert!(t.tls && !spec("redis://h").tls && !spec("h:1").tls);
        assert_eq!((t.addr.as_str(), t.db), ("cache.example:6380", Some(0)));
        assert!(spec("VALKEYS://h").tls);
        assert_eq!(host_of("cache.example:6380"), "cache.example");
        assert_eq!(host_of("[::1]:6380"), "::1");
        assert_eq!(host_of("127.0.0.1:1"), "127.0.0.1");
        // Percent-encoded: '@', ':' and '/' inside a password.
        let t = spec("redis://u%3Ax:p%40s%3As%2F@h:1");
        assert_eq!(t.user.as_deref(), Some("u:x"));
        assert_eq!(t.password, Some(Secret::new("p@s:s/")));
        // A raw '@' in the password: the host starts after the last one.
        assert_eq!(
            spec("redis://u:p@ss@h:2").password,
            Some(Secret::new("p@ss"))
        );
    }

    #[test]
    fn memcache_targets_are_one_server_or_a_ring() {
        let t = spec("memcache://10.0.0.5");
        assert_eq!(t.addr, "10.0.0.5:11211");
        assert_eq!(t.ring, vec!["10.0.0.5:11211"]);
        let t = spec("memcached://a:1,b,[::1]:3/");
        assert_eq!(t.addr, "a:1");
        assert_eq!(t.ring, vec!["a:1", "b:11211", "[::1]:3"]);
        assert!(spec("redis://h:1").ring.is_empty() && spec("h:1").ring.is_empty());
        let b = spec("memcache://builtin");
        assert_eq!((b.addr.as_str(), b.ring.len()), (MEMCACHE_BUILTIN, 1));
        for (s, want) in [
            ("memcache://u:hunter2@h", "SASL"),
            ("memcache://h:1/2", "no database"),
            ("memcache://h:1,,h:2", "empty server"),
            ("memcache://h:1,h:1", "listed twice"),
            ("memcache://h:0", "port"),
            ("memcache://", "empty server"),
        ] {
            let e = parse_target(s).unwrap_err();
            assert!(e.contains(want), "{s}: {e}");
            assert!(!e.contains("hunter2"), "{s}: {e}");
        }
        let many: Vec<String> = (0..=MAX_RING).map(|i| format!("h:{}", i + 1)).collect();
        let e = parse_target(&format!("memcache://{}", many.join(","))).unwrap_err();
        assert!(e.contains("at most"), "{e}");
        assert!(Protocol::McMeta.is_memcache() && !Protocol::Resp.is_memcache());
    }

    #[test]
    fn bad_targets_say_what_would_be_right_without_the_password() {
        for (s, want) in [
            ("http://h:1", "unknown scheme"),
            ("redis://h:0", "port \"0\""),
            ("redis://h:x/1", "port \"x\""),
            ("redis://u:hunter2@h:1/abc", "database /abc"),
            ("redis://h:1/2147483648", "database"),
            ("redis://u:hunter2@:1", "no host"),
            ("redis://u:@h", "password after ':' is empty"),
            ("redis://h:1/0?x=1", "query"),
            ("redis://u:hunter2%zz@h", "password: a '%'"),
            ("redis://[::1:1", "closing ']'"),
            ("redis://u:hunter2/x@h", "%2F"),
            ("localhost", "expected host:port"),
            (":6379", "expected host:port"),
        ] {
            let e = parse_target(s).unwrap_err();
            assert!(e.contains(want), "{s}: {e}");
            assert!(!e.contains("hunter2"), "{s}: {e}");
        }
    }

    #[test]
    fn secrets_never_show_in_debug_or_redacted_uris() {
        let l = Login {
            user: "bench".into(),
            password: Secret::new("hunter2"),
        };
        assert!(!format!("{l:?}").contains("hunter2"));
        assert_eq!(Secret::new("hunter2").expose(), "hunter2");
        assert_eq!(
            redacted("redis://bench:hunter2@h:1/2"),
            "redis://bench:***@h:1/2"
        );
        assert_eq!(redacted("redis://:hunter2@h"), "redis://:***@h");
        assert_eq!(redacted("redis://bench@h"), "redis://bench@h");
        assert_eq!(redacted("h:1"), "h:1");
        // A password with `/` or `@` in it, and one given without the scheme.
        assert_eq!(
            redacted("redis://bench:hunter2/x@h:1"),
            "redis://bench:***@h:1"
        );
        assert_eq!(redacted("redis://bench:a@b@h:1"), "redis://bench:***@h:1");
        assert_eq!(redacted("bench:hunter2@h:6379"), "bench:***@h:6379");
        let e = parse_target("bench:hunter2@h:6379").unwrap_err();
        assert!(
            e.contains("redis://user:password@host:port") && !e.contains("hunter2"),
            "{e}"
        );
        assert!(Session::default().is_plain());
        assert!(
            !Session {
                db: 1,
                ..Session::default()
            }
            .is_plain()
        );
        assert!(
            !Session {
                resp: Resp::Resp3,
                ..Session::default()
            }
            .is_plain()
        );
        assert_eq!(client_name("crest-my host\u{e9}-0"), "crest-my-host---0");
    }
}
