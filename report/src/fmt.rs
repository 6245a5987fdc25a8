//! Numbers as people read them: the one formatting every renderer shares.

/// Formats bytes for humans: B, KB, MB, GB (powers of 1024, as the servers' `_human`).
pub fn human_bytes(b: u64) -> String {
    let v = b as f64;
    if b < 1024 {
        format!("{b} B")
    } else if v < 1024.0 * 1024.0 {
        format!("{:.2} KB", v / 1024.0)
    } else if v < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} MB", v / 1024.0 / 1024.0)
    } else {
        format!("{:.2} GB", v / 1024.0 / 1024.0 / 1024.0)
    }
}

/// Formats microseconds for humans: µs below 1 ms, ms below 1 s, else s.
pub fn human_us(v: f64) -> String {
    if v < 1_000.0 {
        format!("{v:.0}µs")
    } else if v < 1_000_000.0 {
        format!("{:.2}ms", v / 1_000.0)
    } else {
        format!("{:.2}s", v / 1_000_000.0)
    }
}

/// `n` with thousands separators: `181,818`.
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Rounded to two decimals, as the report keeps rates and times.
pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Rounded to the microsecond: an instant in seconds (a timeline row's start), exact at
/// any interval down to 10 ms (two decimals would make 0.025 s read 0.03 s).
pub fn round_us(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}
