//! One histogram constructor and its wire encoding, so every histogram in a run has the
//! same bounds and merging is exact addition (HdrHistogram's `add` fails on mismatched bounds).

use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer, V2Serializer};

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

/// Serializes with the plain V2 encoding: what workers send. It is about 1.5× the bytes of
/// [`encode`] for an interval's histogram, and the coordinator, which merges every
/// worker's every interval, decodes it without inflating (bench/coordinator-memory.sh: a
/// third of its CPU per interval went to DEFLATE).
pub fn encode_wire(h: &Hist) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + h.len().min(4096) as usize);
    if V2Serializer::new().serialize(h, &mut out).is_err() {
        out.clear();
    }
    out
}

/// An additive fingerprint of a histogram: the sum over its buckets of count × a hash of
/// the bucket's index in Crest's bounds, modulo 2⁶⁴. The fingerprint of a sum of
/// histograms is the sum of their fingerprints, so "these intervals add up to that total"
/// is checked with one number per histogram instead of a merged copy (262 KB) kept per
/// worker; two different histograms collide with probability about 2⁻⁶⁴.
pub fn fingerprint(h: &Hist) -> u64 {
    h.iter_recorded().fold(0u64, |a, v| {
        let bucket = index_of(h.lowest_equivalent(v.value_iterated_to()));
        a.wrapping_add(v.count_at_value().wrapping_mul(mix(bucket as u64)))
    })
}

