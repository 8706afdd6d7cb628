//! Serializability of concurrent transactions over one structure of each kind: threads run random
//! transactions on a few hot keys, range scans, and checkpoint rounds between them; replaying the
//! committed ones in txid order on the model must reproduce every result they returned, each
//! scan must return the state of its range after exactly the transactions below its snapshot's
//! txid (taken during its call), single reads (answered without a descriptor) must return a value
//! the key had at a point of the serial order while they ran, and a recovery from the memory left
//! at the end (node records and the descriptors above the checkpoint txid) must give the final
//! state.

use std::collections::BTreeMap;

use petra::mem::{PMem, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{Engine, EngineConfig, Op, OpKind, Outcome, StructId, Transaction};
use petra_recovery::AsPageCache;
use petra_recovery::model::Model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

struct Committed {
    txid: u64,
    ops: Vec<Op>,
    results: Vec<Option<u64>>,
}

/// A key's values after each transaction that touched it: (txid, value after).
type KeyHistory = Vec<(u64, Option<u64>)>;

struct SingleRead {
    lo: u64,
    hi: u64,
    /// The txid of this thread's last committed transaction before the read (0: none): the read
    /// must see at least what that left.
    own: u64,
    op: Op,
    result: Option<u64>,
}

/// A range scan: its snapshot's txid, the watermarks read before and after its call, and what
/// it returned.
#[derive(Debug)]
struct Scan {
    txid: u64,
    lo: u64,
    hi: u64,
    s: StructId,
    from: u64,
    to: u64,
    got: Vec<(u64, u64)>,
}

/// What a thread ran: its committed transactions, single reads and scans, and how many aborted.
type ThreadLog = (Vec<Committed>, Vec<SingleRead>, Vec<Scan>, usize);

/// One transaction in this many is a range scan instead.
const SCAN_EVERY: u32 = 8;

fn random_op(rng: &mut StdRng, lists: &[StructId], keys: u64) -> Op {
    let kind = match rng.random_range(0..10) {
        0 => OpKind::Insert,
        1 => OpKind::Delete,
        2 => OpKind::Find,
        3 => OpKind::Update,
        4 | 5 => OpKind::Put,
        6 | 7 => OpKind::Remove,
        _ => OpKind::Get,
    };
    Op::new(kind, lists[rng.random_range(0..lists.len())], rng.random_range(0..keys), rng.random())
}

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: 256 << 20, chunk_size: 64 << 10, mapping: Mapping::default() }
}

/// Each thread runs a checkpoint round after this many transactions (another thread's round may
/// be running: then it goes on).
const ROUND_EVERY: usize = 64;

/// Rings of one chunk (about 300 descriptors of these transactions): the threads go round them
/// many times, so that a descriptor slot is written again soon after it was recycled, and a
/// reader that could still follow a reference into it would read another descriptor.
fn engine_config() -> EngineConfig {
    EngineConfig::rings(64 << 10)
}

