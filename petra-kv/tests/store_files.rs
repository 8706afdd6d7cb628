//! The store on real pool files: create modes, orders, foreign files refused untouched, writers
//! of one bucket on two threads.

use std::ops::Bound;

use petra::pool::{Pool, PoolConfig};
use petra::{Engine, EngineConfig};
use petra_kv::{Config, CreateMode, KvError, Order, Store};

fn config(path: &std::path::Path, create: CreateMode, order: Order) -> Config {
    Config { create, order, size: 1 << 20, max_size: 256 << 20, ..Config::new(path) }
}

#[test]
fn create_modes_orders_and_reopening() {
    let dir = petra_recovery::scratch_dir();
    let path = dir.path().join("kv.pool");
    let unsorted = Order::Unsorted { buckets: 64 };
    match Store::open(&config(&path, CreateMode::Open, unsorted)) {
        Err(KvError::Open(petra::error::OpenError::NotFound { .. })) => {}
        other => panic!("{other:?}"),
    }
    assert!(!path.exists(), "opening a missing store created it");
    let store = Store::open(&config(&path, CreateMode::Create, unsorted)).unwrap();
    store.session().unwrap().put(b"a long key of more than fifteen bytes", b"v").unwrap();
    store.session().unwrap().put(b"k", b"w").unwrap();
    // The pool is locked while open.
    assert!(matches!(
        Store::open(&config(&path, CreateMode::Open, unsorted)),
        Err(KvError::Open(petra::error::OpenError::Locked { .. }))
    ));
    store.close().unwrap();
    assert!(matches!(
        Store::open(&config(&path, CreateMode::Create, unsorted)),
        Err(KvError::Create(petra::error::CreateError::Exists { .. }))
    ));
    // Another order is refused before recovery: the file is as it was, still closed cleanly.
    let before = std::fs::read(&path).unwrap();
    match Store::open(&config(&path, CreateMode::OpenOrCreate, Order::Sorted)) {
        Err(KvError::WrongOrder { found: "unsorted", asked: "sorted" }) => {}
        other => panic!("{other:?}"),
    }
    assert!(std::fs::read(&path).unwrap() == before, "a store of another order was refused after writing to it");
    let store = Store::open(&config(&path, CreateMode::OpenOrCreate, unsorted)).unwrap();
    assert_eq!(store.order(), unsorted);
    let mut s = store.session().unwrap();
    assert_eq!(s.get(b"a long key of more than fifteen bytes").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(s.count_all().unwrap(), 2);
    // Closing while a session lives is refused.
    drop(s);
    store.close().unwrap();
}

#[test]
fn a_pool_that_is_not_a_store_is_refused_untouched() {
    let dir = petra_recovery::scratch_dir();
    let path = dir.path().join("engine.pool");
    // An engine pool with other structures (as a benchmark would make).
    let pool_config = PoolConfig { initial_size: 1 << 20, max_size: 64 << 20, ..PoolConfig::default() };
    let engine = Engine::create(Pool::create(&path, &pool_config).unwrap(), EngineConfig::rings(1 << 20)).unwrap();
    let list = engine.create_list().unwrap();
    engine.handle().unwrap().execute(petra::Transaction::new().put(list, 1u64, 2)).unwrap();
    engine.into_pool().unwrap().close().unwrap();
    let before = std::fs::read(&path).unwrap();
    match Store::open(&config(&path, CreateMode::OpenOrCreate, Order::Sorted)) {
        Err(KvError::NotAStore { why, .. }) => assert!(why.contains("structures"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(std::fs::read(&path).unwrap() == before, "the foreign pool was modified");
    // A pool with no engine at all.
    let path = dir.path().join("bare.pool");
    Pool::create(&path, &pool_config).unwrap().close().unwrap();
    let before = std::fs::read(&path).unwrap();
    assert!(matches!(Store::open(&config(&path, CreateMode::Open, Order::Sorted)), Err(KvError::NotAStore { .. })));
    assert!(std::fs::read(&path).unwrap() == before, "the bare pool was modified");
    // A file that is not a pool.
    let path = dir.path().join("text");
    std::fs::write(&path, vec![b'x'; 8192]).unwrap();
    assert!(matches!(Store::open(&config(&path, CreateMode::Open, Order::Sorted)), Err(KvError::Open(_))));
    assert_eq!(std::fs::read(&path).unwrap(), vec![b'x'; 8192]);
}

#[test]
fn two_threads_writing_long_keys_of_one_bucket_lose_nothing() {
    let dir = petra_recovery::scratch_dir();
    let store = Store::open(&config(&dir.path().join("kv.pool"), CreateMode::Create, Order::Sorted)).unwrap();
    const PER_THREAD: u32 = 300;
    // Every key shares its first 15 bytes: one bucket, written by both threads at once.
    let key = |t: u32, i: u32| format!("shared-head-15b/{t}/{i:05}").into_bytes();
    std::thread::scope(|scope| {
        for t in 0..2 {
            let store = &store;
            scope.spawn(move || {
                let mut s = store.session().unwrap();
                for i in 0..PER_THREAD {
                    s.put(&key(t, i), &i.to_le_bytes()).unwrap();
                    if i % 3 == 0 {
                        assert!(s.remove(&key(t, i)).unwrap());
                    }
                }
            });
        }
    });
    let mut s = store.session().unwrap();
    let want: Vec<Vec<u8>> =
        (0..2).flat_map(|t| (0..PER_THREAD).filter(|i| i % 3 != 0).map(move |i| key(t, i))).collect();
    let got: Vec<Vec<u8>> = s.iter(Bound::Unbounded, Bound::Unbounded).unwrap().map(|(k, _)| k).collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, {
        let mut w = want;
        w.sort();
        w
    });
}

#[test]
fn large_values_replaced_again_and_again_are_freed_as_they_go() {
    // 200 values of 4 MiB (800 MiB written) through one key of a store that may hold 320 MiB:
    // only if each replaced value is freed soon after (not held in the thread's bag of deferred
    // work until 64 pile up) does the file stay small enough. And 400 values of 40 000 bytes,
    // each in a chunk of 1 MiB of its own, through a store that may hold 128 MiB: only if the
    // values held for the next safe point are counted by the chunks they hold (not by their
    // 40 000 bytes) is that safe point made early enough.
    let dir = tempfile::tempdir().unwrap();
    for (len, puts, max_size) in [(4 << 20, 200u32, 320 << 20), (40_000, 400, 128 << 20)] {
        let config = Config {
            size: 96 << 20,
            max_size,
            ..config(&dir.path().join(format!("large{len}.pool")), CreateMode::Create, Order::Unsorted { buckets: 64 })
        };
        let store = Store::open(&config).unwrap();
        let mut s = store.session().unwrap();
        let mut value = vec![0u8; len];
        for i in 0..puts {
            value[..4].copy_from_slice(&i.to_le_bytes());
            s.put(b"big", &value).unwrap_or_else(|e| panic!("put {i} of {len} bytes: {e}"));
        }
        assert_eq!(s.get(b"big").unwrap().unwrap()[..4], (puts - 1).to_le_bytes());
    }
}

/// A scan whose caller, at its first entry, replaces the store's values with long ones many
/// times over (three times the store's maximum size in all): the replaced values count against the
/// snapshot limit (an eighth of the maximum size), the scan's snapshot is expired and stops the
/// scan with `SnapshotExpired` at its next value, and no put finds the store full.
#[test]
fn a_scan_whose_caller_writes_past_the_snapshot_limit_stops_and_the_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        Config { max_size: 128 << 20, ..config(&dir.path().join("expiry.pool"), CreateMode::Create, Order::Sorted) };
    let store = Store::open(&config).unwrap();
    let mut reader = store.session().unwrap();
    let mut writer = store.session().unwrap();
    for k in 0..4u8 {
        writer.put(&[b'k', k], &[k; 100]).unwrap();
    }
    let mut seen = Vec::new();
    let scan = reader.scan(Bound::Unbounded, Bound::Unbounded, |k, v| {
        seen.push((k.to_vec(), v.to_vec()));
        if seen.len() == 1 {
            // 400 values of 40 000 bytes, each in a chunk of 1 MiB: 400 MiB of the pool's chunks.
            for i in 0..400u32 {
                let value = [i as u8; 40_000];
                writer.put(&[b'k', (i % 4) as u8], &value).unwrap_or_else(|e| panic!("put {i}: {e}"));
            }
        }
        std::ops::ControlFlow::Continue(())
    });
    assert!(matches!(scan, Err(KvError::Engine(petra::EngineError::SnapshotExpired { .. }))), "{scan:?}");
    assert_eq!(seen, [(b"k\0".to_vec(), vec![0; 100])], "the entries before the expiry are the snapshot's");
    assert!(store.engine().checkpoint_stats().snapshots_expired >= 1);
    assert_eq!(writer.get(b"k\x03").unwrap(), Some(vec![399u32 as u8; 40_000]));
}

/// Engine keys that fit no key of a store's layout (a length byte above 16, bytes past a short
/// key's length): the open refuses the store as damaged, naming the entry, whatever the order.
#[test]
fn engine_keys_that_break_the_stores_layout_are_damage() {
    let dir = petra_recovery::scratch_dir();
    let short = u128::from_be_bytes(*b"abc\0\0\0\0\0\0\0\0\0\0\0\0\x03");
    let bad = [
        ("a length byte of 17", short & !0xFF | 17),
        ("a length byte of 255", short | 0xFF),
        ("a byte past a short key's length", short | 1 << 64),
    ];
    for (o, order) in [Order::Sorted, Order::Unsorted { buckets: 64 }].into_iter().enumerate() {
        for (i, (what, key)) in bad.iter().enumerate() {
            let path = dir.path().join(format!("{o}-{i}.pool"));
            let store = Store::open(&config(&path, CreateMode::Create, order)).unwrap();
            store.session().unwrap().put(b"abc", b"value").unwrap();
            store.session().unwrap().put(b"a long key of more than fifteen bytes", b"v").unwrap();
            let engine = store.into_engine();
            let mut tx = petra::Transaction::new();
            tx.put_bytes(petra::StructId(1), *key, b"value");
            assert!(engine.handle().unwrap().execute(&tx).unwrap().is_committed());
            engine.close().unwrap();
            let before = std::fs::read(&path).unwrap();
            match Store::open(&config(&path, CreateMode::Open, order)) {
                Err(KvError::Damaged(d)) => {
                    assert!(d.what.contains(&format!("{key:#x}")), "{order:?}, {what}: {d}")
                }
                Ok(store) => {
                    let scanned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        store.session().unwrap().count_all().map(|n| n.to_string())
                    }));
                    panic!("{order:?}, {what}: opened (a scan then gives {scanned:?})")
                }
                Err(e) => panic!("{order:?}, {what}: {e}"),
            }
            assert!(std::fs::read(&path).unwrap() == before, "a refused store is left as it was");
        }
    }
}

