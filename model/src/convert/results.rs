//! Results on the wire: per-command statistics, per-node counts, errors and their
//! messages, and interval deltas.

use super::check::{WireError, check_range};
use crate::hist::{self, HistError, Sparse, SparseDecoder};
use crate::stats::{
    ClassCounts, CmdDelta, CmdStatsOf, ConnLife, ErrorCounts, NodeStats, Outage, Redirects, Samples,
};
use crest_proto::pb;

/// Encodes one class's per-command results; `names[i]` names `cmds[i]`.
pub fn stats_to_pb<H: Samples>(
    class: &str,
    cmds: &[CmdStatsOf<H>],
    names: &[String],
) -> Vec<pb::CommandStats> {
    cmds.iter()
        .zip(names)
        .map(|(s, name)| cmd_to_pb(class, name, s))
        .collect()
}

/// Encodes one command's results, whatever its histograms are kept as.
pub fn cmd_to_pb<H: Samples>(class: &str, name: &str, s: &CmdStatsOf<H>) -> pb::CommandStats {
    let h = |h: &H| {
        Some(pb::Histogram {
            v2: h.encode_wire().into(),
        })
    };
    pb::CommandStats {
        command: name.to_string(),
        class: class.to_string(),
        scheduled: s.scheduled,
        sent: s.sent,
        completed: s.completed,
        misses: s.misses,
        backlogged: s.backlogged,
        moved: s.redirects.moved,
        asked: s.redirects.asked,
        retried: s.redirects.retried,
        errors: errors_to_pb(&s.errors),
        latency: h(&s.latency),
        service_time: h(&s.service_time),
        schedule_lag: h(&s.schedule_lag),
    }
}

/// A class's counts beside its commands' to the wire, from a worker's totals.
pub fn class_stats_to_pb(class: &str, s: &crate::stats::Stats) -> pb::ClassCounts {
    let st = &s.staleness;
    pb::ClassCounts {
        class: class.to_string(),
        pushes: s.pushes,
        invalidations: s.invalidations,
        stale_checked: st.checked,
        stale: st.stale,
        behind: (!st.behind.is_empty()).then(|| pb::Histogram {
            v2: st.behind.encode_wire().into(),
        }),
    }
}

/// A class's counts, summed (a relay's), to the wire.
pub fn class_counts_to_pb(class: &str, c: &ClassCounts) -> pb::ClassCounts {
    pb::ClassCounts {
        class: class.to_string(),
        pushes: c.pushes,
        invalidations: c.invalidations,
        stale_checked: c.stale_checked,
        stale: c.stale,
        behind: c.behind.as_ref().map(|h| pb::Histogram {
            v2: hist::encode_wire(h).into(),
        }),
    }
}

/// A class's counts from a peer: its histogram decoded, `stale` at most `stale_checked`.
///
/// # Errors
/// A [`WireError`] when the histogram does not decode.
pub fn class_counts_from_pb(c: &pb::ClassCounts) -> Result<ClassCounts, WireError> {
    let behind = match &c.behind {
        Some(h) => Some(
            hist::decode(&h.v2).map_err(|e| WireError::new("classes.behind", 0, e.to_string()))?,
        ),
        None => None,
    };
    Ok(ClassCounts {
        pushes: c.pushes,
        invalidations: c.invalidations,
        stale_checked: c.stale_checked,
        stale: c.stale.min(c.stale_checked),
        behind,
    })
}

/// Per-node results to the wire.
pub fn nodes_to_pb(nodes: &[NodeStats]) -> Vec<pb::NodeStats> {
    nodes
        .iter()
        .map(|n| pb::NodeStats {
            addr: n.addr.clone(),
            primary: n.primary,
            slots: n.slots,
            completed: n.completed,
            reads: n.reads,
            errors: n.errors,
            moved: n.redirects.moved,
            asked: n.redirects.asked,
            latency: Some(pb::Histogram {
                v2: hist::encode_wire(&n.latency).into(),
            }),
            connections: n.connections,
            outages: n.outages.iter().map(outage_to_pb).collect(),
            outages_dropped: n.outages_dropped,
        })
        .collect()
}

