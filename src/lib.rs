//! Support shared by the workspace's cross-crate tests (`tests/`) and criterion benches
//! (`benches/`).

use std::path::PathBuf;

/// A fresh directory for pool files, removed when dropped: under `/dev/shm` where it exists (the
/// usual stand-in for persistent memory), else under the system temporary directory.
pub fn scratch_dir() -> tempfile::TempDir {
    let shm = PathBuf::from("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("petra-");
    if shm.is_dir()
        && let Ok(dir) = builder.tempdir_in(&shm)
    {
        return dir;
    }
    builder.tempdir().expect("cannot create a temporary directory")
}
