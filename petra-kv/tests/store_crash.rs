//! Crash images of a store under batches of puts and removes of short and long keys: after
//! recovery the store holds every acknowledged batch and, of the one in flight, all or nothing.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use petra::mem::{CrashPlan, SimMem};
use petra::pool::{Pool, PoolConfig};
use petra_kv::{Batch, Order, Store};
use petra_recovery::crash::{CrashTest, Report};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_LEN: u64 = 16 << 20;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;
type Changes = Vec<(Vec<u8>, Option<Vec<u8>>)>;

/// An acknowledged batch: simulator events when it started and when it returned.
#[derive(Debug)]
struct Acked {
    start: u64,
    end: u64,
    changes: Changes,
}

fn setup(order: Order) -> SimMem {
    let mem = Arc::new(SimMem::new(0, MAX_LEN));
    let config =
        PoolConfig { initial_size: 512 << 10, max_size: MAX_LEN, chunk_size: 64 << 10, ..PoolConfig::default() };
    let store = Store::create_in(Pool::create_in(Arc::clone(&mem), &config).unwrap(), order).unwrap();
    store.session().unwrap().put(b"base", b"0").unwrap();
    store.into_engine().into_pool().unwrap().close().unwrap();
    Arc::into_inner(mem).unwrap()
}

/// Keys: short ones, and long ones of which some share their first 15 bytes.
fn random_key(rng: &mut StdRng) -> Vec<u8> {
    match rng.random_range(0..4) {
        0 => vec![b'a' + rng.random_range(0..4u8)],
        1 => format!("long-key-head-1/{}", rng.random_range(0..4)).into_bytes(),
        2 => format!("long-key-head-2/{}", rng.random_range(0..2)).into_bytes(),
        _ => b"base".to_vec(),
    }
}

fn random_batch(rng: &mut StdRng) -> Changes {
    let mut changes = BTreeMap::new();
    for _ in 0..rng.random_range(1..=4) {
        let value = rng.random_bool(0.7).then(|| vec![rng.random::<u8>(); rng.random_range(0..40)]);
        changes.insert(random_key(rng), value);
    }
    changes.into_iter().collect()
}

fn workload(mem: Arc<SimMem>, batches: usize, seed: u64) -> Vec<Acked> {
    let store = Store::open_in(Pool::open_in(Arc::clone(&mem)).unwrap()).unwrap();
    let mut s = store.session().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut acked = Vec::new();
    for _ in 0..batches {
        let changes = random_batch(&mut rng);
        let mut b = Batch::new();
        for (k, v) in &changes {
            match v {
                Some(v) => b.put(k, v),
                None => b.remove(k),
            };
        }
        let start = mem.events();
        s.write(&b).unwrap();
        acked.push(Acked { start, end: mem.events(), changes });
    }
    acked
}

fn apply(m: &mut Model, changes: &Changes) {
    for (k, v) in changes {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
}

fn check(acked: &[Acked], crash: u64, mem: SimMem) -> Result<(), String> {
    let store = Store::open_in(Pool::open_in(mem).map_err(|e| format!("open: {e}"))?).map_err(|e| format!("{e}"))?;
    let mut s = store.session().unwrap();
    let mut got: Vec<(Vec<u8>, Vec<u8>)> = s.iter(Bound::Unbounded, Bound::Unbounded).unwrap().collect();
    got.sort();
    let mut m = Model::from([(b"base".to_vec(), b"0".to_vec())]);
    for a in acked.iter().filter(|a| a.end <= crash) {
        apply(&mut m, &a.changes);
    }
    let without: Vec<_> = m.clone().into_iter().collect();
    if got == without {
        return Ok(());
    }
    if let Some(a) = acked.iter().find(|a| a.start <= crash && a.end > crash) {
        apply(&mut m, &a.changes);
        if got == m.into_iter().collect::<Vec<_>>() {
            return Ok(());
        }
    }
    Err(format!("recovered {got:?}, expected {without:?} or that plus the batch in flight"))
}

fn crash_run(order: Order, seed: u64, batches: usize) -> Report {
    let test = CrashTest {
        plan: CrashPlan::all(0.02, seed),
        exhaustive_bound: 16,
        samples: 6,
        max_points: 200,
        ..CrashTest::new(seed)
    };
    test.run(
        || setup(order),
        |mem| workload(mem, batches, seed),
        |acked, image, mem| check(acked, image.point.event, mem),
    )
}

#[test]
fn batches_are_all_or_nothing_in_every_crash_image() {
    let mut total = Report::default();
    for (seed, order) in [(1, Order::Sorted), (2, Order::Unsorted { buckets: 8 })] {
        total.merge(crash_run(order, seed, 30));
    }
    eprintln!("{} crash points, {} images", total.points, total.images);
    total.assert_ok();
    assert!(total.images >= 2_000, "only {} crash images", total.images);
}
