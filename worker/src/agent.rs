//! The worker's link to its coordinator: dial, register, follow orders, stream results.
//!
//! The agent runs on tokio; the shards it starts are plain pinned threads. It owns at most
//! one active run. Dead man's switch: if the session ends, errors, or brings no message
//! for [`crest_proto::DEAD_MAN`], the active run is stopped at once and discarded (nothing is reported
//! as success), and the agent dials again with backoff.
//!
//! Dialling: `http://` is plaintext, `https://` is TLS ([`crate::control_tls`]). A dial that
//! fails is worded by [`crate::control_tls::explain_dial`]: a closed port or a plaintext/TLS
//! mismatch is retried with backoff (one line per cause, then one per 30 s); a certificate
//! problem, like a refusal, ends the agent: retrying cannot fix it. A dial nobody answers
//! (TLS to a port that waits for a line) ends at [`crate::uplink::DIAL_DEADLINE`] with its
//! own line, and is retried too.

use crate::assemble;
use crate::control_tls::ClientTls;
use crate::feed::TraceSource;
use crate::probe::Slots;
use crate::route;
use crate::shard::{self, ShardEvent};
use crate::steer::Steering;
use crate::target_tls::{Client, Handshakes};
use crate::uplink::{self, Outbox, SessionError};
use crest_model::built::Plan;
use crest_model::clock::unix_ns;
use crest_model::convert::{self, FailureKind};
use crest_model::schedule::{Change, Profile};
use crest_model::stats::{ErrorCounts, Kinds, NodeStats, Stats, add_error, fold_kinds};
use crest_model::target::{ClusterMode, ReadFrom};
use crest_proto::PROTOCOL_VERSION;
use crest_proto::pb::{self, coordinator_message::Msg as In, worker_message::Msg as Out};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A run may be scheduled to start at most this far ahead (the coordinator's lead is
/// 0.25 s for in-process workers, 1 s for remote ones, more for many connections or four
/// round trips on a slow path, at most 5 s).
const MAX_START_LEAD: Duration = Duration::from_secs(60);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// How to reach the coordinator and what this worker offers.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Coordinator URL, e.g. `http://10.0.0.1:7600`.
    pub coordinator: String,
    /// Name shown in reports.
    pub name: String,
    /// Host name shown in reports.
    pub host: String,
    /// Shared secret, empty for none.
    pub token: String,
    /// One entry per shard: the core it is pinned to.
    pub cores: Vec<core_affinity::CoreId>,
    /// Stop dialling after a session ends (used by in-process workers).
    pub once: bool,
    /// Take part in one run and exit (`crest-worker --one-run`, a per-run Kubernetes Job's
    /// workers): dial until a coordinator answers, stop once that session ends; a session
    /// lost mid-way is an error ([`AgentError::Lost`]).
    pub one_run: bool,
    /// In the coordinator's own process (`crest run`'s local workers): the coordinator
    /// prints why a run was refused, so the worker logs it at debug, not as a second
    /// warning of the same line.
    pub in_process: bool,
    /// TLS material for an `https://` coordinator (`None`: the system's CAs, no client
    /// certificate). Must be `None` for an `http://` one.
    pub tls: Option<ClientTls>,
}

/// Why the agent stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The coordinator refused this worker (version or token); retrying cannot help.
    #[error("coordinator refused this worker: {0}")]
    Refused(String),
    /// The coordinator URL does not parse.
    #[error(
        "bad coordinator address {0:?}; expected a URL like https://host:7600 or http://host:7600"
    )]
    BadUrl(String),
    /// TLS files were given for an `http://` coordinator.
    #[error(
        "--coordinator {0}: --control-ca/--control-client-cert are for TLS; dial https://… (or drop them)"
    )]
    TlsOverHttp(String),
    /// The TLS session cannot be set up (a certificate problem); retrying cannot help.
    #[error("{0}")]
    Tls(String),
    /// With `one_run`: the session with the coordinator failed before it ended.
    #[error("{0}")]
    Lost(String),
}

/// The endpoint a worker (or a relay) dials the coordinator at `url` with: `https://` with
/// `tls` (the system's CAs when None), `http://` plaintext; and whether it is TLS.
///
/// # Errors
/// [`AgentError::BadUrl`] for another scheme or a URL that does not parse,
/// [`AgentError::TlsOverHttp`] for TLS files with `http://`, [`AgentError::Tls`] when the
/// TLS configuration is refused.
pub fn coordinator_endpoint(
    url: &str,
    tls: Option<&ClientTls>,
) -> Result<(tonic::transport::Endpoint, bool), AgentError> {
    let endpoint =
        crest_proto::worker_endpoint(url).map_err(|_| AgentError::BadUrl(url.to_string()))?;
    match endpoint.uri().scheme_str() {
        Some("https") => {
            let t = tls.cloned().unwrap_or_default();
            let endpoint = endpoint
                .tls_config(t.tonic_config())
                .map_err(|e| AgentError::Tls(format!("--coordinator {url}: {e}")))?;
            Ok((endpoint, true))
        }
        Some("http") if tls.is_some() => Err(AgentError::TlsOverHttp(url.to_string())),
        Some("http") => Ok((endpoint, false)),
        _ => Err(AgentError::BadUrl(url.to_string())),
    }
}