/// SplitMix64's finalizer: a bucket's index to 64 well-mixed bits.
#[inline]
fn mix(v: u64) -> u64 {
    let mut z = v.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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

/// Decodes bytes made by [`encode`] into a histogram with Crest's bounds (through
/// [`SparseDecoder`], so what a peer sends cannot make it allocate without bound).
///
/// # Errors
/// [`HistError`] when the bytes are not a histogram or do not fit the bounds.
pub fn decode(bytes: &[u8]) -> Result<Hist, HistError> {
    let mut out = new_hist();
    SparseDecoder::new().decode(bytes)?.add_to(&mut out);
    Ok(out)
}

/// Decodes a histogram encoded with bounds other than Crest's (its header already checked
/// by [`parse_v2`]: a payload that is there, at most [`SIGFIG`] digits) with the crate's
/// deserializer, and re-adds it into Crest's bounds.
fn decode_foreign(bytes: &[u8]) -> Result<Hist, HistError> {
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

/// A histogram as it came off the wire, kept as its nonzero buckets (each bucket's index
/// in Crest's bounds and its count, in value order): what merging needs, without the
/// 262 KB counts array a [`Hist`] with Crest's bounds allocates, zeroes and walks on every
/// `add`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sparse {
    buckets: Vec<(u32, u64)>,
    total: u64,
    /// Its [`fingerprint`], set once every bucket is pushed ([`Sparse::seal`]).
    print: u64,
}

impl Sparse {
    /// The buckets of `h` (for histograms that did not come through [`SparseDecoder`]).
    pub fn of(h: &Hist) -> Self {
        let mut s = Self::default();
        for v in h.iter_recorded() {
            s.push(index_of(v.value_iterated_to()), v.count_at_value());
        }
        s.seal();
        s
    }

    #[inline]
    fn push(&mut self, index: usize, count: u64) {
        if count > 0 {
            // Every index pushed is below the bucket count (a few tens of thousands).
            self.buckets
                .push((u32::try_from(index).unwrap_or(u32::MAX), count));
            self.total = self.total.saturating_add(count);
        }
    }

    /// Sets its fingerprint from its buckets, once they are all pushed: in a pass of its
    /// own, each bucket's hash independent of the others', so they overlap in the pipeline
    /// (hashed as each bucket was pushed, in the decode loop, it took 18% of a fleet's
    /// merge).
    fn seal(&mut self) {
        self.print = print_of(&self.buckets);
    }

    /// Samples held.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// True when it holds no sample.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Buckets with a count.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// This histogram's [`fingerprint`], from its buckets.
    pub fn fingerprint(&self) -> u64 {
        self.print
    }

    /// Empties it, keeping its memory.
    pub fn clear(&mut self) {
        self.buckets.clear();
        (self.total, self.print) = (0, 0);
    }

    /// Its plain V2 encoding, as [`encode_wire`] makes it.
    pub fn encode_wire(&self) -> Vec<u8> {
        encode_buckets(self.buckets.iter().map(|&(i, c)| (i as usize, c)))
    }

    /// `dst += self`, exactly: every bucket lands in the bucket of `dst` it came from
    /// (same bounds), so this equals [`add`] of the full histogram.
    pub fn add_to(&self, dst: &mut Hist) {
        for &(index, count) in &self.buckets {
            dst.saturating_record_n(value_at_index(index as usize), count);
        }
    }
}

/// A histogram with Crest's bounds kept as counts by bucket index: what shards record
/// into and what the worker and the coordinator sum intervals into. Adding a [`Sparse`] is
/// one addition per bucket (a [`Hist`] works out each value's bucket again and keeps its
/// min, max and total up to date on every one); it becomes a [`Hist`] where percentiles are
/// read ([`Dense::add_to`]).
///
/// Memory grows with the buckets it holds, not with Crest's bounds: nothing until the
/// first sample; up to [`SMALL`] buckets as a sorted list (16 bytes a bucket, at most
/// 1 KB); past that a table of [`PAGES`] page pointers (1 KB) and a page of [`PAGE`]
/// counts (2 KB) per page a sample landed on. A command that answered a handful of
/// requests in an interval holds a few hundred bytes, not the 270 KB of a [`Hist`] (which a
/// profile of many classes × commands held per shard, interval and total: 0.8 MB per
/// class × command for its three histograms, per copy).
/// It keeps the span of buckets it has touched: reading and clearing walk only that span,
/// and [`Dense::clear`] keeps its pages, so a sum reused row after row allocates nothing.
#[derive(Debug, Clone)]
pub struct Dense {
    /// While there is no `table`: the nonzero buckets, (index, count) by rising index.
    small: Vec<(u32, u64)>,
    /// Past [`SMALL`] buckets: one entry per page of Crest's bounds, None until a sample
    /// lands on it.
    table: Option<Box<Table>>,
    /// The touched buckets are within `lo..hi` (empty when `lo >= hi`).
    lo: usize,
    hi: usize,
    total: u64,
}

impl Default for Dense {
    fn default() -> Self {
        Self {
            small: Vec::new(),
            table: None,
            // Empty: the first bucket touched sets both (a min and a max, no branch).
            lo: usize::MAX,
            hi: 0,
            total: 0,
        }
    }
}

/// Buckets a [`Dense`] keeps as a list before it takes pages.
pub const SMALL: usize = 64;
/// Buckets in a page of a [`Dense`], as a power of two.
const PAGE_SHIFT: u32 = 8;
/// Buckets in a page of a [`Dense`] (2 KB of counts).
pub const PAGE: usize = 1 << PAGE_SHIFT;
/// One page of a [`Dense`]'s counts.
type Page = [u64; PAGE];
/// Pages in a [`Dense`] with Crest's bounds.
pub const PAGES: usize = SLOTS.div_ceil(PAGE);
/// A [`Dense`]'s page table (8 bytes a page: 1 KB).
type Table = [Option<Box<Page>>; PAGES];
/// Buckets in a histogram with Crest's bounds: 33 half-buckets of 2¹⁰ sub-buckets (the
/// first bucket has two), checked against the crate in the tests.
const SLOTS: usize = 33 << HALF_MAGNITUDE;
/// The bucket a value past the bounds is counted in: the highest trackable value's (as
/// the crate's `saturating_record` does).
const TOP: usize = index_of(HIGHEST_NS);

/// A new zeroed page, on the heap.
#[cold]
fn new_page() -> Box<Page> {
    Box::new([0; PAGE])
}

impl Dense {
    /// Heap bytes it holds (its list's capacity, its page table and pages; not itself).
    pub fn heap_bytes(&self) -> usize {
        self.small.capacity() * std::mem::size_of::<(u32, u64)>()
            + self
                .table
                .as_ref()
                .map_or(0, |_| std::mem::size_of::<Table>())
            + self.pages() * std::mem::size_of::<Page>()
    }

    /// From the list to pages; the table.
    #[cold]
    fn promote(&mut self) -> &mut Table {
        let small = std::mem::take(&mut self.small);
        let table = self
            .table
            .get_or_insert_with(|| Box::new(std::array::from_fn(|_| None)));
        for (index, count) in small {
            let index = index as usize;
            if let Some(page) = table.get_mut(index >> PAGE_SHIFT) {
                page.get_or_insert_with(new_page)[index & (PAGE - 1)] += count;
            }
        }
        table
    }

    /// Bucket `index` (below [`SLOTS`]) counts `n` more.
    #[inline]
    fn add_at(&mut self, index: usize, n: u64) {
        let table = match &mut self.table {
            Some(t) => t,
            None => {
                let key = index as u32;
                match self.small.binary_search_by_key(&key, |e| e.0) {
                    Ok(k) => {
                        self.small[k].1 = self.small[k].1.saturating_add(n);
                        return;
                    }
                    Err(k) if self.small.len() < SMALL => {
                        self.small.insert(k, (key, n));
                        return;
                    }
                    Err(_) => self.promote(),
                }
            }
        };
        if let Some(page) = table.get_mut(index >> PAGE_SHIFT) {
            let c = &mut page.get_or_insert_with(new_page)[index & (PAGE - 1)];
            *c = c.saturating_add(n);
        }
    }

    #[inline]
    fn touch(&mut self, lo: usize, hi: usize) {
        self.lo = self.lo.min(lo);
        self.hi = self.hi.max(hi);
    }

    /// Records `v` ns, a value past the bounds counted at the highest one (as
    /// [`record`] does in a [`Hist`]).
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.record_n(v, 1);
    }

    /// Records `n` samples of `v` ns.
    #[inline]
    pub fn record_n(&mut self, v: u64, n: u64) {
        if n == 0 {
            return;
        }
        let mut index = index_of(v);
        if index >= SLOTS {
            index = TOP;
        }
        self.add_at(index, n);
        self.touch(index, index + 1);
        self.total = self.total.saturating_add(n);
    }

    /// The pages that hold its touched span, when it has pages, with the span's part of
    /// each: (page, range within it).
    fn spans(&self) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> + use<> {
        let (lo, hi) = match self.table {
            Some(_) => (self.lo, self.hi),
            None => (0, 0),
        };
        spans(lo, hi)
    }

    /// Every bucket it holds, (index, count) in rising order: the list's, or those of the
    /// touched span on a page that exists (zeros included).
    fn each(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let paged = self.spans().flat_map(move |(p, r)| {
            let page = self.table.as_ref().and_then(|t| t.get(p)?.as_deref());
            let base = (p << PAGE_SHIFT) + r.start;
            page.map(|c| &c[r])
                .unwrap_or(&[])
                .iter()
                .enumerate()
                .map(move |(i, c)| (base + i, *c))
        });
        // One of the two is empty.
        self.small
            .iter()
            .map(|&(i, c)| (i as usize, c))
            .chain(paged)
    }

    /// `self += s`, exactly.
    pub fn add(&mut self, s: &Sparse) {
        // Indices rise: the first bucket is the lowest, the last the highest. Every index
        // a Sparse holds is below the bucket count (the decode refuses others).
        let (Some(&(lo, _)), Some(&(hi, _))) = (s.buckets.first(), s.buckets.last()) else {
            return;
        };
        if self.table.is_none() && self.small.len() + s.buckets.len() > SMALL {
            self.promote();
        }
        for &(index, count) in &s.buckets {
            if (index as usize) < SLOTS && count > 0 {
                self.add_at(index as usize, count);
            }
        }
        self.touch(lo as usize, (hi as usize + 1).min(SLOTS));
        self.total = self.total.saturating_add(s.total);
    }

    /// `self += o`, exactly: bucket by bucket from `o`'s list, page by page over its
    /// touched span.
    pub fn add_dense(&mut self, o: &Dense) {
        if o.lo >= o.hi {
            return;
        }
        match &o.table {
            None => {
                if self.table.is_none() && self.small.len() + o.small.len() > SMALL {
                    self.promote();
                }
                for &(index, count) in &o.small {
                    self.add_at(index as usize, count);
                }
            }
            Some(src) => {
                let table = match &mut self.table {
                    Some(t) => t,
                    None => self.promote(),
                };
                for (p, r) in o.spans() {
                    let Some(Some(src)) = src.get(p) else {
                        continue;
                    };
                    let (src, Some(dst)) = (&src[r.clone()], table.get_mut(p)) else {
                        continue;
                    };
                    if src.iter().all(|c| *c == 0) {
                        continue;
                    }
                    let dst = &mut dst.get_or_insert_with(new_page)[r];
                    for (c, n) in dst.iter_mut().zip(src) {
                        *c = c.saturating_add(*n);
                    }
                }
            }
        }
        self.touch(o.lo, o.hi);
        self.total = self.total.saturating_add(o.total);
    }

    /// Samples held.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// True when it holds no sample.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Pages allocated (each [`PAGE`] counts).
    pub fn pages(&self) -> usize {
        self.table
            .as_ref()
            .map_or(0, |t| t.iter().filter(|p| p.is_some()).count())
    }

    /// Empties it, keeping its memory: only the touched span is zeroed.
    pub fn clear(&mut self) {
        self.small.clear();
        let spans = self.spans();
        if let Some(table) = &mut self.table {
            for (p, r) in spans {
                if let Some(Some(page)) = table.get_mut(p) {
                    page[r].fill(0);
                }
            }
        }
        (self.lo, self.hi, self.total) = (usize::MAX, 0, 0);
    }

    /// Its nonzero buckets: (the bucket's lowest value, its count), in value order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.each()
            .filter(|(_, c)| *c > 0)
            .map(|(i, c)| (value_at_index(i), c))
    }

    /// The lowest value of its lowest nonzero bucket (0 when empty), as a [`Hist`]'s
    /// `min()` reads.
    pub fn min(&self) -> u64 {
        self.iter().next().map_or(0, |(v, _)| v)
    }

    /// The highest value of its highest nonzero bucket (0 when empty), as a [`Hist`]'s
    /// `max()` reads.
    pub fn max(&self) -> u64 {
        self.each()
            .filter(|(_, c)| *c > 0)
            .last()
            .map_or(0, |(i, _)| value_at_index(i) + width_at_index(i) - 1)
    }

    /// The value at quantile `q`, as a [`Hist`] of the same samples reads it (made for the
    /// reading: where one percentile is wanted, not on a hot path).
    pub fn value_at_quantile(&self, q: f64) -> u64 {
        self.to_hist().value_at_quantile(q)
    }

    /// The sum of its samples, ns, each read at the middle of its bucket: what a [`Hist`]
    /// of the same samples gives as `mean() × len()` (to rounding).
    pub fn sum_ns(&self) -> f64 {
        self.each()
            .filter(|(_, c)| *c > 0)
            .map(|(index, c)| {
                (value_at_index(index) + (width_at_index(index) >> 1)) as f64 * c as f64
            })
            .sum()
    }

    /// `dst += self`, exactly.
    pub fn add_to(&self, dst: &mut Hist) {
        for (value, count) in self.iter() {
            dst.saturating_record_n(value, count);
        }
    }

    /// Its plain V2 encoding, as [`encode_wire`] makes it.
    pub fn encode_wire(&self) -> Vec<u8> {
        encode_buckets(self.each())
    }

    /// The same samples as a [`Hist`].
    pub fn to_hist(&self) -> Hist {
        let mut h = new_hist();
        self.add_to(&mut h);
        h
    }

    /// The same samples as a [`Sparse`]: its nonzero buckets only, for keeping.
    pub fn to_sparse(&self) -> Sparse {
        let mut s = Sparse::default();
        for (i, c) in self.each() {
            s.push(i, c);
        }
        s.seal();
        s
    }

    /// Its [`fingerprint`].
    pub fn fingerprint(&self) -> u64 {
        self.each().fold(0u64, |a, (i, c)| {
            a.wrapping_add(c.wrapping_mul(mix(i as u64)))
        })
    }
}