fn run<M: PMem + 'static>(pool: Pool<M>, threads: usize, txs_per_thread: usize, keys: u64, seed: u64) {
    let engine = Engine::create(pool, engine_config()).unwrap();
    let lists = petra_recovery::battery::create_all(&engine);
    let logs: Vec<ThreadLog> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let engine = &engine;
                let lists = &lists;
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 1000 + t as u64);
                    let mut h = engine.handle().unwrap();
                    let (mut committed, mut reads, mut scans, mut aborted) = (Vec::new(), Vec::new(), Vec::new(), 0);
                    let mut own = 0;
                    for i in 0..txs_per_thread {
                        if i % ROUND_EVERY == ROUND_EVERY - 1 {
                            h.checkpoint();
                        }
                        if rng.random_ratio(1, SCAN_EVERY) {
                            let s = lists[rng.random_range(0..lists.len())];
                            let from = rng.random_range(0..keys);
                            let to = rng.random_range(from..keys + 1);
                            let lo = engine.txid_watermark();
                            let (txid, got) = petra_recovery::battery::snapshot(&mut h, s, from..=to).unwrap();
                            let hi = engine.txid_watermark();
                            scans.push(Scan { txid, lo, hi, s, from, to, got });
                            continue;
                        }
                        let n = rng.random_range(1..=4);
                        let ops: Vec<Op> = (0..n).map(|_| random_op(&mut rng, lists, keys)).collect();
                        let sort = rng.random_bool(0.5);
                        let mut tx = petra_recovery::battery::transaction(&ops);
                        tx.sorted(sort);
                        let lo = engine.txid_watermark();
                        let out = petra_recovery::battery::execute(&mut h, &tx).unwrap();
                        let hi = engine.txid_watermark();
                        match out {
                            Outcome::Committed { results, txid: Some(txid) } => {
                                own = txid;
                                // Record in execution order.
                                let mut order: Vec<usize> = (0..n).collect();
                                if sort {
                                    order.sort_by_key(|&i| (ops[i].structure, ops[i].key));
                                }
                                committed.push(Committed {
                                    txid,
                                    ops: order.iter().map(|&i| ops[i]).collect(),
                                    results: order.iter().map(|&i| results[i]).collect(),
                                });
                            }
                            Outcome::Committed { results, txid: None } => {
                                reads.push(SingleRead { lo, hi, own, op: ops[0], result: results[0] });
                            }
                            Outcome::Aborted { failed_op: None } if n == 1 && ops[0].kind == OpKind::Find => {
                                unreachable!("a single find fails with its index")
                            }
                            Outcome::Aborted { failed_op } => {
                                if n == 1 && ops[0].kind == OpKind::Find {
                                    reads.push(SingleRead { lo, hi, own, op: ops[0], result: None });
                                }
                                // The op named failed, whichever thread ran it: a strict one (in
                                // the order added, the transaction sorted or not).
                                if let Some(i) = failed_op {
                                    let kind = ops[i].kind;
                                    assert!(
                                        matches!(kind, OpKind::Insert | OpKind::Delete | OpKind::Find | OpKind::Update),
                                        "{ops:?} (sorted: {sort}) failed at op {i}, a {kind:?}, which cannot fail"
                                    );
                                }
                                aborted += 1;
                            }
                        }
                    }
                    (committed, reads, scans, aborted)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let threads_n = threads as u64;
    let mut committed: Vec<Committed> = Vec::new();
    let mut reads = Vec::new();
    let mut scans = Vec::new();
    let mut aborted = 0;
    for (c, r, sc, a) in logs {
        committed.extend(c);
        reads.extend(r);
        scans.extend(sc);
        aborted += a;
    }
    committed.sort_by_key(|c| c.txid);
    for w in committed.windows(2) {
        assert_ne!(w[0].txid, w[1].txid, "two transactions share txid {}", w[0].txid);
    }
    scans.sort_by_key(|s| s.txid);
    for scan in &scans {
        assert!(scan.lo < scan.txid && scan.txid <= scan.hi, "a snapshot's txid outside its call: {scan:?}");
        assert!(committed.binary_search_by_key(&scan.txid, |c| c.txid).is_err(), "a scan shares a txid: {scan:?}");
    }
    // Each scan holds the state after exactly the transactions below its txid.
    let mut next_scan = scans.iter().peekable();
    let check_scans = |model: &Model, below: u64, next_scan: &mut std::iter::Peekable<std::slice::Iter<'_, Scan>>| {
        while let Some(scan) = next_scan.next_if(|s| s.txid < below) {
            let want: Vec<(u64, u64)> =
                model.entries(scan.s).into_iter().filter(|(k, _)| (scan.from..=scan.to).contains(k)).collect();
            if scan.got != want {
                let missing: Vec<_> = want.iter().filter(|e| !scan.got.contains(e)).take(8).collect();
                let extra: Vec<_> = scan.got.iter().filter(|e| !want.contains(e)).take(8).collect();
                panic!(
                    "the scan at txid {} of {:?} {}..={} (called between watermarks {} and {}) is not the state \
                     at its txid: it lacks {missing:?} and has {extra:?}",
                    scan.txid, scan.s, scan.from, scan.to, scan.lo, scan.hi
                );
            }
        }
    };
    // Replay, keeping each key's history of (txid, value after) for the single reads.
    let mut model = Model::default();
    let mut history: BTreeMap<(StructId, u64), KeyHistory> = BTreeMap::new();
    for c in &committed {
        check_scans(&model, c.txid, &mut next_scan);
        match model.apply(&c.ops) {
            Outcome::Committed { results, .. } => {
                assert_eq!(
                    results, c.results,
                    "txid {}: {:?} returned {:?}, replay gives {:?}",
                    c.txid, c.ops, c.results, results
                )
            }
            other => panic!("txid {} ({:?}) committed, but its replay gives {other:?}", c.txid, c.ops),
        }
        for op in &c.ops {
            let now = model.maps.get(&op.structure).and_then(|m| m.get(&(op.key as u64))).copied();
            history.entry((op.structure, op.key as u64)).or_default().push((c.txid, now));
        }
    }
    check_scans(&model, u64::MAX, &mut next_scan);
    for r in &reads {
        let h = history.get(&(r.op.structure, r.op.key as u64)).map(Vec::as_slice).unwrap_or(&[]);
        // The window opens a few txids (one per thread) before the watermark read before the
        // call, but never before this thread's own last transaction: a read that misses this
        // thread's own last write of the key is stale however the others interleave.
        let lo = r.lo.saturating_sub(threads_n).max(r.own);
        // The value at txid lo, then every value set in (lo, hi].
        let at_lo = h.iter().rev().find(|(t, _)| *t <= lo).map(|(_, v)| *v).unwrap_or(None);
        let mut candidates = vec![at_lo];
        candidates.extend(h.iter().filter(|(t, _)| *t > lo && *t <= r.hi).map(|(_, v)| *v));
        if !candidates.contains(&r.result) {
            // Where the value read was set, if anywhere, and the key's history around the window.
            let set_at: Vec<u64> = h.iter().filter(|(_, v)| *v == r.result && v.is_some()).map(|(t, _)| *t).collect();
            let near: Vec<&(u64, Option<u64>)> = h.iter().filter(|(t, _)| *t + 50 >= lo && *t <= r.hi + 50).collect();
            panic!(
                "{:?} read {:?} between txids {lo} and {}, when the key held only {candidates:?}; \
                 that value was set by txids {set_at:?}; the key's history near the window: {near:?}",
                r.op, r.result, r.hi
            );
        }
    }
    for &s in &lists {
        assert_eq!(petra_recovery::battery::entries(&engine, s).unwrap(), model.entries(s), "final state of {s:?}");
    }
    // Not a degenerate run: at least a quarter of the transactions committed (on many keys, most
    // strict ops find their key absent and abort).
    assert!(committed.len() * 4 > threads * txs_per_thread, "{} committed, {aborted} aborted", committed.len());
    // Recovered as a crash would leave it: the same state.
    let Ok(pool) = engine.into_pool() else { panic!("a handle outlived its thread") };
    let (engine, report) = Engine::open(pool, engine_config()).unwrap();
    // Against the committed writers (a read-only transaction persists no descriptor, so the
    // count of all committed ones would pass with nothing folded).
    let writers = committed.iter().filter(|c| c.ops.iter().any(|op| !op.kind.is_read())).count() as u64;
    assert!(report.descriptors < writers, "the rounds folded nothing of {writers} writers: {report:?}");
    for &s in &lists {
        assert_eq!(petra_recovery::battery::entries(&engine, s).unwrap(), model.entries(s), "recovered state of {s:?}");
    }
    let nonempty = scans.iter().filter(|s| !s.got.is_empty()).count();
    assert!(nonempty * 4 > scans.len(), "{nonempty} of {} scans saw a key", scans.len());
    eprintln!(
        "{} committed, {} single reads, {} scans ({nonempty} non-empty), {aborted} aborted",
        committed.len(),
        reads.len(),
        scans.len()
    );
}

