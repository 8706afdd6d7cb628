//! Each check of what is read back from a pool file, on its own: root entries and their
//! parameters, sizes and offsets, the header's state line, values, private mappings. Every
//! refusal leaves the file byte for byte as it was. (The corruption battery, in
//! `petra-kv/tests/corruption.rs`, damages whole stores at random.)

use std::path::{Path, PathBuf};

use petra::error::{AllocError, Damage, EngineError, OpenError};
use petra::mem::{Durability, PMem};
use petra::pool::header::{ROOT_ENTRY_SIZE, ROOT_TABLE_OFF, STATE_COPIES};
use petra::pool::{Mapping, POff, Pool, PoolConfig, RootEntry};
use petra::{Engine, EngineConfig, KeyWidth, StructureKind, Transaction, Values};
use petra_recovery::scratch_dir;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: 64 << 20, chunk_size: 64 << 10, mapping: Mapping::default() }
}

fn rings() -> EngineConfig {
    EngineConfig::rings(64 << 10)
}

/// A closed engine pool at `dir/name` with a list, a hash map of 64 buckets and a skiplist of
/// byte values, a few keys in each.
fn made(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let engine = Engine::create(Pool::create(&path, &config()).unwrap(), rings()).unwrap();
    let list = engine.create_list().unwrap();
    let map = engine.create_hash_map(64).unwrap();
    let bytes = engine.create_structure(StructureKind::SkipList, KeyWidth::U64, Values::Bytes).unwrap();
    let mut h = engine.handle().unwrap();
    for k in 0..20u64 {
        let mut tx = Transaction::new();
        tx.put(list, k, k).put(map, k, k + 1).put_bytes(bytes, k, &[k as u8; 40]);
        assert!(h.execute(&tx).unwrap().is_committed());
    }
    drop(h);
    engine.close().unwrap();
    path
}

/// Opens the engine at `path`, expecting a refusal that leaves the file as it was.
fn refused(path: &Path) -> EngineError {
    let before = std::fs::read(path).unwrap();
    let err = match Pool::open(path, &Mapping::default()) {
        Ok(pool) => Engine::open(pool, rings()).expect_err("a damaged pool must be refused"),
        Err(e) => panic!("the pool itself was refused: {e}"),
    };
    assert_eq!(std::fs::read(path).unwrap(), before, "a refused file must be left untouched ({err})");
    err
}

/// Writes `entry` into root slot `slot` of the file at `path`, its checksum whole.
fn write_root(path: &Path, slot: u64, entry: &RootEntry) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = (ROOT_TABLE_OFF + slot * ROOT_ENTRY_SIZE) as usize;
    bytes[at..at + 64].copy_from_slice(&entry.encode());
    std::fs::write(path, bytes).unwrap();
}

fn root(path: &Path, slot: usize) -> RootEntry {
    Pool::open(path, &Mapping { private: true, ..Mapping::default() }).unwrap().root(slot).unwrap()
}

