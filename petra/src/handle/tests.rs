//! Transactions stopped in the middle: the protocol's test hook ([`hook`]) stops a handle's
//! transaction after an op, and on the same thread another handle's transaction meets it and
//! helps it (as another thread would while the owner is preempted), or a panic unwinds from
//! there. Deterministic: one thread, one interleaving.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::checkpoint::steps::{self, Count};
use crate::descriptor::{Desc, TxStatus};
use crate::mem::{CrashPlan, PMem, SimMem};
use crate::pool::{Pool, PoolConfig};
use crate::protocol::hook;
use crate::structures::info::Info;
use crate::structures::node::{INFO, KEY};
use crate::{Engine, EngineConfig, Outcome, StructId, Transaction};

type Mem = Arc<SimMem>;

const MAX_LEN: u64 = 64 << 20;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 1 << 20, max_size: MAX_LEN, chunk_size: 64 << 10, ..PoolConfig::default() }
}

/// Rings of one chunk: 511 descriptors of one or two ops (128 bytes each) a lap, so that a
/// handle's ring comes round to a slot again after 511 such transactions.
fn engine_config() -> EngineConfig {
    EngineConfig::rings(64 << 10)
}

/// An engine over a simulated pool (its memory kept, for reopening and crash images), with one
/// list holding `prefill`.
fn engine(prefill: &[(u64, u64)]) -> (Mem, Engine<Mem>, StructId) {
    let mem = Arc::new(SimMem::new(0, MAX_LEN));
    let engine = Engine::create(Pool::create_in(Arc::clone(&mem), &config()).unwrap(), engine_config()).unwrap();
    let s = engine.create_list().unwrap();
    let mut tx = Transaction::new();
    for &(k, v) in prefill {
        tx.put(s, k, v);
    }
    assert!(engine.handle().unwrap().execute(&tx).unwrap().is_committed());
    (mem, engine, s)
}

/// Puts `v` at keys 1 and 2 of `s`, in that order.
fn put_both(s: StructId, v: u64) -> Transaction {
    let mut tx = Transaction::new();
    tx.put(s, 1u64, v).put(s, 2u64, v);
    tx
}

/// The results of a commit.
fn results(out: &Outcome) -> &[Option<u64>] {
    match out {
        Outcome::Committed { results, .. } => results,
        other => panic!("expected a commit, got {other:?}"),
    }
}

/// Calls `run`, which executes a transaction on this thread, with that transaction stopped once
/// its first op took effect, if its descriptor is one that `at` accepts: `meanwhile` runs then,
/// with the descriptor, before the owner goes on. Returns what `run` returned and whether the
/// transaction was stopped.
fn stopped<R>(
    at: impl Fn(u64) -> bool + 'static,
    meanwhile: impl FnOnce(u64) + 'static,
    run: impl FnOnce() -> R,
) -> (R, bool) {
    let met = Rc::new(Cell::new(false));
    let (m, mut meanwhile) = (Rc::clone(&met), Some(meanwhile));
    // Op 0 is run only by its owner: a helper starts after the op it met.
    hook::set_after_op(move |d, i| {
        if i == 0
            && at(d)
            && let Some(f) = meanwhile.take()
        {
            m.set(true);
            f(d);
        }
    });
    let r = run();
    hook::clear();
    (r, met.get())
}

/// A transaction's op on a larger key of the same list searches from the node of its earlier op,
/// not from the list's start: seen by the first node, whose key is set above both keys while the
/// transaction is stopped after its first op, so that a walk from the start stops there and
/// finds neither. An op on a smaller key searches from the start, and finds its key.
#[test]
fn a_later_op_on_a_larger_key_of_a_list_searches_from_the_earlier_ops_node() {
    let (mem, engine, s) = engine(&[(10, 1), (20, 2), (30, 3), (40, 4)]);
    let mut h = engine.handle().unwrap();
    let n10 = linked_nodes(&h, s)[0].0;
    for (first, second, first_key, expected) in
        [(30u64, 40u64, 45, [Some(3), Some(4)]), (40, 30, 10, [Some(4), Some(3)])]
    {
        let mut tx = Transaction::new();
        tx.get(s, first).get(s, second);
        let m = Arc::clone(&mem);
        // Relaxed (both): one thread.
        let meanwhile = move |_| m.store(n10 + KEY, first_key, Ordering::Relaxed);
        let (out, met) = stopped(|_| true, meanwhile, || h.execute(&tx));
        mem.store(n10 + KEY, 10, Ordering::Relaxed);
        assert!(met);
        assert_eq!(results(&out.unwrap()), expected, "get {first}, then get {second}");
    }
}

