//! A Redis Cluster's topology as a generator needs it: which node owns each of the 16,384
//! slots, read from `CLUSTER SLOTS` (every Redis since 3.0 and every Valkey answers it; the
//! newer `CLUSTER SHARDS` says the same with more words), and the redirects a node answers
//! with when a key's slot is elsewhere (`MOVED 3999 10.0.0.6:6379`) or moving
//! (`ASK 3999 10.0.0.6:6379`).
//!
//! Everything here parses what a server sent, so it is bounded: at most [`MAX_NODES`]
//! nodes, slot numbers checked, addresses printable and short.

use crate::slot::SLOTS;
use crest_resp::Frame;

/// Most nodes a topology holds (primaries and replicas): far above any real cluster
/// (Redis advises at most 1,000 nodes; the largest seen run a few hundred), and a bound on
/// what a hostile server can make a generator connect to.
pub const MAX_NODES: usize = 512;
/// Longest node address kept (`host:port`), in bytes.
const MAX_ADDR_LEN: usize = 300;
/// A slot no node owns (the cluster is missing it: requests for it get `CLUSTERDOWN`).
pub const NO_NODE: u16 = u16::MAX;

/// One cluster node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// `host:port` as the cluster announces it (an IP, or a hostname where the cluster is
    /// configured to announce those).
    pub addr: String,
    /// The node's 40-character id (empty when the server did not send one).
    pub id: String,
    /// Whether it owns slots (a primary) in this topology.
    pub primary: bool,
    /// A replica's primary (index into [`Topology::nodes`]); [`NO_NODE`] for a primary.
    pub replica_of: u16,
}

/// Which node owns each slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Every node named, primaries first in the order the server listed them.
    pub nodes: Vec<Node>,
    /// Index into `nodes` of each slot's owner ([`NO_NODE`]: unowned). [`SLOTS`] entries.
    pub owner: Vec<u16>,
}

/// What is wrong with a `CLUSTER SLOTS` reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// The reply is not the documented shape.
    #[error("CLUSTER SLOTS reply is malformed: {0}")]
    Malformed(&'static str),
    /// More nodes than [`MAX_NODES`].
    #[error("the cluster names more than {MAX_NODES} nodes")]
    TooManyNodes,
    /// No slot is owned by any node.
    #[error(
        "the cluster has no slots assigned (CLUSTER ADDSLOTS, or redis-cli --cluster create, first)"
    )]
    NoSlots,
}

impl Topology {
    /// One node owning every slot (a single server, or a cluster seen through one node).
    pub fn single(addr: &str) -> Self {
        Self {
            nodes: vec![Node {
                addr: addr.to_string(),
                id: String::new(),
                primary: true,
                replica_of: NO_NODE,
            }],
            owner: vec![0; usize::from(SLOTS)],
        }
    }

    /// Reads a `CLUSTER SLOTS` reply (RESP2 or RESP3). A node announced with an empty or
    /// `?` host (`cluster-announce-ip` unset on some versions, or an unknown endpoint) is at
    /// the host the reply came from, `seed_host`.
    ///
    /// # Errors
    /// [`TopologyError`] when the reply is not a slot table, names more than [`MAX_NODES`]
    /// nodes, or assigns no slot.
    pub fn from_cluster_slots(reply: &Frame, seed_host: &str) -> Result<Self, TopologyError> {
        let Frame::Array(ranges) = reply else {
            return Err(TopologyError::Malformed("not an array"));
        };
        let mut t = Self {
            nodes: Vec::new(),
            owner: vec![NO_NODE; usize::from(SLOTS)],
        };
        let mut replicas = Vec::new();
        for r in ranges {
            let Frame::Array(parts) = r else {
                return Err(TopologyError::Malformed("a range is not an array"));
            };
            let (Some(start), Some(end)) = (
                parts.first().and_then(integer),
                parts.get(1).and_then(integer),
            ) else {
                return Err(TopologyError::Malformed("a range has no start and end"));
            };
            if !(0..i64::from(SLOTS)).contains(&start) || !(start..i64::from(SLOTS)).contains(&end)
            {
                return Err(TopologyError::Malformed("a slot range is out of 0-16383"));
            }
            let Some(primary) = parts.get(2).map(|n| node(n, seed_host)).transpose()? else {
                return Err(TopologyError::Malformed("a range has no primary"));
            };
            let p = t.add(primary, true)?;
            for s in start..=end {
                t.owner[s as usize] = p;
            }
            for n in parts.iter().skip(3) {
                replicas.push((node(n, seed_host)?, p));
            }
        }
        for (r, p) in replicas {
            let i = t.add(r, false)?;
            if !t.nodes[usize::from(i)].primary {
                t.nodes[usize::from(i)].replica_of = p;
            }
        }
        if t.owner.iter().all(|&o| o == NO_NODE) {
            return Err(TopologyError::NoSlots);
        }
        Ok(t)
    }

