//! Where a request goes: one node, or the owner of its key's slot in a Redis Cluster.
//!
//! Data flow in cluster mode:
//! - the agent reads the slot table from the seed before the run (`probe::cluster_slots`),
//!   resolves every node's address and publishes it in a [`Shared`] cell;
//! - a refresher task ([`refresh`]) reads it again every second, and within 100 ms of a
//!   shard asking (a `MOVED`, a node that refuses connections, or every sweep while a
//!   node is in an outage), from the seed or any
//!   node that answers, and publishes a new version when it changed;
//! - each shard keeps its own [`Routes`]: the slot table it routes by, updated at once by
//!   every `MOVED` it follows and replaced by a newer published version at its next sweep
//!   (every 10 ms), so the hot path reads no lock and no atomic but the sweep's one.
//!
//! A shard's node indexes only grow (a node is never removed, so a connection's node index
//! stays valid); at most [`MAX_NODES`] nodes, so a hostile server cannot make a shard
//! connect without bound.

use crest_model::slot::SLOTS;
use crest_model::target::ReadFrom;
use crest_model::topology::{MAX_NODES, NO_NODE, Topology};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A published slot table: every node resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// (`host:port` as announced, its address, owns slots).
    pub nodes: Vec<(String, SocketAddr, bool)>,
    /// Index into `nodes` of each slot's owner ([`NO_NODE`]: unowned).
    pub owner: Vec<u16>,
    /// Index into `nodes` of each node's primary when it is a replica ([`NO_NODE`]: a
    /// primary, or a replica whose primary is not known). Empty: no replicas.
    pub replica_of: Vec<u16>,
}

impl Resolved {
    /// A memcached ring's servers as a table the shards route by: a key's "slot" is its
    /// server's index on the ring (`Workload::key_slot` after `Workload::on_ring`), so
    /// slot `i` is owned by server `i`. Servers whose names do not resolve are refused.
    ///
    /// # Errors
    /// The first server that does not resolve, and why.
    pub async fn ring(servers: &[String]) -> Result<Self, String> {
        let mut nodes = Vec::with_capacity(servers.len());
        for s in servers {
            nodes.push((s.clone(), resolve("memcached server ", s).await?, true));
        }
        let owner = (0..nodes.len() as u16).collect();
        Ok(Self {
            nodes,
            owner,
            replica_of: Vec::new(),
        })
    }

    /// A standalone primary at `primary` and its replicas: the primary owns every slot,
    /// each replica serves them all (names that do not resolve are refused).
    ///
    /// # Errors
    /// The first replica that does not resolve, and why.
    pub async fn standalone(
        primary: (String, SocketAddr),
        replicas: &[String],
    ) -> Result<Self, String> {
        let mut nodes = vec![(primary.0, primary.1, true)];
        for r in replicas {
            nodes.push((r.clone(), resolve("", r).await?, false));
        }
        let mut replica_of = vec![0; nodes.len()];
        replica_of[0] = NO_NODE;
        Ok(Self {
            nodes,
            owner: vec![0; usize::from(SLOTS)],
            replica_of,
        })
    }

