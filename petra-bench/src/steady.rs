//! `petra-bench steady`: a long run on a fixed working set, with a quiescent checkpoint
//! ([`Engine::checkpoint`]) between intervals: throughput, checkpoint time and the pool file's
//! size over time. The threads stop for each checkpoint (it needs the engine alone), so its time
//! is part of the run's.

use std::path::Path;
use std::time::{Duration, Instant};

use petra::mem::MmapMem;
use petra::{Engine, EngineConfig, KeyWidth, StructId, StructureKind, Transaction, Values};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// One run's settings.
#[derive(Debug, Clone)]
pub struct SteadyCase {
    /// Keys of the working set (a hash map of as many buckets); half are put before the run.
    pub keys: u64,
    /// Threads running transactions.
    pub threads: usize,
    /// Length of an interval between checkpoints.
    pub interval: Duration,
    /// Intervals run.
    pub intervals: usize,
    /// Ops per transaction: each a put (50%), a remove (25%) or a get (25%) of a uniform key.
    pub tx_size: usize,
    /// Seed of the keys and ops.
    pub seed: u64,
}

/// One interval: its transactions, then the checkpoint after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SteadyRow {
    /// The interval's index, from 0.
    pub interval: usize,
    /// Seconds since the run started, at the interval's end (checkpoints included).
    pub at_secs: f64,
    /// Committed transactions per second during the interval.
    pub tx_per_sec: f64,
    /// Descriptors the checkpoint folded into nodes.
    pub descriptors: u64,
    /// Keys present after the checkpoint.
    pub present_keys: u64,
    /// Seconds the checkpoint took.
    pub checkpoint_secs: f64,
    /// The pool file's size after the checkpoint, bytes.
    pub file_bytes: u64,
}

/// Runs the case on a new pool at `path`, calling `row` after each interval's checkpoint.
pub fn run(case: &SteadyCase, path: &Path, mut row: impl FnMut(&SteadyRow)) -> Result<Vec<SteadyRow>, String> {
    if case.keys == 0 || case.threads == 0 || case.tx_size == 0 || case.tx_size > 64 {
        return Err("--keys and --threads must be at least 1, --tx-size 1 to 64".into());
    }
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let rings = EngineConfig { ring_bytes: 16 << 20 };
    let mut engine = Engine::create(crate::create_pool(path, false)?, rings).map_err(|x| e(&x))?;
    let s = engine
        .create_structure(StructureKind::HashMap { buckets: case.keys }, KeyWidth::U64, Values::Words)
        .map_err(|x| e(&x))?;
    crate::put_in_batches(&engine, s, (0..case.keys).step_by(2).map(|k| (k, k)))?;
    let start = Instant::now();
    let mut rows = Vec::with_capacity(case.intervals);
    for interval in 0..case.intervals {
        let t0 = Instant::now();
        let committed: u64 = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..case.threads)
                .map(|t| {
                    let engine = &engine;
                    let seed = case.seed.wrapping_mul(1_000_003).wrapping_add((interval * case.threads + t) as u64);
                    scope.spawn(move || worker(engine, s, case, seed))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|_| Err("a thread panicked".into())))
                .sum::<Result<u64, String>>()
        })?;
        let secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let (next, report) = engine.checkpoint().map_err(|x| e(&x))?;
        engine = next;
        let r = SteadyRow {
            interval,
            at_secs: start.elapsed().as_secs_f64(),
            tx_per_sec: committed as f64 / secs,
            descriptors: report.descriptors,
            present_keys: report.present_keys,
            checkpoint_secs: t1.elapsed().as_secs_f64(),
            file_bytes: std::fs::metadata(path).map_err(|x| e(&x))?.len(),
        };
        row(&r);
        rows.push(r);
    }
    engine.close().map_err(|x| e(&x))?;
    Ok(rows)
}

/// One thread's interval: transactions until the interval is over; returns how many committed.
fn worker(engine: &Engine<MmapMem>, s: StructId, case: &SteadyCase, seed: u64) -> Result<u64, String> {
    let mut h = engine.handle().map_err(|e| e.to_string())?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tx = Transaction::new();
    tx.sorted(true);
    let end = Instant::now() + case.interval;
    let mut committed = 0;
    while Instant::now() < end {
        for _ in 0..256 {
            tx.clear();
            for _ in 0..case.tx_size {
                let key = rng.random_range(0..case.keys);
                match rng.random_range(0..4) {
                    0 | 1 => tx.put(s, key, rng.random()),
                    2 => tx.remove(s, key),
                    _ => tx.get(s, key),
                };
            }
            committed += h.execute(&tx).map_err(|e| e.to_string())?.is_committed() as u64;
        }
    }
    Ok(committed)
}
