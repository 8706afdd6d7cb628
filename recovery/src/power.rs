//! Power loss on a file in the page cache: engine histories run on the crash simulator's
//! page-cache model ([`MediaModel::PageCache`](petra::mem::MediaModel::PageCache)), each image
//! recovered through the engine's normal open and checked against what was acknowledged.
//!
//! On a page-cache file only a sync promises anything: between syncs the kernel writes pages
//! back in any order, so a power loss may keep any mix of their contents since the last sync. The
//! property a power-safe store must give, and [`check`] checks:
//!
//! - every transaction acknowledged before the last completed sync is present, and
//! - the recovered state is one the history went through at or after that sync: the replay, in
//!   txid order, of every transaction that had returned by some instant between the sync and the
//!   crash plus some of those running at that instant, each whole, reproducing every result
//!   those transactions returned (a consistent prefix).
//!
//! An image that does not open fails it too, damage refusals included: a store must open at the
//! last sync.
//!
//! The workload speaks the battery's language ([`battery`]: one-word keys, word
//! values) on a pool whose structures the battery made, records every committed writer with
//! [`execute`] into a [`History`], and syncs where it chooses (`Pool::sync`; the pool and recovery
//! sync too). [`run`] takes the crash images with a [`CrashTest`] whose
//! [`model`](CrashTest::model) is the page cache (or persistent memory, where the same property
//! must hold a fortiori) and checks each.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use petra::mem::{CrashImage, PMem, SimMem};
use petra::pool::Pool;
use petra::{Engine, EngineConfig, EngineError, Handle, Op, Outcome, StructId, Transaction};

use crate::battery;
use crate::crash::{CrashTest, Report};
use crate::model::Model;

/// A key of the history: structure and one-word key.
type Key = (StructId, u64);

/// A committed writing transaction, as its thread saw it.
#[derive(Debug, Clone)]
pub struct Committed {
    /// Simulator events completed before it started.
    pub start: u64,
    /// Simulator events completed when it returned: it was acknowledged then.
    pub end: u64,
    /// Its place in the serial order.
    pub txid: u64,
    /// Its ops, as executed.
    pub ops: Vec<Op>,
    /// What each op returned.
    pub results: Vec<Option<u64>>,
}

impl Committed {
    /// The state each key it writes is left in: its last writing op on the key.
    fn writes(&self) -> BTreeMap<Key, Option<u64>> {
        let mut out = BTreeMap::new();
        for op in &self.ops {
            let key = (op.structure, u64::try_from(op.key).expect("the tests speak in one-word keys"));
            match op.kind.writes() {
                Some(true) => out.insert(key, Some(op.value)),
                Some(false) => out.insert(key, None),
                None => None,
            };
        }
        out
    }
}

/// What a workload's engine promises about a power loss, which [`check`] holds it to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Promise {
    /// Every transaction acknowledged before the image's last sync is there (what a pool whose
    /// protocol kept its order on the disk would give; without safe points it does not hold).
    #[default]
    LastSync,
    /// Every transaction acknowledged before the last safe point the workload made
    /// ([`History::safe_point`]) that completed before the crash is there
    /// (`DurabilityPolicy::Periodic`).
    SafePoints,
    /// Every transaction acknowledged before the crash is there (`DurabilityPolicy::Immediate`).
    Acknowledged,
}

/// What a workload did: the state it started from, every transaction of it that committed a
/// write, and the syncs it asked for.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// What the engine promises.
    pub promise: Promise,
    /// The safe points the workload made: the simulator events completed before each began and
    /// when it returned.
    pub safe_points: Vec<(u64, u64)>,
    /// The state before the workload.
    pub base: Model,
    /// The committed writers, of every thread, in any order.
    pub committed: Vec<Committed>,
    /// The simulator events completed before each sync the workload asked for ([`History::sync`]),
    /// in order. The check takes the last sync from the image, which also knows the syncs of the
    /// pool and of recovery; these are for the workload's own accounts.
    pub syncs: Vec<u64>,
}

impl History {
    /// A history that starts from `base`.
    pub fn new(base: Model) -> History {
        History { base, ..History::default() }
    }

