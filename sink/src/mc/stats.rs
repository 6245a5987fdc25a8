//! The counters `stats` reports, named and ordered as memcached 1.6 prints them.
//!
//! Counting model, as the RESP side's: each connection counts into its own [`Counts`] and
//! adds them to the shared [`Counters`] before it writes the replies they belong to, so a
//! client never sees a reply whose command is not counted yet. A leaf: it knows no
//! command, only the counters' names.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    CmdGet,
    CmdSet,
    CmdFlush,
    CmdTouch,
    CmdMeta,
    GetHits,
    GetMisses,
    GetExpired,
    GetFlushed,
    DeleteMisses,
    DeleteHits,
    IncrMisses,
    IncrHits,
    DecrMisses,
    DecrHits,
    CasMisses,
    CasHits,
    CasBadval,
    TouchHits,
    TouchMisses,
    StoreTooLarge,
    StoreNoMemory,
    AuthCmds,
    AuthErrors,
    BytesRead,
    BytesWritten,
    /// Items ever linked; printed after `curr_items`, as memcached does.
    TotalItems,
}

/// How many counters there are.
const N: usize = Counter::TotalItems as usize + 1;

/// Every counter, in the order `stats` prints them (all but [`Counter::TotalItems`] in
/// one run, after `total_connections`).
pub(crate) const ALL: [(Counter, &str); N] = [
    (Counter::CmdGet, "cmd_get"),
    (Counter::CmdSet, "cmd_set"),
    (Counter::CmdFlush, "cmd_flush"),
    (Counter::CmdTouch, "cmd_touch"),
    (Counter::CmdMeta, "cmd_meta"),
    (Counter::GetHits, "get_hits"),
    (Counter::GetMisses, "get_misses"),
    (Counter::GetExpired, "get_expired"),
    (Counter::GetFlushed, "get_flushed"),
    (Counter::DeleteMisses, "delete_misses"),
    (Counter::DeleteHits, "delete_hits"),
    (Counter::IncrMisses, "incr_misses"),
    (Counter::IncrHits, "incr_hits"),
    (Counter::DecrMisses, "decr_misses"),
    (Counter::DecrHits, "decr_hits"),
    (Counter::CasMisses, "cas_misses"),
    (Counter::CasHits, "cas_hits"),
    (Counter::CasBadval, "cas_badval"),
    (Counter::TouchHits, "touch_hits"),
    (Counter::TouchMisses, "touch_misses"),
    (Counter::StoreTooLarge, "store_too_large"),
    (Counter::StoreNoMemory, "store_no_memory"),
    (Counter::AuthCmds, "auth_cmds"),
    (Counter::AuthErrors, "auth_errors"),
    (Counter::BytesRead, "bytes_read"),
    (Counter::BytesWritten, "bytes_written"),
    (Counter::TotalItems, "total_items"),
];

/// One connection's counts not yet added to the shared ones.
#[derive(Debug, Default)]
pub(crate) struct Counts([u64; N]);

impl Counts {
    /// One more of `c`.
    pub(crate) fn bump(&mut self, c: Counter) {
        self.add(c, 1);
    }

    /// `n` more of `c`.
    pub(crate) fn add(&mut self, c: Counter, n: u64) {
        let slot = &mut self.0[c as usize];
        *slot = slot.saturating_add(n);
    }

    /// What is counted of `c`.
    #[cfg(test)]
    pub(crate) fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }
}

/// The counters every connection adds to.
#[derive(Debug, Default)]
pub(crate) struct Counters([AtomicU64; N]);

impl Counters {
    /// Adds `counts` and zeroes them.
    pub(crate) fn flush(&self, counts: &mut Counts) {
        for (shared, local) in self.0.iter().zip(counts.0.iter_mut()) {
            if *local != 0 {
                shared.fetch_add(std::mem::take(local), Ordering::Relaxed);
            }
        }
    }

    /// The count of `c`.
    pub(crate) fn get(&self, c: Counter) -> u64 {
        self.0[c as usize].load(Ordering::Relaxed)
    }

    /// Every counter back to 0 (`stats reset`).
    pub(crate) fn reset(&self) {
        for c in &self.0 {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// The process's user and system CPU time (memcached's `rusage_user`, `rusage_system`);
/// zero when they cannot be read.
pub(crate) fn rusage() -> (Duration, Duration) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage, which `ru` is and owns.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let time = |t: libc::timeval| {
        let secs = u64::try_from(t.tv_sec).unwrap_or(0);
        let micros = u32::try_from(t.tv_usec).unwrap_or(0);
        Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
    };
    (time(ru.ru_utime), time(ru.ru_stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_added_once_then_reset() {
        let shared = Counters::default();
        let mut local = Counts::default();
        local.bump(Counter::CmdGet);
        local.add(Counter::BytesRead, 10);
        shared.flush(&mut local);
        shared.flush(&mut local);
        assert_eq!(shared.get(Counter::CmdGet), 1);
        assert_eq!(shared.get(Counter::BytesRead), 10);
        assert_eq!(local.get(Counter::CmdGet), 0);
        shared.reset();
        assert_eq!(shared.get(Counter::BytesRead), 0);
        assert!(ALL.iter().enumerate().all(|(i, (c, _))| *c as usize == i));
    }
}
