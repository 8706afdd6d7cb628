//! The pool file: creation, reopening, refusal of bad files (untouched), locking, growth, a full
//! pool, the allocator and its rebuild.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;

use petra::error::{AllocError, CreateError, OpenError, RebuildError};
use petra::mem::{Counting, Durability, MemCounts, PMem, SimMem};
use petra::pool::header::{STATE_COPIES, State};
use petra::pool::{Mapping, POff, Pool, PoolConfig, RootEntry};
use petra_recovery::scratch_dir;

const CHUNK: u64 = 64 << 10;

fn small() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: 16 << 20, chunk_size: CHUNK, mapping: Mapping::default() }
}

fn open(path: &Path) -> Result<Pool, OpenError> {
    Pool::open(path, &Mapping::default())
}

/// Opens `path`, expects an error, and checks that the file's bytes did not change.
fn refused(path: &Path) -> OpenError {
    let before = std::fs::read(path).unwrap();
    let err = open(path).expect_err("a bad file must be refused");
    assert_eq!(std::fs::read(path).unwrap(), before, "a refused file must be left untouched ({err})");
    err
}

fn made_pool(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("p.pool");
    let pool = Pool::create(&path, &small()).unwrap();
    pool.close().unwrap();
    path
}

#[test]
fn create_close_reopen() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &small()).unwrap();
    assert!(!pool.was_clean());
    let uuid = pool.header().uuid;
    let slot = 3;
    pool.set_root(slot, RootEntry { kind: 7, flags: 0, params: [1, 2, 3, 0, 0, 0] }).unwrap();
    pool.close().unwrap();

    let pool = open(&path).unwrap();
    assert!(pool.was_clean());
    assert!(pool.same_boot(), "closed in this boot");
    assert_eq!(pool.header().uuid, uuid);
    assert_eq!(pool.root(slot).unwrap().params[..3], [1, 2, 3]);
    drop(pool); // no change, no close: the file is as it was, clean
    let before = std::fs::read(&path).unwrap();
    let pool = open(&path).unwrap();
    assert!(pool.was_clean(), "an open that changes nothing writes nothing");
    pool.local().alloc(64).unwrap(); // a change: marked in use first
    drop(pool); // no close
    assert_ne!(std::fs::read(&path).unwrap(), before);
    assert!(!open(&path).unwrap().was_clean(), "a pool changed and dropped without close needs recovery");
}

/// A pool says what its file keeps: a file on a disk is in the page cache (a power loss keeps
/// what a sync wrote), one in `/dev/shm` is memory (a power loss takes it whole). The engine keeps
/// safe points (syncs that a power loss cannot take back) on the first only, whatever the policy
/// asks: on the second no sync keeps anything.
#[test]
fn a_pool_says_what_its_file_keeps_and_the_engine_keeps_safe_points_only_where_they_keep_something() {
    use petra::{DurabilityPolicy, Engine, EngineConfig, Transaction};
    let disk = petra_recovery::disk_dir(env!("CARGO_TARGET_TMPDIR"));
    let shm = scratch_dir();
    assert!(shm.path().starts_with("/dev/shm"), "no /dev/shm: {}", shm.path().display());
    // Made under `Immediate`: a safe point for each write that returns; `sync` makes one more.
    fn safe_points_made<M: PMem + 'static>(pool: Pool<M>) -> u64 {
        let engine =
            Engine::create(pool, EngineConfig::rings(64 << 10).durability(DurabilityPolicy::Immediate)).unwrap();
        let s = engine.create_list().unwrap();
        let mut h = engine.handle().unwrap();
        for k in 0..5u64 {
            assert!(h.execute(Transaction::new().put(s, k, k + 1)).unwrap().is_committed());
        }
        engine.sync().unwrap();
        let made = engine.safe_points();
        drop(h);
        engine.close().unwrap();
        made
    }
    let on_disk = Pool::create(disk.path().join("p.pool"), &small()).unwrap();
    assert_eq!(on_disk.durability(), Durability::PageCache);
    assert!(safe_points_made(on_disk) >= 6);
    let in_memory = Pool::create(shm.path().join("p.pool"), &small()).unwrap();
    assert_eq!(in_memory.durability(), Durability::Memory);
    assert_eq!(safe_points_made(in_memory), 0);
    // What the tests that run safe points in `/dev/shm` wrap the file in.
    let wrapped = Pool::create(shm.path().join("q.pool"), &small()).unwrap().map_mem(petra_recovery::AsPageCache);
    assert_eq!(wrapped.durability(), Durability::PageCache);
    assert!(safe_points_made(wrapped) >= 6);
    // Reopened, each says the same.
    assert_eq!(open(&disk.path().join("p.pool")).unwrap().durability(), Durability::PageCache);
    assert_eq!(open(&shm.path().join("p.pool")).unwrap().durability(), Durability::Memory);
}

