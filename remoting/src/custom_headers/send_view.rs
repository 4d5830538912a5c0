//! The send request header (SEND_MESSAGE 10 long names, SEND_MESSAGE_V2 310 / SEND_BATCH_MESSAGE
//! 320 one-letter keys `a`..`n`; remoting.md §11.2) read as views into the request's extFields.
//!
//! Servers read every send with this view. Why not
//! [`SendMessageRequestHeader`](super::SendMessageRequestHeader), which clients use to build
//! requests: it copies the topic, the producer group, the default topic and the properties
//! into `String`s and looks each of its 14 keys up separately, once per message on the
//! hottest request. Here one pass over the entries fills
//! every field and nothing is copied. Same keys, same parsing (numbers like `Integer.parseInt`
//! or a JSON-sourced whole float, booleans like `Boolean.parseBoolean`) and the same first
//! error, in the same field order, as the typed header (tests compare the two).

use super::HeaderValue;
use crate::code::RequestCode;
use crate::command::{ExtFields, RemotingCommand};
use crate::error::HeaderError;

/// Field slots in the order both typed headers check them; the V2 key of slot `i` is the
/// letter `b'a' + i`.
const PRODUCER_GROUP: usize = 0;
const TOPIC: usize = 1;
const DEFAULT_TOPIC: usize = 2;
const DEFAULT_TOPIC_QUEUE_NUMS: usize = 3;
const QUEUE_ID: usize = 4;
const SYS_FLAG: usize = 5;
const BORN_TIMESTAMP: usize = 6;
const FLAG: usize = 7;
const PROPERTIES: usize = 8;
const RECONSUME_TIMES: usize = 9;
const UNIT_MODE: usize = 10;
const MAX_RECONSUME_TIMES: usize = 11;
const BATCH: usize = 12;
const BROKER_NAME: usize = 13;
const SLOTS: usize = 14;

/// SEND_MESSAGE's long key of each slot.
const LONG_KEYS: [&str; SLOTS] = [
    "producerGroup",
    "topic",
    "defaultTopic",
    "defaultTopicQueueNums",
    "queueId",
    "sysFlag",
    "bornTimestamp",
    "flag",
    "properties",
    "reconsumeTimes",
    "unitMode",
    "maxReconsumeTimes",
    "batch",
    "bname",
];

/// The V2 key of each slot.
const LETTER_KEYS: [&str; SLOTS] = [
    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n",
];

/// A send request's header, borrowing its text from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendMessageHeaderView<'a> {
    pub producer_group: &'a str,
    pub topic: &'a str,
    pub default_topic: &'a str,
    pub default_topic_queue_nums: i32,
    /// Negative: the broker picks a queue.
    pub queue_id: i32,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub flag: i32,
    /// Properties string (`k\x01v\x02`...).
    pub properties: Option<&'a str>,
    pub reconsume_times: Option<i32>,
    pub unit_mode: Option<bool>,
    /// Batch detection is by this flag, not by the request code.
    pub batch: Option<bool>,
    pub max_reconsume_times: Option<i32>,
    pub broker_name: Option<&'a str>,
}

