//! The pool header, the root table and the chunk table: their byte layout on the media.
//!
//! All integers are little-endian. The file is laid out as
//!
//! ```text
//! [0, 4096)                      header page (below)
//! [4096, data_off)               chunk table: one u64 per chunk, `chunk_capacity` entries,
//!                                padded to a page
//! [data_off, data_off + n*chunk) chunks 0..n; the file always ends on a chunk boundary
//! ```
//!
//! Header page:
//!
//! ```text
//! offset size  field                      written
//!      0    8  magic "PETRAPOL"           once, last step of create
//!      8    4  format version             once: FORMAT_VERSION
//!     12    4  header size (4096)         once
//!     16    8  chunk size (power of two)  once
//!     24    8  chunk table offset (4096)  once
//!     32    8  chunk capacity (entries)   once: the maximum size is data_off + capacity * chunk
//!     40    8  data offset                once
//!     48   16  pool uuid                  once
//!     64    8  creation time (Unix s)     once
//!     72   48  reserved, zero
//!    120    4  CRC-32 of bytes [0, 120)   once
//!    124    4  reserved, zero
//!    128   32  state line, first copy     (below) the copy that decides
//!    160   32  reserved, zero
//!    192   32  state line, second copy    (below) covers the first when that one fails its check
//!    224  800  reserved, zero
//!   1024 3072  root table: 48 entries of 64 bytes (one cache line each)
//! ```
//!
//! State line copy (32 bytes, the two copies on lines of their own):
//!
//! ```text
//!      0    8  shutdown word              CLEAN_SHUTDOWN after a clean close, 0 once in use
//!      8   16  boot id                    the machine boot the pool was last in use in
//!     24    8  state check                check word of the copy's index, the shutdown word,
//!                                         the boot id and the uuid
//! ```
//!
//! Root table entry (64 bytes, written whole, then flushed and fenced; a torn entry fails its
//! checksum and reads as empty, which is right because its creation was never acknowledged):
//!
//! ```text
//!      0    4  kind (0 = empty slot)
//!      4    4  flags
//!      8   48  six u64 parameters, meaning chosen by the kind
//!     56    4  CRC-32 of bytes [0, 56)
//!     60    4  reserved, zero
//! ```
//!
//! The state line (shutdown word, boot id) says whether the pool was closed cleanly and which boot
//! of the machine it was last in use in: recovery trusts the whole pool in that boot and goes back
//! to the last power-safe point in another. It is written at the first change after an open and at
//! a clean close, as a double write: the first copy (its check word last), flushed and fenced,
//! then the second the same way. A crash tears at most the copy being written, so at least one is
//! whole: the first copy torn leaves the second with the old line, which is still true (nothing
//! it vouches for has changed yet); the second torn, or not yet written, leaves the first with the
//! new one, complete. A reader takes the first copy if it checks, else the second. Two whole
//! copies that differ are a crash between the two writes: the first is the newer, and the write
//! had taken effect. A single damaged copy is covered by the other, which says the same. Both
//! failing their checks is no crash state (the format writes both before the magic): it is damage,
//! and the pool is refused ([`OpenError::StateLine`]). Each check covers the copy's index, so a
//! copy moved to the other's place fails too.
//!
//! Chunk table entry (u64, an 8-byte store, flushed and fenced before the chunk is used):
//!
//! ```text
//! bits  0..8   use: 1 slab, 2 run head, 3 run tail, 4 free
//! bits  8..16  slab: family (0 node, 1 blob)      run head: run kind (0 blob, 1 region)
//! bits 16..24  slab: size class index             run head of a region: the region's tag
//! bits 24..48  run head: chunks in the run
//! bits 48..64  check: 16 bits of the check word of the entry's index, bits 0..48 and the uuid
//! ```
//!
//! Every entry of a chunk the file holds is written, free ones too (format writes those of the
//! first chunks before the magic, growth those of the new chunks, flushed and fenced, before the
//! file grows), so an entry of all zeroes is one never written: past the file's end it is a chunk
//! that never existed; inside the file it is damage (a zeroed page of the table would otherwise
//! free chunks in use) wherever the memory is whole: after a clean close, or in the boot the pool
//! was last in use in. After a power loss a page-cache file may have grown on the disk while the
//! table page holding the new entries did not reach it, so there a zero entry reads as free (the
//! chunk holds nothing the last power-safe point needs), and the pool's first change writes it
//! free. An entry past the end may also say free (a growth that failed after writing it).
//!
//! The immutable part is covered by one checksum; the words that change while the pool is open
//! are single aligned words, which persistent memory writes failure-atomically, each with a check
//! that ties it to its place and to the pool: a damaged or misplaced word, or a header from
//! another pool, fails it.

