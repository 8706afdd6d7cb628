//! The engine over one pool: its lifecycle (create, open, close), its handles, and the creation
//! of structures.
//!
//! [`Engine::create`] sets up an engine in a new pool; [`Engine::open`] recovers one (see
//! `recovery`) and assembles the engine from what recovery found; [`Engine::close`] folds every
//! committed transaction into records so that the next open reads no descriptor. Work is done
//! through [`Handle`]s, one per thread.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use crossbeam_epoch::Collector;
use parking_lot::Mutex;

use crate::checkpoint::{CheckpointReport, CheckpointStats, Checkpointer};
use crate::error::{Damage, EngineError};
use crate::handle::{Handle, Shared};
use crate::key::{Key, KeyWidth};
use crate::mem::PMem;
use crate::meta::{Claim, Meta};
use crate::pool::Pool;
use crate::protocol::Core;
use crate::recovery::{self, Contents, Recovered, RecoveryReport, Refused};
use crate::ring::Rings;
use crate::safe::DurabilityPolicy;
use crate::structures::registry::{self, Registry, Structure};
use crate::tx::{MAX_OPS, Op, OpKind, Shape, StructId, StructureKind, Transaction, Values};
use crate::wake::{Wake, Worker};

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Bytes of a descriptor ring (rounded up to whole chunks). A thread writes its descriptors
    /// into one ring, in laps; checkpoint rounds recycle them. A thread whose ring has no room
    /// for its next descriptor (rounds have not caught up) takes another ring, growing the pool,
    /// up to its maximum size ([`AllocError::PoolFull`](crate::error::AllocError::PoolFull)
    /// then).
    pub ring_bytes: u64,
    /// When a thread's ring holds more than this share of its bytes (in percent) not yet
    /// recycled, that thread runs a checkpoint round ([`Handle::checkpoint`]) after its
    /// transaction, unless another round is running. 0: rounds run only when asked for.
    pub checkpoint_fill: u8,
    /// When a write survives a power loss on a page-cache pool (see [`DurabilityPolicy`]): by
    /// default a power-safe point every second.
    pub durability: DurabilityPolicy,
    /// Whether the rounds that [`checkpoint_fill`](EngineConfig::checkpoint_fill) starts run on
    /// a thread of the engine's own, beside the writers, instead of in the writer that found its
    /// ring filling: then no transaction's call takes a round's time (a round folds a quarter of
    /// a ring), and no round runs where the caller holds a lock of its own. Off by default: a
    /// writer that runs the rounds itself keeps the engine's work on its own threads and makes
    /// what a run does depend on its transactions alone (as simulated crashes want).
    pub background_rounds: bool,
    /// How much a range scan's snapshot may hold back: once writers have written more than this
    /// many bytes of descriptors and replaced byte values holding this many bytes of the pool
    /// (the two summed) since the snapshot was taken, it is expired, and the scan stops with
    /// [`EngineError::SnapshotExpired`] at its next step instead of keeping the rings from being
    /// recycled and the replaced values from being freed for as long as its caller reads (see
    /// [`Handle::snapshot_with`]). Writers look after each transaction once a sixteenth of the
    /// limit (or of a ring, if smaller) was added since they last did, so the bound is exceeded
    /// by less than two such steps per writer and the values its last transaction replaced.
    /// `None`: an eighth of the pool's maximum size.
    pub snapshot_limit: Option<u64>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            ring_bytes: 64 << 20,
            checkpoint_fill: 25,
            durability: DurabilityPolicy::default(),
            background_rounds: false,
            snapshot_limit: None,
        }
    }
}

/// What [`Engine::salvage`] kept, and what it passed over.
#[derive(Debug, Clone, Default)]
pub struct SalvageReport {
    /// Keys copied, over all structures.
    pub kept: u64,
    /// Every piece of damage passed over, with where it was: each cost the key or keys it held
    /// (a record, a value, a descriptor's writes).
    pub dropped: Vec<Damage>,
}