#[test]
fn root_entries_that_do_not_fit_the_pool_are_refused_untouched() {
    let dir = scratch_dir();
    let good = made(dir.path(), "good.pool");
    let (list, map, bytes) = (root(&good, 0), root(&good, 1), root(&good, 2));
    let cases: Vec<(&str, u64, RootEntry)> = vec![
        ("a hash map of 2^61 buckets", 1, RootEntry { params: [map.params[0], 1 << 61, 0, 0, 0, 0], ..map }),
        ("more buckets than its array holds", 1, RootEntry { params: [map.params[0], 64 << 20, 0, 0, 0, 0], ..map }),
        ("no buckets", 1, RootEntry { params: [map.params[0], 0, 0, 0, 0, 0], ..map }),
        ("a bucket array where none is", 1, RootEntry { params: [list.params[0], 64, 0, 0, 0, 0], ..map }),
        ("a head beyond the pool", 0, RootEntry { params: [u64::MAX - 63, 0, 0, 0, 0, 0], ..list }),
        ("a head not at a block's start", 0, RootEntry { params: [list.params[0] + 8, 0, 0, 0, 0, 0], ..list }),
        ("a head in a block too small", 2, RootEntry { params: [list.params[0], 0, 0, 0, 0, 0], ..bytes }),
        ("an unknown kind", 0, RootEntry { kind: 99, ..list }),
        ("unknown flags", 0, RootEntry { flags: 1 << 9, ..list }),
        ("parameters no structure has", 0, RootEntry { params: [list.params[0], 0, 7, 0, 0, 0], ..list }),
        ("the list's entry copied over another's", 2, list),
    ];
    for (what, slot, entry) in cases {
        let path = dir.path().join("bad.pool");
        std::fs::copy(&good, &path).unwrap();
        write_root(&path, slot, &entry);
        match refused(&path) {
            EngineError::Damaged(Damage { at, .. }) => {
                assert_eq!(at, ROOT_TABLE_OFF + slot * ROOT_ENTRY_SIZE, "{what}")
            }
            other => panic!("{what}: {other}"),
        }
    }
    // A root entry that fails its checksum is damage too: it belonged to a structure.
    let path = dir.path().join("torn.pool");
    std::fs::copy(&good, &path).unwrap();
    let mut b = std::fs::read(&path).unwrap();
    b[(ROOT_TABLE_OFF + ROOT_ENTRY_SIZE + 9) as usize] ^= 1;
    std::fs::write(&path, b).unwrap();
    assert!(matches!(refused(&path), EngineError::Damaged(_)));
}

#[test]
fn sizes_are_checked_before_they_are_used() {
    let dir = scratch_dir();
    // A hash map too large for the pool is refused at creation, and the pool stays usable.
    let path = dir.path().join("p.pool");
    let engine = Engine::create(Pool::create(&path, &config()).unwrap(), rings()).unwrap();
    for buckets in [1 << 61, u64::MAX, 64 << 20] {
        match engine.create_hash_map(buckets) {
            Err(EngineError::Alloc(AllocError::TooLarge { .. } | AllocError::PoolFull { .. })) => {}
            other => panic!("{buckets} buckets: {other:?}"),
        }
    }
    let list = engine.create_list().unwrap();
    engine.handle().unwrap().execute(Transaction::new().put(list, 1u64, 2)).unwrap();
    engine.close().unwrap();
    let (engine, _) = Engine::open(Pool::open(&path, &Mapping::default()).unwrap(), rings()).unwrap();
    assert_eq!(engine.entries::<u64>(list).unwrap(), [(1, 2)]);
    engine.close().unwrap();
    // Rings a descriptor does not fit, or that no run of chunks holds, are refused.
    for ring_bytes in [u64::MAX, u64::MAX - 4096, 0xFF_FFFF * (64 << 10) + 1] {
        let pool = Pool::open(&path, &Mapping::default()).unwrap();
        match Engine::open(pool, EngineConfig::rings(ring_bytes)) {
            Err(EngineError::InvalidConfig(_)) => {}
            other => panic!("rings of {ring_bytes} bytes: {:?}", other.map(|_| ())),
        }
        let pool = Pool::create(dir.path().join(format!("r{ring_bytes}.pool")), &config()).unwrap();
        assert!(matches!(Engine::create(pool, EngineConfig::rings(ring_bytes)), Err(EngineError::InvalidConfig(_))));
    }
}

#[test]
fn values_are_checked_where_they_are_and_when_they_are_read() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let pool = Pool::create(&path, &config()).unwrap();
    let mut local = pool.local();
    let blob = local.alloc_blob(b"a value").unwrap();
    let node = local.alloc(48).unwrap();
    drop(local);
    let mut buf = Vec::new();
    pool.check_blob(blob, &mut buf).unwrap();
    assert_eq!(buf, b"a value");
    // Offsets that name no value: misaligned, beyond the pool, a node block, a block's middle.
    for (what, off) in [
        ("misaligned", blob.get() + 3),
        ("beyond the pool", pool.len() + 64),
        ("past the end", u64::MAX - 7),
        ("a node block", node.get()),
        ("inside a block", blob.get() + 16),
    ] {
        assert!(pool.check_blob(POff::new(off), &mut buf).is_err(), "{what}");
        if what != "a node block" && what != "inside a block" {
            assert!(pool.read_blob_into(POff::new(off), &mut buf).is_err(), "{what}");
        }
    }
    assert_eq!(pool.node_block(POff::new(node.get() + 16)), None, "a node block's middle");
    assert_eq!(pool.node_block(blob), None, "a blob is no node block");
    // A flipped byte of a value is found by every read.
    pool.mem().write_bytes(blob.get() + 8 + 2, b"X");
    let damage = pool.read_blob_into(blob, &mut buf).unwrap_err();
    assert_eq!(damage.at, blob.get());
    assert!(buf.is_empty(), "nothing of a damaged value is returned");
    assert!(pool.check_blob(blob, &mut buf).is_err());
    pool.close().unwrap();
}

