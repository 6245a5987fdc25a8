//! Rate profiles and profile files: `--stages "30s:0->50000, 60s:50000"`, and TOML files
//! with global settings and `[[class]]` tables (see `examples/`).
//!
//! A profile is a list of shapes — hold, ramp, step, sine, spike, points — each turned into
//! linear segments that the workers follow exactly. Profile time 0 is the synchronized
//! start, so every worker's share peaks at the same instant.

use crate::config::{self, parse_duration, parse_size};
use crest_model::schedule::Segment;
use crest_model::shapes::{KeyDist, Ttl, ValueSizes};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use toml::Spanned;

/// Linear pieces per sine period: the chord error at 64 pieces is 0.12% of the amplitude.
const SINE_PIECES: u32 = 64;
/// Most segments one class's profile may expand to: the wire's own cap, so a profile that
/// parses here is never refused by a worker.
pub const MAX_SEGMENTS: usize = crest_model::convert::limits::MAX_SEGMENTS;

fn seg(d: Duration, from: f64, to: f64) -> Segment {
    Segment {
        duration_ns: d.as_nanos() as u64,
        from_rps: from,
        to_rps: to,
    }
}

fn rate(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("rate {s:?} is not a number of requests per second"))?;
    if !r.is_finite() || r < 0.0 {
        return Err(format!("rate {s:?} must be ≥ 0"));
    }
    Ok(r)
}

/// Parses `--stages`: comma-separated `DURATION:RATE` (hold) or `DURATION:FROM->TO`
/// (linear ramp), k6-style.
///
/// # Errors
/// A message naming the stage and what is wrong.
pub fn parse_stages(s: &str) -> Result<Vec<Segment>, String> {
    let mut out = Vec::new();
    for (i, stage) in s.split(',').map(str::trim).enumerate() {
        if stage.is_empty() {
            continue;
        }
        let (d, r) = stage.split_once(':').ok_or_else(|| {
            format!(
                "stage {} {stage:?}: expected DURATION:RATE or DURATION:FROM->TO",
                i + 1
            )
        })?;
        let d = parse_duration(d).map_err(|e| format!("stage {} {stage:?}: {e}", i + 1))?;
        if d.is_zero() {
            return Err(format!("stage {} {stage:?}: duration must be > 0", i + 1));
        }
        let (from, to) = match r.split_once("->") {
            Some((a, b)) => (rate(a), rate(b)),
            None => (rate(r), rate(r)),
        };
        let from = from.map_err(|e| format!("stage {} {stage:?}: {e}", i + 1))?;
        let to = to.map_err(|e| format!("stage {} {stage:?}: {e}", i + 1))?;
        out.push(seg(d, from, to));
    }
    if out.is_empty() {
        return Err(format!(
            "{s:?} has no stages; expected e.g. \"30s:0->5000, 60s:5000\""
        ));
    }
    Ok(out)
}

/// One shape of a profile in a file. Exactly one of the shape keys is set.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ShapeToml {
    /// Hold `rate` for this long.
    pub hold: Option<String>,
    /// Ramp linearly from `from` to `to` over this long.
    pub ramp: Option<String>,
    /// Jump to `rate` and hold it this long (a hold that starts a new level).
    pub step: Option<String>,
    /// A sine between `min` and `max` with `period`, for this long.
    pub sine: Option<String>,
    /// `base` with a rectangular `peak` of `width` starting `at`, for this long.
    pub spike: Option<String>,
    /// Points `[["0s", 0], ["10s", 5000], ...]` joined linearly.
    pub points: Option<Vec<(String, f64)>>,
    /// Rate of a hold or step.
    pub rate: Option<f64>,
    /// Ramp start.
    pub from: Option<f64>,
    /// Ramp end.
    pub to: Option<f64>,
    /// Sine low.
    pub min: Option<f64>,
    /// Sine high.
    pub max: Option<f64>,
    /// Sine period.
    pub period: Option<String>,
    /// Spike base rate.
    pub base: Option<f64>,
    /// Spike peak rate.
    pub peak: Option<f64>,
    /// Spike start within the shape.
    pub at: Option<String>,
    /// Spike width.
    pub width: Option<String>,
}

