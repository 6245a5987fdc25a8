//! The relay's arithmetic: its workers' messages for one interval index summed into one
//! interval message, and their final messages into one final message, exactly (histograms
//! bucket by bucket, re-encoded byte for byte as a worker encodes them), so the
//! coordinator's books read a relay as one worker whose results are its workers' and
//! check its intervals against its final as they check a worker's.
//!
//! Error kinds go through one [`Kinds`] per run, as a worker folds its shards' kinds: the
//! union of the workers' kinds is bounded by 32 again, and each kind's first message goes
//! upstream once, with the interval it was first summed in.

use crate::merge::{self, SumBy};
use crest_engine::target_tls::Handshakes;
use crest_model::convert;
use crest_model::hist::{HistError, SparseDecoder};
use crest_model::stats::{ClassCounts, ErrorCounts, Kinds, NodeStats, add_error, fold_kinds};
use crest_proto::pb;
use crest_report::rules::Load;
use std::collections::BTreeMap;

/// A worker's message that could not be summed.
#[derive(Debug, thiserror::Error)]
#[error("worker {worker}: {error}")]
pub struct Unsummable {
    /// The worker, by its place in the relay's list.
    pub worker: usize,
    /// What was wrong.
    pub error: HistError,
}

/// One run's sums: the kinds seen so far and the buffers reused from message to message.
#[derive(Debug, Default)]
pub struct Summer {
    kinds: Kinds,
    de: SparseDecoder,
    /// Per (class, command), reused: cleared, not freed, between intervals.
    by_key: SumBy,
    key: (String, String),
}

impl Summer {
    /// A new run's sums.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one worker's commands into the per-key sums, all or nothing: every histogram
    /// of the message is decoded before any is added. On an error the sums are emptied:
    /// what came before it in the same call (other workers' messages) is dropped with it.
    fn add_commands(
        &mut self,
        w: usize,
        messages: &[pb::ErrorMessage],
        commands: &[pb::CommandStats],
    ) -> Result<(), Unsummable> {
        let decoded = commands
            .iter()
            .map(|c| convert::delta_from_pb(c, &mut self.de))
            .collect::<Result<Vec<_>, _>>();
        let decoded = match decoded {
            Ok(d) => d,
            Err(error) => {
                self.clear();
                return Err(Unsummable { worker: w, error });
            }
        };
        // Kinds with their messages first, so a new kind is admitted with its text.
        for (kind, message) in convert::messages_from_pb(messages) {
            self.kinds.fold(&kind, Some(&message));
        }
        for (class, name, mut s) in decoded {
            fold_kinds(&mut s.errors, &mut self.kinds);
            merge::set_key(&mut self.key, class, name);
            merge::add_keyed(&mut self.by_key, &self.key, &s);
            for h in [s.latency, s.service_time, s.schedule_lag] {
                self.de.recycle(h);
            }
        }
        Ok(())
    }

    /// Empties the per-key sums.
    fn clear(&mut self) {
        for s in self.by_key.values_mut() {
            s.clear();
        }
    }

    /// The per-key sums as commands, each key every worker sent since the last call, and
    /// the sums cleared.
    fn take_commands(&mut self, seen: &BTreeMap<(String, String), ()>) -> Vec<pb::CommandStats> {
        let mut out = Vec::with_capacity(seen.len());
        for (key, s) in &mut self.by_key {
            if seen.contains_key(key) {
                out.push(convert::cmd_to_pb(&key.0, &key.1, s));
            }
            s.clear();
        }
        out
    }

