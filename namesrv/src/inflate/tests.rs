//! Inflate against zlib-made vectors (stored, fixed and dynamic Huffman blocks), plus
//! truncation, corruption and size-limit checks that must fail cleanly.

use super::*;

use super::vectors;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn text() -> Vec<u8> {
    (0..vectors::TEXT_LINES)
        .map(|i| format!("topic-{i} {} queue data line {};\n", i * 7 % 13, i % 5))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn inflates_every_block_type() {
    for (name, v) in [
        ("stored", vectors::STORED),
        ("fast", vectors::FAST),
        ("best", vectors::BEST),
    ] {
        assert_eq!(zlib_inflate(&unhex(v), 1 << 20).unwrap(), text(), "{name}");
    }
    assert_eq!(zlib_inflate(&unhex(vectors::TINY), 16).unwrap(), b"abc");
    assert_eq!(zlib_inflate(&unhex(vectors::EMPTY), 0).unwrap(), b"");
}

#[test]
fn output_limit_is_enforced() {
    let limit = text().len() - 1;
    for v in [vectors::STORED, vectors::BEST] {
        assert_eq!(
            zlib_inflate(&unhex(v), limit),
            Err(InflateError::TooLarge { limit })
        );
    }
}

#[test]
fn truncated_and_corrupted_streams_fail_without_panic() {
    let best = unhex(vectors::BEST);
    for cut in 0..best.len() {
        assert!(zlib_inflate(&best[..cut], 1 << 20).is_err(), "prefix {cut}");
    }
    for at in 0..best.len() {
        for flip in [0x01u8, 0x80] {
            let mut bad = best.clone();
            bad[at] ^= flip;
            if let Ok(out) = zlib_inflate(&bad, 1 << 20) {
                // Adler-32 makes an undetected change practically impossible.
                assert_eq!(out, text(), "byte {at} flip {flip:#x}");
            }
        }
    }
}

#[test]
fn bad_headers_are_rejected() {
    assert_eq!(zlib_inflate(&[0x78], 10), Err(InflateError::Truncated));
    assert_eq!(
        zlib_inflate(&[0x79, 0x9c, 0], 10),
        Err(InflateError::BadHeader)
    );
    assert_eq!(
        zlib_inflate(&[0x78, 0x9d, 0], 10),
        Err(InflateError::BadHeader)
    );
}

#[test]
fn adler32_known_value() {
    assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    assert_eq!(adler32(b""), 1);
}
