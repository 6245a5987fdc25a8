//! The live mode of `crest compare`: every target loaded with the same plan and seed, the
//! runs interleaved, each one a whole `crest run` (same workers, same report).

use crate::cli::{RunArgs, to_config};
use crate::orchestrate::{self, RunError};
use crate::{build, output};
use clap::ValueEnum;
use crest_report::compare::{Arm, Comparison, entry, identity, is_label};
use std::path::PathBuf;
use tokio::sync::watch;

/// What happens to a target before each of its runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Between {
    /// Nothing: each run finds what the previous one left.
    None,
    /// `FLUSHALL` first: each run starts from an empty server.
    Flush,
    /// `FLUSHALL`, then the run's prefill (`--prefill`): each run starts from the same
    /// full keyspace.
    Prefill,
}

impl Between {
    fn name(self) -> &'static str {
        match self {
            Between::None => "none",
            Between::Flush => "flush",
            Between::Prefill => "prefill",
        }
    }
}

/// Most runs per target (a typo like `--runs 5000` should not start a day of load).
pub const MAX_RUNS: u32 = 100;

/// `--target LABEL=ADDR` (or a bare address, labelled A, B, …) as (label, address).
///
/// # Errors
/// One line: fewer than two targets, or a label given twice.
pub fn parse_targets(list: &[String]) -> Result<Vec<(String, String)>, String> {
    if list.len() < 2 {
        return Err(format!(
            "--target: crest compare needs two or more targets, got {}: give --target a=HOST:PORT --target b=HOST:PORT (the same address twice for an A/A check)",
            list.len()
        ));
    }
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let (label, addr) = match t.split_once('=') {
            Some((l, "")) if is_label(l) => {
                return Err(format!(
                    "--target {t}: no address after the label; give LABEL=HOST:PORT, e.g. {l}=127.0.0.1:6379"
                ));
            }
            Some((l, a)) if is_label(l) => (l.to_string(), a.to_string()),
            _ => (
                char::from(b'A' + u8::try_from(i % 26).unwrap_or(0)).to_string(),
                t.clone(),
            ),
        };
        if out.iter().any(|(l, _)| *l == label) {
            return Err(format!(
                "--target {t}: the label {label} is given twice; give each target its own (--target a=… --target b=…)"
            ));
        }
        out.push((label, addr));
    }
    Ok(out)
}

/// The interleaved order of `runs` rounds over `arms` targets: rounds alternate forward
/// and backward (A B, B A, A B, …: ABBA), so a drift falls on every target alike.
pub fn order(arms: usize, runs: u32) -> Vec<usize> {
    (0..runs)
        .flat_map(|r| {
            let fwd: Vec<usize> = (0..arms).collect();
            if r % 2 == 0 {
                fwd
            } else {
                fwd.into_iter().rev().collect()
            }
        })
        .collect()
}

/// Why the comparison stopped.
#[derive(Debug)]
pub enum CompareError {
    /// Bad input: one line, exit 2.
    Usage(String),
    /// A run could not be made: one line, exit 1.
    Failed(String),
}

/// Everything the live mode needs besides the run flags.
#[derive(Debug, Clone)]
pub struct Plan {
    /// (label, target address) per target; the first is the baseline.
    pub targets: Vec<(String, String)>,
    /// Runs per target.
    pub runs: u32,
    /// The smallest relative effect called a difference (a fraction).
    pub min_effect: f64,
    /// Before each run.
    pub between: Between,
}

/// Sends `FLUSHALL` to the target of `cfg` on a connection set up as the shards' are
/// (`crest compare` and `crest search` between runs).
pub(crate) async fn flush(cfg: &crate::config::RunConfig) -> Result<(), String> {
    if cfg.protocol.is_memcache() {
        let mut ring = orchestrate::memcache_ring(cfg, None).await?;
        return crate::server_stats::memcache::flush_all(
            &mut ring,
            std::time::Duration::from_secs(5),
        )
        .await
        .map_err(|e| format!("--between: {e}"));
    }
    let (mut c, t) = orchestrate::control_to(cfg, None, "crest-compare").await?;
    match c.ask(&[b"FLUSHALL"], 1 << 16).await {
        Ok(Some(crest_resp::Frame::Simple(_))) => Ok(()),
        Ok(Some(f)) => Err(format!(
            "--between: FLUSHALL on {t} was answered {f:?}: give the user the @keyspace FLUSHALL right, or --between none"
        )),
        Ok(None) => Err(format!("--between: {t} closed the connection on FLUSHALL")),
        Err(e) => Err(format!("--between: FLUSHALL on {t}: {e}")),
    }
}

