//! A run's classes: the flags' layer over each class table of the profile file over the
//! defaults ([`ClassLayer`]), the run length they imply, and `--rate-scale`/`--time-scale`.

use super::args::RunArgs;
use super::parse::{err, file_duration};
use crate::config::{self, ClassConfig, ConfigError, RateArg, check_class};
use crate::defaults;
use crate::profile::{self, FileToml, KeysToml};
use crest_model::convert::limits;
use crest_model::plan::{KeySpec, Shape};
use crest_model::schedule::{Profile, Segment};
use crest_model::shapes::{Content, KeyLengths, Ttl, ValueSizes};
use crest_model::target::Protocol;
use std::time::Duration;

/// One class's settings before the defaults: each field is given or not. The flags make
/// one layer, each class table of the profile file another; [`ClassLayer::over`] puts one
/// on top of another and [`ClassLayer::resolve`] fills the rest from [`defaults`].
#[derive(Debug, Clone, Default)]
pub(super) struct ClassLayer {
    requests: Option<u64>,
    mix: Option<Vec<(String, u32)>>,
    keys: Option<u64>,
    key_prefix: Option<String>,
    key_dist: Option<KeysToml>,
    key_lengths: Option<KeyLengths>,
    values: Option<ValueSizes>,
    content: Option<Content>,
    connections: Option<u32>,
    pipeline: Option<u32>,
    ttl: Option<Ttl>,
    batch: Option<u32>,
    members: Option<u64>,
    members_sequential: Option<bool>,
    range: Option<u32>,
    prefill: Option<bool>,
}

impl ClassLayer {
    /// The layer the command line gives.
    fn from_flags(a: &RunArgs) -> Result<Self, ConfigError> {
        let mix = if let Some(c) = &a.load.command {
            if c.trim().is_empty() {
                return Err(err(
                    "--command",
                    c,
                    "is empty; give a command template, e.g. \"LPUSH mylist __value__\"",
                ));
            }
            Some(vec![(c.clone(), 1)])
        } else if let Some(m) = &a.load.mix {
            Some(parse_mix(m)?)
        } else {
            a.load.ratio.map(ratio_mix)
        };
        Ok(Self {
            requests: a.load.requests,
            mix,
            keys: a.load.keys,
            key_prefix: a.load.key_prefix.clone(),
            key_dist: a
                .load
                .key_dist
                .as_deref()
                .map(|d| profile::parse_key_dist(d).map_err(|e| err("--key-dist", d, e)))
                .transpose()?,
            key_lengths: a
                .load
                .key_size
                .as_deref()
                .map(|v| profile::parse_key_sizes(v).map_err(|e| err("--key-size", v, e)))
                .transpose()?,
            values: a
                .load
                .value_size
                .as_deref()
                .map(|v| profile::parse_value_sizes(v).map_err(|e| err("--value-size", v, e)))
                .transpose()?,
            content: a
                .load
                .value_content
                .as_deref()
                .map(|v| Content::parse(v).map_err(|e| err("--value-content", v, e)))
                .transpose()?,
            connections: a.load.connections,
            pipeline: a.load.pipeline,
            ttl: a.load.ttl.clone(),
            batch: a.load.batch,
            members: None,
            members_sequential: None,
            range: None,
            prefill: a.load.prefill.then_some(true),
        })
    }