    /// The one interval message for index `index` of run `run_id` that `msgs` (each
    /// worker's message for that index, by worker) add up to: counts and histograms summed
    /// per (class, command), rates, shard CPU, preemptions and queued time summed, the
    /// busiest shard the busiest of all, and the kinds first seen in it with their messages.
    ///
    /// # Errors
    /// [`Unsummable`] naming the first worker whose histograms do not decode (nothing of
    /// the index is summed: the relay cannot forward it, and leaves the run).
    pub fn interval<'a>(
        &mut self,
        run_id: &str,
        index: u32,
        msgs: impl IntoIterator<Item = (usize, &'a pb::Interval)>,
    ) -> Result<pb::Interval, Unsummable> {
        let mut load = Load::default();
        let mut target_rate = 0.0;
        let mut seen = BTreeMap::new();
        for (w, iv) in msgs {
            self.add_commands(w, &iv.error_messages, &iv.commands)?;
            for c in &iv.commands {
                seen.insert((c.class.clone(), c.command.clone()), ());
            }
            target_rate += iv.target_rate;
            load.add(crate::merge::load_of(iv));
        }
        Ok(pb::Interval {
            run_id: run_id.to_string(),
            index,
            commands: self.take_commands(&seen),
            target_rate,
            error_messages: convert::messages_to_pb(&self.kinds.take_new()),
            shard_cpu_ns: load.cpu_ns,
            busiest_shard: load.busiest,
            shard_preemptions: load.preemptions,
            shard_queued_ns: load.queued_ns,
            shard_steal_ns: load.steal_ns,
            connections_opened: load.connections_opened,
        })
    }