/// Makes every run of the plan in the interleaved order and compares them. `args` is the
/// run's flags (its `--target` and `--seed` are replaced per run, its `--out` is the
/// comparison's folder: each run's report goes to `runs/NN-label/` there).
/// `interrupt` turns true on Ctrl-C: the run under way stops, no further run starts, and
/// the runs made so far are compared (an interrupted run is left out).
///
/// # Errors
/// [`CompareError::Usage`] before any load (a bad flag for any target), or
/// [`CompareError::Failed`] when a run could not be made.
pub async fn run_all(
    args: RunArgs,
    plan: &Plan,
    interrupt: watch::Receiver<bool>,
) -> Result<Comparison, CompareError> {
    if plan.runs == 0 || plan.runs > MAX_RUNS {
        return Err(CompareError::Usage(format!(
            "--runs {}: give 1 to {MAX_RUNS} runs per target (5 or more for a confidence interval)",
            plan.runs
        )));
    }
    if args.target.cluster && plan.between != Between::None {
        return Err(CompareError::Usage(format!(
            "--between {}: FLUSHALL reaches one node of a cluster only; give --between none with --cluster",
            plan.between.name()
        )));
    }
    let out = args.pace.out.clone();
    if let Some(dir) = &out {
        output::check_writable(dir).map_err(CompareError::Usage)?;
    }
    let configs = configs(args, plan)?;
    probe_all(&configs, plan).await?;
    let seed = configs.first().map_or(0, |c| c.seed);
    let sequence = order(plan.targets.len(), plan.runs);
    let mut arms: Vec<Arm> = plan
        .targets
        .iter()
        .map(|(label, addr)| Arm {
            label: label.clone(),
            target: addr.clone(),
            version: None,
            allocator: None,
            runs: Vec::new(),
        })
        .collect();
    let total = sequence.len();
    let mut interrupted = false;
    for (i, &k) in sequence.iter().enumerate() {
        if *interrupt.borrow() {
            interrupted = true;
            break;
        }
        let (label, addr) = &plan.targets[k];
        let dir = out
            .as_ref()
            .map(|d| d.join("runs").join(format!("{:02}-{label}", i + 1)));
        // Each target's configuration was made and checked once, above.
        let mut cfg = configs[k].clone();
        cfg.out.clone_from(&dir);
        cfg.label = format!("compare: run {} of {total}, {label}", i + 1);
        if let Some(d) = &dir {
            output::check_writable(d).map_err(CompareError::Failed)?;
        }
        if plan.between != Between::None {
            flush(&cfg).await.map_err(CompareError::Failed)?;
        }
        let Some(report) = run_one(&cfg, &interrupt, None).await? else {
            interrupted = true;
            break;
        };
        if report.interrupted {
            interrupted = true;
            break;
        }
        let source = dir
            .as_ref()
            .map_or_else(|| format!("run {}", i + 1), |d| d.display().to_string());
        let run = entry(&report, &source, Some(i + 1));
        let (_, version, allocator) = identity(&report);
        eprintln!(
            "crest compare: {}",
            run_line((i + 1, total), label, addr, &report)
        );
        let arm = &mut arms[k];
        if arm.version.is_none() {
            arm.version = version;
            arm.allocator = allocator;
        }
        arm.runs.push(run);
    }
    if arms.iter().any(|a| a.runs.is_empty()) {
        return Err(CompareError::Failed(
            "interrupted before every target had a run: nothing to compare".into(),
        ));
    }
    let mut c = crest_report::compare::compare(arms, plan.min_effect, "runs");
    c.order = sequence
        .iter()
        .take(c.runs_per_target.iter().sum())
        .map(|&k| plan.targets[k].0.clone())
        .collect();
    c.seed = Some(seed.to_string());
    c.between = Some(plan.between.name().to_string());
    if interrupted {
        c.warnings.insert(
            0,
            "interrupted: the runs made until then are compared".to_string(),
        );
    }
    Ok(c)
}

/// Probes every target before the first run, as each run's workers will (a target found
/// dead after the others' runs would waste them): with in-process workers a target that
/// cannot be reached or refuses the generator stops the comparison, named by its flag;
/// remote workers may reach what this machine cannot, so there it is a warning.
///
/// # Errors
/// [`CompareError::Usage`] naming the target and what is wrong.
async fn probe_all(configs: &[crate::config::RunConfig], plan: &Plan) -> Result<(), CompareError> {
    for (cfg, (label, addr)) in configs.iter().zip(&plan.targets) {
        let Err(why) = orchestrate::probe_target(cfg).await else {
            continue;
        };
        match cfg.workers {
            crate::config::Workers::Local { .. } => {
                return Err(CompareError::Usage(format!(
                    "--target {label}={addr}: {why} (every target is probed before the first run: no run was made)"
                )));
            }
            crate::config::Workers::Remote { .. } => eprintln!(
                "crest compare: warning: --target {label}={addr}: {why} (from this machine; the remote workers may reach it)"
            ),
        }
    }
    Ok(())
}

