//! Range scans under concurrent transactions: every scan must return exactly the range of the
//! state after some prefix of the serial (txid) order that lies within the scan's call. Writers
//! run random transactions on a few hot keys of every structure while a scanner reads random
//! ranges; afterwards the committed transactions are replayed in txid order and each scan is
//! matched against the states its call spanned.

use std::sync::atomic::{AtomicBool, Ordering};

use petra::mem::{PMem, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{Engine, EngineConfig, Op, OpKind, Outcome, StructId, Transaction};
use petra_recovery::model::Model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: u64 = 24;

struct Committed {
    txid: u64,
    ops: Vec<Op>,
}

#[derive(Debug)]
struct Scan {
    /// Txid watermarks read before and after the call.
    lo: u64,
    hi: u64,
    s: StructId,
    from: u64,
    to: u64,
    got: Vec<(u64, u64)>,
}

/// Set when the scanner is done: the writers stop.
struct Flags {
    done: AtomicBool,
}

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: 1 << 30, chunk_size: 64 << 10, mapping: Mapping::default() }
}

/// Runs transactions until the scanner is done (at most ten times `txs`): the scanner needs
/// writers running while it looks for scans that overlap commits, however the cores were shared
/// out meanwhile (on a loaded machine the writers could finish a fixed budget first).
fn writer<M: PMem + 'static>(
    engine: &Engine<M>,
    ids: &[StructId],
    seed: u64,
    txs: usize,
    flags: &Flags,
) -> Vec<Committed> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = engine.handle().unwrap();
    let mut committed = Vec::new();
    let mut tx = Transaction::new();
    for i in 0..10 * txs {
        if flags.done.load(Ordering::Relaxed) {
            break;
        }
        // Checkpoint rounds beside the scans: they turn info words FINAL, rewrite node values
        // and remove the nodes of absent keys.
        if i % 256 == 255 {
            h.checkpoint();
        }
        tx.clear();
        let mut ops = Vec::new();
        for _ in 0..rng.random_range(1..=3) {
            let kind =
                [OpKind::Insert, OpKind::Delete, OpKind::Update, OpKind::Put, OpKind::Remove][rng.random_range(0..5)];
            let op = Op::new(
                kind,
                ids[rng.random_range(0..ids.len())],
                rng.random_range(0..KEYS),
                rng.random_range(1..1_000_000),
            );
            tx.op(op);
            ops.push(op);
        }
        if let Outcome::Committed { txid: Some(txid), .. } = petra_recovery::battery::execute(&mut h, &tx).unwrap() {
            committed.push(Committed { txid, ops });
        }
    }
    committed
}

/// Runs scans (see below), then tells the writers to stop.
fn scanner<M: PMem + 'static>(
    engine: &Engine<M>,
    ids: &[StructId],
    seed: u64,
    scans: usize,
    flags: &Flags,
) -> Vec<Scan> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = engine.handle().unwrap();
    // Start once the writers have.
    while engine.txid_watermark() < 100 {
        std::thread::yield_now();
    }
    // At least `scans` scans, and more (up to ten times as many, for up to 20 s) until a tenth of
    // them overlapped a commit: on a loaded machine the writers may be off the cores for a while.
    // A scan that overlapped none yields, to let them on.
    let mut out: Vec<Scan> = Vec::new();
    let mut overlapped = 0;
    let started = std::time::Instant::now();
    let more = |out: &Vec<Scan>, overlapped: usize| {
        overlapped < scans / 10 && out.len() < 10 * scans && started.elapsed() < std::time::Duration::from_secs(20)
    };
    while out.len() < scans || more(&out, overlapped) {
        let s = ids[rng.random_range(0..ids.len())];
        let from = rng.random_range(0..KEYS);
        let to = rng.random_range(from..KEYS + 2);
        let lo = engine.txid_watermark();
        let got = petra_recovery::battery::range(&mut h, s, from..=to).unwrap();
        let hi = engine.txid_watermark();
        overlapped += usize::from(hi > lo);
        out.push(Scan { lo, hi, s, from, to, got });
        if hi == lo {
            std::thread::yield_now();
        }
    }
    flags.done.store(true, Ordering::Relaxed);
    out
}

