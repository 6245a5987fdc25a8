//! The keyspace: [`SHARDS`] maps chosen by key hash, each behind its own `std::sync::Mutex`,
//! holding typed values with an optional deadline.
//!
//! Cost model: no async lock on the hot path, and a command holds one shard's lock for one
//! map operation (a few for `SET ... NX GET`), never across an await. Expiry is lazy: an
//! expired key is removed when a command touches it, or by [`Shard::sweep`].
//!
//! Each shard keeps an estimate of the bytes it holds, updated on every change rather than
//! by scanning, so `INFO memory` costs one lock per shard. Collections cache their own
//! size, so the shard learns a mutation's effect from two O(1) reads.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque, hash_map};
use std::mem::size_of;
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// Number of independently locked maps. A power of two well above the core counts of the
/// machines Crest runs on, so two connections rarely wait for the same lock.
pub(crate) const SHARDS: usize = 1 << SHARD_BITS;
const SHARD_BITS: u32 = 6;

/// The cost of a `Vec<u8>` beyond its contents: its header. Capacity slack and allocator
/// overhead are not counted, so the estimate is a floor, as Redis's own `used_memory` is
/// (it counts what it asked malloc for).
const VEC: usize = size_of::<Vec<u8>>();
/// A key's fixed cost: its header and entry in the shard's map, plus hashbrown's control byte.
const KEY_COST: usize = VEC + size_of::<Entry>() + 1;
const LIST_ITEM_COST: usize = VEC;
const SET_ITEM_COST: usize = VEC + 1;
const HASH_ITEM_COST: usize = 2 * VEC + 1;
/// A sorted-set member is held twice, in the member→score map and in the score order.
const ZSET_ITEM_COST: usize = 2 * VEC + 2 * size_of::<f64>() + 1;

/// A clock the sink reads for expiry; tests inject one they can move.
pub(crate) type Clock = Box<dyn Fn() -> Instant + Send + Sync>;

/// The time of one command, read from the clock at most once and only if needed.
pub(crate) struct Now<'a> {
    clock: &'a (dyn Fn() -> Instant + Send + Sync),
    at: Option<Instant>,
}

impl<'a> Now<'a> {
    /// A time not read yet.
    pub(crate) fn new(clock: &'a (dyn Fn() -> Instant + Send + Sync)) -> Self {
        Now { clock, at: None }
    }

    /// The command's time: the same instant on every call.
    pub(crate) fn get(&mut self) -> Instant {
        *self.at.get_or_insert_with(|| (self.clock)())
    }
}

/// A key's value and deadline.
pub(crate) struct Entry {
    /// What the key holds.
    pub(crate) value: Value,
    /// When the key stops existing; `None` keeps it until deleted.
    pub(crate) expires_at: Option<Instant>,
}

impl Entry {
    /// An entry holding `value` until `expires_at`.
    pub(crate) fn new(value: Value, expires_at: Option<Instant>) -> Self {
        Entry { value, expires_at }
    }

    fn is_expired(&self, now: &mut Now<'_>) -> bool {
        self.expires_at.is_some_and(|at| at <= now.get())
    }

    fn cost(&self, key_len: usize) -> usize {
        KEY_COST + key_len + self.value.cost()
    }
}

/// The five value types Crest's workloads use.
pub(crate) enum Value {
    /// A binary-safe string (`SET`, `INCR`).
    Str(Vec<u8>),
    /// Field → value (`HSET`).
    Hash(Hash),
    /// A double-ended list (`LPUSH`, `RPOP`).
    List(List),
    /// Unordered unique members (`SADD`).
    Set(Set),
    /// Members ordered by score (`ZADD`).
    ZSet(ZSet),
    /// An append-only log of entries with rising IDs (`XADD`).
    Stream(Stream),
}

/// A stream entry: its ID (milliseconds, sequence) and its field-value pairs, flat.
type StreamEntry = ((u64, u64), Vec<Vec<u8>>);

