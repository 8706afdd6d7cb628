//! The engine's meta region: one line of the pool that says an engine is there, which recovery
//! epoch is in force, and how far txids are reserved.
//!
//! ```text
//! +0   magic          "PETRAMET": the engine exists. Written last by Engine::create.
//! +8   epoch          the committed recovery epoch: descriptors, FINAL words and records of
//!                     another epoch are void. Written by recovery's commit (one fenced store).
//! +16  attempt        the number of the last recovery attempt; an attempt writes its nodes
//!                     under attempt + 1, which becomes the epoch if it commits. Written first
//!                     by each attempt, so that no number is used twice.
//! +24  txid reserved  every txid handed out is below it (read-only transactions' txids are
//!                     never persisted, so recovery restarts the counter here). Raised by
//!                     TXID_BLOCK at a time by the protocol, and by recovery.
//! +32  clean          the epoch in which Engine::close left every committed transaction in
//!                     records (no ring holds a descriptor of it), or 0. Cleared by every
//!                     open before any transaction runs; in the epoch's line, so a recovery's
//!                     commit voids it with the same store to the media.
//! ```
//!
//! The engine's regions in the pool, by tag (see [`Pool::regions`]): this one (`META_TAG`),
//! the descriptor rings (`ring::RING_TAG`) and the hash maps' bucket arrays
//! (`structures::hashmap::BUCKETS_TAG`).

use std::sync::atomic::Ordering;

use crate::error::EngineError;
use crate::mem::PMem;
use crate::pool::Pool;

/// Region tag of the meta region.
const META_TAG: u16 = 0x6D65;
const MAGIC: u64 = 0x5045_5452_414D_4554; // "PETRAMET"
const EPOCH: u64 = 8;
const ATTEMPT: u64 = 16;
const TXID_RESERVED: u64 = 24;
const CLEAN: u64 = 32;
/// Txids reserved durably at a time: one flush and fence per this many transactions.
pub(crate) const TXID_BLOCK: u64 = 1 << 20;

/// The meta region of an engine's pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    off: u64,
}

impl Meta {
    /// Sets up the meta region of a new engine in `pool`, which has none (a region without the
    /// magic is an interrupted create: it is taken over): epoch 1, txids reserved up to
    /// `1 + TXID_BLOCK`, and the magic last.
    pub(crate) fn create<M: PMem>(pool: &Pool<M>) -> Result<Meta, EngineError> {
        let off = match pool.regions(META_TAG).first() {
            Some(&(off, _)) if pool.mem().load(off.get(), Ordering::Acquire) == MAGIC => {
                return Err(EngineError::Corrupt("the pool already holds an engine".into()));
            }
            Some(&(off, _)) => off.get(),
            None => pool.alloc_region(META_TAG, 64)?.get(),
        };
        let mem = pool.mem();
        // Relaxed: nothing else runs on a pool being given an engine; the fences order it.
        mem.store(off + EPOCH, 1, Ordering::Relaxed);
        mem.store(off + ATTEMPT, 1, Ordering::Relaxed);
        mem.store(off + TXID_RESERVED, 1 + TXID_BLOCK, Ordering::Relaxed);
        mem.flush(off);
        // Fence: the meta words are durable before the magic says the engine exists.
        mem.fence();
        mem.store(off, MAGIC, Ordering::Relaxed);
        mem.flush(off);
        // Fence: the engine exists before anything refers to it.
        mem.fence();
        Ok(Meta { off })
    }

    /// The meta region of the engine in `pool`: [`EngineError::NoEngine`] if there is none (or
    /// its creation never finished).
    pub(crate) fn find<M: PMem>(pool: &Pool<M>) -> Result<Meta, EngineError> {
        let metas = pool.regions(META_TAG);
        let [(off, _)] = metas[..] else {
            return Err(match metas.len() {
                0 => EngineError::NoEngine,
                n => EngineError::Corrupt(format!("{n} engine meta regions, expected 1")),
            });
        };
        // Acquire: an open runs alone, so any ordering would do.
        if pool.mem().load(off.get(), Ordering::Acquire) != MAGIC {
            return Err(EngineError::NoEngine);
        }
        Ok(Meta { off: off.get() })
    }

