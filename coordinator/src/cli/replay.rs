//! `crest replay FILE… --format F`: the run flags that apply to a trace, checked into a
//! [`RunConfig`] whose one class sends the trace ([`crate::trace_plan::Spec`]). What a trace
//! decides itself (commands, keys, sizes, TTLs) is refused as a flag, in one line naming
//! it. `--connections` is the fleet's, at least one per shard: a shard sends each key on
//! the one of its connections the key's hash picks, so the key's requests keep their order.

use super::args::RunArgs;
use super::parse::err;
use crate::config::{ClassConfig, ConfigError, RateArg, RunConfig, parse_duration};
use crate::trace_plan::{self as replay, Keys, Spec, Window};
use crest_model::convert::limits;
use crest_model::plan::{KeySpec, Shape};
use crest_model::schedule::{Arrival, Profile, Segment};
use crest_model::shapes::{KeyDist, ValueSizes};
use crest_model::target::Protocol;
use crest_model::trace::TraceOp;
use crest_trace::Format;
use crest_trace::clock::Spread;
use std::path::PathBuf;
use std::time::Duration;

/// `crest replay` flags: the trace, how it is timed and keyed, and `crest run`'s flags
/// that apply.
// Field docs are clap's help text (terminal syntax, not intra-doc links).
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Trace files, read one after another as one trace (zstd-compressed ones too).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// twitter (cache-trace CSV), cachebench (KV CSV with a header) or monitor
    /// (redis-cli MONITOR output).
    #[arg(long, value_parser = Format::parse)]
    pub format: Format,
    /// Play the trace's clock this many times as fast (2: a 10-minute trace in 5).
    #[arg(long, conflicts_with_all = ["rate", "stages"])]
    pub speed: Option<f64>,
    /// Multiply the key population: every request is sent N times, under key:0 …
    /// key:N−1 (a small trace scaled up, as cachebench does).
    #[arg(long)]
    pub amplify: Option<u32>,
    /// How far ahead of the run the coordinator streams the trace to the workers.
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub ahead: Option<Duration>,
    /// `crest run`'s flags (those a trace does not decide).
    #[command(flatten)]
    pub run: RunArgs,
}

/// Most `--amplify`.
pub const MAX_AMPLIFY: u32 = 1 << 20;
/// Fastest and slowest `--speed`.
const SPEEDS: (f64, f64) = (1e-3, 1e6);