    /// The layer one class table of the profile file gives.
    fn from_file(c: &profile::ClassToml) -> Result<Self, String> {
        let mix = match (&c.ratio, &c.mix) {
            (Some(r), _) => Some(ratio_mix(
                config::parse_ratio(r).map_err(|e| format!("ratio {r:?}: {e}"))?,
            )),
            (None, Some(m)) => Some(m.iter().map(|(k, v)| (k.clone(), *v)).collect()),
            (None, None) => None,
        };
        Ok(Self {
            requests: c.requests,
            mix,
            keys: c.keys.as_ref().and_then(|k| k.count),
            key_prefix: c.keys.as_ref().and_then(|k| k.prefix.clone()),
            key_dist: c.keys.clone(),
            key_lengths: c
                .keys
                .as_ref()
                .and_then(|k| k.size.as_ref())
                .map(|v| {
                    let t = match v {
                        toml::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    profile::parse_key_sizes(&t).map_err(|e| format!("keys.size: {e}"))
                })
                .transpose()?,
            values: c
                .values
                .as_ref()
                // `values = { content = "random" }` alone keeps the sizes of the layers
                // below.
                .filter(|v| {
                    v.content.is_none()
                        || v.size.is_some()
                        || v.min.is_some()
                        || v.max.is_some()
                        || v.sizes.is_some()
                })
                .map(|v| v.sizes().map_err(|e| format!("values: {e}")))
                .transpose()?,
            content: c
                .values
                .as_ref()
                .and_then(|v| v.content.as_deref())
                .map(|v| Content::parse(v).map_err(|e| format!("values.content {v:?}: {e}")))
                .transpose()?,
            connections: c.connections,
            pipeline: c.pipeline,
            ttl: c
                .ttl
                .as_ref()
                .map(|t| profile::parse_ttl(t).map_err(|e| format!("ttl: {e}")))
                .transpose()?,
            batch: c.batch,
            members: c.members,
            members_sequential: match c.member_order.as_deref() {
                None => None,
                Some("uniform") => Some(false),
                Some("sequential") => Some(true),
                Some(o) => {
                    return Err(format!(
                        "member_order {o:?}: expected uniform or sequential"
                    ));
                }
            },
            range: c.range,
            prefill: c.prefill,
        })
    }

    /// `self` where given, `lower` elsewhere. (`--prefill` can only turn prefill on.)
    fn over(self, lower: Self) -> Self {
        Self {
            requests: self.requests.or(lower.requests),
            mix: self.mix.or(lower.mix),
            keys: self.keys.or(lower.keys),
            key_prefix: self.key_prefix.or(lower.key_prefix),
            key_dist: self.key_dist.or(lower.key_dist),
            key_lengths: self.key_lengths.or(lower.key_lengths),
            values: self.values.or(lower.values),
            content: self.content.or(lower.content),
            connections: self.connections.or(lower.connections),
            pipeline: self.pipeline.or(lower.pipeline),
            ttl: self.ttl.or(lower.ttl),
            batch: self.batch.or(lower.batch),
            members: self.members.or(lower.members),
            members_sequential: self.members_sequential.or(lower.members_sequential),
            range: self.range.or(lower.range),
            prefill: self.prefill.or(lower.prefill),
        }
    }

    /// The class, every setting not given taken from [`defaults`]; `dist_err` words a bad
    /// key distribution (it depends on the final keyspace size).
    fn resolve(
        self,
        name: String,
        profile: Option<Profile>,
        dist_err: &dyn Fn(String) -> ConfigError,
    ) -> Result<ClassConfig, ConfigError> {
        let keys = self.keys.unwrap_or(defaults::KEYS);
        let key_dist =
            profile::key_dist(&self.key_dist.unwrap_or_default(), keys).map_err(dist_err)?;
        Ok(ClassConfig {
            name,
            profile,
            requests: self.requests,
            shape: Shape {
                mix: self.mix.unwrap_or_else(|| ratio_mix(defaults::RATIO)),
                keys: KeySpec {
                    count: keys,
                    prefix: self
                        .key_prefix
                        .unwrap_or_else(|| defaults::KEY_PREFIX.into()),
                    dist: key_dist,
                    lengths: self.key_lengths.unwrap_or_default(),
                },
                values: self
                    .values
                    .unwrap_or(ValueSizes::Fixed(defaults::VALUE_SIZE)),
                content: self.content.unwrap_or_default(),
                pipeline: self.pipeline.unwrap_or(defaults::PIPELINE),
                ttl: self.ttl,
                batch: self.batch.unwrap_or(defaults::BATCH),
                members: self.members.unwrap_or(defaults::MEMBERS),
                members_sequential: self.members_sequential.unwrap_or(false),
                range: self.range.unwrap_or(defaults::RANGE),
            },
            connections: self.connections.unwrap_or(defaults::CONNECTIONS),
            prefill: self.prefill.unwrap_or(false),
        })
    }
}

pub(super) fn ratio_mix((set, get): (u32, u32)) -> Vec<(String, u32)> {
    vec![("SET".into(), set), ("GET".into(), get)]
}

/// `--mix "GET=10,SET=1"`.
pub(super) fn parse_mix(m: &str) -> Result<Vec<(String, u32)>, ConfigError> {
    let mut out = Vec::new();
    for item in m.split(',').filter(|s| !s.trim().is_empty()) {
        let (c, w) = item.split_once('=').ok_or_else(|| {
            err(
                "--mix",
                m,
                "expected COMMAND=WEIGHT pairs, e.g. GET=10,SET=1",
            )
        })?;
        let w = w.trim();
        let w: u32 = w.parse().map_err(|_| {
            let why = if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) {
                format!(
                    "weight {w} is too large; weights are whole numbers 0 to {}",
                    u32::MAX
                )
            } else {
                format!("weight {w:?} is not a whole number; expected e.g. GET=10,SET=1")
            };
            err("--mix", m, why)
        })?;
        out.push((c.trim().to_string(), w));
    }
    Ok(out)
}