fn outage_to_pb(o: &Outage) -> pb::Outage {
    pb::Outage {
        start: o.start,
        end: o.end.unwrap_or(0),
        open: o.end.is_none(),
        failed: o.failed,
        redirected: o.redirected,
        rediscovered: o.rediscovered.unwrap_or(0),
        slots: o
            .slots
            .iter()
            .flat_map(|&(a, b)| [u32::from(a), u32::from(b)])
            .collect(),
        writes: o.writes,
    }
}

/// An outage from a peer: an end before its start, or slots out of range or out of
/// order, are refused.
fn outage_from_pb(o: &pb::Outage) -> Result<Outage, WireError> {
    let end = (!o.open).then_some(o.end);
    if end.is_some_and(|e| e < o.start) {
        return Err(WireError::new(
            "nodes.outages.end",
            o.end,
            "an outage ends before it starts".to_string(),
        ));
    }
    if !o.slots.len().is_multiple_of(2) || o.slots.len() > 2 * usize::from(crate::slot::SLOTS) {
        return Err(WireError::new(
            "nodes.outages.slots",
            o.slots.len(),
            "slot ranges are start, end pairs".to_string(),
        ));
    }
    let mut slots = Vec::with_capacity(o.slots.len() / 2);
    for p in o.slots.chunks_exact(2) {
        let last = slots.last().map_or(-1, |&(_, e): &(u16, u16)| i64::from(e));
        let (a, b) = (
            check_range(
                "nodes.outages.slots",
                p[0],
                0,
                u32::from(crate::slot::SLOTS) - 1,
            )?,
            check_range(
                "nodes.outages.slots",
                p[1],
                0,
                u32::from(crate::slot::SLOTS) - 1,
            )?,
        );
        if a > b || i64::from(a) <= last {
            return Err(WireError::new(
                "nodes.outages.slots",
                (a, b),
                "slot ranges must be in order and apart".to_string(),
            ));
        }
        slots.push((a as u16, b as u16));
    }
    Ok(Outage {
        start: o.start,
        end,
        failed: o.failed,
        redirected: o.redirected,
        rediscovered: (o.rediscovered > 0).then_some(o.rediscovered),
        slots,
        writes: o.writes,
    })
}

/// Per-node results from a peer: at most [`crate::topology::MAX_NODES`], addresses cut
/// and made printable, slots at most 16,384.
///
/// # Errors
/// [`HistError`] when a latency histogram does not decode; a [`WireError`] for a slot
/// count over 16,384.
pub fn nodes_from_pb(nodes: &[pb::NodeStats]) -> Result<Vec<NodeStats>, WireError> {
    nodes
        .iter()
        .take(crate::topology::MAX_NODES)
        .map(|n| {
            let latency = match &n.latency {
                Some(h) => hist::decode(&h.v2)
                    .map_err(|e| WireError::new("nodes.latency", 0, e.to_string()))?,
                None => hist::new_hist(),
            };
            Ok(NodeStats {
                addr: crate::stats::clean_message(n.addr.as_bytes()),
                primary: n.primary,
                slots: check_range("nodes.slots", n.slots, 0, u32::from(crate::slot::SLOTS))?,
                completed: n.completed,
                reads: n.reads.min(n.completed),
                errors: n.errors,
                redirects: Redirects {
                    moved: n.moved,
                    asked: n.asked,
                    retried: 0,
                },
                connections: n.connections,
                latency,
                outages: n
                    .outages
                    .iter()
                    .take(crate::stats::MAX_OUTAGES)
                    .map(outage_from_pb)
                    .collect::<Result<_, _>>()?,
                outages_dropped: n.outages_dropped.saturating_add(
                    n.outages.len().saturating_sub(crate::stats::MAX_OUTAGES) as u64,
                ),
            })
        })
        .collect()
}

/// A worker's connection lives to the wire.
pub fn conn_life_to_pb(l: &ConnLife) -> pb::ConnLife {
    pb::ConnLife {
        opened: l.opened,
        initial: l.initial,
        retired: l.retired,
        setup: Some(pb::Histogram {
            v2: hist::encode_wire(&l.setup).into(),
        }),
        phases: l
            .phases
            .iter()
            .map(|h| pb::Histogram {
                v2: hist::encode_wire(h).into(),
            })
            .collect(),
    }
}

