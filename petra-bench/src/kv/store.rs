//! The petra-kv [`Store`] as a [`KvTarget`]: each thread through its own [`Session`].

use std::ops::Bound;

use petra_kv::{Batch, Session, Store};

use crate::error::Result;
use crate::targets::kv::{KvSession, KvTarget, Visit};

impl KvTarget for Store {
    type Session<'a> = Session<'a>;

    fn session(&self) -> Result<Session<'_>> {
        Ok(Store::session(self)?)
    }

    fn close(self) -> Result<()> {
        Ok(Store::close(self)?)
    }
}

impl KvSession for Session<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(Session::put(self, key, value)?)
    }

    fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<()> {
        let mut batch = Batch::new();
        for (k, v) in keys.chunks(keys.len() / values.len().max(1)).zip(values) {
            batch.put(k, v);
        }
        Ok(self.write(&batch)?)
    }

    fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.get_with(key, |v| v.len())?)
    }

    fn remove(&mut self, key: &[u8]) -> Result<bool> {
        Ok(Session::remove(self, key)?)
    }

    fn scan(&mut self, f: &mut Visit<'_>) -> Result<()> {
        Ok(Session::scan(self, Bound::Unbounded, Bound::Unbounded, f)?)
    }
}