    /// Indexes of node `i`'s replicas.
    pub fn replicas_of(&self, i: u16) -> impl Iterator<Item = u16> + '_ {
        self.replica_of
            .iter()
            .enumerate()
            .filter(move |(_, o)| **o == i)
            .map(|(r, _)| r as u16)
    }

    /// The first slot range (`0-5460`) of an owned slot whose primary has no replica;
    /// None when every owned slot has one.
    pub fn slots_without_replica(&self) -> Option<(u16, u16, String)> {
        let has: Vec<bool> = (0..self.nodes.len() as u16)
            .map(|i| self.replicas_of(i).next().is_some())
            .collect();
        let bare = |s: usize| {
            let o = self.owner[s];
            o != NO_NODE && !has.get(usize::from(o)).copied().unwrap_or(false)
        };
        let start = (0..self.owner.len()).find(|&s| bare(s))?;
        let o = self.owner[start];
        let end = (start..self.owner.len())
            .take_while(|&s| self.owner[s] == o)
            .last()
            .unwrap_or(start);
        let name = self.nodes[usize::from(o)].0.clone();
        Some((start as u16, end as u16, name))
    }

    /// Resolves every node of `t` (a name that does not resolve is left out; its slots
    /// become unowned until a later table has it).
    pub async fn of(t: &Topology) -> Self {
        let mut nodes = Vec::with_capacity(t.nodes.len());
        let mut map = Vec::with_capacity(t.nodes.len());
        for n in &t.nodes {
            let addr = resolve("", &n.addr).await.ok();
            map.push(addr.map(|a| {
                nodes.push((n.addr.clone(), a, n.primary));
                (nodes.len() - 1) as u16
            }));
        }
        let at = |o: u16| {
            map.get(usize::from(o))
                .copied()
                .flatten()
                .unwrap_or(NO_NODE)
        };
        let owner = t.owner.iter().map(|&o| at(o)).collect();
        let replica_of = t
            .nodes
            .iter()
            .zip(&map)
            .filter(|(_, m)| m.is_some())
            .map(|(n, _)| at(n.replica_of))
            .collect();
        Self {
            nodes,
            owner,
            replica_of,
        }
    }
}

/// `s` (`host:port`) as an address: parsed, else looked up; errors name it as `what`
/// (e.g. `memcached server `) and `s`.
async fn resolve(what: &str, s: &str) -> Result<SocketAddr, String> {
    match s.parse::<SocketAddr>() {
        Ok(a) => Ok(a),
        Err(_) => tokio::net::lookup_host(s)
            .await
            .map_err(|e| format!("cannot resolve {what}{s}: {e}"))?
            .next()
            .ok_or_else(|| format!("{what}{s} resolves to no address")),
    }
}

/// The worker's current slot table, shared by its shards and its refresher.
#[derive(Debug)]
pub struct Shared {
    version: AtomicU64,
    table: Mutex<Arc<Resolved>>,
    /// A shard saw the table is stale (a `MOVED`, a node that refuses connections).
    want: AtomicBool,
}

impl Shared {
    /// A cell holding `first` as version 1.
    pub fn new(first: Resolved) -> Arc<Self> {
        Arc::new(Self {
            version: AtomicU64::new(1),
            table: Mutex::new(Arc::new(first)),
            want: AtomicBool::new(false),
        })
    }

    /// The version now published.
    #[inline]
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The table now published, with its version.
    pub fn current(&self) -> (u64, Arc<Resolved>) {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        (self.version(), t.clone())
    }

    /// Publishes `t` when it differs from the current table.
    pub fn publish(&self, t: Resolved) {
        let mut cur = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if **cur != t {
            *cur = Arc::new(t);
            self.version.fetch_add(1, Ordering::Release);
        }
    }

    /// Asks the refresher for a new read soon.
    #[inline]
    pub fn ask_refresh(&self) {
        self.want.store(true, Ordering::Relaxed);
    }
}

/// Least time between two reads asked for by shards.
pub const REFRESH_MIN: Duration = Duration::from_millis(100);
/// Time between two reads nobody asked for.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// One read of a slot table by the refresher (None: no node answered).
pub type TableRead = std::pin::Pin<Box<dyn std::future::Future<Output = Option<Topology>> + Send>>;

/// Keeps `shared` current until `stop` is set: reads the table with `read` (which tries
/// the seed, then other nodes) every [`REFRESH_EVERY`], or [`REFRESH_MIN`] after the last
/// read when a shard asked.
pub async fn refresh<F>(shared: Arc<Shared>, stop: Arc<AtomicBool>, mut read: F)
where
    F: FnMut(Arc<Resolved>) -> TableRead,
{
    let mut last = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let since = last.elapsed();
        let asked = shared.want.load(Ordering::Relaxed);
        if !(since >= REFRESH_EVERY || (asked && since >= REFRESH_MIN)) {
            continue;
        }
        shared.want.store(false, Ordering::Relaxed);
        last = tokio::time::Instant::now();
        let (_, cur) = shared.current();
        if let Some(t) = read(cur).await {
            shared.publish(Resolved::of(&t).await);
        }
    }
}