/// A worker's connection lives from a peer (absent: none, an older worker's).
///
/// # Errors
/// A [`WireError`] when the setup histogram does not decode.
pub fn conn_life_from_pb(l: Option<&pb::ConnLife>) -> Result<ConnLife, WireError> {
    let Some(l) = l else {
        return Ok(ConnLife::default());
    };
    Ok(ConnLife {
        opened: l.opened,
        initial: l.initial,
        retired: l.retired,
        setup: match &l.setup {
            Some(h) => hist::decode(&h.v2)
                .map_err(|e| WireError::new("connections.setup", 0, e.to_string()))?,
            None => hist::new_hist(),
        },
        phases: {
            if l.phases.len() > 3 {
                return Err(WireError::new(
                    "connections.phases",
                    l.phases.len(),
                    "at most 3",
                ));
            }
            let mut p: [hist::Hist; 3] = std::array::from_fn(|_| hist::new_hist());
            for (h, w) in p.iter_mut().zip(&l.phases) {
                *h = hist::decode(&w.v2)
                    .map_err(|e| WireError::new("connections.phases", 0, e.to_string()))?;
            }
            p
        },
    })
}

/// Error counts to the wire.
pub fn errors_to_pb(errors: &ErrorCounts) -> Vec<pb::ErrorCount> {
    errors
        .iter()
        .map(|(k, n)| pb::ErrorCount {
            kind: k.clone(),
            count: *n,
        })
        .collect()
}

/// Error counts from the wire.
pub fn errors_from_pb(errors: &[pb::ErrorCount]) -> ErrorCounts {
    let mut out = Vec::new();
    for e in errors {
        crate::stats::add_error(&mut out, &e.kind, e.count);
    }
    out
}

/// Most error messages read from one peer message; more are ignored (a worker sends at
/// most one per kind, and kinds are bounded).
pub const MAX_PEER_MESSAGES: usize = 4 * crate::stats::MAX_KINDS;

/// Error kinds' first messages to the wire.
pub fn messages_to_pb(messages: &[(String, String)]) -> Vec<pb::ErrorMessage> {
    messages
        .iter()
        .map(|(kind, message)| pb::ErrorMessage {
            kind: kind.clone(),
            message: message.clone(),
        })
        .collect()
}

/// Error kinds' first messages from a peer, cleaned and bounded again: at most
/// [`MAX_PEER_MESSAGES`], each kind and message cut and made printable as the engine does.
pub fn messages_from_pb(messages: &[pb::ErrorMessage]) -> Vec<(String, String)> {
    messages
        .iter()
        .take(MAX_PEER_MESSAGES)
        .map(|m| {
            (
                crate::stats::clean_kind(m.kind.as_bytes()),
                crate::stats::clean_message(m.message.as_bytes()),
            )
        })
        .collect()
}

/// Decodes one command's results of one interval with sparse histograms (the
/// coordinator's merging): (class, command, results), the names borrowed from the message
/// (a fleet's merge copied two strings per command per interval).
///
/// # Errors
/// [`HistError`] when a histogram does not decode.
pub fn delta_from_pb<'a>(
    c: &'a pb::CommandStats,
    de: &mut SparseDecoder,
) -> Result<(&'a str, &'a str, CmdDelta), HistError> {
    let mut h = |x: &Option<pb::Histogram>| match x {
        Some(h) => de.decode(&h.v2),
        None => Ok(Sparse::default()),
    };
    Ok((
        &c.class,
        &c.command,
        CmdDelta {
            scheduled: c.scheduled,
            sent: c.sent,
            completed: c.completed,
            misses: c.misses,
            backlogged: c.backlogged,
            redirects: Redirects {
                moved: c.moved,
                asked: c.asked,
                retried: c.retried,
            },
            errors: errors_from_pb(&c.errors),
            latency: h(&c.latency)?,
            service_time: h(&c.service_time)?,
            schedule_lag: h(&c.schedule_lag)?,
        },
    ))
}
