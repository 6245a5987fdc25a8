//! Each interval index held until every worker of the run has sent it or a later one (or
//! finished): then nothing more can come for it, and it is summed and forwarded. Each
//! worker sends its indices in increasing order, each once (a message out of order is
//! refused); what is held is bounded in bytes, and past the bound the relay fails its run
//! rather than grow (a worker that far behind cannot be summed on time).

use crest_proto::pb;
use prost::Message;
use std::collections::BTreeMap;

/// Bytes of interval messages a relay holds at most (about 300 intervals of 100 workers
/// with ten commands each).
pub const MAX_HELD_BYTES: usize = 256 << 20;

/// Why a worker's interval message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatherError {
    /// Not above the worker's previous index (workers send in increasing order).
    #[error("worker {worker} sent interval {index} after {previous}")]
    Order {
        /// The worker, by its place in the relay's list.
        worker: usize,
        /// The index it sent.
        index: u32,
        /// The index it sent before.
        previous: u32,
    },
    /// It came after the worker's final message, or the index was forwarded already.
    #[error("worker {worker} sent interval {index}, which is closed")]
    Closed {
        /// The worker.
        worker: usize,
        /// The index it sent.
        index: u32,
    },
    /// Holding it would pass [`MAX_HELD_BYTES`].
    #[error(
        "{held} bytes of intervals are waiting for worker {slowest} (at most {MAX_HELD_BYTES})"
    )]
    Full {
        /// Bytes held.
        held: usize,
        /// The worker furthest behind.
        slowest: usize,
    },
    /// No such worker.
    #[error("no worker {0} in this run")]
    Worker(usize),
}

/// One run's intervals waiting for some worker.
#[derive(Debug)]
pub struct Gather {
    /// Messages by index: their encoded bytes together (counted in `held_bytes` once, on
    /// arrival), and each (worker, message).
    held: BTreeMap<u32, (usize, Vec<(usize, pb::Interval)>)>,
    held_bytes: usize,
    /// Each worker's highest index sent.
    last: Vec<Option<u32>>,
    /// Each worker's final message came.
    done: Vec<bool>,
    /// Indices below this were taken.
    taken_below: u32,
}

impl Gather {
    /// Nothing held, for a run of `workers` workers.
    pub fn new(workers: usize) -> Self {
        Self {
            held: BTreeMap::new(),
            held_bytes: 0,
            last: vec![None; workers],
            done: vec![false; workers],
            taken_below: 0,
        }
    }

    /// Holds worker `w`'s message.
    ///
    /// # Errors
    /// [`GatherError`] when it is out of order, closed, or past the bound.
    pub fn receive(&mut self, w: usize, iv: pb::Interval) -> Result<(), GatherError> {
        let (Some(last), Some(done)) = (self.last.get(w), self.done.get(w)) else {
            return Err(GatherError::Worker(w));
        };
        if *done || iv.index < self.taken_below {
            return Err(GatherError::Closed {
                worker: w,
                index: iv.index,
            });
        }
        if let Some(previous) = *last
            && iv.index <= previous
        {
            return Err(GatherError::Order {
                worker: w,
                index: iv.index,
                previous,
            });
        }
        let bytes = iv.encoded_len();
        if self.held_bytes.saturating_add(bytes) > MAX_HELD_BYTES {
            return Err(GatherError::Full {
                held: self.held_bytes,
                slowest: self.slowest(),
            });
        }
        self.held_bytes += bytes;
        self.last[w] = Some(iv.index);
        let e = self.held.entry(iv.index).or_default();
        e.0 += bytes;
        e.1.push((w, iv));
        Ok(())
    }

    /// Worker `w` sent its final message: it sends no more intervals.
    pub fn finish(&mut self, w: usize) {
        if let Some(d) = self.done.get_mut(w) {
            *d = true;
        }
    }

    /// The worker that sent the lowest index among those not finished.
    fn slowest(&self) -> usize {
        (0..self.last.len())
            .filter(|&w| !self.done[w])
            .min_by_key(|&w| self.last[w].map_or(-1, i64::from))
            .unwrap_or(0)
    }

