//! What a run plan is: the coordinator's plan for every worker ([`RunPlan`]: classes,
//! shards' parts, the pacer, the session), checked when it crosses the wire
//! ([`crate::convert`]) and built into workloads by the worker ([`crate::built`]).

use crate::schedule::{Arrival, Profile};
use crate::shapes::{KeyDist, ValueSizes};
use crate::target::{ClusterMode, Protocol, ReadFrom, Session, Tls};
use crate::workload::{CmdDef, WorkloadError};
use std::collections::BTreeMap;
use std::time::Duration;

/// How a shard waits for the next intended send time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacer {
    /// Sleep in epoll or the clock (ns timeouts, 1 µs timer slack) and spend the lag budget
    /// (the 100 µs bound below): each wake-up is set past the first request due by an
    /// offset the shard keeps adjusting from the lags it sees, so one wake-up sends every
    /// request due by then; negative on a machine whose sleeps overshoot, to wake early
    /// and poll the rest of the way. Cheap at any rate, never a polling core at a high one.
    Sleep,
    /// Poll without sleeping: lowest schedule lag, one full core per shard.
    Spin,
    /// As `Sleep` with T ns more budget (`--pacer sleep:200us`): a bound of T + 100 µs, so
    /// wake-ups come up to ~T later and carry more requests; each request is still measured
    /// from its own intended time, so the lag histogram shows what the tolerance costs.
    SleepWithin(u64),
}

impl Pacer {
    /// The schedule lag p99 this pacer holds on a core of its own (the product's promise,
    /// what an interval is checked against): `spin` 20 µs, `sleep` 100 µs, `sleep:T` T +
    /// 100 µs (its budget: it sleeps past the first request due by most of it). An interval whose lag p99
    /// passes it is reported off pace, with the reason the workers measured.
    pub fn lag_bound_ns(self) -> u64 {
        match self {
            Pacer::Spin => 20_000,
            Pacer::Sleep => 100_000,
            Pacer::SleepWithin(t) => t.saturating_add(100_000),
        }
    }
}

/// Longest pacing tolerance: a millisecond-scale tolerance is what it is for; beyond this
/// it is a burst generator.
pub const MAX_TOLERANCE_NS: u64 = 10_000_000;

/// How connections come and go (`--conn-lifetime D[±J]`, `--conn-rate N`): at most one of
/// the two; both None for connections that live as long as the run. A retired connection
/// takes no new request, closes once its replies are in, and opens again with its full
/// setup.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Churn {
    /// Each connection retires this long after it came up, ± the jitter (uniform, drawn
    /// per connection and per life); the jitter is less than the lifetime.
    pub lifetime: Option<(Duration, Duration)>,
    /// Connections retired per second across the fleet, split over the shards.
    pub rate: Option<f64>,
}

impl Churn {
    /// Whether connections ever retire.
    pub fn is_on(&self) -> bool {
        self.lifetime.is_some() || self.rate.is_some()
    }
}

/// A keyspace as a plan carries it (the engine builds its sampler from this).
#[derive(Debug, Clone, PartialEq)]
pub struct KeySpec {
    /// Number of keys.
    pub count: u64,
    /// Key name prefix.
    pub prefix: String,
    /// How keys are drawn.
    pub dist: KeyDist,
    /// How long each key's name is (`--key-size`).
    pub lengths: crate::shapes::KeyLengths,
}

/// How a class's requests are paced.
#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// Open loop: the cluster-wide rate over time.
    Open(Profile),
    /// Closed loop: every connection keeps `pipeline` requests in flight, until this long
    /// after the start (None: until the shards' budgets are spent).
    Closed {
        /// When to stop sending.
        until: Option<Duration>,
    },
    /// A replayed trace (`crest replay`): requests at the times the coordinator streams
    /// them, each counted under its entry of this op table (the mix names the same
    /// entries, in the same order, for the report).
    Trace {
        /// What each op index of a chunk means.
        ops: Vec<crate::trace::TraceOp>,
    },
}

