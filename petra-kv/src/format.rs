//! What makes a pool a store or a metric store: structure 0 is a meta list holding a magic word
//! and a format version, written last at creation; the structures after it have the shapes the
//! kind of store expects. A pool of another shape is refused before recovery, untouched.

use std::path::{Path, PathBuf};

use petra::error::{Damage, ReadError};
use petra::mem::{MmapMem, PMem};
use petra::pool::{Pool, PoolConfig};
use petra::{
    Blobs, Contents, DurabilityPolicy, Engine, EngineConfig, EngineError, Handle, Key, KeyWidth, Shape, StructId,
    StructureKind, Transaction, Values,
};

use crate::config::{Config, CreateMode};
use crate::error::{KvError, Result};

/// A kind of pool this crate makes.
#[derive(Debug)]
pub(crate) struct Format {
    /// What it is called in errors.
    pub(crate) name: &'static str,
    /// The word in the meta list that marks a finished pool of this kind.
    pub(crate) magic: u64,
    /// The format version this build writes, and the only one it opens.
    pub(crate) version: u64,
}

const META: StructId = StructId(0);
const META_SHAPE: Shape = (StructureKind::List, KeyWidth::U64, Values::Words);
const MAGIC_KEY: u64 = 0;
const VERSION_KEY: u64 = 1;

/// Descriptor rings of the stores: small, since a ring that fills up is followed by another.
/// The automatic checkpoint rounds run on the engine's own thread: a store's writers take the
/// locks of their keys and sets around a transaction, and a round (a quarter of a ring folded)
/// must neither run inside them nor be any one write's time.
pub(crate) fn engine_config(durability: DurabilityPolicy) -> EngineConfig {
    EngineConfig::rings(4 << 20).durability(durability).background_rounds(true)
}

/// Opens the pool file `config` names with `open`, or creates it and makes a store in it with
/// `create`, as `config.create` says. A file created here and left without a store is removed.
pub(crate) fn open_file<T>(
    config: &Config,
    open: impl FnOnce(Pool<MmapMem>) -> Result<T>,
    create: impl FnOnce(Pool<MmapMem>) -> Result<T>,
) -> Result<T> {
    let new = match config.create {
        CreateMode::Open => false,
        CreateMode::Create => true,
        CreateMode::OpenOrCreate => !config.path.exists(),
    };
    if !new {
        return open(Pool::open(&config.path, &config.mapping)?);
    }
    let pool_config = PoolConfig {
        initial_size: config.size,
        max_size: config.max_size,
        mapping: config.mapping.clone(),
        ..PoolConfig::default()
    };
    create(Pool::create(&config.path, &pool_config)?).inspect_err(|_| {
        // The file is ours (created just now) and holds no store: leave nothing behind.
        let _ = std::fs::remove_file(&config.path);
    })
}

/// [`Handle::execute_decided`] for a transaction of total ops (Put, Remove, Get), which never
/// fail.
pub(crate) fn run_total<M: PMem + 'static, R>(
    h: &mut Handle<M>,
    tx: &Transaction,
    f: impl FnMut(&[Option<u64>], &Blobs<'_, M>) -> R,
) -> Result<R> {
    Ok(h.execute_decided(tx, f)?.unwrap_or_else(|i| unreachable!("total op {i} failed")))
}

/// Copies the byte value of `key` in `s` (a structure of byte values) into `buf`, checked;
/// whether the key is present. A single read ([`Handle::get_with`]): no transaction, and no
/// allocation once `buf` has grown.
pub(crate) fn read_into<M: PMem + 'static, K: Key>(
    h: &mut Handle<M>,
    s: StructId,
    key: K,
    buf: &mut Vec<u8>,
) -> Result<bool> {
    let read = h.get_with(s, key, |state, blobs| state.map(|w| blobs.read_into(w, buf)).transpose())?;
    Ok(read.map_err(|e| of_read(s, key.to_bits(), e))?.is_some())
}

/// Damage found in the value of the engine entry `key` of structure `s`, saying so.
pub(crate) fn of_entry(s: StructId, key: u128, d: Damage) -> Damage {
    Damage { what: format!("the value of entry {key:#x} of structure {}: {}", s.0, d.what), at: d.at }
}

