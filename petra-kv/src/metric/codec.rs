//! How the metric store's records are bytes: a sample's blob and its key in the history, and the
//! catalog's keys and records.
//!
//! A sample is a blob of 8-byte words, little-endian:
//!
//! ```text
//! word 0   timestamp (ns since the Unix epoch)
//! word 1   duration (ns)
//! word 2   generation
//! word 3   flags: 1 consistent, 2 a previous sample exists
//! word 4   the previous sample's timestamp (0 if none)
//! word 5.. every metric's elements in the schema's order, one word each: unsigned as is,
//!          signed in two's complement, floating point as the bits of an f64
//! ```
//!
//! Its key in the history is the set id in the high 64 bits and the timestamp in the low ones, so
//! a set's samples are one key range, in time order. A catalog key is a tag in its top byte (1: a
//! schema, 2: a set) and the schema's number or the set's id in its low 32 bits; its record is the
//! schema or the set's [`SetInfo`] as JSON.

use super::schema::{Sample, Scalar, Schema, SetId, SetInfo, Value};

/// Catalog key prefixes.
const SCHEMA_TAG: u64 = 1 << 56;
const SET_TAG: u64 = 2 << 56;
/// Words of a sample before its values.
const HEADER_WORDS: usize = 5;
const FLAG_CONSISTENT: u64 = 1;
const FLAG_PREVIOUS: u64 = 2;

/// The key of set `set`'s sample at `timestamp` in the history.
pub(super) fn history_key(set: SetId, timestamp: u64) -> u128 {
    (set.0 as u128) << 64 | timestamp as u128
}

/// The timestamp of the sample a history key names.
pub(super) fn history_timestamp(key: u128) -> u64 {
    key as u64
}

/// The bytes of the blob of a sample of `schema`.
pub(super) fn sample_len(schema: &Schema) -> usize {
    8 * (HEADER_WORDS + schema.words())
}

/// Encodes `sample` into `out` (replacing what it held), with the timestamp of the sample before
/// it in its set's history, if there is one.
pub(super) fn encode(sample: &Sample, previous: Option<u64>, out: &mut Vec<u8>) {
    let mut flags = if sample.consistent { FLAG_CONSISTENT } else { 0 };
    let prev = previous.map_or(0, |ts| {
        flags |= FLAG_PREVIOUS;
        ts
    });
    out.clear();
    for x in [sample.timestamp, sample.duration, sample.generation, flags, prev] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    for v in &sample.values {
        match v {
            Value::Array(items) => items.iter().for_each(|i| out.extend_from_slice(&Scalar::encode(i).to_le_bytes())),
            v => out.extend_from_slice(&Scalar::encode(v).to_le_bytes()),
        }
    }
}

/// The generation of the sample a blob holds.
pub(super) fn generation(bytes: &[u8]) -> u64 {
    word(bytes, 2)
}

/// The timestamp of the sample before the one a blob holds, if there is one.
pub(super) fn previous_timestamp(bytes: &[u8]) -> Option<u64> {
    (word(bytes, 3) & FLAG_PREVIOUS != 0).then(|| word(bytes, 4))
}

/// Word `i` of a sample's blob.
fn word(bytes: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
}

/// Damage unless a sample's blob is `len` bytes, its schema's sample length: the decoders read
/// it at the schema's offsets. (Its check ties a blob to its place, not to its key: after a power
/// loss without safe points a history entry may name a block another value took since.)
pub(super) fn check_len(bytes: &[u8], len: usize) -> Result<(), BadLength> {
    if bytes.len() == len {
        return Ok(());
    }
    Err(BadLength { found: bytes.len(), len })
}

/// A sample's blob of the wrong length: see [`check_len`].
#[derive(Debug)]
pub(super) struct BadLength {
    found: usize,
    len: usize,
}

impl BadLength {
    /// The damage, at the blob's offset `at`.
    pub(super) fn at(self, at: u64) -> petra::error::Damage {
        let what = format!("a sample of {} bytes, where its schema's take {}", self.found, self.len);
        petra::error::Damage { what, at }
    }
}

