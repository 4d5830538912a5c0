//! Stored message records (message-format.md §2) as returned by PULL_MESSAGE,
//! VIEW_MESSAGE_BY_ID and QUERY_MESSAGE, plus the client-side batch element (§7.1).
//!
//! The decoder checks every length against the remaining bytes before slicing, so any input
//! yields records or a typed error, never a panic. Bodies are `Bytes` slices of the response.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};

use crate::message::{decode_properties, encode_properties, Message};
use crate::msg_id::offset_msg_id;

/// Magic of a v1 record (1-byte topic length).
pub const MAGIC_V1: i32 = 0xDAA3_20A7_u32 as i32;
/// Magic of a v2 record (2-byte topic length).
pub const MAGIC_V2: i32 = 0xDAA3_20AB_u32 as i32;
/// SYSFLAG bit: body compressed.
pub const SYSFLAG_COMPRESSED: i32 = 0x1;
/// SYSFLAG bit: born host is IPv6.
pub const SYSFLAG_BORNHOST_V6: i32 = 0x10;
/// SYSFLAG bit: store host is IPv6.
pub const SYSFLAG_STOREHOST_V6: i32 = 0x20;

/// Why a record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than a field needs.
    #[error("truncated at byte {at} (need {need} more)")]
    Truncated { at: usize, need: usize },
    /// Unknown magic code.
    #[error("bad magic {found:#010x}")]
    BadMagic { found: u32 },
    /// TOTALSIZE disagrees with the lengths inside the record.
    #[error("total size {declared} but fields add up to {actual}")]
    SizeMismatch { declared: usize, actual: usize },
    /// A length field is negative.
    #[error("negative length {len} for {field}")]
    NegativeLength { field: &'static str, len: i64 },
}

/// One decoded stored message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageExt {
    pub topic: String,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body_crc: i32,
    pub store_size: i32,
    pub body: Bytes,
    pub properties: BTreeMap<String, String>,
    /// Offset message id computed from store host + physical offset.
    pub offset_msg_id: String,
}

impl MessageExt {
    /// The user-visible message id: `UNIQ_KEY` if present, else the offset id.
    pub fn msg_id(&self) -> &str {
        self.properties
            .get(crate::message::keys::UNIQ_KEY)
            .map(String::as_str)
            .unwrap_or(&self.offset_msg_id)
    }
    /// The tag, if any.
    pub fn tags(&self) -> Option<&str> {
        self.properties
            .get(crate::message::keys::TAGS)
            .map(String::as_str)
    }
    /// The business keys, if any.
    pub fn keys(&self) -> Option<&str> {
        self.properties
            .get(crate::message::keys::KEYS)
            .map(String::as_str)
    }
}

struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    end: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<usize, DecodeError> {
        if self.end - self.pos < n {
            return Err(DecodeError::Truncated {
                at: self.pos,
                need: n - (self.end - self.pos),
            });
        }
        let start = self.pos;
        self.pos += n;
        Ok(start)
    }
    fn i16(&mut self) -> Result<i16, DecodeError> {
        let s = self.take(2)?;
        Ok(i16::from_be_bytes([self.buf[s], self.buf[s + 1]]))
    }
    fn i32(&mut self) -> Result<i32, DecodeError> {
        let s = self.take(4)?;
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.buf[s..s + 4]);
        Ok(i32::from_be_bytes(b))
    }
    fn i64(&mut self) -> Result<i64, DecodeError> {
        let s = self.take(8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.buf[s..s + 8]);
        Ok(i64::from_be_bytes(b))
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        let s = self.take(1)?;
        Ok(self.buf[s])
    }
    fn bytes(&mut self, n: usize) -> Result<Bytes, DecodeError> {
        let s = self.take(n)?;
        Ok(self.buf.slice(s..s + n))
    }
    fn host(&mut self, v6: bool) -> Result<SocketAddr, DecodeError> {
        let ip = if v6 {
            let s = self.take(16)?;
            let mut b = [0u8; 16];
            b.copy_from_slice(&self.buf[s..s + 16]);
            IpAddr::V6(Ipv6Addr::from(b))
        } else {
            let s = self.take(4)?;
            IpAddr::V4(Ipv4Addr::new(
                self.buf[s],
                self.buf[s + 1],
                self.buf[s + 2],
                self.buf[s + 3],
            ))
        };
        let port = self.i32()?;
        Ok(SocketAddr::new(ip, port as u16))
    }
}

fn non_negative(field: &'static str, len: i64) -> Result<usize, DecodeError> {
    usize::try_from(len).map_err(|_| DecodeError::NegativeLength { field, len })
}