#[test]
fn a_strict_op_that_fails_in_a_helper_is_reported_with_its_index() {
    // The insert of key 2, present, fails at execution position 1 both times: index 1 in the
    // order added, or index 0 when the ops were added the other way round and run sorted.
    for (sorted, index) in [(false, 1), (true, 0)] {
        let (mem, engine, s) = engine(&[(1, 10), (2, 20)]);
        let mut tx = Transaction::new();
        if sorted {
            tx.insert(s, 2u64, 22).put(s, 1u64, 11).sorted(true);
        } else {
            tx.put(s, 1u64, 11).insert(s, 2u64, 22);
        }
        let mut owner = engine.handle().unwrap();
        let mut helper = engine.handle().unwrap();
        let (out, met) = stopped(
            |_| true,
            move |d| {
                // A put of key 1 meets the owner's transaction there and runs it to its end: the
                // insert fails in the helper, which aborts it, then puts over the old value.
                let put = helper.execute(Transaction::new().put(s, 1u64, 12)).unwrap();
                assert_eq!(results(&put), [Some(10)]);
                assert_eq!(Desc::new(&*mem, d).state().status, TxStatus::Aborted, "the helper decided the abort");
            },
            || owner.execute(&tx).unwrap(),
        );
        assert!(met);
        assert_eq!(out, Outcome::Aborted { failed_op: Some(index) }, "sorted: {sorted}");
        assert_eq!(engine.entries::<u64>(s).unwrap(), [(1, 12), (2, 20)]);
    }
}

#[test]
fn execute_decided_does_not_run_again_a_transaction_whose_strict_op_failed_in_a_helper() {
    let (_mem, engine, s) = engine(&[(1, 10), (2, 20)]);
    let mut owner = engine.handle().unwrap();
    let mut helper = engine.handle().unwrap();
    let mut tx = Transaction::new();
    tx.put(s, 1u64, 11).insert(s, 2u64, 22);
    let (decided, met) = stopped(
        |_| true,
        move |_| {
            // The helper runs the owner's transaction, whose insert of key 2 fails, then deletes
            // key 2: the same transaction run again would commit.
            let out = helper.execute(Transaction::new().put(s, 1u64, 12).delete(s, 2u64)).unwrap();
            assert_eq!(results(&out), [Some(10), Some(20)]);
        },
        || owner.execute_decided(&tx, |results, _| results.to_vec()).unwrap(),
    );
    assert!(met);
    assert_eq!(decided, Err(1), "decided by its failed insert, not run again");
    assert_eq!(engine.entries::<u64>(s).unwrap(), [(1, 12)]);
}

#[test]
fn a_helping_cycle_is_reported_without_an_op() {
    let (mem, engine, s) = engine(&[(1, 10), (2, 20)]);
    let mut owner = engine.handle().unwrap();
    let mut helper = engine.handle().unwrap();
    let (out, met) = stopped(
        |_| true,
        move |d| {
            // The helper takes key 2, meets key 1 held by the owner's transaction and helps it;
            // that one meets key 2 held by the helper's own, on the helper's help stack: a
            // cycle, broken by aborting the helper's. The owner's then commits.
            let mut tx = Transaction::new();
            tx.put(s, 2u64, 22).put(s, 1u64, 12);
            assert_eq!(helper.execute(&tx).unwrap(), Outcome::Aborted { failed_op: None });
            assert_eq!(Desc::new(&*mem, d).state().status, TxStatus::Committed, "the helper committed it");
        },
        || owner.execute(&put_both(s, 11)).unwrap(),
    );
    assert!(met);
    assert_eq!(results(&out), [Some(10), Some(20)]);
    assert_eq!(engine.entries::<u64>(s).unwrap(), [(1, 11), (2, 11)]);
}