/// Every class of the run (checked, names unique) and the measured length: given, or the
/// longest profile, never shorter than a profile (so no second the workers run falls
/// outside the timeline).
pub(super) fn classes_and_length(
    a: &RunArgs,
    file: &FileToml,
    text: &str,
    protocol: Protocol,
) -> Result<(Vec<ClassConfig>, Duration), ConfigError> {
    let file_dur = file_duration(&file.duration, "duration")?;
    let mut duration = a.load.duration.or(file_dur);
    if a.load.stages.is_some() && a.load.duration.is_some() {
        return Err(err(
            "--duration",
            format!("{:?}", a.load.duration.unwrap_or_default()),
            "--stages sets the length; give one or the other",
        ));
    }
    // Flags only is a file with one empty class: one path builds every class, flag layer
    // over file layer over the defaults table. `--rate` or `--stages` replaces the file's
    // classes with one class of the flags (its globals still apply).
    let from_flags = file.classes.is_empty() || a.pace.rate.is_some() || a.load.stages.is_some();
    let mut classes = build_classes(a, file, text, from_flags, &mut duration)?;
    scale(a, &mut classes, &mut duration)?;
    if a.load.requests.is_some() && classes.iter().all(|c| c.profile.is_some()) {
        return Err(err(
            "--requests",
            a.load.requests.unwrap_or_default(),
            "bounds closed-loop runs only; add --rate max (or use --duration)",
        ));
    }
    let segments: usize = classes
        .iter()
        .filter_map(|c| c.profile.as_ref().map(|p| p.segments().len()))
        .sum();
    if segments > limits::MAX_SEGMENTS {
        return Err(err(
            "profile",
            format!("{} classes", classes.len()),
            format!(
                "the classes' rate profiles make {segments} segments together; at most {} (use fewer or longer segments, or repeat less)",
                limits::MAX_SEGMENTS
            ),
        ));
    }
    let mut names = std::collections::HashSet::new();
    for c in &classes {
        check_class(c, from_flags, protocol).map_err(|mut e| {
            // The flags' mix came from --command when it was given: name that flag.
            if let (true, "--mix", Some(cmd)) = (from_flags, e.flag, &a.load.command) {
                e.flag = "--command";
                e.value = cmd.clone();
            }
            e
        })?;
        if !names.insert(c.name.clone()) {
            return Err(err(
                "class",
                &c.name,
                "two classes have this name; names must be unique",
            ));
        }
    }
    // The measured length: given, or the longest profile.
    let longest = classes
        .iter()
        .filter_map(|c| {
            c.profile
                .as_ref()
                .map(|p| Duration::from_nanos(p.duration_ns()))
        })
        .max();
    // The measured length: given, or the longest profile — never shorter than a profile, so
    // no second the workers run falls outside the timeline.
    let duration = match (duration, longest) {
        (Some(d), Some(l)) => d.max(l),
        (d, l) => d.or(l).unwrap_or(Duration::ZERO),
    };
    if duration.is_zero()
        && classes
            .iter()
            .any(|c| c.profile.is_none() && c.requests.is_none())
    {
        return Err(err("--duration", "0s", "must be > 0, e.g. 10s"));
    }
    Ok((classes, duration))
}

