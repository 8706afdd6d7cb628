//! The workloads of `petra-bench kv`, by pmemkv_bench's names, on any [`KvTarget`]: what each
//! thread does, and the merge of what they did into a [`KvResult`].

use std::fmt;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use clap::ValueEnum;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{KvCase, KvResult};
use crate::cli::spell;
use crate::error::{BenchError, Result};
use crate::targets::kv::{KvSession, KvTarget};

/// The workloads, by pmemkv_bench's names (see the [module docs](super)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "lower")]
pub(crate) enum Benchmark {
    /// Puts in key order.
    FillSeq,
    /// Puts at random keys.
    FillRandom,
    /// Puts at random keys, over what was put before.
    Overwrite,
    /// Puts at random keys in atomic batches of `tx_size`.
    TxFillRandom,
    /// Each thread scans from the first key.
    ReadSeq,
    /// Gets at random keys.
    ReadRandom,
    /// Gets at keys above the range.
    ReadMissing,
    /// Removes in key order.
    DeleteSeq,
    /// Removes at random keys.
    DeleteRandom,
    /// Gets (`readwritepercent` percent) or puts at random keys.
    ReadRandomWriteRandom,
    /// One thread puts at random keys while the others get at random keys; the gets count.
    ReadWhileWriting,
    /// One thread puts at random keys while the others scan from the first key, as `readseq`'s
    /// threads do; the keys scanned count.
    SeqWhileWriting,
}

/// Its name in reports and on the command line.
impl fmt::Display for Benchmark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        spell(self, f)
    }
}

/// pmemkv_bench's (db_bench's) key: the number big-endian in the first 8 bytes, `'0'` after.
fn key(buf: &mut Vec<u8>, size: usize, n: u64) {
    buf.clear();
    buf.extend_from_slice(&n.to_be_bytes());
    buf.resize(size, b'0');
}

/// Runs `workloads` in order on `target`, handing each result to `done` as it finishes, then
/// closes it.
pub(crate) fn run_on<T: KvTarget>(
    target: T,
    case: &KvCase,
    workloads: &[Benchmark],
    mut done: impl FnMut(&KvResult),
) -> Result<Vec<KvResult>> {
    let mut rng = StdRng::seed_from_u64(case.seed);
    let values: Vec<u8> = (0..case.value_size + 4096).map(|_| rng.random()).collect();
    let mut results = Vec::new();
    for (i, &w) in workloads.iter().enumerate() {
        let r = workload(&target, case, w, &values, case.seed.wrapping_add(1 + i as u64 * 1000))?;
        done(&r);
        results.push(r);
    }
    target.close()?;
    Ok(results)
}

/// What one thread did.
#[derive(Default)]
struct Tally {
    ops: u64,
    found: u64,
    bytes: u64,
    latencies: Vec<f64>,
}

/// Runs `benchmark` on `threads` threads and merges what they did.
fn workload<T: KvTarget>(
    target: &T,
    case: &KvCase,
    benchmark: Benchmark,
    values: &[u8],
    seed: u64,
) -> Result<KvResult> {
    let threads = case.threads;
    // readwhilewriting on more than one thread: thread 0 writes while the others read.
    let writer = matches!(benchmark, Benchmark::ReadWhileWriting | Benchmark::SeqWhileWriting) && threads > 1;
    let readers_left = AtomicUsize::new(threads - writer as usize);
    let start = Instant::now();
    let tallies: Vec<Result<Tally>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let readers_left = &readers_left;
                scope.spawn(move || {
                    let rng = StdRng::seed_from_u64(seed + t as u64);
                    let s = target.session();
                    if writer && t == 0 {
                        let mut w = Worker { case, values, rng, part: 0, parts: 1 };
                        return s.and_then(|mut s| w.write_while(&mut s, readers_left)).map(|()| Tally::default());
                    }
                    // The readers share the operations out: thread 0 is the writer, if any.
                    let (part, parts) = (t - writer as usize, threads - writer as usize);
                    let mut w = Worker { case, values, rng, part, parts };
                    let out = s.and_then(|mut s| w.run(&mut s, benchmark));
                    // Relaxed: a count to stop by, publishing nothing.
                    readers_left.fetch_sub(1, Ordering::Relaxed);
                    out
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err(BenchError::Panicked("a thread")))).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut all = Tally::default();
    for t in tallies {
        let t = t.map_err(|e| BenchError::Workload { workload: benchmark.to_string(), source: Box::new(e) })?;
        all.ops += t.ops;
        all.found += t.found;
        all.bytes += t.bytes;
        all.latencies.extend(t.latencies);
    }
    all.latencies.sort_by(f64::total_cmp);
    Ok(KvResult {
        name: benchmark.to_string(),
        ops: all.ops,
        secs,
        bytes: all.bytes,
        found: all.found,
        latencies: all.latencies,
    })
}

