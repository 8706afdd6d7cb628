//! Safe points: what a power loss cannot take back on a pool in the page cache.
//!
//! On persistent memory with DAX a flush and a fence put a store on the media, and the protocol's
//! order (a byte value before its descriptor, a round's records before the checkpoint txid, the
//! checkpoint txid before the slots it frees are reused) is the media's order. On a file in the
//! page cache of a disk flush and fence order nothing on the disk: the kernel writes dirty pages
//! back when it likes, in any order, and only a sync (`msync`) promises anything. So the engine
//! keeps **safe points** there: a sync after which a power loss brings the pool back to exactly
//! that point, a prefix of the transactions in txid order.
//!
//! A safe point ([`SafePoints::make`]), one at a time, is one sync:
//! 1. `s`, the last txid handed out, is read; each ring's newest descriptor is persisted if it is
//!    committed and not yet (only a ring's newest can be: a handle writes its next descriptor
//!    after its last one returned). Every committed writer at or below `s` is then in memory,
//!    its descriptor and byte values whole.
//! 2. The safe point vouches for itself: the meta region's **claim** records `s`, the last
//!    safe point's txid `p` (whose writers its sync put on the disk) and `n`, how many committed
//!    writers lie above `p` and at or below `s` (counted along each ring from where the last
//!    safe point stopped: txids grow along a ring). With it go what the last safe point synced:
//!    `p` as the safe txid, and the checkpoint txid of the rounds whose records it synced
//!    (those that folded before it began).
//! 3. Sync: the claim is on the disk with every writer it counts, and the records of the
//!    rounds that folded before this safe point began, for the next one to record.
//!
//! So a writer survives a power loss once the first safe point after its commit completes
//! (`Immediate` writers wait for that, sharing it with the writers that commit meanwhile). A
//! sync cut short by the power loss may leave the claim on the disk and some of its writers not:
//! recovery takes the claim only if it finds all `n` whole (each descriptor's check, and the hash
//! of each byte value it applies), and otherwise goes back to the safe txid `p`, which an earlier
//! sync completed. The claim is one record with one check word: stored half, it fails its check
//! and is passed over the same way. A claim names no txid at or above the meta region's txid
//! reservation (a txid there may be handed out before the reservation is raised). The open
//! records the state it opened on as the first safe point (a claim of the new epoch that counts
//! nothing), so that a power loss before the run's first safe point comes back to it; an open
//! under `Process` voids the claim (a close that wrote nothing keeps the epoch).
//!
//! After a power loss (the pool was last in use in another boot, see `Pool::same_boot`),
//! recovery reads only the descriptors at or below the last safe point (the claim's txid if it
//! holds, else the one before it); after the death of the process
//! alone it reads them all, as without safe points. For the safe txid to hold, nothing it relies
//! on may change on the disk before a later safe point covers the change, wherever the kernel
//! writes pages back meanwhile. It relies on the records, the checkpoint txid `C`, the
//! descriptors above `C` up to it, and their byte values. So, while safe points are kept:
//! - **A round folds only what is safe** (the batch stops at the safe txid): a record it writes
//!   is of a key some batch writer wrote (and KDMap names, the batch being above `C` and at or
//!   below the safe txid), or holds a state a reader resolves to from a FINAL word, or (a node
//!   taken on by a newer transaction) a newer state whose key a batch writer also names. A
//!   round's read op whose node moved on writes no record.
//! - **`C` advances a safe point late**: a round stores no `C`; the first safe point begun after
//!   its records were written syncs them (and every transaction they reflect), and the one after
//!   it stores `C`. Whenever the kernel writes that page back, the records it vouches for are
//!   there.
//! - **Slots are recycled once that safe point completes**: a folded batch's slots are reused
//!   only once the `C` above it is on the disk, so that recovery never needs a descriptor that
//!   was written over.
//! - **Replaced byte values are freed once their replacer is safe**: a value stays readable
//!   until the transaction that replaced it is at or below the safe txid.
//!
//! So under `Periodic` the rings hold the descriptors of an interval or two, and the pool the
//! values replaced in one: under writers faster than the interval, rings are added and values
//! held, up to a budget (a sixteenth of the pool's maximum size, see [`SafePoints::relieve`]).
//! Beyond it, rounds that find their rings filling and writers holding values ask the background
//! syncer for a safe point early ([`SafePoints::ask`]), so that the rings go round at the pace of
//! the writers, and no writer waits for the disk; beyond twice the budget they make one
//! themselves. Early safe points are spaced (see `ASKED_GAP`): each costs the writers a page
//! fault on every page they write again after it. Under `Immediate` every writer's own safe
//! point does all this.
//!
//! When the engine keeps no safe points ([`DurabilityPolicy::Process`], a memory where a fence is
//! durable, or a file in memory such as `/dev/shm`'s, which a power loss takes whole, synced or
//! not), none of this runs: rounds advance `C` and recycle as they go, and the safe txid says 0.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::descriptor::{Desc, PersistStatus, TxStatus, desc_bytes};
use crate::mem::{Durability, PMem};
use crate::meta::Claim;
use crate::protocol::Core;
use crate::ring::{Ring, Rings};

