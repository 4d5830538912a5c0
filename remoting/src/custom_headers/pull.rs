//! PULL_MESSAGE (11) / LITE_PULL_MESSAGE (361) request and response headers.

use super::command_header;

/// Pull sysflag bit 0: store `commitOffset`.
pub const PULL_FLAG_COMMIT_OFFSET: i32 = 0x1;
/// Pull sysflag bit 1: the broker may hold the request (long polling).
pub const PULL_FLAG_SUSPEND: i32 = 0x2;
/// Pull sysflag bit 2: use the request's subscription expression.
pub const PULL_FLAG_SUBSCRIPTION: i32 = 0x4;
/// Pull sysflag bit 3: class filter (obsolete).
pub const PULL_FLAG_CLASS_FILTER: i32 = 0x8;
/// Pull sysflag bit 4: lite pull.
pub const PULL_FLAG_LITE_PULL: i32 = 0x10;

command_header! {
    /// PULL_MESSAGE request header.
    pub struct PullMessageRequestHeader {
        consumer_group: String => req "consumerGroup",
        topic: String => req "topic",
        queue_id: i32 => req "queueId",
        queue_offset: i64 => req "queueOffset",
        max_msg_nums: i32 => req "maxMsgNums",
        sys_flag: i32 => req "sysFlag",
        commit_offset: i64 => req "commitOffset",
        suspend_timeout_millis: i64 => req "suspendTimeoutMillis",
        subscription: Option<String> => opt "subscription",
        sub_version: i64 => req "subVersion",
        expression_type: Option<String> => opt "expressionType",
        max_msg_bytes: Option<i32> => opt "maxMsgBytes",
        request_source: Option<i32> => opt "requestSource",
        /// Key spelled as in Java (sic).
        proxy_forward_client_id: Option<String> => opt "proxyFrowardClientId",
        broker_name: Option<String> => opt "bname",
    }
}

command_header! {
    /// PULL_MESSAGE response header; all four required fields must be sent for 0/19/20/21.
    pub struct PullMessageResponseHeader {
        suggest_which_broker_id: i64 => req "suggestWhichBrokerId",
        next_begin_offset: i64 => req "nextBeginOffset",
        min_offset: i64 => req "minOffset",
        max_offset: i64 => req "maxOffset",
        offset_delta: Option<i64> => opt "offsetDelta",
        topic_sys_flag: Option<i32> => opt "topicSysFlag",
        group_sys_flag: Option<i32> => opt "groupSysFlag",
        forbidden_type: Option<i32> => opt "forbiddenType",
    }
}
