//! Message lookup headers: VIEW_MESSAGE_BY_ID and QUERY_MESSAGE.

use super::command_header;

command_header! {
    /// VIEW_MESSAGE_BY_ID (33) request.
    pub struct ViewMessageRequestHeader {
        /// Physical offset decoded from the offset message id.
        offset: i64 => req "offset",
        topic: Option<String> => opt "topic",
    }
}

command_header! {
    /// QUERY_MESSAGE (12) request.
    pub struct QueryMessageRequestHeader {
        topic: String => req "topic",
        key: String => req "key",
        max_num: i32 => req "maxNum",
        begin_timestamp: i64 => req "beginTimestamp",
        end_timestamp: i64 => req "endTimestamp",
        /// `_UNIQUE_KEY_QUERY=true`: the key is a `UNIQ_KEY`.
        unique_key_query: Option<bool> => opt "_UNIQUE_KEY_QUERY",
    }
}

command_header! {
    /// QUERY_MESSAGE response.
    pub struct QueryMessageResponseHeader {
        index_last_update_timestamp: i64 => req "indexLastUpdateTimestamp",
        index_last_update_phyoffset: i64 => req "indexLastUpdatePhyoffset",
    }
}