/// A stream: entries in ID order.
#[derive(Default)]
pub(crate) struct Stream {
    entries: Vec<StreamEntry>,
    bytes: usize,
}

impl Stream {
    /// The last entry's ID ((0, 0) when none was ever added).
    pub(crate) fn last_id(&self) -> (u64, u64) {
        self.entries.last().map_or((0, 0), |e| e.0)
    }

    /// Appends an entry; the caller checked that `id` is above [`Stream::last_id`].
    pub(crate) fn push(&mut self, id: (u64, u64), fields: Vec<Vec<u8>>) {
        self.bytes += STREAM_ENTRY_COST + fields.iter().map(|f| VEC + f.len()).sum::<usize>();
        self.entries.push((id, fields));
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Estimated cost of a stream entry beyond its fields.
const STREAM_ENTRY_COST: usize = VEC + 16;

impl Value {
    /// The name `TYPE` replies with.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }

    /// Estimated bytes held beyond the key, in O(1).
    fn cost(&self) -> usize {
        match self {
            Value::Str(bytes) => bytes.len(),
            Value::Hash(hash) => hash.bytes,
            Value::List(list) => list.bytes,
            Value::Set(set) => set.bytes,
            Value::ZSet(zset) => zset.bytes,
            Value::Stream(stream) => stream.bytes,
        }
    }

    /// A collection with no elements left, which Redis never keeps: its key goes.
    fn is_empty_collection(&self) -> bool {
        match self {
            Value::Str(_) => false,
            Value::Hash(hash) => hash.map.is_empty(),
            Value::List(list) => list.items.is_empty(),
            Value::Set(set) => set.members.is_empty(),
            Value::ZSet(zset) => zset.scores.is_empty(),
            // A stream stays when empty, as in Redis.
            Value::Stream(_) => false,
        }
    }
}

/// A hash: field → value.
#[derive(Default)]
pub(crate) struct Hash {
    map: HashMap<Vec<u8>, Vec<u8>>,
    bytes: usize,
}

impl Hash {
    /// Sets `field`; true when the field is new.
    pub(crate) fn insert(&mut self, field: Vec<u8>, value: Vec<u8>) -> bool {
        let (field_len, value_len) = (field.len(), value.len());
        match self.map.insert(field, value) {
            Some(old) => {
                self.bytes = self.bytes.saturating_sub(old.len()) + value_len;
                false
            }
            None => {
                self.bytes += HASH_ITEM_COST + field_len + value_len;
                true
            }
        }
    }

    /// The value of `field`.
    pub(crate) fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.map.get(field).map(Vec::as_slice)
    }

    /// Removes `field`; true when it was there.
    pub(crate) fn remove(&mut self, field: &[u8]) -> bool {
        match self.map.remove_entry(field) {
            Some((field, value)) => {
                let cost = HASH_ITEM_COST + field.len() + value.len();
                self.bytes = self.bytes.saturating_sub(cost);
                true
            }
            None => false,
        }
    }

    /// Number of fields.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Fields and values, in no particular order (as Redis).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.map.iter().map(|(f, v)| (f.as_slice(), v.as_slice()))
    }
}

/// A list.
#[derive(Default)]
pub(crate) struct List {
    items: VecDeque<Vec<u8>>,
    bytes: usize,
}

impl List {
    /// Adds `item` at the head (`front`) or the tail.
    pub(crate) fn push(&mut self, item: Vec<u8>, front: bool) {
        self.bytes += LIST_ITEM_COST + item.len();
        if front {
            self.items.push_front(item);
        } else {
            self.items.push_back(item);
        }
    }

    /// Takes the head (`front`) or tail item.
    pub(crate) fn pop(&mut self, front: bool) -> Option<Vec<u8>> {
        let item = if front {
            self.items.pop_front()
        } else {
            self.items.pop_back()
        }?;
        self.bytes = self.bytes.saturating_sub(LIST_ITEM_COST + item.len());
        Some(item)
    }

