//! The structures (one of each kind, crossed by every transaction) against the sequential model:
//! random histories of transactions and range scans, with reopens (and so recovery) in between,
//! and the exact persistence cost of each kind of transaction.

use std::sync::Arc;

use petra::mem::{Counting, MemCounts, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{Engine, EngineConfig, KeyWidth, Op, OpKind, Outcome, StructId, StructureKind, Transaction, Values};
use petra_recovery::model::{Model, same_outcome};
use proptest::prelude::*;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: 64 << 20, chunk_size: 64 << 10, mapping: Mapping::default() }
}

fn engine_config() -> EngineConfig {
    EngineConfig::rings(1 << 20)
}

fn op_strategy(structures: u8) -> impl Strategy<Value = Op> {
    (1u8..=7, 0..structures, 0u64..12, 1u64..1000)
        .prop_map(|(k, s, key, value)| Op::new(OpKind::from_code(k), StructId(s), key, value))
}

/// How a history closes its pool before opening it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Close {
    /// Dropped, as a crash leaves it: the next open recovers.
    Crash,
    /// The pool closed cleanly but not the engine: the next open still recovers.
    Pool,
    /// [`Engine::close`]: the next open skips recovery.
    Engine,
}

/// A step of a history: a transaction, a range scan, a checkpoint round, or a reopen.
#[derive(Debug, Clone)]
enum Step {
    Tx(Vec<Op>, bool),
    Range(StructId, u64, u64),
    /// An online checkpoint round ([`petra::Handle::checkpoint`]): every descriptor so far is
    /// folded into node records, and the next recovery reads only the ones written after.
    Checkpoint,
    Reopen(Close),
}

fn step_strategy() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (prop::collection::vec(op_strategy(5), 1..6), any::<bool>()).prop_map(|(ops, sort)| Step::Tx(ops, sort)),
        3 => (0u8..5, 0u64..14, 0u64..14).prop_map(|(s, lo, hi)| Step::Range(StructId(s), lo, hi)),
        2 => Just(Step::Checkpoint),
        1 => prop_oneof![Just(Close::Crash), Just(Close::Pool), Just(Close::Engine)].prop_map(Step::Reopen),
    ]
}