#[test]
fn create_refuses_an_existing_file_and_bad_configs() {
    let dir = scratch_dir();
    let path = dir.path().join("x");
    std::fs::write(&path, b"precious").unwrap();
    assert!(matches!(Pool::create(&path, &small()), Err(CreateError::Exists { .. })));
    assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    let odd = PoolConfig { chunk_size: 100_000, ..small() };
    assert!(matches!(Pool::create(dir.path().join("y"), &odd), Err(CreateError::InvalidConfig(_))));
    assert!(!dir.path().join("y").exists(), "a refused create leaves no file");
}

#[test]
fn every_kind_of_bad_file_is_refused_untouched() {
    let dir = scratch_dir();
    let good = std::fs::read(made_pool(dir.path())).unwrap();
    let bad = dir.path().join("bad");

    assert!(matches!(open(&dir.path().join("missing")), Err(OpenError::NotFound { .. })));

    std::fs::write(&bad, b"").unwrap();
    assert!(matches!(refused(&bad), OpenError::TooSmall { len: 0, .. }));

    std::fs::write(&bad, &good[..1000]).unwrap();
    assert!(matches!(refused(&bad), OpenError::TooSmall { len: 1000, .. }));

    std::fs::write(&bad, vec![0u8; good.len()]).unwrap();
    assert!(matches!(refused(&bad), OpenError::Zeroed));

    let mut b = good.clone();
    b[..8].copy_from_slice(b"SQLite f");
    std::fs::write(&bad, &b).unwrap();
    assert!(matches!(refused(&bad), OpenError::BadMagic { found } if &found == b"SQLite f"));

    // Files of the previous formats (check words mixed differently; version 2 without the checks
    // of chunk table entries, blob values and engine words; version 3 with value checks not tied
    // to their place; version 4 without the engine's safe point; version 5 with MDList nodes of
    // base-16 coordinates; version 6 with one copy of the state line; version 7 with free chunks'
    // table entries zero; version 8 with long values checked by XXH3; version 9 with the safe
    // txid word naming the last safe point, no claim; version 10 with a node's first link after its
    // record; version 11 with a node's norm and check words in the node) are refused.
    for old in [1u32, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11] {
        let mut b = good.clone();
        b[8..12].copy_from_slice(&old.to_le_bytes());
        std::fs::write(&bad, &b).unwrap();
        assert!(matches!(refused(&bad), OpenError::UnsupportedVersion { found, supported: 12 } if found == old));
    }

    // Both copies of the state line damaged (one alone is covered by the other).
    let mut b = good.clone();
    b[STATE_COPIES[0] as usize + 8] ^= 0x04;
    b[STATE_COPIES[1] as usize + 8] ^= 0x04;
    std::fs::write(&bad, &b).unwrap();
    assert!(matches!(refused(&bad), OpenError::StateLine));

    let mut b = good.clone();
    b[60] ^= 0x40; // inside the uuid
    std::fs::write(&bad, &b).unwrap();
    assert!(matches!(refused(&bad), OpenError::HeaderChecksum { .. }));

    // A chunk table entry inside the file that names no use.
    let mut b = good.clone();
    b[4096..4104].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&bad, &b).unwrap();
    assert!(matches!(refused(&bad), OpenError::BadLayout(why) if why.contains("chunk table entry 0")));

    // Cut in the middle of a chunk.
    std::fs::write(&bad, &good[..good.len() - 100]).unwrap();
    assert!(matches!(refused(&bad), OpenError::Truncated { .. }));

    // Random bytes.
    let noise: Vec<u8> = (0..good.len()).map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3]).collect();
    std::fs::write(&bad, &noise).unwrap();
    assert!(matches!(refused(&bad), OpenError::BadMagic { .. }));
}

