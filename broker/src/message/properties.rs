//! The properties string: `key 0x01 value 0x02` pairs (spec message-format.md §5).
//!
//! Parsing follows Java's `MessageDecoder.string2messageProperties`: segments split on 0x02
//! (the last may lack it), the first 0x01 splits key and value, segments with an empty key or
//! value are dropped, later duplicates win. Invalid UTF-8 is a typed error.

use bytes::{BufMut, BytesMut};

use super::MessageError;

/// Separator between a key and its value.
pub const NAME_VALUE_SEPARATOR: u8 = 0x01;
/// Terminator after every pair.
pub const PROPERTY_SEPARATOR: u8 = 0x02;
/// The encoded properties length must fit in an int16.
pub const MAX_PROPERTIES_LEN: usize = i16::MAX as usize;

/// Reserved property keys (spec §5.1).
pub mod keys {
    pub const KEYS: &str = "KEYS";
    pub const TAGS: &str = "TAGS";
    pub const WAIT_STORE_MSG_OK: &str = "WAIT";
    pub const DELAY_TIME_LEVEL: &str = "DELAY";
    pub const RETRY_TOPIC: &str = "RETRY_TOPIC";
    pub const REAL_TOPIC: &str = "REAL_TOPIC";
    pub const REAL_QUEUE_ID: &str = "REAL_QID";
    pub const TRANSACTION_PREPARED: &str = "TRAN_MSG";
    pub const PRODUCER_GROUP: &str = "PGROUP";
    pub const MIN_OFFSET: &str = "MIN_OFFSET";
    pub const MAX_OFFSET: &str = "MAX_OFFSET";
    pub const BUYER_ID: &str = "BUYER_ID";
    pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
    pub const TRANSFER_FLAG: &str = "TRANSFER_FLAG";
    pub const CORRECTION_FLAG: &str = "CORRECTION_FLAG";
    pub const MQ2_FLAG: &str = "MQ2_FLAG";
    pub const RECONSUME_TIME: &str = "RECONSUME_TIME";
    pub const MSG_REGION: &str = "MSG_REGION";
    pub const TRACE_SWITCH: &str = "TRACE_ON";
    pub const UNIQ_CLIENT_MESSAGE_ID_KEYIDX: &str = "UNIQ_KEY";
    pub const EXTEND_UNIQ_INFO: &str = "EXTEND_UNIQ_INFO";
    pub const MAX_RECONSUME_TIMES: &str = "MAX_RECONSUME_TIMES";
    pub const CONSUME_START_TIMESTAMP: &str = "CONSUME_START_TIME";
    pub const INNER_NUM: &str = "INNER_NUM";
    pub const INNER_BASE: &str = "INNER_BASE";
    pub const DUP_INFO: &str = "DUP_INFO";
    pub const CHECK_IMMUNITY_TIME_IN_SECONDS: &str = "CHECK_IMMUNITY_TIME_IN_SECONDS";
    pub const TRANSACTION_PREPARED_QUEUE_OFFSET: &str = "TRAN_PREPARED_QUEUE_OFFSET";
    pub const TRANSACTION_ID: &str = "__transactionId__";
    pub const TRANSACTION_CHECK_TIMES: &str = "TRANSACTION_CHECK_TIMES";
    pub const INSTANCE_ID: &str = "INSTANCE_ID";
    pub const CORRELATION_ID: &str = "CORRELATION_ID";
    pub const MESSAGE_REPLY_TO_CLIENT: &str = "REPLY_TO_CLIENT";
    pub const MESSAGE_TTL: &str = "TTL";
    pub const REPLY_MESSAGE_ARRIVE_TIME: &str = "ARRIVE_TIME";
    pub const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
    pub const MESSAGE_TYPE: &str = "MSG_TYPE";
    pub const CLUSTER: &str = "CLUSTER";
    pub const POP_CK: &str = "POP_CK";
    pub const POP_CK_OFFSET: &str = "POP_CK_OFFSET";
    pub const FIRST_POP_TIME: &str = "1ST_POP_TIME";
    pub const SHARDING_KEY: &str = "__SHARDINGKEY";
    pub const FORWARD_QUEUE_ID: &str = "PROPERTY_FORWARD_QUEUE_ID";
    pub const REDIRECT: &str = "REDIRECT";
    pub const INNER_MULTI_DISPATCH: &str = "INNER_MULTI_DISPATCH";
    pub const INNER_MULTI_QUEUE_OFFSET: &str = "INNER_MULTI_QUEUE_OFFSET";
    pub const TRACE_CONTEXT: &str = "TRACE_CONTEXT";
    pub const TIMER_DELAY_SEC: &str = "TIMER_DELAY_SEC";
    pub const TIMER_DELIVER_MS: &str = "TIMER_DELIVER_MS";
    pub const TIMER_ENQUEUE_MS: &str = "TIMER_ENQUEUE_MS";
    pub const TIMER_DEQUEUE_MS: &str = "TIMER_DEQUEUE_MS";
    pub const TIMER_ROLL_TIMES: &str = "TIMER_ROLL_TIMES";
    pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";
    pub const TIMER_DEL_UNIQKEY: &str = "TIMER_DEL_UNIQKEY";
    pub const TIMER_DELAY_LEVEL: &str = "TIMER_DELAY_LEVEL";
    pub const TIMER_DELAY_MS: &str = "TIMER_DELAY_MS";
    pub const BORN_HOST: &str = "__BORNHOST";
    pub const BORN_TIMESTAMP: &str = "BORN_TIMESTAMP";
    /// Prefix of properties that are never persisted (5.x).
    pub const TRANSIENT_PREFIX: &str = "__RMQ.TRANSIENT.";
    pub const CRC32: &str = "__CRC32#";
    pub const DLQ_ORIGIN_TOPIC: &str = "DLQ_ORIGIN_TOPIC";
    pub const DLQ_ORIGIN_MESSAGE_ID: &str = "DLQ_ORIGIN_MESSAGE_ID";
}

