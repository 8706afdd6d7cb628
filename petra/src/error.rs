//! Errors: one enum per operation, each converting into the umbrella [`Error`].

use std::io;
use std::path::PathBuf;

/// Why a pool could not be opened. The file is never modified when any of these is returned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// There is no file at the path.
    #[error("no pool file at {path}")]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// Another handle (in this or another process) holds the pool's exclusive lock.
    #[error("the pool {path} is open elsewhere (its exclusive lock is held)")]
    Locked {
        /// The path given.
        path: PathBuf,
    },
    /// The file is shorter than a pool header.
    #[error("not a pool: the file has {len} bytes, fewer than the {min}-byte header")]
    TooSmall {
        /// The file's length.
        len: u64,
        /// The header's length.
        min: u64,
    },
    /// The header is all zero bytes: not a pool, or one whose creation never finished.
    #[error("not a pool: the header is all zeroes (an empty file, or an interrupted create)")]
    Zeroed,
    /// The file does not start with the pool magic.
    #[error("not a pool: wrong magic {found:02x?}")]
    BadMagic {
        /// The first eight bytes of the file.
        found: [u8; 8],
    },
    /// The pool was written by a format this build does not read.
    #[error("unsupported pool format version {found} (this build reads version {supported})")]
    UnsupportedVersion {
        /// The version in the header.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The header's checksum does not match its contents.
    #[error("corrupt pool header: checksum {stored:#010x} stored, {computed:#010x} computed")]
    HeaderChecksum {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the header's bytes.
        computed: u32,
    },
    /// The header's layout fields are inconsistent.
    #[error("corrupt pool header: {0}")]
    BadLayout(String),
    /// Both copies of the header's state line fail their checks: which boot the pool was last in
    /// use in, and whether it was closed cleanly, is unknown. A crash leaves at least one whole.
    #[error("corrupt pool header: both copies of the state line fail their checks")]
    StateLine,
    /// The file is shorter than its header and chunk table say it must be.
    #[error("truncated pool: the file has {len} bytes, the pool needs {expected}")]
    Truncated {
        /// The file's length.
        len: u64,
        /// The length the pool's metadata requires.
        expected: u64,
    },
    /// Reading the file, or mapping it, failed.
    #[error("cannot open the pool {path}: {source}")]
    Io {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// Why a pool could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CreateError {
    /// A file already exists at the path; it is left alone.
    #[error("cannot create a pool at {path}: a file exists there")]
    Exists {
        /// The path given.
        path: PathBuf,
    },
    /// The configuration is not usable.
    #[error("invalid pool configuration: {0}")]
    InvalidConfig(String),
    /// Creating, sizing or mapping the file failed.
    #[error("cannot create the pool {path}: {source}")]
    Io {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// Why an allocation failed. Nothing was allocated.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocError {
    /// The pool reached its maximum size.
    #[error("pool full: {requested} more bytes needed, the pool is at its maximum of {max} bytes")]
    PoolFull {
        /// Bytes the allocation needed.
        requested: u64,
        /// The pool's maximum size.
        max: u64,
    },
    /// The request is larger than the kind of block asked for can be.
    #[error("allocation of {requested} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Bytes asked for.
        requested: u64,
        /// The largest possible.
        limit: u64,
    },
    /// The pool file could not be extended.
    #[error("cannot grow the pool: {0}")]
    Grow(String),
    /// The file system has no room to extend the pool file (it is left as it was).
    #[error("the file system is full: no room for {requested} more bytes of the pool")]
    NoSpace {
        /// Bytes the pool needed to grow by.
        requested: u64,
    },
}

/// Damage found in a pool: bytes that fail their check, a word that names something that is not
/// there, or two things that must agree and do not. Finding it changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at offset {at:#x}")]
pub struct Damage {
    /// What is wrong.
    pub what: String,
    /// Where: the pool offset of the damaged word, record, descriptor or value.
    pub at: u64,
}

/// Why the allocator could not be rebuilt from a set of live offsets.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RebuildError {
    /// A live offset is not the start of an allocated block.
    #[error("live offset {off:#x} is not the start of an allocated block: {why}")]
    NotABlock {
        /// The offset.
        off: u64,
        /// What is at the offset instead.
        why: String,
    },
    /// An offset appears twice in the live set: two owners of one block.
    #[error("live offset {off:#x} is claimed twice")]
    DoubleUse {
        /// The offset.
        off: u64,
    },
}

