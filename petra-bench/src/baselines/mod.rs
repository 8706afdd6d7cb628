//! The competitors PETRA is measured against, each an adapter to the trait of the benchmark that
//! drives it:
//!
//! - [`locks`]: the lock-based baseline of `micro` for the hash map, a volatile lock-striped hash
//!   map with an undo log (the dissertation's abstract-locking baseline);
//! - [`boosted`]: the same abstract locking with an undo log over an ordered base set, the
//!   lock-based baseline of `micro` for the list ([`sorted_list`], a sorted linked list under a
//!   reader-writer lock) and for the skiplist and the MDList (crossbeam-skiplist);
//! - [`skipmap`]: crossbeam-skiplist under `micro`, each op on its own with no transaction (an
//!   upper bound, neither atomic nor isolated);
//! - [`redb`]: redb under `kv` and `metrics`, each write a transaction committed with the
//!   durability asked for.

pub(crate) mod boosted;
pub(crate) mod locks;
pub(crate) mod redb;
pub(crate) mod skipmap;
pub(crate) mod sorted_list;

use crate::workload::GenOp;

/// Stripes of the key locks of the lock-based baselines ([`locks`], [`boosted`]).
const STRIPES: usize = 1024;

/// The stripe of `key`'s lock.
fn stripe_of(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize % STRIPES
}

/// The stripes of the keys of `ops`, in the order a transaction locks them (ascending, each
/// once), so that two transactions never deadlock.
fn stripes_of(ops: &[GenOp]) -> Vec<usize> {
    let mut stripes: Vec<usize> = ops.iter().map(|op| stripe_of(op.key)).collect();
    stripes.sort_unstable();
    stripes.dedup();
    stripes
}

/// The checks both lock-based baselines pass: strict transactions, all or nothing.
#[cfg(test)]
mod testing {
    use std::collections::BTreeMap;

    use petra::OpKind;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use crate::workload::GenOp;

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

    /// 20 000 random transactions of 1 to 6 strict ops on keys `0..40` run by `run` commit
    /// exactly when they do on a model, and `contents` (the keys present, in order, afterwards)
    /// is the model's.
    pub(super) fn commits_all_or_nothing(run: impl Fn(&[GenOp]) -> bool, contents: impl FnOnce() -> Vec<(u64, u64)>) {
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
            assert_eq!(run(&ops), model_run(&mut model, &ops), "{ops:?}");
        }
        assert_eq!(contents(), model.into_iter().collect::<Vec<_>>());
    }

    /// Two threads run `txs` transactions each through `run` that delete one key of `0..100`
    /// and insert another, on keys `0..50` present at first (put by `run` too): committed or
    /// not, the number of present keys (`present`) never changes, which a torn transaction
    /// would break.
    pub(super) fn moving_keys_keeps_their_number(
        run: impl Fn(&[GenOp]) -> bool + Sync,
        present: impl FnOnce() -> usize,
        txs: usize,
    ) {
        for k in 0..50 {
            assert!(run(&[GenOp { kind: OpKind::Insert, key: k, value: k }]));
        }
        std::thread::scope(|s| {
            for t in 0..2 {
                let run = &run;
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(t);
                    for _ in 0..txs {
                        let (a, b) = (rng.random_range(0..100), rng.random_range(0..100));
                        run(&[
                            GenOp { kind: OpKind::Delete, key: a, value: 0 },
                            GenOp { kind: OpKind::Insert, key: b, value: 0 },
                        ]);
                    }
                });
            }
        });
        assert_eq!(present(), 50);
    }
}
