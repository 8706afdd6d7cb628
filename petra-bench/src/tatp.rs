//! `petra-bench tatp`: the Telecom Application Transaction Processing benchmark (TATP
//! Benchmark Description, version 1.0) on PETRA's hash maps.
//!
//! **Schema.** Each table is one or more hash maps of one-word keys, so that every field a
//! transaction writes is a word of its own (a static transaction writes whole values, and cannot
//! read a row and write it back in one go):
//!
//! | structure | key | value |
//! |---|---|---|
//! | `subscriber` | s_id | bytes: bit_2..bit_10, hex_1..hex_10, byte2_1..byte2_10, msc_location |
//! | `sub_bit_1` | s_id | bit_1 |
//! | `sub_vlr` | s_id | vlr_location |
//! | `sub_nbr` (the index) | sub_nbr (its 15 digits as a number) | s_id |
//! | `access_info` | s_id << 2 \| ai_type - 1 | data1, data2, data3, data4 packed |
//! | `special_facility` | s_id << 2 \| sf_type - 1 | is_active, error_cntrl, data_b packed |
//! | `sf_data_a` | s_id << 2 \| sf_type - 1 | data_a |
//! | `call_forwarding` | (s_id << 2 \| sf_type - 1) << 2 \| start_time / 8 | end_time, numberx packed |
//!
//! Letters (data3, data4, data_b) are `A` to `Z`, five bits each.
//!
//! **Transactions**, each one PETRA transaction (strict ops abort it where the specification
//! rolls back), after a single-op read of the `sub_nbr` index where the specification looks the
//! subscriber up by number (the index never changes after population):
//! GET_SUBSCRIBER_DATA (three Finds), GET_NEW_DESTINATION (Gets of the facility and its
//! forwardings that start no later than the asked time; it succeeds when the facility is active
//! and one of them ends after the asked end time), GET_ACCESS_DATA (a Find),
//! UPDATE_SUBSCRIBER_DATA (two strict Updates), UPDATE_LOCATION (an Update),
//! INSERT_CALL_FORWARDING (Gets of the subscriber's facilities, a strict Find of the one named and
//! a strict Insert) and DELETE_CALL_FORWARDING (a strict Delete). A transaction aborted to break a
//! helping cycle is run again; the success rate counts the others.

use std::path::{Path, PathBuf};
use std::time::Instant;

use petra::mem::MmapMem;
use petra::{Engine, EngineConfig, Handle, KeyWidth, StructId, StructureKind, Transaction, Values};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::cli::{progress_bar, scratch, wrote};
use crate::report::TatpRow;

/// The transaction types: name, share of the full mix (percent), the success rate the
/// specification quotes, and the one its population rules and parameter ranges imply (percent).
///
/// They differ for GET_NEW_DESTINATION: the facility exists with probability 5/8 (2.5 of 4 types)
/// and is active with 0.85; a forwarding starting at 0, 8 or 16 exists with probability 1/2 and
/// ends 1 to 8 hours later, and the query asks for one starting no later than a time drawn from
/// {0, 8, 16} and ending after an hour drawn from 1 to 24, which holds with probability 0.2784
/// (summed exactly over the draws), so 5/8 x 0.85 x 0.2784 = 14.79%, not the quoted 23.9%.
pub const TYPES: [(&str, u32, f64, f64); 7] = [
    ("GET_SUBSCRIBER_DATA", 35, 100.0, 100.0),
    ("GET_NEW_DESTINATION", 10, 23.9, 14.79),
    ("GET_ACCESS_DATA", 35, 62.5, 62.5),
    ("UPDATE_SUBSCRIBER_DATA", 2, 62.5, 62.5),
    ("UPDATE_LOCATION", 14, 100.0, 100.0),
    ("INSERT_CALL_FORWARDING", 2, 31.25, 31.25),
    ("DELETE_CALL_FORWARDING", 2, 31.25, 31.25),
];