    /// The one final message `finals` (each worker's, by worker) add up to, for a relay
    /// that forwarded `intervals` interval messages in the run.
    ///
    /// # Errors
    /// [`Unsummable`] naming the first worker whose histograms do not decode.
    pub fn finished<'a>(
        &mut self,
        run_id: &str,
        intervals: u32,
        finals: impl IntoIterator<Item = (usize, &'a pb::Finished)>,
    ) -> Result<pb::Finished, Unsummable> {
        let mut seen = BTreeMap::new();
        let (mut in_flight, mut unsent) = (0u64, 0u64);
        let mut connection_errors = ErrorCounts::new();
        let mut tls: Option<Handshakes> = None;
        let mut classes: BTreeMap<String, ClassCounts> = BTreeMap::new();
        let mut nodes: Vec<NodeStats> = Vec::new();
        let mut connections = crest_model::stats::ConnLife::default();
        for (w, f) in finals {
            self.add_commands(w, &f.error_messages, &f.totals)?;
            for c in &f.totals {
                seen.insert((c.class.clone(), c.command.clone()), ());
            }
            in_flight = in_flight.saturating_add(f.in_flight);
            unsent = unsent.saturating_add(f.unsent);
            for (k, n) in convert::errors_from_pb(&f.connection_errors) {
                add_error(&mut connection_errors, &k, n);
            }
            if let Some(t) = &f.tls {
                tls.get_or_insert_with(Handshakes::default)
                    .add(&Handshakes {
                        full: t.full,
                        resumed: t.resumed,
                        version: t.version.clone(),
                        cipher: t.cipher.clone(),
                    });
            }
            for (class, c) in merge::class_counts_from_pb(&f.classes).map_err(|e| Unsummable {
                worker: w,
                error: HistError::Decode(e.to_string()),
            })? {
                classes.entry(class).or_default().add(&c);
            }
            match convert::conn_life_from_pb(f.connections.as_ref()) {
                Ok(c) => connections.add(&c),
                Err(e) => {
                    self.clear();
                    return Err(Unsummable {
                        worker: w,
                        error: HistError::Decode(e.to_string()),
                    });
                }
            }
            let theirs = match convert::nodes_from_pb(&f.nodes) {
                Ok(n) => n,
                Err(e) => {
                    self.clear();
                    return Err(Unsummable {
                        worker: w,
                        error: HistError::Decode(e.to_string()),
                    });
                }
            };
            for n in theirs {
                match nodes.iter().position(|m| m.addr == n.addr) {
                    Some(i) => nodes[i].add(&n),
                    None if nodes.len() < crest_model::topology::MAX_NODES => nodes.push(n),
                    None => {}
                }
            }
        }
        // Kinds first seen in the finals go with them; every kind's first message is in
        // `error_messages` (as a worker's final lists them).
        self.kinds.take_new();
        Ok(pb::Finished {
            run_id: run_id.to_string(),
            totals: self.take_commands(&seen),
            in_flight,
            unsent,
            intervals,
            connection_errors: convert::errors_to_pb(&connection_errors),
            error_messages: convert::messages_to_pb(&self.kinds.all()),
            tls: tls.map(|t| pb::TlsStats {
                full: t.full,
                resumed: t.resumed,
                version: t.version,
                cipher: t.cipher,
            }),
            classes: classes
                .into_iter()
                .map(|(class, c)| convert::class_counts_to_pb(&class, &c))
                .collect(),
            nodes: convert::nodes_to_pb(&nodes),
            connections: Some(convert::conn_life_to_pb(&connections)),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::cli::{RunArgs, to_config};
    use crate::config::RateArg;
    use crate::merge::RunBooks;
    use crate::relay::gather::Gather;
    use crest_model::hist;
    use crest_model::stats::{CmdStats, MAX_KINDS};
    use proptest::prelude::*;
    use std::time::Duration;

    /// One command's part of one worker's interval: its key, latency values, and error
    /// counts by kind (indices into `kind`).
    type Part = (usize, Vec<u64>, Vec<(usize, u64)>);

    const KEYS: [(&str, &str); 3] = [("c", "GET"), ("c", "SET"), ("c", "DEL")];

    fn kind(i: usize) -> String {
        format!("E{i}")
    }

    fn stats(values: &[u64], errors: &[(usize, u64)]) -> CmdStats {
        let mut s = CmdStats {
            completed: values.len() as u64,
            ..Default::default()
        };
        for &v in values {
            hist::record(&mut s.latency, v);
            hist::record(&mut s.service_time, v / 2);
            hist::record(&mut s.schedule_lag, v / 3);
        }
        for &(k, n) in errors {
            add_error(&mut s.errors, &kind(k), n);
        }
        s.scheduled = s.completed + s.error_total();
        s.sent = s.scheduled;
        s
    }

    /// A worker's interval messages (None: it sent nothing for that index) and its final
    /// message, as a worker makes them: the final holds the sum of its intervals.
    fn worker(intervals: &[Option<Vec<Part>>]) -> (Vec<pb::Interval>, pb::Finished) {
        let mut totals: BTreeMap<usize, CmdStats> = BTreeMap::new();
        let mut seen_kinds = Vec::new();
        let mut out = Vec::new();
        for (index, parts) in intervals.iter().enumerate() {
            let Some(parts) = parts else { continue };
            let mut commands = Vec::new();
            let mut messages = Vec::new();
            for (key, values, errors) in parts {
                let s = stats(values, errors);
                for &(k, _) in errors {
                    if !seen_kinds.contains(&k) {
                        seen_kinds.push(k);
                        messages.push((kind(k), format!("{} went wrong", kind(k))));
                    }
                }
                *totals.entry(*key).or_default() += &s;
                commands.push(convert::cmd_to_pb(KEYS[*key].0, KEYS[*key].1, &s));
            }
            out.push(pb::Interval {
                run_id: "r".into(),
                index: index as u32,
                commands,
                target_rate: 10.0,
                error_messages: convert::messages_to_pb(&messages),
                shard_cpu_ns: 1_000 + index as u64,
                busiest_shard: 0.1 * (index % 5) as f64,
                shard_preemptions: (index % 3) as u64,
                shard_queued_ns: 7_000 * index as u64,
                shard_steal_ns: 10_000_000 * (index % 2) as u64,
                connections_opened: (index % 4) as u64,
            });
        }
        let final_ = pb::Finished {
            run_id: "r".into(),
            totals: totals
                .iter()
                .map(|(key, s)| convert::cmd_to_pb(KEYS[*key].0, KEYS[*key].1, s))
                .collect(),
            intervals: out.len() as u32,
            ..Default::default()
        };
        (out, final_)
    }

    fn part() -> impl Strategy<Value = Part> {
        (
            0..KEYS.len(),
            proptest::collection::vec(1u64..50_000_000, 0..60),
            proptest::collection::vec((0usize..40, 1u64..5), 0..3),
        )
    }

    fn books(workers: usize, intervals: u32) -> RunBooks {
        let c = to_config(RunArgs {
            target: crate::cli::TargetArgs {
                target: Some("127.0.0.1:1".into()),
                ..Default::default()
            },
            pace: crate::cli::PaceArgs {
                rate: Some(RateArg::Rps(10.0)),
                ..Default::default()
            },
            load: crate::cli::LoadArgs {
                duration: Some(Duration::from_secs(u64::from(intervals))),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        RunBooks::new(&c, workers, intervals + 2, Some(intervals - 1), None)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// The coordinator's books reading one relay read exactly what they read from the
        /// relay's workers directly: the same totals (every count, every histogram bucket),
        /// the same timeline, and the relay's intervals add up to its final.
        #[test]
        fn books_read_a_relay_as_its_workers(
            fleet in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::option::weighted(0.85, proptest::collection::vec(part(), 0..4)),
                    1..5),
                1..4),
        ) {
            let n = fleet.iter().map(Vec::len).max().unwrap() as u32;
            let workers: Vec<_> = fleet.iter().map(|w| worker(w)).collect();

            let mut direct = books(workers.len(), n);
            for k in 0..n {
                for (w, (ivs, _)) in workers.iter().enumerate() {
                    for iv in ivs.iter().filter(|iv| iv.index == k) {
                        direct.receive(w, iv.clone()).unwrap();
                    }
                }
            }
            for (w, (_, f)) in workers.iter().enumerate() {
                direct.finish(w, f).unwrap();
            }
            prop_assert!(direct.advance(&vec![false; workers.len()]).is_empty());

            let mut relayed = books(1, n);
            let (mut gather, mut summer, mut sent) = (Gather::new(workers.len()), Summer::new(), 0);
            let forward = |g: &mut Gather, s: &mut Summer, b: &mut RunBooks, sent: &mut u32| {
                while let Some((k, msgs)) = g.take() {
                    let iv = s.interval("r", k, msgs.iter().map(|(w, iv)| (*w, iv))).unwrap();
                    b.receive(0, iv).unwrap();
                    *sent += 1;
                }
            };
            for k in 0..n {
                for (w, (ivs, _)) in workers.iter().enumerate() {
                    for iv in ivs.iter().filter(|iv| iv.index == k) {
                        gather.receive(w, iv.clone()).unwrap();
                    }
                }
                forward(&mut gather, &mut summer, &mut relayed, &mut sent);
            }
            for w in 0..workers.len() {
                gather.finish(w);
            }
            forward(&mut gather, &mut summer, &mut relayed, &mut sent);
            let f = summer
                .finished("r", sent, workers.iter().enumerate().map(|(w, (_, f))| (w, f)))
                .unwrap();
            relayed.finish(0, &f).unwrap();
            prop_assert!(relayed.advance(&[false]).is_empty());

            prop_assert_eq!(relayed.workers[0].check("relay", "-"), Vec::<String>::new());
            for (w, b) in direct.workers.iter().enumerate() {
                prop_assert_eq!(b.check(&format!("w{w}"), "-"), Vec::<String>::new());
            }
            prop_assert_eq!(direct.totals.keys().collect::<Vec<_>>(), relayed.totals.keys().collect::<Vec<_>>());
            let kinds: std::collections::BTreeSet<_> = fleet.iter().flatten().flatten().flatten()
                .flat_map(|(_, _, e)| e.iter().map(|(k, _)| *k)).collect();
            for (key, d) in &direct.totals {
                let (d, r) = (d.to_stats(), relayed.totals[key].to_stats());
                prop_assert_eq!(d.scheduled, r.scheduled);
                prop_assert_eq!(d.completed, r.completed);
                prop_assert_eq!(d.error_total(), r.error_total());
                prop_assert_eq!(&d.latency, &r.latency);
                prop_assert_eq!(&d.service_time, &r.service_time);
                prop_assert_eq!(&d.schedule_lag, &r.schedule_lag);
                if kinds.len() <= MAX_KINDS {
                    prop_assert_eq!(&d.errors, &r.errors);
                }
            }
            if kinds.len() <= MAX_KINDS {
                prop_assert_eq!(&direct.timeline, &relayed.timeline);
                prop_assert_eq!(direct.error_messages(), relayed.error_messages());
            } else {
                prop_assert_eq!(direct.timeline.len(), relayed.timeline.len());
                for (d, r) in direct.timeline.iter().zip(&relayed.timeline) {
                    prop_assert_eq!(d.scheduled, r.scheduled);
                    prop_assert_eq!(d.errors, r.errors);
                    prop_assert_eq!(&d.latency_us, &r.latency_us);
                }
            }
        }
    }

    /// A worker whose histograms do not decode is named, and nothing of that call is
    /// summed: the next interval holds only its own messages.
    #[test]
    fn an_unreadable_worker_is_named_and_nothing_of_it_is_summed() {
        let (good, _) = worker(&[Some(vec![(0, vec![1_000, 2_000], vec![])])]);
        let mut bad = good[0].clone();
        bad.commands[0].latency = Some(pb::Histogram {
            v2: vec![0x1c, 0x84, 0x93, 0x13, 0, 0].into(),
        });
        let mut s = Summer::new();
        let e = s
            .interval("r", 0, [(0, &good[0]), (1, &bad)])
            .expect_err("worker 1's histogram is cut short");
        assert_eq!(e.worker, 1);
        assert!(
            e.to_string()
                .starts_with("worker 1: histogram does not decode"),
            "{e}"
        );
        let iv = s.interval("r", 1, [(0, &good[0])]).unwrap();
        assert_eq!(iv.commands.len(), 1);
        assert_eq!(
            iv.commands[0].completed, 2,
            "worker 0's first part was dropped"
        );
    }

    /// Finals: counts, TLS handshakes, pushes and per-node results summed; nodes merged by
    /// address.
    #[test]
    fn finals_sum_everything_a_worker_reports() {
        let node = |addr: &str, completed, latency: &[u64]| {
            let mut n = NodeStats::new(addr);
            n.completed = completed;
            n.connections = 2;
            for &v in latency {
                hist::record(&mut n.latency, v);
            }
            n
        };
        let f = |nodes: Vec<NodeStats>, full, pushes| pb::Finished {
            run_id: "r".into(),
            in_flight: 3,
            unsent: 4,
            connection_errors: vec![pb::ErrorCount {
                kind: "refused".into(),
                count: 1,
            }],
            tls: Some(pb::TlsStats {
                full,
                resumed: 1,
                version: "TLSv1_3".into(),
                cipher: "TLS13_AES_128_GCM_SHA256".into(),
            }),
            classes: vec![pb::ClassCounts {
                class: "c".into(),
                pushes,
                invalidations: 1,
                stale_checked: 10,
                stale: 2,
                behind: Some(pb::Histogram {
                    v2: crest_model::hist::encode_wire(&{
                        let mut h = crest_model::hist::new_hist();
                        crest_model::hist::record(&mut h, 1_000_000);
                        crest_model::hist::record(&mut h, 3_000_000);
                        h
                    })
                    .into(),
                }),
            }],
            nodes: convert::nodes_to_pb(&nodes),
            ..Default::default()
        };
        let a = f(
            vec![node("n1:1", 5, &[100, 200]), node("n2:1", 1, &[300])],
            2,
            7,
        );
        let b = f(vec![node("n2:1", 2, &[400, 500])], 3, 1);
        let out = Summer::new().finished("r", 9, [(0, &a), (1, &b)]).unwrap();
        assert_eq!((out.in_flight, out.unsent, out.intervals), (6, 8, 9));
        assert_eq!(out.connection_errors[0].count, 2);
        let tls = out.tls.unwrap();
        assert_eq!(
            (tls.full, tls.resumed, tls.version.as_str()),
            (5, 2, "TLSv1_3")
        );
        assert_eq!(
            (out.classes[0].pushes, out.classes[0].invalidations),
            (8, 2)
        );
        let c = convert::class_counts_from_pb(&out.classes[0]).unwrap();
        assert_eq!((c.stale_checked, c.stale), (20, 4));
        assert_eq!(c.behind.unwrap().len(), 4, "both workers' stale reads");
        let nodes = convert::nodes_from_pb(&out.nodes).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!((nodes[1].addr.as_str(), nodes[1].completed), ("n2:1", 3));
        assert_eq!(nodes[1].connections, 4);
        assert_eq!(nodes[1].latency.len(), 3);
    }
}