    /// The indices below which every worker has said all it will: `None` bounds nothing
    /// (every worker finished).
    fn complete_below(&self) -> Option<u32> {
        self.last
            .iter()
            .zip(&self.done)
            .filter(|(_, done)| !**done)
            .map(|(last, _)| last.map_or(0, |l| l.saturating_add(1)))
            .min()
    }

    /// The lowest held index that nothing more can come for, with its messages (by
    /// worker, in arrival order); None while every held index may still grow.
    pub fn take(&mut self) -> Option<(u32, Vec<(usize, pb::Interval)>)> {
        let (&index, _) = self.held.first_key_value()?;
        if self.complete_below().is_some_and(|below| index >= below) {
            return None;
        }
        let (index, (bytes, msgs)) = self.held.pop_first()?;
        self.held_bytes = self.held_bytes.saturating_sub(bytes);
        self.taken_below = index.saturating_add(1);
        Some((index, msgs))
    }

    /// Indices held.
    pub fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn iv(index: u32) -> pb::Interval {
        pb::Interval {
            index,
            ..Default::default()
        }
    }

    fn indices(g: &mut Gather) -> Vec<(u32, Vec<usize>)> {
        std::iter::from_fn(|| g.take())
            .map(|(k, m)| (k, m.iter().map(|(w, _)| *w).collect()))
            .collect()
    }

    /// An index goes when every worker sent it or later, or finished; a worker that skips
    /// an index does not hold it back; nothing goes twice.
    #[test]
    fn an_index_goes_once_every_worker_is_at_or_past_it() {
        let mut g = Gather::new(3);
        g.receive(0, iv(0)).unwrap();
        g.receive(1, iv(0)).unwrap();
        g.receive(0, iv(1)).unwrap();
        assert_eq!(indices(&mut g), vec![], "worker 2 sent nothing yet");
        g.receive(2, iv(0)).unwrap();
        assert_eq!(indices(&mut g), vec![(0, vec![0, 1, 2])]);
        // Worker 1 skips index 1 (it completed nothing there) and sends 2.
        g.receive(1, iv(2)).unwrap();
        g.receive(2, iv(1)).unwrap();
        assert_eq!(indices(&mut g), vec![(1, vec![0, 2])]);
        assert_eq!(g.held(), 1);
        g.finish(0);
        g.finish(2);
        assert_eq!(indices(&mut g), vec![(2, vec![1])]);
        g.finish(1);
        assert_eq!(indices(&mut g), vec![]);
        assert_eq!(g.held_bytes, 0);
    }

    /// Out of order, after a final, after its index went, or from nobody: refused, and the
    /// held messages are untouched.
    #[test]
    fn messages_out_of_order_or_closed_are_refused() {
        let mut g = Gather::new(2);
        g.receive(0, iv(3)).unwrap();
        assert_eq!(
            g.receive(0, iv(3)),
            Err(GatherError::Order {
                worker: 0,
                index: 3,
                previous: 3
            })
        );
        assert_eq!(g.receive(7, iv(0)), Err(GatherError::Worker(7)));
        g.receive(1, iv(5)).unwrap();
        assert_eq!(indices(&mut g), vec![(3, vec![0])]);
        assert_eq!(
            g.receive(1, iv(2)),
            Err(GatherError::Closed {
                worker: 1,
                index: 2
            })
        );
        g.finish(0);
        assert_eq!(
            g.receive(0, iv(9)),
            Err(GatherError::Closed {
                worker: 0,
                index: 9
            })
        );
        assert_eq!(indices(&mut g), vec![(5, vec![1])]);
    }

    /// Held bytes are bounded: past the bound the message is refused naming the worker
    /// everyone waits for.
    #[test]
    fn what_is_held_is_bounded() {
        let mut g = Gather::new(2);
        let big = |index| pb::Interval {
            index,
            run_id: "x".repeat(8 << 20),
            ..Default::default()
        };
        let mut refused = None;
        for k in 0..64 {
            if let Err(e) = g.receive(0, big(k)) {
                refused = Some(e);
                break;
            }
        }
        match refused {
            Some(GatherError::Full { held, slowest: 1 }) => {
                assert!(held <= MAX_HELD_BYTES && held > MAX_HELD_BYTES - (9 << 20));
            }
            other => panic!("expected Full naming worker 1, got {other:?}"),
        }
    }
}