/// Decodes a sample from its blob.
pub(super) fn decode(schema: &Schema, bytes: &[u8]) -> Sample {
    let values = values(schema, bytes).collect();
    let mut sample = Sample { timestamp: 0, duration: 0, generation: 0, consistent: false, values };
    decode_header(bytes, &mut sample);
    sample
}

/// Decodes a sample from its blob into `sample`, reusing its values' allocation, and if
/// `arrays` (the schema has array metrics) an array metric's too, where `sample` holds an array
/// in its place.
pub(super) fn decode_into(schema: &Schema, bytes: &[u8], sample: &mut Sample, arrays: bool) {
    decode_header(bytes, sample);
    if !arrays {
        sample.values.clear();
        sample.values.extend(values(schema, bytes));
        return;
    }
    sample.values.truncate(schema.metrics.len());
    let mut at = HEADER_WORDS;
    for (k, m) in schema.metrics.iter().enumerate() {
        let n = m.words();
        let items = (at..at + n).map(|i| m.scalar.decode(word(bytes, i)));
        at += n;
        let value = match (m.array, sample.values.get_mut(k)) {
            (Some(_), Some(Value::Array(old))) => {
                old.clear();
                old.extend(items);
                continue;
            }
            (Some(_), _) => Value::Array(items.collect()),
            (None, _) => m.scalar.decode(word(bytes, at - 1)),
        };
        match sample.values.get_mut(k) {
            Some(slot) => *slot = value,
            None => sample.values.push(value),
        }
    }
}

/// A sample's header words: timestamp, duration, generation, flags.
fn decode_header(bytes: &[u8], sample: &mut Sample) {
    sample.timestamp = word(bytes, 0);
    sample.duration = word(bytes, 1);
    sample.generation = word(bytes, 2);
    sample.consistent = word(bytes, 3) & FLAG_CONSISTENT != 0;
}

/// The values of a sample's blob, in the schema's order. Collected or extended in one piece:
/// a push per value made a single read twice as slow, and decoding each value in a separate
/// function made a range into a reused `Vec` twice as slow (`petra-bench metrics`).
fn values<'a>(schema: &'a Schema, bytes: &'a [u8]) -> impl ExactSizeIterator<Item = Value> + 'a {
    let mut at = HEADER_WORDS;
    schema.metrics.iter().map(move |m| match m.array {
        None => {
            at += 1;
            m.scalar.decode(word(bytes, at - 1))
        }
        Some(n) => {
            let items = (at..at + n as usize).map(|i| m.scalar.decode(word(bytes, i))).collect();
            at += n as usize;
            Value::Array(items)
        }
    })
}

impl Scalar {
    /// The word of a scalar value.
    fn encode(v: &Value) -> u64 {
        match *v {
            Value::U(x) => x,
            Value::S(x) => x as u64,
            Value::F(x) => x.to_bits(),
            Value::Array(_) => unreachable!("arrays are encoded element by element"),
        }
    }

    /// The value of a word of this type.
    fn decode(self, w: u64) -> Value {
        match self {
            Scalar::U8 | Scalar::U16 | Scalar::U32 | Scalar::U64 => Value::U(w),
            Scalar::S8 | Scalar::S16 | Scalar::S32 | Scalar::S64 => Value::S(w as i64),
            Scalar::F32 | Scalar::F64 => Value::F(f64::from_bits(w)),
        }
    }
}

/// The catalog key of the schema numbered `n` (in the order they were added).
pub(super) fn schema_key(n: u64) -> u64 {
    SCHEMA_TAG | n
}

/// The catalog key of set `id`.
pub(super) fn set_key(id: SetId) -> u64 {
    SET_TAG | id.0 as u64
}

/// Whether a catalog key is a schema's.
pub(super) fn is_schema_key(key: u64) -> bool {
    key & !0xFFFF_FFFF == SCHEMA_TAG
}

/// The set a catalog key is of, if it is a set's.
pub(super) fn set_of_key(key: u64) -> Option<SetId> {
    (key & !0xFFFF_FFFF == SET_TAG).then_some(SetId(key as u32))
}

