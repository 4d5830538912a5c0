//! Goal: every broker processor answers as a Java broker would (codes, headers, bodies), over
//! real loopback connections. Method: a broker over an in-memory single-member log
//! (`MemLog`), driven by hand-built requests; effects checked through other requests.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use broker::message::offset_msg_id;
use broker::message::properties::keys;
use broker::store::commit_log::LedgerRole;
use broker::store::mem_log::MemLog;
use common::*;
use remoting::custom_headers::*;
use remoting::{
    processor_fn, ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode,
};

fn code(r: &RemotingCommand) -> ResponseCode {
    r.response_code()
}

#[tokio::test]
async fn send_then_pull_returns_stored_records_with_offsets_and_ids() {
    let h = Harness::start().await;
    h.wait_master().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        let p = props(&[(keys::TAGS, "TagA"), (keys::KEYS, &format!("k{i}"))]);
        let r = h
            .call(send_v2("TopicA", 1, format!("body{i}").as_bytes(), &p))
            .await;
        assert_eq!(code(&r), ResponseCode::SUCCESS, "{:?}", r.remark());
        assert_eq!(r.ext_field("queueId"), Some("1"));
        assert_eq!(r.ext_field("queueOffset"), Some(i.to_string().as_str()));
        assert_eq!(r.ext_field("MSG_REGION"), Some("DefaultRegion"));
        assert!(r.ext_field("TRACE_ON").is_some());
        ids.push(r.ext_field("msgId").unwrap().to_owned());
    }
    let r = h.call(pull("CG", "TopicA", 1, 0, 0)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let hdr: PullMessageResponseHeader = r.decode_header().unwrap();
    assert_eq!(
        (hdr.next_begin_offset, hdr.min_offset, hdr.max_offset),
        (3, 0, 3)
    );
    assert_eq!(hdr.suggest_which_broker_id, 0);
    let recs = records(&r);
    assert_eq!(recs.len(), 3);
    for (i, m) in recs.iter().enumerate() {
        assert_eq!(m.queue_offset, i as i64);
        assert_eq!(m.queue_id, 1);
        assert_eq!(&m.body[..], format!("body{i}").as_bytes());
        assert_eq!(offset_msg_id(m.store_host, m.physical_offset), ids[i]);
        assert_eq!(m.property(keys::CLUSTER), Some(&b"TestCluster"[..]));
        assert!(m.property(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX).is_some());
    }
    // Entry 0 is the auto-created topic's metadata record (broker/METADATA_LOG.md); the
    // first message is entry 1: its physical offset is that entry's position + 48.
    let entry1 = h.ctx().store.log().committed_entry(1).unwrap().unwrap();
    assert_eq!(recs[0].physical_offset, entry1.pos + 48);
    // At the end: PULL_NOT_FOUND with nextBeginOffset unchanged.
    let r = h.call(pull("CG", "TopicA", 1, 3, 0)).await;
    assert_eq!(code(&r), ResponseCode::PULL_NOT_FOUND);
    // Beyond the end: offset moved back to max.
    let r = h.call(pull("CG", "TopicA", 1, 9, 0)).await;
    assert_eq!(code(&r), ResponseCode::PULL_OFFSET_MOVED);
    let hdr: PullMessageResponseHeader = r.decode_header().unwrap();
    assert_eq!(hdr.next_begin_offset, 3);
    h.shutdown().await;
}

