//! The crash simulator has teeth, and the pool's own protocols survive crashes at every point.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use petra::error::OpenError;
use petra::mem::{CrashPlan, MediaModel, PMem, SimMem};
use petra::pool::header::{HEADER_SIZE, State};
use petra::pool::{Header, Mapping, POff, Pool, PoolConfig};
use petra_recovery::crash::{CrashTest, Report};

const REGION_TAG: u8 = 9;
const RECORDS: u64 = 20;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: 8 << 20, chunk_size: 64 << 10, mapping: Mapping::default() }
}

/// A pool with a zeroed region of pointer slots.
fn setup() -> SimMem {
    closed_pool(&config(), |pool| {
        pool.alloc_region(REGION_TAG, RECORDS * 8).unwrap();
    })
}

/// The memory of a pool made with `config`, prepared by `prepare`, and closed.
fn closed_pool(config: &PoolConfig, prepare: impl FnOnce(&Pool<Arc<SimMem>>)) -> SimMem {
    let mem = Arc::new(SimMem::new(0, 8 << 20));
    let pool = Pool::create_in(Arc::clone(&mem), config).unwrap();
    prepare(&pool);
    pool.close().unwrap();
    Arc::into_inner(mem).expect("the pool is gone")
}

fn record_word(i: u64, w: u64) -> u64 {
    (i + 1) << 8 | w
}

/// Writes record i into a fresh block, then publishes its offset in slot i. With `fence`, the
/// record is made durable before the pointer is written; without it, both are flushed and then
/// fenced once, which lets the pointer's line reach the media before the record's.
fn publish_records(mem: Arc<SimMem>, fence: bool) -> Vec<(u64, u64)> {
    let pool = Pool::open_in(mem.clone()).unwrap();
    let (slots, _) = pool.regions(REGION_TAG)[0];
    let mut local = pool.local();
    let mut acks = Vec::new();
    for i in 0..RECORDS {
        let rec = local.alloc(64).unwrap();
        for w in 0..8 {
            pool.mem().store(rec.get() + w * 8, record_word(i, w), Ordering::Relaxed);
        }
        pool.mem().flush_range(rec.get(), 64);
        if fence {
            pool.mem().fence();
        }
        pool.mem().store(slots.get() + i * 8, rec.get(), Ordering::Release);
        pool.mem().flush(slots.get() + i * 8);
        pool.mem().fence();
        acks.push((mem.events(), i));
    }
    acks
}

/// Every published pointer leads to a whole record, and every acknowledged record is there.
fn check_records(acks: &[(u64, u64)], crash_event: u64, mem: SimMem) -> Result<(), String> {
    let pool = Pool::open_in(mem).map_err(|e| format!("the pool does not open: {e}"))?;
    let (slots, _) = pool.regions(REGION_TAG)[0];
    for i in 0..RECORDS {
        let ptr = pool.mem().load(slots.get() + i * 8, Ordering::Acquire);
        let acked = acks.iter().any(|&(ev, r)| r == i && ev <= crash_event);
        if ptr == 0 {
            if acked {
                return Err(format!("record {i} was acknowledged but its pointer is lost"));
            }
            continue;
        }
        for w in 0..8 {
            let got = pool.mem().load(ptr + w * 8, Ordering::Relaxed);
            if got != record_word(i, w) {
                return Err(format!("pointer {i} is durable but word {w} of its record is {got:#x}"));
            }
        }
    }
    Ok(())
}

fn run(fence: bool, seed: u64) -> Report {
    CrashTest::new(seed).run(
        setup,
        |mem| publish_records(mem, fence),
        |acks, image, mem| check_records(acks, image.point.event, mem),
    )
}

#[test]
fn without_a_fence_the_simulator_finds_a_durable_pointer_to_a_lost_record() {
    let report = run(false, 1);
    assert!(report.images > 100, "{} images", report.images);
    assert!(!report.failures.is_empty(), "the missing fence went unnoticed in {} images", report.images);
    for f in &report.failures {
        assert!(f.message.contains("is durable but word"), "unexpected failure: {f}");
    }
    // Any failure can be rebuilt from its seed, point and choice.
    let f = &report.failures[0];
    let (acks, image) = CrashTest::new(1)
        .replay(setup, |mem| publish_records(mem, false), f.point, &f.choice)
        .expect("the workload is deterministic");
    let again = check_records(&acks, image.point.event, image.to_mem(8 << 20));
    assert_eq!(again, Err(f.message.clone()), "the replayed image fails the same way");
}

#[test]
fn with_the_fence_every_crash_image_passes() {
    for seed in 1..=3 {
        let report = run(true, seed);
        eprintln!("fenced: {} points, {} images", report.points, report.images);
        assert!(report.points > 3 * RECORDS as usize, "{} crash points", report.points);
        report.assert_ok();
    }
}

