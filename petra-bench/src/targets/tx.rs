//! What `petra-bench micro` runs its transactions on: [`TxMap`], shared by the threads, and
//! [`TxWorker`], one thread's transactions on it.

use crate::error::Result;
use crate::workload::GenOp;

/// What the micro-benchmark runs its transactions on, shared by the threads: PETRA's structures
/// (`structures.rs`) and the baselines ([`LockMap`](crate::baselines::locks::LockMap),
/// [`SkipMapBound`](crate::baselines::skipmap::SkipMapBound)).
pub(crate) trait TxMap: Sync {
    /// A thread's access.
    type Worker<'a>: TxWorker
    where
        Self: 'a;

    /// A worker for the calling thread, ready to run: whatever it sets up happens here, before
    /// timing starts.
    fn worker(&self) -> Result<Self::Worker<'_>>;

    /// Finishes the work the prefill left pending, before timing starts, so that the timed run
    /// pays for its own transactions only. Nothing, for maps that leave none.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

/// One thread's transactions on a [`TxMap`].
pub(crate) trait TxWorker {
    /// Sets every key of `keys` (a prefill batch, at most 16), atomically where the map has
    /// transactions; how many were absent.
    fn put_all(&mut self, keys: &[u64]) -> Result<u64>;

    /// Runs `ops` with strict semantics (a failed Insert, Delete, Update or Find fails the
    /// transaction); whether it committed.
    fn run(&mut self, ops: &[GenOp]) -> Result<bool>;
}
