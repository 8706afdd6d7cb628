//! Abstract locking with an undo log over an ordered base set, [`Boosted`]: the lock-based
//! baselines of `petra-bench micro` for the list ([`SortedList`](super::sorted_list::SortedList))
//! and for the skiplist and the MDList (crossbeam-skiplist's `SkipMap`), the dissertation's
//! abstract-locking (transactional boosting) baseline made of a structure of their kind.
//!
//! As [`LockMap`](super::locks::LockMap) does for the hash map: keys map to 1 024 striped locks;
//! a transaction takes the locks of its keys in stripe order (so two never deadlock), runs its
//! ops with strict semantics on the base set (each op linearizable on its own), records each
//! change in an undo log, and on a failed op rolls the log back before it unlocks. The key locks
//! give isolation; the base set's own synchronisation keeps it whole under ops on other keys.

use crossbeam_skiplist::SkipMap;
use parking_lot::{Mutex, MutexGuard};
use petra::OpKind;

use super::{STRIPES, stripe_of, stripes_of};
use crate::error::Result;
use crate::targets::tx::{TxMap, TxWorker};
use crate::workload::GenOp;

/// A set of `u64` keys with `u64` values, safe to share between threads, each op on its own
/// linearizable: what [`Boosted`] runs transactions on.
pub(crate) trait BaseSet: Sync + Default {
    /// Inserts `key` if absent; whether it was.
    fn insert(&self, key: u64, value: u64) -> bool;
    /// Removes `key`; its value if it was present.
    fn remove(&self, key: u64) -> Option<u64>;
    /// The value of `key`, if present.
    fn get(&self, key: u64) -> Option<u64>;
    /// Sets the value of `key` if present; the value it had.
    fn replace(&self, key: u64, value: u64) -> Option<u64>;
}

/// crossbeam-skiplist's lock-free skiplist as a base set.
impl BaseSet for SkipMap<u64, u64> {
    fn insert(&self, key: u64, value: u64) -> bool {
        // The key's lock is held: no other transaction inserts it between the two calls.
        !self.contains_key(&key) && {
            SkipMap::insert(self, key, value);
            true
        }
    }

    fn remove(&self, key: u64) -> Option<u64> {
        SkipMap::remove(self, &key).map(|e| *e.value())
    }

    fn get(&self, key: u64) -> Option<u64> {
        SkipMap::get(self, &key).map(|e| *e.value())
    }

    fn replace(&self, key: u64, value: u64) -> Option<u64> {
        let old = SkipMap::get(self, &key).map(|e| *e.value())?;
        SkipMap::insert(self, key, value);
        Some(old)
    }
}

/// Transactions under striped key locks with an undo log, over the base set `B`. See the
/// [module docs](self).
#[derive(Debug)]
pub(crate) struct Boosted<B> {
    locks: Box<[Mutex<()>]>,
    base: B,
}

impl<B: BaseSet> Default for Boosted<B> {
    fn default() -> Self {
        Boosted { locks: (0..STRIPES).map(|_| Mutex::new(())).collect(), base: B::default() }
    }
}

/// A change to undo: the key and what it held before (`None`: absent).
type Undo = (u64, Option<u64>);

impl<B: BaseSet> Boosted<B> {
    /// Runs `ops` with strict semantics under their keys' locks; whether it committed.
    pub(crate) fn run(&self, ops: &[GenOp]) -> bool {
        let _guards: Vec<MutexGuard<'_, ()>> = stripes_of(ops).into_iter().map(|s| self.locks[s].lock()).collect();
        let mut undo: Vec<Undo> = Vec::with_capacity(ops.len());
        for op in ops {
            let ok = match op.kind {
                OpKind::Insert => {
                    self.base.insert(op.key, op.value) && {
                        undo.push((op.key, None));
                        true
                    }
                }
                OpKind::Delete => self.base.remove(op.key).map(|old| undo.push((op.key, Some(old)))).is_some(),
                OpKind::Update => {
                    self.base.replace(op.key, op.value).map(|old| undo.push((op.key, Some(old)))).is_some()
                }
                OpKind::Find => self.base.get(op.key).is_some(),
                other => unreachable!("the micro-benchmark draws no {other:?}"),
            };
            if !ok {
                for (key, before) in undo.into_iter().rev() {
                    // Each undo restores what this transaction changed under the key's lock.
                    match before {
                        None => {
                            self.base.remove(key);
                        }
                        Some(v) => {
                            if self.base.replace(key, v).is_none() {
                                self.base.insert(key, v);
                            }
                        }
                    }
                }
                return false;
            }
        }
        true
    }

    /// The base set.
    #[cfg(test)]
    pub(crate) fn base(&self) -> &B {
        &self.base
    }
}

impl<B: BaseSet> TxMap for Boosted<B> {
    type Worker<'a>
        = &'a Boosted<B>
    where
        B: 'a;

    fn worker(&self) -> Result<&Boosted<B>> {
        Ok(self)
    }
}

impl<B: BaseSet> TxWorker for &Boosted<B> {
    fn put_all(&mut self, keys: &[u64]) -> Result<u64> {
        Ok(keys
            .iter()
            .filter(|&&k| {
                let _lock = self.locks[stripe_of(k)].lock();
                self.base.replace(k, 0).is_none() && self.base.insert(k, 0)
            })
            .count() as u64)
    }

    fn run(&mut self, ops: &[GenOp]) -> Result<bool> {
        Ok(Boosted::run(self, ops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::sorted_list::SortedList;
    use crate::baselines::testing::{commits_all_or_nothing, moving_keys_keeps_their_number};

    #[test]
    fn the_lock_based_list_and_skiplist_commit_all_or_nothing() {
        let list = Boosted::<SortedList>::default();
        commits_all_or_nothing(
            |ops| list.run(ops),
            || (0..40).filter_map(|k| list.base().get(k).map(|v| (k, v))).collect(),
        );
        let skiplist = Boosted::<SkipMap<u64, u64>>::default();
        commits_all_or_nothing(
            |ops| skiplist.run(ops),
            || skiplist.base().iter().map(|e| (*e.key(), *e.value())).collect(),
        );
    }

    #[test]
    fn two_threads_moving_keys_keep_their_number() {
        let map = Boosted::<SortedList>::default();
        moving_keys_keeps_their_number(
            |ops| map.run(ops),
            || (0..100).filter(|&k| map.base().get(k).is_some()).count(),
            20_000,
        );
    }
}