#[test]
fn a_pool_cut_at_a_chunk_boundary_before_a_used_chunk_is_truncated() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &small()).unwrap();
    let mut local = pool.local();
    // Fill more chunks than the initial size holds, so the file grows.
    let initial = pool.len();
    while pool.len() == initial {
        local.alloc_blob(&[7u8; 16 << 10]).unwrap();
    }
    drop(local);
    pool.close().unwrap();
    let full = std::fs::read(&path).unwrap();
    // Cut back to the initial size: chunks in use beyond it are lost.
    std::fs::write(&path, &full[..initial as usize]).unwrap();
    assert!(matches!(refused(&path), OpenError::Truncated { .. }));
}

/// A zeroed chunk table entry inside the file is damage (a chunk in use would read as free and be
/// handed out again); past the file's end, zero is an entry never written, and a free entry
/// written ahead of a growth that did not happen is free.
#[test]
fn a_zeroed_chunk_table_entry_inside_the_file_is_refused_and_one_past_the_end_is_not() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &small()).unwrap();
    let mut local = pool.local();
    let initial = pool.len();
    let mut blobs = Vec::new();
    while pool.len() == initial {
        blobs.push(local.alloc_blob(&[7u8; 16 << 10]).unwrap());
    }
    drop(local);
    let chunks = (pool.len() - pool.header().layout.data_off) / CHUNK;
    pool.close().unwrap();
    let good = std::fs::read(&path).unwrap();
    assert!(open(&path).is_ok());
    let entry = |i: u64| (4096 + i * 8) as usize;
    for i in [0, chunks / 2, chunks - 1] {
        let mut b = good.clone();
        b[entry(i)..entry(i) + 8].fill(0);
        std::fs::write(&path, &b).unwrap();
        assert!(
            matches!(refused(&path), OpenError::BadLayout(why) if why.contains(&format!("chunk table entry {i} "))),
            "entry {i} of {chunks} zeroed"
        );
    }
    // The table's whole first page zeroed (every entry of the file's chunks).
    let mut b = good.clone();
    b[4096..8192].fill(0);
    std::fs::write(&path, &b).unwrap();
    assert!(matches!(refused(&path), OpenError::BadLayout(why) if why.contains("chunk table entry 0 ")));
    // Past the end: zero, or the free entries written before a growth, open.
    let mut b = good.clone();
    b[entry(chunks)..entry(chunks) + 8].fill(0);
    std::fs::write(&path, &b).unwrap();
    drop(open(&path).expect("a zero entry past the file's end was never written"));
    // After a power loss (the pool left in use in another boot), the file may have grown on the
    // disk without the table page holding the new entries: a zero entry reads as free, and the
    // first change writes it.
    let mut b = good.clone();
    let uuid = pool_uuid(&good);
    for (copy, &off) in STATE_COPIES.iter().enumerate() {
        for (i, w) in State::in_use(0x1234).encode(copy, &uuid).iter().enumerate() {
            let at = off as usize + i * 8;
            b[at..at + 8].copy_from_slice(&w.to_le_bytes());
        }
    }
    let last = entry(chunks - 1);
    b[last..last + 8].fill(0);
    std::fs::write(&path, &b).unwrap();
    let pool = open(&path).expect("after a power loss a zero entry inside the file reads as free");
    assert!(!pool.was_clean() && !pool.same_boot());
    pool.mark_in_use().unwrap();
    drop(pool);
    assert_ne!(std::fs::read(&path).unwrap()[last..last + 8], [0; 8], "the first change writes the entry");
    drop(open(&path).expect("and the pool opens"));
}