use crate::error::OpenError;
use crate::hash::check_words;

/// Size of the header page.
pub const HEADER_SIZE: u64 = 4096;
/// The magic that starts every pool file.
pub const MAGIC: [u8; 8] = *b"PETRAPOL";
/// The format version this build writes and reads. 12: a node's norm and check words are in its
/// block's record area, after the last block of its slab chunk (see `Pool::record_of`), and the
/// node's other words move up two words. 11: a node's first link is beside its key (+8),
/// and the info word and the record follow it (see `structures::node`). 10: a safe point vouches for itself (the
/// engine's claim, see `meta`), and the safe txid word names the safe point before it (an older
/// build would go back to that one, behind what the rounds folded). 9: a byte value longer than 256 bytes is
/// checked by CRC-32 (with its length), not XXH3 (`hash::value_hash`). 8: a free chunk's table entry is a checked
/// word, and a zero entry inside the file is damage. 7: the header's state line has two checked
/// copies, and a pool whose copies both fail their checks is refused. 6: an MDList node holds base-4 coordinates'
/// slots from its own dimension up. 5: the engine records its last power-safe point. 4: a byte value's check is tied to its place
/// and to the pool. 3: the chunk table, byte values, the state line and the engine's words are
/// checked. 2: the check words of descriptors and node records and the hashes of byte values are
/// XXH3 (version 1 mixed one word at a time).
pub const FORMAT_VERSION: u32 = 12;
/// Value of the shutdown word after a clean close.
pub const CLEAN_SHUTDOWN: u64 = 0x434C_4541_4E5F_5354; // "TS_NAELC" little-endian: "CLEAN_ST"
/// Offsets of the state line's two copies, in the order they are written and read.
pub const STATE_COPIES: [u64; 2] = [128, 192];
/// Offset of the shutdown word (of the first copy of the state line).
pub const SHUTDOWN_OFF: u64 = STATE_COPIES[0];
/// Offset of the boot id (16 bytes; of the first copy of the state line).
pub const BOOT_OFF: u64 = SHUTDOWN_OFF + 8;
/// Offset of the state line's check word (of the first copy).
pub const STATE_CHECK_OFF: u64 = SHUTDOWN_OFF + 24;
/// Bytes of one copy of the state line.
pub const STATE_COPY_SIZE: u64 = 32;
/// Offset of the root table.
pub const ROOT_TABLE_OFF: u64 = 1024;
/// Size of one root table entry.
pub const ROOT_ENTRY_SIZE: u64 = 64;
/// Entries in the root table.
pub const ROOT_ENTRIES: usize = 48;
/// Smallest chunk size.
pub const MIN_CHUNK: u64 = 64 << 10;
/// Largest chunk size.
pub const MAX_CHUNK: u64 = 1 << 30;

const CRC_END: usize = 120;

/// The immutable part of the header: where everything is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per chunk.
    pub chunk_size: u64,
    /// Offset of the chunk table.
    pub table_off: u64,
    /// Entries in the chunk table: the most chunks the pool can have.
    pub chunk_capacity: u64,
    /// Offset of chunk 0.
    pub data_off: u64,
}

impl Layout {
    /// The layout for chunks of `chunk_size` bytes (a power of two) and a maximum file size of
    /// `max_size`; `page` is the page size to align the data to.
    pub fn for_max_size(chunk_size: u64, max_size: u64, page: u64) -> Option<Layout> {
        if !chunk_size.is_power_of_two() {
            return None;
        }
        let table_off = HEADER_SIZE;
        // Each chunk costs its bytes plus 8 bytes of table.
        let capacity = max_size.checked_sub(table_off + page)? / (chunk_size + 8);
        if capacity == 0 {
            return None;
        }
        let data_off = (table_off + capacity * 8).next_multiple_of(page);
        Some(Layout { chunk_size, table_off, chunk_capacity: capacity, data_off })
    }

