//! How a store's byte keys and values sit in the engine's two-word keys and blobs.
//!
//! A key of at most [`ShortKey::MAX_LEN`] (15) bytes is its own engine key, the [`ShortKey`]
//! encoding (bytes from the top, zero-padded, the length 0 to 15 in the low byte), and its value
//! is the entry's blob, as written. A longer key shares an engine key, a *bucket*, with the other
//! long keys that map to it; the low byte of a bucket key is [`BUCKET`] (16), which no short key
//! has, and the bucket's blob lists its entries, sorted by key:
//!
//! ```text
//! u32 count, then count times: u32 key length, u32 value length, key bytes, value bytes
//! ```
//!
//! (integers little-endian). Which long keys share a bucket depends on the store's order:
//! - **sorted**: the key's first 15 bytes. A short key that is a prefix of a long key's first 15
//!   bytes sorts before the bucket (its length byte is below 16), and keys that differ within
//!   their first 15 bytes sort by that byte, so the engine's key order is the byte-string order
//!   of the store's keys, buckets holding the rest. Long keys that agree on their first 15 bytes
//!   cost in proportion to how many share them.
//! - **unsorted**: 120 bits of the key's XXH3-128 hash, so buckets hold one entry but for
//!   collisions, which cost time, never correctness (a bucket compares whole keys).

use petra::ShortKey;

/// The low byte of a bucket's engine key.
pub(crate) const BUCKET: u8 = 16;

/// Bytes a bucket spends on itself and on each entry besides the key and value bytes.
pub(crate) const BUCKET_HEADER: usize = 4;
pub(crate) const ENTRY_HEADER: usize = 8;

/// How a store places its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Engine key order is key order (the skiplist).
    Sorted,
    /// Engine keys are hashes of long keys (the hash map).
    Hashed,
}

/// Where a key lives: its own engine key, or a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A short key: the engine key is the key.
    Own(u128),
    /// A long key: the engine key of its bucket.
    Bucket(u128),
}

impl Slot {
    /// The engine key.
    pub(crate) fn bits(self) -> u128 {
        match self {
            Slot::Own(k) | Slot::Bucket(k) => k,
        }
    }
}

impl Placement {
    /// The slot of `key`.
    pub(crate) fn slot(self, key: &[u8]) -> Slot {
        if let Some(short) = ShortKey::new(key) {
            return Slot::Own(petra::Key::to_bits(short));
        }
        let top = match self {
            Placement::Sorted => {
                let mut b = [0u8; 16];
                b[..15].copy_from_slice(&key[..15]);
                u128::from_be_bytes(b)
            }
            Placement::Hashed => xxhash_rust::xxh3::xxh3_128(key) & !0xFF,
        };
        Slot::Bucket(top | BUCKET as u128)
    }

    /// The least engine key a key `>= key` can have (sorted placement: the slot is monotone).
    pub(crate) fn lower_bound(self, key: &[u8]) -> u128 {
        match self {
            Placement::Sorted => self.slot(key).bits(),
            Placement::Hashed => 0,
        }
    }

    /// The greatest engine key a key `<= key` can have.
    pub(crate) fn upper_bound(self, key: &[u8]) -> u128 {
        match self {
            Placement::Sorted => self.slot(key).bits(),
            Placement::Hashed => u128::MAX,
        }
    }
}

/// Whether an engine key is a bucket's.
pub(crate) fn is_bucket(bits: u128) -> bool {
    bits as u8 == BUCKET
}

/// Whether an engine key is a short key's as [`ShortKey`] encodes it: a length of at most 15 in
/// the low byte and zeroes in the bytes past the length.
pub(crate) fn is_short_key(bits: u128) -> bool {
    let len = bits as u8 as usize;
    // The key bytes sit from the top: bytes `len..15` of the big-endian array are bits
    // `8..8 * (16 - len)`.
    len <= ShortKey::MAX_LEN && (bits >> 8) & ((1u128 << (8 * (15 - len))) - 1) == 0
}

/// The key an engine key of a short key stands for.
pub(crate) fn short_key(bits: u128, out: &mut Vec<u8>) {
    let k: ShortKey = petra::Key::from_bits(bits);
    out.clear();
    out.extend_from_slice(&k.to_array()[..k.len()]);
}

/// A bucket's entries, decoded: borrowed ranges of its blob.
pub(crate) struct Bucket<'a> {
    bytes: &'a [u8],
}

