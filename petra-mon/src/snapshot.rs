//! A store file opened for reading only, without writing a byte of it.
//!
//! Opening a pool writes: it marks the pool in use, and after a crash recovery rewrites nodes.
//! A reader that may not write the file (a read-only copy, another user's store) or must not
//! (an archive) opens it here instead: the file is opened read-only under a shared lock (so no
//! daemon holds it, and none can take it meanwhile), and the pool lives in a [`SnapshotMem`], a
//! private copy of the file made a segment at a time as it is first read. Whatever opening and
//! recovery write goes into that copy, never into the file: recovery runs in memory only.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use petra::error::OpenError;
use petra::mem::{Durability, GrowError, PMem, WORD};
use petra::pool::header::HEADER_SIZE;
use petra::pool::{Header, Pool};
use petra_kv::{KvError, MetricStore};

use crate::MonError;

/// Bytes of the file copied at once, on the first read of any of them.
const SEGMENT: u64 = 1 << 20;

/// Pool memory that starts as a copy of a file, made lazily; writes stay in the copy.
#[derive(Debug)]
pub struct SnapshotMem {
    file: File,
    path: PathBuf,
    /// The file's length when opened: bytes beyond it read as zero.
    file_len: u64,
    /// Bytes accessible now (the file's length, or more after growth).
    len: AtomicU64,
    max_len: u64,
    segments: Box<[OnceLock<Box<[AtomicU64]>>]>,
}

impl SnapshotMem {
    /// A copy of `file` (opened for reading, and locked by the caller) that may grow to
    /// `max_len` bytes.
    pub fn new(file: File, path: &Path, max_len: u64) -> std::io::Result<SnapshotMem> {
        let file_len = file.metadata()?.len();
        let max_len = max_len.max(file_len).next_multiple_of(SEGMENT);
        let segments = (0..max_len / SEGMENT).map(|_| OnceLock::new()).collect();
        Ok(SnapshotMem { file, path: path.to_owned(), file_len, len: AtomicU64::new(file_len), max_len, segments })
    }

    /// The word at `off`, its segment copied in first if it was not yet.
    #[track_caller]
    fn word(&self, off: u64) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(WORD) && off + WORD <= self.len.load(Ordering::Relaxed),
            "pool word access at offset {off:#x} is misaligned or beyond the pool's {} bytes",
            self.len.load(Ordering::Relaxed)
        );
        let i = (off / SEGMENT) as usize;
        let segment = self.segments[i].get_or_init(|| {
            let start = i as u64 * SEGMENT;
            let mut bytes = vec![0u8; SEGMENT as usize];
            let in_file = self.file_len.saturating_sub(start).min(SEGMENT) as usize;
            if let Err(e) = self.file.read_exact_at(&mut bytes[..in_file], start) {
                // The file is locked against writers and was long enough when opened: only a
                // failing device gets here, and a reader can do nothing better than stop.
                panic!("cannot read {} at {start}: {e}", self.path.display());
            }
            bytes.chunks_exact(8).map(|w| AtomicU64::new(u64::from_le_bytes(w.try_into().expect("8 bytes")))).collect()
        });
        &segment[((off % SEGMENT) / WORD) as usize]
    }
}

impl PMem for SnapshotMem {
    fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    fn load(&self, off: u64, order: Ordering) -> u64 {
        self.word(off).load(order)
    }

    fn store(&self, off: u64, val: u64, order: Ordering) {
        self.word(off).store(val, order)
    }

    fn compare_exchange(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.word(off).compare_exchange(current, new, success, failure)
    }

    fn fetch_add(&self, off: u64, val: u64, order: Ordering) -> u64 {
        self.word(off).fetch_add(val, order)
    }

    /// Nothing to write back: the copy is memory.
    fn flush(&self, _off: u64) {}

    fn fence(&self) {}

    fn grow(&self, new_len: u64) -> Result<(), GrowError> {
        if new_len > self.max_len {
            return Err(GrowError::AboveMaximum { requested: new_len, max: self.max_len });
        }
        self.len.fetch_max(new_len, Ordering::Relaxed);
        Ok(())
    }

    fn max_len(&self) -> u64 {
        self.max_len
    }

    /// Nothing survives the process: the file is never written.
    fn durability(&self) -> Durability {
        Durability::Volatile
    }
}

/// Opens the metric store in the file at `path` for reading, writing nothing to the file. Fails
/// with [`MonError::Held`] if a daemon holds it (it is then to be asked instead).
pub fn open_metric_store(path: &Path) -> Result<MetricStore<SnapshotMem>, MonError> {
    let file = File::open(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => MonError::Store(KvError::Open(OpenError::NotFound { path: path.to_owned() })),
        _ => MonError::Read { path: path.to_owned(), source },
    })?;
    file.try_lock_shared().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => MonError::Held(path.to_owned()),
        std::fs::TryLockError::Error(source) => MonError::Read { path: path.to_owned(), source },
    })?;
    let mut page = vec![0u8; HEADER_SIZE as usize];
    let len = file.metadata().map_err(|source| MonError::Read { path: path.to_owned(), source })?.len();
    if len < HEADER_SIZE {
        return Err(KvError::Open(OpenError::TooSmall { len, min: HEADER_SIZE }).into());
    }
    file.read_exact_at(&mut page, 0).map_err(|source| MonError::Read { path: path.to_owned(), source })?;
    let header = Header::decode(&page).map_err(KvError::Open)?;
    let mem = SnapshotMem::new(file, path, header.layout.max_len())
        .map_err(|source| MonError::Read { path: path.to_owned(), source })?;
    let pool = Pool::open_in(mem).map_err(KvError::Open)?;
    Ok(MetricStore::open_in(pool)?)
}