    /// The largest the file can be.
    pub fn max_len(&self) -> u64 {
        self.data_off + self.chunk_capacity * self.chunk_size
    }

    /// Offset of chunk `i`.
    pub fn chunk_off(&self, i: u64) -> u64 {
        self.data_off + i * self.chunk_size
    }

    /// The chunk holding byte `off`, if `off` is in the data area.
    #[inline]
    pub fn chunk_of(&self, off: u64) -> Option<u64> {
        let i = off.checked_sub(self.data_off)? >> self.chunk_shift();
        (i < self.chunk_capacity).then_some(i)
    }

    /// log2 of the chunk size (a power of two, checked when the layout was made or read): a
    /// shift instead of a division on the allocator's paths.
    #[inline]
    fn chunk_shift(&self) -> u32 {
        debug_assert!(self.chunk_size.is_power_of_two());
        self.chunk_size.trailing_zeros()
    }

    /// Offset of chunk `i`'s table entry.
    pub fn entry_off(&self, i: u64) -> u64 {
        self.table_off + i * 8
    }

    /// Chunks that a file of `len` bytes holds.
    pub fn chunks_in(&self, len: u64) -> u64 {
        len.saturating_sub(self.data_off) >> self.chunk_shift()
    }
}

/// The decoded immutable header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Where everything is.
    pub layout: Layout,
    /// The pool's identity.
    pub uuid: [u8; 16],
    /// When the pool was created, in Unix seconds.
    pub created: u64,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

impl Header {
    /// The first 128 bytes of the header page, checksum included.
    pub fn encode(&self) -> [u8; 128] {
        let mut b = [0u8; 128];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(HEADER_SIZE as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.layout.chunk_size.to_le_bytes());
        b[24..32].copy_from_slice(&self.layout.table_off.to_le_bytes());
        b[32..40].copy_from_slice(&self.layout.chunk_capacity.to_le_bytes());
        b[40..48].copy_from_slice(&self.layout.data_off.to_le_bytes());
        b[48..64].copy_from_slice(&self.uuid);
        b[64..72].copy_from_slice(&self.created.to_le_bytes());
        let crc = crc32fast::hash(&b[..CRC_END]);
        b[120..124].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a header page, in the order: zeroed, magic, version, checksum, layout.
    pub fn decode(page: &[u8]) -> Result<Header, OpenError> {
        assert!(page.len() >= HEADER_SIZE as usize);
        if page[..HEADER_SIZE as usize].iter().all(|&b| b == 0) {
            return Err(OpenError::Zeroed);
        }
        let magic: [u8; 8] = page[0..8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(OpenError::BadMagic { found: magic });
        }
        let version = u32_at(page, 8);
        if version != FORMAT_VERSION {
            return Err(OpenError::UnsupportedVersion { found: version, supported: FORMAT_VERSION });
        }
        let stored = u32_at(page, 120);
        let computed = crc32fast::hash(&page[..CRC_END]);
        if stored != computed {
            return Err(OpenError::HeaderChecksum { stored, computed });
        }
        let layout = Layout {
            chunk_size: u64_at(page, 16),
            table_off: u64_at(page, 24),
            chunk_capacity: u64_at(page, 32),
            data_off: u64_at(page, 40),
        };
        let header_size = u32_at(page, 12) as u64;
        let bad = |why: String| Err(OpenError::BadLayout(why));
        if header_size != HEADER_SIZE {
            return bad(format!("header size {header_size}, expected {HEADER_SIZE}"));
        }
        if !layout.chunk_size.is_power_of_two() || !(MIN_CHUNK..=MAX_CHUNK).contains(&layout.chunk_size) {
            return bad(format!(
                "chunk size {} is not a power of two in [{MIN_CHUNK}, {MAX_CHUNK}]",
                layout.chunk_size
            ));
        }
        if layout.table_off != HEADER_SIZE {
            return bad(format!("chunk table at {}, expected {HEADER_SIZE}", layout.table_off));
        }
        let table_end = layout.chunk_capacity.checked_mul(8).and_then(|t| t.checked_add(layout.table_off));
        if layout.chunk_capacity == 0
            || table_end.is_none_or(|end| end > layout.data_off)
            || !layout.data_off.is_multiple_of(HEADER_SIZE)
            || layout
                .chunk_capacity
                .checked_mul(layout.chunk_size)
                .and_then(|d| d.checked_add(layout.data_off))
                .is_none()
        {
            return bad(format!(
                "chunk capacity {} and data offset {} do not fit",
                layout.chunk_capacity, layout.data_off
            ));
        }
        Ok(Header { layout, uuid: page[48..64].try_into().expect("16 bytes"), created: u64_at(page, 64) })
    }
}

/// A structure's entry in the root table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootEntry {
    /// What the structure is (chosen by the engine; never 0).
    pub kind: u32,
    /// Flags, chosen by the engine.
    pub flags: u32,
    /// Parameters, chosen by the engine (for example the offset of a head node).
    pub params: [u64; 6],
}