/// Decodes the record starting at `start`; returns it and the offset just past it.
pub fn decode_one(buf: &Bytes, start: usize) -> Result<(MessageExt, usize), DecodeError> {
    let mut head = Reader {
        buf,
        pos: start,
        end: buf.len(),
    };
    let total = non_negative("TOTALSIZE", head.i32()?.into())?;
    if total < 4 {
        return Err(DecodeError::SizeMismatch {
            declared: total,
            actual: 4,
        });
    }
    if buf.len() - start < total {
        return Err(DecodeError::Truncated {
            at: start,
            need: total - (buf.len() - start),
        });
    }
    let mut r = Reader {
        buf,
        pos: start + 4,
        end: start + total,
    };
    let magic = r.i32()?;
    if magic != MAGIC_V1 && magic != MAGIC_V2 {
        return Err(DecodeError::BadMagic {
            found: magic as u32,
        });
    }
    let body_crc = r.i32()?;
    let queue_id = r.i32()?;
    let flag = r.i32()?;
    let queue_offset = r.i64()?;
    let commit_log_offset = r.i64()?;
    let sys_flag = r.i32()?;
    let born_timestamp = r.i64()?;
    let born_host = r.host(sys_flag & SYSFLAG_BORNHOST_V6 != 0)?;
    let store_timestamp = r.i64()?;
    let store_host = r.host(sys_flag & SYSFLAG_STOREHOST_V6 != 0)?;
    let reconsume_times = r.i32()?;
    let prepared_transaction_offset = r.i64()?;
    let body_len = non_negative("BODY", r.i32()?.into())?;
    let body = r.bytes(body_len)?;
    let topic_len = if magic == MAGIC_V1 {
        usize::from(r.u8()?)
    } else {
        non_negative("TOPIC", r.i16()?.into())?
    };
    let topic = String::from_utf8_lossy(&r.bytes(topic_len)?).into_owned();
    let prop_len = non_negative("PROPERTIES", r.i16()?.into())?;
    let props = r.bytes(prop_len)?;
    if r.pos != r.end {
        return Err(DecodeError::SizeMismatch {
            declared: total,
            actual: r.pos - start,
        });
    }
    let properties = decode_properties(&String::from_utf8_lossy(&props));
    Ok((
        MessageExt {
            topic,
            queue_id,
            flag,
            queue_offset,
            commit_log_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_transaction_offset,
            body_crc,
            store_size: total as i32,
            body,
            properties,
            offset_msg_id: offset_msg_id(store_host, commit_log_offset),
        },
        start + total,
    ))
}

