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

use crate::error::Result;
use crate::targets::tx::{TxMap, TxWorker};
use crate::workload::GenOp;

/// Stripes of [`LockMap`].
const STRIPES: usize = 1024;

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

fn stripe_of(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % STRIPES
}

impl LockMap {
    /// Runs `ops` with strict semantics under their keys' locks; whether it committed.
    pub(crate) fn run(&self, ops: &[GenOp]) -> bool {
        let mut stripes: Vec<usize> = ops.iter().map(|op| stripe_of(op.key)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards: Vec<(usize, MutexGuard<'_, HashMap<u64, u64>>)> =
            stripes.iter().map(|&s| (s, self.stripes[s].lock())).collect();
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
    use std::collections::BTreeMap;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// The strict semantics on a model: all ops or none.
    fn model_run(model: &mut BTreeMap<u64, u64>, ops: &[GenOp]) -> bool {
        let mut next = model.clone();
        for op in ops {
            let ok = match op.kind {
                OpKind::Insert => next.insert(op.key, op.value).is_none(),
                OpKind::Delete => next.remove(&op.key).is_some(),
                OpKind::Update => next.contains_key(&op.key) && next.insert(op.key, op.value).is_some(),
                _ => next.contains_key(&op.key),
            };
            if !ok {
                return false;
            }
        }
        *model = next;
        true
    }

    #[test]
    fn the_lock_map_commits_all_or_nothing() {
        let map = LockMap::default();
        let mut model = BTreeMap::new();
        let mut rng = StdRng::seed_from_u64(4);
        let kinds = [OpKind::Insert, OpKind::Delete, OpKind::Update, OpKind::Find];
        for _ in 0..20_000 {
            let ops: Vec<GenOp> = (0..rng.random_range(1..=6))
                .map(|_| GenOp {
                    kind: kinds[rng.random_range(0..4)],
                    key: rng.random_range(0..40),
                    value: rng.random(),
                })
                .collect();
            assert_eq!(map.run(&ops), model_run(&mut model, &ops), "{ops:?}");
        }
        let mut all: Vec<(u64, u64)> = map.stripes.iter().flat_map(|s| s.lock().clone()).collect();
        all.sort_unstable();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn two_threads_moving_keys_keep_their_number() {
        // Each transaction deletes one key and inserts another: committed or not, the number of
        // present keys never changes, which a torn transaction would break.
        let map = LockMap::default();
        for k in 0..50 {
            map.put(k, k);
        }
        std::thread::scope(|s| {
            for t in 0..2 {
                let map = &map;
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    for _ in 0..50_000 {
                        let (a, b) = (rng.random_range(0..100), rng.random_range(0..100));
                        map.run(&[
                            GenOp { kind: OpKind::Delete, key: a, value: 0 },
                            GenOp { kind: OpKind::Insert, key: b, value: 0 },
                        ]);
                    }
                });
            }
        });
        assert_eq!(map.stripes.iter().map(|s| s.lock().len()).sum::<usize>(), 50);
    }
}
