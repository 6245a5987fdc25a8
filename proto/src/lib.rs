//! Crest's wire contract: `crest.proto` (package `crest.v1`) compiled by tonic/prost, and
//! the protocol's constants (version and timing) that both sides must agree on.
//!
//! Everything generated lives in [`pb`]; `crest-model`'s `convert` module turns these
//! messages into domain types at the boundary, checking every field once.

use std::time::Duration;

/// Generated protobuf and gRPC code for `crest.v1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("crest.v1");

    impl std::fmt::Debug for Login {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Login")
                .field("user", &self.user)
                .field("password", &"***")
                .finish()
        }
    }

    impl std::fmt::Debug for TargetTls {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("TargetTls")
                .field("ca_pem", &self.ca_pem.len())
                .field("cert_pem", &self.cert_pem.len())
                .field("key_pem", &"***")
                .field("server_name", &self.server_name)
                .field("verify", &self.verify)
                .finish()
        }
    }
}

/// Protocol version carried in `Register`; a worker with another version is refused.
/// Version 2: typed key distributions and value sizes (`oneof`), a failure kind in
/// `RunFailed`, no `Interval.target_rate`. Version 3: `RunPlan.session` (login and
/// database); an older worker would ignore it and load database 0 unauthenticated.
/// Version 4: `RunPlan.tls` (TLS to the target), `Finished.tls`, `TargetSession.resp`
/// and `tracking`, `CommandStats.misses`, `Finished.classes` (push frames),
/// `Interval.shard_cpu_ns` and `busiest_shard`; an older worker would send plaintext to a
/// TLS port and speak RESP2. Version 5: `RunPlan.cluster` (Redis Cluster mode),
/// `CommandStats.moved`/`asked`/`retried`, `Finished.nodes`; an older worker would send
/// every request to the seed node. Version 6: `ShardClass.checkpoints`,
/// `CheckpointReached`, `ReleaseCheckpoint` (`--checkpoint-every`); an older worker would
/// run through every checkpoint. Version 7: `Steer` and `Steered` (a runtime change of
/// rate at one instant); an older worker would ignore it and keep the old rate. Version 8:
/// `Interval.shard_preemptions`, `shard_queued_ns` and `shard_steal_ns` (why an interval
/// was off pace); an
/// older worker would report none, and its late intervals would be blamed on the pacer.
/// Version 9: `RunPlan.memcache` (a memcached target, one server or a ring); an older
/// worker would send RESP to a memcached server. Version 10: `RunPlan.churn`,
/// `Interval.connections_opened`, `Finished.connections` (connection lifetimes); an older
/// worker would keep its connections for the whole run. Version 11: `RunPlan.read_from`
/// and `replicas` (reads from replicas), `NodeStats.reads`; an older worker would read
/// from primaries only. Version 12: `NodeStats.outages` and `outages_dropped` (outages
/// as the clients saw them), `RunPlan.check_staleness` and `ClassCounts.stale_checked`,
/// `stale`, `behind`; an older worker would report no outage and check no read.
/// Version 13: `ClassPlan.trace_ops`, `TraceChunk` and `TraceAck` (a replayed trace); an
/// older worker would find no rate profile for the class. Version 14:
/// `ClassPlan.value_content` (random or compressible values), `ValueSizes.etc` and
/// `ARRIVAL_ETC` (Facebook ETC's sizes and gaps); an older worker would send the same bytes
/// every time, and refuse the rest. Version 15: `ClassPlan.ttl_table` (a TTL drawn per
/// write); an older worker would write no TTL.
pub const PROTOCOL_VERSION: u32 = 15;

/// Silence from the peer longer than this stops the run (the worker's dead man's switch).
pub const DEAD_MAN: Duration = Duration::from_secs(1);

/// How often the coordinator sends a heartbeat on the session stream: four chances within
/// the worker's [`DEAD_MAN`], so a busy coordinator's late beat does not stop a run. Each
/// is a write to every worker's socket, the bulk of what an idle fleet costs the
/// coordinator (500 ms saved ~55 ms of its CPU per second at 1,000 workers,
/// `bench/coordinator-fanin.sh`, but left a beat only 500 ms to be late: a fleet that big
/// goes through relays instead).
pub const HEARTBEAT: Duration = Duration::from_millis(250);

/// How often a worker's heartbeat timer ticks: it sends a heartbeat on a tick when nothing
/// else went up since the one before (an interval is proof of life: at `--interval 1s` a
/// worker in a run sends none), so the coordinator hears from a live worker at least every
/// 2 s, within its 3 s silence limit. Slower than [`HEARTBEAT`] because a coordinator hears
/// every worker: at 1,000 workers, 250 ms heartbeats were 4,000 messages a second in, more
/// than the intervals themselves.
pub const WORKER_HEARTBEAT: Duration = Duration::from_secs(1);

/// HTTP/2 keepalive ping interval of a worker: a dead TCP path is noticed within
/// `KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT` even when no heartbeat is due. A ping goes only
/// after this long without a frame read, so the coordinator's heartbeats keep a live
/// session from ever sending one.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);

/// HTTP/2 keepalive ping interval of the coordinator: three worker heartbeats, so a live
/// session never draws a ping (at [`KEEPALIVE_INTERVAL`], the same as [`WORKER_HEARTBEAT`],
/// every worker whose beat came a little late drew one: at 1,000 workers, a few hundred
/// pings and their answers a second). A dead path is still noticed: by the run's silence
/// limit while a run is collected, by this ping while the coordinator waits.
pub const SERVER_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(3);

/// How long an HTTP/2 keepalive ping may go unanswered before the connection is dropped.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a worker's dial may take before it backs off and tries again.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The endpoint a worker dials its coordinator with: the connect timeout, no Nagle delay,
/// and the HTTP/2 keepalive above. One definition, so what a simulated fleet costs the
/// coordinator (`coordinator/examples/sim_workers.rs`) is what a real one does.
///
/// # Errors
/// When `url` is not a URI.
pub fn worker_endpoint(url: &str) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    Ok(tonic::transport::Endpoint::from_shared(url.to_string())?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT))
}

/// A session that broke, in words: `peer` (e.g. "worker w1", "the coordinator") and
/// what the transport said. A broken HTTP/2 stream or connection is what a process that
/// died or a network that was cut looks like from the other end, so it is said that way,
/// with the transport's own words after it.
pub fn broken_session(peer: &str, transport: &str) -> String {
    let t = transport.to_ascii_lowercase();
    let cut = [
        "error reading a body from connection",
        "connection reset",
        "broken pipe",
        "connection closed",
        "stream no longer needed",
        "keep-alive timed out",
        "operation was canceled",
    ];
    if cut.iter().any(|c| t.contains(c)) {
        format!(
            "the connection to {peer} was lost: its process ended or the network was cut ({transport})"
        )
    } else {
        format!("the session with {peer} ended: {transport}")
    }
}

#[cfg(test)]
mod words_tests {
    use super::broken_session;

    #[test]
    fn a_broken_stream_reads_as_a_lost_peer() {
        assert_eq!(
            broken_session(
                "worker wA",
                "h2 protocol error: error reading a body from connection"
            ),
            "the connection to worker wA was lost: its process ended or the network was cut (h2 protocol error: error reading a body from connection)"
        );
        assert_eq!(
            broken_session("the coordinator", "something else"),
            "the session with the coordinator ended: something else"
        );
    }
}
