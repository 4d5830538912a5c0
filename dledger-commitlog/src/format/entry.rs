//! Data entry layout (spec/dledger.md §2.2), blank record (§2.1) and their checks.
//!
//! | offset | width | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic (1 = entry, -1 = blank record) |
//! | 4 | 4 | size = 48 + body size |
//! | 8 | 8 | index |
//! | 16 | 8 | term |
//! | 24 | 8 | pos (absolute position of this header) |
//! | 32 | 4 | channel (0) |
//! | 36 | 4 | "chain crc": **we store a header CRC here** |
//! | 40 | 4 | body crc |
//! | 44 | 4 | body size |
//! | 48 | n | body |
//!
//! # CRCs
//!
//! Java DLedger 0.1–0.3.x writes 0 in both CRC fields and never reads them, so we may fill them
//! and the files stay readable by Java:
//!
//! * `body crc` (offset 40) = RocketMQ masked CRC-32 of the body bytes, computed after the append
//!   hook patched the body (PHYSICALOFFSET) and the position is final.
//! * the unused `chain crc` field (offset 36) carries a **header CRC**: masked CRC-32 of header
//!   bytes 0..36 (magic, size, index, term, pos, channel). Body size (44..48) is covered by the
//!   `size == 48 + body size` rule and body crc by the body check, so every header bit is
//!   protected: a torn or flipped header is detected, not only a damaged body.
//!
//! A CRC field equal to 0 means "not computed" (an entry written by Java) and is accepted. The
//! body CRC is verified at recovery, on follower append and on every read served to a consumer.

use super::crc::masked_crc32;
use crate::types::{Index, Pos, Term};

/// Magic of a normal entry (the only kind DLedger 0.1–0.3.x writes).
pub const MAGIC_ENTRY: i32 = 1;
/// Magic of the blank record that pads the end of a data file.
pub const MAGIC_BLANK: i32 = -1;
/// Header bytes before the body.
pub const HEADER_BYTES: usize = 48;
/// Offset of the `pos` field.
pub const POS_OFFSET: usize = 24;
/// Offset of the header CRC (Java: chain crc).
pub const HEADER_CRC_OFFSET: usize = 36;
/// Offset of the body CRC.
pub const BODY_CRC_OFFSET: usize = 40;
/// Offset of the body size.
pub const BODY_SIZE_OFFSET: usize = 44;
/// Bytes of a blank record's own header (magic + remaining count).
pub const BLANK_HEADER_BYTES: usize = 8;

const _: () = assert!(BODY_SIZE_OFFSET + 4 == HEADER_BYTES);
const _: () = assert!(HEADER_CRC_OFFSET == 36 && BODY_CRC_OFFSET == 40 && POS_OFFSET == 24);

/// What a data entry header or body fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// Fewer bytes than a header (or than the header announces).
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes required.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// Magic is neither 1 nor a blank.
    #[error("bad magic {found}")]
    BadMagic {
        /// Magic found.
        found: i32,
    },
    /// `size != 48 + body size`, or a negative length.
    #[error("bad size {size} for body size {body_size}")]
    BadSize {
        /// Size field.
        size: i32,
        /// Body size field.
        body_size: i32,
    },
    /// A negative index, term or pos.
    #[error("negative {field} {value}")]
    Negative {
        /// Field name.
        field: &'static str,
        /// Value found.
        value: i64,
    },
    /// Header CRC (chain-crc field) does not match bytes 0..36.
    #[error("header crc mismatch: stored {expected:#x}, computed {actual:#x}")]
    HeaderCrc {
        /// Stored CRC.
        expected: u32,
        /// Computed CRC.
        actual: u32,
    },
    /// Body CRC does not match the body.
    #[error("body crc mismatch: stored {expected:#x}, computed {actual:#x}")]
    BodyCrc {
        /// Stored CRC.
        expected: u32,
        /// Computed CRC.
        actual: u32,
    },
}

/// A decoded, structurally valid entry header (header CRC already checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    /// Total entry size including the header.
    pub size: u32,
    /// Log index.
    pub index: Index,
    /// Term that created the entry.
    pub term: Term,
    /// Position stored in the header.
    pub pos: Pos,
    /// Header CRC (0 = not computed).
    pub header_crc: u32,
    /// Body CRC (0 = not computed).
    pub body_crc: u32,
}

impl EntryHeader {
    /// Body length.
    pub fn body_len(&self) -> usize {
        self.size as usize - HEADER_BYTES
    }

    /// Position just after this entry.
    pub fn end(&self) -> Pos {
        Pos(self.pos.0 + u64::from(self.size))
    }
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(w)
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(w)
}

/// Reads the magic word at the start of a record; `None` if fewer than 4 bytes.
pub fn peek_magic(bytes: &[u8]) -> Option<i32> {
    (bytes.len() >= 4).then(|| be_i32(bytes, 0))
}

/// Writes a complete header for a body already in place; computes both CRCs.
pub fn encode_header(
    out: &mut [u8; HEADER_BYTES],
    index: Index,
    term: Term,
    pos: Pos,
    body: &[u8],
) {
    let body_crc = masked_crc32(body);
    encode_header_with_crc(out, index, term, pos, body.len() as u32, body_crc);
}

