//! Crash images of concurrent transaction histories on a list and a hash map: after recovery, the set must
//! equal the replay, in txid order, of every transaction acknowledged before the crash plus some
//! subset of those in flight, each all or nothing, with every acknowledged result reproduced.

use std::sync::Arc;

use petra::mem::{CrashPlan, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{Engine, EngineConfig, EngineError, Op, OpKind, Outcome, StructId, Transaction};
use petra_recovery::crash::{CrashTest, Report};
use petra_suite::model::Model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_LEN: u64 = 16 << 20;
/// A list, a hash map and a skiplist.
const ALL: [StructId; 4] = petra_suite::kinds::IDS;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 512 << 10, max_size: MAX_LEN, chunk_size: 64 << 10, mapping: Mapping::default() }
}

fn engine_config() -> EngineConfig {
    EngineConfig { ring_bytes: 128 << 10 }
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
    let mut ops = vec![Op { kind: OpKind::Put, structure: ALL[0], key: 2, value: 20 }];
    for (i, &s) in ALL.iter().enumerate() {
        ops.push(Op { kind: OpKind::Put, structure: s, key: i as u64 + 1, value: 100 * (i as u64 + 1) });
    }
    ops
}

/// A pool with an engine, one structure of each kind and a few keys, cleanly closed.
fn setup() -> SimMem {
    let mem = Arc::new(SimMem::new(0, MAX_LEN));
    let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
    let engine = Engine::create(pool, engine_config()).unwrap();
    let ids = petra_suite::kinds::create_all(&engine);
    assert_eq!(ids, ALL);
    let mut h = engine.handle().unwrap();
    let mut tx = Transaction::new();
    for op in initial_ops() {
        tx.op(op);
    }
    assert!(h.execute(&tx).unwrap().is_committed());
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
            Op {
                kind,
                structure: ALL[rng.random_range(0..ALL.len())],
                key: rng.random_range(0..6),
                value: rng.random_range(1..1000),
            }
        })
        .collect()
}

/// Opens (recovering) and runs `per_thread` random transactions on each of `threads` threads.
fn workload(mem: Arc<SimMem>, threads: usize, per_thread: usize, seed: u64) -> Vec<Acked> {
    let pool = Pool::open_in(Arc::clone(&mem)).unwrap();
    let (engine, _) = Engine::open(pool, engine_config()).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (engine, mem) = (&engine, &mem);
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 100 + t as u64);
                    let mut h = engine.handle().unwrap();
                    let mut acked = Vec::new();
                    for _ in 0..per_thread {
                        let ops = random_tx(&mut rng);
                        let mut tx = Transaction::new();
                        for op in &ops {
                            tx.op(*op);
                        }
                        let start = mem.events();
                        let out = h.execute(&tx).unwrap();
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
    })
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
    let got: Vec<Vec<(u64, u64)>> = ALL.iter().map(|&s| engine.entries(s).unwrap()).collect();
    // The allocator holds exactly the nodes of the present keys and the list's head (the map's
    // buckets are a region).
    let live = report.allocator.live_blocks;
    if live != report.present_keys + petra_suite::kinds::HEADS {
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

fn crash_run(seed: u64, threads: usize, per_thread: usize) -> Report {
    let test = CrashTest { plan: CrashPlan::all(0.02, seed), exhaustive_bound: 32, samples: 6, ..CrashTest::new(seed) };
    test.run(
        setup,
        |mem| workload(mem, threads, per_thread, seed),
        |acked, image, mem| check(acked, image.point.event, mem),
    )
}

#[test]
fn recovery_keeps_every_acknowledged_transaction_and_nothing_torn() {
    let mut total = Report::default();
    for seed in 0..3 {
        total.merge(crash_run(seed, 2, 10));
    }
    eprintln!("{} crash points, {} images", total.points, total.images);
    total.assert_ok();
    assert!(total.images >= 10_000, "only {} crash images", total.images);
}

#[test]
fn a_crash_during_recovery_is_recovered() {
    // Before: a history run and left without close (every acknowledged transaction persisted).
    let (before, acked) = {
        let mem = Arc::new(setup());
        let acked = workload(Arc::clone(&mem), 1, 15, 7);
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
            petra_suite::kinds::create_all(&engine);
        },
        |_, _, mem| {
            let pool = Pool::open_in(mem).map_err(|e| e.to_string())?;
            match Engine::open(pool, engine_config()) {
                Ok((engine, report)) if report.present_keys == 0 => {
                    // Whatever structures were created are empty and usable.
                    for s in engine.structures() {
                        if !engine.entries(s).map_err(|e| e.to_string())?.is_empty() {
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
