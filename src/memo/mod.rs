//! The one bounded cache every memo of the server uses ([`Memo`]), and the memo of
//! expensive pure steps ([`steps`]) it hands every controller call. Below both the server
//! and the controllers, so that neither reaches into the other for it.
//!
//! Bounded by a total weight (entries or bytes, chosen per memo), with eviction one entry
//! at a time: the hand-rolled "clear everything when full" memos it replaces dropped
//! thousands of entries inside one unlucky hook call, which showed up as that call's
//! 15–20 ms latency. quick_cache's CLOCK-PRO policy also keeps hot entries (a steady
//! parent) over one-off ones (a stream of edits).

pub mod steps;

use std::hash::Hash;

use quick_cache::Weighter;
use quick_cache::sync::Cache;

/// The weight of one entry; its sum over all entries stays under the memo's capacity.
pub type Weigh<K, V> = fn(&K, &V) -> u64;

#[derive(Clone)]
struct ByFn<K, V>(Weigh<K, V>);

impl<K, V> Weighter<K, V> for ByFn<K, V> {
    fn weight(&self, key: &K, value: &V) -> u64 {
        // A zero weight would never be evicted; every entry costs at least one.
        (self.0)(key, value).max(1)
    }
}

/// A concurrent memo from `K` to cheaply clonable `V` (an `Arc`, usually).
pub struct Memo<K, V> {
    cache: Cache<K, V, ByFn<K, V>>,
}

impl<K, V> Memo<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    /// At most `capacity` entries.
    pub fn entries(capacity: u64) -> Memo<K, V> {
        Memo::weighted(capacity, capacity, |_, _| 1)
    }

    /// At most `capacity` in total `weigh`t, for about `expected_entries` entries.
    pub fn weighted(expected_entries: u64, capacity: u64, weigh: Weigh<K, V>) -> Memo<K, V> {
        let expected = usize::try_from(expected_entries).unwrap_or(usize::MAX);
        Memo {
            cache: Cache::with_weighter(expected, capacity, ByFn(weigh)),
        }
    }

    /// The value remembered under `key`, if any.
    pub fn get(&self, key: &K) -> Option<V> {
        self.cache.get(key)
    }

    /// Remembers `value` (an entry heavier than the whole capacity is not kept).
    pub fn insert(&self, key: K, value: V) {
        self.cache.insert(key, value);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// The total weight held now.
    pub fn weight(&self) -> u64 {
        self.cache.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_within_its_entry_bound() {
        let memo: Memo<u32, u32> = Memo::entries(100);
        for i in 0..1000 {
            memo.insert(i, i * 2);
        }
        assert!(memo.len() <= 100, "{} entries", memo.len());
        // Which entries stay is the eviction policy's business; what is held is right.
        assert!((0..1000).all(|i| memo.get(&i).is_none_or(|v| v == i * 2)));
        let hits = (0..1000).filter(|i| memo.get(i).is_some()).count();
        assert!(hits <= 100, "{hits} of 1000 keys still held");
    }

    #[test]
    fn stays_within_its_weight_bound() {
        let memo: Memo<u32, String> = Memo::weighted(10, 10_000, |_, text| text.len() as u64);
        for i in 0..100 {
            memo.insert(i, "x".repeat(1000));
        }
        assert!(memo.weight() <= 10_000, "weight {}", memo.weight());
        assert!(memo.len() <= 10);
        // Heavier than the whole memo: not kept, and nothing else is lost for it.
        let before = memo.len();
        memo.insert(1000, "x".repeat(20_000));
        assert_eq!(memo.get(&1000), None);
        assert_eq!(memo.len(), before);
    }
}