/// The flags a trace decides, each with what to do instead.
fn refused(a: &RunArgs) -> Option<ConfigError> {
    let l = &a.load;
    let given: [(bool, &'static str, String, &str); 18] = [
        (
            l.profile.is_some(),
            "--profile",
            format!("{:?}", l.profile),
            "a replay's load is its trace; give crest run's flags on the command line",
        ),
        (
            l.mix.is_some(),
            "--mix",
            l.mix.clone().unwrap_or_default(),
            "a replay sends the trace's commands",
        ),
        (
            l.command.is_some(),
            "--command",
            l.command.clone().unwrap_or_default(),
            "a replay sends the trace's commands",
        ),
        (
            l.ratio.is_some(),
            "--ratio",
            format!("{:?}", l.ratio),
            "a replay sends the trace's commands",
        ),
        (
            l.keys.is_some(),
            "--keys",
            format!("{:?}", l.keys),
            "a replay sends the trace's keys (--key-prefix and --amplify change them)",
        ),
        (
            l.key_dist.is_some(),
            "--key-dist",
            l.key_dist.clone().unwrap_or_default(),
            "a replay sends the trace's keys",
        ),
        (
            l.value_size.is_some(),
            "--value-size",
            l.value_size.clone().unwrap_or_default(),
            "a replay sends each value at its recorded size",
        ),
        (
            l.ttl.is_some(),
            "--ttl",
            format!("{:?}", l.ttl),
            "a replay sends each write's recorded TTL",
        ),
        (
            l.batch.is_some(),
            "--batch",
            format!("{:?}", l.batch),
            "a replay sends the trace's commands as written",
        ),
        (
            l.requests.is_some(),
            "--requests",
            format!("{:?}", l.requests),
            "a replay ends with its trace; --duration ends it earlier",
        ),
        (
            l.connections == Some(0),
            "--connections",
            "0".into(),
            "at least 1 (a replay opens at least one per shard in any case)",
        ),
        (
            l.prefill,
            "--prefill",
            "true".into(),
            "a replay writes what its trace writes",
        ),
        (
            l.checkpoint_every.is_some(),
            "--checkpoint-every",
            format!("{:?}", l.checkpoint_every),
            "checkpoints pause a count-bounded closed loop; a replay keeps its trace's time",
        ),
        (
            l.probe.is_some(),
            "--probe",
            l.probe.clone().unwrap_or_default(),
            "probes go with --checkpoint-every, which a replay does not take",
        ),
        (
            l.rate_scale.is_some(),
            "--rate-scale",
            format!("{:?}", l.rate_scale),
            "a replay's rate is its trace's: --speed scales its clock",
        ),
        (
            l.time_scale.is_some(),
            "--time-scale",
            format!("{:?}", l.time_scale),
            "--speed scales a trace's clock",
        ),
        (
            l.warmup.is_some_and(|w| !w.is_zero()),
            "--warmup",
            format!("{:?}", l.warmup),
            "a replay measures its trace from the first line; cut the trace instead",
        ),
        (
            a.target.check_staleness,
            "--check-staleness",
            "true".into(),
            "the staleness check stamps Crest's own values; a replay's are the trace's sizes",
        ),
    ];
    if let Some((_, flag, value, why)) = given.into_iter().find(|g| g.0) {
        return Some(err(flag, value, why));
    }
    if matches!(a.pace.rate, Some(RateArg::Max)) {
        return Some(err(
            "--rate",
            "max",
            "a replay is open loop: give a rate to re-time the trace at, or none for its own clock",
        ));
    }
    None
}

/// Builds a replay's run configuration: the run flags that apply checked by `to_config`
/// (`crest run`'s, passed in so this file stays below the module that holds it), the
/// class replaced by the trace's.
///
/// # Errors
/// [`ConfigError`] naming the flag or file and what would be right.
pub(super) fn replay_config(
    a: ReplayArgs,
    to_config: impl FnOnce(RunArgs) -> Result<RunConfig, ConfigError>,
) -> Result<RunConfig, ConfigError> {
    if let Some(e) = refused(&a.run) {
        return Err(e);
    }
    let (speed, amplify, ahead) = knobs(&a)?;
    let rate = match a.run.pace.rate {
        Some(RateArg::Rps(r)) => Some(r),
        _ => None,
    };
    let stages = a.run.load.stages.is_some();
    let until = a.run.load.duration;
    let prefix = a
        .run
        .load
        .key_prefix
        .clone()
        .unwrap_or_default()
        .into_bytes();
    let connections = a.run.load.connections.unwrap_or(0);
    let mut run = a.run;
    // The shape's flags are checked as `crest run` checks them; the class is replaced.
    run.load.mix = Some("GET=1".into());
    let mut cfg = to_config(run)?;
    if cfg.protocol.is_memcache() && a.format == Format::Monitor {
        return Err(err(
            "--target",
            cfg.target.clone().unwrap_or_default(),
            "a MONITOR capture holds Redis commands; a memcached target replays twitter or cachebench traces",
        ));
    }
    let retime = retiming(&mut cfg, rate, stages, until)?;
    let ops = op_table(&a.files, a.format, cfg.classes[0].shape.pipeline)?;
    let mut shape = replay_shape(cfg.classes[0].shape.pipeline);
    shape.mix = ops
        .iter()
        .map(|o| (replay::template(o, cfg.protocol), 1))
        .collect();
    cfg.classes = vec![ClassConfig {
        name: "replay".into(),
        profile: None,
        requests: None,
        shape,
        // At least one per shard, set when the fleet is known; each shard sends a key
        // on one of its connections (by the key's hash), so its requests keep their order.
        connections,
        prefill: false,
    }];
    cfg.warmup = Duration::ZERO;
    cfg.replay = Some(Spec {
        files: a.files,
        format: a.format,
        speed,
        spread: match cfg.arrival {
            Arrival::Poisson => Spread::Poisson(cfg.seed),
            Arrival::Uniform => Spread::Even,
            // ETC's gaps re-time a trace (with --rate/--stages); checked above.
            Arrival::Etc => Spread::Poisson(cfg.seed),
        },
        keys: Keys {
            prefix,
            amplify,
            memcached: cfg.protocol.is_memcache(),
        },
        ops,
        retime: retime.map(|p| (p, cfg.arrival)),
        window: Window {
            ahead_ns: u64::try_from(ahead.as_nanos()).unwrap_or(u64::MAX),
            per_shard: replay::WINDOW.per_shard,
        },
    });
    Ok(cfg)
}

/// `--speed`, `--amplify` and `--ahead`, checked.
fn knobs(a: &ReplayArgs) -> Result<(f64, u32, Duration), ConfigError> {
    let speed = a.speed.unwrap_or(1.0);
    if !(SPEEDS.0..=SPEEDS.1).contains(&speed) {
        return Err(err(
            "--speed",
            speed,
            format!(
                "must be {} to {}, e.g. 2 for twice as fast",
                SPEEDS.0, SPEEDS.1
            ),
        ));
    }
    let amplify = a.amplify.unwrap_or(1);
    if !(1..=MAX_AMPLIFY).contains(&amplify) {
        return Err(err(
            "--amplify",
            amplify,
            format!("must be 1 to {MAX_AMPLIFY} (copies of each request)"),
        ));
    }
    let ahead = a
        .ahead
        .unwrap_or(Duration::from_nanos(replay::WINDOW.ahead_ns));
    if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&ahead) {
        return Err(err(
            "--ahead",
            format!("{ahead:?}"),
            "must be 100ms to 60s: the coordinator streams that far ahead of the run",
        ));
    }
    Ok((speed, amplify, ahead))
}

