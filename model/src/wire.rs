//! Results to and from the wire: [`Stats`] ↔ `pb::CommandStats` (histograms as V2 + DEFLATE).

use crate::hist::{self, HistError};
use crate::stats::{CmdStats, ErrorCounts};
use crest_proto::pb;

/// Encodes one class's per-command results; `names[i]` names `cmds[i]`.
pub fn to_pb(class: &str, cmds: &[CmdStats], names: &[String]) -> Vec<pb::CommandStats> {
    cmds.iter()
        .zip(names)
        .map(|(s, name)| pb::CommandStats {
            command: name.clone(),
            class: class.to_string(),
            scheduled: s.scheduled,
            sent: s.sent,
            completed: s.completed,
            backlogged: s.backlogged,
            errors: errors_to_pb(&s.errors),
            latency: Some(pb::Histogram {
                v2_deflate: hist::encode(&s.latency),
            }),
            service_time: Some(pb::Histogram {
                v2_deflate: hist::encode(&s.service_time),
            }),
            schedule_lag: Some(pb::Histogram {
                v2_deflate: hist::encode(&s.schedule_lag),
            }),
        })
        .collect()
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

/// Decodes one command's results: (class, command, results).
///
/// # Errors
/// [`HistError`] when a histogram does not decode.
pub fn from_pb(c: &pb::CommandStats) -> Result<(String, String, CmdStats), HistError> {
    let h = |x: &Option<pb::Histogram>| match x {
        Some(h) => hist::decode(&h.v2_deflate),
        None => Ok(hist::new_hist()),
    };
    Ok((
        c.class.clone(),
        c.command.clone(),
        CmdStats {
            scheduled: c.scheduled,
            sent: c.sent,
            completed: c.completed,
            backlogged: c.backlogged,
            errors: errors_from_pb(&c.errors),
            latency: h(&c.latency)?,
            service_time: h(&c.service_time)?,
            schedule_lag: h(&c.schedule_lag)?,
        },
    ))
}