    /// Index of the node at `addr`, added (as `primary` says) when new.
    fn add(&mut self, n: Node, primary: bool) -> Result<u16, TopologyError> {
        if let Some(i) = self.nodes.iter().position(|m| m.addr == n.addr) {
            self.nodes[i].primary |= primary;
            if primary {
                self.nodes[i].replica_of = NO_NODE;
            }
            return Ok(i as u16);
        }
        if self.nodes.len() >= MAX_NODES {
            return Err(TopologyError::TooManyNodes);
        }
        self.nodes.push(Node { primary, ..n });
        Ok((self.nodes.len() - 1) as u16)
    }

    /// Slots node `i` owns.
    pub fn slots_of(&self, i: usize) -> u32 {
        self.owner.iter().filter(|&&o| usize::from(o) == i).count() as u32
    }

    /// Indexes of the replicas of node `i`.
    pub fn replicas_of(&self, i: usize) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&r| usize::from(self.nodes[r].replica_of) == i)
            .collect()
    }

    /// Indexes of the nodes that own at least one slot.
    pub fn primaries(&self) -> Vec<usize> {
        let mut owns = vec![false; self.nodes.len()];
        for &o in &self.owner {
            if let Some(x) = owns.get_mut(usize::from(o)) {
                *x = true;
            }
        }
        (0..self.nodes.len()).filter(|&i| owns[i]).collect()
    }
}

fn integer(f: &Frame) -> Option<i64> {
    match f {
        Frame::Integer(n) => Some(*n),
        _ => None,
    }
}

fn text(f: &Frame) -> Option<&[u8]> {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) => Some(b),
        Frame::Verbatim { data, .. } => Some(data),
        _ => None,
    }
}

/// `[host, port, id, ...]` of one node.
fn node(f: &Frame, seed_host: &str) -> Result<Node, TopologyError> {
    let Frame::Array(p) = f else {
        return Err(TopologyError::Malformed("a node is not an array"));
    };
    let host = p
        .first()
        .and_then(text)
        .ok_or(TopologyError::Malformed("a node has no host"))?;
    let port = p
        .get(1)
        .and_then(integer)
        .filter(|p| (1..=65_535).contains(p))
        .ok_or(TopologyError::Malformed("a node has no port in 1-65535"))?;
    let host = match host {
        b"" | b"?" => seed_host.as_bytes(),
        h => h,
    };
    if host.len() > MAX_ADDR_LEN || !host.iter().all(|b| b.is_ascii_graphic()) {
        return Err(TopologyError::Malformed(
            "a node's host is not a printable name",
        ));
    }
    let host = String::from_utf8_lossy(host);
    // An IPv6 literal needs brackets to take a port.
    let addr = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let id = p
        .get(2)
        .and_then(text)
        .filter(|id| id.len() <= 64 && id.iter().all(u8::is_ascii_alphanumeric))
        .map(|id| String::from_utf8_lossy(id).into_owned())
        .unwrap_or_default();
    Ok(Node {
        addr,
        id,
        primary: false,
        replica_of: NO_NODE,
    })
}

/// Which redirect a node answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectKind {
    /// The slot lives elsewhere now: update the table, send there.
    Moved,
    /// The slot is migrating and this key is already at the target: send `ASKING` and the
    /// command there once; the table stays.
    Ask,
}

/// Most times a worker sends one request in a cluster (redirects and retries included):
/// then it fails with the server's word for the last refusal (`MOVED`, `ASK`,
/// `TRYAGAIN`...), so a redirect loop ends.
pub const MAX_REDIRECTS: u8 = 16;

/// A `MOVED` or `ASK` error reply, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirect<'a> {
    /// Which.
    pub kind: RedirectKind,
    /// The key's slot.
    pub slot: u16,
    /// The node to send to: `host:port` (the host empty when the server left it out:
    /// the same host as the node that answered).
    pub addr: &'a str,
}

