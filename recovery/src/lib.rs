//! The crash-recovery harness.
//!
//! - [`crash`]: runs a workload on the crash simulator ([`petra::mem::SimMem`]), takes crash
//!   images at the points a plan selects (every fence, every flush, random stores), runs the
//!   caller's recover-and-check on each, and reports how many images were checked and which failed,
//!   with what it takes to replay each failure.
//! - [`power`]: power loss on a file in the page cache: engine histories on the simulator's
//!   page-cache model, each image checked for every transaction acknowledged before the last sync
//!   and for a state the history went through since.
//! - [`kill`]: re-executes the test binary as a child, kills it with SIGKILL at a random moment,
//!   and lets the parent reopen the pool file and check it against what the child acknowledged.
//! - [`child`]: runs part of a test in a re-executed child with a timeout, so that a panic, a
//!   signal or a hang there is reported by the test rather than ending it.
//! - [`battery`]: the structures every engine test runs on (one of each kind, and two of
//!   two-word keys), and the helpers that speak to them in one-word keys and word values.
//! - [`model`]: the sequential model every transactional structure is checked against.
//! - [`scratch_dir`], [`try_scratch_dir`]: a fresh directory for pool files; [`disk_dir`] one on a
//!   disk, and [`AsPageCache`] a file in memory that the engine treats as one on a disk.
//!
//! It is the one home of what the workspace's tests share (`tests/` at the root, and each
//! crate's own tests).

use std::sync::atomic::Ordering;

use petra::mem::{Durability, GrowError, PMem};

pub mod battery;
pub mod child;
pub mod crash;
pub mod kill;
pub mod model;
pub mod power;

/// A fresh directory for pool files, removed when dropped: under `/dev/shm` where it exists (the
/// usual stand-in for persistent memory), else under the system temporary directory.
pub fn try_scratch_dir() -> std::io::Result<tempfile::TempDir> {
    let shm = std::path::Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("petra-");
    if shm.is_dir()
        && let Ok(dir) = builder.tempdir_in(shm)
    {
        return Ok(dir);
    }
    builder.tempdir()
}

/// [`try_scratch_dir`], for tests: panics if no directory can be made.
pub fn scratch_dir() -> tempfile::TempDir {
    try_scratch_dir().expect("cannot create a temporary directory")
}

/// A fresh directory for pool files under `base`, removed when dropped: for a test of safe points
/// that cannot wrap the pool's memory in [`AsPageCache`] (a process it runs, such as a daemon,
/// opens the file itself). Safe points are kept only on a file in the page cache of a disk.
/// Integration tests pass `env!("CARGO_TARGET_TMPDIR")`, inside the build directory, on the disk
/// that holds the workspace.
pub fn disk_dir(base: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("petra-")
        .tempdir_in(base)
        .unwrap_or_else(|e| panic!("cannot create a directory in {base}: {e}"));
    assert!(!in_memory(dir.path()), "{base} is in memory (tmpfs or ramfs): safe points need a directory on a disk");
    dir
}

/// Whether a pool file in `dir` would be in memory (tmpfs or ramfs), as the pool itself tells.
fn in_memory(dir: &std::path::Path) -> bool {
    use petra::pool::{Mapping, Pool, PoolConfig};
    let path = dir.join("probe.pool");
    let config =
        PoolConfig { initial_size: 1 << 20, max_size: 16 << 20, chunk_size: 64 << 10, mapping: Mapping::default() };
    let pool =
        Pool::create(&path, &config).unwrap_or_else(|e| panic!("cannot create a pool in {}: {e}", dir.display()));
    let memory = pool.durability() == Durability::Memory;
    drop(pool);
    std::fs::remove_file(&path).unwrap();
    memory
}

/// Memory that says it is a file in the page cache of a disk ([`Durability::PageCache`]),
/// whatever it is; everything else is the inner memory's.
///
/// The engine keeps safe points only on such a file: on a file in memory (`/dev/shm`, where
/// [`scratch_dir`] puts pools) a power loss takes everything, synced or not, and it keeps none.
/// The tests that run safe points beside real kills (what a kill can find of them: the rings,
/// claims, slots and values they hold back, the background syncer) wrap a pool there in this
/// (`Pool::map_mem(AsPageCache)`), so that they need no disk, whose syncs would make them a
/// hundred times slower. A sync is the inner memory's: nothing on tmpfs, which loses nothing a
/// kill can take.
///
/// Every method of [`PMem`] is forwarded, the provided ones too (the file's own may be faster or
/// do more): one added to the trait must be added here.
#[derive(Debug)]
pub struct AsPageCache<M>(pub M);

impl<M: PMem> PMem for AsPageCache<M> {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn load(&self, off: u64, order: Ordering) -> u64 {
        self.0.load(off, order)
    }
    fn store(&self, off: u64, val: u64, order: Ordering) {
        self.0.store(off, val, order)
    }
    fn compare_exchange(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.0.compare_exchange(off, current, new, success, failure)
    }
    fn fetch_add(&self, off: u64, val: u64, order: Ordering) -> u64 {
        self.0.fetch_add(off, val, order)
    }
    fn flush(&self, off: u64) {
        self.0.flush(off)
    }
    fn fence(&self) {
        self.0.fence()
    }
    fn prefetch(&self, off: u64) {
        self.0.prefetch(off)
    }
    fn flush_range(&self, off: u64, len: u64) {
        self.0.flush_range(off, len)
    }
    fn read_bytes(&self, off: u64, buf: &mut [u8]) {
        self.0.read_bytes(off, buf)
    }
    fn write_bytes(&self, off: u64, data: &[u8]) {
        self.0.write_bytes(off, data)
    }
    fn grow(&self, new_len: u64) -> Result<(), GrowError> {
        self.0.grow(new_len)
    }
    fn populate(&self, from: u64, to: u64) {
        self.0.populate(from, to)
    }
    fn max_len(&self) -> u64 {
        self.0.max_len()
    }
    fn durability(&self) -> Durability {
        Durability::PageCache
    }
    fn boot(&self) -> u128 {
        self.0.boot()
    }
    fn sync(&self) -> std::io::Result<()> {
        self.0.sync()
    }
}