    /// Number of items.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Items `start..end` from the head; the caller keeps the range within `len`.
    pub(crate) fn range(&self, start: usize, end: usize) -> impl Iterator<Item = &[u8]> {
        self.items.range(start..end).map(Vec::as_slice)
    }
}

/// A set.
#[derive(Default)]
pub(crate) struct Set {
    members: HashSet<Vec<u8>>,
    bytes: usize,
}

impl Set {
    /// Adds `member`; true when it is new.
    pub(crate) fn insert(&mut self, member: Vec<u8>) -> bool {
        let len = member.len();
        let added = self.members.insert(member);
        if added {
            self.bytes += SET_ITEM_COST + len;
        }
        added
    }

    /// Removes `member`; true when it was there.
    pub(crate) fn remove(&mut self, member: &[u8]) -> bool {
        let removed = self.members.remove(member);
        if removed {
            self.bytes = self.bytes.saturating_sub(SET_ITEM_COST + member.len());
        }
        removed
    }

    /// Removes and returns any member (`SPOP`: Redis picks at random; any is as good
    /// for a load generator's target).
    pub(crate) fn pop(&mut self) -> Option<Vec<u8>> {
        let member = self.members.iter().next()?.clone();
        self.remove(&member);
        Some(member)
    }

    /// Whether `member` is in the set.
    pub(crate) fn contains(&self, member: &[u8]) -> bool {
        self.members.contains(member)
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// Members, in no particular order (as Redis).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.members.iter().map(Vec::as_slice)
    }
}

/// A sorted-set score: an `f64` that is never NaN, ordered totally, with `-0` equal to `0`
/// as Redis's `<` comparisons treat them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Score(f64);

impl Score {
    /// The score `value`; `None` for NaN, which Redis refuses everywhere a score goes.
    pub(crate) fn new(value: f64) -> Option<Score> {
        (!value.is_nan()).then_some(Score(value))
    }

    /// The score as a float.
    pub(crate) fn get(self) -> f64 {
        self.0
    }

    /// Folds `-0` into `0` so `total_cmp` agrees with `==` on zeros.
    fn ordered(self) -> f64 {
        if self.0 == 0.0 { 0.0 } else { self.0 }
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.ordered().total_cmp(&other.ordered())
    }
}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Score {}

/// One end of a score range, as `ZRANGEBYSCORE` writes it (`5`, `(5`, `-inf`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ScoreBound {
    /// The score.
    pub(crate) score: Score,
    /// Whether the score itself is outside the range (`(5`).
    pub(crate) exclusive: bool,
}

/// A sorted set: members ordered by (score, member bytes), as Redis orders them.
#[derive(Default)]
pub(crate) struct ZSet {
    scores: HashMap<Vec<u8>, Score>,
    order: BTreeSet<(Score, Vec<u8>)>,
    bytes: usize,
}

impl ZSet {
    /// The score of `member`.
    pub(crate) fn score(&self, member: &[u8]) -> Option<Score> {
        self.scores.get(member).copied()
    }

    /// Sets the score of `member`; returns its previous score, `None` when it is new.
    pub(crate) fn insert(&mut self, member: Vec<u8>, score: Score) -> Option<Score> {
        match self.scores.get_mut(&member) {
            Some(current) => {
                let previous = *current;
                // Same-ordering scores can still differ in bits (-0 and 0); ZSCORE shows the
                // last one written, so the stored score is always replaced.
                *current = score;
                let mut item = (previous, member);
                self.order.remove(&item);
                item.0 = score;
                self.order.insert(item);
                Some(previous)
            }
            None => {
                self.bytes += ZSET_ITEM_COST + 2 * member.len();
                self.order.insert((score, member.clone()));
                self.scores.insert(member, score);
                None
            }
        }
    }

