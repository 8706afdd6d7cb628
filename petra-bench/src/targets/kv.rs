//! The trait a store implements for `petra-bench kv` to drive it: [`KvTarget`], shared by the
//! threads, and [`KvSession`], one thread's operations on it.

use std::ops::ControlFlow;

use crate::error::Result;

/// A key-value store a benchmark drives: shared by the threads, each through its own session.
pub(crate) trait KvTarget: Sync {
    /// A thread's access.
    type Session<'a>: KvSession
    where
        Self: 'a;

    /// A session for the calling thread.
    fn session(&self) -> Result<Self::Session<'_>>;

    /// Closes the store, making everything durable its durability promises.
    fn close(self) -> Result<()>;
}

/// What a scan calls with each entry; it breaks to stop the scan.
pub(crate) type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// One thread's operations on a [`KvTarget`].
pub(crate) trait KvSession {
    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Sets key `i` to `values[i]` for every `i`, atomically.
    /// The keys are `keys` cut into `values.len()` slices of equal length.
    fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<()>;
    /// The length of `key`'s value, if present (read through a borrow where the store allows it).
    fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>>;
    /// Removes `key`; whether it was present.
    fn remove(&mut self, key: &[u8]) -> Result<bool>;
    /// Calls `f` with the entries in key order (the store's order) from the first, until it breaks.
    fn scan(&mut self, f: &mut Visit<'_>) -> Result<()>;
}
