//! The metric store: LDMS-style metric sets kept durably for monitoring daemons.
//!
//! A [`Schema`] names a set's metrics, each of a [`Scalar`] type or an array of one, and marks
//! each as meta (rarely changing: component id, core count) or data. A set instance
//! ([`SetInfo`], named `<component>/<sampler>`) follows one schema and carries its producer,
//! component id, job id and sampling interval. A [`Sample`] is one consistent reading of every
//! metric of a set, with its timestamp, duration, consistent flag and data generation number.
//!
//! # Storage
//! One pool holds three structures after the format's meta list (see `format.rs`): the catalog (skiplist, JSON records of
//! schemas and sets), the latest sample's timestamp per set (hash map of words), and the history
//! (skiplist keyed by set id and timestamp, each sample a blob of 8-byte words: timestamp,
//! duration, generation, flags, the previous sample's timestamp, then every metric element).
//! Storing a sample is **one transaction**: it moves the set's latest timestamp and inserts the
//! sample into the history, so after a crash the latest sample is always the last one in the
//! history.
//!
//! # Idempotence
//! A sample whose generation is not newer than the set's latest is not stored again
//! ([`Stored::Duplicate`]): a daemon that re-pulls a set after a crash cannot duplicate it. A
//! newer generation whose timestamp is not after the latest one's is refused
//! ([`KvError::BadSample`](crate::KvError::BadSample)): the history is ordered by time.
//!
//! # Cursors
//! A reader of the store can keep its position in it, durably, as a named cursor
//! ([`MetricStore::cursor`], [`MetricStore::set_cursor`]): a remote-write sender resumes from it
//! after a crash.
//!
//! # Concurrency
//! Readers take no lock. Writers of one set serialise on the set's lock (ingest compares with the
//! latest sample before it writes); writers of different sets run in parallel. The catalog is
//! read at open and kept in memory; adding schemas and sets takes a lock.

mod codec;
mod cursor;
mod query;
mod retention;
mod schema;
mod store;

pub use query::{WindowAcc, WindowStats};
pub use schema::{Metric, Sample, Scalar, Schema, SetId, SetInfo, Value};
pub use store::{MetricSession, MetricStore, Stored};
