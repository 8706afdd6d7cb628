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
                        let tx = petra_recovery::battery::transaction(&ops);
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

/// A single read ([`Handle::get`](petra::Handle::get)) as its thread saw it.
#[derive(Debug, Clone)]
struct Read {
    /// The simulator event when it returned.
    end: u64,
    s: StructId,
    key: u64,
    result: Option<u64>,
}

/// Whether the single reads acknowledged before the crash are explained by the history `set`
/// (acknowledged and in-flight transactions recovered): a read returns only what a persisted
/// transaction wrote (a reader that meets an unpersisted one persists it first), so a value read
/// names its writer (every value is written once), which must be in `set`, or was there in the
/// state `base` the run started from.
fn reads_explained(base: &Model, reads: &[Read], set: &[&Acked], crash_event: u64) -> bool {
    reads.iter().filter(|r| r.end <= crash_event).all(|r| {
        let Some(v) = r.result else { return true };
        let wrote =
            |op: &Op| op.structure == r.s && op.key == r.key as u128 && op.value == v && op.kind.writes() == Some(true);
        base.maps.get(&r.s).and_then(|m| m.get(&r.key)) == Some(&v) || set.iter().any(|a| a.ops.iter().any(wrote))
    })
}

fn check(acked: &[Acked], crash_event: u64, mem: SimMem) -> Result<(), String> {
    check_with_reads(acked, &[], crash_event, mem)
}

/// [`check`], with single reads that the recovered history must explain too. Read-only
/// transactions acknowledged before the crash take their place in the txid order, and their
/// results must be reproduced like any other's.
fn check_with_reads(acked: &[Acked], reads: &[Read], crash_event: u64, mem: SimMem) -> Result<(), String> {
    let mut base = Model::default();
    base.apply(&initial_ops());
    check_from(&base, acked, reads, crash_event, mem)
}

/// [`check_with_reads`] of a history that started from the state `base`.
fn check_from(base: &Model, acked: &[Acked], reads: &[Read], crash_event: u64, mem: SimMem) -> Result<(), String> {
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
    let runs = report.allocator.live_runs;
    if runs != petra_recovery::battery::live_runs(&engine) {
        return Err(format!("{runs} live blob runs for {} large values", petra_recovery::battery::live_runs(&engine)));
    }
    let done: Vec<&Acked> = acked.iter().filter(|a| a.end <= crash_event).collect();
    // A read-only transaction in flight changes nothing and promises nothing.
    let in_flight: Vec<&Acked> = acked
        .iter()
        .filter(|a| a.start <= crash_event && a.end > crash_event && a.ops.iter().any(|o| !o.kind.is_read()))
        .collect();
    let mut unexplained = None;
    for mask in 0u32..1 << in_flight.len() {
        let mut set = done.clone();
        set.extend(in_flight.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, a)| *a));
        if let Some(m) = replay(base, &set, crash_event)
            && got == ALL.iter().map(|&s| m.entries(s)).collect::<Vec<_>>()
        {
            match reads.iter().find(|r| !reads_explained(base, std::slice::from_ref(r), &set, crash_event)) {
                None => return Ok(()),
                Some(r) => unexplained = Some(r),
            }
        }
    }
    if let Some(r) = unexplained {
        return Err(format!(
            "recovered {got:?}, a replay of the acknowledged and in-flight transactions, but none that holds \
             the write of {:?} to key {} of {:?} that a single read returned before the crash",
            r.result, r.key, r.s
        ));
    }
    Err(format!(
        "recovered {got:?}; no replay of the {} acknowledged plus a subset of the {} in flight gives it{}",
        done.len(),
        in_flight.len(),
        if reads.is_empty() { String::new() } else { " and explains the single reads".into() }
    ))
}