impl RootEntry {
    /// The entry's 64 bytes, checksum included.
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&self.kind.to_le_bytes());
        b[4..8].copy_from_slice(&self.flags.to_le_bytes());
        for (i, p) in self.params.iter().enumerate() {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&p.to_le_bytes());
        }
        let crc = crc32fast::hash(&b[..56]);
        b[56..60].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The entry in `b`, or `None` for an empty or torn slot.
    pub fn decode(b: &[u8]) -> Option<RootEntry> {
        let kind = u32_at(b, 0);
        if kind == 0 || u32_at(b, 56) != crc32fast::hash(&b[..56]) {
            return None;
        }
        let mut params = [0u64; 6];
        for (i, p) in params.iter_mut().enumerate() {
            *p = u64_at(b, 8 + i * 8);
        }
        Some(RootEntry { kind, flags: u32_at(b, 4), params })
    }
}

/// What the header's state line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State {
    /// [`CLEAN_SHUTDOWN`] after a clean close, 0 while in use.
    pub shutdown: u64,
    /// The machine boot the pool was last in use in (0 if the memory knows no boots).
    pub boot: u128,
}

impl State {
    /// The line of a pool in use in `boot`.
    pub fn in_use(boot: u128) -> State {
        State { shutdown: 0, boot }
    }

    /// The line of a pool closed cleanly in `boot`.
    pub fn clean(boot: u128) -> State {
        State { shutdown: CLEAN_SHUTDOWN, boot }
    }

    /// Whether it says the pool was closed cleanly.
    pub fn is_clean(&self) -> bool {
        self.shutdown == CLEAN_SHUTDOWN
    }

    /// The four words of copy `copy` (0 or 1) of this line in the pool `uuid`, check word last.
    pub fn encode(&self, copy: usize, uuid: &[u8; 16]) -> [u64; 4] {
        let (lo, hi) = (self.boot as u64, (self.boot >> 64) as u64);
        [self.shutdown, lo, hi, state_check(copy, self.shutdown, self.boot, uuid)]
    }

    /// The line copy `copy` holds in `words`, or `None` if it fails its check (torn, damaged,
    /// moved from the other copy's place, or of another pool).
    pub fn decode_copy(words: [u64; 4], copy: usize, uuid: &[u8; 16]) -> Option<State> {
        let state = State { shutdown: words[0], boot: (words[2] as u128) << 64 | words[1] as u128 };
        (words[3] == state_check(copy, state.shutdown, state.boot, uuid)).then_some(state)
    }

    /// The state line of a header page: its first copy if that checks, else its second. Neither
    /// checking is damage (see the [module docs](self)).
    pub fn decode(page: &[u8], uuid: &[u8; 16]) -> Result<State, OpenError> {
        let words = |off: u64| std::array::from_fn(|i| u64_at(page, off as usize + i * 8));
        STATE_COPIES
            .iter()
            .enumerate()
            .find_map(|(copy, &off)| State::decode_copy(words(off), copy, uuid))
            .ok_or(OpenError::StateLine)
    }
}

