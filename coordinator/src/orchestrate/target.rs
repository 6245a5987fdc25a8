//! The run's target as the coordinator sees it: the user's `--target`, or the built-in
//! target started for the run when none is given; the address each worker dials, and the
//! coordinator's own connections to it (server stats, checkpoints, compare's and suite's
//! requests).

use super::member::{Member, RunError};
use crate::config::{RunConfig, Workers};
use crest_engine::probe::Dial;
use crest_model::target::Verify;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::watch;

/// Where the load goes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target {
    /// The built-in target's port, when the run started one (no `--target`).
    pub builtin_port: Option<u16>,
    /// The coordinator's listening address (the built-in target listens on its host).
    listen: SocketAddr,
}

impl Target {
    /// The run's target: `--target`, or a built-in target started on loopback (in-process
    /// workers) or on the `--listen` address (remote workers), which runs until `stop`.
    /// Warns once when the target's TLS is not verified in full.
    ///
    /// # Errors
    /// [`RunError::Failed`] when the built-in target cannot listen.
    pub(super) async fn start(
        cfg: &RunConfig,
        listen: SocketAddr,
        stop: &watch::Receiver<bool>,
    ) -> Result<Self, RunError> {
        warn_tls(cfg);
        if cfg.target.is_some() {
            return Ok(Target {
                builtin_port: None,
                listen,
            });
        }
        let ip = match cfg.workers {
            Workers::Local { .. } => [127, 0, 0, 1].into(),
            Workers::Remote { .. } => cfg.listen.ip(),
        };
        let failed =
            |e: std::io::Error| RunError::Failed(format!("cannot start the built-in target: {e}"));
        let l = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0))
            .await
            .map_err(failed)?;
        let port = l.local_addr().map_err(failed)?.port();
        let mut rx = stop.clone();
        let stopped = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        if cfg.protocol.is_memcache() {
            tokio::spawn(crest_sink::serve_memcache(l, stopped));
            if !cfg.quiet {
                eprintln!(
                    "crest: memcache://builtin: the built-in target speaks memcached on {ip}:{port}"
                );
            }
        } else {
            tokio::spawn(crest_sink::serve(l, stopped));
            if !cfg.quiet {
                eprintln!("crest: no --target given: using the built-in target on {ip}:{port}");
            }
        }
        Ok(Target {
            builtin_port: Some(port),
            listen,
        })
    }

    /// Whether the run goes to the built-in target.
    pub(super) fn builtin(&self) -> bool {
        self.builtin_port.is_some()
    }

    /// The address `m` dials: the target, or the built-in target at the address by which
    /// that worker reached the coordinator.
    pub(super) fn for_member(&self, cfg: &RunConfig, m: &Member) -> String {
        match (&cfg.target, self.builtin_port) {
            (Some(t), _) => t.clone(),
            (None, Some(port)) => {
                let ip = m
                    .link
                    .info
                    .local
                    .map_or_else(|| self.listen.ip(), |a| a.ip());
                SocketAddr::new(ip, port).to_string()
            }
            // The built-in target is started exactly when no target is given.
            (None, None) => SocketAddr::new(self.listen.ip(), 0).to_string(),
        }
    }
}

/// Says once, before any load, what an unverified target certificate means.
fn warn_tls(cfg: &RunConfig) {
    match cfg.tls.as_ref().map(|t| t.verify) {
        Some(Verify::None) => eprintln!(
            "crest: warning: --tls-skip-verify: any certificate is accepted, so the connections are encrypted but nobody vouches for the server (a machine in the middle could read and change the traffic); give --cacert instead"
        ),
        Some(Verify::SkipHostname) => eprintln!(
            "crest: warning: --tls-skip-hostname: the certificate's chain is checked but not its name, so any server with a certificate from the same CA passes"
        ),
        _ => {}
    }
}

/// How long the coordinator's own connection to the target may take to open.
const DIAL_WAIT: Duration = Duration::from_secs(5);

