//! One histogram constructor and its wire encoding, so every histogram in a run has the
//! same bounds and merging is exact addition (HdrHistogram's `add` fails on mismatched bounds).

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};

/// Values are nanoseconds.
pub type Hist = Histogram<u64>;

/// Lowest discernible value: 1 ns.
pub const LOWEST_NS: u64 = 1;
/// Highest trackable value: one hour, far beyond any timeout; larger values saturate.
pub const HIGHEST_NS: u64 = 3_600 * 1_000_000_000;
/// Three significant digits: 0.1% relative error at every magnitude.
pub const SIGFIG: u8 = 3;

/// A new empty histogram with Crest's bounds.
#[allow(clippy::expect_used)]
pub fn new_hist() -> Hist {
    // The bounds are constants that the unit tests construct: this cannot fail at run time.
    Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGFIG).expect("constant bounds are valid")
}

/// `dst += src`. Every histogram in a run comes from [`new_hist`] or [`decode`] (which
/// re-adds into one), so the bounds always match; if they ever did not, the values are
/// recorded one by one (clamped) rather than lost or panicking.
pub fn add(dst: &mut Hist, src: &Hist) {
    if dst.add(src).is_err() {
        for v in src.iter_recorded() {
            let value = v.value_iterated_to().clamp(LOWEST_NS, HIGHEST_NS);
            dst.saturating_record_n(value, v.count_at_value());
        }
    }
}

/// Serializes with the V2 + DEFLATE encoding (the standard HdrHistogram interchange format).
pub fn encode(h: &Hist) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + h.len() as usize / 8);
    // Writing to a Vec cannot fail, and DEFLATE of a valid histogram cannot either; an
    // empty encoding would decode as an empty histogram, never as garbage.
    if V2DeflateSerializer::new().serialize(h, &mut out).is_err() {
        out.clear();
    }
    out
}

/// Errors decoding a histogram received from a peer.
#[derive(Debug, thiserror::Error)]
pub enum HistError {
    /// The bytes are not a V2 (+DEFLATE) histogram.
    #[error("histogram does not decode: {0}")]
    Decode(String),
    /// The histogram holds values Crest's bounds cannot, so it cannot be merged exactly.
    #[error("histogram does not fit Crest's bounds: {0}")]
    Bounds(String),
}

/// Decodes bytes made by [`encode`] into a histogram with Crest's bounds.
///
/// # Errors
/// [`HistError`] when the bytes are not a histogram or do not fit the bounds.
pub fn decode(bytes: &[u8]) -> Result<Hist, HistError> {
    if bytes.is_empty() {
        return Ok(new_hist());
    }
    let h: Hist = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| HistError::Decode(format!("{e:?}")))?;
    let mut out = new_hist();
    out.add(&h)
        .map_err(|e| HistError::Bounds(format!("{e:?}")))?;
    Ok(out)
}

/// Records `v` ns, clamping to the trackable range rather than dropping the sample.
#[inline]
pub fn record(h: &mut Hist, v: u64) {
    h.saturating_record(v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Serializing parts and merging equals recording every sample in one histogram.
        #[test]
        fn merge_of_serialized_parts_equals_one_histogram(
            parts in proptest::collection::vec(
                proptest::collection::vec(0u64..10_000_000_000, 0..200), 1..6)
        ) {
            let mut whole = new_hist();
            let mut merged = new_hist();
            for part in &parts {
                let mut h = new_hist();
                for &v in part {
                    record(&mut h, v);
                    record(&mut whole, v);
                }
                let back = decode(&encode(&h)).unwrap();
                prop_assert_eq!(&back, &h);
                merged.add(&back).unwrap();
            }
            prop_assert_eq!(merged.len(), whole.len());
            prop_assert_eq!(&merged, &whole);
            for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
                prop_assert_eq!(merged.value_at_quantile(q), whole.value_at_quantile(q));
            }
        }
    }

    #[test]
    fn values_beyond_range_saturate_instead_of_vanishing() {
        let mut h = new_hist();
        record(&mut h, HIGHEST_NS * 10);
        assert_eq!(h.len(), 1);
        assert!(h.max() >= HIGHEST_NS / 2);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode(b"not a histogram").is_err());
        assert_eq!(decode(b"").unwrap().len(), 0);
    }
}