#[tokio::test]
async fn a_client_cannot_write_the_schedule_delivery_marker() {
    use broker::store::delay_offsets::SCHEDULE_ORIGIN_PROPERTY;
    let h = Harness::start().await;
    h.wait_master().await;
    // Canonical (fast path) and non-canonical (general path) property strings.
    let canonical = props(&[(keys::TAGS, "TagA"), (SCHEDULE_ORIGIN_PROPERTY, "3:0:48")]);
    let loose = format!(
        "{SCHEDULE_ORIGIN_PROPERTY}\u{1}3:0:48\u{2}{}\u{1}TagA",
        keys::TAGS
    );
    for p in [&canonical, &loose] {
        let r = h.call(send_v2("TopicForge", 0, b"x", p)).await;
        assert_eq!(code(&r), ResponseCode::SUCCESS, "{:?}", r.remark());
    }
    let r = h.call(pull("CG", "TopicForge", 0, 0, 0)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let recs = records(&r);
    assert_eq!(recs.len(), 2);
    for m in &recs {
        assert_eq!(m.property(SCHEDULE_ORIGIN_PROPERTY), None);
        assert_eq!(m.property(keys::TAGS), Some(&b"TagA"[..]));
    }
    h.shutdown().await;
}

#[tokio::test]
async fn batches_by_320_and_by_310_with_the_batch_flag() {
    let h = Harness::start().await;
    h.wait_master().await;
    let msgs: Vec<(&[u8], String)> = vec![
        (b"a", props(&[(keys::TAGS, "T1")])),
        (b"bb", props(&[(keys::KEYS, "key-b")])),
        (b"ccc", String::new()),
    ];
    let r = h
        .call(send_batch(
            RequestCode::SEND_BATCH_MESSAGE,
            "TopicB",
            0,
            &msgs,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{:?}", r.remark());
    assert_eq!(r.ext_field("msgId").unwrap().split(',').count(), 3);
    assert_eq!(r.ext_field("queueOffset"), Some("0"));
    let r = h
        .call(send_batch(RequestCode::SEND_MESSAGE_V2, "TopicB", 0, &msgs))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{:?}", r.remark());
    assert_eq!(r.ext_field("queueOffset"), Some("3"));
    let recs = records(&h.call(pull("CG", "TopicB", 0, 0, 0)).await);
    let bodies: Vec<&[u8]> = recs.iter().map(|m| &m.body[..]).collect();
    assert_eq!(bodies, vec![&b"a"[..], b"bb", b"ccc", b"a", b"bb", b"ccc"]);
    assert_eq!(
        recs.iter().map(|m| m.queue_offset).collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>()
    );
    h.shutdown().await;
}

#[tokio::test]
async fn long_poll_is_answered_when_a_message_arrives() {
    let h = Harness::start().await;
    h.wait_master().await;
    let r = h.call(send_v2("TopicL", 0, b"first", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let client = h.client.clone();
    let addr = h.addr;
    let held = tokio::spawn(async move {
        let t0 = std::time::Instant::now();
        let r = client
            .invoke(addr, pull("CG", "TopicL", 0, 1, 20_000), TIMEOUT * 3)
            .await
            .unwrap();
        (r, t0.elapsed())
    });
    // Let the pull reach the broker and be held (the answer cannot come before the send).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!held.is_finished());
    let r = h.call(send_v2("TopicL", 0, b"second", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let (r, waited) = held.await.unwrap();
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert!(waited < Duration::from_secs(10));
    assert_eq!(&records(&r)[0].body[..], b"second");
    // A hold with nothing arriving times out with PULL_NOT_FOUND.
    let t0 = std::time::Instant::now();
    let r = h.call(pull("CG", "TopicL", 0, 2, 300)).await;
    assert_eq!(code(&r), ResponseCode::PULL_NOT_FOUND);
    assert!(t0.elapsed() >= Duration::from_millis(300));
    h.shutdown().await;
}

#[tokio::test]
async fn bad_sends_get_the_java_codes_and_store_nothing() {
    let h = Harness::start_with(MemLog::new_leader(), |c| c.auto_create_topic_enable = false).await;
    h.wait_master().await;
    // Oversized body (maxMessageSize=65536).
    let big = vec![b'x'; 65_537];
    let create = CreateTopicRequestHeader {
        topic: "Known".into(),
        default_topic: "TBW102".into(),
        read_queue_nums: 2,
        write_queue_nums: 2,
        perm: 6,
        topic_filter_type: "SINGLE_TAG".into(),
        order: false,
        ..Default::default()
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::UPDATE_AND_CREATE_TOPIC,
            &create,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let r = h.call(send_v2("Known", 0, &big, "")).await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    // Properties longer than 32767 bytes.
    let long = props(&[("K", &"v".repeat(40_000))]);
    let r = h.call(send_v2("Known", 0, b"x", &long)).await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    // Missing required header field.
    let mut req = send_v2("Known", 0, b"x", "");
    req.ext_fields_mut().remove("b");
    let r = h.call(req).await;
    assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR);
    // Unknown topic, auto-create off.
    let r = h.call(send_v2("Unknown", 0, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::TOPIC_NOT_EXIST);
    // System topic.
    let r = h.call(send_v2("SCHEDULE_TOPIC_XXXX", 0, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::NO_PERMISSION);
    // Illegal topic name and queue id out of range.
    let r = h.call(send_v2("bad topic!", 0, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER);
    let r = h.call(send_v2("Known", 7, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::INVALID_PARAMETER);
    // Malformed batch body.
    let mut req = send_v2("Known", 0, b"\x00\x00\x00\x05xx", "");
    req.ext_fields_mut().insert("m".into(), "true".into());
    let r = h.call(req).await;
    assert_eq!(code(&r), ResponseCode::MESSAGE_ILLEGAL);
    // Nothing reached the log but the topic's creation (entry 0, broker/METADATA_LOG.md).
    assert_eq!(h.ctx().store.water_marks().ledger_end_index, 0);
    // The broker still serves.
    let r = h.call(send_v2("Known", 0, b"ok", "")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    h.shutdown().await;
}

#[tokio::test]
async fn slave_refuses_sends_but_serves_pulls_and_unassigned_is_busy() {
    let log = MemLog::new_leader();
    let h = Harness::start_with(log.clone(), |_| {}).await;
    h.wait_master().await;
    assert_eq!(
        code(&h.call(send_v2("TopicS", 0, b"x", "")).await),
        ResponseCode::SUCCESS
    );
    log.set_role(LedgerRole::Follower, 2);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while h.ctx().role.broker_id() != 1 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = h.call(send_v2("TopicS", 0, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::SERVICE_NOT_AVAILABLE);
    let r = h.call(pull("CG", "TopicS", 0, 0, 0)).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(records(&r).len(), 1);
    h.shutdown().await;

    // A broker whose log never had a role: the ledger refuses, the client sees SYSTEM_BUSY.
    let h = Harness::start_with(MemLog::new_follower(), |_| {}).await;
    let r = h.call(send_v2("TopicS", 0, b"x", "")).await;
    assert_eq!(code(&r), ResponseCode::SYSTEM_BUSY);
    assert_eq!(h.ctx().role.broker_id(), -1);
    h.shutdown().await;
}

#[tokio::test]
async fn consumer_and_queue_offsets() {
    let h = Harness::start().await;
    h.wait_master().await;
    let q = QueryConsumerOffsetRequestHeader {
        consumer_group: "CG".into(),
        topic: "TopicO".into(),
        queue_id: 0,
        ..Default::default()
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::QUERY_CONSUMER_OFFSET,
            &q,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::QUERY_NOT_FOUND);
    for i in 0..5 {
        let r = h
            .call(send_v2("TopicO", 0, format!("m{i}").as_bytes(), ""))
            .await;
        assert_eq!(code(&r), ResponseCode::SUCCESS);
    }
    // Data present and min offset 0: Java answers 0.
    let r = h
        .call(RemotingCommand::request(
            RequestCode::QUERY_CONSUMER_OFFSET,
            &q,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let u = UpdateConsumerOffsetRequestHeader {
        consumer_group: "CG".into(),
        topic: "TopicO".into(),
        queue_id: 0,
        commit_offset: 4,
        broker_name: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::UPDATE_CONSUMER_OFFSET,
            &u,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let r = h
        .call(RemotingCommand::request(
            RequestCode::QUERY_CONSUMER_OFFSET,
            &q,
        ))
        .await;
    let o: QueryConsumerOffsetResponseHeader = r.decode_header().unwrap();
    assert_eq!(o.offset, 4);
    let mx = GetMaxOffsetRequestHeader {
        topic: "TopicO".into(),
        queue_id: 0,
        ..Default::default()
    };
    let r = h
        .call(RemotingCommand::request(RequestCode::GET_MAX_OFFSET, &mx))
        .await;
    assert_eq!(r.decode_header::<OffsetResponseHeader>().unwrap().offset, 5);
    let mn = GetMinOffsetRequestHeader {
        topic: "TopicO".into(),
        queue_id: 0,
        broker_name: None,
    };
    let r = h
        .call(RemotingCommand::request(RequestCode::GET_MIN_OFFSET, &mn))
        .await;
    assert_eq!(r.decode_header::<OffsetResponseHeader>().unwrap().offset, 0);
    let e = GetEarliestMsgStoretimeRequestHeader {
        topic: "TopicO".into(),
        queue_id: 0,
        broker_name: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::GET_EARLIEST_MSG_STORETIME,
            &e,
        ))
        .await;
    let ts = r
        .decode_header::<GetEarliestMsgStoretimeResponseHeader>()
        .unwrap()
        .timestamp;
    assert!(ts > 1_600_000_000_000);
    let s = SearchOffsetRequestHeader {
        topic: "TopicO".into(),
        queue_id: 0,
        timestamp: ts - 1000,
        boundary_type: None,
        broker_name: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::SEARCH_OFFSET_BY_TIMESTAMP,
            &s,
        ))
        .await;
    assert_eq!(r.decode_header::<OffsetResponseHeader>().unwrap().offset, 0);
    // GET_ALL_CONSUMER_OFFSET carries the committed offset.
    let r = h
        .call(RemotingCommand::request_empty(
            RequestCode::GET_ALL_CONSUMER_OFFSET,
        ))
        .await;
    assert!(String::from_utf8_lossy(r.body()).contains("TopicO@CG"));
    h.shutdown().await;
}

#[tokio::test]
async fn offsets_and_queues_survive_a_restart() {
    let mut h = Harness::start().await;
    h.wait_master().await;
    for i in 0..4 {
        assert_eq!(
            code(
                &h.call(send_v2("TopicR", 0, format!("{i}").as_bytes(), ""))
                    .await
            ),
            ResponseCode::SUCCESS
        );
    }
    let u = UpdateConsumerOffsetRequestHeader {
        consumer_group: "CG".into(),
        topic: "TopicR".into(),
        queue_id: 0,
        commit_offset: 2,
        broker_name: None,
    };
    h.call(RemotingCommand::request(
        RequestCode::UPDATE_CONSUMER_OFFSET,
        &u,
    ))
    .await;
    h.restart().await;
    h.wait_master().await;
    let q = QueryConsumerOffsetRequestHeader {
        consumer_group: "CG".into(),
        topic: "TopicR".into(),
        queue_id: 0,
        ..Default::default()
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::QUERY_CONSUMER_OFFSET,
            &q,
        ))
        .await;
    assert_eq!(
        r.decode_header::<QueryConsumerOffsetResponseHeader>()
            .unwrap()
            .offset,
        2
    );
    // Queue offsets continue after the restart.
    let r = h.call(send_v2("TopicR", 0, b"4", "")).await;
    assert_eq!(r.ext_field("queueOffset"), Some("4"));
    let recs = records(&h.call(pull("CG", "TopicR", 0, 2, 0)).await);
    assert_eq!(
        recs.iter().map(|m| m.queue_offset).collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    h.shutdown().await;
}

#[tokio::test]
async fn heartbeat_membership_notification_and_consumer_list() {
    let h = Harness::start().await;
    h.wait_master().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(8);
    let notified = RemotingClient::with_processor(
        ClientConfig::default(),
        processor_fn(move |_c, req: RemotingCommand| {
            let tx = tx.clone();
            async move {
                if req.code() == RequestCode::NOTIFY_CONSUMER_IDS_CHANGED.0 {
                    let _ = tx
                        .send(req.ext_field("consumerGroup").unwrap_or("").to_owned())
                        .await;
                }
                None
            }
        }),
        None,
    );
    let hb = |id: &str| {
        RemotingCommand::request_empty(RequestCode::HEART_BEAT).with_body(format!(
            r#"{{"clientID":"{id}","consumerDataSet":[{{"consumeFromWhere":4,"consumeType":1,"groupName":"G1","messageModel":1,"subscriptionDataSet":[{{"subString":"*","subVersion":"1","topic":"TopicH"}}],"unitMode":"0"}}],"producerDataSet":[{{"groupName":"P1"}}]}}"#
        ))
    };
    let r = notified.invoke(h.addr, hb("c1"), TIMEOUT).await.unwrap();
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let r = h.call(hb("c2")).await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let g = tokio::time::timeout(TIMEOUT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g, "G1");
    let req = RemotingCommand::request(
        RequestCode::GET_CONSUMER_LIST_BY_GROUP,
        &GetConsumerListByGroupRequestHeader {
            consumer_group: "G1".into(),
        },
    );
    let r = h.call(req.clone()).await;
    let body = String::from_utf8_lossy(r.body()).to_string();
    assert!(body.contains("c1") && body.contains("c2"), "{body}");
    // Retry topic was created for the group.
    assert!(h.ctx().topics.get("%RETRY%G1").is_some());
    // Malformed heartbeat: an error for that request only.
    for bad in ["{", "[1,2]", "{\"consumerDataSet\":[]}", "\u{0}"] {
        let r = h
            .call(RemotingCommand::request_empty(RequestCode::HEART_BEAT).with_body(bad))
            .await;
        assert_eq!(code(&r), ResponseCode::SYSTEM_ERROR);
    }
    // Unregister c2 -> c1 is notified again; then the list has only c1.
    let u = UnregisterClientRequestHeader {
        client_id: "c2".into(),
        producer_group: None,
        consumer_group: Some("G1".into()),
    };
    assert_eq!(
        code(
            &h.call(RemotingCommand::request(RequestCode::UNREGISTER_CLIENT, &u))
                .await
        ),
        ResponseCode::SUCCESS
    );
    assert_eq!(
        tokio::time::timeout(TIMEOUT, rx.recv())
            .await
            .unwrap()
            .unwrap(),
        "G1"
    );
    let body = String::from_utf8_lossy(h.call(req).await.body()).to_string();
    assert!(body.contains("c1") && !body.contains("c2"), "{body}");
    notified.shutdown().await;
    h.shutdown().await;
}

#[tokio::test]
async fn lock_and_unlock_batch_mq() {
    let h = Harness::start().await;
    let body = |client: &str| {
        format!(
            r#"{{"clientId":"{client}","consumerGroup":"G","mqSet":[{{"brokerName":"b0","queueId":0,"topic":"T"}},{{"brokerName":"b0","queueId":1,"topic":"T"}}],"onlyThisBroker":false}}"#
        )
    };
    let r = h
        .call(RemotingCommand::request_empty(RequestCode::LOCK_BATCH_MQ).with_body(body("c1")))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(v["lockOKMQSet"].as_array().unwrap().len(), 2);
    let r = h
        .call(RemotingCommand::request_empty(RequestCode::LOCK_BATCH_MQ).with_body(body("c2")))
        .await;
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(v["lockOKMQSet"].as_array().unwrap().len(), 0);
    let r = h
        .call(RemotingCommand::request_empty(RequestCode::UNLOCK_BATCH_MQ).with_body(body("c1")))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let r = h
        .call(RemotingCommand::request_empty(RequestCode::LOCK_BATCH_MQ).with_body(body("c2")))
        .await;
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(v["lockOKMQSet"].as_array().unwrap().len(), 2);
    h.shutdown().await;
}

#[tokio::test]
async fn send_back_goes_to_schedule_then_dlq() {
    let h = Harness::start().await;
    h.wait_master().await;
    let r = h
        .call(send_v2(
            "TopicX",
            0,
            b"payload",
            &props(&[(keys::TAGS, "A")]),
        ))
        .await;
    let (_, phys) = broker::message::decode_offset_msg_id(r.ext_field("msgId").unwrap()).unwrap();
    let back = |delay: i32, max: i32| ConsumerSendMsgBackRequestHeader {
        offset: phys,
        group: "CG".into(),
        delay_level: delay,
        origin_msg_id: Some("ORIG".into()),
        origin_topic: Some("TopicX".into()),
        unit_mode: Some(false),
        max_reconsume_times: Some(max),
        broker_name: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::CONSUMER_SEND_MSG_BACK,
            &back(0, 16),
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS, "{:?}", r.remark());
    // Level 3 + reconsumeTimes(0) = 3 -> SCHEDULE_TOPIC_XXXX queue 2.
    let store = &h.ctx().store;
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while store.max_offset("SCHEDULE_TOPIC_XXXX", 2) < 1 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let res = store.get_messages("SCHEDULE_TOPIC_XXXX", 2, 0, 1, 1 << 20, true, &|_| true);
    let m = broker::message::decode_records(res.body.freeze(), broker::message::CrcCheck::Verify)
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(m.property(keys::REAL_TOPIC), Some(&b"%RETRY%CG"[..]));
    assert_eq!(m.property(keys::RETRY_TOPIC), Some(&b"TopicX"[..]));
    assert_eq!(m.property(keys::DELAY_TIME_LEVEL), Some(&b"3"[..]));
    assert_eq!(m.reconsume_times, 1);
    // Max reconsume 0 -> dead letter queue.
    let r = h
        .call(RemotingCommand::request(
            RequestCode::CONSUMER_SEND_MSG_BACK,
            &back(0, 0),
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while store.max_offset("%DLQ%CG", 0) < 1 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    h.shutdown().await;
}

#[tokio::test]
async fn view_by_id_query_by_key_admin_and_unsupported_codes() {
    let h = Harness::start().await;
    h.wait_master().await;
    let r = h
        .call(send_v2(
            "TopicQ",
            0,
            b"hello",
            &props(&[(keys::KEYS, "order-1 order-2")]),
        ))
        .await;
    let (_, phys) = broker::message::decode_offset_msg_id(r.ext_field("msgId").unwrap()).unwrap();
    let v = ViewMessageRequestHeader {
        offset: phys,
        topic: None,
    };
    let r = h
        .call(RemotingCommand::request(
            RequestCode::VIEW_MESSAGE_BY_ID,
            &v,
        ))
        .await;
    assert_eq!(code(&r), ResponseCode::SUCCESS);
    assert_eq!(&records(&r)[0].body[..], b"hello");
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let q = QueryMessageRequestHeader {
            topic: "TopicQ".into(),
            key: "order-2".into(),
            max_num: 32,
            begin_timestamp: 0,
            end_timestamp: i64::MAX / 2,
            unique_key_query: None,
        };
        let r = h
            .call(RemotingCommand::request(RequestCode::QUERY_MESSAGE, &q))
            .await;
        if code(&r) == ResponseCode::SUCCESS {
            assert_eq!(&records(&r)[0].body[..], b"hello");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "key never indexed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for c in [
        RequestCode::GET_ALL_TOPIC_CONFIG,
        RequestCode::GET_ALL_DELAY_OFFSET,
        RequestCode::GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        RequestCode::GET_BROKER_RUNTIME_INFO,
        RequestCode::GET_BROKER_CONFIG,
    ] {
        let r = h.call(RemotingCommand::request_empty(c)).await;
        assert_eq!(code(&r), ResponseCode::SUCCESS, "{c:?}");
        assert!(!r.body().is_empty(), "{c:?}");
    }
    let r = h
        .call(RemotingCommand::request_empty(
            RequestCode::GET_ALL_TOPIC_CONFIG,
        ))
        .await;
    let v: serde_json::Value = serde_json::from_slice(r.body()).unwrap();
    assert!(v["topicConfigTable"]["TopicQ"].is_object());
    // Unknown codes keep their number and are not supported.
    let r = h
        .call(RemotingCommand::request_empty(RequestCode(9999)))
        .await;
    assert_eq!(code(&r), ResponseCode::REQUEST_CODE_NOT_SUPPORTED);
    h.shutdown().await;
}

#[tokio::test]
async fn concurrent_senders_get_dense_per_queue_offsets() {
    let h = Arc::new(Harness::start().await);
    h.wait_master().await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let h = Arc::clone(&h);
        tasks.push(tokio::spawn(async move {
            let mut offs = Vec::new();
            for i in 0..50 {
                let r = h
                    .call(send_v2("TopicC", t % 2, format!("{t}-{i}").as_bytes(), ""))
                    .await;
                assert_eq!(r.response_code(), ResponseCode::SUCCESS);
                offs.push((
                    t % 2,
                    r.ext_field("queueOffset").unwrap().parse::<i64>().unwrap(),
                ));
            }
            offs
        }));
    }
    let mut seen: HashSet<(i32, i64)> = HashSet::new();
    for t in tasks {
        for o in t.await.unwrap() {
            assert!(seen.insert(o), "duplicate offset {o:?}");
        }
    }
    for q in 0..2 {
        let mut got = Vec::new();
        let mut off = 0;
        while off < 200 {
            let r = h.call(pull("CG", "TopicC", q, off, 0)).await;
            let recs = records(&r);
            assert!(!recs.is_empty());
            for m in &recs {
                assert_eq!(m.queue_offset, off);
                off += 1;
            }
            got.extend(recs);
        }
        assert_eq!(got.len(), 200);
    }
}
