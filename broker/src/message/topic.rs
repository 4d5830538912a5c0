//! Topic and group names: Java's `TopicValidator` rules (characters, length, blank), its
//! system-topic and not-allowed-send sets, and the retry/DLQ names.
//!
//! The remarks are Java's own texts, so a client shows the same message against this broker
//! as against a Java one (see `broker/VALIDATION.md`).

use super::MessageError;

/// Template topic registered when `autoCreateTopicEnable=true`.
pub const AUTO_CREATE_TOPIC_KEY_TOPIC: &str = "TBW102";
/// Delayed messages wait here, queue = level - 1.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";
/// 5.x timer-wheel schedule topic (Java refuses client sends to it; this broker has no timer
/// wheel, the name stays reserved).
pub const SCHEDULE_TOPIC_V2: &str = "SCHEDULE_TOPIC_XXXX_V2";
/// Java's benchmark system topic.
pub const BENCHMARK_TOPIC: &str = "BenchmarkTest";
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
/// Default message-trace topic (a system topic, but clients send trace data to it).
pub const TRACE_TOPIC: &str = "RMQ_SYS_TRACE_TOPIC";
/// Prefix Java reserves for system topics (`TopicValidator.SYSTEM_TOPIC_PREFIX`).
pub const SYSTEM_TOPIC_PREFIX: &str = "rmq_sys_";
/// Prefix of the broker-written `RMQ_SYS_*` topics (Java's half/op-half/trace topics, and this
/// broker's `RMQ_SYS_DLEDGER_METADATA`, whose records every member applies to its tables).
pub const BROKER_TOPIC_PREFIX: &str = "RMQ_SYS_";
/// Suffix of the per-cluster reply topic (`<cluster>_REPLY_TOPIC`), a 5.x system topic.
pub const REPLY_TOPIC_POSTFIX: &str = "REPLY_TOPIC";
/// Prefix of per-group retry topics.
pub const RETRY_GROUP_TOPIC_PREFIX: &str = "%RETRY%";
/// Prefix of per-group dead-letter topics.
pub const DLQ_GROUP_TOPIC_PREFIX: &str = "%DLQ%";
/// Longest ordinary topic name.
pub const TOPIC_MAX_LEN: usize = 127;
/// Longest retry/DLQ topic name.
pub const RETRY_OR_DLQ_TOPIC_MAX_LEN: usize = 255;
/// Longest group name (Java `Validators.CHARACTER_MAX_LENGTH`).
pub const GROUP_MAX_LEN: usize = 255;

/// Java's remark for a blank topic.
pub const TOPIC_BLANK_REMARK: &str = "The specified topic is blank.";
/// Java's remark for a topic with characters outside `^[%|a-zA-Z0-9_-]+$`.
pub const TOPIC_ILLEGAL_CHARS_REMARK: &str =
    "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$";
/// Java's remark for a topic longer than its limit.
pub const TOPIC_TOO_LONG_REMARK: &str = "The specified topic is longer than topic max length.";

/// `%RETRY%<group>`.
pub fn retry_topic(group: &str) -> String {
    format!("{RETRY_GROUP_TOPIC_PREFIX}{group}")
}

/// `%DLQ%<group>`.
pub fn dlq_topic(group: &str) -> String {
    format!("{DLQ_GROUP_TOPIC_PREFIX}{group}")
}

/// Java `TopicValidator.isNotAllowedSendTopic`, plus the `rmq_sys_` and `RMQ_SYS_` prefixes:
/// producers may not send to these topics directly (NO_PERMISSION). Only the broker writes
/// them. Java lets clients send to prefixed topics that exist; here a client record in
/// `RMQ_SYS_DLEDGER_METADATA` would be applied as table changes, and no other prefixed topic
/// is client-writable, so both prefixes are refused. The trace topic (`RMQ_SYS_TRACE_TOPIC`)
/// stays writable, as in Java: trace clients send to it.
pub fn is_not_allowed_send_topic(topic: &str) -> bool {
    matches!(
        topic,
        SCHEDULE_TOPIC
            | SCHEDULE_TOPIC_V2
            | TRANS_HALF_TOPIC
            | TRANS_OP_HALF_TOPIC
            | TRANS_CHECK_MAX_TIME_TOPIC
            | SELF_TEST_TOPIC
            | OFFSET_MOVED_EVENT
    ) || topic.starts_with(SYSTEM_TOPIC_PREFIX)
        || (topic.starts_with(BROKER_TOPIC_PREFIX) && topic != TRACE_TOPIC)
}

/// Java `TopicValidator.isSystemTopic` over its static set, plus `RMQ_SYS_*` (ours, for the
/// broker-written topics such as `RMQ_SYS_DLEDGER_METADATA`): topics clients may neither
/// create nor delete (UPDATE_AND_CREATE_TOPIC / DELETE_TOPIC_IN_BROKER). The broker adds its
/// own names (cluster, broker, trace topic, `<cluster>_REPLY_TOPIC`) at run time, as Java's
/// `TopicConfigManager` does; see `processor::admin`.
pub fn is_system_topic(topic: &str) -> bool {
    matches!(
        topic,
        AUTO_CREATE_TOPIC_KEY_TOPIC
            | SCHEDULE_TOPIC
            | SCHEDULE_TOPIC_V2
            | BENCHMARK_TOPIC
            | TRANS_HALF_TOPIC
            | TRACE_TOPIC
            | TRANS_OP_HALF_TOPIC
            | TRANS_CHECK_MAX_TIME_TOPIC
            | SELF_TEST_TOPIC
            | OFFSET_MOVED_EVENT
    ) || topic.starts_with(SYSTEM_TOPIC_PREFIX)
        || topic.starts_with(BROKER_TOPIC_PREFIX)
}

