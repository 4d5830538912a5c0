//! The chain CRC of entry headers (spec/dledger.md §2.2: masked CRC-32 of header bytes 0..35),
//! computed from the field values instead of from the written bytes.
//!
//! Why: with small bodies the header CRC was the largest cost of an append. Hashing the 36
//! bytes just written means reading them back right after several narrow stores (the loads
//! cannot be forwarded from those stores and stall), plus a fixed setup cost per call.
//!
//! How: CRC-32 is linear, so for a fixed length the CRC of a message is a constant XORed with
//! one table value per byte, the table depending on the byte's position. From one append to
//! the next only the low bytes of `index` and `pos` change (and `size` when the body size
//! does), so the contribution of the other bytes is cached: an append costs three lookups in
//! 1 KiB tables that stay in cache.

use crate::format::entry::{
    BODY_CRC_OFFSET, BODY_SIZE_OFFSET, HEADER_BYTES, HEADER_CRC_OFFSET, MAGIC_ENTRY, POS_OFFSET,
};

/// Reflected CRC-32 (IEEE) polynomial, as zlib and `crc32fast` use it.
const POLY: u32 = 0xEDB8_8320;
/// Bytes covered by the chain CRC.
const LEN: usize = HEADER_CRC_OFFSET;
/// First byte position whose table is kept (`size`); bytes 0..4 (magic) are constant.
const FIRST: usize = 4;
/// Last byte position whose table is kept + 1 (`pos` ends at 32; `channel` is always 0).
const END: usize = 32;

const SIZE_AT: usize = 4;
const INDEX_AT: usize = 8;
const TERM_AT: usize = 16;
const POS_AT: usize = POS_OFFSET;

/// `TABLES[p - FIRST][b]`: what byte `b` at position `p` (all other bytes zero, no initial or
/// final inversion) contributes to the CRC register after all `LEN` bytes.
static TABLES: [[u32; 256]; END - FIRST] = tables();

/// CRC-32 of the header with `magic = 1` and every other byte zero; the CRC of any header is
/// this XORed with the contributions of its non-zero `size`/`index`/`term`/`pos` bytes.
const BASE: u32 = {
    let mut m = [0u8; LEN];
    m[3] = 1;
    crc32(&m)
};

/// Bitwise CRC-32 (for the constants only).
const fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    let mut i = 0;
    while i < bytes.len() {
        c ^= bytes[i] as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        i += 1;
    }
    !c
}

/// One zero byte through the register (the table-driven step with a zero input byte).
const fn step(r: u32, byte_table: &[u32; 256]) -> u32 {
    (r >> 8) ^ byte_table[(r & 0xFF) as usize]
}

const fn tables() -> [[u32; 256]; END - FIRST] {
    // The classic byte table: register contribution of byte `b` fed into a zero register.
    let mut byte_table = [0u32; 256];
    let mut b = 0;
    while b < 256 {
        let mut c = b as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        byte_table[b] = c;
        b += 1;
    }
    // Byte at the last position is followed by no byte; each earlier position goes through
    // one more zero byte.
    let mut t = [[0u32; 256]; END - FIRST];
    let mut b = 0;
    while b < 256 {
        let mut r = byte_table[b];
        let mut p = LEN - 1;
        loop {
            if p < END && p >= FIRST {
                t[p - FIRST][b] = r;
            }
            if p == FIRST {
                break;
            }
            r = step(r, &byte_table);
            p -= 1;
        }
        b += 1;
    }
    t
}

/// Contribution of the big-endian `width`-byte `value` at byte position `at`, skipping its
/// `skip_low` lowest bytes.
fn field(value: u64, at: usize, width: usize, skip_low: usize) -> u32 {
    let mut acc = 0;
    for k in skip_low..width {
        let byte = ((value >> (8 * k)) & 0xFF) as usize;
        if byte != 0 {
            acc ^= TABLES[at + width - 1 - k - FIRST][byte];
        }
    }
    acc
}

/// Incremental chain-CRC computer owned by the writer (see the module doc). The cached keys
/// start at 0, whose contributions are 0, so the default state is consistent.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeaderCrc {
    size: u32,
    size_part: u32,
    term: i64,
    term_part: u32,
    index_high: u64,
    index_high_part: u32,
    pos_high: u64,
    pos_high_part: u32,
}

impl HeaderCrc {
    /// Masked chain CRC of the header with these fields (`magic = 1`, `channel = 0`); equal
    /// to `masked_crc32` over the encoded bytes 0..35.
    #[inline]
    pub(crate) fn crc(&mut self, size: u32, index: i64, term: i64, pos: i64) -> u32 {
        if size != self.size {
            self.size = size;
            self.size_part = field(u64::from(size), SIZE_AT, 4, 0);
        }
        if term != self.term {
            self.term = term;
            self.term_part = field(term as u64, TERM_AT, 8, 0);
        }
        let (index, pos) = (index as u64, pos as u64);
        if index >> 8 != self.index_high {
            self.index_high = index >> 8;
            self.index_high_part = field(index, INDEX_AT, 8, 1);
        }
        if pos >> 16 != self.pos_high {
            self.pos_high = pos >> 16;
            self.pos_high_part = field(pos, POS_AT, 8, 2);
        }
        let low = TABLES[INDEX_AT + 7 - FIRST][(index & 0xFF) as usize]
            ^ TABLES[POS_AT + 6 - FIRST][((pos >> 8) & 0xFF) as usize]
            ^ TABLES[POS_AT + 7 - FIRST][(pos & 0xFF) as usize];
        (BASE ^ self.size_part ^ self.term_part ^ self.index_high_part ^ self.pos_high_part ^ low)
            & 0x7FFF_FFFF
    }
}

