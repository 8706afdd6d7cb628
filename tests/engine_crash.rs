//! Crash images of concurrent transaction histories on one structure of each kind: after recovery, the state must
//! equal the replay, in txid order, of every transaction acknowledged before the crash plus some
//! subset of those in flight, each all or nothing, with every acknowledged result reproduced.

use std::sync::Arc;

use petra::mem::{CrashPlan, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{
    Engine, EngineConfig, EngineError, KeyWidth, Op, OpKind, Outcome, StructId, StructureKind, Transaction, Values,
};
use petra_recovery::crash::{CrashTest, Report};
use petra_recovery::model::Model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_LEN: u64 = 16 << 20;
/// One structure of each kind (see `petra_recovery::battery`).
const ALL: [StructId; petra_recovery::battery::ALL.len()] = petra_recovery::battery::IDS;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 512 << 10, max_size: MAX_LEN, chunk_size: 64 << 10, mapping: Mapping::default() }
}

fn engine_config() -> EngineConfig {
    EngineConfig::rings(128 << 10)
}

/// A committed transaction as its thread saw it.
#[derive(Debug, Clone)]
struct Acked {
    /// Simulator events before it started and when it returned.
    start: u64,
    end: u64,
    txid: u64,
    ops: Vec<Op>,
    results: Vec<Option<u64>>,
}

/// The keys the pool starts with: two in the first structure, one in each other.
fn initial_ops() -> Vec<Op> {
    let mut ops = vec![Op::new(OpKind::Put, ALL[0], 2u64, 20)];
    for (i, &s) in ALL.iter().enumerate() {
        ops.push(Op::new(OpKind::Put, s, i as u64 + 1, 100 * (i as u64 + 1)));
    }
    ops
}

/// A pool with an engine, one structure of each kind and a few keys, cleanly closed.
fn setup() -> SimMem {
    let mem = Arc::new(SimMem::new(0, MAX_LEN));
    let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
    let engine = Engine::create(pool, engine_config()).unwrap();
    let ids = petra_recovery::battery::create_all(&engine);
    assert_eq!(ids, ALL);
    let mut h = engine.handle().unwrap();
    let mut tx = Transaction::new();
    for op in initial_ops() {
        tx.op(op);
    }
    assert!(petra_recovery::battery::execute(&mut h, &tx).unwrap().is_committed());
    drop(h);
    engine.into_pool().unwrap().close().unwrap();
    Arc::into_inner(mem).unwrap()
}

fn random_tx(rng: &mut StdRng) -> Vec<Op> {
    let n = rng.random_range(1..=3);
    (0..n)
        .map(|_| {
            let kind = match rng.random_range(0..8) {
                0 => OpKind::Insert,
                1 => OpKind::Delete,
                2 => OpKind::Update,
                3 | 4 => OpKind::Put,
                5 | 6 => OpKind::Remove,
                _ => OpKind::Get,
            };
            Op::new(kind, ALL[rng.random_range(0..ALL.len())], rng.random_range(0..6u64), rng.random_range(1..1000))
        })
        .collect()
}

/// How a workload runs.
#[derive(Debug, Clone, Copy)]
struct Run {
    threads: usize,
    per_thread: usize,
    seed: u64,
    /// Close the engine at the end ([`Engine::close`]), or leave it as a crash would.
    close: bool,
    /// Each thread runs a checkpoint round after every this many transactions (0: never).
    checkpoint_every: usize,
    /// The engine's settings.
    engine: fn() -> EngineConfig,
    /// Each transaction's ops.
    ops: fn(&mut StdRng) -> Vec<Op>,
}

impl Run {
    fn new(threads: usize, per_thread: usize, seed: u64) -> Run {
        Run { threads, per_thread, seed, close: false, checkpoint_every: 0, engine: engine_config, ops: random_tx }
    }
}

/// Writes of the MDList alone, over keys whose nodes route one another (0 to 23: the last three
/// digits, so a key's node holds the larger keys that share its first digits): deletes and
/// removes leave nodes that still route present keys, whose removals copy them.
fn mdlist_tx(rng: &mut StdRng) -> Vec<Op> {
    let n = rng.random_range(1..=2);
    (0..n)
        .map(|_| {
            let kind = match rng.random_range(0..6) {
                0 => OpKind::Insert,
                1 => OpKind::Delete,
                2 | 3 => OpKind::Put,
                _ => OpKind::Remove,
            };
            Op::new(kind, ALL[3], rng.random_range(0..24u64), rng.random_range(1..1000))
        })
        .collect()
}