fn pool_uuid(bytes: &[u8]) -> [u8; 16] {
    bytes[48..64].try_into().unwrap()
}

/// A pool file with holes (a sparse copy: its zero pages not written) gets blocks for every byte
/// when it is opened, its bytes as they were: a store into a hole (on tmpfs even a load) on a
/// full file system would be a SIGBUS, where running out must be an error. A private mapping,
/// which never writes the file, leaves it as it is.
#[test]
fn a_sparse_copy_of_a_pool_gets_its_blocks_when_it_is_opened() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &PoolConfig { initial_size: 4 << 20, ..small() }).unwrap();
    pool.local().alloc_blob(&[7u8; 100]).unwrap();
    pool.close().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let copy = dir.path().join("sparse.pool");
    let file = std::fs::File::create_new(&copy).unwrap();
    file.set_len(bytes.len() as u64).unwrap();
    for (i, page) in bytes.chunks(4096).enumerate() {
        if page.iter().any(|&b| b != 0) {
            file.write_all_at(page, i as u64 * 4096).unwrap();
        }
    }
    drop(file);
    let blocks = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
    assert!(blocks(&copy) < bytes.len() as u64 / 2, "the copy is sparse: {} bytes of blocks", blocks(&copy));
    drop(Pool::open(&copy, &Mapping { private: true, ..Mapping::default() }).unwrap());
    assert!(blocks(&copy) < bytes.len() as u64 / 2, "a private mapping reserves nothing");
    drop(open(&copy).unwrap());
    assert!(blocks(&copy) >= bytes.len() as u64, "{} bytes of blocks for {}", blocks(&copy), bytes.len());
    assert!(std::fs::read(&copy).unwrap() == bytes, "the reservation changed bytes");
}

#[test]
fn a_held_pool_is_refused() {
    let dir = scratch_dir();
    let path = made_pool(dir.path());
    let held = open(&path).unwrap();
    let before = std::fs::read(&path).unwrap();
    assert!(matches!(open(&path), Err(OpenError::Locked { .. })));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    drop(held);
    open(&path).expect("free again once the holder is gone");
}

