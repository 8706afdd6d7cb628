//! Space: deleted nodes are reclaimed through the epoch collector and reused; checkpoint rounds
//! keep the pool and its rings flat under a steady workload; a full descriptor ring (rounds
//! off) is left for a new one, never wrapped over live descriptors, until the pool is full.

use std::sync::Arc;

use petra::RecoveryReport;
use petra::mem::CrashPlan;
use petra::mem::{PMem, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{DurabilityPolicy, Engine, EngineConfig, EngineError, StructId, Transaction};
use petra_recovery::AsPageCache;
use petra_recovery::crash::CrashTest;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: 256 << 20, chunk_size: 64 << 10, mapping: Mapping::default() }
}

/// Rings of one 64 KiB chunk: 511 single-op list descriptors of 128 bytes after the header line;
/// no automatic checkpoint rounds, so that rings fill up.
fn small_rings() -> EngineConfig {
    EngineConfig::rings(64 << 10).checkpoint_fill(0)
}

/// An engine on small rings over `mem` (a pool made with `config`), with one list.
fn list_on_small_rings(mem: &Arc<SimMem>, config: &PoolConfig) -> (Engine<Arc<SimMem>>, StructId) {
    let engine = Engine::create(Pool::create_in(Arc::clone(mem), config).unwrap(), small_rings()).unwrap();
    let s = engine.create_list().unwrap();
    (engine, s)
}

/// Drops `engine` as a crash would and opens it again on small rings.
fn crash_and_reopen(engine: Engine<Arc<SimMem>>, mem: &Arc<SimMem>) -> (Engine<Arc<SimMem>>, RecoveryReport) {
    drop(engine.into_pool().unwrap());
    Engine::open(Pool::open_in(Arc::clone(mem)).unwrap(), small_rings()).unwrap()
}

#[test]
fn churn_through_many_keys_reuses_the_nodes_of_deleted_ones() {
    let dir = petra_recovery::scratch_dir();
    // A pool per kind and policy: without safe points, and with a safe point after every
    // transaction (a replaced value is held until its replacer is safe, see `petra/src/safe.rs`;
    // here it is at once, so the bounds are the same). The file is in memory, where the engine
    // keeps no safe points: it is treated as a file on a disk for them to run.
    for policy in [DurabilityPolicy::Process, DurabilityPolicy::Immediate] {
        for kind in petra_recovery::battery::ALL {
            let path = dir.path().join(format!("churn-{kind:?}-{policy}.pool"));
            let pool = Pool::create(path, &config()).unwrap().map_mem(AsPageCache);
            let engine = Engine::create(pool, EngineConfig::rings(32 << 20).durability(policy)).unwrap();
            churn(&engine, petra_recovery::battery::create(&engine, kind));
            assert_eq!(engine.safe_points() > 0, policy != DurabilityPolicy::Process, "{policy}");
        }
    }
}

/// A list whose deletes no later search passes stays flat while open: each step inserts a new
/// smallest key and deletes the largest, so no search after a removal reaches its node (a list's
/// removal marks the node and leaves the unlink to the next search past it), and only the
/// checkpoint rounds' sweeps unlink them. (Without the sweeps, 4 000 steps would link 4 000 nodes.)
#[test]
fn a_list_whose_deleted_nodes_no_search_passes_stays_flat_while_open() {
    const LIVE: u64 = 50;
    const STEPS: u64 = 4_000;
    let pool = Pool::create_in(SimMem::new(0, 256 << 20), &config()).unwrap();
    // Rings of one chunk, a round when a quarter of one is written: one every 128 writes or so.
    let engine = Engine::create(pool, EngineConfig::rings(64 << 10).checkpoint_fill(25)).unwrap();
    let s = engine.create_list().unwrap();
    let mut h = engine.handle().unwrap();
    let key = |i: u64| u64::MAX - i;
    let mut most_linked = 0;
    for i in 0..STEPS {
        assert!(h.execute(Transaction::new().insert(s, key(i), i)).unwrap().is_committed());
        if i >= LIVE {
            assert!(h.execute(Transaction::new().delete(s, key(i - LIVE))).unwrap().is_committed());
        }
        if i % 100 == 99 {
            most_linked = most_linked.max(engine.check_links(s).unwrap());
        }
    }
    let rounds = engine.checkpoint_stats().rounds;
    assert!(rounds >= STEPS / 256, "{rounds} rounds");
    // The live keys, and the nodes removed since the last round or still waiting for their
    // removal (the queue and the epoch): a round's worth of deletes, about 128.
    assert!(most_linked <= LIVE + 300, "up to {most_linked} nodes linked for {LIVE} keys");
    assert_eq!(engine.entries::<u64>(s).unwrap().len() as u64, LIVE);
}