#[test]
fn an_interrupted_create_leaves_no_pool_or_a_whole_one() {
    let test = CrashTest { plan: CrashPlan::all(1.0, 7), exhaustive_bound: 1 << 12, ..CrashTest::new(7) };
    let report = test.run(
        || SimMem::new(0, 8 << 20),
        |mem| {
            Pool::create_in(mem, &config()).unwrap().close().unwrap();
        },
        |_, _, mem| match Pool::open_in(mem) {
            // Nothing of the pool is durable yet, or all but its magic: not a pool.
            Ok(_) | Err(OpenError::Zeroed | OpenError::BadMagic { found: [0, 0, 0, 0, 0, 0, 0, 0] }) => Ok(()),
            Err(e) => Err(format!("a crash during create left a broken pool: {e}")),
        },
    );
    report.assert_ok();
    assert!(report.images > 10);
}

/// What the state line of the pool in `mem` says, or why the pool is refused.
fn state_line(mem: &SimMem) -> Result<State, String> {
    let mut page = vec![0u8; HEADER_SIZE as usize];
    mem.read_bytes(0, &mut page);
    let header = Header::decode(&page).map_err(|e| e.to_string())?;
    State::decode(&page, &header.uuid).map_err(|e| e.to_string())
}

#[test]
fn a_state_line_write_torn_anywhere_leaves_the_line_before_it_or_after_it() {
    // A closed pool is marked in use and closed again; every crash image, under persistent
    // memory and in the page cache (each page at every moment of its own), must open, its state
    // line the one before the write the crash interrupted or the one after: never refused, never
    // "boot unknown".
    for model in [MediaModel::PersistentMemory, MediaModel::PageCache] {
        let test = CrashTest {
            model,
            plan: CrashPlan::all(1.0, 5).with_syncs(),
            exhaustive_bound: 1 << 12,
            ..CrashTest::new(5)
        };
        let workload = |mem: Arc<SimMem>| {
            let before = state_line(&mem).unwrap();
            let pool = Pool::open_in(Arc::clone(&mem)).unwrap();
            let boot = mem.boot();
            let marking = mem.events();
            pool.mark_in_use().unwrap();
            let marked = mem.events();
            pool.close().unwrap();
            (before, boot, marking, marked)
        };
        let report = test.run(setup, workload, |&(before, boot, marking, marked), image, mem| {
            let read = state_line(&mem)?;
            Pool::open_in(mem).map_err(|e| format!("refused: {e}"))?;
            let event = image.point.event;
            let expected: &[State] = if event <= marking {
                &[before]
            } else if event < marked {
                &[before, State::in_use(boot)]
            } else {
                &[State::in_use(boot), State::clean(boot)]
            };
            if expected.contains(&read) {
                Ok(())
            } else {
                Err(format!("at event {event} the state line reads {read:?}, expected one of {expected:?}"))
            }
        });
        eprintln!("{model:?}: {} points, {} images", report.points, report.images);
        report.assert_ok();
        assert!(report.points >= 10, "{model:?}: {} crash points", report.points);
    }
}

#[test]
fn chunk_carving_and_growth_survive_crashes() {
    // Allocate blocks of several classes and blobs, growing the pool; a block counts as
    // acknowledged once a later fence has passed (as the engine would publish it). After any
    // crash, the acknowledged blocks must rebuild as live, without error or overlap.
    let setup = || closed_pool(&PoolConfig { initial_size: 0, ..config() }, |_| {});
    let workload = |mem: Arc<SimMem>| {
        let pool = Pool::open_in(mem.clone()).unwrap();
        let mut local = pool.local();
        let mut acks: Vec<(u64, POff)> = Vec::new();
        for i in 0..40u64 {
            let off = match i % 4 {
                0 => local.alloc_blob(&vec![i as u8; 70_000]).unwrap(),
                1 => local.alloc_blob(&[i as u8; 100]).unwrap(),
                _ => local.alloc(16 << (i % 8)).unwrap(),
            };
            pool.mem().fence();
            acks.push((mem.events(), off));
        }
        acks
    };
    let test = CrashTest { max_points: 400, ..CrashTest::new(11) };
    let report = test.run(setup, workload, |acks, image, mem| {
        let mut pool = Pool::open_in(mem).map_err(|e| e.to_string())?;
        let live = acks.iter().filter(|(ev, _)| *ev <= image.point.event).map(|&(_, off)| off);
        pool.rebuild(live).map(|_| ()).map_err(|e| e.to_string())
    });
    eprintln!("carving: {} points, {} images", report.points, report.images);
    report.assert_ok();
    assert!(report.points >= 100, "{} crash points", report.points);
}
