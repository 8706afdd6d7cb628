//! What `petra-bench metrics` needs of a store: [`MetricTarget`], shared by the storing threads,
//! and [`MetricSessionOf`], one thread's access to the sets.

use petra_kv::Sample;

use crate::error::Result;

/// A store holding the sets, shared by the threads that store into it.
pub(crate) trait MetricTarget: Sync {
    /// One thread's access.
    type Session<'a>: MetricSessionOf
    where
        Self: 'a;
    /// A session for one thread.
    fn session(&self) -> Result<Self::Session<'_>>;
}

/// What the timed loops need of one thread's access to the sets (numbered from 0).
pub(crate) trait MetricSessionOf {
    /// Stores `sample` into set `set`, durably as the engine's mode has it.
    fn store(&mut self, set: usize, sample: &Sample) -> Result<()>;
    /// The latest sample's generation in set `set`, its values decoded.
    fn latest(&mut self, set: usize) -> Result<Option<u64>>;
    /// The samples of set `set` stamped `from..=to`, decoded and collected: how many.
    fn range(&mut self, set: usize, from: u64, to: u64) -> Result<usize>;
    /// The same, collected into a `Vec` the session keeps and reuses: how many.
    fn range_reused(&mut self, set: usize, from: u64, to: u64) -> Result<usize>;
    /// The same samples decoded and visited one at a time: how many.
    fn scan(&mut self, set: usize, from: u64, to: u64) -> Result<usize>;
}
