//! A child process publishes records in a pool file and is killed with SIGKILL at a random
//! moment; the parent reopens the file and finds every acknowledged record whole. Each child
//! starts by rebuilding the allocator from the records it finds, so the pool stays the same size.

use std::path::Path;
use std::sync::atomic::Ordering;

use petra::mem::PMem;
use petra::pool::{Mapping, POff, Pool, PoolConfig};
use petra_recovery::kill::{KillLoop, ack, child_arg};
use petra_recovery::scratch_dir;

const REGION_TAG: u8 = 9;
const SLOTS: u64 = 1000;

/// Word `w` of the record of generation `gen` for slot `i`.
fn record_word(gen_: u64, i: u64, w: u64) -> u64 {
    match w {
        0 => gen_,
        1 => i,
        _ => (gen_ ^ i << 20).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(w as u32),
    }
}

/// The generation of the whole record at `ptr` for slot `i`, or what is wrong with it.
fn read_record(pool: &Pool, ptr: u64, i: u64) -> Result<u64, String> {
    let gen_ = pool.mem().load(ptr, Ordering::Relaxed);
    for w in 0..8 {
        let got = pool.mem().load(ptr + w * 8, Ordering::Relaxed);
        if got != record_word(gen_, i, w) {
            return Err(format!("slot {i} points to a torn record (word {w} is {got:#x})"));
        }
    }
    Ok(gen_)
}

/// The child: rebuild the allocator from the published records, then replace records in a cycle
/// until killed: new record, flush, fence; pointer, flush, fence; ack; free the old record.
fn child(path: &Path) {
    let mut pool = Pool::open(path, &Mapping::default()).expect("the child opens the pool");
    let (slots, _) = pool.regions(REGION_TAG)[0];
    let ptrs: Vec<u64> = (0..SLOTS).map(|i| pool.mem().load(slots.get() + i * 8, Ordering::Acquire)).collect();
    pool.rebuild(ptrs.iter().filter(|&&p| p != 0).map(|&p| POff::new(p))).expect("published records are live");
    let start = ptrs
        .iter()
        .enumerate()
        .filter(|(_, p)| **p != 0)
        .map(|(i, &p)| read_record(&pool, p, i as u64).unwrap())
        .max()
        .map_or(1, |g| g + 1);
    let mut local = pool.local();
    let mem = pool.mem();
    for gen_ in start.. {
        for i in 0..SLOTS {
            let rec = local.alloc(64).unwrap();
            for w in 0..8 {
                mem.store(rec.get() + w * 8, record_word(gen_, i, w), Ordering::Relaxed);
            }
            mem.flush_range(rec.get(), 64);
            mem.fence();
            let old = mem.load(slots.get() + i * 8, Ordering::Relaxed);
            mem.store(slots.get() + i * 8, rec.get(), Ordering::Release);
            mem.flush(slots.get() + i * 8);
            mem.fence();
            ack(format!("{gen_} {i}"));
            if old != 0 {
                local.free(POff::new(old));
            }
        }
    }
}

fn check(path: &Path, acks: &[String]) -> Result<(), String> {
    let pool = Pool::open(path, &Mapping::default()).map_err(|e| format!("reopen: {e}"))?;
    if pool.was_clean() {
        return Err("a killed pool claims a clean shutdown".into());
    }
    let (slots, _) = pool.regions(REGION_TAG)[0];
    let mut newest_acked = vec![0u64; SLOTS as usize];
    for a in acks {
        let (g, i) = a.split_once(' ').ok_or_else(|| format!("bad ack {a:?}"))?;
        let (g, i): (u64, usize) = (g.parse().map_err(|_| "bad ack")?, i.parse().map_err(|_| "bad ack")?);
        newest_acked[i] = newest_acked[i].max(g);
    }
    for i in 0..SLOTS {
        let ptr = pool.mem().load(slots.get() + i * 8, Ordering::Acquire);
        let gen_ = if ptr == 0 { 0 } else { read_record(&pool, ptr, i)? };
        if gen_ < newest_acked[i as usize] {
            return Err(format!("slot {i}: generation {} was acknowledged, {gen_} survived", newest_acked[i as usize]));
        }
    }
    Ok(())
}

#[test]
fn published_records_survive_sigkill() {
    if let Some(arg) = child_arg() {
        child(Path::new(&arg));
        return;
    }
    let dir = scratch_dir();
    let path = dir.path().join("kill.pool");
    let config = PoolConfig { initial_size: 1 << 20, max_size: 1 << 30, chunk_size: 64 << 10, ..PoolConfig::default() };
    let pool = Pool::create(&path, &config).unwrap();
    pool.alloc_region(REGION_TAG, SLOTS * 8).unwrap();
    pool.close().unwrap();
    // The same pool through every round: each child carries on where the last one was killed.
    let report = KillLoop::new("published_records_survive_sigkill", 20)
        .run(|_| path.display().to_string(), |arg, out| check(Path::new(arg), &out.acks));
    report.assert_ok(20);
    assert!(report.acks > 20, "the children acknowledged {} records in all", report.acks);
    let pool = Pool::open(&path, &Mapping::default()).unwrap();
    assert!(pool.chunk_counts().node <= 2, "records are reused, not leaked: {:?}", pool.chunk_counts());
}