/// The nodes of keys that have records (a checkpoint wrote them) leave their structure when a
/// transaction deletes the keys, before any checkpoint round: the Delete's removal leaves the
/// record for the round that folds the Delete to clear, and that round frees the blocks, which
/// new keys then reuse. (Such nodes used to stay linked until that round: with rounds off, for
/// good. Their blocks still wait for it.) After a crash nothing comes back: a record left
/// behind would bring its key back.
#[test]
fn deleting_checkpointed_keys_unlinks_their_nodes_before_any_round() {
    use petra_recovery::battery::{ALL, Kind};
    const KEYS: u64 = 3_000;
    let key = |i: u64| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 2;
    let rounds_off = || EngineConfig::rings(32 << 20).checkpoint_fill(0).durability(DurabilityPolicy::Process);
    for kind in ALL.into_iter().filter(|k| matches!(k, Kind::List | Kind::HashMap | Kind::SkipList | Kind::MdList)) {
        let mem = Arc::new(SimMem::new(0, 256 << 20));
        let engine = Engine::create(Pool::create_in(Arc::clone(&mem), &config()).unwrap(), rounds_off()).unwrap();
        let s = petra_recovery::battery::create(&engine, kind);
        let other = engine.create_list().unwrap();
        let mut h = engine.handle().unwrap();
        for i in 0..KEYS {
            assert!(h.execute(Transaction::new().insert(s, key(i), i)).unwrap().is_committed());
        }
        engine.checkpoint().unwrap();
        engine.checkpoint().unwrap();
        assert!(engine.checkpoint_stats().records >= KEYS, "{kind:?}: every key has a record");
        let chunks = engine.pool().chunk_counts().node;
        let rounds = engine.checkpoint_stats().rounds;
        for i in 0..KEYS {
            assert!(h.execute(Transaction::new().delete(s, key(i))).unwrap().is_committed());
        }
        // Writes elsewhere run the removals the epoch made due; a read past every key unlinks
        // the nodes a list's removals marked.
        let mut linked = u64::MAX;
        for step in 0..200u64 {
            for j in 0..16 {
                assert!(h.execute(Transaction::new().put(other, 1u64, step * 16 + j)).unwrap().is_committed());
            }
            assert_eq!(h.get(s, u64::MAX).unwrap(), None);
            linked = engine.check_links(s).unwrap();
            if linked == 0 {
                break;
            }
        }
        assert_eq!(linked, 0, "{kind:?}: nodes of deleted keys with records stay linked");
        assert_eq!(engine.checkpoint_stats().rounds, rounds, "{kind:?}: no round ran meanwhile");
        // The rounds that fold the deletes clear the records and free the blocks: new keys reuse
        // them.
        for _ in 0..4 {
            engine.checkpoint().unwrap();
            for j in 0..64 {
                assert!(h.execute(Transaction::new().put(other, 1u64, j)).unwrap().is_committed());
            }
        }
        for i in KEYS..2 * KEYS {
            assert!(h.execute(Transaction::new().insert(s, key(i), i)).unwrap().is_committed());
        }
        // An MDList's nodes come in several sizes, by where they sit in the tree (and the new
        // keys sit elsewhere): a chunk or two per size class.
        let grown = engine.pool().chunk_counts().node - chunks;
        let room = if kind == Kind::MdList { 8 } else { 1 };
        assert!(grown <= room, "{kind:?}: {grown} node chunks more for as many keys as were deleted");
        for i in KEYS..2 * KEYS {
            assert!(h.execute(Transaction::new().delete(s, key(i))).unwrap().is_committed());
        }
        drop(h);
        let (engine, _) = {
            drop(engine.into_pool().unwrap());
            Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), rounds_off()).unwrap()
        };
        assert!(engine.entries::<u64>(s).unwrap().is_empty(), "{kind:?}: a deleted key came back");
    }
}

