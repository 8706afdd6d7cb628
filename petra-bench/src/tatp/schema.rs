//! TATP's tables as PETRA hash maps ([`Schema`], laid out as the [module docs](super) say) and its
//! seven transactions on them.

use petra::mem::MmapMem;
use petra::{Engine, Handle, KeyWidth, StructId, StructureKind, Transaction, Values};
use rand::Rng;

use super::population::{CallForwarding, Rows, SpecialFacility, Subscriber, nonuniform_s_id};
use super::{
    DELETE_CALL_FORWARDING, GET_ACCESS_DATA, GET_NEW_DESTINATION, GET_SUBSCRIBER_DATA, INSERT_CALL_FORWARDING,
    UPDATE_LOCATION, UPDATE_SUBSCRIBER_DATA,
};
use crate::error::{BenchError, Result};

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
pub(crate) struct Schema {
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
    pub(crate) fn create(engine: &Engine<MmapMem>, n: u64) -> Result<Schema> {
        let make = |buckets: u64, values| {
            engine.create_structure(StructureKind::HashMap { buckets: buckets.max(1) }, KeyWidth::U64, values)
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
    pub(crate) fn insert(&self, h: &mut Handle<MmapMem>, tx: &mut Transaction, rows: &Rows) -> Result<()> {
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
            None => Err(BenchError::Check(format!("subscriber {s} could not be inserted"))),
        }
    }

    /// Runs one transaction of type `kind` with the specification's random parameters; whether
    /// it succeeded.
    pub(crate) fn transaction(
        &self,
        h: &mut Handle<MmapMem>,
        tx: &mut Transaction,
        rng: &mut impl Rng,
        n: u64,
        kind: usize,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let s_id = nonuniform_s_id(rng, n);
        // The lookup by number: sub_nbr is s_id's 15 digits.
        let by_number = |h: &mut Handle<MmapMem>, tx: &mut Transaction| -> Result<Option<u64>> {
            tx.clear().get(self.sub_nbr, s_id);
            Ok(decided(h, tx)?.and_then(|r| r[0]))
        };
        match kind {
            GET_SUBSCRIBER_DATA => {
                tx.clear().find(self.subscriber, s_id).find(self.bit_1, s_id).find(self.vlr, s_id);
                let read = h.execute_decided(tx, |results, blobs| {
                    blobs.read_into(results[0].expect("a Find that committed found its key"), buf)
                })?;
                Ok(match read {
                    Ok(value) => {
                        value.map_err(petra::EngineError::from)?;
                        buf.len() == 24
                    }
                    Err(_) => false,
                })
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
            other => Err(BenchError::Check(format!("unknown transaction type {other}"))),
        }
    }

    /// Rows in each table: subscriber, access_info, special_facility, call_forwarding.
    pub(crate) fn cardinalities(&self, engine: &Engine<MmapMem>) -> Result<[usize; 4]> {
        let count = |s| engine.entries::<u64>(s).map(|e| e.len());
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
fn decided(h: &mut Handle<MmapMem>, tx: &Transaction) -> Result<Option<Vec<Option<u64>>>> {
    Ok(h.execute_decided(tx, |results, _| results.to_vec())?.ok())
}
