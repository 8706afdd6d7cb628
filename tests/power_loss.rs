//! Power loss on a file in the page cache: engine histories on the simulator's page-cache model
//! (`SimMem` with `MediaModel::PageCache`), syncing at chosen points, with images of the pages the
//! kernel may have written back in any order since the last sync, each recovered and checked by
//! `petra_recovery::power`: every transaction acknowledged before the last sync must be there, in
//! a state the history went through since.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use petra::mem::{CrashPlan, MediaModel, SimMem};
use petra::pool::{Mapping, Pool, PoolConfig};
use petra::{DurabilityPolicy, Engine, EngineConfig, Op, OpKind, Transaction};
use petra_recovery::crash::{CrashTest, Report};
use petra_recovery::model::Model;
use petra_recovery::power::{self, History, Kind, Promise};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MAX_LEN: u64 = 16 << 20;
const ALL: [petra::StructId; petra_recovery::battery::ALL.len()] = petra_recovery::battery::IDS;
/// Keys per structure.
const KEYS: u64 = 40;
/// A ring of one chunk: 511 descriptors of one op.
const RING: u64 = 64 << 10;

fn config() -> PoolConfig {
    PoolConfig { initial_size: 512 << 10, max_size: MAX_LEN, chunk_size: 64 << 10, mapping: Mapping::default() }
}

/// Rings of one chunk, rounds when a ring is a quarter full (the default), without safe points.
fn engine_config() -> EngineConfig {
    config_of(DurabilityPolicy::Process)
}

/// A policy's engine settings. `Periodic`'s background syncer waits an hour, so that the
/// history's safe points (and those the rounds make) are the only ones, the same on every run.
fn config_of(policy: DurabilityPolicy) -> EngineConfig {
    EngineConfig::rings(RING).durability(policy)
}

const PERIODIC: DurabilityPolicy = DurabilityPolicy::Periodic(std::time::Duration::from_secs(3600));

fn initial_ops() -> Vec<Op> {
    ALL.iter().flat_map(|&s| (0..KEYS).step_by(4).map(move |k| Op::new(OpKind::Put, s, k, 1000 + k))).collect()
}

fn base() -> Model {
    let mut m = Model::default();
    m.apply(&initial_ops());
    m
}

/// A pool with an engine, the battery's structures and some keys, cleanly closed.
fn setup() -> SimMem {
    let mem = Arc::new(SimMem::new(0, MAX_LEN));
    let pool = Pool::create_in(Arc::clone(&mem), &config()).unwrap();
    let engine = Engine::create(pool, engine_config()).unwrap();
    assert_eq!(petra_recovery::battery::create_all(&engine), ALL);
    let mut h = engine.handle().unwrap();
    for ops in initial_ops().chunks(petra::MAX_OPS) {
        let mut tx = Transaction::new();
        ops.iter().for_each(|&op| {
            tx.op(op);
        });
        assert!(petra_recovery::battery::execute(&mut h, &tx).unwrap().is_committed());
    }
    drop(h);
    engine.into_pool().unwrap().close().unwrap();
    Arc::into_inner(mem).unwrap()
}

fn random_tx(rng: &mut StdRng) -> Transaction {
    let mut tx = Transaction::new();
    for _ in 0..rng.random_range(1..=3) {
        let kind = match rng.random_range(0..6) {
            0 => OpKind::Insert,
            1 => OpKind::Update,
            2 | 3 => OpKind::Put,
            4 => OpKind::Remove,
            _ => OpKind::Get,
        };
        let s = ALL[rng.random_range(0..ALL.len())];
        tx.op(Op::new(kind, s, rng.random_range(0..KEYS), rng.random_range(1..1000)));
    }
    tx
}

/// How a workload runs: one thread (so the history, and every image, is the same on every
/// run), `transactions` random ones, a sync after every `sync_every` of them (`Engine::sync`: a
/// safe point where the policy keeps them), under `policy`.
#[derive(Debug, Clone, Copy)]
struct Run {
    seed: u64,
    transactions: usize,
    sync_every: usize,
    policy: DurabilityPolicy,
}