    /// Syncs `pool` (a safe point, if the engine keeps them) and records when.
    pub fn sync<M: PMem>(&mut self, mem: &SimMem, pool: &Pool<M>) -> std::io::Result<()> {
        self.syncs.push(mem.events());
        pool.sync()
    }

    /// Makes a safe point with `make` (`Engine::sync`) and records when it began and returned.
    pub fn safe_point<E>(&mut self, mem: &SimMem, make: impl FnOnce() -> Result<(), E>) -> Result<(), E> {
        let begin = mem.events();
        self.syncs.push(begin);
        make()?;
        self.safe_points.push((begin, mem.events()));
        Ok(())
    }

    /// The event from which the recovered state must be one the history went through, for a
    /// crash before event `crash` whose image's last completed sync was at `last_sync`.
    fn bound(&self, last_sync: Option<u64>, crash: u64) -> u64 {
        match self.promise {
            Promise::LastSync => last_sync.unwrap_or(0),
            Promise::SafePoints => {
                self.safe_points.iter().filter(|&&(_, end)| end <= crash).map(|&(begin, _)| begin).max().unwrap_or(0)
            }
            Promise::Acknowledged => crash,
        }
    }

    /// The most transactions that returned between two consecutive syncs of the workload (or
    /// between its start or end and its first or last sync).
    pub fn most_between_syncs(&self) -> usize {
        let mut bounds = vec![0];
        bounds.extend(&self.syncs);
        bounds.push(u64::MAX);
        bounds
            .windows(2)
            .map(|w| self.committed.iter().filter(|c| c.end > w[0] && c.end <= w[1]).count())
            .max()
            .unwrap_or(0)
    }
}

/// Executes the word-valued `tx` of one-word keys on `h` ([`battery::execute`]) and, if it
/// committed a write, records it in `into` with the events of `mem` before and after it.
pub fn execute<M: PMem + 'static>(
    mem: &SimMem,
    h: &mut Handle<M>,
    tx: &Transaction,
    into: &mut Vec<Committed>,
) -> Result<Outcome, EngineError> {
    let start = mem.events();
    let out = battery::execute(h, tx)?;
    let end = mem.events();
    if let Outcome::Committed { results, txid: Some(txid) } = &out
        && !tx.is_read_only()
    {
        into.push(Committed { start, end, txid: *txid, ops: tx.ops().to_vec(), results: results.clone() });
    }
    Ok(out)
}

/// Why an image fails the property. Its text begins with the kind's [`label`](Kind::label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// The pool or its engine refused to open.
    Refused {
        /// Refused as damaged ([`EngineError::Damaged`]).
        damage: bool,
        /// What the open said.
        error: String,
    },
    /// Transactions acknowledged before the last sync are missing from the recovered state.
    SyncedLost {
        /// Their txids.
        txids: Vec<u64>,
        /// Which key of each shows it, and when it was acknowledged.
        detail: String,
    },
    /// Every transaction acknowledged before the sync is there, but the recovered state is not
    /// one the history went through at or after the sync.
    NotAState(String),
    /// The allocator holds other blocks than the recovered keys need.
    Allocator(String),
}

/// The kinds of [`Violation`], to sort failures by their text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// [`Violation::Refused`] as damaged.
    Damaged,
    /// [`Violation::Refused`] otherwise.
    Refused,
    /// [`Violation::SyncedLost`].
    SyncedLost,
    /// [`Violation::NotAState`].
    NotAState,
    /// [`Violation::Allocator`].
    Allocator,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 5] = [Kind::Damaged, Kind::Refused, Kind::SyncedLost, Kind::NotAState, Kind::Allocator];

    /// The words a violation's text begins with.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Damaged => "refused as damaged",
            Kind::Refused => "refused",
            Kind::SyncedLost => "synced transactions lost",
            Kind::NotAState => "not a state of the history",
            Kind::Allocator => "allocator",
        }
    }

    /// The kind of a failure's message, if it is a violation's text (a panic in recovery, for
    /// one, is not).
    pub fn of(message: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| message.starts_with(k.label()))
    }
}

