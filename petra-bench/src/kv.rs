//! `petra-bench kv`: pmemkv_bench's workloads on a [`petra_kv::Store`], one thread.
//!
//! Keys are `key_size` bytes as pmemkv_bench makes them: the key number big-endian in the first 8
//! bytes (so the key order is the number order), `'0'` padding after; values are slices of one
//! random buffer. Each workload
//! runs on the store the previous ones left, as in pmemkv_bench.

use std::ops::{Bound, ControlFlow};
use std::path::Path;
use std::time::Instant;

use petra_kv::{Config, CreateMode, Order, Session, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The workloads, by pmemkv_bench's names.
pub const WORKLOADS: [&str; 8] =
    ["fillseq", "fillrandom", "overwrite", "readseq", "readrandom", "readmissing", "deleteseq", "deleterandom"];

/// One run's settings.
#[derive(Debug, Clone)]
pub struct KvCase {
    /// Keys written by the fill workloads, and the key range.
    pub num: u64,
    /// Operations of the read workloads.
    pub reads: u64,
    /// Bytes per key (at least 8).
    pub key_size: usize,
    /// Bytes per value.
    pub value_size: usize,
    /// Sorted (skiplist) or unsorted (hash map).
    pub order: Order,
    /// Seed of the random keys and values.
    pub seed: u64,
    /// Record each operation's latency (for percentiles).
    pub histogram: bool,
    /// Skip flushes and fences (what durability costs; nothing is durable).
    pub volatile: bool,
}

/// One workload's result.
#[derive(Debug, Clone)]
pub struct KvResult {
    /// The workload's name.
    pub name: String,
    /// Operations done.
    pub ops: u64,
    /// Seconds taken.
    pub secs: f64,
    /// Bytes of keys and values moved.
    pub bytes: u64,
    /// Of the reads, how many found their key.
    pub found: u64,
    /// Per-operation latencies in microseconds, sorted (empty without `histogram`).
    pub latencies: Vec<f64>,
}

impl KvResult {
    /// Microseconds per operation.
    pub fn micros_per_op(&self) -> f64 {
        self.secs * 1e6 / self.ops.max(1) as f64
    }

    /// Operations per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }

    /// MB/s of keys and values.
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e6
    }

    /// The `p`th percentile latency (microseconds), if recorded.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let n = self.latencies.len();
        (n > 0).then(|| self.latencies[((n as f64 * p / 100.0) as usize).min(n - 1)])
    }
}

/// pmemkv_bench's (db_bench's) key: the number big-endian in the first 8 bytes, `'0'` after.
fn key(buf: &mut Vec<u8>, size: usize, n: u64) {
    buf.clear();
    buf.extend_from_slice(&n.to_be_bytes());
    buf.resize(size, b'0');
}

/// Runs `workloads` in order on a new store at `path`.
pub fn run(case: &KvCase, workloads: &[String], path: &Path, max_size: u64) -> Result<Vec<KvResult>, String> {
    if case.key_size < 8 {
        return Err(format!("key size {} is below 8 bytes", case.key_size));
    }
    if let Some(w) = workloads.iter().find(|w| !WORKLOADS.contains(&w.as_str())) {
        return Err(format!("unknown benchmark {w:?}: use {}", WORKLOADS.join(", ")));
    }
    let config =
        Config { create: CreateMode::Create, order: case.order, size: 64 << 20, max_size, ..Config::new(path) };
    let store = Store::open(&config).map_err(|e| e.to_string())?;
    let mut rng = StdRng::seed_from_u64(case.seed);
    let values: Vec<u8> = (0..case.value_size + 4096).map(|_| rng.random()).collect();
    let mut results = Vec::new();
    {
        let mut s = store.session().map_err(|e| e.to_string())?;
        for w in workloads {
            results.push(one(&mut s, case, w, &values, &mut rng)?);
        }
    }
    store.close().map_err(|e| e.to_string())?;
    Ok(results)
}

fn one(s: &mut Session<'_>, case: &KvCase, name: &str, values: &[u8], rng: &mut StdRng) -> Result<KvResult, String> {
    let (num, ks, vs) = (case.num, case.key_size, case.value_size);
    let mut k = Vec::with_capacity(ks);
    let mut latencies = Vec::new();
    let mut found = 0u64;
    let err = |e: petra_kv::KvError| format!("{name}: {e}");
    let ops = match name {
        "readseq" | "readrandom" | "readmissing" => case.reads,
        _ => num,
    };
    let start = Instant::now();
    if name == "readseq" {
        let mut n = 0;
        s.scan(Bound::Unbounded, Bound::Unbounded, |_, v| {
            n += 1;
            found += (v.len() == vs) as u64;
            if n >= ops { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        })
        .map_err(err)?;
        let secs = start.elapsed().as_secs_f64();
        return Ok(KvResult { name: name.into(), ops: n, secs, bytes: n * (ks + vs) as u64, found, latencies });
    }
    for i in 0..ops {
        let t = case.histogram.then(Instant::now);
        match name {
            "fillseq" | "deleteseq" => key(&mut k, ks, i),
            // Missing keys: above the key range.
            "readmissing" => key(&mut k, ks, num + rng.random_range(0..num.max(1))),
            _ => key(&mut k, ks, rng.random_range(0..num.max(1))),
        }
        match name {
            "fillseq" | "fillrandom" | "overwrite" => {
                let at = rng.random_range(0..4096);
                s.put(&k, &values[at..at + vs]).map_err(err)?;
            }
            "readrandom" | "readmissing" => found += s.get_with(&k, |v| v.len()).map_err(err)?.is_some() as u64,
            _ => found += s.remove(&k).map_err(err)? as u64,
        }
        if let Some(t) = t {
            latencies.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    latencies.sort_by(f64::total_cmp);
    let bytes = match name {
        "fillseq" | "fillrandom" | "overwrite" => ops * (ks + vs) as u64,
        "readrandom" | "readmissing" => ops * ks as u64 + found * vs as u64,
        _ => ops * ks as u64,
    };
    Ok(KvResult { name: name.into(), ops, secs, bytes, found, latencies })
}