/// Opens (recovering: that syncs) and runs the transactions, syncing as `run` says, with
/// checkpoint rounds as the ring fills; leaves the engine as a power loss would.
fn workload(mem: Arc<SimMem>, run: Run) -> History {
    let pool = Pool::open_in(Arc::clone(&mem)).unwrap();
    let (engine, _) = Engine::open(pool, config_of(run.policy)).unwrap();
    let mut h = engine.handle().unwrap();
    let mut rng = StdRng::seed_from_u64(run.seed);
    let mut history = History::new(base());
    history.promise = match run.policy {
        DurabilityPolicy::Process => Promise::LastSync,
        DurabilityPolicy::Periodic(_) => Promise::SafePoints,
        DurabilityPolicy::Immediate => Promise::Acknowledged,
    };
    for i in 1..=run.transactions {
        power::execute(&mem, &mut h, &random_tx(&mut rng), &mut history.committed).unwrap();
        if i % run.sync_every == 0 {
            history.safe_point(&mem, || engine.sync()).unwrap();
        }
    }
    if run.policy == DurabilityPolicy::Process {
        // One ring: with more descriptors than it holds, checkpoint rounds recycled its slots.
        assert_eq!(engine.rings(), 1);
    }
    history
}

/// The workload's crash images: before every fence and every sync (where the most pages may or
/// may not be on the disk), `points` of them spread over the run, `samples` images each.
fn power_run(model: MediaModel, run: Run, points: usize, samples: usize) -> (Report, History) {
    let config = match run.policy {
        DurabilityPolicy::Process => engine_config,
        DurabilityPolicy::Periodic(_) => || config_of(PERIODIC),
        DurabilityPolicy::Immediate => || config_of(DurabilityPolicy::Immediate),
    };
    let plan = CrashPlan { every_flush: false, ..CrashPlan::all(0.0, run.seed).with_syncs() };
    let test = CrashTest { model, plan, exhaustive_bound: 0, samples, max_points: points, ..CrashTest::new(run.seed) };
    let mut kept = None;
    let report = power::run(
        &test,
        setup,
        |mem| {
            let history = workload(mem, run);
            kept = Some(history.clone());
            history
        },
        config,
    );
    (report, kept.expect("the workload ran"))
}

/// The failures of each kind.
fn count(report: &Report, kind: Kind) -> usize {
    report.failures.iter().filter(|f| Kind::of(&f.message) == Some(kind)).count()
}

fn summary(report: &Report) -> String {
    let mut out = format!("{} points, {} images, {} failing:", report.points, report.images, report.failures.len());
    for kind in Kind::ALL {
        out += &format!(" {} {};", count(report, kind), kind.label());
    }
    out
}

/// Two syncs, each after 1 000 transactions: between them the ring (511 one-op descriptors) goes
/// round more than once, so checkpoint rounds fold transactions acknowledged before a sync, move
/// the checkpoint txid past them and recycle their slots, all before the next sync.
const TEETH: Run = Run { seed: 1, transactions: 2_500, sync_every: 1_000, policy: DurabilityPolicy::Process };

