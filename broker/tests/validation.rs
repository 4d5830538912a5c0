//! Goal: every request the broker serves refuses what Java RocketMQ 4.9/5.x refuses, with
//! Java's response code and remark, before anything reaches the log or a table; and nothing a
//! client sends makes it panic or store garbage (`broker/VALIDATION.md` lists the rules, one
//! test here per rule). Method: an in-process broker over a `MemLog` on loopback, driven by
//! hand-built requests; each refusal is checked for its code, its remark, and that the log's
//! end index and the tables did not move.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too; tests may unwrap

mod common;

use broker::error::put_illegal_remark;
use broker::message::batch::encode_batch_element;
use broker::message::properties::keys;
use broker::message::topic as names;
use broker::store::mem_log::MemLog;
use bytes::{Bytes, BytesMut};
use common::*;
use remoting::custom_headers::*;
use remoting::{RemotingCommand, RequestCode, ResponseCode};

fn code(r: &RemotingCommand) -> ResponseCode {
    r.response_code()
}

fn remark(r: &RemotingCommand) -> String {
    r.remark().unwrap_or_default().to_owned()
}

fn end_index(h: &Harness) -> i64 {
    h.ctx().store.water_marks().ledger_end_index
}

/// The prefix of every store-level MESSAGE_ILLEGAL remark (the harness has maxMessageSize
/// 65536).
fn put_illegal() -> String {
    put_illegal_remark(65_536)
}

fn queue_offset(r: &RemotingCommand) -> i64 {
    r.ext_field("queueOffset").unwrap().parse().unwrap()
}

/// A batch request (code 320) with `sys_flag` and header `properties`.
fn batch(topic: &str, queue_id: i32, sys_flag: i32, properties: &str, n: usize) -> RemotingCommand {
    let mut h = send_header(topic, queue_id, properties);
    h.batch = Some(true);
    h.sys_flag = sys_flag;
    let mut body = BytesMut::new();
    for i in 0..n {
        encode_batch_element(&mut body, 0, format!("b{i}").as_bytes(), b"");
    }
    RemotingCommand::request(RequestCode::SEND_BATCH_MESSAGE, &h).with_body(body.freeze())
}

fn create_topic(topic: &str, read: i32, write: i32, perm: i32) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::UPDATE_AND_CREATE_TOPIC,
        &CreateTopicRequestHeader {
            topic: topic.into(),
            default_topic: "TBW102".into(),
            read_queue_nums: read,
            write_queue_nums: write,
            perm,
            topic_filter_type: "SINGLE_TAG".into(),
            order: false,
            ..Default::default()
        },
    )
}

fn delete_topic(topic: &str) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::DELETE_TOPIC_IN_BROKER,
        &DeleteTopicRequestHeader {
            topic: topic.into(),
            cluster_name: None,
        },
    )
}

fn max_offset(topic: &str, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::GET_MAX_OFFSET,
        &GetMaxOffsetRequestHeader {
            topic: topic.into(),
            queue_id,
            ..Default::default()
        },
    )
}

fn offset_of(r: &RemotingCommand) -> i64 {
    r.decode_header::<OffsetResponseHeader>().unwrap().offset
}

fn update_offset(group: &str, topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::UPDATE_CONSUMER_OFFSET,
        &UpdateConsumerOffsetRequestHeader {
            consumer_group: group.into(),
            topic: topic.into(),
            queue_id,
            commit_offset: offset,
            broker_name: None,
        },
    )
}

fn pull_n(group: &str, topic: &str, queue_id: i32, offset: i64, max: i32) -> RemotingCommand {
    let h = PullMessageRequestHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: max,
        sys_flag: 0x4,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        ..Default::default()
    };
    RemotingCommand::request(RequestCode::PULL_MESSAGE, &h)
}

fn send_back(group: &str, offset: i64, delay_level: i32, max: Option<i32>) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::CONSUMER_SEND_MSG_BACK,
        &ConsumerSendMsgBackRequestHeader {
            offset,
            group: group.into(),
            delay_level,
            origin_msg_id: None,
            origin_topic: None,
            unit_mode: None,
            max_reconsume_times: max,
            broker_name: None,
        },
    )
}

async fn started() -> Harness {
    let h = Harness::start().await;
    h.wait_master().await;
    h
}

async fn started_with(tweak: impl FnOnce(&mut broker::config::BrokerConfig)) -> Harness {
    let h = Harness::start_with(MemLog::new_leader(), tweak).await;
    h.wait_master().await;
    h
}

