//! Messages as the producer builds them and the properties string (message-format.md §5).

use std::collections::BTreeMap;

use broker::message::properties::property_pairs;
use bytes::Bytes;

/// Reserved property keys this client reads or writes (the broker's names, under the short
/// names this crate uses).
pub mod keys {
    use broker::message::properties::keys as reserved;

    /// Business keys, space separated.
    pub const KEYS: &str = reserved::KEYS;
    /// The tag.
    pub const TAGS: &str = reserved::TAGS;
    /// Wait for store (Java default `true`).
    pub const WAIT: &str = reserved::WAIT_STORE_MSG_OK;
    /// Producer-generated unique id.
    pub const UNIQ_KEY: &str = reserved::UNIQ_CLIENT_MESSAGE_ID_KEYIDX;
    /// Added by the broker.
    pub const CLUSTER: &str = reserved::CLUSTER;
    /// Set by the client after a pull.
    pub const MIN_OFFSET: &str = reserved::MIN_OFFSET;
    /// Set by the client after a pull.
    pub const MAX_OFFSET: &str = reserved::MAX_OFFSET;
}

/// A message to send: topic, body and properties (tags, keys, user properties).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Message {
    pub topic: String,
    pub body: Bytes,
    /// User flag, stored in FLAG.
    pub flag: i32,
    pub properties: BTreeMap<String, String>,
}

impl Message {
    /// A message with `WAIT=true`, like Java's default.
    pub fn new(topic: impl Into<String>, body: impl Into<Bytes>) -> Message {
        let mut properties = BTreeMap::new();
        properties.insert(keys::WAIT.to_owned(), "true".to_owned());
        Message {
            topic: topic.into(),
            body: body.into(),
            flag: 0,
            properties,
        }
    }

    /// Sets the tag.
    pub fn with_tags(mut self, tags: impl Into<String>) -> Self {
        self.properties.insert(keys::TAGS.to_owned(), tags.into());
        self
    }

    /// Sets the business keys (joined with a space).
    pub fn with_keys<I, S>(mut self, keys_iter: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let joined: Vec<String> = keys_iter
            .into_iter()
            .map(|k| k.as_ref().to_owned())
            .collect();
        self.properties
            .insert(keys::KEYS.to_owned(), joined.join(" "));
        self
    }

    /// Adds a user property.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }

    /// The tag, if any.
    pub fn tags(&self) -> Option<&str> {
        self.properties.get(keys::TAGS).map(String::as_str)
    }

    /// The producer-side unique id, if assigned.
    pub fn uniq_key(&self) -> Option<&str> {
        self.properties.get(keys::UNIQ_KEY).map(String::as_str)
    }
}

/// Encodes properties as `k 0x01 v 0x02 ...`; pairs with an empty key or value are skipped
/// (the decoder would drop them anyway).
pub fn encode_properties(props: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(props.iter().map(|(k, v)| k.len() + v.len() + 2).sum());
    for (k, v) in props {
        if k.is_empty() || v.is_empty() {
            continue;
        }
        out.push_str(k);
        out.push('\u{1}');
        out.push_str(v);
        out.push('\u{2}');
    }
    out
}

/// Decodes an encoded properties string the way Java does (the broker's
/// `property_pairs`: segments split on 0x02, the first 0x01 splits key and value, segments
/// with an empty key or value are dropped), later duplicates win; invalid UTF-8 is replaced.
pub fn decode_properties(encoded: &[u8]) -> BTreeMap<String, String> {
    property_pairs(encoded)
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_round_trip_and_java_drop_rules() {
        let m = Message::new("T", "b")
            .with_tags("TagA")
            .with_keys(["k1", "k2"]);
        let text = encode_properties(&m.properties);
        assert_eq!(
            text,
            "KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}WAIT\u{1}true\u{2}"
        );
        assert_eq!(decode_properties(text.as_bytes()), m.properties);
        // Last segment without terminator, short segments, empty values, duplicates.
        let d = decode_properties(b"a\x01\x02x\x02K\x011\x02K\x012\x02Z\x01z");
        assert_eq!(d.len(), 2);
        assert_eq!(d["K"], "2");
        assert_eq!(d["Z"], "z");
    }
}
