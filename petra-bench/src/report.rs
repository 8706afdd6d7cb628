//! Result files of `petra-bench micro|kv|tatp|steady --out DIR`: rows as CSV and JSON. Each
//! benchmark says what its rows are.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{BenchError, Result};

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