/// Every class of the run: flag layer over file layer over the defaults; with
/// `from_flags`, the one class of the flags. `duration` is the run length so far (flag or
/// file); a flags-only closed loop gets the default.
/// `--preset` (flag over file): the layer under every class's own settings. `etc`:
/// Facebook ETC's key sizes and value sizes (its gaps are the arrival process's, set in
/// the pacing).
///
/// # Errors
/// [`ConfigError`] for a preset there is not.
pub(super) fn preset_layer(a: &RunArgs, file: &FileToml) -> Result<ClassLayer, ConfigError> {
    match preset(a, file)? {
        Some(Preset::Etc) => Ok(ClassLayer {
            key_lengths: Some(KeyLengths::Etc),
            values: Some(ValueSizes::Etc(crest_model::shapes::ETC_CAP)),
            ..ClassLayer::default()
        }),
        None => Ok(ClassLayer::default()),
    }
}

/// A preset a run may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Preset {
    /// Facebook's ETC workload (Atikoglu et al. 2012, mutilate's parameters).
    Etc,
}

/// `--preset` over the file's `preset`.
///
/// # Errors
/// [`ConfigError`] for a preset there is not.
pub(super) fn preset(a: &RunArgs, file: &FileToml) -> Result<Option<Preset>, ConfigError> {
    match a.load.preset.as_deref().or(file.preset.as_deref()) {
        None => Ok(None),
        Some("etc") => Ok(Some(Preset::Etc)),
        Some(other) => Err(err(
            "--preset",
            other,
            "expected etc (Facebook's ETC: GEV key sizes, its value sizes and generalized-Pareto gaps)",
        )),
    }
}

pub(super) fn build_classes(
    a: &RunArgs,
    file: &FileToml,
    text: &str,
    from_flags: bool,
    duration: &mut Option<Duration>,
) -> Result<Vec<ClassConfig>, ConfigError> {
    let flags = ClassLayer::from_flags(a)?;
    let preset = preset_layer(a, file)?;
    let mut classes = Vec::new();
    if from_flags {
        let segments: Option<Vec<Segment>> = match (a.pace.rate, &a.load.stages) {
            (Some(RateArg::Max), _) => None,
            (_, Some(s)) => Some(profile::parse_stages(s).map_err(|e| err("--stages", s, e))?),
            (rate, None) => {
                let r = match rate {
                    Some(RateArg::Rps(r)) => r,
                    _ => defaults::RATE_RPS,
                };
                let d = duration.unwrap_or(defaults::DURATION);
                if d.is_zero() {
                    return Err(err("--duration", "0s", "must be > 0, e.g. 10s"));
                }
                Some(vec![Segment {
                    duration_ns: u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                    from_rps: r,
                    to_rps: r,
                }])
            }
        };
        if segments.is_none() && duration.is_none() && a.load.requests.is_none() {
            *duration = Some(defaults::DURATION);
        }
        let profile = segments
            .map(|s| {
                Profile::new(s).map_err(|e| match a.pace.rate {
                    Some(RateArg::Rps(r)) => err("--rate", r, e),
                    _ => err("--rate", defaults::RATE_RPS, e),
                })
            })
            .transpose()?;
        classes.push(
            flags
                .over(preset)
                .resolve("default".into(), profile, &|e| {
                    err("--key-dist", a.load.key_dist.clone().unwrap_or_default(), e)
                })?,
        );
    } else {
        for (i, sc) in file.classes.iter().enumerate() {
            let c = sc.get_ref();
            let line = profile::line_of(text, sc.span().start);
            let name = c.name.clone().unwrap_or_else(|| format!("class{}", i + 1));
            let at = |e: String| err("class", &name, format!("at line {line}: {e}"));
            if name.trim().is_empty() {
                return Err(err(
                    "name",
                    &name,
                    format!(
                        "the class at line {line} has an empty name; give it one like \"small\", or leave name out"
                    ),
                ));
            }
            // A format character (a bidi override, a zero-width space) hides in a
            // terminal as a control character does, and can reverse the summary's row.
            if let Some(c) = name.chars().find(|&c| c.is_control() || is_format(c)) {
                return Err(err(
                    "name",
                    &name,
                    format!(
                        "the class at line {line} has an invisible character U+{:04X} in its name (control and format characters are refused); give it one like \"small\", or leave name out",
                        u32::from(c)
                    ),
                ));
            }
            let profile = profile::class_segments(c, text, *duration)
                .map_err(at)?
                .map(|s| Profile::new(s).map_err(|e| at(e.to_string())))
                .transpose()?;
            let layer = flags
                .clone()
                .over(ClassLayer::from_file(c).map_err(at)?)
                .over(preset.clone());
            classes.push(layer.resolve(name.clone(), profile, &|e| {
                if a.load.key_dist.is_some() {
                    err("--key-dist", a.load.key_dist.clone().unwrap_or_default(), e)
                } else {
                    at(e)
                }
            })?);
        }
    }
    Ok(classes)
}