fn need<T: Copy>(v: Option<T>, key: &str, shape: &str) -> Result<T, String> {
    v.ok_or_else(|| format!("{shape} needs `{key}`"))
}

fn dur(s: &str, key: &str) -> Result<Duration, String> {
    let d = parse_duration(s).map_err(|e| format!("`{key}`: {e}"))?;
    if d.is_zero() {
        return Err(format!("`{key}` = {s:?}: duration must be > 0"));
    }
    Ok(d)
}

impl ShapeToml {
    /// Linear segments of this shape.
    ///
    /// # Errors
    /// A message naming the missing or bad key.
    pub fn segments(&self) -> Result<Vec<Segment>, String> {
        let kinds = [
            self.hold.is_some(),
            self.ramp.is_some(),
            self.step.is_some(),
            self.sine.is_some(),
            self.spike.is_some(),
            self.points.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(
                "each profile entry needs exactly one of hold, ramp, step, sine, spike, points"
                    .into(),
            );
        }
        let check = |r: f64, key: &str| -> Result<f64, String> {
            if r.is_finite() && r >= 0.0 {
                Ok(r)
            } else {
                Err(format!("`{key}` = {r}: a rate must be ≥ 0"))
            }
        };
        if let Some(d) = self.hold.as_deref().or(self.step.as_deref()) {
            let shape = if self.hold.is_some() { "hold" } else { "step" };
            let r = check(need(self.rate, "rate", shape)?, "rate")?;
            return Ok(vec![seg(dur(d, shape)?, r, r)]);
        }
        if let Some(d) = &self.ramp {
            let a = check(need(self.from, "from", "ramp")?, "from")?;
            let b = check(need(self.to, "to", "ramp")?, "to")?;
            return Ok(vec![seg(dur(d, "ramp")?, a, b)]);
        }
        if let Some(d) = &self.sine {
            let total = dur(d, "sine")?;
            let period = dur(
                self.period.as_deref().ok_or("sine needs `period`")?,
                "period",
            )?;
            let lo = check(need(self.min, "min", "sine")?, "min")?;
            let hi = check(need(self.max, "max", "sine")?, "max")?;
            if lo > hi {
                return Err(format!("sine `min` {lo} exceeds `max` {hi}"));
            }
            let piece = period.as_secs_f64() / f64::from(SINE_PIECES);
            let n = (total.as_secs_f64() / piece).ceil();
            if n.is_nan() || n > MAX_SEGMENTS as f64 {
                return Err(format!(
                    "sine of {total:?} with period {period:?} makes {n:.0} segments; at most {MAX_SEGMENTS} (give a longer period or a shorter sine)"
                ));
            }
            let n = n as u64;
            let f = |t: f64| {
                lo + (hi - lo)
                    * (1.0 + (2.0 * std::f64::consts::PI * t / period.as_secs_f64()).sin())
                    / 2.0
            };
            let mut out = Vec::new();
            for i in 0..n {
                let t0 = i as f64 * piece;
                let t1 = ((i + 1) as f64 * piece).min(total.as_secs_f64());
                if t1 > t0 {
                    out.push(seg(
                        Duration::try_from_secs_f64(t1 - t0).unwrap_or(Duration::ZERO),
                        f(t0),
                        f(t1),
                    ));
                }
            }
            return Ok(out);
        }
        if let Some(d) = &self.spike {
            let total = dur(d, "spike")?;
            let base = check(need(self.base, "base", "spike")?, "base")?;
            let peak = check(need(self.peak, "peak", "spike")?, "peak")?;
            let at = parse_duration(self.at.as_deref().ok_or("spike needs `at`")?)
                .map_err(|e| format!("`at`: {e}"))?;
            let width = dur(self.width.as_deref().ok_or("spike needs `width`")?, "width")?;
            let end = at.checked_add(width).filter(|e| *e <= total);
            if end.is_none() {
                return Err(format!(
                    "spike `at` {at:?} + `width` {width:?} runs past its length ({total:?})"
                ));
            }
            let mut out = Vec::new();
            if !at.is_zero() {
                out.push(seg(at, base, base));
            }
            out.push(seg(width, peak, peak));
            let rest = total - at - width;
            if !rest.is_zero() {
                out.push(seg(rest, base, base));
            }
            return Ok(out);
        }
        let Some(pts) = &self.points else {
            return Err(
                "each profile entry needs one of hold, ramp, step, sine, spike, points".into(),
            );
        };
        if pts.len() < 2 {
            return Err("points needs at least two [time, rate] pairs".into());
        }
        let mut out = Vec::new();
        let mut prev: Option<(Duration, f64)> = None;
        for (t, r) in pts {
            let t = parse_duration(t).map_err(|e| format!("points: {e}"))?;
            let r = check(*r, "points")?;
            if let Some((pt, pr)) = prev {
                if t <= pt {
                    return Err(format!("points: times must increase ({pt:?} then {t:?})"));
                }
                out.push(seg(t - pt, pr, r));
            } else if !t.is_zero() {
                return Err("points: the first point must be at 0s".into());
            }
            prev = Some((t, r));
        }
        Ok(out)
    }
}

