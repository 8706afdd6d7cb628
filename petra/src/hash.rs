//! The check words and value hashes of the pool format: XXH3 (64-bit), by `xxhash-rust`.
//!
//! A check word covers a sequence of words that must be read back whole (a descriptor's persisted
//! part, a node's record); a value hash covers a byte value (a blob), carried in the op word that
//! writes it. Both are part of the on-media format: changing either is a new format version.

/// The hash of a byte value: XXH3 (64-bit) of its bytes. Its high 40 bits are what an op word
/// carries of the value it writes, its high 32 what the value's blob header keeps.
pub(crate) fn value_hash(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
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
    fn a_check_word_is_xxh3_of_the_words_bytes_with_the_low_bit_set() {
        // Both ways of hashing (from the stack buffer, and streaming past it) are the format's.
        for n in 0..40u64 {
            let words: Vec<u64> = (0..n).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(check_words(words.iter().copied()), xxhash_rust::xxh3::xxh3_64(&bytes) | 1, "{n} words");
        }
    }
}