/// Whether every byte is in Java's `^[%|a-zA-Z0-9_-]+$` set (`isTopicOrGroupIllegal` negated).
pub fn is_legal_name(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

/// Java `UtilAll.isBlank`: empty or whitespace only.
fn is_blank(s: &str) -> bool {
    s.chars().all(char::is_whitespace)
}

/// Java `TopicValidator.validateTopic`, in Java's order: not blank, characters in
/// `[A-Za-z0-9%|_-]`, at most 127 characters (255 for `%RETRY%`/`%DLQ%` topics, whose group
/// part may be up to 255 long here). The error's `reason` is Java's remark.
pub fn validate_topic(topic: &str) -> Result<(), MessageError> {
    let fail = |reason| {
        Err(MessageError::IllegalTopic {
            topic: topic.chars().take(300).collect(),
            reason,
        })
    };
    if is_blank(topic) {
        return fail(TOPIC_BLANK_REMARK);
    }
    if !is_legal_name(topic) {
        return fail(TOPIC_ILLEGAL_CHARS_REMARK);
    }
    let max = if topic.starts_with(RETRY_GROUP_TOPIC_PREFIX)
        || topic.starts_with(DLQ_GROUP_TOPIC_PREFIX)
    {
        RETRY_OR_DLQ_TOPIC_MAX_LEN
    } else {
        TOPIC_MAX_LEN
    };
    if topic.len() > max {
        return fail(TOPIC_TOO_LONG_REMARK);
    }
    Ok(())
}

/// Java 5 `SubscriptionGroupManager.findSubscriptionGroupConfig`'s rule for auto-created
/// groups (not blank, at most 255 characters, `[A-Za-z0-9%|_-]`); the remark is the one
/// Java's client `Validators.checkGroup` gives.
pub fn validate_group(group: &str) -> Result<(), String> {
    if is_blank(group) {
        return Err("the specified group is blank".into());
    }
    if group.len() > GROUP_MAX_LEN {
        return Err(format!(
            "the specified group is longer than group max length {GROUP_MAX_LEN}."
        ));
    }
    if !is_legal_name(group) {
        let shown: String = group.chars().take(300).collect();
        return Err(format!(
            "the specified group[{shown}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(topic: &str) -> &'static str {
        match validate_topic(topic) {
            Err(MessageError::IllegalTopic { reason, .. }) => reason,
            other => panic!("{topic:?}: {other:?}"),
        }
    }

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
        assert!(is_not_allowed_send_topic(SCHEDULE_TOPIC));
        assert!(!is_not_allowed_send_topic("TopicTest"));
    }

    #[test]
    fn remarks_follow_java_order() {
        assert_eq!(reason(""), TOPIC_BLANK_REMARK);
        assert_eq!(reason("  \t"), TOPIC_BLANK_REMARK);
        // Characters are checked before the length, as in Java.
        assert_eq!(reason(&"x y".repeat(100)), TOPIC_ILLEGAL_CHARS_REMARK);
        assert_eq!(reason("../etc"), TOPIC_ILLEGAL_CHARS_REMARK);
        assert_eq!(reason("Topicé"), TOPIC_ILLEGAL_CHARS_REMARK);
        assert_eq!(reason(&"x".repeat(128)), TOPIC_TOO_LONG_REMARK);
    }

    #[test]
    fn system_and_not_allowed_send_sets() {
        for t in [
            AUTO_CREATE_TOPIC_KEY_TOPIC,
            SCHEDULE_TOPIC,
            SCHEDULE_TOPIC_V2,
            BENCHMARK_TOPIC,
            TRANS_HALF_TOPIC,
            TRACE_TOPIC,
            TRANS_OP_HALF_TOPIC,
            TRANS_CHECK_MAX_TIME_TOPIC,
            SELF_TEST_TOPIC,
            OFFSET_MOVED_EVENT,
            "rmq_sys_anything",
            "RMQ_SYS_DLEDGER_METADATA",
        ] {
            assert!(is_system_topic(t), "{t}");
        }
        assert!(!is_system_topic("TopicTest"));
        assert!(!is_system_topic(&retry_topic("G")));
        // Java's not-allowed-send set: not TBW102, not the trace topic, not BenchmarkTest.
        for t in [AUTO_CREATE_TOPIC_KEY_TOPIC, TRACE_TOPIC, BENCHMARK_TOPIC] {
            assert!(!is_not_allowed_send_topic(t), "{t}");
        }
        for t in [
            SCHEDULE_TOPIC,
            SCHEDULE_TOPIC_V2,
            TRANS_HALF_TOPIC,
            TRANS_OP_HALF_TOPIC,
            TRANS_CHECK_MAX_TIME_TOPIC,
            SELF_TEST_TOPIC,
            OFFSET_MOVED_EVENT,
            "rmq_sys_x",
            "RMQ_SYS_DLEDGER_METADATA",
            "RMQ_SYS_ANYTHING",
        ] {
            assert!(is_not_allowed_send_topic(t), "{t}");
        }
    }

    #[test]
    fn group_rules() {
        assert!(validate_group("CG").is_ok());
        assert!(validate_group("ns%group_1-a|b").is_ok());
        assert!(validate_group(&"g".repeat(255)).is_ok());
        assert!(validate_group("").is_err());
        assert!(validate_group(" ").is_err());
        assert!(validate_group(&"g".repeat(256)).is_err());
        assert!(validate_group("a/../b").is_err());
        assert!(validate_group("my.group").is_err());
    }
}