/// Keyspace settings of a class.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct KeysToml {
    /// Number of keys.
    pub count: Option<u64>,
    /// Key prefix.
    pub prefix: Option<String>,
    /// uniform | zipf | sequential | gaussian.
    pub distribution: Option<String>,
    /// Zipf exponent.
    pub exponent: Option<f64>,
    /// Name lengths: `"etc"`, `"natural"`, or sizes (`32`, `"10-40"`, `"16:3,64:1"`).
    pub size: Option<toml::Value>,
    /// `distribution = "table"`: buckets of [share of keys, share of requests].
    pub table: Option<Vec<(f64, f64)>>,
    /// Gaussian mean (key index).
    pub mean: Option<f64>,
    /// Gaussian standard deviation (keys).
    pub stddev: Option<f64>,
}

/// Value size settings of a class.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ValuesToml {
    /// Fixed size (`1024`, `"1k"`).
    pub size: Option<toml::Value>,
    /// Uniform range low end.
    pub min: Option<toml::Value>,
    /// Uniform range high end.
    pub max: Option<toml::Value>,
    /// Weighted list: `[[100, 3], ["4k", 1]]` (size, weight).
    pub sizes: Option<Vec<(toml::Value, u32)>>,
    /// What the bytes are: `fixed`, `random` or `compressible:R` (`--value-content`).
    pub content: Option<String>,
}

fn size_of(v: &toml::Value, key: &str) -> Result<u64, String> {
    match v {
        toml::Value::Integer(i) if *i >= 0 => Ok(*i as u64),
        toml::Value::String(s) => parse_size(s).map_err(|e| format!("`{key}`: {e}")),
        other => Err(format!(
            "`{key}` = {other}: expected a size like 1024 or \"1k\""
        )),
    }
}

impl ValuesToml {
    /// The checked sizes.
    ///
    /// # Errors
    /// A message naming the key.
    pub fn sizes(&self) -> Result<ValueSizes, String> {
        let v = match (&self.size, &self.min, &self.max, &self.sizes) {
            (Some(s), None, None, None) => ValueSizes::Fixed(size_of(s, "size")?),
            (None, Some(a), Some(b), None) => {
                ValueSizes::Range(size_of(a, "min")?, size_of(b, "max")?)
            }
            (None, None, None, Some(list)) => ValueSizes::Weighted(
                list.iter()
                    .map(|(s, w)| Ok((size_of(s, "sizes")?, *w)))
                    .collect::<Result<_, String>>()?,
            ),
            _ => return Err("values needs exactly one of: size; min and max; sizes".into()),
        };
        v.check().map_err(|e| e.to_string())?;
        Ok(v)
    }
}

