//! The lock-based baseline of `petra-bench micro` for the hash map, [`LockMap`]: the
//! dissertation's abstract locking, the same transactions on a volatile lock-striped hash map
//! with an undo log.
//!
//! Keys map to 1 024 stripes (parking_lot mutexes), each guarding the hash map of its keys; a
//! transaction takes the stripes of its keys in stripe order (so two never deadlock), runs its
//! ops with strict semantics, records each change in an undo log, and on a failed op rolls the
//! log back before it unlocks.

use std::collections::HashMap;

use parking_lot::{Mutex, MutexGuard};
use petra::OpKind;

use super::{STRIPES, stripe_of, stripes_of};
use crate::error::Result;
use crate::targets::tx::{TxMap, TxWorker};
use crate::workload::GenOp;

/// Abstract locking with an undo log. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct LockMap {
    stripes: Box<[Mutex<HashMap<u64, u64>>]>,
}

impl Default for LockMap {
    fn default() -> Self {
        LockMap { stripes: (0..STRIPES).map(|_| Mutex::new(HashMap::new())).collect() }
    }
}

impl LockMap {
    /// Runs `ops` with strict semantics under their keys' locks; whether it committed.
    pub(crate) fn run(&self, ops: &[GenOp]) -> bool {
        let mut guards: Vec<(usize, MutexGuard<'_, HashMap<u64, u64>>)> =
            stripes_of(ops).into_iter().map(|s| (s, self.stripes[s].lock())).collect();
        let mut undo: Vec<(u64, Option<u64>)> = Vec::with_capacity(ops.len());
        let mut committed = true;
        for op in ops {
            let s = stripe_of(op.key);
            let map = &mut guards.iter_mut().find(|(i, _)| *i == s).expect("its stripe is locked").1;
            let ok = match op.kind {
                OpKind::Insert if map.contains_key(&op.key) => false,
                OpKind::Insert => {
                    map.insert(op.key, op.value);
                    undo.push((op.key, None));
                    true
                }
                OpKind::Delete => map.remove(&op.key).map(|old| undo.push((op.key, Some(old)))).is_some(),
                OpKind::Update => match map.get_mut(&op.key) {
                    Some(v) => {
                        undo.push((op.key, Some(std::mem::replace(v, op.value))));
                        true
                    }
                    None => false,
                },
                OpKind::Find => map.contains_key(&op.key),
                other => unreachable!("the micro-benchmark draws no {other:?}"),
            };
            if !ok {
                committed = false;
                break;
            }
        }
        if !committed {
            for (key, before) in undo.into_iter().rev() {
                let map = &mut guards.iter_mut().find(|(i, _)| *i == stripe_of(key)).expect("locked").1;
                match before {
                    Some(v) => map.insert(key, v),
                    None => map.remove(&key),
                };
            }
        }
        committed
    }

    /// Sets `key`; whether it was absent.
    pub(crate) fn put(&self, key: u64, value: u64) -> bool {
        self.stripes[stripe_of(key)].lock().insert(key, value).is_none()
    }
}

impl TxMap for LockMap {
    type Worker<'a> = &'a LockMap;

    fn worker(&self) -> Result<&LockMap> {
        Ok(self)
    }
}

impl TxWorker for &LockMap {
    fn put_all(&mut self, keys: &[u64]) -> Result<u64> {
        Ok(keys.iter().filter(|&&k| self.put(k, 0)).count() as u64)
    }

    fn run(&mut self, ops: &[GenOp]) -> Result<bool> {
        Ok(LockMap::run(self, ops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::testing::{commits_all_or_nothing, moving_keys_keeps_their_number};

    #[test]
    fn the_lock_map_commits_all_or_nothing() {
        let map = LockMap::default();
        let contents = || {
            let mut all: Vec<(u64, u64)> = map.stripes.iter().flat_map(|s| s.lock().clone()).collect();
            all.sort_unstable();
            all
        };
        commits_all_or_nothing(|ops| map.run(ops), contents);
    }

    #[test]
    fn two_threads_moving_keys_keep_their_number() {
        let map = LockMap::default();
        moving_keys_keeps_their_number(|ops| map.run(ops), || map.stripes.iter().map(|s| s.lock().len()).sum(), 50_000);
    }
}
