//! `crest run` flags, and how they combine with a profile file into a [`RunConfig`]:
//! every flag has a file equivalent, and a flag given on the command line wins.
//!
//! `args` declares the flag groups; [`to_config`] layers them over the file: the classes
//! in `classes`, the target and its login and TLS in `connect`, the rest here.

mod args;
mod classes;
mod connect;
mod parse;
mod replay;

pub use args::*;
use classes::classes_and_length;
use connect::{target_session, target_tls};
use parse::{bounded, err, file_duration};
pub use replay::{MAX_AMPLIFY, ReplayArgs};

use crate::config::{self, ClassConfig, ConfigError, RunConfig, Workers};
use crate::defaults;
use crate::profile::{self, FileToml};
use crest_model::convert::limits;
use crest_model::plan::Pacer;
use crest_model::schedule::Arrival;
use crest_model::target::{ClusterMode, Protocol, ReadFrom};
use std::net::SocketAddr;
use std::time::Duration;

/// `--replica` and `--read-from` checked together: replicas (to read from, and to follow
/// when one is promoted) never for memcached, a cluster (which names its own) or the
/// built-in target; each `host:port` once.
fn replicas(
    a: &RunArgs,
    file: &FileToml,
    protocol: Protocol,
    cluster: ClusterMode,
    has_target: bool,
) -> Result<(ReadFrom, Vec<String>), ConfigError> {
    let read_from = match (a.target.read_from, &file.read_from) {
        (Some(r), _) => r,
        (None, Some(s)) => ReadFrom::parse(s.trim()).ok_or_else(|| {
            err(
                "read_from",
                s,
                "expected primary, replicas, prefer-replicas or any",
            )
        })?,
        (None, None) => ReadFrom::Primary,
    };
    // A flag's list replaces the file's.
    let list = match (&a.target.replicas, &file.replicas) {
        (l, Some(f)) if l.is_empty() => f,
        (l, _) => l,
    };
    // The flag that asked for replicas, to name in a refusal.
    let asked = if read_from.uses_replicas() {
        Some(("--read-from", read_from.name().to_string()))
    } else {
        list.first().map(|r| ("--replica", r.clone()))
    };
    if let Some((flag, value)) = asked {
        if protocol.is_memcache() {
            return Err(err(flag, value, "memcached has no replicas; leave it out"));
        }
        if !has_target {
            return Err(err(
                flag,
                value,
                "the built-in target has no replicas; give --target a primary that has some",
            ));
        }
    }
    if let (ClusterMode::On, Some(r)) = (cluster, list.first()) {
        return Err(err(
            "--replica",
            r,
            "a cluster names its own replicas in its slot table; leave out --replica",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for r in list {
        let r = r.trim();
        let ok = r.len() <= 300
            && r.bytes().all(|b| b.is_ascii_graphic())
            && r.rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(err(
                "--replica",
                r,
                "expected HOST:PORT, e.g. 10.0.0.2:6380",
            ));
        }
        if out.iter().any(|o| o == r) {
            return Err(err("--replica", r, "named twice; give each replica once"));
        }
        if out.len() >= crest_model::topology::MAX_NODES {
            return Err(err(
                "--replica",
                r,
                format!("at most {} replicas", crest_model::topology::MAX_NODES),
            ));
        }
        out.push(r.to_string());
    }
    Ok((read_from, out))
}

/// `--check-staleness` (profile `check_staleness`): only with reads from replicas, and a
/// class whose SETs and GETs (one key each) can carry the 24-byte stamp.
fn check_staleness(
    a: &RunArgs,
    file: &FileToml,
    read_from: ReadFrom,
    classes: &[config::ClassConfig],
) -> Result<bool, ConfigError> {
    if !(a.target.check_staleness || file.check_staleness.unwrap_or(false)) {
        return Ok(false);
    }
    let flag = "--check-staleness";
    if !read_from.uses_replicas() {
        return Err(err(
            flag,
            "on",
            "stale reads come from replicas: add --read-from replicas, prefer-replicas or any",
        ));
    }
    let has = |c: &config::ClassConfig, name: &str| {
        c.shape
            .mix
            .iter()
            .any(|(n, w)| *w > 0 && n.trim().eq_ignore_ascii_case(name))
    };
    let fit: Vec<&config::ClassConfig> = classes
        .iter()
        .filter(|c| has(c, "SET") && has(c, "GET") && c.shape.batch == 1)
        .collect();
    if fit.is_empty() {
        return Err(err(
            flag,
            "on",
            "no class both SETs and GETs one key per call: give one a mix like --ratio 1:10 (and --batch 1)",
        ));
    }
    if let Some(c) = fit
        .iter()
        .find(|c| c.shape.values.min() < crest_model::workload::STAMP_LEN as u64)
    {
        return Err(err(
            flag,
            "on",
            format!(
                "class {}'s values can be {} bytes; each carries a {}-byte version stamp: give --value-size {} or more",
                c.name,
                c.shape.values.min(),
                crest_model::workload::STAMP_LEN as u64,
                crest_model::workload::STAMP_LEN as u64
            ),
        ));
    }
    Ok(true)
}

/// How connections come and go: `--conn-lifetime` or `--conn-rate` (profile
/// `conn_lifetime`, `conn_rate`; a flag wins over the file, and the two are exclusive
/// across both layers).
fn churn(a: &RunArgs, file: &FileToml) -> Result<crest_model::plan::Churn, ConfigError> {
    let lifetime = match (&a.load.conn_lifetime, &file.conn_lifetime) {
        (Some(l), _) => Some(*l),
        (None, Some(s)) => Some(config::parse_lifetime(s).map_err(|e| err("conn_lifetime", s, e))?),
        (None, None) => None,
    };
    let rate = match (a.load.conn_rate, file.conn_rate) {
        (Some(r), _) => Some(r),
        (None, Some(r)) => {
            Some(config::parse_conn_rate(&r.to_string()).map_err(|e| err("conn_rate", r, e))?)
        }
        (None, None) => None,
    };
    // A flag replaces the file's other setting rather than adding to it.
    let (lifetime, rate) = match (a.load.conn_lifetime.is_some(), a.load.conn_rate.is_some()) {
        (true, _) => (lifetime, None),
        (_, true) => (None, rate),
        _ => (lifetime, rate),
    };
    if let (Some(_), Some(r)) = (lifetime, rate) {
        return Err(err(
            "conn_rate",
            r,
            "and conn_lifetime are both set in the profile: connections retire by age or at a rate, give one",
        ));
    }
    Ok(crest_model::plan::Churn { lifetime, rate })
}

/// What the connections speak: memcached's text protocol for a `memcache://` target, its
/// meta protocol with `--meta` (profile `meta = true`), RESP otherwise.
fn protocol(a: &RunArgs, file: &FileToml, ring: &[String]) -> Result<Protocol, ConfigError> {
    let meta = a.target.meta || file.meta == Some(true);
    match (ring.is_empty(), meta) {
        (false, true) => Ok(Protocol::McMeta),
        (false, false) => Ok(Protocol::McText),
        (true, false) => Ok(Protocol::Resp),
        (true, true) => Err(err(
            "--meta",
            "on",
            "is memcached's meta protocol: give --target memcache://host:port",
        )),
    }
}

/// A memcached target refuses what only a Redis-protocol server has: a login, a database,
/// RESP3 and client tracking, cluster mode.
fn refuse_redis_only(
    a: &RunArgs,
    file: &FileToml,
    session: &crest_model::target::Session,
    cluster: ClusterMode,
) -> Result<(), ConfigError> {
    let why = "applies to Redis-protocol servers only; a memcache:// target has no";
    if session.login.is_some() {
        let flag = if a.target.user.is_some() {
            "--user"
        } else {
            "--password"
        };
        return Err(err(
            flag,
            "***",
            format!("{why} login (SASL is not supported)"),
        ));
    }
    if session.db != 0 {
        return Err(err("--db", session.db, format!("{why} databases")));
    }
    if a.target.resp.is_some() || file.resp.is_some() {
        return Err(err(
            "--resp",
            session.resp.version(),
            format!(
                "{why} RESP; it speaks memcached's text protocol, or its meta protocol with --meta"
            ),
        ));
    }
    if session.tracking {
        return Err(err("--tracking", "on", format!("{why} client tracking")));
    }
    if cluster != ClusterMode::Auto {
        let flag = if cluster == ClusterMode::On {
            "--cluster"
        } else {
            "--no-cluster"
        };
        return Err(err(
            flag,
            "on",
            format!("{why} cluster mode; list the servers of a ring as memcache://a:11211,b:11211"),
        ));
    }
    Ok(())
}

/// Builds the run configuration from flags and, when given, a profile file.
///
/// # Errors
/// [`ConfigError`] naming the flag or file key, the value and what would be right.
pub fn to_config(a: RunArgs) -> Result<RunConfig, ConfigError> {
    let (file, text) = read_profile(&a)?;
    let warmup = a
        .load
        .warmup
        .or(file_duration(&file.warmup, "warmup")?)
        .unwrap_or(defaults::WARMUP);
    let (target, session, uri_tls, ring) = target_session(&a, &file)?;
    let protocol = protocol(&a, &file, &ring)?;
    // `memcache://builtin`: the built-in target, speaking memcached.
    let (target, ring) = if target.as_deref() == Some(crest_model::target::MEMCACHE_BUILTIN) {
        (None, Vec::new())
    } else {
        (target, ring)
    };
    let (classes, duration) = classes_and_length(&a, &file, &text, protocol)?;
    let tls = target_tls(&a, &file, target.as_deref(), uri_tls)?;
    let workers = workers(&a)?;
    let cluster = match (a.target.cluster, a.target.no_cluster, file.cluster) {
        (true, _, _) | (false, false, Some(true)) => ClusterMode::On,
        (_, true, _) | (false, false, Some(false)) => ClusterMode::Off,
        (false, false, None) => ClusterMode::Auto,
    };
    if protocol.is_memcache() {
        refuse_redis_only(&a, &file, &session, cluster)?;
    }
    let cluster = if protocol.is_memcache() {
        ClusterMode::Off
    } else {
        cluster
    };
    if cluster == ClusterMode::On && target.is_none() {
        return Err(err(
            "--cluster",
            "on",
            "the built-in target is one node; give --target host:port of a cluster node",
        ));
    }
    let (arrival, pacer, timeout) = pacing(&a, &file)?;
    let warmup = bounded("--warmup", warmup, Duration::ZERO, limits::MAX_WARMUP)?;
    let duration = bounded("--duration", duration, Duration::ZERO, limits::MAX_RUN)?;
    let interval = a.pace.interval.unwrap_or(defaults::INTERVAL);
    config::check_span(duration, interval)?;
    let (read_from, replicas) = replicas(&a, &file, protocol, cluster, target.is_some())?;
    let cfg_token_empty = a.fleet.token.secret.is_empty();
    let cfg = RunConfig {
        target,
        session,
        tls,
        cluster,
        protocol,
        ring,
        churn: churn(&a, &file)?,
        read_from,
        replicas,
        check_staleness: check_staleness(&a, &file, read_from, &classes)?,
        classes,
        duration,
        warmup,
        interval,
        arrival,
        pacer,
        timeout,
        drain: bounded(
            "--drain",
            a.pace
                .drain
                .or(file_duration(&file.drain, "drain")?)
                .unwrap_or(defaults::DRAIN),
            Duration::ZERO,
            limits::MAX_DRAIN,
        )?,
        seed: a
            .pace
            .seed
            .or(file.seed)
            .unwrap_or_else(|| crest_model::clock::unix_ns().unsigned_abs()),
        out: a.pace.out,
        listen: a
            .fleet
            .listen
            .unwrap_or_else(|| SocketAddr::from(defaults::LISTEN)),
        workers,
        token: a.fleet.token.secret,
        control_tls: a
            .fleet
            .serve
            .load()
            .map_err(|e| err(e.flag, e.path.display(), e.why))?,
        server_stats: !a.pace.no_server_stats && file.server_stats.unwrap_or(true),
        quiet: false,
        admin: match a.load.admin {
            Some(addr) if !addr.ip().is_loopback() && cfg_token_empty => {
                return Err(err(
                    "--admin",
                    addr,
                    "off loopback the admin API asks every request for the run's token: give --token too, or a 127.0.0.1 address",
                ));
            }
            other => other,
        },
        admin_linger: bounded(
            "--admin-linger",
            a.load.admin_linger.unwrap_or(Duration::ZERO),
            Duration::ZERO,
            Duration::from_secs(3600),
        )?,
        label: String::new(),
        memory_budget: match a.fleet.memory_budget {
            Some(0) => return Err(err("--memory-budget", 0, "must be more than 0, e.g. 4GB")),
            Some(b) => b,
            None => defaults::memory_budget(),
        },
        checkpoint_every: a.load.checkpoint_every.or(file.checkpoint_every),
        probe: a
            .load
            .probe
            .clone()
            .or(file.probe.clone())
            .map(|p| p.split_whitespace().map(str::to_string).collect()),
        backlog_limit: match a.load.backlog_limit.unwrap_or(defaults::BACKLOG_LIMIT) {
            n @ 1..=limits::MAX_BACKLOG => n,
            n => {
                return Err(err(
                    "--backlog-limit",
                    n,
                    format!("must be 1 to {}", limits::MAX_BACKLOG),
                ));
            }
        },
        replay: None,
    };
    check_checkpoints(&cfg)?;
    Ok(cfg)
}

/// `crest replay`'s run configuration: the run flags that apply, checked as `crest run`
/// checks them, the class replaced by the trace's.
///
/// # Errors
/// [`ConfigError`] naming the flag or file and what would be right.
pub fn to_replay_config(a: ReplayArgs) -> Result<RunConfig, ConfigError> {
    replay::replay_config(a, to_config)
}

/// The arrival process, the pacer and the request timeout: flag over file over default,
/// within the bounds a worker checks.
fn pacing(a: &RunArgs, file: &FileToml) -> Result<(Arrival, Pacer, Duration), ConfigError> {
    let arrival = match (a.pace.arrival, file.arrival.as_deref()) {
        (Some(ArrivalArg::Poisson), _) | (None, Some("poisson")) => Arrival::Poisson,
        (Some(ArrivalArg::Etc), _) | (None, Some("etc")) => Arrival::Etc,
        (None, None) if classes::preset(a, file)? == Some(classes::Preset::Etc) => Arrival::Etc,
        (Some(ArrivalArg::Uniform), _) | (None, None | Some("uniform")) => Arrival::Uniform,
        (None, Some(o)) => return Err(err("arrival", o, "expected uniform, poisson or etc")),
    };
    let pacer = match (a.pace.pacer, file.pacer.as_deref()) {
        (Some(p), _) => p,
        (None, None) => Pacer::Sleep,
        (None, Some(o)) => parse_pacer(o).map_err(|e| err("pacer", o, e))?,
    };
    let timeout = a
        .pace
        .timeout
        .or(file_duration(&file.timeout, "timeout")?)
        .unwrap_or(defaults::TIMEOUT);
    if timeout.is_zero() {
        return Err(err("--timeout", "0s", "must be > 0, e.g. 5s"));
    }
    // The same bounds a worker checks the plan against (crest_model::convert::limits), so
    // a setting is refused here, by its flag, not by a worker after the run has started.
    let timeout = bounded(
        "--timeout",
        timeout,
        limits::MIN_TIMEOUT,
        limits::MAX_TIMEOUT,
    )?;
    Ok((arrival, pacer, timeout))
}

/// `--checkpoint-every` needs one closed-loop class bounded by `--requests` (the pause is
/// a request count, and an open-loop schedule cannot pause without changing its load);
/// `--probe` needs checkpoints.
fn check_checkpoints(cfg: &RunConfig) -> Result<(), ConfigError> {
    let Some(every) = cfg.checkpoint_every else {
        if let Some(p) = &cfg.probe {
            return Err(err(
                "--probe",
                p.join(" "),
                "is sent at checkpoints: give --checkpoint-every N too",
            ));
        }
        return Ok(());
    };
    if let (true, Some(p)) = (cfg.protocol.is_memcache(), &cfg.probe) {
        return Err(err(
            "--probe",
            p.join(" "),
            "is a RESP command; a memcached target's checkpoints read stats (bytes, curr_items) of every server",
        ));
    }
    let closed: Vec<&ClassConfig> = cfg
        .classes
        .iter()
        .filter(|c| c.profile.is_none() && c.requests.is_some())
        .collect();
    if cfg.classes.len() != 1 || closed.len() != 1 {
        return Err(err(
            "--checkpoint-every",
            every,
            "needs one class, closed loop and bounded by a request count (--rate max --requests N): the load pauses at each checkpoint",
        ));
    }
    let total = closed[0].requests.unwrap_or(0);
    if every == 0 || every > total {
        return Err(err(
            "--checkpoint-every",
            every,
            format!("give 1 to the run's {total} requests (--requests)"),
        ));
    }
    if total / every > limits::MAX_CHECKPOINTS as u64 {
        return Err(err(
            "--checkpoint-every",
            every,
            format!(
                "{} checkpoints; at most {} a run: give at least {}",
                total / every,
                limits::MAX_CHECKPOINTS,
                total.div_ceil(limits::MAX_CHECKPOINTS as u64)
            ),
        ));
    }
    if let Some(p) = &cfg.probe
        && (p.is_empty() || p.len() > 16 || p.iter().any(|w| w.len() > 512))
    {
        return Err(err(
            "--probe",
            p.join(" "),
            "give one command of at most 16 words, e.g. \"ZCARD growth\"",
        ));
    }
    Ok(())
}

/// The most `--profile` reads: 1,024 classes of a hundred lines each fit many times over.
const MAX_PROFILE: u64 = 16 << 20;

/// The profile file named by `--profile` (parsed) and its text (for line numbers).
fn read_profile(a: &RunArgs) -> Result<(FileToml, String), ConfigError> {
    Ok(match &a.load.profile {
        Some(p) => {
            let text = crest_model::file::read_text_capped(p, MAX_PROFILE)
                .map_err(|e| err("--profile", p.display(), format!("cannot read: {e}")))?;
            let f = profile::parse_file(&text).map_err(|e| err("--profile", p.display(), e))?;
            (f, text)
        }
        None => (FileToml::default(), String::new()),
    })
}

/// Where the workers come from: `--workers N` remote ones, or in-process ones.
fn workers(a: &RunArgs) -> Result<Workers, ConfigError> {
    Ok(match a.fleet.workers {
        Some(0) => return Err(err("--workers", 0, "need at least 1 worker")),
        Some(n) => Workers::Remote {
            count: n,
            wait_timeout: a.fleet.wait_timeout.unwrap_or(defaults::WAIT_TIMEOUT),
        },
        None => {
            let count = a.fleet.local_workers.unwrap_or(defaults::LOCAL_WORKERS);
            if count == 0 {
                return Err(err("--local-workers", 0, "need at least 1 worker"));
            }
            Workers::Local {
                count,
                cpus: a.fleet.cpus.clone(),
                threads: a.fleet.threads,
            }
        }
    })
}

/// The unit tests' plan: one class at `rate` for `secs` against 127.0.0.1:1 (nothing
/// listens there), seed 42, quiet.
#[cfg(test)]
pub(crate) fn test_run(rate: f64, secs: u64) -> RunConfig {
    use crate::config::RateArg;
    let mut c = to_config(RunArgs {
        target: TargetArgs {
            target: Some("127.0.0.1:1".into()),
            ..Default::default()
        },
        pace: PaceArgs {
            rate: Some(RateArg::Rps(rate)),
            seed: Some(42),
            ..Default::default()
        },
        load: LoadArgs {
            duration: Some(Duration::from_secs(secs)),
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("the test plan is valid");
    c.quiet = true;
    c
}

#[cfg(test)]
mod tests {
    use super::classes::ratio_mix;
    use super::*;
    use crest_model::shapes::{Ttl, ValueSizes};
    use crest_model::target::Resp;
    use std::path::PathBuf;

    fn load(path: &str) -> Result<RunConfig, ConfigError> {
        to_config(RunArgs {
            load: LoadArgs {
                profile: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// Every profile the project ships parses and checks: the examples and the one the
    /// Kubernetes Job mounts.
    #[test]
    fn shipped_profiles_parse() {
        for p in [
            "../examples/valkey-1m-rps.toml",
            "../examples/peaks-and-valleys.toml",
            "../examples/noisy-neighbour.toml",
            "../examples/zset-growth.toml",
            "../deploy/k8s/profile.toml",
        ] {
            let cfg = load(p).unwrap_or_else(|e| panic!("{p}: {e}"));
            assert!(!cfg.classes.is_empty(), "{p}");
        }
        let k8s = load("../deploy/k8s/profile.toml").unwrap();
        assert_eq!(k8s.classes[0].connections, 150);
        assert_eq!(k8s.duration, Duration::from_secs(60));
    }

    fn with_file(body: &str, tag: &str, edit: impl FnOnce(&mut RunArgs)) -> RunConfig {
        file_config(body, tag, edit).unwrap()
    }

    /// `to_config` of a profile file holding `body` (flags edited by `edit`).
    fn file_config(
        body: &str,
        tag: &str,
        edit: impl FnOnce(&mut RunArgs),
    ) -> Result<RunConfig, ConfigError> {
        let path =
            std::env::temp_dir().join(format!("crest-cli-{tag}-{}.toml", std::process::id()));
        std::fs::write(&path, body).unwrap();
        let mut a = RunArgs {
            load: LoadArgs {
                profile: Some(path.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        edit(&mut a);
        let cfg = to_config(a);
        std::fs::remove_file(&path).unwrap();
        cfg
    }

    /// The profile's `conn_lifetime` and `conn_rate`, a flag over either, and both in the
    /// file refused.
    #[test]
    fn churn_comes_from_the_profile_and_a_flag_wins() {
        use std::time::Duration;
        let body = "conn_lifetime = \"2s±500ms\"\nduration = \"1s\"\n[[class]]\nrate = 10\n";
        let cfg = with_file(body, "churn-file", |_| {});
        assert_eq!(
            cfg.churn.lifetime,
            Some((Duration::from_secs(2), Duration::from_millis(500)))
        );
        // A flag replaces the file's churn, whichever kind it is.
        let cfg = with_file(body, "churn-flag", |a| a.load.conn_rate = Some(7.0));
        assert_eq!((cfg.churn.lifetime, cfg.churn.rate), (None, Some(7.0)));
        // What the file cannot hold, refused as a `to_config` error.
        let refused =
            |body: &str, tag: &str| file_config(body, tag, |_| {}).unwrap_err().to_string();
        let e = refused(
            "conn_lifetime = \"2s\"\nconn_rate = 3.0\nduration = \"1s\"\n[[class]]\nrate = 10\n",
            "churn-both",
        );
        assert!(e.contains("give one"), "{e}");
        let e = refused(
            "conn_lifetime = \"1ms\"\nduration = \"1s\"\n[[class]]\nrate = 10\n",
            "churn-bad",
        );
        assert!(
            e.contains("conn_lifetime") && e.contains("too short"),
            "{e}"
        );
    }

    /// `read_from` and `replicas` come from the profile; a flag wins; a bad value is
    /// refused naming the key.
    #[test]
    fn read_from_comes_from_the_profile_and_a_flag_wins() {
        use crest_model::target::ReadFrom;
        let body = "target = \"127.0.0.1:6379\"\nread_from = \"prefer-replicas\"\nreplicas = [\"10.0.0.2:6380\"]\nduration = \"1s\"\n[[class]]\nrate = 10\n";
        let cfg = with_file(body, "reads-file", |_| {});
        assert_eq!(cfg.read_from, ReadFrom::PreferReplicas);
        assert_eq!(cfg.replicas, ["10.0.0.2:6380"]);
        let cfg = with_file(body, "reads-flag", |a| {
            a.target.read_from = Some(ReadFrom::Any);
            a.target.replicas = vec!["10.0.0.3:6380".into()];
        });
        assert_eq!(cfg.read_from, ReadFrom::Any);
        assert_eq!(cfg.replicas, ["10.0.0.3:6380"]);
        let e = file_config(
            "target = \"127.0.0.1:6379\"\nread_from = \"replica\"\nduration = \"1s\"\n[[class]]\nrate = 10\n",
            "reads-bad",
            |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("read_from") && e.contains("prefer-replicas"),
            "{e}"
        );
    }

    /// Regression (issue 7): the file's `ttl` used to win over `--ttl`. Every setting is
    /// flag, then file, then the defaults table.
    /// A profile's `ttl`: a duration, seconds, a `--ttl` table string, or a TOML table.
    #[test]
    fn a_profile_ttl_may_be_a_table() {
        for (ttl, want) in [
            ("\"30s\"", Ttl::Fixed(30)),
            ("45", Ttl::Fixed(45)),
            ("\"0:1,1h:1\"", Ttl::Table(vec![(0, 1), (3600, 1)])),
            (
                "{ table = [[\"0\", 1], [\"60s\", 3], [90, 2]] }",
                Ttl::Table(vec![(0, 1), (60, 3), (90, 2)]),
            ),
            ("{ table = [[0, 5]] }", Ttl::Table(vec![(0, 5)])),
        ] {
            let body =
                format!("duration = \"2s\"\n[[class]]\nname = \"c\"\nrate = 100\nttl = {ttl}\n");
            let cfg = with_file(&body, "ttl", |_| {});
            assert_eq!(cfg.classes[0].shape.ttl, Some(want), "{ttl}");
        }
    }

    #[test]
    fn flag_then_file_then_default_for_every_layered_setting() {
        let body = "duration = \"2s\"\n[[class]]\nname = \"c\"\nrate = 100\nttl = \"30s\"\nconnections = 7\npipeline = 3\n";
        let file = with_file(body, "file", |_| {});
        let c = &file.classes[0];
        assert_eq!(
            (c.shape.ttl.clone(), c.connections, c.shape.pipeline),
            (Some(Ttl::Fixed(30)), 7, 3)
        );
        assert_eq!(c.shape.batch, defaults::BATCH);
        assert_eq!(c.shape.keys.count, defaults::KEYS);
        assert_eq!(c.shape.keys.prefix, defaults::KEY_PREFIX);
        assert_eq!(c.shape.mix, ratio_mix(defaults::RATIO));
        assert_eq!(file.timeout, defaults::TIMEOUT);
        let flags = with_file(body, "flags", |a| {
            a.load.ttl = Some(Ttl::Fixed(5));
            a.load.connections = Some(9);
            a.load.batch = Some(4);
        });
        let c = &flags.classes[0];
        assert_eq!(
            (
                c.shape.ttl.clone(),
                c.connections,
                c.shape.pipeline,
                c.shape.batch
            ),
            (Some(Ttl::Fixed(5)), 9, 3, 4)
        );
    }

    /// Server stats are on by default; the profile's `server_stats = false` or
    /// `--no-server-stats` turn them off (a file's `true` does not undo the flag).
    #[test]
    fn server_stats_are_on_unless_the_flag_or_the_file_says_off() {
        let on = "duration = \"1s\"\n[[class]]\nrate = 10\n";
        assert!(with_file(on, "stats-on", |_| {}).server_stats);
        let off = "server_stats = false\nduration = \"1s\"\n[[class]]\nrate = 10\n";
        assert!(!with_file(off, "stats-off", |_| {}).server_stats);
        let yes = "server_stats = true\nduration = \"1s\"\n[[class]]\nrate = 10\n";
        assert!(!with_file(yes, "stats-flag", |a| a.pace.no_server_stats = true).server_stats);
    }

    /// The profile file's `resp` and `tracking`, and the flags over them; the built-in
    /// target speaks RESP3 too; a protocol Crest does not speak is one line naming 2 and 3.
    #[test]
    fn the_protocol_comes_from_the_flag_then_the_file() {
        let body = "resp = 3\ntracking = true\nduration = \"1s\"\n[[class]]\nrate = 10\n";
        let cfg = with_file(body, "resp3", |_| {});
        assert_eq!(
            (cfg.session.resp, cfg.session.tracking),
            (Resp::Resp3, true)
        );
        assert!(cfg.target.is_none(), "the built-in target takes RESP3");
        let cfg = with_file(
            "resp = 3\nduration = \"1s\"\n[[class]]\nrate = 10\n",
            "resp-flag",
            |a| {
                a.target.resp = Some(Resp::Resp2);
            },
        );
        assert_eq!(cfg.session.resp, Resp::Resp2);
        let path =
            std::env::temp_dir().join(format!("crest-cli-resp4-{}.toml", std::process::id()));
        std::fs::write(&path, "resp = 4\nduration = \"1s\"\n[[class]]\nrate = 10\n").unwrap();
        let e = to_config(RunArgs {
            load: LoadArgs {
                profile: Some(path.clone()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(
            e.contains("resp") && e.contains("expected 2") && e.contains("or 3"),
            "{e}"
        );
        assert_eq!(parse_resp("3"), Ok(Resp::Resp3));
        assert!(parse_resp("1").is_err() && parse_resp("three").is_err());
    }

    /// The profile file's `user`, `password_file` (next to the file) and `db`; a URI target
    /// gives its address to the plan and its login to the session.
    #[test]
    fn the_profile_file_gives_the_login_and_database() {
        let pw = std::env::temp_dir().join(format!("crest-cli-pw-{}.txt", std::process::id()));
        std::fs::write(&pw, "hunter2\r\n").unwrap();
        let name = pw.file_name().unwrap().to_str().unwrap();
        let body = format!(
            "target = \"10.0.0.5:6380\"\nuser = \"bench\"\npassword_file = \"{name}\"\ndb = 2\nduration = \"1s\"\n[[class]]\nrate = 10\n"
        );
        let cfg = with_file(&body, "login", |_| {});
        assert_eq!(cfg.target.as_deref(), Some("10.0.0.5:6380"));
        let login = cfg.session.login.as_ref().unwrap();
        assert_eq!(
            (login.user.as_str(), login.password.expose()),
            ("bench", "hunter2")
        );
        assert_eq!(cfg.session.db, 2);
        // A flag wins over the file; a URI's parts fill in what no flag gives.
        let cfg = with_file(&body, "login-flags", |a| {
            a.target.target = Some("redis://:pw@cache:7000/2".into());
            a.target.user = Some("alice".into());
            a.target.password_file = None;
        });
        std::fs::remove_file(&pw).unwrap();
        assert_eq!(cfg.target.as_deref(), Some("cache:7000"));
        let login = cfg.session.login.as_ref().unwrap();
        assert_eq!(
            (login.user.as_str(), login.password.expose()),
            ("alice", "pw")
        );
        assert!(!format!("{cfg:?}").contains("hunter2") && !format!("{cfg:?}").contains("\"pw\""));
    }

    /// Flags only is the same path as a file with one empty class: the defaults table.
    #[test]
    fn flags_only_takes_the_defaults_table() {
        let cfg = to_config(RunArgs::default()).unwrap();
        let c = &cfg.classes[0];
        assert_eq!(c.connections, defaults::CONNECTIONS);
        assert_eq!(c.shape.pipeline, defaults::PIPELINE);
        assert_eq!(c.shape.values, ValueSizes::Fixed(defaults::VALUE_SIZE));
        assert_eq!(cfg.duration, defaults::DURATION);
        assert_eq!(cfg.interval, defaults::INTERVAL);
        assert_eq!(cfg.backlog_limit, defaults::BACKLOG_LIMIT);
        let p = c.profile.as_ref().unwrap();
        assert_eq!(p.segments()[0].from_rps, defaults::RATE_RPS);
    }

    #[test]
    fn flags_override_the_file() {
        let cfg = to_config(RunArgs {
            load: LoadArgs {
                profile: Some(
                    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/zset-growth.toml"),
                ),
                requests: Some(40),
                batch: Some(1000),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        assert_eq!(cfg.classes[0].requests, Some(40));
        assert_eq!(cfg.classes[0].shape.batch, 1000);
    }

    /// `--preset etc` sets ETC's key sizes, value sizes and gaps under the flags: a flag
    /// of its own overrides its part; an unknown preset is refused naming the one there is.
    #[test]
    fn the_etc_preset_sets_sizes_and_gaps_under_the_flags() {
        use crest_model::shapes::KeyLengths;
        let args = |extra: &[&str]| {
            let mut argv = vec!["x", "--target", "127.0.0.1:1"];
            argv.extend_from_slice(extra);
            #[derive(clap::Parser)]
            struct Cli {
                #[command(flatten)]
                a: RunArgs,
            }
            <Cli as clap::Parser>::try_parse_from(argv).unwrap().a
        };
        let cfg = to_config(args(&["--preset", "etc"])).unwrap();
        assert_eq!(cfg.arrival, Arrival::Etc);
        let shape = &cfg.classes[0].shape;
        assert_eq!(shape.keys.lengths, KeyLengths::Etc);
        assert_eq!(shape.values, ValueSizes::Etc(1 << 20));
        let cfg = to_config(args(&[
            "--preset",
            "etc",
            "--value-size",
            "100",
            "--arrival",
            "poisson",
            "--key-size",
            "20",
        ]))
        .unwrap();
        assert_eq!(cfg.arrival, Arrival::Poisson);
        assert_eq!(cfg.classes[0].shape.values, ValueSizes::Fixed(100));
        assert_eq!(
            cfg.classes[0].shape.keys.lengths,
            KeyLengths::Sizes(ValueSizes::Fixed(20))
        );
        let e = to_config(args(&["--preset", "ycsb"])).unwrap_err();
        assert_eq!(e.flag, "--preset");
        let e = to_config(args(&["--key-size", "300"])).unwrap_err();
        assert_eq!(e.flag, "--key-size");
    }
}
