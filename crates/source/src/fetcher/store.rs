//! The engine's state behind one lock, split as kube-runtime's reflector splits it: one
//! [`StoreWriter`] (the writer task's, not cloneable, the only way to `&mut State`) and
//! any number of read-only [`Store`]s.

use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::state::State;

/// A read-only handle on the engine's state.
#[derive(Clone)]
pub(super) struct Store(Arc<RwLock<State>>);

/// The one handle that changes the state.
pub(super) struct StoreWriter(Arc<RwLock<State>>);

/// The writer's handle and a reader's, on `state`.
pub(super) fn split(state: State) -> (StoreWriter, Store) {
    let shared = Arc::new(RwLock::new(state));
    (StoreWriter(shared.clone()), Store(shared))
}

impl Store {
    /// The state as it is now. A panic never leaves it half-changed (every mutator is
    /// whole between statements), so a poisoned lock is read all the same.
    pub(super) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl StoreWriter {
    pub(super) fn write(&mut self) -> RwLockWriteGuard<'_, State> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn read(&self) -> RwLockReadGuard<'_, State> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