/// A crash anywhere while deletes remove nodes that hold records, while the round that folds the
/// deletes clears those records, and while new keys reuse the freed blocks, recovers to the state
/// after the transactions acknowledged before it (and perhaps the one under way): no deleted key
/// comes back, and no record is found twice, also where a deleted key was inserted again before
/// the round. Every structure that removes nodes, each in its own pool.
#[test]
fn a_crash_while_nodes_with_records_are_removed_and_reused_recovers_a_prefix() {
    use petra_recovery::battery::{ALL, Kind};
    use std::collections::BTreeMap;
    #[derive(Clone, Copy)]
    enum Op {
        Insert,
        Delete,
        Read,
    }
    const N: u64 = 24;
    let rounds_off = EngineConfig::rings(256 << 10).checkpoint_fill(0).durability(DurabilityPolicy::Process);
    for kind in ALL.into_iter().filter(|k| matches!(k, Kind::List | Kind::HashMap | Kind::SkipList | Kind::MdList)) {
        // Keys 0..N present, each with a record (a checkpoint wrote them).
        let small = PoolConfig { max_size: 16 << 20, ..config() };
        let mem = Arc::new(SimMem::new(0, 16 << 20));
        let engine = Engine::create(Pool::create_in(Arc::clone(&mem), &small).unwrap(), rounds_off.clone()).unwrap();
        let s = petra_recovery::battery::create(&engine, kind);
        let mut h = engine.handle().unwrap();
        for k in 0..N {
            assert!(h.execute(Transaction::new().insert(s, k, k)).unwrap().is_committed());
        }
        drop(h);
        engine.checkpoint().unwrap();
        engine.checkpoint().unwrap();
        drop(engine.into_pool().unwrap());
        let image = Arc::into_inner(mem).unwrap().working_bytes();
        // The transactions: delete half the keys; read absent keys two at a time (each read
        // makes a node for its key, in a freed block, which no round gives a record: a block
        // freed too early would keep a deleted key's record on the media); insert as many new
        // keys and a few deleted ones again; fold; insert more (into the blocks freed). And the
        // state after each.
        let mut txs: Vec<(Op, u64)> = (0..N / 2).map(|k| (Op::Delete, k)).collect();
        txs.extend((0..N).map(|i| (Op::Read, 3 * N + 2 * i)));
        txs.extend((N..N + N / 2).chain(0..N / 8).map(|k| (Op::Insert, k)));
        let fold_at = txs.len();
        txs.extend((2 * N..2 * N + N / 2).map(|k| (Op::Insert, k)));
        let mut states = vec![(0..N).map(|k| (k, k)).collect::<BTreeMap<u64, u64>>()];
        for &(op, k) in &txs {
            let mut next = states.last().unwrap().clone();
            match op {
                Op::Insert => _ = next.insert(k, k),
                Op::Delete => _ = next.remove(&k),
                Op::Read => {}
            }
            states.push(next);
        }
        let test = CrashTest { exhaustive_bound: 16, samples: 4, max_points: 300, busiest: 16, ..CrashTest::new(11) };
        let workload = |mem: Arc<SimMem>| {
            let (engine, _) = Engine::open(Pool::open_in(mem).unwrap(), rounds_off.clone()).unwrap();
            let mut h = engine.handle().unwrap();
            // The memory's event count when each transaction returned.
            let mut acked = Vec::with_capacity(txs.len());
            for (i, &(op, k)) in txs.iter().enumerate() {
                if i == fold_at {
                    // The round that folds the deletes (and a second for its end), with a read
                    // past every key between them (a list unlinks the nodes it marked).
                    h.checkpoint();
                    assert_eq!(h.get(s, u64::MAX).unwrap(), None);
                    h.checkpoint();
                }
                let mut tx = Transaction::new();
                match op {
                    Op::Insert => _ = tx.insert(s, k, k),
                    Op::Delete => _ = tx.delete(s, k),
                    Op::Read => _ = tx.get(s, k).get(s, k + 1),
                }
                assert!(h.execute(&tx).unwrap().is_committed());
                acked.push(engine.pool().mem().events());
                assert_eq!(h.get(s, u64::MAX).unwrap(), None);
            }
            acked
        };
        let report = test.run(
            || SimMem::from_bytes(&image, 16 << 20),
            workload,
            |acked: &Vec<u64>, image, mem| {
                let pool = Pool::open_in(mem).map_err(|e| e.to_string())?;
                let (engine, _) = Engine::open(pool, rounds_off.clone()).map_err(|e| format!("recovery: {e}"))?;
                let got: BTreeMap<u64, u64> =
                    engine.entries::<u64>(s).map_err(|e| e.to_string())?.into_iter().collect();
                let done = acked.iter().filter(|&&e| e <= image.point.event).count();
                match (done..=(done + 1).min(txs.len())).find(|&p| states[p] == got) {
                    Some(_) => Ok(()),
                    None => Err(format!("{kind:?}: {done} transactions acknowledged, and the state is {got:?}")),
                }
            },
        );
        eprintln!("{kind:?}: {} crash points, {} images", report.points, report.images);
        report.assert_ok();
    }
}

