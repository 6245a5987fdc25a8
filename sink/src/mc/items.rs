//! The items: [`SHARDS`] maps chosen by key hash (the RESP keyspace's [`shard_of`]), each
//! behind its own `std::sync::Mutex`, held for one command's work on one key and never
//! across an await. An item carries its value, client flags, CAS unique (one counter for
//! the whole server, as memcached's `get_cas_id`), deadline, and the bits the meta
//! protocol reports (fetched, win token sent, stale, binary key).
//!
//! Expiry and `flush_all` are lazy, as memcached's own `do_item_get`: a lookup that finds
//! an expired or flushed item unlinks it and counts `get_expired` or `get_flushed`,
//! whatever the command ([`Locked::live`]). memcached's LRU maintainer also reaps such
//! items in the background; here [`Items::sweep`] does it when `stats` is asked, so
//! `curr_items` and `bytes` leave them out as memcached's soon do.
//!
//! Sizes are memcached's own: [`ntotal`] is what an item takes in its slabs (header, key,
//! suffix, value and CRLF, CAS), the unit of `bytes` in `stats` and of the item size
//! limit ([`ITEM_SIZE_MAX`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::stats::{Counter, Counts};
use crate::store::{SHARDS, shard_of};

/// memcached's default item size limit (`-I 1m`): an item's [`ntotal`] may not pass it.
pub(crate) const ITEM_SIZE_MAX: usize = 1024 * 1024;

/// Items whose [`ntotal`] passes this are chunked in memcached (`slab_chunk_max`, half of
/// [`ITEM_SIZE_MAX`]); `incr` calls such a value non-numeric.
pub(crate) const SLAB_CHUNK_MAX: usize = ITEM_SIZE_MAX / 2;

/// `sizeof(item)` on a 64-bit machine.
const ITEM_HEADER: usize = 48;
/// The CAS unique every item carries (memcached's `-C` is off).
const CAS_SIZE: usize = 8;

/// memcached's `ITEM_ntotal`: the bytes an item of a `key_len`-byte key, `flags` and a
/// `value_len`-byte value takes (the key's NUL, the value's CRLF, and 4 bytes of flags
/// when they are not 0).
pub(crate) fn ntotal(key_len: usize, flags: u32, value_len: usize) -> usize {
    let suffix = if flags == 0 { 0 } else { 4 };
    ITEM_HEADER
        .saturating_add(key_len + 1)
        .saturating_add(value_len)
        .saturating_add(2 + suffix + CAS_SIZE)
}

/// memcached's `item_size_ok`: whether such an item fits [`ITEM_SIZE_MAX`].
pub(crate) fn size_ok(key_len: usize, flags: u32, value_len: usize) -> bool {
    ntotal(key_len, flags, value_len) <= ITEM_SIZE_MAX
}

/// The slab class memcached files an item of `ntotal` bytes under (`me`'s `cls`): classes
/// start at 96 bytes, grow by 1.25, aligned to 8, up to [`SLAB_CHUNK_MAX`]; larger items
/// are chunked under the last class.
pub(crate) fn slab_class(ntotal: usize) -> usize {
    let mut size = ITEM_HEADER + 48;
    let mut class = 1;
    // memcached's slabs_init: the classes below slab_chunk_max / factor.
    while (size as f64) < SLAB_CHUNK_MAX as f64 / 1.25 {
        size = size.next_multiple_of(8);
        if ntotal <= size {
            return class;
        }
        class += 1;
        size = (size as f64 * 1.25) as usize;
    }
    class
}

/// One item.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    /// The value, without its CRLF.
    pub(crate) value: Vec<u8>,
    /// The client flags.
    pub(crate) flags: u32,
    /// The CAS unique, given when the item is linked (and by `incr`, `md I`).
    pub(crate) cas: u64,
    /// When the item stops existing; `None` keeps it.
    pub(crate) exptime: Option<Instant>,
    /// memcached's `it->time`: when it was linked, or last fetched again (`mg l`, `me la`).
    pub(crate) time: Instant,
    /// Fetched since it was linked (`mg h`, `me fetch`).
    pub(crate) fetched: bool,
    /// A win token (`W`) was handed out for it (`Z` from then on).
    pub(crate) token_sent: bool,
    /// Marked stale by `md I` or a stale `ms I` (`X`).
    pub(crate) stale: bool,
    /// Stored by `ms` with `b`: the meta protocol shows its key in base64.
    pub(crate) key_binary: bool,
}

