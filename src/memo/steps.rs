//! Expensive pure steps remembered apart from whole answers: a definition validated.
//! (What is made of a fetched snapshot is kept with the snapshot instead, see
//! [`crate::source::derived`], and weighs in the snapshot budget.) The server owns
//! the one instance (a controller keeps no memo of its own) and hands it to every call
//! in its `Context`.
//!
//! Bounded in bytes: every step says what its result weighs. Steps on large inputs also
//! take one of a few heavy slots, so that peak memory follows the number of cores, not
//! the number of calls in flight (validating a near-limit definition takes ~170 MiB for a
//! moment).

use std::any::Any;
use std::sync::Arc;
use std::time::Instant;

use super::Memo;

/// Which step a result is of: the same input digest means different things to two steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// An APIMock definition's text validated (`controllers::apimock::definition`).
    Analysis,
    /// A multi-file APIMock definition validated as a whole.
    BundleAnalysis,
}

/// The key of one remembered result: the step and a digest of everything it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepKey {
    /// The step.
    pub step: Step,
    /// A BLAKE3 digest of its inputs.
    pub input: [u8; 32],
}

/// Inputs above this size are worked on in a heavy slot.
pub const HEAVY_BYTES: usize = 64 * 1024;

/// Bytes of results held by default.
pub const DEFAULT_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Clone)]
struct Held {
    value: Arc<dyn Any + Send + Sync>,
    weight: u64,
}

/// The server's memo of step results.
pub struct Steps {
    results: Memo<StepKey, Held>,
    heavy: HeavySlots,
}

impl Default for Steps {
    fn default() -> Steps {
        Steps::new(DEFAULT_BYTES, 0)
    }
}

impl Steps {
    /// At most `bytes` of results, steps on large inputs run `heavy_slots` at a time (0:
    /// one per core, at most 8; the server passes its compute-thread count).
    pub fn new(bytes: u64, heavy_slots: usize) -> Steps {
        let capacity = match heavy_slots {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8)),
            n => n,
        };
        Steps {
            results: Memo::weighted(4096, bytes, |_, held: &Held| held.weight),
            heavy: HeavySlots::new(capacity),
        }
    }

    /// The remembered result under `key`, if any (of type `T`).
    pub fn get<T: Any + Send + Sync>(&self, key: &StepKey) -> Option<Arc<T>> {
        self.results.get(key)?.value.downcast().ok()
    }

    /// A turn at the heavy work for an input of `size` bytes: above [`HEAVY_BYTES`], one
    /// of the heavy slots, waited for until `deadline` (for ever without one); below, no
    /// slot. None when no slot came free in time: nobody waits for the result any more.
    pub fn heavy_turn(&self, size: usize, deadline: Option<Instant>) -> Option<HeavyTurn> {
        if size <= HEAVY_BYTES {
            return Some(HeavyTurn { _slot: None });
        }
        self.heavy
            .take(deadline)
            .map(|slot| HeavyTurn { _slot: Some(slot) })
    }

    /// Remembers `made` under `key`, with the weight `weigh` gives it, and returns it.
    /// (A caller asks [`Steps::get`] first and makes the result itself, in a
    /// [`Steps::heavy_turn`] when its input is large: no callback runs in here.)
    pub fn keep<T: Any + Send + Sync>(
        &self,
        key: StepKey,
        made: T,
        weigh: fn(&T) -> u64,
    ) -> Arc<T> {
        let made = Arc::new(made);
        // What an entry costs beyond its result: the key, the map's bookkeeping.
        let weight = weigh(&made).saturating_add(128);
        self.results.insert(
            key,
            Held {
                value: made.clone(),
                weight,
            },
        );
        made
    }

    /// Bytes of results held now.
    pub fn bytes(&self) -> u64 {
        self.results.weight()
    }
}

/// The heavy slots, as tokens in a bounded channel: a step takes one by receiving it
/// and gives it back by sending it. The work runs on blocking compute threads, and
/// crossbeam's channel waits with a deadline there (neither std's channels, whose
/// receiver cannot be shared, nor tokio's semaphore, which needs its runtime to time
/// out, do).
struct HeavySlots {
    free: crossbeam_channel::Receiver<()>,
    give_back: crossbeam_channel::Sender<()>,
}

/// A heavy slot, given back when dropped.
struct HeavySlot(crossbeam_channel::Sender<()>);

/// A turn at heavy work: a heavy slot for a large input, none for a small one; given
/// back when dropped.
pub struct HeavyTurn {
    _slot: Option<HeavySlot>,
}

impl HeavySlots {
    fn new(capacity: usize) -> HeavySlots {
        let (give_back, free) = crossbeam_channel::bounded(capacity);
        for _ in 0..capacity {
            // Cannot fail: the channel holds exactly `capacity` tokens.
            let _ = give_back.try_send(());
        }
        HeavySlots { free, give_back }
    }

    /// Waits for a slot until `deadline` (for ever without one); None when it passed.
    fn take(&self, deadline: Option<Instant>) -> Option<HeavySlot> {
        let taken = match deadline {
            None => self.free.recv().ok(),
            Some(deadline) => self.free.recv_deadline(deadline).ok(),
        };
        taken.map(|()| HeavySlot(self.give_back.clone()))
    }
}

impl Drop for HeavySlot {
    fn drop(&mut self) {
        // Room is certain (this token came out of the channel); a closed channel means
        // the memo is gone and nobody waits.
        let _ = self.0.try_send(());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(step: Step, byte: u8) -> StepKey {
        StepKey {
            step,
            input: [byte; 32],
        }
    }

    /// A result's weight (a closure: a `fn` would take `&String`, which clippy refuses).
    const LEN: fn(&String) -> u64 = |s| s.len() as u64;

    #[test]
    fn a_result_is_kept_per_step_and_input() {
        let steps = Steps::default();
        let first = steps.keep(key(Step::Analysis, 1), "a".to_owned(), LEN);
        let again = steps.get::<String>(&key(Step::Analysis, 1));
        assert!(again.is_some_and(|again| Arc::ptr_eq(&first, &again)));
        // Another step on the same input digest is another result.
        assert!(steps.get::<String>(&key(Step::BundleAnalysis, 1)).is_none());
        assert!(
            steps.get::<u8>(&key(Step::Analysis, 1)).is_none(),
            "another type"
        );
    }

    #[test]
    fn results_stay_within_their_bytes() {
        let steps = Steps::new(100 * 1024, 1);
        for byte in 0..=255u8 {
            let _ = steps.keep(key(Step::BundleAnalysis, byte), "x".repeat(10 * 1024), LEN);
        }
        assert!(steps.bytes() <= 100 * 1024, "{} bytes", steps.bytes());
    }

    #[test]
    fn large_inputs_wait_for_a_heavy_slot_until_the_deadline() {
        let steps = Steps::new(DEFAULT_BYTES, 1);
        let held = steps
            .heavy_turn(HEAVY_BYTES + 1, None)
            .unwrap_or_else(|| panic!("a slot without deadline"));
        let now = Instant::now();
        assert!(
            steps.heavy_turn(HEAVY_BYTES + 1, Some(now)).is_none(),
            "every slot busy: no work after the deadline"
        );
        assert!(
            steps.heavy_turn(HEAVY_BYTES, Some(now)).is_some(),
            "a small input needs no slot"
        );
        drop(held);
        let later = now + std::time::Duration::from_secs(60);
        assert!(steps.heavy_turn(HEAVY_BYTES + 1, Some(later)).is_some());
    }
}
