//! zlib (RFC 1950) / deflate (RFC 1951) decompression for compressed REGISTER_BROKER bodies.
//!
//! A small canonical-Huffman decoder that reads codes bit by bit: registrations are rare and
//! small, so clarity beats speed. Output is capped by the caller's limit before it grows, every
//! length and distance is checked against the data, and the Adler-32 trailer is verified.

/// Why a zlib stream was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    /// The stream ended early.
    #[error("zlib stream truncated")]
    Truncated,
    /// The 2-byte zlib header is not deflate / fails its check / needs a preset dictionary.
    #[error("bad zlib header")]
    BadHeader,
    /// Block type 3, or a stored block whose length check fails.
    #[error("bad deflate block")]
    BadBlock,
    /// Huffman code lengths that do not form a valid code, or an undecodable code.
    #[error("bad huffman code")]
    BadCode,
    /// A back reference before the start of the output.
    #[error("distance {distance} beyond {available} bytes of output")]
    BadDistance { distance: usize, available: usize },
    /// The output would exceed the caller's limit.
    #[error("inflated size exceeds {limit} bytes")]
    TooLarge { limit: usize },
    /// The Adler-32 trailer does not match the data.
    #[error("adler32 mismatch")]
    Checksum,
}

const MAX_BITS: usize = 15;
const LENGTH_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LENGTH_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];
/// Order in which code-length code lengths are sent in a dynamic block.
const CLEN_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

/// Inflates a zlib stream, refusing to produce more than `limit` bytes.
pub fn zlib_inflate(input: &[u8], limit: usize) -> Result<Vec<u8>, InflateError> {
    let (&cmf, rest) = input.split_first().ok_or(InflateError::Truncated)?;
    let (&flg, _) = rest.split_first().ok_or(InflateError::Truncated)?;
    let check = u16::from(cmf) << 8 | u16::from(flg);
    if cmf & 0x0f != 8 || cmf >> 4 > 7 || check % 31 != 0 || flg & 0x20 != 0 {
        return Err(InflateError::BadHeader);
    }
    let mut bits = BitReader {
        data: input,
        pos: 2,
        bit_buf: 0,
        bit_count: 0,
    };
    let mut out = Vec::new();
    loop {
        let last = bits.bits(1)? == 1;
        match bits.bits(2)? {
            0 => stored_block(&mut bits, &mut out, limit)?,
            1 => {
                let (lit, dist) = fixed_codes()?;
                codes_block(&mut bits, &mut out, limit, &lit, &dist)?;
            }
            2 => {
                let (lit, dist) = dynamic_codes(&mut bits)?;
                codes_block(&mut bits, &mut out, limit, &lit, &dist)?;
            }
            _ => return Err(InflateError::BadBlock),
        }
        if last {
            break;
        }
    }
    bits.align();
    let trailer = input
        .get(bits.pos..bits.pos + 4)
        .ok_or(InflateError::Truncated)?;
    let expected = u32::from_be_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    if adler32(&out) != expected {
        return Err(InflateError::Checksum);
    }
    Ok(out)
}

/// Adler-32 as zlib computes it.
pub fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65_521;
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    b << 16 | a
}

/// LSB-first bit reader over the input.
struct BitReader<'a> {
    data: &'a [u8],
    pos: usize,
    bit_buf: u32,
    bit_count: u32,
}

impl BitReader<'_> {
    /// Next `n` (<= 16) bits, least significant first.
    fn bits(&mut self, n: u32) -> Result<u32, InflateError> {
        while self.bit_count < n {
            let byte = *self.data.get(self.pos).ok_or(InflateError::Truncated)?;
            self.pos += 1;
            self.bit_buf |= u32::from(byte) << self.bit_count;
            self.bit_count += 8;
        }
        let value = self.bit_buf & ((1u32 << n) - 1);
        self.bit_buf >>= n;
        self.bit_count -= n;
        Ok(value)
    }

    /// Drops the bits left in the current byte.
    fn align(&mut self) {
        self.bit_buf = 0;
        self.bit_count = 0;
    }
}

/// A canonical Huffman code: how many codes of each length, and the symbols in code order.
struct Huffman {
    count: [u16; MAX_BITS + 1],
    symbol: Vec<u16>,
}

impl Huffman {
    /// Builds the code for per-symbol bit lengths (0 = unused). Over-subscribed sets are
    /// rejected; incomplete ones are allowed (an unused code then fails to decode).
    fn new(lengths: &[u8]) -> Result<Huffman, InflateError> {
        let mut count = [0u16; MAX_BITS + 1];
        for &len in lengths {
            count[usize::from(len)] += 1;
        }
        let mut left: i32 = 1;
        for &c in &count[1..] {
            left = (left << 1) - i32::from(c);
            if left < 0 {
                return Err(InflateError::BadCode);
            }
        }
        let mut offsets = [0u16; MAX_BITS + 2];
        for len in 1..=MAX_BITS {
            offsets[len + 1] = offsets[len] + count[len];
        }
        let mut symbol = vec![0u16; lengths.len()];
        for (sym, &len) in lengths.iter().enumerate() {
            if len != 0 {
                let slot = &mut offsets[usize::from(len)];
                symbol[usize::from(*slot)] = sym as u16;
                *slot += 1;
            }
        }
        Ok(Huffman { count, symbol })
    }

