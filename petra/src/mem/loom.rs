//! [`LoomMem`]: pool words as loom atomics, so that `loom::model` explores the engine's
//! interleavings (built only with `RUSTFLAGS="--cfg loom"`).
//!
//! Words are created on first touch (reading as zero), which keeps a pool of a few chunks cheap
//! to model. Flushes and fences do nothing: loom checks concurrency, the crash simulator checks
//! persistence.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use loom::sync::atomic::AtomicU64;

use super::{Durability, GrowError, PMem, check_word};

/// Pool memory of loom atomics. See the [module docs](self).
#[derive(Debug)]
pub struct LoomMem {
    /// Words touched so far. The std mutex is never held across a loom operation.
    words: Mutex<HashMap<u64, Arc<AtomicU64>>>,
    len: std::sync::atomic::AtomicU64,
    max_len: u64,
}

impl LoomMem {
    /// Zeroed memory of `len` bytes that may grow to `max_len`.
    pub fn new(len: u64, max_len: u64) -> LoomMem {
        LoomMem { words: Mutex::new(HashMap::new()), len: std::sync::atomic::AtomicU64::new(len), max_len }
    }

    fn word(&self, off: u64) -> Arc<AtomicU64> {
        check_word(off, self.len());
        let mut words = self.words.lock().expect("never poisoned: no panic while held");
        Arc::clone(words.entry(off).or_insert_with(|| Arc::new(AtomicU64::new(0))))
    }
}

impl PMem for LoomMem {
    fn len(&self) -> u64 {
        // Relaxed: growth happens before the threads of a model start.
        self.len.load(Ordering::Relaxed)
    }
    fn load(&self, off: u64, order: Ordering) -> u64 {
        self.word(off).load(order)
    }
    fn store(&self, off: u64, val: u64, order: Ordering) {
        self.word(off).store(val, order)
    }
    fn compare_exchange(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.word(off).compare_exchange(current, new, success, failure)
    }
    fn fetch_add(&self, off: u64, val: u64, order: Ordering) -> u64 {
        self.word(off).fetch_add(val, order)
    }
    fn flush(&self, _off: u64) {}
    fn fence(&self) {}
    fn grow(&self, new_len: u64) -> Result<(), GrowError> {
        if new_len > self.max_len {
            return Err(GrowError::AboveMaximum { requested: new_len, max: self.max_len });
        }
        // Relaxed: see `len`.
        self.len.fetch_max(new_len, Ordering::Relaxed);
        Ok(())
    }
    fn max_len(&self) -> u64 {
        self.max_len
    }
    fn durability(&self) -> Durability {
        Durability::Simulated
    }

    /// Loom models a running engine and its recovery in one process: one boot.
    fn boot(&self) -> u128 {
        1
    }
}
