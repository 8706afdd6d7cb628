//! `petra-bench micro`: the dissertation's micro-benchmarks on PETRA's structures.
//!
//! Each configuration runs on a fresh pool file: the structure is prefilled, then every thread
//! runs its share of transactions drawn from the workload, with strict op semantics (a failed
//! Insert, Delete or Find aborts its transaction, as in the paper and the C++ harness).
//!
//! Reported per configuration:
//! - **tx/s**: committed transactions per second of wall time;
//! - **ops/s**: operations of committed transactions per second (tx/s times the size);
//! - **abort %**: aborted transactions over all transactions run;
//! - **flushes/tx** and **fences/tx**: per committed or aborted transaction, counted.

use std::sync::Barrier;
use std::time::Instant;

use petra::mem::{Counting, MemCounts, MmapMem};
use petra::{Engine, EngineConfig, Handle, KeyWidth, OpKind, Outcome, StructId, Transaction, Values};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::baseline::{LockMap, SkipMapBound, TxMap, TxWorker};
use crate::workload::{GenOp, Workload};

/// What a run runs on: PETRA durable or volatile, or a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// PETRA, flushes and fences as the pool's durability requires.
    Durable,
    /// PETRA with flushes and fences off: the cost of durability is the difference.
    Volatile,
    /// The abstract-locking baseline ([`crate::baseline::LockMap`]), volatile.
    Locks,
    /// crossbeam-skiplist without transactions ([`crate::baseline::SkipMapBound`]).
    SkipMap,
}

impl Mode {
    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Durable => "durable",
            Mode::Volatile => "volatile",
            Mode::Locks => "locks",
            Mode::SkipMap => "skipmap",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<Mode, String> {
        [Mode::Durable, Mode::Volatile, Mode::Locks, Mode::SkipMap]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("unknown mode {s:?}: use durable, volatile, locks or skipmap"))
    }
}

/// The structure a configuration runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StructureKind {
    /// The list set.
    List,
    /// The hash map, with as many buckets as keys in the range.
    HashMap,
    /// The skiplist.
    SkipList,
    /// The multi-dimensional list.
    MdList,
}

impl StructureKind {
    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StructureKind::List => "list",
            StructureKind::HashMap => "hashmap",
            StructureKind::SkipList => "skiplist",
            StructureKind::MdList => "mdlist",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<StructureKind, String> {
        match s {
            "list" => Ok(StructureKind::List),
            "hashmap" => Ok(StructureKind::HashMap),
            "skiplist" => Ok(StructureKind::SkipList),
            "mdlist" => Ok(StructureKind::MdList),
            other => Err(format!("unknown structure {other:?}: use list, hashmap, skiplist or mdlist")),
        }
    }
}

/// One configuration.
#[derive(Debug, Clone, Copy)]
pub struct MicroCase {
    /// The structure.
    pub structure: StructureKind,
    /// Durable or volatile.
    pub mode: Mode,
    /// Worker threads.
    pub threads: usize,
    /// The workload (key range, mix, transaction size).
    pub workload: Workload,
    /// Transactions per thread.
    pub txs_per_thread: u64,
    /// Share of the key range inserted before timing starts.
    pub prefill: f64,
    /// Seed of the workload.
    pub seed: u64,
    /// 0: word values; otherwise byte values of this many bytes (blobs).
    pub value_size: usize,
    /// Two-word keys: key `k` of the workload is `k << 64 | k`.
    pub wide_keys: bool,
    /// The engine's [`EngineConfig::checkpoint_fill`]: 0 turns checkpoint rounds off (the
    /// rings then hold every descriptor of the run).
    pub checkpoint_fill: u8,
}

/// What a configuration measured.
#[derive(Debug, Clone)]
pub struct MicroResult {
    /// The configuration.
    pub case: MicroCase,
    /// Committed transactions.
    pub committed: u64,
    /// Aborted transactions.
    pub aborted: u64,
    /// Wall seconds of the timed part.
    pub secs: f64,
    /// Flushes over all transactions.
    pub flushes: u64,
    /// Fences over all transactions.
    pub fences: u64,
}