/// Iterates the (key, value) pairs of an encoded properties string without allocating.
/// Dropped segments (no 0x01, empty key or value) are skipped exactly as Java does.
/// Duplicates are yielded in order; the last one is the effective value.
#[derive(Debug, Clone)]
pub struct PropertyPairs<'a> {
    rest: &'a [u8],
}

/// Pairs of an encoded properties string, in stored order.
pub fn property_pairs(encoded: &[u8]) -> PropertyPairs<'_> {
    PropertyPairs { rest: encoded }
}

impl<'a> Iterator for PropertyPairs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    /// Segment ends are found with `memchr` (vector compares): a byte loop per segment cost
    /// the dispatcher (which reads every record's properties on every member) about as much as
    /// the rest of its per-record work, and an eight-bytes-at-a-time scan of the whole string
    /// ~40% more than this (callgrind, the properties of a typical record: TAGS, UNIQ_KEY,
    /// CLUSTER).
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        while !self.rest.is_empty() {
            let (segment, rest) = match memchr::memchr(PROPERTY_SEPARATOR, self.rest) {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                // The last segment may lack its 0x02.
                None => (self.rest, &self.rest[self.rest.len()..]),
            };
            self.rest = rest;
            // Keys are short: a byte loop finds their end sooner than a vector search starts.
            if let Some(i) = segment.iter().position(|&b| b == NAME_VALUE_SEPARATOR) {
                let (key, value) = (&segment[..i], &segment[i + 1..]);
                if !key.is_empty() && !value.is_empty() {
                    return Some((key, value));
                }
            }
        }
        None
    }
}