impl EngineConfig {
    /// Refuses settings the engine cannot run with: a ring must hold a descriptor of the most
    /// ops (and whole chunks of the pool, up to a run of chunks' limit).
    fn validate(&self, chunk_size: u64) -> Result<(), EngineError> {
        let bytes = self.ring_bytes.max(1).checked_next_multiple_of(chunk_size);
        let largest = crate::descriptor::desc_bytes(crate::tx::MAX_OPS, true) + crate::mem::CACHE_LINE;
        match bytes {
            Some(b) if b >= largest && b / chunk_size <= 0xFF_FFFF => Ok(()),
            _ => Err(EngineError::InvalidConfig(format!(
                "rings of {} bytes: a ring is whole chunks of {chunk_size} bytes, at most {} of them, and holds a \
                 descriptor of {largest} bytes",
                self.ring_bytes, 0xFF_FFFF
            ))),
        }
    }

    /// The default settings with rings of `ring_bytes` bytes.
    pub fn rings(ring_bytes: u64) -> EngineConfig {
        EngineConfig { ring_bytes, ..EngineConfig::default() }
    }

    /// The same settings with automatic checkpoint rounds at `percent` of a ring (0: only when
    /// asked for).
    pub fn checkpoint_fill(self, percent: u8) -> EngineConfig {
        EngineConfig { checkpoint_fill: percent.min(100), ..self }
    }

    /// The same settings under the durability `policy`.
    pub fn durability(self, policy: DurabilityPolicy) -> EngineConfig {
        EngineConfig { durability: policy, ..self }
    }

    /// These settings, with the automatic rounds run on the engine's own thread (`true`) or by
    /// the writers (see [`EngineConfig::background_rounds`]).
    pub fn background_rounds(self, on: bool) -> EngineConfig {
        EngineConfig { background_rounds: on, ..self }
    }

    /// These settings, with scans' snapshots expired beyond `bytes` written and replaced while
    /// they are held (see [`EngineConfig::snapshot_limit`]).
    pub fn snapshot_limit(self, bytes: u64) -> EngineConfig {
        EngineConfig { snapshot_limit: Some(bytes), ..self }
    }
}

/// Starts the background syncer of `shared`, which makes a safe point every `every` while the
/// engine lives, and soon when one is asked for
/// ([`SafePoints::ask`](crate::safe::SafePoints::ask)). It holds the engine only while it makes
/// one.
fn start_syncer<M: PMem + 'static>(shared: &Arc<Shared<M>>, every: Duration) -> Worker {
    let weak = Arc::downgrade(shared);
    let gap = crate::safe::SafePoints::asked_gap(every);
    Worker::spawn("petra-safe-points", Arc::clone(&shared.core.safe.wake), move |wake, run| {
        while wake.wait(run, Some(every), gap) {
            let Some(shared) = weak.upgrade() else { return };
            shared.core.safe.keep_error(shared.safe_point());
        }
    })
}

/// Starts the thread of `shared` that runs the automatic checkpoint rounds when the engine is
/// configured so ([`EngineConfig::background_rounds`]), woken by `wake` when writers whose rings
/// fill ask for one. It holds the engine only while it runs rounds.
fn start_rounder<M: PMem + 'static>(shared: &Arc<Shared<M>>, wake: Arc<Wake>) -> Worker {
    let weak = Arc::downgrade(shared);
    let collector = shared.collector.clone();
    Worker::spawn("petra-rounds", wake, move |wake, run| {
        let local = collector.register();
        while wake.wait(run, None, Duration::ZERO) {
            let Some(shared) = weak.upgrade() else { return };
            shared.checkpointer.asked_round(&shared.core, &shared.rings, &local);
        }
    })
}

/// The engine over one pool: its structures, rings and txid counter. Cheap to clone.
#[derive(Debug)]
pub struct Engine<M: PMem + 'static> {
    shared: Arc<Shared<M>>,
}