/// One `[[class]]` table.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ClassToml {
    /// Name in results.
    pub name: Option<String>,
    /// A constant rate, or "max" for closed loop.
    pub rate: Option<toml::Value>,
    /// k6-style stages string.
    pub stages: Option<String>,
    /// Shapes, in order.
    pub profile: Option<Vec<Spanned<ShapeToml>>>,
    /// Repeat the profile this many times in all.
    pub repeat: Option<u32>,
    /// SET:GET short form.
    pub ratio: Option<String>,
    /// Command weights (built-in names or templates).
    pub mix: Option<BTreeMap<String, u32>>,
    /// Keyspace.
    pub keys: Option<KeysToml>,
    /// Value sizes.
    pub values: Option<ValuesToml>,
    /// Connections across the cluster.
    pub connections: Option<u32>,
    /// Requests in flight per connection.
    pub pipeline: Option<u32>,
    /// Expire written keys after this long (`"60s"`), or a table drawn per write
    /// (`"0:30,60s:50"`, or `{ table = [["0", 30], ["60s", 50]] }`; 0: no TTL).
    pub ttl: Option<toml::Value>,
    /// Members or keys per batch command.
    pub batch: Option<u32>,
    /// Members (fields) per key.
    pub members: Option<u64>,
    /// uniform | sequential.
    pub member_order: Option<String>,
    /// LRANGE / ZRANGE length.
    pub range: Option<u32>,
    /// Write every key once before the run.
    pub prefill: Option<bool>,
    /// Closed loop: requests in all.
    pub requests: Option<u64>,
}

/// A profile file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FileToml {
    /// Server address: `host:port` or a `redis://` URI.
    pub target: Option<String>,
    /// ACL user to authenticate as.
    pub user: Option<String>,
    /// File holding the password (relative to the profile file's folder).
    pub password_file: Option<PathBuf>,
    /// Database to select.
    pub db: Option<u32>,
    /// TLS to the target.
    pub tls: Option<bool>,
    /// CA file for TLS (relative to the profile file's folder).
    pub cacert: Option<PathBuf>,
    /// Client certificate for TLS (relative to the profile file's folder).
    pub cert: Option<PathBuf>,
    /// Its private key (relative to the profile file's folder).
    pub key: Option<PathBuf>,
    /// TLS server name.
    pub sni: Option<String>,
    /// Protocol: 2 or 3.
    pub resp: Option<u32>,
    /// Client-side caching (`CLIENT TRACKING on`; resp 3 only).
    pub tracking: Option<bool>,
    /// A Redis Cluster (true), one node (false); absent: what the seed says.
    pub cluster: Option<bool>,
    /// memcached's meta protocol (true) to a `memcache://` target; else its text protocol.
    pub meta: Option<bool>,
    /// `--conn-lifetime`: "30s" or "30s±5s".
    pub conn_lifetime: Option<String>,
    /// `--conn-rate`: connections retired per second across the fleet.
    pub conn_rate: Option<f64>,
    /// `--read-from`: primary, replicas, prefer-replicas or any.
    pub read_from: Option<String>,
    /// `--replica`: a standalone primary's replicas to read from (`host:port`).
    pub replicas: Option<Vec<String>>,
    /// Sample the target's INFO at every interval (default true; false as
    /// `--no-server-stats`).
    pub server_stats: Option<bool>,
    /// `--check-staleness`.
    pub check_staleness: Option<bool>,
    /// Pause a closed-loop class every this many requests and sample `INFO memory`.
    pub checkpoint_every: Option<u64>,
    /// Command run at every checkpoint, e.g. "ZCARD growth".
    pub probe: Option<String>,
    /// Run length (default: the longest class profile).
    pub duration: Option<String>,
    /// Seed.
    pub seed: Option<u64>,
    /// Unmeasured lead-in.
    pub warmup: Option<String>,
    /// uniform | poisson | etc.
    pub arrival: Option<String>,
    /// A workload model under every class's settings (`--preset`): `etc`.
    pub preset: Option<String>,
    /// sleep | spin.
    pub pacer: Option<String>,
    /// Per-request timeout.
    pub timeout: Option<String>,
    /// Reply wait after the schedule.
    pub drain: Option<String>,
    /// Classes.
    #[serde(rename = "class")]
    pub classes: Vec<Spanned<ClassToml>>,
}

/// 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

