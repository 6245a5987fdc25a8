//! The cluster for one run: in-process workers, waiting for the expected registrations,
//! each worker's clock offset, and whether the fleet can carry the plan
//! ([`gather`] → [`Fleet`]).

use super::member::{Member, PINGS, RunError, interrupted};
use crate::config::{RunConfig, Workers};
use crate::service::HubEvent;
use crest_engine::agent;
use crest_model::clock::unix_ns;
use crest_model::convert;
use crest_model::convert::limits;
use crest_model::schedule::Profile;
use crest_proto::pb::{self, coordinator_message::Msg as Out, worker_message::Msg as In};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// How long one round of clock pings waits for every answer.
const PING_WAIT: Duration = Duration::from_millis(500);

/// Local workers register over loopback; they get this long.
const LOCAL_WAIT: Duration = Duration::from_secs(10);

/// The workers of a run, registered and with their clock offsets.
pub(super) struct Fleet {
    /// Every worker, in registration order (the books' worker index).
    pub members: Vec<Member>,
    /// Shards across the fleet.
    pub shards: u32,
}

/// Starts the in-process workers (or tells the user how remote ones dial `addr`), waits
/// for the expected registrations, measures each worker's clock offset, and checks that
/// the fleet can carry every class.
///
/// # Errors
/// [`RunError::Usage`] when workers are missing or too few for the plan;
/// [`RunError::Interrupted`] when the user interrupts the wait.
pub(super) async fn gather(
    cfg: &RunConfig,
    addr: SocketAddr,
    events: &mut mpsc::Receiver<HubEvent>,
    stop: &watch::Receiver<bool>,
    interrupt: &watch::Receiver<bool>,
) -> Result<Fleet, RunError> {
    let dial = dial_line(cfg, addr);
    let (expected, wait) = match &cfg.workers {
        Workers::Local {
            count,
            cpus,
            threads,
        } => {
            let (cpus, token) = (cpus.as_deref(), &cfg.token);
            start_local_workers(*count, cpus, *threads, addr, token, stop.clone())?;
            (*count as usize, LOCAL_WAIT)
        }
        Workers::Remote {
            count,
            wait_timeout,
            ..
        } => {
            let tls = if cfg.control_tls.is_some() {
                " (TLS)"
            } else {
                ""
            };
            eprintln!("crest: listening on {addr}{tls}; waiting for {count} worker(s): {dial}");
            if cfg.control_tls.is_none() && !addr.ip().is_loopback() {
                warn_plaintext(cfg, addr);
            }
            (*count as usize, *wait_timeout)
        }
    };
    let mut members = wait_for_workers(events, expected, wait, &dial, interrupt, cfg.quiet).await?;
    measure_offsets(events, &mut members).await?;
    let shards = members.iter().map(|m| m.link.info.shards).sum();
    let fleet = Fleet { members, shards };
    fleet.check(cfg)?;
    Ok(fleet)
}

/// The command a remote worker runs to join, for the waiting line and the error when
/// workers are missing.
fn dial_line(cfg: &RunConfig, addr: SocketAddr) -> String {
    let port = addr.port();
    match (&cfg.workers, &cfg.control_tls) {
        (Workers::Remote { .. }, Some(t)) => format!(
            "crest-worker --coordinator https://<this host>:{port} --control-ca <CA of --control-cert>{}",
            if t.mutual {
                " --control-client-cert <cert> --control-client-key <key>"
            } else {
                ""
            }
        ),
        _ => format!("crest-worker --coordinator http://<this host>:{port}"),
    }
}

/// A plaintext control plane off loopback: says what crosses the network in the clear.
fn warn_plaintext(cfg: &RunConfig, addr: SocketAddr) {
    let secret =
        cfg.session.login.is_some() || cfg.tls.as_ref().is_some_and(|t| t.client.is_some());
    let what = match (cfg.token.is_empty(), secret) {
        (_, true) => {
            ", so the target's password or client key crosses the network in the clear to every worker"
        }
        (true, false) => " and, with no --token, open to any worker that dials it",
        (false, false) => ", so the token crosses the network in the clear",
    };
    eprintln!(
        "crest: warning: the control plane on {addr} is plaintext{what}: serve TLS with --control-cert/--control-key"
    );
}

