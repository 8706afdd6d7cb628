//! The linked structures, and what each provides to the engine.
//!
//! - [`node`]: the four words every node starts with, and the node's record.
//! - [`info`]: the packed info word by which transactions take nodes.
//! - [`list`], [`hashmap`], [`skiplist`], [`mdlist`]: the structures, each with its own layout,
//!   its searches and links ([`LinkedSet`]) and its `build`, by which recovery makes it anew
//!   from its present keys in key order.
//! - [`registry`]: which structure is in which root slot, how a root entry encodes it, and the
//!   one place that names every kind.
//!
//! A structure's code runs for a thread pinned in the epoch and reaches the rest of the engine
//! only through a [`Ctx`]: the memory, the retiring of nodes it unlinks, and the state an info
//! word stands for. It never sees a descriptor, a ring or a handle.

pub(crate) mod hashmap;
pub(crate) mod info;
pub(crate) mod list;
pub(crate) mod mdlist;
pub(crate) mod node;
pub(crate) mod registry;
pub(crate) mod skiplist;

use std::sync::atomic::Ordering;

use crate::error::Damage;
use crate::mem::PMem;
use crate::reclaim::AbsentNode;
use info::Info;
use node::{INFO, LINK, load_key};

/// Bit 0 of a `next` word (a chain's, a skiplist level's): its node is being removed (Harris's
/// deletion mark).
pub(crate) const MARK: u64 = 1;

/// A link that cannot succeed until the pool has a free block (see [`LinkedSet::link`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolFull;

/// What a structure's code needs from whoever runs it, for a thread pinned in the epoch.
pub(crate) trait Ctx<M: PMem> {
    /// The pool's memory.
    fn mem(&self) -> &M;
    /// Whether the node block at `node` holds a record ([`node::has_record`]).
    fn has_record(&self, node: u64) -> bool;
    /// Hands a node this thread just unlinked to the epoch collector, which frees it once no
    /// thread can still be reading it.
    fn retire(&self, node: u64);
    /// The state the info word `info` stands for to a reader outside any transaction:
    /// `Some(value)` if present.
    fn resolve(&self, info: Info) -> Option<u64>;
    /// A node block of `bytes` bytes for a structure's own use (an MDList's copy of a node it
    /// removes, see `mdlist`), or `None` if the pool is full or this context allocates nothing.
    fn alloc_node(&self, _bytes: u64) -> Option<u64> {
        None
    }
    /// Frees a block from [`alloc_node`](Ctx::alloc_node) that was never published.
    fn free_unpublished(&self, _node: u64) {
        unreachable!("a context that allocates nothing frees nothing")
    }
    /// Called by a scan's walk after each node: what the walk does next (see [`Pause`]).
    fn pause(&self) -> Pause {
        Pause::Go
    }
}

/// What a scan's walk does after a node ([`Ctx::pause`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pause {
    /// Goes on.
    Go,
    /// The thread re-pinned there (a long scan does, so as not to hold the epoch back): the walk
    /// goes on from a fresh position, holding nothing it read before.
    Repinned,
    /// The thread re-pinned and the scan's snapshot was expired: the walk ends there.
    Stop,
}