#[test]
fn a_panic_while_helping_leaves_no_entry_that_aborts_a_later_transaction_at_the_same_offset() {
    let (mem, engine, s) = engine(&[(1, 10), (2, 20)]);
    let mut owner = engine.handle().unwrap();
    let helper = Rc::new(RefCell::new(engine.handle().unwrap()));
    // The owner stops after its first op; the helper's put meets key 1 held by it, helps it, and
    // panics after running its second op, before it finishes it. The owner then finishes it.
    let first = Rc::new(Cell::new(0));
    let (h, f) = (Rc::clone(&helper), Rc::clone(&first));
    let (out, met) = stopped(
        |_| true,
        move |d| {
            f.set(d);
            hook::set_after_op(move |d2, i| {
                if (d2, i) == (d, 1) {
                    panic!("a panic while helping");
                }
            });
            let put = catch_unwind(AssertUnwindSafe(|| h.borrow_mut().execute(Transaction::new().put(s, 1u64, 12))));
            assert!(put.is_err(), "the helper panicked");
            assert_eq!(Desc::new(&*mem, d).state().status, TxStatus::Active, "half run");
            hook::clear();
        },
        || owner.execute(&put_both(s, 11)).unwrap(),
    );
    assert!(met);
    assert_eq!(results(&out), [Some(10), Some(20)]);
    assert_eq!(engine.entries::<u64>(s).unwrap(), [(1, 11), (2, 11)]);
    // The owner goes round its ring (rounds recycle it) until a transaction of its is written at
    // the same offset; the same helper meets that one stopped after its first op and helps it.
    let first = first.get();
    let (mut again, mut last) = (false, 11);
    for v in 100..2000 {
        let h = Rc::clone(&helper);
        let (out, met) = stopped(
            move |d| d == first,
            move |_| {
                let put = h.borrow_mut().execute(Transaction::new().put(s, 1u64, v + 1000)).unwrap();
                assert_eq!(results(&put), [Some(v)], "the helper put after the transaction it helped");
            },
            || owner.execute(&put_both(s, v)).unwrap(),
        );
        assert_eq!(results(&out), [Some(last), Some(last)], "at the same offset again: {met}");
        last = v;
        if met {
            assert_eq!(engine.entries::<u64>(s).unwrap(), [(1, v + 1000), (2, v)]);
            again = true;
            break;
        }
    }
    assert!(again, "the owner's ring never came round to the offset");
    assert!(helper.borrow().help_stack.is_empty());
}

/// Where a transaction's panic comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Panic {
    /// Inside the transaction, after its first op took effect; nobody finishes it after.
    Halfway,
    /// As `Halfway`, then another handle's transaction meets it and finishes it.
    HalfwayThenHelped,
    /// In the closure of `execute_with`, once the transaction committed.
    InTheClosure,
}

#[test]
fn a_transaction_that_panicked_happened_whole_or_not_at_all_and_recovery_agrees() {
    for panic in [Panic::Halfway, Panic::HalfwayThenHelped, Panic::InTheClosure] {
        let (mem, engine, s) = engine(&[(1, 10), (2, 20)]);
        let mut model = BTreeMap::from([(1u64, 10u64), (2, 20)]);
        let mut owner = engine.handle().unwrap();
        owner.execute(Transaction::new().put(s, 3u64, 30)).unwrap();
        model.insert(3, 30);
        let ring = owner.ring.as_ref().map(|r| r.0);
        let out = if panic == Panic::InTheClosure {
            catch_unwind(AssertUnwindSafe(|| owner.execute_with(&put_both(s, 11), |_, _| panic!("in the closure"))))
        } else {
            hook::set_after_op(|_, i| {
                if i == 0 {
                    panic!("halfway")
                }
            });
            let out = catch_unwind(AssertUnwindSafe(|| owner.execute(&put_both(s, 11))));
            hook::clear();
            out.map(|_| Ok(()))
        };
        assert!(out.is_err(), "{panic:?}: it panicked");
        assert!(owner.help_stack.is_empty(), "{panic:?}: the help stack is left empty");
        if panic == Panic::InTheClosure {
            model.extend([(1, 11), (2, 11)]);
        }
        // Half run, the transaction holds key 1 and is invisible: the state is the model's.
        assert_eq!(engine.entries::<u64>(s).unwrap(), Vec::from_iter(model.clone()), "{panic:?}");
        let mut other = engine.handle().unwrap();
        if panic == Panic::HalfwayThenHelped {
            // A put of key 2, which the transaction has not reached, comes first; a put of key
            // 1 meets the transaction, finishes it (over the first put) and comes after it.
            assert_eq!(results(&other.execute(Transaction::new().put(s, 2u64, 22)).unwrap()), [Some(20)]);
            assert_eq!(results(&other.execute(Transaction::new().put(s, 1u64, 12)).unwrap()), [Some(11)]);
            model.extend([(1, 12), (2, 11)]);
        }
        // The owner's handle goes on, in another ring if the panic left a transaction of its
        // unfinished.
        assert_eq!(results(&owner.execute(Transaction::new().put(s, 4u64, 40)).unwrap()), [None]);
        model.insert(4, 40);
        let moved = owner.ring.as_ref().map(|r| r.0) != ring;
        assert_eq!(moved, panic != Panic::InTheClosure, "{panic:?}: the ring is given up");
        let want = Vec::from_iter(model.clone());
        assert_eq!(engine.entries::<u64>(s).unwrap(), want, "{panic:?}");
        // Recovery agrees: from what was persisted alone (a power loss now), from the memory
        // as it is (the process died), and after a clean close.
        let persisted = SimMem::from_bytes(&mem.persisted_bytes(), MAX_LEN);
        drop((owner, other));
        drop(engine.into_pool().unwrap());
        let (lost, _) = Engine::open(Pool::open_in(persisted).unwrap(), engine_config()).unwrap();
        assert_eq!(lost.entries::<u64>(s).unwrap(), want, "{panic:?}: recovered from the persisted image");
        let (died, _) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), engine_config()).unwrap();
        assert_eq!(died.entries::<u64>(s).unwrap(), want, "{panic:?}: recovered from the memory");
        died.close().unwrap();
        let (closed, report) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), engine_config()).unwrap();
        assert_eq!(report.descriptors, 0, "{panic:?}: a clean close leaves nothing to recover");
        assert_eq!(closed.entries::<u64>(s).unwrap(), want, "{panic:?}: reopened after a clean close");
    }
}