/// The exact sequence of issue 25: a ROLLBACK-typed batch used to take queue offset 1, which
/// the dispatcher never filled (ROLLBACK records are not dispatched), so the queue stalled.
#[tokio::test]
async fn rollback_batch_is_refused_and_the_queue_keeps_going() {
    let h = started().await;
    let r = h.call(send_v2("T", 0, b"first", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    assert_eq!(queue_offset(&r), 0);
    let before = end_index(&h);
    let r = h.call(batch("T", 0, 12, "", 1)).await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    assert!(remark(&r).starts_with(&put_illegal()), "{}", remark(&r));
    assert!(remark(&r).contains("transaction"), "{}", remark(&r));
    assert_eq!(end_index(&h), before, "the refused batch reached the log");
    let r = h.call(send_v2("T", 0, b"second", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(queue_offset(&r), 1);
    let r = h.call(pull("CG", "T", 0, 1, 0)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let got = records(&r);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].body[..], b"second");
    assert_eq!(got[0].queue_offset, 1);
    assert_eq!(offset_of(&h.call(max_offset("T", 0)).await), 2);
    h.shutdown().await;
}

/// Java `CommitLog.putMessages`: a batch of any transaction type is MESSAGE_ILLEGAL, by code
/// 320 or by 310 with the batch flag.
#[tokio::test]
async fn batches_of_every_transaction_type_are_refused() {
    let h = started().await;
    assert_eq!(
        code(&h.call(send_v2("TB", 0, b"x", "")).await),
        ResponseCode::SUCCESS
    );
    let before = end_index(&h);
    for sys_flag in [0x4, 0x8, 0xC, 0x4 | 0x1, 0xC | 0x2, 0x8 | 0x80] {
        let r = h.call(batch("TB", 0, sys_flag, "", 2)).await;
        assert_eq!(
            code(&r),
            ResponseCode::MESSAGE_ILLEGAL,
            "sysFlag {sys_flag}"
        );
        assert!(remark(&r).starts_with(&put_illegal()), "{}", remark(&r));
        let mut as_310 = batch("TB", 0, sys_flag, "", 1);
        as_310.set_code(RequestCode::SEND_MESSAGE_V2.0);
        let r = h.call(as_310).await;
        assert_eq!(
            code(&r),
            ResponseCode::MESSAGE_ILLEGAL,
            "310, sysFlag {sys_flag}"
        );
    }
    assert_eq!(end_index(&h), before);
    // A plain batch still goes through, at the next offset.
    let r = h.call(batch("TB", 0, 0, "", 2)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(queue_offset(&r), 1);
    h.shutdown().await;
}

/// Java checks the batch's own properties for a delay level; elements' delays are refused too.
#[tokio::test]
async fn batch_with_a_delay_level_is_refused() {
    let h = started().await;
    assert_eq!(
        code(&h.call(send_v2("TD", 0, b"x", "")).await),
        ResponseCode::SUCCESS
    );
    let before = end_index(&h);
    let r = h
        .call(batch(
            "TD",
            0,
            0,
            &props(&[(keys::DELAY_TIME_LEVEL, "3")]),
            1,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    assert!(remark(&r).starts_with(&put_illegal()), "{}", remark(&r));
    assert!(remark(&r).contains("delay"), "{}", remark(&r));
    // Not a number: Java's Integer.parseInt throws, answered SYSTEM_ERROR.
    let r = h
        .call(batch(
            "TD",
            0,
            0,
            &props(&[(keys::DELAY_TIME_LEVEL, "abc")]),
            1,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR);
    // An element's own delay.
    let delayed = props(&[(keys::DELAY_TIME_LEVEL, "2")]);
    let r = h
        .call(send_batch(
            RequestCode::SEND_BATCH_MESSAGE,
            "TD",
            0,
            &[(b"a", String::new()), (b"b", delayed)],
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    assert_eq!(end_index(&h), before);
    // Level 0 is no delay (Java: getDelayTimeLevel() > 0 only).
    let r = h
        .call(batch(
            "TD",
            0,
            0,
            &props(&[(keys::DELAY_TIME_LEVEL, "0")]),
            1,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    h.shutdown().await;
}

#[tokio::test]
async fn batch_for_a_retry_topic_is_refused() {
    let h = started().await;
    let before = end_index(&h);
    let r = h.call(batch("%RETRY%CG", 0, 0, "", 1)).await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    assert_eq!(
        remark(&r),
        "batch request does not support retry group %RETRY%CG"
    );
    assert_eq!(end_index(&h), before);
    h.shutdown().await;
}

/// A single message whose DELAY is not a number: Java answers SYSTEM_ERROR (the parse
/// exception); nothing is stored.
#[tokio::test]
async fn a_delay_level_that_is_not_a_number_is_refused() {
    let h = started().await;
    let before = end_index(&h);
    let r = h
        .call(send_v2(
            "TN",
            0,
            b"x",
            &props(&[(keys::DELAY_TIME_LEVEL, "soon")]),
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR);
    assert!(remark(&r).contains("DELAY"), "{}", remark(&r));
    assert_eq!(end_index(&h), before);
    h.shutdown().await;
}

/// maxMessageSize (65536 here) bounds a single body and a batch's whole body.
#[tokio::test]
async fn bodies_over_max_message_size_are_refused() {
    let h = started().await;
    let before = end_index(&h);
    let r = h.call(send_v2("TS", 0, &vec![b'x'; 65_537], "")).await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    assert!(remark(&r).starts_with(&put_illegal()), "{}", remark(&r));
    // Each element is small, the batch body is not.
    let big = vec![b'y'; 30_000];
    let r = h
        .call(send_batch(
            RequestCode::SEND_BATCH_MESSAGE,
            "TS",
            0,
            &[
                (&big, String::new()),
                (&big, String::new()),
                (&big, String::new()),
            ],
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    assert!(remark(&r).starts_with(&put_illegal()), "{}", remark(&r));
    assert_eq!(end_index(&h), before);
    // Exactly the limit is accepted.
    let r = h.call(send_v2("TS", 0, &vec![b'x'; 65_536], "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    h.shutdown().await;
}

/// Java: "the message properties length exceeded" (PROPERTIES_SIZE_EXCEEDED, 32767 bytes).
#[tokio::test]
async fn properties_over_32767_bytes_are_refused() {
    let h = started().await;
    assert_eq!(
        code(&h.call(send_v2("TP", 0, b"x", "")).await),
        ResponseCode::SUCCESS
    );
    let before = end_index(&h);
    let long = props(&[("K", &"v".repeat(40_000))]);
    let r = h.call(send_v2("TP", 0, b"x", &long)).await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    assert!(remark(&r).starts_with(&put_illegal()), "{}", remark(&r));
    // Just under the limit as sent, over it once UNIQ_KEY and CLUSTER are added.
    let edge = props(&[("K", &"v".repeat(32_760))]);
    let r = h.call(send_v2("TP", 0, b"x", &edge)).await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    // A batch element.
    let r = h
        .call(send_batch(
            RequestCode::SEND_BATCH_MESSAGE,
            "TP",
            0,
            &[(b"a", long)],
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    assert_eq!(end_index(&h), before);
    h.shutdown().await;
}

/// `TopicValidator.validateTopic`: INVALID_PARAMETER on the send path (5.x), SYSTEM_ERROR on
/// the admin paths, Java's remarks; nothing created.
#[tokio::test]
async fn topic_names_follow_topic_validator() {
    let h = started().await;
    let before = end_index(&h);
    let too_long = "x".repeat(128);
    let cases = [
        ("", names::TOPIC_BLANK_REMARK),
        ("   ", names::TOPIC_BLANK_REMARK),
        ("bad topic", names::TOPIC_ILLEGAL_CHARS_REMARK),
        ("a/../../b", names::TOPIC_ILLEGAL_CHARS_REMARK),
        ("Topic.With.Dots", names::TOPIC_ILLEGAL_CHARS_REMARK),
        ("Topicé", names::TOPIC_ILLEGAL_CHARS_REMARK),
        (too_long.as_str(), names::TOPIC_TOO_LONG_REMARK),
    ];
    for (topic, want) in cases {
        let r = h.call(send_v2(topic, 0, b"x", "")).await;
        assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER, "send {topic:?}");
        assert_eq!(remark(&r), want, "send {topic:?}");
        let r = h.call(create_topic(topic, 1, 1, 6)).await;
        assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR, "create {topic:?}");
        assert_eq!(remark(&r), want, "create {topic:?}");
        let r = h.call(delete_topic(topic)).await;
        assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR, "delete {topic:?}");
        assert_eq!(remark(&r), want, "delete {topic:?}");
        assert!(!h.ctx().topics.contains(topic), "{topic:?} created");
    }
    assert_eq!(end_index(&h), before);
    // 127 characters is the limit.
    let r = h.call(send_v2(&"x".repeat(127), 0, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    h.shutdown().await;
}

/// Java's not-allowed-send set (plus `rmq_sys_*`): NO_PERMISSION, "Sending message to
/// topic[X] is forbidden."; the trace topic stays writable.
#[tokio::test]
async fn clients_cannot_send_to_broker_written_system_topics() {
    let h = started().await;
    let before = end_index(&h);
    for topic in [
        names::SCHEDULE_TOPIC,
        names::SCHEDULE_TOPIC_V2,
        names::TRANS_HALF_TOPIC,
        names::TRANS_OP_HALF_TOPIC,
        names::TRANS_CHECK_MAX_TIME_TOPIC,
        names::SELF_TEST_TOPIC,
        names::OFFSET_MOVED_EVENT,
        "rmq_sys_anything",
        "RMQ_SYS_DLEDGER_METADATA",
        "RMQ_SYS_OTHER",
    ] {
        let r = h.call(send_v2(topic, 0, b"x", "")).await;
        assert_eq!(code(&r), ResponseCode::NO_PERMISSION, "{topic}");
        assert_eq!(
            remark(&r),
            format!("Sending message to topic[{topic}] is forbidden."),
        );
        let r = h.call(batch(topic, 0, 0, "", 1)).await;
        assert_eq!(code(&r), ResponseCode::NO_PERMISSION, "batch {topic}");
    }
    assert_eq!(end_index(&h), before);
    let r = h.call(send_v2(names::TRACE_TOPIC, 0, b"trace", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    h.shutdown().await;
}

/// Java 5 `AdminBrokerProcessor`: UPDATE_AND_CREATE_TOPIC and DELETE_TOPIC_IN_BROKER refuse
/// every system topic (the static set, `rmq_sys_*`, this broker's cluster and broker names,
/// `<cluster>_REPLY_TOPIC`) with SYSTEM_ERROR; the tables are untouched.
#[tokio::test]
async fn system_topics_cannot_be_created_or_deleted_by_clients() {
    let h = started().await;
    let schedule_before = h.ctx().topics.get(names::SCHEDULE_TOPIC).unwrap();
    for topic in [
        names::AUTO_CREATE_TOPIC_KEY_TOPIC,
        names::SCHEDULE_TOPIC,
        names::SCHEDULE_TOPIC_V2,
        names::BENCHMARK_TOPIC,
        names::TRANS_HALF_TOPIC,
        names::TRACE_TOPIC,
        names::TRANS_OP_HALF_TOPIC,
        names::TRANS_CHECK_MAX_TIME_TOPIC,
        names::SELF_TEST_TOPIC,
        names::OFFSET_MOVED_EVENT,
        "rmq_sys_wheel",
        "RMQ_SYS_DLEDGER_METADATA",
        "TestCluster",
        "b0",
        "TestCluster_REPLY_TOPIC",
    ] {
        let want = format!("The topic[{topic}] is conflict with system topic.");
        let r = h.call(create_topic(topic, 4, 4, 6)).await;
        assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR, "create {topic}");
        assert_eq!(remark(&r), want);
        let r = h.call(delete_topic(topic)).await;
        assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR, "delete {topic}");
        assert_eq!(remark(&r), want);
    }
    assert_eq!(
        h.ctx().topics.get(names::SCHEDULE_TOPIC).unwrap(),
        schedule_before
    );
    for topic in [
        "TBW102",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "TestCluster",
        "b0",
    ] {
        assert!(h.ctx().topics.contains(topic), "{topic} was deleted");
    }
    // Retry and DLQ topics are not system topics (Java lets mqadmin delete them).
    let r = h.call(create_topic("%RETRY%CG", 1, 1, 6)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    let r = h.call(delete_topic("%RETRY%CG")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    h.shutdown().await;
}

/// `validateSystemTopicWhenUpdateTopic=false` (Java 5's switch) lets an operator update a
/// system topic; the cluster name stays reserved (Java 4.9's check).
#[tokio::test]
async fn system_topic_check_can_be_turned_off_like_java() {
    let h = started_with(|c| c.validate_system_topic_when_update_topic = false).await;
    let r = h
        .call(create_topic(names::AUTO_CREATE_TOPIC_KEY_TOPIC, 4, 4, 7))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    assert_eq!(h.ctx().topics.get("TBW102").unwrap().write_queue_nums, 4);
    let r = h.call(create_topic("TestCluster", 4, 4, 6)).await;
    assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR);
    assert_eq!(
        remark(&r),
        "the topic[TestCluster] is conflict with system reserved words."
    );
    h.shutdown().await;
}

/// The broker still writes its own system topics: delayed messages (schedule topic),
/// transactional half messages, retry and DLQ topics.
#[tokio::test]
async fn broker_internal_system_topics_keep_working() {
    let h = started().await;
    let r = h
        .call(send_v2(
            "TI",
            0,
            b"later",
            &props(&[(keys::DELAY_TIME_LEVEL, "1")]),
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    let r = h
        .call(send_v2(
            "TI",
            0,
            b"half",
            &props(&[
                (keys::TRANSACTION_PREPARED, "true"),
                (keys::PRODUCER_GROUP, "PG"),
            ]),
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    let r = h.call(send_v2("TI", 0, b"plain", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let (_, phys) = broker::message::decode_offset_msg_id(r.ext_field("msgId").unwrap()).unwrap();
    let r = h.call(send_back("CG", phys, 1, None)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    assert!(h.ctx().topics.contains("%RETRY%CG"));
    let r = h.call(send_back("CG", phys, -1, None)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    assert!(h.ctx().topics.contains("%DLQ%CG"));
    let store = &h.ctx().store;
    store.catch_up_dispatch().await;
    assert_eq!(store.max_offset(names::SCHEDULE_TOPIC, 0), 2);
    assert_eq!(store.max_offset(names::TRANS_HALF_TOPIC, 0), 1);
    assert_eq!(store.max_offset("%DLQ%CG", 0), 1);
    h.shutdown().await;
}

/// Java `PermName.isValid` (checked by Java's admin client, `Validators.checkTopicConfig`):
/// 0..=7, NO_PERMISSION "topicPermission value: X is invalid.".
#[tokio::test]
async fn perm_outside_java_legal_set_is_refused() {
    let h = started().await;
    for perm in [-1, 8, 9, 15, 16, 255, i32::MIN, i32::MAX] {
        let r = h.call(create_topic("TPerm", 1, 1, perm)).await;
        assert_eq!(code(&r), ResponseCode::NO_PERMISSION, "perm {perm}");
        assert_eq!(
            remark(&r),
            format!("topicPermission value: {perm} is invalid.")
        );
        assert!(!h.ctx().topics.contains("TPerm"));
    }
    for perm in 0..=7 {
        let r = h.call(create_topic("TPerm", 1, 1, perm)).await;
        assert_eq!(code(&r), ResponseCode::SUCCESS, "perm {perm}");
        assert_eq!(h.ctx().topics.get("TPerm").unwrap().perm, perm);
    }
    h.shutdown().await;
}

/// Read and write queue counts: 1..=maxTopicQueueNums (1024 by default), INVALID_PARAMETER.
#[tokio::test]
async fn queue_counts_must_be_positive_and_bounded() {
    let h = started().await;
    for (read, write) in [
        (0, 1),
        (1, 0),
        (-1, 4),
        (4, -1),
        (65_536, 65_536),
        (1025, 1),
        (1, 1025),
        (i32::MAX, i32::MAX),
    ] {
        let r = h.call(create_topic("TQ", read, write, 6)).await;
        assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER, "{read}/{write}");
        assert!(remark(&r).contains("maxTopicQueueNums"), "{}", remark(&r));
        assert!(!h.ctx().topics.contains("TQ"));
    }
    let r = h.call(create_topic("TQ", 1024, 1024, 6)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    h.shutdown().await;

    let h = started_with(|c| c.max_topic_queue_nums = 16).await;
    let r = h.call(create_topic("TQ", 16, 17, 6)).await;
    assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER);
    let r = h.call(create_topic("TQ", 16, 16, 6)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    h.shutdown().await;
}

/// Java's header `checkFields`: an unknown topicFilterType is SYSTEM_ERROR.
#[tokio::test]
async fn topic_filter_type_must_be_known() {
    let h = started().await;
    let mut req = create_topic("TF", 1, 1, 6);
    req.ext_fields_mut()
        .insert("topicFilterType".into(), "BOTH_TAGS".into());
    let r = h.call(req).await;
    assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR);
    assert_eq!(remark(&r), "topicFilterType = [BOTH_TAGS] value invalid");
    assert!(!h.ctx().topics.contains("TF"));
    h.shutdown().await;
}

/// Auto-creation on send: the client's defaultTopicQueueNums must be positive (Java would
/// create a topic of zero queues), and is capped by the template's write queues and by
/// maxTopicQueueNums.
#[tokio::test]
async fn auto_created_topics_get_a_bounded_queue_count() {
    let h = started_with(|c| c.max_topic_queue_nums = 2).await;
    let before = end_index(&h);
    for n in [0, -1, i32::MIN] {
        let mut hdr = send_header("TAuto", 0, "");
        hdr.default_topic_queue_nums = n;
        let req = RemotingCommand::request(RequestCode::SEND_MESSAGE_V2, &hdr)
            .with_body(Bytes::from_static(b"x"));
        let r = h.call(req).await;
        assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER, "{n}");
        assert!(
            remark(&r).contains("defaultTopicQueueNums"),
            "{}",
            remark(&r)
        );
        assert!(!h.ctx().topics.contains("TAuto"));
    }
    assert_eq!(end_index(&h), before);
    let mut hdr = send_header("TAuto", 0, "");
    hdr.default_topic_queue_nums = i32::MAX;
    let req = RemotingCommand::request(RequestCode::SEND_MESSAGE_V2, &hdr)
        .with_body(Bytes::from_static(b"x"));
    let r = h.call(req).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    let t = h.ctx().topics.get("TAuto").unwrap();
    assert_eq!((t.read_queue_nums, t.write_queue_nums), (2, 2));
    h.shutdown().await;

    // Without a cap below it, the template's 8 write queues bound the count (Java).
    let h = started().await;
    let mut hdr = send_header("TAuto", 0, "");
    hdr.default_topic_queue_nums = 100_000;
    let req = RemotingCommand::request(RequestCode::SEND_MESSAGE_V2, &hdr)
        .with_body(Bytes::from_static(b"x"));
    assert_eq!(code(&h.call(req).await), ResponseCode::SUCCESS);
    assert_eq!(h.ctx().topics.get("TAuto").unwrap().write_queue_nums, 8);
    h.shutdown().await;
}

/// A send's queue id must be below max(read, write) queues (5.x: INVALID_PARAMETER).
#[tokio::test]
async fn send_queue_id_out_of_range_is_refused() {
    let h = started().await;
    assert_eq!(
        code(&h.call(create_topic("TR", 2, 4, 6)).await),
        ResponseCode::SUCCESS
    );
    let before = end_index(&h);
    for q in [4, 5, i32::MAX] {
        let r = h.call(send_v2("TR", q, b"x", "")).await;
        assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER, "queue {q}");
        assert!(remark(&r).starts_with(&format!("request queueId[{q}] is illegal")));
    }
    assert_eq!(end_index(&h), before);
    // A negative queue id lets the broker pick one (Java), within the write queues.
    let r = h.call(send_v2("TR", -1, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let q: i32 = r.ext_field("queueId").unwrap().parse().unwrap();
    assert!((0..4).contains(&q), "{q}");
    h.shutdown().await;
}

/// PULL_MESSAGE: queue id within the *read* queues (SYSTEM_ERROR, Java's remark); a negative
/// offset moves to the queue's minimum (PULL_OFFSET_MOVED); maxMsgNums is clamped.
#[tokio::test]
async fn pull_checks_queue_id_offset_and_count() {
    let h = started().await;
    assert_eq!(
        code(&h.call(create_topic("TPull", 2, 4, 6)).await),
        ResponseCode::SUCCESS
    );
    for i in 0..3 {
        let r = h
            .call(send_v2("TPull", 0, format!("m{i}").as_bytes(), ""))
            .await;
        assert_eq!(code(&r), ResponseCode::SUCCESS);
    }
    for q in [-1, 2, 3, i32::MAX, i32::MIN] {
        let r = h.call(pull_n("CG", "TPull", q, 0, 32)).await;
        assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR, "queue {q}");
        assert!(
            remark(&r).starts_with(&format!(
                "queueId[{q}] is illegal, topic:[TPull] topicConfig.readQueueNums:[2]"
            )),
            "{}",
            remark(&r)
        );
    }
    for offset in [-1, i64::MIN] {
        let r = h.call(pull_n("CG", "TPull", 0, offset, 32)).await;
        assert_eq!(code(&r), ResponseCode::PULL_OFFSET_MOVED, "offset {offset}");
        let hdr: PullMessageResponseHeader = r.decode_header().unwrap();
        assert_eq!(hdr.next_begin_offset, 0);
    }
    let r = h.call(pull_n("CG", "TPull", 0, i64::MAX, 32)).await;
    assert_eq!(code(&r), ResponseCode::PULL_OFFSET_MOVED);
    let hdr: PullMessageResponseHeader = r.decode_header().unwrap();
    assert_eq!(hdr.next_begin_offset, 3);
    for (max, want) in [(0, 1), (-5, 1), (i32::MIN, 1), (2, 2), (i32::MAX, 3)] {
        let r = h.call(pull_n("CG", "TPull", 0, 0, max)).await;
        assert_eq!(code(&r), ResponseCode::SUCCESS, "maxMsgNums {max}");
        assert_eq!(records(&r).len(), want, "maxMsgNums {max}");
    }
    h.shutdown().await;
}

/// Java 5 `findSubscriptionGroupConfig` never creates a group under an illegal name: a pull,
/// an offset commit and a send-back for one answer SUBSCRIPTION_GROUP_NOT_EXIST, a heartbeat
/// registers nothing for it (no group, no retry topic).
#[tokio::test]
async fn groups_with_illegal_names_are_never_created() {
    let h = started().await;
    let r = h.call(send_v2("TG", 0, b"x", "")).await;
    let (_, phys) = broker::message::decode_offset_msg_id(r.ext_field("msgId").unwrap()).unwrap();
    let before = end_index(&h);
    for group in ["a/../../b", "my.group", "", "é", &"g".repeat(256)] {
        let r = h.call(pull_n(group, "TG", 0, 0, 32)).await;
        assert_eq!(
            code(&r),
            ResponseCode::SUBSCRIPTION_GROUP_NOT_EXIST,
            "pull {group:?}"
        );
        let r = h.call(update_offset(group, "TG", 0, 1)).await;
        assert_eq!(
            code(&r),
            ResponseCode::SUBSCRIPTION_GROUP_NOT_EXIST,
            "commit {group:?}"
        );
        let r = h.call(send_back(group, phys, 0, None)).await;
        assert_eq!(
            code(&r),
            ResponseCode::SUBSCRIPTION_GROUP_NOT_EXIST,
            "send back {group:?}"
        );
        assert!(h.ctx().subscriptions.get(group).is_none(), "{group:?}");
        assert!(!h.ctx().topics.contains(&names::retry_topic(group)));
        assert_eq!(h.ctx().offsets.query_offset(group, "TG", 0), None);
    }
    let hb = RemotingCommand::request_empty(RequestCode::HEART_BEAT).with_body(
        r#"{"clientID":"c1","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,"groupName":"x/../y","messageModel":1,"subscriptionDataSet":[],"unitMode":"0"}],"producerDataSet":[]}"#,
    );
    let r = h.call(hb).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert!(h.ctx().subscriptions.get("x/../y").is_none());
    assert!(!h.ctx().topics.contains("%RETRY%x/../y"));
    assert_eq!(end_index(&h), before);
    h.shutdown().await;
}

/// UPDATE_CONSUMER_OFFSET: a legal topic name, a queue id among the topic's queues (within
/// maxTopicQueueNums for a topic this member has not learned yet, as a new master right after
/// a failover) and an offset not negative (ours); nothing is stored otherwise. Committing
/// creates no group.
#[tokio::test]
async fn update_consumer_offset_checks() {
    let h = started().await;
    assert_eq!(
        code(&h.call(create_topic("TO", 2, 2, 6)).await),
        ResponseCode::SUCCESS
    );
    let r = h.call(update_offset("CG", "bad topic", 0, 1)).await;
    assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER);
    assert_eq!(remark(&r), names::TOPIC_ILLEGAL_CHARS_REMARK);
    assert_eq!(h.ctx().offsets.query_offset("CG", "bad topic", 0), None);
    // A topic this member does not know (yet): bounded by maxTopicQueueNums (1024).
    let r = h.call(update_offset("CG", "NotHereYet", 1024, 1)).await;
    assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER);
    let r = h.call(update_offset("CG", "NotHereYet", 3, 5)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    assert_eq!(h.ctx().offsets.query_offset("CG", "NotHereYet", 3), Some(5));
    assert!(
        h.ctx().subscriptions.get("CG").is_none(),
        "a commit created a group"
    );
    for q in [-1, 2, i32::MAX, i32::MIN] {
        let r = h.call(update_offset("CG", "TO", q, 1)).await;
        assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER, "queue {q}");
        assert_eq!(h.ctx().offsets.query_offset("CG", "TO", q), None);
    }
    for o in [-1, i64::MIN] {
        let r = h.call(update_offset("CG", "TO", 0, o)).await;
        assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER, "offset {o}");
        assert_eq!(h.ctx().offsets.query_offset("CG", "TO", 0), None);
    }
    let r = h.call(update_offset("CG", "TO", 1, 7)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(h.ctx().offsets.query_offset("CG", "TO", 1), Some(7));
    h.shutdown().await;
}

/// The offset queries answer an absurd queue as Java does (an empty queue) and create no
/// consume queue for it.
#[tokio::test]
async fn offset_queries_answer_absurd_queues_like_java() {
    let h = started().await;
    assert_eq!(
        code(&h.call(send_v2("TQry", 0, b"x", "")).await),
        ResponseCode::SUCCESS
    );
    for q in [-1, 9999, i32::MAX, i32::MIN] {
        let r = h.call(max_offset("TQry", q)).await;
        assert_eq!(code(&r), ResponseCode::SUCCESS);
        assert_eq!(offset_of(&r), 0);
        let r = h
            .call(RemotingCommand::request(
                RequestCode::GET_MIN_OFFSET,
                &GetMinOffsetRequestHeader {
                    topic: "TQry".into(),
                    queue_id: q,
                    broker_name: None,
                },
            ))
            .await;
        assert_eq!(code(&r), ResponseCode::SUCCESS);
        assert_eq!(offset_of(&r), 0);
        let r = h
            .call(RemotingCommand::request(
                RequestCode::GET_EARLIEST_MSG_STORETIME,
                &GetEarliestMsgStoretimeRequestHeader {
                    topic: "TQry".into(),
                    queue_id: q,
                    broker_name: None,
                },
            ))
            .await;
        assert_eq!(code(&r), ResponseCode::SUCCESS);
        for ts in [i64::MIN, -1, i64::MAX] {
            let r = h
                .call(RemotingCommand::request(
                    RequestCode::SEARCH_OFFSET_BY_TIMESTAMP,
                    &SearchOffsetRequestHeader {
                        topic: "TQry".into(),
                        queue_id: q,
                        timestamp: ts,
                        boundary_type: Some("UPPER".into()),
                        broker_name: None,
                    },
                ))
                .await;
            assert_eq!(code(&r), ResponseCode::SUCCESS);
            assert_eq!(offset_of(&r), 0);
        }
        let r = h
            .call(RemotingCommand::request(
                RequestCode::QUERY_CONSUMER_OFFSET,
                &QueryConsumerOffsetRequestHeader {
                    consumer_group: "CG".into(),
                    topic: "TQry".into(),
                    queue_id: q,
                    ..Default::default()
                },
            ))
            .await;
        assert_eq!(code(&r), ResponseCode::QUERY_NOT_FOUND, "queue {q}");
        assert!(h.ctx().store.consume_queues().get("TQry", q).is_none());
    }
    // Timestamps at the extremes on the real queue.
    for ts in [i64::MIN, i64::MAX] {
        let r = h
            .call(RemotingCommand::request(
                RequestCode::SEARCH_OFFSET_BY_TIMESTAMP,
                &SearchOffsetRequestHeader {
                    topic: "TQry".into(),
                    queue_id: 0,
                    timestamp: ts,
                    boundary_type: None,
                    broker_name: None,
                },
            ))
            .await;
        assert_eq!(code(&r), ResponseCode::SUCCESS, "ts {ts}");
    }
    h.shutdown().await;
}

/// VIEW_MESSAGE_BY_ID and QUERY_MESSAGE: a negative offset finds nothing (SYSTEM_ERROR,
/// Java's remark); maxNum of zero or less finds nothing (QUERY_NOT_FOUND); extreme
/// timestamps are answered.
#[tokio::test]
async fn view_and_query_message_checks() {
    let h = started().await;
    let r = h
        .call(send_v2("TV", 0, b"hello", &props(&[(keys::KEYS, "k1")])))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    for offset in [-1, i64::MIN, i64::MAX] {
        let r = h
            .call(RemotingCommand::request(
                RequestCode::VIEW_MESSAGE_BY_ID,
                &ViewMessageRequestHeader {
                    offset,
                    topic: None,
                },
            ))
            .await;
        assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR, "offset {offset}");
        assert_eq!(
            remark(&r),
            format!("can not find message by the offset, {offset}")
        );
    }
    let q = |max_num: i32, begin: i64, end: i64| {
        RemotingCommand::request(
            RequestCode::QUERY_MESSAGE,
            &QueryMessageRequestHeader {
                topic: "TV".into(),
                key: "k1".into(),
                max_num,
                begin_timestamp: begin,
                end_timestamp: end,
                unique_key_query: None,
            },
        )
    };
    // Wait until the key is indexed.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while code(&h.call(q(1, 0, i64::MAX)).await) != ResponseCode::SUCCESS {
        assert!(tokio::time::Instant::now() < deadline, "key never indexed");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for max in [0, -1, i32::MIN] {
        let r = h.call(q(max, 0, i64::MAX)).await;
        assert_eq!(code(&r), ResponseCode::QUERY_NOT_FOUND, "maxNum {max}");
        assert!(r.body().is_empty());
    }
    let r = h.call(q(i32::MAX, i64::MIN, i64::MAX)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(records(&r).len(), 1);
    let r = h.call(q(32, i64::MAX, i64::MIN)).await;
    assert_eq!(code(&r), ResponseCode::QUERY_NOT_FOUND);
    h.shutdown().await;
}

/// CONSUMER_SEND_MSG_BACK and END_TRANSACTION with a negative physical offset: Java's lookup
/// finds nothing and answers SYSTEM_ERROR with its remark.
#[tokio::test]
async fn negative_physical_offsets_find_nothing() {
    let h = started().await;
    let before = end_index(&h);
    for offset in [-1, i64::MIN] {
        let r = h.call(send_back("CG", offset, 0, None)).await;
        assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR);
        assert_eq!(
            remark(&r),
            format!("look message by offset failed, {offset}")
        );
        for tx in [0x8, 0xC] {
            let r = h
                .call(RemotingCommand::request(
                    RequestCode::END_TRANSACTION,
                    &EndTransactionRequestHeader {
                        producer_group: "PG".into(),
                        tran_state_table_offset: 0,
                        commit_log_offset: offset,
                        commit_or_rollback: tx,
                        from_transaction_check: None,
                        msg_id: "m".into(),
                        transaction_id: None,
                        topic: None,
                        broker_name: None,
                    },
                ))
                .await;
            assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR);
            assert_eq!(remark(&r), "Find prepared transaction message failed");
        }
    }
    assert_eq!(end_index(&h), before);
    h.shutdown().await;
}

/// A stored message carrying reconsumeTimes near i32::MAX (a client may send any) is sent
/// back without overflowing: to the DLQ at the limit, through the schedule topic below it.
#[tokio::test]
async fn send_back_of_a_huge_reconsume_count_does_not_overflow() {
    let h = started().await;
    for reconsume in [i32::MAX, i32::MAX - 1] {
        let mut hdr = send_header("THuge", 0, "");
        hdr.reconsume_times = Some(reconsume);
        let req = RemotingCommand::request(RequestCode::SEND_MESSAGE_V2, &hdr)
            .with_body(Bytes::from_static(b"x"));
        let r = h.call(req).await;
        assert_eq!(code(&r), ResponseCode::SUCCESS);
        let (_, phys) =
            broker::message::decode_offset_msg_id(r.ext_field("msgId").unwrap()).unwrap();
        let r = h.call(send_back("CG", phys, 0, Some(i32::MAX))).await;
        assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    }
    h.shutdown().await;
}

/// A group's retryQueueNums (any number in UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's body) is
/// bounded by maxTopicQueueNums where a retry topic is created; zero or less means Java's
/// "no retry": send-backs are answered and dropped, no retry topic is made.
#[tokio::test]
async fn retry_queue_counts_are_bounded() {
    let h = started_with(|c| c.max_topic_queue_nums = 16).await;
    let put_group = |name: &str, retry_queue_nums: i32| {
        let mut g = broker::store::SubscriptionGroupConfig::new(name);
        g.retry_queue_nums = retry_queue_nums;
        RemotingCommand::request_empty(RequestCode::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
            .with_body(serde_json::to_vec(&g).unwrap())
    };
    let r = h.call(put_group("GBig", 100_000)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    let hb = |group: &str| {
        RemotingCommand::request_empty(RequestCode::HEART_BEAT).with_body(format!(
            r#"{{"clientID":"c1","consumerDataSet":[{{"consumeFromWhere":4,"consumeType":1,"groupName":"{group}","messageModel":1,"subscriptionDataSet":[],"unitMode":"0"}}],"producerDataSet":[]}}"#
        ))
    };
    assert_eq!(code(&h.call(hb("GBig")).await), ResponseCode::SUCCESS);
    assert_eq!(
        h.ctx().topics.get("%RETRY%GBig").unwrap().write_queue_nums,
        16
    );
    let r = h.call(put_group("GNone", 0)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{}", remark(&r));
    assert_eq!(code(&h.call(hb("GNone")).await), ResponseCode::SUCCESS);
    assert!(!h.ctx().topics.contains("%RETRY%GNone"));
    let r = h.call(send_v2("TRq", 0, b"x", "")).await;
    let (_, phys) = broker::message::decode_offset_msg_id(r.ext_field("msgId").unwrap()).unwrap();
    let before = end_index(&h);
    let r = h.call(send_back("GNone", phys, 0, None)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(
        end_index(&h),
        before,
        "a send-back of a no-retry group was stored"
    );
    assert!(!h.ctx().topics.contains("%RETRY%GNone"));
    h.shutdown().await;
}