/// The pages that hold buckets `lo..hi`, with the range's part of each: (page, range
/// within it).
fn spans(lo: usize, hi: usize) -> impl Iterator<Item = (usize, std::ops::Range<usize>)> {
    let pages = if lo < hi {
        (lo >> PAGE_SHIFT)..((hi - 1) >> PAGE_SHIFT) + 1
    } else {
        0..0
    };
    pages.map(move |p| {
        let base = p << PAGE_SHIFT;
        (p, lo.saturating_sub(base).min(PAGE)..(hi - base).min(PAGE))
    })
}

/// The width of the bucket at `index`: 1 in the first, doubling with each one after.
fn width_at_index(index: usize) -> u64 {
    let bucket = (index >> HALF_MAGNITUDE) as u32;
    1u64 << (bucket.saturating_sub(1) + UNIT_MAGNITUDE)
}

/// Equal when they hold the same samples (whatever their memory or touched span).
impl PartialEq for Dense {
    fn eq(&self, o: &Self) -> bool {
        self.total == o.total && self.iter().eq(o.iter())
    }
}

impl Eq for Dense {}

/// Decodes V2 (+DEFLATE) histograms straight into [`Sparse`], reusing its buffers, and
/// refusing what no Crest worker sends: an inflated size past what Crest's bounds can hold
/// (a DEFLATE bomb), or buckets past the last one. A histogram encoded with other bounds is
/// decoded the slow way ([`decode`], which re-adds it into Crest's bounds or says why not).
pub struct SparseDecoder {
    inflate: flate2::Decompress,
    inflated: Vec<u8>,
    /// Buckets in a histogram with Crest's bounds.
    slots: usize,
    /// Bucket buffers of decoded histograms given back ([`SparseDecoder::recycle`]),
    /// decoded into again: a merge does not allocate one per histogram.
    pool: Vec<Vec<(u32, u64)>>,
}