/// With background rounds, a writer whose ring fills asks the engine's thread for rounds and
/// runs none itself, unless the thread lags (its ring past twice the fill); the rounds run there
/// and fold its descriptors; the engine closes with the thread stopped. Without, the writer runs
/// them.
#[test]
fn background_rounds_run_on_the_engines_thread_not_the_writers() {
    for background in [false, true] {
        let mem = Arc::new(SimMem::new(0, MAX_LEN));
        let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
        let engine = Engine::create(pool, engine_config().background_rounds(background)).unwrap();
        let s = engine.create_skiplist().unwrap();
        let mut h = engine.handle().unwrap();
        let before = steps::of(Count::Round);
        let took_over = steps::of(Count::TakeOver);
        // 20 000 descriptors through rings of 511: a round at every quarter ring. Then on until
        // the rounds folded 10 000 of them, wherever they ran (a busy machine may keep the
        // rounds' thread off the cores for a while; the writer asks again meanwhile).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut i = 0u64;
        while i < 20_000 || engine.checkpoint_stats().descriptors < 10_000 {
            assert!(std::time::Instant::now() < deadline, "rounds did not keep up: {:?}", engine.checkpoint_stats());
            assert!(h.execute(Transaction::new().put(s, i % 512, i)).unwrap().is_committed());
            i += 1;
        }
        let here = steps::of(Count::Round) - before;
        let took_over = steps::of(Count::TakeOver) - took_over;
        if background {
            // Only where the rounds' thread lagged (its ring past twice the fill): on a busy
            // machine that happens, on an idle one seldom.
            assert!(here <= took_over, "the writer ran {here} rounds itself, {took_over} of them taken over");
        } else {
            assert!(here > 20, "the writer ran {here} rounds");
        }
        let last = i - 1 - (i - 1 - 7) % 512;
        drop(h);
        let pool = engine.into_pool().unwrap_or_else(|_| panic!("the engine is still held (its rounds' thread?)"));
        let (engine, _) = Engine::open(pool, engine_config()).unwrap();
        assert_eq!(engine.handle().unwrap().get(s, 7u64).unwrap(), Some(last));
    }
}

/// A recovery after a power loss (the pool left in use in another boot) goes back to the last
/// power-safe point. A process that dies in the middle of it, once it has marked the pool in use,
/// leaves a pool whose mark still names the boot of the power loss: the next open, in this
/// boot, goes back to the safe point again, instead of taking the pool whole as after a mere
/// process death. Once a recovery finished, the mark names this boot.
#[test]
fn a_recovery_after_a_power_loss_that_dies_is_done_again_from_the_safe_point() {
    use crate::DurabilityPolicy;
    use crate::mem::MediaModel;
    let settings = engine_config().durability(DurabilityPolicy::Periodic(std::time::Duration::from_secs(3600)));
    let mem = Arc::new(SimMem::new(0, MAX_LEN).with_model(MediaModel::PageCache));
    let engine = Engine::create(Pool::create_in(Arc::clone(&mem), &config()).unwrap(), settings.clone()).unwrap();
    let s = engine.create_list().unwrap();
    let mut h = engine.handle().unwrap();
    assert!(h.execute(Transaction::new().put(s, 1u64, 10)).unwrap().is_committed());
    engine.sync().unwrap();
    assert!(h.execute(Transaction::new().put(s, 2u64, 20)).unwrap().is_committed());
    // The power fails: the disk holds what the last sync left; the machine boots again.
    let image = mem.persisted_bytes();
    drop(h);
    drop(engine);
    let open = |mem: &Mem| Engine::open(Pool::open_in(Arc::clone(mem)).unwrap(), settings.clone());
    let after = Arc::new(SimMem::from_bytes(&image, MAX_LEN).with_model(MediaModel::PageCache));
    crate::recovery::dies::after_mark();
    assert!(catch_unwind(AssertUnwindSafe(|| open(&after))).is_err());
    // The process died: the same memory, in the same boot, is opened again.
    let (engine, report) = open(&after).unwrap();
    assert!(report.safe_point.is_some(), "taken whole after a recovery from a power loss died: {report:?}");
    assert_eq!(engine.entries::<u64>(s).unwrap(), [(1, 10)]);
    let mut h = engine.handle().unwrap();
    assert!(h.execute(Transaction::new().put(s, 3u64, 30)).unwrap().is_committed());
    drop(h);
    drop(engine);
    // A process death now, in the same boot: everything in the memory is recovered.
    let (engine, report) = open(&after).unwrap();
    assert_eq!(report.safe_point, None, "{report:?}");
    assert_eq!(engine.entries::<u64>(s).unwrap(), [(1, 10), (3, 30)]);
}