/// splitmix64's finaliser: a well-spread 64-bit hash of a word.
pub(crate) fn mix64(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A well-spread 64-bit hash of a key (bucket choice, tower heights): of both words, and for a
/// one-word key the same as [`mix64`] of it.
pub(crate) fn mix_key(key: u128) -> u64 {
    let (lo, hi) = (key as u64, (key >> 64) as u64);
    if hi == 0 { mix64(lo) } else { mix64(lo ^ mix64(hi)) }
}

/// What a structure provides to the engine's protocol, to scans and to recovery.
pub(crate) trait LinkedSet<M: PMem + 'static> {
    /// Where a new node for a key would go.
    type Pos;
    /// Whether keys are two words (see [`node::KEY_HI`]).
    fn wide(&self) -> bool;
    /// Bytes of a new node for `key`, to be linked at `pos`.
    fn node_bytes(&self, key: u128, pos: &Self::Pos) -> u64;
    /// Bytes of the node of `key` that [`build`](LinkedSet::build) links right after the node of
    /// `prev` (the key before it in key order; `None` for the first).
    fn built_bytes(&self, prev: Option<u128>, key: u128) -> u64;
    /// Initialises the structure's own words of a new node for `key` (before [`link`]).
    ///
    /// [`link`]: LinkedSet::link
    fn init_links(&self, _mem: &M, _node: u64, _key: u128) {}
    /// Starts loading the first word a search for `key` reads, if that is known without reading
    /// anything (a hash map's bucket): a hint, so that the load overlaps other work.
    fn prefetch(&self, _mem: &M, _key: u128) {}
    /// Starts loading the first node a search for `key` reads, if that is known from the word
    /// [`prefetch`](LinkedSet::prefetch) started loading (a hash map bucket's first node): a
    /// hint, given a while after `prefetch`, so that the searches of a transaction's ops each
    /// start on lines already coming in.
    fn prefetch_first(&self, _mem: &M, _key: u128) {}
    /// Finds `key`: the position for a new node, and the node holding the key if there is one.
    fn search(&self, cx: &impl Ctx<M>, key: u128) -> (Self::Pos, Option<u64>);
    /// As [`search`](LinkedSet::search), given `after`, a node of a key below `key` that the
    /// caller found linked (or linked itself) since it pinned, where a structure may start.
    fn search_after(&self, cx: &impl Ctx<M>, key: u128, _after: u64) -> (Self::Pos, Option<u64>) {
        self.search(cx, key)
    }
    /// Links the initialised, unpublished `node` at `pos`; false if `pos` changed meanwhile, and
    /// [`PoolFull`] if it cannot change back until a block is free (an MDList node whose removal
    /// needs a copy holds the slot; see `mdlist`): the insert then fails for want of memory.
    fn link(&self, cx: &impl Ctx<M>, pos: &Self::Pos, node: u64) -> Result<bool, PoolFull>;
    /// Completes the physical removal of a node whose info word is marked, or (a list) marks it
    /// and leaves its unlink to the next search that passes it, or to [`sweep`].
    ///
    /// [`sweep`]: LinkedSet::sweep
    fn help_remove(&self, cx: &impl Ctx<M>, node: u64);
    /// Unlinks every node whose removal [`help_remove`] left to a later search (a list's), in
    /// one walk under one pin, as a search's. The checkpoint round sweeps the structures that
    /// had such removals since its last sweep, so a node stays linked until the round after its
    /// removal at most, or a search passes it; an engine without rounds
    /// ([`checkpoint_fill`](crate::EngineConfig::checkpoint_fill) 0, no explicit checkpoints),
    /// whose rings grow anyway, keeps them until a search passes or the engine closes.
    ///
    /// [`help_remove`]: LinkedSet::help_remove
    fn sweep(&self, _cx: &impl Ctx<M>) {}
    /// As [`help_remove`](LinkedSet::help_remove), for a node that a search has just found at
    /// `pos`: a structure whose removal must find the node's predecessor tries the one `pos`
    /// names first, and searches again only if that no longer holds (a list unlinks the node
    /// then and there).
    fn help_remove_at(&self, cx: &impl Ctx<M>, _pos: &Self::Pos, node: u64) {
        self.help_remove(cx, node)
    }
    /// Whether nodes left absent are removed (through [`remove_if`]); if not, an absent node
    /// stays, and a later insert of its key takes it over.
    fn removes_nodes(&self) -> bool {
        true
    }
    /// Whether [`collect`](LinkedSet::collect) sees nodes in key order.
    fn ordered(&self) -> bool {
        true
    }
    /// One pass of a scan over the nodes with keys in `lo..=hi`: appends what it saw at each (see
    /// `scan`). Every node linked when the pass starts and still linked when it ends is seen.
    fn collect(&self, cx: &impl Ctx<M>, lo: u128, hi: u128, out: &mut Vec<Seen>);
    /// Links `nodes` (fresh, normalised, unpublished, with their keys, in increasing key order)
    /// as the whole structure, replacing whatever its head or buckets held: recovery's rewrite,
    /// alone. Nothing is flushed.
    fn build(&self, mem: &M, nodes: &[(u64, u128)]);
    /// The head sentinel block, or the hash map's bucket region, and its bytes: what recovery
    /// flushes besides the nodes.
    fn root(&self) -> (u64, u64);
    /// Walks the structure at rest (no thread is using it), trusting no link: every link must
    /// reach a node block of the structure's size (as `cx` says) and agree with the keys and
    /// with the structure's own invariants, and `visit` is called with each node and its key,
    /// once. `strict`: the structure must also be as a clean close or a finished removal leaves
    /// it (no node being removed, but a list's marked ones its sweep unlinks; skiplist towers
    /// whole, MDList adoptions finished); otherwise it may be as a
    /// process that died in the middle of changing it left it, and only what a search reads is
    /// walked (the nodes that hold keys). Returns the number of nodes, or what is wrong where.
    fn walk_checked(&self, cx: &impl Inspect<M>, strict: bool, visit: &mut dyn FnMut(u64, u128))
    -> Result<u64, Damage>;
}