/// Bucket buffers a [`SparseDecoder`] keeps for reuse, at most.
const POOL: usize = 256;
/// The largest bucket buffer a [`SparseDecoder`] keeps (64 KB).
const POOL_BUCKETS: usize = 4096;

impl std::fmt::Debug for SparseDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SparseDecoder")
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl Default for SparseDecoder {
    fn default() -> Self {
        Self::new()
    }
}

/// The V2 encoding's cookie (HdrHistogram's `V2EncodingCookieBase | 0x10`).
const V2_COOKIE: u32 = 0x1c84_9313;
/// The V2 + DEFLATE encoding's cookie.
const V2_DEFLATE_COOKIE: u32 = 0x1c84_9314;
/// The V2 header after its cookie: payload length, normalizing offset, significant digits,
/// lowest and highest value, integer-to-double ratio.
const V2_HEADER: usize = 4 + 4 + 4 + 8 + 8 + 8;
/// Sub-buckets in half a bucket, as a power of two, for [`SIGFIG`] = 3: a bucket of
/// 2 × 10³ values at unit resolution needs 2¹¹ sub-buckets, half of them 2¹⁰.
const HALF_MAGNITUDE: u32 = 10;
/// log₂ of [`LOWEST_NS`] (1 ns): values are counted in units of 1.
const UNIT_MAGNITUDE: u32 = 0;

/// The lowest value of the bucket at `index` of a histogram with Crest's bounds: the
/// inverse of the crate's (private) index function, checked against it bucket by bucket in
/// the tests.
fn value_at_index(index: usize) -> u64 {
    let half = 1u64 << HALF_MAGNITUDE;
    let bucket = (index >> HALF_MAGNITUDE) as u32;
    let sub = (index as u64 & (half - 1)) + half;
    match bucket.checked_sub(1) {
        // The first bucket uses its lower half as well.
        None => (sub - half) << UNIT_MAGNITUDE,
        Some(b) => sub << (b + UNIT_MAGNITUDE),
    }
}

/// The index of the bucket holding `value` in a histogram with Crest's bounds (one past
/// the last bucket for a value past them): the crate's (private) index function, checked
/// against [`value_at_index`] bucket by bucket in the tests.
const fn index_of(value: u64) -> usize {
    // Sub-buckets in a bucket minus one: values under it are in bucket 0.
    let mask = (1u64 << (HALF_MAGNITUDE + 1)) - 1;
    let base = 64 - UNIT_MAGNITUDE - HALF_MAGNITUDE - 1;
    let bucket = base - (value | mask).leading_zeros();
    let sub = value >> (bucket + UNIT_MAGNITUDE);
    // Bucket 0 holds values below half its sub-buckets too: the base comes first.
    ((((bucket + 1) as usize) << HALF_MAGNITUDE) + sub as usize) - (1usize << HALF_MAGNITUDE)
}

impl SparseDecoder {
    /// A decoder for histograms with Crest's bounds.
    pub fn new() -> Self {
        Self {
            inflate: flate2::Decompress::new(true),
            inflated: Vec::new(),
            slots: SLOTS,
            pool: Vec::new(),
        }
    }

    /// Takes back a histogram this decoder made, to decode into its memory again (a
    /// buffer of more than 4,096 buckets (64 KB) is freed: the pool stays under 16 MB).
    pub fn recycle(&mut self, s: Sparse) {
        if self.pool.len() < POOL && s.buckets.capacity() <= POOL_BUCKETS {
            let mut b = s.buckets;
            b.clear();
            self.pool.push(b);
        }
    }

    /// The inflated V2 encoding's largest possible size: its header and a 9-byte varint
    /// per bucket.
    fn max_inflated(&self) -> usize {
        4 + V2_HEADER + 9 * self.slots
    }

    /// Decodes bytes made by [`encode`] (an empty slice is an empty histogram).
    ///
    /// # Errors
    /// [`HistError`] when the bytes are not a histogram or do not fit Crest's bounds.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Sparse, HistError> {
        if bytes.is_empty() {
            return Ok(Sparse::default());
        }
        let bad = |why: &str| HistError::Decode(why.to_string());
        let be32 = |b: &[u8], at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
        };
        let cookie = be32(bytes, 0).ok_or_else(|| bad("shorter than its cookie"))?;
        let v2: &[u8] = match cookie {
            V2_COOKIE => bytes,
            V2_DEFLATE_COOKIE => {
                let len = be32(bytes, 4).ok_or_else(|| bad("shorter than its header"))? as usize;
                let body = bytes
                    .get(8..8usize.saturating_add(len))
                    .ok_or_else(|| bad("shorter than its stated length"))?;
                let len = self.inflate_into(body)?;
                &self.inflated[..len]
            }
            _ => return Err(bad("not a V2 histogram (unknown cookie)")),
        };
        let buf = self.pool.pop().unwrap_or_default();
        parse_v2(v2, self.slots, buf).or_else(|e| match e {
            // Other bounds: the checked path re-adds into Crest's, or says why it cannot.
            V2Error::OtherBounds => decode_foreign(bytes).map(|h| Sparse::of(&h)),
            V2Error::Bad(why) => Err(bad(why)),
        })
    }

    /// Inflates `body` into the front of `self.inflated`, returning the inflated length.
    /// The buffer is sized (and zeroed) once, to one byte past the cap, so a stream that
    /// would go past it is told apart from one that fits; inflating into a slice writes
    /// only what it inflates (a `Vec`'s spare capacity would be zeroed again on every call:
    /// 300 KB per histogram).
    fn inflate_into(&mut self, body: &[u8]) -> Result<usize, HistError> {
        let cap = self.max_inflated();
        if self.inflated.len() != cap + 1 {
            self.inflated = vec![0; cap + 1];
        }
        self.inflate.reset(true);
        let status =
            self.inflate
                .decompress(body, &mut self.inflated, flate2::FlushDecompress::Finish);
        let len = usize::try_from(self.inflate.total_out()).unwrap_or(usize::MAX);
        match status {
            _ if len > cap => Err(HistError::Decode(format!(
                "inflates past {cap} bytes, more than any histogram with Crest's bounds"
            ))),
            Ok(flate2::Status::StreamEnd) => Ok(len),
            Ok(_) => Err(HistError::Decode("DEFLATE stream is cut short".into())),
            Err(e) => Err(HistError::Decode(format!("DEFLATE: {e}"))),
        }
    }
}