/// A value's check is tied to its place and to its pool: values swapped within a file, or copied
/// from another pool to the same offset, fail it; a damaged length is refused before anything is
/// copied; the bytes a slab chunk has beyond its last whole block are no block.
#[test]
fn values_moved_swapped_or_copied_fail_their_check_and_a_chunk_tail_is_no_block() {
    let dir = scratch_dir();
    let pool = Pool::create(dir.path().join("a.pool"), &config()).unwrap();
    let other = Pool::create(dir.path().join("b.pool"), &config()).unwrap();
    let mut local = pool.local();
    // 40-byte values: blocks of 48 bytes, which do not divide a chunk of 64 KiB.
    let (x, y) = (local.alloc_blob(&[1u8; 40]).unwrap(), local.alloc_blob(&[2u8; 40]).unwrap());
    let node = local.alloc(48).unwrap();
    drop(local);
    let z = other.local().alloc_blob(&[1u8; 40]).unwrap();
    assert_eq!(z, x, "the same allocation in two new pools lands at the same offset");
    let mut buf = Vec::new();
    let bytes = |p: &Pool, off: POff| {
        let mut b = vec![0u8; 48];
        p.mem().read_bytes(off.get(), &mut b);
        b
    };
    // Swapped within the pool: each value, header word included, where the other was.
    let (bx, by) = (bytes(&pool, x), bytes(&pool, y));
    pool.mem().write_bytes(x.get(), &by);
    pool.mem().write_bytes(y.get(), &bx);
    for off in [x, y] {
        assert!(pool.read_blob_into(off, &mut buf).is_err(), "a value swapped to {off} passed its check");
        assert!(pool.check_blob(off, &mut buf).is_err());
    }
    pool.mem().write_bytes(x.get(), &bx);
    pool.mem().write_bytes(y.get(), &by);
    pool.check_blob(x, &mut buf).unwrap();
    // Copied from another pool, to the same offset: the same bytes, another pool.
    assert_eq!(bytes(&other, z)[8..], bytes(&pool, x)[8..]);
    pool.mem().write_bytes(x.get(), &bytes(&other, z));
    assert!(pool.read_blob_into(x, &mut buf).is_err(), "a value copied from another pool passed its check");
    pool.mem().write_bytes(x.get(), &bx);
    // A length damaged to more than a block or a run holds: refused, nothing copied.
    for len in [41u64, 1 << 20, u32::MAX as u64] {
        let header = pool.mem().load(y.get(), std::sync::atomic::Ordering::Relaxed);
        pool.mem().store(y.get(), header & !(u32::MAX as u64) | len, std::sync::atomic::Ordering::Relaxed);
        let mut fresh = Vec::new();
        assert!(pool.check_blob(y, &mut fresh).is_err(), "length {len}");
        assert_eq!(fresh.capacity(), 0, "check_blob copied a value of length {len} before refusing it");
        if len > 16 << 10 {
            assert!(pool.read_blob_into(y, &mut fresh).is_err(), "length {len}");
            assert_eq!(fresh.capacity(), 0, "read_blob_into copied a value of length {len} before refusing it");
        }
        pool.mem().store(y.get(), header, std::sync::atomic::Ordering::Relaxed);
    }
    // What follows a chunk's last 48-byte block: the blocks' record areas (a node slab's), or
    // 16 bytes (a blob slab's). Neither is a node nor a value block.
    let layout = pool.header().layout;
    for (off, per_block) in [(node, 48 + 16), (x, 48)] {
        let chunk = (off.get() - layout.data_off) / layout.chunk_size;
        let tail = layout.data_off + chunk * layout.chunk_size + layout.chunk_size / per_block * 48;
        assert_eq!(pool.node_block(POff::new(tail)), None, "a chunk's tail after {off}");
        assert!(pool.check_blob(POff::new(tail), &mut buf).is_err(), "a chunk's tail after {off}");
    }
    assert_eq!(pool.node_block(node), Some(48));
}

