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
    /// The result under `key`, or `make`'s, kept with the weight `weigh` gives it. Two
    /// calls at once may both make it; the first kept is the one every later call gets.
    pub fn remember<T: Any + Send + Sync>(
        &self,
        key: DerivedKey,
        weigh: fn(&T) -> u64,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        if let Some(kept) = self.get(&key) {
            return kept;
        }
        let made = Arc::new(make());
        let mut values = self.lock();
        let kept = values.entry(key).or_insert_with(|| {
            // What an entry costs beyond its result: the key, the map's bookkeeping.
            let weight = weigh(&made).saturating_add(128);
            self.bytes.fetch_add(weight, Ordering::SeqCst);
            made.clone()
        });
        kept.clone().downcast().unwrap_or(made)
    }

    fn get<T: Any + Send + Sync>(&self, key: &DerivedKey) -> Option<Arc<T>> {
        self.lock().get(key)?.clone().downcast().ok()
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
    fn a_result_is_made_once_per_key_and_weighs_on_the_snapshot() {
        let derived = Derived::default();
        let mut made = 0;
        let first = derived.remember(
            key("conversion", 1),
            |s: &String| s.len() as u64,
            || {
                made += 1;
                "x".repeat(1000)
            },
        );
        let again = derived.remember(
            key("conversion", 1),
            |s: &String| s.len() as u64,
            || {
                made += 1;
                String::new()
            },
        );
        assert_eq!((made, first.len(), again.len()), (1, 1000, 1000));
        assert_eq!(derived.bytes(), 1000 + 128);
        let other = derived.remember(
            key("conversion", 2),
            |s: &String| s.len() as u64,
            || "y".repeat(10),
        );
        assert_eq!(other.as_str(), "y".repeat(10));
        assert_eq!(derived.bytes(), 1000 + 128 + 10 + 128);
        assert_eq!(derived.clone().bytes(), 0, "a copy starts empty");
    }
}