/// Writes a header whose body CRC is known; computes the header CRC.
pub fn encode_header_with_crc(
    out: &mut [u8; HEADER_BYTES],
    index: Index,
    term: Term,
    pos: Pos,
    body_len: u32,
    body_crc: u32,
) {
    let size = HEADER_BYTES as u32 + body_len;
    out[0..4].copy_from_slice(&MAGIC_ENTRY.to_be_bytes());
    out[4..8].copy_from_slice(&size.to_be_bytes());
    out[8..16].copy_from_slice(&index.raw().to_be_bytes());
    out[16..24].copy_from_slice(&term.raw().to_be_bytes());
    out[24..32].copy_from_slice(&pos.raw().to_be_bytes());
    out[32..36].copy_from_slice(&0i32.to_be_bytes());
    let header_crc = masked_crc32(&out[..HEADER_CRC_OFFSET]);
    out[36..40].copy_from_slice(&header_crc.to_be_bytes());
    out[40..44].copy_from_slice(&body_crc.to_be_bytes());
    out[44..48].copy_from_slice(&body_len.to_be_bytes());
}

/// Decodes and checks a header: magic 1, `size == 48 + body size`, non-negative numbers,
/// header CRC (when non-zero). Does not look at the body.
pub fn decode_header(bytes: &[u8]) -> Result<EntryHeader, EntryError> {
    if bytes.len() < HEADER_BYTES {
        return Err(EntryError::Truncated {
            need: HEADER_BYTES as u64,
            have: bytes.len() as u64,
        });
    }
    let magic = be_i32(bytes, 0);
    if magic != MAGIC_ENTRY {
        return Err(EntryError::BadMagic { found: magic });
    }
    let size = be_i32(bytes, 4);
    let body_size = be_i32(bytes, BODY_SIZE_OFFSET);
    if body_size < 0 || i64::from(size) != i64::from(body_size) + HEADER_BYTES as i64 {
        return Err(EntryError::BadSize { size, body_size });
    }
    let header_crc = be_i32(bytes, HEADER_CRC_OFFSET) as u32;
    if header_crc != 0 {
        let actual = masked_crc32(&bytes[..HEADER_CRC_OFFSET]);
        if actual != header_crc {
            return Err(EntryError::HeaderCrc {
                expected: header_crc,
                actual,
            });
        }
    }
    let field = |name: &'static str, at: usize| -> Result<u64, EntryError> {
        let v = be_i64(bytes, at);
        u64::try_from(v).map_err(|_| EntryError::Negative {
            field: name,
            value: v,
        })
    };
    Ok(EntryHeader {
        size: size as u32,
        index: Index(field("index", 8)?),
        term: Term(field("term", 16)?),
        pos: Pos(field("pos", POS_OFFSET)?),
        header_crc,
        body_crc: be_i32(bytes, BODY_CRC_OFFSET) as u32,
    })
}

/// Checks the body against the header's body CRC (0 = not computed, accepted).
pub fn verify_body(header: &EntryHeader, body: &[u8]) -> Result<(), EntryError> {
    if body.len() != header.body_len() {
        return Err(EntryError::Truncated {
            need: header.body_len() as u64,
            have: body.len() as u64,
        });
    }
    verify_body_crc(header.body_crc, body)
}

/// Checks a body against a stored CRC (0 = not computed, accepted).
pub fn verify_body_crc(expected: u32, body: &[u8]) -> Result<(), EntryError> {
    if expected == 0 {
        return Ok(());
    }
    let actual = masked_crc32(body);
    if actual != expected {
        return Err(EntryError::BodyCrc { expected, actual });
    }
    Ok(())
}

/// Writes the 8-byte head of a blank record covering `remaining` bytes (to the end of the
/// file); the rest of the blank must already be zero.
pub fn encode_blank(out: &mut [u8; BLANK_HEADER_BYTES], remaining: u32) {
    out[0..4].copy_from_slice(&MAGIC_BLANK.to_be_bytes());
    out[4..8].copy_from_slice(&remaining.to_be_bytes());
}

/// Decodes a blank record head: `Some(remaining)` when the magic is -1.
pub fn decode_blank(bytes: &[u8]) -> Option<i32> {
    (bytes.len() >= BLANK_HEADER_BYTES && be_i32(bytes, 0) == MAGIC_BLANK).then(|| be_i32(bytes, 4))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_every_header_bit_flip_is_caught() {
        let body = b"payload";
        let mut h = [0u8; HEADER_BYTES];
        encode_header(&mut h, Index(5), Term(3), Pos(4096), body);
        let d = decode_header(&h).unwrap();
        assert_eq!(
            (d.index, d.term, d.pos, d.size),
            (Index(5), Term(3), Pos(4096), 55)
        );
        verify_body(&d, body).unwrap();
        for bit in 0..HEADER_BYTES * 8 {
            let mut f = h;
            f[bit / 8] ^= 1 << (bit % 8);
            let caught = match decode_header(&f) {
                Err(_) => true,
                Ok(d2) => verify_body(&d2, body).is_err() || d2 != d,
            };
            assert!(caught, "bit {bit} not caught");
        }
    }

    #[test]
    fn java_written_zero_crcs_are_accepted() {
        let mut h = [0u8; HEADER_BYTES];
        encode_header_with_crc(&mut h, Index(0), Term(1), Pos(0), 3, 0);
        h[36..40].fill(0);
        let d = decode_header(&h).unwrap();
        verify_body(&d, b"abc").unwrap();
    }

    #[test]
    fn short_and_garbage_inputs_are_errors() {
        assert!(matches!(
            decode_header(&[1, 2, 3]),
            Err(EntryError::Truncated { .. })
        ));
        assert!(matches!(
            decode_header(&[0xFF; 48]),
            Err(EntryError::BadMagic { found: -1 })
        ));
        let mut b = [0u8; BLANK_HEADER_BYTES];
        encode_blank(&mut b, 100);
        assert_eq!(decode_blank(&b), Some(100));
    }
}