/// What a class sends and how: its commands, keys, values and their shapes, and how deep
/// it pipelines. Everything about a class but its name, its pace and its connections; the
/// coordinator's checked configuration holds it, the plan carries it to the workers as it
/// is, and the report echoes it. Add a class setting here (and to the wire in
/// [`crate::convert`], the layering in the coordinator's settings and the report's echo).
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// Command names or templates, with weights.
    pub mix: Vec<(String, u32)>,
    /// Keyspace.
    pub keys: KeySpec,
    /// Value sizes.
    pub values: ValueSizes,
    /// What values' bytes are (`--value-content`).
    pub content: crate::shapes::Content,
    /// Requests in flight per connection.
    pub pipeline: u32,
    /// `EX` seconds on SET and EXPIRE: one TTL, or a table drawn per write.
    pub ttl: Option<crate::shapes::Ttl>,
    /// Keys or members per batched command.
    pub batch: u32,
    /// Members or fields per key.
    pub members: u64,
    /// Members numbered in order, unique cluster-wide.
    pub members_sequential: bool,
    /// LRANGE / ZRANGE / ZRANGEBYSCORE length.
    pub range: u32,
}

impl Shape {
    /// The mix's commands in `protocol`, parsed with this shape's batch, TTL and range.
    ///
    /// # Errors
    /// [`WorkloadError`] for a command that does not parse (or that `protocol` lacks).
    pub fn commands(&self, protocol: Protocol) -> Result<Vec<(CmdDef, u32)>, WorkloadError> {
        self.mix
            .iter()
            .map(|(name, weight)| {
                Ok((
                    CmdDef::parse_in(protocol, name, self.batch, self.ttl_nominal(), self.range)?,
                    *weight,
                ))
            })
            .collect()
    }

    /// The TTL a command is built with: the one TTL, or (for a table, which the workload
    /// draws from per request) the table's first; None: no TTL.
    pub fn ttl_nominal(&self) -> Option<u64> {
        self.ttl.as_ref().map(|t| match t {
            crate::shapes::Ttl::Fixed(s) => *s,
            crate::shapes::Ttl::Table(l) => l.first().map_or(0, |e| e.0),
        })
    }

    /// Weight of each command in the mix, by the name the report counts it under (a
    /// template under its command word; a command given twice adds up).
    pub fn weights(&self, protocol: Protocol) -> BTreeMap<String, u32> {
        let mut m = BTreeMap::new();
        for (c, w) in &self.mix {
            let name = CmdDef::parse_in(protocol, c, 1, None, 1)
                .map(|d| d.name)
                .unwrap_or_else(|_| c.clone());
            *m.entry(name).or_default() += w;
        }
        m
    }
}

/// One class of a run as the plan carries it: typed, not yet built into a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassPlan {
    /// Name (results are reported under it).
    pub name: String,
    /// Open or closed loop.
    pub load: Load,
    /// What it sends.
    pub shape: Shape,
}

/// One class's part on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardClassPart {
    /// Connections the shard opens for the class.
    pub connections: u32,
    /// Closed loop: requests the shard sends (None: until the class's time is up).
    pub budget: Option<u64>,
    /// Closed loop with a budget: after this many measured requests (cumulative,
    /// ascending, each at most the budget) the shard stops, drains, says so and waits for
    /// the coordinator's release (`--checkpoint-every`). Empty: no checkpoints.
    pub checkpoints: Vec<u64>,
}

/// One shard's part of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardPart {
    /// Index within the worker.
    pub shard: u32,
    /// Index within the cluster (phase offsets, interleaved sequences).
    pub global_index: u32,
    /// Fraction of each class's rate this shard carries, in [0, 1].
    pub share: f64,
    /// RNG seed.
    pub seed: u64,
    /// One entry per class of the plan.
    pub classes: Vec<ShardClassPart>,
}