impl Fleet {
    /// Whether the fleet's shards can carry every class: connections per shard within a
    /// shard's limit and at least one per shard, a peak rate per shard within what a shard
    /// schedules.
    ///
    /// # Errors
    /// [`RunError::Usage`] naming the class, the flag and what would fit.
    pub(super) fn check(&self, cfg: &RunConfig) -> Result<(), RunError> {
        let total_shards = self.shards;
        let shards = f64::from(total_shards.max(1));
        for c in &cfg.classes {
            let per_shard = u64::from(c.connections).div_ceil(u64::from(total_shards.max(1)));
            if per_shard > u64::from(limits::MAX_CONNECTIONS_PER_SHARD) {
                return Err(RunError::Usage(format!(
                    "--connections {} (class {}): {per_shard} per shard over the {total_shards} shards the workers run; a shard opens at most {}: add workers or threads, or use fewer connections",
                    c.connections,
                    c.name,
                    limits::MAX_CONNECTIONS_PER_SHARD
                )));
            }
            let peak = c.profile.as_ref().map_or(0.0, Profile::peak_rps);
            let per_shard_rate = peak / shards;
            if per_shard_rate > limits::MAX_RATE_PER_SHARD {
                let need = (peak / limits::MAX_RATE_PER_SHARD).ceil();
                return Err(RunError::Usage(format!(
                    "--rate (class {}): a peak of {peak:.0} requests/s is {per_shard_rate:.0} per shard over the {total_shards} shards the workers run; a shard schedules at most {:.0}/s: use at least {need:.0} shards (more workers or threads) or a lower rate",
                    c.name,
                    limits::MAX_RATE_PER_SHARD
                )));
            }
            if cfg.replay.is_none() && u64::from(c.connections) < u64::from(total_shards) {
                return Err(RunError::Usage(format!(
                    "--connections {} (class {}): fewer connections than the {total_shards} shards the workers run; give --connections ≥ {total_shards} (or fewer worker threads)",
                    c.connections, c.name
                )));
            }
        }
        let shards = self.members.iter().map(|m| m.link.info.shards);
        let (local, remote): (Vec<u32>, Vec<u32>) = match cfg.workers {
            Workers::Local { .. } => (shards.collect(), Vec::new()),
            Workers::Remote { .. } => (Vec::new(), shards.collect()),
        };
        let est = super::budget::estimate(cfg, &local, &remote);
        match super::budget::check(&est, cfg.memory_budget) {
            Some(line) => Err(RunError::Usage(line)),
            None => Ok(()),
        }
    }
}

/// Starts `count` in-process workers that dial `addr` over loopback, the same path remote
/// workers take. Cores are dealt out round-robin so local workers do not share a core.
fn start_local_workers(
    count: u32,
    cpus: Option<&str>,
    threads: Option<usize>,
    addr: SocketAddr,
    token: &str,
    stop: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let cores =
        crest_engine::cpus::pick(cpus, threads).map_err(|e| RunError::Usage(e.to_string()))?;
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "localhost".into());
    for i in 0..count as usize {
        let mine: Vec<_> = if cores.len() >= count as usize {
            cores
                .iter()
                .skip(i)
                .step_by(count as usize)
                .copied()
                .collect()
        } else {
            vec![cores[i % cores.len()]]
        };
        let acfg = agent::AgentConfig {
            coordinator: format!("http://{addr}"),
            name: format!("local-{i}"),
            host: host.clone(),
            token: token.to_string(),
            cores: mine,
            once: true,
            one_run: false,
            in_process: true,
            // Loopback: the in-process workers dial a plaintext listener of their own.
            tls: None,
        };
        let mut rx = stop.clone();
        tokio::spawn(async move {
            if let Err(e) = agent::run(acfg, async move {
                let _ = rx.wait_for(|s| *s).await;
            })
            .await
            {
                tracing::error!(error = %e, "local worker stopped");
            }
        });
    }
    Ok(())
}