/// Runs the agent until `shutdown` resolves (or, with `once`, until the first session ends).
///
/// # Errors
/// [`AgentError`] when the coordinator refuses the worker or the URL is malformed.
pub async fn run(
    cfg: AgentConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), AgentError> {
    let (endpoint, tls) = coordinator_endpoint(&cfg.coordinator, cfg.tls.as_ref())?;
    let id = uuid::Uuid::new_v4().to_string();
    tokio::pin!(shutdown);
    let mut backoff = BACKOFF_MIN;
    let mut last_warn: Option<(Instant, String)> = None;
    // After a normal end the coordinator is usually gone for good (one `crest run`):
    // dialling it in vain is the idle state, told at INFO, not a warning.
    let mut after_end = false;
    loop {
        let outcome = tokio::select! {
            _ = &mut shutdown => return Ok(()),
            r = session(&cfg, &endpoint, &id, tls) => r,
        };
        let line = match outcome {
            Ok(reason) if cfg.one_run => {
                tracing::info!(%reason, "session with coordinator ended; one run taken part in, exiting");
                return Ok(());
            }
            Ok(reason) => {
                backoff = BACKOFF_MIN;
                after_end = true;
                last_warn = None;
                tracing::info!(%reason, "session with coordinator ended; waiting for the next run");
                None
            }
            Err(SessionError::Refused(r)) => return Err(AgentError::Refused(r)),
            Err(SessionError::Dial(f)) if f.fatal => return Err(AgentError::Tls(f.line)),
            Err(SessionError::Dial(f)) => Some(format!("{}; retrying with backoff", f.line)),
            Err(e) if cfg.one_run => {
                return Err(AgentError::Lost(format!(
                    "the session with the coordinator at {} failed: {e}",
                    cfg.coordinator
                )));
            }
            Err(e) => {
                after_end = false;
                Some(format!(
                    "session with the coordinator at {} failed: {e}; dialling again with backoff",
                    cfg.coordinator
                ))
            }
        };
        if let Some(line) = line {
            // Rate-limited: a missing coordinator is the normal idle state. A new cause is
            // told at once, the same one again after 30 s.
            let again = last_warn
                .as_ref()
                .is_none_or(|(t, l)| *l != line || t.elapsed() > Duration::from_secs(30));
            if again {
                if after_end {
                    tracing::info!("{line}");
                } else {
                    tracing::warn!("{line}");
                }
                last_warn = Some((Instant::now(), line));
            }
        }
        if cfg.once {
            return Ok(());
        }
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// A session's work below: the worker's shards, and the run they carry (at most one).
struct Shards<'a> {
    cfg: &'a AgentConfig,
    run: Option<ActiveRun>,
}

impl uplink::Below for Shards<'_> {
    type Event = ShardEvent;

    async fn next(&mut self) -> Option<ShardEvent> {
        match &mut self.run {
            Some(r) => match r.rx.recv().await {
                Some(ev) => Some(ev),
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }

    async fn order(&mut self, m: In, out: &mut Outbox) -> Result<(), SessionError> {
        match m {
            In::Start(s) => {
                if let Err(reason) = start_run(self.cfg, s, &mut self.run).await {
                    if self.cfg.in_process {
                        tracing::debug!(reason = %reason.reason, "run refused");
                    } else {
                        tracing::warn!(reason = %reason.reason, "run refused");
                    }
                    out.push(Out::Failed(reason))?;
                }
            }
            In::Abort(a) => {
                if self.run.as_ref().is_some_and(|r| r.run_id == a.run_id) {
                    tracing::info!(run_id = %a.run_id, reason = %a.reason, "run aborted by coordinator");
                    self.run = None;
                }
            }
            In::Release(c) => {
                if let Some(r) = self.run.as_ref().filter(|r| r.run_id == c.run_id) {
                    r.released
                        .fetch_max(c.index.saturating_add(1), Ordering::AcqRel);
                }
            }
            In::Steer(c) => {
                if let Some(r) = self.run.as_mut().filter(|r| r.run_id == c.run_id) {
                    match Change::try_from(&c) {
                        Ok(change) => r.steer(change),
                        Err(e) => tracing::warn!(error = %e, "runtime change refused"),
                    }
                }
            }
            In::TraceChunk(c) => {
                if let Some(r) = self.run.as_mut().filter(|r| r.run_id == c.run_id)
                    && let Err(reason) = r.take_chunk(c)
                {
                    tracing::warn!(%reason, "trace chunk refused: the run stops");
                    out.push(Out::Failed(crest_model::convert::run_failed(
                        &r.run_id,
                        FailureKind::BadPlan,
                        reason,
                    )))?;
                    self.run = None;
                }
            }
            In::Welcome(_) | In::Refused(_) | In::Ping(_) | In::Heartbeat(_) => {}
        }
        Ok(())
    }

    async fn event(
        &mut self,
        ev: ShardEvent,
        out: &mut Outbox,
    ) -> Result<Option<String>, SessionError> {
        // Always a run: `next` never yields without one.
        let Some(r) = self.run.as_mut() else {
            return Ok(None);
        };
        let (msgs, done) = r.on_event(ev);
        // What the shards took goes up before their intervals and the run's end, so the
        // coordinator's books of the trace are whole when the run is.
        for m in r.trace_acks().into_iter().chain(msgs) {
            out.push(m)?;
        }
        if done {
            self.run = None;
        }
        Ok(None)
    }

    async fn watch(&mut self, out: &mut Outbox) -> Result<Option<String>, SessionError> {
        if let Some(r) = self.run.as_mut() {
            for m in r.trace_acks() {
                out.push(m)?;
            }
        }
        Ok(None)
    }

    fn busy(&self) -> bool {
        self.run.is_some()
    }
}

/// One session with the coordinator; `Ok` carries why it ended normally. A run still
/// active when it ends otherwise is stopped and discarded (the dead man's switch).
async fn session(
    cfg: &AgentConfig,
    endpoint: &tonic::transport::Endpoint,
    id: &str,
    tls: bool,
) -> Result<String, SessionError> {
    let register = pb::Register {
        protocol_version: PROTOCOL_VERSION,
        worker_id: id.to_string(),
        name: cfg.name.clone(),
        host: cfg.host.clone(),
        shards: cfg.cores.len() as u32,
        token: cfg.token.clone(),
        crest_version: env!("CARGO_PKG_VERSION").to_string(),
        cpus: cfg.cores.iter().map(|c| c.id as u32).collect(),
    };
    let dial = uplink::Dial {
        url: &cfg.coordinator,
        endpoint,
        tls,
    };
    let mut shards = Shards { cfg, run: None };
    let ended = uplink::session(dial, register, &mut shards).await;
    if ended.is_err() && shards.run.take().is_some() {
        tracing::warn!("the session with the coordinator ended: run stopped and discarded");
    }
    ended
}

/// Turns a StartRun into the active run: checks the plan, probes the target, discovers the
/// cluster topology, checks the open-file limit and the start instant, then spawns the
/// shards.
async fn start_run(
    cfg: &AgentConfig,
    s: pb::StartRun,
    run: &mut Option<ActiveRun>,
) -> Result<(), pb::RunFailed> {
    let pb_plan = s.plan.unwrap_or_default();
    let refuse = Refuse(&pb_plan.run_id);
    let mut plan = check_plan(cfg, &pb_plan, run.as_ref(), refuse)?;
    let probed = probe_target(&plan, refuse).await?;
    let topology = discover_topology(&mut plan, &probed, s.start_at_unix_ns, refuse).await?;
    check_open_files(&plan, topology.as_ref(), refuse)?;
    let start = start_instant(s.start_at_unix_ns, refuse)?;
    *run = Some(spawn_run(cfg, &plan, probed, topology, start, refuse)?);
    Ok(())
}

/// Words why the run with this id cannot start, as the `RunFailed` the coordinator gets.
#[derive(Clone, Copy)]
struct Refuse<'a>(&'a str);

impl Refuse<'_> {
    /// A refusal of `kind`.
    fn with(self, kind: FailureKind, reason: String) -> pb::RunFailed {
        convert::run_failed(self.0, kind, reason)
    }

    /// A refusal because the target cannot be reached.
    fn unreachable(self, reason: String) -> pb::RunFailed {
        self.with(FailureKind::TargetUnreachable, reason)
    }
}

