//! Producer headers: SEND_MESSAGE (V1 long keys), SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
//! (V2 one-letter keys, quirk Q2) and the send response.

use super::{command_header, CommandHeader};
use crate::code::RequestCode;
use crate::command::RemotingCommand;
use crate::error::HeaderError;

command_header! {
    /// SEND_MESSAGE (10) request header, long field names.
    pub struct SendMessageRequestHeader {
        producer_group: String => req "producerGroup",
        topic: String => req "topic",
        default_topic: String => req "defaultTopic",
        default_topic_queue_nums: i32 => req "defaultTopicQueueNums",
        /// Negative: the broker picks a queue.
        queue_id: i32 => req "queueId",
        sys_flag: i32 => req "sysFlag",
        born_timestamp: i64 => req "bornTimestamp",
        flag: i32 => req "flag",
        /// Properties string (`k\x01v\x02`...).
        properties: Option<String> => opt "properties",
        reconsume_times: Option<i32> => opt "reconsumeTimes",
        unit_mode: Option<bool> => opt "unitMode",
        /// Batch detection is by this flag, not by the request code.
        batch: Option<bool> => opt "batch",
        max_reconsume_times: Option<i32> => opt "maxReconsumeTimes",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) header: the V1 fields under
    /// one-letter keys `a`..`n`.
    pub struct SendMessageRequestHeaderV2 {
        producer_group: String => req "a",
        topic: String => req "b",
        default_topic: String => req "c",
        default_topic_queue_nums: i32 => req "d",
        queue_id: i32 => req "e",
        sys_flag: i32 => req "f",
        born_timestamp: i64 => req "g",
        flag: i32 => req "h",
        properties: Option<String> => opt "i",
        reconsume_times: Option<i32> => opt "j",
        unit_mode: Option<bool> => opt "k",
        max_reconsume_times: Option<i32> => opt "l",
        batch: Option<bool> => opt "m",
        broker_name: Option<String> => opt "n",
    }
}

impl From<SendMessageRequestHeaderV2> for SendMessageRequestHeader {
    fn from(v: SendMessageRequestHeaderV2) -> Self {
        SendMessageRequestHeader {
            producer_group: v.producer_group,
            topic: v.topic,
            default_topic: v.default_topic,
            default_topic_queue_nums: v.default_topic_queue_nums,
            queue_id: v.queue_id,
            sys_flag: v.sys_flag,
            born_timestamp: v.born_timestamp,
            flag: v.flag,
            properties: v.properties,
            reconsume_times: v.reconsume_times,
            unit_mode: v.unit_mode,
            batch: v.batch,
            max_reconsume_times: v.max_reconsume_times,
            broker_name: v.broker_name,
        }
    }
}

impl From<SendMessageRequestHeader> for SendMessageRequestHeaderV2 {
    fn from(v: SendMessageRequestHeader) -> Self {
        SendMessageRequestHeaderV2 {
            producer_group: v.producer_group,
            topic: v.topic,
            default_topic: v.default_topic,
            default_topic_queue_nums: v.default_topic_queue_nums,
            queue_id: v.queue_id,
            sys_flag: v.sys_flag,
            born_timestamp: v.born_timestamp,
            flag: v.flag,
            properties: v.properties,
            reconsume_times: v.reconsume_times,
            unit_mode: v.unit_mode,
            batch: v.batch,
            max_reconsume_times: v.max_reconsume_times,
            broker_name: v.broker_name,
        }
    }
}

impl SendMessageRequestHeader {
    /// Decodes the send header of any send request: V2 letters for 310/320/325, long names
    /// otherwise (10, 324).
    pub fn from_request(cmd: &RemotingCommand) -> Result<SendMessageRequestHeader, HeaderError> {
        match cmd.request_code() {
            RequestCode::SEND_MESSAGE_V2
            | RequestCode::SEND_BATCH_MESSAGE
            | RequestCode::SEND_REPLY_MESSAGE_V2 => {
                SendMessageRequestHeaderV2::read_from(cmd.ext_fields()).map(Into::into)
            }
            _ => SendMessageRequestHeader::read_from(cmd.ext_fields()),
        }
    }

    /// Java's `batch` flag, false when absent.
    pub fn is_batch(&self) -> bool {
        self.batch.unwrap_or(false)
    }
}

command_header! {
    /// Response header of every send code. Java clients read `MSG_REGION` and `TRACE_ON`
    /// unconditionally on success (Q8): [`SendMessageResponseHeader::new`] fills them.
    pub struct SendMessageResponseHeader {
        /// Offset message id(s); for a batch all ids joined with `,`.
        msg_id: String => req "msgId",
        queue_id: i32 => req "queueId",
        queue_offset: i64 => req "queueOffset",
        transaction_id: Option<String> => opt "transactionId",
        batch_uniq_id: Option<String> => opt "batchUniqId",
        recall_handle: Option<String> => opt "recallHandle",
        msg_region: Option<String> => opt "MSG_REGION",
        trace_on: Option<String> => opt "TRACE_ON",
    }
}

impl SendMessageResponseHeader {
    /// A success header with the defaults Java sends (`DefaultRegion`, trace on).
    pub fn new(msg_id: impl Into<String>, queue_id: i32, queue_offset: i64) -> Self {
        SendMessageResponseHeader {
            msg_id: msg_id.into(),
            queue_id,
            queue_offset,
            msg_region: Some("DefaultRegion".to_owned()),
            trace_on: Some("true".to_owned()),
            ..Default::default()
        }
    }
}
