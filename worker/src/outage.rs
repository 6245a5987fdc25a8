//! Outages as the clients see them: per node, a span in which its requests failed and
//! none succeeded.
//!
//! Each class of a shard keeps an [`Outages`]; the agent and the coordinator unite
//! overlapping ones per node (`crest_model::stats::add_outage`). The rules:
//! - every node keeps the latest intended time among its successes (`last_ok`);
//! - a request routed to node N that fails without a reply (disconnected, timeout,
//!   timeout_unsent) or whose retries are given up (`CLUSTERDOWN`, `TRYAGAIN`, `LOADING`)
//!   opens an outage of N at its intended time when that is later than N's `last_ok`
//!   (or moves an open one's start earlier). An earlier one is an isolated failure:
//!   something intended after it already succeeded;
//! - when it opens, the outage notes which slots' writes and which slots' reads went to N
//!   (a cluster, a ring, a primary with replicas); unslotted requests (one node, keyless
//!   commands) are N's own;
//! - it closes when the first success completes of a request intended after its start
//!   that went to N when it opened: one of its slots, on any node (a failover's new
//!   primary closes it), or N itself. N's `last_ok` moves up to that request, so failures
//!   found later of requests intended before it (timeouts) open nothing;
//! - it counts its failures (those found after it closed too, when intended within it)
//!   and the redirects and retries its requests were answered with while it lasted;
//! - it is rediscovered when the shard's slot table first moves one of its slots away.
//!
//! Known limit: with nothing in flight when a node dies (a very low rate), the first
//! failures are timeouts found a timeout later, and only then does the outage open (at
//! their intended times, so its length is still right once it closes).
//!
//! Cost: a success updates one `u64` and reads one length; the rest runs only while an
//! outage is open, or on a failure.

use crate::route::Routes;
use crest_model::stats::{MAX_OUTAGES, Outage};

/// An outage of a node (its shard index).
pub type NodeOutage = (u16, Outage);

/// One open outage.
#[derive(Debug)]
struct Open {
    node: u16,
    start: u64,
    /// Slots whose writes (and reads) went to `node` when it opened; None: not by slot.
    writes: Option<Box<[u64]>>,
    reads: Option<Box<[u64]>>,
    failed: u64,
    redirected: u64,
    rediscovered: Option<u64>,
}

fn has(bits: &[u64], slot: u16) -> bool {
    let s = usize::from(slot);
    bits.get(s / 64).is_some_and(|w| w & (1 << (s % 64)) != 0)
}

impl Open {
    /// Whether a request to `slot` (a read: `read`), answered by `node`, is one of its.
    fn covers(&self, node: u16, read: bool, slot: Option<u16>) -> bool {
        let bits = if read { &self.reads } else { &self.writes };
        match (bits, slot) {
            (Some(b), Some(s)) => has(b, s),
            _ => node == self.node,
        }
    }

    fn ranges(&self) -> Vec<(u16, u16)> {
        let mut out: Vec<(u16, u16)> = Vec::new();
        let (Some(w), Some(r)) = (&self.writes, &self.reads) else {
            return out;
        };
        for s in 0..(w.len() * 64).min(usize::from(u16::MAX)) as u16 {
            if !(has(w, s) || has(r, s)) {
                continue;
            }
            match out.last_mut() {
                Some(l) if l.1 + 1 == s => l.1 = s,
                _ => out.push((s, s)),
            }
        }
        out
    }

    fn into_outage(self, end: Option<u64>) -> Outage {
        Outage {
            writes: self
                .writes
                .as_deref()
                .is_none_or(|b| b.iter().any(|&w| w != 0)),
            slots: self.ranges(),
            start: self.start,
            end,
            failed: self.failed,
            redirected: self.redirected,
            rediscovered: self.rediscovered,
        }
    }
}

/// One class's outages, per node (shard node indexes).
#[derive(Debug, Default)]
pub struct Outages {
    /// Per node, the latest intended time among its successes.
    last_ok: Vec<u64>,
    open: Vec<Open>,
    /// Closed ones, in the order they closed: (node, outage).
    done: Vec<NodeOutage>,
    /// Closed ones past [`MAX_OUTAGES`], per node.
    dropped: Vec<(u16, u64)>,
}

impl Outages {
    fn last_ok(&mut self, node: u16) -> &mut u64 {
        let n = usize::from(node);
        if n >= self.last_ok.len() {
            self.last_ok.resize(n + 1, 0);
        }
        &mut self.last_ok[n]
    }

