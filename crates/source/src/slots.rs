//! Fair turns at a bounded resource (fetch workers): at most `total` at once, at most
//! `per_namespace` for any one namespace, and a free turn goes to the waiting job whose
//! namespace has the fewest running. One namespace's hundreds of hostile sources (each
//! able to hold its turn for a whole deadline) therefore never occupy more than its
//! share, and a namespace with nothing running starts at the next free turn, or at once
//! while the other namespaces stay within their shares.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

/// The turns, shared by every job of one kind.
pub struct FairSlots {
    total: usize,
    per_namespace: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    busy: usize,
    running: HashMap<String, usize>,
    waiting: VecDeque<Waiter>,
}

struct Waiter {
    /// The namespaces the job may run under (every namespace whose parents share it).
    namespaces: Vec<String>,
    grant: oneshot::Sender<Slot>,
}

/// A turn; given back when dropped.
pub struct Slot {
    slots: Option<Arc<FairSlots>>,
    namespace: String,
}

#[cfg(test)]
impl Slot {
    /// The namespace the turn was counted against.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            let mut state = slots.lock();
            state.release(&self.namespace);
            slots.dispatch(&mut state);
        }
    }
}

impl FairSlots {
    /// `total` turns, at most `per_namespace` (at least 1) for one namespace.
    pub fn new(total: usize, per_namespace: usize) -> Arc<FairSlots> {
        let total = total.max(1);
        Arc::new(FairSlots {
            total,
            per_namespace: per_namespace.clamp(1, total),
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits for a turn under one of `namespaces`.
    pub async fn acquire(self: &Arc<Self>, namespaces: Vec<String>) -> Slot {
        let (grant, granted) = oneshot::channel();
        {
            let mut state = self.lock();
            state.waiting.push_back(Waiter { namespaces, grant });
            self.dispatch(&mut state);
        }
        match granted.await {
            Ok(slot) => slot,
            // The sender is only dropped with the pool; run without a turn then.
            Err(_) => Slot {
                slots: None,
                namespace: String::new(),
            },
        }
    }

    /// (running, waiting) jobs, for metrics and tests.
    pub fn load(&self) -> (usize, usize) {
        let state = self.lock();
        (state.busy, state.waiting.len())
    }

    /// Hands free turns to waiters: the one whose least-loaded namespace runs fewest
    /// jobs, the earliest among equals.
    fn dispatch(self: &Arc<Self>, state: &mut State) {
        while state.busy < self.total {
            let mut best: Option<(usize, usize, String)> = None;
            for (index, waiter) in state.waiting.iter().enumerate() {
                let Some((count, namespace)) = waiter
                    .namespaces
                    .iter()
                    .map(|ns| (state.running.get(ns).copied().unwrap_or(0), ns))
                    .filter(|(count, _)| *count < self.per_namespace)
                    .min()
                else {
                    continue;
                };
                if best.as_ref().is_none_or(|(c, ..)| count < *c) {
                    best = Some((count, index, namespace.clone()));
                    if count == 0 {
                        break;
                    }
                }
            }
            let Some((_, index, namespace)) = best else {
                return;
            };
            let Some(waiter) = state.waiting.remove(index) else {
                return;
            };
            state.busy += 1;
            *state.running.entry(namespace.clone()).or_default() += 1;
            let slot = Slot {
                slots: Some(self.clone()),
                namespace,
            };
            if let Err(mut unwanted) = waiter.grant.send(slot) {
                // The waiter is gone: take the turn back here (its drop would lock again).
                if unwanted.slots.take().is_some() {
                    state.release(&unwanted.namespace);
                }
            }
        }
    }
}

impl State {
    fn release(&mut self, namespace: &str) {
        self.busy = self.busy.saturating_sub(1);
        if let Some(count) = self.running.get_mut(namespace) {
            *count -= 1;
            if *count == 0 {
                self.running.remove(namespace);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str) -> Vec<String> {
        vec![name.to_owned()]
    }

    #[tokio::test]
    async fn one_namespace_never_takes_more_than_its_share() {
        let slots = FairSlots::new(4, 2);
        let first = slots.acquire(ns("attacker")).await;
        let second = slots.acquire(ns("attacker")).await;
        // A third job of the same namespace waits although two turns are free...
        let third = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(ns("attacker")).await }
        });
        tokio::task::yield_now().await;
        while slots.load().1 == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(slots.load(), (2, 1));
        // ...and another namespace starts at once.
        let honest = slots.acquire(ns("honest")).await;
        assert_eq!(honest.namespace(), "honest");
        assert_eq!(slots.load(), (3, 1));
        drop(first);
        let third = third.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(third.namespace(), "attacker");
        drop((second, third, honest));
        assert_eq!(slots.load(), (0, 0));
    }

    #[tokio::test]
    async fn a_shared_job_runs_under_the_namespace_with_room() {
        let slots = FairSlots::new(4, 1);
        let _busy = slots.acquire(ns("a")).await;
        let shared = slots.acquire(vec!["a".to_owned(), "b".to_owned()]).await;
        assert_eq!(shared.namespace(), "b");
    }

    #[tokio::test]
    async fn a_free_turn_goes_to_the_least_loaded_namespace_first() {
        let slots = FairSlots::new(3, 3);
        let _a1 = slots.acquire(ns("a")).await;
        let _a2 = slots.acquire(ns("a")).await;
        let b1 = slots.acquire(ns("b")).await;
        let (tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        for name in ["a", "c"] {
            let slots = slots.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let slot = slots.acquire(ns(name)).await;
                let _ = tx.send(slot.namespace().to_owned());
                // Hold the turn until the test ends the runtime.
                std::future::pending::<()>().await;
                drop(slot);
            });
        }
        while slots.load().1 < 2 {
            tokio::task::yield_now().await;
        }
        drop(b1);
        // "a" runs two and "c" none: c goes first although it asked last.
        assert_eq!(order.recv().await.as_deref(), Some("c"));
        assert_eq!(slots.load(), (3, 1));
    }
}
