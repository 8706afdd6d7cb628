//! Result files of `petra-bench micro|kv|tatp --out DIR`: the rows as CSV and JSON, and for
//! `micro` SVG plots of throughput against threads and against transaction size (the
//! dissertation's figures 5.5 to 5.8 plot these).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::Serialize;

use crate::error::{BenchError, Result};
use crate::kv::KvResult;
use crate::micro::MicroResult;
use crate::tatp::{TYPES, TatpCase, TatpResult};

/// One row of a micro run, as written to the files.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct MicroRow {
    /// The structure.
    pub(crate) structure: String,
    /// The mix, insert/delete[/update]/find.
    pub(crate) mix: String,
    /// durable, volatile, locks or skipmap.
    pub(crate) mode: String,
    /// Threads.
    pub(crate) threads: usize,
    /// Ops per transaction.
    pub(crate) tx_size: usize,
    /// Committed transactions per second.
    pub(crate) tx_per_sec: f64,
    /// Operations of committed transactions per second.
    pub(crate) ops_per_sec: f64,
    /// Aborted share of the transactions run, percent.
    pub(crate) abort_pct: f64,
    /// Flushes per transaction run.
    pub(crate) flushes_per_tx: f64,
    /// Fences per transaction run.
    pub(crate) fences_per_tx: f64,
}

impl From<&MicroResult> for MicroRow {
    fn from(r: &MicroResult) -> MicroRow {
        MicroRow {
            structure: r.case.structure.to_string(),
            mix: r.case.workload.mix.to_string(),
            mode: r.case.mode.to_string(),
            threads: r.case.threads,
            tx_size: r.case.workload.tx_size,
            tx_per_sec: r.tx_per_sec(),
            ops_per_sec: r.ops_per_sec(),
            abort_pct: r.abort_pct(),
            flushes_per_tx: r.flushes_per_tx(),
            fences_per_tx: r.fences_per_tx(),
        }
    }
}

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

/// One transaction type of one `petra-bench tatp` run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TatpRow {
    /// durable or volatile.
    pub(crate) mode: String,
    /// Threads.
    pub(crate) threads: usize,
    /// full or update-location.
    pub(crate) mix: String,
    /// Subscribers populated.
    pub(crate) subscribers: u64,
    /// Transactions of every type run per second, over all threads.
    pub(crate) tx_per_sec: f64,
    /// Seconds the population took.
    pub(crate) populate_secs: f64,
    /// The transaction type.
    pub(crate) transaction: String,
    /// Transactions of this type run.
    pub(crate) run: u64,
    /// Of those, the share that succeeded, percent.
    pub(crate) success_pct: f64,
    /// The specification's quoted success rate, percent.
    pub(crate) specified_pct: f64,
    /// The success rate the population rules imply, percent.
    pub(crate) implied_pct: f64,
}

impl TatpRow {
    /// The rows of run `r` of `case`: one per transaction type that ran.
    pub(crate) fn of(case: &TatpCase, r: &TatpResult) -> Vec<TatpRow> {
        r.per_type
            .iter()
            .zip(&TYPES)
            .filter(|((run, _), _)| *run > 0)
            .map(|(&(run, ok), &(name, _, spec, implied))| TatpRow {
                mode: if case.volatile { "volatile" } else { "durable" }.into(),
                threads: case.threads,
                mix: case.mix.to_string(),
                subscribers: case.subscribers,
                tx_per_sec: r.tx_per_sec,
                populate_secs: r.populate_secs,
                transaction: name.into(),
                run,
                success_pct: ok as f64 * 100.0 / run as f64,
                specified_pct: spec,
                implied_pct: implied,
            })
            .collect()
    }
}

