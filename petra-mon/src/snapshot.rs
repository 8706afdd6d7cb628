//! A store file opened for reading only, without writing a byte of it.
//!
//! Opening a pool writes: it marks the pool in use, and after a crash recovery rewrites nodes.
//! A reader that may not write the file (a read-only copy, another user's store) or must not
//! (an archive) opens it here instead: the file is opened read-only under a shared lock (so no
//! daemon holds it, and none can take it meanwhile) and mapped privately
//! ([`Mapping::private`]): whatever opening and recovery write stays in this process's copy of the
//! pages, never in the file.

use std::path::Path;

use petra::error::OpenError;
use petra::pool::{Mapping, Pool};
use petra_kv::{KvError, MetricStore};

use crate::MonError;

/// Opens the metric store in the file at `path` for reading, writing nothing to the file. Fails
/// with [`MonError::Held`] if a daemon holds it (it is then to be asked instead).
pub fn open_metric_store(path: &Path) -> Result<MetricStore, MonError> {
    let pool = Pool::open(path, &Mapping { private: true, ..Mapping::default() }).map_err(|e| match e {
        OpenError::Locked { .. } => MonError::Held(path.to_owned()),
        e => MonError::Store(KvError::Open(e)),
    })?;
    Ok(MetricStore::open_in(pool)?)
}