impl MicroResult {
    /// Committed transactions per second.
    pub fn tx_per_sec(&self) -> f64 {
        self.committed as f64 / self.secs
    }
    /// Operations of committed transactions per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.tx_per_sec() * self.case.workload.tx_size as f64
    }
    /// Aborted share of all transactions, in percent.
    pub fn abort_pct(&self) -> f64 {
        100.0 * self.aborted as f64 / (self.committed + self.aborted).max(1) as f64
    }
    /// Flushes per transaction run.
    pub fn flushes_per_tx(&self) -> f64 {
        self.flushes as f64 / (self.committed + self.aborted).max(1) as f64
    }
    /// Fences per transaction run.
    pub fn fences_per_tx(&self) -> f64 {
        self.fences as f64 / (self.committed + self.aborted).max(1) as f64
    }
}

/// Runs one configuration on a fresh structure in a pool file under `dir`, or on a fresh
/// baseline map.
pub fn run(case: MicroCase, dir: &std::path::Path) -> Result<MicroResult, String> {
    match case.mode {
        Mode::Durable | Mode::Volatile => run_petra(case, dir),
        Mode::Locks => measure(case, &LockMap::default()),
        Mode::SkipMap => measure(case, &SkipMapBound::default()),
    }
}

/// Prefills `map` with `case.prefill` of the key range (16 keys per transaction), then runs every
/// thread's share of transactions on it and times them. Every map draws the same keys and the
/// same transactions (the same seeds); flushes and fences are counted on PETRA's counting seam
/// (none elsewhere).
fn measure<T: TxMap>(case: MicroCase, map: &T) -> Result<MicroResult, String> {
    use rand::Rng;
    let w = case.workload;
    {
        let mut worker = map.worker()?;
        let mut rng = StdRng::seed_from_u64(case.seed ^ 0xF111);
        let target = (w.key_range as f64 * case.prefill) as u64;
        let (mut inserted, mut keys) = (0, Vec::with_capacity(16));
        while inserted < target {
            keys.clear();
            keys.extend((0..16.min(target - inserted)).map(|_| rng.random_range(0..w.key_range)));
            inserted += worker.put_all(&keys)?;
        }
    }
    let barrier = Barrier::new(case.threads + 1);
    let (elapsed, per_thread) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..case.threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || -> Result<(u64, u64, MemCounts), String> {
                    let worker = map.worker();
                    // Every thread reaches the barrier, even one whose worker failed: the timer
                    // waits for them all.
                    barrier.wait();
                    let mut worker = worker?;
                    let mut rng = StdRng::seed_from_u64(case.seed.wrapping_mul(1000) + t as u64);
                    let mut ops: Vec<GenOp> = Vec::with_capacity(w.tx_size);
                    let (mut committed, mut aborted) = (0, 0);
                    let before = MemCounts::current();
                    for _ in 0..case.txs_per_thread {
                        w.next_tx(&mut rng, &mut ops);
                        if worker.run(&ops)? {
                            committed += 1;
                        } else {
                            aborted += 1;
                        }
                    }
                    Ok((committed, aborted, MemCounts::current() - before))
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let results: Vec<_> = workers.into_iter().map(|h| h.join().expect("worker panicked")).collect();
        (start.elapsed(), results)
    });
    let mut r = MicroResult { case, committed: 0, aborted: 0, secs: elapsed.as_secs_f64(), flushes: 0, fences: 0 };
    for p in per_thread {
        let (c, a, counts) = p?;
        r.committed += c;
        r.aborted += a;
        r.flushes += counts.flushes;
        r.fences += counts.fences;
    }
    Ok(r)
}

/// PETRA's structure `list` in `engine`, as a [`TxMap`].
struct PetraMap<'e> {
    engine: &'e Engine<Counting<MmapMem>>,
    list: StructId,
    encoding: Encoding<'e>,
}

/// A thread's handle on a [`PetraMap`], with its transaction kept for reuse.
struct PetraWorker<'e> {
    map: &'e PetraMap<'e>,
    h: Handle<Counting<MmapMem>>,
    tx: Transaction,
}

impl<'e> TxMap for PetraMap<'e> {
    type Worker<'a>
        = PetraWorker<'a>
    where
        Self: 'a;

