//! `GET /metrics`: the board as the Prometheus/OpenMetrics text format.

use super::board::{BUCKETS_S, Board, Counters};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The board's metrics as text.
///
/// # Errors
/// When the encoder fails (it writes to a string: it does not).
pub fn text(board: Board) -> Result<String, std::fmt::Error> {
    let mut text = String::new();
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register_collector(Box::new(Exported(board)));
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

/// The board as Prometheus metrics.
#[derive(Debug)]
struct Exported(Board);

impl prometheus_client::collector::Collector for Exported {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let b = &self.0;
        requests(b, &mut enc)?;
        latency(b, &mut enc)?;
        let rates: Vec<_> = b
            .rates
            .iter()
            .filter_map(|r| r.rate.map(|v| (vec![("class", r.class.clone())], v)))
            .collect();
        gauge(
            &mut enc,
            "crest_target_rate",
            "The rate in force, requests per second (runtime changes included).",
            &rates,
        )?;
        if let Some(p) = &b.last_interval {
            last_interval(p, &mut enc)?;
        }
        let alive = b.workers.iter().filter(|w| w.lost.is_none()).count();
        gauge(
            &mut enc,
            "crest_workers",
            "Workers taking part and not lost.",
            &[(Labels::new(), alive as f64)],
        )?;
        gauge(
            &mut enc,
            "crest_elapsed_seconds",
            "Seconds since the measured start.",
            &[(Labels::new(), b.elapsed_s)],
        )?;
        if let Some(s) = &b.server {
            server(s, &mut enc)?;
        }
        Ok(())
    }
}