    fn decode(&self, bits: &mut BitReader<'_>) -> Result<u16, InflateError> {
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..=MAX_BITS {
            code |= bits.bits(1)? as i32;
            let count = i32::from(self.count[len]);
            if code - first < count {
                let at =
                    usize::try_from(index + code - first).map_err(|_| InflateError::BadCode)?;
                return self.symbol.get(at).copied().ok_or(InflateError::BadCode);
            }
            index += count;
            first = (first + count) << 1;
            code <<= 1;
        }
        Err(InflateError::BadCode)
    }
}

fn stored_block(
    bits: &mut BitReader<'_>,
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), InflateError> {
    bits.align();
    let header = bits
        .data
        .get(bits.pos..bits.pos + 4)
        .ok_or(InflateError::Truncated)?;
    let len = u16::from_le_bytes([header[0], header[1]]);
    let nlen = u16::from_le_bytes([header[2], header[3]]);
    if len != !nlen {
        return Err(InflateError::BadBlock);
    }
    bits.pos += 4;
    let len = usize::from(len);
    let data = bits
        .data
        .get(bits.pos..bits.pos + len)
        .ok_or(InflateError::Truncated)?;
    if out.len() + len > limit {
        return Err(InflateError::TooLarge { limit });
    }
    out.extend_from_slice(data);
    bits.pos += len;
    Ok(())
}

fn fixed_codes() -> Result<(Huffman, Huffman), InflateError> {
    let mut lit = [0u8; 288];
    lit[..144].fill(8);
    lit[144..256].fill(9);
    lit[256..280].fill(7);
    lit[280..].fill(8);
    Ok((Huffman::new(&lit)?, Huffman::new(&[5u8; 30])?))
}

fn dynamic_codes(bits: &mut BitReader<'_>) -> Result<(Huffman, Huffman), InflateError> {
    let nlen = bits.bits(5)? as usize + 257;
    let ndist = bits.bits(5)? as usize + 1;
    let ncode = bits.bits(4)? as usize + 4;
    if nlen > 286 || ndist > 30 {
        return Err(InflateError::BadCode);
    }
    let mut clen = [0u8; 19];
    for &slot in &CLEN_ORDER[..ncode] {
        clen[slot] = bits.bits(3)? as u8;
    }
    let clen_code = Huffman::new(&clen)?;
    let mut lengths = vec![0u8; nlen + ndist];
    let mut i = 0;
    while i < lengths.len() {
        let sym = clen_code.decode(bits)?;
        let (value, repeat) = match sym {
            0..=15 => (sym as u8, 1),
            16 => {
                let prev = *lengths
                    .get(i.wrapping_sub(1))
                    .filter(|_| i > 0)
                    .ok_or(InflateError::BadCode)?;
                (prev, 3 + bits.bits(2)? as usize)
            }
            17 => (0, 3 + bits.bits(3)? as usize),
            _ => (0, 11 + bits.bits(7)? as usize),
        };
        if i + repeat > lengths.len() {
            return Err(InflateError::BadCode);
        }
        lengths[i..i + repeat].fill(value);
        i += repeat;
    }
    if lengths[256] == 0 {
        return Err(InflateError::BadCode);
    }
    Ok((
        Huffman::new(&lengths[..nlen])?,
        Huffman::new(&lengths[nlen..])?,
    ))
}

fn codes_block(
    bits: &mut BitReader<'_>,
    out: &mut Vec<u8>,
    limit: usize,
    lit: &Huffman,
    dist: &Huffman,
) -> Result<(), InflateError> {
    loop {
        let sym = usize::from(lit.decode(bits)?);
        if sym < 256 {
            if out.len() >= limit {
                return Err(InflateError::TooLarge { limit });
            }
            out.push(sym as u8);
            continue;
        }
        if sym == 256 {
            return Ok(());
        }
        let li = sym - 257;
        let (Some(&base), Some(&extra)) = (LENGTH_BASE.get(li), LENGTH_EXTRA.get(li)) else {
            return Err(InflateError::BadCode);
        };
        let len = usize::from(base) + bits.bits(u32::from(extra))? as usize;
        let di = usize::from(dist.decode(bits)?);
        let (Some(&dbase), Some(&dextra)) = (DIST_BASE.get(di), DIST_EXTRA.get(di)) else {
            return Err(InflateError::BadCode);
        };
        let distance = usize::from(dbase) + bits.bits(u32::from(dextra))? as usize;
        if distance > out.len() {
            return Err(InflateError::BadDistance {
                distance,
                available: out.len(),
            });
        }
        if out.len() + len > limit {
            return Err(InflateError::TooLarge { limit });
        }
        let start = out.len() - distance;
        for k in 0..len {
            let byte = out[start + k];
            out.push(byte);
        }
    }
}

#[cfg(test)]
mod tests;
/// zlib-made test vectors shared with the compressed-body tests.
#[cfg(test)]
pub(crate) mod vectors;