/// The least time between the end of a safe point and an asked-for one: each safe point costs
/// the writers a fault on every page they write again after its sync, as well as the sync.
const ASKED_GAP: Duration = Duration::from_millis(250);

/// When a write survives a power loss, on a pool whose memory needs a sync for that (a file in
/// the page cache of a disk). Where a fence is durable (persistent memory with DAX) every policy
/// is as [`Immediate`](DurabilityPolicy::Immediate), at no extra cost. On a file in memory
/// (tmpfs, such as `/dev/shm`: [`Durability::Memory`]) nothing survives a power loss, and every
/// policy is as [`Process`](DurabilityPolicy::Process): no safe point is kept
/// ([`Engine::keeps_safe_points`](crate::Engine::keeps_safe_points) says whether they are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurabilityPolicy {
    /// A write returns once it survives power loss: after the sync of a safe point that covers
    /// it. Writers that commit while a sync is in flight share the next one (group commit).
    Immediate,
    /// A write returns once it survives the death of the process; a background thread makes a
    /// safe point every interval (and [`Engine::sync`](crate::Engine::sync) one when asked). A
    /// power loss loses at most the writes after the last safe point, never one before it.
    Periodic(Duration),
    /// A write survives the death of the process, not of the machine: no safe point is kept. A
    /// power loss may lose or tear anything changed since the last
    /// [`Engine::sync`](crate::Engine::sync) or [`Engine::close`](crate::Engine::close).
    Process,
}

impl Default for DurabilityPolicy {
    /// A safe point every second.
    fn default() -> Self {
        DurabilityPolicy::Periodic(Duration::from_secs(1))
    }
}

impl std::fmt::Display for DurabilityPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DurabilityPolicy::Immediate => write!(f, "immediate"),
            DurabilityPolicy::Periodic(every) => write!(f, "periodic {every:?}"),
            DurabilityPolicy::Process => write!(f, "process"),
        }
    }
}

impl DurabilityPolicy {
    /// What survives on `durability` under this policy, in one line (for start-up logs).
    pub fn guarantee(self, durability: Durability) -> String {
        match durability {
            Durability::Dax => "every acknowledged write survives power loss (persistent memory)".into(),
            Durability::Volatile => "nothing survives the process (volatile)".into(),
            Durability::Private => "nothing reaches the file (a private copy)".into(),
            Durability::Memory => concat!(
                "acknowledged writes survive the death of the process; ",
                "nothing survives power loss or a reboot (the pool file is in memory: tmpfs)"
            )
            .into(),
            Durability::Simulated => format!("as the crash simulator models its medium, under {self}"),
            Durability::PageCache => match self {
                DurabilityPolicy::Immediate => "every acknowledged write survives power loss (synced)".into(),
                DurabilityPolicy::Periodic(every) => format!(
                    "acknowledged writes survive the death of the process; power loss loses at most the last {every:?} \
                     (a safe point every {every:?})"
                ),
                DurabilityPolicy::Process => {
                    "acknowledged writes survive the death of the process, not power loss (no safe points)".into()
                }
            },
        }
    }
}

/// The engine's safe points: the policy, and the state that keeps rounds in step with syncs.
#[derive(Debug)]
pub(crate) struct SafePoints {
    policy: DurabilityPolicy,
    /// Whether safe points are kept: a page-cache memory and a policy other than `Process`.
    on: bool,
    /// The room the descriptor rings, and the replaced values held for a safe point, may each
    /// take before a safe point is asked for early: a sixteenth of the pool's maximum size.
    /// Between safe points the rings keep every descriptor written since the last round's batch,
    /// and the pool the values replaced since the last one, so under writers faster than the
    /// interval they grow: to this, rather than by an early safe point each time a ring fills,
    /// which would cost the writers more (see [`ASKED_GAP`]).
    budget: u64,
    /// Held while a safe point is made (one at a time), with what the last one synced: its txid and the
    /// checkpoint txid of the rounds whose records it synced (the next one records them).
    making: Mutex<Synced>,
    /// The txid of the last safe point completed: its claim is on the disk (0: none yet this
    /// run). The meta region's safe txid word lags it by one safe point.
    durable: AtomicU64,
    /// Safe points completed this run.
    made: AtomicU64,
    /// When the last one completed.
    last: Mutex<Option<std::time::Instant>>,
    gate: Mutex<Gate>,
    /// Group commit: whether a writer is making a safe point for the others.
    leading: Mutex<bool>,
    /// Signalled when a writer's safe point ends.
    led: Condvar,
    /// The last error of a safe point nobody waited for (the background syncer's), until
    /// [`take_error`](SafePoints::take_error).
    error: Mutex<Option<io::Error>>,
    /// The background syncer's wake-up (`Periodic` only).
    pub(crate) wake: Arc<crate::wake::Wake>,
}

