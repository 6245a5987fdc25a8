//! The files written while a run goes, line by line (a crash leaves a readable prefix):
//! `timeline.csv` rows and `latency.hlog` (HdrHistogram interval log) lines, and the
//! whole `timeline.csv` of a finished report.

use crate::model::{Report, TimelinePoint};
use crate::server::ServerRow;
use std::fmt::Write as _;

/// The first line of `timeline.csv`: the client's columns, then the server's (the
/// report's `server.intervals`, empty when the server was not sampled).
pub const TIMELINE_CSV_HEADER: &str = "t_s,target_rate,scheduled,achieved_rate,errors,latency_p50_us,latency_p99_us,latency_p999_us,schedule_lag_p99_us,generator_bound,generator_cpu_s,busiest_shard,bound,off_pace,preemptions,core_wait_ms,steal_ms,server_ops,server_ops_per_sec,server_cpu_us,server_cpu_us_per_op,server_rejected_calls,server_failed_calls,server_net_input_bytes,server_net_output_bytes,server_evicted_keys,server_keyspace_hits,server_keyspace_misses,server_used_memory,server_used_memory_rss,server_mem_fragmentation_ratio,server_connected_clients,server_keys,connections_opened,server_connections_received,nodes_out\n";

/// An optional CSV cell: empty when None.
fn cell<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

/// Appends one `timeline.csv` row (with its newline); `server` fills the server's
/// columns (None: left empty, as while the run goes: the rows are rewritten with them at
/// the end).
pub fn timeline_csv_row(out: &mut String, p: &TimelinePoint, server: Option<&ServerRow>) {
    let _ = write!(
        out,
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        p.t_s,
        p.target_rate,
        p.scheduled,
        p.achieved_rate,
        p.errors,
        p.latency_us.p50,
        p.latency_us.p99,
        p.latency_us.p999,
        p.schedule_lag_p99_us,
        p.generator_bound,
        p.generator_cpu_s,
        p.busiest_shard,
        p.bound,
        p.off_pace,
        p.preemptions,
        p.core_wait_ms,
        p.steal_ms
    );
    let s = server.filter(|s| s.sampled);
    let cells = [
        cell(s.and_then(|s| s.ops)),
        cell(s.and_then(|s| s.ops_per_sec)),
        cell(s.and_then(|s| s.cpu_us)),
        cell(s.and_then(|s| s.cpu_us_per_op)),
        cell(s.and_then(|s| s.rejected_calls)),
        cell(s.and_then(|s| s.failed_calls)),
        cell(s.and_then(|s| s.net_input_bytes)),
        cell(s.and_then(|s| s.net_output_bytes)),
        cell(s.and_then(|s| s.evicted_keys)),
        cell(s.and_then(|s| s.keyspace_hits)),
        cell(s.and_then(|s| s.keyspace_misses)),
        cell(s.and_then(|s| s.used_memory)),
        cell(s.and_then(|s| s.used_memory_rss)),
        cell(s.and_then(|s| s.mem_fragmentation_ratio)),
        cell(s.and_then(|s| s.connected_clients)),
        cell(s.and_then(|s| s.keys)),
        p.connections_opened.to_string(),
        cell(s.and_then(|s| s.connections_received)),
        p.nodes_out.to_string(),
    ];
    let _ = writeln!(out, ",{}", cells.join(","));
}

/// The header of an HdrHistogram interval log (the `.hlog` format HdrHistogram's log tools
/// read), as HdrHistogram's own writer lays it out: a comment, the start and base time (the
/// measured start), and the max column's divisor (values are ns, max is in ms).
pub fn hlog_header(run_id: &str, started_at: std::time::SystemTime) -> String {
    let t = started_at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    format!(
        "#crest run {run_id}: latency from intended send time, ns\n#[StartTime: {t:.3} (seconds since epoch)]\n#[BaseTime: {t:.3} (seconds since epoch)]\n#[MaxValueDivisor: {HLOG_MAX_DIVISOR:.3}]\n"
    )
}

/// The hlog's max column is in milliseconds.
const HLOG_MAX_DIVISOR: f64 = 1e6;

/// Appends one interval-log line (with its newline), in HdrHistogram's own layout:
/// `[Tag=<class>,]start,length,max,<base64 V2+DEFLATE histogram>`; untagged for the whole
/// run, tagged with the class name (characters a tag cannot hold become `_`) for a class.
pub fn hlog_line(
    out: &mut String,
    class: Option<&str>,
    start_s: f64,
    length_s: f64,
    h: &crest_model::hist::Hist,
) {
    use base64::Engine as _;
    if let Some(c) = class {
        let tag: String = c
            .chars()
            .map(|ch| {
                if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' || ch == ':' {
                    ch
                } else {
                    '_'
                }
            })
            .collect();
        let _ = write!(out, "Tag={tag},");
    }
    let _ = write!(
        out,
        "{start_s:.3},{length_s:.3},{:.3},",
        h.max() as f64 / HLOG_MAX_DIVISOR
    );
    base64::engine::general_purpose::STANDARD.encode_string(crest_model::hist::encode(h), out);
    out.push('\n');
}

impl Report {
    /// `timeline.csv`: one row per second.
    pub fn timeline_csv(&self) -> String {
        let mut out = String::from(TIMELINE_CSV_HEADER);
        let rows = self.server.as_ref().map(|s| s.intervals.as_slice());
        for (i, p) in self.timeline.iter().enumerate() {
            timeline_csv_row(&mut out, p, rows.and_then(|r| r.get(i)));
        }
        out
    }
}