/// Rings taken by handles since dropped go back to the pool once the rounds have emptied them,
/// all but a spare: the pool's chunks in runs come back down, new handles take the spare and
/// then new regions (the chunks given back), and what was written before and after survives a
/// crash and a power loss. On persistent memory, and on a page cache, where a ring's slots
/// come back only once a safe point has put the checkpoint that covers them on the disk.
#[test]
fn rings_emptied_and_held_by_no_handle_go_back_to_the_pool_but_a_spare() {
    for page_cache in [false, true] {
        rings_go_back(page_cache);
    }
}

fn rings_go_back(page_cache: bool) {
    use crate::DurabilityPolicy;
    use crate::mem::MediaModel;
    let (mem, settings) = if page_cache {
        let mem = SimMem::new(0, MAX_LEN).with_model(MediaModel::PageCache);
        (mem, engine_config().durability(DurabilityPolicy::Periodic(std::time::Duration::from_secs(3600))))
    } else {
        (SimMem::new(0, MAX_LEN), engine_config())
    };
    let mem = Arc::new(mem);
    let engine = Engine::create(Pool::create_in(Arc::clone(&mem), &config()).unwrap(), settings.clone()).unwrap();
    let s = engine.create_list().unwrap();
    assert!(engine.handle().unwrap().execute(Transaction::new().put(s, 1u64, 10)).unwrap().is_committed());
    let mut model = BTreeMap::from([(1u64, 10u64)]);
    let runs_before = engine.pool().chunk_counts().runs;
    let mut handles: Vec<_> = (0..5).map(|_| engine.handle().unwrap()).collect();
    for (i, h) in handles.iter_mut().enumerate() {
        let k = 100 + i as u64;
        assert!(h.execute(Transaction::new().put(s, k, k)).unwrap().is_committed());
        model.insert(k, k);
    }
    // The first took the ring the prefill's handle gave back; the other four, new ones.
    assert_eq!(engine.rings(), 5, "a ring per handle");
    assert_eq!(engine.pool().chunk_counts().runs - runs_before, 4, "a one-chunk region per new ring");
    let mut kept = handles.pop().unwrap();
    drop(handles);
    // Rounds fold what the dropped handles wrote; once their ends ran, the rings are empty.
    for i in 0..8u64 {
        assert!(kept.execute(Transaction::new().put(s, 200 + i, i)).unwrap().is_committed());
        model.insert(200 + i, i);
        kept.checkpoint();
        engine.sync().unwrap();
    }
    assert_eq!(engine.rings(), 2, "page cache {page_cache}: the kept handle's ring and one spare");
    assert_eq!(engine.checkpoint_stats().rings_given_back, 3);
    assert_eq!(engine.pool().chunk_counts().runs - runs_before, 1, "three regions went back");
    // New handles take the spare, then regions of their own again.
    let mut more: Vec<_> = (0..3).map(|_| engine.handle().unwrap()).collect();
    for (i, h) in more.iter_mut().enumerate() {
        let k = 300 + i as u64;
        assert!(h.execute(Transaction::new().put(s, k, k)).unwrap().is_committed());
        model.insert(k, k);
    }
    assert_eq!(engine.rings(), 4);
    let want = Vec::from_iter(model);
    assert_eq!(engine.entries::<u64>(s).unwrap(), want);
    engine.sync().unwrap();
    let persisted = SimMem::from_bytes(&mem.persisted_bytes(), MAX_LEN);
    let persisted = if page_cache { persisted.with_model(MediaModel::PageCache) } else { persisted };
    drop((more, kept));
    drop(engine.into_pool().unwrap());
    let (died, _) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), settings.clone()).unwrap();
    assert_eq!(died.entries::<u64>(s).unwrap(), want, "page cache {page_cache}: recovered from the memory");
    let (lost, _) = Engine::open(Pool::open_in(Arc::new(persisted)).unwrap(), settings).unwrap();
    assert_eq!(lost.entries::<u64>(s).unwrap(), want, "page cache {page_cache}: recovered from the persisted image");
}

