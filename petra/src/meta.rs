//! The engine's meta region: where the engine keeps what it must read back before anything else,
//! each word checked and tied to the pool.
//!
//! ```text
//! line 0   +0    magic "PETRAMET": the engine exists. Written last by Engine::create.
//!          +8    the pool's uuid (16 bytes): the header must be this pool's
//!          +56   check word of the magic and the uuid
//! line 1   +64   epoch          the committed recovery epoch: descriptors, FINAL words and
//!                               records of another epoch are void
//!          +96   clean          the epoch in which Engine::close left every committed
//!                               transaction in records (no ring holds a descriptor of it), or 0;
//!                               in the epoch's line, stored before it, so a recovery's commit
//!                               voids it with the same write to the media
//! line 2   +128  attempt        the last recovery attempt's number; an attempt writes its nodes
//!                               under attempt + 1, which becomes the epoch if it commits
//!          +160  txid reserved  every txid handed out is below it (read-only transactions'
//!                               txids are never persisted, so recovery restarts the counter
//!                               here); raised TXID_BLOCK at a time
//! line 3   +192  checkpoint     the checkpoint txid: every committed writer at or below it is
//!                               in the node records (see `checkpoint`)
//!          +224  structures     how many root slots hold a structure (slots 0 to n - 1)
//! line 4   +256  safe txid      a power-safe point (see `safe`): every committed writer at or
//!                               below it was on the media when it was recorded (the last one
//!                               but the claim's); 0 when the engine keeps no safe points, or
//!                               keeps them and was created this run (the claim says which)
//! line 5   +320  claim          a safe point that vouches for itself (see `safe`): its txid,
//!          +328                 the safe txid before it, whose writers were on the media,
//!          +336                 how many committed writers it covers above that one,
//!          +344                 the epoch it was made in,
//!          +352                 and a check word of the four, its place and the pool's uuid;
//!                               zeros (no check) when the engine keeps no safe points
//! ```
//!
//! Each of the words of lines 1 to 4 takes 32 bytes: a staging copy (value, check) and the main
//! copy (value, check), every check a check word of the value, its place and the pool's uuid. A
//! change stores the staging copy, then the main one (one line: they reach the media in that
//! order), then the caller flushes and fences. A reader takes the main copy if it checks, else
//! the staging copy if that one does: a crash in the middle of a change leaves one of them
//! whole (the old value, or the new one whose change the caller had made safe before), and a
//! damaged copy is covered by the other, which holds the same value. Neither checking is damage.
//!
//! The claim is one record with one check, stored in the same sync as the writers it covers:
//! recovery takes it only if the check holds and it finds every writer it counts, whole (see
//! `recovery`); otherwise it falls back to the later of the safe txid and the claim's previous
//! one, each made durable by an earlier sync.
//!
//! The engine's regions in the pool, by tag (see [`Pool::regions`]): 1 this one, 2 the
//! descriptor rings (`ring`), 3 the hash maps' bucket arrays (`structures::hashmap`).

use std::sync::atomic::Ordering;

use crate::error::{Damage, EngineError};
use crate::hash::check_words;
use crate::mem::PMem;
use crate::pool::Pool;
use crate::structures::hashmap::BUCKETS_TAG;

/// Region tag of the meta region.
const META_TAG: u8 = 1;

const MAGIC: u64 = 0x5045_5452_414D_4554; // "PETRAMET"
const UUID: u64 = 8;
const ID_CHECK: u64 = 56;
const EPOCH: u64 = 64;
const CLEAN: u64 = 96;
const ATTEMPT: u64 = 128;
const TXID_RESERVED: u64 = 160;
const CHECKPOINT: u64 = 192;
const STRUCTURES: u64 = 224;
const SAFE: u64 = 256;
const CLAIM: u64 = 320;
/// Bytes of the meta region in use.
const BYTES: u64 = 384;
/// The bytes older engines used (before the claim): their regions are whole chunks, zeroed past
/// them, so a claim that fails its check.
const BYTES_BEFORE_CLAIM: u64 = 320;
/// Txids reserved durably at a time: one flush and fence per this many transactions.
pub(crate) const TXID_BLOCK: u64 = 1 << 20;

/// The meta region of an engine's pool.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    off: u64,
    uuid: u128,
}

