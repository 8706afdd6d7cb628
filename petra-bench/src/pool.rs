//! The pool files of the benchmarks on PETRA's engine: how they are created and opened, and a
//! fill of puts in transactions of 16.

use std::path::Path;

use petra::mem::MmapMem;
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{Engine, StructId, Transaction};

use crate::error::{BenchError, Result};

/// The bytes a benchmark's pool file starts with (it grows as the run needs).
pub(crate) const START_BYTES: u64 = 64 << 20;

/// A new pool file at `path` for a benchmark: [`START_BYTES`] to start in 1 MiB chunks, growing
/// as far as the run needs (up to 1 TiB); `volatile` turns flushes and fences off.
pub(crate) fn create_pool(path: &Path, volatile: bool) -> Result<Pool<MmapMem>> {
    let mapping = Mapping { volatile, ..Mapping::default() };
    let config = PoolConfig { initial_size: START_BYTES, max_size: 1 << 40, chunk_size: 1 << 20, mapping };
    Ok(Pool::create(path, &config)?)
}

/// Opens the pool file at `path` that [`create_pool`] made.
pub(crate) fn open_pool(path: &Path) -> Result<Pool<MmapMem>> {
    Ok(Pool::open(path, &Mapping::default())?)
}

/// Puts `pairs` (key, value) into structure `s` of `engine`, 16 to a transaction, on one thread.
pub(crate) fn put_in_batches(
    engine: &Engine<MmapMem>,
    s: StructId,
    pairs: impl IntoIterator<Item = (u64, u64)>,
) -> Result<()> {
    let mut h = engine.handle()?;
    let mut tx = Transaction::new();
    let mut pairs = pairs.into_iter().peekable();
    while pairs.peek().is_some() {
        tx.clear();
        for (key, value) in pairs.by_ref().take(16) {
            tx.put(s, key, value);
        }
        // Puts never fail, and one thread meets no helping cycle.
        if !h.execute(&tx)?.is_committed() {
            return Err(BenchError::Check("a transaction of puts aborted".into()));
        }
    }
    Ok(())
}