/// The fleet profile a trace is re-timed at (`--rate` alone: that rate until the trace
/// ends; `--stages`, or `--rate` with `--duration`: the run's profile), or None for the
/// trace's own clock (cut at `--duration`); sets the run's duration to match. ETC's gaps
/// only re-time.
fn retiming(
    cfg: &mut RunConfig,
    rate: Option<f64>,
    stages: bool,
    until: Option<Duration>,
) -> Result<Option<Profile>, ConfigError> {
    let retime = match (rate, stages) {
        (Some(r), false) if until.is_none() => {
            let forever = Segment {
                duration_ns: u64::try_from(limits::MAX_RUN.as_nanos()).unwrap_or(u64::MAX),
                from_rps: r,
                to_rps: r,
            };
            let p = Profile::new(vec![forever]).map_err(|e| err("--rate", r, e))?;
            cfg.duration = Duration::ZERO;
            Some(p)
        }
        (Some(_), _) | (None, true) => cfg.classes.first().and_then(|c| c.profile.clone()),
        (None, false) => {
            cfg.duration = until.unwrap_or(Duration::ZERO);
            None
        }
    };
    if cfg.arrival == Arrival::Etc && retime.is_none() {
        return Err(err(
            "--arrival",
            "etc",
            "a trace on its own clock spreads a second's requests evenly or as a Poisson process; ETC's gaps re-time it with --rate or --stages",
        ));
    }
    Ok(retime)
}

/// The files surveyed ([`replay::survey`]) for their op table; a MONITOR command Crest
/// cannot parse as a template is left out (and its lines skipped).
fn op_table(files: &[PathBuf], format: Format, pipeline: u32) -> Result<Vec<TraceOp>, ConfigError> {
    replay::survey(files, format, |name| {
        let shape = Shape {
            mix: vec![(
                replay::template(&TraceOp::Command(name.into()), Protocol::Resp),
                1,
            )],
            ..replay_shape(pipeline)
        };
        shape.commands(Protocol::Resp).is_ok()
    })
    .map_err(|why| {
        err(
            "FILE",
            files
                .first()
                .map(|f| f.display().to_string())
                .unwrap_or_default(),
            why,
        )
    })
}

