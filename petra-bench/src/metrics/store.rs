//! The petra-kv metric store as a [`MetricTarget`]: the sets of one schema of u64 data metrics,
//! each thread through its own [`MetricSession`].

use std::path::Path;

use petra_kv::{
    Config, CreateMode, DurabilityPolicy, KvError, Metric, MetricSession, MetricStore, Sample, Scalar, Schema, SetId,
    SetInfo,
};

use super::{MetricsCase, SEC};
use crate::error::Result;
use crate::targets::metric::{MetricSessionOf, MetricTarget};

/// The metric store, with the sets of the run.
pub(super) struct PetraTarget {
    store: MetricStore,
    sets: Vec<SetId>,
}

impl PetraTarget {
    /// A new store at `path` (growing up to `max_size` bytes) holding `case.sets` sets of the
    /// schema of `case.metrics` u64 data metrics.
    pub(super) fn create(
        path: &Path,
        case: &MetricsCase,
        max_size: u64,
        durability: DurabilityPolicy,
    ) -> Result<PetraTarget> {
        let size = crate::pool::START_BYTES;
        let config = Config { create: CreateMode::Create, size, max_size, durability, ..Config::new(path) };
        let store = MetricStore::open(&config)?;
        crate::cli::note_safe_points(store.engine());
        let schema = Schema {
            name: "cray".into(),
            metrics: (0..case.metrics).map(|i| Metric::data(&format!("m{i}"), Scalar::U64)).collect(),
        };
        store.add_schema(&schema)?;
        let sets = (0..case.sets)
            .map(|i| {
                let producer = format!("nid{:05}", i + 1);
                store.add_set(&SetInfo {
                    instance: format!("{producer}/cray"),
                    schema: "cray".into(),
                    producer,
                    component_id: i as u64 + 1,
                    job_id: 0,
                    interval_ns: SEC,
                })
            })
            .collect::<Result<Vec<SetId>, KvError>>()?;
        Ok(PetraTarget { store, sets })
    }

    /// The pool file's size, bytes.
    pub(super) fn file_bytes(&self) -> u64 {
        self.store.engine().pool().len()
    }

    /// Closes the store.
    pub(super) fn close(self) -> Result<()> {
        Ok(self.store.close()?)
    }
}

impl MetricTarget for PetraTarget {
    type Session<'a> = PetraSession<'a>;

    fn session(&self) -> Result<PetraSession<'_>> {
        Ok(PetraSession { session: self.store.session()?, sets: &self.sets, out: Vec::new() })
    }
}

/// One thread's session on the store, with the sets of the run.
pub(super) struct PetraSession<'s> {
    session: MetricSession<'s>,
    sets: &'s [SetId],
    /// Reused by `range_reused`.
    out: Vec<Sample>,
}

impl MetricSessionOf for PetraSession<'_> {
    fn store(&mut self, set: usize, sample: &Sample) -> Result<()> {
        Ok(self.session.store_sample(self.sets[set], sample).map(drop)?)
    }

    fn latest(&mut self, set: usize) -> Result<Option<u64>> {
        Ok(self.session.latest(self.sets[set])?.map(|s| s.generation))
    }

    fn range(&mut self, set: usize, from: u64, to: u64) -> Result<usize> {
        Ok(self.session.range(self.sets[set], from, to)?.len())
    }

    fn range_reused(&mut self, set: usize, from: u64, to: u64) -> Result<usize> {
        self.session.range_into(self.sets[set], from, to, &mut self.out)?;
        Ok(self.out.len())
    }

    fn scan(&mut self, set: usize, from: u64, to: u64) -> Result<usize> {
        let mut n = 0;
        self.session.scan(self.sets[set], from, to, |s| {
            std::hint::black_box(s);
            n += 1;
            std::ops::ControlFlow::Continue(())
        })?;
        Ok(n)
    }
}