/// Checks the plan: refused while another run is active, or when it does not pass
/// [`Plan::from_pb`] for this worker's shards.
fn check_plan(
    cfg: &AgentConfig,
    pb_plan: &pb::RunPlan,
    active: Option<&ActiveRun>,
    refuse: Refuse<'_>,
) -> Result<Plan, pb::RunFailed> {
    if let Some(r) = active {
        return Err(refuse.with(
            FailureKind::Busy,
            format!("worker {} is busy with run {}", cfg.name, r.run_id),
        ));
    }
    Plan::from_pb(pb_plan, cfg.cores.len())
        .map_err(|e| refuse.with(FailureKind::BadPlan, e.to_string()))
}

/// The target as the probe found it.
struct Probed {
    /// The first address its name resolves to.
    addr: SocketAddr,
    /// The TLS client its connections use (None: plaintext).
    tls: Option<Client>,
    /// The seed is a cluster node (asked only when the plan leaves cluster mode open).
    seed_is_cluster: bool,
}

/// Probes the target: resolves its name, sets up its TLS client and checks that it answers.
async fn probe_target(plan: &Plan, refuse: Refuse<'_>) -> Result<Probed, pb::RunFailed> {
    if plan.protocol.is_memcache() {
        return probe_ring(plan, refuse).await;
    }
    let target = tokio::net::lookup_host(plan.target.as_str())
        .await
        .map_err(|e| refuse.unreachable(format!("cannot resolve target {}: {e}", plan.target)))?
        .next()
        .ok_or_else(|| {
            refuse.unreachable(format!("target {} resolves to no address", plan.target))
        })?;
    let tls = tls_client(plan, refuse)?;
    // The probe asks whether the seed is a cluster node when the plan leaves it open.
    let ask_cluster = plan.cluster == ClusterMode::Auto;
    let seed_is_cluster = crate::probe::probe(
        target,
        &plan.target,
        &plan.session,
        tls.as_ref(),
        ask_cluster,
    )
    .await
    .map_err(|e| match e {
        crate::probe::Refusal::Unreachable { .. } => refuse.unreachable(e.to_string()),
        crate::probe::Refusal::Refused { .. } | crate::probe::Refusal::Tls(_) => {
            refuse.with(FailureKind::TargetRefused, e.to_string())
        }
    })?;
    Ok(Probed {
        addr: target,
        tls,
        seed_is_cluster,
    })
}

/// The run's TLS client to the target (None: plaintext).
fn tls_client(plan: &Plan, refuse: Refuse<'_>) -> Result<Option<Client>, pb::RunFailed> {
    plan.tls
        .as_ref()
        .map(Client::new)
        .transpose()
        .map_err(|e| refuse.with(FailureKind::BadPlan, e))
}

/// Probes every server of a memcached target at once (`version`): one that refuses
/// connections or answers as no memcached does stops the run, naming it.
async fn probe_ring(plan: &Plan, refuse: Refuse<'_>) -> Result<Probed, pb::RunFailed> {
    let tls = tls_client(plan, refuse)?;
    let mut probes = tokio::task::JoinSet::new();
    let mut first = None;
    for (i, server) in plan.ring.iter().enumerate() {
        let addr = tokio::net::lookup_host(server.as_str())
            .await
            .map_err(|e| {
                refuse.unreachable(format!("cannot resolve memcached server {server}: {e}"))
            })?
            .next()
            .ok_or_else(|| {
                refuse.unreachable(format!("memcached server {server} resolves to no address"))
            })?;
        first.get_or_insert(addr);
        let (server, tls) = (server.clone(), tls.clone());
        probes.spawn(async move {
            (
                i,
                crate::probe::probe_memcache(addr, &server, tls.as_ref()).await,
            )
        });
    }
    let mut refusals: Vec<(usize, crate::probe::Refusal)> = Vec::new();
    while let Some(done) = probes.join_next().await {
        if let Ok((i, Err(e))) = done {
            refusals.push((i, e));
        }
    }
    refusals.sort_by_key(|r| r.0);
    if let Some((_, e)) = refusals.into_iter().next() {
        let of_ring = if plan.ring.len() > 1 {
            format!(" ({} servers in the ring)", plan.ring.len())
        } else {
            String::new()
        };
        return Err(match e {
            crate::probe::Refusal::Unreachable { .. } => {
                refuse.unreachable(format!("{e}{of_ring}"))
            }
            _ => refuse.with(FailureKind::TargetRefused, format!("{e}{of_ring}")),
        });
    }
    Ok(Probed {
        addr: first.ok_or_else(|| {
            refuse.with(
                FailureKind::BadPlan,
                "a memcached plan with no server".into(),
            )
        })?,
        tls,
        seed_is_cluster: false,
    })
}

