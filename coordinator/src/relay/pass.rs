//! What a relay changes in the messages it passes on: its registration upstream (its
//! workers' shards and cores as one worker's), each worker's part of a plan (its own
//! shards' plans, renumbered, and the start in its own clock), and acknowledgements
//! (checkpoints reached, steering followed) that go upstream once every worker sent its
//! own.

use crest_proto::pb;
use std::collections::BTreeMap;

/// A worker under the relay, as the split needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// Its shards.
    pub shards: u32,
    /// Its clock minus the relay's, ns (from the relay's pings).
    pub offset_ns: i64,
}

/// The relay's registration upstream: one worker with every shard and core of `workers`
/// (in their order: the order the plan's shards are split back in).
pub fn register(relay: &pb::Register, workers: &[pb::Register]) -> pb::Register {
    pb::Register {
        shards: workers.iter().map(|w| w.shards).sum(),
        cpus: workers
            .iter()
            .flat_map(|w| w.cpus.iter().copied())
            .collect(),
        ..relay.clone()
    }
}

/// A plan the relay cannot split over its workers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// The message holds no plan.
    #[error("the start message holds no plan")]
    NoPlan,
    /// Not one shard plan per shard of the relay.
    #[error(
        "the plan holds {plans} shard plans with shard indices {indices}, not one for each of this relay's {shards} shards (0 to {last})",
        last = shards.saturating_sub(1)
    )]
    Shards {
        /// Shard plans in the message.
        plans: usize,
        /// Their indices, as listed.
        indices: String,
        /// The relay's shards.
        shards: u32,
    },
    /// A worker's clock offset puts the start out of range.
    #[error("worker {0}'s clock offset puts the start out of range")]
    Offset(usize),
}

/// Each worker's start message: the plan with only its shards (renumbered from 0 within
/// the worker, their cluster-wide `global_index` and everything else kept) and the start
/// instant moved from the relay's clock into the worker's.
///
/// # Errors
/// [`SplitError`] when the plan does not hold exactly one shard plan per shard of the
/// relay, or an offset overflows the start.
pub fn split(start: &pb::StartRun, members: &[Member]) -> Result<Vec<pb::StartRun>, SplitError> {
    let plan = start.plan.as_ref().ok_or(SplitError::NoPlan)?;
    let shards: u32 = members.iter().map(|m| m.shards).sum();
    let mut by_index: Vec<Option<&pb::ShardPlan>> = vec![None; shards as usize];
    let fits = plan.shards.len() == shards as usize
        && plan.shards.iter().all(|s| {
            by_index
                .get_mut(s.shard as usize)
                .is_some_and(|slot| slot.replace(s).is_none())
        });
    if !fits {
        let indices: Vec<String> = plan.shards.iter().map(|s| s.shard.to_string()).collect();
        return Err(SplitError::Shards {
            plans: plan.shards.len(),
            indices: indices.join(","),
            shards,
        });
    }
    let mut next = by_index.into_iter().flatten();
    members
        .iter()
        .enumerate()
        .map(|(w, m)| {
            let mut part = plan.clone();
            part.shards = (0..m.shards)
                .zip(next.by_ref())
                .map(|(i, s)| pb::ShardPlan {
                    shard: i,
                    ..s.clone()
                })
                .collect();
            Ok(pb::StartRun {
                plan: Some(part),
                start_at_unix_ns: start
                    .start_at_unix_ns
                    .checked_add(m.offset_ns)
                    .ok_or(SplitError::Offset(w))?,
            })
        })
        .collect()
}

/// Acknowledgements to sum before they go upstream, by key (a checkpoint's index, a
/// steering change's `seq`): one goes up once every worker sent its own, with the earliest
/// first instant and the latest last instant of all.
#[derive(Debug)]
pub struct Acks {
    workers: usize,
    /// Per key: which workers acknowledged, how many, and the span so far.
    open: BTreeMap<u32, (Vec<bool>, usize, u64, u64)>,
}

/// Keys open at once, at most: a run's checkpoints and changes are acknowledged in order,
/// so more means a worker acknowledges what was never asked.
pub const MAX_OPEN: usize = 1024;

impl Acks {
    /// None yet, for `workers` workers.
    pub fn new(workers: usize) -> Self {
        Self {
            workers,
            open: BTreeMap::new(),
        }
    }