impl Item {
    /// An item of `value` with `flags`, until `exptime`; its CAS and time are given when
    /// it is linked.
    pub(crate) fn new(value: Vec<u8>, flags: u32, exptime: Option<Instant>, now: Instant) -> Self {
        Item {
            value,
            flags,
            cas: 0,
            exptime,
            time: now,
            fetched: false,
            token_sent: false,
            stale: false,
            key_binary: false,
        }
    }

    /// Whole seconds until it expires, rounded up (`mg t`); `None` when it does not.
    pub(crate) fn ttl(&self, now: Instant) -> Option<u64> {
        let left = self.exptime?.saturating_duration_since(now);
        Some(left.as_secs() + u64::from(left.subsec_nanos() > 0))
    }

    /// A fetch, as memcached's `do_item_bump`: the first marks it fetched, a later one
    /// makes now its last access.
    pub(crate) fn bump(&mut self, now: Instant) {
        if self.fetched {
            self.time = now;
        } else {
            self.fetched = true;
        }
    }
}

/// Why a found item is gone.
enum Dead {
    Expired,
    Flushed,
}

/// One shard: items by key, and the [`ntotal`] bytes they take.
#[derive(Default)]
pub(crate) struct Shard {
    map: HashMap<Vec<u8>, Item>,
    bytes: usize,
}

/// What `flush_all` left to do: items it invalidated are found dead lazily.
struct Flush {
    /// Items with a CAS unique below this were flushed (`flush_all` now); 0: none.
    below_cas: AtomicU64,
    /// `flush_all <delay>`: nanoseconds after [`Items::base`] from which items linked
    /// before it are flushed; `u64::MAX`: none pending.
    at: AtomicU64,
}

/// Every item.
pub(crate) struct Items {
    shards: Box<[Mutex<Shard>]>,
    /// The last CAS unique handed out.
    cas: AtomicU64,
    flush: Flush,
    /// The clock reading [`Flush::at`] counts from.
    base: Instant,
}

impl Items {
    /// No items; `base` is any instant not after the first the clock will read.
    pub(crate) fn new(base: Instant) -> Self {
        Items {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            cas: AtomicU64::new(0),
            flush: Flush {
                below_cas: AtomicU64::new(0),
                at: AtomicU64::new(u64::MAX),
            },
            base,
        }
    }

    /// The shard `key` lives in, locked.
    pub(crate) fn lock(&self, key: &[u8]) -> Locked<'_> {
        let shard = self.shards[shard_of(key)]
            .lock()
            // A panic elsewhere while holding a shard leaves items, not broken invariants
            // a later command could trip on.
            .unwrap_or_else(PoisonError::into_inner);
        Locked { shard, items: self }
    }

    /// A new CAS unique (memcached's `get_cas_id`).
    pub(crate) fn next_cas(&self) -> u64 {
        self.cas.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// `flush_all`: every item linked so far is gone now (`at` is `None`), or at `at`.
    pub(crate) fn flush(&self, at: Option<Instant>) {
        match at {
            None => {
                // memcached's flush_all takes a CAS unique too.
                let cas = self.next_cas();
                self.flush.below_cas.store(cas, Ordering::Relaxed);
                self.flush.at.store(u64::MAX, Ordering::Relaxed);
            }
            Some(at) => {
                let nanos = at.saturating_duration_since(self.base).as_nanos();
                let nanos = u64::try_from(nanos).unwrap_or(u64::MAX - 1);
                self.flush.at.store(nanos, Ordering::Relaxed);
            }
        }
    }

    fn dead(&self, item: &Item, now: Instant) -> Option<Dead> {
        let below = self.flush.below_cas.load(Ordering::Relaxed);
        let at = self.flush.at.load(Ordering::Relaxed);
        let flushed_at = (at != u64::MAX)
            .then(|| self.base + Duration::from_nanos(at))
            .filter(|&at| at <= now && item.time < at);
        if item.cas < below || flushed_at.is_some() {
            Some(Dead::Flushed)
        } else if item.exptime.is_some_and(|e| e <= now) {
            Some(Dead::Expired)
        } else {
            None
        }
    }

    /// Unlinks every expired or flushed item (counting nothing: memcached's LRU
    /// maintainer reaps them so); then (items, their bytes).
    pub(crate) fn sweep(&self, now: Instant) -> (usize, usize) {
        let (mut items, mut bytes) = (0, 0);
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let mut freed = 0;
            shard.map.retain(|key, item| {
                let keep = self.dead(item, now).is_none();
                if !keep {
                    freed += ntotal(key.len(), item.flags, item.value.len());
                }
                keep
            });
            shard.bytes = shard.bytes.saturating_sub(freed);
            items += shard.map.len();
            bytes += shard.bytes;
        }
        (items, bytes)
    }
}