/// Why the engine refused a request. A refused transaction changed nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// More ops than a descriptor holds.
    #[error("a transaction holds at most {max} ops, not {ops}")]
    TooManyOps {
        /// Ops given.
        ops: usize,
        /// The most allowed.
        max: usize,
    },
    /// An op names a structure the engine does not have.
    #[error("no structure in root slot {0}")]
    UnknownStructure(u8),
    /// A writing op's value is not of the kind its structure holds (a word for a structure of
    /// byte values, or bytes for one of words).
    #[error("structure {structure} holds values of kind {expected:?}: the op gives the other kind")]
    WrongValue {
        /// The structure's root slot.
        structure: u8,
        /// What the structure holds.
        expected: crate::tx::Values,
    },
    /// An op's key is not of the width its structure holds (or a scan's keys are not).
    #[error("structure {structure} holds keys of width {expected:?}: the key given is of the other width")]
    WrongKey {
        /// The structure's root slot.
        structure: u8,
        /// What the structure holds.
        expected: crate::key::KeyWidth,
    },
    /// A structure of this kind cannot hold keys of this width.
    #[error("a structure of kind {kind:?} cannot hold keys of width {keys:?}")]
    KeyWidthUnsupported {
        /// The kind asked for.
        kind: crate::tx::StructureKind,
        /// The key width asked for.
        keys: crate::key::KeyWidth,
    },
    /// The root table is full.
    #[error("the pool's root table is full")]
    TooManyStructures,
    /// Pool memory ran out (the transaction was aborted and changed nothing).
    #[error(transparent)]
    Alloc(AllocError),
    /// The pool holds no engine (none was created, or its creation was interrupted).
    #[error("the pool holds no engine: create one with Engine::create")]
    NoEngine,
    /// The pool's engine metadata is damaged.
    #[error("corrupt engine state: {0}")]
    Corrupt(String),
    /// The pool is damaged: refused, and left as it was (see [`Damage`]).
    #[error("damaged pool: {0}")]
    Damaged(#[from] Damage),
    /// The configuration is not usable.
    #[error("invalid engine configuration: {0}")]
    InvalidConfig(String),
    /// The engine cannot be closed while a clone or a handle of it lives.
    #[error("the engine is still in use: a clone or a handle of it lives")]
    InUse,
    /// Making recovery durable failed.
    #[error("recovery failed: {0}")]
    Io(#[from] io::Error),
    /// A range scan's snapshot was expired while the scan was under way: it was held while
    /// writers wrote descriptors and replaced values past
    /// [`EngineConfig::snapshot_limit`](crate::EngineConfig::snapshot_limit) (a caller that
    /// reads the entries slowly, or a long walk under fast writers). Nothing changed. If the
    /// walk stopped, the caller's function was not called; if a read of a value stopped, the
    /// entries and values it had before were the snapshot's. Scan again.
    #[error(
        "the scan's snapshot at txid {txid} was expired: writers wrote and replaced more while it was held than \
         the engine's snapshot limit allows"
    )]
    SnapshotExpired {
        /// The snapshot's txid.
        txid: u64,
    },
}

/// Why a byte value could not be read (see [`Blobs::read_into`](crate::Blobs::read_into)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Its bytes fail their check, or the word names no value.
    #[error(transparent)]
    Damaged(#[from] Damage),
    /// The reader is a scan's, and its snapshot was expired (see
    /// [`EngineError::SnapshotExpired`]): nothing was read.
    #[error("the scan's snapshot at txid {txid} was expired")]
    Expired {
        /// The snapshot's txid.
        txid: u64,
    },
}

impl From<ReadError> for EngineError {
    fn from(e: ReadError) -> EngineError {
        match e {
            ReadError::Damaged(d) => EngineError::Damaged(d),
            ReadError::Expired { txid } => EngineError::SnapshotExpired { txid },
        }
    }
}

/// Any error of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening a pool.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Creating a pool.
    #[error(transparent)]
    Create(#[from] CreateError),
    /// Allocating pool memory.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// Rebuilding allocator state.
    #[error(transparent)]
    Rebuild(#[from] RebuildError),
    /// Running transactions.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Other I/O.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<AllocError> for EngineError {
    fn from(e: AllocError) -> Self {
        EngineError::Alloc(e)
    }
}
