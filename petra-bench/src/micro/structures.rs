//! PETRA's structures as a [`TxMap`]: each configuration on a fresh structure in a pool file of
//! its own, its flushes and fences counted.

use std::path::Path;

use petra::mem::{Counting, MmapMem};
use petra::{Engine, EngineConfig, Handle, KeyWidth, OpKind, Outcome, StructId, Transaction, Values};

use super::{MicroCase, MicroResult, Mode, measure};
use crate::error::{BenchError, Result};
use crate::targets::tx::{TxMap, TxWorker};
use crate::workload::GenOp;

/// PETRA's structure `list` in `engine`, as a [`TxMap`].
struct PetraMap<'e> {
    engine: &'e Engine<Counting<MmapMem>>,
    list: StructId,
    encoding: Encoding<'e>,
    /// Whether checkpoint rounds run as rings fill (a checkpoint fill above 0): only then would
    /// the timed run fold the prefill's descriptors, so only then are they folded before it.
    rounds: bool,
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

    fn worker(&self) -> Result<PetraWorker<'_>> {
        let mut h = self.engine.handle()?;
        // Take the descriptor ring (a region, zeroed and persisted once) before timing.
        let mut warm = Transaction::new();
        self.encoding.push(&mut warm, self.list, OpKind::Get, 0, 0);
        self.encoding.push(&mut warm, self.list, OpKind::Get, 1, 0);
        h.execute(&warm)?;
        Ok(PetraWorker { map: self, h, tx: Transaction::new() })
    }

    /// Folds the prefill's descriptors into the nodes' records, if rounds run: checkpoints
    /// until the checkpoint txid covers every txid handed out. Otherwise the rounds that fold
    /// them (a million descriptors for a key range of a million) run inside the timed run
    /// whenever a ring's fill and a safe point let them, which depends on how long the run
    /// lasts. The C++ harness has no such work: its prefill leaves nothing for its timed run.
    ///
    /// Every txid the prefill handed out belongs to a descriptor (each of its transactions
    /// writes one, the worker's read-only warm-up too), so the criterion is reached once the
    /// last of them is folded.
    fn settle(&self) -> Result<()> {
        if !self.rounds {
            return Ok(());
        }
        // A checkpoint folds what the last round found, finds the rest and folds it if the
        // first round's end has run: a few tries are enough.
        const TRIES: u32 = 16;
        for _ in 0..TRIES {
            if let Some(report) = self.engine.checkpoint()?
                && report.txid >= self.engine.txid_watermark()
            {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // A safe point that failed holds the checkpoint txid back: its error says why.
        self.engine.sync()?;
        Err(BenchError::NotSettled(TRIES))
    }
}

impl PetraWorker<'_> {
    fn execute(&mut self, ops: impl Iterator<Item = (OpKind, u64, u64)>) -> Result<Outcome> {
        self.tx.clear();
        for (kind, key, value) in ops {
            self.map.encoding.push(&mut self.tx, self.map.list, kind, key, value);
        }
        Ok(self.h.execute(&self.tx)?)
    }
}

impl TxWorker for PetraWorker<'_> {
    fn put_all(&mut self, keys: &[u64]) -> Result<u64> {
        Ok(match self.execute(keys.iter().map(|&k| (OpKind::Put, k, 0)))? {
            Outcome::Committed { results, .. } => results.iter().filter(|r| r.is_none()).count() as u64,
            // Puts fail nothing: a cycle abort, and the caller's next batch goes on.
            Outcome::Aborted { .. } => 0,
        })
    }

    fn run(&mut self, ops: &[GenOp]) -> Result<bool> {
        Ok(self.execute(ops.iter().map(|op| (op.kind, op.key, op.value)))?.is_committed())
    }
}