/// A whole run plan for one worker, typed and checked: what the coordinator builds and
/// what the worker accepts. `C` is how a class is held: [`ClassPlan`] on the wire, the
/// built workload once the worker has it (`crate::plan::Plan`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunPlan<C = ClassPlan> {
    /// Run id.
    pub run_id: String,
    /// Target `host:port`.
    pub target: String,
    /// The classes.
    pub classes: Vec<C>,
    /// Arrival process.
    pub arrival: Arrival,
    /// How shards wait.
    pub pacer: Pacer,
    /// A request unanswered this long fails as `timeout`.
    pub timeout: Duration,
    /// After the schedule, wait this long for replies.
    pub drain: Duration,
    /// Unmeasured lead-in.
    pub warmup: Duration,
    /// Length of one reported interval.
    pub interval: Duration,
    /// Shards in the whole run.
    pub total_shards: u32,
    /// This worker's shards.
    pub shards: Vec<ShardPart>,
    /// Requests allowed to wait for a free connection, per shard and class.
    pub backlog_limit: u64,
    /// How every connection to the target begins (login, database).
    pub session: Session,
    /// TLS to the target; None: plaintext.
    pub tls: Option<Tls>,
    /// One node or a cluster.
    pub cluster: ClusterMode,
    /// What the connections speak.
    pub protocol: Protocol,
    /// A memcached target's servers (`target` first); empty for RESP.
    pub ring: Vec<String>,
    /// How connections come and go.
    pub churn: Churn,
    /// Where reads go when the target has replicas.
    pub read_from: ReadFrom,
    /// A standalone primary's replicas to read from (`host:port`); empty: in a cluster,
    /// its own; else those the primary's `INFO replication` names.
    pub replicas: Vec<String>,
    /// `--check-staleness`: SET values carry a version stamp, GET replies are read for it.
    pub check_staleness: bool,
}

impl<C> RunPlan<C> {
    /// The same plan with each class turned into `D` by `f`; the first error stops it.
    ///
    /// # Errors
    /// The first error `f` returns.
    pub fn try_map_classes<D, E>(self, f: impl FnMut(&C) -> Result<D, E>) -> Result<RunPlan<D>, E> {
        Ok(RunPlan {
            classes: self.classes.iter().map(f).collect::<Result<_, E>>()?,
            run_id: self.run_id,
            target: self.target,
            arrival: self.arrival,
            pacer: self.pacer,
            timeout: self.timeout,
            drain: self.drain,
            warmup: self.warmup,
            interval: self.interval,
            total_shards: self.total_shards,
            shards: self.shards,
            backlog_limit: self.backlog_limit,
            session: self.session,
            tls: self.tls,
            cluster: self.cluster,
            protocol: self.protocol,
            ring: self.ring,
            churn: self.churn,
            read_from: self.read_from,
            replicas: self.replicas,
            check_staleness: self.check_staleness,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn shape(mix: &[(&str, u32)]) -> Shape {
        Shape {
            mix: mix.iter().map(|(c, w)| (c.to_string(), *w)).collect(),
            keys: KeySpec {
                count: 10,
                prefix: "k:".into(),
                dist: KeyDist::Uniform,
                lengths: Default::default(),
            },
            values: ValueSizes::Fixed(8),
            content: Default::default(),
            pipeline: 1,
            ttl: Some(crate::shapes::Ttl::Fixed(30)),
            batch: 4,
            members: 10,
            members_sequential: false,
            range: 5,
        }
    }

    /// A shape's commands are parsed with its batch, TTL and range; its weights count a
    /// command given twice once, under the name the report uses.
    #[test]
    fn a_shape_parses_its_mix_and_sums_its_weights() {
        let s = shape(&[("GET", 3), ("SET", 1), ("GET", 2)]);
        let cmds = s.commands(Protocol::Resp).unwrap();
        assert_eq!(cmds.len(), 3);
        assert_eq!((cmds[0].0.name.as_str(), cmds[0].1), ("GET", 3));
        assert_eq!(
            s.weights(Protocol::Resp),
            BTreeMap::from([("GET".to_string(), 5), ("SET".to_string(), 1)])
        );
        assert!(shape(&[("NOSUCHCMD", 1)]).commands(Protocol::Resp).is_err());
    }
}
