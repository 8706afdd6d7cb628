//! redb, the baseline of `petra-bench kv` and `metrics`: a database whose write transactions
//! commit with one durability ([`RedbDb`]), and the adapters of the two benchmarks to it.

mod kv;
mod metrics;

use std::path::Path;

use redb::ReadableDatabase;

pub use kv::Redb;

/// redb's commit durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedbDurability {
    /// Commits are not persisted (`Durability::None`).
    None,
    /// Commits are persisted when they return (`Durability::Immediate`: fsync).
    Immediate,
}

impl RedbDurability {
    /// redb's setting.
    pub fn redb(self) -> redb::Durability {
        match self {
            RedbDurability::None => redb::Durability::None,
            RedbDurability::Immediate => redb::Durability::Immediate,
        }
    }
}

/// A redb database whose write transactions commit with one durability: the baseline's access
/// to it, for `kv` and `metrics`.
#[derive(Debug)]
pub(crate) struct RedbDb {
    db: redb::Database,
    durability: redb::Durability,
}

/// A redb error as the benchmarks report it.
pub(crate) fn redb_err(e: impl std::fmt::Display) -> String {
    format!("redb: {e}")
}

impl RedbDb {
    /// Creates a database at `path`.
    pub(crate) fn create(path: &Path, durability: RedbDurability) -> Result<RedbDb, String> {
        Ok(RedbDb { db: redb::Database::create(path).map_err(redb_err)?, durability: durability.redb() })
    }

    /// `f` in one write transaction, committed with the database's durability.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&redb::WriteTransaction) -> Result<R, String>) -> Result<R, String> {
        let mut tx = self.db.begin_write().map_err(redb_err)?;
        tx.set_durability(self.durability).map_err(redb_err)?;
        let r = f(&tx)?;
        tx.commit().map_err(redb_err)?;
        Ok(r)
    }

    /// `f` in one read transaction.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<R, String>) -> Result<R, String> {
        f(&self.db.begin_read().map_err(redb_err)?)
    }

    /// A last durable commit: what `None` commits left in memory reaches the file.
    pub(crate) fn close(self) -> Result<(), String> {
        RedbDb { durability: redb::Durability::Immediate, ..self }.write(|_| Ok(()))
    }
}