/// Writes the §2.2 header of an entry whose CRCs are known (what
/// `format::entry::encode_header_with_crc` writes, without hashing the bytes again).
#[inline]
pub(crate) fn write_header(
    out: &mut [u8; HEADER_BYTES],
    size: u32,
    index: i64,
    term: i64,
    pos: i64,
    header_crc: u32,
    body_crc: u32,
) {
    out[0..4].copy_from_slice(&MAGIC_ENTRY.to_be_bytes());
    out[SIZE_AT..INDEX_AT].copy_from_slice(&size.to_be_bytes());
    out[INDEX_AT..TERM_AT].copy_from_slice(&index.to_be_bytes());
    out[TERM_AT..POS_AT].copy_from_slice(&term.to_be_bytes());
    out[POS_AT..END].copy_from_slice(&pos.to_be_bytes());
    out[END..HEADER_CRC_OFFSET].copy_from_slice(&0i32.to_be_bytes());
    out[HEADER_CRC_OFFSET..BODY_CRC_OFFSET].copy_from_slice(&header_crc.to_be_bytes());
    out[BODY_CRC_OFFSET..BODY_SIZE_OFFSET].copy_from_slice(&body_crc.to_be_bytes());
    out[BODY_SIZE_OFFSET..].copy_from_slice(&(size - HEADER_BYTES as u32).to_be_bytes());
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};

    use super::*;
    use crate::format::entry::{encode_header_with_crc, HEADER_BYTES};
    use crate::types::{Index, Pos, Term};

    fn reference(size: u32, index: i64, term: i64, pos: i64) -> u32 {
        let mut h = [0u8; HEADER_BYTES];
        encode_header_with_crc(
            &mut h,
            Index(index as u64),
            Term(term as u64),
            Pos(pos as u64),
            size - HEADER_BYTES as u32,
            0,
        );
        u32::from_be_bytes([h[36], h[37], h[38], h[39]])
    }

    #[test]
    fn write_header_matches_the_format_encoder() {
        let mut h = HeaderCrc::default();
        for (body_len, index, term, pos) in [
            (0u32, 0i64, 1i64, 0i64),
            (5, 7, 3, 4096),
            (1 << 20, i64::MAX, 9, 1 << 40),
        ] {
            let size = HEADER_BYTES as u32 + body_len;
            let mut ours = [0u8; HEADER_BYTES];
            let crc = h.crc(size, index, term, pos);
            write_header(&mut ours, size, index, term, pos, crc, 0x1234_5678);
            let mut theirs = [0u8; HEADER_BYTES];
            encode_header_with_crc(
                &mut theirs,
                Index(index as u64),
                Term(term as u64),
                Pos(pos as u64),
                body_len,
                0x1234_5678,
            );
            assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn constants_match_crc32fast() {
        assert_eq!(crc32(b"Hello") & 0x7FFF_FFFF, 0x77D1_8982);
        let mut m = [0u8; LEN];
        m[3] = 1;
        assert_eq!(BASE, crc32fast::hash(&m));
    }

    #[test]
    fn matches_the_encoder_on_a_sequence_of_appends() {
        let mut h = HeaderCrc::default();
        let (mut pos, mut term) = (0i64, 1i64);
        for index in 0..70_000i64 {
            let size = 48 + [0u32, 1, 128, 1024, 4096][(index % 5) as usize];
            if index % 9_999 == 0 {
                term += 1;
            }
            assert_eq!(
                h.crc(size, index, term, pos),
                reference(size, index, term, pos),
                "index {index}"
            );
            pos += i64::from(size);
        }
    }

    #[test]
    fn matches_the_encoder_on_random_fields() {
        let seed = std::env::var("HEADER_CRC_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5EED_u64);
        println!("HEADER_CRC_SEED={seed}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut h = HeaderCrc::default();
        for _ in 0..20_000 {
            let size = 48 + (rng.next_u32() % (64 << 20));
            let index = (rng.next_u64() >> (rng.next_u32() % 64)) as i64 & i64::MAX;
            let term = (rng.next_u64() >> (rng.next_u32() % 64)) as i64 & i64::MAX;
            let pos = (rng.next_u64() >> (rng.next_u32() % 64)) as i64 & i64::MAX;
            assert_eq!(
                h.crc(size, index, term, pos),
                reference(size, index, term, pos),
                "size {size} index {index} term {term} pos {pos}"
            );
        }
    }
}