#[test]
fn a_read_of_a_committed_unpersisted_write_persists_it_before_it_returns() {
    // A writer stops once committed, before it persists; meanwhile another handle reads its
    // key, by a single read and by a read-only transaction of two ops, and the power fails just
    // after each read returned (only what was flushed and fenced is left). The value read must
    // be in what recovery finds: a reader that meets a committed, unpersisted transaction
    // persists it before it returns its write.
    for single in [true, false] {
        let (mem, engine, s) = engine(&[(1, 10), (2, 20)]);
        let mut owner = engine.handle().unwrap();
        let reader = Rc::new(RefCell::new(engine.handle().unwrap()));
        let lost = Rc::new(RefCell::new(None));
        let (r, l, m) = (Rc::clone(&reader), Rc::clone(&lost), Arc::clone(&mem));
        hook::set_before_persist(move |d| {
            assert_eq!(Desc::new(&*m, d).state().status, TxStatus::Committed);
            let read = if single {
                r.borrow_mut().get(s, 1u64).unwrap()
            } else {
                let out = r.borrow_mut().execute(Transaction::new().get(s, 1u64).get(s, 2u64)).unwrap();
                results(&out)[0]
            };
            assert_eq!(read, Some(11), "single {single}: the committed write is read");
            *l.borrow_mut() = Some(m.persisted_bytes());
        });
        let out = owner.execute(&put_both(s, 11)).unwrap();
        hook::clear();
        assert_eq!(results(&out), [Some(10), Some(20)]);
        let image = lost.borrow_mut().take().expect("the reader ran while the writer was stopped");
        drop((owner, reader));
        drop(engine.into_pool().unwrap());
        let (recovered, _) =
            Engine::open(Pool::open_in(SimMem::from_bytes(&image, MAX_LEN)).unwrap(), engine_config()).unwrap();
        assert_eq!(
            recovered.entries::<u64>(s).unwrap(),
            [(1, 11), (2, 11)],
            "single {single}: a value read before the power loss is lost"
        );
    }
}

/// One step of a history run on one thread: the state after it, and the simulator events before
/// it began and when it was acknowledged (`u64::MAX`: never).
struct Step {
    state: Vec<(u64, u64)>,
    start: u64,
    end: u64,
}

#[test]
fn crash_images_around_a_transaction_that_panicked_recover_a_prefix_of_the_history() {
    // Crash images at every flush and fence, and a share of stores, of a history in which a
    // transaction panics: halfway (after its first op; nobody finishes it, or another handle's
    // put meets it and finishes it) or in the closure of `execute_with` after it committed. The
    // owner's and another handle's transactions go on after it, none aborted (the help stack was
    // left empty). Every image recovers to the state after a prefix of the history's steps,
    // holding at least every step acknowledged before the crash.
    for panic in [Panic::Halfway, Panic::HalfwayThenHelped, Panic::InTheClosure] {
        let (mem, engine, s) = engine(&[(1, 10), (2, 20)]);
        mem.set_plan(CrashPlan::all(0.25, 7));
        let mut owner = engine.handle().unwrap();
        let mut other = engine.handle().unwrap();
        let mut model = BTreeMap::from([(1u64, 10u64), (2, 20)]);
        let mut steps = vec![Step { state: Vec::from_iter(model.clone()), start: 0, end: 0 }];
        let mut step = |model: &BTreeMap<u64, u64>, start: u64, end: u64| {
            steps.push(Step { state: Vec::from_iter(model.clone()), start, end });
        };
        let panicking = mem.events();
        let out = if panic == Panic::InTheClosure {
            catch_unwind(AssertUnwindSafe(|| owner.execute_with(&put_both(s, 11), |_, _| panic!("in the closure"))))
        } else {
            hook::set_after_op(|_, i| {
                if i == 0 {
                    panic!("halfway")
                }
            });
            let out = catch_unwind(AssertUnwindSafe(|| owner.execute(&put_both(s, 11))));
            hook::clear();
            out.map(|_| Ok(()))
        };
        assert!(out.is_err(), "{panic:?}: it panicked");
        assert!(owner.help_stack.is_empty(), "{panic:?}: the help stack is left empty");
        if panic == Panic::InTheClosure {
            // Committed and persisted before the closure ran: durable once it panicked.
            model.extend([(1, 11), (2, 11)]);
            step(&model, panicking, mem.events());
        }
        if panic == Panic::HalfwayThenHelped {
            let start = mem.events();
            assert_eq!(results(&other.execute(Transaction::new().put(s, 2u64, 22)).unwrap()), [Some(20)]);
            model.insert(2, 22);
            step(&model, start, mem.events());
            // The put of key 1 finishes the stopped transaction first (over the put of key 2).
            let start = mem.events();
            assert_eq!(results(&other.execute(Transaction::new().put(s, 1u64, 12)).unwrap()), [Some(11)]);
            let end = mem.events();
            model.extend([(1, 11), (2, 11)]);
            step(&model, start, end);
            model.insert(1, 12);
            step(&model, start, end);
        }
        for k in 4..16u64 {
            let h = if k % 2 == 0 { &mut owner } else { &mut other };
            let start = mem.events();
            assert_eq!(results(&h.execute(Transaction::new().put(s, k, k * 10)).unwrap()), [None], "{panic:?}");
            model.insert(k, k * 10);
            step(&model, start, mem.events());
        }
        let mut states = mem.take_crash_states();
        states.push(mem.crash_now());
        let (mut images, mut from_panic) = (0, 0);
        for state in &states {
            let crash = state.point.event;
            let acked = steps.iter().filter(|st| st.end <= crash).count();
            let started = steps.iter().filter(|st| st.start <= crash).count();
            from_panic += usize::from(crash >= panicking);
            for choice in state.images(32, 4, 7) {
                let image = state.image(&choice);
                let (recovered, _) = Engine::open(Pool::open_in(image.to_mem(MAX_LEN)).unwrap(), engine_config())
                    .unwrap_or_else(|e| panic!("{panic:?}: crash {}: recovery: {e}", state.point));
                let got = recovered.entries::<u64>(s).unwrap();
                assert!(
                    steps[acked.max(1) - 1..started.max(1)].iter().any(|st| st.state == got),
                    "{panic:?}: crash {} choice {choice:?}: recovered {got:?}, not the state after one of steps {} \
                     to {} (acknowledged to started)",
                    image.point,
                    acked.max(1) - 1,
                    started.max(1) - 1
                );
                images += 1;
            }
        }
        eprintln!(
            "{panic:?}: {} points, {images} images, {from_panic} from the panicking transaction on",
            states.len()
        );
        assert!(images >= 300 && from_panic >= 40, "{panic:?}: {images} images, {from_panic} points from the panic on");
    }
}