#[test]
fn a_pool_held_by_another_process_is_refused() {
    let dir = scratch_dir();
    let path = made_pool(dir.path());
    // flock(1) holds the same kind of lock the pool takes, from another process.
    // --no-fork: flock execs the command itself, so killing it releases everything.
    let Ok(mut holder) = std::process::Command::new("flock")
        .arg("--no-fork")
        .arg(&path)
        .args(["sleep", "30"])
        .stdout(std::process::Stdio::null())
        .spawn()
    else {
        panic!("flock(1) from util-linux is needed for this test");
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let err = loop {
        match open(&path) {
            Err(e @ OpenError::Locked { .. }) => break e,
            Ok(p) if std::time::Instant::now() < deadline => {
                drop(p); // flock has not taken it yet
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => panic!("expected Locked, got {other:?}"),
        }
    };
    assert!(err.to_string().contains("open elsewhere"), "{err}");
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn growth_keeps_offsets_and_contents_and_stops_at_the_maximum() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &small()).unwrap();
    let mut local = pool.local();
    let first = local.alloc(64).unwrap();
    pool.mem().store(first.get(), 0xABCD, Ordering::Relaxed);
    let initial = pool.len();
    let mut blobs = Vec::new();
    let err = loop {
        match local.alloc_blob(&[blobs.len() as u8; 40_000]) {
            Ok(b) => blobs.push(b),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, AllocError::PoolFull { .. }), "{err}");
    assert!(pool.len() > initial && pool.len() <= pool.max_len());
    assert_eq!(pool.mem().load(first.get(), Ordering::Relaxed), 0xABCD, "growth moved nothing");
    for (i, b) in blobs.iter().enumerate() {
        assert_eq!(pool.read_blob(*b).unwrap(), vec![i as u8; 40_000]);
    }
    // Full, yet freeing makes room again.
    local.free_blob(blobs.pop().unwrap());
    local.alloc_blob(&[1; 40_000]).expect("a freed block is reused");
    drop(local);
    let len = pool.len();
    pool.close().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
    let pool = open(&path).unwrap();
    assert_eq!(pool.read_blob(blobs[3]).unwrap(), vec![3u8; 40_000]);
}

#[test]
fn new_file_space_in_memory_is_faulted_in_at_creation_and_growth() {
    // On tmpfs a page is allocated when first faulted; the pool faults its new file space in at
    // once (one call, not a fault per page), so the file's allocated bytes equal its length after
    // creation and after each growth. (On a file system nothing is faulted in early.)
    use std::os::unix::fs::MetadataExt;
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &small()).unwrap();
    let on_tmpfs = dir.path().starts_with("/dev/shm");
    let allocated = || std::fs::metadata(&path).unwrap().blocks() * 512;
    // At least the length: a tmpfs of huge pages allocates in 2 MiB steps.
    if on_tmpfs {
        assert!(allocated() >= pool.len(), "created: {} of {} bytes allocated", allocated(), pool.len());
    }
    let mut local = pool.local();
    let initial = pool.len();
    while pool.len() < 2 * initial {
        local.alloc_blob(&[7; 40_000]).unwrap();
    }
    if on_tmpfs {
        assert!(allocated() >= pool.len(), "grown: {} of {} bytes allocated", allocated(), pool.len());
    }
}

#[test]
fn large_blobs_take_runs_of_chunks() {
    let pool = Pool::create_in(SimMem::new(0, 64 << 20), &small()).unwrap();
    let mut local = pool.local();
    let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    let a = local.alloc_blob(&data).unwrap();
    assert_eq!(pool.read_blob(a).unwrap(), data);
    assert_eq!(pool.chunk_counts().runs, 4, "200 000 bytes + length in 64 KiB chunks");
    local.free_blob(a);
    assert_eq!(pool.chunk_counts().runs, 0);
    let b = local.alloc_blob(&data).unwrap();
    assert_eq!(b, a, "the freed run is reused");
}

#[test]
fn allocation_is_flush_free_and_blocks_are_distinct() {
    let pool = Pool::create_in(Counting::new(SimMem::new(0, 64 << 20)), &small()).unwrap();
    let mut local = pool.local();
    // Warm up: the first allocation of a class persists its new chunk's use once.
    let first = local.alloc(32).unwrap();
    let before = MemCounts::current();
    let mut seen: HashSet<POff> = HashSet::from([first]);
    for _ in 0..1000 {
        assert!(seen.insert(local.alloc(32).unwrap()), "a block handed out twice");
    }
    let d = MemCounts::current() - before;
    assert_eq!((d.flushes, d.fences), (0, 0), "1000 allocations from one chunk flush nothing");
    for &b in seen.iter() {
        local.free(b);
    }
    let d = MemCounts::current() - before;
    assert_eq!((d.flushes, d.fences), (0, 0), "nor do frees");
}

