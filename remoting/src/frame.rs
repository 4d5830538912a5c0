//! Pure frame layer: length-prefixed frame <-> (serialize type, header bytes, body bytes).
//!
//! ```text
//! | total length L: i32 (excludes itself) | word: type << 24 | H | header: H bytes | body |
//! ```
//!
//! Owns: the length arithmetic and every limit check. Must not: parse headers, allocate
//! before the limits are checked, or panic on any input. "Need more bytes" is `Ok(None)`.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::FrameError;

/// Largest total-length word Java accepts: a 16 MiB frame including the 4-byte length field.
pub const DEFAULT_MAX_FRAME_LEN: usize = 16_777_216 - 4;
/// The header length is a 24-bit field.
pub const MAX_HEADER_LEN: usize = 0x00FF_FFFF;
/// Bytes of the total-length word.
pub const LENGTH_FIELD_LEN: usize = 4;
/// Bytes of the header-length word.
pub const HEADER_WORD_LEN: usize = 4;

/// How the header of a frame is serialized (high byte of the header-length word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SerializeType {
    /// UTF-8 JSON object (type byte 0). The default: every client can read it.
    #[default]
    Json,
    /// Compact binary header (type byte 1).
    RocketMq,
}

impl SerializeType {
    /// The type byte written in the header-length word.
    pub fn code(self) -> u8 {
        match self {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        }
    }

    /// Parses the type byte.
    pub fn from_code(code: u8) -> Result<SerializeType, FrameError> {
        match code {
            0 => Ok(SerializeType::Json),
            1 => Ok(SerializeType::RocketMq),
            found => Err(FrameError::UnknownSerializeType { found }),
        }
    }

    /// Name used in `serializeTypeCurrentRPC`.
    pub fn name(self) -> &'static str {
        match self {
            SerializeType::Json => "JSON",
            SerializeType::RocketMq => "ROCKETMQ",
        }
    }
}

/// One frame split into its parts; header and body share the receive buffer (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    /// Serialization of `header`.
    pub serialize_type: SerializeType,
    /// Header bytes (H bytes).
    pub header: Bytes,
    /// Body bytes (may be empty).
    pub body: Bytes,
}

/// Validates the fixed prefix of a frame from whatever bytes are available.
///
/// Returns the total frame size (length field included) once the length word is known.
/// Checks the header-length word as soon as its 4 bytes are present, so a bad frame is
/// rejected before its body arrives.
pub fn check_prefix(src: &[u8], max_frame_len: usize) -> Result<Option<usize>, FrameError> {
    let Some(len_bytes) = src.get(..LENGTH_FIELD_LEN) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
    if len < 0 {
        return Err(FrameError::NegativeLength { len });
    }
    let len = len as usize;
    if len > max_frame_len {
        return Err(FrameError::TooLong {
            len,
            max: max_frame_len,
        });
    }
    if len < HEADER_WORD_LEN {
        return Err(FrameError::TooShort { len });
    }
    if let Some(word) = src.get(LENGTH_FIELD_LEN..LENGTH_FIELD_LEN + HEADER_WORD_LEN) {
        SerializeType::from_code(word[0])?;
        let header_len = u32::from_be_bytes([0, word[1], word[2], word[3]]) as usize;
        let available = len - HEADER_WORD_LEN;
        if header_len > available {
            return Err(FrameError::BadHeaderLength {
                header_len,
                available,
            });
        }
    }
    Ok(Some(LENGTH_FIELD_LEN + len))
}

/// Splits one complete frame off the front of `src`, or returns `Ok(None)` if more bytes are
/// needed. Never allocates: the parts are views into `src`'s storage.
pub fn decode_frame(
    src: &mut BytesMut,
    max_frame_len: usize,
) -> Result<Option<RawFrame>, FrameError> {
    let Some(total) = check_prefix(src, max_frame_len)? else {
        return Ok(None);
    };
    if src.len() < total {
        return Ok(None);
    }
    let mut frame = src.split_to(total).freeze();
    frame.advance(LENGTH_FIELD_LEN);
    let word = frame.get_u32();
    let serialize_type = SerializeType::from_code((word >> 24) as u8)?;
    let header_len = (word & MAX_HEADER_LEN as u32) as usize;
    // check_prefix guaranteed header_len <= frame.len().
    let header = frame.split_to(header_len);
    Ok(Some(RawFrame {
        serialize_type,
        header,
        body: frame,
    }))
}

