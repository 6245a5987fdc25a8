//! A replay's trace on its way to the fleet during the measured phase (issue #27): the
//! collection calls [`Feeder::pump`] every [`PUMP_EVERY`] (and once right after the plans
//! went out, so the first seconds are there before the start), which reads the trace as
//! far as the window allows ([`crate::replay::Streamer`]) and sends each fleet shard's
//! chunks to the worker holding it, under that worker's own shard index; each `TraceAck`
//! goes back to the streamer ([`Feeder::ack`]) so it reads on. A worker lost mid-run gets
//! nothing more: what falls to its shards is counted as lost, and it holds nobody back.

use super::member::{Member, RunError};
use crate::replay::{self, FileStreamer, Spec};
use crest_model::convert;
use crest_proto::pb::{self, coordinator_message::Msg as Out};
use crest_report::ReplayReport;
use std::time::{Duration, Instant};

/// How often the trace is read on and sent.
pub(super) const PUMP_EVERY: Duration = Duration::from_millis(10);

/// The trace class's index in the plan (a replay has one class).
const CLASS: u32 = 0;

/// A replay's stream to the fleet.
pub(super) struct Feeder {
    streamer: FileStreamer,
    spec: Spec,
    /// Per fleet shard: (member, the member's own shard index).
    owners: Vec<(usize, u32)>,
    /// Per member: its first fleet shard.
    base: Vec<u32>,
    /// Per member: its shards were given up (lost, or done early).
    gone: Vec<bool>,
    /// The run's clock zero (the measured start: a replay has no warm-up).
    start: Instant,
    /// Chunks and bytes sent.
    chunks: u64,
}

impl Feeder {
    /// The stream of `spec` over `members`' shards in plan order, timed from `start`.
    ///
    /// # Errors
    /// [`RunError::Usage`] when a file cannot be opened (it could before the run).
    pub(super) fn new(
        spec: &Spec,
        members: &[Member],
        seed: u64,
        until_ns: u64,
        start: Instant,
    ) -> Result<Self, RunError> {
        let mut owners = Vec::new();
        let mut base = Vec::with_capacity(members.len());
        for (w, m) in members.iter().enumerate() {
            base.push(u32::try_from(owners.len()).unwrap_or(u32::MAX));
            owners.extend((0..m.link.info.shards).map(|s| (w, s)));
        }
        let shards = u32::try_from(owners.len()).unwrap_or(u32::MAX);
        let streamer = replay::open(spec, shards, seed, until_ns).map_err(RunError::Usage)?;
        Ok(Self {
            streamer,
            spec: spec.clone(),
            owners,
            base,
            gone: vec![false; members.len()],
            start,
            chunks: 0,
        })
    }

    /// Reads on as far as the window allows at `now` and sends what it made.
    ///
    /// # Errors
    /// [`RunError::Usage`] naming the file and line when the trace stops being readable
    /// (a truncated `.zst`, a second too dense to spread): the run cannot go on as asked.
    pub(super) async fn pump(
        &mut self,
        members: &[Member],
        run_id: &str,
        now: Instant,
    ) -> Result<(), RunError> {
        for (w, m) in members.iter().enumerate() {
            if !self.gone[w] && (m.lost() || m.done) {
                self.gone[w] = true;
                for (g, _) in self.owners.iter().enumerate().filter(|(_, o)| o.0 == w) {
                    self.streamer
                        .shard_gone(u32::try_from(g).unwrap_or(u32::MAX));
                }
            }
        }
        let now_ns =
            u64::try_from(now.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX);
        let chunks = self
            .streamer
            .pump(now_ns)
            .map_err(|e| RunError::Usage(format!("replay: {e}")))?;
        for (shard, batch) in chunks {
            let Some(&(w, local)) = self.owners.get(shard as usize) else {
                continue;
            };
            if self.gone[w] {
                continue;
            }
            let chunk = convert::batch_to_wire(run_id, CLASS, local, batch);
            self.chunks += 1;
            members[w].link.send(Out::TraceChunk(chunk)).await;
        }
        Ok(())
    }

    /// Member `w` says its shard `a.shard` took `a.consumed` requests in all.
    pub(super) fn ack(&mut self, w: usize, a: &pb::TraceAck) {
        if a.class_index != CLASS {
            return;
        }
        if let Some(&b) = self.base.get(w) {
            self.streamer.ack(b.saturating_add(a.shard), a.consumed);
        }
    }

    /// Whether every shard has its last chunk, and the last request's intended time.
    pub(super) fn finished(&self) -> Option<Duration> {
        self.streamer
            .finished()
            .then(|| Duration::from_nanos(self.streamer.position.last_at_ns))
    }

