//! Index entry layout (spec/dledger.md §2.3): entry for log index `i` lives at `i * 32`.
//!
//! | offset | width | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic (as the data entry: 1) |
//! | 4 | 8 | pos of the data entry |
//! | 12 | 4 | size of the data entry (header included) |
//! | 16 | 8 | index |
//! | 24 | 8 | term |

use super::entry::MAGIC_ENTRY;
use crate::types::{Index, Pos, Term};

/// Bytes per index entry.
pub const INDEX_ENTRY_BYTES: usize = 32;

const _: () = assert!(4 + 8 + 4 + 8 + 8 == INDEX_ENTRY_BYTES);

/// One index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Data position of the entry.
    pub pos: Pos,
    /// Data entry size, header included.
    pub size: u32,
    /// Log index.
    pub index: Index,
    /// Entry term.
    pub term: Term,
}

/// Why 32 bytes are not a usable index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IndexEntryError {
    /// Fewer than 32 bytes.
    #[error("truncated index entry ({0} bytes)")]
    Truncated(usize),
    /// All zero: never written.
    #[error("index entry never written")]
    Empty,
    /// Magic is not 1.
    #[error("bad index magic {0}")]
    BadMagic(i32),
    /// Negative position, size, index or term.
    #[error("negative field in index entry")]
    Negative,
}

impl IndexEntry {
    /// Encodes into exactly 32 bytes.
    pub fn encode(&self, out: &mut [u8; INDEX_ENTRY_BYTES]) {
        out[0..4].copy_from_slice(&MAGIC_ENTRY.to_be_bytes());
        out[4..12].copy_from_slice(&self.pos.raw().to_be_bytes());
        out[12..16].copy_from_slice(&self.size.to_be_bytes());
        out[16..24].copy_from_slice(&self.index.raw().to_be_bytes());
        out[24..32].copy_from_slice(&self.term.raw().to_be_bytes());
    }

    /// Decodes 32 bytes; an all-zero slot is `Empty`.
    pub fn decode(bytes: &[u8]) -> Result<IndexEntry, IndexEntryError> {
        if bytes.len() < INDEX_ENTRY_BYTES {
            return Err(IndexEntryError::Truncated(bytes.len()));
        }
        let b = &bytes[..INDEX_ENTRY_BYTES];
        if b.iter().all(|x| *x == 0) {
            return Err(IndexEntryError::Empty);
        }
        let i32_at = |at: usize| i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let i64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[at..at + 8]);
            i64::from_be_bytes(w)
        };
        let magic = i32_at(0);
        if magic != MAGIC_ENTRY {
            return Err(IndexEntryError::BadMagic(magic));
        }
        let u = |v: i64| u64::try_from(v).map_err(|_| IndexEntryError::Negative);
        let size = u32::try_from(i32_at(12)).map_err(|_| IndexEntryError::Negative)?;
        Ok(IndexEntry {
            pos: Pos(u(i64_at(4))?),
            size,
            index: Index(u(i64_at(16))?),
            term: Term(u(i64_at(24))?),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_empty_slot() {
        let e = IndexEntry {
            pos: Pos(1 << 33),
            size: 100,
            index: Index(9),
            term: Term(2),
        };
        let mut b = [0u8; INDEX_ENTRY_BYTES];
        e.encode(&mut b);
        assert_eq!(IndexEntry::decode(&b), Ok(e));
        assert_eq!(IndexEntry::decode(&[0u8; 32]), Err(IndexEntryError::Empty));
        assert_eq!(
            IndexEntry::decode(&[0u8; 3]),
            Err(IndexEntryError::Truncated(3))
        );
    }
}