/// The effective value of `key` in an encoded properties string (last duplicate wins),
/// without allocating.
pub fn find_property<'a>(encoded: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let key = key.as_bytes();
    if key.is_empty() || key.contains(&NAME_VALUE_SEPARATOR) || key.contains(&PROPERTY_SEPARATOR) {
        return None;
    }
    let mut found = None;
    for segment in encoded.split(|&b| b == PROPERTY_SEPARATOR) {
        // Same rule as `PropertyPairs`: the first 0x01 ends the key; keys never contain 0x01,
        // so a segment whose first `key.len()` bytes are the key and are followed by 0x01 is
        // exactly a pair with this key.
        if segment.len() > key.len() + 1
            && segment[key.len()] == NAME_VALUE_SEPARATOR
            && segment.starts_with(key)
        {
            found = Some(&segment[key.len() + 1..]);
        }
    }
    found
}

/// [`find_property`] for several keys in one pass over `encoded` (the dispatcher needs four or
/// five values of every record, on every member): `out[i]` is what
/// `find_property(encoded, keys[i])` returns.
pub fn find_properties<'a, const N: usize>(
    encoded: &'a [u8],
    keys: [&str; N],
) -> [Option<&'a [u8]>; N] {
    let mut found = [None; N];
    for (key, value) in property_pairs(encoded) {
        for (slot, k) in found.iter_mut().zip(keys) {
            if key == k.as_bytes() {
                *slot = Some(value);
            }
        }
    }
    found
}

/// Most pairs [`is_canonical`] checks; longer strings take the general path.
const CANONICAL_MAX_PAIRS: usize = 64;

/// Whether `encoded` is exactly what `MessageProperties::parse(encoded)?.encode()` produces:
/// valid UTF-8, empty or ending with 0x02, every segment one `key 0x01 value` pair with a
/// non-empty key and value and no further separator, no key twice, at most 64 pairs. For
/// such a string, inserting a key it lacks is [`append_property`], which lets the send path
/// extend the client's bytes instead of parsing them into owned strings.
pub fn is_canonical(encoded: &[u8]) -> bool {
    if encoded.is_empty() {
        return true;
    }
    if encoded.last() != Some(&PROPERTY_SEPARATOR) || std::str::from_utf8(encoded).is_err() {
        return false;
    }
    let body = &encoded[..encoded.len() - 1];
    // Keys seen so far as (start, end) in `body` (which is shorter than 32 KiB when it came
    // from a record or a header): 256 bytes to clear, not 1 KiB of slice pointers.
    let Ok(body_len) = u16::try_from(body.len()) else {
        return false;
    };
    let mut keys = [(0u16, 0u16); CANONICAL_MAX_PAIRS];
    let mut n = 0;
    let mut start = 0u16;
    loop {
        let rest = &body[usize::from(start)..];
        let seg_len = memchr::memchr(PROPERTY_SEPARATOR, rest).unwrap_or(rest.len());
        let segment = &rest[..seg_len];
        let Some(i) = segment.iter().position(|&b| b == NAME_VALUE_SEPARATOR) else {
            return false;
        };
        let (key, value) = (&segment[..i], &segment[i + 1..]);
        if key.is_empty()
            || value.is_empty()
            || value.contains(&NAME_VALUE_SEPARATOR)
            || n == CANONICAL_MAX_PAIRS
            || keys[..n]
                .iter()
                .any(|&(a, b)| &body[usize::from(a)..usize::from(b)] == key)
        {
            return false;
        }
        // Lengths within `body`, so they fit in u16 like `body_len`.
        keys[n] = (start, start + i as u16);
        n += 1;
        let next = usize::from(start) + seg_len + 1;
        if next > usize::from(body_len) {
            return true;
        }
        start = next as u16;
    }
}

/// An owned, insertion-ordered properties map (few entries, so a vector beats hashing).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageProperties {
    entries: Vec<(String, String)>,
}

