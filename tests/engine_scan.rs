//! Range scans under concurrent transactions: every scan must return exactly the range of the
//! state after the prefix of the serial (txid) order below its snapshot's txid, which lies within
//! the scan's call. Writers run random transactions on a few hot keys of every structure while a
//! scanner reads random ranges; afterwards the committed transactions are replayed in txid order
//! and each scan is matched against the state at its txid (or, past a snapshot limit, stops with
//! `SnapshotExpired`). And a scan of a large range returns while writers write in it without a
//! pause.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use petra::mem::{PMem, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{Engine, EngineConfig, EngineError, Op, OpKind, Outcome, StructId, Transaction};
use petra_recovery::AsPageCache;
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
    /// The snapshot's txid.
    txid: u64,
    s: StructId,
    from: u64,
    to: u64,
    got: Vec<(u64, u64)>,
}

/// What the writers and the scanner tell each other.
struct Flags {
    /// Set when the scanner is done: the writers stop.
    done: AtomicBool,
    /// Scans done so far.
    scanned: AtomicUsize,
}

/// A writer runs at most this many transactions ahead of the scans done (and this many per scan
/// done), so that the run stays short when the scanner is kept off the cores: the writers wait
/// for it.
const AHEAD: usize = 1000;
const PER_SCAN: usize = 20;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: 1 << 30, chunk_size: 64 << 10, mapping: Mapping::default() }
}