/// What the meta region says, read and checked at open.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MetaState {
    pub(crate) epoch: u64,
    pub(crate) clean: u64,
    pub(crate) attempt: u64,
    pub(crate) txid_reserved: u64,
    pub(crate) checkpoint: u64,
    pub(crate) structures: u64,
    pub(crate) safe: u64,
    /// The last safe point's claim, if one passes its check.
    pub(crate) claim: Option<Claim>,
    /// Whether the claim's words are not all zero: an engine that keeps safe points stored one
    /// there (maybe half, when a power loss cut its sync short), and an open without them
    /// zeroes them. With a safe txid of 0 (a new engine's), it says safe points were kept.
    pub(crate) claim_words: bool,
}

/// A safe point that vouches for itself: every committed writer at or below `txid` survives a
/// power loss if recovery finds the `writers` of them above `prev` whole (see `safe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The safe txid claimed.
    pub(crate) txid: u64,
    /// A safe txid whose writers an earlier sync put on the media.
    pub(crate) prev: u64,
    /// The committed writers (descriptors of writing transactions) above `prev`, at or below
    /// `txid`.
    pub(crate) writers: u64,
    /// The epoch the claim was made in: a claim of another epoch is void.
    pub(crate) epoch: u64,
}

impl MetaState {
    /// The words checked against each other, each copy being checked alone: what the engine
    /// writes keeps a txid handed out (the checkpoint, the safe point) below the reservation
    /// (raised, durably, before the txids it covers are used; the page or the lines holding both
    /// reach the media in that order), the epoch at most the attempt (begun, durably, before it
    /// commits), and a clean mark at most the epoch it was made in. Why not, if they disagree.
    fn agree(&self) -> Result<(), String> {
        let reserved = self.txid_reserved;
        if self.checkpoint >= reserved {
            return Err(format!(
                "the checkpoint txid {} is not below the txid reservation {reserved}",
                self.checkpoint
            ));
        }
        if self.safe >= reserved {
            return Err(format!("the safe txid {} is not below the txid reservation {reserved}", self.safe));
        }
        if let Some(c) = self.claim.filter(|c| c.epoch == self.epoch)
            && (c.txid >= reserved || c.prev > c.txid)
        {
            return Err(format!(
                "a claimed safe txid {} (after {}) not below the txid reservation {reserved}",
                c.txid, c.prev
            ));
        }
        if self.epoch == 0 || self.epoch > self.attempt {
            return Err(format!("epoch {} of attempt {}", self.epoch, self.attempt));
        }
        if self.clean > self.epoch {
            return Err(format!("a clean mark of epoch {} in epoch {}", self.clean, self.epoch));
        }
        Ok(())
    }
}

impl Meta {
    /// Sets up the meta region of a new engine in `pool`, which has none (a region without the
    /// magic is an interrupted create: it is taken over): epoch 1, txids reserved up to
    /// `1 + TXID_BLOCK`, no structure, and the magic last.
    pub(crate) fn create<M: PMem>(pool: &Pool<M>) -> Result<Meta, EngineError> {
        let uuid = u128::from_le_bytes(pool.header().uuid);
        let off = match pool.regions(META_TAG).first() {
            Some(&(off, _)) if pool.mem().load(off.get(), Ordering::Acquire) == MAGIC => {
                return Err(EngineError::Corrupt("the pool already holds an engine".into()));
            }
            Some(&(off, _)) => {
                // Taken over only if nothing says the creation had finished: an engine whose
                // magic is damaged is not overwritten.
                if let Some(why) = created(pool, off.get()) {
                    return Err(
                        Damage { what: format!("the engine's meta magic is damaged ({why})"), at: off.get() }.into()
                    );
                }
                off.get()
            }
            None => pool.alloc_region(META_TAG, BYTES)?.get(),
        };
        let meta = Meta { off, uuid };
        let mem = pool.mem();
        // Relaxed: nothing else runs on a pool being given an engine; the fences order it.
        mem.store(off + UUID, uuid as u64, Ordering::Relaxed);
        mem.store(off + UUID + 8, (uuid >> 64) as u64, Ordering::Relaxed);
        mem.store(off + ID_CHECK, id_check(uuid), Ordering::Relaxed);
        for (word, value) in [
            (EPOCH, 1),
            (CLEAN, 0),
            (ATTEMPT, 1),
            (TXID_RESERVED, 1 + TXID_BLOCK),
            (CHECKPOINT, 0),
            (STRUCTURES, 0),
            (SAFE, 0),
        ] {
            meta.store(mem, word, value);
        }
        mem.flush_range(off, BYTES);
        // Fence: the meta words are durable before the magic says the engine exists.
        mem.fence();
        mem.store(off, MAGIC, Ordering::Relaxed);
        mem.flush(off);
        // Fence: the engine exists before anything refers to it.
        mem.fence();
        Ok(meta)
    }