/// Parses `MOVED <slot> <host:port>` or `ASK <slot> <host:port>`; None for anything else
/// (including a slot out of range or an address that is not printable).
pub fn parse_redirect(message: &[u8]) -> Option<Redirect<'_>> {
    let s = std::str::from_utf8(message).ok()?;
    let mut w = s.split_ascii_whitespace();
    let kind = match w.next()? {
        "MOVED" => RedirectKind::Moved,
        "ASK" => RedirectKind::Ask,
        _ => return None,
    };
    let slot: u16 = w.next()?.parse().ok()?;
    let addr = w.next()?;
    if slot >= SLOTS || addr.len() > MAX_ADDR_LEN || !addr.contains(':') {
        return None;
    }
    Some(Redirect { kind, slot, addr })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Frame {
        Frame::Bulk(s.as_bytes().to_vec())
    }

    fn n(host: &str, port: i64, id: &str) -> Frame {
        Frame::Array(vec![bulk(host), Frame::Integer(port), bulk(id)])
    }

    fn range(a: i64, b: i64, nodes: Vec<Frame>) -> Frame {
        let mut v = vec![Frame::Integer(a), Frame::Integer(b)];
        v.extend(nodes);
        Frame::Array(v)
    }

    #[test]
    fn three_primaries_with_replicas_and_a_split_range() {
        let reply = Frame::Array(vec![
            range(
                0,
                5460,
                vec![n("10.0.0.1", 7000, "a1"), n("10.0.0.4", 7003, "r1")],
            ),
            range(5461, 10922, vec![n("10.0.0.2", 7001, "b2")]),
            range(10923, 16000, vec![n("10.0.0.3", 7002, "c3")]),
            range(16001, 16383, vec![n("10.0.0.1", 7000, "a1")]),
        ]);
        let t = Topology::from_cluster_slots(&reply, "seed").unwrap();
        let addrs: Vec<_> = t.nodes.iter().map(|n| n.addr.as_str()).collect();
        assert_eq!(
            addrs,
            [
                "10.0.0.1:7000",
                "10.0.0.2:7001",
                "10.0.0.3:7002",
                "10.0.0.4:7003"
            ]
        );
        assert_eq!(t.primaries(), vec![0, 1, 2]);
        assert!(!t.nodes[3].primary);
        assert_eq!(t.slots_of(0), 5461 + 383);
        assert_eq!(t.slots_of(1), 5462);
        assert_eq!(t.slots_of(3), 0);
        assert_eq!(t.owner[16383], 0);
        assert_eq!(t.nodes[1].id, "b2");
        assert_eq!(t.nodes[3].replica_of, 0, "r1 replicates a1");
        assert_eq!(t.replicas_of(0), vec![3]);
        assert!(t.replicas_of(1).is_empty());
        assert_eq!(t.nodes[0].replica_of, NO_NODE);
    }

    #[test]
    fn an_unknown_host_is_the_seed_and_ipv6_gets_brackets() {
        let reply = Frame::Array(vec![
            range(0, 100, vec![n("", 7000, "x")]),
            range(101, 200, vec![n("?", 7001, "y")]),
            range(201, 300, vec![n("::1", 7002, "z")]),
        ]);
        let t = Topology::from_cluster_slots(&reply, "127.0.0.1").unwrap();
        assert_eq!(t.nodes[0].addr, "127.0.0.1:7000");
        assert_eq!(t.nodes[1].addr, "127.0.0.1:7001");
        assert_eq!(t.nodes[2].addr, "[::1]:7002");
        assert_eq!(t.owner[301], NO_NODE, "unassigned slots stay unowned");
    }

    #[test]
    fn bad_replies_are_refused_by_what_is_wrong() {
        let e = |f: Frame| Topology::from_cluster_slots(&f, "h").unwrap_err();
        assert_eq!(e(bulk("x")), TopologyError::Malformed("not an array"));
        assert_eq!(e(Frame::Array(vec![])), TopologyError::NoSlots);
        assert_eq!(
            e(Frame::Array(vec![range(0, 16384, vec![n("h", 1, "")])])),
            TopologyError::Malformed("a slot range is out of 0-16383")
        );
        assert_eq!(
            e(Frame::Array(vec![range(5, 4, vec![n("h", 1, "")])])),
            TopologyError::Malformed("a slot range is out of 0-16383")
        );
        assert_eq!(
            e(Frame::Array(vec![range(0, 1, vec![n("h", 0, "")])])),
            TopologyError::Malformed("a node has no port in 1-65535")
        );
        assert_eq!(
            e(Frame::Array(vec![range(0, 1, vec![])])),
            TopologyError::Malformed("a range has no primary")
        );
        let many: Vec<Frame> = (0..=MAX_NODES as i64)
            .map(|i| range(i, i, vec![n("h", i + 1, "")]))
            .collect();
        assert_eq!(e(Frame::Array(many)), TopologyError::TooManyNodes);
    }

    #[test]
    fn redirects_parse_and_anything_else_is_none() {
        assert_eq!(
            parse_redirect(b"MOVED 3999 127.0.0.1:6381"),
            Some(Redirect {
                kind: RedirectKind::Moved,
                slot: 3999,
                addr: "127.0.0.1:6381"
            })
        );
        assert_eq!(
            parse_redirect(b"ASK 0 :7002").map(|r| (r.kind, r.addr)),
            Some((RedirectKind::Ask, ":7002"))
        );
        assert_eq!(parse_redirect(b"MOVED 16384 h:1"), None);
        assert_eq!(parse_redirect(b"MOVED x h:1"), None);
        assert_eq!(parse_redirect(b"MOVED 1"), None);
        assert_eq!(parse_redirect(b"ERR MOVED 1 h:1"), None);
        assert_eq!(parse_redirect(b"MOVED 1 nocolon"), None);
    }

    #[test]
    fn single_owns_everything() {
        let t = Topology::single("h:1");
        assert_eq!(t.primaries(), vec![0]);
        assert_eq!(t.slots_of(0), u32::from(SLOTS));
    }
}