    fn worker(&self) -> Result<PetraWorker<'_>, String> {
        let mut h = self.engine.handle().map_err(|e| e.to_string())?;
        // Take the descriptor ring (a region, zeroed and persisted once) before timing.
        let mut warm = Transaction::new();
        self.encoding.push(&mut warm, self.list, OpKind::Get, 0, 0);
        self.encoding.push(&mut warm, self.list, OpKind::Get, 1, 0);
        h.execute(&warm).map_err(|e| e.to_string())?;
        Ok(PetraWorker { map: self, h, tx: Transaction::new() })
    }
}

impl PetraWorker<'_> {
    fn execute(&mut self, ops: impl Iterator<Item = (OpKind, u64, u64)>) -> Result<Outcome, String> {
        self.tx.clear();
        for (kind, key, value) in ops {
            self.map.encoding.push(&mut self.tx, self.map.list, kind, key, value);
        }
        self.h.execute(&self.tx).map_err(|e| e.to_string())
    }
}

impl TxWorker for PetraWorker<'_> {
    fn put_all(&mut self, keys: &[u64]) -> Result<u64, String> {
        Ok(match self.execute(keys.iter().map(|&k| (OpKind::Put, k, 0)))? {
            Outcome::Committed { results, .. } => results.iter().filter(|r| r.is_none()).count() as u64,
            // Puts fail nothing: a cycle abort, and the caller's next batch goes on.
            Outcome::Aborted { .. } => 0,
        })
    }

    fn run(&mut self, ops: &[GenOp]) -> Result<bool, String> {
        Ok(self.execute(ops.iter().map(|op| (op.kind, op.key, op.value)))?.is_committed())
    }
}

/// Runs one configuration on a fresh PETRA structure in a pool file under `dir`.
fn run_petra(case: MicroCase, dir: &std::path::Path) -> Result<MicroResult, String> {
    let w = case.workload;
    let path =
        dir.join(format!("micro-{}-{}-{}-{}.pool", case.structure.name(), case.mode.name(), case.threads, w.tx_size));
    let _ = std::fs::remove_file(&path);
    // The file's mapping, wrapped in the counting seam so that flushes and fences are counted.
    let pool = crate::create_pool(&path, case.mode == Mode::Volatile)?.map_mem(Counting::new);
    // Default rings (64 MiB): checkpoint rounds run as they fill, as in any long run.
    let config = EngineConfig::default().checkpoint_fill(case.checkpoint_fill);
    let engine = Engine::create(pool, config).map_err(|e| e.to_string())?;
    let kind = match case.structure {
        StructureKind::List => petra::StructureKind::List,
        StructureKind::HashMap => petra::StructureKind::HashMap { buckets: w.key_range },
        StructureKind::SkipList => petra::StructureKind::SkipList,
        StructureKind::MdList => petra::StructureKind::MdList,
    };
    let values = if case.value_size > 0 { Values::Bytes } else { Values::Words };
    let keys = if case.wide_keys { KeyWidth::U128 } else { KeyWidth::U64 };
    let list = engine.create_structure(kind, keys, values).map_err(|e| e.to_string())?;
    let bytes = vec![0x5Au8; case.value_size];
    let encoding = Encoding { bytes: (case.value_size > 0).then_some(&bytes[..]), wide_keys: case.wide_keys };
    let r = measure(case, &PetraMap { engine: &engine, list, encoding });
    drop(engine);
    let _ = std::fs::remove_file(&path);
    r
}

/// The keys and values a run writes: the op's key as one word or as two, and the op's word or
/// the same bytes for every write.
#[derive(Debug, Clone, Copy)]
struct Encoding<'a> {
    bytes: Option<&'a [u8]>,
    wide_keys: bool,
}

impl Encoding<'_> {
    /// Adds the op `kind` on `key` to `tx`, with the word `word` or with the run's bytes.
    fn push(self, tx: &mut Transaction, s: petra::StructId, kind: OpKind, key: u64, word: u64) {
        let op = if self.wide_keys {
            petra::Op::new(kind, s, (key as u128) << 64 | key as u128, word)
        } else {
            petra::Op::new(kind, s, key, word)
        };
        match self.bytes {
            Some(b) if kind.writes() == Some(true) => tx.op_bytes(op, b),
            _ => tx.op(op),
        };
    }
}