/// Discovers the cluster topology: the seed's slot table when the plan asks for a cluster
/// (or leaves it open and the seed is a cluster node), with every class's workload readied
/// for it. None: one node.
async fn discover_topology(
    plan: &mut Plan,
    probed: &Probed,
    start_at_unix_ns: i64,
    refuse: Refuse<'_>,
) -> Result<Option<Arc<route::Shared>>, pb::RunFailed> {
    // Reading the slot table must not eat the start lead (the session loop waits for
    // `start_run`, and a slow seed must not trip the coordinator's silence check): it gets
    // what is left of the lead but 250 ms, at least 500 ms (a far seed's connect, TLS and
    // login; a start it passes is late, and the first requests' latency shows it), at most
    // SLOTS_TIMEOUT. A cluster node answers CLUSTER SLOTS in well under a millisecond.
    let lead = Duration::from_nanos(
        u64::try_from(start_at_unix_ns.saturating_sub(unix_ns())).unwrap_or(0),
    );
    let limit = lead
        .saturating_sub(Duration::from_millis(250))
        .clamp(Duration::from_millis(500), crate::probe::SLOTS_TIMEOUT);
    if plan.protocol.is_memcache() {
        return ring_topology(plan, refuse).await;
    }
    let topology = match plan.cluster {
        ClusterMode::Off => None,
        ClusterMode::Auto if !probed.seed_is_cluster => None,
        mode => discover(plan, probed.addr, probed.tls.as_ref(), mode, limit)
            .await
            .map_err(|e| refuse.with(FailureKind::TargetRefused, e))?,
    };
    let read_from = plan.read_from;
    // The target lacks what the flag needs: the user's to fix (exit 2).
    let bad = |why: String| {
        refuse.with(
            FailureKind::TargetRefused,
            format!("--read-from {}: {why}", read_from.name()),
        )
    };
    if let Some(t) = &topology {
        for c in &mut plan.classes {
            c.workload
                .for_cluster()
                .map_err(|e| refuse.with(FailureKind::BadPlan, format!("class {}: {e}", c.name)))?;
        }
        if read_from.uses_replicas() {
            if !plan.replicas.is_empty() {
                return Err(bad(format!(
                    "{} is a cluster, which names its own replicas: leave out --replica",
                    plan.target
                )));
            }
            let (_, r) = t.current();
            cluster_replicas(read_from, &r).map_err(bad)?;
            // Replicas answer their primaries' slots only after READONLY.
            plan.session.readonly = true;
        }
        return Ok(topology);
    }
    if !read_from.uses_replicas() && plan.replicas.is_empty() {
        return Ok(None);
    }
    // A standalone primary and its replicas: a table of one owner, until a replica is
    // promoted while the primary is out (`role_reader`).
    plan.cluster = ClusterMode::Off;
    if plan.replicas.is_empty() {
        plan.replicas =
            crate::probe::replicas(probed.addr, &plan.session, probed.tls.as_ref(), limit)
                .await
                .map_err(bad)?;
    }
    let r = route::Resolved::standalone((plan.target.clone(), probed.addr), &plan.replicas)
        .await
        .map_err(|e| refuse.unreachable(format!("--replica: {e}")))?;
    // Each replica is probed as the target was: one that refuses connections or the
    // login stops the run before load, named.
    for (name, addr, _) in r.nodes.iter().skip(1) {
        crate::probe::probe(*addr, name, &plan.session, probed.tls.as_ref(), false)
            .await
            .map_err(|e| bad(format!("replica {name}: {e}")))?;
    }
    tracing::info!(
        replicas = plan.replicas.len(),
        "reading from a standalone primary's replicas"
    );
    Ok(Some(route::Shared::new(r)))
}

/// Whether a cluster's table `r` has the replicas `read_from` needs: one for every owned
/// slot with `replicas`, at least one with the others.
fn cluster_replicas(read_from: ReadFrom, r: &route::Resolved) -> Result<(), String> {
    let any = r
        .replica_of
        .iter()
        .any(|&p| p != crest_model::topology::NO_NODE);
    match r.slots_without_replica() {
        Some((a, b, node)) if read_from == ReadFrom::Replicas => Err(format!(
            "the slot table lists no replica for slots {a}-{b} (primary {node}; a replica that has replicated nothing yet is left out): give --read-from prefer-replicas, or add replicas"
        )),
        _ if !any => {
            Err("the cluster's slot table lists no replica (a replica that has replicated nothing yet is left out): give --read-from primary, or add replicas".into())
        }
        _ => Ok(()),
    }
}

/// A ring of memcached servers as the shards route it: each server a node owning one
/// "slot", each class's keys placed on the ring (libmemcached's ketama) and its multi-gets
/// kept on one server. One server: no routing at all.
async fn ring_topology(
    plan: &mut Plan,
    refuse: Refuse<'_>,
) -> Result<Option<Arc<route::Shared>>, pb::RunFailed> {
    if plan.ring.len() < 2 {
        return Ok(None);
    }
    let resolved = route::Resolved::ring(&plan.ring)
        .await
        .map_err(|e| refuse.unreachable(e))?;
    let ring = crest_memcache::ring::Ring::of_addrs(&plan.ring);
    for c in &mut plan.classes {
        c.workload.on_ring(ring.clone());
        c.workload
            .for_cluster()
            .map_err(|e| refuse.with(FailureKind::BadPlan, format!("class {}: {e}", c.name)))?;
    }
    Ok(Some(route::Shared::new(resolved)))
}

/// Checks the open-file limit: one file per connection (in a cluster, every shard connects
/// to every primary) must fit under it, raised as far as the hard limit allows.
fn check_open_files(
    plan: &Plan,
    topology: Option<&Arc<route::Shared>>,
    refuse: Refuse<'_>,
) -> Result<(), pb::RunFailed> {
    // Every shard connects to every primary (a node that owns slots).
    // With reads from replicas, to every replica too.
    let replicas = plan.read_from.uses_replicas();
    let owners = topology.map_or(1, |t| {
        let (_, r) = t.current();
        r.nodes.iter().filter(|n| n.2 || replicas).count().max(1) as u64
    });
    // One open file per connection, plus what the process holds already (a margin for the
    // rest): refuse up front rather than fail connects one by one with EMFILE.
    let conns: u64 = plan
        .shards
        .iter()
        .flat_map(|p| p.classes.iter())
        .map(|c| u64::from(c.connections))
        .sum::<u64>()
        // In a cluster every shard connects to every primary.
        * owners;
    let open = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64);
    let need = conns + open + 64;
    match crate::sys::rlimit::ensure_nofile(need) {
        Ok(lim) if lim.soft < need => {
            return Err(refuse.with(
                FailureKind::WorkerLimit,
                format!(
                    "{conns} connections need {need} open files, but the limit is {} (hard limit {}); raise it (ulimit -n {need}, or docker run --ulimit nofile={need}) or use fewer --connections",
                    lim.soft, lim.hard
                ),
            ));
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the open-file limit"),
    }
    Ok(())
}

/// Checks the start instant and turns it into a local one.
fn start_instant(start_at_unix_ns: i64, refuse: Refuse<'_>) -> Result<Instant, pb::RunFailed> {
    // The start instant is the peer's number: saturate instead of overflowing, and refuse
    // one further ahead than any coordinator would schedule (it sends 0.25 to 5 s ahead).
    let wait = Duration::from_nanos(
        u64::try_from(start_at_unix_ns.saturating_sub(unix_ns())).unwrap_or(0),
    );
    if wait > MAX_START_LEAD {
        return Err(refuse.with(
            FailureKind::BadPlan,
            format!(
                "start instant is {wait:?} away; a coordinator starts runs within {MAX_START_LEAD:?}"
            ),
        ));
    }
    let now = Instant::now();
    Ok(now.checked_add(wait).unwrap_or(now))
}

