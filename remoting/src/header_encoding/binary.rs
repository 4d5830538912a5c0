//! ROCKETMQ binary header (serialize type 1, spec §5).
//!
//! ```text
//! code i16 | language u8 | version i16 | opaque i32 | flag i32 |
//! remark len i32 | remark | ext len i32 | { key len i16 | key | value len i32 | value }*
//! ```
//! Every length is bounds-checked against the bytes that remain before it is used. As in
//! Java, zero-length remark/key/value read as null (absent).

use bytes::{BufMut, BytesMut};

use crate::code::LanguageCode;
use crate::command::{ExtFields, RemotingCommand};
use crate::error::WireHeaderError;
use crate::ext_fields::ExtFieldsBuf;
use crate::header_encoding::scan;

/// Size of the fixed part (remark and ext lengths included).
pub const FIXED_LEN: usize = 21;

/// Writes the binary header of `cmd`. The caller guarantees code and version fit in 16 bits
/// (see `RemotingCommand::wire_serialize_type`); otherwise they wrap like Java's `(short)`.
pub fn encode(cmd: &RemotingCommand, dst: &mut BytesMut) {
    dst.put_i16(cmd.code() as i16);
    dst.put_u8(cmd.language().0);
    dst.put_i16(cmd.version() as i16);
    dst.put_i32(cmd.opaque());
    dst.put_i32(cmd.flag());
    match cmd.remark() {
        Some(r) => {
            dst.put_i32(r.len() as i32);
            dst.put_slice(r.as_bytes());
        }
        None => dst.put_i32(0),
    }
    let ext_len_at = dst.len();
    dst.put_i32(0);
    for (k, v) in cmd.ext_fields() {
        dst.put_i16(k.len() as i16);
        dst.put_slice(k.as_bytes());
        dst.put_i32(v.len() as i32);
        dst.put_slice(v.as_bytes());
    }
    let ext_len = (dst.len() - ext_len_at - 4) as u32;
    dst[ext_len_at..ext_len_at + 4].copy_from_slice(&ext_len.to_be_bytes());
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireHeaderError> {
        let have = self.buf.len() - self.pos;
        if n > have {
            return Err(WireHeaderError::Truncated {
                at: self.pos,
                need: n,
                have,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    fn i16(&mut self) -> Result<i16, WireHeaderError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn u8(&mut self) -> Result<u8, WireHeaderError> {
        Ok(self.take(1)?[0])
    }
    fn i32(&mut self) -> Result<i32, WireHeaderError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// A length that must be non-negative and fit in what remains.
    fn len(&self, what: &'static str, len: i64) -> Result<usize, WireHeaderError> {
        let remaining = self.remaining();
        match usize::try_from(len) {
            Ok(l) if l <= remaining => Ok(l),
            _ => Err(WireHeaderError::BadLength {
                what,
                len,
                remaining,
            }),
        }
    }
    fn str(&mut self, what: &'static str, len: usize) -> Result<&'a str, WireHeaderError> {
        let b = self.take(len)?;
        std::str::from_utf8(b).map_err(|_| WireHeaderError::NotUtf8 { what })
    }
}

/// Reads the map area when it is valid UTF-8 as a whole. A key or value is valid UTF-8 exactly
/// when its ends fall on char boundaries of `text`.
fn ext_fields_over(text: &str) -> Result<ExtFields, WireHeaderError> {
    let mut ext = ExtFieldsBuf::over_text(text, text.len() / 12 + 1);
    let mut map = Reader {
        buf: text.as_bytes(),
        pos: 0,
    };
    let span = |map: &mut Reader<'_>, what: &'static str, len: usize| {
        let start = map.pos;
        map.take(len)?;
        match text.get(start..map.pos) {
            Some(s) => Ok((
                (start, map.pos),
                scan::first_special(s.as_bytes()).is_some(),
            )),
            None => Err(WireHeaderError::NotUtf8 { what }),
        }
    };
    // Inserting in order keeps the map semantics for any writer: last duplicate wins.
    while map.remaining() > 0 {
        let klen = map.i16()?;
        let klen = map.len("key", i64::from(klen))?;
        let (key, key_escape) = span(&mut map, "key", klen)?;
        let vlen = map.i32()?;
        let vlen = map.len("value", i64::from(vlen))?;
        let (value, value_escape) = span(&mut map, "value", vlen)?;
        if klen > 0 && vlen > 0 {
            ext.set_spans(key, value, key_escape || value_escape);
        }
    }
    Ok(ext.into())
}

/// Reads the map area entry by entry, copying keys and values (area not UTF-8 as a whole,
/// e.g. a length word with a byte >= 0x80, or bad text that must be reported).
fn ext_fields_copied(area: &[u8]) -> Result<ExtFields, WireHeaderError> {
    let mut ext = ExtFieldsBuf::with_capacity(area.len() / 12 + 1, area.len());
    let mut map = Reader { buf: area, pos: 0 };
    while map.remaining() > 0 {
        let klen = map.i16()?;
        let klen = map.len("key", i64::from(klen))?;
        let key = map.str("key", klen)?;
        let vlen = map.i32()?;
        let vlen = map.len("value", i64::from(vlen))?;
        let value = map.str("value", vlen)?;
        if !key.is_empty() && !value.is_empty() {
            ext.set(key, value);
        }
    }
    Ok(ext.into())
}

/// Parses a binary header (body empty, serialize type left for the caller to set).
pub fn decode(bytes: &[u8]) -> Result<RemotingCommand, WireHeaderError> {
    let mut r = Reader { buf: bytes, pos: 0 };
    let code = i32::from(r.i16()?);
    let language = LanguageCode(r.u8()?);
    let version = i32::from(r.i16()?);
    let opaque = r.i32()?;
    let flag = r.i32()?;
    let remark_len = r.i32()?;
    let remark_len = r.len("remark", i64::from(remark_len))?;
    let remark = if remark_len > 0 {
        Some(r.str("remark", remark_len)?.to_owned())
    } else {
        None
    };
    let ext_len = r.i32()?;
    let ext_len = r.len("extFields", i64::from(ext_len))?;
    let area = r.take(ext_len)?;
    let ext = match std::str::from_utf8(area) {
        // Usual case: the whole area (length words included) is valid UTF-8, so it becomes
        // the map's text and entries point into it: no copy and no check per entry.
        Ok(text) => ext_fields_over(text)?,
        Err(_) => ext_fields_copied(area)?,
    };
    // Bytes after the map area are ignored, like Java (it reads fields, not to the end).
    Ok(RemotingCommand::from_parts(
        code, language, version, opaque, flag, remark, ext,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_at_every_byte_is_an_error() {
        let cmd = RemotingCommand::response(crate::code::ResponseCode(3), "hi")
            .with_ext_field("k", "v")
            .with_opaque(9);
        let mut b = BytesMut::new();
        encode(&cmd, &mut b);
        assert_eq!(decode(&b).unwrap(), cmd);
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn unsorted_and_duplicate_keys_read_like_inserts_in_order() {
        for pairs in [
            &[("b", "1"), ("a", "2"), ("b", "3"), ("c", "")][..],
            &[("a", "1"), ("b", "2"), ("b", "3")][..],
            &[("a", "1"), ("", "x"), ("b", "2")][..],
        ] {
            let mut b = BytesMut::new();
            encode(&RemotingCommand::success(), &mut b);
            b.truncate(b.len() - 4);
            let mut map = BytesMut::new();
            let mut expected = ExtFields::new();
            for (k, v) in pairs {
                map.put_i16(k.len() as i16);
                map.put_slice(k.as_bytes());
                map.put_i32(v.len() as i32);
                map.put_slice(v.as_bytes());
                if !k.is_empty() && !v.is_empty() {
                    expected.insert((*k).to_owned(), (*v).to_owned());
                }
            }
            b.put_i32(map.len() as i32);
            b.put_slice(&map);
            assert_eq!(decode(&b).unwrap().ext_fields(), &expected, "{pairs:?}");
        }
    }

    /// A header with the given raw map area.
    fn with_area(area: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        encode(&RemotingCommand::success(), &mut b);
        b.truncate(b.len() - 4);
        b.put_i32(area.len() as i32);
        b.put_slice(area);
        b
    }

    #[test]
    fn map_area_not_utf8_as_a_whole_is_read_entry_by_entry() {
        // Key length 200 = 0x00C8: that length word alone is not UTF-8.
        let key = "k".repeat(200);
        let mut area = BytesMut::new();
        for (k, v) in [(key.as_str(), "v"), ("a", "é\"")] {
            area.put_i16(k.len() as i16);
            area.put_slice(k.as_bytes());
            area.put_i32(v.len() as i32);
            area.put_slice(v.as_bytes());
        }
        assert!(std::str::from_utf8(&area).is_err());
        let cmd = decode(&with_area(&area)).unwrap();
        assert_eq!(cmd.ext_field(&key), Some("v"));
        assert_eq!(cmd.ext_field("a"), Some("é\""));
        let mut json = BytesMut::new();
        crate::header_encoding::json::encode(&cmd, &mut json);
        assert!(std::str::from_utf8(&json).unwrap().contains(r#""a":"é\"""#));
    }

    #[test]
    fn key_cut_inside_a_character_is_not_utf8() {
        // Key = [0xC3]; with the next length byte 0xA9 the area as a whole is UTF-8 ("é").
        let area = [0x00, 0x01, 0xC3, 0xA9, 0x00, 0x00, 0x00];
        assert!(std::str::from_utf8(&area).is_ok());
        assert_eq!(
            decode(&with_area(&area)),
            Err(WireHeaderError::NotUtf8 { what: "key" })
        );
    }

    #[test]
    fn negative_and_oversized_lengths_are_errors() {
        let mut b = BytesMut::new();
        encode(&RemotingCommand::success(), &mut b);
        let mut neg = b.clone();
        neg[13..17].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            decode(&neg),
            Err(WireHeaderError::BadLength { what: "remark", .. })
        ));
        let mut big = b.clone();
        big[17..21].copy_from_slice(&1000i32.to_be_bytes());
        assert!(matches!(
            decode(&big),
            Err(WireHeaderError::BadLength {
                what: "extFields",
                ..
            })
        ));
    }
}