/// The nodes linked in `s`, in order, each with its key and info word, as `h`'s engine has them.
fn linked_nodes(h: &crate::Handle<Mem>, s: StructId) -> Vec<(u64, u128, Info)> {
    let core = &h.shared.core;
    let mem = core.pool.mem();
    let mut nodes = Vec::new();
    // Relaxed: one thread.
    let visit = &mut |node, key| nodes.push((node, key, Info(mem.load(node + INFO, Ordering::Relaxed))));
    core.structures.get(s).unwrap().walk_checked(&core.pool, true, visit).unwrap();
    nodes
}

/// Nodes linked in `s` whose removal has not begun (their info word unmarked), nodes linked in
/// all, and blocks given back to the pool so far, as `h`'s engine has them.
fn linked_and_returned(h: &crate::Handle<Mem>, s: StructId) -> (u64, u64, u64) {
    let nodes = linked_nodes(h, s);
    let unmarked = nodes.iter().filter(|&&(.., info)| !info.is_marked()).count() as u64;
    (unmarked, nodes.len() as u64, h.shared.core.pool.ledger().expect("debug builds keep a ledger").returned)
}

/// The epoch's grace periods, driven by hand on one thread: a transaction stopped after its first
/// op is pinned, as a thread preempted in the middle of one is, and may still be on the nodes it
/// passed. Meanwhile another handle deletes a key it passed, then writes past a ring's worth of
/// descriptors, runs checkpoint rounds and drives the collector as far as it goes: the key's
/// removal does not run (its node stays linked), and no round's end runs (no slot is
/// recycled, so the removal cannot go stale and the stopped transaction's descriptor stays where
/// it is). Once the transaction ends, the removal runs and the rounds go on.
#[test]
fn a_removal_and_a_rounds_end_wait_for_a_transaction_stopped_before_them() {
    let (_mem, engine, s) = engine(&[(1, 10), (2, 20), (3, 30)]);
    let other = engine.create_list().unwrap();
    let mut owner = engine.handle().unwrap();
    let mut helper = engine.handle().unwrap();
    let (linked, ..) = linked_and_returned(&helper, s);
    let recycled = helper.shared.checkpointer.recycled();
    let mut tx = Transaction::new();
    // Op 0 walks past key 2's node to key 3.
    tx.put(s, 3u64, 31).put(other, 9u64, 9);
    let (out, met) = stopped(
        |_| true,
        move |_| {
            assert!(helper.execute(Transaction::new().delete(s, 2u64)).unwrap().is_committed());
            for i in 0..600u64 {
                assert!(helper.execute(Transaction::new().put(other, i % 4, i)).unwrap().is_committed());
                if i % 64 == 0 {
                    helper.checkpoint_round();
                }
                helper.collect();
            }
            assert_eq!(linked_and_returned(&helper, s).0, linked, "a removal ran under a transaction pinned before it");
            assert_eq!(
                helper.shared.checkpointer.recycled(),
                recycled,
                "a round's end ran under a transaction pinned before the round"
            );
        },
        || owner.execute(&tx).unwrap(),
    );
    assert!(met && out.is_committed());
    let mut helper = engine.handle().unwrap();
    let moved_on = (0..64u64).any(|i| {
        assert!(helper.execute(Transaction::new().put(other, i % 4, i)).unwrap().is_committed());
        helper.checkpoint_round();
        helper.collect();
        linked_and_returned(&helper, s).0 < linked && helper.shared.checkpointer.recycled() > recycled
    });
    assert!(moved_on, "the removal or the rounds still wait once the transaction ended");
    assert_eq!(engine.entries::<u64>(s).unwrap(), [(1, 10), (3, 31)]);
}

