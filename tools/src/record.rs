//! Stored message records (message-format.md §2) as returned by PULL_MESSAGE,
//! VIEW_MESSAGE_BY_ID and QUERY_MESSAGE, plus the SEND_BATCH_MESSAGE body (§7.1).
//!
//! The byte layer is the broker's (`broker::message::{record, batch, msg_id}`): its decoder
//! checks every length before slicing, so any input yields records or a typed error, never a
//! panic. This module only turns a decoded record into the client's owned [`MessageExt`]
//! (properties as a map, offset id computed); bodies stay `Bytes` slices of the response.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use broker::message::batch::encode_batch_element;
use broker::message::record::{decode_records, CrcCheck, StoredMessage};
use broker::message::MessageError;
use bytes::{Bytes, BytesMut};

use crate::message::{decode_properties, encode_properties, Message};
use crate::msg_id::offset_msg_id;

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

impl From<StoredMessage> for MessageExt {
    fn from(m: StoredMessage) -> MessageExt {
        MessageExt {
            topic: m.topic().to_owned(),
            queue_id: m.queue_id,
            flag: m.flag,
            queue_offset: m.queue_offset,
            commit_log_offset: m.physical_offset,
            sys_flag: m.sys_flag,
            born_timestamp: m.born_timestamp,
            born_host: m.born_host,
            store_timestamp: m.store_timestamp,
            store_host: m.store_host,
            reconsume_times: m.reconsume_times,
            prepared_transaction_offset: m.prepared_transaction_offset,
            body_crc: m.body_crc as i32,
            store_size: m.total_size,
            properties: decode_properties(&m.properties),
            offset_msg_id: offset_msg_id(m.store_host, m.physical_offset),
            body: m.body,
        }
    }
}

/// Decodes the record starting at `start`; returns it and the offset just past it. Body
/// CRCs are not verified (the broker checked them on store; Java's client does not either).
pub fn decode_one(buf: &Bytes, start: usize) -> Result<(MessageExt, usize), MessageError> {
    if start > buf.len() {
        return Err(MessageError::Truncated {
            need: start,
            have: buf.len(),
        });
    }
    let m = StoredMessage::decode(&buf.slice(start..), CrcCheck::Skip)?;
    let next = start + m.raw.len();
    Ok((m.into(), next))
}

/// Decodes back-to-back records until the buffer ends. Like Java, stops at the first record
/// that does not decode; the error (if any) is returned next to the good prefix.
pub fn decode_all(buf: &Bytes) -> (Vec<MessageExt>, Option<MessageError>) {
    let mut out = Vec::new();
    for r in decode_records(buf.clone(), CrcCheck::Skip) {
        match r {
            Ok(m) => out.push(m.into()),
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
        encode_batch_element(&mut out, m.flag, &m.body, props.as_bytes());
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use broker::message::record::{encode_record, MagicPolicy, MessageLimits, RecordFields};

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

    /// The golden record, encoded by the broker's encoder.
    fn golden() -> Bytes {
        let fields = RecordFields {
            topic: "TopicTest",
            queue_id: 1,
            flag: 0,
            queue_offset: 5,
            physical_offset: 48,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: "192.168.0.10:54321".parse().unwrap(),
            store_timestamp: 1_700_000_000_123,
            store_host: "192.168.0.20:30911".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: b"Hello",
            properties: b"CLUSTER\x01RaftCluster\x02TAGS\x01TagA\x02UNIQ_KEY\x01C0A8000A1F9418B4AAC2000000000000\x02WAIT\x01true\x02",
        };
        let mut b = BytesMut::new();
        encode_record(
            &fields,
            &MessageLimits::default(),
            MagicPolicy::V1Only,
            &mut b,
        )
        .unwrap();
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