/// What a checked walk needs: the memory, and which offsets are node blocks.
pub(crate) trait Inspect<M: PMem> {
    /// The pool's memory.
    fn mem(&self) -> &M;
    /// The size of the node block that starts at `off`, if one does.
    fn node_block(&self, off: u64) -> Option<u64>;
}

impl<M: PMem> Inspect<M> for crate::pool::Pool<M> {
    fn mem(&self) -> &M {
        crate::pool::Pool::mem(self)
    }

    fn node_block(&self, off: u64) -> Option<u64> {
        crate::pool::Pool::node_block(self, crate::pool::POff::new(off))
    }
}

/// What a checked walk found wrong, at the offset of the word that says it.
pub(crate) fn fault(at: u64, what: String) -> Damage {
    Damage { what, at }
}

/// The node that the link word at `link` holds (`w`, its mark cleared), checked: a node block
/// of at least `bytes` bytes.
pub(crate) fn checked_node<M: PMem>(cx: &impl Inspect<M>, link: u64, w: u64, bytes: u64) -> Result<u64, Damage> {
    let node = w & !MARK;
    match cx.node_block(node) {
        Some(size) if size >= bytes => Ok(node),
        _ => Err(fault(link, format!("a link to {node:#x}, which is no node block of {bytes} bytes or more"))),
    }
}

/// What one pass of a scan saw at a node: its key, and the state its info word stands for in the
/// scan's context (see `scan`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    pub(crate) key: u128,
    pub(crate) state: Option<u64>,
}

/// What a scan records at `node` (key `key`): a marked node is absent.
pub(crate) fn seen<M: PMem>(cx: &impl Ctx<M>, node: u64, key: u128) -> Seen {
    // Acquire: see the descriptor the info word names.
    let info = Info(cx.mem().load(node + INFO, Ordering::Acquire));
    let state = if info.is_marked() { None } else { cx.resolve(info) };
    Seen { key, state }
}

/// One pass over the nodes of a chain (list, bucket or skiplist level 0) with keys in `lo..=hi`,
/// in chain order (marked nodes too, as absent). `start(from)` gives the link word to start from
/// for keys from `from` on: the `next` word of a node with a smaller key (or of the head),
/// unmarked when read. Every step reads the `next` word of a node that is unmarked, and therefore
/// linked, at that read: a node with a key in the gap it crosses is not linked at that instant.
/// A marked `next` (its node is being removed) restarts the walk from a fresh position after
/// the last key seen, and so does a re-pin ([`Ctx::pause`]). Keys are two words if `wide`.
/// Returns false if the walk stopped early ([`Pause::Stop`]).
pub(crate) fn walk<M: PMem>(
    cx: &impl Ctx<M>,
    mut start: impl FnMut(u128) -> u64,
    (lo, hi): (u128, u128),
    wide: bool,
    out: &mut Vec<Seen>,
) -> bool {
    let mut from = lo;
    let mut link = start(from);
    loop {
        // Acquire: a node reached through a link is seen initialised.
        let w = cx.mem().load(link, Ordering::Acquire);
        if w & MARK != 0 {
            link = start(from);
            continue;
        }
        if w == 0 {
            return true;
        }
        let node = w;
        let key = load_key(cx.mem(), node, wide);
        if key > hi {
            return true;
        }
        if key >= from {
            out.push(seen(cx, node, key));
            if key == hi {
                return true;
            }
            from = key + 1;
        }
        match cx.pause() {
            Pause::Go => link = node + LINK,
            Pause::Repinned => link = start(from),
            Pause::Stop => return false,
        }
    }
}