fn crash_run(run: Run) -> Report {
    let seed = run.seed;
    // Some 1 300 crash points a run: 700 spread over it and the 16 with the most pending lines
    // (every one with `PETRA_CRASH_ALL_POINTS`).
    let test = CrashTest {
        plan: CrashPlan::all(0.02, seed),
        exhaustive_bound: 32,
        samples: 6,
        max_points: 700,
        busiest: 16,
        ..CrashTest::new(seed)
    };
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
fn process_kills_among_two_threads_leave_nothing_recovery_takes_for_damage() {
    // A kill keeps every store: recovery checks the structures against the records (the same
    // boot), so a structure caught in the middle of a change (an insert's adoption, a removal's
    // copy, a helper's step, a recovery's rewrite at the open) must read as the state the
    // records and descriptors give. Two threads with rounds every third transaction, on every
    // structure and on the MDList alone.
    let mut total = Report::default();
    for seed in 60..63 {
        for ops in [random_tx, mdlist_tx] {
            let run = Run { checkpoint_every: 3, ops, ..Run::new(2, 16, seed) };
            let test = CrashTest { plan: CrashPlan::all(0.2, seed), kills: true, ..CrashTest::new(seed) };
            total.merge(test.run(
                setup,
                |mem| workload(mem, run),
                |acked, image, mem| check(acked, image.point.event, mem),
            ));
        }
    }
    eprintln!("{} kills", total.images);
    total.assert_ok();
    assert!(total.images >= 5_000, "only {} kills", total.images);
}

/// What a mixed workload acknowledged: its committed transactions (writers and read-only ones,
/// with their txids) and its single reads.
#[derive(Debug, Default)]
struct Mixed {
    acked: Vec<Acked>,
    reads: Vec<Read>,
}

/// One step of a mixed workload: a single read (a third), a read-only transaction of two or
/// three ops (a sixth), else a writer of one to three ops on four keys a structure (a third of
/// them on the skiplist of byte values). A read asks for a key the thread wrote last one time in
/// two, so that many reads find a value. Every value written is written once (`tag`, thread, step
/// and op in its bits), so a value read names its writer; a write to the skiplist of byte values
/// is large (a run of chunks, [`LARGE`](petra_recovery::battery::LARGE)) one time in two.
enum Step {
    Read(StructId, u64),
    Tx(Vec<Op>),
}

fn mixed_step(rng: &mut StdRng, last: Option<(StructId, u64)>, tag: u64, t: usize, i: usize) -> Step {
    let s = |rng: &mut StdRng| ALL[rng.random_range(0..ALL.len())];
    match rng.random_range(0..6) {
        0 | 1 => match last.filter(|_| rng.random_bool(0.5)) {
            Some((s, k)) => Step::Read(s, k),
            None => Step::Read(s(rng), rng.random_range(0..4u64)),
        },
        2 => {
            let n = rng.random_range(2..=3);
            let kind = |rng: &mut StdRng| if rng.random_bool(0.5) { OpKind::Get } else { OpKind::Find };
            Step::Tx((0..n).map(|_| Op::new(kind(rng), s(rng), rng.random_range(0..4u64), 0)).collect())
        }
        _ => {
            let n = rng.random_range(1..=3);
            let ops = (0..n)
                .map(|j| {
                    let kind = match rng.random_range(0..10) {
                        0 => OpKind::Insert,
                        1 => OpKind::Delete,
                        2 | 3 => OpKind::Update,
                        4 => OpKind::Remove,
                        _ => OpKind::Put,
                    };
                    // A third of the writes go to the skiplist of byte values.
                    let structure = if rng.random_bool(0.33) { ALL[4] } else { s(rng) };
                    let mut value = tag | ((t as u64 + 1) << 32) | (i as u64) << 4 | j as u64;
                    if structure == ALL[4] && rng.random_bool(0.5) {
                        value |= petra_recovery::battery::LARGE;
                    }
                    Op::new(kind, structure, rng.random_range(0..4u64), value)
                })
                .collect();
            Step::Tx(ops)
        }
    }
}

/// Opens (recovering) and runs `per_thread` steps of [`mixed_step`] on each of `threads` threads,
/// and leaves the engine as a crash would. `tag` is or-ed into every value written (bits 40 to
/// 61), so that runs one after the other write values of their own.
fn mixed_workload(mem: Arc<SimMem>, threads: usize, per_thread: usize, seed: u64, tag: u64) -> Mixed {
    let pool = Pool::open_in(Arc::clone(&mem)).unwrap();
    let (engine, _) = Engine::open(pool, engine_config()).unwrap();
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (engine, mem) = (&engine, &mem);
                sc.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 100 + t as u64);
                    let mut h = engine.handle().unwrap();
                    let mut log = Mixed::default();
                    let mut last = None;
                    for i in 0..per_thread {
                        match mixed_step(&mut rng, last, tag, t, i) {
                            Step::Read(s, key) => {
                                let result = petra_recovery::battery::get(&mut h, s, key).unwrap();
                                log.reads.push(Read { end: mem.events(), s, key, result });
                            }
                            Step::Tx(ops) => {
                                let tx = petra_recovery::battery::transaction(&ops);
                                let start = mem.events();
                                let out = petra_recovery::battery::execute(&mut h, &tx).unwrap();
                                let end = mem.events();
                                if let Outcome::Committed { results, txid: Some(txid) } = out {
                                    if let Some(w) = ops.iter().rfind(|o| o.kind.writes() == Some(true)) {
                                        last = Some((w.structure, w.key as u64));
                                    }
                                    log.acked.push(Acked { start, end, txid, ops, results });
                                }
                            }
                        }
                    }
                    log
                })
            })
            .collect();
        let mut all = Mixed::default();
        for h in hs {
            let log = h.join().unwrap();
            all.acked.extend(log.acked);
            all.reads.extend(log.reads);
        }
        all
    })
}

