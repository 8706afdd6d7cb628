//! Keys: fixed-width, order-preserving encodings into one or two words.
//!
//! Every structure is created for keys of one [`KeyWidth`]: a word (`u64`, byte arrays of up to
//! 8 bytes) or two (`u128`, byte arrays of up to 16 bytes, [`ShortKey`] byte strings of up to 15
//! bytes). A key reaches the engine as its [`Key::to_bits`], a `u128` whose numeric order is the
//! key's order, so the sorted structures sort and scan by it; a key of one word has its top 64
//! bits zero. A node of a two-word structure keeps the second word after the common header, and a
//! descriptor that names a two-word key stores 32-byte ops instead of 24: structures of one-word
//! keys pay nothing for the wider ones.
//!
//! The multi-dimensional list maps a key to 32 base-4 digits, so it takes one-word keys only.

use std::fmt;

/// How many words a structure's keys take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyWidth {
    /// One word: `u64`, `[u8; N]` for `N <= 8`.
    U64,
    /// Two words: `u128`, `[u8; N]` for `8 < N <= 16`, [`ShortKey`].
    U128,
}

/// A key type: a fixed-width value with an order-preserving encoding.
///
/// `a.cmp(&b) == a.to_bits().cmp(&b.to_bits())` for all `a`, `b`, and `from_bits(to_bits(k)) ==
/// k`. A key of [`KeyWidth::U64`] has `to_bits() <= u64::MAX`.
pub trait Key: Copy + Ord + fmt::Debug {
    /// The width of a structure that holds keys of this type.
    const WIDTH: KeyWidth;
    /// The key's encoding.
    fn to_bits(self) -> u128;
    /// The key an encoding stands for (`bits` came from [`to_bits`](Key::to_bits)).
    fn from_bits(bits: u128) -> Self;
}

impl Key for u64 {
    const WIDTH: KeyWidth = KeyWidth::U64;
    fn to_bits(self) -> u128 {
        self as u128
    }
    fn from_bits(bits: u128) -> Self {
        bits as u64
    }
}

impl Key for u128 {
    const WIDTH: KeyWidth = KeyWidth::U128;
    fn to_bits(self) -> u128 {
        self
    }
    fn from_bits(bits: u128) -> Self {
        bits
    }
}

/// Byte arrays, ordered lexicographically (as `[u8; N]` is): big-endian. `N` is at most 16 (a
/// larger `N` fails to compile where the width is used).
impl<const N: usize> Key for [u8; N] {
    const WIDTH: KeyWidth = match N {
        0..=8 => KeyWidth::U64,
        9..=16 => KeyWidth::U128,
        _ => panic!("a byte-array key holds at most 16 bytes"),
    };
    fn to_bits(self) -> u128 {
        let mut b = [0u8; 16];
        b[16 - N..].copy_from_slice(&self);
        u128::from_be_bytes(b)
    }
    fn from_bits(bits: u128) -> Self {
        let b = bits.to_be_bytes();
        let mut k = [0u8; N];
        k.copy_from_slice(&b[16 - N..]);
        k
    }
}

/// A byte string of at most [`ShortKey::MAX_LEN`] bytes as a two-word key, ordered as byte
/// strings are (lexicographically, a prefix first).
///
/// Encoding: the bytes from the most significant end, zero-padded, and the length in the least
/// significant byte. Two strings that differ at some position within both compare by that byte;
/// if one is a prefix of the other, the padding zeros compare equal to any zeros the longer one
/// has there, and the length byte puts the shorter one first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShortKey(u128);

impl ShortKey {
    /// The longest byte string a `ShortKey` holds.
    pub const MAX_LEN: usize = 15;

    /// The key for `bytes`, or `None` if it is longer than [`MAX_LEN`](ShortKey::MAX_LEN).
    pub fn new(bytes: &[u8]) -> Option<ShortKey> {
        if bytes.len() > Self::MAX_LEN {
            return None;
        }
        let mut b = [0u8; 16];
        b[..bytes.len()].copy_from_slice(bytes);
        b[15] = bytes.len() as u8;
        Some(ShortKey(u128::from_be_bytes(b)))
    }

    /// The byte string's length.
    pub fn len(&self) -> usize {
        self.0 as u8 as usize
    }

    /// Whether the byte string is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The byte string, in a fixed buffer: the first [`len`](ShortKey::len) bytes.
    pub fn to_array(&self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The byte string.
    pub fn to_vec(&self) -> Vec<u8> {
        self.to_array()[..self.len()].to_vec()
    }
}

impl fmt::Debug for ShortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ShortKey({:?})", String::from_utf8_lossy(&self.to_array()[..self.len()]))
    }
}

impl Key for ShortKey {
    const WIDTH: KeyWidth = KeyWidth::U128;
    fn to_bits(self) -> u128 {
        self.0
    }
    fn from_bits(bits: u128) -> Self {
        ShortKey(bits)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn round_trips_in_order<K: Key>(a: K, b: K) {
        assert_eq!(K::from_bits(a.to_bits()), a);
        assert_eq!(a.cmp(&b), a.to_bits().cmp(&b.to_bits()), "{a:?} vs {b:?}");
        if K::WIDTH == KeyWidth::U64 {
            assert!(a.to_bits() <= u64::MAX as u128);
        }
    }

    proptest! {
        #[test]
        fn encodings_keep_order(a: u128, b: u128, x: [u8; 5], y: [u8; 5], p: [u8; 12], q: [u8; 12]) {
            round_trips_in_order(a as u64, b as u64);
            round_trips_in_order(a, b);
            round_trips_in_order(x, y);
            round_trips_in_order(p, q);
        }

        #[test]
        fn short_keys_sort_as_byte_strings(
            a in proptest::collection::vec(0u8..4, 0..=15),
            b in proptest::collection::vec(0u8..4, 0..=15),
        ) {
            // Small alphabets with zeros: prefixes and zero padding meet often.
            let (ka, kb) = (ShortKey::new(&a).unwrap(), ShortKey::new(&b).unwrap());
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            prop_assert_eq!(ka.to_bits().cmp(&kb.to_bits()), a.cmp(&b));
            prop_assert_eq!(ka.to_vec(), a);
        }
    }

    #[test]
    fn widths() {
        assert_eq!(<[u8; 8]>::WIDTH, KeyWidth::U64);
        assert_eq!(<[u8; 9]>::WIDTH, KeyWidth::U128);
        assert_eq!(<[u8; 16]>::WIDTH, KeyWidth::U128);
        assert!(ShortKey::new(&[7; 16]).is_none());
        assert_eq!(ShortKey::new(b"").unwrap().len(), 0);
    }
}
