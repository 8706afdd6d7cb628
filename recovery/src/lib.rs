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
//! - [`scratch_dir`], [`try_scratch_dir`]: a fresh directory for pool files.
//!
//! It is the one home of what the workspace's tests share (`tests/` at the root, and each
//! crate's own tests).

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