/// The check of copy `copy` of the header's state line: the copy's index, the shutdown word and
/// the boot id, tied to the pool.
fn state_check(copy: usize, shutdown: u64, boot: u128, uuid: &[u8; 16]) -> u64 {
    let id = u128::from_le_bytes(*uuid);
    check_words([copy as u64, shutdown, boot as u64, (boot >> 64) as u64, id as u64, (id >> 64) as u64])
}

/// The two kinds of slab block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Structure nodes: the chunks recovery scans.
    Node = 0,
    /// Blobs: variable-length values, each starting with its length.
    Blob = 1,
}

/// What a chunk is used for, as its table entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkUse {
    /// Not in use.
    Free,
    /// Blocks of one size class.
    Slab {
        /// Node or blob blocks.
        family: Family,
        /// Index of the size class.
        class: u8,
    },
    /// The first chunk of a run of contiguous chunks.
    RunHead {
        /// What the run holds.
        kind: RunKind,
        /// Chunks in the run, this one included.
        chunks: u32,
    },
    /// A chunk after the first of a run.
    RunTail,
}

/// What a run of chunks holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// One large blob.
    Blob,
    /// An engine region (for example a descriptor ring), named by a tag.
    Region(u8),
}

impl ChunkUse {
    /// The table word for this use in the entry of chunk `index` of the pool `uuid`.
    pub fn encode(self, index: u64, uuid: &[u8; 16]) -> u64 {
        let payload = match self {
            ChunkUse::Free => 4,
            ChunkUse::Slab { family, class } => 1 | (family as u64) << 8 | (class as u64) << 16,
            ChunkUse::RunHead { kind, chunks } => {
                let (k, tag) = match kind {
                    RunKind::Blob => (0u64, 0u64),
                    RunKind::Region(tag) => (1, tag as u64),
                };
                2 | k << 8 | tag << 16 | (chunks as u64 & 0xFF_FFFF) << 24
            }
            ChunkUse::RunTail => 3,
        };
        payload | entry_check(index, payload, uuid) << 48
    }

    /// The use the table word `w` of chunk `index` of the pool `uuid` names, or `None` if the
    /// word is not a valid entry there (damaged, moved from another entry, or of another pool,
    /// or zero: never written, which only an entry past the file's end may be).
    pub fn decode(w: u64, index: u64, uuid: &[u8; 16]) -> Option<ChunkUse> {
        if w >> 48 != entry_check(index, w & PAYLOAD, uuid) {
            return None;
        }
        ChunkUse::of_entry(w)
    }

    /// The use a table word names, its check not recomputed: for a word of a pool that was
    /// opened (every entry checked then) and written since only by this process, which writes
    /// valid entries. `None` if the word names no use.
    pub fn of_entry(w: u64) -> Option<ChunkUse> {
        if w == 0 {
            // Never written: accepted at open only after a power loss (see the module docs).
            return Some(ChunkUse::Free);
        }
        let payload = w & PAYLOAD;
        let sub = (payload >> 8) & 0xFF;
        let third = (payload >> 16) & 0xFF;
        Some(match payload & 0xFF {
            1 if payload >> 24 == 0 => ChunkUse::Slab {
                family: match sub {
                    0 => Family::Node,
                    1 => Family::Blob,
                    _ => return None,
                },
                class: third as u8,
            },
            2 => {
                let chunks = (payload >> 24) as u32;
                let kind = match sub {
                    0 if third == 0 => RunKind::Blob,
                    1 => RunKind::Region(third as u8),
                    _ => return None,
                };
                if chunks == 0 {
                    return None;
                }
                ChunkUse::RunHead { kind, chunks }
            }
            3 if payload == 3 => ChunkUse::RunTail,
            4 if payload == 4 => ChunkUse::Free,
            _ => return None,
        })
    }
}

/// Bits 0..48 of a chunk table entry: what it says, without its check.
const PAYLOAD: u64 = (1 << 48) - 1;