const GET_SUBSCRIBER_DATA: usize = 0;
const GET_NEW_DESTINATION: usize = 1;
const GET_ACCESS_DATA: usize = 2;
const UPDATE_SUBSCRIBER_DATA: usize = 3;
const UPDATE_LOCATION: usize = 4;
const INSERT_CALL_FORWARDING: usize = 5;
const DELETE_CALL_FORWARDING: usize = 6;

/// Which transactions a run draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// The seven types in the specification's proportions.
    Full,
    /// UPDATE_LOCATION only.
    UpdateLocation,
}

impl Mix {
    /// Parses `full` or `update-location`.
    pub fn parse(s: &str) -> Result<Mix, String> {
        match s {
            "full" => Ok(Mix::Full),
            "update-location" => Ok(Mix::UpdateLocation),
            other => Err(format!("unknown mix {other:?}: use full or update-location")),
        }
    }

    /// The name [`Mix::parse`] takes.
    pub fn name(self) -> &'static str {
        match self {
            Mix::Full => "full",
            Mix::UpdateLocation => "update-location",
        }
    }

    /// Draws a transaction type.
    pub fn draw(self, rng: &mut impl Rng) -> usize {
        if self == Mix::UpdateLocation {
            return UPDATE_LOCATION;
        }
        let mut p = rng.random_range(0..100);
        for (i, &(_, share, _, _)) in TYPES.iter().enumerate() {
            if p < share {
                return i;
            }
            p -= share;
        }
        unreachable!("the shares add up to 100")
    }
}

/// The specification's non-uniform subscriber id in `1..=n`: `(rand(0, A) | rand(1, n)) % n + 1`,
/// with A = 65 535 up to a million subscribers, 1 048 575 up to ten million, 2 097 151 above.
pub fn nonuniform_s_id(rng: &mut impl Rng, n: u64) -> u64 {
    let a = match n {
        0..=1_000_000 => 65_535,
        1_000_001..=10_000_000 => 1_048_575,
        _ => 2_097_151,
    };
    (rng.random_range(0..=a) | rng.random_range(1..=n)) % n + 1
}

/// `k` letters `A` to `Z`, five bits each, the first highest.
fn letters(rng: &mut impl Rng, k: u32) -> u64 {
    (0..k).fold(0, |acc, _| acc << 5 | rng.random_range(0..26u64))
}

/// `k` distinct values of `1..=4`, `k` drawn from `1..=4`, in random order.
fn distinct_types(rng: &mut impl Rng) -> Vec<u8> {
    let mut types = vec![1, 2, 3, 4];
    types.shuffle(rng);
    types.truncate(rng.random_range(1..=4));
    types
}

/// One SUBSCRIBER row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscriber {
    /// bit_1 .. bit_10, bit_1 lowest.
    pub bits: u16,
    /// hex_1 .. hex_10, four bits each, hex_1 lowest.
    pub hex: u64,
    /// byte2_1 .. byte2_10.
    pub byte2: [u8; 10],
    /// msc_location.
    pub msc_location: u32,
    /// vlr_location.
    pub vlr_location: u32,
}

/// One ACCESS_INFO row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessInfo {
    /// ai_type, 1 to 4.
    pub ai_type: u8,
    /// data1, data2 (0 to 255), data3 (3 letters), data4 (5 letters), packed.
    pub packed: u64,
}

/// One SPECIAL_FACILITY row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialFacility {
    /// sf_type, 1 to 4.
    pub sf_type: u8,
    /// is_active: 1 for 85% of the rows.
    pub is_active: bool,
    /// error_cntrl, 0 to 255.
    pub error_cntrl: u8,
    /// data_a, 0 to 255.
    pub data_a: u8,
    /// data_b, 5 letters.
    pub data_b: u64,
}

/// One CALL_FORWARDING row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallForwarding {
    /// sf_type of its facility.
    pub sf_type: u8,
    /// 0, 8 or 16.
    pub start_time: u8,
    /// start_time + 1 to 8.
    pub end_time: u8,
    /// 15 digits, as a number.
    pub numberx: u64,
}