/// A failed read of the value of the engine entry `key` of structure `s`: damage found in it
/// says which entry ([`of_entry`]).
pub(crate) fn of_read(s: StructId, key: u128, e: ReadError) -> ReadError {
    match e {
        ReadError::Damaged(d) => ReadError::Damaged(of_entry(s, key, d)),
        e => e,
    }
}

/// Sets up an engine in `pool` with the meta list and structures of `shapes` (ids 1, 2, ...),
/// then writes the magic.
pub(crate) fn create<M: PMem + 'static>(
    pool: Pool<M>,
    format: &Format,
    shapes: &[Shape],
    durability: DurabilityPolicy,
) -> Result<(Engine<M>, Vec<StructId>)> {
    let engine = Engine::create(pool, engine_config(durability))?;
    let meta = engine.create_structure(META_SHAPE.0, META_SHAPE.1, META_SHAPE.2)?;
    let ids = shapes.iter().map(|&(k, w, v)| engine.create_structure(k, w, v)).collect::<Result<Vec<_>, _>>()?;
    // The magic last: a pool whose creation was interrupted is refused, not half-used.
    let mut tx = Transaction::new();
    tx.insert(meta, MAGIC_KEY, format.magic).insert(meta, VERSION_KEY, format.version);
    if engine.handle()?.execute_decided(&tx, |_, _| ())?.is_err() {
        return Err(KvError::Engine(EngineError::Corrupt(format!(
            "a new {}'s meta structure is not empty",
            format.name
        ))));
    }
    Ok((engine, ids))
}

/// Why `open`'s `accept` refuses the shapes of a pool's structures.
#[derive(Debug)]
pub(crate) enum Rejected {
    /// Not structures of this format: the pool holds something else, and this says why.
    NotOurs(&'static str),
    /// This format's, but not what the caller asked for (another order, say).
    Other(KvError),
}

/// Opens and recovers the engine of a pool of `format`, if `accept` takes the shapes of its
/// structures after the meta list and then `inspect` what recovery found (each says why not
/// otherwise, and the pool is left as it was).
pub(crate) fn open<M: PMem + 'static, T, U>(
    pool: Pool<M>,
    (format, durability): (&Format, DurabilityPolicy),
    accept: impl FnOnce(&[Shape]) -> Result<T, Rejected>,
    inspect: impl FnOnce(&Contents<'_>) -> Result<U>,
) -> Result<(Engine<M>, T, U)> {
    let path = pool.path().map_or_else(|| PathBuf::from("<memory>"), Path::to_owned);
    let refuse = |why: String| KvError::NotAStore { path: path.clone(), what: format.name, why };
    // Nothing is written until every check has passed: a refused pool is left as it was.
    let shapes = match Engine::structures_in(&pool) {
        Ok(shapes) => shapes,
        Err(EngineError::NoEngine) => return Err(refuse("the pool holds no engine".into())),
        Err(e) => return Err(e.into()),
    };
    let accepted = match shapes.as_slice() {
        [meta, rest @ ..] if *meta == META_SHAPE => accept(rest).map_err(|r| match r {
            Rejected::NotOurs(why) => refuse(why.into()),
            Rejected::Other(e) => e,
        })?,
        _ => return Err(refuse("its structures are not one's".into())),
    };
    let opened = Engine::open_checked(pool, engine_config(durability), |contents| {
        if contents.get(META, MAGIC_KEY) != Some(format.magic) {
            return Err(refuse("no magic (its creation may not have finished)".to_string()));
        }
        match contents.get(META, VERSION_KEY) {
            Some(v) if v == format.version => inspect(contents),
            version => Err(refuse(format!("format version {version:?}, this build reads {}", format.version))),
        }
    });
    let (engine, inspected) = match opened {
        Ok((engine, _report, inspected)) => (engine, inspected),
        Err(petra::Refused::Check(e)) => return Err(e),
        Err(petra::Refused::Engine(EngineError::NoEngine)) => return Err(refuse("the pool holds no engine".into())),
        Err(petra::Refused::Engine(e)) => return Err(e.into()),
    };
    Ok((engine, accepted, inspected))
}