fn sim() -> Pool<SimMem> {
    Pool::create_in(SimMem::new(0, 256 << 20), &config()).unwrap()
}

#[test]
fn two_threads_on_hot_keys_are_serializable() {
    for seed in 0..4 {
        run(sim(), 2, 3000, 8, seed);
    }
}

#[test]
fn two_threads_on_many_keys_are_serializable() {
    // Keys revisited seldom: a descriptor slot is written again before the next transaction on
    // the key, so nothing may still lead into the slot once its round recycled it.
    for seed in 30..32 {
        run(sim(), 2, 4000, 256, seed);
    }
}

#[test]
fn four_threads_on_two_cores_are_serializable() {
    for seed in 10..12 {
        run(sim(), 4, 2000, 16, seed);
    }
}

#[test]
fn threads_on_a_real_mapping_and_many_keys_are_serializable() {
    // As above, on real memory: the slots recycled by a round are written again at once by the
    // other thread's transactions.
    let dir = petra_recovery::scratch_dir();
    for seed in [40, 41] {
        let pool = Pool::create(dir.path().join(format!("{seed}.pool")), &config()).unwrap();
        run(pool, 2, 30_000, 512, seed);
    }
}

#[test]
fn threads_on_a_real_mapping_are_serializable() {
    // Real atomics, real flushes, no simulator lock: the interleavings are the hardware's. With
    // safe points (the default policy's background syncer, and rounds held to what one covers):
    // the file, in memory where the engine keeps none, is treated as a file on a disk. (The test
    // above runs without them.)
    let dir = petra_recovery::scratch_dir();
    for (seed, threads) in [(20, 2), (21, 3), (22, 4)] {
        let pool = Pool::create(dir.path().join(format!("{seed}.pool")), &config()).unwrap().map_mem(AsPageCache);
        assert_eq!(pool.durability(), petra::mem::Durability::PageCache);
        run(pool, threads, 20_000, 8, seed);
    }
}

