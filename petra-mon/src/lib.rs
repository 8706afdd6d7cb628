//! The sampler daemon's library: samplers of `/proc` in the spirit of LDMS's (meminfo, vmstat,
//! loadavg, stat, diskstats) that keep what they read in a [`MetricStore`](petra_kv::MetricStore),
//! the `/metrics` page Prometheus scrapes, the remote-write sender that pushes the store to a
//! Prometheus remote-write receiver, and what `petra-ls` lists.
//!
//! | module | what it holds |
//! |---|---|
//! | [`proc`] | the files' formats: a text into a reading, or the line that broke it |
//! | [`sampling`] | a round: each file read and stored as a sample of its set's schema version |
//! | [`sets`] | schema versions, and the logical sets that gather them |
//! | [`families`] | a stored metric's Prometheus name, labels, type and unit (node_exporter's) |
//! | [`expose`] | the `/metrics` page, OpenMetrics or the classic text, and the daemon's own metrics |
//! | [`remote_write`] | the remote-write protocol and the sender that resumes from a durable cursor |
//! | [`listing`] | what `petra-ls` shows, from a store or from the daemon's `/ls` |
//! | [`snapshot`] | a store file opened for reading only: mapped privately, the file never written |
//! | [`config`] | the daemon's settings: flags, the configuration file, defaults |
//!
//! # Consistency and durability
//! Each sample is one transaction of the store: durable when the daemon counts it as stored,
//! to the degree the store's file and its durability policy allow (`--sync-every`, see
//! [`config::sync_every`]). On a page-cache file a stored sample survives the death of the
//! process; a power loss takes the store back to its last power-safe point, which under
//! `immediate` covers every stored sample. A daemon killed at any moment starts again where its
//! last stored sample left off: generations carry on, and no sample is stored twice.

pub mod config;
pub mod expose;
pub mod families;
pub mod listing;
pub mod proc;
pub mod remote_write;
pub mod sampling;
pub mod sets;
pub mod snapshot;

use std::path::PathBuf;

use petra_kv::KvError;

pub use proc::SAMPLERS;
pub use sampling::{Event, Producer, Sampler, now_ns, sample_once, setup};

/// Errors of the daemon and of `petra-ls`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MonError {
    /// An unknown sampler name, or one given twice.
    #[error("unknown or repeated sampler {0:?}: use some of {list}", list = SAMPLERS.join(", "))]
    UnknownSampler(String),
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No set of this name.
    #[error("no set named {0}")]
    NoSet(String),
    /// A set names a schema the store does not have.
    #[error("a set names the missing schema {0:?}")]
    NoSchema(String),
    /// A daemon holds the store's file: ask it instead.
    #[error("{} is held by a running petra-mon: ask it (petra-ls --from ADDR)", .0.display())]
    Held(PathBuf),
    /// The page could not be encoded.
    #[error("the metrics page could not be encoded")]
    Encode,
    /// A setting is wrong.
    #[error("{0}")]
    Config(String),
    /// The store refused.
    #[error(transparent)]
    Store(#[from] KvError),
}