/// The catalog record of `schema`.
pub(super) fn schema_record(schema: &Schema) -> Vec<u8> {
    serde_json::to_vec(schema).expect("a schema serialises")
}

/// The catalog record of set `info`.
pub(super) fn set_record(info: &SetInfo) -> Vec<u8> {
    serde_json::to_vec(info).expect("a set record serialises")
}

/// The schema a catalog record holds.
pub(super) fn read_schema(bytes: &[u8]) -> serde_json::Result<Schema> {
    serde_json::from_slice(bytes)
}

/// The set a catalog record holds.
pub(super) fn read_set(bytes: &[u8]) -> serde_json::Result<SetInfo> {
    serde_json::from_slice(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric::Metric;

    fn schema() -> Schema {
        let mut cpus = Metric::data("cpus", Scalar::U16);
        cpus.array = Some(3);
        Schema {
            name: "s".into(),
            metrics: vec![
                Metric::meta("id", Scalar::U64),
                cpus,
                Metric::data("t", Scalar::S32),
                Metric::data("l", Scalar::F64),
            ],
        }
    }

    fn sample() -> Sample {
        Sample {
            timestamp: 7,
            duration: 2,
            generation: 3,
            consistent: true,
            values: vec![
                Value::U(12),
                Value::Array(vec![Value::U(1), Value::U(2), Value::U(3)]),
                Value::S(-5),
                Value::F(0.5),
            ],
        }
    }

    #[test]
    fn a_sample_is_its_header_then_its_elements_as_little_endian_words() {
        let mut blob = Vec::new();
        encode(&sample(), Some(4), &mut blob);
        let words: Vec<u64> = blob.chunks(8).map(|w| u64::from_le_bytes(w.try_into().unwrap())).collect();
        assert_eq!(words, [7, 2, 3, 1 | 2, 4, 12, 1, 2, 3, -5i64 as u64, 0.5f64.to_bits()]);
        assert_eq!(blob.len(), sample_len(&schema()));
        assert_eq!((generation(&blob), previous_timestamp(&blob)), (3, Some(4)));
        assert_eq!(decode(&schema(), &blob), sample());

        encode(&Sample { consistent: false, ..sample() }, None, &mut blob);
        assert_eq!(&blob[24..40], [0; 16]);
        assert_eq!(previous_timestamp(&blob), None);
        let mut reused = sample();
        decode_into(&schema(), &blob, &mut reused, true);
        assert_eq!(reused, Sample { consistent: false, ..sample() });
    }

    /// Only a blob of the schema's sample length passes `check_len`, and any bytes of that length
    /// decode without a panic (the decoders read at the schema's offsets).
    #[test]
    fn only_a_blob_of_the_sample_length_is_decoded() {
        let len = sample_len(&schema());
        for n in [0, 8, HEADER_WORDS * 8, len - 1, len + 1, 7049] {
            let err = check_len(&vec![0xA5; n], len).expect_err("refused").at(64);
            assert_eq!((err.at, err.what.contains(&format!("{n} bytes"))), (64, true), "{}", err.what);
        }
        let bytes: Vec<u8> = (0..len).map(|i| (i * 37) as u8).collect();
        check_len(&bytes, len).unwrap();
        let mut reused = sample();
        decode_into(&schema(), &bytes, &mut reused, true);
        assert_eq!(decode(&schema(), &bytes), reused);
    }

    #[test]
    fn keys_say_what_they_name() {
        assert_eq!(history_timestamp(history_key(SetId(9), 77)), 77);
        assert!(history_key(SetId(1), u64::MAX) < history_key(SetId(2), 0));
        assert!(is_schema_key(schema_key(5)) && set_of_key(schema_key(5)).is_none());
        assert_eq!(set_of_key(set_key(SetId(5))), Some(SetId(5)));
        assert!(!is_schema_key(set_key(SetId(5))));
        let s = schema();
        assert_eq!(read_schema(&schema_record(&s)).unwrap(), s);
    }
}
