//! Consume-queue tag code: Java `String.hashCode()` of the `TAGS` property (spec §6).

/// Java `String.hashCode()`: `h = 31*h + c` over UTF-16 code units, wrapping i32.
pub fn java_string_hash(s: &str) -> i32 {
    extend_java_hash(0, s)
}

/// Continues a Java `String.hashCode()` state `h` over the UTF-16 units of `s` (hashes a
/// concatenation piece by piece, without building the string).
pub fn extend_java_hash(h: i32, s: &str) -> i32 {
    if s.is_ascii() {
        extend_java_hash_ascii(h, s.as_bytes())
    } else {
        s.encode_utf16().fold(h, |h, unit| {
            h.wrapping_mul(31).wrapping_add(i32::from(unit))
        })
    }
}

/// [`extend_java_hash`] of ASCII text given as bytes (one UTF-16 unit per byte), so callers
/// holding raw record bytes need no UTF-8 check first. Four bytes per step:
/// h*31^4 + b0*31^3 + b1*31^2 + b2*31 + b3, one multiply of the running hash per four bytes
/// instead of four dependent ones (every member hashes each record's topic and keys).
pub fn extend_java_hash_ascii(mut h: i32, ascii: &[u8]) -> i32 {
    let mut chunks = ascii.chunks_exact(4);
    for c in &mut chunks {
        let [b0, b1, b2, b3] = [c[0], c[1], c[2], c[3]].map(i32::from);
        let tail = b0
            .wrapping_mul(29_791)
            .wrapping_add(b1.wrapping_mul(961))
            .wrapping_add(b2.wrapping_mul(31))
            .wrapping_add(b3);
        h = h.wrapping_mul(923_521).wrapping_add(tail);
    }
    for &b in chunks.remainder() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(b));
    }
    h
}

/// Tag code of a message with this `TAGS` value; 0 when there is no tag (sign-extended hash).
pub fn tag_code(tags: Option<&str>) -> i64 {
    match tags {
        Some(t) if !t.is_empty() => i64::from(java_string_hash(t)),
        _ => 0,
    }
}

/// Tag code from the raw stored `TAGS` bytes (invalid UTF-8 is hashed as Java would after
/// lossy decoding).
pub fn tag_code_of_bytes(tags: &[u8]) -> i64 {
    if tags.is_empty() {
        return 0;
    }
    if tags.is_ascii() {
        return i64::from(extend_java_hash_ascii(0, tags));
    }
    match std::str::from_utf8(tags) {
        Ok(s) => i64::from(java_string_hash(s)),
        Err(_) => i64::from(java_string_hash(&String::from_utf8_lossy(tags))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_examples() {
        assert_eq!(tag_code(Some("TagA")), 2_598_919);
        assert_eq!(tag_code(Some("TagA")), 0x0000_0000_0027_A807);
        assert_eq!(tag_code(Some("ZZZZZZZZ")), -1_127_396_096);
        assert_eq!(tag_code(Some("ZZZZZZZZ")) as u64, 0xFFFF_FFFF_BCCD_4D00);
        assert_eq!(tag_code(None), 0);
        assert_eq!(tag_code_of_bytes(b"TagA"), 2_598_919);
    }

    #[test]
    fn four_bytes_per_step_match_the_byte_loop_at_every_length() {
        let text = "BenchTopic#7F0000010000AAAABBBBCCCCDDDDEEEE~zZ";
        for end in 0..=text.len() {
            for start in [0, 1, 3] {
                let s = &text[start.min(end)..end];
                let expected = s
                    .bytes()
                    .fold(7i32, |h, b| h.wrapping_mul(31).wrapping_add(i32::from(b)));
                assert_eq!(extend_java_hash(7, s), expected, "{s:?}");
            }
        }
    }

    #[test]
    fn hashes_utf16_units_not_bytes() {
        // "é" is U+00E9: one UTF-16 unit (233), two UTF-8 bytes.
        assert_eq!(java_string_hash("é"), 233);
        // U+1F600 is a surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
        assert_eq!(java_string_hash("\u{1F600}"), 0xD83D * 31 + 0xDE00);
    }
}