/// One shard node: where it is, whether the shard has connections to it.
#[derive(Debug, Clone)]
pub struct RouteNode {
    /// `host:port` as announced.
    pub name: String,
    /// Its address.
    pub addr: SocketAddr,
    /// The shard opened its connections.
    pub opened: bool,
}

/// A shard's routing table.
#[derive(Debug)]
pub struct Routes {
    /// Nodes by shard node index (never removed).
    pub nodes: Vec<RouteNode>,
    /// Shard node index of each slot's owner ([`NO_NODE`]: unowned). Empty: one node.
    owner: Vec<u16>,
    /// Shard node index each slot's reads go to ([`NO_NODE`]: none may take them now).
    /// Empty: reads go to the owner (`--read-from primary`).
    read: Vec<u16>,
    /// Where reads go.
    read_from: ReadFrom,
    /// The published version adopted last (0: none).
    version: u64,
    /// For keyless requests (`PING`): a walk over the slots, so they spread as keys do.
    walk: u16,
}

/// A request without a key (or a single-node run).
pub const NO_SLOT: u16 = u16::MAX;

impl Routes {
    /// Everything to one node.
    pub fn single(addr: SocketAddr) -> Self {
        Self {
            nodes: vec![RouteNode {
                name: addr.to_string(),
                addr,
                opened: false,
            }],
            owner: Vec::new(),
            read: Vec::new(),
            read_from: ReadFrom::Primary,
            version: 0,
            walk: 0,
        }
    }

    /// A cluster's table, as published in `shared` (or a memcached ring's, whose "slots"
    /// are its servers: see [`Resolved::ring`]; or a standalone primary's with replicas),
    /// reads going where `read_from` says.
    pub fn cluster(shared: &Shared, read_from: ReadFrom) -> Self {
        let (v, t) = shared.current();
        let slots = t.owner.len().max(1);
        let mut r = Self {
            nodes: Vec::new(),
            owner: vec![NO_NODE; slots],
            read: if read_from.uses_replicas() {
                vec![NO_NODE; slots]
            } else {
                Vec::new()
            },
            read_from,
            version: 0,
            walk: 0,
        };
        r.adopt(v, &t);
        r
    }

    /// Whether requests are routed by slot.
    #[inline]
    pub fn is_cluster(&self) -> bool {
        !self.owner.is_empty()
    }

    /// The version adopted last.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The node a request for `slot` goes to ([`NO_SLOT`]: any, spread like keys), a
    /// read (`read`) where `--read-from` says; None when no node may take it now (no node
    /// owns the slot, or reads must go to a replica and it has none).
    #[inline]
    pub fn node_of(&mut self, slot: u16, read: bool) -> Option<u16> {
        if self.owner.is_empty() {
            return Some(0);
        }
        let s = if slot == NO_SLOT {
            // A prime stride visits every slot once per cycle (16,384 slots, or a ring's
            // servers).
            self.walk = ((u32::from(self.walk) + 5_471) % self.owner.len() as u32) as u16;
            self.walk
        } else {
            slot
        };
        let o = self.node_at(s, read);
        (o != NO_NODE).then_some(o)
    }

    /// The node `slot`'s requests of this kind go to now ([`NO_NODE`]: none).
    #[inline]
    fn node_at(&self, slot: u16, read: bool) -> u16 {
        if read && !self.read.is_empty() {
            self.read[usize::from(slot)]
        } else {
            self.owner[usize::from(slot)]
        }
    }

    /// The shard node index of `addr` (added when new; None past [`MAX_NODES`]).
    pub fn index_of(&mut self, name: &str, addr: SocketAddr) -> Option<u16> {
        if let Some(i) = self.nodes.iter().position(|n| n.addr == addr) {
            return Some(i as u16);
        }
        if self.nodes.len() >= MAX_NODES {
            return None;
        }
        self.nodes.push(RouteNode {
            name: name.to_string(),
            addr,
            opened: false,
        });
        Some((self.nodes.len() - 1) as u16)
    }