#[test]
fn ops_that_change_nothing_leave_no_reference_into_a_recycled_slot() {
    // Two threads of four strict ops each, mostly finds over 100 000 keys of a hash map, half of
    // them present: nine transactions in ten abort, and their ops, like the finds of those that
    // commit, change nothing, yet later transactions take their nodes from them. Rounds run on
    // their own (rings of one chunk, reused many times). Every reference a reader or a round
    // follows from one op to another transaction's is checked in debug builds to lead to a
    // finished descriptor with that op (a recycled slot, written again, would fail it); and a
    // recovery of what is left gives the state the engine held.
    let dir = petra_recovery::scratch_dir();
    let pool = Pool::create(dir.path().join("finds.pool"), &config()).unwrap();
    let engine = Engine::create(pool, engine_config()).unwrap();
    let map = engine.create_hash_map(1 << 17).unwrap();
    let mut h = engine.handle().unwrap();
    for chunk in (0..100_000u64).step_by(2).collect::<Vec<_>>().chunks(16) {
        let mut tx = Transaction::new();
        for &k in chunk {
            tx.put(map, k, k);
        }
        assert!(h.execute(&tx).unwrap().is_committed());
    }
    drop(h);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let engine = &engine;
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(50 + t);
                let mut h = engine.handle().unwrap();
                for _ in 0..200_000 {
                    let mut tx = Transaction::new();
                    for _ in 0..4 {
                        let k = rng.random_range(0..100_000u64);
                        match rng.random_range(0..20) {
                            0 | 1 => tx.insert(map, k, k),
                            2 | 3 => tx.delete(map, k),
                            4 => tx.update(map, k, k + 1),
                            _ => tx.find(map, k),
                        };
                    }
                    h.execute(&tx).unwrap();
                }
            });
        }
    });
    let before = engine.entries::<u64>(map).unwrap();
    assert!(engine.checkpoint_stats().rounds > 10, "{:?}", engine.checkpoint_stats());
    let Ok(pool) = engine.into_pool() else { panic!("a handle outlived its thread") };
    let (engine, _) = Engine::open(pool, engine_config()).unwrap();
    assert_eq!(engine.entries::<u64>(map).unwrap(), before);
}
