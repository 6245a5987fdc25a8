//! The control plane's small messages: a worker's registration, a run's failure, a
//! runtime change of rate, and clocks and indices from a peer.

use super::check::{WireError, check_len, check_range, check_str, limits};
use crate::schedule::{Change, Steer};
use crest_proto::pb;

/// A worker's registration, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// Protocol version the worker speaks.
    pub protocol_version: u32,
    /// Worker uuid.
    pub worker_id: String,
    /// Name shown in reports.
    pub name: String,
    /// Host the worker runs on.
    pub host: String,
    /// Pinned shards.
    pub shards: u32,
    /// Shared secret ("" for none).
    pub token: String,
    /// Crest version of the worker.
    pub crest_version: String,
    /// Cores the shards are pinned to.
    pub cpus: Vec<u32>,
}

impl From<&Registration> for pb::Register {
    fn from(r: &Registration) -> Self {
        Self {
            protocol_version: r.protocol_version,
            worker_id: r.worker_id.clone(),
            name: r.name.clone(),
            host: r.host.clone(),
            shards: r.shards,
            token: r.token.clone(),
            crest_version: r.crest_version.clone(),
            cpus: r.cpus.clone(),
        }
    }
}

impl TryFrom<&pb::Register> for Registration {
    type Error = WireError;

    /// Checks the fields the coordinator sizes things by. The protocol version and the
    /// token are the caller's to judge (their refusals say more than a range).
    fn try_from(r: &pb::Register) -> Result<Self, WireError> {
        for (field, s) in [
            ("worker_id", &r.worker_id),
            ("name", &r.name),
            ("host", &r.host),
            ("token", &r.token),
            ("crest_version", &r.crest_version),
        ] {
            check_str(field, s, limits::MAX_NAME)?;
        }
        check_len("cpus", r.cpus.len(), limits::MAX_CPUS)?;
        Ok(Self {
            protocol_version: r.protocol_version,
            worker_id: r.worker_id.clone(),
            name: r.name.clone(),
            host: r.host.clone(),
            shards: check_range("shards", r.shards, 1, limits::MAX_SHARDS_PER_WORKER)?,
            token: r.token.clone(),
            crest_version: r.crest_version.clone(),
            cpus: r.cpus.clone(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Failures.

/// Why a worker could not take or finish a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The target does not resolve or refuses every connection: the user's to fix.
    TargetUnreachable,
    /// The plan does not pass the worker's checks.
    BadPlan,
    /// The worker is in another run.
    Busy,
    /// The target answers but refuses the generator (a password is required, too many
    /// clients): the user's to fix.
    TargetRefused,
    /// The worker's machine cannot hold the plan (its open-file limit): the user's to fix.
    WorkerLimit,
    /// Anything else.
    Internal,
}

impl FailureKind {
    /// Whether the failure is the user's input (exit 2) rather than a run that broke.
    pub fn is_usage(self) -> bool {
        matches!(
            self,
            Self::TargetUnreachable | Self::TargetRefused | Self::WorkerLimit
        )
    }
}

impl From<FailureKind> for pb::FailureKind {
    fn from(k: FailureKind) -> Self {
        match k {
            FailureKind::TargetUnreachable => Self::FailureTargetUnreachable,
            FailureKind::BadPlan => Self::FailureBadPlan,
            FailureKind::Busy => Self::FailureBusy,
            FailureKind::TargetRefused => Self::FailureTargetRefused,
            FailureKind::WorkerLimit => Self::FailureWorkerLimit,
            FailureKind::Internal => Self::FailureInternal,
        }
    }
}

impl From<pb::FailureKind> for FailureKind {
    fn from(k: pb::FailureKind) -> Self {
        match k {
            pb::FailureKind::FailureTargetUnreachable => Self::TargetUnreachable,
            pb::FailureKind::FailureBadPlan => Self::BadPlan,
            pb::FailureKind::FailureBusy => Self::Busy,
            pb::FailureKind::FailureTargetRefused => Self::TargetRefused,
            pb::FailureKind::FailureWorkerLimit => Self::WorkerLimit,
            pb::FailureKind::FailureInternal => Self::Internal,
        }
    }
}

/// A `RunFailed` message.
pub fn run_failed(run_id: &str, kind: FailureKind, reason: String) -> pb::RunFailed {
    pb::RunFailed {
        run_id: run_id.to_string(),
        reason,
        kind: pb::FailureKind::from(kind) as i32,
    }
}

/// The kind of a received `RunFailed`; an unknown number (a newer peer) is `Internal`.
pub fn failure_kind(f: &pb::RunFailed) -> FailureKind {
    pb::FailureKind::try_from(f.kind).map_or(FailureKind::Internal, FailureKind::from)
}

// ---------------------------------------------------------------------------------------
// Runtime changes of rate.

impl From<&Change> for pb::Steer {
    fn from(c: &Change) -> Self {
        pb::Steer {
            run_id: String::new(),
            seq: c.seq,
            at_ns: c.at_ns,
            classes: c
                .classes
                .iter()
                .map(|s| pb::ClassSteer {
                    how: Some(match s {
                        Steer::Hold(r) => pb::class_steer::How::HoldRps(*r),
                        Steer::Follow => pb::class_steer::How::Follow(pb::FollowProfile {}),
                    }),
                })
                .collect(),
            end: c.end,
        }
    }
}

impl TryFrom<&pb::Steer> for Change {
    type Error = WireError;

    fn try_from(s: &pb::Steer) -> Result<Self, WireError> {
        check_len("classes", s.classes.len(), limits::MAX_CLASSES)?;
        let classes = s
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| match c.how {
                Some(pb::class_steer::How::HoldRps(r)) => {
                    check_range(&format!("classes[{i}].hold_rps"), r, 0.0, limits::MAX_RATE)?;
                    if !r.is_finite() {
                        return Err(WireError::new(
                            format!("classes[{i}].hold_rps"),
                            r,
                            "a finite rate",
                        ));
                    }
                    Ok(Steer::Hold(r))
                }
                Some(pb::class_steer::How::Follow(_)) | None => Ok(Steer::Follow),
            })
            .collect::<Result<_, _>>()?;
        Ok(Change {
            seq: s.seq,
            at_ns: s.at_ns,
            classes,
            end: s.end,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Clocks and indices from a peer.

/// `a + b` for wall clocks in Unix ns; `None` past `i64`'s range (year 2262), never a panic.
pub fn add_ns(a: i64, b: i64) -> Option<i64> {
    a.checked_add(b)
}

/// The clock offset of a peer from one ping: `t2 - (t1 + t3) / 2`, and the round trip
/// `t3 - t1` (0 if the local clock stepped back). `None` when the peer's clock is so far
/// off that the arithmetic would overflow.
pub fn clock_offset(t1: i64, t2: i64, t3: i64) -> Option<(i64, u64)> {
    let rtt = u64::try_from(t3.checked_sub(t1)?.max(0)).ok()?;
    let mid = i64::try_from((i128::from(t1) + i128::from(t3)) / 2).ok()?;
    Some((t2.checked_sub(mid)?, rtt))
}