    /// The node a redirect names: `host:port`, or `:port` for the host of `from` (the
    /// node that answered). None when it is a name no node has and not an address (a
    /// refresh will tell), or past [`MAX_NODES`].
    pub fn redirect_target(&mut self, addr: &str, from: u16) -> Option<u16> {
        if let Some(i) = self.nodes.iter().position(|n| n.name == addr) {
            return Some(i as u16);
        }
        let a = match addr.strip_prefix(':') {
            Some(port) => {
                let port: u16 = port.parse().ok()?;
                SocketAddr::new(self.nodes.get(usize::from(from))?.addr.ip(), port)
            }
            None => addr.parse().ok()?,
        };
        self.index_of(&a.to_string(), a)
    }

    /// `MOVED`: `slot` is `node`'s now; its reads go there too until the next table
    /// names its replicas.
    pub fn moved(&mut self, slot: u16, node: u16) {
        if let Some(o) = self.owner.get_mut(usize::from(slot)) {
            *o = node;
        }
        if let Some(r) = self.read.get_mut(usize::from(slot)) {
            *r = node;
        }
    }

    /// Takes a published table: nodes mapped to shard indexes (new ones added), every
    /// slot's owner replaced. Returns false when a node had to be left out (past
    /// [`MAX_NODES`]); its slots are unowned.
    pub fn adopt(&mut self, version: u64, t: &Resolved) -> bool {
        let mut all = true;
        let map: Vec<u16> = t
            .nodes
            .iter()
            .map(|(name, addr, _)| {
                self.index_of(name, *addr).unwrap_or_else(|| {
                    all = false;
                    NO_NODE
                })
            })
            .collect();
        let at = |i: u16| map.get(usize::from(i)).copied().unwrap_or(NO_NODE);
        for (o, &t) in self.owner.iter_mut().zip(&t.owner) {
            *o = at(t);
        }
        if !self.read.is_empty() {
            // Each primary's replicas (shard indexes), by the table's primary index.
            let mut replicas: Vec<Vec<u16>> = vec![Vec::new(); t.nodes.len()];
            for (r, &p) in t.replica_of.iter().enumerate() {
                let n = at(r as u16);
                if let Some(list) = replicas.get_mut(usize::from(p)).filter(|_| n != NO_NODE) {
                    list.push(n);
                }
            }
            for (slot, (r, &p)) in self.read.iter_mut().zip(&t.owner).enumerate() {
                let reps = replicas.get(usize::from(p)).map_or(&[][..], Vec::as_slice);
                *r = read_node(self.read_from, at(p), reps, slot);
            }
        }
        self.version = version;
        all
    }

    /// Nodes that own a slot or serve its reads, and have no connections yet.
    pub fn to_open(&self) -> Vec<u16> {
        let mut owns = vec![false; self.nodes.len()];
        if self.owner.is_empty() {
            owns[0] = true;
        }
        for &o in self.owner.iter().chain(&self.read) {
            if let Some(x) = owns.get_mut(usize::from(o)) {
                *x = true;
            }
        }
        (0..self.nodes.len())
            .filter(|&i| owns[i] && !self.nodes[i].opened)
            .map(|i| i as u16)
            .collect()
    }

    /// The slots whose requests of this kind (`read`) go to node `i` now, one bit each;
    /// None when requests are not routed by slot (one node).
    pub fn slots_to(&self, i: u16, read: bool) -> Option<Box<[u64]>> {
        if self.owner.is_empty() {
            return None;
        }
        let mut bits = vec![0u64; self.owner.len().div_ceil(64)].into_boxed_slice();
        for s in 0..self.owner.len() {
            if self.node_at(s as u16, read) == i {
                bits[s / 64] |= 1 << (s % 64);
            }
        }
        Some(bits)
    }

    /// Slots node `i` owns (all of them for a single node).
    pub fn slots_of(&self, i: u16) -> u32 {
        if self.owner.is_empty() {
            return u32::from(SLOTS);
        }
        self.owner.iter().filter(|&&o| o == i).count() as u32
    }