    /// The meta region of the engine in `pool`, and what it says: [`EngineError::NoEngine`] if
    /// there is none (or its creation never finished), [`EngineError::Damaged`] if it is not
    /// this pool's (the header is another pool's) or a word fails both its copies. Reads only.
    pub(crate) fn find<M: PMem>(pool: &Pool<M>) -> Result<(Meta, MetaState), EngineError> {
        let metas = pool.regions(META_TAG);
        let [(off, len)] = metas[..] else {
            return Err(match metas.len() {
                0 => EngineError::NoEngine,
                n => EngineError::Corrupt(format!("{n} engine meta regions, expected 1")),
            });
        };
        let (off, mem) = (off.get(), pool.mem());
        if len < BYTES_BEFORE_CLAIM {
            return Err(Damage { what: format!("an engine meta region of {len} bytes"), at: off }.into());
        }
        // Relaxed: an open runs alone.
        if mem.load(off, Ordering::Relaxed) != MAGIC {
            // No engine only if its creation can have stopped here; else the magic is damaged.
            return Err(match created(pool, off) {
                Some(why) => Damage { what: format!("the engine's meta magic is damaged ({why})"), at: off }.into(),
                None => EngineError::NoEngine,
            });
        }
        let found = mem.load(off + UUID, Ordering::Relaxed) as u128
            | (mem.load(off + UUID + 8, Ordering::Relaxed) as u128) << 64;
        if mem.load(off + ID_CHECK, Ordering::Relaxed) != id_check(found) {
            return Err(Damage { what: "the engine's identity fails its check".into(), at: off }.into());
        }
        let uuid = u128::from_le_bytes(pool.header().uuid);
        if found != uuid {
            return Err(Damage {
                what: format!("the pool header names pool {uuid:032x}, the engine in it belongs to pool {found:032x}"),
                at: off,
            }
            .into());
        }
        let meta = Meta { off, uuid };
        let state = MetaState {
            epoch: meta.load(mem, EPOCH)?,
            clean: meta.load(mem, CLEAN)?,
            attempt: meta.load(mem, ATTEMPT)?,
            txid_reserved: meta.load(mem, TXID_RESERVED)?,
            checkpoint: meta.load(mem, CHECKPOINT)?,
            structures: meta.load(mem, STRUCTURES)?,
            safe: meta.load(mem, SAFE)?,
            claim: if len >= BYTES { meta.claim(mem) } else { None },
            claim_words: len >= BYTES && (0..5).any(|i| mem.load(off + CLAIM + 8 * i, Ordering::Relaxed) != 0),
        };
        state.agree().map_err(|what| Damage { what, at: off })?;
        Ok((meta, state))
    }

    /// The claim's check word.
    fn claim_check(self, c: &Claim) -> u64 {
        check_words([c.txid, c.prev, c.writers, c.epoch, CLAIM, self.uuid as u64, (self.uuid >> 64) as u64])
    }

    /// The claim, if its check holds.
    pub(crate) fn claim<M: PMem>(self, mem: &M) -> Option<Claim> {
        let at = self.off + CLAIM;
        // Relaxed: read at open, alone.
        let word = |i: u64| mem.load(at + 8 * i, Ordering::Relaxed);
        let c = Claim { txid: word(0), prev: word(1), writers: word(2), epoch: word(3) };
        (word(4) == self.claim_check(&c)).then_some(c)
    }

    /// Stores `claim`, its check word last, and flushes it; the caller syncs. A sync cut short
    /// may leave the words half stored: the check fails then, and recovery passes the claim over.
    pub(crate) fn set_claim<M: PMem>(self, mem: &M, claim: Claim) {
        let at = self.off + CLAIM;
        let check = self.claim_check(&claim);
        for (i, w) in [claim.txid, claim.prev, claim.writers, claim.epoch, check].into_iter().enumerate() {
            // Relaxed: the sync that follows orders them for the media.
            mem.store(at + 8 * i as u64, w, Ordering::Relaxed);
        }
        mem.flush_range(at, 40);
        // Fence: as after every meta word (on memory where a fence is durable).
        mem.fence();
    }