/// Writes `rows` as `{stem}.csv` (a header of the field names, then a line per row) and
/// `{stem}.json` (an array of objects) in `dir`, which is created if missing; returns the two
/// paths.
pub(crate) fn write_rows<R: Serialize>(dir: &Path, stem: &str, rows: &[R]) -> Result<Vec<PathBuf>> {
    let file = |path: &Path, source| BenchError::File { path: path.to_path_buf(), source };
    std::fs::create_dir_all(dir).map_err(|e| file(dir, e))?;
    let (csv_path, json_path) = (dir.join(format!("{stem}.csv")), dir.join(format!("{stem}.json")));
    let csv_error = |source| BenchError::Csv { path: csv_path.clone(), source };
    let mut w = csv::Writer::from_path(&csv_path).map_err(csv_error)?;
    for r in rows {
        w.serialize(r).map_err(csv_error)?;
    }
    w.flush().map_err(|e| file(&csv_path, e))?;
    let f = std::fs::File::create(&json_path).map_err(|e| file(&json_path, e))?;
    serde_json::to_writer_pretty(std::io::BufWriter::new(f), rows)
        .map_err(|source| BenchError::Json { path: json_path.clone(), source })?;
    Ok(vec![csv_path, json_path])
}

/// What a plot's x axis is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Axis {
    /// Threads, one line per (mix, transaction size, mode).
    Threads,
    /// Transaction size, one line per (mix, threads, mode).
    TxSize,
}

/// Plots committed transactions per second against `axis` as an SVG at `path`, one line per
/// series.
pub(crate) fn plot(path: &Path, rows: &[MicroRow], axis: Axis) -> Result<()> {
    let e = |e: &dyn std::fmt::Display| BenchError::Plot { path: path.to_path_buf(), message: e.to_string() };
    // Series name -> points (x, tx/s), x ascending.
    let mut series: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
    for r in rows {
        let (x, name) = match axis {
            Axis::Threads => (r.threads, format!("{} size {} {}", r.mix, r.tx_size, r.mode)),
            Axis::TxSize => (r.tx_size, format!("{} {} thr {}", r.mix, r.threads, r.mode)),
        };
        series.entry(name).or_default().push((x as u32, r.tx_per_sec));
    }
    for points in series.values_mut() {
        points.sort_by_key(|p| p.0);
    }
    let x_max = series.values().flatten().map(|p| p.0).max().unwrap_or(1);
    // A log scale: the baselines run an order of magnitude apart from PETRA.
    let y_max = rows.iter().map(|r| r.tx_per_sec).fold(1.0, f64::max) * 2.0;
    let y_min =
        (rows.iter().map(|r| r.tx_per_sec).filter(|&t| t > 0.0).fold(f64::MAX, f64::min) / 2.0).clamp(1.0, y_max / 4.0);
    let structure = rows.first().map_or("", |r| r.structure.as_str());
    let (caption, x_desc) = match axis {
        Axis::Threads => (format!("{structure}: committed tx/s against threads"), "threads"),
        Axis::TxSize => (format!("{structure}: committed tx/s against transaction size"), "ops per transaction"),
    };
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(1u32..x_max.max(2), (y_min..y_max).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("committed tx/s (log scale)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)).point_size(3))
            .map_err(|x| e(&x))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))
}

/// Writes `micro.csv`, `micro.json`, and the plots that have more than one point per line
/// (`micro-threads.svg`, `micro-txsize.svg`) into `dir`; returns the files written.
pub(crate) fn write_all(dir: &Path, rows: &[MicroRow]) -> Result<Vec<PathBuf>> {
    let mut written = write_rows(dir, "micro", rows)?;
    let distinct = |f: fn(&MicroRow) -> usize| {
        let mut v: Vec<usize> = rows.iter().map(f).collect();
        v.sort_unstable();
        v.dedup();
        v.len()
    };
    if distinct(|r| r.threads) > 1 {
        let p = dir.join("micro-threads.svg");
        plot(&p, rows, Axis::Threads)?;
        written.push(p);
    }
    if distinct(|r| r.tx_size) > 1 {
        let p = dir.join("micro-txsize.svg");
        plot(&p, rows, Axis::TxSize)?;
        written.push(p);
    }
    Ok(written)
}
