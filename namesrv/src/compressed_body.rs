//! The compressed REGISTER_BROKER body (`compressed=true`, spec §12.4): a zlib stream whose
//! inflated content is a sequence of big-endian int32-length-prefixed parts:
//!
//! ```text
//! int32 len, DataVersion JSON
//! int32 topicCount, then per topic: int32 len, TopicConfig text
//!     "name SP readQueueNums SP writeQueueNums SP perm SP topicFilterType [SP attributesJSON]"
//! int32 len, JSON array of filter-server addresses
//! broker version >= V5_0_0 only: int32 mappingCount, then per mapping: int32 len, JSON
//! ```
//!
//! `topicSysFlag` and `order` are not carried in this form (they read as 0 / false).

use std::collections::BTreeMap;

use remoting::code::version;

use crate::body::{
    from_json, DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper,
};
use crate::inflate::{zlib_inflate, InflateError};

/// Largest inflated body accepted (a registration of ~100k topics fits easily).
pub const MAX_INFLATED_BYTES: usize = 32 * 1024 * 1024;

/// Why a compressed body was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressedBodyError {
    #[error("cannot inflate: {0}")]
    Inflate(#[from] InflateError),
    #[error("inflated body truncated at byte {at}")]
    Truncated { at: usize },
    #[error("negative length {len} at byte {at}")]
    NegativeLength { len: i32, at: usize },
    #[error("bad {what}: {reason}")]
    BadPart { what: &'static str, reason: String },
}

/// Decodes a compressed RegisterBrokerBody sent by a broker of `broker_version`.
pub fn decode_compressed_register_body(
    compressed: &[u8],
    broker_version: i32,
) -> Result<RegisterBrokerBody, CompressedBodyError> {
    let data = zlib_inflate(compressed, MAX_INFLATED_BYTES)?;
    let mut cur = Cursor {
        data: &data,
        pos: 0,
    };

    let data_version: DataVersion = parse_json(cur.part()?, "DataVersion")?;
    let topic_count = cur.count()?;
    let mut table = BTreeMap::new();
    for _ in 0..topic_count {
        let topic = parse_topic_text(cur.part()?)?;
        table.insert(topic.topic_name.clone(), topic);
    }
    let filter_server_list: Vec<String> = parse_json(cur.part()?, "filter server list")?;

    let mut mappings = None;
    if broker_version >= version::V5_0_0 {
        let count = cur.count()?;
        let mut map = serde_json::Map::new();
        for _ in 0..count {
            let info: serde_json::Value = parse_json(cur.part()?, "topic queue mapping")?;
            let topic = info
                .get("topic")
                .and_then(|t| t.as_str())
                .ok_or_else(|| CompressedBodyError::BadPart {
                    what: "topic queue mapping",
                    reason: "no topic".to_owned(),
                })?
                .to_owned();
            map.insert(topic, info);
        }
        mappings = Some(serde_json::Value::Object(map));
    }
    Ok(RegisterBrokerBody {
        filter_server_list,
        topic_config_serialize_wrapper: TopicConfigSerializeWrapper {
            data_version,
            topic_config_table: table,
            topic_queue_mapping_info_map: mappings,
            ..TopicConfigSerializeWrapper::default()
        },
    })
}

/// Reads `TopicConfig.encode()` text.
fn parse_topic_text(bytes: &[u8]) -> Result<TopicConfig, CompressedBodyError> {
    let bad = |reason: String| CompressedBodyError::BadPart {
        what: "topic config",
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8".to_owned()))?;
    let fields: Vec<&str> = text.split(' ').collect();
    if fields.len() < 5 {
        return Err(bad(format!("{text:?} has fewer than 5 fields")));
    }
    let int = |i: usize| {
        fields[i]
            .parse::<i32>()
            .map_err(|_| bad(format!("field {i} of {text:?} is not an integer")))
    };
    let attributes = if fields.len() > 5 {
        parse_json(fields[5..].join(" ").as_bytes(), "topic attributes")?
    } else {
        BTreeMap::new()
    };
    Ok(TopicConfig {
        topic_name: fields[0].to_owned(),
        read_queue_nums: int(1)?,
        write_queue_nums: int(2)?,
        perm: int(3)?,
        topic_filter_type: fields[4].to_owned(),
        attributes,
        ..TopicConfig::default()
    })
}

fn parse_json<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
) -> Result<T, CompressedBodyError> {
    from_json(bytes).map_err(|e| CompressedBodyError::BadPart {
        what,
        reason: e.to_string(),
    })
}

/// Big-endian reader over the inflated bytes.
struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn int(&mut self) -> Result<i32, CompressedBodyError> {
        let bytes = self
            .data
            .get(self.pos..self.pos + 4)
            .ok_or(CompressedBodyError::Truncated { at: self.pos })?;
        self.pos += 4;
        Ok(i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    /// A non-negative count.
    fn count(&mut self) -> Result<usize, CompressedBodyError> {
        let at = self.pos;
        let n = self.int()?;
        usize::try_from(n).map_err(|_| CompressedBodyError::NegativeLength { len: n, at })
    }

    /// An int32-length-prefixed part.
    fn part(&mut self) -> Result<&'a [u8], CompressedBodyError> {
        let len = self.count()?;
        let part = self
            .data
            .get(self.pos..self.pos + len)
            .ok_or(CompressedBodyError::Truncated { at: self.pos })?;
        self.pos += len;
        Ok(part)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::inflate::vectors;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn java_layout_decodes_for_4x_and_5x_brokers() {
        for (v, ver) in [
            (vectors::REGISTER_V4, version::V4_9_4),
            (vectors::REGISTER_V5, version::V5_3_1),
        ] {
            let body = decode_compressed_register_body(&unhex(v), ver).unwrap();
            let w = &body.topic_config_serialize_wrapper;
            assert_eq!(w.data_version.counter, 5);
            assert_eq!(w.data_version.timestamp, 1_700_000_000_000);
            let t = &w.topic_config_table["TopicTest"];
            assert_eq!((t.read_queue_nums, t.write_queue_nums, t.perm), (4, 4, 6));
            let tbw = &w.topic_config_table["TBW102"];
            assert_eq!(tbw.perm, 7);
            assert_eq!(tbw.attributes["+message.type"], "NORMAL");
            assert!(body.filter_server_list.is_empty());
            assert_eq!(
                w.topic_queue_mapping_info_map.is_some(),
                ver >= version::V5_0_0
            );
        }
    }

    #[test]
    fn a_5x_reader_needs_the_mapping_count() {
        let err = decode_compressed_register_body(&unhex(vectors::REGISTER_V4), version::V5_0_0);
        assert!(matches!(err, Err(CompressedBodyError::Truncated { .. })));
    }

    #[test]
    fn topic_text_errors() {
        assert!(parse_topic_text(b"T 1 2 6").is_err());
        assert!(parse_topic_text(b"T x 2 6 SINGLE_TAG").is_err());
        assert!(parse_topic_text(b"T 1 2 6 SINGLE_TAG {bad").is_err());
        let t = parse_topic_text(b"T 1 2 6 MULTI_TAG").unwrap();
        assert_eq!(t.topic_filter_type, "MULTI_TAG");
    }

    #[test]
    fn not_zlib_is_rejected() {
        assert!(decode_compressed_register_body(b"{}", version::V5_0_0).is_err());
    }
}