/// `--rate-scale` and `--time-scale`, applied to every profile and to the run length.
pub(super) fn scale(
    a: &RunArgs,
    classes: &mut [ClassConfig],
    duration: &mut Option<Duration>,
) -> Result<(), ConfigError> {
    for (flag, v) in [
        ("--rate-scale", a.load.rate_scale),
        ("--time-scale", a.load.time_scale),
    ] {
        if let Some(x) = v
            && !(x.is_finite() && x > 0.0)
        {
            return Err(err(flag, x, "must be a number > 0"));
        }
    }
    if a.load.rate_scale.is_some() || a.load.time_scale.is_some() {
        let (r, t) = (
            a.load.rate_scale.unwrap_or(1.0),
            a.load.time_scale.unwrap_or(1.0),
        );
        for c in classes.iter_mut() {
            if let Some(p) = &c.profile {
                let longest = limits::MAX_RUN.as_nanos() as f64;
                if p.duration_ns() as f64 * t > longest {
                    return Err(err(
                        "--time-scale",
                        t,
                        format!(
                            "makes class {} last longer than {}; give a smaller factor",
                            c.name,
                            humantime::format_duration(limits::MAX_RUN)
                        ),
                    ));
                }
                let segs = p
                    .segments()
                    .iter()
                    .map(|s| Segment {
                        // At most MAX_RUN (checked above), so the cast cannot saturate.
                        duration_ns: ((s.duration_ns as f64) * t).round().max(1.0) as u64,
                        from_rps: s.from_rps * r,
                        to_rps: s.to_rps * r,
                    })
                    .collect();
                c.profile = Some(Profile::new(segs).map_err(|e| err("--rate-scale", r, e))?);
            }
        }
        if let Some(d) = duration.as_mut()
            && a.load.duration.is_none()
        {
            *d = Duration::try_from_secs_f64(d.as_secs_f64() * t).map_err(|_| {
                err(
                    "--time-scale",
                    t,
                    "makes the run longer than any duration can hold; give a smaller factor",
                )
            })?;
        }
    }
    Ok(())
}

/// Unicode's format characters (general category Cf, Unicode 16): invisible, and some
/// (the bidi overrides U+202A to U+202E, U+2066 to U+2069) reorder the text around them.
pub(crate) fn is_format(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}

#[cfg(test)]
mod tests {
    use super::is_format;

    #[test]
    fn format_characters_are_known() {
        for c in [
            '\u{202e}',
            '\u{200b}',
            '\u{2066}',
            '\u{feff}',
            '\u{ad}',
            '\u{e0041}',
        ] {
            assert!(is_format(c), "{c:?}");
        }
        for c in ['a', ' ', 'é', '\u{2010}', '\u{1f600}', '\t'] {
            assert!(!is_format(c), "{c:?}");
        }
    }
}