    /// Removes `member`; true when it was there.
    pub(crate) fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove_entry(member) {
            Some((member, score)) => {
                self.bytes = self.bytes.saturating_sub(ZSET_ITEM_COST + 2 * member.len());
                self.order.remove(&(score, member));
                true
            }
            None => false,
        }
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.scores.len()
    }

    /// Removes and returns the lowest (score, member).
    pub(crate) fn pop_min(&mut self) -> Option<(Score, Vec<u8>)> {
        let (score, member) = self.order.pop_first()?;
        self.scores.remove(&member);
        self.bytes = self.bytes.saturating_sub(ZSET_ITEM_COST + 2 * member.len());
        Some((score, member))
    }

    /// All members, lowest (score, member) first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (Score, &[u8])> {
        self.order.iter().map(|(s, m)| (*s, m.as_slice()))
    }

    /// Members with `min <= score <= max` (bounds may exclude their own score), lowest
    /// first; reverse the iterator for `REV`.
    pub(crate) fn range_by_score(
        &self,
        min: ScoreBound,
        max: ScoreBound,
    ) -> impl DoubleEndedIterator<Item = (Score, &[u8])> {
        // An empty member sorts before every member of its score, so (s, "") is "the first
        // item scored s". Exclusive lower and inclusive upper bounds become such keys at the
        // next float up, which makes every range one BTreeSet range.
        let lower = if min.exclusive {
            next_up(min.score.get())
        } else {
            Some(min.score)
        };
        let upper = if max.exclusive {
            Some(max.score)
        } else {
            next_up(max.score.get())
        };
        let range = match (lower, upper) {
            (None, _) => None,
            (Some(lo), Some(hi)) if lo > hi => None,
            (Some(lo), Some(hi)) => Some(self.order.range((
                Bound::Included((lo, Vec::new())),
                Bound::Excluded((hi, Vec::new())),
            ))),
            (Some(lo), None) => Some(
                self.order
                    .range((Bound::Included((lo, Vec::new())), Bound::Unbounded)),
            ),
        };
        range.into_iter().flatten().map(|(s, m)| (*s, m.as_slice()))
    }
}