#[test]
fn threads_never_share_a_block() {
    let pool = Pool::create_in(SimMem::new(0, 64 << 20), &small()).unwrap();
    let all: Vec<Vec<POff>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut local = pool.local();
                    let mut mine = Vec::new();
                    for i in 0..3000 {
                        mine.push(local.alloc(48).unwrap());
                        if i % 3 == 0 {
                            local.free(mine.swap_remove(i % mine.len()));
                        }
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut seen = HashSet::new();
    for off in all.into_iter().flatten() {
        assert!(seen.insert(off), "{off} held by two threads");
    }
}

#[test]
fn rebuild_frees_exactly_what_is_not_live() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &small()).unwrap();
    let mut local = pool.local();
    let nodes: Vec<POff> = (0..100).map(|_| local.alloc(64).unwrap()).collect();
    let blobs: Vec<POff> = (0..10).map(|i| local.alloc_blob(&[i; 100]).unwrap()).collect();
    let big = local.alloc_blob(&vec![9u8; 100_000]).unwrap();
    let dead_big = local.alloc_blob(&vec![8u8; 100_000]).unwrap();
    drop(local);
    pool.sync().unwrap();
    drop(pool); // a crash, as far as the allocator knows

    let pool = open(&path).unwrap();
    // Before rebuild, nothing allocated before can be handed out again.
    {
        let mut local = pool.local();
        for _ in 0..200 {
            assert!(!nodes.contains(&local.alloc(64).unwrap()));
        }
    }
    drop(pool);

    let mut pool = open(&path).unwrap();
    let live: Vec<POff> = nodes.iter().step_by(2).chain(blobs.iter().take(5)).chain([&big]).copied().collect();
    // Bad live sets are refused and change nothing.
    let inside = POff::new(nodes[0].get() + 8);
    assert!(matches!(pool.rebuild([inside]), Err(RebuildError::NotABlock { .. })));
    assert!(matches!(pool.rebuild([nodes[0], nodes[0]]), Err(RebuildError::DoubleUse { .. })));
    assert!(matches!(pool.rebuild([POff::new(8)]), Err(RebuildError::NotABlock { .. })));
    let report = pool.rebuild(live.iter().copied()).unwrap();
    assert_eq!(report.live_blocks, 50 + 5);
    assert_eq!(report.live_runs, 1);
    assert_eq!(report.freed_runs, 1);
    let mut local = pool.local();
    let reused = local.alloc_blob(&vec![1u8; 100_000]).unwrap();
    assert_eq!(reused, dead_big, "the dead large blob's run was freed");
    // Every dead node is free again, and no live block is handed out.
    let live_set: HashSet<POff> = live.iter().copied().collect();
    let mut got = HashSet::new();
    for _ in 0..2 * (CHUNK / 64) {
        let b = local.alloc(64).unwrap();
        assert!(!live_set.contains(&b), "{b} is live");
        assert!(got.insert(b), "{b} handed out twice");
    }
    let dead: HashSet<POff> = nodes.iter().skip(1).step_by(2).copied().collect();
    assert!(dead.is_subset(&got), "the 50 dead nodes are free again");
    assert_eq!(pool.read_blob(big).unwrap(), vec![9u8; 100_000]);
    drop(local);
    pool.close().unwrap();
}

#[test]
fn regions_survive_reopen() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &small()).unwrap();
    let r1 = pool.alloc_region(1, 1000).unwrap();
    let r2 = pool.alloc_region(2, 3 * CHUNK).unwrap();
    let r3 = pool.alloc_region(1, CHUNK + 1).unwrap();
    pool.mem().store(r2.get() + 8, 77, Ordering::Relaxed);
    pool.close().unwrap();
    let pool = open(&path).unwrap();
    assert_eq!(pool.regions(1), vec![(r1, CHUNK), (r3, 2 * CHUNK)]);
    assert_eq!(pool.regions(2), vec![(r2, 3 * CHUNK)]);
    assert_eq!(pool.mem().load(r2.get() + 8, Ordering::Relaxed), 77);
    pool.free_region(r2);
    assert!(pool.regions(2).is_empty());
    let again = pool.alloc_region(3, CHUNK).unwrap();
    assert_eq!(pool.mem().load(again.get() + 8, Ordering::Relaxed), 0, "a reused chunk is zeroed");
}