fn run<M: PMem + 'static>(pool: Pool<M>, writers: usize, txs: usize, scans: usize, seed: u64) {
    let engine = Engine::create(pool, EngineConfig::rings(64 << 20)).unwrap();
    let ids = petra_recovery::battery::create_all(&engine);
    // Half the keys present at the start, so that scans see keys from the first: a transaction
    // per structure.
    let mut committed = Vec::new();
    for &s in &ids {
        let mut prefill = Transaction::new();
        for k in (0..KEYS).step_by(2) {
            prefill.insert(s, k, k);
        }
        let out = petra_recovery::battery::execute(&mut engine.handle().unwrap(), &prefill).unwrap();
        let Outcome::Committed { txid: Some(txid), .. } = out else { panic!("the prefill commits") };
        committed.push(Committed { txid, ops: prefill.ops().to_vec() });
    }
    let flags = Flags { done: AtomicBool::new(false) };
    let scans = std::thread::scope(|sc| {
        let ws: Vec<_> = (0..writers)
            .map(|t| {
                sc.spawn({
                    let (e, ids, flags) = (&engine, &ids, &flags);
                    move || writer(e, ids, seed * 100 + t as u64, txs, flags)
                })
            })
            .collect();
        let scanning = sc.spawn(|| scanner(&engine, &ids, seed * 100 + 99, scans, &flags));
        let scans = scanning.join().unwrap();
        committed.extend(ws.into_iter().flat_map(|w| w.join().unwrap()));
        scans
    });
    committed.sort_by_key(|c| c.txid);
    // Replay in txid order; a scan matches if the state after some prefix whose last txid lies in
    // [lo, hi] (or the state at lo itself) has exactly its entries in its range.
    let range_of = |model: &Model, scan: &Scan| -> Vec<(u64, u64)> {
        model.entries(scan.s).into_iter().filter(|(k, _)| (scan.from..=scan.to).contains(k)).collect()
    };
    // One scanner ran the scans in turn, so their windows come in order: `first` is the first
    // scan whose window is not yet behind the replay.
    let mut matched = vec![false; scans.len()];
    let mut model = Model::default();
    let mut first = 0;
    let mut check = |model: &Model, at: u64, until: u64| {
        while first < scans.len() && scans[first].hi < at {
            first += 1;
        }
        for i in first..scans.len() {
            let scan = &scans[i];
            if scan.lo >= until {
                break;
            }
            if !matched[i] && range_of(model, scan) == scan.got {
                matched[i] = true;
            }
        }
    };
    let mut prev = 0;
    for c in &committed {
        // The state before this transaction is the state at every watermark in [prev, txid).
        check(&model, prev, c.txid);
        assert!(model.apply(&c.ops).is_committed(), "txid {} no longer commits on replay", c.txid);
        prev = c.txid;
    }
    check(&model, prev, u64::MAX);
    let nonempty = scans.iter().filter(|s| !s.got.is_empty()).count();
    for (i, scan) in scans.iter().enumerate() {
        assert!(matched[i], "scan {i} matches no state of its call: {scan:?}");
    }
    assert!(nonempty > scans.len() / 4, "{nonempty} of {} scans saw a key", scans.len());
    let overlapped = scans.iter().filter(|s| s.hi > s.lo).count();
    assert!(
        overlapped >= scans.len() / 100,
        "only {overlapped} of {} scans overlapped one of the {} commits",
        scans.len(),
        committed.len()
    );
    eprintln!(
        "{} committed, {} scans ({nonempty} non-empty, {overlapped} overlapping a commit)",
        committed.len(),
        scans.len()
    );
}

/// One test, so that the standard runner too runs it alone: the overlap it needs comes from its
/// own threads running at once.
#[test]
fn scans_are_snapshots_on_the_simulator_and_on_a_real_mapping() {
    for seed in 0..3 {
        run(Pool::create_in(SimMem::new(0, 1 << 30), &config()).unwrap(), 2, 300_000, 3000, seed);
    }
    // Real atomics, real flushes, no simulator lock: the interleavings are the hardware's.
    let dir = petra_recovery::scratch_dir();
    for (seed, writers) in [(10, 1), (11, 2), (12, 3)] {
        let pool = Pool::create(dir.path().join(format!("{seed}.pool")), &config()).unwrap();
        run(pool, writers, 300_000, 8000, seed);
    }
}