/// How to reach the run's target (or the built-in target on `builtin_port`) with
/// connections named `name` in `CLIENT LIST`, set up as every shard connection is (TLS,
/// login, database, protocol): kept so a lost connection can be opened again.
///
/// # Errors
/// Why the target cannot be resolved or its TLS set up, in one line.
pub async fn dial(cfg: &RunConfig, builtin_port: Option<u16>, name: &str) -> Result<Dial, String> {
    let (addr, shown) = sampler_target(cfg, builtin_port).await?;
    let tls = cfg
        .tls
        .as_ref()
        .map(crest_engine::target_tls::Client::new)
        .transpose()?;
    Ok(Dial::new(addr, &shown, &cfg.session, tls, name))
}

/// [`dial`]'s first connection, within 5 s.
///
/// # Errors
/// Why the target cannot be reached, in one line.
pub async fn open(dial: &Dial) -> Result<crest_engine::probe::Control, String> {
    dial.open(DIAL_WAIT).await
}

/// A connection to the run's target (or the built-in target on `builtin_port`) set up as
/// every shard connection is (TLS, login, database, protocol), named `name` in `CLIENT
/// LIST`, within 5 s: for the coordinator's own requests (`crest compare`'s FLUSHALL,
/// `crest suite`'s version check). Returns it with the target's name.
///
/// # Errors
/// Why the target cannot be reached, in one line.
pub async fn control_to(
    cfg: &RunConfig,
    builtin_port: Option<u16>,
    name: &str,
) -> Result<(crest_engine::probe::Control, String), String> {
    let dial = dial(cfg, builtin_port, name).await?;
    Ok((open(&dial).await?, dial.shown))
}

/// Every server of a memcached target, resolved in ring order (the first as
/// [`sampler_target`] reaches it, so the built-in target's port counts).
///
/// # Errors
/// A server that does not resolve, in one line.
pub(super) async fn memcache_addrs(
    cfg: &RunConfig,
    builtin_port: Option<u16>,
) -> Result<Vec<SocketAddr>, String> {
    let mut addrs = vec![sampler_target(cfg, builtin_port).await?.0];
    for s in cfg.ring.iter().skip(1) {
        match tokio::net::lookup_host(s.as_str())
            .await
            .map(|mut a| a.next())
        {
            Ok(Some(a)) => addrs.push(a),
            _ => return Err(format!("memcached server {s} does not resolve")),
        }
    }
    Ok(addrs)
}

/// The servers of a memcached target as the coordinator's own connections reach them
/// (TLS as the run's), not connected yet.
///
/// # Errors
/// A server that does not resolve, or TLS settings that do not load.
pub(crate) async fn memcache_ring(
    cfg: &RunConfig,
    builtin_port: Option<u16>,
) -> Result<Vec<crate::server_stats::memcache::Server>, String> {
    let tls = cfg
        .tls
        .as_ref()
        .map(crest_engine::target_tls::Client::new)
        .transpose()?;
    Ok(memcache_addrs(cfg, builtin_port)
        .await?
        .into_iter()
        .map(|a| crate::server_stats::memcache::Server::new(a, tls.clone()))
        .collect())
}