/// The model has teeth: today's engine orders its records, its checkpoint txid, its ring slots
/// and its byte values with flush and fence only, which order nothing on a page-cache file, so a
/// power loss after a sync loses transactions acknowledged before it. A round folds one into its
/// node's record and advances the checkpoint txid; the meta region's page reaches the disk, the
/// node's does not; recovery skips the descriptor and reads the old record. Or a later writer of
/// a byte-valued key has its descriptor's page on the disk and not its value's: recovery reads
/// the bytes the block held before (which pass their own check). The checker must find such a
/// loss; it also finds images refused as damaged, and states no instant of the history had.
/// Under the persistent-memory model the same history loses no synced transaction
/// (`fn under_persistent_memory_the_same_history_keeps_every_synced_transaction`), and pages
/// written back in order lose nothing
/// (`fn with_every_page_written_back_or_none_since_the_sync_nothing_is_lost`): it is the
/// page-cache model that finds it.
///
/// With safe points the same workload passes: see
/// `fn safe_points_keep_every_transaction_acknowledged_before_them`. This one runs it under
/// `DurabilityPolicy::Process`, which keeps none (today's protocol without them).
#[test]
fn the_page_cache_model_finds_synced_transactions_lost_without_safe_points() {
    let (report, history) = power_run(MediaModel::PageCache, TEETH, 60, 8);
    eprintln!("page cache: {}", summary(&report));
    assert!(
        history.most_between_syncs() as u64 * 128 > RING,
        "the ring must go round between two syncs: at most {} transactions between syncs",
        history.most_between_syncs()
    );
    assert!(report.images >= 400, "only {} images", report.images);
    let lost: Vec<_> = report.failures.iter().filter(|f| Kind::of(&f.message) == Some(Kind::SyncedLost)).collect();
    if let Some(f) = lost.first() {
        eprintln!("first loss: {f}");
    }
    assert!(
        !lost.is_empty(),
        "no image of {} lost a transaction acknowledged before a sync: {}",
        report.images,
        summary(&report)
    );
    // Every failure is the checker's verdict, none a panic of recovery.
    for f in &report.failures {
        assert!(Kind::of(&f.message).is_some(), "not a verdict of the checker: {f}");
    }
}

/// The control of the test above: the same history, crash points and checker under the
/// persistent-memory model, where a flush and a fence are durable, find no synced transaction
/// lost and no state outside the history, so the losses above are the page-cache model's.
///
/// One refusal is let through, and counted: a ring reused in laps can keep an earlier lap's
/// descriptor header in a line whose other words a later descriptor's volatile words overwrote,
/// which recovery reads as a persisted descriptor that fails its check (`persisted_at`), a
/// defect of its own, which `tests/engine_crash.rs`
/// `fn rings_reused_in_laps_after_checkpoint_rounds_recover_only_what_came_after` meets too. Any
/// other refusal fails this test.
#[test]
fn under_persistent_memory_the_same_history_keeps_every_synced_transaction() {
    let (report, _) = power_run(MediaModel::PersistentMemory, TEETH, 30, 6);
    eprintln!("persistent memory: {}", summary(&report));
    assert!(report.images >= 150, "only {} images", report.images);
    let torn_header =
        |m: &str| Kind::of(m) == Some(Kind::Damaged) && m.contains("a persisted descriptor that fails its check");
    let others: Vec<String> =
        report.failures.iter().filter(|f| !torn_header(&f.message)).map(|f| f.to_string()).collect();
    assert!(others.is_empty(), "{} failures under persistent memory:\n{}", others.len(), others.join("\n"));
}

/// The other control: the same history and crash points in the page cache, but only the two
/// images of each point where no page was reordered (none written back since the sync, or every
/// one): each is a state the history went through, and the checker must accept it. So what the
/// test above finds comes from pages reaching the disk out of order.
#[test]
fn with_every_page_written_back_or_none_since_the_sync_nothing_is_lost() {
    let (report, _) = power_run(MediaModel::PageCache, TEETH, 60, 0);
    eprintln!("page cache, no page reordered: {}", summary(&report));
    assert_eq!(report.images, 120);
    report.assert_ok();
}

/// A page-cache image is a power loss: its memory is a new boot, so recovery does not take the
/// pool for one whose process alone died (whose memory would hold every store), while the same
/// memory reopened is the same boot.
#[test]
fn a_page_cache_image_recovers_as_another_boot() {
    let mem = Arc::new(setup().with_model(MediaModel::PageCache));
    let history = workload(
        Arc::clone(&mem),
        Run { seed: 2, transactions: 50, sync_every: 20, policy: DurabilityPolicy::Process },
    );
    let state = mem.crash_now();
    assert!(state.pending() > 0, "pages written since the last sync");
    // Everything written back: the image is the working memory, at another boot.
    let image = state.every_store();
    assert_eq!(image.to_bytes(), mem.working_bytes());
    let pool = Pool::open_in(image.to_mem(MAX_LEN)).unwrap();
    assert!(!pool.same_boot(), "a power loss is another boot");
    assert_eq!(pool.durability(), petra::mem::Durability::PageCache);
    drop(pool);
    power::check(&history, &image, image.to_mem(MAX_LEN), engine_config()).unwrap();
    // The same memory after its process died: the same boot.
    assert!(Pool::open_in(Arc::clone(&mem)).unwrap().same_boot());
}

