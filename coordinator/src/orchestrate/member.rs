//! The workers of a run as the orchestrator tracks them, the run's errors, the timing
//! rules every phase shares (when a silent worker is lost, how long finals may take), and
//! the interrupt: the vocabulary below the phases ([`super::cluster`], [`super::phase`],
//! [`super::collect`], [`super::checkpoint`]) and the sequence in [`super`].

use crate::config::RunConfig;
use crate::service::WorkerLink;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A worker that sends nothing for this long during a run is lost.
pub const SILENCE: Duration = Duration::from_secs(3);
/// Extra wait for finals after the schedule and the drain.
pub const GRACE: Duration = Duration::from_secs(5);
/// How long a phase with no time bound (count-bounded closed loop, prefill) may run.
pub const UNBOUNDED_PHASE: Duration = Duration::from_secs(3600);
/// Clock pings per worker; the lowest-RTT answer sets the offset.
pub const PINGS: u64 = 5;

/// Why a run did not produce results.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The user can fix it: bad setting, unreachable target, missing workers (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Something else went wrong (exit 1).
    #[error("{0}")]
    Failed(String),
    /// Interrupted by the user before the measured phase began (exit 130); an interrupt
    /// during it returns the results so far instead.
    #[error("interrupted; workers told to stop")]
    Interrupted,
}

/// A worker taking part in a run, as the orchestrator tracks it.
pub struct Member {
    pub link: WorkerLink,
    pub offset_ns: i64,
    pub rtt_ns: u64,
    pub lost: Option<String>,
    pub last_seen: Instant,
    pub done: bool,
    pub finished_at: Option<Instant>,
}

impl Member {
    /// A worker that just registered: no offset yet, seen now.
    pub fn new(link: WorkerLink) -> Self {
        Member {
            link,
            offset_ns: 0,
            rtt_ns: 0,
            lost: None,
            last_seen: Instant::now(),
            done: false,
            finished_at: None,
        }
    }

    /// Whether it was lost.
    pub fn lost(&self) -> bool {
        self.lost.is_some()
    }
}

/// Resolves when `interrupt` flips to true (or its sender is gone, which never happens
/// before the run ends).
pub async fn interrupted(interrupt: &watch::Receiver<bool>) {
    let mut rx = interrupt.clone();
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The measured span, ns: the schedule's length, or for a count-bounded closed loop or
/// an interrupted run the time from the measured start to `elapsed`.
pub fn measured_ns(cfg: &RunConfig, elapsed: Duration, interrupted: bool) -> u64 {
    let d = if interrupted || cfg.duration.is_zero() {
        elapsed
    } else {
        cfg.duration
    };
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// The configured interval, ns (at least 1).
pub fn interval_ns(cfg: &RunConfig) -> u64 {
    u64::try_from(cfg.interval.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// What a fake worker of the unit tests is sent.
#[cfg(test)]
pub(super) type Inbox = tokio::sync::mpsc::Receiver<crest_proto::pb::CoordinatorMessage>;

/// `n` fake workers (`WorkerLink::fake`) as tracked members, and what each is sent.
#[cfg(test)]
pub(super) fn fake_fleet(n: usize) -> (Vec<Member>, Vec<Inbox>) {
    (0..n)
        .map(|i| {
            let (link, rx) = WorkerLink::fake(i);
            (Member::new(link), rx)
        })
        .unzip()
}