impl Violation {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Violation::Refused { damage: true, .. } => Kind::Damaged,
            Violation::Refused { damage: false, .. } => Kind::Refused,
            Violation::SyncedLost { .. } => Kind::SyncedLost,
            Violation::NotAState(_) => Kind::NotAState,
            Violation::Allocator(_) => Kind::Allocator,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = self.kind().label();
        match self {
            Violation::Refused { error, .. } => write!(f, "{label}: {error}"),
            Violation::SyncedLost { txids, detail } => write!(f, "{label}: txids {txids:?}: {detail}"),
            Violation::NotAState(what) | Violation::Allocator(what) => write!(f, "{label}: {what}"),
        }
    }
}

/// Recovers `mem`, the memory of `image`, through the engine's normal open with `config`, and
/// checks it against `history` (see the [module docs](self)): the transactions acknowledged
/// before what the history's [`Promise`] names (the image's last sync, the last safe point that
/// completed, or the crash) must be there, in a state the history went through at or after
/// it, and the allocator must hold exactly what the recovered keys need.
pub fn check(history: &History, image: &CrashImage, mem: SimMem, config: EngineConfig) -> Result<(), Violation> {
    let pool = Pool::open_in(mem)
        .map_err(|e| Violation::Refused { damage: false, error: format!("the pool does not open: {e}") })?;
    let (engine, report) = Engine::open(pool, config).map_err(|e| Violation::Refused {
        damage: matches!(e, EngineError::Damaged(_)),
        error: format!("the engine does not open: {e}"),
    })?;
    let mut recovered = BTreeMap::new();
    for s in engine.structures() {
        let entries = battery::entries(&engine, s)
            .map_err(|e| Violation::Refused { damage: false, error: format!("structure {} reads: {e}", s.0) })?;
        recovered.extend(entries.into_iter().map(|(k, v)| ((s, k), v)));
    }
    let live = report.allocator.live_blocks;
    if live != battery::live_blocks(&engine, report.present_keys) {
        return Err(Violation::Allocator(format!("{live} live blocks for {} keys and the heads", report.present_keys)));
    }
    let sync = history.bound(image.last_sync, image.point.event);
    Search::new(history, &recovered).find(sync, image.point.event)
}

/// Runs `workload` as `test` says (its model, plan and sampling of images) on the memory `setup`
/// makes, and checks every image with [`check`].
pub fn run(
    test: &CrashTest,
    setup: impl FnOnce() -> SimMem,
    workload: impl FnOnce(Arc<SimMem>) -> History,
    config: fn() -> EngineConfig,
) -> Report {
    test.run(setup, workload, |history, image, mem| check(history, image, mem, config()).map_err(|v| v.to_string()))
}

/// The search for an instant of the history whose state is the recovered one.
///
/// The state of a set of transactions, replayed in txid order, is per key that of its last writer
/// (or the base's): so the search keeps, per key, the writers of the set it is trying by txid,
/// and counts the keys whose state differs from the recovered one. It sweeps the instants from
/// the sync to the crash where a transaction starts or returns, adding each transaction as it
/// returns, and tries every subset of those running; a set that gives the recovered state is
/// replayed on the model to check every result too.
struct Search<'a> {
    history: &'a History,
    recovered: &'a BTreeMap<Key, u64>,
    base: BTreeMap<Key, u64>,
    /// Per transaction (as in the history), its writes.
    writes: Vec<BTreeMap<Key, Option<u64>>>,
    /// Per key, the writers in the set tried, by txid.
    set: BTreeMap<Key, BTreeMap<u64, Option<u64>>>,
    /// Keys whose state in the set tried differs from the recovered one.
    mismatched: usize,
}