/// Opens (recovering) and runs `per_thread` random transactions on each of `threads` threads,
/// with checkpoint rounds between them if asked; then closes the engine or leaves it as a crash
/// would.
fn workload(mem: Arc<SimMem>, run: Run) -> Vec<Acked> {
    let Run { threads, per_thread, seed, close, checkpoint_every, .. } = run;
    let pool = Pool::open_in(Arc::clone(&mem)).unwrap();
    let (engine, _) = Engine::open(pool, (run.engine)()).unwrap();
    let acked = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (engine, mem) = (&engine, &mem);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 100 + t as u64);
                    let mut h = engine.handle().unwrap();
                    let mut acked = Vec::new();
                    for i in 0..per_thread {
                        if checkpoint_every > 0 && i % checkpoint_every == checkpoint_every - 1 {
                            h.checkpoint();
                        }
                        let ops = (run.ops)(&mut rng);
                        let mut tx = Transaction::new();
                        for op in &ops {
                            tx.op(*op);
                        }
                        let start = mem.events();
                        let out = petra_recovery::battery::execute(&mut h, &tx).unwrap();
                        let end = mem.events();
                        if let Outcome::Committed { results, txid: Some(txid) } = out
                            && ops.iter().any(|o| !o.kind.is_read())
                        {
                            acked.push(Acked { start, end, txid, ops, results });
                        }
                    }
                    acked
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    if close {
        engine.close().unwrap();
    }
    acked
}

/// The state after replaying `set` in txid order, if every acknowledged result in it is
/// reproduced.
fn replay(base: &Model, set: &[&Acked], acked_before: u64) -> Option<Model> {
    let mut set = set.to_vec();
    set.sort_by_key(|a| a.txid);
    let mut m = base.clone();
    for a in set {
        match m.apply(&a.ops) {
            Outcome::Committed { results, .. } if a.end > acked_before || results == a.results => {}
            _ => return None,
        }
    }
    Some(m)
}

fn check(acked: &[Acked], crash_event: u64, mem: SimMem) -> Result<(), String> {
    let pool = Pool::open_in(mem).map_err(|e| format!("open: {e}"))?;
    let (engine, report) = Engine::open(pool, engine_config()).map_err(|e| format!("recovery: {e}"))?;
    let got: Vec<Vec<(u64, u64)>> =
        ALL.iter().map(|&s| petra_recovery::battery::entries(&engine, s).unwrap()).collect();
    // The allocator holds exactly the nodes of the present keys and the list's head (the map's
    // buckets are a region).
    let live = report.allocator.live_blocks;
    if live != petra_recovery::battery::live_blocks(&engine, report.present_keys) {
        return Err(format!("{live} live blocks for {} keys and the heads", report.present_keys));
    }
    let mut base = Model::default();
    base.apply(&initial_ops());
    let done: Vec<&Acked> = acked.iter().filter(|a| a.end <= crash_event).collect();
    let in_flight: Vec<&Acked> = acked.iter().filter(|a| a.start <= crash_event && a.end > crash_event).collect();
    for mask in 0u32..1 << in_flight.len() {
        let mut set = done.clone();
        set.extend(in_flight.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, a)| *a));
        if let Some(m) = replay(&base, &set, crash_event)
            && got == ALL.iter().map(|&s| m.entries(s)).collect::<Vec<_>>()
        {
            return Ok(());
        }
    }
    Err(format!(
        "recovered {got:?}; no replay of the {} acknowledged plus a subset of the {} in flight gives it",
        done.len(),
        in_flight.len()
    ))
}

fn crash_run(run: Run) -> Report {
    let seed = run.seed;
    let test = CrashTest { plan: CrashPlan::all(0.02, seed), exhaustive_bound: 32, samples: 6, ..CrashTest::new(seed) };
    test.run(setup, |mem| workload(mem, run), |acked, image, mem| check(acked, image.point.event, mem))
}

#[test]
fn recovery_keeps_every_acknowledged_transaction_and_nothing_torn() {
    let mut total = Report::default();
    for seed in 0..3 {
        total.merge(crash_run(Run::new(2, 10, seed)));
    }
    eprintln!("{} crash points, {} images", total.points, total.images);
    total.assert_ok();
    assert!(total.images >= 10_000, "only {} crash images", total.images);
}

