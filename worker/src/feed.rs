//! A replayed trace's requests on their way from the agent to one shard's class (issue
//! #27): the agent pushes each checked chunk ([`Batch`]) as it arrives from the
//! coordinator; the shard checks one atomic per loop turn and, when it moved, takes every
//! chunk waiting; it counts the requests it takes off, which the agent acknowledges to the
//! coordinator (`TraceAck`) so the coordinator sends more. Nothing here waits: a shard
//! whose queue is empty wakes again within [`POLL_NS`].

use crest_model::trace::{Batch, TraceOp};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A shard with nothing left to send from its trace looks at its feed again this soon.
pub const POLL_NS: u64 = 5_000_000;

/// The chunks on their way to one shard's trace class.
#[derive(Debug, Default)]
pub struct TraceFeed {
    queue: Mutex<VecDeque<Batch>>,
    /// Chunks pushed, in all.
    pushed: AtomicU64,
    /// The chunk with `last` has been pushed.
    ended: AtomicBool,
    /// Requests the shard has taken off, in all.
    consumed: AtomicU64,
}

impl TraceFeed {
    /// Adds a chunk (the agent). Chunks come in `seq` order on one stream; one that is
    /// not the next is refused (false), as is any after the last.
    pub fn push(&self, b: Batch) -> bool {
        let Ok(mut q) = self.queue.lock() else {
            return false;
        };
        if self.ended.load(Ordering::Acquire) || b.seq != self.pushed.load(Ordering::Acquire) + 1 {
            return false;
        }
        let last = b.last;
        q.push_back(b);
        if last {
            self.ended.store(true, Ordering::Release);
        }
        self.pushed.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Chunks pushed so far (one atomic load: the shard's check per turn).
    #[inline]
    pub fn pushed(&self) -> u64 {
        self.pushed.load(Ordering::Acquire)
    }

    /// Whether the last chunk has been pushed.
    #[inline]
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Every chunk waiting (the shard).
    pub fn take(&self) -> Vec<Batch> {
        self.queue
            .lock()
            .map(|mut q| q.drain(..).collect())
            .unwrap_or_default()
    }

    /// The shard has taken `total` requests off, in all (a plain store: the shard is the
    /// only writer, once per request, with no read-modify-write on its path).
    #[inline]
    pub fn set_consumed(&self, total: u64) {
        self.consumed.store(total, Ordering::Relaxed);
    }

    /// Requests the shard has taken off, in all (what the agent acknowledges).
    pub fn consumed(&self) -> u64 {
        self.consumed.load(Ordering::Relaxed)
    }
}

/// A trace class's source as the shard is given it: its feed and the class's op table.
#[derive(Debug, Clone)]
pub struct TraceSource {
    /// Where its chunks come from.
    pub feed: Arc<TraceFeed>,
    /// What each op index means.
    pub ops: Arc<[TraceOp]>,
    /// The run's timeout: a chunk is kept this long (and a margin) past its last request.
    pub timeout_ns: u64,
    /// What the target speaks: RESP, or memcached's text or meta protocol.
    pub protocol: crest_model::target::Protocol,
}

/// A chunk the class holds: its requests from `first` (the shard's count) on.
#[derive(Debug)]
struct Held {
    first: u64,
    batch: Batch,
}

/// A trace class's requests as its shard schedules them: the chunks taken from the feed,
/// kept until each request in them is a timeout past its intended time (by then every
/// request has been given up or answered, so a resent one still finds its record).
#[derive(Debug)]
pub struct TraceQueue {
    pub(crate) source: TraceSource,
    /// Chunks taken from the feed so far.
    taken: u64,
    held: VecDeque<Held>,
    /// The next request to schedule (the shard's count, from 0).
    pub(crate) next: u64,
    /// The index in `held` of the chunk that holds `next` (`held.len()` when none does).
    cur: usize,
    /// One past the last request held.
    end: u64,
    /// Requests at or after this are not sent (a run stopped early).
    stop_at: Option<u64>,
    /// Kept this long past a chunk's last intended time: the timeout and a margin.
    keep_ns: u64,
}

/// Margin past the timeout before a chunk is let go.
const KEEP_MARGIN_NS: u64 = 1_000_000_000;

impl TraceQueue {
    /// An empty queue over `source`, keeping chunks its timeout (plus a margin) past
    /// their last request.
    pub fn new(source: TraceSource) -> Self {
        let keep_ns = source.timeout_ns.saturating_add(KEEP_MARGIN_NS);
        Self {
            source,
            taken: 0,
            held: VecDeque::new(),
            next: 0,
            cur: 0,
            end: 0,
            stop_at: None,
            keep_ns,
        }
    }

    /// Takes what the feed has (one atomic load when it has nothing new) and lets go of
    /// the chunks a timeout past at `now`.
    pub fn refill(&mut self, now: u64) {
        if self.source.feed.pushed() > self.taken {
            for batch in self.source.feed.take() {
                self.taken += 1;
                if batch.is_empty() {
                    // A last chunk with nothing in it: the feed's `ended` says it all.
                    continue;
                }
                let first = self.end;
                self.end += batch.len() as u64;
                self.held.push_back(Held { first, batch });
            }
        }
        while let Some(h) = self.held.front() {
            let done = h.first + h.batch.len() as u64 <= self.next;
            let last = h.batch.at_ns.last().copied().unwrap_or(0);
            if done && now.saturating_sub(last) > self.keep_ns {
                self.held.pop_front();
                self.cur -= 1;
            } else {
                break;
            }
        }
    }

    /// Request `seq`'s chunk and index in it, while it is held.
    pub fn find(&self, seq: u64) -> Option<(&Batch, usize)> {
        let front = self.held.front()?.first;
        if seq < front || seq >= self.end {
            return None;
        }
        // Chunks are contiguous: a binary search on their first request.
        let i = self.held.partition_point(|h| h.first <= seq) - 1;
        let h = &self.held[i];
        Some((&h.batch, (seq - h.first) as usize))
    }

    /// The next request's chunk and index in it, if it is held (no search: the cursor).
    #[inline]
    pub fn current(&self) -> Option<(&Batch, usize)> {
        let h = self.held.get(self.cur)?;
        Some((&h.batch, (self.next - h.first) as usize))
    }

    /// The next request's intended time, if it is held and may still be sent.
    #[inline]
    pub fn next_due(&self) -> Option<u64> {
        let (b, i) = self.current()?;
        let t = b.at_ns[i];
        self.stop_at.is_none_or(|s| t < s).then_some(t)
    }

    /// Moves past the next request (it was scheduled), counting it as taken.
    #[inline]
    pub fn advance(&mut self) {
        self.next += 1;
        if let Some(h) = self.held.get(self.cur)
            && self.next >= h.first + h.batch.len() as u64
        {
            self.cur += 1;
        }
        self.source.feed.set_consumed(self.next);
    }

    /// Whether requests may still come: the feed has not ended, or some are unscheduled.
    pub fn sending(&self) -> bool {
        if self.stop_at.is_some() {
            return self.next_due().is_some();
        }
        !self.source.feed.ended() || self.source.feed.pushed() > self.taken || self.next < self.end
    }

    /// Sends nothing intended at or after `at` (a run stopped early).
    pub fn end_at(&mut self, at: u64) {
        self.stop_at = Some(self.stop_at.map_or(at, |s| s.min(at)));
    }

    /// Chunks held (a test's view of the memory bound).
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crest_trace::Op;

    fn batch(seq: u64, times: &[u64], last: bool) -> Batch {
        let mut b = Batch::new(seq, last);
        for (i, &t) in times.iter().enumerate() {
            b.push(t, 0, format!("k{seq}.{i}").as_bytes(), 0, 0, b"");
        }
        b
    }

    fn queue() -> TraceQueue {
        let source = TraceSource {
            feed: Arc::new(TraceFeed::default()),
            ops: vec![TraceOp::Op(Op::Get)].into(),
            timeout_ns: 1_000,
            protocol: crest_model::target::Protocol::Resp,
        };
        TraceQueue::new(source)
    }

    #[test]
    fn chunks_arrive_in_order_once_and_none_after_the_last() {
        let f = TraceFeed::default();
        assert!(!f.push(batch(2, &[1], false)), "a gap");
        assert!(f.push(batch(1, &[1], false)));
        assert!(!f.push(batch(1, &[1], false)), "a repeat");
        assert!(f.push(batch(2, &[2], true)));
        assert!(f.ended());
        assert!(!f.push(batch(3, &[3], false)), "after the last");
        assert_eq!(f.pushed(), 2);
        assert_eq!(f.take().len(), 2);
        assert!(f.take().is_empty());
    }

    #[test]
    fn requests_come_in_order_across_chunks_and_chunks_go_a_timeout_later() {
        let mut q = queue();
        let feed = q.source.feed.clone();
        feed.push(batch(1, &[10, 20], false));
        feed.push(batch(2, &[30], false));
        q.refill(0);
        let mut seen = Vec::new();
        while let Some(t) = q.next_due() {
            let (b, i) = q.current().unwrap();
            assert_eq!(
                q.find(q.next),
                Some((b, i)),
                "the cursor is where a search lands"
            );
            seen.push((t, b.key(i).to_vec()));
            q.advance();
        }
        assert_eq!(
            seen,
            [
                (10, b"k1.0".to_vec()),
                (20, b"k1.1".to_vec()),
                (30, b"k2.0".to_vec())
            ]
        );
        assert_eq!(feed.consumed(), 3);
        assert!(q.sending(), "the feed has not ended");
        // Kept a timeout (1 µs here) and the margin past the last request.
        q.refill(1_000_001_020);
        assert_eq!(q.held(), 2);
        q.refill(1_000_001_021);
        assert_eq!(q.held(), 1);
        assert!(q.find(0).is_none(), "let go");
        assert!(q.find(2).is_some());
        feed.push(batch(3, &[40], false));
        feed.push(batch(4, &[], true));
        q.refill(1_000_001_021);
        assert_eq!(q.next_due(), Some(40));
        q.advance();
        assert_eq!(q.next_due(), None, "an empty last chunk holds nothing");
        assert!(!q.sending(), "ended, and all sent");
    }

    #[test]
    fn a_chunk_not_all_scheduled_is_kept_and_a_stop_ends_the_trace_early() {
        let mut q = queue();
        q.source.feed.push(batch(1, &[10, 20, 30], true));
        q.refill(0);
        q.advance();
        q.refill(u64::MAX);
        assert_eq!(q.held(), 1, "requests of it are still to come");
        q.end_at(30);
        assert_eq!(q.next_due(), Some(20));
        q.advance();
        assert_eq!(q.next_due(), None);
        assert!(!q.sending());
    }
}