#[test]
fn a_damaged_copy_of_the_state_line_is_covered_by_the_other_and_both_are_refused() {
    let dir = scratch_dir();
    let path = made(dir.path(), "p.pool");
    let pool = Pool::open(&path, &Mapping::default()).unwrap();
    assert!(pool.was_clean() && pool.same_boot());
    drop(pool);
    let copy = dir.path().join("copy.pool");
    let damaged = |at: &[u64]| {
        std::fs::copy(&path, &copy).unwrap();
        let mut b = std::fs::read(&copy).unwrap();
        for &at in at {
            b[at as usize] ^= 0x10;
        }
        std::fs::write(&copy, b).unwrap();
    };
    // Each word of either copy: the other copy says what the line said.
    for off in STATE_COPIES {
        for at in [off, off + 8, off + 16, off + 24] {
            damaged(&[at]);
            let pool = Pool::open(&copy, &Mapping::default()).unwrap();
            assert!(pool.was_clean() && pool.same_boot(), "byte {at:#x} flipped");
            let (engine, report) = Engine::open(pool, rings()).unwrap();
            assert!(report.clean, "byte {at:#x} flipped");
            assert_eq!(engine.entries::<u64>(petra::StructId(0)).unwrap().len(), 20);
        }
    }
    // Both copies: no crash leaves that; the pool is refused, the file untouched.
    damaged(&[STATE_COPIES[0] + 8, STATE_COPIES[1] + 24]);
    let before = std::fs::read(&copy).unwrap();
    assert!(matches!(Pool::open(&copy, &Mapping::default()), Err(OpenError::StateLine)));
    assert_eq!(std::fs::read(&copy).unwrap(), before);
}

#[test]
fn a_private_mapping_recovers_in_memory_and_never_writes_the_file() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    // A pool left unclosed: its open recovers, which writes.
    let engine = Engine::create(Pool::create(&path, &config()).unwrap(), rings()).unwrap();
    let list = engine.create_list().unwrap();
    let mut h = engine.handle().unwrap();
    for k in 0..50u64 {
        h.execute(Transaction::new().put(list, k, k * 3)).unwrap();
    }
    drop(h);
    drop(engine.into_pool().unwrap());
    let before = std::fs::read(&path).unwrap();
    let private = Mapping { private: true, ..Mapping::default() };
    let pool = Pool::open(&path, &private).unwrap();
    assert_eq!(pool.durability(), Durability::Private);
    // Two readers at once; a writer is kept out meanwhile.
    let other = Pool::open(&path, &private).unwrap();
    assert!(Pool::open(&path, &Mapping::default()).is_err());
    let (engine, report) = Engine::open(pool, rings()).unwrap();
    assert!(!report.clean && report.present_keys == 50);
    let mut h = engine.handle().unwrap();
    assert_eq!(h.get(list, 7u64).unwrap(), Some(21));
    // Writes, growth and a clean close all stay in the process.
    for k in 50..5000u64 {
        h.execute(Transaction::new().put(list, k, k)).unwrap();
    }
    drop(h);
    engine.close().unwrap();
    drop(other);
    assert_eq!(std::fs::read(&path).unwrap(), before, "a private mapping wrote to its file");
    let pool = Pool::open(&path, &Mapping::default()).unwrap();
    assert!(!pool.was_clean(), "the close of the private copy did not reach the file");
    let (engine, _) = Engine::open(pool, rings()).unwrap();
    assert_eq!(engine.entries::<u64>(list).unwrap().len(), 50);
}