impl<'a> Bucket<'a> {
    /// Reads a bucket blob, checking that it parses whole: its entries within it, in key order
    /// (see also [`of_slot`](Bucket::of_slot)). A blob that fails is damage (recovery checks a value against the place
    /// it was written to, not against the key that names it: after a power loss without safe
    /// points a bucket may name a block that another value took since): why, as text.
    pub(crate) fn new(bytes: &'a [u8]) -> Result<Bucket<'a>, String> {
        let word = |i: usize| -> Result<usize, String> {
            let w =
                bytes.get(i..i + 4).ok_or_else(|| format!("a bucket of {} bytes ends inside an entry", bytes.len()))?;
            Ok(u32::from_le_bytes(w.try_into().expect("four bytes")) as usize)
        };
        let count = word(0)?;
        let mut at = BUCKET_HEADER;
        let mut last: Option<&[u8]> = None;
        for i in 0..count {
            let (klen, vlen) = (word(at)?, word(at + 4)?);
            let end = (at + ENTRY_HEADER).checked_add(klen).and_then(|e| e.checked_add(vlen));
            let Some(end) = end.filter(|&e| e <= bytes.len()) else {
                return Err(format!("entry {i} of {count} runs past the bucket's {} bytes", bytes.len()));
            };
            let key = &bytes[at + ENTRY_HEADER..at + ENTRY_HEADER + klen];
            if last.is_some_and(|l| l >= key) {
                return Err(format!("entry {i}'s key is not above the one before it"));
            }
            last = Some(key);
            at = end;
        }
        if at != bytes.len() {
            return Err(format!("{} bytes after the bucket's {count} entries", bytes.len() - at));
        }
        Ok(Bucket { bytes })
    }

    /// Checks that every key of the bucket belongs in the slot `bits` under `placement`.
    pub(crate) fn of_slot(self, placement: Placement, bits: u128) -> Result<Bucket<'a>, String> {
        match self.entries().position(|(k, _)| placement.slot(k).bits() != bits) {
            Some(i) => Err(format!("entry {i}'s key belongs in another slot")),
            None => Ok(self),
        }
    }

    /// The entries, in key order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        // `new` checked that every entry lies within the blob.
        let b = self.bytes;
        let count = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
        let mut at = BUCKET_HEADER;
        (0..count).map(move |_| {
            let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap()) as usize;
            let (klen, vlen) = (word(at), word(at + 4));
            let key = &b[at + ENTRY_HEADER..at + ENTRY_HEADER + klen];
            let value = &b[at + ENTRY_HEADER + klen..at + ENTRY_HEADER + klen + vlen];
            at += ENTRY_HEADER + klen + vlen;
            (key, value)
        })
    }

    /// The value of `key`, if the bucket holds it.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&'a [u8]> {
        self.entries().find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// A bucket's entries to be written back, owned.
#[derive(Debug, Default)]
pub(crate) struct BucketEdit {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

impl BucketEdit {
    /// The entries of a bucket.
    pub(crate) fn of(bucket: &Bucket<'_>) -> BucketEdit {
        BucketEdit { entries: bucket.entries().map(|(k, v)| (k.to_vec(), v.to_vec())).collect() }
    }

    /// Sets `key` to `value`, or removes it (`None`). Returns whether `key` was there.
    pub(crate) fn set(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        let at = self.entries.binary_search_by(|(k, _)| k.as_slice().cmp(key));
        let was = at.is_ok();
        match (at, value) {
            (Ok(i), Some(v)) => self.entries[i].1 = v.to_vec(),
            (Ok(i), None) => {
                self.entries.remove(i);
            }
            (Err(i), Some(v)) => self.entries.insert(i, (key.to_vec(), v.to_vec())),
            (Err(_), None) => {}
        }
        was
    }

    /// Whether no entry is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bytes the bucket's blob takes.
    pub(crate) fn encoded_len(&self) -> usize {
        BUCKET_HEADER + self.entries.iter().map(|(k, v)| ENTRY_HEADER + k.len() + v.len()).sum::<usize>()
    }

    /// The bucket's blob.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(self.encoded_len());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (k, v) in &self.entries {
            out.extend_from_slice(&(k.len() as u32).to_le_bytes());
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(v);
        }
    }
}