    /// The node `slot`'s requests go to, a read's where `--read-from` says ([`NO_NODE`]
    /// for none; 0 for a single node).
    #[inline]
    pub fn owner(&self, slot: u16, read: bool) -> u16 {
        if self.owner.is_empty() || slot == NO_SLOT {
            return 0;
        }
        self.node_at(slot, read)
    }
}

/// The node a read of `slot` goes to: its primary `primary` (shard index, [`NO_NODE`]:
/// none) or one of `replicas`, picked by slot so each key reads from one node.
fn read_node(read_from: ReadFrom, primary: u16, replicas: &[u16], slot: usize) -> u16 {
    match (read_from, replicas.len()) {
        (ReadFrom::Primary, _) | (ReadFrom::PreferReplicas, 0) => primary,
        (ReadFrom::Replicas, 0) => NO_NODE,
        (ReadFrom::Replicas | ReadFrom::PreferReplicas, n) => replicas[slot % n],
        (ReadFrom::Any, n) => match slot % (n + 1) {
            0 => primary,
            i => replicas[i - 1],
        },
    }
}

/// A table for tests: slots below `split` on `127.0.0.1:a`, the rest on `127.0.0.1:b`.
#[cfg(test)]
pub(crate) fn two_nodes(split: u16, a: u16, b: u16) -> Resolved {
    let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    Resolved {
        nodes: vec![
            (format!("127.0.0.1:{a}"), addr(a), true),
            (format!("127.0.0.1:{b}"), addr(b), true),
        ],
        owner: (0..SLOTS).map(|s| u16::from(s >= split)).collect(),
        replica_of: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn table(split: u16, a: u16, b: u16) -> Resolved {
        two_nodes(split, a, b)
    }

    #[test]
    fn a_cluster_routes_by_slot_and_moved_updates_one_slot() {
        let shared = Shared::new(table(8000, 7000, 7001));
        let mut r = Routes::cluster(&shared, ReadFrom::Primary);
        assert!(r.is_cluster());
        assert_eq!(r.node_of(0, false), Some(0));
        assert_eq!(r.node_of(8000, false), Some(1));
        assert_eq!(r.to_open(), vec![0, 1]);
        let n = r.redirect_target("127.0.0.1:7002", 0).unwrap();
        assert_eq!(n, 2, "a new node");
        r.moved(5, n);
        assert_eq!(r.node_of(5, false), Some(2));
        assert_eq!(r.slots_of(2), 1);
        assert_eq!(
            r.redirect_target(":7001", 0),
            Some(1),
            "host of the answering node"
        );
        assert_eq!(r.redirect_target("nohost:1", 0), None);
    }

    #[test]
    fn a_newer_table_replaces_the_old_and_keeps_node_indexes() {
        let shared = Shared::new(table(8000, 7000, 7001));
        let mut r = Routes::cluster(&shared, ReadFrom::Primary);
        shared.publish(table(8000, 7000, 7001));
        assert_eq!(shared.version(), 1, "the same table is no new version");
        // A failover: 7001's slots are 7003's now.
        shared.publish(table(8000, 7000, 7003));
        assert_eq!(shared.version(), 2);
        let (v, t) = shared.current();
        r.adopt(v, &t);
        assert_eq!(r.version(), 2);
        assert_eq!(r.node_of(9000, false), Some(2));
        assert_eq!(r.nodes[1].addr, addr(7001), "indexes never move");
        assert_eq!(r.to_open(), vec![0, 2]);
    }

    #[test]
    fn keyless_requests_spread_over_the_owners_like_slots() {
        let shared = Shared::new(table(4096, 7000, 7001));
        let mut r = Routes::cluster(&shared, ReadFrom::Primary);
        let mut n = [0u32; 2];
        for _ in 0..SLOTS {
            n[usize::from(r.node_of(NO_SLOT, false).unwrap())] += 1;
        }
        assert_eq!(n, [4096, 16384 - 4096], "one cycle visits every slot once");
    }

    #[test]
    fn unowned_slots_have_no_node_and_nodes_are_bounded() {
        let mut t = table(8000, 7000, 7001);
        t.owner[3] = NO_NODE;
        let shared = Shared::new(t);
        let mut r = Routes::cluster(&shared, ReadFrom::Primary);
        assert_eq!(r.node_of(3, false), None);
        for p in 0..MAX_NODES as u16 {
            r.index_of("x", addr(10_000 + p));
        }
        assert_eq!(r.nodes.len(), MAX_NODES);
        assert_eq!(r.index_of("y", addr(9)), None);
        let mut one = Routes::single(addr(6379));
        assert!(!one.is_cluster());
        assert_eq!(one.node_of(NO_SLOT, false), Some(0));
        assert_eq!(one.to_open(), vec![0]);
    }

    /// Two primaries (7000: slots below 8000, 7001: the rest); 7000 has replicas 7002 and
    /// 7003, 7001 has 7004.
    fn with_replicas() -> Resolved {
        let mut t = table(8000, 7000, 7001);
        for p in [7002, 7003, 7004] {
            t.nodes.push((format!("127.0.0.1:{p}"), addr(p), false));
        }
        t.replica_of = vec![NO_NODE, NO_NODE, 0, 0, 1];
        t
    }

    #[test]
    fn reads_go_to_replicas_by_slot_and_writes_to_the_primary() {
        let shared = Shared::new(with_replicas());
        let mut r = Routes::cluster(&shared, ReadFrom::Replicas);
        assert_eq!(r.node_of(10, false), Some(0), "a write goes to the primary");
        assert_eq!(r.node_of(10, true), Some(2), "slot 10: replica 10 % 2");
        assert_eq!(r.node_of(11, true), Some(3), "slot 11: the other replica");
        assert_eq!(r.node_of(9000, true), Some(4));
        assert_eq!(r.to_open(), vec![0, 1, 2, 3, 4]);
        assert_eq!(r.owner(11, true), 3);
        assert_eq!(r.owner(11, false), 0);
        // A MOVED for slot 11 sends its reads and writes to the named node until the next
        // table.
        r.moved(11, 1);
        assert_eq!(r.node_of(11, true), Some(1));
        // 7001's replica is promoted and 7001 is gone: with `replicas`, its slots' reads
        // wait; with `prefer-replicas`, they go to the new primary.
        let mut t = table(8000, 7000, 7004);
        for p in [7002, 7003] {
            t.nodes.push((format!("127.0.0.1:{p}"), addr(p), false));
        }
        t.replica_of = vec![NO_NODE, NO_NODE, 0, 0];
        shared.publish(t);
        let (v, t) = shared.current();
        r.adopt(v, &t);
        assert_eq!(r.node_of(9000, true), None);
        assert_eq!(r.node_of(9000, false), Some(4));
        let mut p = Routes::cluster(&shared, ReadFrom::PreferReplicas);
        assert_eq!(p.node_of(9000, true), p.node_of(9000, false));
        assert_ne!(p.node_of(10, true), p.node_of(10, false));
    }

    #[test]
    fn any_spreads_reads_over_the_primary_and_its_replicas() {
        let shared = Shared::new(with_replicas());
        let mut r = Routes::cluster(&shared, ReadFrom::Any);
        let mut n = [0u32; 5];
        for s in 0..SLOTS {
            n[usize::from(r.node_of(s, true).unwrap())] += 1;
        }
        // 8,000 slots over 7000 and its two replicas, 8,384 over 7001 and its one.
        assert_eq!(n, [2667, 4192, 2667, 2666, 4192]);
        let mut primary = Routes::cluster(&shared, ReadFrom::Primary);
        assert_eq!(
            primary.node_of(10, true),
            Some(0),
            "reads stay on the primary"
        );
        assert_eq!(primary.owner(11, true), primary.owner(11, false));
        assert_eq!(primary.to_open(), vec![0, 1], "no replica connections");
    }

    #[test]
    fn slots_without_a_replica_are_named() {
        let mut t = with_replicas();
        assert_eq!(t.slots_without_replica(), None);
        t.replica_of[4] = NO_NODE;
        assert_eq!(
            t.slots_without_replica(),
            Some((8000, 16383, "127.0.0.1:7001".to_string()))
        );
    }
}