/// An MDList churning over ever-new keys (each round inserts the next key and deletes the oldest,
/// so that about `LIVE` keys are present) stays flat while open: the nodes it links and the node
/// chunks of the pool stay bounded, however many keys went through it; and once every key is
/// deleted it links nothing and holds no more chunks than before. Keys are deleted before the
/// larger keys below them, so a deleted key's node often still routes them: the removal copies it
/// and removes the copy once its lists are empty. (Were deleted keys' nodes kept until the next
/// recovery, 20 000 rounds would link 20 000 nodes in 25 chunks of 64 KiB or more.)
#[test]
fn an_mdlist_churning_over_ever_new_keys_stays_flat_while_open() {
    const LIVE: u64 = 100;
    const ROUNDS: u64 = 20_000;
    let pool = Pool::create_in(SimMem::new(0, 256 << 20), &config()).unwrap();
    let engine = Engine::create(pool, EngineConfig::rings(1 << 20).durability(DurabilityPolicy::Process)).unwrap();
    let s = engine.create_mdlist().unwrap();
    let other = engine.create_list().unwrap();
    let before = engine.pool().chunk_counts().node;
    // Consecutive keys (their last digits), and keys a stride apart (higher dimensions too).
    for stride in [1u64, 0x9E37_79B9] {
        let mut h = engine.handle().unwrap();
        let key = |i: u64| i * stride;
        let (mut most_linked, mut most_chunks) = (0, 0);
        for i in 0..ROUNDS {
            assert!(h.execute(Transaction::new().insert(s, key(i), i)).unwrap().is_committed());
            if i >= LIVE {
                assert!(h.execute(Transaction::new().delete(s, key(i - LIVE))).unwrap().is_committed());
            }
            if i % 500 == 499 {
                most_linked = most_linked.max(engine.check_links(s).unwrap());
                most_chunks = most_chunks.max(engine.pool().chunk_counts().node - before);
            }
        }
        // The live keys, the marked nodes that still route them, and the nodes whose removal
        // waits in the queues or for a round (about 220 in this run, for either stride), where
        // 20 000 nodes would stay linked without removals; and a chunk or two per size class.
        assert!(most_linked <= 4 * LIVE + 64, "stride {stride:#x}: up to {most_linked} nodes linked for {LIVE} keys");
        assert!(most_chunks <= 8, "stride {stride:#x}: up to {most_chunks} node chunks for {LIVE} keys");
        for i in ROUNDS - LIVE..ROUNDS {
            assert!(h.execute(Transaction::new().delete(s, key(i))).unwrap().is_committed());
        }
        drop(h);
        // Drain the removals: rounds (which remove the nodes that have records), and writes
        // elsewhere, which run the removals the epoch made due.
        let mut linked = u64::MAX;
        for step in 0..400u64 {
            engine.checkpoint().unwrap();
            let mut h = engine.handle().unwrap();
            for j in 0..8 {
                assert!(h.execute(Transaction::new().put(other, 1u64, step * 8 + j)).unwrap().is_committed());
            }
            drop(h);
            linked = engine.check_links(s).unwrap();
            if linked == 0 {
                break;
            }
        }
        assert_eq!(linked, 0, "stride {stride:#x}: nodes of deleted keys stay linked");
        assert!(engine.entries::<u64>(s).unwrap().is_empty());
    }
    // A chunk or two per size class in use (the spread keys' nodes hold 1 to 32 slots); slab
    // chunks stay the allocator's once made.
    let chunks = engine.pool().chunk_counts().node - before;
    assert!(chunks <= 8, "{chunks} node chunks held once every key is deleted");
}

fn churn<M: PMem + 'static>(engine: &Engine<M>, s: petra::StructId) {
    use petra_recovery::battery::execute;
    let before = engine.pool().chunk_counts();
    let mut h = engine.handle().unwrap();
    // Fresh keys every round, so that every insert makes a new node (and, for byte values, a
    // new blob of 8 to 300 bytes).
    for round in 0..1_000u64 {
        for k in round * 50..round * 50 + 50 {
            assert!(execute(&mut h, Transaction::new().insert(s, k, round)).unwrap().is_committed());
        }
        for k in round * 50..round * 50 + 50 {
            assert!(execute(&mut h, Transaction::new().delete(s, k)).unwrap().is_committed());
        }
    }
    // The same 50 keys overwritten 400 times: every put replaces a value (a blob, for bytes).
    for round in 0..400u64 {
        for k in 0..50u64 {
            assert!(execute(&mut h, Transaction::new().put(s, k, round)).unwrap().is_committed());
        }
    }
    for k in 0..50u64 {
        assert!(execute(&mut h, Transaction::new().delete(s, k)).unwrap().is_committed());
    }
    // 50 000 nodes were created and deleted; without reclamation they would fill at least 37
    // chunks of 64 KiB (32-byte nodes and their 16-byte record areas; skiplist towers are
    // larger).
    let after = engine.pool().chunk_counts();
    let chunks = after.node - before.node;
    // A chunk or two per size class in use (skiplist towers of heights 1 to 5 use three).
    assert!(chunks <= 6, "{chunks} more node chunks for at most 50 live keys: deleted nodes are not reused");
    // Byte values: without reclamation, 70 000 blobs of 16 to 312 bytes would fill about 180
    // chunks; with it, a chunk per size class in use (12 classes hold 16 to 320 bytes).
    let blobs = after.blob - before.blob;
    assert!(blobs <= 14, "{blobs} more blob chunks for at most 50 live values: replaced blobs are not reused");
    assert!(petra_recovery::battery::entries(engine, s).unwrap().is_empty());
}

#[test]
fn a_thread_whose_ring_is_full_takes_another_and_recovery_reads_them_all() {
    let mem = Arc::new(SimMem::new(0, 256 << 20));
    let (engine, s) = list_on_small_rings(&mem, &config());
    let runs = |e: &Engine<Arc<SimMem>>| e.pool().chunk_counts().runs;
    let before = runs(&engine);
    let mut h = engine.handle().unwrap();
    for k in 0..2000u64 {
        assert!(h.execute(Transaction::new().put(s, k, k)).unwrap().is_committed());
    }
    // 2000 descriptors fill three rings and start a fourth.
    assert_eq!(runs(&engine) - before, 4);
    drop(h);
    let (engine, report) = crash_and_reopen(engine, &mem);
    assert_eq!((report.descriptors, report.present_keys), (2000, 2000));
    assert_eq!(engine.entries::<u64>(s).unwrap(), (0..2000).map(|k| (k, k)).collect::<Vec<_>>());
    // Recovery voided every descriptor: as many transactions again reuse the four rings.
    let before = runs(&engine);
    let mut h = engine.handle().unwrap();
    for k in 0..2000u64 {
        assert!(h.execute(Transaction::new().put(s, k, k + 1)).unwrap().is_committed());
    }
    assert_eq!(runs(&engine), before);
    assert_eq!(engine.entries::<u64>(s).unwrap(), (0..2000).map(|k| (k, k + 1)).collect::<Vec<_>>());
}

