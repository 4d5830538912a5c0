//! Offset headers: consumer offsets (query/update) and queue offsets (max/min/earliest
//! store time/search by timestamp).

use super::command_header;

command_header! {
    /// QUERY_CONSUMER_OFFSET (14) request.
    pub struct QueryConsumerOffsetRequestHeader {
        consumer_group: String => req "consumerGroup",
        topic: String => req "topic",
        queue_id: i32 => req "queueId",
        set_zero_if_not_found: Option<bool> => opt "setZeroIfNotFound",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// QUERY_CONSUMER_OFFSET response.
    pub struct QueryConsumerOffsetResponseHeader {
        offset: i64 => req "offset",
    }
}

command_header! {
    /// UPDATE_CONSUMER_OFFSET (15) request (usually oneway).
    pub struct UpdateConsumerOffsetRequestHeader {
        consumer_group: String => req "consumerGroup",
        topic: String => req "topic",
        queue_id: i32 => req "queueId",
        commit_offset: i64 => req "commitOffset",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// GET_MAX_OFFSET (30) request.
    pub struct GetMaxOffsetRequestHeader {
        topic: String => req "topic",
        queue_id: i32 => req "queueId",
        /// 5.x; default true.
        committed: Option<bool> => opt "committed",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// GET_MIN_OFFSET (31) request.
    pub struct GetMinOffsetRequestHeader {
        topic: String => req "topic",
        queue_id: i32 => req "queueId",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// GET_EARLIEST_MSG_STORETIME (32) request.
    pub struct GetEarliestMsgStoretimeRequestHeader {
        topic: String => req "topic",
        queue_id: i32 => req "queueId",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// GET_EARLIEST_MSG_STORETIME response.
    pub struct GetEarliestMsgStoretimeResponseHeader {
        timestamp: i64 => req "timestamp",
    }
}

command_header! {
    /// SEARCH_OFFSET_BY_TIMESTAMP (29) request.
    pub struct SearchOffsetRequestHeader {
        topic: String => req "topic",
        queue_id: i32 => req "queueId",
        timestamp: i64 => req "timestamp",
        /// `LOWER` (default) or `UPPER`, case-insensitive.
        boundary_type: Option<String> => opt "boundaryType",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// Response of GET_MAX_OFFSET, GET_MIN_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP: `offset`.
    pub struct OffsetResponseHeader {
        offset: i64 => req "offset",
    }
}

/// GET_MAX_OFFSET response.
pub type GetMaxOffsetResponseHeader = OffsetResponseHeader;
/// GET_MIN_OFFSET response.
pub type GetMinOffsetResponseHeader = OffsetResponseHeader;
/// SEARCH_OFFSET_BY_TIMESTAMP response.
pub type SearchOffsetResponseHeader = OffsetResponseHeader;
