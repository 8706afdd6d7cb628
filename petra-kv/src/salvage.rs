//! Salvage: what is intact of a damaged store, copied into a new file.
//!
//! Opening a damaged store refuses it (see [`KvError::Damaged`](crate::KvError::Damaged)) and
//! leaves it as it was. [`salvage`] is the explicit way to keep what can be kept: it reads the
//! damaged file (privately mapped, never written), passes over every piece of damage instead of
//! refusing it, reports each, and writes every key it could read whole into a new file, a store
//! of the same kind if the store's own records survived.

use std::path::Path;

use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{DurabilityPolicy, Engine, SalvageReport};

use crate::config::Config;
use crate::error::{KvError, Result};
use crate::format;

/// Copies what is intact of the store (or metric store) in the file `from` into a new file at
/// `to.path` (which must not exist; `to.size` and `to.max_size` size it), and returns what was
/// kept and what was passed over. `from` is never written. Opening the new file as the kind of
/// store `from` was works if the store's own records (its magic and version) were kept.
pub fn salvage(from: &Path, to: &Config) -> Result<SalvageReport> {
    let damaged = Pool::open(from, &Mapping { private: true, ..Mapping::default() })?;
    let pool_config = PoolConfig {
        initial_size: to.size,
        max_size: to.max_size,
        mapping: to.mapping.clone(),
        ..PoolConfig::default()
    };
    let into = Pool::create(&to.path, &pool_config)?;
    let made =
        Engine::salvage(&damaged, into, format::engine_config(DurabilityPolicy::default())).map_err(KvError::from);
    let (engine, report) = made.inspect_err(|_| {
        // The file is ours (created just now) and holds nothing: leave nothing behind.
        let _ = std::fs::remove_file(&to.path);
    })?;
    engine.close()?;
    Ok(report)
}
