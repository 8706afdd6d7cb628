//! Scans stopped where they re-pin (every 8 nodes in debug builds): the protocol's test hook
//! ([`hook::set_scan_paused`]) runs writers, removals, frees and checkpoint rounds there, on the
//! scanning thread (deterministic), or waits for another thread; the scan must still return the
//! state as of its txid, with every value readable.

use std::sync::mpsc;

use super::inclusive;
use crate::checkpoint::steps::{self, Count};
use crate::mem::SimMem;
use crate::pool::{Pool, PoolConfig};
use crate::protocol::hook;
use crate::{
    Engine, EngineConfig, EngineError, Handle, KeyWidth, ReadError, StructId, StructureKind, Transaction, Values,
};

#[test]
fn bounds_become_inclusive() {
    assert_eq!(inclusive::<u64>(&(..)), Some((0, u128::MAX)));
    assert_eq!(inclusive(&(3u64..7)), Some((3, 6)));
    assert_eq!(inclusive(&(3u64..=7)), Some((3, 7)));
    assert_eq!(inclusive(&(..0u64)), None);
    assert_eq!(inclusive(&(5u64..5)), None);
    let (from, to) = (7u64, 3);
    assert_eq!(inclusive(&(from..to)), None);
    let above = (std::ops::Bound::Excluded(u128::MAX), std::ops::Bound::Unbounded);
    assert_eq!(inclusive(&above), None);
    // Above the largest one-word key: nothing of one word is, but the bounds say so.
    let above = (std::ops::Bound::Excluded(u64::MAX), std::ops::Bound::Unbounded);
    assert_eq!(inclusive(&above), Some((1 << 64, u128::MAX)));
    let above = (std::ops::Bound::Excluded(4u64), std::ops::Bound::Unbounded);
    assert_eq!(inclusive(&above), Some((5, u128::MAX)));
}

/// Keys of the structure scanned: `0..KEYS`, each holding itself at first.
const KEYS: u64 = 64;

/// Calls at a scan's pauses that drive the engine (see [`drive`]).
const DRIVES: usize = 24;

/// An engine whose checkpoint rounds run only when asked, with a structure of `kind` holding the
/// keys `0..KEYS` (values: the key, or for byte values [`bytes`] of it), and a list for other
/// writes.
fn engine(kind: StructureKind, values: Values) -> (Engine<SimMem>, StructId, StructId) {
    engine_with(kind, values, EngineConfig::rings(64 << 10).checkpoint_fill(0))
}

/// As [`engine`], with the engine's settings `config`.
fn engine_with(kind: StructureKind, values: Values, config: EngineConfig) -> (Engine<SimMem>, StructId, StructId) {
    let pool_config =
        PoolConfig { initial_size: 1 << 20, max_size: 64 << 20, chunk_size: 64 << 10, ..PoolConfig::default() };
    let pool = Pool::create_in(SimMem::new(0, 64 << 20), &pool_config).unwrap();
    let engine = Engine::create(pool, config).unwrap();
    let s = engine.create_structure(kind, KeyWidth::U64, values).unwrap();
    let other = engine.create_list().unwrap();
    let mut h = engine.handle().unwrap();
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(16) {
        let mut tx = Transaction::new();
        for &k in chunk {
            match values {
                Values::Words => tx.put(s, k, k),
                Values::Bytes => tx.put_bytes(s, k, &bytes(k)),
            };
        }
        assert!(h.execute(&tx).unwrap().is_committed());
    }
    (engine, s, other)
}

/// The byte value of `v`: 100 bytes, all `v`'s.
fn bytes(v: u64) -> Vec<u8> {
    vec![v as u8; 100]
}

/// A step of the engine's own work, by `h`: a write of `other` (a writer runs the removals and
/// frees that came due), and a checkpoint round if one may run.
fn drive(h: &mut Handle<SimMem>, other: StructId, step: usize) {
    assert!(h.execute(Transaction::new().put(other, step as u64 % 4, step as u64)).unwrap().is_committed());
    h.checkpoint_round();
}

