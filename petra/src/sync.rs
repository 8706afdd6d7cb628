//! The primitives that order the engine's volatile state between threads (txid counter, ring
//! positions, the ring table): loom's under `--cfg loom`, so that its models see them, std's and
//! parking_lot's otherwise.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;

#[cfg(not(loom))]
pub(crate) use parking_lot::Mutex;

/// A mutex loom sees, with parking_lot's interface.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T: Default> Default for Mutex<T> {
    fn default() -> Mutex<T> {
        Mutex::new(T::default())
    }
}

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Mutex<T> {
        Mutex(loom::sync::Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().expect("never poisoned: a panic ends the model")
    }
}