#[test]
fn a_persisted_descriptor_that_fails_its_check_is_damage() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    // Rounds off: every descriptor stays above the checkpoint txid, read by recovery.
    let engine = Engine::create(Pool::create(&path, &config()).unwrap(), rings().checkpoint_fill(0)).unwrap();
    let list = engine.create_list().unwrap();
    let mut h = engine.handle().unwrap();
    for k in 0..10u64 {
        h.execute(Transaction::new().put(list, k, k)).unwrap();
    }
    drop(h);
    let pool = engine.into_pool().unwrap();
    // The ring's first descriptor (after its reserved line): the first put. Tag 0x5458 on top.
    let (ring, _) = pool.regions(2)[0];
    let first = ring.get() + 64;
    assert_eq!(pool.mem().load(first, std::sync::atomic::Ordering::Relaxed) >> 48, 0x5458);
    drop(pool);
    for (what, at) in [("its op's key", first + 40), ("its txid", first + 16)] {
        let copy = dir.path().join("copy.pool");
        std::fs::copy(&path, &copy).unwrap();
        let mut b = std::fs::read(&copy).unwrap();
        b[at as usize] ^= 0x04;
        std::fs::write(&copy, b).unwrap();
        match refused(&copy) {
            EngineError::Damaged(d) => assert_eq!(d.at, first, "{what}: {d}"),
            other => panic!("{what}: {other}"),
        }
    }
}

/// The list's node of key 7 in the pool at `path` (key 7, value 7, and in its record area a
/// present record of structure 0), its record area, and a free block of its size with its record
/// area (all zero), found through the pool's own layout, read through a private mapping.
fn list_node_of_7(path: &Path) -> ((usize, usize), (usize, usize)) {
    use std::sync::atomic::Ordering::Relaxed;
    let pool = Pool::open(path, &Mapping { private: true, ..Mapping::default() }).unwrap();
    let mem = pool.mem();
    let (mut node, mut free) = (None, None);
    let zero = |from: u64, len: u64| (from..from + len).step_by(8).all(|at| mem.load(at, Relaxed) == 0);
    pool.for_each_node_block(|n| {
        let (n, rec) = (n.get(), pool.record_of(n.get()));
        if mem.load(n, Relaxed) == 7 && mem.load(n + 24, Relaxed) == 7 && mem.load(rec, Relaxed) & 0xFF01 == 1 {
            node = Some((n, rec));
        } else if free.is_none() && pool.node_block(POff::new(n)) == Some(32) && zero(n, 32) && zero(rec, 16) {
            free = Some((n, rec));
        }
    });
    let at = |(n, rec): (u64, u64)| (n as usize, rec as usize);
    (at(node.expect("the list's record of key 7")), at(free.expect("a free block")))
}

/// A record copied whole into a free block of its slab passes its own check; two records of one
/// key are damage all the same, found before anything is written.
#[test]
fn a_second_record_of_a_key_is_damage() {
    let dir = scratch_dir();
    let path = made(dir.path(), "p.pool");
    let mut b = std::fs::read(&path).unwrap();
    // The list's node of key 7 (a 32-byte node) and its record area, and a free block.
    let ((node, rec), (free, free_rec)) = list_node_of_7(&path);
    b.copy_within(node..node + 32, free);
    b.copy_within(rec..rec + 16, free_rec);
    std::fs::write(&path, b).unwrap();
    match refused(&path) {
        EngineError::Damaged(d) => assert!(d.what.contains("a second record of key 0x7"), "{d}"),
        other => panic!("{other}"),
    }
}