/// Every target's configuration, made and checked once before the first request, all
/// with one seed (the user's, or drawn once).
fn configs(args: RunArgs, plan: &Plan) -> Result<Vec<crate::config::RunConfig>, CompareError> {
    let mut base = args;
    if plan.between == Between::Prefill {
        base.load.prefill = true;
    }
    if let (Some(r), true) = (base.target.replicas.first(), plan.targets.len() > 1) {
        return Err(CompareError::Usage(format!(
            "--replica {r}: it names one primary's replicas, but crest compare loads {} targets; leave it out and each primary's INFO replication names its own",
            plan.targets.len()
        )));
    }
    let mut configs = Vec::new();
    for (label, addr) in &plan.targets {
        let mut a = base.clone();
        a.target.target = Some(addr.clone());
        a.pace.out = None;
        let cfg = to_config(a).map_err(|e| CompareError::Usage(format!("{label}: {e}")))?;
        if base.pace.seed.is_none() {
            base.pace.seed = Some(cfg.seed);
        }
        configs.push(cfg);
    }
    Ok(configs)
}

/// A latency quantile for a progress line: none when nothing completed.
fn latency(completed: u64, us: f64) -> String {
    if completed == 0 {
        "-".into()
    } else {
        crest_report::fmt::human_us(us)
    }
}

/// One run's progress line.
fn run_line(
    (n, total): (usize, usize),
    label: &str,
    addr: &str,
    report: &crest_report::Report,
) -> String {
    let s = &report.totals.summary;
    format!(
        "run {n}/{total}: {label} ({addr}): {} completed, {} errors, p50 {}, p99 {}{}",
        s.completed,
        s.errors,
        latency(s.completed, s.latency_us.p50),
        latency(s.completed, s.latency_us.p99),
        if report.complete {
            ""
        } else {
            " (report not complete)"
        }
    )
}

/// One whole `crest run` of `cfg` (its report written to `cfg.out` when given); None when
/// `interrupt` turned true before the measured run began.
///
/// # Errors
/// [`CompareError`] as the run's own error (usage or failure).
pub async fn run_one(
    cfg: &crate::config::RunConfig,
    interrupt: &watch::Receiver<bool>,
    points: Option<orchestrate::steer::Points>,
) -> Result<Option<crest_report::Report>, CompareError> {
    let listener = orchestrate::bind(cfg).await.map_err(run_error)?;
    let mut rx = interrupt.clone();
    let stop = async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let ran = match orchestrate::run_with(cfg, listener, stop, points, build::finish).await {
        Ok(r) => r,
        Err(RunError::Interrupted) => return Ok(None),
        Err(e) => return Err(run_error(e)),
    };
    let build::Ran {
        report,
        live_errors,
    } = ran;
    if let Some(d) = &cfg.out {
        output::write_all(&report, d, !live_errors.is_empty()).map_err(CompareError::Failed)?;
    }
    Ok(Some(report))
}

fn run_error(e: RunError) -> CompareError {
    match e {
        RunError::Usage(m) => CompareError::Usage(m),
        RunError::Failed(m) => CompareError::Failed(m),
        RunError::Interrupted => CompareError::Failed("interrupted".into()),
    }
}

/// Writes `compare.json` and `compare.html` into `dir`.
///
/// # Errors
/// The file that cannot be written, named.
pub fn write(c: &Comparison, dir: &std::path::Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::to_string_pretty(c).map_err(|e| format!("compare.json: {e}"))?;
    let html = dir.join("compare.html");
    std::fs::write(&html, c.html()).map_err(|e| format!("{}: {e}", html.display()))?;
    let path = dir.join("compare.json");
    std::fs::write(&path, json).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_abba() {
        assert_eq!(order(2, 5), vec![0, 1, 1, 0, 0, 1, 1, 0, 0, 1]);
        assert_eq!(order(3, 2), vec![0, 1, 2, 2, 1, 0]);
    }

    #[test]
    fn targets_take_labels_or_letters() {
        let t = parse_targets(&["valkey=127.0.0.1:1".into(), "redis://h:2".into()]).unwrap();
        assert_eq!(t[0], ("valkey".into(), "127.0.0.1:1".into()));
        assert_eq!(t[1], ("B".into(), "redis://h:2".into()));
        assert!(
            parse_targets(&["a=x:1".into()])
                .unwrap_err()
                .contains("two or more")
        );
        assert!(
            parse_targets(&["a=x:1".into(), "a=y:2".into()])
                .unwrap_err()
                .contains("twice")
        );
    }
}
