//! Errors of the store. Every refusal happens before anything changes.

use std::path::PathBuf;

use petra::error::{AllocError, CreateError, Damage, EngineError, OpenError, ReadError};

/// Why a store operation failed. Nothing changed in the store when one of these is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// A key is longer than [`MAX_KEY_LEN`](crate::MAX_KEY_LEN).
    #[error("a key of {len} bytes is longer than the limit of {max}")]
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value is longer than [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN).
    #[error("a value of {len} bytes is longer than the limit of {max}")]
    ValueTooLong {
        /// The value's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Long keys that share a bucket (see the crate docs) would together take more than a blob
    /// holds.
    #[error("the long keys that share a bucket with this one would take {len} bytes, more than the {max} a blob holds")]
    BucketTooLarge {
        /// The bytes the bucket would take.
        len: u64,
        /// The most a blob holds.
        max: u64,
    },
    /// A batch changes more engine entries than one transaction holds.
    #[error("a batch changes {entries} entries of the store; one atomic batch changes at most {max}")]
    BatchTooLarge {
        /// Entries the batch changes (keys, or buckets of long keys).
        entries: usize,
        /// The most one transaction holds.
        max: usize,
    },
    /// The pool cannot grow for the operation: it is at its maximum size.
    #[error("the store is full: {0}")]
    Full(AllocError),
    /// The file is a pool, but not one of this kind (or its creation never finished).
    #[error("{path}: not a {what}: {why}")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// The kind of pool expected.
        what: &'static str,
        /// What is missing.
        why: String,
    },
    /// The store exists with the other order than the configuration asks for.
    #[error("the store is {found}, the configuration asks for {asked}")]
    WrongOrder {
        /// The store's order.
        found: &'static str,
        /// The configuration's.
        asked: &'static str,
    },
    /// A schema of this name exists with other metrics.
    #[error("a schema named {0} exists with other metrics")]
    SchemaConflict(String),
    /// A schema repeats a metric name or declares an empty array.
    #[error("bad schema: {0}")]
    BadSchema(String),
    /// A set names a schema the store does not have.
    #[error("no schema named {0}")]
    UnknownSchema(String),
    /// A set of this instance name exists with another schema.
    #[error("a set named {0} exists with another schema")]
    SetConflict(String),
    /// No set has this id.
    #[error("no set with id {0}")]
    UnknownSet(u32),
    /// A sample does not fit its set.
    #[error("sample refused for set {set}: {why}")]
    BadSample {
        /// The set's instance name.
        set: String,
        /// What is wrong.
        why: String,
    },
    /// Closing while sessions are still open.
    #[error("the store still has open sessions; drop them before closing")]
    InUse,
    /// Creating the pool file failed.
    #[error(transparent)]
    Create(#[from] CreateError),
    /// Opening the pool file failed (the file is left untouched).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The engine failed.
    #[error(transparent)]
    Engine(EngineError),
    /// Bytes read back from the file fail their check (a damaged value, record or word): nothing
    /// was returned from them, and nothing was changed.
    #[error("damaged store: {0}")]
    Damaged(Damage),
    /// Syncing or closing the file failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl From<Damage> for KvError {
    fn from(d: Damage) -> Self {
        KvError::Damaged(d)
    }
}

impl From<ReadError> for KvError {
    fn from(e: ReadError) -> Self {
        KvError::from(EngineError::from(e))
    }
}

impl From<EngineError> for KvError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Alloc(a @ (AllocError::PoolFull { .. } | AllocError::NoSpace { .. })) => KvError::Full(a),
            EngineError::InUse => KvError::InUse,
            EngineError::Damaged(d) => KvError::Damaged(d),
            e => KvError::Engine(e),
        }
    }
}

/// Results of the store.
pub type Result<T, E = KvError> = std::result::Result<T, E>;