impl SafePoints {
    /// The least time between the background syncer's safe points when they are asked for:
    /// [`ASKED_GAP`], at most a quarter of its interval `every`. Each one costs the writers a
    /// fault on every page they write again after it, as well as the sync.
    pub(crate) fn asked_gap(every: Duration) -> Duration {
        ASKED_GAP.min(every / 4)
    }
}

/// What the last safe point synced, for the next one to record.
#[derive(Debug, Default)]
struct Synced {
    /// Every committed writer at or below it is on the disk.
    txid: u64,
    /// The records of the rounds that folded up to it are on the disk.
    checkpoint: u64,
}

/// What waits for safe points: checkpoint txids and ring slots.
#[derive(Debug, Default)]
struct Gate {
    /// The largest checkpoint txid of the rounds that folded since the last safe point began: the
    /// next safe point stores it.
    folded: u64,
    /// The checkpoint txid on the disk (stored by a safe point that completed).
    durable: u64,
    /// Folded batches' ends: (ring, end, the batch's checkpoint txid), recycled once that txid
    /// is on the disk.
    tails: Vec<(Arc<Ring>, u64, u64)>,
}

impl SafePoints {
    /// The safe points of an engine on memory of `durability` under `policy`, in a pool that
    /// may grow to `max_len` bytes.
    pub(crate) fn new(policy: DurabilityPolicy, durability: Durability, max_len: u64) -> SafePoints {
        // Only a file in the page cache of a disk needs them: a fence is durable on persistent
        // memory, and a file in memory (`Durability::Memory`) keeps nothing across a power loss.
        let on = durability == Durability::PageCache && policy != DurabilityPolicy::Process;
        SafePoints {
            policy,
            on,
            budget: max_len / 16,
            making: Mutex::new(Synced::default()),
            durable: AtomicU64::new(0),
            made: AtomicU64::new(0),
            last: Mutex::new(None),
            gate: Mutex::new(Gate::default()),
            leading: Mutex::new(false),
            led: Condvar::new(),
            error: Mutex::new(None),
            wake: Arc::default(),
        }
    }

    /// The open recorded `txid` as the first safe point (see `Engine::assemble`): the first
    /// claim counts from it.
    pub(crate) fn opened_at(&self, txid: u64) {
        *self.making.lock() = Synced { txid, checkpoint: 0 };
    }

    /// The policy in force.
    pub(crate) fn policy(&self) -> DurabilityPolicy {
        self.policy
    }

    /// Whether safe points are kept.
    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    /// Keeps `bytes` (of rings, or of held values) near the budget (see the field): beyond
    /// it asks for a safe point early; beyond twice it (writers outpacing even the early safe
    /// points) makes one with `make`, the caller waiting for it.
    pub(crate) fn relieve(&self, bytes: u64, make: impl FnOnce() -> io::Result<u64>) {
        if bytes > self.budget.saturating_mul(2) {
            self.keep_error(make());
        } else if bytes > self.budget {
            self.ask();
        }
    }

    /// The background syncer's interval, if the engine runs one.
    pub(crate) fn interval(&self) -> Option<Duration> {
        match self.policy {
            DurabilityPolicy::Periodic(every) if self.on => Some(every),
            _ => None,
        }
    }

    /// Every committed writer at or below this txid survives a power loss: `u64::MAX` when safe
    /// points are not kept (nothing waits for them then).
    #[inline]
    pub(crate) fn safe(&self) -> u64 {
        if !self.on {
            return u64::MAX;
        }
        // Acquire: pairs with the Release store after the safe point's syncs.
        self.durable.load(Ordering::Acquire)
    }

    /// Safe points completed since the open.
    pub(crate) fn made(&self) -> u64 {
        // Relaxed: a count for reports.
        self.made.load(Ordering::Relaxed)
    }

    /// When the last safe point completed, if one did since the open.
    pub(crate) fn last(&self) -> Option<std::time::Instant> {
        *self.last.lock()
    }

    /// The bound of a round's batch: `t0`, or the safe txid's successor if that is smaller.
    pub(crate) fn batch_bound(&self, t0: u64) -> u64 {
        t0.min(self.safe().saturating_add(1))
    }