/// The teeth test's workload under `Periodic`: a safe point after every 1 000 transactions (and
/// those the checkpoint rounds make as the ring fills). Every image of every crash point recovers
/// to a state the history went through at or after the last safe point that completed, holding
/// every transaction acknowledged before it: the checkpoint txid, the records, the recycled
/// slots and the freed values kept in step with the syncs.
#[test]
fn safe_points_keep_every_transaction_acknowledged_before_them() {
    let run = Run { policy: PERIODIC, ..TEETH };
    let (report, history) = power_run(MediaModel::PageCache, run, 60, 8);
    eprintln!("page cache, safe points: {}", summary(&report));
    assert!(history.most_between_syncs() as u64 * 128 > RING, "the ring must go round between two safe points");
    assert!(report.images >= 400, "only {} images", report.images);
    report.assert_ok();
}

/// `Immediate`: a transaction returns after the safe point that covers it, so every image keeps
/// every transaction acknowledged before the crash.
#[test]
fn immediate_keeps_every_acknowledged_transaction() {
    let run = Run { seed: 3, transactions: 600, sync_every: usize::MAX, policy: DurabilityPolicy::Immediate };
    let (report, history) = power_run(MediaModel::PageCache, run, 60, 8);
    eprintln!("page cache, immediate: {}", summary(&report));
    assert!(history.committed.len() > 300, "{} writers committed", history.committed.len());
    assert!(report.images >= 400, "only {} images", report.images);
    report.assert_ok();
}

/// `Immediate` returns only after the sync that covers the transaction: counted through the
/// memory seam (one sync per writer alone: its safe point vouches for itself), and shown by the
/// image where no page was written back since the last sync, which holds every write acknowledged.
#[test]
fn an_immediate_write_returns_after_the_sync_that_covers_it() {
    use petra::mem::{Counting, MemCounts};
    let mem = Arc::new(setup().with_model(MediaModel::PageCache));
    let counted = Counting::new(Arc::clone(&mem));
    let pool = Pool::open_in(counted).unwrap();
    let (engine, _) = Engine::open(pool, config_of(DurabilityPolicy::Immediate)).unwrap();
    let mut h = engine.handle().unwrap();
    let s = ALL[0];
    for k in 0..20u64 {
        let before = MemCounts::current();
        assert!(petra_recovery::battery::execute(&mut h, Transaction::new().put(s, k, 7 + k)).unwrap().is_committed());
        let syncs = (MemCounts::current() - before).syncs;
        // One, plus the safe points of a round that filled the ring (none this short).
        assert_eq!(syncs, 1, "write {k}: {syncs} syncs");
        // A read is never held back.
        let before = MemCounts::current();
        assert_eq!(petra_recovery::battery::get(&mut h, s, k).unwrap(), Some(7 + k));
        assert_eq!((MemCounts::current() - before).syncs, 0);
        // Power lost now, nothing written back since the last sync: the write is there.
        let state = mem.crash_now();
        let image = state.no_store();
        let (recovered, _) = Engine::open(Pool::open_in(image.to_mem(MAX_LEN)).unwrap(), engine_config()).unwrap();
        assert_eq!(
            petra_recovery::battery::entries(&recovered, s).unwrap().into_iter().find(|e| e.0 == k),
            Some((k, 7 + k))
        );
    }
}