fn run_history(steps: &[Step]) -> Result<(), TestCaseError> {
    let mem = Arc::new(SimMem::new(0, 64 << 20));
    let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
    let mut engine = Engine::create(pool, engine_config()).unwrap();
    let ids = petra_recovery::battery::create_all(&engine);
    assert_eq!(ids, petra_recovery::battery::IDS);
    let mut model = Model::default();
    let mut h = engine.handle().unwrap();
    // The txid of the last committed transaction that wrote.
    let mut last_writer = 0;
    // Committed writers since the last checkpoint round or reopen: what a recovery reads.
    let mut writers_since = 0;
    for step in steps {
        match step {
            Step::Tx(ops, sort) => {
                let mut tx = petra_recovery::battery::transaction(ops);
                tx.sorted(*sort);
                let got = petra_recovery::battery::execute(&mut h, &tx).unwrap();
                // Sorting changes which strict op fails first, not whether the transaction fails.
                let mut sorted_ops = ops.clone();
                if *sort {
                    sorted_ops.sort_by_key(|o| (o.structure, o.key));
                }
                let want = model.apply(&sorted_ops);
                match (&got, &want) {
                    (Outcome::Aborted { .. }, Outcome::Aborted { .. }) if *sort => {}
                    (Outcome::Committed { results, .. }, Outcome::Committed { results: w, .. }) if *sort => {
                        // Results come back in the order added.
                        let mut order: Vec<usize> = (0..ops.len()).collect();
                        order.sort_by_key(|&i| (ops[i].structure, ops[i].key));
                        for (pos, &i) in order.iter().enumerate() {
                            prop_assert_eq!(results[i], w[pos], "op {} of {:?}", i, ops);
                        }
                    }
                    _ => prop_assert!(same_outcome(&got, &want), "{:?}: got {:?}, want {:?}", ops, got, want),
                }
                if let Outcome::Committed { txid, .. } = &got {
                    prop_assert!(txid.is_some() || (ops.len() == 1 && ops[0].kind.is_read()));
                    if ops.iter().any(|o| !o.kind.is_read()) {
                        last_writer = txid.unwrap();
                        writers_since += 1;
                    }
                }
            }
            Step::Range(s, lo, hi) => {
                let want: Vec<(u64, u64)> =
                    model.entries(*s).into_iter().filter(|(k, _)| (*lo..=*hi).contains(k)).collect();
                prop_assert_eq!(
                    petra_recovery::battery::range(&mut h, *s, *lo..=*hi).unwrap(),
                    want.clone(),
                    "{:?}..={:?}",
                    lo,
                    hi
                );
                let half_open: Vec<(u64, u64)> = want.into_iter().filter(|(k, _)| k < hi).collect();
                prop_assert_eq!(petra_recovery::battery::range(&mut h, *s, *lo..*hi).unwrap(), half_open);
            }
            Step::Checkpoint => {
                let report = h.checkpoint().expect("a single thread's round always runs");
                // Alone, the round takes every descriptor and its end is due at once.
                prop_assert!(report.txid >= last_writer, "{:?} below the last writer {}", report, last_writer);
                prop_assert!(h.checkpoint().is_some_and(|r| r.descriptors == 0), "the last round's end is due");
                writers_since = 0;
            }
            Step::Reopen(close) => {
                drop(h);
                match close {
                    Close::Crash => drop(engine.into_pool().expect("no other handle")),
                    Close::Pool => engine.into_pool().expect("no other handle").close().unwrap(),
                    Close::Engine => engine.close().unwrap(),
                }
                let (e, report) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), engine_config()).unwrap();
                // Only an engine closed by `Engine::close` skips recovery, and then reads no
                // descriptor.
                prop_assert_eq!(report.clean, *close == Close::Engine);
                // Recovery reads only the descriptors written since the last round.
                prop_assert_eq!(report.descriptors, if report.clean { 0 } else { writers_since });
                writers_since = 0;
                // Either way the allocator holds exactly the present keys' nodes (and blobs) and
                // the heads: nothing live is handed out again, nothing dead is kept.
                prop_assert_eq!(
                    report.allocator.live_blocks,
                    petra_recovery::battery::live_blocks(&e, report.present_keys)
                );
                engine = e;
                h = engine.handle().unwrap();
            }
        }
        for &s in &ids {
            // At rest, every structure's links hold their invariants.
            let linked = engine.check_links(s);
            prop_assert!(linked.is_ok(), "{:?} after {:?}", linked, step);
            let entries = model.entries(s);
            prop_assert_eq!(petra_recovery::battery::entries(&engine, s).unwrap(), entries.clone(), "after {:?}", step);
            // Single reads without a transaction: every present key, and the absent keys beside them.
            for &(k, v) in &entries {
                prop_assert_eq!(
                    petra_recovery::battery::get(&mut h, s, k).unwrap(),
                    Some(v),
                    "get {} after {:?}",
                    k,
                    step
                );
                if entries.binary_search_by_key(&(k + 1), |e| e.0).is_err() {
                    prop_assert_eq!(petra_recovery::battery::get(&mut h, s, k + 1).unwrap(), None, "get {}", k + 1);
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn random_histories_match_the_model(steps in prop::collection::vec(step_strategy(), 1..40)) {
        run_history(&steps)?;
    }
}

#[test]
fn persistence_costs_exactly_one_fence_and_the_descriptor_lines() {
    let pool = Pool::create_in(Counting::new(SimMem::new(0, 64 << 20)), &config()).unwrap();
    let engine = Engine::create(pool, engine_config()).unwrap();
    for kind in petra_recovery::battery::ALL {
        costs_of(&engine, petra_recovery::battery::create(&engine, kind));
    }
}

fn costs_of(engine: &Engine<Counting<SimMem>>, s: StructId) {
    use petra_recovery::battery;
    let mut h = engine.handle().unwrap();
    // A handle takes its descriptor ring (a region, persisted once) with its first descriptor, and
    // the first node or blob of each size persists its slab chunk's use once: warm both up.
    for k in 0..512 {
        let mut tx = Transaction::new();
        tx.put(s, 1 << 40 | k, k).remove(s, 1 << 40 | k);
        assert!(battery::execute(&mut h, &tx).unwrap().is_committed());
    }
    // The removals those left: a handle hands them to the epoch a batch at a time (or some
    // transactions after the first), and writers run them once due: puts of keys that stay.
    for k in 0..64 {
        assert!(battery::execute(&mut h, Transaction::new().put(s, 1 << 41 | k, k)).unwrap().is_committed());
    }
    let count = |h: &mut petra::Handle<Counting<SimMem>>, tx: &Transaction| {
        let before = MemCounts::current();
        let out = battery::execute(h, tx).unwrap();
        let d = MemCounts::current() - before;
        (out, d.flushes, d.fences)
    };
    // The lines a byte value's blob spans (its length word and bytes): flushed with the
    // descriptor, under its fence. Found from the blob's word, which the range returns.
    let bytes = engine.values(s).unwrap() == Values::Bytes;
    let blob_lines = |h: &mut petra::Handle<Counting<SimMem>>, key: u64| {
        let (word, len) =
            battery::range_with(h, s, key..=key, |e, blobs| (e[0].1, blobs.to_vec(e[0].1).unwrap().len() as u64))
                .unwrap();
        let end = word + (8 + len).next_multiple_of(8);
        (end - 1) / 64 - word / 64 + 1
    };
    // Keys of two words (here all with a high word) take 32-byte ops, one-word keys 24.
    let op_bytes = if engine.keys(s).unwrap() == KeyWidth::U128 { 32 } else { 24 };
    // Updating transactions: 1 fence, ceil((32 + op bytes * n) / 64) flushes, and the blobs' lines.
    for n in [1usize, 2, 3, 5, 8, 16] {
        let mut tx = Transaction::new();
        for k in 0..n as u64 {
            tx.put(s, 1000 * n as u64 + k, k);
        }
        let (out, flushes, fences) = count(&mut h, &tx);
        assert!(out.is_committed());
        let blobs: u64 = if bytes { (0..n as u64).map(|k| blob_lines(&mut h, 1000 * n as u64 + k)).sum() } else { 0 };
        assert_eq!((flushes, fences), ((32 + op_bytes * n as u64).div_ceil(64) + blobs, 1), "{n} puts");
    }
    // Read-only transactions, single or multi-op: nothing.
    let mut tx = Transaction::new();
    tx.get(s, 1000u64);
    let (out, flushes, fences) = count(&mut h, &tx);
    assert_eq!(out, Outcome::Committed { results: vec![Some(0)], txid: None });
    assert_eq!((flushes, fences), (0, 0), "a single read persists nothing");
    let mut tx = Transaction::new();
    tx.get(s, 1000u64).find(s, 2000u64).get(s, 7u64);
    let (out, flushes, fences) = count(&mut h, &tx);
    assert!(out.is_committed());
    assert_eq!((flushes, fences), (0, 0), "a read-only transaction persists nothing");
    // An aborted transaction: nothing (its blobs were written, never flushed).
    let mut tx = Transaction::new();
    tx.put(s, 5u64, 5).insert(s, 1000u64, 1);
    let (out, flushes, fences) = count(&mut h, &tx);
    assert_eq!(out, Outcome::Aborted { failed_op: Some(1) });
    assert_eq!((flushes, fences), (0, 0), "an aborted transaction persists nothing");
    // Checkpoint rounds: fold what came before, then count rounds over known batches.
    let round = |h: &mut petra::Handle<Counting<SimMem>>| {
        let before = MemCounts::current();
        let report = h.checkpoint().expect("no other round");
        let d = MemCounts::current() - before;
        (report, d.flushes, d.fences)
    };
    round(&mut h);
    // Nothing written since: nothing to do, nothing flushed or fenced.
    let (report, flushes, fences) = round(&mut h);
    assert_eq!((report.descriptors, flushes, fences), (0, 0, 0), "{report:?}");
    // Four new keys: four records, their lines, one fence for them; the checkpoint txid's line
    // and its fence.
    for k in 0..4u64 {
        assert!(battery::execute(&mut h, Transaction::new().put(s, 9000 + k, k)).unwrap().is_committed());
    }
    let (report, flushes, fences) = round(&mut h);
    assert_eq!((report.descriptors, report.keys, report.records), (4, 4, 4), "{report:?}");
    // A record is the node's first 32 bytes (40 with a key's high word), from a 16-byte aligned
    // start (one line or two), and its 16-byte record area (one line); a line two records share
    // (two nodes, four record areas) is flushed once: at least two lines of nodes and one of
    // record areas.
    assert!((3..=8).contains(&report.lines), "{report:?}");
    assert_eq!((flushes, fences), (report.lines + 1, 2), "{report:?}");
    // Reads change no record: only the checkpoint txid's line and fence.
    let mut tx = Transaction::new();
    tx.get(s, 9000u64).get(s, 9001u64);
    assert!(battery::execute(&mut h, &tx).unwrap().is_committed());
    let (report, flushes, fences) = round(&mut h);
    assert_eq!((report.descriptors, report.records, flushes, fences), (1, 0, 1, 1), "{report:?}");
}

#[test]
fn skiplist_towers_index_about_half_the_keys_per_level() {
    use petra::mem::PMem;
    use std::sync::atomic::Ordering;
    let pool = Pool::create_in(SimMem::new(0, 64 << 20), &config()).unwrap();
    let engine = Engine::create(pool, EngineConfig::rings(4 << 20)).unwrap();
    let s = engine.create_skiplist().unwrap();
    let mut h = engine.handle().unwrap();
    for k in 0..4096u64 {
        assert!(h.execute(Transaction::new().insert(s, k, k).find(s, k)).unwrap().is_committed());
    }
    let head = engine.pool().root(s.0 as usize).unwrap().params[0];
    let mem = engine.pool().mem();
    // Level l's links: +8 for level 0, then +40, +48, ... (see structures::skiplist).
    let count = |l: u64| {
        let off = if l == 0 { 8 } else { 32 + 8 * l };
        let (mut n, mut curr, mut last_key) = (0u64, mem.load(head + off, Ordering::Acquire), None);
        while curr != 0 {
            let key = mem.load(curr, Ordering::Relaxed);
            assert!(last_key < Some(key), "level {l} out of order");
            last_key = Some(key);
            n += 1;
            curr = mem.load(curr + off, Ordering::Acquire) & !1;
        }
        n
    };
    assert_eq!(count(0), 4096);
    let (l1, l2) = (count(1), count(2));
    assert!((1850..2250).contains(&l1), "level 1 indexes {l1} of 4096 keys");
    assert!((870..1180).contains(&l2), "level 2 indexes {l2} of 4096 keys");
}

#[test]
fn byte_values_round_trip_and_a_value_of_the_wrong_kind_is_refused() {
    let mem = Arc::new(SimMem::new(0, 64 << 20));
    let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
    let engine = Engine::create(pool, engine_config()).unwrap();
    let (words, bytes) = (
        engine.create_hash_map(8).unwrap(),
        engine.create_structure(StructureKind::HashMap { buckets: 8 }, KeyWidth::U64, Values::Bytes).unwrap(),
    );
    let mut h = engine.handle().unwrap();
    // A word for a structure of bytes, or bytes for one of words: refused, nothing changed.
    let err = h.execute(Transaction::new().put_bytes(bytes, 1u64, b"x").put(bytes, 2u64, 2)).unwrap_err();
    assert!(
        matches!(err, petra::EngineError::WrongValue { structure, expected: Values::Bytes } if structure == bytes.0),
        "{err}"
    );
    let err = h.execute(Transaction::new().put(words, 1u64, 1).put_bytes(words, 2u64, b"x")).unwrap_err();
    assert!(matches!(err, petra::EngineError::WrongValue { expected: Values::Words, .. }), "{err}");
    assert!(engine.entries::<u64>(words).unwrap().is_empty() && engine.entries::<u64>(bytes).unwrap().is_empty());
    // Empty, small and multi-chunk values (a run of chunks), in one transaction with a word.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut tx = Transaction::new();
    tx.put_bytes(bytes, 1u64, b"").insert_bytes(bytes, 2u64, b"two").put_bytes(bytes, 3u64, &big).put(words, 9u64, 90);
    assert!(h.execute(&tx).unwrap().is_committed());
    let read = |h: &mut petra::Handle<Arc<SimMem>>| {
        h.range_with(bytes, .., |e: Vec<(u64, u64)>, blobs| {
            e.iter().map(|&(k, w)| (k, blobs.to_vec(w).unwrap())).collect::<Vec<_>>()
        })
        .unwrap()
    };
    let want = vec![(1, Vec::new()), (2, b"two".to_vec()), (3, big.clone())];
    assert_eq!(read(&mut h), want);
    // The replaced value comes back as the update's result, readable inside execute_with.
    let old = h
        .execute_with(Transaction::new().update_bytes(bytes, 2u64, b"deux"), |out, blobs| match out {
            Outcome::Committed { results, .. } => blobs.to_vec(results[0].unwrap()).unwrap(),
            aborted => panic!("{aborted:?}"),
        })
        .unwrap();
    assert_eq!(old, b"two");
    // execute_decided: a strict op that fails names itself and changes nothing; a commit hands
    // its results and their byte values over.
    assert_eq!(
        h.execute_decided(Transaction::new().put(words, 8u64, 80).insert_bytes(bytes, 2u64, b"2"), |_, _| ()).unwrap(),
        Err(1)
    );
    assert_eq!(engine.entries::<u64>(words).unwrap(), vec![(9, 90)]);
    let got = h.execute_decided(Transaction::new().get(bytes, 2u64).get(words, 9u64), |r, blobs| {
        (blobs.to_vec(r[0].unwrap()).unwrap(), r[1])
    });
    assert_eq!(got.unwrap(), Ok((b"deux".to_vec(), Some(90))));
    // Across an unclean reopen (recovery from the rings).
    drop(h);
    drop(engine.into_pool().unwrap());
    let (engine, _) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), engine_config()).unwrap();
    let mut h = engine.handle().unwrap();
    let want = vec![(1, Vec::new()), (2, b"deux".to_vec()), (3, big)];
    assert_eq!(read(&mut h), want);
    assert_eq!(engine.entries::<u64>(words).unwrap(), vec![(9, 90)]);
}