/// Runs transactions until the scanner is done (at most ten times `txs`, and at most [`AHEAD`]
/// plus [`PER_SCAN`] per scan done): the scanner needs writers running while it looks for scans
/// that overlap them, however the cores were shared out meanwhile (on a loaded machine the
/// writers could finish a fixed budget first).
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
    let mut i = 0;
    while i < 10 * txs {
        if flags.done.load(Ordering::Relaxed) {
            break;
        }
        if i > AHEAD + PER_SCAN * flags.scanned.load(Ordering::Relaxed) {
            std::thread::yield_now();
            continue;
        }
        i += 1;
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

/// Runs scans (see below), then tells the writers to stop. Returns the scans that returned, and
/// how many stopped with their snapshot expired.
fn scanner<M: PMem + 'static>(
    engine: &Engine<M>,
    ids: &[StructId],
    seed: u64,
    scans: usize,
    flags: &Flags,
) -> (Vec<Scan>, usize) {
    /// Tells the writers to stop when the scanner returns or panics.
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop = Stop(&flags.done);
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
    let mut expired = 0;
    let mut overlapped = 0;
    let started = std::time::Instant::now();
    let more = |out: &Vec<Scan>, overlapped: usize| {
        overlapped < scans / 10 && out.len() < 10 * scans && started.elapsed() < std::time::Duration::from_secs(20)
    };
    while (out.len() < scans || more(&out, overlapped)) && out.len() + expired < 20 * scans {
        let s = ids[rng.random_range(0..ids.len())];
        let from = rng.random_range(0..KEYS);
        let to = rng.random_range(from..KEYS + 2);
        let lo = engine.txid_watermark();
        let (txid, got) = match petra_recovery::battery::snapshot(&mut h, s, from..=to) {
            Ok(scan) => scan,
            Err(EngineError::SnapshotExpired { .. }) => {
                expired += 1;
                flags.scanned.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Err(e) => panic!("a scan failed: {e}"),
        };
        let hi = engine.txid_watermark();
        // Beyond the scan's own txid, another transaction's.
        let overlap = hi > lo + 1;
        overlapped += usize::from(overlap);
        out.push(Scan { lo, hi, txid, s, from, to, got });
        flags.scanned.fetch_add(1, Ordering::Relaxed);
        if !overlap {
            std::thread::yield_now();
        }
    }
    (out, expired)
}

/// Writers and a scanner on `pool`; scans whose snapshot is expired (past `limit`, if given)
/// stop with an error, and must be some if a limit is given; every other one must be its
/// snapshot's state.
fn run<M: PMem + 'static>(pool: Pool<M>, writers: usize, txs: usize, scans: usize, seed: u64, limit: Option<u64>) {
    let config = match limit {
        Some(l) => EngineConfig::rings(64 << 20).snapshot_limit(l),
        None => EngineConfig::rings(64 << 20),
    };
    let engine = Engine::create(pool, config).unwrap();
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
    let flags = Flags { done: AtomicBool::new(false), scanned: AtomicUsize::new(0) };
    let (scans, expired) = std::thread::scope(|sc| {
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
    match limit {
        None => assert_eq!(expired, 0, "scans expired under the default limit"),
        Some(l) => assert!(expired > 0, "no scan expired past a limit of {l} bytes"),
    }
    assert!(expired == 0 || engine.checkpoint_stats().snapshots_expired > 0, "expired scans, and no expiry counted");
    committed.sort_by_key(|c| c.txid);
    // Replay in txid order; each scan must hold exactly the state below its txid, which it took
    // during its call.
    let range_of = |model: &Model, scan: &Scan| -> Vec<(u64, u64)> {
        model.entries(scan.s).into_iter().filter(|(k, _)| (scan.from..=scan.to).contains(k)).collect()
    };
    let mut by_txid: Vec<&Scan> = scans.iter().collect();
    by_txid.sort_by_key(|s| s.txid);
    let mut model = Model::default();
    let mut next = committed.iter().peekable();
    for scan in by_txid {
        assert!(scan.lo < scan.txid && scan.txid <= scan.hi, "a snapshot's txid outside its call: {scan:?}");
        while let Some(c) = next.next_if(|c| c.txid < scan.txid) {
            assert!(model.apply(&c.ops).is_committed(), "txid {} no longer commits on replay", c.txid);
        }
        let want = range_of(&model, scan);
        assert!(scan.got == want, "a scan that is not the state at its txid: {scan:?}, when the range held {want:?}");
    }
    for c in next {
        assert!(model.apply(&c.ops).is_committed(), "txid {} no longer commits on replay", c.txid);
    }
    let nonempty = scans.iter().filter(|s| !s.got.is_empty()).count();
    assert!(nonempty > scans.len() / 4, "{nonempty} of {} scans saw a key", scans.len());
    let overlapped = scans.iter().filter(|s| s.hi > s.lo + 1).count();
    assert!(
        overlapped >= scans.len() / 100,
        "only {overlapped} of {} scans overlapped one of the {} commits",
        scans.len(),
        committed.len()
    );
    eprintln!(
        "{} committed, {} scans ({nonempty} non-empty, {overlapped} overlapping a commit), {expired} expired",
        committed.len(),
        scans.len()
    );
}

/// One test, so that the standard runner too runs it alone: the overlap it needs comes from its
/// own threads running at once. The last run sets a snapshot limit that scans pass.
#[test]
fn scans_are_snapshots_on_the_simulator_and_on_a_real_mapping() {
    for seed in 0..3 {
        run(Pool::create_in(SimMem::new(0, 1 << 30), &config()).unwrap(), 2, 300_000, 3000, seed, None);
    }
    // Real atomics, real flushes, no simulator lock: the interleavings are the hardware's. With
    // safe points (the default policy's): the file, in memory where the engine keeps none, is
    // treated as a file on a disk.
    let dir = petra_recovery::scratch_dir();
    for (seed, writers) in [(10, 1), (11, 2), (12, 3)] {
        let pool = Pool::create(dir.path().join(format!("{seed}.pool")), &config()).unwrap().map_mem(AsPageCache);
        assert_eq!(pool.durability(), petra::mem::Durability::PageCache);
        run(pool, writers, 300_000, 8000, seed, None);
    }
    // A limit of two descriptors or so: writers expire the snapshots of scans that overlap more
    // commits, in the middle of their walks and reads; each scan returns its snapshot's state
    // or the error, never a mix.
    let pool = Pool::create(dir.path().join("13.pool"), &config()).unwrap().map_mem(AsPageCache);
    run(pool, 2, 300_000, 8000, 13, Some(256));
}

/// Keys of the large range.
const LARGE: u64 = 100_000;

/// How long the writers of the large range write, at most, if the scan does not return first
/// (generous, for a loaded machine): a scan that never returns under writers fails on the
/// assertion that it returned while they wrote, once they stopped.
const WRITERS_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Transactions a writer of the large range commits at most (for the log's memory), with the
/// same meaning as the deadline.
const WRITERS_MAX: usize = 2_000_000;

/// A put or a removal of `key` (`None`), committed at `txid`.
struct Write {
    txid: u64,
    key: u32,
    value: Option<u32>,
}

/// Writes random keys of `0..LARGE` of `s` (puts, and one in four a removal), one transaction
/// each, until `done` is set (true) or it reaches its deadline or its maximum (false). `running`
/// counts its commits.
fn large_writer<M: PMem + 'static>(
    engine: &Engine<M>,
    s: StructId,
    seed: u64,
    done: &AtomicBool,
    running: &AtomicUsize,
) -> (Vec<Write>, bool) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut h = engine.handle().unwrap();
    let started = std::time::Instant::now();
    let mut log = Vec::new();
    let mut tx = Transaction::new();
    loop {
        if done.load(Ordering::Acquire) {
            return (log, true);
        }
        if started.elapsed() > WRITERS_DEADLINE || log.len() >= WRITERS_MAX {
            return (log, false);
        }
        let key = rng.random_range(0..LARGE as u32);
        let value = rng.random_bool(0.75).then(|| rng.random_range(1..u32::MAX));
        tx.clear();
        match value {
            Some(v) => tx.put(s, key as u64, v as u64),
            None => tx.remove(s, key as u64),
        };
        if let Outcome::Committed { txid: Some(txid), .. } = petra_recovery::battery::execute(&mut h, &tx).unwrap() {
            log.push(Write { txid, key, value });
            running.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Fills `s` with the keys of `0..LARGE`, then scans all of it while two writers write random
/// keys in it: the scan must return while they still write, with the state at its txid.
fn large_scan<M: PMem + 'static>(engine: &Engine<M>, s: StructId, seed: u64) {
    let mut h = engine.handle().unwrap();
    let mut prefill = Transaction::new();
    for chunk in (0..LARGE).collect::<Vec<_>>().chunks(16) {
        prefill.clear();
        for &k in chunk {
            prefill.put(s, k, k);
        }
        assert!(petra_recovery::battery::execute(&mut h, &prefill).unwrap().is_committed());
    }
    let done = AtomicBool::new(false);
    let running = AtomicUsize::new(0);
    let (logs, (lo, txid, hi, got, during)) = std::thread::scope(|sc| {
        let ws: Vec<_> = (0..2)
            .map(|t| {
                sc.spawn({
                    let (done, running) = (&done, &running);
                    move || large_writer(engine, s, seed * 10 + t, done, running)
                })
            })
            .collect();
        // Scan once both writers are writing.
        while running.load(Ordering::Relaxed) < 200 && ws.iter().all(|w| !w.is_finished()) {
            std::thread::yield_now();
        }
        let before = running.load(Ordering::Relaxed);
        let lo = engine.txid_watermark();
        let (txid, got) = petra_recovery::battery::snapshot(&mut h, s, ..).unwrap();
        let hi = engine.txid_watermark();
        let during = running.load(Ordering::Relaxed) - before;
        done.store(true, Ordering::Release);
        let logs: Vec<(Vec<Write>, bool)> = ws.into_iter().map(|w| w.join().unwrap()).collect();
        (logs, (lo, txid, hi, got, during))
    });
    for (log, stopped_by_scan) in &logs {
        assert!(
            stopped_by_scan,
            "the scan did not return while the writers wrote: a writer stopped at its deadline ({:?}) \
             or its maximum ({WRITERS_MAX} transactions) after {} transactions, before the scan returned",
            WRITERS_DEADLINE,
            log.len()
        );
    }
    assert!(during > 0, "no transaction committed while the scan ran: it proves nothing");
    assert!(lo < txid && txid <= hi, "the snapshot's txid {txid} outside its call ({lo}, {hi}]");
    // The state at the snapshot: the prefill, then every write below its txid in txid order.
    let mut writes: Vec<&Write> = logs.iter().flat_map(|(log, _)| log).filter(|w| w.txid < txid).collect();
    writes.sort_by_key(|w| w.txid);
    let mut state: std::collections::BTreeMap<u64, u64> = (0..LARGE).map(|k| (k, k)).collect();
    for w in writes {
        match w.value {
            Some(v) => state.insert(w.key as u64, v as u64),
            None => state.remove(&(w.key as u64)),
        };
    }
    let expected: Vec<(u64, u64)> = state.into_iter().collect();
    if got != expected {
        let got_map: std::collections::BTreeMap<u64, u64> = got.iter().copied().collect();
        let wrong: Vec<_> = expected.iter().filter(|(k, v)| got_map.get(k) != Some(v)).take(5).collect();
        let extra: Vec<_> = got.iter().filter(|e| expected.binary_search(e).is_err()).take(5).collect();
        panic!("the scan is not the state at its txid {txid}: missing {wrong:?}, instead {extra:?}");
    }
    let written: usize = logs.iter().map(|(log, _)| log.len()).sum();
    eprintln!("a scan of {} keys at txid {txid} returned while {during} of {written} writes committed", got.len());
}

/// A scan of a large range returns while two writers write in it without a pause, with the
/// state at its txid: on a skiplist, on a hash map (where every scan walks the whole map, as an
/// unsorted store's does), on a skiplist of two-word keys and byte values, and on an MDList
/// (whose descent re-pins with its stack of nodes). The rings are
/// small, so that checkpoint rounds come due while the scan runs. (A double collect, which
/// returned only once two walks in a row saw the same, did not return until the writers
/// stopped.)
#[test]
fn a_scan_of_a_large_range_returns_while_two_writers_write_in_it() {
    let dir = petra_recovery::scratch_dir();
    let pool = Pool::create(dir.path().join("large.pool"), &config()).unwrap();
    let engine = Engine::create(pool, EngineConfig::rings(256 << 10)).unwrap();
    let skiplist = engine.create_skiplist().unwrap();
    large_scan(&engine, skiplist, 1);
    let map = engine.create_hash_map(1 << 16).unwrap();
    large_scan(&engine, map, 2);
    let bytes = petra_recovery::battery::create(&engine, petra_recovery::battery::Kind::SkipListWide);
    large_scan(&engine, bytes, 3);
    let mdlist = engine.create_mdlist().unwrap();
    large_scan(&engine, mdlist, 4);
}