#[test]
fn a_ring_left_almost_full_by_a_dropped_handle_is_not_written_past_its_end() {
    let mem = Arc::new(SimMem::new(0, 256 << 20));
    let (engine, s) = list_on_small_rings(&mem, &config());
    // 511 descriptors of 128 bytes leave 64 bytes of the ring; its handle is dropped, not full.
    let mut h = engine.handle().unwrap();
    for k in 0..511u64 {
        assert!(h.execute(Transaction::new().put(s, k, k)).unwrap().is_committed());
    }
    drop(h);
    let before = engine.pool().chunk_counts().runs;
    let mut h = engine.handle().unwrap();
    assert!(h.execute(Transaction::new().put(s, 511u64, 511)).unwrap().is_committed());
    assert_eq!(engine.pool().chunk_counts().runs, before + 1, "the next descriptor takes a new ring");
    drop(h);
    let (engine, report) = crash_and_reopen(engine, &mem);
    assert_eq!((report.descriptors, report.present_keys), (512, 512));
    assert_eq!(engine.entries::<u64>(s).unwrap(), (0..512).map(|k| (k, k)).collect::<Vec<_>>());
}

#[test]
fn rings_grow_until_the_pool_is_full_then_transactions_are_refused_whole() {
    let mem = Arc::new(SimMem::new(0, 512 << 10));
    // Seven chunks: the engine's meta region, a node chunk, and five more. Recovery must be able to
    // write the nodes anew before it frees the old ones, so rings may take only four of them.
    let small = PoolConfig { initial_size: 0, max_size: 512 << 10, chunk_size: 64 << 10, mapping: Mapping::default() };
    let (engine, s) = list_on_small_rings(&mem, &small);
    let mut h = engine.handle().unwrap();
    let mut committed = 0u64;
    let err = loop {
        match h.execute(Transaction::new().put(s, committed % 4, committed)) {
            Ok(out) => {
                assert!(out.is_committed());
                committed += 1;
            }
            Err(e) => break e,
        }
    };
    // A ring region was refused, and so is the next transaction: nothing of either is there.
    assert!(
        matches!(err, EngineError::Alloc(petra::error::AllocError::PoolFull { requested, .. }) if requested == 64 << 10),
        "{err}"
    );
    // Four rings of 511 descriptors: the fifth would have taken the chunk kept for recovery.
    assert_eq!(committed, 4 * 511);
    let counts = engine.pool().chunk_counts();
    assert_eq!((counts.runs, counts.node, counts.free), (5, 1, 0), "{counts:?}");
    assert!(matches!(h.execute(Transaction::new().put(s, 9u64, 9)), Err(EngineError::Alloc(_))));
    let expect: Vec<(u64, u64)> = (committed - 4..committed)
        .map(|c| (c % 4, c))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .collect();
    assert_eq!(engine.entries::<u64>(s).unwrap(), expect);
    // A reopen recovers everything and empties the rings for reuse.
    drop(h);
    let (engine, report) = crash_and_reopen(engine, &mem);
    assert_eq!(report.present_keys, 4);
    assert_eq!(engine.entries::<u64>(s).unwrap(), expect);
    let mut h = engine.handle().unwrap();
    assert!(h.execute(Transaction::new().put(s, 9u64, 9)).unwrap().is_committed());
}