    /// A request intended at `intended` succeeded on `node` at `now`; `slot` gives its
    /// slot (None: not by slot), asked only while an outage is open.
    #[inline]
    pub fn on_ok(
        &mut self,
        node: u16,
        intended: u64,
        now: u64,
        read: bool,
        slot: impl FnOnce() -> Option<u16>,
    ) {
        let last = self.last_ok(node);
        *last = (*last).max(intended);
        if !self.open.is_empty() {
            self.close(node, intended, now, read, slot());
        }
    }

    #[cold]
    fn close(&mut self, node: u16, intended: u64, now: u64, read: bool, slot: Option<u16>) {
        let mut i = 0;
        while i < self.open.len() {
            let o = &self.open[i];
            if intended > o.start && o.covers(node, read, slot) {
                let o = self.open.swap_remove(i);
                let last = self.last_ok(o.node);
                *last = (*last).max(intended);
                let n = o.node;
                self.keep(n, o.into_outage(Some(now)));
            } else {
                i += 1;
            }
        }
    }

    fn keep(&mut self, node: u16, o: Outage) {
        if self.done.len() < MAX_OUTAGES {
            self.done.push((node, o));
            return;
        }
        match self.dropped.iter_mut().find(|d| d.0 == node) {
            Some(d) => d.1 += 1,
            None => self.dropped.push((node, 1)),
        }
    }

    /// A request to `slot` (a read: `read`; None: not by slot) routed to `node`, intended
    /// at `intended`, failed (a disconnect, a timeout, a retry given up); `routes` as they
    /// are now say which slots the node held, should an outage open.
    ///
    /// A failure of a request that belonged to another node's outage (one of its slots,
    /// sent on to the node that took them over and given up there) counts with that
    /// outage and opens none.
    #[cold]
    pub fn on_failed(
        &mut self,
        node: u16,
        intended: u64,
        read: bool,
        slot: Option<u16>,
        routes: &Routes,
    ) {
        let last = *self.last_ok(node);
        if let Some(o) = self.open.iter_mut().find(|o| o.node == node) {
            o.failed += 1;
            if intended > last {
                o.start = o.start.min(intended);
            }
            return;
        }
        if let Some(o) = self
            .open
            .iter_mut()
            .find(|o| intended >= o.start && o.covers(node, read, slot))
        {
            o.failed += 1;
            return;
        }
        // Found late (a timeout), of a request intended within an outage that closed.
        let within = |n: u16, d: &Outage| {
            let ours =
                n == node || slot.is_some_and(|s| d.slots.iter().any(|&(a, b)| a <= s && s <= b));
            ours && d.start <= intended && d.end.is_none_or(|e| intended <= e)
        };
        if let Some((_, d)) = self.done.iter_mut().rev().find(|(n, d)| within(*n, d)) {
            d.failed += 1;
            return;
        }
        if intended <= last {
            // Isolated: something intended after it already succeeded on the node.
            return;
        }
        self.open.push(Open {
            node,
            start: intended,
            writes: routes.slots_to(node, false),
            reads: routes.slots_to(node, true),
            failed: 1,
            redirected: 0,
            rediscovered: None,
        });
    }

    /// A request to `slot` (a read: `read`) intended at `intended` was answered by `node`
    /// with a redirect or a retry.
    #[inline]
    pub fn on_redirect(&mut self, node: u16, intended: u64, read: bool, slot: Option<u16>) {
        for o in &mut self.open {
            if intended >= o.start && o.covers(node, read, slot) {
                o.redirected += 1;
            }
        }
    }

    /// The shard's routes changed at `now` (a new table, a `MOVED`): an open outage whose
    /// slots went to another node is rediscovered.
    pub fn on_routes(&mut self, routes: &Routes, now: u64) {
        for o in self.open.iter_mut().filter(|o| o.rediscovered.is_none()) {
            let moved = |bits: &Option<Box<[u64]>>, read: bool| {
                bits.as_deref().is_some_and(|b| {
                    (0..b.len() * 64)
                        .filter(|&s| has(b, s as u16))
                        .any(|s| routes.owner(s as u16, read) != o.node)
                })
            };
            if moved(&o.writes, false) || moved(&o.reads, true) {
                o.rediscovered = Some(now);
            }
        }
    }