/// A node whose record and info word are both damaged (a line of other bytes over its first
/// words, say) must not pass for a node being removed: the record is gone, so the key would be
/// lost, and the walk of the structures, reading the mark, would agree. A marked info word is
/// checked as what it can be: FINAL absent naming its own node (what a removal writes), or an op
/// word naming a slot of a ring (what a Delete's removal of a node with a record writes until the
/// round that folds the Delete, or left by a removal cut short in a pool written before removals
/// wrote the former). Closed (the walk is strict) and unclosed (the process died: the records of the last
/// recovery stand beside newer descriptors), as the corruption battery damages stores.
#[test]
fn a_damaged_info_word_is_not_taken_for_a_removal() {
    let dir = scratch_dir();
    let set = |b: &mut [u8], at: usize, w: u64| b[at..at + 8].copy_from_slice(&w.to_le_bytes());
    for closed in [true, false] {
        let path = made(dir.path(), "p.pool");
        if !closed {
            // In use, written after the open (key 100 is in a descriptor), then dropped as a kill
            // leaves it: key 7 is in the record the close's rewrite wrote.
            let (engine, _) = Engine::open(Pool::open(&path, &Mapping::default()).unwrap(), rings()).unwrap();
            engine.handle().unwrap().execute(Transaction::new().put(petra::StructId(0), 100u64, 100)).unwrap();
            drop(engine.into_pool().unwrap());
        }
        let pristine = std::fs::read(&path).unwrap();
        // The list's node of key 7: key 7, value 7, a present record of structure 0.
        let ((node, rec), _) = list_node_of_7(&path);
        let n = node as u64;
        // Info words (see `petra/src/structures/info.rs`): bit 0 FINAL, bit 1 MARK, bit 2 present,
        // FINAL: bits 3.. the node >> 4; an op word: bits 8.. the descriptor >> 6.
        let final_of = |node: u64| 1 | (node >> 4) << 3;
        let damaged = [
            ("a marked op word naming a line of the node arena", (n >> 6) << 8 | 2),
            ("a marked FINAL absent word of another node", final_of(n + 32) | 2),
            ("a marked FINAL present word", final_of(n) | 4 | 2),
        ];
        for (what, info) in damaged {
            let mut b = pristine.clone();
            set(&mut b, node + 16, info);
            set(&mut b, rec, 0);
            std::fs::write(&path, b).unwrap();
            match refused(&path) {
                EngineError::Damaged(d) => assert_eq!(d.at, n + 16, "closed {closed}, {what}: {d}"),
                other => panic!("closed {closed}, {what}: {other}"),
            }
        }
        // What a removal a checkpoint round queued leaves (its record cleared, then the mark): the
        // key absent, and nothing else changed.
        let mut b = pristine.clone();
        set(&mut b, node + 16, final_of(n) | 2);
        set(&mut b, rec, 0);
        std::fs::write(&path, b).unwrap();
        let (engine, _) = Engine::open(Pool::open(&path, &Mapping::default()).unwrap(), rings()).unwrap();
        let keys: Vec<u64> = engine.entries::<u64>(petra::StructId(0)).unwrap().into_iter().map(|(k, _)| k).collect();
        let mut want: Vec<u64> = (0..20).filter(|&k| k != 7).collect();
        if !closed {
            want.push(100);
        }
        assert_eq!(keys, want, "closed {closed}");
        drop(engine);
        std::fs::remove_file(&path).unwrap();
    }
}

/// The meta region's magic damaged in a pool whose engine was created (its structures, rings and
/// structure count say so) is damage, not a pool without an engine: the open refuses it as
/// damaged, and a create does not take the region over; the file is left as it was.
#[test]
fn a_damaged_meta_magic_of_a_created_engine_is_damage() {
    let dir = scratch_dir();
    let good = made(dir.path(), "good.pool");
    let at =
        Pool::open(&good, &Mapping { private: true, ..Mapping::default() }).unwrap().regions(1)[0].0.get() as usize;
    let bytes = std::fs::read(&good).unwrap();
    let magic = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    for (what, word) in [("zeroed", 0), ("a bit flipped", magic ^ 1 << 17)] {
        let path = dir.path().join("bad.pool");
        let mut b = bytes.clone();
        b[at..at + 8].copy_from_slice(&u64::to_le_bytes(word));
        std::fs::write(&path, &b).unwrap();
        match refused(&path) {
            EngineError::Damaged(d) => assert!(d.what.contains("meta magic") && d.at == at as u64, "{what}: {d}"),
            e => panic!("{what}: {e}"),
        }
        let created = Engine::create(Pool::open(&path, &Mapping::default()).unwrap(), rings());
        assert!(matches!(created, Err(EngineError::Damaged(_))), "{what}: a create took the engine over");
        assert!(std::fs::read(&path).unwrap() == b, "{what}: the refused create wrote to the file");
    }
}
