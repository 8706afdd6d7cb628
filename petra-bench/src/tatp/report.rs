//! The rows `petra-bench tatp` prints and writes.

use serde::Serialize;

use super::{TYPES, TatpCase, TatpResult};

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