/// Runs one configuration on a fresh PETRA structure in a pool file under `dir`.
pub(super) fn run_petra(case: MicroCase, dir: &Path) -> Result<MicroResult> {
    let w = case.workload;
    let path = dir.join(format!("micro-{}-{}-{}-{}.pool", case.structure, case.mode, case.threads, w.tx_size));
    let _ = std::fs::remove_file(&path);
    // The file's mapping, wrapped in the counting seam so that flushes and fences are counted.
    let pool = crate::pool::create_pool(&path, case.mode == Mode::Volatile)?.map_mem(Counting::new);
    // Default rings (64 MiB): checkpoint rounds run as they fill, as in any long run.
    let config = EngineConfig::default().checkpoint_fill(case.checkpoint_fill);
    let engine = Engine::create(pool, config)?;
    let kind = case.structure.kind(w.key_range);
    let values = if case.value_size > 0 { Values::Bytes } else { Values::Words };
    let keys = if case.wide_keys { KeyWidth::U128 } else { KeyWidth::U64 };
    let list = engine.create_structure(kind, keys, values)?;
    let bytes = vec![0x5Au8; case.value_size];
    let encoding = Encoding { bytes: (case.value_size > 0).then_some(&bytes[..]), wide_keys: case.wide_keys };
    let r = measure(case, &PetraMap { engine: &engine, list, encoding, rounds: case.checkpoint_fill > 0 });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::locks::LockMap;
    use crate::micro::prefill;
    use crate::micro::tests::present;
    use crate::workload::Prefill;

    #[test]
    fn petra_prefilled_as_the_harness_holds_the_keys_the_baseline_holds() {
        // The same seed draws the same keys for PETRA's structures as for the baseline: the
        // same count present, and each key a Find finds.
        let dir = tempfile::tempdir().unwrap();
        for (kind, range) in [
            (petra::StructureKind::HashMap { buckets: 4096 }, 4096),
            (petra::StructureKind::List, 1024),
            (petra::StructureKind::SkipList, 4096),
            (petra::StructureKind::MdList, 4096),
        ] {
            let path = dir.path().join("prefill.pool");
            let _ = std::fs::remove_file(&path);
            let pool = crate::pool::create_pool(&path, false).unwrap().map_mem(Counting::new);
            let engine = Engine::create(pool, EngineConfig::default()).unwrap();
            let list = engine.create_structure(kind, KeyWidth::U64, Values::Words).unwrap();
            let encoding = Encoding { bytes: None, wide_keys: false };
            let map = PetraMap { engine: &engine, list, encoding, rounds: true };
            let petra = prefill(&map, range, Prefill::Harness, 7).unwrap();
            let baseline = prefill(&LockMap::default(), range, Prefill::Harness, 7).unwrap();
            assert_eq!(petra, baseline, "{kind:?}");
            assert_eq!(present(&map, range), petra, "{kind:?}");
            let expected = Prefill::Harness.expected_share(range) * range as f64;
            assert!((petra as f64 - expected).abs() < 0.05 * range as f64, "{kind:?}: {petra}, {expected:.0} expected");
            drop(engine);
        }
    }

    #[test]
    fn settling_folds_every_prefill_descriptor_and_the_records_hold_the_keys() {
        // On a page-cache pool (safe points kept: a round folds what one covers) and on a
        // volatile one (none).
        for volatile in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("settle.pool");
            let pool = crate::pool::create_pool(&path, volatile).unwrap().map_mem(Counting::new);
            let engine = Engine::create(pool, EngineConfig::default()).unwrap();
            let kind = petra::StructureKind::HashMap { buckets: 1024 };
            let list = engine.create_structure(kind, KeyWidth::U64, Values::Words).unwrap();
            let encoding = Encoding { bytes: None, wide_keys: false };
            let range = 4096;
            let present_before = {
                let map = PetraMap { engine: &engine, list, encoding, rounds: true };
                let present = prefill(&map, range, Prefill::Harness, 7).unwrap();
                map.settle().unwrap();
                present
            };
            // One descriptor per prefill transaction, committed or not, and the worker's
            // warm-up: every one folded, and nothing left for another checkpoint.
            assert_eq!(engine.checkpoint_stats().descriptors, range + 1, "volatile: {volatile}");
            let again = engine.checkpoint().unwrap().expect("no round is running");
            assert_eq!(again.descriptors, 0, "volatile: {volatile}");
            // Opened again, with the checkpoint txid past every descriptor: the records alone
            // say which keys are present.
            let Ok(pool) = engine.into_pool() else { panic!("the engine is still in use") };
            let (engine, _) = Engine::open(pool, EngineConfig::default()).unwrap();
            let map = PetraMap { engine: &engine, list, encoding, rounds: true };
            assert_eq!(present(&map, range), present_before, "volatile: {volatile}");
        }
    }
}