/// Appends one frame to `dst`: the header is produced by `write_header` directly into `dst`
/// (no intermediate buffer), then the body is copied. On error `dst` is left unchanged.
pub fn encode_frame_with(
    dst: &mut BytesMut,
    serialize_type: SerializeType,
    max_frame_len: usize,
    write_header: impl FnOnce(&mut BytesMut),
    body: &[u8],
) -> Result<(), FrameError> {
    let start = dst.len();
    dst.put_u64(0); // length word + header-length word, patched below
    write_header(dst);
    let header_len = dst.len() - start - LENGTH_FIELD_LEN - HEADER_WORD_LEN;
    let total = HEADER_WORD_LEN + header_len + body.len();
    if header_len > MAX_HEADER_LEN {
        dst.truncate(start);
        return Err(FrameError::Encode("header longer than 24 bits"));
    }
    if total > max_frame_len || total > i32::MAX as usize {
        dst.truncate(start);
        return Err(FrameError::Encode(
            "frame longer than the maximum frame length",
        ));
    }
    dst.put_slice(body);
    let word = (u32::from(serialize_type.code()) << 24) | header_len as u32;
    dst[start..start + 4].copy_from_slice(&(total as u32).to_be_bytes());
    dst[start + 4..start + 8].copy_from_slice(&word.to_be_bytes());
    Ok(())
}

/// Appends a frame made of already-serialized parts.
pub fn encode_frame(
    dst: &mut BytesMut,
    serialize_type: SerializeType,
    header: &[u8],
    body: &[u8],
    max_frame_len: usize,
) -> Result<(), FrameError> {
    dst.reserve(8 + header.len() + body.len());
    encode_frame_with(
        dst,
        serialize_type,
        max_frame_len,
        |d| d.put_slice(header),
        body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: i32, word: u32, rest: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_i32(len);
        b.put_u32(word);
        b.put_slice(rest);
        b
    }

    #[test]
    fn splits_header_and_body() {
        let mut b = frame(4 + 2 + 3, 2, b"hhbod");
        let f = decode_frame(&mut b, DEFAULT_MAX_FRAME_LEN)
            .unwrap()
            .unwrap();
        assert_eq!(f.serialize_type, SerializeType::Json);
        assert_eq!(&f.header[..], b"hh");
        assert_eq!(&f.body[..], b"bod");
        assert!(b.is_empty());
    }

    #[test]
    fn incomplete_is_none() {
        let full = frame(4 + 2 + 3, 2, b"hhbod");
        for cut in 0..full.len() {
            let mut b = BytesMut::from(&full[..cut]);
            assert_eq!(decode_frame(&mut b, DEFAULT_MAX_FRAME_LEN).unwrap(), None);
            assert_eq!(b.len(), cut, "nothing consumed");
        }
    }

    #[test]
    fn limits_are_checked_from_the_prefix() {
        let mut neg = BytesMut::from(&(-1i32).to_be_bytes()[..]);
        assert_eq!(
            decode_frame(&mut neg, DEFAULT_MAX_FRAME_LEN),
            Err(FrameError::NegativeLength { len: -1 })
        );
        let mut big = BytesMut::from(&16_777_213i32.to_be_bytes()[..]);
        assert!(matches!(
            decode_frame(&mut big, DEFAULT_MAX_FRAME_LEN),
            Err(FrameError::TooLong {
                len: 16_777_213,
                ..
            })
        ));
        let mut ok_max = BytesMut::from(&16_777_212i32.to_be_bytes()[..]);
        assert_eq!(decode_frame(&mut ok_max, DEFAULT_MAX_FRAME_LEN), Ok(None));
        for len in 0..4 {
            let mut short = BytesMut::from(&(len as i32).to_be_bytes()[..]);
            assert_eq!(
                decode_frame(&mut short, DEFAULT_MAX_FRAME_LEN),
                Err(FrameError::TooShort { len })
            );
        }
        let mut bad_h = frame(10, 7, b"");
        assert_eq!(
            decode_frame(&mut bad_h, DEFAULT_MAX_FRAME_LEN),
            Err(FrameError::BadHeaderLength {
                header_len: 7,
                available: 6
            })
        );
        let mut bad_t = frame(10, 0x0200_0000, b"");
        assert_eq!(
            decode_frame(&mut bad_t, DEFAULT_MAX_FRAME_LEN),
            Err(FrameError::UnknownSerializeType { found: 2 })
        );
    }

    #[test]
    fn encode_then_decode() {
        let mut b = BytesMut::new();
        encode_frame(
            &mut b,
            SerializeType::RocketMq,
            b"head",
            b"body",
            DEFAULT_MAX_FRAME_LEN,
        )
        .unwrap();
        assert_eq!(&b[..8], &[0, 0, 0, 12, 1, 0, 0, 4]);
        let f = decode_frame(&mut b, DEFAULT_MAX_FRAME_LEN)
            .unwrap()
            .unwrap();
        assert_eq!(f.serialize_type, SerializeType::RocketMq);
        assert_eq!(&f.header[..], b"head");
        assert_eq!(&f.body[..], b"body");
    }

    #[test]
    fn encode_refuses_oversized_frames_and_leaves_dst_untouched() {
        let mut b = BytesMut::from(&b"xy"[..]);
        let r = encode_frame(&mut b, SerializeType::Json, b"h", &[0u8; 100], 50);
        assert!(r.is_err());
        assert_eq!(&b[..], b"xy");
    }
}
