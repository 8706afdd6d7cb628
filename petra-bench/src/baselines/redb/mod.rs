//! redb, the baseline of `petra-bench kv` and `metrics`: a database whose write transactions
//! commit with one durability ([`RedbDb`]), and the adapters of the two benchmarks to it.

mod kv;
mod metrics;

use std::path::Path;

use redb::ReadableDatabase;

use crate::error::Result;

pub(crate) use kv::RedbKv;

/// redb's commit durability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RedbDurability {
    /// Commits are not persisted (`Durability::None`).
    None,
    /// Commits are persisted when they return (`Durability::Immediate`: fsync).
    Immediate,
}

impl RedbDurability {
    /// redb's setting.
    pub(crate) fn redb(self) -> redb::Durability {
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

impl RedbDb {
    /// Creates a database at `path`.
    pub(crate) fn create(path: &Path, durability: RedbDurability) -> Result<RedbDb> {
        Ok(RedbDb { db: redb::Database::create(path)?, durability: durability.redb() })
    }

    /// `f` in one write transaction, committed with the database's durability.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&redb::WriteTransaction) -> Result<R>) -> Result<R> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(self.durability)?;
        let r = f(&tx)?;
        tx.commit()?;
        Ok(r)
    }

    /// `f` in one read transaction.
    pub(crate) fn read<R>(&self, f: impl FnOnce(&redb::ReadTransaction) -> Result<R>) -> Result<R> {
        f(&self.db.begin_read()?)
    }

    /// A last durable commit: what `None` commits left in memory reaches the file.
    pub(crate) fn close(self) -> Result<()> {
        RedbDb { durability: redb::Durability::Immediate, ..self }.write(|_| Ok(()))
    }
}