/// A subscriber's rows in every table.
#[derive(Debug, Clone)]
pub struct Rows {
    /// s_id.
    pub s_id: u64,
    /// The SUBSCRIBER row.
    pub subscriber: Subscriber,
    /// Its 1 to 4 ACCESS_INFO rows.
    pub access_info: Vec<AccessInfo>,
    /// Its 1 to 4 SPECIAL_FACILITY rows.
    pub special_facility: Vec<SpecialFacility>,
    /// 0 to 3 CALL_FORWARDING rows per facility.
    pub call_forwarding: Vec<CallForwarding>,
}

/// The rows of subscriber `s_id` by the specification's population rules.
pub fn population_rows(rng: &mut impl Rng, s_id: u64) -> Rows {
    let subscriber = Subscriber {
        bits: rng.random_range(0..1 << 10),
        hex: rng.random_range(0..1 << 40),
        byte2: rng.random(),
        msc_location: rng.random_range(1..=u32::MAX),
        vlr_location: rng.random_range(1..=u32::MAX),
    };
    let access_info = distinct_types(rng)
        .into_iter()
        .map(|ai_type| {
            let packed = rng.random_range(0..256u64) << 48
                | rng.random_range(0..256u64) << 40
                | letters(rng, 3) << 25
                | letters(rng, 5);
            AccessInfo { ai_type, packed }
        })
        .collect();
    let special_facility: Vec<SpecialFacility> = distinct_types(rng)
        .into_iter()
        .map(|sf_type| SpecialFacility {
            sf_type,
            is_active: rng.random_range(0..100) < 85,
            error_cntrl: rng.random(),
            data_a: rng.random(),
            data_b: letters(rng, 5),
        })
        .collect();
    let mut call_forwarding = Vec::new();
    for sf in &special_facility {
        let mut starts = [0u8, 8, 16];
        starts.shuffle(rng);
        for &start_time in &starts[..rng.random_range(0..=3)] {
            call_forwarding.push(CallForwarding {
                sf_type: sf.sf_type,
                start_time,
                end_time: start_time + rng.random_range(1..=8),
                numberx: rng.random_range(0..1_000_000_000_000_000),
            });
        }
    }
    Rows { s_id, subscriber, access_info, special_facility, call_forwarding }
}

/// Subscriber `s_id`'s rows in the population of `seed`: the same whichever thread makes them.
pub fn rows_of(seed: u64, s_id: u64) -> Rows {
    population_rows(&mut StdRng::seed_from_u64(seed ^ s_id.wrapping_mul(0x9E37_79B9_7F4A_7C15)), s_id)
}

/// The subscriber row's bytes (bit_1 lives in its own structure).
fn subscriber_bytes(s: &Subscriber) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..2].copy_from_slice(&(s.bits >> 1).to_le_bytes());
    b[2..10].copy_from_slice(&s.hex.to_le_bytes());
    b[10..20].copy_from_slice(&s.byte2);
    b[20..24].copy_from_slice(&s.msc_location.to_le_bytes());
    b
}

fn sf_word(sf: &SpecialFacility) -> u64 {
    (sf.is_active as u64) << 48 | (sf.error_cntrl as u64) << 40 | sf.data_b
}

fn cf_word(cf: &CallForwarding) -> u64 {
    (cf.end_time as u64) << 56 | cf.numberx
}

fn facility_key(s_id: u64, sf_type: u8) -> u64 {
    s_id << 2 | (sf_type as u64 - 1)
}

fn forwarding_key(s_id: u64, sf_type: u8, start_time: u8) -> u64 {
    facility_key(s_id, sf_type) << 2 | (start_time / 8) as u64
}

/// The database: the eight structures of the schema.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    subscriber: StructId,
    bit_1: StructId,
    vlr: StructId,
    sub_nbr: StructId,
    access_info: StructId,
    special_facility: StructId,
    data_a: StructId,
    call_forwarding: StructId,
}

