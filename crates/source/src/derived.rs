//! What pure steps make of a snapshot (a MonitoredService's ConfigMap content, an
//! APIMock's definition read from the files), kept with the snapshot itself.
//!
//! Such a result is another copy of the snapshot's bytes. Kept here it goes when the
//! snapshot goes, and the source engine counts its bytes with the snapshot's against
//! `--snapshot-memory-bytes`, so one budget covers every copy of fetched content the
//! engine holds: the files, what was made of them, and what fetches are bringing.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Which result of a snapshot: the step that made it and a digest of the step's other
/// inputs (a format, a root document).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DerivedKey {
    /// What the step is, in a word (`"conversion"`).
    pub step: &'static str,
    /// A digest of the inputs besides the snapshot.
    pub inputs: [u8; 32],
}

type Value = Arc<dyn Any + Send + Sync>;

/// Results made from one snapshot. Not part of the snapshot's identity: a copy of the
/// snapshot starts with none, and two snapshots compare equal whatever they hold.
#[derive(Default)]
pub struct Derived {
    values: Mutex<HashMap<DerivedKey, Value>>,
    bytes: AtomicU64,
}

impl Derived {
    /// The result kept under `key`, if any (of type `T`).
    pub fn get<T: Any + Send + Sync>(&self, key: &DerivedKey) -> Option<Arc<T>> {
        self.lock().get(key)?.clone().downcast().ok()
    }

    /// Keeps `made` under `key`, with the weight `weigh` gives it, and returns what is
    /// kept there: two calls at once may both make a result; the first kept is the one
    /// every later call gets. (A caller asks [`Derived::get`] first and makes the result
    /// itself: no callback runs in here.)
    pub fn keep<T: Any + Send + Sync>(
        &self,
        key: DerivedKey,
        made: T,
        weigh: fn(&T) -> u64,
    ) -> Arc<T> {
        let made = Arc::new(made);
        let mut values = self.lock();
        let kept = values.entry(key).or_insert_with(|| {
            // What an entry costs beyond its result: the key, the map's bookkeeping.
            let weight = weigh(&made).saturating_add(128);
            self.bytes.fetch_add(weight, Ordering::SeqCst);
            made.clone()
        });
        kept.clone().downcast().unwrap_or(made)
    }

    /// Bytes of the results held.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<DerivedKey, Value>> {
        self.values
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clone for Derived {
    fn clone(&self) -> Derived {
        Derived::default()
    }
}

impl PartialEq for Derived {
    fn eq(&self, _: &Derived) -> bool {
        true
    }
}

impl Eq for Derived {}

impl std::fmt::Debug for Derived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Derived({} bytes)", self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(step: &'static str, byte: u8) -> DerivedKey {
        DerivedKey {
            step,
            inputs: [byte; 32],
        }
    }

    #[test]
    fn the_first_result_kept_stays_and_weighs_on_the_snapshot() {
        let derived = Derived::default();
        let len = |s: &String| s.len() as u64;
        assert!(derived.get::<String>(&key("conversion", 1)).is_none());
        let first = derived.keep(key("conversion", 1), "x".repeat(1000), len);
        // A second result made at the same time is not kept: the first is returned.
        let raced = derived.keep(key("conversion", 1), String::new(), len);
        assert_eq!((first.len(), raced.len()), (1000, 1000));
        let again = derived.get::<String>(&key("conversion", 1));
        assert!(again.is_some_and(|again| Arc::ptr_eq(&first, &again)));
        assert_eq!(derived.bytes(), 1000 + 128);
        let other = derived.keep(key("conversion", 2), "y".repeat(10), len);
        assert_eq!(other.as_str(), "y".repeat(10));
        assert_eq!(derived.bytes(), 1000 + 128 + 10 + 128);
        assert_eq!(derived.clone().bytes(), 0, "a copy starts empty");
    }
}