    /// Worker `w` acknowledged `key` over `first..=last` (run clock, ns; a checkpoint has
    /// no span: 0, 0). Returns the whole span once every worker has acknowledged `key`;
    /// a repeat, an unknown worker, or one key too many is ignored.
    pub fn ack(&mut self, w: usize, key: u32, first: u64, last: u64) -> Option<(u64, u64)> {
        if w >= self.workers || (!self.open.contains_key(&key) && self.open.len() >= MAX_OPEN) {
            return None;
        }
        let workers = self.workers;
        let e = self
            .open
            .entry(key)
            .or_insert_with(|| (vec![false; workers], 0, u64::MAX, 0));
        if std::mem::replace(&mut e.0[w], true) {
            return None;
        }
        e.1 += 1;
        e.2 = e.2.min(first);
        e.3 = e.3.max(last);
        if e.1 < workers {
            return None;
        }
        self.open.remove(&key).map(|(_, _, f, l)| (f, l))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn start(indices: &[u32]) -> pb::StartRun {
        pb::StartRun {
            plan: Some(pb::RunPlan {
                run_id: "r".into(),
                total_shards: 40,
                shards: indices
                    .iter()
                    .map(|&i| pb::ShardPlan {
                        shard: i,
                        global_index: 100 + i,
                        share: 0.01 * f64::from(i + 1),
                        seed: u64::from(i),
                        classes: vec![],
                    })
                    .collect(),
                ..Default::default()
            }),
            start_at_unix_ns: 1_000_000,
        }
    }

    /// Each worker gets its own shards, in order, renumbered, with their global indices,
    /// shares and seeds, and the start in its clock.
    #[test]
    fn each_worker_gets_its_own_shards_and_its_own_start() {
        let members = [
            Member {
                shards: 2,
                offset_ns: 500,
            },
            Member {
                shards: 1,
                offset_ns: -250,
            },
        ];
        let parts = split(&start(&[2, 0, 1]), &members).unwrap();
        assert_eq!(parts.len(), 2);
        let shards = |p: &pb::StartRun| -> Vec<(u32, u32, u64)> {
            let plan = p.plan.as_ref().unwrap();
            plan.shards
                .iter()
                .map(|s| (s.shard, s.global_index, s.seed))
                .collect()
        };
        assert_eq!(shards(&parts[0]), vec![(0, 100, 0), (1, 101, 1)]);
        assert_eq!(shards(&parts[1]), vec![(0, 102, 2)]);
        assert_eq!(parts[0].start_at_unix_ns, 1_000_500);
        assert_eq!(parts[1].start_at_unix_ns, 999_750);
        assert_eq!(parts[1].plan.as_ref().unwrap().total_shards, 40);
    }

    /// A plan that does not hold one shard plan per shard of the relay is refused, naming
    /// what it holds and what would be right.
    #[test]
    fn a_plan_for_other_shards_is_refused() {
        let members = [Member {
            shards: 2,
            offset_ns: 0,
        }];
        for indices in [&[0][..], &[0, 0], &[0, 2], &[0, 1, 2]] {
            let e = split(&start(indices), &members).unwrap_err();
            assert!(
                e.to_string()
                    .contains("not one for each of this relay's 2 shards (0 to 1)"),
                "{e}"
            );
        }
        let e = split(&pb::StartRun::default(), &members).unwrap_err();
        assert_eq!(e, SplitError::NoPlan);
        let far = Member {
            shards: 2,
            offset_ns: i64::MAX,
        };
        assert_eq!(
            split(&start(&[0, 1]), &[far]).unwrap_err(),
            SplitError::Offset(0)
        );
    }

    /// The registration upstream holds every worker's shards and cores, in order.
    #[test]
    fn the_relay_registers_as_its_workers_shards() {
        let w = |shards, cpus: Vec<u32>| pb::Register {
            shards,
            cpus,
            name: "w".into(),
            ..Default::default()
        };
        let relay = pb::Register {
            name: "relay-a".into(),
            worker_id: "id".into(),
            ..Default::default()
        };
        let r = register(&relay, &[w(2, vec![2, 3]), w(1, vec![5])]);
        assert_eq!((r.shards, r.cpus.clone()), (3, vec![2, 3, 5]));
        assert_eq!((r.name.as_str(), r.worker_id.as_str()), ("relay-a", "id"));
    }

    /// An acknowledgement goes up once, when the last worker sends its own, spanning all
    /// of theirs; repeats and strangers change nothing.
    #[test]
    fn acknowledgements_go_up_once_every_worker_sent_its_own() {
        let mut a = Acks::new(3);
        assert_eq!(a.ack(0, 1, 50, 60), None);
        assert_eq!(a.ack(0, 1, 10, 900), None, "a repeat is ignored");
        assert_eq!(a.ack(7, 1, 0, 0), None, "no worker 7");
        assert_eq!(a.ack(2, 1, 40, 70), None);
        assert_eq!(a.ack(1, 2, 5, 5), None, "another key waits on its own");
        assert_eq!(a.ack(1, 1, 45, 65), Some((40, 70)));
        assert_eq!(
            a.ack(0, 1, 1, 1),
            None,
            "a new round for the key starts over"
        );
        let mut b = Acks::new(1);
        for k in 0..MAX_OPEN as u32 {
            assert_eq!(b.ack(0, k, 0, 0), Some((0, 0)));
        }
    }
}