/// Decodes back-to-back records until the buffer ends. Like Java, stops at the first record
/// that does not decode; the error (if any) is returned next to the good prefix.
pub fn decode_all(buf: &Bytes) -> (Vec<MessageExt>, Option<DecodeError>) {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        match decode_one(buf, pos) {
            Ok((m, next)) => {
                out.push(m);
                pos = next;
            }
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

/// Encodes a SEND_BATCH_MESSAGE body: one client-side element per message (§7.1).
pub fn encode_batch(messages: &[Message]) -> Bytes {
    let mut out = BytesMut::new();
    for m in messages {
        let props = encode_properties(&m.properties);
        let size = 20 + m.body.len() + 2 + props.len();
        out.reserve(size);
        out.put_i32(size as i32);
        out.put_i32(0);
        out.put_i32(0);
        out.put_i32(m.flag);
        out.put_i32(m.body.len() as i32);
        out.put_slice(&m.body);
        out.put_i16(props.len() as i16);
        out.put_slice(props.as_bytes());
    }
    out.freeze()
}

/// Fields of a stored record for [`encode_stored`] (test brokers and tools that fabricate
/// records).
#[derive(Debug, Clone)]
pub struct StoredFields<'a> {
    pub topic: &'a str,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub commit_log_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub body: &'a [u8],
    pub properties: &'a str,
}

fn put_host(out: &mut BytesMut, addr: SocketAddr) {
    match addr.ip() {
        IpAddr::V4(ip) => out.put_slice(&ip.octets()),
        IpAddr::V6(ip) => out.put_slice(&ip.octets()),
    }
    out.put_i32(i32::from(addr.port()));
}

/// Encodes a v1 stored record (IPv4 or IPv6 hosts; the host bits of `sys_flag` are set
/// from the addresses). Topic must be at most 127 bytes.
pub fn encode_stored(f: &StoredFields<'_>, out: &mut BytesMut) {
    let mut sys_flag = f.sys_flag & !(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
    if f.born_host.is_ipv6() {
        sys_flag |= SYSFLAG_BORNHOST_V6;
    }
    if f.store_host.is_ipv6() {
        sys_flag |= SYSFLAG_STOREHOST_V6;
    }
    let host_len = |a: SocketAddr| if a.is_ipv6() { 20 } else { 8 };
    let total = 4
        + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + host_len(f.born_host)
        + 8
        + host_len(f.store_host)
        + 4
        + 8
        + 4
        + f.body.len()
        + 1
        + f.topic.len()
        + 2
        + f.properties.len();
    out.reserve(total);
    out.put_i32(total as i32);
    out.put_i32(MAGIC_V1);
    out.put_i32((crc32fast::hash(f.body) & 0x7FFF_FFFF) as i32);
    out.put_i32(f.queue_id);
    out.put_i32(f.flag);
    out.put_i64(f.queue_offset);
    out.put_i64(f.commit_log_offset);
    out.put_i32(sys_flag);
    out.put_i64(f.born_timestamp);
    put_host(out, f.born_host);
    out.put_i64(f.store_timestamp);
    put_host(out, f.store_host);
    out.put_i32(0);
    out.put_i64(0);
    out.put_i32(f.body.len() as i32);
    out.put_slice(f.body);
    out.put_u8(f.topic.len() as u8);
    out.put_slice(f.topic.as_bytes());
    out.put_i16(f.properties.len() as i16);
    out.put_slice(f.properties.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// message-format.md §14.1, the hex dump of the golden stored record.
    const GOLDEN: &str = "
        00 00 00 bb da a3 20 a7 77 d1 89 82 00 00 00 01
        00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00
        00 00 00 30 00 00 00 00 00 00 01 8b cf e5 68 00
        c0 a8 00 0a 00 00 d4 31 00 00 01 8b cf e5 68 7b
        c0 a8 00 14 00 00 78 bf 00 00 00 00 00 00 00 00
        00 00 00 00 00 00 00 05 48 65 6c 6c 6f 09 54 6f
        70 69 63 54 65 73 74 00 52 43 4c 55 53 54 45 52
        01 52 61 66 74 43 6c 75 73 74 65 72 02 54 41 47
        53 01 54 61 67 41 02 55 4e 49 51 5f 4b 45 59 01
        43 30 41 38 30 30 30 41 31 46 39 34 31 38 42 34
        41 41 43 32 30 30 30 30 30 30 30 30 30 30 30 30
        02 57 41 49 54 01 74 72 75 65 02";

    fn unhex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect()
    }

    fn golden() -> Bytes {
        let fields = StoredFields {
            topic: "TopicTest",
            queue_id: 1,
            flag: 0,
            queue_offset: 5,
            commit_log_offset: 48,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: "192.168.0.10:54321".parse().unwrap(),
            store_timestamp: 1_700_000_000_123,
            store_host: "192.168.0.20:30911".parse().unwrap(),
            body: b"Hello",
            properties: "CLUSTER\u{1}RaftCluster\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}C0A8000A1F9418B4AAC2000000000000\u{2}WAIT\u{1}true\u{2}",
        };
        let mut b = BytesMut::new();
        encode_stored(&fields, &mut b);
        b.freeze()
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn golden_record_encodes_and_decodes() {
        let b = golden();
        assert_eq!(b.len(), 187);
        assert_eq!(hex(&b), hex(&unhex(GOLDEN)));
        let (m, next) = decode_one(&b, 0).unwrap();
        assert_eq!(next, 187);
        assert_eq!(m.topic, "TopicTest");
        assert_eq!(m.queue_id, 1);
        assert_eq!(m.queue_offset, 5);
        assert_eq!(m.commit_log_offset, 48);
        assert_eq!(m.body_crc, 0x77D1_8982);
        assert_eq!(m.body.as_ref(), b"Hello");
        assert_eq!(m.tags(), Some("TagA"));
        assert_eq!(m.offset_msg_id, "C0A80014000078BF0000000000000030");
        assert_eq!(m.msg_id(), "C0A8000A1F9418B4AAC2000000000000");
        assert_eq!(m.born_host.to_string(), "192.168.0.10:54321");
    }

    #[test]
    fn back_to_back_and_truncation_never_panic() {
        let one = golden();
        let mut two = BytesMut::from(&one[..]);
        two.extend_from_slice(&one);
        let two = two.freeze();
        let (ms, err) = decode_all(&two);
        assert_eq!(ms.len(), 2);
        assert!(err.is_none());
        for cut in 0..two.len() {
            let (ms, err) = decode_all(&two.slice(..cut));
            assert_eq!(ms.len(), cut / 187);
            assert_eq!(err.is_some(), cut % 187 != 0, "cut {cut}");
        }
        // Every single-byte corruption of the header words yields records or an error.
        for i in 0..40 {
            let mut bad = BytesMut::from(&one[..]);
            bad[i] ^= 0xFF;
            let _ = decode_all(&bad.freeze());
        }
    }

    #[test]
    fn batch_element_matches_spec_vector() {
        let mut m = Message::new("T", "Hi");
        m.properties.clear();
        m.properties.insert("TAGS".into(), "TagA".into());
        let b = encode_batch(&[m]);
        assert_eq!(
            hex(&b),
            hex(&unhex(
                "00 00 00 22 00 00 00 00 00 00 00 00 00 00 00 00
                 00 00 00 02 48 69 00 0a 54 41 47 53 01 54 61 67
                 41 02"
            ))
        );
    }
}
