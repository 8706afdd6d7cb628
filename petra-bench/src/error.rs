//! The one error of the benchmarks, [`BenchError`], and the [`Result`] they return.

use std::path::PathBuf;

use petra::EngineError;
use petra::error::{CreateError, OpenError};
use petra_kv::KvError;

/// A benchmark's result: its value, or why it could not run to the end.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Why a benchmark could not run, or stopped. Its message is what `petra-bench` prints.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An argument, or a combination of them, that the benchmark cannot run with.
    #[error("{0}")]
    InvalidArgument(String),
    /// A pool file could not be created.
    #[error(transparent)]
    CreatePool(#[from] CreateError),
    /// A pool file could not be opened.
    #[error(transparent)]
    OpenPool(#[from] OpenError),
    /// PETRA's engine failed an operation.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The key-value store or the metric store failed an operation.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// redb, the baseline, failed an operation.
    #[error("redb: {0}")]
    Redb(#[from] redb::Error),
    /// The prefill's transactions were still not all folded into the records after this many
    /// checkpoints, so timing would include their folding.
    #[error("the prefill was still not checkpointed after {0} checkpoints")]
    NotSettled(u32),
    /// An operation on a file of the run failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// No scratch directory could be made for the files of the run.
    #[error("cannot make a scratch directory: {0}")]
    ScratchDir(#[source] std::io::Error),
    /// A results directory or file could not be made or written.
    #[error("{}: {source}", path.display())]
    File {
        /// The directory or file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// Rows could not be written as CSV.
    #[error("{}: {source}", path.display())]
    Csv {
        /// The CSV file.
        path: PathBuf,
        /// What went wrong.
        source: csv::Error,
    },
    /// Rows could not be written as JSON.
    #[error("{}: {source}", path.display())]
    Json {
        /// The JSON file.
        path: PathBuf,
        /// What went wrong.
        source: serde_json::Error,
    },
    /// A plot could not be drawn.
    #[error("{}: {message}", path.display())]
    Plot {
        /// The SVG file.
        path: PathBuf,
        /// What went wrong, as plotters says it.
        message: String,
    },
    /// A thread of the run panicked.
    #[error("{0} panicked")]
    Panicked(&'static str),
    /// A workload of `kv` failed.
    #[error("{workload}: {source}")]
    Workload {
        /// The workload's name.
        workload: String,
        /// Why it failed.
        source: Box<BenchError>,
    },
    /// A check of the run failed: a store did not hold what the run put in it, or a step the run
    /// relies on did not happen. A bug to chase, not a slow store.
    #[error("{0}")]
    Check(String),
}

/// redb's errors, each into [`BenchError::Redb`] through redb's umbrella error.
macro_rules! from_redb {
    ($($error:ident),*) => {
        $(
            impl From<redb::$error> for BenchError {
                fn from(e: redb::$error) -> BenchError {
                    BenchError::Redb(e.into())
                }
            }
        )*
    };
}

from_redb!(DatabaseError, TransactionError, TableError, StorageError, CommitError, SetDurabilityError);