    fn load<M: PMem>(self, mem: &M, word: u64) -> u64 {
        // Acquire: the words are read at open (alone) or, for the reservation, by threads that
        // raise it (see `reserve_txids`).
        mem.load(self.off + word, Ordering::Acquire)
    }

    /// The committed recovery epoch.
    pub(crate) fn epoch<M: PMem>(self, mem: &M) -> u64 {
        self.load(mem, EPOCH)
    }

    /// The last recovery attempt's number.
    pub(crate) fn attempt<M: PMem>(self, mem: &M) -> u64 {
        self.load(mem, ATTEMPT)
    }

    /// The txid reservation: every txid handed out is below it.
    pub(crate) fn txid_reserved<M: PMem>(self, mem: &M) -> u64 {
        self.load(mem, TXID_RESERVED)
    }

    /// The epoch that [`Engine::close`](crate::Engine::close) marked clean, or 0.
    pub(crate) fn clean<M: PMem>(self, mem: &M) -> u64 {
        self.load(mem, CLEAN)
    }

    /// Durably raises the txid reservation to at least `want` (threads may race: it only grows),
    /// and returns the reservation now durable.
    pub(crate) fn reserve_txids<M: PMem>(self, mem: &M, want: u64) -> u64 {
        let at = self.off + TXID_RESERVED;
        // Acquire: as for the CAS below.
        let mut cur = mem.load(at, Ordering::Acquire);
        while cur < want {
            // AcqRel: the reservation only grows.
            match mem.compare_exchange(at, cur, want, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        mem.flush(at);
        // Fence: the reservation is durable before a txid under it is used.
        mem.fence();
        mem.load(at, Ordering::Acquire)
    }

    /// Recovery's first step: the attempt `attempt` is used once, even if it dies.
    pub(crate) fn begin_attempt<M: PMem>(self, mem: &M, attempt: u64) {
        // Relaxed: recovery runs alone; the fence orders it.
        mem.store(self.off + ATTEMPT, attempt, Ordering::Relaxed);
        mem.flush(self.off + ATTEMPT);
        // Fence: the attempt number is used once, even if this attempt dies.
        mem.fence();
    }

    /// Recovery: sets the txid reservation to `reserved` and flushes it; the caller's next fence
    /// makes it durable (before the commit, which makes the txids it replaces unreadable).
    pub(crate) fn set_txid_reserved<M: PMem>(self, mem: &M, reserved: u64) {
        // Relaxed: recovery runs alone; the caller's fence orders it.
        mem.store(self.off + TXID_RESERVED, reserved, Ordering::Relaxed);
        mem.flush(self.off + TXID_RESERVED);
    }

    /// Recovery's commit: `epoch` is in force, durably, and a clean mark of an earlier epoch is
    /// void (it is in the epoch's line, so it reaches the media no later than the epoch).
    pub(crate) fn commit_epoch<M: PMem>(self, mem: &M, epoch: u64) {
        // Relaxed: recovery runs alone; the fence orders it.
        mem.store(self.off + CLEAN, 0, Ordering::Relaxed);
        mem.store(self.off + EPOCH, epoch, Ordering::Relaxed);
        mem.flush(self.off + EPOCH);
        // Fence: recovery is committed.
        mem.fence();
    }

    /// A clean close: every committed transaction of `epoch` is in the records, which the caller
    /// made durable first.
    pub(crate) fn mark_clean<M: PMem>(self, mem: &M, epoch: u64) {
        // Relaxed: the engine is alone here; the fence below orders the mark.
        mem.store(self.off + CLEAN, epoch, Ordering::Relaxed);
        mem.flush(self.off + CLEAN);
        // Fence: the clean mark reaches the media after the nodes it vouches for (synced by the
        // rewrite, or unchanged since the open) and before the pool's own clean mark.
        mem.fence();
    }

    /// An open after a clean close: the mark is void before any transaction can write a
    /// descriptor of the epoch.
    pub(crate) fn clear_clean<M: PMem>(self, mem: &M) {
        // Relaxed: the open runs alone; the fence below orders it.
        mem.store(self.off + CLEAN, 0, Ordering::Relaxed);
        mem.flush(self.off + CLEAN);
        // Fence: the mark is void before any transaction can write a descriptor of this epoch.
        mem.fence();
    }
}