async fn wait_for_workers(
    events: &mut mpsc::Receiver<HubEvent>,
    expected: usize,
    wait: Duration,
    dial: &str,
    interrupt: &watch::Receiver<bool>,
    quiet: bool,
) -> Result<Vec<Member>, RunError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut members: Vec<Member> = Vec::new();
    let mut refusals: Vec<String> = Vec::new();
    while members.len() < expected {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = tokio::time::sleep_until(deadline) => None,
            () = interrupted(interrupt) => return Err(RunError::Interrupted),
        };
        match ev {
            Some(HubEvent::Joined(link)) => {
                if !quiet {
                    eprintln!(
                        "crest: worker {} ({}, {} shard(s)) registered: {}/{expected}",
                        link.info.name,
                        link.info.host,
                        link.info.shards,
                        members.len() + 1
                    );
                }
                members.push(Member::new(link));
            }
            Some(HubEvent::Refused { name, reason }) => {
                eprintln!("crest: refused worker {name}: {reason}");
                refusals.push(reason);
            }
            Some(HubEvent::Left(id, _)) => members.retain(|m| m.link.info.id != id),
            // Heartbeats while the fleet gathers: silence is judged from the clock pings on
            // (`measure_offsets` sets `last_seen`), so nothing to look up per message.
            Some(HubEvent::Message(..)) => {}
            None => {
                let names = first_names(members.iter().map(|m| m.link.info.name.as_str()));
                let refused = refusals
                    .first()
                    .map(|r| format!("; refused: {r}"))
                    .unwrap_or_default();
                return Err(RunError::Usage(format!(
                    "waited {:?} for {expected} worker(s); {} arrived{}{refused}. Start `{dial}` on each client node, or lower --workers / raise --wait-timeout",
                    wait,
                    members.len(),
                    if names.is_empty() {
                        String::new()
                    } else {
                        format!(" ({names})")
                    }
                )));
            }
        }
    }
    Ok(members)
}

/// Estimates each worker's clock offset from a few pings, keeping the lowest-RTT sample
/// (the one least disturbed by queueing): offset = t2 − (t1 + t3) / 2.
async fn measure_offsets(
    events: &mut mpsc::Receiver<HubEvent>,
    members: &mut [Member],
) -> Result<(), RunError> {
    let mut best: HashMap<String, (u64, i64)> = HashMap::new();
    let mut got: HashMap<String, u64> = HashMap::new();
    for seq in 0..PINGS {
        for m in members.iter() {
            m.link
                .send(Out::Ping(pb::Ping {
                    seq,
                    t1_unix_ns: unix_ns(),
                }))
                .await;
        }
        let deadline = tokio::time::Instant::now() + PING_WAIT;
        while got.values().filter(|&&n| n > seq).count() < members.len() {
            let ev = tokio::select! {
                ev = events.recv() => ev,
                _ = tokio::time::sleep_until(deadline) => break,
            };
            match ev {
                Some(HubEvent::Message(id, In::Pong(p))) => {
                    // t1 is echoed and t2 is the worker's clock: peer numbers, so the
                    // arithmetic is checked and a nonsensical answer is dropped.
                    let Some((offset, rtt)) =
                        convert::clock_offset(p.t1_unix_ns, p.t2_unix_ns, unix_ns())
                    else {
                        continue;
                    };
                    *got.entry(id.clone()).or_default() += 1;
                    let e = best.entry(id).or_insert((u64::MAX, 0));
                    if rtt < e.0 {
                        *e = (rtt, offset);
                    }
                }
                Some(HubEvent::Left(id, reason)) => {
                    let name = members
                        .iter()
                        .find(|m| m.link.info.id == id)
                        .map(|m| m.link.info.name.clone());
                    return Err(RunError::Failed(format!(
                        "worker {} left before the run started: {reason}",
                        name.unwrap_or(id)
                    )));
                }
                Some(_) => {}
                None => return Err(RunError::Failed("event channel closed".into())),
            }
        }
    }
    for m in members.iter_mut() {
        let Some(&(rtt, offset)) = best.get(&m.link.info.id) else {
            return Err(RunError::Failed(format!(
                "worker {} did not answer clock pings",
                m.link.info.name
            )));
        };
        m.rtt_ns = rtt;
        m.offset_ns = offset;
        m.last_seen = Instant::now();
    }
    Ok(())
}

/// Workers' names for a one-line message however large the fleet: the first eight, then
/// how many more.
fn first_names<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    const NAMED: usize = 8;
    let n = names.len();
    let mut out = names.take(NAMED).collect::<Vec<_>>().join(", ");
    if n > NAMED {
        out.push_str(&format!(", {} more", n - NAMED));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::first_names;

    #[test]
    fn a_large_fleet_is_named_in_one_short_line() {
        let names: Vec<String> = (0..1000).map(|i| format!("sim{i}")).collect();
        let line = first_names(names.iter().map(String::as_str));
        assert_eq!(
            line,
            "sim0, sim1, sim2, sim3, sim4, sim5, sim6, sim7, 992 more"
        );
        let few = ["a", "b"];
        assert_eq!(first_names(few.into_iter()), "a, b");
        assert_eq!(first_names(std::iter::empty()), "");
    }
}