#[test]
fn a_full_pool_refuses_the_transaction_whole_and_still_recovers() {
    // Seven chunks: the engine's meta region, a ring of four, and two for nodes, of which one is
    // kept for recovery to write the nodes anew.
    let small = PoolConfig { initial_size: 0, max_size: 512 << 10, chunk_size: 64 << 10, mapping: Mapping::default() };
    let mem = Arc::new(SimMem::new(0, 512 << 10));
    let pool = Pool::create_in(Arc::clone(&mem), &small).unwrap();
    let rings = EngineConfig::rings(256 << 10);
    let engine = Engine::create(pool, rings.clone()).unwrap();
    let s = engine.create_list().unwrap();
    let mut h = engine.handle().unwrap();
    let mut key = 0u64;
    let err = loop {
        let mut tx = Transaction::new();
        for k in key..key + 8 {
            tx.insert(s, k, k);
        }
        match h.execute(&tx) {
            Ok(out) => {
                assert!(out.is_committed());
                key += 8;
            }
            Err(e) => break e,
        }
    };
    // The size refused is a list node's, as the failing op asked for it.
    assert!(matches!(err, EngineError::Alloc(petra::error::AllocError::PoolFull { requested: 32, .. })), "{err}");
    assert!(err.to_string().contains("pool full"), "{err}");
    // Nothing of the refused transaction is there; everything before it is.
    let entries = engine.entries::<u64>(s).unwrap();
    assert_eq!(entries.len() as u64, key);
    assert!(entries.iter().all(|&(k, v)| k == v && k < key));
    assert_eq!(engine.pool().chunk_counts().node, 1, "the second node chunk is the one kept");
    // The chunk kept lets recovery write every node anew, after a crash and in a clean close.
    drop(h);
    drop(engine.into_pool().unwrap());
    let (engine, report) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), rings.clone()).unwrap();
    assert_eq!((report.clean, report.present_keys), (false, key));
    assert_eq!(engine.entries::<u64>(s).unwrap(), entries);
    let mut h = engine.handle().unwrap();
    assert!(h.execute(Transaction::new().put(s, 0u64, 7)).unwrap().is_committed());
    drop(h);
    engine.close().unwrap();
    let (engine, report) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), rings).unwrap();
    assert_eq!((report.clean, report.present_keys), (true, key));
    assert_eq!(engine.entries::<u64>(s).unwrap()[0], (0, 7));
}

#[test]
fn txids_keep_increasing_across_restarts() {
    let mem = Arc::new(SimMem::new(0, 256 << 20));
    let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
    let mut engine = Engine::create(pool, EngineConfig::rings(1 << 20)).unwrap();
    let s = engine.create_list().unwrap();
    let mut h = engine.handle().unwrap();
    let txid = |out: petra::Outcome| match out {
        petra::Outcome::Committed { txid: Some(t), .. } => t,
        other => panic!("{other:?}"),
    };
    let mut last = txid(h.execute(Transaction::new().put(s, 1u64, 1)).unwrap());
    // Read-only transactions take txids that are never persisted.
    for _ in 0..10 {
        let t = txid(h.execute(Transaction::new().get(s, 1u64).get(s, 2u64)).unwrap());
        assert!(t > last);
        last = t;
    }
    for _ in 0..3 {
        drop(h);
        drop(engine.into_pool().unwrap()); // a crash, as far as the engine knows
        let (e, _) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), EngineConfig::rings(1 << 20)).unwrap();
        h = e.handle().unwrap();
        let t = txid(h.execute(Transaction::new().get(s, 1u64).get(s, 2u64)).unwrap());
        assert!(t > last, "txid {t} after a restart, {last} before");
        last = txid(h.execute(Transaction::new().put(s, 1u64, t)).unwrap());
        engine = e;
    }
}

#[test]
fn after_a_checkpoint_round_recovery_reads_only_the_descriptors_written_since() {
    let mem = Arc::new(SimMem::new(0, 256 << 20));
    let (engine, s) = list_on_small_rings(&mem, &config());
    let mut h = engine.handle().unwrap();
    // 1 500 descriptors: three small rings' worth.
    for k in 0..1_500u64 {
        assert!(h.execute(Transaction::new().put(s, k % 50, k)).unwrap().is_committed());
    }
    let report = h.checkpoint().expect("no other round");
    assert_eq!((report.descriptors, report.keys), (1_500, 50));
    let runs = engine.pool().chunk_counts().runs;
    for k in 0..7u64 {
        assert!(h.execute(Transaction::new().put(s, k, 1_000_000 + k)).unwrap().is_committed());
    }
    drop(h);
    let (engine, report) = crash_and_reopen(engine, &mem);
    // Only what was written after the round is read; the rings were reused, not added to.
    assert_eq!((report.descriptors, report.present_keys), (7, 50));
    assert_eq!(engine.pool().chunk_counts().runs, runs);
    let want: Vec<(u64, u64)> = (0..50).map(|k| (k, if k < 7 { 1_000_000 + k } else { 1_450 + k })).collect();
    assert_eq!(engine.entries::<u64>(s).unwrap(), want);
}