/// Parses a profile file's text. Syntax errors and unknown keys come from the TOML reader
/// with line and column.
///
/// # Errors
/// A message with the file position.
pub fn parse_file(text: &str) -> Result<FileToml, String> {
    toml::from_str(text).map_err(|e| toml_error(&e, text))
}

/// Most characters of the profile a TOML error quotes (its message, the line it is on):
/// a 100,000-deep array is one line, and the error stays one short line.
const EXCERPT: usize = 200;

/// A TOML error on one line: where (line and column), what, and the start of the line
/// it is on, each cut at [`EXCERPT`] characters.
fn toml_error(e: &toml::de::Error, text: &str) -> String {
    let what = excerpt(&e.message().trim_end().replace('\n', " "), EXCERPT);
    let Some(span) = e.span() else {
        return format!("TOML parse error: {what}");
    };
    let mut at = span.start.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let column = text[start..at].chars().count() + 1;
    let source = excerpt(text[start..end].trim_end_matches('\r'), EXCERPT);
    format!(
        "TOML parse error at line {}, column {column}: {what} (the line: {source:?})",
        line_of(text, at)
    )
}

/// The first `max` characters of `s`, with an ellipsis when it goes on.
pub fn excerpt(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Turns a class's rate settings into segments (None for closed loop).
///
/// # Errors
/// A message naming the key.
pub fn class_segments(
    c: &ClassToml,
    text: &str,
    duration: Option<Duration>,
) -> Result<Option<Vec<Segment>>, String> {
    let set = [c.rate.is_some(), c.stages.is_some(), c.profile.is_some()];
    if set.iter().filter(|s| **s).count() > 1 {
        return Err("give only one of `rate`, `stages`, `profile`".into());
    }
    let mut segs = if let Some(r) = &c.rate {
        let r = match r {
            toml::Value::String(s) if s == "max" => return Ok(None),
            toml::Value::Integer(i) => *i as f64,
            toml::Value::Float(f) => *f,
            other => {
                return Err(format!(
                    "`rate` = {other}: expected requests per second or \"max\""
                ));
            }
        };
        if !(r.is_finite() && r >= 0.0) {
            return Err(format!("`rate` = {r}: must be ≥ 0"));
        }
        let d = duration.ok_or("`rate` needs the file's `duration` (or --duration)")?;
        vec![seg(d, r, r)]
    } else if let Some(s) = &c.stages {
        parse_stages(s).map_err(|e| format!("`stages`: {e}"))?
    } else if let Some(p) = &c.profile {
        let mut out = Vec::new();
        for shape in p {
            let segs = shape.get_ref().segments().map_err(|e| {
                format!(
                    "profile entry at line {}: {e}",
                    line_of(text, shape.span().start)
                )
            })?;
            out.extend(segs);
        }
        out
    } else {
        return Err("needs one of `rate`, `stages`, `profile`".into());
    };
    if let Some(n) = c.repeat {
        if n == 0 {
            return Err("`repeat` = 0: must be ≥ 1".into());
        }
        let total = segs.len().saturating_mul(n as usize);
        if total > MAX_SEGMENTS {
            return Err(format!(
                "`repeat` = {n} makes {total} segments; at most {MAX_SEGMENTS} (repeat less, or describe the profile with fewer entries)"
            ));
        }
        let one = segs.clone();
        for _ in 1..n {
            segs.extend(one.iter().copied());
        }
    }
    Ok(Some(segs))
}

/// Converts keyspace settings.
///
/// # Errors
/// A message naming the key.
pub fn key_dist(k: &KeysToml, count: u64) -> Result<KeyDist, String> {
    match k.distribution.as_deref().unwrap_or("uniform") {
        "uniform" => Ok(KeyDist::Uniform),
        "sequential" => Ok(KeyDist::Sequential),
        "zipf" | "zipfian" => {
            let s = k.exponent.unwrap_or(0.99);
            if !(s > 0.0 && s.is_finite()) {
                return Err(format!(
                    "`keys.exponent` = {s}: the zipf exponent must be > 0"
                ));
            }
            Ok(KeyDist::Zipf(s))
        }
        "gaussian" | "normal" => {
            let sd = k.stddev.unwrap_or(count as f64 / 6.0);
            if !(sd > 0.0 && sd.is_finite()) {
                return Err(format!("`keys.stddev` = {sd}: must be > 0"));
            }
            Ok(KeyDist::Gaussian {
                mean: k.mean.unwrap_or(count as f64 / 2.0),
                stddev: sd,
            })
        }
        "table" => {
            let t = k.table.clone().ok_or_else(|| {
                "`keys.distribution` = \"table\" needs `keys.table = [[share of keys, share of requests], ...]`".to_string()
            })?;
            crest_model::shapes::KeySpace::new(count, "", KeyDist::Table(t.clone()))
                .map_err(|e| e.to_string())?;
            Ok(KeyDist::Table(t))
        }
        other => Err(format!(
            "`keys.distribution` = {other:?}: expected uniform, zipf, sequential, gaussian or table"
        )),
    }
}

/// Parses `--key-dist`: `uniform`, `sequential`, `zipf[:S]`, `gaussian[:MEAN:STDDEV]`,
/// `table:KEYS=REQUESTS,...` (a popularity table's shares per bucket).
///
/// # Errors
/// A message saying what would be right.
pub fn parse_key_dist(s: &str) -> Result<KeysToml, String> {
    if let Some(rest) = s.trim().strip_prefix("table:") {
        // `table:KEYS=REQUESTS,...`: shares per bucket.
        let why = || {
            format!("{s:?}: expected table:KEYS=REQUESTS,... shares, e.g. table:0.1=0.9,0.9=0.1")
        };
        let table = rest
            .split(',')
            .map(|b| {
                let (k, r) = b.split_once('=').ok_or_else(why)?;
                Ok((
                    k.trim().parse::<f64>().map_err(|_| why())?,
                    r.trim().parse::<f64>().map_err(|_| why())?,
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        return Ok(KeysToml {
            distribution: Some("table".into()),
            table: Some(table),
            ..Default::default()
        });
    }
    let mut parts = s.split(':');
    let kind = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let nums: Vec<f64> = parts
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .map_err(|_| format!("{s:?}: {p:?} is not a number"))
        })
        .collect::<Result<_, _>>()?;
    let mut k = KeysToml {
        distribution: Some(kind.clone()),
        ..Default::default()
    };
    match (kind.as_str(), nums.len()) {
        ("uniform" | "sequential", 0) => {}
        ("zipf", 0 | 1) => k.exponent = nums.first().copied(),
        ("gaussian", 0) => {}
        ("gaussian", 2) => {
            k.mean = Some(nums[0]);
            k.stddev = Some(nums[1]);
        }
        _ => {
            return Err(format!(
                "{s:?}: expected uniform, sequential, zipf[:EXPONENT] or gaussian[:MEAN:STDDEV]"
            ));
        }
    }
    Ok(k)
}

/// `--key-size`: `natural` (prefix + index), `etc` (Facebook ETC's GEV key sizes), or
/// sizes as `--value-size` spells them (`32`, `10-40`, `16:3,64:1`), 1 to 250 bytes.
///
/// # Errors
/// One line naming what would be right.
pub fn parse_key_sizes(s: &str) -> Result<crest_model::shapes::KeyLengths, String> {
    use crest_model::shapes::KeyLengths;
    let l = match s.trim() {
        "natural" => KeyLengths::Natural,
        "etc" => KeyLengths::Etc,
        t if t.starts_with("etc") => {
            return Err(format!(
                "{s:?}: key sizes are natural, etc, or sizes such as 32, 10-40 or 16:3,64:1"
            ));
        }
        t => KeyLengths::Sizes(parse_value_sizes(t)?),
    };
    l.check().map_err(|e| e.to_string())?;
    Ok(l)
}

/// A class's `ttl`: a string as `--ttl` takes it, seconds as a number, or
/// `{ table = [[TTL, WEIGHT], …] }` with each TTL a string or seconds (0: no TTL).
///
/// # Errors
/// A message naming what is wrong.
pub fn parse_ttl(v: &toml::Value) -> Result<Ttl, String> {
    let text = |v: &toml::Value| match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) if *n >= 0 => Ok(n.to_string()),
        other => Err(format!(
            "{other}: expected a duration (\"60s\") or seconds (60)"
        )),
    };
    match v {
        toml::Value::Table(t) => {
            let rows = match (t.get("table"), t.len()) {
                (Some(toml::Value::Array(rows)), 1) => rows,
                _ => {
                    return Err(
                        "a TTL table is { table = [[TTL, WEIGHT], …] }, e.g. { table = [[\"0\", 30], [\"60s\", 50]] }"
                            .into(),
                    );
                }
            };
            let mut spec = Vec::with_capacity(rows.len());
            for row in rows {
                match row.as_array().map(Vec::as_slice) {
                    Some([ttl, toml::Value::Integer(w)]) => {
                        spec.push(format!("{}:{w}", text(ttl)?));
                    }
                    _ => return Err(format!("{row}: expected [TTL, WEIGHT], e.g. [\"60s\", 50]")),
                }
            }
            if spec.is_empty() {
                return Err("the TTL table is empty; give at least one [TTL, WEIGHT]".into());
            }
            // Every entry is TTL:WEIGHT, so even one entry parses as a table.
            config::parse_ttl(&spec.join(","))
        }
        other => config::parse_ttl(&text(other)?),
    }
}

/// Parses `--value-size`: `1024`, `1k`, a range `100-4096`, or a weighted list
/// `100:3,4k:1`.
///
/// # Errors
/// A message saying what would be right.
pub fn parse_value_sizes(s: &str) -> Result<ValueSizes, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err("a size cannot be negative; give e.g. 1024, 1k, 100-4096 or 100:3,4k:1".into());
    }
    let v = if let Some(rest) = t.strip_prefix("etc") {
        // Facebook ETC's sizes, capped (`etc:64k`).
        match rest.strip_prefix(':') {
            Some(cap) => ValueSizes::Etc(parse_size(cap)?),
            None if rest.is_empty() => ValueSizes::Etc(crest_model::shapes::ETC_CAP),
            None => return Err(format!("{s:?}: expected etc or etc:CAP, e.g. etc:64k")),
        }
    } else if t.contains(',') || t.contains(':') {
        let mut list = Vec::new();
        for item in t.split(',') {
            let (size, w) = item
                .split_once(':')
                .ok_or_else(|| format!("{s:?}: weighted sizes are SIZE:WEIGHT, e.g. 100:3,4k:1"))?;
            let w: u32 = w
                .trim()
                .parse()
                .map_err(|_| format!("{s:?}: weight {w:?} is not a whole number"))?;
            list.push((parse_size(size)?, w));
        }
        ValueSizes::Weighted(list)
    } else if let Some((a, b)) = t.split_once('-') {
        ValueSizes::Range(parse_size(a)?, parse_size(b)?)
    } else {
        ValueSizes::Fixed(parse_size(t)?)
    };
    v.check().map_err(|e| e.to_string())?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TOML error is one short line however long the line it is on: where, what, and
    /// the line cut at 200 characters.
    #[test]
    fn a_toml_error_quotes_at_most_a_short_excerpt() {
        let deep = format!("x = {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
        let e = parse_file(&deep).unwrap_err();
        assert!(e.len() < 600, "{} bytes: {}", e.len(), excerpt(&e, 300));
        assert!(e.starts_with("TOML parse error at line 1, column "), "{e}");
        assert!(
            e.contains(&format!("(the line: \"x = {}…\")", "[".repeat(196))),
            "{e}"
        );
        let e = parse_file("duration = \"2s\"\n[[class]]\nnme = \"a\"\n").unwrap_err();
        assert!(
            e.starts_with("TOML parse error at line 3, column 1: unknown field `nme`"),
            "{e}"
        );
        assert!(e.ends_with("(the line: \"nme = \\\"a\\\"\")"), "{e}");
        assert_eq!(excerpt("µµµ", 2), "µµ…");
        assert_eq!(excerpt("µµ", 2), "µµ");
    }

    #[test]
    fn stages_parse_holds_and_ramps() {
        let s = parse_stages("30s:0->50000, 60s:50000,10s:50000->150000").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0], seg(Duration::from_secs(30), 0.0, 50_000.0));
        assert_eq!(s[1], seg(Duration::from_secs(60), 50_000.0, 50_000.0));
        assert!(parse_stages("30s").is_err());
        assert!(parse_stages("0s:5").is_err());
        assert!(parse_stages("-5s:5").is_err());
        assert!(parse_stages("5s:-1").is_err());
    }

    #[test]
    fn shapes_become_segments() {
        let spike = ShapeToml {
            spike: Some("10s".into()),
            base: Some(5000.0),
            peak: Some(50000.0),
            at: Some("4s".into()),
            width: Some("2s".into()),
            ..Default::default()
        };
        let s = spike.segments().unwrap();
        assert_eq!(
            s,
            vec![
                seg(Duration::from_secs(4), 5000.0, 5000.0),
                seg(Duration::from_secs(2), 50000.0, 50000.0),
                seg(Duration::from_secs(4), 5000.0, 5000.0),
            ]
        );
        let sine = ShapeToml {
            sine: Some("20s".into()),
            period: Some("10s".into()),
            min: Some(100.0),
            max: Some(300.0),
            ..Default::default()
        };
        let s = sine.segments().unwrap();
        let total: u64 = s.iter().map(|x| x.duration_ns).sum();
        assert!((total as i64 - 20_000_000_000).abs() < 1000);
        let p = crest_model::schedule::Profile::new(s).unwrap();
        // Mean of a sine over whole periods is the midpoint.
        assert!((p.total() / 20.0 - 200.0).abs() < 0.5, "{}", p.total());
        assert!((p.rate_at(2_500_000_000) - 300.0).abs() < 0.5);
        let pts = ShapeToml {
            points: Some(vec![
                ("0s".into(), 0.0),
                ("10s".into(), 100.0),
                ("5s".into(), 1.0),
            ]),
            ..Default::default()
        };
        assert!(pts.segments().unwrap_err().contains("increase"));
        let two = ShapeToml {
            hold: Some("1s".into()),
            ramp: Some("1s".into()),
            rate: Some(1.0),
            ..Default::default()
        };
        assert!(two.segments().is_err());
    }

    #[test]
    fn unknown_keys_name_the_key_and_the_line() {
        let e = parse_file("duration = \"10s\"\n[[class]]\nname = \"a\"\nrat = 5\n").unwrap_err();
        assert!(e.contains("rat") && e.contains("line 4"), "{e}");
    }

    #[test]
    fn value_sizes_and_key_dists_parse() {
        assert_eq!(
            parse_value_sizes("100-4096").unwrap(),
            ValueSizes::Range(100, 4096)
        );
        assert_eq!(
            parse_value_sizes("100:3,4k:1").unwrap(),
            ValueSizes::Weighted(vec![(100, 3), (4096, 1)])
        );
        assert!(parse_value_sizes("0").is_err());
        assert!(parse_value_sizes("600MB").is_err());
        assert_eq!(parse_value_sizes("etc").unwrap(), ValueSizes::Etc(1 << 20));
        assert_eq!(
            parse_value_sizes("etc:64k").unwrap(),
            ValueSizes::Etc(64 << 10)
        );
        assert!(
            parse_value_sizes("etc:10").is_err(),
            "the cap must keep the table"
        );
        assert!(parse_value_sizes("etcetera").is_err());
        assert_eq!(parse_key_dist("zipf:0.99").unwrap().exponent, Some(0.99));
        assert!(key_dist(&parse_key_dist("zipf:0").unwrap(), 10).is_err());
        assert!(parse_key_dist("pareto").is_err());
        let t = parse_key_dist("table:0.1=0.9, 0.9=0.1").unwrap();
        assert_eq!(
            key_dist(&t, 100).unwrap(),
            KeyDist::Table(vec![(0.1, 0.9), (0.9, 0.1)])
        );
        assert!(parse_key_dist("table:0.1").is_err());
        assert!(key_dist(&parse_key_dist("table:0=1").unwrap(), 100).is_err());
    }
}
