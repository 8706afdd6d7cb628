//! What persistence primitives cost on this machine, and how long pools take to create and open.
//!
//! `cargo bench --bench persist`. The pool lives under /dev/shm where it exists.

use std::hint::black_box;
use std::sync::atomic::Ordering;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use petra::mem::{FlushKind, PMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra_recovery::scratch_dir;

fn config(flush: Option<FlushKind>) -> PoolConfig {
    PoolConfig {
        initial_size: 16 << 20,
        max_size: 1 << 30,
        chunk_size: 1 << 20,
        mapping: Mapping { flush, ..Mapping::default() },
    }
}

fn flush_and_fence(c: &mut Criterion) {
    let dir = scratch_dir();
    let mut group = c.benchmark_group("persist");
    for kind in FlushKind::available() {
        let path = dir.path().join(kind.name());
        let pool = Pool::create(&path, &config(Some(kind))).unwrap();
        let region = pool.alloc_region(1, 1 << 20).unwrap().get();
        let mem = pool.mem();
        let mut v = 0u64;
        // A dirty line written back and fenced: the cost of one persist of a one-line record.
        group.bench_function(BenchmarkId::new("store+flush+fence", kind.name()), |b| {
            b.iter(|| {
                v += 1;
                mem.store(region, v, Ordering::Relaxed);
                mem.flush(region);
                mem.fence();
            })
        });
        // Eight dirty lines under one fence: what each further line of a descriptor adds.
        group.bench_function(BenchmarkId::new("8 lines, 1 fence", kind.name()), |b| {
            b.iter(|| {
                v += 1;
                for l in 0..8 {
                    mem.store(region + l * 64, v, Ordering::Relaxed);
                }
                mem.flush_range(region, 8 * 64);
                mem.fence();
            })
        });
        // A clean line: flushing what is already written back.
        group.bench_function(BenchmarkId::new("flush clean+fence", kind.name()), |b| {
            b.iter(|| {
                mem.flush(black_box(region + 4096));
                mem.fence();
            })
        });
        drop(pool);
    }
    let pool = Pool::create(dir.path().join("fence"), &config(None)).unwrap();
    group.bench_function("fence, nothing pending", |b| b.iter(|| pool.mem().fence()));
    let pool = Pool::create(dir.path().join("volatile"), &config(None)).unwrap();
    drop(pool);
    let pool = Pool::open(dir.path().join("volatile"), &Mapping { volatile: true, ..Mapping::default() }).unwrap();
    let region = pool.alloc_region(1, 1 << 20).unwrap().get();
    let mut v = 0u64;
    group.bench_function("store+flush+fence/volatile", |b| {
        b.iter(|| {
            v += 1;
            pool.mem().store(region, v, Ordering::Relaxed);
            pool.mem().flush(region);
            pool.mem().fence();
        })
    });
    group.finish();
}

fn create_and_open(c: &mut Criterion) {
    let dir = scratch_dir();
    let mut group = c.benchmark_group("pool");
    group.sample_size(30);
    for (name, initial) in [("16MiB", 16u64 << 20), ("256MiB", 256 << 20)] {
        let cfg = PoolConfig { initial_size: initial, max_size: 64 << 30, ..PoolConfig::default() };
        let path = dir.path().join(name);
        group.bench_function(BenchmarkId::new("create+close", name), |b| {
            b.iter(|| {
                Pool::create(&path, &cfg).unwrap().close().unwrap();
                std::fs::remove_file(&path).unwrap();
            })
        });
        Pool::create(&path, &cfg).unwrap().close().unwrap();
        group.bench_function(BenchmarkId::new("open+close", name), |b| {
            b.iter(|| Pool::open(&path, &Mapping::default()).unwrap().close().unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, flush_and_fence, create_and_open);
criterion_main!(benches);
