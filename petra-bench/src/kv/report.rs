//! The rows `petra-bench kv` prints and writes.

use serde::Serialize;

use super::KvResult;

/// One workload of `petra-bench kv`, as printed and written to the files (pmemkv_bench's
/// columns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct KvRow {
    /// sorted, unsorted, redb-none or redb-immediate.
    pub(crate) engine: String,
    /// Threads.
    pub(crate) threads: usize,
    /// The workload.
    pub(crate) benchmark: String,
    /// Wall-clock microseconds per operation.
    #[serde(rename = "micros/op")]
    pub(crate) micros_per_op: f64,
    /// Operations per second.
    #[serde(rename = "ops/sec")]
    pub(crate) ops_per_sec: f64,
    /// MB/s of keys and values.
    #[serde(rename = "MB/s")]
    pub(crate) mb_per_sec: f64,
    /// Reads and removes that found their key.
    pub(crate) found: u64,
    /// Latency percentiles in microseconds (with `--histogram` only).
    pub(crate) p50: Option<f64>,
    /// 99th percentile.
    pub(crate) p99: Option<f64>,
    /// 99.9th percentile.
    #[serde(rename = "p99.9")]
    pub(crate) p99_9: Option<f64>,
    /// 99.99th percentile and the slowest operation (in the files only: the printed lines are
    /// pmemkv_bench's, which stop at 99.9), where the rare long operations show.
    #[serde(rename = "p99.99")]
    pub(crate) p99_99: Option<f64>,
    pub(crate) max: Option<f64>,
}

impl KvRow {
    /// The row of result `r` of `engine` on `threads` threads.
    pub(crate) fn new(engine: &str, threads: usize, r: &KvResult) -> KvRow {
        KvRow {
            engine: engine.into(),
            threads,
            benchmark: r.name.clone(),
            micros_per_op: r.micros_per_op(),
            ops_per_sec: r.ops_per_sec(),
            mb_per_sec: r.mb_per_sec(),
            found: r.found,
            p50: r.percentile(50.0),
            p99: r.percentile(99.0),
            p99_9: r.percentile(99.9),
            p99_99: r.percentile(99.99),
            max: r.percentile(100.0),
        }
    }

    /// The row as pmemkv_bench prints it: three decimals of micros/op, whole ops/sec.
    pub(crate) fn line(&self) -> String {
        let p = |x: Option<f64>| x.map_or(String::new(), |x| format!("{x:.2}"));
        format!(
            "{},{},{},{:.3},{:.0},{:.1},{},{},{},{}",
            self.engine,
            self.threads,
            self.benchmark,
            self.micros_per_op,
            self.ops_per_sec,
            self.mb_per_sec,
            self.found,
            p(self.p50),
            p(self.p99),
            p(self.p99_9)
        )
    }
}