/// A replay class's shape: its mix is the op table's templates; keys, values and TTLs
/// come from each record (the value buffer is [`replay::VALUE_BUFFER`] long).
fn replay_shape(pipeline: u32) -> Shape {
    Shape {
        mix: Vec::new(),
        keys: KeySpec {
            count: 1,
            prefix: String::new(),
            dist: KeyDist::Uniform,
            lengths: Default::default(),
        },
        values: ValueSizes::Fixed(replay::VALUE_BUFFER),
        content: Default::default(),
        pipeline,
        ttl: None,
        batch: 1,
        members: 0,
        members_sequential: false,
        range: 10,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: ReplayArgs,
    }

    /// A trace file under the temp dir, and `crest replay` parsed with `args` after it.
    fn config(name: &str, text: &str, args: &[&str]) -> Result<RunConfig, ConfigError> {
        let dir = std::env::temp_dir().join(format!("crest-replay-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(name);
        std::fs::write(&file, text).unwrap();
        let mut argv = vec!["x", file.to_str().unwrap(), "--target", "127.0.0.1:1"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).unwrap();
        let cfg = crate::cli::to_replay_config(cli.a);
        let _ = std::fs::remove_file(&file);
        cfg
    }

    const TWITTER: &str = "0,a,1,10,1,get,0\n1,b,1,10,1,set,0\n";

    /// On its own clock: no profile, no length (the trace's), one class of the cache
    /// ops' templates on one connection per shard (set with the fleet), no warm-up; a
    /// key prefix given is the trace's, the default one is not.
    #[test]
    fn a_trace_on_its_own_clock_is_one_class_of_its_op_table() {
        let cfg = config("own.csv", TWITTER, &["--format", "twitter", "--speed", "4"]).unwrap();
        let spec = cfg.replay.as_ref().unwrap();
        assert!(spec.retime.is_none());
        assert_eq!(spec.speed, 4.0);
        assert_eq!(spec.spread, Spread::Even);
        assert_eq!(
            spec.keys,
            Keys {
                prefix: Vec::new(),
                amplify: 1,
                memcached: false,
            }
        );
        assert_eq!(spec.ops, replay::cache_ops());
        assert_eq!(cfg.duration, Duration::ZERO);
        assert_eq!(cfg.warmup, Duration::ZERO);
        assert_eq!(cfg.classes.len(), 1);
        let c = &cfg.classes[0];
        assert!(c.profile.is_none() && c.requests.is_none() && !c.prefill);
        assert_eq!(c.connections, 0);
        let mix: Vec<&str> = c.shape.mix.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(mix[..3], ["GET", "GET", "SET __key__ __value__"]);
        assert_eq!(mix.len(), spec.ops.len());
        assert!(
            c.shape.commands(Protocol::Resp).is_ok(),
            "every template parses"
        );

        let cfg = config(
            "own.csv",
            TWITTER,
            &[
                "--format",
                "twitter",
                "--key-prefix",
                "p:",
                "--amplify",
                "3",
                "--arrival",
                "poisson",
                "--seed",
                "9",
                "--duration",
                "2s",
            ],
        )
        .unwrap();
        let spec = cfg.replay.as_ref().unwrap();
        assert_eq!(
            spec.keys,
            Keys {
                prefix: b"p:".to_vec(),
                amplify: 3,
                memcached: false,
            }
        );
        assert_eq!(spec.spread, Spread::Poisson(9));
        assert_eq!(
            cfg.duration,
            Duration::from_secs(2),
            "--duration cuts the trace"
        );
    }

    /// `--rate` re-times the trace at a fixed rate until it ends (or `--duration`), and
    /// `--stages` at its profile, which sets the length.
    #[test]
    fn a_rate_or_stages_retimes_the_trace() {
        let cfg = config("r.csv", TWITTER, &["--format", "twitter", "--rate", "500"]).unwrap();
        let (p, arrival) = cfg.replay.as_ref().unwrap().retime.clone().unwrap();
        assert_eq!(p.peak_rps(), 500.0);
        assert_eq!(Duration::from_nanos(p.duration_ns()), limits::MAX_RUN);
        assert_eq!(arrival, Arrival::Uniform);
        assert_eq!(cfg.duration, Duration::ZERO, "until the trace ends");

        let cfg = config(
            "r.csv",
            TWITTER,
            &["--format", "twitter", "--rate", "500", "--duration", "3s"],
        )
        .unwrap();
        let (p, _) = cfg.replay.as_ref().unwrap().retime.clone().unwrap();
        assert_eq!(p.duration_ns(), 3_000_000_000);
        assert_eq!(cfg.duration, Duration::from_secs(3));

        let cfg = config(
            "r.csv",
            TWITTER,
            &["--format", "twitter", "--stages", "1s:0->100, 2s:100"],
        )
        .unwrap();
        let (p, _) = cfg.replay.as_ref().unwrap().retime.clone().unwrap();
        assert_eq!(p.duration_ns(), 3_000_000_000);
        assert_eq!(cfg.duration, Duration::from_secs(3));
        assert!(
            cfg.classes[0].profile.is_none(),
            "the class sends the trace"
        );
    }

    /// A MONITOR capture's op table: each command in the order first seen, less those a
    /// replay does not send (SELECT, CONFIG) and lines that are not commands.
    #[test]
    fn a_monitor_captures_op_table_is_its_commands_in_order() {
        let text = "OK\n\
            1700000000.000001 [0 127.0.0.1:1] \"CONFIG\" \"GET\" \"save\"\n\
            1700000000.000002 [0 127.0.0.1:1] \"set\" \"k\" \"v\"\n\
            1700000000.000003 [0 127.0.0.1:1] \"SELECT\" \"1\"\n\
            1700000000.000004 [0 127.0.0.1:1] \"HSET\" \"h\" \"f\" \"v\"\n\
            1700000000.000005 [0 127.0.0.1:1] \"GET\" \"k\"\n\
            1700000000.000006 [0 127.0.0.1:1] \"SET\" \"k\" \"w\"\n";
        let cfg = config("m.txt", text, &["--format", "monitor"]).unwrap();
        let ops: Vec<String> = cfg
            .replay
            .as_ref()
            .unwrap()
            .ops
            .iter()
            .map(TraceOp::spelling)
            .collect();
        assert_eq!(ops, ["cmd:SET", "cmd:HSET", "cmd:GET"]);
        let mix: Vec<&str> = cfg.classes[0]
            .shape
            .mix
            .iter()
            .map(|m| m.0.as_str())
            .collect();
        assert_eq!(mix, ["SET __key__", "HSET __key__", "GET __key__"]);

        let only_admin = "1700000000.000001 [0 127.0.0.1:1] \"CONFIG\" \"GET\" \"save\"\n";
        let e = config("m.txt", only_admin, &["--format", "monitor"]).unwrap_err();
        assert!(e.why.contains("no command that can be replayed"), "{e}");
    }
}