#[test]
fn volatile_mode_is_reported_and_skips_persistence() {
    let dir = scratch_dir();
    let path = made_pool(dir.path());
    let pool = Pool::open(&path, &Mapping { volatile: true, ..Mapping::default() }).unwrap();
    assert_eq!(pool.durability(), Durability::Volatile);
    assert!(matches!(
        Pool::open(dir.path().join("other"), &Mapping { require_dax: true, ..Mapping::default() }),
        Err(OpenError::NotFound { .. })
    ));
    drop(pool);
    let err = Pool::open(&path, &Mapping { require_dax: true, ..Mapping::default() }).unwrap_err();
    assert!(err.to_string().contains("DAX"), "{err}");
}

#[test]
fn a_cache_filled_before_a_rebuild_hands_out_nothing_twice() {
    let mut pool = Pool::create_in(SimMem::new(0, 64 << 20), &small()).unwrap();
    let mut cache = petra::pool::AllocCache::new();
    let blocks: Vec<POff> = (0..10).map(|_| pool.alloc(&mut cache, 64).unwrap()).collect();
    for &b in &blocks[..5] {
        pool.free(&mut cache, b); // the cache now holds these five
    }
    pool.rebuild(blocks[5..].iter().copied()).unwrap(); // ...which the rebuild also frees
    let mut seen = HashSet::new();
    for _ in 0..(CHUNK / 64) {
        let b = pool.alloc(&mut cache, 64).unwrap();
        assert!(!blocks[5..].contains(&b), "{b} is live");
        assert!(seen.insert(b), "{b} handed out twice");
    }
}

#[test]
#[should_panic(expected = "not the start of a whole Node block")]
fn freeing_the_fragment_at_a_chunks_end_is_refused() {
    let pool = Pool::create_in(SimMem::new(0, 64 << 20), &small()).unwrap();
    let mut cache = petra::pool::AllocCache::new();
    let first = pool.alloc(&mut cache, 48).unwrap();
    // 48-byte blocks, each with a 16-byte record area: the record areas after the last block
    // are no block.
    let chunk_start = first.get() - (first.get() - pool.header().layout.data_off) % CHUNK;
    pool.free(&mut cache, POff::new(chunk_start + (CHUNK / 64) * 48));
}

#[test]
fn prefetch_hints_stay_inside_the_mapping() {
    use petra::{Engine, EngineConfig, KeyWidth, StructureKind, Transaction, Values};
    let dir = scratch_dir();
    let pool = Pool::create(dir.path().join("p.pool"), &small()).unwrap();
    let (len, last) = (pool.mem().len(), pool.mem().len() - 8);
    // Inside, at the end, past the end and unaligned: a hint never panics.
    for off in [0, last, last + 3, len, u64::MAX] {
        pool.mem().prefetch(off);
    }
    let engine = Engine::create(pool, EngineConfig::rings(1 << 16)).unwrap();
    let s = engine.create_structure(StructureKind::SkipList, KeyWidth::U64, Values::Bytes).unwrap();
    let mut h = engine.handle().unwrap();
    h.execute(Transaction::new().put_bytes(s, 1u64, b"one")).unwrap();
    let got = h
        .range_with(s, .., |e: Vec<(u64, u64)>, blobs| {
            let w = e[0].1;
            // Lengths past the end of the pool, and words outside it, are clamped or ignored.
            blobs.prefetch(w, usize::MAX);
            blobs.prefetch(w, 0);
            blobs.prefetch(len - 8, 1 << 20);
            blobs.prefetch(u64::MAX - 7, 64);
            blobs.to_vec(w).unwrap()
        })
        .unwrap();
    assert_eq!(got, b"one");
}