#[test]
fn single_reads_read_only_transactions_and_large_values_of_three_threads_are_explained_after_a_crash() {
    // Three threads; the crash points spread over the run, plus those with the most pending
    // lines (large values written, their descriptors not yet fenced).
    let mut total = Report::default();
    let (mut reads, mut read_only, mut large) = (0, 0, 0);
    for seed in 40..42 {
        let test = CrashTest {
            plan: CrashPlan::all(0.002, seed),
            exhaustive_bound: 32,
            samples: 6,
            max_points: 100,
            busiest: 24,
            ..CrashTest::new(seed)
        };
        let report = test.run(
            setup,
            |mem| {
                let log = mixed_workload(mem, 3, 16, seed, 0);
                reads += log.reads.iter().filter(|r| r.result.is_some()).count();
                read_only += log.acked.iter().filter(|a| a.ops.iter().all(|o| o.kind.is_read())).count();
                large += log
                    .acked
                    .iter()
                    .flat_map(|a| &a.ops)
                    .filter(|o| o.kind.writes() == Some(true) && petra_recovery::battery::is_large(o.value))
                    .count();
                log
            },
            |log, image, mem| check_with_reads(&log.acked, &log.reads, image.point.event, mem),
        );
        total.merge(report);
    }
    eprintln!(
        "{} crash points, {} images; {reads} single reads of a value, {read_only} read-only transactions, \
         {large} large values written",
        total.points, total.images
    );
    total.assert_ok();
    assert!(reads >= 8 && read_only >= 3 && large >= 6, "a degenerate history");
}

/// The state of every structure of the engine in `mem` (recovering it), as the model.
fn recovered_model(mem: &Arc<SimMem>) -> Model {
    let (engine, _) = Engine::open(Pool::open_in(Arc::clone(mem)).unwrap(), engine_config()).unwrap();
    let mut m = Model::default();
    for s in ALL {
        m.maps.insert(s, petra_recovery::battery::entries(&engine, s).unwrap().into_iter().collect());
    }
    m
}

#[test]
fn a_kill_loop_on_memory_that_keeps_only_flushed_and_fenced_lines_loses_nothing_acknowledged() {
    // A kill on a page-cache file or on DAX loses nothing the process stored: a missing flush or
    // fence cannot show. Here each round's "kill" keeps only the lines flushed and fenced, none
    // evicted early: the image a missing flush or fence loses most from. The kill falls at a
    // store drawn at random from the round's (anywhere, not only at flushes and fences); three
    // threads run single reads, read-only transactions and writers with large values; every
    // acknowledged transaction and read must be explained by what recovery finds, and the next
    // round recovers from that image and carries on from there. `PETRA_KILL_ROUNDS` sets the
    // number of rounds (8).
    let rounds: u64 = std::env::var("PETRA_KILL_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(8);
    let mut mem = setup();
    let mut base = Model::default();
    base.apply(&initial_ops());
    let mut acked = 0;
    for round in 0..rounds {
        let seed = 60 + round;
        let shared = Arc::new(mem);
        shared.set_plan(CrashPlan { every_fence: false, every_flush: false, ..CrashPlan::all(0.05, seed) });
        let log = mixed_workload(Arc::clone(&shared), 3, 12, seed, (round + 1) << 40);
        let states = shared.take_crash_states();
        assert!(!states.is_empty(), "round {round}: no store was a kill point");
        let kill = &states[StdRng::seed_from_u64(seed).random_range(0..states.len())];
        let image = kill.image(&vec![0; kill.pending()]);
        if let Err(e) = check_from(&base, &log.acked, &log.reads, image.point.event, image.to_mem(MAX_LEN)) {
            panic!("round {round}, killed {} with {} lines not fenced: {e}", image.point, kill.pending());
        }
        acked += log.acked.iter().filter(|a| a.end <= image.point.event).count();
        let next = Arc::new(image.to_mem(MAX_LEN));
        base = recovered_model(&next);
        mem = Arc::into_inner(next).expect("the engine is dropped");
    }
    eprintln!("{rounds} rounds, {acked} transactions acknowledged before their round's kill");
    assert!(acked as u64 >= rounds * 3, "the kills fell too early: {acked} acknowledged");
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
