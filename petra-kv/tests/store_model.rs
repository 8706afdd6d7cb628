//! The store against a `BTreeMap` model: random histories of puts, removes, batches, reads,
//! scans and counts, with reopenings (clean and as after a crash) in between, on both orders.
//! Keys are drawn so that short keys, long keys sharing a bucket and prefixes of each other meet.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use petra::mem::SimMem;
use petra::pool::{Pool, PoolConfig};
use petra_kv::{Batch, KvError, Order, Session, Store};
use proptest::prelude::*;

const MAX_LEN: u64 = 64 << 20;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Step {
    Put(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    Get(Vec<u8>),
    Scan(Bound<Vec<u8>>, Bound<Vec<u8>>, usize),
    Reopen { clean: bool },
}

/// Keys: a head (empty, 14 or 15 bytes, two 15-byte heads differing in the last byte) and a tail
/// of up to 3 bytes from a small alphabet with a zero.
fn key() -> impl Strategy<Value = Vec<u8>> {
    let heads = prop_oneof![
        Just(Vec::new()),
        Just(vec![b'm'; 14]),
        Just(vec![b'm'; 15]),
        Just([vec![b'm'; 14], vec![b'n']].concat()),
    ];
    (heads, proptest::collection::vec(prop_oneof![Just(0u8), Just(b'm'), Just(b'z')], 0..=3))
        .prop_map(|(h, t)| [h, t].concat())
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..24)
}

fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    prop_oneof![Just(Bound::Unbounded), key().prop_map(Bound::Included), key().prop_map(Bound::Excluded)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (key(), value()).prop_map(|(k, v)| Step::Put(k, v)),
        2 => key().prop_map(Step::Remove),
        2 => proptest::collection::vec((key(), proptest::option::of(value())), 1..6).prop_map(Step::Batch),
        2 => key().prop_map(Step::Get),
        2 => (bound(), bound(), 0usize..6).prop_map(|(lo, hi, stop)| Step::Scan(lo, hi, stop)),
        1 => any::<bool>().prop_map(|clean| Step::Reopen { clean }),
    ]
}

fn order() -> impl Strategy<Value = Order> {
    prop_oneof![Just(Order::Sorted), Just(Order::Unsorted { buckets: 4 })]
}

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: MAX_LEN, chunk_size: 64 << 10, ..PoolConfig::default() }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    b.as_ref().map(Vec::as_slice)
}

