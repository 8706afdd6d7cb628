//! What `petra-bench micro --out DIR` writes: its rows as CSV and JSON, and SVG plots of
//! throughput against threads and against transaction size (the dissertation's figures 5.5 to
//! 5.8 plot these).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::Serialize;

use super::MicroResult;
use crate::error::{BenchError, Result};
use crate::report::write_rows;

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
    /// Keys present after the prefill.
    pub(crate) prefilled: u64,
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
            prefilled: r.prefilled,
        }
    }
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