    /// A round wrote the records of every committed writer at or below `c` (made durable by the
    /// caller's flushes, where a fence is durable): stores `c` as the checkpoint txid now, or,
    /// while safe points are kept, has the next safe point store it.
    pub(crate) fn folded<M: PMem + 'static>(&self, core: &Core<M>, c: u64) {
        if !self.on {
            let c = c.max(core.meta.checkpoint_txid(core.mem()));
            core.meta.set_checkpoint_txid(core.mem(), c);
            return;
        }
        let mut gate = self.gate.lock();
        gate.folded = gate.folded.max(c);
    }

    /// Recycles `ring`'s slots up to `end`, which a round folded into records with checkpoint
    /// txid `c`, once no thread can read them (the caller's epoch grace has passed): now, or,
    /// while safe points are kept, once `c` is on the disk.
    pub(crate) fn recycle(&self, ring: Arc<Ring>, end: u64, c: u64) {
        if self.on {
            let mut gate = self.gate.lock();
            if c > gate.durable {
                gate.tails.push((ring, end, c));
                return;
            }
        }
        // Release: a writer that sees the tail reuses slots nobody reads any more.
        ring.tail.store(end, Ordering::Release);
    }

    /// Makes a safe point now (see the [module docs](self)), waiting for one in progress to end
    /// first, and returns the safe txid it made durable. One sync, which vouches for itself and
    /// records what the last one synced. Only while safe points are kept.
    pub(crate) fn make<M: PMem + 'static>(&self, core: &Core<M>, rings: &Rings) -> io::Result<u64> {
        let mut synced = self.making.lock();
        debug_assert!(self.on);
        let mem = core.mem();
        // The rounds whose records are written: this safe point's sync puts them on the disk.
        let folded = std::mem::take(&mut self.gate.lock().folded);
        // 1. Every writer with a txid at or below `s` is committed and has its txid; persisting
        // a descriptor stores its check word and flushes: here, the stores are what matter.
        // At most the last txid under the reservation: a txid at it may be handed out before
        // the reservation is raised, and a claim must not name a txid the meta region has not
        // reserved (recovery would find the two disagree). Its writer waits for the next one.
        let s = (core.next_txid() - 1).min(core.txid_reserved() - 1);
        rings.each(|ring| {
            // Acquire: the descriptor was written before its offset was published.
            let d = ring.newest.load(Ordering::Acquire);
            if d != 0 {
                core.persist(d);
            }
        });
        // 2. The claim: `s`, and the writers above the last safe point that it covers. Counted
        // outside the rings' lock (a ring given back meanwhile has nothing left to count: its
        // descriptors were folded, so at or below the last safe point).
        let counted: Vec<(Arc<Ring>, u64, u64)> = rings
            .all()
            .into_iter()
            .map(|ring| {
                let (n, end) = count_writers(mem, &ring, s);
                (ring, n, end)
            })
            .collect();
        let writers = counted.iter().map(|&(_, n, _)| n).sum();
        let prev = synced.txid;
        // What the last safe point synced is recorded: the writers at or below its txid, and
        // the records of the rounds whose checkpoint txid it took (their batches bounded by an
        // earlier safe txid, so every transaction they reflect is at or below it), are on the
        // disk. Whenever the kernel writes this page back, they are there. Stored before the
        // claim: a page written back between the two holds the new safe txid and the old claim,
        // which vouches for that same txid.
        core.meta.set_safe_txid(mem, prev);
        let c = {
            let gate = self.gate.lock();
            (synced.checkpoint > gate.durable).then_some(synced.checkpoint)
        };
        if let Some(c) = c {
            core.meta.set_checkpoint_txid(mem, c);
        }
        core.meta.set_claim(mem, Claim { txid: s, prev, writers, epoch: core.epoch });
        // 3. One sync: the claim is on the disk, and so is everything it counts. Only then do
        // the rings' counts move on: after a failed sync the next claim counts from the last
        // safe point that completed, as its `prev` says.
        mem.sync()?;
        for (ring, _, end) in counted {
            // Relaxed: read by the next safe point, under the same lock.
            ring.vouched.store(end, Ordering::Relaxed);
        }
        *synced = Synced { txid: s, checkpoint: folded.max(synced.checkpoint) };
        // Release: what waits for the safe txid (an Immediate writer, a freed value's reuse) comes
        // after the sync.
        self.durable.fetch_max(s, Ordering::Release);
        // Relaxed: a count for reports.
        self.made.fetch_add(1, Ordering::Relaxed);
        *self.last.lock() = Some(std::time::Instant::now());
        if let Some(c) = c {
            // The checkpoint txid is on the disk: the slots it covers may be written over.
            let mut gate = self.gate.lock();
            gate.durable = c;
            gate.tails.retain(|(ring, end, tail_c)| {
                if *tail_c > c {
                    return true;
                }
                // Release: as in `recycle`.
                ring.tail.store(*end, Ordering::Release);
                false
            });
        }
        core.reclaim.release_held(&core.pool, s);
        Ok(self.safe())
    }

    /// Makes safe points until every writer committed before the call survives a power loss
    /// (one, unless one was under way: it may have begun before their commits), and returns the
    /// safe txid.
    pub(crate) fn make_all<M: PMem + 'static>(&self, core: &Core<M>, rings: &Rings) -> io::Result<u64> {
        // Bounded as a safe point bounds its txid: a txid at the reservation is being handed
        // out (its transaction has not returned), and no safe point claims it until it is
        // reserved.
        let s = (core.next_txid() - 1).min(core.txid_reserved() - 1);
        let mut safe = self.make(core, rings)?;
        while safe < s {
            safe = self.make(core, rings)?;
        }
        Ok(safe)
    }

    /// Returns once the committed writer `txid` survives a power loss: at once if safe points are
    /// not kept or one covers it, else after the safe point that does, made by `make` (this
    /// writer's, or another's it waited for: writers that arrive while one is made share the
    /// next).
    pub(crate) fn wait(&self, txid: u64, make: impl Fn() -> io::Result<u64>) -> io::Result<()> {
        if self.safe() >= txid {
            return Ok(());
        }
        let mut leading = self.leading.lock();
        loop {
            if self.safe() >= txid {
                return Ok(());
            }
            if *leading {
                self.led.wait(&mut leading);
                continue;
            }
            *leading = true;
            drop(leading);
            let made = make();
            leading = self.leading.lock();
            *leading = false;
            self.led.notify_all();
            made?;
        }
    }

    /// Asks for a safe point soon, without waiting for it: under `Periodic` the background
    /// syncer makes one as soon as the least gap between them allows; under `Immediate` the next
    /// writer's is it. For what needs one to move on (a round's checkpoint txid and ring slots,
    /// held values), not for a writer.
    pub(crate) fn ask(&self) {
        if self.interval().is_some() {
            self.wake.ask();
        }
    }

    /// Keeps the error of a safe point nobody waits for (made by the background syncer, a
    /// round, or a checkpoint), for [`take_error`](SafePoints::take_error).
    pub(crate) fn keep_error(&self, made: io::Result<u64>) {
        if let Err(e) = made {
            *self.error.lock() = Some(e);
        }
    }

    /// The error of the last failed safe point nobody waited for, if any (taken).
    pub(crate) fn take_error(&self) -> Option<io::Error> {
        self.error.lock().take()
    }
}