impl<'a> SendMessageHeaderView<'a> {
    /// Reads the header of any send request: one-letter keys for 310/320/325, long names
    /// otherwise (10, 324), like `SendMessageRequestHeader::from_request`.
    pub fn read(cmd: &'a RemotingCommand) -> Result<SendMessageHeaderView<'a>, HeaderError> {
        let letters = matches!(
            cmd.request_code(),
            RequestCode::SEND_MESSAGE_V2
                | RequestCode::SEND_BATCH_MESSAGE
                | RequestCode::SEND_REPLY_MESSAGE_V2
        );
        Self::read_fields(cmd.ext_fields(), letters)
    }

    fn read_fields(
        ext: &'a ExtFields,
        letters: bool,
    ) -> Result<SendMessageHeaderView<'a>, HeaderError> {
        let keys = if letters { &LETTER_KEYS } else { &LONG_KEYS };
        let mut found: [Option<&'a str>; SLOTS] = [None; SLOTS];
        for (key, value) in ext.iter() {
            let slot = if letters {
                match key.as_bytes() {
                    [c @ b'a'..=b'n'] => Some(usize::from(c - b'a')),
                    _ => None,
                }
            } else {
                LONG_KEYS.iter().position(|k| *k == key)
            };
            if let Some(i) = slot {
                found[i] = Some(value);
            }
        }
        let required = |i: usize| found[i].ok_or(HeaderError::MissingField { field: keys[i] });
        let number = |i: usize| -> Result<i64, HeaderError> { i64::parse(keys[i], required(i)?) };
        let int = |i: usize| -> Result<i32, HeaderError> { i32::parse(keys[i], required(i)?) };
        let optional_int = |i: usize| found[i].map(|v| i32::parse(keys[i], v)).transpose();
        let optional_bool = |i: usize| found[i].map(|v| bool::parse(keys[i], v)).transpose();
        Ok(SendMessageHeaderView {
            producer_group: required(PRODUCER_GROUP)?,
            topic: required(TOPIC)?,
            default_topic: required(DEFAULT_TOPIC)?,
            default_topic_queue_nums: int(DEFAULT_TOPIC_QUEUE_NUMS)?,
            queue_id: int(QUEUE_ID)?,
            sys_flag: int(SYS_FLAG)?,
            born_timestamp: number(BORN_TIMESTAMP)?,
            flag: int(FLAG)?,
            properties: found[PROPERTIES],
            reconsume_times: optional_int(RECONSUME_TIMES)?,
            unit_mode: optional_bool(UNIT_MODE)?,
            max_reconsume_times: optional_int(MAX_RECONSUME_TIMES)?,
            batch: optional_bool(BATCH)?,
            broker_name: found[BROKER_NAME],
        })
    }

    /// Java's `batch` flag, false when absent.
    pub fn is_batch(&self) -> bool {
        self.batch.unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::custom_headers::{
        CommandHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
    };

    /// Both decoders on the same request: equal fields, or the same error.
    fn same_as_typed(code: RequestCode, ext: ExtFields) {
        let cmd = RemotingCommand::request(code, &ext);
        let typed = SendMessageRequestHeader::from_request(&cmd);
        let ours = SendMessageHeaderView::read(&cmd);
        match (typed, ours) {
            (Ok(t), Ok(o)) => {
                assert_eq!(t.producer_group, o.producer_group);
                assert_eq!(t.topic, o.topic);
                assert_eq!(t.default_topic, o.default_topic);
                assert_eq!(t.default_topic_queue_nums, o.default_topic_queue_nums);
                assert_eq!(t.queue_id, o.queue_id);
                assert_eq!(t.sys_flag, o.sys_flag);
                assert_eq!(t.born_timestamp, o.born_timestamp);
                assert_eq!(t.flag, o.flag);
                assert_eq!(t.properties.as_deref(), o.properties);
                assert_eq!(t.reconsume_times, o.reconsume_times);
                assert_eq!(t.unit_mode, o.unit_mode);
                assert_eq!(t.batch, o.batch);
                assert_eq!(t.is_batch(), o.is_batch());
                assert_eq!(t.max_reconsume_times, o.max_reconsume_times);
                assert_eq!(t.broker_name.as_deref(), o.broker_name);
            }
            (Err(t), Err(o)) => assert_eq!(t, o),
            (t, o) => panic!("typed {t:?} vs ours {o:?}"),
        }
    }

    fn full_v1() -> SendMessageRequestHeader {
        SendMessageRequestHeader {
            producer_group: "PG".into(),
            topic: "T".into(),
            default_topic: "TBW102".into(),
            default_topic_queue_nums: 4,
            queue_id: 3,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            flag: 0,
            properties: Some("TAGS\u{1}a\u{2}".into()),
            reconsume_times: Some(2),
            unit_mode: Some(false),
            batch: Some(true),
            max_reconsume_times: Some(16),
            broker_name: Some("b".into()),
        }
    }

    fn ext_of(h: &impl CommandHeader) -> ExtFields {
        let mut e = ExtFields::new();
        h.write_to(&mut e);
        e
    }

    #[test]
    fn full_and_minimal_headers_read_like_the_typed_ones() {
        let v1 = full_v1();
        same_as_typed(RequestCode::SEND_MESSAGE, ext_of(&v1));
        let v2 = SendMessageRequestHeaderV2::from(v1.clone());
        for code in [
            RequestCode::SEND_MESSAGE_V2,
            RequestCode::SEND_BATCH_MESSAGE,
            RequestCode::SEND_REPLY_MESSAGE_V2,
        ] {
            same_as_typed(code, ext_of(&v2));
        }
        let minimal = SendMessageRequestHeader {
            properties: None,
            reconsume_times: None,
            unit_mode: None,
            batch: None,
            max_reconsume_times: None,
            broker_name: None,
            ..v1
        };
        same_as_typed(RequestCode::SEND_MESSAGE, ext_of(&minimal));
        same_as_typed(
            RequestCode::SEND_MESSAGE_V2,
            ext_of(&SendMessageRequestHeaderV2::from(minimal)),
        );
    }

    #[test]
    fn missing_and_malformed_fields_fail_on_the_same_field() {
        let v1 = ext_of(&full_v1());
        let v2 = ext_of(&SendMessageRequestHeaderV2::from(full_v1()));
        for (code, base, keys) in [
            (RequestCode::SEND_MESSAGE, &v1, &LONG_KEYS),
            (RequestCode::SEND_MESSAGE_V2, &v2, &LETTER_KEYS),
        ] {
            for key in keys.iter() {
                let mut e = base.clone();
                e.remove(key);
                same_as_typed(code, e);
                for bad in ["x", "", "4.5", "4.0", "TRUE", "99999999999", " 1"] {
                    let mut e = base.clone();
                    e.set(key, bad);
                    same_as_typed(code, e);
                }
            }
            // Two bad fields: the first in field order is reported.
            let mut e = base.clone();
            e.set(keys[FLAG], "x");
            e.set(keys[QUEUE_ID], "y");
            same_as_typed(code, e);
            // Keys of the other form and unknown keys are ignored.
            let mut e = base.clone();
            e.set("zz", "1");
            e.set(if keys[0] == "a" { "topic" } else { "b" }, "Other");
            same_as_typed(code, e);
        }
    }
}