/// Whether `key` lies within the bounds.
pub(crate) fn within(key: &[u8], lo: std::ops::Bound<&[u8]>, hi: std::ops::Bound<&[u8]>) -> bool {
    use std::ops::Bound::*;
    let above = match lo {
        Included(b) => key >= b,
        Excluded(b) => key > b,
        Unbounded => true,
    };
    let below = match hi {
        Included(b) => key <= b,
        Excluded(b) => key < b,
        Unbounded => true,
    };
    above && below
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The sorted placement is monotone: `a <= b` implies `slot(a) <= slot(b)`, and the
        /// slots of distinct short keys differ. Small alphabets with zeros make prefixes, zero
        /// padding and shared 15-byte heads meet often.
        #[test]
        fn sorted_slots_keep_key_order(
            a in proptest::collection::vec(0u8..3, 0..=20),
            b in proptest::collection::vec(0u8..3, 0..=20),
        ) {
            let (sa, sb) = (Placement::Sorted.slot(&a), Placement::Sorted.slot(&b));
            if a <= b {
                prop_assert!(sa.bits() <= sb.bits(), "{a:?} {b:?}");
            } else {
                prop_assert!(sa.bits() >= sb.bits(), "{a:?} {b:?}");
            }
            if let (Slot::Own(x), Slot::Own(y)) = (sa, sb) {
                prop_assert_eq!(x == y, a == b);
            }
            prop_assert_eq!(matches!(sa, Slot::Bucket(_)), a.len() > 15);
            prop_assert_eq!(is_bucket(sa.bits()), a.len() > 15);
        }

        /// Any bytes: a bucket that parses reads without a panic, and one that does not is an
        /// error, never a slice out of range.
        #[test]
        fn any_bytes_parse_as_a_bucket_or_are_refused(bytes in proptest::collection::vec(0u8..24, 0..80)) {
            if let Ok(b) = Bucket::new(&bytes) {
                let read: usize = b.entries().map(|(k, v)| ENTRY_HEADER + k.len() + v.len()).sum();
                prop_assert_eq!(read + BUCKET_HEADER, bytes.len());
            }
        }

        #[test]
        fn buckets_round_trip(
            edits in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..4), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..6))), 0..20),
        ) {
            let mut model = std::collections::BTreeMap::new();
            let mut edit = BucketEdit::default();
            let mut blob = Vec::new();
            for (k, v) in &edits {
                // Write back and re-read after every edit, as a store does.
                edit = if blob.is_empty() { BucketEdit::default() } else { BucketEdit::of(&Bucket::new(&blob).unwrap()) };
                edit.set(k, v.as_deref());
                match v {
                    Some(v) => { model.insert(k.clone(), v.clone()); }
                    None => { model.remove(k); }
                }
                edit.encode(&mut blob);
                prop_assert_eq!(blob.len(), edit.encoded_len());
            }
            let got: Vec<(Vec<u8>, Vec<u8>)> = if blob.is_empty() { vec![] } else {
                Bucket::new(&blob).unwrap().entries().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
            };
            prop_assert_eq!(got, model.into_iter().collect::<Vec<_>>());
            prop_assert_eq!(edit.is_empty(), blob.len() <= BUCKET_HEADER);
        }
    }

    #[test]
    fn hashed_buckets_never_meet_short_keys() {
        let long = vec![b'x'; 40];
        let slot = Placement::Hashed.slot(&long);
        assert!(matches!(slot, Slot::Bucket(_)) && is_bucket(slot.bits()));
        for len in 0..=15 {
            assert!(!is_bucket(Placement::Hashed.slot(&long[..len]).bits()));
        }
        let mut out = Vec::new();
        short_key(Placement::Hashed.slot(b"node7").bits(), &mut out);
        assert_eq!(out, b"node7");
    }

    proptest! {
        /// Every short key's engine key is one, and no bucket's; a byte set past a short key's
        /// length, or a length above 15, is not.
        #[test]
        fn short_keys_are_told_from_other_engine_keys(
            key in proptest::collection::vec(any::<u8>(), 0..=15),
            long in proptest::collection::vec(any::<u8>(), 16..40),
            at in 0usize..15,
            len in 16u8..=255,
        ) {
            let bits = petra::Key::to_bits(ShortKey::new(&key).unwrap());
            prop_assert!(is_short_key(bits));
            prop_assert!(!is_short_key(Placement::Sorted.slot(&long).bits()));
            prop_assert!(!is_short_key(Placement::Hashed.slot(&long).bits()));
            prop_assert!(!is_short_key(bits & !0xFF | len as u128));
            if at >= key.len() {
                let mut b = bits.to_be_bytes();
                b[at] = 1;
                prop_assert!(!is_short_key(u128::from_be_bytes(b)), "{key:?}, byte {at} set");
            }
        }
    }

    /// A blob that is not a whole bucket, or a bucket in the wrong slot, is refused with why.
    #[test]
    fn a_bucket_that_does_not_hold_is_refused() {
        let (k1, k2) = (b"a long key, number one".to_vec(), b"a long key, number two".to_vec());
        let mut edit = BucketEdit::default();
        edit.set(&k1, Some(b"v1"));
        edit.set(&k2, Some(b"v2"));
        let mut blob = Vec::new();
        edit.encode(&mut blob);
        let slot = Placement::Sorted.slot(&k1).bits();
        assert!(Bucket::new(&blob).unwrap().of_slot(Placement::Sorted, slot).is_ok());
        let err = |bytes: &[u8]| Bucket::new(bytes).err().expect("refused");
        assert!(err(&blob[..blob.len() - 1]).contains("runs past"));
        assert!(err(&[blob.as_slice(), b"x"].concat()).contains("after the bucket"));
        assert!(err(&[0, 0]).contains("ends inside"));
        // The entries swapped: out of key order.
        let (first, second) = blob[BUCKET_HEADER..].split_at(ENTRY_HEADER + k1.len() + 2);
        assert!(err(&[&blob[..BUCKET_HEADER], second, first].concat()).contains("not above"));
        // A value's bytes where a bucket was: a count far beyond what the bytes hold.
        assert!(err(&[0xFF; 100]).contains("runs past"));
        // A bucket of another slot (hashed placement: each long key has a slot of its own).
        let other = Placement::Hashed.slot(&k2).bits();
        let mut one = BucketEdit::default();
        one.set(&k1, Some(b"v1"));
        one.encode(&mut blob);
        let refused = Bucket::new(&blob).unwrap().of_slot(Placement::Hashed, other).err().expect("refused");
        assert!(refused.contains("another slot"), "{refused}");
    }
}
