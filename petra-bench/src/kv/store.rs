//! The petra-kv [`Store`] as a [`KvTarget`]: each thread through its own [`Session`].

use std::ops::Bound;

use petra_kv::{Batch, Session, Store};

use super::target::{KvSession, KvTarget, Visit};

impl KvTarget for Store {
    type Session<'a> = Session<'a>;

    fn session(&self) -> Result<Session<'_>, String> {
        Store::session(self).map_err(|e| e.to_string())
    }

    fn close(self) -> Result<(), String> {
        Store::close(self).map_err(|e| e.to_string())
    }
}

impl KvSession for Session<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), String> {
        Session::put(self, key, value).map_err(|e| e.to_string())
    }

    fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<(), String> {
        let mut batch = Batch::new();
        for (k, v) in keys.chunks(keys.len() / values.len().max(1)).zip(values) {
            batch.put(k, v);
        }
        self.write(&batch).map_err(|e| e.to_string())
    }

    fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>, String> {
        self.get_with(key, |v| v.len()).map_err(|e| e.to_string())
    }

    fn remove(&mut self, key: &[u8]) -> Result<bool, String> {
        Session::remove(self, key).map_err(|e| e.to_string())
    }

    fn scan(&mut self, f: &mut Visit<'_>) -> Result<(), String> {
        Session::scan(self, Bound::Unbounded, Bound::Unbounded, f).map_err(|e| e.to_string())
    }
}