impl MessageProperties {
    /// Empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses an encoded properties string (Java semantics; invalid UTF-8 is an error).
    pub fn parse(encoded: &[u8]) -> Result<Self, MessageError> {
        let mut props = Self::new();
        for (k, v) in property_pairs(encoded) {
            let k = std::str::from_utf8(k).map_err(|_| MessageError::InvalidUtf8 {
                field: "property key",
            })?;
            let v = std::str::from_utf8(v).map_err(|_| MessageError::InvalidUtf8 {
                field: "property value",
            })?;
            props.insert(k, v);
        }
        Ok(props)
    }

    /// Value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `key` (replacing in place, so the stored order stays stable).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Encoded length in bytes (what the PROPERTIES length field will hold).
    pub fn encoded_len(&self) -> usize {
        self.entries
            .iter()
            .map(|(k, v)| k.len() + v.len() + 2)
            .sum()
    }

    /// Appends the encoded string to `out`. Fails (writing nothing) if a key or value contains a
    /// separator, a key is empty, or the result exceeds [`MAX_PROPERTIES_LEN`]. Empty values are
    /// skipped, since Java's decoder would drop them anyway.
    pub fn encode_into(&self, out: &mut BytesMut) -> Result<usize, MessageError> {
        let mut len = 0;
        for (k, v) in &self.entries {
            check_property(k, v)?;
            if !v.is_empty() {
                len += k.len() + v.len() + 2;
            }
        }
        if len > MAX_PROPERTIES_LEN {
            return Err(MessageError::TooLong {
                field: "properties",
                len,
                max: MAX_PROPERTIES_LEN,
            });
        }
        out.reserve(len);
        for (k, v) in self.entries.iter().filter(|(_, v)| !v.is_empty()) {
            out.put_slice(k.as_bytes());
            out.put_u8(NAME_VALUE_SEPARATOR);
            out.put_slice(v.as_bytes());
            out.put_u8(PROPERTY_SEPARATOR);
        }
        Ok(len)
    }

    /// The encoded string as bytes.
    pub fn encode(&self) -> Result<BytesMut, MessageError> {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode_into(&mut out)?;
        Ok(out)
    }
}

fn check_property(key: &str, value: &str) -> Result<(), MessageError> {
    let has_sep = |s: &str| {
        s.bytes()
            .any(|b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)
    };
    let reason = if key.is_empty() {
        "empty key"
    } else if has_sep(key) {
        "key contains a separator byte"
    } else if has_sep(value) {
        "value contains a separator byte"
    } else {
        return Ok(());
    };
    Err(MessageError::BadProperty {
        key: key.to_owned(),
        reason,
    })
}