/// One shard, locked: a command's work on one key.
pub(crate) struct Locked<'a> {
    shard: MutexGuard<'a, Shard>,
    items: &'a Items,
}

impl Locked<'_> {
    /// The live item at `key`. One found expired or flushed is unlinked and counted in
    /// `get_expired` or `get_flushed`, as any lookup in memcached does.
    pub(crate) fn live(
        &mut self,
        key: &[u8],
        now: Instant,
        counts: &mut Counts,
    ) -> Option<&mut Item> {
        let dead = self.items.dead(self.shard.map.get(key)?, now);
        if let Some(dead) = dead {
            counts.bump(match dead {
                Dead::Expired => Counter::GetExpired,
                Dead::Flushed => Counter::GetFlushed,
            });
            self.unlink(key);
            return None;
        }
        self.shard.map.get_mut(key)
    }

    /// An item just looked up with [`Locked::live`] or linked, again.
    pub(crate) fn get(&mut self, key: &[u8]) -> Option<&mut Item> {
        self.shard.map.get_mut(key)
    }

    /// Links `item` at `key` with a new CAS unique, replacing what is there (memcached's
    /// `do_item_link`, counted in `total_items`); returns it.
    pub(crate) fn link(
        &mut self,
        key: &[u8],
        mut item: Item,
        now: Instant,
        counts: &mut Counts,
    ) -> &mut Item {
        item.cas = self.items.next_cas();
        item.time = now;
        counts.bump(Counter::TotalItems);
        let size = ntotal(key.len(), item.flags, item.value.len());
        let shard = &mut *self.shard;
        shard.bytes += size;
        match shard.map.entry(key.to_vec()) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                let old = e.insert(item);
                shard.bytes =
                    shard
                        .bytes
                        .saturating_sub(ntotal(key.len(), old.flags, old.value.len()));
                e.into_mut()
            }
            std::collections::hash_map::Entry::Vacant(e) => e.insert(item),
        }
    }

    /// Unlinks the item at `key`, if any.
    pub(crate) fn unlink(&mut self, key: &[u8]) {
        if let Some(old) = self.shard.map.remove(key) {
            let size = ntotal(key.len(), old.flags, old.value.len());
            self.shard.bytes = self.shard.bytes.saturating_sub(size);
        }
    }

    /// Changes the value of the item at `key` in place (same length: `incr`'s padded
    /// digits), with a new CAS unique.
    pub(crate) fn rewrite(&mut self, key: &[u8], digits: &[u8]) {
        let cas = self.items.next_cas();
        if let Some(item) = self.shard.map.get_mut(key) {
            let n = digits.len().min(item.value.len());
            item.value[..n].copy_from_slice(&digits[..n]);
            item.value[n..].fill(b' ');
            item.cas = cas;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_memcacheds() {
        // Measured on memcached 1.6.18: `set k 0 0 1` adds 61 to `bytes`, with flags 65;
        // a 1,048,516-byte value under a one-byte key is the largest stored.
        assert_eq!(ntotal(1, 0, 1), 61);
        assert_eq!(ntotal(1, 5, 2), 66);
        assert!(size_ok(1, 0, 1_048_516));
        assert!(!size_ok(1, 0, 1_048_517));
        assert!(size_ok(1, 1, 1_048_512));
        assert!(!size_ok(1, 1, 1_048_513));
        assert!(size_ok(10, 0, 1_048_507));
        assert!(!size_ok(10, 0, 1_048_508));
        assert!(!size_ok(1, 0, usize::MAX));
        // memcached 1.6.18's first classes: 96, 120, 152...; `me` said cls=1 for 61 bytes.
        assert_eq!(slab_class(61), 1);
        assert_eq!(slab_class(96), 1);
        assert_eq!(slab_class(97), 2);
        assert_eq!(slab_class(121), 3);
        // `stats items` put a chunked 1,000,061-byte item in class 39, the largest.
        assert_eq!(slab_class(1_000_061), 39);
        assert_eq!(slab_class(SLAB_CHUNK_MAX), 39);
        assert_eq!(slab_class(394_840), 38);
        assert_eq!(slab_class(394_841), 39);
    }

    #[test]
    fn expired_and_flushed_items_are_counted_when_found_and_swept_silently() {
        let t0 = Instant::now();
        let items = Items::new(t0);
        let mut counts = Counts::default();
        let mut shard = items.lock(b"a");
        shard.link(
            b"a",
            Item::new(b"1".to_vec(), 0, Some(t0 + Duration::from_secs(1)), t0),
            t0,
            &mut counts,
        );
        assert!(shard.live(b"a", t0, &mut counts).is_some());
        let later = t0 + Duration::from_secs(1);
        assert!(shard.live(b"a", later, &mut counts).is_none());
        assert_eq!(counts.get(Counter::GetExpired), 1);
        shard.link(
            b"a",
            Item::new(b"1".to_vec(), 0, None, t0),
            later,
            &mut counts,
        );
        drop(shard);
        items.flush(None);
        let mut shard = items.lock(b"b");
        shard.link(
            b"b",
            Item::new(b"2".to_vec(), 0, None, later),
            later,
            &mut counts,
        );
        drop(shard);
        assert_eq!(items.sweep(later), (1, 61));
        assert!(items.lock(b"a").live(b"a", later, &mut counts).is_none());
        assert_eq!(counts.get(Counter::GetFlushed), 0, "swept, not found");
        assert_eq!(counts.get(Counter::TotalItems), 3);

        // flush_all 10: what is linked before then is gone from then on.
        items.flush(Some(later + Duration::from_secs(10)));
        let mut b = items.lock(b"b");
        assert!(
            b.live(b"b", later + Duration::from_secs(9), &mut counts)
                .is_some()
        );
        assert!(
            b.live(b"b", later + Duration::from_secs(10), &mut counts)
                .is_none()
        );
        assert_eq!(counts.get(Counter::GetFlushed), 1);
        let at = later + Duration::from_secs(11);
        b.link(b"b", Item::new(b"3".to_vec(), 0, None, at), at, &mut counts);
        assert!(b.live(b"b", at, &mut counts).is_some());
    }

    #[test]
    fn ttl_rounds_up_and_bump_marks_then_touches() {
        let t0 = Instant::now();
        let mut item = Item::new(Vec::new(), 0, Some(t0 + Duration::from_millis(100_500)), t0);
        assert_eq!(item.ttl(t0), Some(101));
        assert_eq!(item.ttl(t0 + Duration::from_millis(500)), Some(100));
        item.bump(t0 + Duration::from_secs(5));
        assert!(item.fetched);
        assert_eq!(item.time, t0);
        item.bump(t0 + Duration::from_secs(5));
        assert_eq!(item.time, t0 + Duration::from_secs(5));
    }
}