#[test]
fn a_crash_inside_the_recovery_of_a_full_pool_leaves_it_recoverable() {
    // A pool filled by nodes up to the room kept for recovery, left as a crash leaves it.
    let small = PoolConfig { initial_size: 0, max_size: 512 << 10, chunk_size: 64 << 10, mapping: Mapping::default() };
    let rings = EngineConfig::rings(256 << 10);
    let mem = Arc::new(SimMem::new(0, 512 << 10));
    let engine = Engine::create(Pool::create_in(Arc::clone(&mem), &small).unwrap(), rings.clone()).unwrap();
    let s = engine.create_list().unwrap();
    let mut h = engine.handle().unwrap();
    let mut key = 0u64;
    while h.execute(Transaction::new().put(s, key, key)).is_ok() {
        key += 1;
    }
    drop(h);
    drop(engine.into_pool().unwrap());
    let image = Arc::into_inner(mem).unwrap().working_bytes();
    // Crash the next recovery at every flush and fence (and some stores): the one after must
    // find the room again (a dead attempt's nodes hold the chunk that was kept) and every key.
    // Some 2 200 crash points: 800 spread over the recovery and the 16 with the most pending
    // lines (every one with `PETRA_CRASH_ALL_POINTS`).
    let test = CrashTest {
        plan: CrashPlan::all(0.02, 9),
        exhaustive_bound: 16,
        samples: 4,
        max_points: 800,
        busiest: 16,
        ..CrashTest::new(9)
    };
    let report = test.run(
        || SimMem::from_bytes(&image, 512 << 10),
        |mem| {
            Engine::open(Pool::open_in(mem).unwrap(), rings.clone()).unwrap();
        },
        |_, _, mem| {
            let pool = Pool::open_in(mem).map_err(|e| e.to_string())?;
            let (engine, _) = Engine::open(pool, rings.clone()).map_err(|e| format!("recovery: {e}"))?;
            let got = engine.entries::<u64>(s).map_err(|e| e.to_string())?;
            if got != (0..key).map(|k| (k, k)).collect::<Vec<_>>() {
                return Err(format!("{} keys of {key}", got.len()));
            }
            Ok(())
        },
    );
    eprintln!("{} crash points, {} images", report.points, report.images);
    report.assert_ok();
    assert!(report.points > 10);
}

#[test]
fn a_steady_workload_keeps_the_pool_and_its_rings_flat_and_recovery_short() {
    // Under Process the rounds alone recycle; under Periodic the rings also keep what was written
    // since the last safe point, so they stay as few only if safe points come often enough: here
    // each thread makes one every `SYNC_EVERY` transactions (the syncer's own interval, an hour,
    // never comes), at fixed points of the run, which a loaded machine cannot delay as it can
    // a background thread. (Every second, as by default, the rings of this workload would grow
    // towards the engine's budget for them.)
    steady_workload(DurabilityPolicy::Process);
    steady_workload(DurabilityPolicy::Periodic(std::time::Duration::from_secs(3600)));
}

/// Under a policy that keeps safe points, each thread of the steady workload makes one after
/// this many transactions: with two threads, fewer descriptors than a quarter of a ring between
/// two of them.
const SYNC_EVERY: usize = 2000;

fn steady_workload(policy: DurabilityPolicy) {
    // A fixed working set (64 keys in each structure of every kind), two threads running random
    // transactions of puts, removes and gets, two million in all, on rings of 4 MiB (about 30 000
    // descriptors: 30 laps each): the automatic rounds (at a quarter of a ring) fold and recycle
    // the descriptors. After the warm-up, neither the file nor the number of rings grows; and a
    // crash at the end leaves recovery less than half a ring of descriptors per ring to read.
    // (A thread kept off its core while pinned holds every round's recycling back: rings smaller
    // than what the others write meanwhile would grow in number. 1 MiB rings, 10 ms of this
    // workload, grew after the warm-up in one run of 20 here.)
    use rand::{Rng, SeedableRng};
    let dir = petra_recovery::scratch_dir();
    let path = dir.path().join("steady.pool");
    let rings = EngineConfig::rings(4 << 20).durability(policy);
    // In memory, where the engine keeps no safe points: treated as a file on a disk, for them.
    let pool = Pool::create(&path, &config()).unwrap().map_mem(AsPageCache);
    let engine = Engine::create(pool, rings.clone()).unwrap();
    let ids = petra_recovery::battery::create_all(&engine);
    let sizes = |engine: &Engine<_>| (std::fs::metadata(&path).unwrap().len(), engine.pool().chunk_counts().runs);
    let mut seen = Vec::new();
    for step in 0..10u64 {
        std::thread::scope(|sc| {
            for t in 0..2u64 {
                let (engine, ids) = (&engine, &ids);
                sc.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(step * 10 + t);
                    let mut h = engine.handle().unwrap();
                    // Sorted ops: no helping cycle, so every transaction commits.
                    let mut tx = Transaction::new();
                    tx.sorted(true);
                    for i in 0..100_000 {
                        if policy != DurabilityPolicy::Process && i % SYNC_EVERY == SYNC_EVERY - 1 {
                            engine.sync().unwrap();
                        }
                        tx.clear();
                        for _ in 0..rng.random_range(1..=3) {
                            let (s, k) = (ids[rng.random_range(0..ids.len())], rng.random_range(0..64u64));
                            match rng.random_range(0..4) {
                                0 | 1 => tx.put(s, k, rng.random_range(1..1_000_000)),
                                2 => tx.remove(s, k),
                                _ => tx.get(s, k),
                            };
                        }
                        assert!(petra_recovery::battery::execute(&mut h, &tx).unwrap().is_committed());
                    }
                });
            }
        });
        seen.push(sizes(&engine));
    }
    // The first steps size the pool; after them, nothing grows.
    assert!(seen[3..].iter().all(|&s| s == seen[3]), "{policy}: file bytes and region runs per step: {seen:?}");
    assert_eq!(engine.safe_points() > 0, policy != DurabilityPolicy::Process, "{policy}");
    let cap = (4 << 20) - 64;
    let ring_count = engine.rings() as u64;
    assert!(ring_count <= 4, "{policy}: {ring_count} rings for two threads");
    let (engine, report) = Engine::open(engine.into_pool().unwrap(), rings).unwrap();
    assert!(
        report.descriptors * 128 <= ring_count * cap / 2,
        "recovery read {} descriptors from {ring_count} rings of {cap} bytes",
        report.descriptors
    );
    assert!(report.present_keys > 0 && !engine.entries::<u64>(ids[0]).unwrap().is_empty());
}