    /// Makes the claim void (its words zero, which fail the check), flushed and fenced; the
    /// caller syncs. For an engine that keeps no safe points: a claim an earlier run left must
    /// not take a later power loss back to it (a close that wrote nothing keeps the epoch).
    pub(crate) fn void_claim<M: PMem>(self, mem: &M) {
        let at = self.off + CLAIM;
        for i in 0..5 {
            // Relaxed: the caller's sync orders them for the media.
            mem.store(at + 8 * i, 0, Ordering::Relaxed);
        }
        mem.flush_range(at, 40);
        // Fence: as after every meta word.
        mem.fence();
    }

    /// The check of a copy of `value` in the word at `word`.
    fn check(self, word: u64, value: u64) -> u64 {
        check_words([value, word, self.uuid as u64, (self.uuid >> 64) as u64])
    }

    /// The value of the word at `word`: its main copy, or its staging copy if the main one fails
    /// its check.
    fn load<M: PMem>(self, mem: &M, word: u64) -> Result<u64, Damage> {
        let at = self.off + word;
        for copy in [at + 16, at] {
            // Relaxed: the words are read at open (alone) or by the one writer of each, which
            // wrote them itself.
            let value = mem.load(copy, Ordering::Relaxed);
            if mem.load(copy + 8, Ordering::Relaxed) == self.check(word, value) {
                return Ok(value);
            }
        }
        Err(Damage { what: "an engine meta word fails the checks of both its copies".into(), at })
    }

    /// Stores `value` in the word at `word`: the staging copy, then the main one. The caller
    /// flushes and fences; writers of one word are serialised.
    fn store<M: PMem>(self, mem: &M, word: u64, value: u64) {
        let at = self.off + word;
        let check = self.check(word, value);
        // Relaxed: one line, whose stores reach the media in this order; the caller's fence
        // makes them durable.
        for copy in [at, at + 16] {
            mem.store(copy, value, Ordering::Relaxed);
            mem.store(copy + 8, check, Ordering::Relaxed);
        }
    }

    /// Stores `value` in the word at `word`, flushed and fenced.
    fn set<M: PMem>(self, mem: &M, word: u64, value: u64) {
        self.store(mem, word, value);
        mem.flush(self.off + word);
        // Fence: the word is durable before the caller relies on it.
        mem.fence();
    }

    /// Durably raises the txid reservation to `want`. The caller serialises (the reservation's
    /// one writer at a time) and knows `want` is above the reservation.
    pub(crate) fn reserve_txids<M: PMem>(self, mem: &M, want: u64) {
        self.set(mem, TXID_RESERVED, want);
    }

    /// The checkpoint txid now (its one writer is the round in progress, or recovery).
    pub(crate) fn checkpoint_txid<M: PMem>(self, mem: &M) -> u64 {
        // A word checked at open changes only by `set`, which leaves it whole.
        self.load(mem, CHECKPOINT).unwrap_or_else(|d| panic!("the checkpoint txid, whole at open, is not: {d}"))
    }

    /// Records `txid` as the checkpoint txid, durably: every committed writer at or below it is
    /// in the records, which the caller made durable first.
    pub(crate) fn set_checkpoint_txid<M: PMem>(self, mem: &M, txid: u64) {
        self.set(mem, CHECKPOINT, txid);
    }

    /// Records `txid` as a power-safe point (0: none kept, unless a claim says otherwise),
    /// flushed and fenced; the caller syncs it (see `safe`).
    pub(crate) fn set_safe_txid<M: PMem>(self, mem: &M, txid: u64) {
        self.set(mem, SAFE, txid);
    }

    /// The power-safe point recorded in the safe txid word (see [`set_safe_txid`](Meta::set_safe_txid)).
    pub(crate) fn safe_txid<M: PMem>(self, mem: &M) -> u64 {
        // A word checked at open changes only by `set`, which leaves it whole.
        self.load(mem, SAFE).unwrap_or_else(|d| panic!("the safe txid, whole at open, is not: {d}"))
    }

    /// Records that root slots 0 to `n - 1` hold structures, durably (their entries are).
    pub(crate) fn set_structures<M: PMem>(self, mem: &M, n: u64) {
        self.set(mem, STRUCTURES, n);
    }

    /// Recovery's first step: the attempt `attempt` is used once, even if it dies.
    pub(crate) fn begin_attempt<M: PMem>(self, mem: &M, attempt: u64) {
        self.set(mem, ATTEMPT, attempt);
    }