/// A metric's labels.
type Labels = Vec<(&'static str, String)>;

/// One counter family, a value per label set.
fn counter(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// One gauge family, a value per label set.
fn gauge(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// The request counters per class and command: scheduled, sent, completed, errors by kind.
fn requests(b: &Board, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    let cmd = |c: &Counters| vec![("class", c.class.clone()), ("command", c.command.clone())];
    for (name, help, get) in [
        (
            "crest_requests_scheduled",
            "Requests the open-loop schedule (or the closed loop) created, every worker.",
            (|c: &Counters| c.scheduled) as fn(&Counters) -> u64,
        ),
        (
            "crest_requests_sent",
            "Requests written to the target.",
            |c| c.sent,
        ),
        (
            "crest_requests_completed",
            "Requests answered with a non-error reply.",
            |c| c.completed,
        ),
    ] {
        let rows: Vec<_> = b.counters.iter().map(|c| (cmd(c), get(c))).collect();
        counter(enc, name, help, &rows)?;
    }
    let errors: Vec<_> = b
        .counters
        .iter()
        .flat_map(|c| {
            c.errors.iter().map(move |(k, n)| {
                let mut l = cmd(c);
                l.push(("kind", k.clone()));
                (l, *n)
            })
        })
        .collect();
    counter(
        enc,
        "crest_request_errors",
        "Failed requests by kind (server error words, timeout, disconnected, ...).",
        &errors,
    )
}

/// Each class's latency histogram, binned at scrape time.
fn latency(b: &Board, enc: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "crest_latency_seconds",
        "Latency from the intended send time, every worker merged (exact HDR histograms binned at scrape time).",
        None,
        MetricType::Histogram,
    )?;
    for h in &b.latency {
        let mut bounds: Vec<(f64, u64)> = BUCKETS_S
            .iter()
            .copied()
            .zip(h.buckets.iter().copied())
            .collect();
        bounds.push((f64::MAX, h.buckets.last().copied().unwrap_or(0)));
        let labels = vec![("class", h.class.clone())];
        m.encode_family(&labels)?
            .encode_histogram::<()>(h.sum_s, h.count, &bounds, None)?;
    }
    Ok(())
}

/// The server's figures from the sampler's latest two samples (absent when the server is
/// not sampled).
fn server(
    s: &crate::server_stats::Now,
    enc: &mut DescriptorEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    let one = |v: f64| [(Labels::new(), v)];
    let mut rows = vec![
        (
            "crest_server_ops_per_second",
            "Commands the target ran per second between the sampler's latest two samples (INFO commandstats or memcached stats; the sampler's own left out).",
            Some(s.ops_per_s),
        ),
        (
            "crest_server_keys",
            "Keys on the target (memcached: items) at the latest sample.",
            Some(s.keys as f64),
        ),
        (
            "crest_server_used_memory_bytes",
            "The target's used_memory (memcached: bytes) at the latest sample.",
            s.used_memory.map(|v| v as f64),
        ),
        (
            "crest_server_cpu_per_op_seconds",
            "The target's CPU time (user + system) per command between the latest two samples.",
            s.cpu_us_per_op.map(|v| v / 1e6),
        ),
        (
            "crest_server_cpu_cores",
            "The target's CPU time per second between the latest two samples (1 = one core busy).",
            s.cpu_cores,
        ),
        (
            "crest_server_clients",
            "Clients connected to the target at the latest sample.",
            s.clients.map(|v| v as f64),
        ),
    ];
    rows.retain(|r| r.2.is_some());
    for (name, help, v) in rows {
        gauge(enc, name, help, &one(v.unwrap_or_default()))?;
    }
    Ok(())
}

/// The last finished interval's gauges: latency quantiles, rate, lag, the verdicts.
fn last_interval(
    p: &crest_report::TimelinePoint,
    enc: &mut DescriptorEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    let q = |q: &str, v: f64| (vec![("quantile", q.to_string())], v / 1e6);
    gauge(
        enc,
        "crest_interval_latency_seconds",
        "The last finished interval's exact latency quantiles, every worker merged.",
        &[
            q("0.5", p.latency_us.p50),
            q("0.99", p.latency_us.p99),
            q("0.999", p.latency_us.p999),
        ],
    )?;
    let one = |v: f64| [(Labels::new(), v)];
    let flag = |on: bool| if on { 1.0 } else { 0.0 };
    for (name, help, v) in [
        (
            "crest_interval_achieved_rate",
            "The last finished interval's non-error replies per second.",
            p.achieved_rate,
        ),
        (
            "crest_interval_schedule_lag_p99_seconds",
            "The last finished interval's schedule lag p99.",
            p.schedule_lag_p99_us / 1e6,
        ),
        (
            "crest_interval_generator_bound",
            "1 when the generator, not the server, limited the last finished interval.",
            flag(p.generator_bound),
        ),
        (
            "crest_interval_off_pace",
            "1 when the last finished interval's schedule lag p99 passed the pacer's bound (the report's off_pace says why).",
            flag(p.off_pace.is_some()),
        ),
        (
            "crest_interval_shard_preemptions",
            "Times the scheduler gave a shard's core to another thread in the last finished interval, every shard summed.",
            p.preemptions as f64,
        ),
    ] {
        gauge(enc, name, help, &one(v))?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::admin::board::Binned;

    #[test]
    fn the_text_has_counters_the_histogram_and_gauges() {
        let mut h = crest_model::hist::new_hist();
        h.record(150_000).unwrap();
        let board = Board {
            phase: "running",
            counters: vec![Counters {
                class: "main".into(),
                command: "GET".into(),
                scheduled: 3,
                sent: 2,
                completed: 1,
                errors: [("timeout".to_string(), 1)].into(),
            }],
            latency: vec![Binned::of("main", &h)],
            ..Board::default()
        };
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(Exported(board)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "crest_requests_scheduled_total{class=\"main\",command=\"GET\"} 3",
            "crest_request_errors_total{class=\"main\",command=\"GET\",kind=\"timeout\"} 1",
            "crest_latency_seconds_bucket{le=\"0.0001\",class=\"main\"} 0",
            "crest_latency_seconds_bucket{le=\"0.00025\",class=\"main\"} 1",
            "crest_latency_seconds_bucket{le=\"+Inf\",class=\"main\"} 1",
            "crest_latency_seconds_count{class=\"main\"} 1",
            "# EOF",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
