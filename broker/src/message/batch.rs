//! SEND_BATCH_MESSAGE body: client-side elements `TOTALSIZE | MAGIC(0) | BODYCRC(0) | FLAG |
//! BODYLEN BODY | PROPLEN PROPERTIES` (spec message-format.md §7.1), split zero-copy.

use bytes::{Buf, Bytes};

use super::MessageError;

/// Fixed part of a batch element: 4 size + 4 magic + 4 crc + 4 flag + 4 body length + 2
/// properties length.
pub const BATCH_ELEMENT_FIXED_LEN: usize = 22;

/// One message of a batch; becomes one stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchElement {
    pub flag: i32,
    pub body: Bytes,
    /// Encoded properties string of this element (§5).
    pub properties: Bytes,
}

/// Iterates the elements of a batch body; stops after the first malformed element (yielding
/// its error). Bodies longer than `max_body_bytes` are errors.
pub fn decode_batch(body: Bytes, max_body_bytes: usize) -> BatchIter {
    BatchIter {
        rest: body,
        max_body_bytes,
        failed: false,
    }
}

/// Iterator returned by [`decode_batch`].
#[derive(Debug)]
pub struct BatchIter {
    rest: Bytes,
    max_body_bytes: usize,
    failed: bool,
}

impl BatchIter {
    fn element(&mut self) -> Result<BatchElement, MessageError> {
        let have = self.rest.len();
        let truncated = |need| MessageError::Truncated { need, have };
        if have < BATCH_ELEMENT_FIXED_LEN {
            return Err(truncated(BATCH_ELEMENT_FIXED_LEN));
        }
        let mut hdr = &self.rest[..];
        let total = hdr.get_i32();
        let _magic = hdr.get_i32();
        let _crc = hdr.get_i32();
        let flag = hdr.get_i32();
        let body_len = hdr.get_i32();
        if total < BATCH_ELEMENT_FIXED_LEN as i32 {
            return Err(MessageError::BadTotalSize { size: total });
        }
        if body_len < 0 {
            return Err(MessageError::NegativeLength {
                field: "body",
                len: i64::from(body_len),
            });
        }
        let body_len = body_len as usize;
        if body_len > self.max_body_bytes {
            return Err(MessageError::TooLong {
                field: "body",
                len: body_len,
                max: self.max_body_bytes,
            });
        }
        let total = total as usize;
        if total > have {
            return Err(truncated(total));
        }
        let props_len_pos = 20 + body_len;
        if props_len_pos + 2 > total {
            return Err(MessageError::SizeMismatch {
                declared: total as i64,
                computed: (props_len_pos + 2) as i64,
            });
        }
        let props_len =
            i16::from_be_bytes([self.rest[props_len_pos], self.rest[props_len_pos + 1]]);
        if props_len < 0 {
            return Err(MessageError::NegativeLength {
                field: "properties",
                len: i64::from(props_len),
            });
        }
        let computed = props_len_pos + 2 + props_len as usize;
        if computed != total {
            return Err(MessageError::SizeMismatch {
                declared: total as i64,
                computed: computed as i64,
            });
        }
        let element = BatchElement {
            flag,
            body: self.rest.slice(20..20 + body_len),
            properties: self.rest.slice(props_len_pos + 2..total),
        };
        self.rest.advance(total);
        Ok(element)
    }
}

impl Iterator for BatchIter {
    type Item = Result<BatchElement, MessageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let r = self.element();
        self.failed = r.is_err();
        Some(r)
    }
}

/// Encodes one batch element (what a client sends; used by tests and tools).
pub fn encode_batch_element(out: &mut bytes::BytesMut, flag: i32, body: &[u8], properties: &[u8]) {
    use bytes::BufMut;
    let total = BATCH_ELEMENT_FIXED_LEN + body.len() + properties.len();
    out.reserve(total);
    out.put_i32(total as i32);
    out.put_i32(0);
    out.put_i32(0);
    out.put_i32(flag);
    out.put_i32(body.len() as i32);
    out.put_slice(body);
    out.put_i16(properties.len() as i16);
    out.put_slice(properties);
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC_EXAMPLE: [u8; 34] = [
        0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x48, 0x69, 0x00, 0x0a, 0x54, 0x41, 0x47, 0x53, 0x01, 0x54,
        0x61, 0x67, 0x41, 0x02,
    ];

    #[test]
    fn spec_example_decodes_and_reencodes() {
        let mut it = decode_batch(Bytes::from_static(&SPEC_EXAMPLE), 1024);
        let e = it.next().unwrap().unwrap();
        assert_eq!(e.flag, 0);
        assert_eq!(&e.body[..], b"Hi");
        assert_eq!(&e.properties[..], b"TAGS\x01TagA\x02");
        assert!(it.next().is_none());
        let mut out = bytes::BytesMut::new();
        encode_batch_element(&mut out, 0, b"Hi", b"TAGS\x01TagA\x02");
        assert_eq!(&out[..], &SPEC_EXAMPLE[..]);
    }

    #[test]
    fn several_elements_then_garbage_stops_with_an_error() {
        let mut out = bytes::BytesMut::new();
        encode_batch_element(&mut out, 1, b"a", b"");
        encode_batch_element(&mut out, 2, b"bb", b"K\x01v\x02");
        out.extend_from_slice(&[0, 0, 0, 5]);
        let got: Vec<_> = decode_batch(out.freeze(), 16).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].as_ref().unwrap().flag, 2);
        assert!(got[2].is_err());
    }

    #[test]
    fn oversized_body_and_size_mismatch_are_errors() {
        let mut out = bytes::BytesMut::new();
        encode_batch_element(&mut out, 0, b"12345", b"");
        let e = decode_batch(out.clone().freeze(), 4).next().unwrap();
        assert!(matches!(e, Err(MessageError::TooLong { .. })));
        out[3] += 1;
        out.extend_from_slice(&[0]);
        let e = decode_batch(out.freeze(), 16).next().unwrap();
        assert!(matches!(e, Err(MessageError::SizeMismatch { .. })));
    }
}
