//! Wall-clock time as the protocol carries it: Unix nanoseconds in an `i64`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in ns; 0 if the clock is before 1970, `i64::MAX` after 2262.
pub fn unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
