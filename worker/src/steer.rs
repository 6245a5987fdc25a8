//! Runtime changes of rate, from the agent to its shards: the agent pushes each
//! [`Change`] once; every shard checks one atomic per loop turn and, when it moved, follows
//! the changes it has not seen yet (in order), then reports the instant it switched at.

use crest_model::schedule::Change;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// The changes of one run, shared by its shards.
#[derive(Debug, Default)]
pub struct Steering {
    /// The highest `seq` pushed: a shard compares it with the last it applied.
    seq: AtomicU32,
    /// Every change of the run, in `seq` order (a run has few: each is a user's or a
    /// search's step).
    changes: Mutex<Vec<Change>>,
}

impl Steering {
    /// Adds a change; one whose `seq` is not the next is ignored (a repeat, or out of
    /// order: the coordinator numbers them 1, 2, ... and sends them in order on one
    /// stream). Returns whether it was taken.
    pub fn push(&self, c: Change) -> bool {
        let Ok(mut changes) = self.changes.lock() else {
            return false;
        };
        let last = changes.last().map_or(0, |c| c.seq);
        if c.seq != last.wrapping_add(1) {
            return false;
        }
        let seq = c.seq;
        changes.push(c);
        self.seq.store(seq, Ordering::Release);
        true
    }

    /// The highest `seq` pushed so far (one relaxed-cost load per loop turn).
    #[inline]
    pub fn latest(&self) -> u32 {
        self.seq.load(Ordering::Acquire)
    }

    /// The changes after `applied`, in order.
    pub fn since(&self, applied: u32) -> Vec<Change> {
        self.changes
            .lock()
            .map(|c| c.iter().filter(|c| c.seq > applied).cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crest_model::schedule::Steer;

    fn change(seq: u32) -> Change {
        Change {
            seq,
            at_ns: u64::from(seq) * 1_000,
            classes: vec![Steer::Hold(1.0)],
            end: false,
        }
    }

    #[test]
    fn changes_apply_once_each_in_order() {
        let s = Steering::default();
        assert_eq!(s.latest(), 0);
        assert!(s.push(change(1)));
        assert!(!s.push(change(1)), "a repeat");
        assert!(!s.push(change(3)), "a gap");
        assert!(s.push(change(2)));
        assert_eq!(s.latest(), 2);
        assert_eq!(s.since(0).len(), 2);
        assert_eq!(s.since(1)[0].seq, 2);
        assert!(s.since(2).is_empty());
    }
}