#[cfg(test)]
impl<M: PMem + 'static> Engine<M> {
    /// How many removals and replaced values were put back to wait for a scan's snapshot.
    pub(crate) fn waited_for_snapshots(&self) -> [u64; 2] {
        // Relaxed: counts read once the threads that moved them are done.
        self.shared.core.reclaim.snapshots.waited.each_ref().map(|w| w.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The shared state, without holding it.
    pub(crate) fn shared_weak(&self) -> std::sync::Weak<Shared<M>> {
        Arc::downgrade(&self.shared)
    }

    /// How many removals ran.
    pub(crate) fn removals_run(&self) -> u64 {
        // Relaxed: a count read once the threads that moved it are done.
        self.shared.core.reclaim.removals_run.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl<M: PMem + 'static> Clone for Engine<M> {
    fn clone(&self) -> Self {
        self.shared.enter();
        Engine { shared: Arc::clone(&self.shared) }
    }
}

/// The last engine or handle dropped stops the engine's threads and waits for them, so that the
/// pool is closed when the drop returns (see `Shared::leave`).
impl<M: PMem + 'static> Drop for Engine<M> {
    fn drop(&mut self) {
        self.shared.leave();
    }
}

impl<M: PMem + 'static> Engine<M> {
    /// Sets up the engine in a new pool (one without an engine).
    pub fn create(pool: Pool<M>, config: EngineConfig) -> Result<Engine<M>, EngineError> {
        config.validate(pool.header().layout.chunk_size)?;
        let meta = Meta::create(&pool)?;
        Engine::assemble(Recovered::empty(pool, meta), config)
    }

    /// Opens the engine of a pool made by [`Engine::create`], recovering it: every transaction
    /// that was acknowledged is there, and no effect of one that was not. Everything is read and
    /// checked before anything is written: a pool refused (damaged: [`EngineError::Damaged`]) is
    /// left byte for byte as it was.
    pub fn open(pool: Pool<M>, config: EngineConfig) -> Result<(Engine<M>, RecoveryReport), EngineError> {
        match Engine::open_checked(pool, config, |_| Ok::<(), std::convert::Infallible>(())) {
            Ok((engine, report, ())) => Ok((engine, report)),
            Err(Refused::Engine(e)) => Err(e),
            Err(Refused::Check(never)) => match never {},
        }
    }

    /// [`open`](Engine::open), with `check` given what the pool holds once it has been read and
    /// checked, before anything is written: a pool `check` refuses is left as it was too.
    pub fn open_checked<T, E>(
        pool: Pool<M>,
        config: EngineConfig,
        check: impl FnOnce(&Contents<'_>) -> Result<T, E>,
    ) -> Result<(Engine<M>, RecoveryReport, T), Refused<E>> {
        config.validate(pool.header().layout.chunk_size).map_err(Refused::Engine)?;
        let (found, accepted) = recovery::recover(pool, check)?;
        let report = found.report.clone();
        Ok((Engine::assemble(found, config).map_err(Refused::Engine)?, report, accepted))
    }

    /// The engine over what recovery found (or a new engine's empty state).
    ///
    /// The meta region's safe txid and claim are set for the policy, synced: while safe points
    /// are kept, every txid handed out before (of an earlier epoch, void now; of this one, after
    /// a clean close that wrote nothing; or none) is at or below them; otherwise the safe txid
    /// says 0 (none kept) and the claim is void, so that a power loss is not taken back to a
    /// safe point that the rounds no longer respect (a close that wrote nothing keeps the
    /// epoch, and with it an earlier run's claim).
    fn assemble(found: Recovered<M>, config: EngineConfig) -> Result<Engine<M>, EngineError> {
        let Recovered { pool, meta, epoch, max_txid, txid_reserved, structures, .. } = found;
        let rings = Rings::of_pool(&pool, config.ring_bytes);
        let snapshot_limit = config.snapshot_limit.unwrap_or(pool.max_len() / 8);
        let core =
            Core::new(pool, meta, (epoch, max_txid + 1, txid_reserved), Registry::new(structures), config.durability);
        let mem = core.pool.mem();
        let recorded = meta.safe_txid(mem);
        let claim = meta.claim(mem);
        if core.safe.on() {
            // The state recovery left (or a new engine's) is the first safe point: recorded, with
            // a claim of this epoch that counts nothing, so that a power loss before the run's
            // first safe point comes back here, not to whatever reached the disk.
            let open = Claim { txid: max_txid, prev: max_txid, writers: 0, epoch };
            if recorded != max_txid || claim != Some(open) {
                meta.set_safe_txid(mem, max_txid);
                meta.set_claim(mem, open);
                core.pool.sync()?;
            }
            core.safe.opened_at(max_txid);
        } else if recorded != 0 || claim.is_some() {
            meta.set_safe_txid(mem, 0);
            meta.void_claim(mem);
            core.pool.sync()?;
        }
        let shared = Arc::new(Shared {
            core,
            collector: Collector::new(),
            rings,
            checkpointer: Checkpointer::new(config.checkpoint_fill, config.background_rounds, snapshot_limit),
            threads: Mutex::new(Vec::new()),
            users: AtomicUsize::new(1),
        });
        let engine = Engine { shared };
        engine.start_threads();
        Ok(engine)
    }

    /// Starts the background syncer if the policy wants one, and the rounds' thread if the
    /// configuration does.
    fn start_threads(&self) {
        let mut threads = self.shared.threads.lock();
        if let Some(every) = self.shared.core.safe.interval() {
            threads.push(start_syncer(&self.shared, every));
        }
        if let Some(wake) = self.shared.checkpointer.background() {
            threads.push(start_rounder(&self.shared, wake));
        }
    }

    /// The shared state, taken out of the engine if this is its last holder (its threads
    /// stopped first, so that they hold nothing), or the engine back, its threads running.
    fn into_shared(self) -> Result<Shared<M>, Engine<M>> {
        let shared = Arc::clone(&self.shared);
        // The last user's drop stops the threads and waits for them (see `Shared::leave`).
        drop(self);
        Arc::try_unwrap(shared).map_err(|shared| {
            // Another engine or handle holds it (with no user left, the threads were joined and
            // nothing else does), so its threads still run.
            let before = shared.enter();
            debug_assert!(before > 0, "the shared state held with no user");
            Engine { shared }
        })
    }

    /// Makes everything committed so far survive a power loss, and returns once it does: a
    /// power-safe point, while the engine keeps them (a page-cache pool under a policy other
    /// than [`DurabilityPolicy::Process`]); under `Process`, a sync of the pool, which keeps
    /// only until the next change (the rounds order nothing for the disk). On persistent memory
    /// everything committed survives already, and on a file in memory (`/dev/shm`) nothing can:
    /// there it returns at once. Also reports the error of a background safe point that failed
    /// since the last call, if any.
    pub fn sync(&self) -> Result<(), EngineError> {
        let shared = &self.shared;
        if let Some(e) = shared.core.safe.take_error() {
            return Err(EngineError::Io(e));
        }
        if shared.core.safe.on() {
            shared.safe_point()?;
        } else {
            shared.core.pool.sync()?;
        }
        Ok(())
    }

    /// The error of a safe point that failed with nobody waiting for it (the background
    /// syncer's, or one a round or a writer made early) since the last call or
    /// [`sync`](Engine::sync), if any: taken. No write reports such a failure, so a long-running user should look here
    /// now and then: until a later safe point succeeds, what was written since the last one
    /// would not survive a power loss.
    pub fn safe_point_failure(&self) -> Option<std::io::Error> {
        self.shared.core.safe.take_error()
    }

    /// The durability policy in force.
    pub fn durability(&self) -> DurabilityPolicy {
        self.shared.core.safe.policy()
    }

    /// Whether the engine keeps power-safe points: on a file in the page cache of a disk, under a
    /// policy other than [`DurabilityPolicy::Process`]. Not on persistent memory, where a fence
    /// is durable, nor on a file in memory (`/dev/shm`), which a power loss takes whole: there
    /// every policy is as `Process` (see [`DurabilityPolicy::guarantee`]).
    pub fn keeps_safe_points(&self) -> bool {
        self.shared.core.safe.on()
    }

    /// Power-safe points made since the engine was opened.
    pub fn safe_points(&self) -> u64 {
        self.shared.core.safe.made()
    }

    /// When the last power-safe point completed, if one did since the engine was opened.
    pub fn last_safe_point(&self) -> Option<std::time::Instant> {
        self.shared.core.safe.last()
    }

    /// Copies what is intact of the engine in `damaged` into a new engine in `into` (a new pool,
    /// without an engine): the same structures in the same order, with every key whose state
    /// could be read whole, as recovery reads it but passing over damage (each item reported)
    /// instead of refusing the pool. `damaged` is only read: opened with
    /// [`Mapping { private: true, .. }`](crate::pool::Mapping::private), its file is never
    /// written. Its engine's meta region and root table must be readable.
    pub fn salvage<N: PMem + 'static>(
        damaged: &Pool<M>,
        into: Pool<N>,
        config: EngineConfig,
    ) -> Result<(Engine<N>, SalvageReport), EngineError> {
        let found = recovery::salvage(damaged)?;
        let engine = Engine::create(into, config)?;
        for s in &found.structures {
            let (kind, keys, values) = s.shape();
            engine.create_structure(kind, keys, values)?;
        }
        let mut h = engine.handle()?;
        let (mut tx, mut buf) = (Transaction::new(), Vec::new());
        for entries in found.present.chunks(MAX_OPS) {
            tx.clear();
            for &(slot, key, value) in entries {
                let s = &found.structures[slot as usize];
                let op = Op { kind: OpKind::Put, structure: StructId(slot), key, width: s.keys(), value };
                if s.values == Values::Bytes {
                    // Checked when the salvage read it, and `damaged` is not written meanwhile.
                    damaged.read_blob_into(crate::pool::POff::new(value), &mut buf)?;
                    tx.op_bytes(op, &buf);
                } else {
                    tx.op(op);
                }
            }
            if !h.execute(&tx)?.is_committed() {
                return Err(EngineError::Corrupt("puts into a new engine aborted".into()));
            }
        }
        drop(h);
        let report = SalvageReport { kept: found.present.len() as u64, dropped: found.dropped };
        Ok((engine, report))
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<M> {
        &self.shared.core.pool
    }

    /// The engine's core, for tests that drive it past the public interface.
    #[cfg(test)]
    pub(crate) fn core(&self) -> &Core<M> {
        &self.shared.core
    }

    /// Closes the engine and its pool cleanly, so that the next [`open`](Engine::open) skips
    /// recovery: if any transaction ran since the pool was opened, its descriptors are first
    /// folded into normalised nodes (recovery's rewrite, run here: the rings are left empty),
    /// then everything is synced, the engine marked clean in its meta region and the pool closed
    /// ([`Pool::close`]). A crash at any point of it leaves a pool that recovers as usual.
    /// [`EngineError::InUse`] while a clone or a [`Handle`] of it lives (nothing is closed).
    pub fn close(self) -> Result<(), EngineError> {
        // With no clone or handle left, none can appear: every one is made from another.
        let shared = self.into_shared().map_err(|_| EngineError::InUse)?;
        let written = shared.rings.written();
        let shared = if written { Engine::rewrite(shared)? } else { shared };
        let core = shared.core;
        core.meta.mark_clean(core.pool.mem(), core.epoch);
        core.pool.close()?;
        Ok(())
    }

    /// With every handle gone, folds every committed transaction into new normalised nodes
    /// (recovery's rewrite, run here) and returns the engine's state over the same pool, its
    /// rings empty.
    fn rewrite(shared: Shared<M>) -> Result<Shared<M>, EngineError> {
        // No safe point is wanted of the engine over the rewritten pool: the close syncs.
        let config = EngineConfig {
            ring_bytes: shared.rings.ring_bytes(),
            checkpoint_fill: shared.checkpointer.fill(),
            durability: DurabilityPolicy::Process,
            ..EngineConfig::default()
        };
        // An open engine never has its clean word set (it is cleared at open), so this is the
        // full rewrite.
        let engine = Engine::open(shared.core.pool, config)?.0;
        engine.into_shared().map_err(|_| EngineError::InUse)
    }

    /// Gives the pool back, to close it (or, in tests, to drop it as a crash would). Fails,
    /// returning the engine, while a clone or a [`Handle`] of it lives. A pool closed without
    /// [`Engine::close`] recovers at its next open.
    pub fn into_pool(self) -> Result<Pool<M>, Engine<M>> {
        self.into_shared().map(|shared| shared.core.pool)
    }

    /// Checkpoints now (see [`Handle::checkpoint`]), on a handle of its own: folds the
    /// descriptors of the transactions finished before the call into the node records, so that
    /// recovery reads only what comes after, and recycles their ring slots once no thread can
    /// read them. That takes two rounds, the second once every thread pinned during the first
    /// has moved on; if none has yet, the next round folds them. `None` if a round is running,
    /// the last one's end is still waiting, or a scan's snapshot holds the fold back. Rounds
    /// also run on their own as rings fill
    /// ([`EngineConfig::checkpoint_fill`]).
    pub fn checkpoint(&self) -> Result<Option<CheckpointReport>, EngineError> {
        Ok(self.handle()?.checkpoint())
    }

    /// What the checkpoint rounds did since the engine was opened.
    pub fn checkpoint_stats(&self) -> CheckpointStats {
        self.shared.checkpointer.stats()
    }

    /// The descriptor rings the pool holds (each [`EngineConfig::ring_bytes`] long).
    pub fn rings(&self) -> usize {
        self.shared.rings.len()
    }

    /// A handle for the calling thread: its descriptor ring, allocation cache and epoch
    /// participation. Keep one per thread.
    pub fn handle(&self) -> Result<Handle<M>, EngineError> {
        Ok(Handle::new(&self.shared))
    }

    /// Creates a new, empty structure of `kind` whose keys are of width `keys` and whose values
    /// are `values`, and returns its id. The multi-dimensional list takes one-word keys only.
    pub fn create_structure(
        &self,
        kind: StructureKind,
        keys: KeyWidth,
        values: Values,
    ) -> Result<StructId, EngineError> {
        let core = &self.shared.core;
        core.structures.create(&core.pool, core.meta, kind, keys, values)
    }

    /// Creates a new, empty list set of `u64` keys and word values and returns its id.
    pub fn create_list(&self) -> Result<StructId, EngineError> {
        self.create_structure(StructureKind::List, KeyWidth::U64, Values::Words)
    }

    /// Creates a new, empty skiplist of `u64` keys and word values and returns its id.
    pub fn create_skiplist(&self) -> Result<StructId, EngineError> {
        self.create_structure(StructureKind::SkipList, KeyWidth::U64, Values::Words)
    }

    /// Creates a new, empty multi-dimensional list of `u64` keys and word values and returns its id.
    pub fn create_mdlist(&self) -> Result<StructId, EngineError> {
        self.create_structure(StructureKind::MdList, KeyWidth::U64, Values::Words)
    }

    /// Creates a new, empty hash map of `u64` keys and word values with `buckets` buckets and
    /// returns its id.
    pub fn create_hash_map(&self, buckets: u64) -> Result<StructId, EngineError> {
        self.create_structure(StructureKind::HashMap { buckets }, KeyWidth::U64, Values::Words)
    }

    /// What the values of structure `s` are.
    pub fn values(&self, s: StructId) -> Result<Values, EngineError> {
        Ok(self.shared.core.structures.get(s)?.values)
    }

    /// The kind of structure `s`, with its parameters.
    pub fn kind(&self, s: StructId) -> Result<StructureKind, EngineError> {
        Ok(self.shared.core.structures.get(s)?.kind())
    }

    /// The shapes of the structures of the engine in `pool`, by id (0, 1, ...), read and checked
    /// without opening the engine (nothing is written): for a caller that must refuse a pool of
    /// another shape untouched. [`EngineError::NoEngine`] or [`EngineError::Damaged`] as an open
    /// would say.
    pub fn structures_in(pool: &Pool<M>) -> Result<Vec<Shape>, EngineError> {
        let (_, state) = Meta::find(pool)?;
        Ok(registry::read(pool, state.structures)?.iter().map(Structure::shape).collect())
    }

    /// The structures, by id.
    pub fn structures(&self) -> Vec<StructId> {
        self.shared.core.structures.ids()
    }

    /// The width of the keys of structure `s`.
    pub fn keys(&self, s: StructId) -> Result<KeyWidth, EngineError> {
        Ok(self.shared.core.structures.get(s)?.keys())
    }

    /// Checks the links of structure `s`, a diagnostic for tests and tools, to be run while no
    /// transaction uses it: every chain and skiplist level in key order with no node left
    /// marked (but for a list's nodes whose removal has begun: a list leaves their unlink to the
    /// next search that passes them), every hash map node in its key's bucket, every skiplist
    /// tower whole (linked at each level of its height, its link count its height), every MDList
    /// node where its coordinates put it. Returns the number of nodes linked (absent keys' nodes
    /// included, until they are unlinked); [`EngineError::Corrupt`] says what is wrong where.
    pub fn check_links(&self, s: StructId) -> Result<u64, EngineError> {
        let core = &self.shared.core;
        let walked = core.structures.get(s)?.walk_checked(&core.pool, true, &mut |_, _| {});
        walked.map_err(|f| EngineError::Damaged(Damage { what: format!("structure {}: {}", s.0, f.what), at: f.at }))
    }

    /// The present keys of a structure with their values, in key order: a snapshot (see
    /// [`Handle::range`]).
    pub fn entries<K: Key>(&self, s: StructId) -> Result<Vec<(K, u64)>, EngineError> {
        self.handle()?.range(s, ..)
    }

    /// Txids handed out so far (the next one minus one): for checkers that bound when a read
    /// happened.
    pub fn txid_watermark(&self) -> u64 {
        self.shared.core.next_txid() - 1
    }
}