/// Under `Periodic` no writer waits for the disk while the rings hold what was written since the
/// last safe point: rounds as the ring fills, but the safe points are the background syncer's.
/// Only once the rings outgrow twice their budget (a sixteenth of the pool's maximum size) does
/// a writer make one itself, and then the rings go round within it. Counted through the seam
/// (the pool's growth, which syncs the new length, aside).
#[test]
fn under_periodic_a_writer_syncs_only_once_the_rings_outgrow_their_budget() {
    use petra::mem::{Counting, MemCounts};
    let mem = Arc::new(setup().with_model(MediaModel::PageCache));
    let pool = Pool::open_in(Counting::new(Arc::clone(&mem))).unwrap();
    let (engine, _) = Engine::open(pool, config_of(PERIODIC)).unwrap();
    let budget = engine.pool().max_len() / 16;
    let mut h = engine.handle().unwrap();
    let s = ALL[0];
    let (mut within, mut beyond, mut most) = (0, 0, 0);
    // 40 laps of a ring of one chunk.
    for i in 0..20_000u64 {
        let (rings_before, len_before) = (engine.rings() as u64 * RING, engine.pool().len());
        let before = MemCounts::current();
        assert!(
            petra_recovery::battery::execute(&mut h, Transaction::new().put(s, i % KEYS, i)).unwrap().is_committed()
        );
        let syncs = (MemCounts::current() - before).syncs;
        if engine.pool().len() != len_before {
            // The pool grew for a ring: growing syncs the new length, a cost of room, not of
            // the policy.
            continue;
        }
        if rings_before <= 2 * budget {
            within += syncs;
        } else {
            beyond += syncs;
        }
        most = most.max(engine.rings() as u64 * RING);
    }
    eprintln!("syncs within twice the budget {within}, beyond it {beyond}; rings at most {most} bytes");
    assert_eq!(within, 0, "a writer synced before the rings outgrew twice their budget");
    assert!(beyond > 0, "the rings never outgrew twice their budget: the check saw nothing");
    // A ring more than twice the budget: the one taken while the writer's safe point was due.
    assert!(most <= 2 * budget + RING, "the rings grew to {most} bytes, budget {budget}");
}

/// A gate on the syncs of a memory: while it is closed, a sync waits at it, so that a test can
/// hold a safe point in flight and let writers arrive meanwhile, whatever the scheduling.
#[derive(Debug, Default)]
struct SyncGate {
    state: std::sync::Mutex<GateState>,
    changed: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    /// Syncs fail (as on a disk that refuses writes) while set.
    failing: bool,
    /// Syncs waiting at the gate now.
    held: usize,
    /// Syncs that passed it.
    passed: u64,
    /// Writes that returned (told by the test's writers).
    returned: u64,
}

impl SyncGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().expect("no panic while holding it")
    }

    fn open(&self) {
        self.lock().closed = false;
        self.changed.notify_all();
    }

    /// Returns once a sync waits at the (closed) gate, or a write returned: how many of each.
    fn wait_for_a_held_sync(&self) -> (usize, u64) {
        let mut st = self.lock();
        while st.held == 0 && st.returned == 0 {
            st = self.changed.wait(st).expect("no panic while holding it");
        }
        (st.held, st.returned)
    }

    /// A write returned.
    fn returned(&self) {
        self.lock().returned += 1;
        self.changed.notify_all();
    }

    fn returns(&self) -> u64 {
        self.lock().returned
    }

    fn passed(&self) -> u64 {
        self.lock().passed
    }

    /// Closes the gate until the guard is dropped, on every path: a test that panics with syncs
    /// held lets them go, so that its threads end and the panic is reported.
    fn closed(&self) -> OpenOnDrop<'_> {
        self.lock().closed = true;
        OpenOnDrop(self)
    }

    /// Makes the syncs fail, or succeed again.
    fn fail(&self, failing: bool) {
        self.lock().failing = failing;
    }

    /// What a sync does first: waits while the gate is closed; then fails if told to.
    fn pass(&self) -> std::io::Result<()> {
        let mut st = self.lock();
        st.held += 1;
        self.changed.notify_all();
        while st.closed {
            st = self.changed.wait(st).expect("no panic while holding it");
        }
        st.held -= 1;
        st.passed += 1;
        if st.failing {
            return Err(std::io::Error::other("the disk refused the write"));
        }
        Ok(())
    }
}

/// Opens its gate when dropped.
struct OpenOnDrop<'a>(&'a SyncGate);