/// The smallest score above `x`; `None` above `+inf` (nothing is).
fn next_up(x: f64) -> Option<Score> {
    if x == f64::INFINITY {
        return None;
    }
    let next = if x == 0.0 {
        f64::from_bits(1)
    } else if x > 0.0 {
        f64::from_bits(x.to_bits() + 1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    };
    Score::new(next)
}

/// One lock's worth of the keyspace.
#[derive(Default)]
pub(crate) struct Shard {
    map: HashMap<Vec<u8>, Entry>,
    /// Estimated bytes of every key and value here: the sum of [`Entry::cost`].
    bytes: usize,
    /// Keys removed because their deadline passed, ever.
    expired: u64,
}

impl Shard {
    /// Runs `f` on the live entry under `key`; `None` when there is none. One map lookup
    /// when the key is live.
    pub(crate) fn read<R>(
        &mut self,
        key: &[u8],
        now: &mut Now<'_>,
        f: impl FnOnce(&Entry) -> R,
    ) -> Option<R> {
        let expired = match self.map.get(key) {
            Some(entry) if !entry.is_expired(now) => return Some(f(entry)),
            Some(_) => true,
            None => false,
        };
        if expired {
            self.expire(key);
        }
        None
    }

    /// Runs `f` on the live entry under `key`, then accounts for what it changed and drops
    /// the key if `f` emptied its collection; `None` when there is no entry.
    pub(crate) fn update<R>(
        &mut self,
        key: &[u8],
        now: &mut Now<'_>,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Option<R> {
        let entry = match self.map.get_mut(key) {
            Some(entry) if entry.is_expired(now) => None,
            Some(entry) => Some(entry),
            None => return None,
        };
        let Some(entry) = entry else {
            self.expire(key);
            return None;
        };
        let before = entry.cost(key.len());
        let result = f(entry);
        let after = entry.cost(key.len());
        let emptied = entry.value.is_empty_collection();
        self.bytes = self.bytes.saturating_sub(before) + after;
        if emptied {
            self.map.remove(key);
            self.bytes = self.bytes.saturating_sub(after);
        }
        Some(result)
    }

    /// Runs `f` on the live entry under `key`, first creating one holding `make()` (with no
    /// deadline) if there is none; then accounts as [`Shard::update`] does, so a collection
    /// `f` leaves empty (`ZADD XX` on a new key) is never stored.
    pub(crate) fn upsert<R>(
        &mut self,
        key: Vec<u8>,
        now: &mut Now<'_>,
        make: impl FnOnce() -> Value,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> R {
        let key_len = key.len();
        let mut slot = match self.map.entry(key) {
            hash_map::Entry::Occupied(mut slot) => {
                if slot.get().is_expired(now) {
                    self.expired += 1;
                    let fresh = Entry::new(make(), None);
                    let (old, new) = (slot.get().cost(key_len), fresh.cost(key_len));
                    self.bytes = self.bytes.saturating_sub(old) + new;
                    slot.insert(fresh);
                }
                slot
            }
            hash_map::Entry::Vacant(slot) => {
                let fresh = Entry::new(make(), None);
                self.bytes += fresh.cost(key_len);
                slot.insert_entry(fresh)
            }
        };
        let before = slot.get().cost(key_len);
        let result = f(slot.get_mut());
        let after = slot.get().cost(key_len);
        self.bytes = self.bytes.saturating_sub(before) + after;
        if slot.get().value.is_empty_collection() {
            self.bytes = self.bytes.saturating_sub(after);
            slot.remove();
        }
        result
    }

    /// Stores `entry` under `key`, replacing any value of any type; returns the entry it
    /// replaced if that was live.
    pub(crate) fn insert(
        &mut self,
        key: Vec<u8>,
        entry: Entry,
        now: &mut Now<'_>,
    ) -> Option<Entry> {
        let key_len = key.len();
        self.bytes += entry.cost(key_len);
        let old = self.map.insert(key, entry)?;
        self.bytes = self.bytes.saturating_sub(old.cost(key_len));
        if old.is_expired(now) {
            self.expired += 1;
            return None;
        }
        Some(old)
    }

    /// Removes `key`; returns its entry if it was live.
    pub(crate) fn remove(&mut self, key: &[u8], now: &mut Now<'_>) -> Option<Entry> {
        let old = self.map.remove(key)?;
        self.bytes = self.bytes.saturating_sub(old.cost(key.len()));
        if old.is_expired(now) {
            self.expired += 1;
            return None;
        }
        Some(old)
    }

    /// Removes every expired key; returns how many keys remain and how many of those have
    /// a deadline.
    pub(crate) fn sweep(&mut self, now: &mut Now<'_>) -> (usize, usize) {
        let (mut freed, mut expired) = (0, 0);
        self.map.retain(|key, entry| {
            let keep = !entry.is_expired(now);
            if !keep {
                freed += entry.cost(key.len());
                expired += 1;
            }
            keep
        });
        self.bytes = self.bytes.saturating_sub(freed);
        self.expired += expired;
        let expiring = self
            .map
            .values()
            .filter(|entry| entry.expires_at.is_some())
            .count();
        (self.map.len(), expiring)
    }

    /// Removes every key.
    pub(crate) fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }

    /// Estimated bytes held here.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keys expired here so far.
    pub(crate) fn expired(&self) -> u64 {
        self.expired
    }

    /// Drops an entry known to be expired.
    fn expire(&mut self, key: &[u8]) {
        if let Some(old) = self.map.remove(key) {
            self.bytes = self.bytes.saturating_sub(old.cost(key.len()));
            self.expired += 1;
        }
    }

    /// The byte estimate recomputed from scratch, to check the incremental one against.
    #[cfg(test)]
    pub(crate) fn recount(&self) -> usize {
        self.map
            .iter()
            .map(|(key, entry)| {
                let contents = match &entry.value {
                    Value::Str(bytes) => bytes.len(),
                    Value::Hash(hash) => hash
                        .map
                        .iter()
                        .map(|(f, v)| HASH_ITEM_COST + f.len() + v.len())
                        .sum(),
                    Value::List(list) => list.items.iter().map(|i| LIST_ITEM_COST + i.len()).sum(),
                    Value::Set(set) => set.members.iter().map(|m| SET_ITEM_COST + m.len()).sum(),
                    Value::ZSet(zset) => zset
                        .scores
                        .keys()
                        .map(|m| ZSET_ITEM_COST + 2 * m.len())
                        .sum(),
                    Value::Stream(stream) => stream
                        .entries
                        .iter()
                        .map(|(_, f)| {
                            STREAM_ENTRY_COST + f.iter().map(|x| VEC + x.len()).sum::<usize>()
                        })
                        .sum(),
                };
                KEY_COST + key.len() + contents
            })
            .sum()
    }
}

/// The keyspace: [`SHARDS`] shards, each behind its own mutex.
pub(crate) struct Store {
    shards: Box<[Mutex<Shard>]>,
}

impl Store {
    /// An empty keyspace.
    pub(crate) fn new() -> Self {
        Store {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
        }
    }

    /// Locks the shard that holds `key`.
    pub(crate) fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        lock(&self.shards[shard_of(key)])
    }

    /// Locks each shard in turn.
    pub(crate) fn all(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards.iter().map(lock)
    }

    /// Removes expired keys everywhere ([`Shard::sweep`] on each shard in turn); returns
    /// how many keys remain and how many of them have a deadline.
    pub(crate) fn sweep(&self, now: &mut Now<'_>) -> (usize, usize) {
        self.all()
            .map(|mut shard| shard.sweep(now))
            .fold((0, 0), |(k, e), (keys, expiring)| (k + keys, e + expiring))
    }
}