    /// Recovery: sets the txid reservation to `reserved` and flushes it; the caller's next fence
    /// makes it durable (before the commit, which makes the txids it replaces unreadable).
    pub(crate) fn set_txid_reserved<M: PMem>(self, mem: &M, reserved: u64) {
        self.store(mem, TXID_RESERVED, reserved);
        mem.flush(self.off + TXID_RESERVED);
    }

    /// Recovery's commit: `epoch` is in force, durably, and a clean mark of an earlier epoch is
    /// void (stored first, in the epoch's line, so it reaches the media no later than the epoch).
    pub(crate) fn commit_epoch<M: PMem>(self, mem: &M, epoch: u64) {
        self.store(mem, CLEAN, 0);
        self.set(mem, EPOCH, epoch);
    }

    /// A clean close: every committed transaction of `epoch` is in the records, which the caller
    /// made durable first. The fence puts the mark on the media after the nodes it vouches for
    /// (synced by the rewrite, or unchanged since the open) and before the pool's own clean mark.
    pub(crate) fn mark_clean<M: PMem>(self, mem: &M, epoch: u64) {
        self.set(mem, CLEAN, epoch);
    }

    /// An open after a clean close: the mark is void before any transaction can write a
    /// descriptor of the epoch.
    pub(crate) fn clear_clean<M: PMem>(self, mem: &M) {
        self.set(mem, CLEAN, 0);
    }
}

/// Why the pool says its engine was created, though the meta region at `off` has no magic, if it
/// does; `None` if the region is what an interrupted [`Meta::create`] leaves (it writes the magic,
/// a single 8-byte store, last, into a zeroed region, and makes nothing else before it). The magic
/// word holds neither 0 nor the magic; a descriptor ring or a hash map's bucket array exists (made
/// after the magic); a root slot holds a structure; or the structure count is above 0.
fn created<M: PMem>(pool: &Pool<M>, off: u64) -> Option<String> {
    // Relaxed: an open, or a create, runs alone.
    let magic = pool.mem().load(off, Ordering::Relaxed);
    if magic != 0 {
        return Some(format!("it holds {magic:#x}"));
    }
    for (tag, what) in [(crate::ring::RING_TAG, "descriptor rings"), (BUCKETS_TAG, "bucket arrays")] {
        if !pool.regions(tag).is_empty() {
            return Some(format!("the pool holds {what}"));
        }
    }
    if let Some(slot) = (0..crate::pool::header::ROOT_ENTRIES).find(|&s| pool.root(s).is_some()) {
        return Some(format!("root slot {slot} holds a structure"));
    }
    let meta = Meta { off, uuid: u128::from_le_bytes(pool.header().uuid) };
    match meta.load(pool.mem(), STRUCTURES) {
        Ok(n) if n > 0 => Some(format!("it counts {n} structures")),
        _ => None,
    }
}

