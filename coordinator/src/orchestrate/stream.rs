//! A replay's trace on its way to the fleet during the measured phase (issue #27): the
//! collection calls [`Feeder::pump`] every [`PUMP_EVERY`] (and once right after the plans
//! went out, so the first seconds are there before the start), which reads the trace as
//! far as the window allows ([`crate::replay::Streamer`]) and sends each fleet shard's
//! chunks to the worker holding it, under that worker's own shard index; each `TraceAck`
//! goes back to the streamer ([`Feeder::ack`]) so it reads on. A worker lost mid-run gets
//! nothing more: what falls to its shards is counted as lost, and it holds nobody back.

use super::member::{Member, RunError};
use crate::replay::{FileStreamer, Spec};
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
        let streamer = spec
            .stream(shards, seed, until_ns)
            .map_err(RunError::Usage)?;
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