impl Schema {
    /// Creates the structures, sized for `n` subscribers.
    pub fn create(engine: &Engine<MmapMem>, n: u64) -> Result<Schema, String> {
        let make = |buckets: u64, values| {
            engine
                .create_structure(StructureKind::HashMap { buckets: buckets.max(1) }, KeyWidth::U64, values)
                .map_err(|e| e.to_string())
        };
        Ok(Schema {
            subscriber: make(n, Values::Bytes)?,
            bit_1: make(n, Values::Words)?,
            vlr: make(n, Values::Words)?,
            sub_nbr: make(n, Values::Words)?,
            access_info: make(n * 5 / 2, Values::Words)?,
            special_facility: make(n * 5 / 2, Values::Words)?,
            data_a: make(n * 5 / 2, Values::Words)?,
            call_forwarding: make(n * 15 / 4, Values::Words)?,
        })
    }

    /// Stores one subscriber's rows in one transaction.
    pub fn insert(&self, h: &mut Handle<MmapMem>, tx: &mut Transaction, rows: &Rows) -> Result<(), String> {
        let s = rows.s_id;
        tx.clear()
            .insert_bytes(self.subscriber, s, &subscriber_bytes(&rows.subscriber))
            .insert(self.bit_1, s, (rows.subscriber.bits & 1) as u64)
            .insert(self.vlr, s, rows.subscriber.vlr_location as u64)
            .insert(self.sub_nbr, s, s);
        for ai in &rows.access_info {
            tx.insert(self.access_info, facility_key(s, ai.ai_type), ai.packed);
        }
        for sf in &rows.special_facility {
            tx.insert(self.special_facility, facility_key(s, sf.sf_type), sf_word(sf));
            tx.insert(self.data_a, facility_key(s, sf.sf_type), sf.data_a as u64);
        }
        for cf in &rows.call_forwarding {
            tx.insert(self.call_forwarding, forwarding_key(s, cf.sf_type, cf.start_time), cf_word(cf));
        }
        match decided(h, tx)? {
            Some(_) => Ok(()),
            None => Err(format!("subscriber {s} could not be inserted")),
        }
    }