enum V2Error {
    OtherBounds,
    Bad(&'static str),
}

/// Parses an uncompressed V2 histogram with Crest's bounds into its buckets.
fn parse_v2(b: &[u8], slots: usize, buf: Vec<(u32, u64)>) -> Result<Sparse, V2Error> {
    let head = b
        .get(..4 + V2_HEADER)
        .ok_or(V2Error::Bad("shorter than its header"))?;
    let u32_at =
        |at: usize| u32::from_be_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
    let u64_at = |at: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&head[at..at + 8]);
        u64::from_be_bytes(x)
    };
    if u32_at(0) != V2_COOKIE {
        return Err(V2Error::Bad("not a V2 histogram (unknown inner cookie)"));
    }
    let payload_len = u32_at(4) as usize;
    let normalizing = u32_at(8);
    let sigfig = u32_at(12);
    let (low, high) = (u64_at(16), u64_at(24));
    let ratio = f64::from_bits(u64_at(32));
    if normalizing != 0 || ratio != 1.0 {
        return Err(V2Error::Bad("uses an encoding feature Crest does not"));
    }
    let payload = b
        .get(4 + V2_HEADER..(4 + V2_HEADER).saturating_add(payload_len))
        .ok_or(V2Error::Bad("payload shorter than its stated length"))?;
    if sigfig > u32::from(SIGFIG) {
        // Finer than Crest records: it could not be merged exactly, and its counts array
        // could be large.
        return Err(V2Error::Bad("has more significant digits than Crest's 3"));
    }
    if low != LOWEST_NS || high != HIGHEST_NS || sigfig != u32::from(SIGFIG) {
        return Err(V2Error::OtherBounds);
    }
    let mut out = Sparse {
        buckets: buf,
        ..Sparse::default()
    };
    // A bucket takes at least one byte: room for all of them at once.
    out.buckets.reserve(payload.len().min(slots));
    let mut index: usize = 0;
    let mut at = 0;
    while let Some(&first) = payload.get(at) {
        // LEB128, at most 9 bytes; the ninth carries 8 bits. Most are one byte (a count
        // under 64, a run of under 64 empty buckets): those take no loop.
        let v = if first < 0x80 {
            at += 1;
            u64::from(first)
        } else {
            leb128(payload, &mut at).ok_or(V2Error::Bad("a count is cut short"))?
        };
        // ZigZag: a negative number is a run of empty buckets.
        let n = ((v >> 1) as i64) ^ -((v & 1) as i64);
        if n < 0 {
            index = index.saturating_add(n.unsigned_abs() as usize);
        } else {
            if n > 0 {
                if index >= slots {
                    return Err(V2Error::Bad("holds buckets past the last one"));
                }
                out.push(index, n as u64);
            }
            index = index.saturating_add(1);
        }
    }
    out.seal();
    Ok(out)
}