/// Probes the target of `cfg` from the coordinator as a worker does before each run
/// (connect, TLS, login, database, a harmless question: `crest_engine::probe::probe`):
/// `crest compare` checks every target so before its first run. A slow target passes.
///
/// # Errors
/// One line: the name does not resolve, the connection is refused, or the server refuses
/// the generator (the probe's words and what would be right).
pub async fn probe_target(cfg: &RunConfig) -> Result<(), String> {
    let (addr, shown) = sampler_target(cfg, None).await?;
    let tls = cfg
        .tls
        .as_ref()
        .map(crest_engine::target_tls::Client::new)
        .transpose()?;
    if cfg.protocol.is_memcache() {
        for (a, name) in memcache_addrs(cfg, None).await?.into_iter().zip(&cfg.ring) {
            crest_engine::probe::probe_memcache(a, name, tls.as_ref())
                .await
                .map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    crest_engine::probe::probe(addr, &shown, &cfg.session, tls.as_ref(), false)
        .await
        .map(|_| ())
        .map_err(|e| match e {
            crest_engine::probe::Refusal::Unreachable { .. } => {
                format!("{e}; check the address and that the server is up")
            }
            _ => e.to_string(),
        })
}

/// The address the coordinator dials for its own requests, and its name for messages:
/// the target, or the built-in target on loopback.
pub(super) async fn sampler_target(
    cfg: &RunConfig,
    builtin_port: Option<u16>,
) -> Result<(SocketAddr, String), String> {
    match (&cfg.target, builtin_port) {
        (Some(t), _) => {
            let addr = tokio::net::lookup_host(t.as_str())
                .await
                .map_err(|e| format!("cannot resolve target {t}: {e}"))?
                .next()
                .ok_or_else(|| format!("target {t} resolves to no address"))?;
            Ok((addr, t.clone()))
        }
        (None, Some(port)) => {
            let ip = match cfg.workers {
                Workers::Remote { .. } if !cfg.listen.ip().is_unspecified() => cfg.listen.ip(),
                _ => [127, 0, 0, 1].into(),
            };
            let addr = SocketAddr::new(ip, port);
            Ok((addr, addr.to_string()))
        }
        (None, None) => Err("no target".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{LoadArgs, PaceArgs, RunArgs, TargetArgs, to_config};
    use crate::config::RateArg;
    use crate::service::WorkerLink;

    /// A run to `target` (None: the built-in target).
    fn cfg(target: Option<&str>) -> RunConfig {
        let mut c = to_config(RunArgs {
            target: TargetArgs {
                target: Some("127.0.0.1:1".into()),
                ..Default::default()
            },
            pace: PaceArgs {
                rate: Some(RateArg::Rps(100.0)),
                ..Default::default()
            },
            load: LoadArgs {
                duration: Some(Duration::from_secs(2)),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        c.quiet = true;
        c.target = target.map(String::from);
        c
    }

    /// A worker that dialled the coordinator at `local` (None: unknown).
    fn member(local: Option<&str>) -> Member {
        let (mut link, _rx) = WorkerLink::fake(0);
        link.info.local = local.map(|a| a.parse().unwrap());
        Member::new(link)
    }

    fn listen(a: &str) -> SocketAddr {
        a.parse().unwrap()
    }

    /// The user's target goes to every worker as given, even with a built-in port set.
    #[test]
    fn the_users_target_is_dialled_as_given() {
        let cfg = cfg(Some("redis.example:6380"));
        let m = member(Some("10.0.0.5:7600"));
        for builtin_port in [None, Some(6400)] {
            let t = Target {
                builtin_port,
                listen: listen("0.0.0.0:7600"),
            };
            assert_eq!(t.for_member(&cfg, &m), "redis.example:6380");
        }
    }

    /// The built-in target is dialled at the address by which the worker reached the
    /// coordinator, on the built-in target's port.
    #[test]
    fn the_builtin_target_is_dialled_where_the_worker_reached_us() {
        let cfg = cfg(None);
        let t = Target {
            builtin_port: Some(6400),
            listen: listen("0.0.0.0:7600"),
        };
        assert_eq!(
            t.for_member(&cfg, &member(Some("10.1.2.3:7600"))),
            "10.1.2.3:6400"
        );
        assert_eq!(
            t.for_member(&cfg, &member(Some("[::1]:7600"))),
            "[::1]:6400"
        );
    }

    /// A worker whose dialled address is unknown gets the built-in target on the listen
    /// address's host.
    #[test]
    fn without_the_dialled_address_the_builtin_target_is_on_the_listen_host() {
        let cfg = cfg(None);
        let t = Target {
            builtin_port: Some(6400),
            listen: listen("192.168.7.9:7600"),
        };
        assert_eq!(t.for_member(&cfg, &member(None)), "192.168.7.9:6400");
    }

    /// The run goes to the built-in target exactly when a built-in port is set.
    #[test]
    fn builtin_means_a_builtin_port_was_started() {
        let l = listen("127.0.0.1:7600");
        let started = Target {
            builtin_port: Some(6400),
            listen: l,
        };
        let none = Target {
            builtin_port: None,
            listen: l,
        };
        assert!(started.builtin());
        assert!(!none.builtin());
    }
}
