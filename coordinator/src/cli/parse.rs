//! Small parsers the layers share: a setting's error, a duration from the profile file,
//! a duration within bounds.

use crate::config::{ConfigError, parse_duration};
use std::time::Duration;

pub(super) fn err(flag: &'static str, value: impl ToString, why: impl ToString) -> ConfigError {
    ConfigError::new(flag, value, why)
}

pub(super) fn file_duration(
    v: &Option<String>,
    key: &'static str,
) -> Result<Option<Duration>, ConfigError> {
    v.as_deref()
        .map(|s| parse_duration(s).map_err(|e| err(key, s, e)))
        .transpose()
}

/// `d` when it lies in `lo..=hi`, else an error naming `flag` and the bounds.
pub(super) fn bounded(
    flag: &'static str,
    d: Duration,
    lo: Duration,
    hi: Duration,
) -> Result<Duration, ConfigError> {
    if d < lo || d > hi {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        let why = if lo.is_zero() {
            format!("must be at most {}", show(hi))
        } else {
            format!("must be {} to {}", show(lo), show(hi))
        };
        return Err(err(flag, format!("{d:?}"), why));
    }
    Ok(d)
}
