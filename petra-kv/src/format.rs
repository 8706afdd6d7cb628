//! What makes a pool a store or a metric store: structure 0 is a meta list holding a magic word
//! and a format version, written last at creation; the structures after it have the shapes the
//! kind of store expects. A pool of another shape is refused before recovery, untouched.

use std::path::{Path, PathBuf};

use petra::mem::PMem;
use petra::pool::Pool;
use petra::{Engine, EngineConfig, EngineError, KeyWidth, Shape, StructId, StructureKind, Transaction, Values};

use crate::error::{KvError, Result};

/// A kind of pool this crate makes.
#[derive(Debug)]
pub(crate) struct Format {
    /// What it is called in errors.
    pub name: &'static str,
    pub magic: u64,
    pub version: u64,
}

const META: StructId = StructId(0);
const META_SHAPE: Shape = (StructureKind::List, KeyWidth::U64, Values::Words);
const MAGIC_KEY: u64 = 0;
const VERSION_KEY: u64 = 1;

/// Sets up an engine in `pool` with the meta list and structures of `shapes` (ids 1, 2, ...),
/// then writes the magic.
pub(crate) fn create<M: PMem + 'static>(
    pool: Pool<M>,
    config: EngineConfig,
    format: &Format,
    shapes: &[Shape],
) -> Result<(Engine<M>, Vec<StructId>)> {
    let engine = Engine::create(pool, config)?;
    let meta = engine.create_structure(META_SHAPE.0, META_SHAPE.1, META_SHAPE.2)?;
    let ids = shapes.iter().map(|&(k, w, v)| engine.create_structure(k, w, v)).collect::<Result<Vec<_>, _>>()?;
    // The magic last: a pool whose creation was interrupted is refused, not half-used.
    let out = engine.handle()?.execute(Transaction::new().insert(meta, MAGIC_KEY, format.magic).insert(
        meta,
        VERSION_KEY,
        format.version,
    ))?;
    if !out.is_committed() {
        return Err(KvError::Engine(EngineError::Corrupt(format!(
            "a new {}'s meta structure is not empty",
            format.name
        ))));
    }
    Ok((engine, ids))
}

/// Opens and recovers the engine of a pool of `format`, if `accept` takes the shapes of its
/// structures after the meta list (it says why not otherwise).
pub(crate) fn open<M: PMem + 'static, T>(
    pool: Pool<M>,
    config: EngineConfig,
    format: &Format,
    accept: impl FnOnce(&[Shape]) -> Result<T, &'static str>,
) -> Result<(Engine<M>, T)> {
    let path = pool.path().map_or_else(|| PathBuf::from("<memory>"), Path::to_owned);
    let refuse = |why: String| KvError::NotAStore { path: path.clone(), what: format.name, why };
    let found = Engine::structures_in(&pool);
    let shapes: Option<Vec<Shape>> =
        found.iter().enumerate().map(|(i, (id, s))| s.filter(|_| id.0 as usize == i)).collect();
    let shaped = match shapes.as_deref() {
        Some([meta, rest @ ..]) if *meta == META_SHAPE => accept(rest),
        _ => Err("its structures are not one's"),
    };
    let accepted = match shaped {
        Ok(t) => t,
        Err(why) => {
            // Opening cleared the pool's clean mark; closing puts it back, so a refused pool is
            // left byte for byte as it was.
            if pool.was_clean() {
                pool.close()?;
            }
            return Err(refuse(why.into()));
        }
    };
    let engine = match Engine::open(pool, config) {
        Ok((engine, _report)) => engine,
        Err(EngineError::NoEngine) => return Err(refuse("the pool holds no engine".into())),
        Err(e) => return Err(e.into()),
    };
    let words = engine.entries::<u64>(META)?;
    if !words.contains(&(MAGIC_KEY, format.magic)) {
        return Err(refuse("no magic (its creation may not have finished)".into()));
    }
    let version = words.iter().find(|e| e.0 == VERSION_KEY).map(|e| e.1);
    if version != Some(format.version) {
        return Err(refuse(format!("format version {version:?}, this build reads {}", format.version)));
    }
    Ok((engine, accepted))
}
