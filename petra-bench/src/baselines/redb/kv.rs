//! redb as a [`KvTarget`] of `petra-bench kv`: one table of byte keys and values.

use std::path::Path;

use redb::ReadableTable;

use super::{RedbDb, RedbDurability};
use crate::error::Result;
use crate::targets::kv::{KvSession, KvTarget, Visit};

/// redb's table of the benchmark.
const TABLE: redb::TableDefinition<'static, &[u8], &[u8]> = redb::TableDefinition::new("kv");

/// redb as a [`KvTarget`]: each put, remove or batch one write transaction (redb runs one at a
/// time), each get and scan one read transaction.
#[derive(Debug)]
pub(crate) struct RedbKv {
    db: RedbDb,
}

impl RedbKv {
    /// Creates a database at `path` with its table.
    pub(crate) fn create(path: &Path, durability: RedbDurability) -> Result<RedbKv> {
        let db = RedbDb::create(path, durability)?;
        db.write(|t| Ok(t.open_table(TABLE).map(drop)?))?;
        Ok(RedbKv { db })
    }

    fn write<R>(&self, f: impl FnOnce(&mut redb::Table<'_, &'static [u8], &'static [u8]>) -> Result<R>) -> Result<R> {
        self.db.write(|tx| f(&mut tx.open_table(TABLE)?))
    }

    fn read<R>(&self, f: impl FnOnce(redb::ReadOnlyTable<&'static [u8], &'static [u8]>) -> Result<R>) -> Result<R> {
        self.db.read(|tx| f(tx.open_table(TABLE)?))
    }
}

impl KvTarget for RedbKv {
    type Session<'a> = &'a RedbKv;

    fn session(&self) -> Result<&RedbKv> {
        Ok(self)
    }

    fn close(self) -> Result<()> {
        self.db.close()
    }
}

impl KvSession for &RedbKv {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(|t| Ok(t.insert(key, value).map(drop)?))
    }

    fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<()> {
        self.write(|t| {
            for (k, v) in keys.chunks(keys.len() / values.len().max(1)).zip(values) {
                t.insert(k, *v)?;
            }
            Ok(())
        })
    }

    fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>> {
        self.read(|t| Ok(t.get(key)?.map(|v| v.value().len())))
    }

    fn remove(&mut self, key: &[u8]) -> Result<bool> {
        self.write(|t| Ok(t.remove(key)?.is_some()))
    }

    fn scan(&mut self, f: &mut Visit<'_>) -> Result<()> {
        self.read(|t| {
            for entry in t.iter()? {
                let (k, v) = entry?;
                if f(k.value(), v.value()).is_break() {
                    break;
                }
            }
            Ok(())
        })
    }
}