#[test]
fn two_word_keys_keep_their_order_across_reopens_and_a_key_of_the_wrong_width_is_refused() {
    use petra::{EngineError, ShortKey};
    let mem = Arc::new(SimMem::new(0, 64 << 20));
    let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
    let engine = Engine::create(pool, engine_config()).unwrap();
    let names = engine.create_structure(StructureKind::SkipList, KeyWidth::U128, Values::Bytes).unwrap();
    let ids = engine.create_structure(StructureKind::HashMap { buckets: 4 }, KeyWidth::U128, Values::Words).unwrap();
    let list = engine.create_structure(StructureKind::List, KeyWidth::U128, Values::Words).unwrap();
    let words = engine.create_list().unwrap();
    let err = engine.create_structure(StructureKind::MdList, KeyWidth::U128, Values::Words).unwrap_err();
    assert!(matches!(err, EngineError::KeyWidthUnsupported { kind: StructureKind::MdList, .. }), "{err}");
    let mut h = engine.handle().unwrap();

    // A key of the other width, in an op or a scan: refused before anything changes.
    let err = h.execute(Transaction::new().put(list, 1u128 << 64, 1).put(list, 2u64, 2)).unwrap_err();
    assert!(matches!(err, EngineError::WrongKey { structure, expected: KeyWidth::U128 } if structure == list.0));
    let err = h.execute(Transaction::new().put(words, 1u64, 1).put(words, 2u128, 2)).unwrap_err();
    assert!(matches!(err, EngineError::WrongKey { expected: KeyWidth::U64, .. }), "{err}");
    assert!(matches!(h.range::<u64>(list, ..), Err(EngineError::WrongKey { .. })));
    assert!(matches!(h.get(list, 1u64), Err(EngineError::WrongKey { .. })));
    assert!(matches!(h.get(words, 1u128), Err(EngineError::WrongKey { .. })));
    assert!(matches!(h.get(StructId(99), 1u64), Err(EngineError::UnknownStructure(99))));
    assert!(engine.entries::<u128>(list).unwrap().is_empty() && engine.entries::<u64>(words).unwrap().is_empty());

    // Byte strings that are prefixes of each other and hold zero bytes, put in a scrambled
    // order, with each string as its own value; and u128 keys that differ in one word only.
    let strings: [&[u8]; 10] =
        [b"", b"\0", b"a", b"a\0", b"a\0\0", b"ab", b"b", b"node12/meminfo", b"node2/vmstat", &[0xFF; 15]];
    let key = |s: &[u8]| ShortKey::new(s).unwrap();
    let mut tx = Transaction::new();
    for i in [3, 9, 0, 6, 1, 8, 4, 2, 7, 5] {
        tx.put_bytes(names, key(strings[i]), strings[i]);
    }
    assert!(h.execute(&tx).unwrap().is_committed());
    let wide = [0u128, 1, u64::MAX as u128, 1 << 64, 1 << 64 | 1, 2 << 64, u128::MAX];
    let mut tx = Transaction::new();
    for (i, &k) in wide.iter().enumerate().rev() {
        tx.insert(ids, k, i as u64).insert(list, k, i as u64);
    }
    assert!(h.execute(&tx).unwrap().is_committed());
    // Fixed byte arrays of 12 bytes: big-endian, so in array order.
    let arrays: Vec<[u8; 12]> = (0..40u8).map(|i| [i % 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 100 - i]).collect();
    let mut tx = Transaction::new();
    for (i, a) in arrays.iter().enumerate() {
        tx.put(list, *a, 100 + i as u64);
    }
    assert!(h.execute(&tx).unwrap().is_committed());

    let check = |h: &mut petra::Handle<Arc<SimMem>>, engine: &Engine<Arc<SimMem>>, round: u64| {
        let got = h
            .range_with(names, .., |e: Vec<(ShortKey, u64)>, blobs| {
                e.iter().map(|&(k, w)| (k.to_vec(), blobs.to_vec(w).unwrap())).collect::<Vec<_>>()
            })
            .unwrap();
        let mut want: Vec<(Vec<u8>, Vec<u8>)> = strings.iter().map(|s| (s.to_vec(), s.to_vec())).collect();
        want.sort();
        assert_eq!(got, want, "round {round}");
        let between: Vec<Vec<u8>> = h
            .range(names, key(b"a")..key(b"b"))
            .unwrap()
            .into_iter()
            .map(|(k, _): (ShortKey, u64)| k.to_vec())
            .collect();
        assert_eq!(between, [&b"a"[..], b"a\0", b"a\0\0", b"ab"], "round {round}");
        let want: Vec<(u128, u64)> = wide.iter().enumerate().map(|(i, &k)| (k, i as u64 + round)).collect();
        assert_eq!(engine.entries::<u128>(ids).unwrap(), want, "round {round}");
        let mut want: Vec<([u8; 12], u64)> = arrays.iter().enumerate().map(|(i, &a)| (a, 100 + i as u64)).collect();
        want.sort();
        assert_eq!(engine.entries::<[u8; 12]>(list).unwrap().len(), want.len() + wide.len());
        for (k, v) in want {
            let out = h.execute(Transaction::new().get(list, k)).unwrap();
            assert_eq!(out, Outcome::Committed { results: vec![Some(v)], txid: None }, "{k:?}, round {round}");
        }
    };
    check(&mut h, &engine, 0);
    // Recovery from the descriptors (unclean), then from the normalised nodes after an update.
    let mut engine = engine;
    for round in 1..=2 {
        drop(h);
        drop(engine.into_pool().unwrap());
        engine = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), engine_config()).unwrap().0;
        h = engine.handle().unwrap();
        check(&mut h, &engine, round - 1);
        let mut tx = Transaction::new();
        for (i, &k) in wide.iter().enumerate() {
            tx.update(ids, k, i as u64 + round);
        }
        assert!(h.execute(&tx).unwrap().is_committed());
        check(&mut h, &engine, round);
    }
}