#[test]
fn checkpoint_rounds_beside_transactions_keep_every_acknowledged_one_across_crashes() {
    // Both threads run a round every third transaction (the other's transactions go on beside
    // it): crash images at every flush and fence of the rounds too.
    let mut total = Report::default();
    for seed in 20..23 {
        total.merge(crash_run(Run { checkpoint_every: 3, ..Run::new(2, 12, seed) }));
    }
    eprintln!("{} crash points, {} images", total.points, total.images);
    total.assert_ok();
    assert!(total.images >= 5_000, "only {} crash images", total.images);
}

#[test]
fn mdlist_removals_in_flight_keep_every_acknowledged_transaction_across_crashes() {
    // MDList writes alone, with a round every third transaction of each thread: the epoch
    // advances and the writers run the removals that came due (unlinks, copies of nodes that
    // route others, and the removals of copies once their lists empty) between crash points.
    assert_eq!(petra_recovery::battery::ALL[3], petra_recovery::battery::Kind::MdList);
    let mut total = Report::default();
    for seed in 40..43 {
        total.merge(crash_run(Run { checkpoint_every: 3, ops: mdlist_tx, ..Run::new(2, 16, seed) }));
    }
    eprintln!("{} crash points, {} images", total.points, total.images);
    total.assert_ok();
    assert!(total.images >= 5_000, "only {} crash images", total.images);
}

#[test]
fn rings_reused_in_laps_after_checkpoint_rounds_recover_only_what_came_after() {
    // Rings of one chunk (511 one-op descriptors): 1 200 transactions on two threads go round
    // them twice, slots holding descriptors of an earlier lap (at or below the checkpoint txid)
    // that recovery must not replay. Crash points spread evenly over the run.
    let run = Run { checkpoint_every: 40, engine: || EngineConfig::rings(64 << 10), ..Run::new(2, 600, 31) };
    let test = CrashTest {
        plan: CrashPlan::all(0.002, 31),
        exhaustive_bound: 16,
        samples: 3,
        max_points: 700,
        ..CrashTest::new(31)
    };
    let report = test.run(setup, |mem| workload(mem, run), |acked, image, mem| check(acked, image.point.event, mem));
    eprintln!("{} crash points, {} images", report.points, report.images);
    report.assert_ok();
    assert!(report.points >= 500);
}

#[test]
fn a_crash_during_recovery_is_recovered() {
    // Before: a history run and left without close (every acknowledged transaction persisted).
    let (before, acked) = {
        let mem = Arc::new(setup());
        let acked = workload(Arc::clone(&mem), Run::new(1, 15, 7));
        let mem = Arc::into_inner(mem).unwrap();
        (mem.working_bytes(), acked)
    };
    // Crash at every point of the next open's recovery, and recover from each image.
    let test = CrashTest { plan: CrashPlan::all(0.05, 5), exhaustive_bound: 64, samples: 8, ..CrashTest::new(5) };
    let report = test.run(
        || SimMem::from_bytes(&before, MAX_LEN),
        |mem| {
            let pool = Pool::open_in(mem).unwrap();
            Engine::open(pool, engine_config()).unwrap();
        },
        |_, _, mem| check(&acked, u64::MAX, mem),
    );
    eprintln!("{} crash points in recovery, {} images", report.points, report.images);
    report.assert_ok();
    assert!(report.points > 20);
}

#[test]
fn a_crash_during_a_clean_close_is_recovered_and_a_finished_one_skips_recovery() {
    // Transactions, then `Engine::close` (their descriptors folded into nodes, the clean marks):
    // crash images all through, each recovered and checked like any other.
    let test = CrashTest { plan: CrashPlan::all(0.05, 11), exhaustive_bound: 32, samples: 6, ..CrashTest::new(11) };
    let closing = Run { close: true, ..Run::new(1, 12, 11) };
    let report =
        test.run(setup, |mem| workload(mem, closing), |acked, image, mem| check(acked, image.point.event, mem));
    eprintln!("{} crash points, {} images", report.points, report.images);
    report.assert_ok();
    assert!(report.points > 20);
    // Without a crash: the next open reads no descriptor, and a crash after it (transactions
    // and no close) recovers from the nodes the close left plus the new descriptors.
    let mem = Arc::new(setup());
    let first = workload(Arc::clone(&mem), closing);
    let pool = Pool::open_in(Arc::clone(&mem)).unwrap();
    let (engine, report) = Engine::open(pool, engine_config()).unwrap();
    assert!(report.clean && report.descriptors == 0, "{report:?}");
    drop(engine.into_pool().unwrap());
    let second = workload(Arc::clone(&mem), Run::new(1, 12, 12));
    let mut all = first;
    all.extend(second);
    check(&all, u64::MAX, Arc::into_inner(mem).unwrap()).unwrap();
}

