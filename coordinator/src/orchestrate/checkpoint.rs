//! Checkpoints (`--checkpoint-every N`): the one closed-loop class pauses after every N
//! requests. Each shard stops at its share of k × N (the split adds up exactly), lets its
//! replies come in and says so; each worker says so once every shard has; once every
//! worker still running has, the coordinator reads `INFO memory` (and sends `--probe`) on
//! a connection of its own, then releases the checkpoint to everyone. So the server holds
//! exactly k × N requests' work, nothing in flight, when it is read — the sorted-set
//! study's "memory every 1,000,000 members", not an estimate between two samples.

use super::member::Member;
use crate::server_stats::sampler::ask_within;
use crest_engine::probe::Control;
use crest_proto::pb::{self, coordinator_message::Msg as Out};
use crest_report::CheckpointRow;
use crest_report::server::info::Info;
use crest_resp::Frame;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The connection's name in `CLIENT LIST`.
pub const NAME: &str = "crest-checkpoint";
/// How long one checkpoint's `INFO memory` and probe may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest reply read (INFO memory is ~2 KB; a probe's reply is cut to its first 200 bytes).
const MAX_REPLY: usize = 1 << 20;

/// The checkpoints of one run.
#[derive(Debug)]
pub struct Checkpoints {
    every: u64,
    total: u32,
    conn: Option<Control>,
    probe: Vec<String>,
    /// Per worker: checkpoints it has reached (one past the highest index).
    reached: Vec<u32>,
    next: u32,
    start: Instant,
    since: Instant,
    /// The checkpoints taken.
    pub rows: Vec<CheckpointRow>,
    /// Commands this sent the server, lower case → calls (kept out of the truth check).
    pub calls: BTreeMap<String, u64>,
}

impl Checkpoints {
    /// `total_requests` of the class, a checkpoint every `every`; `conn` is set up as the
    /// shards' connections are.
    pub fn new(conn: Control, every: u64, total_requests: u64, probe: Vec<String>) -> Self {
        let now = Instant::now();
        Self {
            every,
            total: u32::try_from(total_requests / every.max(1)).unwrap_or(u32::MAX),
            conn: Some(conn),
            probe,
            reached: Vec::new(),
            next: 0,
            start: now,
            since: now,
            rows: Vec::new(),
            calls: BTreeMap::new(),
        }
    }

    /// The measured phase starts at `start` (the first stretch's rate counts from there).
    pub fn started(&mut self, start: Instant, workers: usize) {
        self.start = start;
        self.since = start;
        self.reached = vec![0; workers];
    }

    /// Worker `w` says its shards all reached checkpoint `index`.
    pub fn reached(&mut self, w: usize, index: u32) {
        if let Some(r) = self.reached.get_mut(w) {
            *r = (*r).max(index.saturating_add(1));
        }
    }

    /// Takes and releases every checkpoint that each worker still running has reached.
    pub async fn advance(&mut self, members: &[Member], run_id: &str) {
        while self.next < self.total {
            let k = self.next;
            let running: Vec<usize> = (0..members.len())
                .filter(|&w| !members[w].done && !members[w].lost())
                .collect();
            if running.is_empty()
                || running
                    .iter()
                    .any(|&w| self.reached.get(w).is_none_or(|r| *r <= k))
            {
                return;
            }
            let reached = Instant::now();
            let row = self.sample(k, reached).await;
            self.rows.push(row);
            for m in members {
                m.link
                    .send(Out::Release(pb::ReleaseCheckpoint {
                        run_id: run_id.into(),
                        index: k,
                    }))
                    .await;
            }
            let released = Instant::now();
            if let Some(r) = self.rows.last_mut() {
                r.paused_ms = round(released.duration_since(reached).as_secs_f64() * 1e3, 1e3);
            }
            self.since = released;
            self.next += 1;
        }
    }

    async fn ask(&mut self, args: &[&[u8]]) -> Result<Frame, String> {
        if self.conn.is_none() {
            return Err("no connection (an earlier checkpoint lost it)".into());
        }
        let name = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
        *self.calls.entry(name).or_insert(0) += 1;
        ask_within(&mut self.conn, args, REPLY_TIMEOUT, MAX_REPLY).await
    }

    async fn sample(&mut self, k: u32, reached: Instant) -> CheckpointRow {
        let span = reached.duration_since(self.since).as_secs_f64();
        let mut row = CheckpointRow {
            index: k,
            requests: u64::from(k + 1) * self.every,
            at_s: round(
                reached.saturating_duration_since(self.start).as_secs_f64(),
                1e6,
            ),
            rate: if span > 0.0 {
                round(self.every as f64 / span, 100.0)
            } else {
                0.0
            },
            paused_ms: 0.0,
            used_memory: None,
            used_memory_rss: None,
            used_memory_dataset: None,
            mem_fragmentation_ratio: None,
            probe: None,
            error: None,
        };
        match self.ask(&[b"INFO", b"memory"]).await {
            Ok(Frame::Bulk(b) | Frame::Verbatim { data: b, .. }) => {
                let info = Info::parse(&String::from_utf8_lossy(&b));
                row.used_memory = info.uint("used_memory");
                row.used_memory_rss = info.uint("used_memory_rss");
                row.used_memory_dataset = info.uint("used_memory_dataset");
                row.mem_fragmentation_ratio = info.float("mem_fragmentation_ratio");
            }
            Ok(other) => row.error = Some(format!("INFO memory answered {}", text(&other))),
            Err(e) => row.error = Some(format!("INFO memory: {e}")),
        }
        if !self.probe.is_empty() {
            let words: Vec<Vec<u8>> = self.probe.iter().map(|w| w.as_bytes().to_vec()).collect();
            let args: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            row.probe = Some(match self.ask(&args).await {
                Ok(f) => text(&f),
                Err(e) => {
                    row.error.get_or_insert_with(|| format!("probe: {e}"));
                    String::new()
                }
            });
        }
        row
    }
}

/// A reply as one short line: an integer's digits, a string's text, an error's words.
fn text(f: &Frame) -> String {
    let s = match f {
        Frame::Integer(n) => n.to_string(),
        Frame::Bulk(b)
        | Frame::Simple(b)
        | Frame::Double(b)
        | Frame::BigNumber(b)
        | Frame::Verbatim { data: b, .. } => String::from_utf8_lossy(b).into_owned(),
        Frame::Error(e) | Frame::BlobError(e) => {
            format!("error: {}", crest_model::stats::clean_message(e))
        }
        Frame::Array(v) | Frame::Set(v) => format!("{} elements", v.len()),
        Frame::Map(m) => format!("{} entries", m.len()),
        other => format!("{other:?}"),
    };
    let s: String = s.chars().filter(|c| !c.is_control()).collect();
    if s.len() > 200 {
        let mut cut = 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}...", &s[..cut])
    } else {
        s
    }
}

fn round(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}
