//! The cluster for one run: in-process workers, waiting for the expected registrations,
//! and each worker's clock offset.

use super::member::{Member, PINGS, RunError, interrupted};
use crate::service::HubEvent;
use crest_engine::agent;
use crest_model::clock::unix_ns;
use crest_model::convert;
use crest_proto::pb::{self, coordinator_message::Msg as Out, worker_message::Msg as In};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// How long one round of clock pings waits for every answer.
const PING_WAIT: Duration = Duration::from_millis(500);

/// Starts `count` in-process workers that dial `addr` over loopback, the same path remote
/// workers take. Cores are dealt out round-robin so local workers do not share a core.
pub(super) fn start_local_workers(
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

pub(super) async fn wait_for_workers(
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
                members.push(Member {
                    link,
                    offset_ns: 0,
                    rtt_ns: 0,
                    lost: None,
                    last_seen: Instant::now(),
                    done: false,
                    finished_at: None,
                });
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
pub(super) async fn measure_offsets(
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