impl Drop for OpenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// The simulator's memory with its syncs behind a [`SyncGate`].
#[derive(Debug)]
struct Gated {
    inner: Arc<SimMem>,
    gate: Arc<SyncGate>,
}

impl petra::mem::PMem for Gated {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn load(&self, off: u64, order: Ordering) -> u64 {
        self.inner.load(off, order)
    }
    fn store(&self, off: u64, val: u64, order: Ordering) {
        self.inner.store(off, val, order)
    }
    fn compare_exchange(
        &self,
        off: u64,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64> {
        self.inner.compare_exchange(off, current, new, success, failure)
    }
    fn fetch_add(&self, off: u64, val: u64, order: Ordering) -> u64 {
        self.inner.fetch_add(off, val, order)
    }
    fn flush(&self, off: u64) {
        self.inner.flush(off)
    }
    fn fence(&self) {
        self.inner.fence()
    }
    fn grow(&self, new_len: u64) -> Result<(), petra::mem::GrowError> {
        self.inner.grow(new_len)
    }
    fn max_len(&self) -> u64 {
        self.inner.max_len()
    }
    fn durability(&self) -> petra::mem::Durability {
        self.inner.durability()
    }
    fn boot(&self) -> u128 {
        self.inner.boot()
    }
    fn sync(&self) -> std::io::Result<()> {
        self.gate.pass()?;
        self.inner.sync()
    }
}

/// Group commit, counted: under `Immediate`, a first writer's safe point is held at its first
/// sync while the other writers commit (each visible to a reader, so each committed after that
/// safe point took its txid, and none covered by it); once the sync goes on, the others share
/// one safe point, not one each. And each write returns only after a safe point that covers it:
/// at its return, the image with no page written back since the last sync holds it.
#[test]
fn concurrent_immediate_writers_share_one_safe_point() {
    const WRITERS: u64 = 6;
    let mem = Arc::new(setup().with_model(MediaModel::PageCache));
    let gate = Arc::new(SyncGate::default());
    let pool = Pool::open_in(Gated { inner: Arc::clone(&mem), gate: Arc::clone(&gate) }).unwrap();
    let (engine, _) = Engine::open(pool, config_of(DurabilityPolicy::Immediate)).unwrap();
    let (made, synced) = (engine.safe_points(), gate.passed());
    let s = ALL[0];
    let value = |k: u64| 5_000 + k;
    let states = std::thread::scope(|scope| {
        let closed = gate.closed();
        let write = |k: u64| {
            let (engine, mem, gate) = (&engine, &mem, &gate);
            move || {
                let mut h = engine.handle().unwrap();
                let out = petra_recovery::battery::execute(&mut h, Transaction::new().put(s, k, value(k))).unwrap();
                assert!(out.is_committed());
                let state = mem.crash_now();
                gate.returned();
                (k, state)
            }
        };
        let first = scope.spawn(write(0));
        assert_eq!(gate.wait_for_a_held_sync(), (1, 0), "the first write returned before its safe point's sync");
        let others: Vec<_> = (1..WRITERS).map(|k| scope.spawn(write(k))).collect();
        // Every other writer has committed while the first writer's safe point is held.
        let mut h = engine.handle().unwrap();
        while (1..WRITERS).any(|k| petra_recovery::battery::get(&mut h, s, k).unwrap() != Some(value(k))) {
            std::thread::yield_now();
        }
        assert_eq!(gate.returns(), 0, "a write returned while every sync was held");
        drop(closed);
        let mut states = vec![first.join().unwrap()];
        states.extend(others.into_iter().map(|t| t.join().unwrap()));
        states
    });
    let (safe_points, syncs) = (engine.safe_points() - made, gate.passed() - synced);
    eprintln!("{WRITERS} concurrent writes under Immediate: {safe_points} safe points, {syncs} syncs");
    // A safe point is one sync that vouches for itself: the first writer's (held), and one for
    // all the others. Writers each making their own would make one per writer at least.
    assert_eq!((safe_points, syncs), (2, 2), "{WRITERS} writes made {safe_points} safe points ({syncs} syncs)");
    assert!(syncs < WRITERS, "{WRITERS} writes made {syncs} syncs");
    for (k, state) in states {
        let image = state.no_store();
        let (recovered, _) = Engine::open(Pool::open_in(image.to_mem(MAX_LEN)).unwrap(), engine_config()).unwrap();
        let got = petra_recovery::battery::entries(&recovered, s).unwrap().into_iter().find(|e| e.0 == k);
        assert_eq!(got, Some((k, value(k))), "write {k} returned before a safe point covered it");
    }
}

/// A background safe point that fails is reported, once, by `safe_point_failure` (no write
/// reports it), and by the next `sync`; once the disk takes writes again, safe points go on.
#[test]
fn a_failed_background_safe_point_is_reported_and_the_next_one_succeeds() {
    let mem = Arc::new(setup().with_model(MediaModel::PageCache));
    let gate = Arc::new(SyncGate::default());
    let pool = Pool::open_in(Gated { inner: Arc::clone(&mem), gate: Arc::clone(&gate) }).unwrap();
    let every = std::time::Duration::from_millis(5);
    let (engine, _) = Engine::open(pool, config_of(DurabilityPolicy::Periodic(every))).unwrap();
    let mut h = engine.handle().unwrap();
    assert!(petra_recovery::battery::execute(&mut h, Transaction::new().put(ALL[0], 1u64, 2)).unwrap().is_committed());
    assert!(engine.safe_point_failure().is_none());
    gate.fail(true);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let failure = loop {
        if let Some(e) = engine.safe_point_failure() {
            break e;
        }
        assert!(std::time::Instant::now() < end, "no failure reported");
        std::thread::sleep(every);
    };
    assert_eq!(failure.to_string(), "the disk refused the write");
    // A write still commits (it survives the death of the process), and the next safe point the
    // syncer tries fails too: `sync` reports that one, or its own.
    assert!(petra_recovery::battery::execute(&mut h, Transaction::new().put(ALL[0], 1u64, 3)).unwrap().is_committed());
    assert!(engine.sync().is_err());
    gate.fail(false);
    let made = engine.safe_points();
    // A failure kept before the disk came back may still be reported once; then syncs succeed.
    let _ = engine.sync();
    engine.sync().unwrap();
    assert!(engine.safe_points() > made);
    assert!(engine.safe_point_failure().is_none());
}

/// An `Immediate` write whose safe point's sync fails returns the error; once the disk takes
/// writes again, the next write's safe point covers both (its claim counts every writer since
/// the last safe point that completed, the failed one's too), and a power loss right after it
/// keeps them.
#[test]
fn after_a_failed_sync_the_next_safe_point_covers_every_write_since_the_last_one() {
    let mem = Arc::new(setup().with_model(MediaModel::PageCache));
    let gate = Arc::new(SyncGate::default());
    let pool = Pool::open_in(Gated { inner: Arc::clone(&mem), gate: Arc::clone(&gate) }).unwrap();
    let (engine, _) = Engine::open(pool, config_of(DurabilityPolicy::Immediate)).unwrap();
    let mut h = engine.handle().unwrap();
    let s = ALL[0];
    let put = |h: &mut petra::Handle<Gated>, k: u64| {
        petra_recovery::battery::execute(h, Transaction::new().put(s, k, 100 + k))
    };
    assert!(put(&mut h, 1).unwrap().is_committed());
    gate.fail(true);
    assert!(put(&mut h, 2).is_err(), "a write whose sync failed returned success");
    gate.fail(false);
    assert!(put(&mut h, 3).unwrap().is_committed());
    let state = mem.crash_now();
    let image = state.no_store();
    let (recovered, report) = Engine::open(Pool::open_in(image.to_mem(MAX_LEN)).unwrap(), engine_config()).unwrap();
    assert!(report.safe_point.is_some(), "{report:?}");
    let got: Vec<(u64, u64)> = petra_recovery::battery::entries(&recovered, s)
        .unwrap()
        .into_iter()
        .filter(|e| (1..=3).contains(&e.0))
        .collect();
    assert_eq!(got, [(1, 101), (2, 102), (3, 103)], "{report:?}");
}