/// Walks a chain at rest, checked (see [`LinkedSet::walk_checked`]): from the link word at
/// `link`, nodes of at least `bytes` bytes, keys in increasing order (so no cycle), each accepted
/// by `belongs` (a hash map's bucket), and if `strict`, no node marked, or with `lazy` (a chain
/// whose removals leave the unlink to the next search that passes: the list's) no node marked
/// whose info word is not (a removal marks the info word first). A marked `next` is otherwise
/// followed: its node is being removed. Calls `visit` with each node and key; returns the nodes
/// in chain order.
pub(crate) fn check_chain<M: PMem>(
    cx: &impl Inspect<M>,
    link: u64,
    (wide, bytes, strict, lazy): (bool, u64, bool, bool),
    belongs: impl Fn(u128) -> bool,
    visit: &mut dyn FnMut(u64, u128),
) -> Result<Vec<u64>, Damage> {
    let mem = cx.mem();
    let mut nodes: Vec<u64> = Vec::new();
    let mut last: Option<u128> = None;
    let mut at = link;
    // Relaxed (every load): the structure is at rest.
    let mut w = mem.load(link, Ordering::Relaxed);
    loop {
        // The node whose `next` holds the mark (the link word itself is never marked); the last
        // node's too, whose `next` holds nothing else.
        let removing = || nodes.last().is_some_and(|&n| Info(mem.load(n + INFO, Ordering::Relaxed)).is_marked());
        if strict && w & MARK != 0 && !(lazy && removing()) {
            return Err(fault(at, format!("a marked link to {:#x}", w & !MARK)));
        }
        if w & !MARK == 0 {
            break;
        }
        let node = checked_node(cx, at, w, bytes)?;
        let key = load_key(mem, node, wide);
        if last.is_some_and(|k| k >= key) {
            return Err(fault(node, format!("key {key:#x} after key {:#x}", last.unwrap_or(0))));
        }
        if !belongs(key) {
            return Err(fault(node, format!("key {key:#x} on the wrong chain")));
        }
        visit(node, key);
        nodes.push(node);
        last = Some(key);
        at = node + LINK;
        w = mem.load(at, Ordering::Relaxed);
    }
    Ok(nodes)
}

/// Removes the node `absent` names from `set` if its info word still is the one that left it
/// absent (a finished op's, or a checkpoint round's FINAL word): the mark on the info word makes
/// the removal exclusive of any op taking the node. The node is read at its offset if known (see
/// [`AbsentNode`] for why the word there is the node's while it holds that value), else found by
/// a search for its key. Returns whether it removed the node through
/// [`help_remove`](LinkedSet::help_remove), which may leave the unlink to a sweep.
pub(crate) fn remove_if<M: PMem + 'static, S: LinkedSet<M>>(cx: &impl Ctx<M>, set: &S, absent: &AbsentNode) -> bool {
    debug_assert!(set.removes_nodes(), "removals are scheduled only for structures that remove nodes");
    let info = absent.info;
    let (pos, node) = match absent.node {
        Some(node) => (None, node),
        None => {
            let (pos, Some(node)) = set.search(cx, absent.key) else { return false };
            (Some(pos), node)
        }
    };
    // Acquire (the info word, read first): a round's record stores come before its CAS of the
    // word, which every later CAS of it (ending in the one that wrote `info`) acquires; so a
    // record written before the node moved on is seen.
    let mem = cx.mem();
    if mem.load(node + INFO, Ordering::Acquire) != info.0 {
        return false;
    }
    // A node with a record keeps it until the checkpoint round that folds the op that left the
    // key absent clears it (a record changes only for a key a folded writer names, see
    // `checkpoint`). The removal of such a node writes the op's own word, marked, so that that
    // round knows the node by it: it clears the record and only then gives the node REMOVED,
    // and the node's block is freed only after that round's fence (`Core::retire_node`). Only
    // a committed Delete's or Remove's node at a known offset is removed so (the round finds it
    // through the op's cache); any other node with a record stays linked until a round removes
    // it.
    let recorded = cx.has_record(node);
    if recorded && (absent.node.is_none() || !absent.deleted) {
        return false;
    }
    debug_assert_eq!(load_key(mem, node, set.wide()), absent.key, "the info word {info:?} on another key's node");
    let mark = if recorded { info.marked() } else { Info::removed(node) };
    // AcqRel: the mark is a transition of the info word like any other.
    if mem.compare_exchange(node + INFO, info.0, mark.0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        match pos {
            Some(pos) => set.help_remove_at(cx, &pos, node),
            None => {
                set.help_remove(cx, node);
                return true;
            }
        }
    }
    false
}
