//! A read-only single-op lookup in PETRA's structures (`Handle::get`: a single read answered
//! without a descriptor) against crossbeam-skiplist's `get` on the same keys (no transaction at
//! all: the upper bound).
//!
//! Also a range of 2 000 keys (about 790 present) (a snapshot: one walk of the range, each node
//! read as of the scan's txid) against crossbeam-skiplist's `range` (one walk, no snapshot).
//!
//! PETRA's gets and range run twice: on the nodes as the fill left them (each info word names
//! the op of the descriptor that wrote it), then after a checkpoint (each FINAL, the value in
//! the node).
//!
//! The same lookups on a skiplist of two-word keys (`u128`, each key `k` as `k << 64 | k`)
//! against crossbeam-skiplist on the same `u128` keys.
//!
//! `cargo bench --bench lookup`. 100 000 keys, uniform in [0, 200 000), looked up in a random
//! order fixed by a seed: about 78 700 distinct keys, so about 39% of the lookups hit.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use crossbeam_skiplist::SkipMap;
use petra::mem::MmapMem;
use petra::pool::{Pool, PoolConfig};
use petra::{Engine, EngineConfig, Handle, Key, KeyWidth, StructId, StructureKind, Transaction, Values};
use petra_recovery::scratch_dir;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: u64 = 100_000;

fn lookups(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(7);
    let keys: Vec<u64> = (0..KEYS).map(|_| rng.random_range(0..2 * KEYS)).collect();
    let probes: Vec<u64> = (0..4096).map(|_| rng.random_range(0..2 * KEYS)).collect();

    let dir = scratch_dir();
    let config = PoolConfig { initial_size: 64 << 20, max_size: 1 << 34, ..PoolConfig::default() };
    let engine =
        Engine::create(Pool::create(dir.path().join("lookup.pool"), &config).unwrap(), EngineConfig::default())
            .unwrap();
    let skiplist = engine.create_skiplist().unwrap();
    let hashmap = engine.create_hash_map(KEYS).unwrap();
    let wide = engine.create_structure(StructureKind::SkipList, KeyWidth::U128, Values::Words).unwrap();
    let mut h = engine.handle().unwrap();
    for chunk in keys.chunks(16) {
        let mut tx = Transaction::new();
        for &k in chunk {
            tx.put(skiplist, k, k).put(hashmap, k, k);
        }
        assert!(h.execute(&tx).unwrap().is_committed());
        let mut tx = Transaction::new();
        for &k in chunk {
            tx.put(wide, wide_key(k), k);
        }
        assert!(h.execute(&tx).unwrap().is_committed());
    }
    let baseline: SkipMap<u64, u64> = keys.iter().map(|&k| (k, k)).collect();
    let wide_baseline: SkipMap<u128, u64> = keys.iter().map(|&k| (wide_key(k), k)).collect();

    let mut group = c.benchmark_group("lookup");
    let mut i = 0usize;
    group.bench_function("crossbeam-skiplist get", |b| {
        b.iter(|| {
            i = (i + 1) % probes.len();
            black_box(baseline.get(&probes[i]).map(|e| *e.value()))
        })
    });
    petra_get(&mut group, "petra skiplist get", &mut h, skiplist, &probes, &mut i, |k| k);
    petra_get(&mut group, "petra hashmap get", &mut h, hashmap, &probes, &mut i, |k| k);
    // Two-word keys: the same draws, each key k as k << 64 | k.
    group.bench_function("crossbeam-skiplist get, u128 keys", |b| {
        b.iter(|| {
            i = (i + 1) % probes.len();
            black_box(wide_baseline.get(&wide_key(probes[i])).map(|e| *e.value()))
        })
    });
    petra_get(&mut group, "petra skiplist get, u128 keys", &mut h, wide, &probes, &mut i, wide_key);
    group.finish();

    let mut group = c.benchmark_group("range of 2000 keys");
    let starts: Vec<u64> = probes.iter().map(|p| p % (2 * KEYS - 2000)).collect();
    group.bench_function("crossbeam-skiplist range", |b| {
        b.iter(|| {
            i = (i + 1) % starts.len();
            let out: Vec<(u64, u64)> =
                baseline.range(starts[i]..starts[i] + 2000).map(|e| (*e.key(), *e.value())).collect();
            black_box(out)
        })
    });
    petra_range(&mut group, &mut h, skiplist, &starts, &mut i);
    group.finish();

    // The same gets and range once a checkpoint has folded the fill: each node's info word is FINAL (its
    // value in the node), as rounds leave the nodes of a running store that nothing wrote since;
    // above, each names the op of the fill's descriptor that wrote it, which a get reads too.
    assert!(h.checkpoint().is_some_and(|r| r.descriptors > 0));
    let mut group = c.benchmark_group("after a checkpoint");
    petra_get(&mut group, "petra skiplist get", &mut h, skiplist, &probes, &mut i, |k| k);
    petra_get(&mut group, "petra hashmap get", &mut h, hashmap, &probes, &mut i, |k| k);
    petra_get(&mut group, "petra skiplist get, u128 keys", &mut h, wide, &probes, &mut i, wide_key);
    petra_range(&mut group, &mut h, skiplist, &starts, &mut i);
    group.finish();
}

/// PETRA's gets (`Handle::get`) of the probes, each as `key` makes it, on structure `s`.
fn petra_get<K: Key>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    h: &mut Handle<MmapMem>,
    s: StructId,
    probes: &[u64],
    i: &mut usize,
    key: impl Fn(u64) -> K,
) {
    group.bench_function(name, |b| {
        b.iter(|| {
            *i = (*i + 1) % probes.len();
            black_box(h.get(s, key(probes[*i])).unwrap())
        })
    });
}

/// PETRA's ranges of 2000 keys from each of `starts` on the skiplist `s`.
fn petra_range(
    group: &mut BenchmarkGroup<'_, WallTime>,
    h: &mut Handle<MmapMem>,
    s: StructId,
    starts: &[u64],
    i: &mut usize,
) {
    group.bench_function("petra skiplist range", |b| {
        b.iter(|| {
            *i = (*i + 1) % starts.len();
            black_box(h.range(s, starts[*i]..starts[*i] + 2000).unwrap())
        })
    });
}

/// A two-word key with `k` in both words.
fn wide_key(k: u64) -> u128 {
    (k as u128) << 64 | k as u128
}

criterion_group!(benches, lookups);
criterion_main!(benches);