/// The 16 check bits of chunk table entry `index` saying `payload`, in the pool `uuid`.
fn entry_check(index: u64, payload: u64, uuid: &[u8; 16]) -> u64 {
    let id = u128::from_le_bytes(*uuid);
    check_words([index, payload, id as u64, (id >> 64) as u64]) >> 48
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            layout: Layout::for_max_size(MIN_CHUNK, 1 << 30, 4096).unwrap(),
            uuid: [7; 16],
            created: 1_700_000_000,
        }
    }

    fn page_of(h: &Header) -> Vec<u8> {
        let mut p = vec![0u8; HEADER_SIZE as usize];
        p[..128].copy_from_slice(&h.encode());
        p
    }

    #[test]
    fn header_round_trips() {
        let h = header();
        assert_eq!(Header::decode(&page_of(&h)).unwrap(), h);
    }

    #[test]
    fn layout_fits_the_maximum() {
        let l = header().layout;
        assert!(l.max_len() <= 1 << 30);
        assert!(l.max_len() + l.chunk_size + 8 > (1 << 30) - 4096, "no whole chunk left unused");
        assert_eq!(l.data_off % 4096, 0);
        assert_eq!(l.chunk_of(l.chunk_off(3) + 100), Some(3));
        assert_eq!(l.chunk_of(l.data_off - 1), None);
    }

    #[test]
    fn every_corruption_has_its_own_error() {
        let good = page_of(&header());
        assert!(matches!(Header::decode(&vec![0; 4096]), Err(OpenError::Zeroed)));
        let mut p = good.clone();
        p[0] = b'X';
        assert!(matches!(Header::decode(&p), Err(OpenError::BadMagic { .. })));
        let mut p = good.clone();
        p[8] = 1;
        assert!(matches!(
            Header::decode(&p),
            Err(OpenError::UnsupportedVersion { found: 1, supported: FORMAT_VERSION })
        ));
        let mut p = good.clone();
        p[50] ^= 1;
        assert!(matches!(Header::decode(&p), Err(OpenError::HeaderChecksum { .. })));
        // A layout that checks out by checksum but makes no sense.
        let mut h = header();
        h.layout.chunk_size = 1000;
        assert!(matches!(Header::decode(&page_of(&h)), Err(OpenError::BadLayout(_))));
    }

    /// A header page whose two state line copies hold `state`.
    fn page_with_state(h: &Header, state: State) -> Vec<u8> {
        let mut p = page_of(h);
        for (copy, &off) in STATE_COPIES.iter().enumerate() {
            for (i, w) in state.encode(copy, &h.uuid).iter().enumerate() {
                let at = off as usize + i * 8;
                p[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
        }
        p
    }

    #[test]
    fn a_flipped_boot_id_in_either_copy_is_covered_by_the_other() {
        let h = header();
        let state = State::in_use(0x0123_4567_89AB_CDEF_FEDC_BA98_7654_3210);
        let good = page_with_state(&h, state);
        assert_eq!(State::decode(&good, &h.uuid).unwrap(), state);
        for (copy, &off) in STATE_COPIES.iter().enumerate() {
            for bit in 0..128 {
                let mut p = good.clone();
                p[off as usize + 8 + bit / 8] ^= 1 << (bit % 8);
                let words = std::array::from_fn(|i| u64_at(&p, off as usize + i * 8));
                assert_eq!(State::decode_copy(words, copy, &h.uuid), None, "copy {copy}, boot id bit {bit}");
                assert_eq!(State::decode(&p, &h.uuid).unwrap(), state, "copy {copy}, boot id bit {bit} flipped");
            }
        }
        // Both copies damaged: no crash leaves that, and the line says nothing.
        let mut p = good.clone();
        p[STATE_COPIES[0] as usize + 8] ^= 1;
        p[STATE_COPIES[1] as usize + 20] ^= 0x40;
        assert!(matches!(State::decode(&p, &h.uuid), Err(OpenError::StateLine)));
        // The copies swapped, or a header of another pool: each copy's check is tied to its place.
        let mut p = good.clone();
        let (a, b) = (STATE_COPIES[0] as usize, STATE_COPIES[1] as usize);
        let first: Vec<u8> = p[a..a + 32].to_vec();
        p.copy_within(b..b + 32, a);
        p[b..b + 32].copy_from_slice(&first);
        assert!(matches!(State::decode(&p, &h.uuid), Err(OpenError::StateLine)), "copies swapped");
        assert!(matches!(State::decode(&good, &[8; 16]), Err(OpenError::StateLine)), "another pool's uuid");
    }

    #[test]
    fn a_state_line_torn_anywhere_reads_as_the_old_line_or_the_new_one() {
        // Every prefix of the double write's stores, in the order `Pool::write_state` makes them
        // (the first copy's four words, check word last, then the second's), from each line to
        // each other: what a crash, or a page written back in the middle, leaves.
        let h = header();
        let lines = [State::clean(5), State::in_use(5), State::in_use(6), State::clean(6), State::in_use(u128::MAX)];
        for &old in &lines {
            for &new in &lines {
                let mut p = page_with_state(&h, old);
                let stores: Vec<(usize, u64)> = STATE_COPIES
                    .iter()
                    .enumerate()
                    .flat_map(|(copy, &off)| {
                        new.encode(copy, &h.uuid).into_iter().enumerate().map(move |(i, w)| (off as usize + i * 8, w))
                    })
                    .collect();
                for done in 0..=stores.len() {
                    if done > 0 {
                        let (at, w) = stores[done - 1];
                        p[at..at + 8].copy_from_slice(&w.to_le_bytes());
                    }
                    let read =
                        State::decode(&p, &h.uuid).unwrap_or_else(|e| panic!("{old:?} to {new:?}, {done} stores: {e}"));
                    // The first copy's check word is the write's commit point.
                    let expected = if done >= 4 { new } else { old };
                    assert_eq!(read, expected, "{old:?} to {new:?}, {done} stores");
                }
            }
        }
    }

    #[test]
    fn root_entries_round_trip_and_torn_ones_read_empty() {
        let e = RootEntry { kind: 3, flags: 1, params: [1, 2, 3, 4, 5, u64::MAX] };
        let mut b = e.encode();
        assert_eq!(RootEntry::decode(&b), Some(e));
        b[20] ^= 0x10;
        assert_eq!(RootEntry::decode(&b), None);
        assert_eq!(RootEntry::decode(&[0; 64]), None);
    }

    #[test]
    fn chunk_uses_round_trip_and_damaged_moved_or_foreign_entries_are_refused() {
        let (uuid, other) = ([7u8; 16], [8u8; 16]);
        let uses = [
            ChunkUse::Slab { family: Family::Node, class: 0 },
            ChunkUse::Slab { family: Family::Blob, class: 27 },
            ChunkUse::RunHead { kind: RunKind::Blob, chunks: 5 },
            ChunkUse::RunHead { kind: RunKind::Region(0xBE), chunks: 0xFF_FFFF },
            ChunkUse::RunTail,
        ];
        // Zero is no entry at all (a zeroed page of the table is not a run of free entries).
        assert_eq!(ChunkUse::decode(0, 3, &uuid), None);
        for u in uses.into_iter().chain([ChunkUse::Free]) {
            let w = u.encode(3, &uuid);
            assert_eq!(ChunkUse::decode(w, 3, &uuid), Some(u), "{u:?}");
            assert_eq!(ChunkUse::decode(w, 4, &uuid), None, "{u:?} moved to another entry");
            assert_eq!(ChunkUse::decode(w, 3, &other), None, "{u:?} of another pool");
            for bit in 0..64 {
                assert_eq!(ChunkUse::decode(w ^ 1 << bit, 3, &uuid), None, "{u:?} with bit {bit} flipped");
            }
        }
        for payload in [0u64, 5, 4 | 1 << 8, 1 | 2 << 8, 0x100, 2, 3 | 1 << 40, (1 << 48) - 1] {
            let w = payload | entry_check(0, payload, &uuid) << 48;
            assert_eq!(ChunkUse::decode(w, 0, &uuid), None, "{payload:#x}");
        }
    }
}