/// A store's creation stopped before its format magic (the engine made, then the meta list, then
/// the data structure, the magic never inserted), closed or left as a crash leaves it: the open
/// refuses it as no store, and the file is as it was.
#[test]
fn a_store_whose_creation_was_interrupted_before_the_magic_is_refused_untouched() {
    use petra::{KeyWidth, StructureKind, Values};
    let dir = petra_recovery::scratch_dir();
    let pool_config = PoolConfig { initial_size: 1 << 20, max_size: 64 << 20, ..PoolConfig::default() };
    let data = [
        (Order::Sorted, StructureKind::SkipList),
        (Order::Unsorted { buckets: 64 }, StructureKind::HashMap { buckets: 64 }),
    ];
    for (o, (order, kind)) in data.into_iter().enumerate() {
        for stage in 0..3 {
            for closed in [true, false] {
                let path = dir.path().join(format!("{o}-{stage}-{closed}.pool"));
                let engine =
                    Engine::create(Pool::create(&path, &pool_config).unwrap(), EngineConfig::rings(1 << 20)).unwrap();
                if stage >= 1 {
                    engine.create_structure(StructureKind::List, KeyWidth::U64, Values::Words).unwrap();
                }
                if stage >= 2 {
                    engine.create_structure(kind, KeyWidth::U128, Values::Bytes).unwrap();
                }
                if closed {
                    engine.close().unwrap();
                } else {
                    drop(engine);
                }
                let before = std::fs::read(&path).unwrap();
                let case = format!("{order:?}, stage {stage}, closed {closed}");
                match Store::open(&config(&path, CreateMode::Open, order)) {
                    Err(KvError::NotAStore { why, .. }) if stage < 2 => {
                        assert!(why.contains("structures"), "{case}: {why}")
                    }
                    Err(KvError::NotAStore { why, .. }) => assert!(why.contains("no magic"), "{case}: {why}"),
                    other => panic!("{case}: {other:?}"),
                }
                assert!(std::fs::read(&path).unwrap() == before, "{case}: the file was modified");
            }
        }
    }
}