/// A node unlinked while another thread is pinned (and may be reading it) is not freed, however
/// far the collector is driven, until that thread unpins; then it is.
#[test]
fn a_node_unlinked_under_a_pinned_thread_is_freed_only_after_it_unpins() {
    let (_mem, engine, s) = engine(&[(1, 10), (2, 20), (3, 30)]);
    let other = engine.create_list().unwrap();
    let mut helper = engine.handle().unwrap();
    let reader = engine.handle().unwrap();
    let (linked, ..) = linked_and_returned(&helper, s);
    // The removal of key 2 comes due (the grace of the threads pinned when it was deferred: none).
    assert!(helper.execute(Transaction::new().delete(s, 2u64)).unwrap().is_committed());
    helper.collect();
    let pin = reader.epoch.pin();
    // Before the unlink: a free that does not wait for the pin shows from here.
    let (.., returned) = linked_and_returned(&helper, s);
    // The next write runs the removal, which marks the node; the next search that passes it
    // unlinks it, and it waits to be freed.
    let mut marked = false;
    for i in 0..8u64 {
        assert!(helper.execute(Transaction::new().put(other, i % 4, i)).unwrap().is_committed());
        marked |= linked_and_returned(&helper, s).0 < linked;
    }
    assert!(marked, "the removal did not run");
    assert_eq!(linked_and_returned(&helper, s).1, linked, "the removal walked the list to unlink the node");
    // The word of a node being removed names no descriptor: the node may stay linked past the
    // recycling of the deleting op's slot, and its ring's return to the pool.
    let (node, _, info) = linked_nodes(&helper, s).into_iter().find(|&(_, key, _)| key == 2).unwrap();
    assert_eq!(info, Info::removed(node), "key 2's node, being removed");
    assert!(helper.execute(Transaction::new().find(s, 3u64)).unwrap().is_committed());
    assert_eq!(linked_and_returned(&helper, s).1, linked - 1, "the search past the marked node did not unlink it");
    for i in 0..200u64 {
        assert!(helper.execute(Transaction::new().put(other, i % 4, i)).unwrap().is_committed());
        helper.collect();
    }
    assert_eq!(linked_and_returned(&helper, s).2, returned, "a node was freed under a thread pinned before its unlink");
    drop(pin);
    let freed = (0..64u64).any(|i| {
        helper.collect();
        assert!(helper.execute(Transaction::new().put(other, i % 4, i)).unwrap().is_committed());
        linked_and_returned(&helper, s).2 > returned
    });
    assert!(freed, "the node was not freed once the reader unpinned");
}

/// The last engine or handle dropped stops the engine's threads and waits for them: once its drop
/// returns, nothing holds the shared state (nor the pool: a file's lock is let go with it), even
/// when a thread was making a safe point or running a round just then.
#[test]
fn the_last_drop_waits_for_the_engines_threads() {
    use crate::DurabilityPolicy;
    use crate::mem::MediaModel;
    // A syncer that makes a safe point every 20 µs, and rounds on their own thread.
    let settings = engine_config()
        .durability(DurabilityPolicy::Periodic(std::time::Duration::from_micros(20)))
        .background_rounds(true)
        .checkpoint_fill(1);
    for handle_last in [false, true] {
        for round in 0..300u64 {
            let mem = Arc::new(SimMem::new(0, MAX_LEN).with_model(MediaModel::PageCache));
            let engine =
                Engine::create(Pool::create_in(Arc::clone(&mem), &config()).unwrap(), settings.clone()).unwrap();
            let s = engine.create_list().unwrap();
            let mut h = engine.handle().unwrap();
            for k in 0..40u64 {
                assert!(h.execute(&put_both(s, round * 100 + k)).unwrap().is_committed());
            }
            let weak = engine.shared_weak();
            if handle_last {
                drop(engine);
                assert!(weak.upgrade().is_some(), "the handle holds it");
                drop(h);
            } else {
                drop(h);
                drop(engine);
            }
            assert_eq!(weak.strong_count(), 0, "round {round}: a thread still holds the engine after its last drop");
        }
    }
}