    /// What the report says of the replay.
    pub(super) fn report(&self) -> ReplayReport {
        let st = &self.streamer;
        let p = &st.position;
        ReplayReport {
            files: self
                .spec
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect(),
            format: self.spec.format.name().to_string(),
            speed: self.spec.retime.is_none().then_some(self.spec.speed),
            amplify: self.spec.keys.amplify.max(1),
            key_prefix: String::from_utf8_lossy(&self.spec.keys.prefix).into_owned(),
            finished: st.finished(),
            records: p.records,
            requests: p.requests,
            sent: p.sent,
            last_at_s: p.last_at_ns as f64 / 1e9,
            by_op: st.by_op(),
            skipped: st
                .skips()
                .into_iter()
                .flat_map(|(file, s)| {
                    s.by_reason
                        .into_iter()
                        .map(move |(why, (n, first))| crest_report::ReplaySkip {
                            file: file.clone(),
                            reason: why.to_string(),
                            lines: n,
                            first_line: first,
                        })
                })
                .collect(),
            reordered: st.reordered(),
            past_profile: st.past_profile(),
            past_end: st.past_end(),
            lost: st.lost(),
            chunks: self.chunks,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::orchestrate::member::fake_fleet;
    use crate::replay::{Keys, Window, cache_ops};
    use crest_trace::Format;
    use crest_trace::clock::Spread;
    use tokio::sync::mpsc;

    type Inbox = mpsc::Receiver<pb::CoordinatorMessage>;

    /// Every chunk a worker was sent so far: (its shard, requests, last).
    fn chunks(rx: &mut Inbox) -> Vec<(u32, u64, bool)> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|m| match m.msg {
                Some(Out::TraceChunk(c)) => Some((c.shard, c.at_ns.len() as u64, c.last)),
                _ => None,
            })
            .collect()
    }

    /// Requests per shard index in `got`.
    fn per_shard(got: &[(u32, u64, bool)], shard: u32) -> u64 {
        got.iter().filter(|c| c.0 == shard).map(|c| c.1).sum()
    }

    /// Two workers (two shards and one): each fleet shard's chunks go to the worker
    /// holding it under its own index, at most the window unacknowledged; an
    /// acknowledgement frees the shard it names (the second worker's shard 0 is fleet
    /// shard 2); a lost worker gets nothing more and its requests are counted, and the
    /// others go on to the end.
    #[tokio::test]
    async fn chunks_go_to_each_shards_worker_acks_free_them_and_a_lost_worker_is_counted() {
        let dir = std::env::temp_dir().join(format!("crest-stream-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("t.csv");
        let text: String = (0..300).map(|i| format!("0,k{i},3,10,1,get,0\n")).collect();
        std::fs::write(&file, text).unwrap();
        let spec = Spec {
            files: vec![file],
            format: Format::Twitter,
            speed: 1.0,
            spread: Spread::Even,
            keys: Keys::default(),
            ops: cache_ops(),
            retime: None,
            window: Window {
                ahead_ns: 60_000_000_000,
                per_shard: 20,
            },
        };
        let (mut members, mut inboxes) = fake_fleet(2);
        members[0].link.info.shards = 2;
        let start = Instant::now();
        let mut f = Feeder::new(&spec, &members, 1, u64::MAX, start).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();

        // Reading stops at the first request whose shard holds its window: no shard
        // has more than 20 unacknowledged, one has all 20.
        f.pump(&members, "r", start).await.unwrap();
        let w0 = chunks(&mut inboxes[0]);
        let w1 = chunks(&mut inboxes[1]);
        let first = [per_shard(&w0, 0), per_shard(&w0, 1), per_shard(&w1, 0)];
        assert!(first.iter().all(|&n| n <= 20), "{first:?}");
        assert!(first.contains(&20), "{first:?}");
        assert!(w1.iter().all(|c| c.0 == 0), "the worker's own shard index");

        // Nothing acknowledged: nothing more.
        f.pump(&members, "r", start).await.unwrap();
        assert!(chunks(&mut inboxes[0]).is_empty() && chunks(&mut inboxes[1]).is_empty());

        // Every shard took what it got: more comes, still at most 20 each.
        let ack = |shard, consumed| pb::TraceAck {
            run_id: "r".into(),
            class_index: 0,
            shard,
            consumed,
        };
        f.ack(0, &ack(0, first[0]));
        f.ack(0, &ack(1, first[1]));
        f.ack(1, &ack(0, first[2]));
        f.pump(&members, "r", start).await.unwrap();
        let w0 = chunks(&mut inboxes[0]);
        let w1 = chunks(&mut inboxes[1]);
        let second = [per_shard(&w0, 0), per_shard(&w0, 1), per_shard(&w1, 0)];
        assert!(second.iter().sum::<u64>() > 0 && second.iter().all(|&n| n <= 20));
        let before_loss = first.iter().chain(&second).sum::<u64>();

        // The first worker is lost: the second, acknowledging as fleet shard 2 (its shard
        // 0), goes on to its last chunk.
        // The first worker is lost: the second goes on to its last chunk.
        members[0].lost = Some("gone".into());
        let mut taken = first[2] + second[2];
        let mut after = 0;
        let mut last = false;
        for _ in 0..100 {
            f.ack(1, &ack(0, taken));
            f.pump(&members, "r", start).await.unwrap();
            let got = chunks(&mut inboxes[1]);
            taken += per_shard(&got, 0);
            after += per_shard(&got, 0);
            last |= got.iter().any(|c| c.2);
            if f.finished().is_some() {
                break;
            }
        }
        assert!(
            chunks(&mut inboxes[0]).is_empty(),
            "a lost worker gets nothing"
        );
        assert!(last, "the second worker's last chunk says so");
        let r = f.report();
        assert!(r.finished);
        assert_eq!(r.records, 300);
        assert_eq!(r.sent + r.lost, 300, "{r:?}");
        assert_eq!(r.sent, before_loss + after, "{r:?}");
        assert!(r.lost > 0);
    }
}