/// Spawns the run: wires the shards (and, in a cluster, the slot table's refresher), starts
/// them, and returns the run that collects their results.
fn spawn_run(
    cfg: &AgentConfig,
    plan: &Plan,
    probed: Probed,
    topology: Option<Arc<route::Shared>>,
    start: Instant,
    refuse: Refuse<'_>,
) -> Result<ActiveRun, pb::RunFailed> {
    let Probed {
        addr: target, tls, ..
    } = probed;
    let stop = Arc::new(AtomicBool::new(false));
    let (etx, erx) = mpsc::unbounded_channel();
    // A cluster's table is kept current, and a standalone primary's follows a promotion;
    // a ring's does not move.
    if let Some(shared) = topology.as_ref().filter(|_| !plan.protocol.is_memcache()) {
        if plan.cluster != ClusterMode::Off {
            tokio::spawn(route::refresh(
                shared.clone(),
                stop.clone(),
                table_reader(target, plan.session.clone(), tls.clone()),
            ));
        } else {
            tokio::spawn(route::refresh(
                shared.clone(),
                stop.clone(),
                role_reader(plan.session.clone(), tls.clone()),
            ));
        }
    }
    let released = Arc::new(AtomicU32::new(0));
    let steering = Arc::new(Steering::default());
    let wiring = assemble::Wiring {
        target,
        topology,
        start,
        cores: cfg.cores.clone(),
        stop: stop.clone(),
        released: released.clone(),
        steering: steering.clone(),
        out: etx,
        tls: tls.clone(),
        worker: cfg.name.clone(),
    };
    let configs = assemble::shard_configs(plan, &wiring).map_err(|e| {
        // The slot-table refresher started above stops with the run that never was.
        stop.store(true, Ordering::Release);
        refuse.with(FailureKind::BadPlan, e.to_string())
    })?;
    let feeds = TraceFeeds::of(&configs);
    spawn_shards(configs, &stop, refuse)?;
    tracing::info!(run_id = %plan.run_id, target = %target, shards = plan.shards.len(), "run accepted");
    let mut run = ActiveRun::new(cfg, plan, tls.is_some(), stop, released, steering, erx);
    run.feeds = feeds;
    Ok(run)
}

/// Spawns the shards, one named thread each; if one cannot start, those already started
/// are stopped.
fn spawn_shards(
    configs: Vec<shard::ShardConfig>,
    stop: &AtomicBool,
    refuse: Refuse<'_>,
) -> Result<(), pb::RunFailed> {
    for sc in configs {
        let spawned = std::thread::Builder::new()
            .name(format!("crest-shard-{}", sc.index))
            .spawn(move || shard::run(sc));
        if let Err(e) = spawned {
            // Shards already started must not run a plan nobody will collect.
            stop.store(true, Ordering::Relaxed);
            return Err(refuse.with(
                FailureKind::Internal,
                format!("cannot start shard thread: {e}"),
            ));
        }
    }
    Ok(())
}

