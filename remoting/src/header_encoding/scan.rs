//! Finding the bytes a JSON string cannot hold verbatim (`"`, `\` and controls below 0x20),
//! eight bytes at a time: header strings are scanned on every encode and decode.

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// High bit set in each byte of `w` below `n` (n <= 0x80). Only the lowest flagged byte is
/// exact (a borrow may flag bytes above it), which is all a "first match" search needs.
fn below(w: u64, n: u8) -> u64 {
    w.wrapping_sub(ONES * u64::from(n)) & !w & HIGHS
}

/// High bit set in each byte of `w` equal to `b`; same exactness as [`below`].
fn equal(w: u64, b: u8) -> u64 {
    below(w ^ (ONES * u64::from(b)), 1)
}

fn is_special(b: u8) -> bool {
    b < 0x20 || b == b'"' || b == b'\\'
}

/// Index of the first `"`, `\` or control byte in `bytes`.
#[inline]
pub(crate) fn first_special(bytes: &[u8]) -> Option<usize> {
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let hits = below(w, 0x20) | equal(w, b'"') | equal(w, b'\\');
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| is_special(b))
        .map(|i| at + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_a_byte_loop_for_every_byte_at_every_position() {
        for len in 0..20 {
            for pos in 0..len {
                for b in 0..=255u8 {
                    let mut v = vec![b'a'; len];
                    v[pos] = b;
                    // Noise after the byte must not change the answer.
                    if pos + 1 < len {
                        v[pos + 1] = 0;
                    }
                    let expected = v.iter().position(|&c| is_special(c));
                    assert_eq!(first_special(&v), expected, "{v:?}");
                }
            }
        }
    }
}