/// One thread of a workload.
struct Worker<'a> {
    case: &'a KvCase,
    values: &'a [u8],
    rng: StdRng,
    /// This thread's part of the operations, of `parts`.
    part: usize,
    parts: usize,
}

impl Worker<'_> {
    /// This thread's share of `total` operations: `[from, to)`.
    fn share(&self, total: u64) -> (u64, u64) {
        let (part, parts) = (self.part as u64, self.parts as u64);
        (total * part / parts, total * (part + 1) / parts)
    }

    fn value(&mut self) -> &[u8] {
        let at = self.rng.random_range(0..4096);
        &self.values[at..at + self.case.value_size]
    }

    fn random_key(&mut self, k: &mut Vec<u8>) {
        let n = self.rng.random_range(0..self.case.num.max(1));
        key(k, self.case.key_size, n);
    }

    fn run<S: KvSession>(&mut self, s: &mut S, benchmark: Benchmark) -> Result<Tally> {
        let (ks, vs) = (self.case.key_size as u64, self.case.value_size as u64);
        let mut tally = Tally::default();
        if matches!(benchmark, Benchmark::ReadSeq | Benchmark::SeqWhileWriting) {
            let (from, to) = self.share(self.case.reads);
            let mut n = 0;
            let want = to - from;
            if want > 0 {
                s.scan(&mut |k, v| {
                    n += 1;
                    tally.found += 1;
                    tally.bytes += (k.len() + v.len()) as u64;
                    if n >= want { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
                })?;
            }
            tally.ops = n;
            return Ok(tally);
        }
        let total = match benchmark {
            Benchmark::ReadRandom | Benchmark::ReadMissing | Benchmark::ReadWhileWriting => self.case.reads,
            _ => self.case.num,
        };
        let (from, to) = self.share(total);
        let mut k = Vec::with_capacity(self.case.key_size);
        // A batch's keys back to back, and its values: kept for reuse.
        let (mut batch_keys, mut batch_values) = (Vec::new(), Vec::with_capacity(self.case.tx_size));
        let mut i = from;
        while i < to {
            let t = self.case.histogram.then(Instant::now);
            let mut done = 1;
            match benchmark {
                Benchmark::FillSeq => {
                    key(&mut k, self.case.key_size, i);
                    s.put(&k, self.value())?;
                    tally.bytes += ks + vs;
                }
                Benchmark::FillRandom | Benchmark::Overwrite => {
                    self.random_key(&mut k);
                    s.put(&k, self.value())?;
                    tally.bytes += ks + vs;
                }
                Benchmark::TxFillRandom => {
                    done = (to - i).min(self.case.tx_size as u64);
                    batch_keys.clear();
                    batch_values.clear();
                    for _ in 0..done {
                        self.random_key(&mut k);
                        batch_keys.extend_from_slice(&k);
                        let at = self.rng.random_range(0..4096);
                        batch_values.push(&self.values[at..at + self.case.value_size]);
                    }
                    s.put_all(&batch_keys, &batch_values)?;
                    tally.bytes += done * (ks + vs);
                }
                Benchmark::ReadRandom | Benchmark::ReadWhileWriting => {
                    self.random_key(&mut k);
                    self.read(s, &k, &mut tally)?;
                }
                Benchmark::ReadMissing => {
                    let n = self.case.num + self.rng.random_range(0..self.case.num.max(1));
                    key(&mut k, self.case.key_size, n);
                    self.read(s, &k, &mut tally)?;
                }
                Benchmark::DeleteSeq => {
                    key(&mut k, self.case.key_size, i);
                    tally.found += s.remove(&k)? as u64;
                    tally.bytes += ks;
                }
                Benchmark::DeleteRandom => {
                    self.random_key(&mut k);
                    tally.found += s.remove(&k)? as u64;
                    tally.bytes += ks;
                }
                Benchmark::ReadRandomWriteRandom => {
                    self.random_key(&mut k);
                    if self.rng.random_range(0..100) < self.case.read_write_percent {
                        self.read(s, &k, &mut tally)?;
                    } else {
                        s.put(&k, self.value())?;
                        tally.bytes += ks + vs;
                    }
                }
                Benchmark::ReadSeq | Benchmark::SeqWhileWriting => unreachable!("a scan, run above"),
            }
            if let Some(t) = t {
                tally.latencies.push(t.elapsed().as_secs_f64() * 1e6);
            }
            tally.ops += done;
            i += done;
        }
        Ok(tally)
    }

    fn read<S: KvSession>(&mut self, s: &mut S, k: &[u8], tally: &mut Tally) -> Result<()> {
        tally.bytes += k.len() as u64;
        if let Some(len) = s.get_len(k)? {
            tally.found += 1;
            tally.bytes += len as u64;
        }
        Ok(())
    }

    /// `readwhilewriting`'s writer: random puts until the readers are done.
    fn write_while<S: KvSession>(&mut self, s: &mut S, readers_left: &AtomicUsize) -> Result<()> {
        let mut k = Vec::with_capacity(self.case.key_size);
        // Relaxed: a count to stop by, guarding no data.
        while readers_left.load(Ordering::Relaxed) > 0 {
            self.random_key(&mut k);
            s.put(&k, self.value())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;
    use crate::kv::{KvEngine, check};
    use crate::targets::kv::Visit;

    /// A store in a `BTreeMap` that counts what the workloads ask of it.
    #[derive(Default)]
    struct Model {
        map: Mutex<BTreeMap<Vec<u8>, usize>>,
        /// Key number -> puts of it.
        puts: Mutex<BTreeMap<u64, u64>>,
        /// Sizes of the batches.
        batches: Mutex<Vec<usize>>,
        /// Key numbers read.
        gets: Mutex<Vec<u64>>,
        removes: Mutex<u64>,
    }

    fn number(key: &[u8]) -> u64 {
        u64::from_be_bytes(key[..8].try_into().unwrap())
    }

    impl KvTarget for Model {
        type Session<'a> = &'a Model;

        fn session(&self) -> Result<&Model> {
            Ok(self)
        }

        fn close(self) -> Result<()> {
            Ok(())
        }
    }

    impl KvSession for &Model {
        fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
            self.map.lock().unwrap().insert(key.to_vec(), value.len());
            *self.puts.lock().unwrap().entry(number(key)).or_default() += 1;
            Ok(())
        }

        fn put_all(&mut self, keys: &[u8], values: &[&[u8]]) -> Result<()> {
            self.batches.lock().unwrap().push(values.len());
            for (k, v) in keys.chunks(keys.len() / values.len()).zip(values) {
                self.put(k, v)?;
            }
            Ok(())
        }

        fn get_len(&mut self, key: &[u8]) -> Result<Option<usize>> {
            self.gets.lock().unwrap().push(number(key));
            Ok(self.map.lock().unwrap().get(key).copied())
        }

        fn remove(&mut self, key: &[u8]) -> Result<bool> {
            *self.removes.lock().unwrap() += 1;
            Ok(self.map.lock().unwrap().remove(key).is_some())
        }

        fn scan(&mut self, f: &mut Visit<'_>) -> Result<()> {
            let value = [0u8; 128];
            for (k, &len) in self.map.lock().unwrap().iter() {
                if f(k, &value[..len]).is_break() {
                    break;
                }
            }
            Ok(())
        }
    }

    fn case(num: u64, threads: usize) -> KvCase {
        KvCase {
            num,
            reads: num,
            threads,
            key_size: 16,
            value_size: 100,
            read_write_percent: 70,
            tx_size: 8,
            engine: KvEngine::Sorted,
            seed: 7,
            histogram: true,
            volatile: false,
            durability: None,
        }
    }

    fn run_model(case: &KvCase, workloads: &[&str]) -> (Model, Vec<KvResult>) {
        let model = Model::default();
        let workloads: Vec<Benchmark> = workloads.iter().map(|w| Benchmark::from_str(w, false).unwrap()).collect();
        check(case).unwrap();
        let values: Vec<u8> = vec![1; case.value_size + 4096];
        let results = workloads.iter().map(|&w| workload(&model, case, w, &values, case.seed).unwrap()).collect();
        (model, results)
    }

    #[test]
    fn fillseq_puts_every_key_once_over_the_threads_and_reads_find_them_all() {
        let c = case(10_000, 3);
        let (model, r) = run_model(&c, &["fillseq", "readseq", "readrandom", "readmissing"]);
        let puts = model.puts.lock().unwrap();
        assert_eq!(puts.len(), 10_000);
        assert!(puts.iter().all(|(&k, &n)| k < 10_000 && n == 1));
        let counted: Vec<(&str, u64, u64)> = r.iter().map(|r| (r.name.as_str(), r.ops, r.found)).collect();
        assert_eq!(
            counted,
            [
                ("fillseq", 10_000, 0),
                ("readseq", 10_000, 10_000),
                ("readrandom", 10_000, 10_000),
                ("readmissing", 10_000, 0)
            ]
        );
        // Missing keys are above the range; per-op latencies were kept for every timed op.
        let gets = model.gets.lock().unwrap();
        assert!(gets[..10_000].iter().all(|&k| k < 10_000) && gets[10_000..].iter().all(|&k| k >= 10_000));
        assert_eq!(r[2].latencies.len(), 10_000);
    }

    #[test]
    fn random_keys_are_uniform_over_the_range() {
        let c = case(100_000, 2);
        let (model, _) = run_model(&c, &["fillrandom"]);
        let mut deciles = [0u64; 10];
        for (&k, &n) in model.puts.lock().unwrap().iter() {
            assert!(k < 100_000);
            deciles[(k / 10_000) as usize] += n;
        }
        assert_eq!(deciles.iter().sum::<u64>(), 100_000);
        assert!(deciles.iter().all(|&d| (9_500..=10_500).contains(&d)), "{deciles:?}");
    }

    #[test]
    fn readrandomwriterandom_reads_its_share() {
        let c = case(20_000, 2);
        let (model, r) = run_model(&c, &["readrandomwriterandom"]);
        let gets = model.gets.lock().unwrap().len() as f64;
        let puts = model.puts.lock().unwrap().values().sum::<u64>() as f64;
        assert_eq!(gets + puts, 20_000.0);
        assert!((gets / 20_000.0 - 0.70).abs() < 0.02, "{gets} reads of 20 000");
        assert_eq!(r[0].ops, 20_000);
    }

    #[test]
    fn txfillrandom_writes_batches_of_tx_size() {
        let c = case(1_000, 2);
        let (model, r) = run_model(&c, &["txfillrandom"]);
        let batches = model.batches.lock().unwrap();
        // Each thread's 500 puts: 62 batches of 8 and one of 4.
        assert_eq!(batches.iter().sum::<usize>(), 1_000);
        assert_eq!(batches.iter().filter(|&&b| b == 8).count(), 124);
        assert_eq!(batches.iter().filter(|&&b| b == 4).count(), 2);
        assert_eq!((r[0].ops, r[0].latencies.len()), (1_000, 126));
    }

    #[test]
    fn readwhilewriting_counts_the_readers_reads_only() {
        let c = case(5_000, 3);
        let (model, r) = run_model(&c, &["fillseq", "readwhilewriting"]);
        assert_eq!(r[1].ops, 5_000);
        assert_eq!(model.gets.lock().unwrap().len(), 5_000);
        // The writer overwrote keys of the range only.
        assert!(model.puts.lock().unwrap().keys().all(|&k| k < 5_000));
    }

    #[test]
    fn seqwhilewriting_counts_the_keys_the_scanners_scanned_only() {
        let c = case(5_000, 3);
        let (model, r) = run_model(&c, &["fillseq", "seqwhilewriting"]);
        // Two scanners, each its share of --reads keys from the first, as readseq's.
        assert_eq!((r[1].ops, r[1].found), (5_000, 5_000));
        assert!(model.gets.lock().unwrap().is_empty());
        assert!(model.puts.lock().unwrap().keys().all(|&k| k < 5_000));
    }

    #[test]
    fn deletes_remove_what_the_fill_put() {
        let c = case(2_000, 2);
        let (model, r) = run_model(&c, &["fillseq", "deleteseq", "deleterandom"]);
        assert_eq!((r[1].found, r[2].found), (2_000, 0));
        assert_eq!(*model.removes.lock().unwrap(), 4_000);
        assert!(model.map.lock().unwrap().is_empty());
    }
}
