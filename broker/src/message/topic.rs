//! Topic names: validation rules of the send path and the system/retry/DLQ names.

use super::MessageError;

/// Template topic registered when `autoCreateTopicEnable=true`.
pub const AUTO_CREATE_TOPIC_KEY_TOPIC: &str = "TBW102";
/// Delayed messages wait here, queue = level - 1.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// Transactional half messages.
pub const TRANS_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
/// Transaction op records (commit/rollback markers of half messages).
pub const TRANS_OP_HALF_TOPIC: &str = "RMQ_SYS_TRANS_OP_HALF_TOPIC";
/// Half messages that exceeded the check limit.
pub const TRANS_CHECK_MAX_TIME_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";
/// Self-test topic Java registers at start.
pub const SELF_TEST_TOPIC: &str = "SELF_TEST_TOPIC";
/// Offset-moved events topic.
pub const OFFSET_MOVED_EVENT: &str = "OFFSET_MOVED_EVENT";
/// Default message-trace topic.
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";
/// Prefix of per-group retry topics.
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of per-group dead-letter topics.
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";
/// Longest ordinary topic name.
pub const TOPIC_MAX_LEN: usize = 127;
/// Longest retry/DLQ topic name.
pub const RETRY_OR_DLQ_TOPIC_MAX_LEN: usize = 255;

/// `%RETRY%<group>`.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_GROUP_TOPIC_PREFIX}{group}")
}

/// `%DLQ%<group>`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_GROUP_TOPIC_PREFIX}{group}")
}

/// Whether producers may not send to this topic directly (NO_PERMISSION on send).
pub fn is_system_topic(topic: &str) -> bool {
    matches!(
        topic,
        SCHEDULE_TOPIC | TRANS_HALF_TOPIC | TRANS_OP_HALF_TOPIC | TRANS_CHECK_MAX_TIME_TOPIC
    ) || topic.starts_with("rmq_sys_")
        || topic.starts_with("RMQ_SYS_")
}

/// Checks the send-path naming rules: non-empty, `[A-Za-z0-9%|_-]`, at most 127 characters
/// (255 for `%RETRY%`/`%DLQ%` topics).
pub fn validate_topic(topic: &str) -> Result<(), MessageError> {
    let fail = |reason| {
        Err(MessageError::IllegalTopic {
            topic: topic.chars().take(300).collect(),
            reason,
        })
    };
    if topic.is_empty() {
        return fail("empty");
    }
    let max = if topic.starts_with(RETRY_GROUP_TOPIC_PREFIX)
        || topic.starts_with(DLQ_GROUP_TOPIC_PREFIX)
    {
        RETRY_OR_DLQ_TOPIC_MAX_LEN
    } else {
        TOPIC_MAX_LEN
    };
    if topic.len() > max {
        return fail("too long");
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
    {
        return fail("illegal character");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_rules() {
        assert!(validate_topic("TopicTest").is_ok());
        assert!(validate_topic("a|b%c_d-e9").is_ok());
        assert!(validate_topic("").is_err());
        assert!(validate_topic("bad topic").is_err());
        assert!(validate_topic(&"x".repeat(127)).is_ok());
        assert!(validate_topic(&"x".repeat(128)).is_err());
        assert!(validate_topic(&retry_topic(&"g".repeat(200))).is_ok());
        assert!(validate_topic(&dlq_topic(&"g".repeat(251))).is_err());
        assert!(is_system_topic(SCHEDULE_TOPIC));
        assert!(!is_system_topic("TopicTest"));
    }
}