/// The committed writers of `ring` at or below `s` that the last safe point did not count, and
/// the position after them: walks the ring from where that one stopped (its `vouched`). Called
/// by a safe point, after its step 1 persisted every writer at or below `s`: along a ring txids
/// grow, so the walk stops at the first descriptor still active, committed without a persisted
/// txid (its txid, assigned after `s` was read, is above it), or of a txid above `s`. Aborted
/// and read-only descriptors are passed over: recovery finds no valid descriptor there.
fn count_writers<M: PMem>(mem: &M, ring: &Ring, s: u64) -> (u64, u64) {
    // Relaxed: only safe points, one at a time, move it. Acquire (the tail): slots below it may
    // be written again; they held descriptors folded by a round, at or below the last safe
    // point (not counted again), and the tail passes `vouched` only once a safe point walked
    // past them (recycling waits for two).
    let mut v = ring.vouched.load(Ordering::Relaxed).max(ring.tail.load(Ordering::Acquire));
    // Acquire: the descriptors before the head were written before it was published.
    let head = ring.head.load(Ordering::Acquire);
    let mut n = 0;
    while v < head {
        let Some(d) = ring.descriptor_at(mem, &mut v, head) else { break };
        let desc = Desc::new(mem, d);
        let state = desc.state();
        match state.status {
            TxStatus::Active => break,
            TxStatus::Aborted => {}
            TxStatus::Committed if desc.read_only() => {}
            TxStatus::Committed => {
                if state.pstatus != PersistStatus::Persisted || desc.txid() > s {
                    break;
                }
                n += 1;
            }
        }
        v += desc_bytes(desc.nops(), desc.wide());
    }
    (n, v)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::mem::{CrashPlan, CrashState, MediaModel, SimMem};
    use crate::meta::Meta;
    use crate::pool::{Pool, PoolConfig};
    use crate::{
        DurabilityPolicy, Engine, EngineConfig, KeyWidth, RecoveryReport, StructId, StructureKind, Transaction, Values,
    };

    const MAX: u64 = 64 << 20;

    /// No policy claims that a write in memory (tmpfs) survives a power loss, and each says what
    /// it keeps: the page cache of a disk keeps what a safe point synced, memory nothing.
    #[test]
    fn each_guarantee_claims_what_its_medium_keeps() {
        use crate::mem::Durability;
        let policies = [
            DurabilityPolicy::Immediate,
            DurabilityPolicy::Periodic(Duration::from_secs(1)),
            DurabilityPolicy::Process,
        ];
        for policy in policies {
            let memory = policy.guarantee(Durability::Memory);
            assert!(memory.contains("nothing survives power loss") && !memory.contains("safe point"), "{memory}");
            let disk = policy.guarantee(Durability::PageCache);
            assert!(!disk.contains("nothing survives power loss"), "{disk}");
        }
        assert!(DurabilityPolicy::Immediate.guarantee(Durability::PageCache).contains("survives power loss"));
    }

    /// Safe points every hour (so only when asked), rings of 64 KiB.
    fn periodic() -> EngineConfig {
        EngineConfig::rings(64 << 10).durability(DurabilityPolicy::Periodic(Duration::from_secs(3600)))
    }

    /// A new engine under `config` on a page-cache simulator, with a structure of `values`.
    fn new_engine(config: EngineConfig, values: Values) -> (Arc<SimMem>, Engine<Arc<SimMem>>, StructId) {
        let mem = Arc::new(SimMem::new(0, MAX).with_model(MediaModel::PageCache));
        let pool_config =
            PoolConfig { initial_size: 1 << 20, max_size: MAX, chunk_size: 64 << 10, ..PoolConfig::default() };
        let engine = Engine::create(Pool::create_in(Arc::clone(&mem), &pool_config).unwrap(), config).unwrap();
        let s = engine.create_structure(StructureKind::List, KeyWidth::U64, values).unwrap();
        (mem, engine, s)
    }

    /// Puts `keys`, each holding 100 more than itself, and returns what a list of them reads.
    fn put_all(engine: &Engine<Arc<SimMem>>, s: StructId, keys: std::ops::Range<u64>) -> Vec<(u64, u64)> {
        let mut h = engine.handle().unwrap();
        for k in keys.clone() {
            assert!(h.execute(Transaction::new().put(s, k, 100 + k)).unwrap().is_committed());
        }
        keys.map(|k| (k, 100 + k)).collect()
    }

    /// The crash state just before the next sync `engine.sync()` makes.
    fn before_the_sync(mem: &SimMem, engine: &Engine<Arc<SimMem>>) -> CrashState {
        mem.set_plan(CrashPlan { every_sync: true, ..CrashPlan::none() });
        engine.sync().unwrap();
        mem.set_plan(CrashPlan::none());
        mem.take_crash_states().remove(0)
    }

    /// The pages of a crash state that an image chooses, with where the meta region and the
    /// rings lie (read from the image that keeps every page).
    struct Pages {
        /// Each pending page's offset and store count, in the order of a choice vector.
        pages: Vec<(u64, u32)>,
        /// The page of the meta region.
        meta: u64,
        rings: Vec<(u64, u64)>,
    }

    impl Pages {
        fn of(state: &CrashState) -> Pages {
            let pages = state.pages();
            let all: Vec<u32> = pages.iter().map(|&(_, n)| n).collect();
            let probe = Pool::open_in(state.image(&all).to_mem(MAX)).unwrap();
            let meta = probe.regions(1)[0].0.get() & !(4096 - 1);
            Pages { pages, meta, rings: crate::ring::regions(&probe) }
        }

        fn in_rings(&self, page: u64) -> bool {
            self.rings.iter().any(|&(off, len)| (off..off + len).contains(&page))
        }

        /// The first pending page of the rings: where the oldest of the writers since the last
        /// sync lie.
        fn first_ring_page(&self) -> u64 {
            self.pages.iter().map(|&(p, _)| p).find(|&p| self.in_rings(p)).unwrap()
        }

        /// The choice that keeps of each page the stores `keep` says (given its offset and its
        /// count).
        fn choose(&self, keep: impl Fn(u64, u32) -> u32) -> Vec<u32> {
            self.pages.iter().map(|&(p, n)| keep(p, n)).collect()
        }
    }

    /// Opens the image of `state` that `choice` says, as after a power loss.
    fn recover(state: &CrashState, choice: &[u32], config: EngineConfig) -> (Engine<SimMem>, RecoveryReport) {
        let pool = Pool::open_in(state.image(choice).to_mem(MAX)).unwrap();
        assert!(!pool.same_boot());
        Engine::open(pool, config).unwrap_or_else(|e| panic!("{}: {e}", state.point))
    }

    /// Which pages of a pending safe point's sync an image leaves as they were at the sync
    /// before: the first page of the rings that the writers changed, or every page outside the
    /// rings and the meta region (nodes and byte values).
    #[derive(Debug, Clone, Copy)]
    enum Lost {
        FirstRingPage,
        AllButRingsAndMeta,
    }

    /// Writes 40 keys, makes a safe point, writes 200 more (byte values of 100 bytes), and
    /// takes the crash state just before the next safe point's sync. Its image keeps the meta
    /// page whole (the new claim on the disk) and loses `lost`: the claim counts writers it
    /// cannot find, or values that fail their hash, and recovery goes back to the safe point
    /// before (40 keys). The image that keeps every page holds all 240.
    fn a_claim_not_whole_is_passed_over(lost: Lost) {
        let config = EngineConfig::rings(256 << 10)
            .checkpoint_fill(0)
            .durability(DurabilityPolicy::Periodic(Duration::from_secs(3600)));
        let (mem, engine, s) = new_engine(config.clone(), Values::Bytes);
        let mut h = engine.handle().unwrap();
        let value = |k: u64| vec![k as u8; 100];
        let mut put =
            |k: u64| assert!(h.execute(Transaction::new().put_bytes(s, k, &value(k))).unwrap().is_committed());
        (0..40).for_each(&mut put);
        engine.sync().unwrap();
        (40..240).for_each(&mut put);
        let state = before_the_sync(&mem, &engine);
        let pages = Pages::of(&state);
        let first_ring_page = pages.first_ring_page();
        let lose = pages.choose(|page, n| {
            let keep = match lost {
                Lost::FirstRingPage => page != first_ring_page,
                Lost::AllButRingsAndMeta => pages.in_rings(page) || page == pages.meta,
            };
            if keep { n } else { 0 }
        });
        for (choice, keys) in [(pages.choose(|_, n| n), 240), (lose, 40)] {
            let (_, found) = Meta::find(&Pool::open_in(state.image(&choice).to_mem(MAX)).unwrap()).unwrap();
            let claim = found.claim.unwrap();
            assert!(claim.txid > found.safe && claim.prev == found.safe, "{claim:?}, safe {}", found.safe);
            let (recovered, report) = recover(&state, &choice, config.clone());
            let expect = if keys == 240 { claim.txid } else { found.safe };
            assert_eq!(report.safe_point, Some(expect), "{lost:?}, {keys} keys");
            assert_eq!(report.present_keys, keys, "{lost:?}");
            let mut h = recovered.handle().unwrap();
            let mut get = |k: u64| h.get_with(s, k, |state, blobs| state.map(|w| blobs.to_vec(w).unwrap())).unwrap();
            for k in 0..keys {
                assert_eq!(get(k), Some(value(k)), "{lost:?}: key {k}");
            }
            assert_eq!(get(keys), None, "{lost:?}");
        }
    }

    #[test]
    fn a_claim_whose_writers_are_not_all_on_the_disk_is_passed_over() {
        a_claim_not_whole_is_passed_over(Lost::FirstRingPage);
    }

    #[test]
    fn a_claim_whose_values_are_not_all_on_the_disk_is_passed_over() {
        a_claim_not_whole_is_passed_over(Lost::AllButRingsAndMeta);
    }

    /// A claim made under `Periodic` does not outlive its policy: an engine opened again under
    /// `Process` voids it (here after an idle run, whose close keeps the epoch), and a power loss
    /// after that engine's `sync` keeps every write synced.
    #[test]
    fn a_claim_left_by_an_earlier_run_does_not_hold_back_a_run_without_safe_points() {
        let (mem, engine, s) = new_engine(periodic(), Values::Words);
        let mut want = put_all(&engine, s, 0..1);
        engine.sync().unwrap();
        engine.close().unwrap();
        // An idle run: a safe point, no write; its close keeps the epoch.
        let (engine, _) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), periodic()).unwrap();
        engine.sync().unwrap();
        engine.close().unwrap();
        let process = EngineConfig::rings(64 << 10).durability(DurabilityPolicy::Process);
        let (engine, _) = Engine::open(Pool::open_in(Arc::clone(&mem)).unwrap(), process.clone()).unwrap();
        want.extend(put_all(&engine, s, 1..2));
        engine.sync().unwrap();
        let after = SimMem::from_bytes(&mem.persisted_bytes(), MAX).with_model(MediaModel::PageCache);
        drop(engine);
        let (engine, report) = Engine::open(Pool::open_in(after).unwrap(), process).unwrap();
        assert_eq!(report.safe_point, None, "{report:?}");
        assert_eq!(engine.entries::<u64>(s).unwrap(), want);
    }

    /// A safe point made while a txid at the reservation is handed out and not yet reserved (a
    /// thread between the two steps of `take_txid`) claims no txid beyond the reservation: the
    /// pool opens after a power loss then, where a claim at the reservation would be refused as
    /// words that disagree.
    #[test]
    fn a_claim_stays_below_the_txid_reservation() {
        let (mem, engine, s) = new_engine(periodic(), Values::Words);
        let want = put_all(&engine, s, 0..1);
        engine.sync().unwrap();
        engine.core().hand_out_the_reserved_txid();
        engine.sync().unwrap();
        let after = SimMem::from_bytes(&mem.persisted_bytes(), MAX).with_model(MediaModel::PageCache);
        drop(engine);
        let (engine, report) = Engine::open(Pool::open_in(after).unwrap(), periodic()).unwrap();
        assert!(report.safe_point.is_some(), "{report:?}");
        assert_eq!(engine.entries::<u64>(s).unwrap(), want);
    }

    /// A power loss before a run's first safe point goes back to the state the run opened on,
    /// not to whatever of its writes reached the disk (here every page but the one of the first
    /// descriptors: a state no prefix has): the open recorded it as a safe point.
    #[test]
    fn a_power_loss_before_the_first_safe_point_goes_back_to_the_open() {
        let (mem, engine, s) = new_engine(periodic(), Values::Words);
        put_all(&engine, s, 0..20);
        let state = mem.crash_now();
        drop(engine);
        let pages = Pages::of(&state);
        let first = pages.first_ring_page();
        let (engine, report) = recover(&state, &pages.choose(|p, n| if p == first { 0 } else { n }), periodic());
        assert!(report.safe_point.is_some(), "{report:?}");
        assert_eq!(engine.entries::<u64>(s).unwrap(), [], "{report:?}");
    }

    /// A new engine's first safe point cut short by the power loss, its claim half stored on
    /// the disk (the meta page written back before its check word) and every other page but the
    /// first of the rings: the safe txid is 0 (the state the engine was created in) and the claim
    /// fails its check, and recovery still goes back to the open, not to whatever reached the
    /// disk.
    #[test]
    fn a_first_claim_cut_short_goes_back_to_the_open() {
        let (mem, engine, s) = new_engine(periodic(), Values::Words);
        put_all(&engine, s, 0..20);
        let state = before_the_sync(&mem, &engine);
        drop(engine);
        let pages = Pages::of(&state);
        let first = pages.first_ring_page();
        // The meta page's last store is the claim's check word.
        let choice = pages.choose(|p, n| match p {
            p if p == pages.meta => n - 1,
            p if p == first => 0,
            _ => n,
        });
        let (_, found) = Meta::find(&Pool::open_in(state.image(&choice).to_mem(MAX)).unwrap()).unwrap();
        assert!(found.safe == 0 && found.claim.is_none() && found.claim_words, "{found:?}");
        let (engine, report) = recover(&state, &choice, periodic());
        assert_eq!(report.safe_point, Some(0), "{report:?}");
        assert_eq!(engine.entries::<u64>(s).unwrap(), [], "{report:?}");
    }

    /// A recovery after a power loss on a page-cache file, itself cut short at any of its syncs
    /// with the meta page (after the last one, the new epoch) written back and none of its new
    /// nodes: the nodes were synced before the epoch that makes them the truth, so the pool
    /// opens whole.
    #[test]
    fn a_recovery_cut_short_after_its_commit_keeps_every_key() {
        let (mem, engine, s) = new_engine(periodic(), Values::Words);
        let want = put_all(&engine, s, 0..30);
        engine.sync().unwrap();
        drop(engine);
        let after = Arc::new(SimMem::from_bytes(&mem.persisted_bytes(), MAX).with_model(MediaModel::PageCache));
        after.set_plan(CrashPlan { every_sync: true, ..CrashPlan::none() });
        let (engine, report) = Engine::open(Pool::open_in(Arc::clone(&after)).unwrap(), periodic()).unwrap();
        after.set_plan(CrashPlan::none());
        assert!(report.safe_point.is_some(), "{report:?}");
        assert_eq!(engine.entries::<u64>(s).unwrap(), want);
        drop(engine);
        let states = after.take_crash_states();
        assert!(states.len() >= 2, "{} syncs", states.len());
        for state in states {
            let pages = Pages::of(&state);
            let (engine, report) =
                recover(&state, &pages.choose(|p, n| if p == pages.meta { n } else { 0 }), periodic());
            assert_eq!(engine.entries::<u64>(s).unwrap(), want, "{}: {report:?}", state.point);
        }
    }
}