/// The plain V2 encoding (what [`encode_wire`] makes) of a histogram with Crest's bounds
/// given as its nonzero buckets `(index, count)` in rising index order: a [`Dense`] or a
/// [`Sparse`] is encoded without a [`Hist`] (whose 262 KB counts array would be zeroed and
/// filled first).
fn encode_buckets(buckets: impl Iterator<Item = (usize, u64)>) -> Vec<u8> {
    let mut payload = Vec::new();
    let mut next = 0usize;
    for (index, count) in buckets {
        if count == 0 {
            continue;
        }
        // A run of empty buckets is one negative number (a single one is a 0).
        match index.saturating_sub(next) {
            0 => {}
            1 => put_zigzag(&mut payload, 0),
            gap => put_zigzag(&mut payload, -(i64::try_from(gap).unwrap_or(i64::MAX))),
        }
        // Counts are i64 on the wire (the crate's serializer casts them too).
        put_zigzag(&mut payload, i64::try_from(count).unwrap_or(i64::MAX));
        next = index + 1;
    }
    if payload.is_empty() {
        // An empty histogram is the first bucket's count, 0 (as the crate writes it).
        payload.push(0);
    }
    let mut out = Vec::with_capacity(4 + V2_HEADER + payload.len());
    out.extend_from_slice(&V2_COOKIE.to_be_bytes());
    out.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&u32::from(SIGFIG).to_be_bytes());
    out.extend_from_slice(&LOWEST_NS.to_be_bytes());
    out.extend_from_slice(&HIGHEST_NS.to_be_bytes());
    out.extend_from_slice(&1.0f64.to_bits().to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

/// Appends `n` ZigZag-encoded as the V2 format's LEB128 (at most 9 bytes; the ninth
/// carries 8 bits): what [`leb128`] reads.
fn put_zigzag(out: &mut Vec<u8>, n: i64) {
    let mut v = ((n << 1) ^ (n >> 63)) as u64;
    for _ in 0..8 {
        if v < 0x80 {
            out.push(v as u8);
            return;
        }
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The LEB128 number at `*at` of `b` (at most 9 bytes; the ninth carries 8 bits), `*at`
/// moved past it; None when `b` ends first.
fn leb128(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let byte = *b.get(*at)?;
        *at += 1;
        if shift == 56 {
            return Some(v | (u64::from(byte) << 56));
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
    }
}

/// The [`fingerprint`] of nonzero buckets `(index, count)`.
fn print_of(buckets: &[(u32, u64)]) -> u64 {
    buckets.iter().fold(0u64, |a, &(index, count)| {
        a.wrapping_add(count.wrapping_mul(mix(u64::from(index))))
    })
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

    proptest! {
        /// The fingerprint of a sum is the sum of the fingerprints, sparse or dense; a
        /// sample moved to another bucket changes it.
        #[test]
        fn fingerprints_add_like_the_histograms(
            parts in proptest::collection::vec(
                proptest::collection::vec(1u64..10_000_000_000, 1..200), 1..5)
        ) {
            let mut whole = new_hist();
            let mut sum = 0u64;
            for part in &parts {
                let mut h = new_hist();
                for &v in part {
                    record(&mut h, v);
                }
                let sparse = SparseDecoder::new().decode(&encode_wire(&h)).unwrap();
                prop_assert_eq!(sparse.fingerprint(), fingerprint(&h));
                sum = sum.wrapping_add(sparse.fingerprint());
                whole.add(&h).unwrap();
            }
            prop_assert_eq!(fingerprint(&whole), sum);
            let v = parts[0][0];
            let (mut twice, mut moved) = (whole.clone(), whole.clone());
            twice.record_n(v, 2).unwrap();
            moved.record(v).unwrap();
            moved.record(v * 2).unwrap();
            prop_assert_ne!(fingerprint(&twice), fingerprint(&moved));
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

    #[test]
    fn every_bucket_index_maps_to_its_own_bucket() {
        let h = new_hist();
        let slots = h.distinct_values();
        let mut all = new_hist();
        let mut last = None;
        for i in 0..slots {
            let v = value_at_index(i);
            assert_eq!(h.lowest_equivalent(v), v, "index {i}");
            assert_eq!(index_of(v), i, "value {v}");
            assert_eq!(index_of(h.highest_equivalent(v)), i, "index {i}'s top");
            assert!(last.is_none_or(|l| l < v), "index {i}: values rise");
            last = Some(v);
            all.record(v).unwrap();
        }
        // Strictly rising bucket starts, each recordable, filling every bucket once: the
        // mapping is the crate's index function, inverted.
        assert_eq!(all.iter_recorded().count(), slots);
        assert_eq!(all.len(), slots as u64);
        let sparse = SparseDecoder::new().decode(&encode(&all)).unwrap();
        assert_eq!(sparse.buckets(), slots);
        let mut back = new_hist();
        sparse.add_to(&mut back);
        assert_eq!(back, all);
    }

    proptest! {
        /// The sparse decode, added, equals the crate's own deserializer's, added.
        #[test]
        fn sparse_decode_equals_the_full_one(
            parts in proptest::collection::vec(
                proptest::collection::vec(0u64..HIGHEST_NS * 2, 0..300), 1..5),
            deflate in any::<bool>(),
        ) {
            let mut de = SparseDecoder::new();
            let mut full = new_hist();
            let mut sparse = new_hist();
            for part in &parts {
                let mut h = new_hist();
                for &v in part {
                    record(&mut h, v);
                }
                let bytes = if deflate {
                    encode(&h)
                } else {
                    let mut out = Vec::new();
                    hdrhistogram::serialization::V2Serializer::new()
                        .serialize(&h, &mut out)
                        .unwrap();
                    out
                };
                add(&mut full, &decode_foreign(&bytes).unwrap());
                let s = de.decode(&bytes).unwrap();
                prop_assert_eq!(s.len(), h.len());
                s.add_to(&mut sparse);
            }
            prop_assert_eq!(&sparse, &full);
        }
    }

    proptest! {
        /// Sparse histograms summed into a [`Dense`] (one by one, or as two dense halves
        /// added together) equal the same histograms added into a [`Hist`]: the same
        /// buckets, counts, percentiles and fingerprint; a cleared one is empty and sums
        /// again from nothing.
        #[test]
        fn dense_sums_equal_hist_sums(
            parts in proptest::collection::vec(
                proptest::collection::vec(0u64..HIGHEST_NS * 2, 0..300), 1..6),
        ) {
            let mut de = SparseDecoder::new();
            let mut want = new_hist();
            let (mut dense, mut first, mut second) = (Dense::default(), Dense::default(), Dense::default());
            for (i, part) in parts.iter().enumerate() {
                let mut h = new_hist();
                for &v in part {
                    record(&mut h, v);
                }
                add(&mut want, &h);
                let s = de.decode(&encode_wire(&h)).unwrap();
                dense.add(&s);
                if i % 2 == 0 { first.add(&s) } else { second.add(&s) }
            }
            prop_assert_eq!(dense.len(), want.len());
            prop_assert_eq!(&dense.to_hist(), &want);
            prop_assert_eq!(dense.fingerprint(), fingerprint(&want));
            let want_sum = want.mean() * want.len() as f64;
            prop_assert!((dense.sum_ns() - want_sum).abs() <= want_sum * 1e-9 + 1e-6, "{} vs {want_sum}", dense.sum_ns());
            first.add_dense(&second);
            prop_assert_eq!(&first.to_hist(), &want);
            let kept = dense.to_sparse();
            prop_assert_eq!(kept.len(), want.len());
            prop_assert_eq!(kept.fingerprint(), fingerprint(&want));
            let mut back = new_hist();
            kept.add_to(&mut back);
            prop_assert_eq!(&back, &want);
            let buckets: Vec<(u64, u64)> = want
                .iter_recorded()
                .map(|v| (want.lowest_equivalent(v.value_iterated_to()), v.count_at_value()))
                .collect();
            prop_assert_eq!(dense.iter().collect::<Vec<_>>(), buckets);
            dense.clear();
            prop_assert!(dense.is_empty() && dense.iter().next().is_none());
            dense.add(&Sparse::of(&want));
            prop_assert_eq!(&dense.to_hist(), &want);
        }

        /// A [`Dense`] or [`Sparse`] encodes to exactly the bytes [`encode_wire`] makes of
        /// the same histogram (what a relay forwards reads as what its workers sent), and
        /// both decode (the checked way too) to it. (The empty one is its own test below:
        /// drawn here once in about 1,200 cases.)
        #[test]
        fn dense_and_sparse_encode_like_the_crate(
            values in proptest::collection::vec(0u64..HIGHEST_NS * 2, 0..400),
            big in proptest::collection::vec(1u64..u64::MAX / 4, 0..3),
        ) {
            let mut h = new_hist();
            for &v in &values {
                record(&mut h, v);
            }
            for (i, &n) in big.iter().enumerate() {
                // Counts past every LEB128 length up to nine bytes.
                h.saturating_record_n(1 + i as u64 * 1_000_003, n);
            }
            let want = encode_wire(&h);
            let sparse = Sparse::of(&h);
            let mut dense = Dense::default();
            dense.add(&sparse);
            prop_assert_eq!(&sparse.encode_wire(), &want);
            prop_assert_eq!(&dense.encode_wire(), &want);
            prop_assert_eq!(&decode(&dense.encode_wire()).unwrap(), &h);
            let back = SparseDecoder::new().decode(&sparse.encode_wire()).unwrap();
            prop_assert_eq!(back.fingerprint(), fingerprint(&h));
        }
    }

    /// A decoder given its histograms back decodes into their memory again, and what it
    /// decodes is the same; it keeps at most [`POOL`] buffers, none over [`POOL_BUCKETS`].
    #[test]
    fn recycled_buffers_decode_the_same() {
        let mut de = SparseDecoder::new();
        let mut h = new_hist();
        for v in 1..=500u64 {
            record(&mut h, v * 977);
        }
        let bytes = encode_wire(&h);
        let first = de.decode(&bytes).unwrap();
        let want = first.clone();
        let ptr = first.buckets.as_ptr();
        de.recycle(first);
        let again = de.decode(&bytes).unwrap();
        assert_eq!(again, want);
        assert_eq!(
            again.buckets.as_ptr(),
            ptr,
            "decoded into the recycled buffer"
        );
        for _ in 0..POOL + 10 {
            de.recycle(again.clone());
        }
        assert_eq!(de.pool.len(), POOL);
        let mut de = SparseDecoder::new();
        let mut big = Sparse::default();
        big.buckets.reserve(POOL_BUCKETS + 1);
        de.recycle(big);
        assert!(de.pool.is_empty(), "an oversized buffer is freed");
    }

    /// Counts and runs of empty buckets on either side of every LEB128 length (one byte up
    /// to nine) decode exactly, with the histogram's fingerprint; a number cut short in the
    /// middle is an error.
    #[test]
    fn every_varint_length_decodes_exactly() {
        let counts = [
            1u64,
            63,
            64,
            127,
            128,
            8_191,
            8_192,
            1 << 20,
            1 << 40,
            1 << 55,
            1 << 62,
        ];
        // Values whose buckets are 1, 32, 33, 64, 65, 1,000... apart.
        let mut h = new_hist();
        let mut index = 0usize;
        for (i, gap) in [0usize, 1, 32, 33, 64, 65, 1_000, 8_200, 3, 1, 20_000]
            .into_iter()
            .enumerate()
        {
            index += gap;
            h.record_n(value_at_index(index), counts[i % counts.len()])
                .unwrap();
            index += 1;
        }
        let bytes = encode_wire(&h);
        let s = SparseDecoder::new().decode(&bytes).unwrap();
        assert_eq!(s.len(), h.len());
        assert_eq!(s.fingerprint(), fingerprint(&h));
        let mut back = new_hist();
        s.add_to(&mut back);
        assert_eq!(back, h);
        // The last count (1 << 62... as zigzag, nine bytes) cut after its first byte.
        let cut = bytes.len() - 8;
        let mut short = bytes[..cut].to_vec();
        let payload = u32::try_from(cut - 4 - V2_HEADER).unwrap();
        short[4..8].copy_from_slice(&payload.to_be_bytes());
        assert!(matches!(
            SparseDecoder::new().decode(&short),
            Err(HistError::Decode(m)) if m.contains("cut short")
        ));
    }

    #[test]
    fn other_bounds_go_the_checked_way() {
        let mut h: Hist = Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        h.record(1_234_567).unwrap();
        h.record(42).unwrap();
        let s = SparseDecoder::new().decode(&encode(&h)).unwrap();
        let mut back = new_hist();
        s.add_to(&mut back);
        assert_eq!(back, decode_foreign(&encode(&h)).unwrap());
        let mut wide: Hist = Histogram::new_with_bounds(1, u64::MAX / 2, 3).unwrap();
        wide.record(u64::MAX / 4).unwrap();
        assert!(matches!(
            SparseDecoder::new().decode(&encode(&wide)),
            Err(HistError::Bounds(_))
        ));
    }

    /// The empty histogram encodes as the crate encodes it (one zero count), from a
    /// [`Dense`] never touched, one cleared, and an empty [`Sparse`].
    #[test]
    fn an_empty_histogram_encodes_like_the_crate() {
        let want = encode_wire(&new_hist());
        let mut used = Dense::default();
        used.add(&Sparse::of(&{
            let mut h = new_hist();
            record(&mut h, 1_000);
            h
        }));
        used.clear();
        for got in [
            Dense::default().encode_wire(),
            used.encode_wire(),
            Sparse::default().encode_wire(),
        ] {
            assert_eq!(got, want);
            assert!(decode(&got).unwrap().is_empty());
        }
    }

    #[test]
    fn hostile_encodings_are_errors_not_allocations() {
        let mut de = SparseDecoder::new();
        assert!(de.decode(b"not a histogram").is_err());
        assert!(de.decode(&V2_DEFLATE_COOKIE.to_be_bytes()).is_err());
        // A DEFLATE bomb: 64 MB of zeros compress to a few KB; refused at the cap.
        let mut v2 = Vec::new();
        v2.extend_from_slice(&V2_COOKIE.to_be_bytes());
        v2.extend_from_slice(&(64u32 << 20).to_be_bytes());
        v2.extend_from_slice(&[0; V2_HEADER - 4]);
        v2.resize(64 << 20, 0);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut z, &v2).unwrap();
        let body = z.finish().unwrap();
        let mut bomb = V2_DEFLATE_COOKIE.to_be_bytes().to_vec();
        bomb.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bomb.extend_from_slice(&body);
        let e = de.decode(&bomb).unwrap_err().to_string();
        assert!(e.contains("inflates past"), "{e}");
        // A bucket past the last one.
        let mut h = new_hist();
        h.record(5).unwrap();
        let mut plain = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&h, &mut plain)
            .unwrap();
        let mut far = plain[..4 + V2_HEADER].to_vec();
        // A run of 10⁶ empty buckets (ZigZag of −10⁶), then a count of 1.
        let mut payload = Vec::new();
        let mut z = (1_000_000u64 << 1) - 1;
        while z >= 0x80 {
            payload.push((z as u8) | 0x80);
            z >>= 7;
        }
        payload.push(z as u8);
        payload.push(2);
        far[4..8].copy_from_slice(&(payload.len() as u32).to_be_bytes());
        far.extend_from_slice(&payload);
        let e = de.decode(&far).unwrap_err().to_string();
        assert!(e.contains("past the last"), "{e}");
        // Cut short.
        assert!(de.decode(&plain[..plain.len() - 1]).is_err());
        let enc = encode(&h);
        assert!(de.decode(&enc[..enc.len() - 3]).is_err());
        // Other bounds with a stated payload far past the bytes there (the crate's own
        // deserializer would allocate the stated 4 GB first), or finer than 3 digits.
        let mut other: Hist = Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        other.record(7).unwrap();
        let mut v2 = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&other, &mut v2)
            .unwrap();
        v2[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
        let e = de.decode(&v2).unwrap_err().to_string();
        assert!(e.contains("shorter than its stated length"), "{e}");
        let fine: Hist = Histogram::new_with_bounds(1, 1_000_000, 5).unwrap();
        let e = de.decode(&encode(&fine)).unwrap_err().to_string();
        assert!(e.contains("significant digits"), "{e}");
        // The decoder still works after all that.
        assert_eq!(de.decode(&enc).unwrap().len(), 1);
    }

    #[test]
    fn dense_pages_cover_crests_bounds() {
        assert_eq!(SLOTS, new_hist().distinct_values());
        assert_eq!(PAGES * PAGE, SLOTS);
    }

    proptest! {
        /// Recording into a [`Dense`] holds what recording into a [`Hist`] does, in a few
        /// pages: same buckets, count, min, max and percentiles, values past the bounds
        /// counted at the highest.
        #[test]
        fn dense_records_like_a_hist(
            values in proptest::collection::vec(
                prop_oneof![0u64..5_000, 0u64..20_000_000, 0u64..u64::MAX], 1..300)
        ) {
            let (mut dense, mut h) = (Dense::default(), new_hist());
            for &v in &values {
                dense.record(v);
                record(&mut h, v);
            }
            prop_assert_eq!(dense.to_hist(), h.clone());
            prop_assert_eq!(dense.len(), h.len());
            prop_assert_eq!(dense.min(), h.min());
            prop_assert_eq!(dense.max(), h.max());
            for q in [0.0, 0.5, 0.99, 1.0] {
                prop_assert_eq!(dense.value_at_quantile(q), h.value_at_quantile(q));
            }
            prop_assert_eq!(dense.fingerprint(), fingerprint(&h));
            prop_assert_eq!(&dense.encode_wire(), &encode_wire(&h));
            prop_assert!(dense.pages() <= values.len());
            prop_assert_eq!(dense.pages() > 0, dense.iter().count() > SMALL);
            let mut sum = Dense::default();
            sum.add_dense(&dense);
            sum.add_dense(&dense);
            dense.clear();
            prop_assert!(dense.is_empty());
            prop_assert_eq!(dense.iter().count(), 0);
            dense.add(&Sparse::of(&h));
            dense.add(&Sparse::of(&h));
            prop_assert_eq!(&sum, &dense);
        }
    }

    #[test]
    fn few_samples_take_bytes_not_a_histogram() {
        let mut d = Dense::default();
        assert_eq!(d.heap_bytes(), 0);
        d.record(250_000);
        d.record(260_000);
        d.record(250_001);
        assert_eq!((d.pages(), d.iter().count()), (0, 2));
        assert!(d.heap_bytes() <= 64, "{}", d.heap_bytes());
        // Past SMALL buckets it takes pages: one per 256 buckets it touched.
        for v in 0..SMALL as u64 * 2 {
            d.record(1_000 + v);
        }
        assert_eq!(d.iter().count(), SMALL * 2 + 2);
        assert!(d.pages() <= 3, "{}", d.pages());
        assert!(d.heap_bytes() < 8 * 1024, "{}", d.heap_bytes());
        assert_eq!(d.to_hist().len(), d.len());
    }
}