    /// Runs one transaction of type `kind` with the specification's random parameters; whether
    /// it succeeded.
    pub fn transaction(
        &self,
        h: &mut Handle<MmapMem>,
        tx: &mut Transaction,
        rng: &mut impl Rng,
        n: u64,
        kind: usize,
        buf: &mut Vec<u8>,
    ) -> Result<bool, String> {
        let s_id = nonuniform_s_id(rng, n);
        // The lookup by number: sub_nbr is s_id's 15 digits.
        let by_number = |h: &mut Handle<MmapMem>, tx: &mut Transaction| -> Result<Option<u64>, String> {
            tx.clear().get(self.sub_nbr, s_id);
            Ok(decided(h, tx)?.and_then(|r| r[0]))
        };
        match kind {
            GET_SUBSCRIBER_DATA => {
                tx.clear().find(self.subscriber, s_id).find(self.bit_1, s_id).find(self.vlr, s_id);
                let read = h
                    .execute_decided(tx, |results, blobs| {
                        blobs.read_into(results[0].expect("a Find that committed found its key"), buf)
                    })
                    .map_err(|e| e.to_string())?;
                Ok(read.is_ok() && buf.len() == 24)
            }
            GET_NEW_DESTINATION => {
                let sf_type = rng.random_range(1..=4u8);
                let start_time = [0u8, 8, 16][rng.random_range(0..3)];
                let end_time = rng.random_range(1..=24u8);
                tx.clear().get(self.special_facility, facility_key(s_id, sf_type));
                for start in (0..=start_time).step_by(8) {
                    tx.get(self.call_forwarding, forwarding_key(s_id, sf_type, start));
                }
                let Some(r) = decided(h, tx)? else { return Ok(false) };
                let active = r[0].is_some_and(|sf| sf >> 48 & 1 == 1);
                Ok(active && r[1..].iter().flatten().any(|&cf| (cf >> 56) as u8 > end_time))
            }
            GET_ACCESS_DATA => {
                let ai_type = rng.random_range(1..=4u8);
                tx.clear().find(self.access_info, facility_key(s_id, ai_type));
                Ok(decided(h, tx)?.is_some())
            }
            UPDATE_SUBSCRIBER_DATA => {
                let (bit, sf_type, data_a) =
                    (rng.random_range(0..2u64), rng.random_range(1..=4u8), rng.random_range(0..256u64));
                tx.clear().update(self.bit_1, s_id, bit).update(self.data_a, facility_key(s_id, sf_type), data_a);
                Ok(decided(h, tx)?.is_some())
            }
            UPDATE_LOCATION => {
                let vlr = rng.random_range(1..=u32::MAX) as u64;
                let Some(s) = by_number(h, tx)? else { return Ok(false) };
                tx.clear().update(self.vlr, s, vlr);
                Ok(decided(h, tx)?.is_some())
            }
            INSERT_CALL_FORWARDING => {
                let sf_type = rng.random_range(1..=4u8);
                let start_time = [0u8, 8, 16][rng.random_range(0..3)];
                let end_time = rng.random_range(1..=24u8);
                let numberx = rng.random_range(0..1_000_000_000_000_000u64);
                let Some(s) = by_number(h, tx)? else { return Ok(false) };
                // The subscriber's facilities are read; the one named must exist (a strict Find),
                // and the forwarding must not (a strict Insert).
                tx.clear();
                for t in (1..=4u8).filter(|&t| t != sf_type) {
                    tx.get(self.special_facility, facility_key(s, t));
                }
                tx.find(self.special_facility, facility_key(s, sf_type)).insert(
                    self.call_forwarding,
                    forwarding_key(s, sf_type, start_time),
                    (end_time as u64) << 56 | numberx,
                );
                Ok(decided(h, tx)?.is_some())
            }
            DELETE_CALL_FORWARDING => {
                let sf_type = rng.random_range(1..=4u8);
                let start_time = [0u8, 8, 16][rng.random_range(0..3)];
                let Some(s) = by_number(h, tx)? else { return Ok(false) };
                tx.clear().delete(self.call_forwarding, forwarding_key(s, sf_type, start_time));
                Ok(decided(h, tx)?.is_some())
            }
            other => Err(format!("unknown transaction type {other}")),
        }
    }

    /// Rows in each table: subscriber, access_info, special_facility, call_forwarding.
    pub fn cardinalities(&self, engine: &Engine<MmapMem>) -> Result<[usize; 4], String> {
        let count = |s| engine.entries::<u64>(s).map(|e| e.len()).map_err(|e| e.to_string());
        Ok([
            count(self.subscriber)?,
            count(self.access_info)?,
            count(self.special_facility)?,
            count(self.call_forwarding)?,
        ])
    }
}

/// Executes `tx` until it is decided ([`Handle::execute_decided`]): its results if it
/// committed, `None` if a strict op failed.
fn decided(h: &mut Handle<MmapMem>, tx: &Transaction) -> Result<Option<Vec<Option<u64>>>, String> {
    Ok(h.execute_decided(tx, |results, _| results.to_vec()).map_err(|e| e.to_string())?.ok())
}