impl<'a> Search<'a> {
    fn new(history: &'a History, recovered: &'a BTreeMap<Key, u64>) -> Search<'a> {
        let base: BTreeMap<Key, u64> =
            history.base.maps.iter().flat_map(|(&s, m)| m.iter().map(move |(&k, &v)| ((s, k), v))).collect();
        let keys: BTreeSet<&Key> = base.keys().chain(recovered.keys()).collect();
        let mismatched = keys.into_iter().filter(|k| base.get(k) != recovered.get(k)).count();
        let writes = history.committed.iter().map(Committed::writes).collect();
        Search { history, recovered, base, writes, set: BTreeMap::new(), mismatched }
    }

    fn state(&self, key: &Key) -> Option<u64> {
        match self.set.get(key).and_then(|w| w.last_key_value()) {
            Some((_, &v)) => v,
            None => self.base.get(key).copied(),
        }
    }

    /// Adds transaction `i` to the set tried, or takes it out.
    fn toggle(&mut self, i: usize, add: bool) {
        let txid = self.history.committed[i].txid;
        for (key, &v) in &self.writes[i] {
            let was = self.state(key) == self.recovered.get(key).copied();
            let writers = self.set.entry(*key).or_default();
            if add {
                writers.insert(txid, v);
            } else {
                writers.remove(&txid);
            }
            let is = self.state(key) == self.recovered.get(key).copied();
            match (was, is) {
                (true, false) => self.mismatched += 1,
                (false, true) => self.mismatched -= 1,
                _ => {}
            }
        }
    }

    /// Whether replaying the set (`done` and `extra`) in txid order reproduces every result.
    fn results_hold(&self, done: &[usize], extra: &[usize]) -> bool {
        let mut set: Vec<&Committed> = done.iter().chain(extra).map(|&i| &self.history.committed[i]).collect();
        set.sort_by_key(|c| c.txid);
        let mut m = self.history.base.clone();
        set.into_iter().all(|c| matches!(m.apply(&c.ops), Outcome::Committed { results, .. } if results == c.results))
    }

    /// An instant in `[sync, crash]` whose state is the recovered one, or why there is none.
    fn find(mut self, sync: u64, crash: u64) -> Result<(), Violation> {
        let committed = &self.history.committed;
        let mut by_end: Vec<usize> = (0..committed.len()).collect();
        by_end.sort_by_key(|&i| committed[i].end);
        let mut by_start = by_end.clone();
        by_start.sort_by_key(|&i| committed[i].start);
        let mut instants: Vec<u64> =
            committed.iter().flat_map(|c| [c.start, c.end]).filter(|&e| e > sync && e <= crash).chain([sync]).collect();
        instants.sort_unstable();
        instants.dedup();
        let (mut ended, mut started) = (0, 0);
        let mut done = Vec::new();
        let mut running = BTreeSet::new();
        for &t in &instants {
            while let Some(&i) = by_end.get(ended).filter(|&&i| committed[i].end <= t) {
                self.toggle(i, true);
                done.push(i);
                running.remove(&i);
                ended += 1;
            }
            while let Some(&i) = by_start.get(started).filter(|&&i| committed[i].start <= t) {
                if committed[i].end > t {
                    running.insert(i);
                }
                started += 1;
            }
            let now: Vec<usize> = running.iter().copied().collect();
            assert!(now.len() < 16, "{} transactions running at once", now.len());
            for mask in 0u32..1 << now.len() {
                let extra: Vec<usize> =
                    now.iter().enumerate().filter(|(b, _)| mask & 1 << b != 0).map(|(_, &i)| i).collect();
                extra.iter().for_each(|&i| self.toggle(i, true));
                let found = self.mismatched == 0 && self.results_hold(&done, &extra);
                extra.iter().for_each(|&i| self.toggle(i, false));
                if found {
                    return Ok(());
                }
            }
        }
        Err(self.diagnose(sync, crash))
    }

    /// Why no instant fits: the transactions acknowledged before the sync whose write of some key
    /// is neither recovered nor replaced by a later transaction's write that is, or else that the
    /// state is no state of the history.
    fn diagnose(&self, sync: u64, crash: u64) -> Violation {
        let committed = &self.history.committed;
        // Per key, its writers that started before the crash, by txid.
        let mut writers: BTreeMap<Key, BTreeMap<u64, (usize, Option<u64>)>> = BTreeMap::new();
        for (i, w) in self.writes.iter().enumerate().filter(|(i, _)| committed[*i].start <= crash) {
            for (key, &v) in w {
                writers.entry(*key).or_default().insert(committed[i].txid, (i, v));
            }
        }
        let mut lost = BTreeSet::new();
        let mut detail = Vec::new();
        for (key, by_txid) in &writers {
            // The key's last writer acknowledged before the sync, then every later writer.
            let Some((&txid, &(i, v))) = by_txid.iter().rev().find(|(_, (i, _))| committed[*i].end <= sync) else {
                continue;
            };
            let got = self.recovered.get(key).copied();
            if by_txid.range(txid..).any(|(_, &(_, later))| later == got) {
                continue;
            }
            if lost.insert(txid) {
                let c = &committed[i];
                detail.push(format!(
                    "txid {txid} (acknowledged at event {}) left key {} of structure {} {v:?}, recovered {got:?}; ops {:?}",
                    c.end, key.1, key.0.0, c.ops
                ));
            }
        }
        if lost.is_empty() {
            return Violation::NotAState(format!(
                "recovered {} keys; no instant from the sync at event {sync} to the crash before event {crash} has \
                 that state",
                self.recovered.len()
            ));
        }
        Violation::SyncedLost {
            txids: lost.into_iter().collect(),
            detail: format!("before the sync at event {sync}, crash before event {crash}: {}", detail.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use petra::OpKind;

    use super::*;

    const S: StructId = StructId(0);

    /// A one-op Put of `value` to key `key`, running over events `start..end` with txid `txid`,
    /// which replaced `before`.
    fn put(txid: u64, (start, end): (u64, u64), key: u64, value: u64, before: Option<u64>) -> Committed {
        Committed { start, end, txid, ops: vec![Op::new(OpKind::Put, S, key, value)], results: vec![before] }
    }

    /// Key 1 starts at 10; t1 (acknowledged at 20) puts 11, t2 (30) puts key 2 = 21, t3 (40)
    /// puts key 1 = 12; t4 runs from 45 to 60 and puts key 2 = 22.
    fn history() -> History {
        let mut base = Model::default();
        base.apply(&[Op::new(OpKind::Put, S, 1u64, 10)]);
        let mut h = History::new(base);
        h.committed = vec![
            put(1, (10, 20), 1, 11, Some(10)),
            put(2, (21, 30), 2, 21, None),
            put(3, (31, 40), 1, 12, Some(11)),
            put(4, (45, 60), 2, 22, Some(21)),
        ];
        h
    }

    fn check_state(sync: u64, crash: u64, state: &[(u64, u64)]) -> Result<(), Violation> {
        let h = history();
        let recovered: BTreeMap<Key, u64> = state.iter().map(|&(k, v)| ((S, k), v)).collect();
        Search::new(&h, &recovered).find(sync, crash)
    }

    #[test]
    fn every_state_from_the_sync_to_the_crash_is_accepted() {
        // Synced after t2: the states after t2, after t3, and with t4 (running at the crash).
        for state in [[(1, 11), (2, 21)], [(1, 12), (2, 21)], [(1, 12), (2, 22)]] {
            assert_eq!(check_state(35, 50, &state), Ok(()), "{state:?}");
        }
        // t4 returned before the crash: it may be missing (crash after the sync), not required.
        assert_eq!(check_state(35, 70, &[(1, 12), (2, 21)]), Ok(()));
    }

    #[test]
    fn a_transaction_acknowledged_before_the_sync_is_named_when_lost() {
        // Synced after t3; t3 lost (key 1 back to t1's value).
        match check_state(41, 50, &[(1, 11), (2, 21)]) {
            Err(Violation::SyncedLost { txids, .. }) => assert_eq!(txids, vec![3]),
            other => panic!("{other:?}"),
        }
        // Before t2 returned, the sync promises only t1: the same state is accepted then.
        assert_eq!(check_state(25, 50, &[(1, 11)]), Ok(()));
    }

    #[test]
    fn a_state_no_instant_had_is_refused_even_with_every_synced_transaction() {
        // Synced after t1, so t2 and t3 may be missing; but t3 without t2 is no instant's state
        // (t2 returned before t3 started).
        match check_state(25, 50, &[(1, 12)]) {
            Err(Violation::NotAState(_)) => {}
            other => panic!("{other:?}"),
        }
        // And a value nobody wrote.
        assert!(matches!(check_state(25, 50, &[(1, 11), (2, 99)]), Err(Violation::NotAState(_))));
    }

    #[test]
    fn a_result_the_replay_does_not_reproduce_is_refused() {
        // t3 reports it replaced 10, which no replay gives (t1 comes first): the recovered state
        // is an instant's, but not with the results the history returned.
        let mut h = history();
        h.committed[2].results = vec![Some(10)];
        let recovered: BTreeMap<Key, u64> = [((S, 1), 12), ((S, 2), 21)].into();
        assert!(matches!(Search::new(&h, &recovered).find(35, 50), Err(Violation::NotAState(_))));
    }
}