/// The check word of the meta region's identity line.
fn id_check(uuid: u128) -> u64 {
    check_words([MAGIC, uuid as u64, (uuid >> 64) as u64])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::SimMem;
    use crate::pool::PoolConfig;

    fn pool() -> Pool<SimMem> {
        let config =
            PoolConfig { initial_size: 1 << 20, max_size: 8 << 20, chunk_size: 64 << 10, ..PoolConfig::default() };
        Pool::create_in(SimMem::new(0, 8 << 20), &config).unwrap()
    }

    #[test]
    fn each_word_survives_the_damage_of_one_copy_and_not_of_both() {
        let pool = pool();
        let meta = Meta::create(&pool).unwrap();
        let mem = pool.mem();
        meta.set_checkpoint_txid(mem, 77);
        let at = meta.off + CHECKPOINT;
        for copy in [at, at + 16] {
            let saved = mem.load(copy, Ordering::Relaxed);
            mem.store(copy, saved ^ 4, Ordering::Relaxed);
            assert_eq!(Meta::find(&pool).unwrap().1.checkpoint, 77, "copy at {copy:#x} damaged");
            mem.store(copy, saved, Ordering::Relaxed);
        }
        mem.store(at, 1, Ordering::Relaxed);
        mem.store(at + 16, 1, Ordering::Relaxed);
        assert!(matches!(Meta::find(&pool), Err(EngineError::Damaged(Damage { at: a, .. })) if a == at));
    }

    #[test]
    fn a_change_torn_anywhere_reads_as_the_old_value_or_the_new_one() {
        let pool = pool();
        let meta = Meta::create(&pool).unwrap();
        let mem = pool.mem();
        meta.set_checkpoint_txid(mem, 5);
        let at = meta.off + CHECKPOINT;
        let old: Vec<u64> = (0..4).map(|w| mem.load(at + 8 * w, Ordering::Relaxed)).collect();
        meta.store(mem, CHECKPOINT, 9);
        let new: Vec<u64> = (0..4).map(|w| mem.load(at + 8 * w, Ordering::Relaxed)).collect();
        // A crash keeps a prefix of the line's stores: staging value, staging check, main value,
        // main check.
        for kept in 0..=4 {
            for w in 0..4 {
                let v = if w < kept { new[w] } else { old[w] };
                mem.store(at + 8 * w as u64, v, Ordering::Relaxed);
            }
            let read = Meta::find(&pool).unwrap().1.checkpoint;
            assert!(read == 5 || read == 9, "{kept} stores kept: {read}");
            assert_eq!(read == 9, kept >= 3, "{kept} stores kept");
        }
    }

    /// Words that pass their own checks but contradict each other: damage, each named.
    #[test]
    fn words_that_disagree_are_refused() {
        let pool = pool();
        let meta = Meta::create(&pool).unwrap();
        let mem = pool.mem();
        meta.set_checkpoint_txid(mem, 5);
        let reserved = Meta::find(&pool).unwrap().1.txid_reserved;
        let cases = [
            (CHECKPOINT, reserved, "checkpoint txid"),
            (CHECKPOINT, u64::MAX, "checkpoint txid"),
            (SAFE, reserved + 7, "safe txid"),
            (TXID_RESERVED, 5, "checkpoint txid"),
            (EPOCH, 2, "epoch 2 of attempt 1"),
            (EPOCH, 0, "epoch 0"),
            (CLEAN, 2, "clean mark of epoch 2"),
        ];
        for (word, value, what) in cases {
            let before = meta.load(mem, word).unwrap();
            meta.store(mem, word, value);
            match Meta::find(&pool) {
                Err(EngineError::Damaged(d)) => assert!(d.what.contains(what), "{value} at {word}: {d}"),
                other => panic!("{value} at {word}: {other:?}"),
            }
            meta.store(mem, word, before);
            Meta::find(&pool).unwrap();
        }
    }

    /// A descriptor of a txid at or above the reservation, in a pool whose memory is whole (the
    /// process died in this boot): the reservation was raised before its txids were handed out,
    /// so one of the two is damaged.
    #[test]
    fn a_descriptor_not_below_the_txid_reservation_is_damage() {
        use std::sync::Arc;
        let config =
            PoolConfig { initial_size: 1 << 20, max_size: 8 << 20, chunk_size: 64 << 10, ..PoolConfig::default() };
        let engine_config = crate::EngineConfig::rings(64 << 10).durability(crate::DurabilityPolicy::Process);
        let mem = Arc::new(SimMem::new(0, 8 << 20));
        let engine =
            crate::Engine::create(Pool::create_in(Arc::clone(&mem), &config).unwrap(), engine_config.clone()).unwrap();
        let s = engine.create_list().unwrap();
        let mut h = engine.handle().unwrap();
        for k in 0..3u64 {
            assert!(h.execute(crate::Transaction::new().put(s, k, k)).unwrap().is_committed());
        }
        drop(h);
        drop(engine);
        let pool = Pool::open_in(Arc::clone(&mem)).unwrap();
        assert!(pool.same_boot() && !pool.was_clean());
        let (meta, state) = Meta::find(&pool).unwrap();
        // Lowered as far as the words' own agreement lets it: every descriptor is at or above.
        meta.store(pool.mem(), TXID_RESERVED, state.checkpoint.max(state.safe) + 1);
        match crate::Engine::open(pool, engine_config) {
            Err(EngineError::Damaged(d)) => assert!(d.what.contains("not below the txid reservation"), "{d}"),
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn the_engine_of_another_pool_is_refused() {
        let (a, b) = (pool(), pool());
        Meta::create(&a).unwrap();
        // b's meta region, written as a's: the header says b, the engine a.
        let meta = Meta::create(&b).unwrap();
        let mem = b.mem();
        let ua = u128::from_le_bytes(a.header().uuid);
        mem.store(meta.off + UUID, ua as u64, Ordering::Relaxed);
        mem.store(meta.off + UUID + 8, (ua >> 64) as u64, Ordering::Relaxed);
        mem.store(meta.off + ID_CHECK, id_check(ua), Ordering::Relaxed);
        assert!(matches!(Meta::find(&b), Err(EngineError::Damaged(_))));
    }
}
