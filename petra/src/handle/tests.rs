//! Transactions stopped in the middle: the protocol's test hook ([`hook`]) stops a handle's
//! transaction after an op, and on the same thread another handle's transaction meets it and
//! helps it (as another thread would while the owner is preempted), or a panic unwinds from
//! there. Deterministic: one thread, one interleaving.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use crate::descriptor::{Desc, TxStatus};
use crate::mem::SimMem;
use crate::pool::{Pool, PoolConfig};
use crate::protocol::hook;
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