/// Scans all of `s`, with `meanwhile(call)` run where the scan re-pins: while it returns true the
/// scan re-pins again and calls it again (`call` counts the calls); then the walk goes on.
/// Returns the snapshot's txid and its entries, each value read by `value` with the blobs.
fn scan_pausing(
    engine: &Engine<SimMem>,
    s: StructId,
    meanwhile: impl FnMut(usize) -> bool + 'static,
    value: impl Fn(u64, &crate::Blobs<'_, SimMem>) -> u64,
) -> (u64, Vec<(u64, u64)>) {
    try_scan_pausing(engine, s, meanwhile, value).unwrap()
}

/// [`scan_pausing`], returning what the scan returned.
fn try_scan_pausing(
    engine: &Engine<SimMem>,
    s: StructId,
    mut meanwhile: impl FnMut(usize) -> bool + 'static,
    value: impl Fn(u64, &crate::Blobs<'_, SimMem>) -> u64,
) -> Result<(u64, Vec<(u64, u64)>), EngineError> {
    let mut calls = 0;
    hook::set_scan_paused(move || {
        calls += 1;
        meanwhile(calls - 1)
    });
    let mut h = engine.handle().unwrap();
    let out = h.snapshot_with(s, .., |txid, entries: Vec<(u64, u64)>, blobs| {
        (txid, entries.into_iter().map(|(k, w)| (k, value(w, blobs))).collect())
    });
    hook::clear();
    out
}

/// In the middle of a scan, writers replace a key twice, delete one and replace another; the
/// deleted key's removal comes due, and checkpoint rounds run: the one that folds the batch of
/// a writer below the snapshot (which cuts the chain of the key replaced twice), and the ones
/// after it, whose batches are above the snapshot. The scan still returns the state as of its
/// txid: the removal and the later rounds wait for it, and the round it lets run cuts only the
/// chain below the newer writers.
#[test]
fn a_scan_returns_the_state_at_its_txid_while_writers_rounds_and_removals_run_in_its_middle() {
    for kind in
        [StructureKind::List, StructureKind::SkipList, StructureKind::HashMap { buckets: 4 }, StructureKind::MdList]
    {
        let (engine, s, other) = engine(kind, Values::Words);
        let mut h = engine.handle().unwrap();
        // Below the snapshot, in a batch found before it.
        assert!(h.execute(Transaction::new().put(s, 60u64, 1000)).unwrap().is_committed());
        assert!(h.checkpoint_round().is_some());
        let folded_before = engine.checkpoint_stats().descriptors;
        let mut h2 = engine.handle().unwrap();
        let (txid, got) = scan_pausing(
            &engine,
            s,
            move |call| match call {
                0 => {
                    for tx in [
                        Transaction::new().put(s, 60u64, 2000),
                        Transaction::new().put(s, 60u64, 3000),
                        Transaction::new().delete(s, 61u64),
                        Transaction::new().put(s, 62u64, 4000),
                    ] {
                        assert!(h2.execute(tx).unwrap().is_committed());
                    }
                    true
                }
                // First writes alone, so that the removal of key 61 comes due before any round
                // recycles its op's slot (which would make it stale): it must wait for the scan.
                c if c <= DRIVES => {
                    assert!(h2.execute(Transaction::new().put(other, c as u64 % 4, c as u64)).unwrap().is_committed());
                    h2.collect();
                    true
                }
                c if c <= 2 * DRIVES => {
                    drive(&mut h2, other, c);
                    true
                }
                _ => false,
            },
            |w, _| w,
        );
        let want: Vec<(u64, u64)> = (0..KEYS).map(|k| (k, if k == 60 { 1000 } else { k })).collect();
        assert_eq!(got, want, "{kind:?}: the scan at txid {txid}");
        assert!(engine.waited_for_snapshots()[0] > 0, "{kind:?}: the removal of key 61 never waited for the scan");
        assert!(
            engine.checkpoint_stats().descriptors > folded_before,
            "{kind:?}: no round folded the batch below the snapshot while the scan ran"
        );
        // After it: the writes, and the rounds and the removal that waited go on.
        let now = h.range(s, 59u64..=62).unwrap();
        assert_eq!(now, [(59, 59), (60, 3000), (62, 4000)], "{kind:?}");
        for step in 0..4 {
            drive(&mut h, other, step);
        }
        assert!(engine.checkpoint_stats().descriptors > folded_before + 4, "{kind:?}: the rounds stayed held");
    }
}

/// An MDList scan's descent holds nodes on its stack; at a re-pin they may be removed, freed and
/// reused. Keys 8 and 16 are deleted just before the scan (below its snapshot, so their removal
/// need not wait for it): at its first pause, after keys 0 to 7, the stack holds their nodes,
/// and each still routes present keys (9 to 11 hang in 8's list of the last dimension, 17 to 31
/// in 16's). At the pause their removals run (each copies the node, which routes keys), the
/// nodes are freed, and another MDList's inserts take the blocks over. The scan still returns
/// every present key: after a re-pin it descends again from the head, for the keys after the
/// last one it met, and never reads a node it held before.
#[test]
fn an_mdlist_scan_that_re_pins_descends_again_and_reads_no_node_freed_meanwhile() {
    let (engine, s, other) = engine(StructureKind::MdList, Values::Words);
    let reuse = engine.create_mdlist().unwrap();
    let mut h = engine.handle().unwrap();
    for k in [8u64, 16] {
        assert!(h.execute(Transaction::new().delete(s, k)).unwrap().is_committed());
    }
    // The handle hands the removals to the epoch (it would wait for more otherwise).
    h.collect();
    let removed = engine.removals_run();
    let mut h2 = engine.handle().unwrap();
    let (txid, got) = scan_pausing(
        &engine,
        s,
        move |call| match call {
            // Writes elsewhere: the removals come due and run, and the nodes they unlink are freed.
            c if c < DRIVES => {
                assert!(h2.execute(Transaction::new().put(other, c as u64 % 4, c as u64)).unwrap().is_committed());
                h2.collect();
                true
            }
            // Nodes of the same sizes, which take the freed blocks.
            c if c == DRIVES => {
                for k in 0..KEYS {
                    assert!(h2.execute(Transaction::new().insert(reuse, k, 1000 + k)).unwrap().is_committed());
                }
                true
            }
            _ => false,
        },
        |w, _| w,
    );
    let want: Vec<(u64, u64)> = (0..KEYS).filter(|k| ![8, 16].contains(k)).map(|k| (k, k)).collect();
    assert_eq!(got, want, "the scan at txid {txid}");
    assert_eq!(engine.removals_run(), removed + 2, "the removals of keys 8 and 16 ran during the scan");
    assert!(engine.waited_for_snapshots()[0] == 0, "the removals below the snapshot waited for it");
    // The removals ran while the scan held the nodes: the copies route the keys below them.
    assert_eq!(
        h.range(s, 8u64..=17).unwrap(),
        [(9, 9), (10, 10), (11, 11), (12, 12), (13, 13), (14, 14), (15, 15), (17, 17)]
    );
}

/// A byte value replaced in the middle of a scan, which the writers' frees and allocations of
/// values of its size would reuse, is read whole by the scan's caller: a value replaced above a
/// snapshot waits for it.
#[test]
fn a_value_replaced_in_the_middle_of_a_scan_stays_readable_until_the_scan_is_done() {
    let (engine, s, _) = engine(StructureKind::SkipList, Values::Bytes);
    let values = engine.create_structure(StructureKind::List, KeyWidth::U64, Values::Bytes).unwrap();
    let mut h2 = engine.handle().unwrap();
    let (_, got) = scan_pausing(
        &engine,
        s,
        move |call| match call {
            0 => {
                assert!(h2.execute(Transaction::new().put_bytes(s, 40u64, &bytes(200))).unwrap().is_committed());
                true
            }
            c if c <= DRIVES => {
                // Values of the same size, written again and again: the blocks freed come back.
                let tx = Transaction::new().put_bytes(values, c as u64 % 2, &bytes(100 + c as u64)).clone();
                assert!(h2.execute(&tx).unwrap().is_committed());
                h2.checkpoint_round();
                true
            }
            _ => false,
        },
        |w, blobs| {
            let value = blobs.to_vec(w).expect("a value the scan returned reads back whole");
            assert!(value.len() == 100 && value.iter().all(|&b| b == value[0]), "a value read back wrong: {value:?}");
            value[0] as u64
        },
    );
    assert_eq!(got, (0..KEYS).map(|k| (k, k)).collect::<Vec<_>>());
    assert!(engine.waited_for_snapshots()[1] > 0, "the value of key 40 never came due during the scan");
}

/// A removal is stamped once its transaction has its txid: a scan that takes its snapshot after
/// the transaction committed but before it got its txid (so below it) still finds the key the
/// transaction deleted, its node kept while the snapshot is held, though the removal comes due
/// in the middle of the scan. Also when the node holds a record (the keys checkpointed first),
/// whose removal marks the delete's own op word and holds the block for a round.
#[test]
fn a_snapshot_taken_before_a_deletes_txid_keeps_its_node() {
    snapshot_before_a_deletes_txid(false);
    snapshot_before_a_deletes_txid(true);
}

fn snapshot_before_a_deletes_txid(records: bool) {
    let (engine, s, other) = engine(StructureKind::SkipList, Values::Words);
    if records {
        engine.checkpoint().unwrap();
        engine.checkpoint().unwrap();
        assert!(engine.checkpoint_stats().records >= KEYS);
    }
    let (committed_tx, committed_rx) = mpsc::channel();
    let (taken_tx, taken_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::scope(|sc| {
        let e = engine.clone();
        sc.spawn(move || {
            let mut h = e.handle().unwrap();
            // Committed, not yet persisted: wait for the scan's snapshot.
            hook::set_before_persist(move |_| {
                committed_tx.send(()).unwrap();
                taken_rx.recv().unwrap();
            });
            assert!(h.execute(Transaction::new().delete(s, 60u64)).unwrap().is_committed());
            hook::clear();
            // The handle hands its removal to the epoch when it drops (or later, with more):
            // before the scan goes on, so that the removal comes due in the middle of the scan.
            drop(h);
            done_tx.send(()).unwrap();
        });
        committed_rx.recv().unwrap();
        let mut h2 = engine.handle().unwrap();
        let (txid, got) = scan_pausing(
            &engine,
            s,
            move |call| match call {
                0 => {
                    taken_tx.send(()).unwrap();
                    done_rx.recv().unwrap();
                    true
                }
                c if c <= DRIVES => {
                    drive(&mut h2, other, c);
                    true
                }
                _ => false,
            },
            |w, _| w,
        );
        assert_eq!(got, (0..KEYS).map(|k| (k, k)).collect::<Vec<_>>(), "the scan at txid {txid}, records: {records}");
    });
    assert_eq!(engine.handle().unwrap().get(s, 60u64).unwrap(), None);
}

/// A round cuts only the `prev` words that name its batch, so the ops of newer transactions
/// stay above it on a hot key's chain; it walks past them once for the node, not once for
/// every op of its batch on the key (which made rounds on hot keys slow in proportion to their
/// backlog, and so fall further behind).
#[test]
fn a_round_walks_past_the_newer_ops_on_a_hot_key_once_not_once_per_op() {
    const WRITES: u64 = 200;
    let (engine, s, _) = engine(StructureKind::SkipList, Values::Words);
    let mut h = engine.handle().unwrap();
    let mut writes = |from: u64| {
        for v in from..from + WRITES {
            assert!(h.execute(Transaction::new().put(s, 5u64, v)).unwrap().is_committed());
        }
    };
    writes(0);
    let mut h2 = engine.handle().unwrap();
    // Finds a batch holding the first writes (and the set-up's).
    assert!(h2.checkpoint_round().is_some());
    writes(WRITES);
    let before = steps::of(Count::Step);
    let report = h2.checkpoint_round().expect("the round runs");
    let steps = steps::of(Count::Step) - before;
    assert!(report.descriptors >= WRITES, "{report:?}");
    // The first op's walks go down past the newer writes to its own (`chain_below`), and past
    // them and the batch's writes (`cache_chain`): 3 * WRITES steps, and a few for each other
    // key of the set-up; each other op of the batch on the key finds the node done. (Walking
    // again for each of them: some 80 000.)
    assert!(steps <= 5 * WRITES, "{steps} steps down prev chains for {} descriptors", report.descriptors);
    assert_eq!(h2.get(s, 5u64).unwrap(), Some(2 * WRITES - 1));
}

/// Bytes of descriptors a snapshot may hold back in the expiry tests: a few dozen descriptors.
const LIMIT: u64 = 16 << 10;

/// `n` puts on `other` by `h`, with a checkpoint round every eighth: more descriptors than
/// [`LIMIT`] when `n` is a few hundred.
fn write_past(h: &mut Handle<SimMem>, other: StructId, n: u64) {
    for i in 0..n {
        assert!(h.execute(Transaction::new().put(other, i % 4, i)).unwrap().is_committed());
        if i % 8 == 7 {
            h.checkpoint_round();
        }
    }
}

/// A scan of `s` during which another handle runs `write_past(n)` on `other` at each of its
/// first `steps` pauses, letting the epoch move on after each (the scan re-pins between them).
fn scan_writing(
    engine: &Engine<SimMem>,
    s: StructId,
    other: StructId,
    steps: usize,
    n: u64,
) -> Result<(u64, Vec<(u64, u64)>), EngineError> {
    let mut h2 = engine.handle().unwrap();
    let meanwhile = move |call| {
        if call < steps {
            write_past(&mut h2, other, n);
            h2.collect();
        }
        call < steps
    };
    try_scan_pausing(engine, s, meanwhile, |w, _| w)
}

/// A scan whose walk stays at a re-pin while writers fill the rings past the snapshot limit: a
/// round its snapshot holds back expires it, the walk stops at its next re-pin (here: the same
/// one) with `SnapshotExpired` instead of reading on, and once the scan is gone the rounds fold
/// what it held back. Writers that stay under the limit make no expiry: the scan returns its
/// snapshot.
#[test]
fn a_walk_held_past_the_snapshot_limit_stops_with_an_error_and_the_rounds_go_on() {
    for kind in
        [StructureKind::List, StructureKind::SkipList, StructureKind::HashMap { buckets: 4 }, StructureKind::MdList]
    {
        let config = EngineConfig::rings(64 << 10).checkpoint_fill(0).snapshot_limit(LIMIT);
        let (engine, s, other) = engine_with(kind, Values::Words, config);
        // Under the limit: the rounds wait, and the scan returns.
        let (_, got) = scan_writing(&engine, s, other, 4, 8).unwrap();
        assert_eq!(got, (0..KEYS).map(|k| (k, k)).collect::<Vec<_>>(), "{kind:?}");
        assert_eq!(engine.checkpoint_stats().snapshots_expired, 0, "{kind:?}: expired under the limit");
        // Past it, in steps between which the scan re-pins (so that the epoch moves on, and the
        // rounds' ends with it, as they do while a walk re-pins every millisecond).
        let folded = engine.checkpoint_stats().descriptors;
        let got = scan_writing(&engine, s, other, 8, 50);
        assert!(matches!(got, Err(EngineError::SnapshotExpired { .. })), "{kind:?}: {got:?}");
        assert_eq!(engine.checkpoint_stats().snapshots_expired, 1, "{kind:?}");
        let mut h = engine.handle().unwrap();
        for _ in 0..4 {
            h.collect();
            h.checkpoint_round();
        }
        assert!(engine.checkpoint_stats().descriptors >= folded + 300, "{kind:?}: the rounds stayed held");
        assert_eq!(h.range(s, ..).unwrap(), (0..KEYS).map(|k| (k, k)).collect::<Vec<_>>(), "{kind:?}");
    }
}

/// The caller of a scan reads its values slowly while writers replace them and write past the
/// limit: the value read before the expiry is the snapshot's, the read after it says
/// `Expired`, and, with the caller still holding the scan's reader, the rounds fold and the
/// replaced values are freed: an expired snapshot holds nothing back.
#[test]
fn a_slow_reader_of_a_scans_values_is_expired_past_the_limit_and_holds_nothing_back_after() {
    let config = EngineConfig::rings(64 << 10).checkpoint_fill(0).snapshot_limit(LIMIT);
    let (engine, s, other) = engine_with(StructureKind::SkipList, Values::Bytes, config);
    let mut h = engine.handle().unwrap();
    let mut h2 = engine.handle().unwrap();
    let folded = engine.checkpoint_stats().descriptors;
    let returned = || engine.pool().ledger().expect("debug builds keep a ledger").returned;
    h.snapshot_with(s, .., |txid, entries: Vec<(u64, u64)>, blobs| {
        assert_eq!(blobs.to_vec(entries[0].1).unwrap(), bytes(0));
        // Every value replaced, above the snapshot: they wait for it.
        let before = returned();
        for k in 0..KEYS {
            assert!(h2.execute(Transaction::new().put_bytes(s, k, &bytes(200))).unwrap().is_committed());
        }
        write_past(&mut h2, other, 400);
        assert_eq!(engine.checkpoint_stats().snapshots_expired, 1);
        assert_eq!(blobs.to_vec(entries[1].1), Err(ReadError::Expired { txid }));
        // This thread is unpinned in the caller's function: the epoch moves on, the expiry's
        // second step runs, the rounds fold and the writers free the values that waited, while
        // the reader still lives.
        for _ in 0..4 {
            h2.collect();
            h2.checkpoint_round();
            write_past(&mut h2, other, 16);
        }
        assert!(engine.checkpoint_stats().descriptors >= folded + 300, "the rounds stayed held by an expired snapshot");
        let freed = returned() - before;
        assert!(freed >= KEYS, "{freed} blocks freed: the values replaced above an expired snapshot still wait");
    })
    .unwrap();
}

/// While a scan's caller holds its snapshot for good, a writer with automatic rounds writes
/// many rings' worth of descriptors: the snapshot is expired and the rounds recycle, so the
/// engine keeps a few rings, not one more for every ring's worth written.
#[test]
fn a_snapshot_held_for_good_does_not_grow_the_rings() {
    let config = EngineConfig::rings(64 << 10).checkpoint_fill(25).snapshot_limit(64 << 10);
    let (engine, s, other) = engine_with(StructureKind::SkipList, Values::Words, config);
    let mut h = engine.handle().unwrap();
    let mut h2 = engine.handle().unwrap();
    let rings_before = engine.rings();
    let held = h.snapshot_with(s, .., |_, _: Vec<(u64, u64)>, _| {
        // About 2 MiB of descriptors: some thirty rings' worth.
        for i in 0..16_000u64 {
            assert!(h2.execute(Transaction::new().put(other, i % 64, i)).unwrap().is_committed());
        }
        engine.rings()
    });
    let rings = held.unwrap();
    assert!(
        rings <= rings_before + 3,
        "{rings} rings after writing under a snapshot held for good ({rings_before} before)"
    );
    assert!(engine.checkpoint_stats().snapshots_expired >= 1);
}

/// A backlog of descriptors written before a scan takes its snapshot is not the snapshot's
/// doing: writers that stay under the limit while it is held make no expiry, however many
/// descriptors wait unfolded from before.
#[test]
fn a_backlog_from_before_a_snapshot_does_not_expire_it() {
    let config = EngineConfig::rings(64 << 10).checkpoint_fill(0).snapshot_limit(LIMIT);
    let (engine, s, other) = engine_with(StructureKind::SkipList, Values::Words, config);
    let mut h = engine.handle().unwrap();
    // Three times the limit of descriptors, none folded.
    for i in 0..400u64 {
        assert!(h.execute(Transaction::new().put(other, i % 4, i)).unwrap().is_committed());
    }
    let (_, got) = scan_writing(&engine, s, other, 4, 8).unwrap();
    assert_eq!(got, (0..KEYS).map(|k| (k, k)).collect::<Vec<_>>());
    assert_eq!(engine.checkpoint_stats().snapshots_expired, 0, "expired for a backlog older than the snapshot");
}

/// A writer replaces long values (whole chunks each) under a snapshot that a slow reader holds,
/// writing few descriptors but many times the pool's size in values: the values replaced count
/// against the limit, the snapshot is expired, and the writes never find the pool full.
#[test]
fn long_values_replaced_under_a_held_snapshot_expire_it_before_the_pool_fills() {
    // 64 KiB chunks: a value of 40 000 bytes takes one chunk; 2 000 of them are twice the pool.
    let long = |v: u64| vec![v as u8; 40_000];
    let config = EngineConfig::rings(64 << 10).checkpoint_fill(25).snapshot_limit(4 << 20);
    let (engine, s, _) = engine_with(StructureKind::SkipList, Values::Bytes, config);
    let mut h = engine.handle().unwrap();
    let mut h2 = engine.handle().unwrap();
    h.snapshot_with(s, .., |txid, entries: Vec<(u64, u64)>, blobs| {
        assert_eq!(blobs.to_vec(entries[0].1).unwrap(), bytes(0));
        for i in 0..2_000u64 {
            let put = h2.execute(Transaction::new().put_bytes(s, i % 4, &long(i)));
            assert!(put.as_ref().is_ok_and(|o| o.is_committed()), "put {i}: {put:?}");
        }
        assert!(engine.checkpoint_stats().snapshots_expired >= 1);
        assert_eq!(blobs.to_vec(entries[1].1), Err(ReadError::Expired { txid }));
    })
    .unwrap();
}