/// Locks a shard. Every update leaves a shard consistent before anything that could panic
/// runs, so a poisoned lock is used as is rather than taking the server down.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// FNV-1a of the key, then MurmurHash3's 64-bit finalizer; the top bits pick the shard.
/// FNV-1a alone leaves its top bits poorly mixed for keys that differ only in their last
/// digits (`key:00000001`, `key:00000002`, ...), which is what workloads generate.
/// Choosing a shard needs spread, not resistance to chosen keys: each shard's `HashMap`
/// keeps std's randomized SipHash.
pub(crate) fn shard_of(key: &[u8]) -> usize {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in key {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    (hash >> (u64::BITS - SHARD_BITS)) as usize
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn score(x: f64) -> Score {
        Score::new(x).unwrap()
    }

    fn bound(x: f64, exclusive: bool) -> ScoreBound {
        ScoreBound {
            score: score(x),
            exclusive,
        }
    }

    #[test]
    fn keys_spread_over_shards() {
        let mut used = [0usize; SHARDS];
        for i in 0..64_000 {
            used[shard_of(format!("key:{i:08}").as_bytes())] += 1;
        }
        // 1000 per shard if even; a uniform hash stays within about 4 standard deviations
        // (sqrt(1000) ~ 32) of that.
        assert!(used.iter().all(|&n| (850..1150).contains(&n)), "{used:?}");
    }

    #[test]
    fn scores_order_totally_with_zeros_equal_and_nan_refused() {
        assert!(Score::new(f64::NAN).is_none());
        assert_eq!(score(-0.0), score(0.0));
        assert!(score(f64::NEG_INFINITY) < score(-1e300));
        assert!(score(1e300) < score(f64::INFINITY));
        assert_eq!(next_up(f64::INFINITY), None);
        assert!(next_up(0.0).unwrap() > score(0.0));
        assert!(next_up(-1.0).unwrap() > score(-1.0));
        assert!(next_up(f64::NEG_INFINITY).unwrap() > score(f64::NEG_INFINITY));
    }

    #[test]
    fn zset_ranges_by_score_honour_exclusive_and_infinite_bounds() {
        let mut z = ZSet::default();
        for (s, m) in [
            (1.0, "a"),
            (2.0, "b"),
            (2.0, "c"),
            (3.0, "d"),
            (f64::INFINITY, "e"),
        ] {
            z.insert(m.as_bytes().to_vec(), score(s));
        }
        let names = |min, max| -> String {
            z.range_by_score(min, max)
                .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
                .collect()
        };
        assert_eq!(names(bound(2.0, false), bound(2.0, false)), "bc");
        assert_eq!(names(bound(2.0, true), bound(3.0, false)), "d");
        assert_eq!(names(bound(1.0, false), bound(3.0, true)), "abc");
        assert_eq!(names(bound(2.0, true), bound(2.0, true)), "");
        assert_eq!(names(bound(3.0, false), bound(1.0, false)), "");
        let all = (bound(f64::NEG_INFINITY, false), bound(f64::INFINITY, false));
        assert_eq!(names(all.0, all.1), "abcde");
        assert_eq!(names(bound(f64::INFINITY, true), all.1), "");
        assert_eq!(names(all.0, bound(f64::INFINITY, true)), "abcd");
        let rev: String = z
            .range_by_score(bound(1.0, true), all.1)
            .rev()
            .map(|(_, m)| String::from_utf8_lossy(m).into_owned())
            .collect();
        assert_eq!(rev, "edcb");
    }

    #[test]
    fn zset_reinsert_moves_the_member() {
        let mut z = ZSet::default();
        assert_eq!(z.insert(b"m".to_vec(), score(5.0)), None);
        assert_eq!(z.insert(b"n".to_vec(), score(1.0)), None);
        assert_eq!(z.insert(b"m".to_vec(), score(0.5)), Some(score(5.0)));
        let order: Vec<_> = z.iter().map(|(s, m)| (s.get(), m.to_vec())).collect();
        assert_eq!(order, vec![(0.5, b"m".to_vec()), (1.0, b"n".to_vec())]);
        assert!(z.remove(b"m"));
        assert!(!z.remove(b"m"));
        assert_eq!(z.len(), 1);
    }

    #[test]
    fn byte_estimate_follows_every_change_and_emptied_collections_go() {
        let start = Instant::now();
        let clock = move || start;
        let mut now = Now::new(&clock);
        let mut shard = Shard::default();
        let check = |shard: &Shard| assert_eq!(shard.bytes(), shard.recount());

        shard.insert(
            b"s".to_vec(),
            Entry::new(Value::Str(b"abc".to_vec()), None),
            &mut now,
        );
        check(&shard);
        shard.insert(
            b"s".to_vec(),
            Entry::new(Value::Str(vec![1; 100]), None),
            &mut now,
        );
        check(&shard);
        shard.upsert(
            b"h".to_vec(),
            &mut now,
            || Value::Hash(Hash::default()),
            |e| {
                if let Value::Hash(h) = &mut e.value {
                    h.insert(b"f".to_vec(), b"v".to_vec());
                    h.insert(b"f".to_vec(), b"longer".to_vec());
                    h.insert(b"g".to_vec(), b"v".to_vec());
                }
            },
        );
        check(&shard);
        shard.upsert(
            b"z".to_vec(),
            &mut now,
            || Value::ZSet(ZSet::default()),
            |e| {
                if let Value::ZSet(z) = &mut e.value {
                    z.insert(b"m1".to_vec(), score(1.0));
                    z.insert(b"m1".to_vec(), score(2.0));
                }
            },
        );
        check(&shard);
        shard.update(b"z", &mut now, |e| {
            if let Value::ZSet(z) = &mut e.value {
                z.remove(b"m1");
            }
        });
        check(&shard);
        assert!(
            shard.read(b"z", &mut now, |_| ()).is_none(),
            "emptied zset is gone"
        );
        // An upsert that adds nothing leaves no key behind.
        shard.upsert(
            b"l".to_vec(),
            &mut now,
            || Value::List(List::default()),
            |_| (),
        );
        assert!(shard.read(b"l", &mut now, |_| ()).is_none());
        shard.remove(b"h", &mut now);
        check(&shard);
        shard.remove(b"s", &mut now);
        assert_eq!(shard.bytes(), 0);
    }
}
