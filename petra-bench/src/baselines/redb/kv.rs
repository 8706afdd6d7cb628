//! redb as a [`KvTarget`] of `petra-bench kv`: one table of byte keys and values.

use std::path::Path;

use redb::ReadableTable;

use super::{RedbDb, RedbDurability, redb_err};
use crate::kv::{KvSession, KvTarget, Visit};

/// redb's table of the benchmark.
const TABLE: redb::TableDefinition<'static, &[u8], &[u8]> = redb::TableDefinition::new("kv");

/// redb as a [`KvTarget`]: each put, remove or batch one write transaction (redb runs one at a
/// time), each get and scan one read transaction.
#[derive(Debug)]
pub struct Redb {
    db: RedbDb,
}

impl Redb {
    /// Creates a database at `path` with its table.
    pub fn create(path: &Path, durability: RedbDurability) -> Result<Redb, String> {
        let db = RedbDb::create(path, durability)?;
        db.write(|t| t.open_table(TABLE).map(drop).map_err(redb_err))?;
        Ok(Redb { db })
    }

    fn write<R>(
        &self,
        f: impl FnOnce(&mut redb::Table<'_, &'static [u8], &'static [u8]>) -> Result<R, String>,
    ) -> Result<R, String> {
        self.db.write(|tx| f(&mut tx.open_table(TABLE).map_err(redb_err)?))
    }

    fn read<R>(
        &self,
        f: impl FnOnce(redb::ReadOnlyTable<&'static [u8], &'static [u8]>) -> Result<R, String>,
    ) -> Result<R, String> {
        self.db.read(|tx| f(tx.open_table(TABLE).map_err(redb_err)?))
    }
}

impl KvTarget for Redb {
    type Session<'a> = &'a Redb;

    fn session(&self) -> Result<&Redb, String> {
        Ok(self)
    }

    fn close(self) -> Result<(), String> {
        self.db.close()
    }
}

impl KvSession for &Redb {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.write(|t| t.insert(key, value).map(drop).map_err(redb_err))
    }

    fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<(), String> {
        self.write(|t| {
            for (k, v) in keys.chunks(keys.len() / values.len().max(1)).zip(values) {
                t.insert(k, *v).map_err(redb_err)?;
            }
            Ok(())
        })
    }

    fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>, String> {
        self.read(|t| Ok(t.get(key).map_err(redb_err)?.map(|v| v.value().len())))
    }

    fn remove(&mut self, key: &[u8]) -> Result<bool, String> {
        self.write(|t| Ok(t.remove(key).map_err(redb_err)?.is_some()))
    }

    fn scan(&mut self, f: &mut Visit<'_>) -> Result<(), String> {
        self.read(|t| {
            for entry in t.iter().map_err(redb_err)? {
                let (k, v) = entry.map_err(redb_err)?;
                if f(k.value(), v.value()).is_break() {
                    break;
                }
            }
            Ok(())
        })
    }
}