/// The running engine holds exactly the blocks its structures use, no more (a leak) and no
/// fewer (a block given back twice): after two threads churn on every kind of structure (puts,
/// removes, overwrites of byte values, aborts), and the engine's deferred work has drained, the
/// pool's ledger of blocks handed out and given back (kept by the allocation calls, apart from
/// the chunk table and the structures) holds a node per present key, a blob per present byte
/// value and the head sentinels; and for the MDList, a node per linked node, the absent ones
/// that still route present keys among them (copies its removals made included). (Recovery rebuilds
/// the allocator from the structures, so the checks after a crash or a kill cannot see a leak
/// of the running engine.) Debug builds keep the ledger; a release build skips the check.
#[test]
fn the_running_engines_ledger_holds_exactly_what_its_structures_use() {
    use petra_recovery::battery::{Kind, create, entries};
    use rand::{Rng, SeedableRng};
    let kinds = [Kind::List, Kind::HashMap, Kind::SkipList, Kind::SkipListWide, Kind::HashMapWide, Kind::MdList];
    let pool = Pool::create_in(SimMem::new(0, 256 << 20), &config()).unwrap();
    let engine = Engine::create(pool, EngineConfig::rings(256 << 10).durability(DurabilityPolicy::Process)).unwrap();
    if engine.pool().ledger().is_none() {
        eprintln!("a release build keeps no ledger: nothing to check");
        return;
    }
    let ids: Vec<StructId> = kinds.iter().map(|&k| create(&engine, k)).collect();
    std::thread::scope(|sc| {
        for t in 0..2u64 {
            let (engine, ids) = (&engine, &ids);
            sc.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut h = engine.handle().unwrap();
                let mut tx = Transaction::new();
                for _ in 0..20_000 {
                    tx.clear();
                    for _ in 0..rng.random_range(1..=3) {
                        let (s, k) = (ids[rng.random_range(0..ids.len())], rng.random_range(0..64u64));
                        match rng.random_range(0..6) {
                            0 | 1 => tx.put(s, k, rng.random_range(1..1_000_000)),
                            2 => tx.remove(s, k),
                            // Strict ops: some fail, and their transactions abort.
                            3 => tx.insert(s, k, 7),
                            4 => tx.delete(s, k),
                            _ => tx.get(s, k),
                        };
                    }
                    petra_recovery::battery::execute(&mut h, &tx).unwrap();
                }
            });
        }
    });
    // Drain the deferred work: rounds (which queue the removals of the nodes they make absent),
    // and writes that run the removals and frees that came due; a write of a key that has a
    // node allocates nothing. Each step writes through a handle of its own: the nodes a handle
    // unlinks wait in its thread's bag of deferred work until the bag fills (64 items) or the
    // handle is dropped, which hands them on.
    assert!(engine.handle().unwrap().execute(Transaction::new().put(ids[0], 1000u64, 1)).unwrap().is_committed());
    let want = |engine: &Engine<SimMem>| {
        let present: usize = ids[..5].iter().map(|&s| entries(engine, s).unwrap().len()).sum();
        let blobs = entries(engine, ids[3]).unwrap().len();
        // The MDList's linked nodes: present keys' and, once drained, only the absent ones that
        // still route a present key in their lists (each a copy made by a removal, or the
        // original; see `an_mdlist_churning_over_ever_new_keys_stays_flat_while_open`).
        let md = engine.check_links(ids[5]).unwrap();
        // The heads of the list, the two skiplists and the MDList.
        present as u64 + blobs as u64 + md + 4
    };
    let mut held = Vec::new();
    for step in 0..400u64 {
        engine.checkpoint().unwrap();
        let mut h = engine.handle().unwrap();
        for i in 0..8 {
            assert!(h.execute(Transaction::new().put(ids[0], 1000u64, step * 8 + i)).unwrap().is_committed());
        }
        held.push(engine.pool().ledger().unwrap().held());
        if held.last() == Some(&want(&engine)) {
            return;
        }
    }
    let tail = &held[held.len() - 5..];
    // Per structure: nodes linked (absent keys' included) and keys present.
    let linked: Vec<(u64, usize)> =
        ids.iter().map(|&s| (engine.check_links(s).unwrap(), entries(&engine, s).unwrap().len())).collect();
    panic!(
        "the ledger holds {tail:?} blocks at the end of the drain, the structures use {} (linked and present per \
         structure: {linked:?})",
        want(&engine)
    );
}