/// Appends one `key 0x01 value 0x02` pair to an already-encoded properties buffer (the broker
/// adds `UNIQ_KEY`/`CLUSTER` this way without re-encoding the producer's string).
pub fn append_property(out: &mut BytesMut, key: &str, value: &str) -> Result<(), MessageError> {
    check_property(key, value)?;
    out.reserve(key.len() + value.len() + 2);
    out.put_slice(key.as_bytes());
    out.put_u8(NAME_VALUE_SEPARATOR);
    out.put_slice(value.as_bytes());
    out.put_u8(PROPERTY_SEPARATOR);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &[u8] =
        b"TAGS\x01TagA\x02UNIQ_KEY\x01C0A8000A1F9418B4AAC2000000000000\x02WAIT\x01true\x02";

    #[test]
    fn parses_the_spec_example_and_reencodes_it_identically() {
        let p = MessageProperties::parse(SAMPLE).unwrap();
        assert_eq!(p.get(keys::TAGS), Some("TagA"));
        assert_eq!(p.get(keys::WAIT_STORE_MSG_OK), Some("true"));
        assert_eq!(p.len(), 3);
        assert_eq!(&p.encode().unwrap()[..], SAMPLE);
    }

    #[test]
    fn tolerates_a_missing_trailing_separator_and_drops_what_java_drops() {
        let p =
            MessageProperties::parse(b"A\x01x\x02\x02B\x01\x02\x01v\x02noval\x02C\x01y").unwrap();
        let got: Vec<_> = p.iter().collect();
        assert_eq!(got, vec![("A", "x"), ("C", "y")]);
    }

    #[test]
    fn later_duplicates_win_and_value_may_contain_more_name_separators_is_rejected_on_encode() {
        let enc = b"K\x01one\x02K\x01two\x02";
        assert_eq!(find_property(enc, "K"), Some(&b"two"[..]));
        assert_eq!(MessageProperties::parse(enc).unwrap().get("K"), Some("two"));
        // First 0x01 splits; the rest stays in the value on decode.
        let p = MessageProperties::parse(b"K\x01a\x01b\x02").unwrap();
        assert_eq!(p.get("K"), Some("a\x01b"));
        assert!(matches!(p.encode(), Err(MessageError::BadProperty { .. })));
    }

    #[test]
    fn invalid_utf8_is_a_typed_error() {
        assert_eq!(
            MessageProperties::parse(b"K\x01\xff\x02"),
            Err(MessageError::InvalidUtf8 {
                field: "property value"
            })
        );
    }

    #[test]
    fn too_long_is_rejected() {
        let mut p = MessageProperties::new();
        p.insert("K", "v".repeat(MAX_PROPERTIES_LEN));
        assert!(matches!(p.encode(), Err(MessageError::TooLong { .. })));
    }

    #[test]
    fn canonical_strings_are_what_encoding_their_parse_gives() {
        assert!(is_canonical(b""));
        assert!(is_canonical(SAMPLE));
        for bad in [
            &b"TAGS\x01a"[..],
            b"TAGS\x01a\x02TAGS\x01b\x02",
            b"TAGS\x01a\x01b\x02",
            b"\x01a\x02",
            b"TAGS\x01\x02",
            b"TAGS\x02",
            b"\x02",
            b"TAGS\x01\xff\x02",
        ] {
            assert!(!is_canonical(bad), "{bad:?}");
        }
    }

    proptest::proptest! {
        // Any canonical string re-encodes to itself; any string that re-encodes to itself
        // (and is short enough) is recognised as canonical.
        #[test]
        fn is_canonical_agrees_with_parse_then_encode(
            s in proptest::collection::vec(
                proptest::sample::select(vec![b'a', b'B', b'k', 0x01, 0x02, 0xc3, 0xa9, 0xff]),
                0..40,
            )
        ) {
            let reencoded = MessageProperties::parse(&s)
                .ok()
                .and_then(|p| p.encode().ok())
                .map(|b| b.to_vec());
            if is_canonical(&s) {
                proptest::prop_assert_eq!(reencoded.as_deref(), Some(&s[..]));
            } else {
                proptest::prop_assert_ne!(reencoded.as_deref(), Some(&s[..]));
            }
        }

        // One pass for several keys finds exactly what one `find_property` per key finds
        // (duplicates, empty values, empty keys, stray separators).
        #[test]
        fn find_properties_agrees_with_find_property(
            s in proptest::collection::vec(
                proptest::sample::select(vec![b'a', b'k', b'K', 0x00, 0x01, 0x02, 0x03, 0x81]),
                0..80,
            )
        ) {
            let keys = ["a", "k", "ak", "K", "kk"];
            let all = find_properties(&s, keys);
            for (i, k) in keys.iter().enumerate() {
                proptest::prop_assert_eq!(all[i], find_property(&s, k), "key {}", k);
            }
        }
    }

    #[test]
    fn append_property_matches_full_encoding() {
        let mut buf = BytesMut::from(&b"TAGS\x01TagA\x02"[..]);
        append_property(&mut buf, "CLUSTER", "RaftCluster").unwrap();
        assert_eq!(&buf[..], b"TAGS\x01TagA\x02CLUSTER\x01RaftCluster\x02");
        assert!(append_property(&mut buf, "", "x").is_err());
    }
}