#[test]
fn an_interrupted_engine_create_leaves_no_engine_or_a_whole_one() {
    let test = CrashTest { plan: CrashPlan::all(0.1, 3), exhaustive_bound: 64, samples: 8, ..CrashTest::new(3) };
    let report = test.run(
        || {
            let mem = Arc::new(SimMem::new(0, MAX_LEN));
            Pool::create_in(Arc::clone(&mem), &config()).unwrap().close().unwrap();
            Arc::into_inner(mem).unwrap()
        },
        |mem| {
            let engine = Engine::create(Pool::open_in(mem).unwrap(), engine_config()).unwrap();
            petra_recovery::battery::create_all(&engine);
        },
        |_, _, mem| {
            let pool = Pool::open_in(mem).map_err(|e| e.to_string())?;
            match Engine::open(pool, engine_config()) {
                Ok((engine, report)) if report.present_keys == 0 => {
                    // Whatever structures were created are empty and usable.
                    for s in engine.structures() {
                        if !petra_recovery::battery::entries(&engine, s).map_err(|e| e.to_string())?.is_empty() {
                            return Err("a new structure is not empty".into());
                        }
                    }
                    Ok(())
                }
                Ok((_, report)) => Err(format!("{} keys in a pool where none was written", report.present_keys)),
                Err(EngineError::NoEngine) => Ok(()),
                Err(e) => Err(format!("a crash during create left a broken engine: {e}")),
            }
        },
    );
    report.assert_ok();
}

#[test]
fn a_replaced_blob_reused_leaves_the_rest_of_its_transaction_standing() {
    // A transaction writes a blob to a key of the byte-valued skiplist and a word to the list; the
    // blob is then replaced (by a later transaction, or by a later op of the same one), freed,
    // and its block reused. The first transaction's descriptor is still in its ring and its blob
    // no longer matches its hash: recovery must see that the blob was replaced, not torn, and
    // keep the word.
    let mem = Arc::new(SimMem::new(0, MAX_LEN));
    let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
    let engine = Engine::create(pool, engine_config()).unwrap();
    let list = engine.create_list().unwrap();
    let bytes = engine.create_structure(StructureKind::SkipList, KeyWidth::U64, Values::Bytes).unwrap();
    let mut h = engine.handle().unwrap();
    let replaced = |out: Outcome, i: usize| match out {
        Outcome::Committed { results, .. } => results[i].expect("a replaced value"),
        aborted => panic!("{aborted:?}"),
    };
    // By a later transaction.
    assert!(
        h.execute(Transaction::new().put_bytes(bytes, 1u64, &[7u8; 40]).put(list, 7u64, 70)).unwrap().is_committed()
    );
    let first = replaced(h.execute(Transaction::new().put_bytes(bytes, 1u64, &[8u8; 40])).unwrap(), 0);
    // By a later op of the same transaction.
    let tx = h.execute(
        Transaction::new().put_bytes(bytes, 2u64, &[5u8; 40]).put_bytes(bytes, 2u64, &[6u8; 40]).put(list, 8u64, 80),
    );
    let second = replaced(tx.unwrap(), 1);
    let mut reused = [false; 2];
    for k in 3..1000u64 {
        assert!(h.execute(Transaction::new().put_bytes(bytes, k, &[9u8; 40])).unwrap().is_committed());
        let w = h.range(bytes, k..=k).unwrap()[0].1;
        reused[0] |= w == first;
        reused[1] |= w == second;
        if reused == [true; 2] {
            break;
        }
    }
    assert_eq!(reused, [true; 2], "the replaced blobs' blocks were never reused");
    drop(h);
    drop(engine.into_pool().unwrap()); // not closed: the next open recovers from the rings
    let (engine, _) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), engine_config()).unwrap();
    assert_eq!(
        engine.entries::<u64>(list).unwrap(),
        vec![(7, 70), (8, 80)],
        "a word op was dropped with a replaced blob"
    );
    let mut h = engine.handle().unwrap();
    let got =
        h.range_with(bytes, 1u64..=2, |e, blobs| e.iter().map(|&(_, w)| blobs.to_vec(w).unwrap()).collect::<Vec<_>>());
    assert_eq!(got.unwrap(), vec![vec![8u8; 40], vec![6u8; 40]]);
}
