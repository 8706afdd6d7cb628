//! Cursors: small named records that a reader of the store keeps in it, durably, beside what it
//! reads (a remote-write sender's position in each set's history, say), so that after a crash it
//! resumes where it left off.
//!
//! A cursor is a catalog record under the tag 3 (schemas are 1, sets 2: a store that knows no
//! cursors reads past them). Its key's low 32 bits are the first slot from the name's hash that
//! holds this name or is free; its record is the name's length (4 bytes, little-endian), the
//! name, then the value.

use petra::mem::PMem;

use super::store::{CATALOG, MetricStore};
use crate::error::{KvError, Result};

const CURSOR_TAG: u64 = 3 << 56;
/// The most bytes a cursor's record takes.
const MAX_CURSOR: usize = 64 << 10;

/// The record of cursor `name` holding `value`.
fn record(name: &str, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len() + value.len());
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(value);
    out
}

/// The name and the value a cursor record holds.
fn split(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let name = bytes.get(4..4 + len)?;
    Some((name, &bytes[4 + len..]))
}

impl<M: PMem + 'static> MetricStore<M> {
    /// The value of cursor `name`, if it was ever set.
    pub fn cursor(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.find_cursor(name)?.1)
    }

    /// Sets cursor `name` to `value` (its record at most 64 KiB), durably: one transaction, like a sample.
    pub fn set_cursor(&self, name: &str, value: &[u8]) -> Result<()> {
        let len = 4 + name.len() + value.len();
        if len > MAX_CURSOR {
            return Err(KvError::ValueTooLong { len, max: MAX_CURSOR });
        }
        // One writer of new cursors at a time: two could take the same free slot.
        let _w = self.catalog_write.lock();
        let (key, old) = self.find_cursor(name)?;
        self.write_record(key, &record(name, value), old.is_some())
    }

    /// The key of cursor `name` (its slot, or the free one it would take) and its value.
    fn find_cursor(&self, name: &str) -> Result<(u64, Option<Vec<u8>>)> {
        let mut h = self.engine().handle()?;
        let mut slot = xxhash_rust::xxh3::xxh3_64(name.as_bytes()) as u32;
        let mut buf = Vec::new();
        loop {
            let key = CURSOR_TAG | slot as u64;
            if !crate::format::read_into(&mut h, CATALOG, key, &mut buf)? {
                return Ok((key, None));
            }
            match split(&buf) {
                Some((n, value)) if n == name.as_bytes() => return Ok((key, Some(value.to_vec()))),
                Some(_) => slot = slot.wrapping_add(1),
                None => {
                    return Err(KvError::Engine(petra::EngineError::Corrupt(format!(
                        "cursor record {key:#x} is cut short"
                    ))));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_holds_its_name_and_value() {
        let r = record("remote_write http://a", b"{}");
        assert_eq!(split(&r), Some((&b"remote_write http://a"[..], &b"{}"[..])));
        assert_eq!(split(&r[..3]), None);
        assert_eq!(split(&record("", b"")), Some((&b""[..], &b""[..])));
    }
}
