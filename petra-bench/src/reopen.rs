//! `petra-bench reopen`: what closing and opening a pool of many keys costs. A pool of `keys`
//! keys on one structure is filled, then:
//!
//! 1. left as a crash leaves it (the pool dropped without a close) and opened: recovery reads
//!    every descriptor written since the pool was created and rewrites every node;
//! 2. `updates` keys are overwritten and the engine closed with [`Engine::close`], which folds
//!    those descriptors into the nodes (the same rewrite, done at close);
//! 3. opened again: after a clean close, recovery is skipped (the arena is scanned for the
//!    allocator only).

use std::fmt;
use std::path::Path;
use std::time::Instant;

use clap::ValueEnum;
use petra::mem::MmapMem;
use petra::{Engine, EngineConfig, KeyWidth, RecoveryReport, StructId, StructureKind, Values};

use crate::cli::{one_of, scratch, spell};
use crate::error::{BenchError, Result};

/// What closing and opening cost: fills a pool, opens it after a crash (full recovery),
/// overwrites some keys, closes it cleanly (their descriptors folded into the nodes) and
/// opens it again (recovery skipped).
#[derive(Debug, clap::Args)]
pub struct ReopenArgs {
    /// Keys in the pool.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Keys overwritten between the two opens (what the clean close folds into the nodes).
    #[arg(long, default_value_t = 100_000)]
    updates: u64,
    /// hashmap (of --keys buckets) or skiplist.
    #[arg(
        long,
        value_delimiter = ',',
        default_values_t = [Structure::HashMap, Structure::SkipList],
        value_parser = one_of::<Structure>("structure")
    )]
    structure: Vec<Structure>,
}

/// Runs `petra-bench reopen`: a new pool per structure, a row each on stdout.
pub fn run(args: ReopenArgs) -> Result<()> {
    let cases: Vec<ReopenCase> = args
        .structure
        .iter()
        .map(|s| {
            let structure = match s {
                Structure::HashMap => StructureKind::HashMap { buckets: args.keys.max(1) },
                Structure::SkipList => StructureKind::SkipList,
            };
            ReopenCase { structure, keys: args.keys, updates: args.updates }
        })
        .collect();
    let tmp = scratch()?;
    println!(
        "{} keys, {} overwritten before the clean close, pool files in {}",
        args.keys,
        args.updates,
        tmp.path().display()
    );
    println!(
        "{:<10} {:>9} {:>15} {:>12} {:>12} {:>15} {:>10}",
        "structure", "fill s", "open, crash s", "descriptors", "close s", "open, clean s", "file MiB"
    );
    for (case, name) in cases.iter().zip(&args.structure) {
        let path = tmp.path().join(format!("{name}.pool"));
        let r = run_case(case, &path)?;
        let _ = std::fs::remove_file(&path);
        let descriptors = r.after_crash.report.as_ref().map_or(0, |r| r.descriptors);
        println!(
            "{name:<10} {:>9.2} {:>15.3} {descriptors:>12} {:>12.3} {:>15.3} {:>10.1}",
            r.fill_secs,
            r.after_crash.secs,
            r.close.secs,
            r.after_close.secs,
            r.file_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

/// The structures `petra-bench reopen` fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lower")]
pub(crate) enum Structure {
    /// A hash map of as many buckets as keys.
    HashMap,
    /// The skiplist.
    SkipList,
}

/// Its name in reports and on the command line.
impl fmt::Display for Structure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        spell(self, f)
    }
}

/// One run's settings.
#[derive(Debug, Clone)]
pub(crate) struct ReopenCase {
    /// The structure: a hash map (of `keys` buckets) or a skiplist.
    pub(crate) structure: StructureKind,
    /// Keys filled.
    pub(crate) keys: u64,
    /// Keys overwritten before the clean close.
    pub(crate) updates: u64,
}

/// One open or close, timed.
#[derive(Debug, Clone)]
pub(crate) struct Timed {
    /// Seconds it took.
    pub(crate) secs: f64,
    /// What the open found (`None` for a close).
    pub(crate) report: Option<RecoveryReport>,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub(crate) struct ReopenResult {
    /// Filling the pool (transactions of 16 puts), seconds.
    pub(crate) fill_secs: f64,
    /// The open after the crash (full recovery).
    pub(crate) after_crash: Timed,
    /// The clean close after the updates (their descriptors folded into nodes).
    pub(crate) close: Timed,
    /// The open after the clean close.
    pub(crate) after_close: Timed,
    /// The pool file's size at the end, bytes.
    pub(crate) file_bytes: u64,
}

fn engine_config() -> EngineConfig {
    EngineConfig::rings(16 << 20)
}

fn open(path: &Path) -> Result<(Engine<MmapMem>, Timed)> {
    let start = Instant::now();
    let pool = crate::pool::open_pool(path)?;
    let (engine, report) = Engine::open(pool, engine_config())?;
    Ok((engine, Timed { secs: start.elapsed().as_secs_f64(), report: Some(report) }))
}

/// Puts `keys` keys (values `key + round`) in transactions of 16 puts.
fn put_all(engine: &Engine<MmapMem>, keys: u64, round: u64) -> Result<()> {
    // A multiplicative walk over the key space: the keys in an order unrelated to their values.
    const STEP: u64 = 0x9E37_79B9_7F4A_7C15;
    crate::pool::put_in_batches(
        engine,
        StructId(0),
        (0..keys).map(|k| k.wrapping_mul(STEP)).map(|key| (key, key.wrapping_add(round))),
    )
}

/// Runs the case on a new pool at `path`.
pub(crate) fn run_case(case: &ReopenCase, path: &Path) -> Result<ReopenResult> {
    if case.updates > case.keys {
        return Err(BenchError::InvalidArgument(format!("{} updates of {} keys", case.updates, case.keys)));
    }
    let engine = Engine::create(crate::pool::create_pool(path, false)?, engine_config())?;
    engine.create_structure(case.structure, KeyWidth::U64, Values::Words)?;
    let start = Instant::now();
    put_all(&engine, case.keys, 0)?;
    let fill_secs = start.elapsed().as_secs_f64();
    // As a crash leaves it: the mapping is dropped, nothing is marked.
    drop(engine.into_pool().map_err(|_| BenchError::Check("the engine is still shared".into()))?);
    let (engine, after_crash) = open(path)?;
    put_all(&engine, case.updates, 1)?;
    let start = Instant::now();
    engine.close()?;
    let close = Timed { secs: start.elapsed().as_secs_f64(), report: None };
    let (engine, after_close) = open(path)?;
    for t in [&after_crash, &after_close] {
        let present = t.report.as_ref().map_or(0, |r| r.present_keys);
        if present != case.keys {
            return Err(BenchError::Check(format!("{present} keys after an open, {} put", case.keys)));
        }
    }
    engine.close()?;
    let file_bytes = std::fs::metadata(path)?.len();
    Ok(ReopenResult { fill_secs, after_crash, close, after_close, file_bytes })
}