/// One run's settings.
#[derive(Debug, Clone)]
pub struct TatpCase {
    /// Subscribers populated.
    pub subscribers: u64,
    /// Threads running transactions.
    pub threads: usize,
    /// Transactions per thread.
    pub txs_per_thread: u64,
    /// The mix.
    pub mix: Mix,
    /// Seed of the population and the transactions.
    pub seed: u64,
    /// Skip flushes and fences (what durability costs; nothing is durable).
    pub volatile: bool,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct TatpResult {
    /// Seconds the population took.
    pub populate_secs: f64,
    /// Rows per table: subscriber, access_info, special_facility, call_forwarding.
    pub rows: [usize; 4],
    /// Transactions run per second, over all threads.
    pub tx_per_sec: f64,
    /// Per type: (run, succeeded).
    pub per_type: [(u64, u64); 7],
}

/// Populates a new pool at `path` and runs the case on it.
pub fn run_case(case: &TatpCase, path: &Path) -> Result<TatpResult, String> {
    if case.subscribers == 0 || case.threads == 0 {
        return Err("--subscribers and --threads must be at least 1".into());
    }
    let pool = crate::create_pool(path, case.volatile)?;
    let engine = Engine::create(pool, EngineConfig::rings(64 << 20)).map_err(|e| e.to_string())?;
    let schema = Schema::create(&engine, case.subscribers)?;
    let start = Instant::now();
    populate(&engine, &schema, case.subscribers, case.seed, case.threads)?;
    let populate_secs = start.elapsed().as_secs_f64();
    let rows = schema.cardinalities(&engine)?;
    let start = Instant::now();
    let per_thread: Vec<Result<[(u64, u64); 7], String>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..case.threads)
            .map(|t| {
                let (engine, schema) = (&engine, &schema);
                scope.spawn(move || {
                    let mut h = engine.handle().map_err(|e| e.to_string())?;
                    let mut rng = StdRng::seed_from_u64(case.seed.wrapping_mul(7919).wrapping_add(t as u64 + 1));
                    let (mut tx, mut buf) = (Transaction::new(), Vec::new());
                    tx.sorted(true);
                    let mut counts = [(0u64, 0u64); 7];
                    for _ in 0..case.txs_per_thread {
                        let kind = case.mix.draw(&mut rng);
                        let ok = schema.transaction(&mut h, &mut tx, &mut rng, case.subscribers, kind, &mut buf)?;
                        counts[kind].0 += 1;
                        counts[kind].1 += ok as u64;
                    }
                    Ok(counts)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Err("a thread panicked".into()))).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut per_type = [(0u64, 0u64); 7];
    for counts in per_thread {
        for (all, c) in per_type.iter_mut().zip(counts?) {
            all.0 += c.0;
            all.1 += c.1;
        }
    }
    let total: u64 = per_type.iter().map(|c| c.0).sum();
    let pool = engine.into_pool().map_err(|_| "the engine is still shared".to_string())?;
    pool.close().map_err(|e| e.to_string())?;
    Ok(TatpResult { populate_secs, rows, tx_per_sec: total as f64 / secs, per_type })
}

/// Inserts subscribers `1..=n` ([`rows_of`]), one transaction each, on `threads` threads.
pub fn populate(engine: &Engine<MmapMem>, schema: &Schema, n: u64, seed: u64, threads: usize) -> Result<(), String> {
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads as u64)
            .map(|t| {
                scope.spawn(move || -> Result<(), String> {
                    let mut h = engine.handle().map_err(|e| e.to_string())?;
                    let mut tx = Transaction::new();
                    tx.sorted(true);
                    for s in (1 + t..=n).step_by(threads) {
                        schema.insert(&mut h, &mut tx, &rows_of(seed, s))?;
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().unwrap_or_else(|_| Err("a thread panicked".into())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_population_follows_the_cardinality_rules() {
        let mut rng = StdRng::seed_from_u64(3);
        let n = 20_000u64;
        let (mut ai, mut sf, mut cf, mut active) = (0usize, 0usize, 0usize, 0usize);
        let mut per_count = [0u64; 5];
        for s in 1..=n {
            let r = population_rows(&mut rng, s);
            // 1 to 4 rows of distinct types in 1..=4.
            for types in [
                r.access_info.iter().map(|a| a.ai_type).collect::<Vec<_>>(),
                r.special_facility.iter().map(|f| f.sf_type).collect(),
            ] {
                assert!((1..=4).contains(&types.len()), "{types:?}");
                let mut sorted = types.clone();
                sorted.sort();
                sorted.dedup();
                assert_eq!(sorted.len(), types.len());
                assert!(types.iter().all(|t| (1..=4).contains(t)));
            }
            per_count[r.access_info.len()] += 1;
            // 0 to 3 forwardings per facility, distinct start times of 0, 8, 16, ending 1 to 8
            // hours after they start, 15-digit numbers.
            for f in &r.special_facility {
                let starts: Vec<u8> =
                    r.call_forwarding.iter().filter(|c| c.sf_type == f.sf_type).map(|c| c.start_time).collect();
                assert!(starts.len() <= 3);
                let mut sorted = starts.clone();
                sorted.sort();
                sorted.dedup();
                assert_eq!(sorted.len(), starts.len());
                assert!(starts.iter().all(|s| [0, 8, 16].contains(s)));
            }
            for c in &r.call_forwarding {
                assert!(r.special_facility.iter().any(|f| f.sf_type == c.sf_type));
                assert!((c.start_time + 1..=c.start_time + 8).contains(&c.end_time));
                assert!(c.numberx < 1_000_000_000_000_000);
            }
            assert!(r.subscriber.msc_location >= 1 && r.subscriber.vlr_location >= 1);
            assert!(r.subscriber.hex < 1 << 40 && r.subscriber.bits < 1 << 10);
            ai += r.access_info.len();
            sf += r.special_facility.len();
            cf += r.call_forwarding.len();
            active += r.special_facility.iter().filter(|f| f.is_active).count();
        }
        // Means: 2.5 access infos and facilities per subscriber, 1.5 forwardings per facility,
        // 85% of facilities active; the count of rows uniform over 1..=4.
        let per = |x: usize| x as f64 / n as f64;
        assert!((per(ai) - 2.5).abs() < 0.03 && (per(sf) - 2.5).abs() < 0.03, "{ai} {sf}");
        assert!((cf as f64 / sf as f64 - 1.5).abs() < 0.03, "{cf} / {sf}");
        assert!((active as f64 / sf as f64 - 0.85).abs() < 0.01, "{active} / {sf}");
        assert!(per_count[1..].iter().all(|&c| (4_700..=5_300).contains(&c)), "{per_count:?}");
    }

    #[test]
    fn nonuniform_ids_stay_in_range_and_favour_some() {
        let mut rng = StdRng::seed_from_u64(5);
        let n = 100_000;
        let mut hits = vec![0u32; n as usize + 1];
        for _ in 0..1_000_000 {
            let s = nonuniform_s_id(&mut rng, n);
            assert!((1..=n).contains(&s));
            hits[s as usize] += 1;
        }
        // The OR with a 16-bit draw skews the ids: the most drawn is drawn far above the mean of 10.
        let max = *hits.iter().max().unwrap();
        assert!(max > 30, "{max}");
        assert_eq!(hits[0], 0);
    }

    #[test]
    fn the_mix_draws_the_specified_shares() {
        let mut rng = StdRng::seed_from_u64(9);
        let mut counts = [0u64; 7];
        for _ in 0..200_000 {
            counts[Mix::Full.draw(&mut rng)] += 1;
        }
        for (c, &(name, share, _, _)) in counts.iter().zip(&TYPES) {
            let pct = *c as f64 / 2_000.0;
            assert!((pct - share as f64).abs() < 0.5, "{name}: {pct}% drawn, {share}% specified");
        }
        assert!((0..1_000).all(|_| Mix::UpdateLocation.draw(&mut rng) == UPDATE_LOCATION));
    }

    #[test]
    fn a_seeded_run_meets_the_specified_success_rates() {
        let dir = petra_recovery::scratch_dir();
        let case = TatpCase {
            subscribers: 5_000,
            threads: 2,
            txs_per_thread: 40_000,
            mix: Mix::Full,
            seed: 11,
            volatile: false,
        };
        let r = run_case(&case, &dir.path().join("tatp.pool")).unwrap();
        // The tables' rows match a population generated apart from the database.
        let mut expected = [5_000usize, 0, 0, 0];
        for s in 1..=5_000 {
            let rows = rows_of(11, s);
            expected[1] += rows.access_info.len();
            expected[2] += rows.special_facility.len();
            expected[3] += rows.call_forwarding.len();
        }
        assert_eq!(r.rows, expected);
        for ((run, ok), &(name, _, _, implied)) in r.per_type.iter().zip(&TYPES) {
            let pct = *ok as f64 * 100.0 / *run as f64;
            // The rarer types run about 1 600 times: a few points of noise.
            let slack = if *run > 10_000 { 1.5 } else { 4.5 };
            assert!((pct - implied).abs() < slack, "{name}: {pct:.1}% of {run} succeeded, {implied}% implied");
        }
    }
}

/// TATP (the Telecom Application Transaction Processing benchmark) on PETRA's hash maps:
/// populates the four tables, runs the seven-transaction mix (or UPDATE_LOCATION alone) and
/// prints throughput and each type's success rate beside the specification's.
#[derive(Debug, clap::Args)]
pub struct TatpArgs {
    /// Subscribers (the specification's scale; at least 100 000 for a conforming run).
    #[arg(long, default_value_t = 100_000)]
    subscribers: u64,
    /// Thread counts to run, comma-separated (each run on a fresh population).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2])]
    threads: Vec<usize>,
    /// Transactions per thread.
    #[arg(long, default_value_t = 200_000)]
    txs: u64,
    /// full (the seven types) or update-location.
    #[arg(long, default_value = "full")]
    mix: String,
    /// Modes to run: durable, volatile.
    #[arg(long, value_delimiter = ',', default_values_t = ["durable".to_string(), "volatile".to_string()])]
    modes: Vec<String>,
    /// Seed of the population and the transactions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also write the results to this directory: tatp.csv and tatp.json, a row per transaction
    /// type of each run.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Runs `petra-bench tatp`.
pub fn run(args: TatpArgs) -> Result<(), String> {
    let mix = Mix::parse(&args.mix)?;
    let modes: Vec<bool> = args
        .modes
        .iter()
        .map(|m| match m.as_str() {
            "durable" => Ok(false),
            "volatile" => Ok(true),
            other => Err(format!("unknown mode {other:?}: use durable or volatile")),
        })
        .collect::<Result<_, _>>()?;
    if args.subscribers == 0 || args.threads.contains(&0) {
        return Err("--subscribers and --threads must be at least 1".into());
    }
    let tmp = scratch()?;
    println!(
        "TATP, {} subscribers, {} mix, {} transactions per thread, pool files in {}",
        args.subscribers,
        args.mix,
        args.txs,
        tmp.path().display()
    );
    let progress = progress_bar(args.threads.len() * modes.len(), "runs");
    let mut rows = Vec::new();
    for &threads in &args.threads {
        for &volatile in &modes {
            let case = TatpCase {
                subscribers: args.subscribers,
                threads,
                txs_per_thread: args.txs,
                mix,
                seed: args.seed,
                volatile,
            };
            let mode = if volatile { "volatile" } else { "durable" };
            let path = tmp.path().join(format!("tatp-{threads}-{mode}.pool"));
            let r = run_case(&case, &path)?;
            let _ = std::fs::remove_file(&path);
            progress.inc(1);
            let run_rows = TatpRow::of(&case, &r);
            progress.suspend(|| {
                println!(
                    "\n{mode}, {threads} thread{}: {:.0} tx/s; populated in {:.2} s (rows: subscriber {}, access_info {}, special_facility {}, call_forwarding {})",
                    if threads == 1 { "" } else { "s" },
                    r.tx_per_sec,
                    r.populate_secs,
                    r.rows[0],
                    r.rows[1],
                    r.rows[2],
                    r.rows[3]
                );
                println!(
                    "{:<24} {:>10} {:>10} {:>12} {:>12}",
                    "transaction", "run", "success %", "specified %", "implied %"
                );
                for t in &run_rows {
                    println!(
                        "{:<24} {:>10} {:>10.2} {:>12.2} {:>12.2}",
                        t.transaction, t.run, t.success_pct, t.specified_pct, t.implied_pct
                    );
                }
            });
            rows.extend(run_rows);
        }
    }
    progress.finish_and_clear();
    if let Some(out) = &args.out {
        wrote(crate::report::write_rows(out, "tatp", &rows)?);
    }
    Ok(())
}
