//! Padded standard base64 (RFC 4648 §4, DLedger's `byte[]` in JSON) for the PUSH hot path:
//! encodes straight into an output buffer and decodes a string's content straight into a
//! caller's slice, without intermediate allocations.
//!
//! The decoder accepts only canonical input (length a multiple of 4, padding only at the end,
//! zero trailing bits) and says `None` for anything else; callers then fall back to the
//! general decoder, which gives the precise error. Tests compare both with the `base64` crate.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Two output characters for every 12-bit input group.
static ENC12: [[u8; 2]; 4096] = {
    let mut t = [[0u8; 2]; 4096];
    let mut i = 0;
    while i < 4096 {
        t[i] = [ALPHABET[i >> 6], ALPHABET[i & 63]];
        i += 1;
    }
    t
};

/// 6-bit value of every byte; 0xFF for bytes outside the alphabet.
static DEC: [u8; 256] = {
    let mut t = [0xFFu8; 256];
    let mut i = 0;
    while i < 64 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Length of the padded encoding of `n` bytes.
pub(crate) fn encoded_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Appends the padded encoding of `input` to `out`.
pub(crate) fn encode_into(out: &mut Vec<u8>, input: &[u8]) {
    let start = out.len();
    out.resize(start + encoded_len(input.len()), 0);
    let dst = &mut out[start..];
    let full = input.len() / 3;
    let (body, tail) = dst.split_at_mut(full * 4);
    for (s, d) in input.chunks_exact(3).zip(body.chunks_exact_mut(4)) {
        let n = (usize::from(s[0]) << 16) | (usize::from(s[1]) << 8) | usize::from(s[2]);
        let hi = ENC12[n >> 12];
        let lo = ENC12[n & 0xFFF];
        d.copy_from_slice(&[hi[0], hi[1], lo[0], lo[1]]);
    }
    let rest = &input[full * 3..];
    let a = |v: u8| ALPHABET[usize::from(v & 63)];
    match *rest {
        [b0] => tail.copy_from_slice(&[a(b0 >> 2), a((b0 & 3) << 4), b'=', b'=']),
        [b0, b1] => tail.copy_from_slice(&[
            a(b0 >> 2),
            a(((b0 & 3) << 4) | (b1 >> 4)),
            a((b1 & 15) << 2),
            b'=',
        ]),
        _ => {}
    }
}

/// Decoded length of canonical padded `text`, or `None` if its length is not a multiple
/// of 4 (padding characters are checked by [`decode_into`]).
pub(crate) fn decoded_len(text: &[u8]) -> Option<usize> {
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let pad = match text {
        [.., b'=', b'='] => 2,
        [.., b'='] => 1,
        _ => 0,
    };
    Some(text.len() / 4 * 3 - pad)
}

/// Decodes canonical padded `text` into `out`, which must be exactly
/// [`decoded_len`]`(text)` long. `None` if `text` is not canonical base64.
pub(crate) fn decode_into(text: &[u8], out: &mut [u8]) -> Option<()> {
    if decoded_len(text)? != out.len() {
        return None;
    }
    if text.is_empty() {
        return Some(());
    }
    let quanta = text.len() / 4;
    let (body, last) = text.split_at((quanta - 1) * 4);
    let (out_body, out_last) = out.split_at_mut((quanta - 1) * 3);
    let mut bad = 0u8;
    for (s, d) in body.chunks_exact(4).zip(out_body.chunks_exact_mut(3)) {
        let (a, b, c, e) = (
            DEC[usize::from(s[0])],
            DEC[usize::from(s[1])],
            DEC[usize::from(s[2])],
            DEC[usize::from(s[3])],
        );
        bad |= a | b | c | e;
        let n = (u32::from(a) << 18) | (u32::from(b) << 12) | (u32::from(c) << 6) | u32::from(e);
        d.copy_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    if bad & 0xC0 != 0 {
        return None;
    }
    let v = |x: u8| {
        let d = DEC[usize::from(x)];
        (d < 64).then_some(u32::from(d))
    };
    let n = (v(last[0])? << 18) | (v(last[1])? << 12);
    match (last[2], last[3], out_last.len()) {
        (b'=', b'=', 1) => {
            if n & 0xFFFF != 0 {
                return None; // non-zero trailing bits
            }
            out_last[0] = (n >> 16) as u8;
        }
        (c, b'=', 2) => {
            let n = n | (v(c)? << 6);
            if n & 0xFF != 0 {
                return None;
            }
            out_last.copy_from_slice(&[(n >> 16) as u8, (n >> 8) as u8]);
        }
        (c, e, 3) => {
            let n = n | (v(c)? << 6) | v(e)?;
            out_last.copy_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
        }
        _ => return None,
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn reference() -> base64::engine::GeneralPurpose {
        base64::engine::general_purpose::STANDARD
    }

    fn decode(text: &[u8]) -> Option<Vec<u8>> {
        let mut out = vec![0; decoded_len(text)?];
        decode_into(text, &mut out)?;
        Some(out)
    }

    #[test]
    fn encodes_and_decodes_like_the_base64_crate() {
        let seed: u64 = std::env::var("B64_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0xb64);
        println!("b64 seed {seed}");
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in (0..70).chain([1023, 1024, 1025, 4096]) {
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let mut ours = b"prefix".to_vec();
            encode_into(&mut ours, &data);
            let theirs = reference().encode(&data);
            assert_eq!(&ours[6..], theirs.as_bytes(), "len {len}");
            assert_eq!(decode(theirs.as_bytes()).as_deref(), Some(&data[..]));
        }
    }

    #[test]
    fn rejects_what_the_strict_decoder_rejects() {
        let seed: u64 = std::env::var("B64_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0xb64);
        println!("b64 seed {seed}");
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let charset = b"AQgw+/=\"\\ \n-_Zz09";
        for _ in 0..20_000 {
            let len = (next() % 13) as usize;
            let text: Vec<u8> = (0..len)
                .map(|_| charset[(next() % charset.len() as u64) as usize])
                .collect();
            let ours = decode(&text);
            let theirs = reference().decode(&text).ok();
            if ours.is_some() {
                assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(&text));
            }
            if theirs.is_some() && text.iter().all(|b| !b.is_ascii_whitespace()) {
                assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(&text));
            }
        }
        for bad in [&b"QR=="[..], b"QUJ=", b"Q===", b"=AAA", b"QUJD=", b"QU=D"] {
            assert_eq!(decode(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(decode(b"").as_deref(), Some(&b""[..]));
    }
}