    /// Whether an outage is open (the shard asks for a fresh slot table meanwhile).
    pub fn any_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// Every outage, per node: the closed ones, then those still open (no end); and per
    /// node, those past the bound.
    pub fn take(&mut self) -> (Vec<NodeOutage>, Vec<(u16, u64)>) {
        let mut all = std::mem::take(&mut self.done);
        for o in std::mem::take(&mut self.open) {
            all.push((o.node, o.into_outage(None)));
        }
        (all, std::mem::take(&mut self.dropped))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::route::{Resolved, Shared, two_nodes as table};
    use crest_model::slot::SLOTS;
    use crest_model::target::ReadFrom;
    use std::net::SocketAddr;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_failover_is_one_outage_closed_by_the_new_owner() {
        let shared = Shared::new(table(8192, 7000, 7001));
        let mut routes = Routes::cluster(&shared, ReadFrom::Primary);
        let mut o = Outages::default();
        o.on_ok(1, 100 * MS, 101 * MS, false, || Some(9000));
        o.on_ok(0, 100 * MS, 101 * MS, false, || Some(10));
        // Node 1 dies: what was in flight fails, intended after its last success.
        o.on_failed(1, 102 * MS, false, Some(9000), &routes);
        o.on_failed(1, 101 * MS, true, Some(9001), &routes);
        // Node 0's successes close nothing: not node 1's slots.
        o.on_ok(0, 150 * MS, 151 * MS, false, || Some(10));
        o.on_redirect(0, 160 * MS, false, Some(9000));
        // A failover: node 1's slots are node 2's (port 7002); the table is adopted.
        shared.publish(table(8192, 7000, 7002));
        let (v, t) = shared.current();
        routes.adopt(v, &t);
        o.on_routes(&routes, 900 * MS);
        // The first success for its slots, on the new node, closes it.
        // A request of its slots sent on to the new node and given up there counts with
        // it: the new node has no outage of its own.
        o.on_failed(2, 600 * MS, false, Some(9002), &routes);
        o.on_ok(2, 905 * MS, 910 * MS, false, || Some(9000));
        // Timeouts found later, of requests intended within it, count with it and open
        // nothing new.
        o.on_failed(1, 500 * MS, false, Some(9000), &routes);
        o.on_failed(2, 700 * MS, false, Some(9003), &routes);
        let (all, dropped) = o.take();
        assert!(dropped.is_empty());
        assert_eq!(all.len(), 1, "{all:?}");
        let (node, x) = &all[0];
        assert_eq!(*node, 1);
        assert_eq!((x.start, x.end, x.failed), (101 * MS, Some(910 * MS), 5));
        assert_eq!((x.redirected, x.rediscovered), (1, Some(900 * MS)));
        assert_eq!(x.slots, [(8192, SLOTS - 1)]);
    }

    #[test]
    fn an_isolated_failure_opens_nothing_and_an_open_one_is_reported_open() {
        let routes = Routes::single(SocketAddr::from(([127, 0, 0, 1], 6379)));
        let mut o = Outages::default();
        o.on_ok(0, 50 * MS, 51 * MS, true, || None);
        // Intended before the last success: one request lost, the node was answering.
        o.on_failed(0, 40 * MS, false, None, &routes);
        assert!(o.open.is_empty());
        // A success intended before an outage's start does not close it.
        o.on_failed(0, 60 * MS, false, None, &routes);
        o.on_ok(0, 55 * MS, 70 * MS, false, || None);
        assert_eq!(o.open.len(), 1);
        let (all, _) = o.take();
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].1.start, all[0].1.end), (60 * MS, None));
        assert!(all[0].1.slots.is_empty(), "one node: no slots");
    }

    #[test]
    fn with_reads_on_replicas_a_primary_outage_waits_for_a_write() {
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let t = Resolved {
            nodes: vec![
                ("127.0.0.1:7000".into(), addr(7000), true),
                ("127.0.0.1:7001".into(), addr(7001), false),
            ],
            owner: vec![0; usize::from(SLOTS)],
            replica_of: vec![crest_model::topology::NO_NODE, 0],
        };
        let shared = Shared::new(t);
        let routes = Routes::cluster(&shared, ReadFrom::Replicas);
        let mut o = Outages::default();
        o.on_failed(0, 10 * MS, false, Some(5), &routes);
        // A read answered by the replica is not a write to the primary's slots.
        o.on_ok(1, 20 * MS, 21 * MS, true, || Some(5));
        assert_eq!(o.open.len(), 1);
        o.on_ok(0, 30 * MS, 31 * MS, false, || Some(5));
        let (all, _) = o.take();
        assert_eq!(all[0].1.end, Some(31 * MS));
        assert_eq!(all[0].1.slots, [(0, SLOTS - 1)]);
    }

    #[test]
    fn closed_outages_past_the_bound_are_counted() {
        let routes = Routes::single(SocketAddr::from(([127, 0, 0, 1], 6379)));
        let mut o = Outages::default();
        for i in 0..(MAX_OUTAGES as u64 + 3) {
            o.on_failed(0, i * 10 * MS + 1, false, None, &routes);
            o.on_ok(0, i * 10 * MS + 2, i * 10 * MS + 3, false, || None);
        }
        let (all, dropped) = o.take();
        assert_eq!((all.len(), dropped), (MAX_OUTAGES, vec![(0, 3)]));
    }
}
