//! The check words and value hashes of the pool format: XXH3 (64-bit, by `xxhash-rust`), and
//! CRC-32 (by `crc32fast`) for long values.
//!
//! A check word covers a sequence of words that must be read back whole (a descriptor's persisted
//! part, a node's record); a value hash covers a byte value (a blob), carried in the op word that
//! writes it. Both are part of the on-media format: changing either is a new format version.

/// Values longer than this are hashed by CRC-32, shorter ones by XXH3 (see [`value_hash`]).
pub(crate) const SHORT_VALUE: usize = 256;

/// The hash of a byte value, which every read of it checks: XXH3 (64-bit) of its bytes if it has
/// at most [`SHORT_VALUE`] of them; else their CRC-32 in the high half and their length in the
/// low. Its high 40 bits are what an op word carries of the value it writes, its high 32 what
/// the value's blob header keeps: the whole CRC, for a long value.
///
/// Why two: a read of a value is a copy and a check. XXH3 is the faster hash of a short value,
/// but CRC-32 folded with carry-less multiplies (`crc32fast`, PCLMULQDQ where the CPU has it)
/// checks a long one in about the time its copy takes: on this project's machine, 46 ns for
/// 1 160 bytes and 90 ns for 4 096, against XXH3's 126 and 393 (a metric store's sample of 144
/// metrics is about 1 200 bytes, read at every query).
pub(crate) fn value_hash(data: &[u8]) -> u64 {
    if data.len() <= SHORT_VALUE {
        return xxhash_rust::xxh3::xxh3_64(data);
    }
    ((crc32fast::hash(data) as u64) << 32) | (data.len() as u64 & 0xFFFF_FFFF)
}

/// The hash of a byte value that an op word carries (40 bits) when its [`value_hash`] is `hash`.
pub(crate) fn op_hash(hash: u64) -> u64 {
    hash >> 24
}

/// The check word of a sequence of words (a descriptor's persisted part, a node's record): XXH3
/// (64-bit) of their little-endian bytes, with the low bit set so that a zeroed check word is
/// never valid.
pub(crate) fn check_words(words: impl IntoIterator<Item = u64>) -> u64 {
    // Up to 18 words (a descriptor of up to four ops) hashed from a buffer on the stack; longer
    // sequences through the streaming hasher, which gives the same hash.
    const SMALL: usize = 18;
    let mut buf = [0u8; SMALL * 8];
    let mut len = 0;
    let mut words = words.into_iter();
    for w in words.by_ref() {
        buf[len..len + 8].copy_from_slice(&w.to_le_bytes());
        len += 8;
        if len == buf.len() {
            break;
        }
    }
    let mut rest = words.peekable();
    if rest.peek().is_none() {
        return xxhash_rust::xxh3::xxh3_64(&buf[..len]) | 1;
    }
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    h.update(&buf);
    for w in rest {
        h.update(&w.to_le_bytes());
    }
    h.digest() | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_hash_is_xxh3_up_to_the_short_length_and_crc32_with_the_length_beyond() {
        for len in [0, 1, 100, SHORT_VALUE - 1, SHORT_VALUE, SHORT_VALUE + 1, 1160, 4096, 70_000] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let want = if len <= SHORT_VALUE {
                xxhash_rust::xxh3::xxh3_64(&data)
            } else {
                ((crc32fast::hash(&data) as u64) << 32) | len as u64
            };
            assert_eq!(value_hash(&data), want, "{len} bytes");
        }
    }

    #[test]
    fn every_flipped_bit_of_a_value_changes_what_its_header_and_its_op_word_keep() {
        for len in [1, 100, SHORT_VALUE, SHORT_VALUE + 1, 1160] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let h = value_hash(&data);
            for byte in 0..len {
                for bit in 0..8 {
                    let mut d = data.clone();
                    d[byte] ^= 1 << bit;
                    let g = value_hash(&d);
                    assert_ne!(g >> 32, h >> 32, "{len} bytes, bit {bit} of byte {byte}: the header's 32 bits");
                    assert_ne!(op_hash(g), op_hash(h), "{len} bytes, bit {bit} of byte {byte}: the op word's 40 bits");
                }
            }
        }
    }

    #[test]
    fn a_check_word_is_xxh3_of_the_words_bytes_with_the_low_bit_set() {
        // Both ways of hashing (from the stack buffer, and streaming past it) are the format's.
        for n in 0..40u64 {
            let words: Vec<u64> = (0..n).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(check_words(words.iter().copied()), xxhash_rust::xxh3::xxh3_64(&bytes) | 1, "{n} words");
        }
    }
}
