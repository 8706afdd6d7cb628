//! `petra-bench metrics`: the metric store's ingest and queries on a set of `metrics` u64 data
//! metrics (144 by default: the size of the Cray set the dissertation samples), one thread.

use std::path::Path;
use std::time::Instant;

use petra_kv::{Config, CreateMode, Metric, MetricStore, Sample, Scalar, Schema, SetInfo, Value};

/// One run's settings.
#[derive(Debug, Clone)]
pub struct MetricsCase {
    /// Metrics in the set.
    pub metrics: usize,
    /// Samples stored.
    pub samples: u64,
    /// Latest-value reads timed.
    pub reads: u64,
    /// Range queries of `range_len` samples timed.
    pub ranges: u64,
    /// Samples per range query.
    pub range_len: u64,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct MetricsResult {
    /// Samples stored per second (each durable when stored).
    pub ingest_per_sec: f64,
    /// Mean latest-sample read, microseconds (decoded values included).
    pub latest_micros: f64,
    /// Mean range query, microseconds.
    pub range_micros: f64,
    /// The pool file's size after the run, bytes.
    pub file_bytes: u64,
}

const SEC: u64 = 1_000_000_000;

/// Runs the case on a new metric store at `path`.
pub fn run(case: &MetricsCase, path: &Path, max_size: u64) -> Result<MetricsResult, String> {
    if case.range_len > case.samples {
        return Err(format!("ranges of {} samples need at least that many samples", case.range_len));
    }
    let e = |e: petra_kv::KvError| e.to_string();
    let config = Config { create: CreateMode::Create, size: 64 << 20, max_size, ..Config::new(path) };
    let store = MetricStore::open(&config).map_err(e)?;
    let schema = Schema {
        name: "cray".into(),
        metrics: (0..case.metrics).map(|i| Metric::data(&format!("m{i}"), Scalar::U64)).collect(),
    };
    store.add_schema(&schema).map_err(e)?;
    let info = SetInfo {
        instance: "nid00001/cray".into(),
        schema: "cray".into(),
        producer: "nid00001".into(),
        component_id: 1,
        job_id: 0,
        interval_ns: SEC,
    };
    let set = store.add_set(&info).map_err(e)?;
    let result = {
        let mut s = store.session().map_err(e)?;
        let mut sample = Sample { timestamp: 0, duration: 1000, generation: 0, consistent: true, values: Vec::new() };
        let start = Instant::now();
        for g in 1..=case.samples {
            sample.timestamp = g * SEC;
            sample.generation = g;
            sample.values.clear();
            sample.values.extend((0..case.metrics as u64).map(|i| Value::U(g * 1000 + i)));
            s.store_sample(set, &sample).map_err(e)?;
        }
        let ingest_per_sec = case.samples as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut check = 0;
        for _ in 0..case.reads {
            check += s.latest(set).map_err(e)?.map_or(0, |x| x.generation);
        }
        let latest_micros = start.elapsed().as_secs_f64() * 1e6 / case.reads.max(1) as f64;
        if check != case.reads * case.samples {
            return Err("a latest read did not return the last sample".into());
        }
        let start = Instant::now();
        let span = case.samples - case.range_len + 1;
        for r in 0..case.ranges {
            let from = 1 + (r * 7919) % span;
            let got = s.range(set, from * SEC, (from + case.range_len - 1) * SEC).map_err(e)?;
            if got.len() as u64 != case.range_len {
                return Err(format!("a range query returned {} samples", got.len()));
            }
        }
        let range_micros = start.elapsed().as_secs_f64() * 1e6 / case.ranges.max(1) as f64;
        let file_bytes = store.engine().pool().len();
        MetricsResult { ingest_per_sec, latest_micros, range_micros, file_bytes }
    };
    store.close().map_err(e)?;
    Ok(result)
}