/// In cluster mode (or auto, for a seed that is a cluster node): the seed's slot table,
/// resolved and published for the shards. None: one node.
async fn discover(
    plan: &Plan,
    seed: SocketAddr,
    tls: Option<&Client>,
    mode: ClusterMode,
    limit: Duration,
) -> Result<Option<Arc<route::Shared>>, String> {
    let host = crest_model::target::host_of(&plan.target);
    match crate::probe::cluster_slots(seed, host, &plan.session, tls, limit).await {
        Slots::Table(t) => {
            let r = route::Resolved::of(&t).await;
            if r.owner.iter().all(|&o| o == crest_model::topology::NO_NODE) {
                return Err(format!(
                    "cluster seed {}: no node of its slot table resolves ({})",
                    plan.target,
                    t.nodes
                        .iter()
                        .map(|n| n.addr.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            tracing::info!(
                nodes = r.nodes.len(),
                primaries = t.primaries().len(),
                "cluster slot table read"
            );
            Ok(Some(route::Shared::new(r)))
        }
        Slots::NotCluster(m) if mode == ClusterMode::On => Err(format!(
            "target {} is not a cluster node (CLUSTER SLOTS: {m}): drop --cluster, or give a node of the cluster",
            plan.target
        )),
        Slots::Failed(why) if mode == ClusterMode::On => Err(format!(
            "cannot read the cluster's slot table from {}: {why}",
            plan.target
        )),
        Slots::NotCluster(_) => Ok(None),
        Slots::Failed(why) => {
            tracing::warn!(%why, "no slot table from the seed: loading it as one node");
            Ok(None)
        }
    }
}

/// Reads a slot table for the refresher: from the seed, else from the nodes of the
/// current table (a failed-over seed), at most 8 tries.
fn table_reader(
    seed: SocketAddr,
    session: crest_model::target::Session,
    tls: Option<Client>,
) -> impl FnMut(Arc<route::Resolved>) -> route::TableRead {
    move |cur: Arc<route::Resolved>| {
        let (session, tls) = (session.clone(), tls.clone());
        Box::pin(async move {
            let mut addrs = vec![seed];
            addrs.extend(cur.nodes.iter().map(|n| n.1).filter(|a| *a != seed));
            for a in addrs.into_iter().take(8) {
                let host = a.ip().to_string();
                if let Slots::Table(t) = crate::probe::cluster_slots(
                    a,
                    &host,
                    &session,
                    tls.as_ref(),
                    crate::probe::SLOTS_TIMEOUT,
                )
                .await
                {
                    return Some(t);
                }
            }
            None
        })
    }
}

/// How long the refresher waits for one node's `ROLE`.
const ROLE_TIMEOUT: Duration = Duration::from_millis(500);

/// Reads a standalone primary's table for the refresher: every node is asked its `ROLE`
/// at once. While the current primary answers as one, nothing changes (None). When it
/// does not and another node does (a replica promoted with `REPLICAOF NO ONE`), that node
/// takes the writes, and the nodes that answer as replicas take the reads; a node that
/// does not answer takes neither until a later read finds it.
fn role_reader(
    session: crest_model::target::Session,
    tls: Option<Client>,
) -> impl FnMut(Arc<route::Resolved>) -> route::TableRead {
    move |cur: Arc<route::Resolved>| {
        let (session, tls) = (session.clone(), tls.clone());
        Box::pin(async move {
            let mut asks = tokio::task::JoinSet::new();
            for (i, (_, addr, _)) in cur.nodes.iter().enumerate() {
                let (session, tls, addr) = (session.clone(), tls.clone(), *addr);
                asks.spawn(async move {
                    let role =
                        crate::probe::is_primary(addr, &session, tls.as_ref(), ROLE_TIMEOUT).await;
                    (i, role)
                });
            }
            let mut roles = vec![None; cur.nodes.len()];
            while let Some(Ok((i, role))) = asks.join_next().await {
                roles[i] = role;
            }
            promoted(&cur, &roles)
        })
    }
}

/// The table after a promotion: `roles[i]` is what node `i` of `cur` answered (Some(true):
/// a primary); None when the current primary still is one, or no node is.
fn promoted(
    cur: &route::Resolved,
    roles: &[Option<bool>],
) -> Option<crest_model::topology::Topology> {
    use crest_model::topology::{NO_NODE, Node, Topology};
    let primary = usize::from(*cur.owner.first()?);
    if roles.get(primary).copied().flatten() == Some(true) {
        return None;
    }
    let new = roles.iter().position(|r| *r == Some(true))?;
    let nodes = cur
        .nodes
        .iter()
        .enumerate()
        .map(|(i, (name, _, _))| Node {
            addr: name.clone(),
            id: String::new(),
            primary: i == new,
            replica_of: if i != new && roles[i] == Some(false) {
                new as u16
            } else {
                NO_NODE
            },
        })
        .collect();
    tracing::warn!(
        primary = %cur.nodes[new].0,
        "the primary is out and a replica answers as one: writes follow it"
    );
    Some(Topology {
        nodes,
        owner: vec![new as u16; cur.owner.len()],
    })
}

/// The shards' work in one interval, summed: their CPU time, and the busy share of the
/// busiest (the one that limits the worker).
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    cpu_ns: u64,
    busiest: f64,
    /// Preemptions of the shard threads and their time queued for a core, summed.
    preemptions: u64,
    queued_ns: u64,
    /// Connections that came up (reconnects), summed.
    opened: u64,
}

impl Load {
    fn add(&mut self, l: &shard::ShardLoad) {
        self.cpu_ns = self.cpu_ns.saturating_add(l.cpu_ns);
        self.busiest = self.busiest.max(l.busy());
        self.preemptions = self.preemptions.saturating_add(l.sched.preemptions);
        self.queued_ns = self.queued_ns.saturating_add(l.sched.queued_ns);
    }
}

/// Names and profile of one class, for labelling results.
struct ClassNames {
    name: String,
    commands: Vec<String>,
    /// The cluster-wide profile as runtime changes left it (the intervals' target rate).
    profile: Option<Profile>,
    /// The plan's.
    original: Option<Profile>,
}

/// Adds per-class results into `into`.
fn add_classes(into: &mut Vec<Stats>, from: &[Stats]) {
    if into.len() < from.len() {
        into.resize_with(from.len(), Stats::default);
    }
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

/// A run in progress on this worker. Dropping it stops the shards.
struct ActiveRun {
    run_id: String,
    target: String,
    /// The target is a ring of memcached servers (its nodes are the ring's, not a cluster's).
    ring: bool,
    classes: Vec<ClassNames>,
    warmup_ns: u64,
    interval_ns: u64,
    share: f64,
    stop: Arc<AtomicBool>,
    /// Checkpoints the coordinator released (the shards read it).
    released: Arc<AtomicU32>,
    /// Runtime changes of rate (the shards read them).
    steering: Arc<Steering>,
    /// Change → (shards that follow it, earliest and latest instant they switched at).
    steered: BTreeMap<u32, (BTreeSet<u32>, u64, u64)>,
    /// Checkpoint → shards that reached it (reported to the coordinator, and removed,
    /// once every shard still running has).
    reached: BTreeMap<u32, BTreeSet<u32>>,
    /// Shards that finished (they wait at no checkpoint).
    done_shards: BTreeSet<u32>,
    rx: mpsc::UnboundedReceiver<ShardEvent>,
    shards: usize,
    /// Intervals waiting for every shard: index → (shards reported, sum per class).
    pending: BTreeMap<u32, (usize, Vec<Stats>, Load)>,
    finished: usize,
    totals: Vec<Stats>,
    in_flight: u64,
    unsent: u64,
    intervals_sent: u32,
    conn_errors: ErrorCounts,
    /// TLS handshakes of every shard.
    handshakes: Handshakes,
    /// The run's connections use TLS.
    tls: bool,
    /// The worker's bound on server error kinds: each shard keeps 32, and the worker folds
    /// theirs into one set of 32 the same way (a kind's fate is decided once, when it is
    /// first seen, so intervals and totals agree).
    kinds: Kinds,
    /// Kinds first seen since the last interval message, with their first messages.
    new_messages: Vec<(String, String)>,
    /// Per target node, every shard's share.
    nodes: Vec<NodeStats>,
    /// How the shards' connections came and went, summed as they finish.
    connections: crest_model::stats::ConnLife,
    /// The hypervisor's steal on the shards' cores, per interval message.
    steal: crate::sys::sched::StealMeter,
    /// A replayed trace's feeds, one per trace class and shard.
    feeds: TraceFeeds,
}

/// A run's trace feeds: per (class, shard), the feed its chunks go into and how many of
/// its requests were last acknowledged to the coordinator.
#[derive(Debug, Default)]
struct TraceFeeds(BTreeMap<(u32, u32), (TraceSource, u64)>);

impl TraceFeeds {
    /// The feeds of the trace classes in `configs`.
    fn of(configs: &[shard::ShardConfig]) -> Self {
        let mut m = BTreeMap::new();
        for sc in configs {
            for (ci, c) in sc.classes.iter().enumerate() {
                if let crate::spec::Load::Trace(src) = &c.load {
                    m.insert((ci as u32, sc.index), (src.clone(), 0));
                }
            }
        }
        Self(m)
    }
}

/// Rewrites every error kind of `stats` through the worker's bound.
fn fold_stats(stats: &mut [Stats], kinds: &mut Kinds) {
    for s in stats {
        for c in &mut s.cmds {
            fold_kinds(&mut c.errors, kinds);
        }
    }
}

impl Drop for ActiveRun {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl ActiveRun {
    /// A run of `plan` whose shards were just started: they report on `rx`, nothing has
    /// come in yet.
    fn new(
        cfg: &AgentConfig,
        plan: &Plan,
        tls: bool,
        stop: Arc<AtomicBool>,
        released: Arc<AtomicU32>,
        steering: Arc<Steering>,
        rx: mpsc::UnboundedReceiver<ShardEvent>,
    ) -> Self {
        let classes: Vec<ClassNames> = plan
            .classes
            .iter()
            .map(|c| ClassNames {
                name: c.name.clone(),
                commands: c.workload.names(),
                profile: c.profile.clone(),
                original: c.profile.clone(),
            })
            .collect();
        let shares: f64 = plan.shards.iter().map(|p| p.share).sum();
        let warmup_ns = plan.warmup.as_nanos() as u64;
        ActiveRun {
            run_id: plan.run_id.clone(),
            target: plan.target.clone(),
            ring: plan.protocol.is_memcache(),
            classes,
            warmup_ns,
            interval_ns: plan.interval.as_nanos() as u64,
            share: shares,
            stop,
            released,
            steering,
            steered: BTreeMap::new(),
            reached: BTreeMap::new(),
            done_shards: BTreeSet::new(),
            rx,
            shards: plan.shards.len(),
            pending: BTreeMap::new(),
            finished: 0,
            totals: Vec::new(),
            in_flight: 0,
            unsent: 0,
            intervals_sent: 0,
            conn_errors: Vec::new(),
            handshakes: Default::default(),
            tls,
            kinds: Kinds::default(),
            new_messages: Vec::new(),
            nodes: Vec::new(),
            connections: Default::default(),
            steal: crate::sys::sched::StealMeter::new(
                cfg.cores
                    .iter()
                    .take(plan.shards.len())
                    .map(|c| c.id)
                    .collect(),
            ),
            feeds: TraceFeeds::default(),
        }
    }

    /// A chunk of a replayed trace: checked against its class's op table and handed to
    /// its shard's feed. Err: why the run cannot go on (a chunk for no trace class, out of
    /// order, or out of shape: requests would go missing from the books).
    fn take_chunk(&mut self, c: pb::TraceChunk) -> Result<(), String> {
        let (class, shard, seq) = (c.class_index, c.shard, c.seq);
        let Some((src, _)) = self.feeds.0.get(&(class, shard)) else {
            return Err(format!(
                "a trace chunk for class {class} on shard {shard}, which runs no trace"
            ));
        };
        let batch = crest_model::convert::batch_from_wire(c, &src.ops)
            .map_err(|e| format!("trace chunk {seq} of shard {shard}: {e}"))?;
        if !src.feed.push(batch) {
            return Err(format!(
                "trace chunk {seq} of shard {shard} came out of order (after {})",
                src.feed.pushed()
            ));
        }
        Ok(())
    }

    /// An acknowledgement for each feed whose shard took requests since the last one.
    fn trace_acks(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        for (&(class, shard), (src, acked)) in &mut self.feeds.0 {
            let consumed = src.feed.consumed();
            if consumed > *acked {
                *acked = consumed;
                out.push(Out::TraceAck(pb::TraceAck {
                    run_id: self.run_id.clone(),
                    class_index: class,
                    shard,
                    consumed,
                }));
            }
        }
        out
    }

    /// A runtime change from the coordinator: to the shards, and into the profiles the
    /// intervals' target rates come from.
    fn steer(&mut self, change: Change) {
        let (at, classes, end) = (change.at_ns, change.classes.clone(), change.end);
        if !self.steering.push(change) {
            return;
        }
        for (i, c) in self.classes.iter_mut().enumerate() {
            if let (Some(p), Some(plan)) = (&mut c.profile, &c.original) {
                *p = match classes.get(i) {
                    _ if end => p.until(at),
                    Some(how) => how.apply(p, plan, at, 1.0),
                    None => continue,
                };
            }
        }
    }

    /// Changes every shard still running follows, in order, as messages (each once).
    fn changes_followed(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        while let Some(entry) = self.steered.first_entry() {
            if entry.get().0.union(&self.done_shards).count() < self.shards {
                break;
            }
            let (seq, (_, first, last)) = entry.remove_entry();
            out.push(Out::Steered(pb::Steered {
                run_id: self.run_id.clone(),
                seq,
                first_ns: first,
                last_ns: last,
            }));
        }
        out
    }

    /// Checkpoints every shard still running has reached, in order, as messages (each
    /// once).
    fn checkpoints_reached(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        while let Some(entry) = self.reached.first_entry() {
            if entry.get().union(&self.done_shards).count() < self.shards {
                break;
            }
            let index = *entry.key();
            entry.remove();
            out.push(Out::Checkpoint(pb::CheckpointReached {
                run_id: self.run_id.clone(),
                index,
            }));
        }
        out
    }

    /// Folds one shard event in; returns messages to send and whether the run is over.
    fn on_event(&mut self, ev: ShardEvent) -> (Vec<Out>, bool) {
        match ev {
            ShardEvent::Connected {
                up,
                want,
                error,
                node,
                ..
            } => self.on_connected(up, want, error, node),
            ShardEvent::Steered { shard, seq, at_ns } => {
                (self.on_steered(shard, seq, at_ns), false)
            }
            ShardEvent::Checkpoint { shard, index } => (self.on_checkpoint(shard, index), false),
            ShardEvent::Interval {
                index,
                stats,
                messages,
                load,
                opened,
                ..
            } => (
                self.on_interval(index, stats, &messages, &load, opened),
                false,
            ),
            ShardEvent::Finished {
                shard,
                totals,
                in_flight,
                unsent,
                connection_errors,
                handshakes,
                nodes,
                connections,
                ..
            } => {
                self.connections.add(&connections);
                self.add_shard_results(
                    totals,
                    in_flight,
                    unsent,
                    &connection_errors,
                    &handshakes,
                    &nodes,
                );
                self.on_finished(shard)
            }
        }
    }

    /// A shard's first connects: when it wanted connections and none came up, the run
    /// fails (and is over). In a cluster the line names the node that failed, which the
    /// seed's slot table named (the seed itself answered the probe).
    fn on_connected(
        &self,
        up: u32,
        want: u32,
        error: Option<String>,
        node: Option<String>,
    ) -> (Vec<Out>, bool) {
        if up == 0 && want > 0 {
            let error = error.unwrap_or_else(|| "no connection came up".into());
            let reason = match node {
                Some(node) if self.ring => format!(
                    "cannot connect to memcached server {node} of the ring ({error}); it answered the probe a moment ago"
                ),
                Some(node) => format!(
                    "cannot connect to cluster node {node} ({error}), which the seed {} named in its slot table (CLUSTER SLOTS); the seed is up: that node is down, or the cluster announces an address this worker cannot reach (cluster-announce-ip/port)",
                    self.target
                ),
                None => format!("cannot connect to target {}: {error}", self.target),
            };
            let failed = convert::run_failed(&self.run_id, FailureKind::TargetUnreachable, reason);
            return (vec![Out::Failed(failed)], true);
        }
        (Vec::new(), false)
    }

    /// A shard follows change `seq` from `at_ns`; returns the changes every shard still
    /// running now follows, as messages.
    fn on_steered(&mut self, shard: u32, seq: u32, at_ns: u64) -> Vec<Out> {
        let e = self
            .steered
            .entry(seq)
            .or_insert_with(|| (BTreeSet::new(), u64::MAX, 0));
        e.0.insert(shard);
        e.1 = e.1.min(at_ns);
        e.2 = e.2.max(at_ns);
        self.changes_followed()
    }

    /// A shard reached checkpoint `index`; returns the checkpoints every shard still
    /// running has now reached, as messages.
    fn on_checkpoint(&mut self, shard: u32, index: u32) -> Vec<Out> {
        self.reached.entry(index).or_default().insert(shard);
        self.checkpoints_reached()
    }

    /// One shard's results for interval `index`, added to that interval's sum; returns the
    /// intervals every shard has now reported, in order, as messages.
    fn on_interval(
        &mut self,
        index: u32,
        mut stats: Vec<Stats>,
        messages: &[(String, String)],
        load: &shard::ShardLoad,
        opened: u64,
    ) -> Vec<Out> {
        // Kinds with their messages first, so a new kind is admitted with its text.
        for (kind, message) in messages {
            self.kinds.fold(kind, Some(message));
        }
        fold_stats(&mut stats, &mut self.kinds);
        self.new_messages.extend(self.kinds.take_new());
        let e = self
            .pending
            .entry(index)
            .or_insert_with(|| (0, Vec::new(), Load::default()));
        e.0 += 1;
        add_classes(&mut e.1, &stats);
        e.2.add(load);
        e.2.opened += opened;
        let mut out = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            if entry.get().0 < self.shards {
                break;
            }
            let (index, (_, stats, load)) = entry.remove_entry();
            out.push(self.interval_msg(index, stats, load));
        }
        out
    }

    /// Adds a finished shard's results to the run's: its totals, what it left in flight or
    /// unsent, its connection errors, TLS handshakes and per-node shares.
    fn add_shard_results(
        &mut self,
        mut totals: Vec<Stats>,
        in_flight: u64,
        unsent: u64,
        connection_errors: &ErrorCounts,
        handshakes: &Handshakes,
        nodes: &[NodeStats],
    ) {
        self.handshakes.add(handshakes);
        for n in nodes {
            match self.nodes.iter_mut().find(|m| m.addr == n.addr) {
                Some(m) => m.add(n),
                None => self.nodes.push(n.clone()),
            }
        }
        fold_stats(&mut totals, &mut self.kinds);
        add_classes(&mut self.totals, &totals);
        self.in_flight += in_flight;
        self.unsent += unsent;
        for (k, n) in connection_errors {
            add_error(&mut self.conn_errors, k, *n);
        }
    }

    /// A shard finished; returns the checkpoints and changes that completes, and once every
    /// shard has finished, the intervals left and the run's totals (the run is then over).
    fn on_finished(&mut self, shard: u32) -> (Vec<Out>, bool) {
        let mut out = Vec::new();
        self.finished += 1;
        // A finished shard waits at no checkpoint: the others may be complete.
        self.done_shards.insert(shard);
        out.extend(self.checkpoints_reached());
        out.extend(self.changes_followed());
        if self.finished == self.shards {
            // A shard that stalled past a whole second skipped that index: send
            // what is left, in order.
            while let Some((index, (_, stats, load))) = self.pending.pop_first() {
                out.push(self.interval_msg(index, stats, load));
            }
            out.push(self.finished_msg());
            return (out, true);
        }
        (out, false)
    }

    /// The run's end as a message: its totals and counts over every shard.
    fn finished_msg(&self) -> Out {
        Out::Finished(pb::Finished {
            run_id: self.run_id.clone(),
            totals: self.encode(&self.totals),
            in_flight: self.in_flight,
            unsent: self.unsent,
            intervals: self.intervals_sent,
            connection_errors: convert::errors_to_pb(&self.conn_errors),
            error_messages: convert::messages_to_pb(&self.kinds.all()),
            tls: self.tls.then(|| pb::TlsStats {
                full: self.handshakes.full,
                resumed: self.handshakes.resumed,
                version: self.handshakes.version.clone(),
                cipher: self.handshakes.cipher.clone(),
            }),
            classes: self
                .classes
                .iter()
                .zip(&self.totals)
                .map(|(c, s)| convert::class_stats_to_pb(&c.name, s))
                .collect(),
            nodes: convert::nodes_to_pb(&self.nodes),
            connections: Some(convert::conn_life_to_pb(&self.connections)),
        })
    }

    fn encode(&self, stats: &[Stats]) -> Vec<pb::CommandStats> {
        self.classes
            .iter()
            .zip(stats)
            .flat_map(|(c, s)| convert::stats_to_pb(&c.name, &s.cmds, &c.commands))
            .collect()
    }

    fn interval_msg(&mut self, index: u32, stats: Vec<Stats>, load: Load) -> Out {
        self.intervals_sent += 1;
        let t0 = self.warmup_ns + u64::from(index) * self.interval_ns;
        let target: f64 = self
            .classes
            .iter()
            .filter_map(|c| c.profile.as_ref())
            .map(|p| p.expected(t0, t0 + self.interval_ns))
            // A fold from +0: an empty f64 sum is −0, which the timeline printed as "-0".
            .fold(0.0, |a, b| a + b)
            / (self.interval_ns as f64 / 1e9);
        Out::Interval(pb::Interval {
            run_id: self.run_id.clone(),
            index,
            commands: self.encode(&stats),
            target_rate: target * self.share,
            error_messages: convert::messages_to_pb(&std::mem::take(&mut self.new_messages)),
            shard_cpu_ns: load.cpu_ns,
            busiest_shard: load.busiest,
            shard_preemptions: load.preemptions,
            shard_queued_ns: load.queued_ns,
            shard_steal_ns: self.steal.take(),
            connections_opened: load.opened,
        })
    }
}