#[test]
fn check_links_finds_a_key_out_of_place_and_a_tower_not_whole() {
    use petra::mem::PMem;
    use std::sync::atomic::Ordering;
    let pool = Pool::create_in(SimMem::new(0, 64 << 20), &config()).unwrap();
    let engine = Engine::create(pool, EngineConfig::rings(4 << 20)).unwrap();
    let structures = [
        engine.create_list().unwrap(),
        engine.create_hash_map(8).unwrap(),
        engine.create_skiplist().unwrap(),
        engine.create_mdlist().unwrap(),
    ];
    let mut h = engine.handle().unwrap();
    for &s in &structures {
        for k in 1..=64u64 {
            assert!(h.execute(Transaction::new().insert(s, k << 56 | k, k)).unwrap().is_committed());
        }
        assert_eq!(engine.check_links(s).unwrap(), 64);
    }
    drop(h);
    let mem = engine.pool().mem();
    // The first node of each structure, given a key that belongs elsewhere: the list's and the
    // skiplist's first node (the head's `next` at +8), the hash map's first in a bucket (its
    // array of link words), the MDList head's first child (`child[0]`, the last of its 32 slots
    // from +40: +288). See each structure's layout.
    for (i, &s) in structures.iter().enumerate() {
        let root = engine.pool().root(s.0 as usize).unwrap().params[0];
        let first = match i {
            1 => (0..8).map(|b| mem.load(root + 8 * b, Ordering::Relaxed)).find(|&n| n != 0).unwrap(),
            3 => mem.load(root + 288, Ordering::Relaxed),
            _ => mem.load(root + 8, Ordering::Relaxed),
        };
        let key = mem.load(first, Ordering::Relaxed);
        mem.store(first, u64::MAX, Ordering::Relaxed);
        assert!(engine.check_links(s).is_err(), "structure {} with a key out of place", s.0);
        mem.store(first, key, Ordering::Relaxed);
        assert_eq!(engine.check_links(s).unwrap(), 64);
    }
    // A marked `next` (+8): the list takes it for a removal begun, whose unlink waits for the
    // next search past the node, only if the node's info word (+16) is marked too (bit 1: a
    // removal marks it first); the hash map, whose removals unlink at once, not at all.
    for &s in &structures[..2] {
        let root = engine.pool().root(s.0 as usize).unwrap().params[0];
        let first = if s == structures[0] {
            mem.load(root + 8, Ordering::Relaxed)
        } else {
            (0..8).map(|b| mem.load(root + 8 * b, Ordering::Relaxed)).find(|&n| n != 0).unwrap()
        };
        let (info, next) = (mem.load(first + 16, Ordering::Relaxed), mem.load(first + 8, Ordering::Relaxed));
        mem.store(first + 8, next | 1, Ordering::Relaxed);
        assert!(engine.check_links(s).is_err(), "structure {}: a node marked, its info word not", s.0);
        mem.store(first + 16, info | 2, Ordering::Relaxed);
        assert_eq!(engine.check_links(s).ok(), (s == structures[0]).then_some(64), "structure {}", s.0);
        mem.store(first + 16, info, Ordering::Relaxed);
        mem.store(first + 8, next, Ordering::Relaxed);
        assert_eq!(engine.check_links(s).unwrap(), 64);
    }
    // The list's last node, marked: its `next` holds only the mark, and is checked too.
    let mut last = mem.load(engine.pool().root(structures[0].0 as usize).unwrap().params[0] + 8, Ordering::Relaxed);
    while mem.load(last + 8, Ordering::Relaxed) != 0 {
        last = mem.load(last + 8, Ordering::Relaxed);
    }
    mem.store(last + 8, 1, Ordering::Relaxed);
    assert!(engine.check_links(structures[0]).is_err(), "the last node marked, its info word not");
    mem.store(last + 8, 0, Ordering::Relaxed);
    assert_eq!(engine.check_links(structures[0]).unwrap(), 64);
    // A skiplist node whose link count says an inserter is still building its tower.
    let head = engine.pool().root(structures[2].0 as usize).unwrap().params[0];
    let first = mem.load(head + 8, Ordering::Relaxed);
    // Its meta word (height and link count) follows the node's four common words.
    mem.fetch_add(first + 32, 1 << 8, Ordering::Relaxed);
    assert!(engine.check_links(structures[2]).is_err());
}