/// What a scan of the model returns, in key order.
fn model_scan(m: &Model, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter()
        .filter(|(k, _)| {
            let k = k.as_slice();
            (match as_ref(lo) {
                Bound::Included(b) => k >= b,
                Bound::Excluded(b) => k > b,
                Bound::Unbounded => true,
            }) && (match as_ref(hi) {
                Bound::Included(b) => k <= b,
                Bound::Excluded(b) => k < b,
                Bound::Unbounded => true,
            })
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn check_step(s: &mut Session<'_, Arc<SimMem>>, m: &mut Model, step: &Step, order: Order) -> Result<(), TestCaseError> {
    match step {
        Step::Put(k, v) => {
            s.put(k, v).unwrap();
            m.insert(k.clone(), v.clone());
        }
        Step::Remove(k) => {
            prop_assert_eq!(s.remove(k).unwrap(), m.remove(k).is_some(), "remove {:?}", k);
        }
        Step::Batch(changes) => {
            let mut b = Batch::new();
            for (k, v) in changes {
                match v {
                    Some(v) => {
                        b.put(k, v);
                        m.insert(k.clone(), v.clone());
                    }
                    None => {
                        b.remove(k);
                        m.remove(k);
                    }
                }
            }
            s.write(&b).unwrap();
        }
        Step::Get(k) => {
            let got = s.get(k).unwrap();
            prop_assert_eq!(got.as_ref(), m.get(k), "get {:?}", k);
            prop_assert_eq!(s.exists(k).unwrap(), m.contains_key(k));
        }
        Step::Scan(lo, hi, stop) => {
            let want = model_scan(m, lo, hi);
            prop_assert_eq!(s.count(as_ref(lo), as_ref(hi)).unwrap(), want.len());
            let mut got: Vec<(Vec<u8>, Vec<u8>)> = s.iter(as_ref(lo), as_ref(hi)).unwrap().collect();
            if matches!(order, Order::Unsorted { .. }) {
                got.sort();
            }
            prop_assert_eq!(&got, &want, "scan {:?}..{:?}", lo, hi);
            // A callback that breaks after `stop` entries gets exactly that many (or all).
            let mut seen = 0;
            s.scan(as_ref(lo), as_ref(hi), |_, _| {
                seen += 1;
                if seen == *stop { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
            })
            .unwrap();
            prop_assert_eq!(seen, if *stop == 0 { want.len() } else { want.len().min(*stop) });
        }
        Step::Reopen { .. } => unreachable!("handled by the caller"),
    }
    Ok(())
}

fn run(order: Order, steps: &[Step]) -> Result<(), TestCaseError> {
    let mem = Arc::new(SimMem::new(0, MAX_LEN));
    let mut store = Store::create_in(Pool::create_in(Arc::clone(&mem), &config()).unwrap(), order).unwrap();
    let mut m = Model::new();
    // A last reopening, as after a crash, checks the whole history's durability.
    for step in steps.iter().chain([&Step::Reopen { clean: false }]) {
        let Step::Reopen { clean } = step else {
            check_step(&mut store.session().unwrap(), &mut m, step, order)?;
            continue;
        };
        // Reopen cleanly, or by dropping the pool as a crash would: every write was
        // acknowledged, so everything must be there.
        let pool = store.into_engine().into_pool().unwrap();
        if *clean {
            pool.close().unwrap();
        } else {
            drop(pool);
        }
        store = Store::open_in(Pool::open_in(Arc::clone(&mem)).unwrap()).unwrap();
        prop_assert_eq!(store.order(), order);
        let all: Model = store.session().unwrap().iter(Bound::Unbounded, Bound::Unbounded).unwrap().collect();
        prop_assert_eq!(&all, &m, "after reopening");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_store_behaves_as_a_sorted_map(order in order(), steps in proptest::collection::vec(step(), 1..60)) {
        run(order, &steps)?;
    }
}

/// Everything in the store, in key order.
fn contents(s: &mut Session<'_, Arc<SimMem>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut all: Vec<_> = s.iter(Bound::Unbounded, Bound::Unbounded).unwrap().collect();
    all.sort();
    all
}

#[test]
fn oversize_input_and_oversize_batches_are_refused_before_anything_changes() {
    for order in [Order::Sorted, Order::Unsorted { buckets: 16 }] {
        let mem = Arc::new(SimMem::new(0, MAX_LEN));
        let store = Store::create_in(Pool::create_in(Arc::clone(&mem), &config()).unwrap(), order).unwrap();
        let mut s = store.session().unwrap();
        s.put(b"kept", b"1").unwrap();
        s.put(&[7u8; 40], b"long").unwrap();
        let before = contents(&mut s);
        let long_key = vec![1u8; petra_kv::MAX_KEY_LEN + 1];
        let big_value = vec![0u8; petra_kv::MAX_VALUE_LEN + 1];
        assert!(matches!(s.put(&long_key, b"x"), Err(KvError::KeyTooLong { .. })));
        assert!(matches!(s.put(b"k", &big_value), Err(KvError::ValueTooLong { .. })));
        assert!(matches!(s.get(&long_key), Err(KvError::KeyTooLong { .. })));
        assert!(matches!(s.count(Bound::Included(&long_key), Bound::Unbounded), Err(KvError::KeyTooLong { .. })));
        // A batch with one bad entry changes nothing, not even its good ones.
        let mut b = Batch::new();
        b.put(b"new", b"2").remove(b"kept").put(b"k", &big_value);
        assert!(matches!(s.write(&b), Err(KvError::ValueTooLong { .. })));
        // 65 short keys are 65 engine entries: more than a transaction holds.
        let mut b = Batch::new();
        for i in 0..65u8 {
            b.put(&[i], b"v");
        }
        match s.write(&b) {
            Err(KvError::BatchTooLarge { entries: 65, max: 64 }) => {}
            other => panic!("{other:?}"),
        }
        // 65 long keys sharing a bucket in the sorted store are one entry, and fit.
        assert_eq!(contents(&mut s), before, "{order:?}");
        let mut b = Batch::new();
        for i in 0..65u8 {
            b.put(&[[9u8; 15].as_slice(), &[i]].concat(), b"v");
        }
        let fits = s.write(&b);
        match order {
            Order::Sorted => fits.unwrap(),
            Order::Unsorted { .. } => assert!(matches!(fits, Err(KvError::BatchTooLarge { .. }))),
        }
    }
}
